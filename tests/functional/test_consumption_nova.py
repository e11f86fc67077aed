"""Our consumption of an instance ends when nova says the instance left its host.

nova 34's own conductor client (``SchedulerAPI.select_destinations``) boots, and nova's own
``SchedulerQueryClient`` casts ``delete_instance_info`` as nova-compute does when an
instance goes away, over the real RabbitMQ broker, to a running novasched (see
fixtures_nova.py). nova rebuilds its HostStates from the compute nodes on every request, so
after such a delete its next boot goes where it would have gone before the instance: ours
must too, even though the compute node never wrote a newer report. The same when Placement
alone lost the instances' allocations (no cast, no report): nova counts nothing of them, and
Placement's allocation is what says an instance is still pending on a host.
"""

# ruff: noqa: F811 - the nova_python fixture is imported by name; tests take it by that name

from __future__ import annotations

import contextlib
import time
import uuid as uuidlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud
from tests.functional.fixtures_nova import (  # noqa: F401 - nova_python is a fixture
    nova_conductor_call,
    nova_instance_info,
    nova_python,
)


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    with contextlib.ExitStack() as stack:
        yield build_cloud(
            stack,
            Path(tmp_path_factory.mktemp("nova-consumption")),
            api_kind="sqlite",
            cell_kinds=("sqlite",),
            hosts=16,
            # nova's client always sends to topic "scheduler": isolate by exchange
            exchange=f"nova-consumption-{uuidlib.uuid4().hex[:8]}",
        )


def _wire(cloud: Cloud) -> dict:
    return {"transport_url": cloud.transport_url, "exchange": cloud.exchange}


def _boot(nova_python: Path, cloud: Cloud, memory_mb: int, **more: object) -> tuple[str, str]:
    """One boot through nova's conductor client (``more``: its other arguments, such as
    an anti-affinity group): (instance uuid, host)."""
    out = nova_conductor_call(
        nova_python,
        **_wire(cloud),
        user_id=USER,
        project_id=PROJECT,
        request_id=f"req-{uuidlib.uuid4()}",
        flavor={"name": "m1.half", "vcpus": 1, "memory_mb": memory_mb, "root_gb": 1},
        count=1,
        return_alternates=False,
        **more,
    )
    assert "selections" in out, out
    return out["instance_uuids"][0], out["selections"][0][0]["service_host"]


def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


def test_after_nova_deletes_an_instance_the_next_boot_goes_to_its_host_again(nova_python, cloud):
    host_manager = cloud.service.driver.host_manager

    def free_ram(host: str) -> int:
        (hs,) = host_manager.host_states_for(host)
        return hs.free_ram_mb

    usable = [h for h in cloud.fleet.hosts if h not in cloud.unusable]
    before = {h: free_ram(h) for h in usable}
    # half the roomiest host's free RAM: the host that takes it becomes a poor choice
    memory_mb = max(before.values()) // 2 // 256 * 256

    first, host = _boot(nova_python, cloud, memory_mb)
    second, other = _boot(nova_python, cloud, memory_mb)
    assert other != host, "our consumption of the first instance counts on its host"

    # both instances are deleted before their hosts report them, as nova-compute tells it
    for name, instance in ((host, first), (other, second)):
        nova_instance_info(
            nova_python, **_wire(cloud), op="delete", host=name, instance_uuid=instance
        )
        cloud.placement.delete_allocation_for_instance(instance)
    _until(lambda: free_ram(host) == before[host] and free_ram(other) == before[other])

    third, again = _boot(nova_python, cloud, memory_mb)
    try:
        # nova, which rebuilds its HostStates per request, goes there too
        assert again == host
        assert free_ram(other) == before[other]
    finally:
        cloud.placement.delete_allocation_for_instance(third)


def test_claims_placement_no_longer_holds_are_not_counted_by_the_next_request(nova_python, cloud):
    """Issue 30 (1), nova's instance-info flow after others: instances scheduled through us
    lose their allocations in Placement with no compute ever reporting them and no cast;
    an anti-affinity member is then placed, deleted as nova-compute deletes it, and the
    next member must go where nova puts it: where the first boot went from the same state,
    as nothing those instances asked for is held any more."""
    host_manager = cloud.service.driver.host_manager

    def free_ram(host: str) -> int:
        (hs,) = host_manager.host_states_for(host)
        return hs.free_ram_mb

    usable = [h for h in cloud.fleet.hosts if h not in cloud.unusable]
    memory_mb = max(free_ram(h) for h in usable) // 2 // 256 * 256

    # several instances; the first lands where nova's first boot from this state would
    placed = [_boot(nova_python, cloud, memory_mb) for _ in range(3)]
    first_host = placed[0][1]

    def counted(instance: str, host: str) -> bool:
        return any(instance in hs.consumptions() for hs in host_manager.host_states_for(host))

    assert all(counted(i, h) for i, h in placed)
    # Placement loses their allocations; no compute reports, nothing is cast
    for instance, _host in placed:
        cloud.placement.delete_allocation_for_instance(instance)

    group = {"uuid": str(uuidlib.uuid4()), "members": [], "hosts": []}
    member, member_host = _boot(nova_python, cloud, memory_mb, anti_affinity=True, group=group)
    try:
        # nothing of the three weighs on any host any more: the same host as the first boot
        assert member_host == first_host
        assert not any(counted(i, h) for i, h in placed)
    finally:
        # nova deletes the member: its row, its allocation, then the cast
        nova_instance_info(
            nova_python, **_wire(cloud), op="delete", host=member_host, instance_uuid=member
        )
        cloud.placement.delete_allocation_for_instance(member)
    group["members"] = [member]  # the conductor lists no host for a deleted member

    nxt, nxt_host = _boot(nova_python, cloud, memory_mb, anti_affinity=True, group=group)
    try:
        assert nxt_host == first_host
    finally:
        cloud.placement.delete_allocation_for_instance(nxt)
