"""Unit tests of the chance and caching scheduler drivers, and of selecting a third-party
driver by entry point (``[scheduler] driver``).

The fakes (Placement, host manager) are the filter scheduler tests': both drivers reuse the
filter scheduler's claim, rollback and alternates, so the same fakes exercise them.
"""

from __future__ import annotations

import logging
import random
import textwrap
import threading
import time
from types import SimpleNamespace

import pytest
from stevedore import ExtensionManager

import db
from placement_client.api import ClaimConflict
from scheduler.conf import CONF
from scheduler.drivers import caching_scheduler
from scheduler.drivers.caching_scheduler import (
    CachingScheduler,
    HostStateCache,
    periodic_task_interval,
)
from scheduler.drivers.chance_scheduler import ChanceScheduler
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost, PluginNotFound
from scheduler.framework.pickers import RandomPick
from scheduler.hosts.manager import _needs_instances
from scheduler.objects import Destination
from scheduler.rpc import service
from tests.unit.scheduler.drivers.fakes import (
    CELL1,
    CELL2,
    CONTEXT,
    FakeHostManager,
    FakePlacement,
    make_host,
    make_spec,
)
from tests.unit.scheduler.hosts.env import Env
from tests.unit.scheduler.hosts.env import utcnow as hm_utcnow


def select(driver, spec, uuids=None, alternates=False):
    if uuids is None:
        uuids = [f"inst-{i}" for i in range(spec.num_instances)]
    return driver.select_destinations(CONTEXT, spec, uuids, alternates)


def chosen(result) -> list[str]:
    return [selections[0].service_host for selections in result]


class RecordingHostManager(FakeHostManager):
    """FakeHostManager that also records the specs it is asked with."""

    def __init__(self, hosts, aggregates=None):
        super().__init__(hosts, aggregates)
        self.specs = []
        self.enabled_cells = {CELL1: None, CELL2: None}
        self.fail_reads = False

    def get_host_states_by_uuids(self, compute_uuids, spec=None, *, request_id=None):
        if self.fail_reads:
            self.calls.append("get_host_states_by_uuids")
            raise RuntimeError("cell database unreachable")
        self.specs.append(spec)
        hosts = super().get_host_states_by_uuids(compute_uuids, spec, request_id=request_id)
        dest = spec.requested_destination if spec is not None else None
        if dest is not None and dest.cell_uuid:
            hosts = [h for h in hosts if h.cell_uuid == dest.cell_uuid]
        return hosts

    def reads(self) -> int:
        return self.calls.count("get_host_states_by_uuids")


# -- chance scheduler --------------------------------------------------------------------------
def chance_driver(hosts, seed=1):
    placement = FakePlacement(hosts)
    driver = ChanceScheduler(
        placement=placement, host_manager=FakeHostManager(hosts), rng=random.Random(seed)
    )
    return driver, placement


@pytest.fixture
def mixed_hosts():
    # host-big would win every time under the filter scheduler's weighers
    return [
        make_host("host-off", ram_mb=65536, disabled=True),
        make_host("host-dead", ram_mb=65536, down=True),
        make_host("host-big", ram_mb=65536),
        make_host("host-small", ram_mb=2048),
        make_host("host-mid", ram_mb=8192),
    ]


def test_chance_picks_random_up_and_enabled_hosts_and_claims_them(mixed_hosts):
    driver, placement = chance_driver(mixed_hosts)
    picks = [chosen(select(driver, make_spec(), [f"i-{n}"]))[0] for n in range(60)]
    # only up and enabled hosts, and not just the best-weighed one
    assert set(picks) == {"host-big", "host-small", "host-mid"}
    assert all(placement.claims[f"i-{n}"]["host"] == picks[n] for n in range(60))


def test_chance_ignores_the_configured_filters_and_weighers(mixed_hosts):
    CONF.set_override("enabled_filters", ["ComputeFilter"], group="filter_scheduler")
    driver, _ = chance_driver(mixed_hosts)
    assert [f.name for f in driver.filter_handler.filters] == ["ComputeFilter"]
    assert driver.weight_handler.weighers == []


def test_chance_choice_comes_from_its_random_source(mixed_hosts):
    first = [chosen(select(chance_driver(mixed_hosts, seed=7)[0], make_spec()))[0]]
    again = [chosen(select(chance_driver(mixed_hosts, seed=7)[0], make_spec()))[0]]
    assert first == again


def test_chance_tries_another_host_when_placement_refuses_the_claim(mixed_hosts):
    driver, placement = chance_driver(mixed_hosts)
    placement.claim_errors = {
        "host-big": ClaimConflict("conflict"),
        "host-mid": ClaimConflict("conflict"),
    }
    for n in range(10):
        assert chosen(select(driver, make_spec(), [f"i-{n}"])) == ["host-small"]


def test_chance_no_valid_host_says_why(mixed_hosts):
    hosts = mixed_hosts[:2]  # disabled and down
    driver, placement = chance_driver(hosts)
    with pytest.raises(NoValidHost) as err:
        select(driver, make_spec())
    reason = str(err.value)
    assert "0/2 hosts available" in reason
    assert "ComputeFilter (service disabled)" in reason
    assert "ComputeFilter (service down)" in reason
    assert placement.claims == {}


def test_chance_rolls_back_every_claim_when_an_instance_cannot_be_claimed():
    hosts = [make_host("host-a"), make_host("host-b")]
    driver, placement = chance_driver(hosts)
    placement.consumer_errors = {"inst-1": ClaimConflict("conflict")}
    with pytest.raises(NoValidHost) as err:
        select(driver, make_spec(num_instances=2))
    assert "Found hosts for 1 of 2 instances" in str(err.value)
    assert placement.deleted == ["inst-0"]
    assert placement.claims == {}


def test_chance_multi_create_and_alternates_from_the_same_cell():
    hosts = [
        make_host("a1"),
        make_host("a2"),
        make_host("a3"),
        make_host("b1", cell=CELL2),
    ]
    driver, placement = chance_driver(hosts, seed=3)
    result = select(driver, make_spec(num_instances=2), alternates=True)
    assert len(result) == 2
    picked = {sels[0].service_host for sels in result}
    for sels in result:
        assert len(sels) <= CONF.scheduler.max_attempts
        first = sels[0]
        assert first.allocation_request is not None
        for alt in sels[1:]:
            assert alt.cell_uuid == first.cell_uuid
            assert alt.service_host not in picked
    assert set(placement.claims) == {"inst-0", "inst-1"}


class WorstFirst:
    """A picker of one's own: the weighed order backwards."""

    def arrange(self, step):
        return step

    def first(self, step):
        return list(reversed(step.hosts))


def test_a_picker_of_ones_own_chooses_with_everything_else_the_filter_schedulers(mixed_hosts):
    placement = FakePlacement(mixed_hosts)
    driver = FilterScheduler(
        placement=placement, host_manager=FakeHostManager(mixed_hosts), picker=WorstFirst()
    )
    # the filters still take the disabled and dead hosts out; the weighers still rank RAM
    # (host-big first): the picker tries the least free host first, and it is claimed
    assert chosen(select(driver, make_spec())) == ["host-small"]
    assert [c for c, _ in placement.claim_attempts] == ["inst-0"]


def test_chance_honours_ignore_hosts(mixed_hosts):
    driver, _ = chance_driver(mixed_hosts)
    spec = make_spec(ignore_hosts=["HOST-BIG", "host-mid"])
    for n in range(10):
        assert chosen(select(driver, spec, [f"i-{n}"])) == ["host-small"]


# -- caching scheduler -------------------------------------------------------------------------
def caching_driver(hosts, **kwargs):
    placement = FakePlacement(hosts)
    manager = RecordingHostManager(hosts)
    kwargs.setdefault("start_periodic", False)
    driver = CachingScheduler(placement=placement, host_manager=manager, **kwargs)
    return driver, placement, manager


def test_caching_requests_do_not_read_the_cells():
    hosts = [make_host("host-a", ram_mb=4096), make_host("host-b", ram_mb=16384)]
    driver, placement, manager = caching_driver(hosts)
    assert manager.reads() == 0  # nothing read until needed
    assert chosen(select(driver, make_spec(), ["i-0"])) == ["host-b"]
    for n in range(1, 5):
        select(driver, make_spec(), [f"i-{n}"])
    assert manager.reads() == 1  # the first request loaded the cache; the others used it
    assert set(placement.claims) == {f"i-{n}" for n in range(5)}


def test_caching_new_hosts_appear_only_after_a_refresh():
    hosts = [make_host("host-a", ram_mb=4096)]
    driver, placement, manager = caching_driver(hosts)
    assert chosen(select(driver, make_spec(), ["i-0"])) == ["host-a"]
    hosts.append(make_host("host-new", ram_mb=65536))  # Placement knows it, the cache not yet
    assert chosen(select(driver, make_spec(), ["i-1"])) == ["host-a"]
    assert driver.host_manager.refresh() == 2
    assert chosen(select(driver, make_spec(), ["i-2"])) == ["host-new"]


def test_caching_refresh_loads_every_hosts_instances():
    driver, _, manager = caching_driver([make_host("host-a")])
    driver.host_manager.refresh()
    # the host manager loads instances only for specs that need them; the refresh's does
    assert _needs_instances(manager.specs[-1])


def test_caching_consumption_is_kept_between_requests():
    hosts = [make_host("host-a", ram_mb=8192), make_host("host-b", ram_mb=8192 + 512)]
    driver, _, _ = caching_driver(hosts)
    # host-b wins, consumes 1024 MB, and is then behind host-a
    assert chosen(select(driver, make_spec(ram_mb=1024), ["i-0"])) == ["host-b"]
    assert chosen(select(driver, make_spec(ram_mb=1024), ["i-1"])) == ["host-a"]


def test_caching_rollback_releases_the_requests_consumption_on_the_cached_hosts():
    hosts = [make_host("host-a", ram_mb=4096), make_host("host-b", ram_mb=16384)]
    driver, placement, manager = caching_driver(hosts)
    other = select(driver, make_spec(ram_mb=2048), ["other-0"])  # another request's
    (taken,) = [h for h in hosts if h.host == chosen(other)[0]]
    free_after_other = taken.free_ram_mb
    placement.consumer_errors = {"inst-1": ClaimConflict("conflict")}
    with pytest.raises(NoValidHost):
        select(driver, make_spec(num_instances=2, ram_mb=2048))
    assert placement.deleted == ["inst-0"]
    # the rolled-back instance is no longer counted; the other request's still is, and no
    # cell was read on the request's path
    assert taken.free_ram_mb == free_after_other
    assert sum(h.free_ram_mb for h in hosts) == 4096 + 16384 - 2048
    assert manager.reads() == 1
    # the next request is served from the cache, released room included
    select(driver, make_spec(ram_mb=2048), ["next-0"])
    assert manager.reads() == 1
    assert sum(h.free_ram_mb for h in hosts) == 4096 + 16384 - 2 * 2048


def test_caching_restricts_to_the_requested_cell_from_the_cache():
    hosts = [make_host("a1", ram_mb=65536), make_host("b1", cell=CELL2, ram_mb=1024)]
    driver, _, manager = caching_driver(hosts)
    spec = make_spec(requested_destination=Destination(cell_uuid=CELL2))
    assert chosen(select(driver, spec)) == ["b1"]
    assert manager.reads() == 1


def test_caching_reads_a_requested_cell_it_does_not_hold():
    hosts = [make_host("a1"), make_host("c1", cell="cell-disabled")]
    driver, _, manager = caching_driver(hosts)
    driver.host_manager.refresh()
    spec = make_spec(requested_destination=Destination(cell_uuid="cell-disabled"))
    assert chosen(select(driver, spec)) == ["c1"]
    assert manager.reads() == 2
    assert manager.specs[-1].requested_destination.cell_uuid == "cell-disabled"


def test_caching_forced_host_is_looked_up_in_the_cache():
    hosts = [make_host("host-a", ram_mb=65536), make_host("host-b")]
    driver, _, manager = caching_driver(hosts)
    assert chosen(select(driver, make_spec(force_hosts=["host-b"]))) == ["host-b"]
    assert manager.reads() == 1


def test_caching_reset_reloads_cells_aggregates_and_hosts():
    driver, _, manager = caching_driver([make_host("host-a")])
    driver.reset()
    assert manager.calls == [
        "refresh_cells_caches",
        "refresh_aggregates",
        "get_host_states_by_uuids",
    ]


@pytest.fixture
def cells(tmp_path):
    env = Env(tmp_path)
    yield env
    for manager in env.managers:
        manager.stop()
    db.dispose_engines()


def test_caching_with_the_real_host_manager_reads_cells_only_when_refreshing(cells):
    cell = cells.add_cell("cell1")
    alive = {"last_seen_up": hm_utcnow(), "updated_at": hm_utcnow()}
    cells.add_host(cell, "host-a", service=alive)
    instance = cells.add_instance(cell, "host-a")
    manager = cells.manager()
    placement = FakePlacement(manager.get_host_states_by_uuids(None))
    driver = CachingScheduler(placement=placement, host_manager=manager, start_periodic=False)
    driver.host_manager.refresh()
    (cached,) = driver.host_manager.get_host_states_by_uuids(None)
    assert instance in cached.instances  # loaded by the refresh, for the affinity filters
    cells.update_service(cell, "host-a", disabled=True)
    # the cached service is still enabled: requests do not read the cell
    assert chosen(select(driver, make_spec(), ["i-0"])) == ["host-a"]
    driver.host_manager.refresh()
    with pytest.raises(NoValidHost) as err:
        select(driver, make_spec(), ["i-1"])
    assert "ComputeFilter (service disabled)" in str(err.value)


def _wait_for(predicate, timeout=5.0) -> bool:
    deadline = time.monotonic() + timeout
    event = threading.Event()
    while time.monotonic() < deadline:
        if predicate():
            return True
        event.wait(0.01)
    return predicate()


def test_caching_periodic_task_refreshes_until_stopped():
    driver, _, manager = caching_driver([make_host("host-a")], interval=0.02, start_periodic=True)
    try:
        assert _wait_for(lambda: manager.reads() >= 3)
    finally:
        driver.stop()
    assert not driver.host_manager.thread.is_alive()
    after = manager.reads()
    threading.Event().wait(0.1)
    assert manager.reads() == after
    assert manager.calls[-1] == "stop"


def test_caching_periodic_failure_keeps_the_last_cache(caplog):
    hosts = [make_host("host-a")]
    driver, _, manager = caching_driver(hosts, interval=0.02, start_periodic=True)
    try:
        assert _wait_for(lambda: driver.host_manager.loaded)
        manager.fail_reads = True
        before = manager.reads()
        assert _wait_for(lambda: manager.reads() >= before + 2)
        assert driver.host_manager.thread.is_alive()
        assert chosen(select(driver, make_spec())) == ["host-a"]
    finally:
        driver.stop()
    assert "could not refresh its host states" in caplog.text


def test_caching_no_periodic_task_with_a_negative_interval():
    driver, _, manager = caching_driver([make_host("host-a")], interval=None, start_periodic=True)
    assert driver.host_manager.thread is None
    select(driver, make_spec())
    assert manager.reads() == 1


def test_periodic_task_interval_follows_nova():
    def conf(value):
        return SimpleNamespace(scheduler=SimpleNamespace(periodic_task_interval=value))

    assert periodic_task_interval(conf(30)) == 30.0
    assert periodic_task_interval(conf(0)) == 60.0  # nova: 0 means the default
    assert periodic_task_interval(conf(-1)) is None  # nova: negative disables
    # until the option is registered, nova's default
    assert periodic_task_interval(SimpleNamespace(scheduler=SimpleNamespace())) == (
        caching_scheduler.DEFAULT_PERIODIC_TASK_INTERVAL
    )


def test_caching_warns_when_the_interval_makes_hosts_look_down(caplog):
    with caplog.at_level(logging.WARNING, logger=caching_scheduler.__name__):
        caching_driver([make_host("host-a")], interval=60)
    assert "may take live hosts for down" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=caching_scheduler.__name__):
        caching_driver([make_host("host-a")], interval=20)
    assert "may take live hosts for down" not in caplog.text


# -- selecting drivers by entry point ----------------------------------------------------------
TINY_DRIVER = '''
class TinyDriver:
    """Sends every instance to one host, without Placement."""

    def __init__(self, **kwargs):
        self.kwargs = kwargs

    def select_destinations(self, context, spec_obj, instance_uuids, return_alternates=False):
        return [["tiny-host"] for _ in instance_uuids or [None]]

    def reset(self):
        pass

    def stop(self):
        pass
'''


@pytest.fixture
def tiny_driver_dist(tmp_path, monkeypatch):
    """A third-party distribution on sys.path that registers ``tiny_driver`` in the
    ``novasched.scheduler.driver`` namespace, as ``pip install`` would."""
    (tmp_path / "novasched_tiny_driver.py").write_text(TINY_DRIVER)
    dist = tmp_path / "novasched_tiny_driver-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: novasched-tiny-driver\n")
    (dist / "entry_points.txt").write_text(
        textwrap.dedent(
            """\
            [novasched.scheduler.driver]
            tiny_driver = novasched_tiny_driver:TinyDriver
            """
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    # stevedore keeps each namespace's entry points for the life of the process: look again
    # (and forget what was seen here afterwards)
    monkeypatch.setattr(ExtensionManager, "ENTRY_POINT_CACHE", {})
    return tmp_path


def test_a_third_party_driver_is_selected_by_its_entry_point_name(tiny_driver_dist):
    CONF.set_override("driver", "tiny_driver", group="scheduler")
    driver = service.load_driver(CONF, placement="p")
    assert type(driver).__name__ == "TinyDriver"
    assert driver.kwargs == {"placement": "p"}
    assert driver.select_destinations(CONTEXT, make_spec(), ["i-0"]) == [["tiny-host"]]


def test_a_third_party_driver_is_built_without_the_observers(tiny_driver_dist):
    """The service's observers go only to a driver that declares it takes them: a plugin
    written for keyword arguments of its own is built as before (and asked for nothing)."""
    CONF.set_override("driver", "tiny_driver", group="scheduler")
    asked = []
    driver = service.load_driver(CONF, observers=lambda: asked.append(1), placement="p")
    assert driver.kwargs == {"placement": "p"} and asked == []


@pytest.mark.parametrize("name", ["filter_scheduler", "chance_scheduler", "caching_scheduler"])
def test_builtin_drivers_are_built_with_the_services_observers(name):
    """The decision recorder, the request's encoder and the timing observer are handed to
    the driver's constructor, and each call reaches them."""
    from scheduler.drivers.base import Observers

    CONF.set_override("driver", name, group="scheduler")
    records, timings = [], []

    class Recorder:
        def record(self, rec):
            records.append(rec)

    observers = Observers(recorder=Recorder(), spec_encoder=lambda spec: {}, timing=timings.append)
    hosts = [make_host("host-a")]
    driver = service.load_driver(
        CONF,
        observers=lambda: observers,
        placement=FakePlacement(hosts),
        host_manager=FakeHostManager(hosts),
    )
    try:
        assert (driver.recorder, driver.timing_observer) == (observers.recorder, timings.append)
        assert chosen(select(driver, make_spec())) == ["host-a"]
        assert len(records) == 1 and records[0].hosts and len(timings) == 1
    finally:
        driver.stop()


def test_an_unknown_driver_lists_the_available_ones(tiny_driver_dist):
    CONF.set_override("driver", "no_such_driver", group="scheduler")
    with pytest.raises(PluginNotFound) as err:
        service.load_driver(CONF)
    assert "tiny_driver" in str(err.value)
    assert "filter_scheduler" in str(err.value)


@pytest.mark.parametrize(
    ("name", "cls"),
    [("chance_scheduler", ChanceScheduler), ("caching_scheduler", CachingScheduler)],
)
def test_builtin_drivers_are_registered(name, cls):
    CONF.set_override("driver", name, group="scheduler")
    _load_and_select(cls)


# nova's [scheduler] driver spellings: the class paths of before Ocata and its entry points
NOVA_DRIVER_NAMES = [
    ("nova.scheduler.filter_scheduler.FilterScheduler", FilterScheduler, "filter_scheduler"),
    ("nova.scheduler.chance.ChanceScheduler", ChanceScheduler, "chance_scheduler"),
    ("nova.scheduler.caching_scheduler.CachingScheduler", CachingScheduler, "caching_scheduler"),
]


def _driver_kind(driver):
    """The driver a FilterScheduler is: the chance scheduler is one with the random picker,
    the caching scheduler one whose host source is a HostStateCache."""
    if isinstance(driver.picker, RandomPick):
        return ChanceScheduler
    if isinstance(driver.host_manager, HostStateCache):
        return CachingScheduler
    return type(driver)


def _load_and_select(cls):
    hosts = [make_host("host-a")]
    driver = service.load_driver(
        CONF, placement=FakePlacement(hosts), host_manager=FakeHostManager(hosts)
    )
    try:
        assert _driver_kind(driver) is cls
        assert chosen(select(driver, make_spec())) == ["host-a"]
    finally:
        driver.stop()


@pytest.mark.parametrize(("old", "cls", "new"), NOVA_DRIVER_NAMES)
def test_novas_old_driver_class_path_loads_our_driver(old, cls, new, caplog):
    CONF.set_override("driver", old, group="scheduler")
    with caplog.at_level(logging.WARNING, logger="scheduler.rpc.service"):
        _load_and_select(cls)
    [warning] = [r for r in caplog.records if r.name == "scheduler.rpc.service"]
    assert warning.levelno == logging.WARNING
    assert old in warning.getMessage()
    assert f"[scheduler] driver = {new} instead" in warning.getMessage()


@pytest.mark.parametrize(("old", "cls", "new"), NOVA_DRIVER_NAMES)
def test_novas_entry_point_names_are_ours(old, cls, new, caplog):
    CONF.set_override("driver", new, group="scheduler")
    with caplog.at_level(logging.WARNING, logger="scheduler.rpc.service"):
        _load_and_select(cls)
    assert not [r for r in caplog.records if r.name == "scheduler.rpc.service"]


def test_old_default_scheduler_driver_with_a_class_path_loads_our_driver(tmp_path):
    path = tmp_path / "nova.conf"
    path.write_text("[DEFAULT]\nscheduler_driver = nova.scheduler.chance.ChanceScheduler\n")
    CONF(["--config-file", str(path)], project="nova", default_config_files=[])
    _load_and_select(ChanceScheduler)
