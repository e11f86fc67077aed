"""Last of the suite: deleting every server leaves no allocation in Placement."""

from __future__ import annotations

import pytest

from tests.deployment.deployment import ApiError, Deployment, wait_for

# the first test also waits for the deployment (and, on a fresh machine, nova's install)
pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]


def _gone(cloud: Deployment, server_id: str) -> bool:
    try:
        cloud.admin.get(f"/servers/{server_id}")
    except ApiError as exc:
        return exc.status == 404
    return False


def test_deleting_every_server_leaves_no_allocation(deployment: Deployment):
    listed = deployment.admin.get("/servers?all_tenants=1")["servers"]
    server_ids = set(deployment.server_ids) | {s["id"] for s in listed}
    migrations = deployment.admin.get("/os-migrations")["migrations"]

    for server_id in server_ids:
        deployment.admin.delete(f"/servers/{server_id}", ok=(204, 404))
    remaining = set(server_ids)

    def all_gone() -> bool:
        remaining.difference_update({i for i in list(remaining) if _gone(deployment, i)})
        return not remaining

    wait_for("every server to be deleted", all_gone, 90, 0.5)

    for consumer in server_ids | {m["uuid"] for m in migrations}:
        assert deployment.allocations(consumer) == {}, consumer
    # every provider: the compute nodes', their PCI devices' and the agents' bridges
    providers = deployment.placement_api.get("/resource_providers")["resource_providers"]
    assert set(deployment.hosts) <= {p["name"] for p in providers}
    for provider in providers:
        rp, name = provider["uuid"], provider["name"]
        usages = deployment.placement_api.get(f"/resource_providers/{rp}/usages")["usages"]
        assert set(usages.values()) <= {0}, (name, usages)
        allocs = deployment.placement_api.get(f"/resource_providers/{rp}/allocations")
        assert allocs["allocations"] == {}, (name, allocs)
