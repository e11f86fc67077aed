"""nova's casts and the provider view's lost claims, applied to the host state."""

from __future__ import annotations

from scheduler.drivers.host_casts import HostCasts, status_lines
from tests.unit.scheduler.drivers.fakes import FakeHostManager, make_host


class Manager(FakeHostManager):
    """Records which release each cast asked for."""

    def release_deleted_instance(self, host, instance_uuid):
        self.calls.append(("deleted", host, instance_uuid))
        return super().release_deleted_instance(host, instance_uuid)

    def release_moved_instances(self, host, instance_uuids):
        self.calls.append(("moved", host, list(instance_uuids)))
        return 0

    def release_unlisted_instances(self, host, instance_uuids):
        self.calls.append(("unlisted", host, list(instance_uuids)))
        return 0


class View:
    def __init__(self):
        self.dirty: list[str] = []

    def mark_dirty(self, uuids):
        self.dirty.extend(uuids)


def test_a_deleted_instance_is_released_and_its_hosts_providers_are_read_again():
    manager = Manager([make_host("h1"), make_host("h2")])
    view = View()
    casts = HostCasts(manager, view)
    casts.delete_instance_info("h1", "i-1")
    assert ("deleted", "h1", "i-1") in manager.calls
    assert view.dirty == ["rp-h1"]


def test_the_view_tells_the_host_source_of_a_lost_claim():
    manager = Manager([make_host("h1")])
    view = View()
    HostCasts(manager, view)
    assert view.on_consumer_gone == manager.release_consumer
    assert view.counted_claims == manager.counted_claims


def test_without_a_view_a_delete_only_releases():
    manager = Manager([make_host("h1")])
    HostCasts(manager, None).delete_instance_info("h1", "i-1")
    assert ("deleted", "h1", "i-1") in manager.calls


def test_moved_and_unlisted_instances_are_released_on_that_host():
    manager = Manager([make_host("h1")])
    casts = HostCasts(manager)
    casts.update_instance_info("h1", ["i-1"])
    casts.sync_instance_info("h1", ["i-1"])
    assert ("moved", "h1", ["i-1"]) in manager.calls
    assert ("unlisted", "h1", ["i-1"]) in manager.calls


def test_status_lines_say_each_cells_age_and_failure():
    class Cells:
        def status(self):
            return [
                {"name": "cell1", "hosts": 3, "last_ok_at": 100.0, "failing": False},
                {"name": "cell2", "hosts": 0, "last_ok_at": None, "failing": True},
            ]

    lines = status_lines(Cells(), None, now=102.5)
    assert lines == {
        "cell cell1": "3 host(s), last read 2.5 s ago",
        "cell cell2": "0 host(s), last read never, failing",
    }
