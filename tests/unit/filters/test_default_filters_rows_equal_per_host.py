"""The default filters' column paths (``filter_rows``, over the host table) against their
per-host paths (``host_passes``), over random hosts and requests: the same hosts pass, in the
same order, and every removed host carries the same reason. And the filter handler gives the
same report with and without the columns."""

from __future__ import annotations

import contextlib
import datetime

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import filters.handler as handler_mod
from filters.affinity_filter import ServerGroupAffinityFilter, ServerGroupAntiAffinityFilter
from filters.compute_capabilities_filter import ComputeCapabilitiesFilter
from filters.compute_filter import ComputeFilter
from filters.handler import FilterHandler, HostList
from filters.image_props_filter import ImagePropertiesFilter
from tests.unit.filters.fakes import NOW, make_host, make_service, make_spec, override, tabled
from tests.unit.filters.strategies import (
    SETTINGS,
    capability_hosts,
    compute_case,
    extra_specs,
    group_case,
    image_hosts,
    image_props,
    per_host,
)


def by_rows(filt, hosts, spec):
    """(passed, rejected) from ``filter_rows``, or None when it leaves the hosts to
    ``check``."""
    table, rows = tabled(hosts)
    outcome = filt.filter_rows(table, rows, spec)
    if outcome is None:
        return None
    keep = np.asarray(outcome.keep, dtype=bool)
    assert keep.shape == (len(hosts),)
    passed = table.hosts_at(rows[keep])
    rejected = []
    for i in np.flatnonzero(~keep).tolist():
        code = 0 if outcome.codes is None else int(outcome.codes[i])
        rejected.append((hosts[i], outcome.reasons[code]))
    return passed, rejected


def assert_rows_equal_per_host(filt, hosts, spec):
    got = by_rows(filt, hosts, spec)
    if got is None:
        return False
    passed, rejected = per_host(filt, hosts, spec)
    assert [id(h) for h in got[0]] == [id(h) for h in passed]
    assert [(id(h), r) for h, r in got[1]] == [(id(h), r) for h, r in rejected]
    return True


@SETTINGS
@given(compute_case())
def test_compute_filter_rows_equal_per_host(case):
    hosts, down_time = case
    filt = ComputeFilter()
    filt.now = lambda: NOW
    with override("service_down_time", down_time):
        assert_rows_equal_per_host(filt, hosts, make_spec())


def test_compute_filter_uses_the_columns_for_ordinary_services(caplog):
    stale = NOW - datetime.timedelta(hours=1)
    hosts = [
        make_host("up", service=make_service(last_seen_up=NOW)),
        make_host("off", service=make_service(disabled=True)),
        make_host("forced", service=make_service(forced_down=True)),
        make_host("gone", service=make_service(last_seen_up=stale)),
        make_host("none", service={}),
    ]
    filt = ComputeFilter()
    filt.now = lambda: NOW
    assert assert_rows_equal_per_host(filt, hosts, make_spec())
    # the one line per request of the column path (the per-host path above warns per host)
    assert "3 host(s) have not been heard from in a while: forced, gone, none" in [
        r.getMessage() for r in caplog.records
    ]


@SETTINGS
@given(image_hosts(), image_props, st.sampled_from([None, "x86_64", "aarch64"]))
def test_image_properties_filter_rows_equal_per_host(hosts, props, default_arch):
    spec = make_spec(image_props=props)
    with override("image_properties_default_architecture", default_arch, "filter_scheduler"):
        assert_rows_equal_per_host(ImagePropertiesFilter(), hosts, spec)


def test_image_properties_filter_uses_the_columns_for_an_architecture():
    hosts = [
        make_host("x", supported_instances=[["x86_64", "kvm", "hvm"]]),
        make_host("arm", supported_instances=[["aarch64", "kvm", "hvm"]]),
        make_host("nothing", supported_instances=[]),
    ]
    spec = make_spec(image_props={"hw_architecture": "x86_64"})
    assert assert_rows_equal_per_host(ImagePropertiesFilter(), hosts, spec)


stats_specs = st.dictionaries(
    st.sampled_from(["capabilities:storage", "capabilities:gpu", "storage", "rack"]),
    st.sampled_from(["ssd", "s== ssd", "<in> s", "none", "<or> a100 <or> none", ">= 2"]),
    max_size=3,
)


@st.composite
def stats_hosts(draw):
    values = st.sampled_from(["ssd", "hdd", "a100", "none", "2", "3", None, 2])
    return [
        make_host(
            f"h{i}",
            stats=draw(st.dictionaries(st.sampled_from(["storage", "gpu", "rack"]), values)),
        )
        for i in range(draw(st.integers(0, 10)))
    ]


@SETTINGS
@given(stats_hosts(), stats_specs)
def test_compute_capabilities_filter_rows_equal_per_host_on_stats(hosts, specs):
    used = assert_rows_equal_per_host(ComputeCapabilitiesFilter(), hosts, make_spec(specs))
    # only a nested path or a host attribute sends the filter to the per-host path
    assert used or not hosts


@SETTINGS
@given(capability_hosts(), extra_specs)
def test_compute_capabilities_filter_rows_equal_per_host(hosts, specs):
    assert_rows_equal_per_host(ComputeCapabilitiesFilter(), hosts, make_spec(extra_specs=specs))


@SETTINGS
@given(group_case())
def test_server_group_filters_rows_equal_per_host(case):
    hosts, spec = case
    assert_rows_equal_per_host(ServerGroupAntiAffinityFilter(), hosts, spec)
    assert_rows_equal_per_host(ServerGroupAffinityFilter(), hosts, spec)


# -- the handler: columns or not, the same report -----------------------------------------------


@contextlib.contextmanager
def columns_from(count):
    saved = handler_mod.COLUMNS_MIN_HOSTS
    handler_mod.COLUMNS_MIN_HOSTS = count
    try:
        yield
    finally:
        handler_mod.COLUMNS_MIN_HOSTS = saved


def _report(report):
    return (
        [id(h) for h in report.hosts],
        [(name, list(counter.items())) for name, counter in report.removed_by.items()],
        [
            (s.name, s.hosts_in, s.hosts_out, [(id(h), r) for h, r in s.removed])
            for s in report.steps
        ],
    )


@st.composite
def chain_case(draw):
    hosts, down_time = draw(compute_case())
    for host in hosts:
        host.supported_instances = draw(
            st.sampled_from([[["x86_64", "kvm", "hvm"]], [["aarch64", "kvm", "hvm"]], []])
        )
        host.stats = draw(
            st.dictionaries(st.sampled_from(["storage", "gpu"]), st.sampled_from(["ssd", "none"]))
        )
    specs = draw(st.dictionaries(st.sampled_from(["capabilities:storage"]), st.just("ssd")))
    arch = draw(st.sampled_from(["x86_64", "aarch64"]))
    return hosts, down_time, make_spec(specs, image_props={"hw_architecture": arch})


@SETTINGS
@given(chain_case(), st.integers(0, 1))
def test_filter_handler_report_is_the_same_with_and_without_columns(case, index):
    hosts, down_time, spec = case
    table, _ = tabled(hosts)  # the hosts hold their table weakly: keep it alive
    chain = [
        ComputeFilter(),
        ComputeCapabilitiesFilter(),
        ImagePropertiesFilter(),
        ServerGroupAntiAffinityFilter(),
        ServerGroupAffinityFilter(),
    ]
    chain[0].now = lambda: NOW
    handler = FilterHandler(chain)
    with override("service_down_time", down_time):
        with columns_from(0):
            with_columns = handler.run(hosts, spec, index)
        with columns_from(10**9):
            without = handler.run(hosts, spec, index)
    assert _report(with_columns) == _report(without)
    if with_columns.hosts:  # the columns were used (the last filter answered over rows)
        assert isinstance(with_columns.hosts, HostList)
        assert not isinstance(without.hosts, HostList)
    del table
    if with_columns.hosts:
        assert with_columns.summary() == without.summary()


class OnlyEvenHosts(ComputeFilter):
    """A plugin that extends a built-in filter: its own check must decide."""

    def check(self, host_state, prepared):
        return int(host_state.host[1:]) % 2 == 0


def test_a_subclass_that_changes_check_is_not_answered_by_the_columns():
    hosts = [make_host(f"h{i}", service=make_service(last_seen_up=NOW)) for i in range(6)]
    table, _ = tabled(hosts)
    with columns_from(0):
        report = FilterHandler([OnlyEvenHosts()]).run(hosts, make_spec())
    assert [h.host for h in report.hosts] == ["h0", "h2", "h4"]
    del table


def test_codes_written_after_the_values_were_read_send_the_filter_to_the_hosts():
    hosts = [
        make_host("x", supported_instances=[["x86_64", "kvm", "hvm"]], stats={"storage": "ssd"}),
        make_host("arm", supported_instances=[["aarch64", "kvm", "hvm"]], stats={"storage": "hd"}),
    ]
    table, rows = tabled(hosts)
    real = table.codes

    def stale(name, func, key):
        codes, values = real(name, func, key)
        return codes, values[:1]  # as if a host had reported a new value meanwhile

    table.codes = stale
    image = make_spec(image_props={"hw_architecture": "x86_64"})
    assert ImagePropertiesFilter().filter_rows(table, rows, image) is None
    ssd = make_spec({"capabilities:storage": "ssd"})
    assert ComputeCapabilitiesFilter().filter_rows(table, rows, ssd) is None
    table.codes = real
    assert ComputeCapabilitiesFilter().filter_rows(table, rows, ssd) is not None
