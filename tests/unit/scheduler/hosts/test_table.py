"""HostTable: the columns mirror the HostStates through every kind of change, and a list of
hosts maps to rows only when every host is in the same table."""

from __future__ import annotations

import datetime
import math
import random
import time

import numpy as np
import pytest

from scheduler.hosts.state import HostState
from scheduler.hosts.table import (
    SERVICE_DISABLED,
    SERVICE_FORCED_DOWN,
    SERVICE_NONE,
    SERVICE_ODD,
    SERVICE_UP_IF_RECENT,
    HostTable,
    _number,
    microseconds,
    service_state,
    table_of,
)
from scheduler.objects import Flavor, RequestSpec
from tests.unit.filters.fakes import make_aggregate, make_host, make_service

NOW = datetime.datetime(2026, 11, 24, 12, 0, 0, 123456)


def _ram(host):
    return host.free_ram_mb


def _vcpus(host):
    return host.vcpus_total * (host.cpu_allocation_ratio or 4.0) - host.vcpus_used


def _arch(host):
    return (host.stats or {}).get("cpu_arch", "absent")


def assert_table_mirrors(table: HostTable, hosts: list[HostState]) -> None:
    """Every column the table keeps equals what it mirrors on each host."""
    located = table_of(hosts)
    assert located is not None and located[0] is table
    rows = located[1]
    for name, (func, array) in table._numeric.items():
        expected = np.array([_number(func(h)) for h in hosts], dtype=np.float64)
        assert np.array_equal(array[rows], expected, equal_nan=True), name
    for name, column in table._codes.items():
        values = column.values
        for host, code in zip(hosts, column.codes[rows].tolist(), strict=True):
            assert code >= 0, name
            assert column.key(values[code]) == column.key(column.func(host)), name
    state, last = table.services(rows)
    for host, s, t in zip(hosts, state.tolist(), last.tolist(), strict=True):
        assert (s, t) == service_state(host.service), host.host
    codes, lists = table.aggregates
    for host, code in zip(hosts, codes[rows].tolist(), strict=True):
        assert lists[code] == (host.aggregates or []), host.host


def _row(uuid, host, **over):
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
    return values


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
    for step in range(60):
        op = rng.choice(["add", "add", "row", "consume", "service", "aggregates", "register"])
        if op == "add" or not hosts:
            hs = HostState(f"h{step}", f"h{step}", rng.choice(["c1", "c2"]))
            hs._update_from_compute_node(_row(f"u{step}", hs.host))
            hs.service = make_service(host=hs.host, last_seen_up=NOW)
            hs.aggregates = rng.choice(shared)
            table.add(hs)
            hosts.append(hs)
        elif op == "row":
            hs = rng.choice(hosts)
            hs.updated = None  # take the report whatever our consumption
            hs.update(
                compute=_row(
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
            else:  # a heartbeat applied in place, as the host manager does
                hs.service.clear()
                hs.service.update(service)
                table.service_changed(hs.cell_uuid, hs.host, hs.service)
        elif op == "aggregates":
            for hs in hosts:
                hs.aggregates = list(rng.choice(shared))  # new list objects, as a re-read
            table.rebind_aggregates(hosts)
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
