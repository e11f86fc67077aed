"""explain against a real cloud: the real Placement service, SQLite API and cell databases,
a fleet where known hosts are disabled, down or aarch64, and a running scheduler service.

Both ways in are checked: ``novasched-manage explain`` (in-process, with a config file) and
the ``explain_destinations`` RPC method of the running service. Every expectation is derived
from the fleet, never hard-coded; nothing may be claimed in Placement.
"""

from __future__ import annotations

import contextlib
import json
import uuid as uuidlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler.cmd import manage
from scheduler.objects import Flavor, ImageMeta, RequestSpec
from scheduler.rpc import wire
from scheduler.rpc.context import RequestContext
from tests.functional.fixtures_cloud import PROJECT, USER, Cloud, build_cloud

SMALL = "m1.small:2:2048:20"


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[tuple[Cloud, Path]]:
    tmp = Path(tmp_path_factory.mktemp("explain"))
    with contextlib.ExitStack() as stack:
        cloud = build_cloud(
            stack,
            tmp,
            api_kind="sqlite",
            cell_kinds=("sqlite",),
            hosts=24,
            seed=5,
            topic=f"scheduler-explain-{uuidlib.uuid4().hex[:10]}",
        )
        conf = tmp / "nova.conf"
        conf.write_text(
            "[api_database]\n"
            f"connection = {cloud.api_url}\n"
            "[placement]\n"
            "auth_type = noauth2\n"
            f"endpoint_override = {cloud.placement.endpoint}\n"
        )
        yield cloud, conf


def _arch_hosts(cloud: Cloud, trait: str) -> set[str]:
    return {p["name"] for p in cloud.fleet.providers if trait in p["traits"]}


def _expected(cloud: Cloud) -> dict[str, set[str]]:
    fleet = cloud.fleet
    enabled = set(fleet.hosts) - fleet.disabled_hosts
    aarch64 = _arch_hosts(cloud, "HW_ARCH_AARCH64")
    return {
        "candidates": enabled,
        "down": enabled & fleet.down_hosts,
        "arm": (enabled - fleet.down_hosts) & aarch64,
        "survivors": enabled - fleet.down_hosts - aarch64,
    }


def _explain(capsys, conf: Path, *argv: str) -> tuple[int, str]:
    rc = manage.main(["--config-file", str(conf), "explain", *argv])
    out, err = capsys.readouterr()
    assert rc != 1, err
    return rc, out


def _removed(doc: dict[str, Any], name: str) -> dict[str, set[str]]:
    """Hosts a filter removed, by reason."""
    step = next(f for f in doc["filters"] if f["name"] == name)
    out: dict[str, set[str]] = {}
    for h in step["hosts_out"]:
        out.setdefault(h["reason"], set()).add(h["host"])
    return out


def _allocations_total(cloud: Cloud) -> int:
    usages = 0
    for provider in cloud.fleet.providers:
        usages += sum(cloud.placement.get_usages(provider["uuid"]).values())
    return usages


def _check_document(cloud: Cloud, doc: dict[str, Any]) -> None:
    exp = _expected(cloud)
    assert doc["mode"] == "placement" and doc["no_valid_host"] is None
    # the disabled hosts are gone in Placement already (root_required=!COMPUTE_STATUS_DISABLED)
    assert "!COMPUTE_STATUS_DISABLED" in doc["placement"]["query"]
    assert doc["placement"]["candidates"] == len(exp["candidates"])
    assert doc["hosts"] == len(exp["candidates"])
    assert _removed(doc, "ComputeFilter") == {"service down": exp["down"]}
    (arm_reason,) = _removed(doc, "ImagePropertiesFilter")
    assert "x86_64" in arm_reason
    assert _removed(doc, "ImagePropertiesFilter")[arm_reason] == exp["arm"]
    weighed = [w["host"] for w in doc["weighed"]]
    assert set(weighed) == exp["survivors"] and len(weighed) == len(exp["survivors"])
    weights = [w["weight"] for w in doc["weighed"]]
    assert weights == sorted(weights, reverse=True)
    assert {"RAMWeigher", "CPUWeigher", "DiskWeigher"} <= set(doc["weighed"][0]["weighers"])
    pick = doc["pick"]
    assert pick["host"] == weighed[0]
    assert pick["availability_zone"] == (cloud.host_az(pick["host"]) or "nova")
    assert list(pick["allocation_request"]["allocations"]) == [
        next(p["uuid"] for p in cloud.fleet.providers if p["name"] == pick["host"])
    ]


def test_cli_json_explains_the_fleet_and_claims_nothing(world, capsys):
    cloud, conf = world
    before = _allocations_total(cloud)
    rc, out = _explain(
        capsys, conf, "--flavor", SMALL, "--image-props", "hw_architecture=x86_64", "--format",
        "json",
    )  # fmt: skip
    assert rc == 0
    doc = json.loads(out)
    _check_document(cloud, doc)
    assert doc["request"]["flavor"]["memory_mb"] == 2048
    assert doc["request"]["image"]["properties"] == {"hw_architecture": "x86_64"}
    assert _allocations_total(cloud) == before


def test_rpc_explain_destinations_gives_the_same_answer(world, capsys):
    cloud, _ = world
    before = _allocations_total(cloud)
    spec = RequestSpec(
        flavor=Flavor(name="m1.small", vcpus=2, memory_mb=2048, root_gb=20),
        image=ImageMeta(properties={"hw_architecture": "x86_64"}),
        project_id=PROJECT,
        user_id=USER,
    )
    ctxt = RequestContext(user_id=USER, project_id=PROJECT, request_id=f"req-{uuidlib.uuid4()}")
    doc = cloud.client.explain_destinations(ctxt, spec)
    _check_document(cloud, doc)
    assert _allocations_total(cloud) == before
    # all_hosts: Placement is not asked, the disabled hosts reach ComputeFilter
    doc = cloud.client.explain_destinations(ctxt, spec, all_hosts=True)
    fleet = cloud.fleet
    removed = _removed(doc, "ComputeFilter")
    assert doc["placement"] is None and doc["hosts"] == len(fleet.hosts)
    assert removed["service disabled"] == fleet.disabled_hosts
    assert removed["service down"] == fleet.down_hosts - fleet.disabled_hosts


def test_cli_text_with_all_hosts(world, capsys):
    cloud, conf = world
    rc, out = _explain(capsys, conf, "--flavor", SMALL, "--all-hosts", "--show", "50")
    assert rc == 0
    assert "Placement: not asked (--all-hosts)" in out
    assert f"Hosts considered: {len(cloud.fleet.hosts)}" in out
    disabled_line = next(line for line in out.splitlines() if "service disabled:" in line)
    assert disabled_line.strip().startswith(f"{len(cloud.fleet.disabled_hosts)} service disabled")
    for host in cloud.fleet.disabled_hosts:
        assert host in disabled_line
    assert out.rstrip().splitlines()[-1].startswith("Would choose: ")


def test_cli_with_all_hosts_explains_a_request_that_fits_nowhere(world, capsys):
    cloud, conf = world
    argv = ["--flavor", SMALL, "--all-hosts", "--image-props", "hw_architecture=s390x"]
    before = _allocations_total(cloud)
    rc, out = _explain(capsys, conf, *argv, "--format", "json")
    assert rc == 2  # NoValidHost, as without --all-hosts
    doc = json.loads(out)
    assert doc["mode"] == "all_hosts" and doc["placement"] is None
    assert doc["no_valid_host"] and doc["filters"][-1]["hosts_passed"] == 0
    change = doc["smallest_change"]
    assert change["placement_asked"] is False and change["tried"] >= 1
    # the image property the ImagePropertiesFilter compared, left out: the hosts the other
    # filters let through would take it
    survivors = _expected(cloud)["survivors"] | _expected(cloud)["arm"]
    left_out = {f["name"]: f for f in change["found"]}["hw_architecture"]
    assert left_out["kind"] == "image_property" and left_out["hosts"]
    assert {h["host"] for h in left_out["hosts"]} <= survivors
    assert left_out["hosts_opened"] >= len(left_out["hosts"])
    # a down host is never offered, to enable or otherwise
    offered = {h["host"] for f in change["found"] for h in f["hosts"]}
    assert offered and offered.isdisjoint(cloud.fleet.down_hosts)
    rc, text = _explain(capsys, conf, *argv)
    assert rc == 2
    assert "without image property hw_architecture" in text
    assert "Placement was not asked" in text
    assert _allocations_total(cloud) == before


def test_a_flavor_too_big_for_any_host_is_offered_the_largest_amount_that_fits(world, capsys):
    cloud, conf = world
    rc, out = _explain(capsys, conf, "--flavor", "m1.huge:2:4194304:20", "--format", "json")
    assert rc == 2
    doc = json.loads(out)
    assert doc["placement"]["candidates"] == 0  # Placement had none: no filter ran
    smaller = {c["name"]: c for c in doc["smallest_change"]["found"] if c["kind"] == "smaller"}
    ram = smaller["memory_mb"]
    assert ram["asked"] == 4194304 and 1 <= ram["amount"] < ram["asked"]
    assert ram["hosts_opened"] >= 1 and ram["hosts"]
    assert ram["change"] == (
        f"with memory_mb = {ram['amount']}, the largest that fits (asked 4194304)"
    )
    # the largest: that amount fits, one MB more does not
    fits = f"m1.fits:2:{ram['amount']}:20"
    rc, out = _explain(capsys, conf, "--flavor", fits, "--format", "json")
    assert rc == 0 and json.loads(out)["pick"] is not None
    rc, _ = _explain(capsys, conf, "--flavor", f"m1.over:2:{ram['amount'] + 1}:20")
    assert rc == 2


def test_cli_names_the_placement_term_that_emptied_the_answer(world, capsys):
    cloud, conf = world
    flavor = f"{SMALL}:trait:HW_ARCH_X86_64=required,trait:HW_ARCH_AARCH64=required"
    rc, out = _explain(capsys, conf, "--flavor", flavor, "--format", "json")
    assert rc == 2
    doc = json.loads(out)
    enabled = set(cloud.fleet.hosts) - cloud.fleet.disabled_hosts
    x86 = len(_arch_hosts(cloud, "HW_ARCH_X86_64") & enabled)
    arm = len(_arch_hosts(cloud, "HW_ARCH_AARCH64") & enabled)
    assert doc["placement"]["candidates"] == 0
    assert doc["placement"]["hint"] == (
        f"without required trait HW_ARCH_AARCH64 it would return {x86} hosts; "
        f"without required trait HW_ARCH_X86_64 it would return {arm} hosts"
    )
    assert doc["no_valid_host"].startswith("Placement returned no allocation candidates for ")
    assert doc["no_valid_host"].endswith(doc["placement"]["hint"])
    # the same hint reaches a real select_destinations' NoValidHost, when the operator lets
    # the explanation travel ([scheduler] novalidhost_detail)
    from scheduler.conf import CONF
    from scheduler.exceptions import NoValidHost

    CONF.set_override("novalidhost_detail", True, group="scheduler")

    spec = RequestSpec(
        flavor=Flavor(
            name="two-arch",
            vcpus=2,
            memory_mb=2048,
            root_gb=20,
            extra_specs={"trait:HW_ARCH_X86_64": "required", "trait:HW_ARCH_AARCH64": "required"},
        ),
        project_id=PROJECT,
        user_id=USER,
    )
    with pytest.raises(NoValidHost) as info:
        cloud.client.select_destinations(
            RequestContext(request_id="req-two-arch"), spec, [str(uuidlib.uuid4())], True, True
        )
    assert doc["placement"]["hint"] in info.value.reason


def test_cli_request_file_nova_primitive_and_short_form(world, capsys, tmp_path):
    cloud, conf = world
    spec = RequestSpec(
        flavor=Flavor(name="m1.small", vcpus=2, memory_mb=2048, root_gb=20),
        image=ImageMeta(properties={"hw_architecture": "x86_64"}),
        project_id=PROJECT,
        user_id=USER,
    )
    nova = tmp_path / "spec.json"
    nova.write_text(json.dumps({"spec_obj": wire.request_spec_to_primitive(spec)}))
    rc, out = _explain(capsys, conf, "--request", str(nova), "--format", "json")
    assert rc == 0
    _check_document(cloud, json.loads(out))

    short = tmp_path / "short.json"
    short.write_text(json.dumps({"flavor": SMALL, "image_props": {"hw_architecture": "aarch64"}}))
    rc, out = _explain(capsys, conf, "--request", str(short), "--format", "json")
    assert rc == 0
    doc = json.loads(out)
    exp = _expected(cloud)
    assert {w["host"] for w in doc["weighed"]} == exp["arm"]

    rc = manage.main(["--config-file", str(conf), "explain", "--request", str(tmp_path / "no")])
    assert rc == 1
    assert "cannot read --request" in capsys.readouterr().err
