"""The Neutron client of the prefilters: nova's reads, and a clear error for every failure.

Each test talks to a real HTTP server: the local Neutron stand-in (127.0.0.1, ephemeral port)
serving the response shapes of Neutron's API reference.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from keystoneauth1 import loading as ks_loading

from placement_client import neutron
from scheduler.conf import CONF
from tests.functional.fixtures_neutron import NeutronStandIn

NET = "3b0d4a8e-5e3f-4a39-9d54-1f0b8b2a0001"
OTHER_NET = "3b0d4a8e-5e3f-4a39-9d54-1f0b8b2a0002"
SEG_A = "5e9a2c1d-0000-4000-8000-00000000000a"
SEG_B = "5e9a2c1d-0000-4000-8000-00000000000b"


@pytest.fixture
def stand_in() -> Iterator[NeutronStandIn]:
    with NeutronStandIn() as server:
        CONF.set_override("endpoint_override", server.url, group="neutron")
        CONF.set_override("http_retries", 0, group="neutron")
        yield server


def test_segments_of_a_network_come_from_its_subnets(stand_in):
    stand_in.add_subnet(NET, SEG_A, "10.0.1.0")
    stand_in.add_subnet(NET, None, "10.0.2.0")  # a subnet on no segment
    stand_in.add_subnet(NET, SEG_B, "10.0.3.0")
    stand_in.add_subnet(OTHER_NET, "5e9a2c1d-0000-4000-8000-0000000000ff", "10.9.0.0")
    client = neutron.client_from_conf(CONF)
    assert client.segment_ids_for_network(NET, request_id="req-1") == [SEG_A, SEG_B]
    path, query, headers = stand_in.requests[-1]
    assert path == "/v2.0/subnets"
    assert query == {"network_id": [NET], "fields": ["segment_id"]}
    assert headers["x-openstack-request-id"] == "req-1"


def test_without_the_segment_extension_no_network_is_routed(stand_in):
    stand_in.segment_extension = False
    stand_in.add_subnet(NET, SEG_A, "10.0.1.0")
    port = stand_in.add_port(NET, next(iter(stand_in.subnets)))
    client = neutron.client_from_conf(CONF)
    assert client.segment_ids_for_network(NET) == []
    assert client.segment_id_for_subnet(stand_in.ports[port]["fixed_ips"][0]["subnet_id"]) is None
    assert stand_in.paths() == ["/v2.0/extensions"]  # read once, no subnet asked


def test_extension_list_is_read_once_per_sync_interval(stand_in):
    stand_in.add_subnet(NET, SEG_A, "10.0.1.0")
    client = neutron.client_from_conf(CONF)
    client.segment_ids_for_network(NET)
    client.segment_ids_for_network(NET)
    assert stand_in.paths().count("/v2.0/extensions") == 1
    CONF.set_override("extension_sync_interval", 0, group="neutron")
    client = neutron.client_from_conf(CONF)
    client.segment_ids_for_network(NET)
    client.segment_ids_for_network(NET)
    assert stand_in.paths().count("/v2.0/extensions") == 3


def test_segment_of_a_subnet(stand_in):
    subnet = stand_in.add_subnet(NET, SEG_B, "10.0.3.0")
    plain = stand_in.add_subnet(NET, None, "10.0.4.0")
    client = neutron.client_from_conf(CONF)
    assert client.segment_id_for_subnet(subnet) == SEG_B
    assert client.segment_id_for_subnet(plain) is None
    assert stand_in.paths()[-1] == f"/v2.0/subnets/{plain}"


def test_a_port_is_remote_managed_by_its_vnic_type(stand_in):
    dpu = stand_in.add_port(NET, vnic_type="remote-managed")
    direct = stand_in.add_port(NET, vnic_type="direct")
    client = neutron.client_from_conf(CONF)
    assert client.is_remote_managed_port(dpu) is True
    assert client.is_remote_managed_port(direct) is False
    assert client.show_port(direct)["network_id"] == NET
    # a port without the binding extension's field is a normal one
    del stand_in.ports[direct]["binding:vnic_type"]
    assert client.is_remote_managed_port(direct) is False


def test_unknown_port_is_not_found(stand_in):
    client = neutron.client_from_conf(CONF)
    with pytest.raises(neutron.NeutronNotFound, match="no port 0000-missing"):
        client.show_port("0000-missing")


def test_server_error_names_the_call_and_neutrons_message(stand_in):
    stand_in.fail_status = 503
    client = neutron.client_from_conf(CONF)
    with pytest.raises(
        neutron.NeutronError, match=r"answered 503 asking for the extension list: Broken"
    ):
        client.segment_ids_for_network(NET)


def test_unreachable_neutron_is_an_error_not_a_crash(stand_in):
    client = neutron.client_from_conf(CONF)
    stand_in.stop()
    with pytest.raises(neutron.NeutronError, match="Neutron is unreachable asking for port p-1"):
        client.show_port("p-1")


def test_slow_neutron_times_out_after_the_configured_timeout(stand_in):
    stand_in.delay = 3.0
    CONF.set_override("timeout", 0.3, group="neutron")
    client = neutron.client_from_conf(CONF)
    start = time.monotonic()
    with pytest.raises(neutron.NeutronError, match="unreachable"):
        client.show_port("p-1")
    assert time.monotonic() - start < 2.5


def test_keystoneauth_plugin_options_are_used(stand_in):
    """nova.conf's [neutron] as the deployment writes it: admin_token with endpoint and token."""
    CONF.register_opts(ks_loading.get_auth_plugin_conf_options("admin_token"), group="neutron")
    CONF.set_override("auth_type", "admin_token", group="neutron")
    CONF.set_override("endpoint", stand_in.url, group="neutron")
    CONF.set_override("token", "s3cret", group="neutron")
    stand_in.token = "s3cret"
    port = stand_in.add_port(NET)
    assert neutron.client_from_conf(CONF).show_port(port)["id"] == port
    assert stand_in.requests[-1][2]["x-auth-token"] == "s3cret"
    CONF.set_override("token", "wrong", group="neutron")
    with pytest.raises(neutron.NeutronError, match="credentials"):
        neutron.client_from_conf(CONF).show_port(port)


def test_unconfigured_or_unusable_options_are_reported():
    assert neutron.is_configured(CONF) is False
    with pytest.raises(neutron.NeutronNotConfigured, match=r"set \[neutron\] auth_type"):
        neutron.client_from_conf(CONF)
    CONF.set_override("auth_type", "no-such-plugin", group="neutron")
    assert neutron.is_configured(CONF) is True
    with pytest.raises(neutron.NeutronError, match=r"Invalid \[neutron\] options"):
        neutron.client_from_conf(CONF)
