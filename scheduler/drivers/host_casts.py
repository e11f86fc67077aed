"""What tells the host state that instances left a host: nova's casts, and lost claims.

nova's computes and API cast ``update_aggregates``, ``delete_aggregate``,
``update_instance_info``, ``delete_instance_info`` and ``sync_instance_info`` to every
scheduler. nova's own scheduler keeps the instance lists they carry; ours also stops counting,
on the host the cast names, the instances it placed there (``HostSource``'s consumption), and
a deleted instance's host has its providers read again by the provider view (nova's ``DELETE
/allocations`` leaves a provider's generation as it was). The provider view, which sees
Placement no longer holding an instance's allocation on a compute node (a failed move's
pre-check, a delete before the build), ends our consumption of it there too.
"""

from __future__ import annotations

from typing import Any

from scheduler.drivers.host_source import HostSource


class HostCasts:
    """The casts of nova, applied to ``host_manager`` and the provider ``view`` (or None)."""

    def __init__(self, host_manager: HostSource, view: Any = None):
        self.host_manager = host_manager
        self.view = view
        if view is not None:
            view.on_consumer_gone = host_manager.release_consumer
            view.counted_claims = host_manager.counted_claims

    def update_aggregates(self, aggregates: list[Any]) -> None:
        self.host_manager.update_aggregates(aggregates)

    def delete_aggregate(self, aggregate: Any) -> None:
        self.host_manager.delete_aggregate(aggregate)

    def update_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self.host_manager.instance_tracker.update_instance_info(host_name, instance_uuids)
        # the instances are on that host: no other host counts them any more
        self.host_manager.release_moved_instances(host_name, instance_uuids)

    def delete_instance_info(self, host_name: str, instance_uuid: str) -> None:
        self.host_manager.instance_tracker.delete_instance_info(host_name, instance_uuid)
        self.host_manager.release_deleted_instance(host_name, instance_uuid)
        if self.view is not None:
            # nova deletes an instance's allocations with DELETE /allocations, which leaves
            # the provider's generation as it was: read the host's providers again
            hosts = self.host_manager.host_states_for(host_name)
            self.view.mark_dirty(hs.uuid for hs in hosts if hs.uuid)

    def sync_instance_info(self, host_name: str, instance_uuids: list[str]) -> None:
        self.host_manager.instance_tracker.sync_instance_info(host_name, instance_uuids)
        self.host_manager.release_unlisted_instances(host_name, instance_uuids)


def status_lines(host_manager: HostSource, view_refresher: Any, now: float) -> dict[str, str]:
    """Lines for the Guru Meditation Report: each cell's host cache, the provider view."""
    out: dict[str, str] = {}
    for cell in host_manager.status():
        last = cell["last_ok_at"]
        out[f"cell {cell['name']}"] = (
            f"{cell['hosts']} host(s), last read "
            + (f"{now - last:.1f} s ago" if last else "never")
            + (", failing" if cell["failing"] else "")
        )
    if view_refresher is not None:
        view = view_refresher.status()
        out["provider view"] = (
            f"{view['source']} feed, {view['providers']} provider(s), "
            + (f"{view['age']:.1f} s old" if view["loaded"] else "not loaded")
            + f", {view['failures']} failed refresh(es)"
        )
    return out
