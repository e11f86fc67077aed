"""nova 34's Placement query for a request: the ``query`` area of the differential tests.

``queries(payload)`` builds nova's Flavor, ImageMeta, InstancePCIRequests and RequestSpec from
the payload (tests/differential/test_query.py describes it), lets nova's conductor step make
the PCI request groups (``generate_request_groups_from_pci_requests``), takes the RequestSpec
primitive the scheduler would receive, then runs what nova's scheduler manager runs: the
``owner_nova_filter`` request filter (when the payload says every compute is new enough),
``resources_from_request_spec`` and, for ``cpu_pinning_requested``, the fallback query
without pinning translation. It answers::

    {"spec": <RequestSpec primitive>, "queries": [querystring, fallback querystring?]}
    {"spec": ..., "error": <exception class>, "message": ...}      when nova refuses

plus ``"without_bug"``: what nova answers with one of its bugs turned off, for each bug whose
turning off changes the answer:

* ``fallback_sees_first``: ``resources_from_request_spec`` puts the request's own
  RequestGroup objects (ports, PCI devices) into its query and strips their zero amounts in
  place, so the fallback query meets a port group the first one emptied and raises
  ValueError ("no-op RequestGroup"): the request fails where both queries can be built;
* ``owner_early_return``: ``owner_nova_filter`` returns before tagging the PCI request groups
  when the root already requires OWNER_NOVA (an isolating aggregate's trait);
* ``both`` together.
"""

import copy
from unittest import mock

from nova import context as nova_context
from nova import exception, objects
from nova.scheduler import request_filter, utils

CONF = None


def setup(conf):
    global CONF
    CONF = conf


class _Node:
    def __init__(self, i):
        self.uuid = f"00000000-0000-4000-8000-{i:012d}"
        self.host = "host1"
        self.hypervisor_hostname = f"node{i}"


class _HostManager:
    """Answers the forced-host look-up with the payload's number of nodes."""

    def __init__(self, nodes):
        self.nodes = nodes

    def get_compute_nodes_by_host_or_node(self, ctxt, host, node, cell=None):
        return [_Node(i) for i in range(self.nodes)]


def _flavor(data):
    return objects.Flavor(
        id=1,
        flavorid="f1",
        name="f1",
        vcpus=data["vcpus"],
        memory_mb=data["memory_mb"],
        root_gb=data["root_gb"],
        ephemeral_gb=data["ephemeral_gb"],
        swap=data["swap"],
        extra_specs=dict(data["extra_specs"]),
    )


def _request_group(data):
    return objects.RequestGroup(
        requester_id=data["requester_id"],
        use_same_provider=True,
        resources=dict(data.get("resources", {})),
        required_traits=set(data.get("required_traits", [])),
        forbidden_traits=set(data.get("forbidden_traits", [])),
        aggregates=[list(a) for a in data.get("aggregates", [])],
        forbidden_aggregates=set(data.get("forbidden_aggregates", [])),
    )


def _pci_requests(requests):
    return objects.InstancePCIRequests(
        requests=[
            objects.InstancePCIRequest(
                count=r["count"],
                spec=[dict(r["spec"])],
                alias_name=r["alias_name"],
                request_id=r["request_id"],
            )
            for r in requests
        ]
    )


def _request_spec(payload):
    params = payload.get("request_level_params", {})
    spec = objects.RequestSpec(
        flavor=_flavor(payload["flavor"]),
        num_instances=1,
        project_id="p1",
        user_id="u1",
        instance_uuid="11111111-2222-4333-8444-555555555555",
        is_bfv=payload.get("is_bfv", False),
        scheduler_hints={k: list(v) for k, v in payload.get("scheduler_hints", {}).items()},
        requested_resources=[_request_group(g) for g in payload.get("requested_resources", [])],
        request_level_params=objects.RequestLevelParams(
            root_required=set(params.get("root_required", [])),
            root_forbidden=set(params.get("root_forbidden", [])),
            same_subtree=[list(s) for s in params.get("same_subtree", [])],
        ),
        pci_requests=_pci_requests(payload.get("pci_requests", [])),
    )
    if payload.get("image") is not None:
        spec.image = objects.ImageMeta.from_dict(
            {"id": "22222222-3333-4444-8555-666666666666", "name": "img", **payload["image"]}
        )
    destination = payload.get("destination")
    if destination is not None:
        spec.requested_destination = objects.Destination(
            aggregates=list(destination.get("aggregates", [])) or None,
            forbidden_aggregates=set(destination.get("forbidden_aggregates", [])),
        )
    if payload.get("nodes") is not None:
        spec.force_hosts = ["host1"]
    return spec


def _owner_nova_filter(ctxt, spec, early_return):
    """nova's filter with every compute new enough; without ``early_return``, as if it did
    not skip the PCI groups when the root already requires OWNER_NOVA."""
    if not early_return:
        spec.root_required.discard("OWNER_NOVA")
    with mock.patch.object(request_filter, "_should_filter_by_owner", return_value=True):
        request_filter.owner_nova_filter(ctxt, spec)


def _ask(payload, spec, owner_early_return=True, fallback_sees_first=True):
    """The query strings nova's scheduler manager sends for ``spec``. The keywords turn off
    nova's bugs: ``owner_early_return=False`` (see the module docstring);
    ``fallback_sees_first=False``: the fallback query is built from the request as it was
    before the first one stripped the zero amounts from the request's own groups."""
    ctxt = nova_context.get_admin_context()
    if payload.get("owner_nova"):
        _owner_nova_filter(ctxt, spec, owner_early_return)
    hosts = _HostManager(payload.get("nodes") or 0)
    untouched = copy.deepcopy(spec)
    first = utils.resources_from_request_spec(ctxt, spec, hosts, enable_pinning_translate=True)
    queries = [first.to_querystring()]
    if first.cpu_pinning_requested and not CONF.workarounds.disable_fallback_pcpu_query:
        fallback = utils.resources_from_request_spec(
            ctxt, spec if fallback_sees_first else untouched, hosts, enable_pinning_translate=False
        )
        queries.append(fallback.to_querystring())
    return queries


def _outcome(payload, spec, **fixes):
    try:
        return {"queries": _ask(payload, spec, **fixes)}
    except (exception.NovaException, ValueError) as exc:
        return {"error": type(exc).__name__, "message": str(exc)}


# nova's bugs, each turned off alone and both together (diff_query's _ask keywords)
_FIXES = {
    "fallback_sees_first": {"fallback_sees_first": False},
    "owner_early_return": {"owner_early_return": False},
    "both": {"fallback_sees_first": False, "owner_early_return": False},
}


def _queries(payload):
    conf = payload.get("conf", {})
    CONF.set_override("max_placement_results", conf.get("max_placement_results", 1000), "scheduler")
    CONF.set_override(
        "disable_fallback_pcpu_query", conf.get("disable_fallback_pcpu_query", False), "workarounds"
    )
    CONF.set_override("pci_in_placement", conf.get("pci_in_placement", False), "filter_scheduler")
    try:
        spec = _request_spec(payload)
        # the conductor's step: PCI requests become request groups (pci_in_placement)
        spec.generate_request_groups_from_pci_requests()
        answer = {"spec": spec.obj_to_primitive()}
        pristine = copy.deepcopy(spec)
        answer.update(_outcome(payload, spec))
        without = {}
        for name, fixes in _FIXES.items():
            outcome = _outcome(payload, copy.deepcopy(pristine), **fixes)
            if _differs(outcome, answer):
                without[name] = outcome
        if without:
            answer["without_bug"] = without
        return answer
    finally:
        CONF.clear_override("max_placement_results", "scheduler")
        CONF.clear_override("disable_fallback_pcpu_query", "workarounds")
        CONF.clear_override("pci_in_placement", "filter_scheduler")


def _differs(outcome, answer):
    return (outcome.get("error"), outcome.get("queries")) != (
        answer.get("error"),
        answer.get("queries"),
    )


OPS = {"queries": _queries}
