"""SimpleCIDRAffinityFilter: hosts whose IP is in the network of the ``build_near_host_ip``
and ``cidr`` hints."""

from __future__ import annotations

import functools
import ipaddress
import logging
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

DEFAULT_CIDR = "/24"

OUTSIDE_NETWORK = Reject("host IP outside the build_near_host_ip network")
NO_HOST_IP = Reject("host has no valid IP address")
BAD_HINT = Reject("invalid build_near_host_ip/cidr hint")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def _network(spec_obj: Any) -> Network | Reject | None:
    """The network the hints ask for; None without ``build_near_host_ip``; BAD_HINT when the
    hints do not make a network. Host bits are allowed (``10.0.0.7/24``), as netaddr allows."""
    near_ip = spec_obj.get_scheduler_hint("build_near_host_ip")
    if not near_ip:
        return None
    cidr = spec_obj.get_scheduler_hint("cidr", DEFAULT_CIDR)
    try:
        return ipaddress.ip_network(f"{near_ip}{cidr}", strict=False)
    except (TypeError, ValueError):
        LOG.warning("Invalid build_near_host_ip/cidr hints: %r, %r", near_ip, cidr)
        return BAD_HINT


@functools.lru_cache(maxsize=65536)
def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """A host IP, parsed (host IPs rarely change: parsed once per value)."""
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


class SimpleCIDRAffinityFilter(BaseHostFilter):
    """Passes hosts whose IP address is in the network given by the ``build_near_host_ip``
    and ``cidr`` scheduler hints (``cidr`` defaults to ``/24``; every host passes without
    ``build_near_host_ip``)."""

    depends_on_consumption = False

    RUN_ON_REBUILD = False
    # the hints and the host IPs do not change within a request
    run_filter_once_per_request = True

    def prepare(self, spec_obj: Any) -> Any:
        network = _network(spec_obj)
        return PASS_ALL if network is None else network

    def check(self, host_state: Any, network: Network | Reject) -> bool | Reject:
        if network is BAD_HINT:
            # hints that make no network: every host is removed
            return BAD_HINT
        address = _address(str(host_state.host_ip))
        if address is None:
            if LOG.isEnabledFor(logging.DEBUG):
                LOG.debug("%s has no valid host_ip: %r", host_state, host_state.host_ip)
            return NO_HOST_IP
        # an address of the other IP version is simply not in the network
        if address in network:
            return True
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("%s has host_ip %s outside %s", host_state, address, network)
        return OUTSIDE_NETWORK
