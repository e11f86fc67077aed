"""PCIWeigher: keeps hosts with free PCI devices for the requests that need them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from weighers import BaseHostWeigher, host_column

# Beyond this many free devices a host counts as "plenty": what matters is the scarce case.
MAX_DEVS = 100

_DATA = "nova_object.data"


def _pools(pci_stats: Any) -> Iterable[Any]:
    """The pools of ``host_state.pci_stats`` in any form it comes in: the JSON-decoded
    ``compute_nodes.pci_stats`` column (nova's PciDevicePoolList primitive, or a plain list
    of pools), or an object with a ``pools`` attribute (nova's PciDeviceStats)."""
    if not pci_stats:
        return ()
    pools = getattr(pci_stats, "pools", None)
    if pools is not None:
        return pools
    if isinstance(pci_stats, dict):
        data = pci_stats.get(_DATA, pci_stats)
        return data.get("objects") or data.get("pools") or ()
    return pci_stats


def _count(pool: Any) -> int:
    if isinstance(pool, dict):
        value = pool.get(_DATA, pool).get("count")
    else:
        value = getattr(pool, "count", None)
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def free_pci_devices(pci_stats: Any) -> int:
    """The number of free PCI devices over all of a host's pools."""
    return sum(_count(pool) for pool in _pools(pci_stats))


def pci_weight(pci_stats: Any) -> int:
    """nova's value: MAX_DEVS - min(free devices, MAX_DEVS - 1), from 100 (no PCI device)
    down to 1 (99 free devices or more)."""
    return MAX_DEVS - min(free_pci_devices(pci_stats), MAX_DEVS - 1)


@host_column
class PCIWeigher(BaseHostWeigher):
    """Prefers hosts with fewer free PCI devices (``pci_weight_multiplier``, never negative):
    requests without PCI devices avoid PCI hosts, and requests with PCI devices stack on the
    hosts that have fewest left, so that whole PCI hosts stay free for large requests."""

    multiplier_option = "pci_weight_multiplier"
    returns_numbers = True

    def weigh(self, host_state: Any, prepared: Any) -> float:
        # most hosts have no PCI devices: their weight is MAX_DEVS without a call
        stats = host_state.pci_stats
        return pci_weight(stats) if stats else MAX_DEVS
