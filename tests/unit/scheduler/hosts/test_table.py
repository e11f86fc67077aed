"""HostTable: the columns mirror the HostStates through every kind of change, and a list of
hosts maps to rows only when every host is in the same table."""

from __future__ import annotations

import datetime
import math
import pathlib
import random
import re
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from db.queries import ComputeNodeRow, ServiceRow
from scheduler.hosts.state import HostState
from scheduler.hosts.table import (
    SERVICE_DISABLED,
    SERVICE_FORCED_DOWN,
    SERVICE_NONE,
    SERVICE_ODD,
    SERVICE_UP_IF_RECENT,
    HostTable,
    _number,
    heartbeat_bounds,
    heartbeat_window,
    microseconds,
    read_service,
    service_is_up,
    service_state,
    services_up,
    table_of,
)
from scheduler.objects import Flavor, RequestSpec
from tests.unit.filters.fakes import make_aggregate, make_host, make_service
from tests.unit.scheduler.hosts.env import assert_table_mirrors

NOW = datetime.datetime(2026, 11, 24, 12, 0, 0, 123456)


def _ram(host):
    return host.free_ram_mb


def _vcpus(host):
    return host.vcpus_total * (host.cpu_allocation_ratio or 4.0) - host.vcpus_used


def _arch(host):
    return (host.stats or {}).get("cpu_arch", "absent")


def _row(uuid, host, **over) -> ComputeNodeRow:
    values = {
        "uuid": uuid,
        "host": host,
        "hypervisor_hostname": host,
        "memory_mb": 4096,
        "free_ram_mb": 2048,
        "free_disk_gb": 100,
        "disk_available_least": None,
        "local_gb": 200,
        "local_gb_used": 100,
        "vcpus": 8,
        "vcpus_used": 2,
        "numa_topology": None,
        "pci_stats": None,
        "host_ip": "10.0.0.1",
        "hypervisor_type": "QEMU",
        "hypervisor_version": 8002000,
        "cpu_info": "{}",
        "supported_instances": '[["x86_64", "qemu", "hvm"]]',
        "stats": '{"cpu_arch": "x86_64"}',
        "metrics": "[]",
        "cpu_allocation_ratio": 16.0,
        "ram_allocation_ratio": 1.5,
        "disk_allocation_ratio": 1.0,
        "updated_at": NOW,
        "created_at": NOW,
        "deleted": 0,
    }
    values.update(over)
    return ComputeNodeRow(**values)


def _heartbeat(host: str, last_seen_up: datetime.datetime, report_count: int = 1) -> ServiceRow:
    """A service row that differs from ``make_service(host=host)`` only in its heartbeat."""
    return ServiceRow(
        id=1,
        uuid=None,
        host=host,
        binary="nova-compute",
        topic="compute",
        report_count=report_count,
        disabled=False,
        disabled_reason=None,
        last_seen_up=last_seen_up,
        forced_down=False,
        version=74,
        created_at=NOW,
        updated_at=last_seen_up,
        deleted_at=None,
        deleted=0,
    )


def test_service_state_decides_as_compute_filter_does():
    assert service_state({}) == (SERVICE_NONE, 0)
    assert service_state(None) == (SERVICE_NONE, 0)
    assert service_state(make_service(disabled=True, forced_down=True))[0] == SERVICE_DISABLED
    assert service_state(make_service(forced_down=True))[0] == SERVICE_FORCED_DOWN
    assert service_state(make_service(last_seen_up=NOW)) == (
        SERVICE_UP_IF_RECENT,
        microseconds(NOW),
    )
    # no heartbeat: created_at stands in, as in nova
    assert service_state(make_service(last_seen_up=None, created_at=NOW))[1] == microseconds(NOW)
    assert service_state(make_service(last_seen_up=None, created_at=None))[0] == SERVICE_NONE
    aware = NOW.replace(tzinfo=datetime.UTC)
    assert service_state(make_service(last_seen_up=aware))[0] == SERVICE_ODD
    assert service_state(make_service(last_seen_up=NOW.isoformat()))[0] == SERVICE_ODD
    assert service_state("not a dict")[0] == SERVICE_ODD


def test_numbers_are_exact_or_nan():
    assert _number(3) == 3.0
    assert _number(-0.5) == -0.5
    assert math.isnan(_number(2**53))  # not exactly representable as a double
    assert math.isnan(_number(float("inf")))
    assert math.isnan(_number("12"))
    assert math.isnan(_number(None))
    assert math.isnan(_number(True))


def test_rows_of_needs_every_host_in_the_same_table():
    one, other = HostTable(capacity=2), HostTable(capacity=2)
    a, b, c = make_host("a"), make_host("b"), make_host("c")
    one.add(a)
    one.add(b)
    other.add(c)
    assert one.rows_of([b, a]).tolist() == [1, 0]
    assert one.rows_of([a, c]) is None  # c is in another table
    assert one.rows_of([a, make_host("loose")]) is None  # not in any table
    assert table_of([make_host("loose"), a]) is None
    assert table_of([]) is None
    located = table_of([b, a])
    assert located[0] is one and located[1].tolist() == [1, 0]
    assert one.hosts_at(np.array([1, 0])) == [b, a]


@pytest.mark.parametrize("seed", range(6))
def test_columns_follow_every_change_to_the_hosts(seed):
    rng = random.Random(seed)
    table = HostTable(capacity=2)  # grows several times on the way
    table.numeric("ram", _ram)
    aggs = [make_aggregate(i, ram_weight_multiplier=str(i)) for i in range(3)]
    shared = [[], [aggs[0]], [aggs[1], aggs[2]]]
    hosts: list[HostState] = []
    kinds = ["add", "add", "row", "consume", "service", "heartbeat", "aggregates", "register"]
    for step in range(60):
        op = rng.choice(kinds)
        if op == "add" or not hosts:
            hs = HostState(f"h{step}", f"h{step}", rng.choice(["c1", "c2"]))
            hs.update_from_row(_row(f"u{step}", hs.host))
            hs.set_service(make_service(host=hs.host, last_seen_up=NOW))
            hs.set_aggregates(rng.choice(shared))
            table.add(hs)
            hosts.append(hs)
        elif op == "row":
            hs = rng.choice(hosts)
            hs.updated = None  # take the report whatever our consumption
            hs.update_from_row(
                _row(
                    hs.uuid,
                    hs.host,
                    free_ram_mb=rng.choice([0, 512, 2**60, -4]),
                    vcpus_used=rng.randint(0, 40),
                    cpu_allocation_ratio=rng.choice([None, 0.0, 2.0]),
                    stats=rng.choice(['{"cpu_arch": "aarch64"}', "{}", '{"cpu_arch": null}']),
                    supported_instances=rng.choice(["[]", '[["aarch64", "kvm", "hvm"]]']),
                )
            )
        elif op == "consume":
            spec = RequestSpec(flavor=Flavor(memory_mb=rng.randint(1, 4096), vcpus=2, root_gb=1))
            rng.choice(hosts).consume_from_request(spec)
        elif op == "service":
            hs = rng.choice(hosts)
            service = rng.choice(
                [
                    make_service(host=hs.host, disabled=True),
                    make_service(host=hs.host, forced_down=True),
                    make_service(host=hs.host, last_seen_up=NOW - datetime.timedelta(hours=1)),
                    {},
                ]
            )
            if rng.random() < 0.5:
                hs.update(service=service)
            else:
                hs.set_service(service)
        elif op == "heartbeat":  # in place, as the host manager applies one
            hs = rng.choice(hosts)
            if hs.service:
                beat = NOW - datetime.timedelta(seconds=rng.randint(0, 600))
                HostState.apply_heartbeat(
                    hs.service, _heartbeat(hs.host, beat), table, hs.cell_uuid
                )
        elif op == "aggregates":
            if rng.random() < 0.5:  # every host, as after a re-read: new list objects
                HostState.set_aggregates_of(hosts, lambda _: list(rng.choice(shared)), table)
            else:
                rng.choice(hosts).set_aggregates(rng.choice(shared))
        else:  # a column registered late is computed for every existing row
            table.numeric("vcpus", _vcpus)
            table.codes("arch", _arch, lambda v: (type(v), v))
        assert_table_mirrors(table, hosts)


def test_a_service_shared_by_the_nodes_of_one_host_updates_them_all():
    table = HostTable()
    service = make_service(host="ironic", last_seen_up=NOW)
    nodes = [make_host("ironic", f"node{i}", service=service) for i in range(3)]
    for node in nodes:
        node.cell_uuid = "c1"
        table.add(node)
    service["disabled"] = True
    table.service_changed("c1", "ironic", service)
    state, _ = table.services(table.rows_of(nodes))
    assert state.tolist() == [SERVICE_DISABLED] * 3


def test_a_released_host_is_let_go_only_after_the_delay():
    table = HostTable()
    a, b = make_host("a"), make_host("b")
    table.add(a)
    table.add(b)
    table.release(a)
    assert table.collect() == 0  # a request may still hold its row
    assert table.hosts_at(table.rows_of([a, b])) == [a, b]
    assert table.collect(now=time.monotonic() + HostTable.RELEASE_DELAY + 1) == 1
    # out of the table: the per-host paths take it, and the table no longer keeps it
    assert (a._table, a._row) == (None, -1)
    assert table.rows_of([a, b]) is None
    assert table.objects[0] is None and table.hosts_at(table.rows_of([b])) == [b]
    assert table.collect(now=time.monotonic() + 10 * HostTable.RELEASE_DELAY) == 0


def test_a_code_column_of_churning_values_is_renumbered_and_stays_small():
    table = HostTable(capacity=4)
    hosts = [make_host(f"h{i}", stats={"boot": "0"}) for i in range(3)]
    for host in hosts:
        table.add(host)
    table.codes("boot", _boot, lambda v: v)
    reader_codes, reader_values = table.codes("boot", _boot, lambda v: v)
    for step in range(3000):  # a stat that never repeats (a counter, a timestamp)
        host = hosts[step % 3]
        host.stats = {"boot": str(step)}
        table.sync(host)
    codes, values = table.codes("boot", _boot, lambda v: v)
    assert len(values) <= 2 * table.size + 1024 + 1
    assert [values[c] for c in codes[table.rows_of(hosts)].tolist()] == ["2997", "2998", "2999"]
    assert_table_mirrors(table, hosts)
    # a reader's values never change under it (a new list each time); codes written since
    # may point past them, which the filters check (and then ask the hosts)
    assert reader_values == ["0"]
    assert reader_codes.max() >= len(reader_values)


def _boot(host):
    return host.stats.get("boot")


# ------------------------------------------------------------ HostState's methods own the mirror


def _two_nodes_of_one_host(table: HostTable) -> list[HostState]:
    """Two nodes of one host (an ironic host): one service record, shared, as the host
    manager gives it."""
    service = make_service(host="ironic", last_seen_up=NOW)
    nodes = []
    for i in range(2):
        hs = HostState("ironic", f"node{i}", "c1")
        hs.update_from_row(_row(f"u{i}", "ironic", hypervisor_hostname=f"node{i}"))
        hs.set_service(service)
        hs.set_aggregates([])
        table.add(hs)
        nodes.append(hs)
    return nodes


def _change_usage(hosts, table):
    hosts[0].update_from_row(
        _row("u0", "ironic", free_ram_mb=7, stats='{"cpu_arch": "ppc64le"}', updated_at=NOW)
    )


def _change_usage_nova_style(hosts, table):
    hosts[1].update(compute={"uuid": "u1", "free_disk_gb": 3, "free_ram_mb": 9, "vcpus": 2})


def _change_service(hosts, table):
    for hs in hosts:
        hs.set_service(make_service(host="ironic", disabled=True))


def _change_service_nova_style(hosts, table):
    service = make_service(host="ironic", forced_down=True)
    for hs in hosts:  # one record per host, given to each of its nodes
        hs.update(service=service)


def _heartbeat_in_place(hosts, table):
    later = NOW + datetime.timedelta(seconds=10)
    HostState.apply_heartbeat(hosts[0].service, _heartbeat("ironic", later, 2), table, "c1")


def _change_aggregates(hosts, table):
    hosts[1].set_aggregates([make_aggregate(7)])


def _reread_aggregates(hosts, table):
    new = [make_aggregate(8)]
    HostState.set_aggregates_of(hosts, lambda name: new, table)


def _consume(hosts, table):
    hosts[0].consume_from_request(RequestSpec(flavor=Flavor(memory_mb=1024, vcpus=3, root_gb=1)))


@pytest.mark.parametrize(
    "change",
    [
        _change_usage,
        _change_usage_nova_style,
        _change_service,
        _change_service_nova_style,
        _heartbeat_in_place,
        _change_aggregates,
        _reread_aggregates,
        _consume,
    ],
)
def test_each_kind_of_host_state_change_keeps_the_table_in_step(change):
    table = HostTable()
    table.numeric("ram", _ram)
    table.numeric("vcpus", _vcpus)
    table.codes("arch", _arch, lambda v: (type(v), v))
    hosts = _two_nodes_of_one_host(table)
    before = (table.services(table.rows_of(hosts)), table.numeric("ram", _ram)[:2].tolist())
    change(hosts, table)
    assert_table_mirrors(table, hosts)
    after = (table.services(table.rows_of(hosts)), table.numeric("ram", _ram)[:2].tolist())
    if change not in (_change_aggregates, _reread_aggregates):
        assert repr(after) != repr(before)  # the change did reach a column


def test_a_heartbeat_reaches_every_node_of_the_host():
    table = HostTable()
    hosts = _two_nodes_of_one_host(table)
    later = NOW + datetime.timedelta(seconds=30)
    HostState.apply_heartbeat(hosts[1].service, _heartbeat("ironic", later, 5), table, "c1")
    assert [hs.service["last_seen_up"] for hs in hosts] == [later, later]
    assert hosts[0].service["report_count"] == 5
    _, last = table.services(table.rows_of(hosts))
    assert last.tolist() == [microseconds(later)] * 2
    assert_table_mirrors(table, hosts)


# Only HostState's methods (scheduler/hosts/state.py) write the mirror; the table's own
# ``add`` fills a new row.
_MIRROR_WRITES = re.compile(
    r"\.(sync|bind_service|service_changed|bind_aggregates|rebind_aggregates)\b"
)
# mirrored attributes of a HostState the host manager or the driver might assign directly
_MIRRORED_ASSIGNMENT = re.compile(r"\b(hs|host|host_state)\.(service|aggregates)\s*=[^=]")


def test_only_host_state_methods_write_the_host_table():
    root = pathlib.Path(__file__).resolve().parents[4]
    allowed = {root / "scheduler/hosts/state.py", root / "scheduler/hosts/table.py"}
    found = []
    for package in ("scheduler", "filters", "weighers", "db", "benchmarks"):
        for path in sorted((root / package).rglob("*.py")):
            if path in allowed:
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                if _MIRROR_WRITES.search(line) or _MIRRORED_ASSIGNMENT.search(line):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert found == []


# --------------------------------------------------------------------- is the service up


def _nova_is_up(service, now, down_time):
    """nova 34's ComputeFilter and db servicegroup driver, as nova writes them."""
    if not service or service.get("disabled") or service.get("forced_down"):
        return False
    last = service.get("last_seen_up") or service.get("created_at")
    if isinstance(last, str):
        last = datetime.datetime.fromisoformat(last.replace("Z", "+00:00"))
    if not isinstance(last, datetime.datetime):
        return False
    if last.tzinfo is not None:
        last = last.astimezone(datetime.UTC).replace(tzinfo=None)
    return abs((now - last).total_seconds()) <= down_time


def _timestamp(now, offset_us, kind):
    moment = now - datetime.timedelta(microseconds=offset_us)
    if kind == "aware":
        return moment.replace(tzinfo=datetime.UTC).astimezone(
            datetime.timezone(datetime.timedelta(hours=-5))
        )
    if kind == "text":
        return moment.isoformat()
    return moment


_DOWN_TIMES = st.one_of(
    st.integers(0, 300),
    st.floats(-2, 300),
    st.sampled_from([60, 2**32, 2**40, 10**12, 10**20, 0.5, 59.9999995, 60.0000004]),
    st.sampled_from([math.inf, -math.inf, math.nan]),
)


@st.composite
def _services(draw, now, down_time):
    if draw(st.booleans()) and draw(st.booleans()):
        return draw(st.sampled_from([{}, None]))
    edge = 60_000_000
    if isinstance(down_time, int | float) and math.isfinite(down_time) and down_time < 10**6:
        edge = max(0, math.floor(down_time * 1_000_000))
    offsets = st.one_of(
        st.sampled_from([edge - 1, edge, edge + 1, edge + 2]).flatmap(
            lambda d: st.sampled_from([d, -d])
        ),
        st.integers(-400_000_000, 400_000_000),
    )
    stamps = st.none() | st.builds(
        _timestamp, st.just(now), offsets, st.sampled_from(["naive", "naive", "aware", "text"])
    )
    return make_service(
        disabled=draw(st.sampled_from([False, False, True])),
        forced_down=draw(st.sampled_from([False, False, True])),
        last_seen_up=draw(stamps),
        created_at=draw(stamps),
    )


@settings(max_examples=300, deadline=None)
@given(st.data(), _DOWN_TIMES, st.integers(0, 999_999))
def test_service_up_is_one_rule_for_a_host_and_for_columns(data, down_time, micro):
    now = NOW.replace(microsecond=micro)
    services = data.draw(st.lists(_services(now, down_time), min_size=1, max_size=8))
    window = heartbeat_window(now, down_time)
    # one host: nova's rule exactly
    scalar = [service_is_up(s, now, down_time) for s in services]
    assert scalar == [_nova_is_up(s, now, down_time) for s in services]
    # the columns: the same answer wherever the table decides (not SERVICE_ODD)
    table = HostTable(capacity=2)
    hosts = [HostState(f"h{i}", f"h{i}") for i in range(len(services))]
    for hs, service in zip(hosts, services, strict=True):
        hs.set_service(service)
        table.add(hs)
    state, last = table.services(table.rows_of(hosts))
    columns = services_up(state, last, window).tolist()
    for i, service in enumerate(services):
        if state[i] != SERVICE_ODD:
            assert columns[i] == scalar[i], service
            assert columns[i] == bool(services_up(*service_state(service), window))


def test_the_per_host_window_is_the_column_window_as_datetimes():
    for down_time in (0, 1, 60, 59.5, 2**40, 10**30, -1, math.inf, math.nan):
        for now in (NOW, datetime.datetime.min, datetime.datetime.max):
            earliest, latest = heartbeat_bounds(now, down_time)
            low, high = heartbeat_window(now, down_time)
            for moment in (earliest, latest, now, datetime.datetime.min, datetime.datetime.max):
                us = microseconds(moment)
                assert (earliest <= moment <= latest) == (low <= us <= high), (down_time, now)
    # heartbeats that are text or carry a time zone: read for one host, left to it by columns
    aware = NOW.replace(tzinfo=datetime.UTC)
    assert read_service(make_service(last_seen_up=aware), True) == (SERVICE_UP_IF_RECENT, NOW)
    text = make_service(last_seen_up=NOW.isoformat() + "Z")
    assert read_service(text, True) == (SERVICE_UP_IF_RECENT, NOW)
    assert read_service(text) == (SERVICE_ODD, datetime.datetime(1970, 1, 1))
    assert read_service(make_service(last_seen_up="garbage"), True)[0] == SERVICE_NONE
