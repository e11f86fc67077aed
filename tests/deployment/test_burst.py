"""A burst of parallel boots: every server ACTIVE, no provider over-committed."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.deployment.deployment import Deployment, host_of, wait_for

# the first test also waits for the deployment (and, on a fresh machine, nova's install)
pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

BURST = 16
THREADS = 4


def test_parallel_boots_all_become_active_without_over_commit(deployment: Deployment):
    flavor = deployment.flavor("burst", ram=4096, vcpus=1)

    with ThreadPoolExecutor(max_workers=THREADS) as pool:
        ids = [
            server_id
            for batch in pool.map(
                lambda i: deployment.boot(flavor, name=f"burst-{i}"), range(BURST)
            )
            for server_id in batch
        ]
        servers = list(pool.map(lambda i: deployment.wait_server(i, timeout=180), ids))

    hosts = [deployment.expect_active(s, {"dep-c1", "dep-c2"}) for s in servers]
    # 16 x 4 GiB does not fit on one host of the zone (48 GiB each, with what is there already)
    assert len(set(hosts)) == 2, hosts
    for server in servers:
        assert deployment.host_allocations_match(server), (server["id"], host_of(server))
    for host in deployment.hosts:
        _assert_not_over_committed(deployment, host)
    # give the room back to the flows that follow
    for server_id in ids:
        deployment.admin.delete(f"/servers/{server_id}", ok=(204,))
    wait_for(
        "the burst's allocations to go",
        lambda: all(deployment.allocations(i) == {} for i in ids),
        60,
        0.5,
    )


def _assert_not_over_committed(cloud: Deployment, host: str) -> None:
    rp = cloud.provider_uuid(host)
    inventories = cloud.placement_api.get(f"/resource_providers/{rp}/inventories")["inventories"]
    usages = cloud.placement_api.get(f"/resource_providers/{rp}/usages")["usages"]
    for rc, used in usages.items():
        inv = inventories[rc]
        capacity = (inv["total"] - inv["reserved"]) * inv["allocation_ratio"]
        assert used <= capacity, f"{host} {rc}: {used} used of {capacity}"
