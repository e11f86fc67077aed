"""The prefilters that ask Neutron: routed networks (segment aggregates as member_of) and
remote-managed ports (COMPUTE_REMOTE_MANAGED_PORTS), as nova 34's request filters.

Neutron and Placement are fakes here (the prefilter module's two clients); the flow against
real servers is tests/functional/test_routed_networks.py.
"""

from __future__ import annotations

import logging

import os_traits
import pytest

from placement_client import neutron
from placement_client.api.errors import PlacementClientError, PlacementConnectionError
from scheduler.conf import CONF
from scheduler.drivers import request_filters as request_filter
from scheduler.exceptions import RequestFilterFailed
from scheduler.objects import Destination, Flavor, RequestSpec

NET_ROUTED = "net-routed"
NET_PLAIN = "net-plain"
NET_OTHER = "net-other"


class FakeNeutron:
    """What NeutronClient answers, from dicts; records the calls."""

    def __init__(self) -> None:
        self.network_segments = {
            NET_ROUTED: ["seg-a", "seg-b"],
            NET_PLAIN: [],
            NET_OTHER: ["seg-c"],
        }
        self.subnet_segments = {"sub-a": "seg-a", "sub-plain": None}
        self.ports: dict[str, dict] = {
            "port-bound": {"network_id": NET_ROUTED, "fixed_ips": [{"subnet_id": "sub-a"}]},
            "port-new": {"network_id": NET_ROUTED, "fixed_ips": []},
            "port-plain": {"network_id": NET_PLAIN, "fixed_ips": [{"subnet_id": "sub-plain"}]},
            "port-dpu": {"network_id": NET_PLAIN, "binding:vnic_type": "remote-managed"},
            "port-sriov": {"network_id": NET_PLAIN, "binding:vnic_type": "direct"},
        }
        self.fail: Exception | None = None
        self.calls: list[tuple[str, str]] = []

    def _call(self, name: str, arg: str) -> None:
        self.calls.append((name, arg))
        if self.fail is not None:
            raise self.fail

    def show_port(self, port_id, request_id=None):
        self._call("show_port", port_id)
        if port_id not in self.ports:
            raise neutron.NeutronNotFound(f"Neutron has no port {port_id} (404)")
        return self.ports[port_id]

    def is_remote_managed_port(self, port_id, request_id=None):
        port = self.show_port(port_id, request_id)
        return port.get("binding:vnic_type", "normal") == "remote-managed"

    def segment_ids_for_network(self, network_id, request_id=None):
        self._call("segments", network_id)
        return list(self.network_segments.get(network_id, []))

    def segment_id_for_subnet(self, subnet_id, request_id=None):
        self._call("subnet", subnet_id)
        return self.subnet_segments[subnet_id]


class FakePlacement:
    """GET /resource_providers/{uuid}/aggregates from a dict."""

    def __init__(self) -> None:
        self.aggregates = {
            "seg-a": ["agg-a"],
            "seg-b": ["agg-b2", "agg-b1", "agg-a"],
            "seg-c": ["agg-c"],
        }
        self.fail: Exception | None = None
        self.calls: list[str] = []

    def get_aggregates(self, uuid, request_id=None):
        self.calls.append(uuid)
        if self.fail is not None:
            raise self.fail
        if uuid not in self.aggregates:
            raise PlacementClientError(
                f"GET /resource_providers/{uuid}/aggregates: 404", status=404
            )
        return list(self.aggregates[uuid])


@pytest.fixture
def clients(monkeypatch):
    fake_neutron, fake_placement = FakeNeutron(), FakePlacement()
    monkeypatch.setattr(request_filter, "_neutron_client", lambda conf: fake_neutron)
    monkeypatch.setattr(request_filter, "_placement_client", lambda conf: fake_placement)
    CONF.set_override("endpoint_override", "http://neutron.invalid:9696", group="neutron")
    return fake_neutron, fake_placement


@pytest.fixture
def routed(clients):
    CONF.set_override("query_placement_for_routed_network_aggregates", True, group="scheduler")
    return clients


def _spec(*networks: dict, **kw) -> RequestSpec:
    requested = [{"network_id": None, "port_id": None, **n} for n in networks]
    return RequestSpec(
        flavor=Flavor(memory_mb=512, vcpus=1), project_id="p", requested_networks=requested, **kw
    )


# ----------------------------------------------------------------- routed_networks_filter


def test_routed_networks_filter_is_off_by_default(clients):
    fake_neutron, _ = clients
    spec = _spec({"network_id": NET_ROUTED})
    assert request_filter.routed_networks_filter(spec, None, CONF) is False
    assert spec.requested_destination is None and fake_neutron.calls == []


def test_a_routed_network_requires_one_of_its_segments_aggregates(routed):
    fake_neutron, fake_placement = routed
    spec = _spec({"network_id": NET_ROUTED})
    assert request_filter.routed_networks_filter(spec, None, CONF) is True
    # one OR-set: any segment of the network will do; each aggregate once
    assert spec.requested_destination.aggregates == ["agg-a,agg-b1,agg-b2"]
    assert fake_neutron.calls == [("segments", NET_ROUTED)]
    assert fake_placement.calls == ["seg-a", "seg-b"]


def test_each_requested_network_is_anded_after_the_aggregates_already_required(routed):
    spec = _spec({"network_id": NET_ROUTED}, {"network_id": NET_OTHER})
    spec.requested_destination = Destination(aggregates=["agg-az"])
    assert request_filter.routed_networks_filter(spec, None, CONF) is True
    assert spec.requested_destination.aggregates == ["agg-az", "agg-a,agg-b1,agg-b2", "agg-c"]


def test_a_port_with_an_address_stays_on_its_subnets_segment(routed):
    fake_neutron, fake_placement = routed
    spec = _spec({"port_id": "port-bound"})
    assert request_filter.routed_networks_filter(spec, None, CONF) is True
    assert spec.requested_destination.aggregates == ["agg-a"]
    assert fake_neutron.calls == [("show_port", "port-bound"), ("subnet", "sub-a")]
    assert fake_placement.calls == ["seg-a"]


def test_a_port_without_an_address_may_use_any_segment_of_its_network(routed):
    fake_neutron, _ = routed
    spec = _spec({"port_id": "port-new", "network_id": NET_OTHER})
    request_filter.routed_networks_filter(spec, None, CONF)
    # the port's network, not the entry's network_id
    assert spec.requested_destination.aggregates == ["agg-a,agg-b1,agg-b2"]
    assert fake_neutron.calls == [("show_port", "port-new"), ("segments", NET_ROUTED)]


def test_networks_and_subnets_without_segments_add_nothing(routed):
    spec = _spec({"network_id": NET_PLAIN}, {"port_id": "port-plain"})
    assert request_filter.routed_networks_filter(spec, None, CONF) is False
    assert spec.requested_destination is None


def test_auto_none_and_empty_entries_ask_neutron_nothing(routed):
    fake_neutron, _ = routed
    spec = _spec({"network_id": "auto"}, {"network_id": "none"}, {"address": "10.0.0.4"})
    assert request_filter.routed_networks_filter(spec, None, CONF) is False
    assert request_filter.routed_networks_filter(_spec(), None, CONF) is False
    assert fake_neutron.calls == []


def test_a_segment_in_no_aggregate_fails_the_request(routed):
    _, fake_placement = routed
    fake_placement.aggregates["seg-b"] = []
    spec = _spec({"network_id": NET_ROUTED})
    with pytest.raises(
        RequestFilterFailed, match=f"Aggregates not found for the network {NET_ROUTED}"
    ):
        request_filter.routed_networks_filter(spec, None, CONF)


def test_a_segment_placement_does_not_know_fails_the_request(routed):
    _, fake_placement = routed
    del fake_placement.aggregates["seg-a"]
    with pytest.raises(RequestFilterFailed, match="Aggregates not found for the subnet sub-a.*404"):
        request_filter.routed_networks_filter(_spec({"port_id": "port-bound"}), None, CONF)


def test_placement_unreachable_fails_the_request_with_the_reason_logged(routed, caplog):
    _, fake_placement = routed
    fake_placement.fail = PlacementConnectionError(
        "Placement at http://p:8778 refused the connection"
    )
    spec = _spec({"network_id": NET_ROUTED})
    with caplog.at_level(logging.WARNING, logger="scheduler.drivers.request_filters"):
        with pytest.raises(RequestFilterFailed, match="refused the connection"):
            request_filter.routed_networks_filter(spec, None, CONF)
    assert "Aggregates not found for the network net-routed" in caplog.text


@pytest.mark.parametrize("entry", [{"network_id": NET_ROUTED}, {"port_id": "port-bound"}])
def test_neutron_failure_fails_the_request_with_the_reason_logged(routed, caplog, entry):
    fake_neutron, _ = routed
    fake_neutron.fail = neutron.NeutronError("Neutron is unreachable asking for x: refused")
    with caplog.at_level(logging.WARNING, logger="scheduler.drivers.request_filters"):
        with pytest.raises(RequestFilterFailed, match="Neutron is unreachable"):
            request_filter.routed_networks_filter(_spec(entry), None, CONF)
    assert "Neutron is unreachable" in caplog.text


def test_unknown_port_fails_the_request(routed):
    with pytest.raises(RequestFilterFailed, match="port port-gone.*no port port-gone"):
        request_filter.routed_networks_filter(_spec({"port_id": "port-gone"}), None, CONF)


def test_routed_networks_without_neutron_configured_fail_and_are_warned_about(caplog):
    CONF.set_override("query_placement_for_routed_network_aggregates", True, group="scheduler")
    with caplog.at_level(logging.WARNING, logger="scheduler.drivers.request_filters"):
        assert request_filter.warn_unimplemented_toggles(CONF) == [
            "query_placement_for_routed_network_aggregates"
        ]
        with pytest.raises(RequestFilterFailed, match=r"Neutron is not configured"):
            request_filter.routed_networks_filter(_spec({"network_id": NET_ROUTED}), None, CONF)
    assert "needs Neutron" in caplog.text
    # no network named: nothing to ask, nothing to fail
    assert request_filter.routed_networks_filter(_spec({"network_id": "none"}), None, CONF) is False
    CONF.set_override("endpoint_override", "http://127.0.0.1:9696", group="neutron")
    assert request_filter.warn_unimplemented_toggles(CONF) == []


# ------------------------------------------------------------ remote_managed_ports_filter


def test_a_remote_managed_port_requires_the_trait(clients):
    fake_neutron, _ = clients
    spec = _spec({"port_id": "port-sriov"}, {"network_id": NET_PLAIN}, {"port_id": "port-dpu"})
    assert request_filter.remote_managed_ports_filter(spec, None, CONF) is True
    assert spec.root_required == {os_traits.COMPUTE_REMOTE_MANAGED_PORTS}
    assert os_traits.COMPUTE_REMOTE_MANAGED_PORTS == "COMPUTE_REMOTE_MANAGED_PORTS"
    # every port is looked at, as nova does; networks are not
    assert fake_neutron.calls == [("show_port", "port-sriov"), ("show_port", "port-dpu")]


def test_ports_that_are_not_remote_managed_add_nothing(clients):
    fake_neutron, _ = clients
    spec = _spec({"port_id": "port-sriov"}, {"port_id": "port-new"})
    assert request_filter.remote_managed_ports_filter(spec, None, CONF) is False
    assert spec.root_required == set()
    assert (
        request_filter.remote_managed_ports_filter(_spec({"network_id": NET_PLAIN}), None, CONF)
        is False
    )
    assert len(fake_neutron.calls) == 2  # the network-only request asked nothing


def test_a_port_neutron_cannot_show_fails_the_request(clients):
    with pytest.raises(RequestFilterFailed, match="vnic_type of port port-gone"):
        request_filter.remote_managed_ports_filter(_spec({"port_id": "port-gone"}), None, CONF)


def test_without_neutron_configured_remote_managed_ports_are_skipped_with_one_warning(
    monkeypatch, caplog
):
    monkeypatch.setattr(
        request_filter,
        "_NEUTRON_UNCONFIGURED_WARNED",
        type(request_filter._NEUTRON_UNCONFIGURED_WARNED)(),
    )

    def no_client(conf):
        raise AssertionError("Neutron must not be asked")

    monkeypatch.setattr(request_filter, "_neutron_client", no_client)
    spec = _spec({"port_id": "port-dpu"})
    with caplog.at_level(logging.WARNING, logger="scheduler.drivers.request_filters"):
        assert request_filter.remote_managed_ports_filter(spec, None, CONF) is False
        assert request_filter.remote_managed_ports_filter(spec, None, CONF) is False
    assert caplog.text.count("remote_managed_ports_filter is skipped") == 1
    assert spec.root_required == set()


# ------------------------------------------------------------------------ process_reqspec


def test_both_run_between_packed_virtqueue_and_ephemeral_encryption_as_in_nova():
    names = [name for name, _ in request_filter.ALL_REQUEST_FILTERS]
    at = names.index("packed_virtqueue_filter")
    assert names[at + 1 : at + 4] == [
        "routed_networks_filter",
        "remote_managed_ports_filter",
        "ephemeral_encryption_filter",
    ]


def test_process_reqspec_applies_both_and_a_routed_failure_stops_the_later_ones(routed):
    fake_neutron, _ = routed
    spec = _spec({"network_id": NET_OTHER}, {"port_id": "port-dpu"})
    applied = request_filter.process_reqspec(spec, _NoAggregates(), CONF)
    assert "routed_networks_filter" in applied and "remote_managed_ports_filter" in applied
    assert spec.requested_destination.aggregates == ["agg-c"]
    assert spec.root_required == {os_traits.COMPUTE_REMOTE_MANAGED_PORTS}
    fake_neutron.fail = neutron.NeutronError("Neutron answered 500")
    spec = _spec({"network_id": NET_OTHER}, {"port_id": "port-dpu"})
    with pytest.raises(RequestFilterFailed):
        request_filter.process_reqspec(spec, _NoAggregates(), CONF)
    assert spec.root_required == set()


class _NoAggregates:
    def aggregates_by_metadata(self, key=None, value=None, key_prefix=None):
        return []


# ---------------------------------------------------------------------- the clients' cache


def test_clients_are_built_once_and_again_when_their_options_change():
    cache = request_filter._ConfiguredClients()
    built: list[str] = []

    def build(conf):
        built.append(conf.neutron.endpoint_override)
        return object()

    CONF.set_override("endpoint_override", "http://a:9696", group="neutron")
    first = cache.get("neutron", CONF, build)
    assert cache.get("neutron", CONF, build) is first
    CONF.set_override("endpoint_override", "http://b:9696", group="neutron")
    second = cache.get("neutron", CONF, build)
    assert second is not first and built == ["http://a:9696", "http://b:9696"]
