"""nova 34's PCI decisions (``nova.pci.stats.PciDeviceStats``) on the payloads of
tests/differential/test_pci.py, run under nova's venv by worker.py.

Payload fields (JSON):

* ``pci_stats``: the ``compute_nodes.pci_stats`` column as a compute writes it (a
  PciDevicePoolList primitive);
* ``host_cells``: ``[[cell id, socket], ...]`` of the host's NUMA cells, or None (no
  topology); ``numa_cells``: the host cell ids the instance's NUMA nodes were fitted to, or
  None;
* ``requests``: InstancePCIRequest fields (``count``, ``spec``, ``alias_name``,
  ``numa_policy``, ``request_id``, ``requester_id``);
* ``provider_mapping``: ``{requester_id: [provider uuid]}`` or None;
* ``candidates``: allocation candidates' ``mappings`` (the ``filter`` op).

Every op answers with plain data: pools as the dicts nova holds them (``devices`` left out),
in nova's order.
"""

from nova import exception, objects
from nova.objects import pci_device_pool
from nova.pci import stats as pci_stats
from nova.scheduler import host_manager
from nova.scheduler.filters import pci_passthrough_filter

_REQUEST_FIELDS = ("count", "spec", "alias_name", "numa_policy", "request_id", "requester_id")


def _host_topology(host_cells):
    if host_cells is None:
        return None
    return objects.NUMATopology(
        cells=[objects.NUMACell(id=cell_id, socket=socket) for cell_id, socket in host_cells]
    )


def _stats(payload, topology=None):
    pools = pci_device_pool.from_pci_stats(payload["pci_stats"])
    if topology is None:
        topology = _host_topology(payload.get("host_cells"))
    return pci_stats.PciDeviceStats(topology, stats=pools)


def _requests(payload):
    return [
        objects.InstancePCIRequest(**{k: r[k] for k in _REQUEST_FIELDS if k in r})
        for r in payload["requests"]
    ]


def _numa_cells(payload):
    cells = payload.get("numa_cells")
    if cells is None:
        return None
    return [objects.InstanceNUMACell(id=c, cpuset=set(), pcpuset=set(), memory=0) for c in cells]


def _pools(stats):
    return [{k: v for k, v in pool.items() if k != "devices"} for pool in stats.pools]


def _support_and_apply(payload):
    """The filter's question (support_requests, on a copy) and the consumption
    (apply_requests, in place; a failure keeps what the requests before took)."""
    stats = _stats(payload)
    requests = _requests(payload)
    mapping = payload.get("provider_mapping")
    before = _pools(stats)
    supported = stats.support_requests(requests, mapping, _numa_cells(payload))
    try:
        stats.apply_requests(requests, mapping, _numa_cells(payload))
        applied = True
    except exception.PciDeviceRequestFailed:
        applied = False
    return {"pools": before, "supported": supported, "applied": applied, "after": _pools(stats)}


class _HostState:
    def __init__(self, stats, candidates):
        self.pci_stats = stats
        self.allocation_candidates = candidates

    def __repr__(self):
        return "host"


def _filter(payload):
    """PciPassthroughFilter.host_passes over the host's allocation candidates."""
    candidates = [{"mappings": m, "index": i} for i, m in enumerate(payload["candidates"])]
    host = _HostState(_stats(payload), list(candidates))
    spec_obj = objects.RequestSpec(
        pci_requests=objects.InstancePCIRequests(requests=_requests(payload))
    )
    passes = pci_passthrough_filter.PciPassthroughFilter().host_passes(host, spec_obj)
    return {"passes": bool(passes), "kept": [c["index"] for c in host.allocation_candidates]}


def _host_numa(cells):
    return objects.NUMATopology(
        cells=[
            objects.NUMACell(
                id=c["id"],
                socket=c["socket"],
                cpuset=set(c["cpuset"]),
                pcpuset=set(),
                memory=c["memory"],
                cpu_usage=c["cpu_usage"],
                memory_usage=c["memory_usage"],
                pinned_cpus=set(),
                siblings=[{cpu} for cpu in c["cpuset"]],
                mempages=[objects.NUMAPagesTopology(size_kb=4, total=c["memory"] * 256, used=0)],
                network_metadata=objects.NetworkMetadata(physnets=set(), tunneled=False),
            )
            for c in cells
        ]
    )


def _instance_numa(cells):
    return objects.InstanceNUMATopology(
        cells=[
            objects.InstanceNUMACell(
                id=c["id"], cpuset=set(c["cpuset"]), pcpuset=set(), memory=c["memory"]
            )
            for c in cells
        ]
    )


def _consume(payload):
    """HostState.consume_from_request: the NUMA fit (with the PCI check) when both have a
    topology, then apply_requests with the fitted cells and the request's group mapping."""
    host_cells = payload.get("host_numa")
    topology = _host_numa(host_cells) if host_cells else None
    hs = host_manager.HostState("host", "node", "cell")
    hs.numa_topology = topology
    hs.pci_stats = _stats(payload, topology)
    hs.limits = {}
    spec_obj = objects.RequestSpec(
        flavor=objects.Flavor(memory_mb=64, vcpus=1, root_gb=0, ephemeral_gb=0),
        numa_topology=(
            _instance_numa(payload["instance_numa"]) if payload.get("instance_numa") else None
        ),
        pci_requests=objects.InstancePCIRequests(requests=_requests(payload)),
        requested_resources=[
            objects.RequestGroup(requester_id=rid, provider_uuids=rps)
            for rid, rps in payload["requested_resources"]
        ],
    )
    hs.consume_from_request(spec_obj)
    fitted = spec_obj.numa_topology
    return {
        "after": _pools(hs.pci_stats),
        "fitted": sorted(c.id for c in fitted.cells) if fitted and host_cells else None,
    }


OPS = {"support_and_apply": _support_and_apply, "filter": _filter, "consume": _consume}
