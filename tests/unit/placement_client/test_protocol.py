"""Every Placement the driver can be handed has each member of the ``Placement`` Protocol,
with its parameters: the HTTP client, the what-if replay's Placement and the tests' stand-in.
A member added to the Protocol and forgotten in one of them fails here, not in production."""

from __future__ import annotations

import inspect

import pytest

from placement_client.api import Placement, PlacementClient
from scheduler.replay.fleet import ReplayPlacement
from tests.unit.scheduler.drivers.fakes import FakePlacement


def _members() -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(Placement).items()
        if not name.startswith("_") and callable(member)
    }


def test_the_protocol_lists_the_request_paths_calls():
    assert {"get_allocation_candidates", "claim_resources", "get_allocations_for_consumer"} <= set(
        _members()
    )


@pytest.mark.parametrize("cls", [PlacementClient, ReplayPlacement, FakePlacement])
def test_each_placement_has_every_member_with_its_parameters(cls):
    for name, wanted in _members().items():
        member = getattr(cls, name, None)
        assert member is not None, f"{cls.__name__} has no {name}"
        got = inspect.signature(member).parameters
        for param in wanted.parameters.values():
            if param.name == "self":
                continue
            assert param.name in got, f"{cls.__name__}.{name} lacks {param.name}"
            if param.kind is inspect.Parameter.KEYWORD_ONLY:
                assert got[param.name].kind in (
                    inspect.Parameter.KEYWORD_ONLY,
                    inspect.Parameter.POSITIONAL_OR_KEYWORD,
                ), f"{cls.__name__}.{name}: {param.name} is not a keyword"
