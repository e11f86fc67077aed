"""Placement providers for the provider view's functional tests (the database feed against
the HTTP API): a fresh fleet of a few providers with a consumer, and claims on them.
The fixtures made of them (``placement``, ``client``, ``fleet``) are in conftest.py."""

from __future__ import annotations

import uuid
from types import SimpleNamespace

from placement_client.api import PlacementClient, ProviderSpec

PROJECT = "p-" + uuid.uuid4().hex[:8]
USER = "u-" + uuid.uuid4().hex[:8]
GPU = "CUSTOM_DBFEED_GPU"


def new_uuid() -> str:
    return str(uuid.uuid4())


def provider_inventories(vcpu: int = 8) -> dict:
    return {
        "VCPU": {"total": vcpu, "max_unit": vcpu, "allocation_ratio": 4.0},
        "MEMORY_MB": {"total": 8192, "reserved": 512, "max_unit": 8192, "allocation_ratio": 1.5},
        "DISK_GB": {"total": 100, "max_unit": 50, "step_size": 5, "min_unit": 5},
    }


def make_fleet(client: PlacementClient, n: int = 3) -> SimpleNamespace:
    """``n`` root providers in one fresh aggregate, a GPU child under the first, and a
    consumer on the first root and its child."""
    agg = new_uuid()
    roots = [new_uuid() for _ in range(n)]
    child = new_uuid()
    specs = [
        ProviderSpec(
            rp,
            f"dbfeed-{rp[:8]}",
            provider_inventories(),
            traits=["CUSTOM_DBFEED", "HW_CPU_X86_AVX2"],
            aggregates=[agg],
        )
        for rp in roots
    ]
    specs.append(
        ProviderSpec(child, f"dbfeed-gpu-{child[:8]}", {GPU: 4}, parent_provider_uuid=roots[0])
    )
    client.create_providers_bulk(specs, workers=4)
    consumer = new_uuid()
    claim(client, consumer, {roots[0]: {"VCPU": 2, "MEMORY_MB": 1024}, child: {GPU: 1}})
    # every provider made, parents before children (for the clean-up)
    providers = [*roots, child]
    return SimpleNamespace(
        roots=roots, child=child, agg=agg, consumer=consumer, providers=providers
    )


def claim(client: PlacementClient, consumer: str, allocations: dict[str, dict[str, int]]) -> None:
    request = {"allocations": {rp: {"resources": res} for rp, res in allocations.items()}}
    client.claim_resources(consumer, request, PROJECT, USER)
