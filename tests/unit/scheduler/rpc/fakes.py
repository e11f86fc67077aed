"""Fakes shared by the RPC manager's tests: a driver that records what the manager passes."""

from __future__ import annotations

import threading

from scheduler.objects import SchedulerLimits, Selection


def _selection(host: str) -> Selection:
    return Selection(
        compute_node_uuid=f"uuid-{host}",
        service_host=host,
        nodename=host,
        cell_uuid="cell-1",
        allocation_request={"allocations": {f"uuid-{host}": {"resources": {"VCPU": 1}}}},
        allocation_request_version="1.36",
        limits=SchedulerLimits(),
        availability_zone="nova",
    )


class FakeDriver:
    """Records what the manager passes; answers one chosen host plus alternates."""

    def __init__(self, error: Exception | None = None):
        self.calls: list[tuple] = []
        self.error = error
        self.release = threading.Event()
        self.release.set()
        self.entered = threading.Event()
        self.reset_called = False

    def select_destinations(self, context, spec_obj, instance_uuids, return_alternates):
        self.calls.append((context, spec_obj, instance_uuids, return_alternates))
        self.entered.set()
        self.release.wait(5)
        if self.error is not None:
            raise self.error
        count = len(instance_uuids) if instance_uuids is not None else spec_obj.num_instances
        return [
            [_selection(f"host{i}")] + ([_selection(f"alt{i}")] if return_alternates else [])
            for i in range(count)
        ]

    def reset(self):
        self.reset_called = True

    def stop(self):
        pass
