"""A change made through an API is seen by the very next boot, as nova 34's scheduler sees it.

nova-scheduler reads services, traits and aggregates per request, so a boot sent right after
``PUT /os-services/{id}``, a trait set in Placement or an aggregate change already obeys it.
Each test changes one thing, boots at once (no wait), and puts the thing back.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.deployment.deployment import ApiError, Deployment, wait_for

# the first test also waits for the deployment (and, on a fresh machine, nova's install)
pytestmark = [pytest.mark.functional, pytest.mark.timeout(600)]

AZ_MAIN = ("dep-c1", "dep-c2")
TRAIT = "CUSTOM_DEPLOYMENT_FRESH"


def _set_status(cloud: Deployment, host: str, status: str) -> None:
    cloud.admin.put(f"/os-services/{cloud.service_id(host)}", {"status": status})


def test_disabled_compute_gets_no_boot_sent_right_after(deployment: Deployment):
    flavor = deployment.flavor("small")
    preferred = deployment.preferred_host(AZ_MAIN)
    (other,) = set(AZ_MAIN) - {preferred}
    _set_status(deployment, preferred, "disabled")
    try:
        servers = [deployment.boot_and_wait(flavor, name=f"after-disable-{i}") for i in range(3)]
    finally:
        _set_status(deployment, preferred, "enabled")

    assert [deployment.expect_active(s) for s in servers] == [other] * 3


def test_enabled_compute_takes_a_boot_sent_right_after(deployment: Deployment):
    # an anti-affinity group decides, not the weighers (which host they prefer depends on
    # every boot before): once its first member holds the other host, the next member fits
    # only on the host enabled just before it is sent
    flavor = deployment.flavor("small")
    group = deployment.tenant.post(
        "/os-server-groups", {"server_group": {"name": "fresh-enable", "policy": "anti-affinity"}}
    )["server_group"]
    hints = {"group": group["id"]}
    enabled, other = AZ_MAIN
    _set_status(deployment, enabled, "disabled")
    try:
        # (nova-api refuses a zone whose every host is disabled, so the zone keeps another)
        first = deployment.boot_and_wait(flavor, name="apart-while-disabled", hints=hints)
    finally:
        _set_status(deployment, enabled, "enabled")

    second = deployment.boot_and_wait(flavor, name="apart-after-enable", hints=hints)

    assert deployment.expect_active(first) == other
    assert deployment.expect_active(second) == enabled


def _put_traits(cloud: Deployment, host: str, change: Callable[[set[str]], set[str]]) -> None:
    rp = cloud.provider_uuid(host)

    def put() -> bool:
        current = cloud.placement_api.get(f"/resource_providers/{rp}/traits")
        body = {
            "traits": sorted(change(set(current["traits"]))),
            "resource_provider_generation": current["resource_provider_generation"],
        }
        try:
            cloud.placement_api.put(f"/resource_providers/{rp}/traits", body)
        except ApiError as exc:
            if exc.status == 409:  # nova-compute updated the provider meanwhile
                return False
            raise
        return True

    wait_for(f"the traits of {host} to be set", put, 20)


def test_custom_trait_set_in_placement_decides_the_very_next_boot(deployment: Deployment):
    deployment.placement_api.put(f"/traits/{TRAIT}", ok=(201, 204))
    forbidden = deployment.flavor("trait-forbidden", **{f"trait:{TRAIT}": "forbidden"})
    required = deployment.flavor("trait-required", **{f"trait:{TRAIT}": "required"})
    preferred = deployment.preferred_host(AZ_MAIN)
    (other,) = set(AZ_MAIN) - {preferred}

    # on the host the weighers prefer: a forbidding flavor goes to the other
    _put_traits(deployment, preferred, lambda traits: traits | {TRAIT})
    try:
        avoided = deployment.boot_and_wait(forbidden, name="trait-forbidden")
    finally:
        _put_traits(deployment, preferred, lambda traits: traits - {TRAIT})
    # on the other host: a requiring flavor goes there, not to the preferred one
    _put_traits(deployment, other, lambda traits: traits | {TRAIT})
    try:
        chosen = deployment.boot_and_wait(required, name="trait-required")
    finally:
        _put_traits(deployment, other, lambda traits: traits - {TRAIT})

    assert deployment.expect_active(avoided) == other
    assert deployment.expect_active(chosen) == other


def test_host_added_to_an_aggregate_takes_the_very_next_matching_boot(deployment: Deployment):
    flavor = deployment.flavor("gpu", **{"aggregate_instance_extra_specs:gpu": "true"})
    agg = deployment.admin.post("/os-aggregates", {"aggregate": {"name": "gpu"}})["aggregate"]
    action = f"/os-aggregates/{agg['id']}/action"
    deployment.admin.post(action, {"set_metadata": {"metadata": {"gpu": "true"}}})
    deployment.admin.post(action, {"add_host": {"host": "dep-c2"}})
    try:
        server = deployment.boot_and_wait(flavor, name="gpu")
    finally:
        deployment.admin.post(action, {"remove_host": {"host": "dep-c2"}})
        deployment.admin.delete(f"/os-aggregates/{agg['id']}")

    assert deployment.expect_active(server) == "dep-c2"
