"""Our consumption of an instance ends when nova says the instance left its host.

nova 34's own conductor client (``SchedulerAPI.select_destinations``) boots, and nova's own
``SchedulerQueryClient`` casts ``delete_instance_info`` as nova-compute does when an
instance goes away, over the real RabbitMQ broker, to a running novasched (see
fixtures_nova.py). nova rebuilds its HostStates from the compute nodes on every request, so
after such a delete its next boot goes where it would have gone before the instance: ours
must too, even though the compute node never wrote a newer report.
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


def _boot(nova_python: Path, cloud: Cloud, memory_mb: int) -> tuple[str, str]:
    """One unconstrained boot through nova's conductor client: (instance uuid, host)."""
    out = nova_conductor_call(
        nova_python,
        **_wire(cloud),
        user_id=USER,
        project_id=PROJECT,
        request_id=f"req-{uuidlib.uuid4()}",
        flavor={"name": "m1.half", "vcpus": 1, "memory_mb": memory_mb, "root_gb": 1},
        count=1,
        return_alternates=False,
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
