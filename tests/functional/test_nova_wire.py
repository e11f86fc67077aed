"""nova 34's own conductor-side code talks to novasched over the real RabbitMQ broker.

nova's `SchedulerAPI.select_destinations` (nova.scheduler.rpcapi), with RequestSpecs built by
nova's `RequestSpec.from_components`, runs in a separate venv holding the published nova 34.0.0
(see fixtures_nova.py). It must get back nova `Selection` objects it can use, nova's legacy
dicts at return_objects=False, and — the conductor's contract — a failure that it catches as
its own `nova.exception.NoValidHost`.
"""

from __future__ import annotations

import contextlib
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud
from tests.functional.fixtures_nova import ensure_nova_venv, nova_conductor_call


@pytest.fixture(scope="module")
def nova_python() -> Path:
    return ensure_nova_venv()


@pytest.fixture(scope="module")
def cloud(tmp_path_factory) -> Iterator[Cloud]:
    with contextlib.ExitStack() as stack:
        yield build_cloud(
            stack,
            Path(tmp_path_factory.mktemp("nova-wire")),
            api_kind="sqlite",
            cell_kinds=("sqlite", "sqlite"),
            hosts=16,
            # nova's client always sends to topic "scheduler": isolate by exchange
            exchange=f"nova-wire-{uuidlib.uuid4().hex[:8]}",
        )


def _call(nova_python: Path, cloud: Cloud, **kw) -> dict:
    args = {
        "transport_url": cloud.transport_url,
        "exchange": cloud.exchange,
        "user_id": USER,
        "project_id": PROJECT,
        "request_id": f"req-{uuidlib.uuid4()}",
        "flavor": {"name": "m1.small", "vcpus": 1, "memory_mb": 512, "root_gb": 1},
        "count": 1,
    }
    args.update(kw)
    return nova_conductor_call(nova_python, **args)


def test_nova_conductor_gets_selection_objects_and_the_claim_exists(nova_python, cloud):
    out = _call(nova_python, cloud, count=2, anti_affinity=True)
    assert len(out["selections"]) == 2
    chosen = [sels[0] for sels in out["selections"]]
    assert len({c["service_host"] for c in chosen}) == 2  # anti-affinity, decoded from nova
    for instance, sels in zip(out["instance_uuids"], out["selections"], strict=True):
        first = sels[0]
        assert first["type"] == "Selection"
        assert first["service_host"] not in cloud.unusable
        assert first["allocation_request_version"] == "1.36"
        assert first["compute_node_uuid"] in first["allocation_request"]["allocations"]
        assert first["cell_uuid"] == cloud.host_cell(first["service_host"])
        allocs = cloud.placement.get_allocations_for_consumer(instance)["allocations"]
        assert list(allocs) == [first["compute_node_uuid"]]
        for alt in sels[1:]:
            assert alt["cell_uuid"] == first["cell_uuid"]


def test_nova_conductor_gets_legacy_dicts(nova_python, cloud):
    out = _call(nova_python, cloud, return_objects=False, return_alternates=False)
    [legacy] = out["legacy"]
    assert set(legacy) == {"host", "nodename", "limits"}
    assert legacy["host"] not in cloud.unusable


def test_nova_conductor_catches_its_own_no_valid_host(nova_python, cloud):
    out = _call(
        nova_python,
        cloud,
        flavor={"name": "huge", "vcpus": 1, "memory_mb": 64 * 1024 * 1024, "root_gb": 1},
    )
    nvh = out["no_valid_host"]
    assert nvh["is_nova_no_valid_host"]
    # oslo.messaging rebuilds a remote exception as a subclass of the allowed original
    assert nvh["class"] == "nova.exception_Remote.NoValidHost_Remote"
    assert "Placement returned no allocation candidates" in nvh["message"]


def test_filter_reasons_reach_nova_conductor(nova_python, cloud):
    out = _call(nova_python, cloud, image_properties={"hw_architecture": "ppc64le"})
    message = out["no_valid_host"]["message"]
    assert "hosts available" in message and "ImagePropertiesFilter" in message
