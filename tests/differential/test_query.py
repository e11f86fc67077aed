"""The Placement query: nova 34's ``resources_from_request_spec`` + ``to_querystring`` and our
``build_queries``, on the same Hypothesis-generated requests, compared group by group.

Each example is a request as nova-api lets it through: a flavor whose extra specs pass nova's
extra-spec validators (plus ``hw:maxphysaddr_*``, which only flavors made before microversion
2.86 carry), an image whose properties nova's ImageMetaProps accepts, ports' and PCI devices'
request groups, request-level parameters, a destination, hints, a forced host, and the
options that change the query. nova's side (``nova_side/diff_query.py``) builds its objects
from it and answers with the RequestSpec primitive the scheduler receives and the query
strings nova would send (the VCPU fallback included); our side decodes that primitive with
our wire codec, runs our ``owner_nova_filter`` prefilter and ``build_queries``. Both answers
are parsed into ``{suffix: group}`` plus the request-level keys and must be equal; where nova
refuses the request (an exception), we must raise ``InvalidRequest``.

Recognised exactly, not counted as disagreements:

* a fallback query identical to the first one: we do not send it (its candidates are the
  first one's);
* a query Placement refuses (400, by Placement's own parsing of it): nova's adds no
  candidates; ours must be refused as well, or raise NoValidHost;
* nova's bugs, where nova's side re-decides without the bug (``without_bug``) and ours equals
  that answer: the fallback query built from a request the first query changed
  (``fallback_sees_first``), and ``owner_nova_filter``'s early return
  (``owner_early_return``); nova_side/diff_query.py describes them.

Hunt mode (tests/differential/harness.py): ``NOVASCHED_HUNT=1 .venv/bin/pytest -s
tests/differential/test_query.py`` runs 2,000 random examples and prints what they covered.
"""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import parse_qsl

import microversion_parse
import webob
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oslo_config import cfg
from placement import lib as placement_lib
from placement import microversion

from placement_client.api import MV_CANDIDATES
from placement_client.query import build_queries
from scheduler import conf as sched_conf
from scheduler.drivers import request_filters as prefilters
from scheduler.exceptions import InvalidRequest, NoValidHost
from scheduler.request import SchedulingRequest
from scheduler.rpc import wire
from tests.hunt import examples, hunting

HUNTING = hunting()
REFUSED = "refused"  # nova raises; we raise InvalidRequest
NO_HOST = "no host"  # Placement refuses the query (400); we may say so first (NoValidHost)

# -- the request -------------------------------------------------------------------------------
# "port-a" may also be a port's requester_id: nova refuses the request
_SUFFIXES = ["", "1", "2", "_g"] * 2 + ["port-a"]
_RESOURCE_CLASSES = [
    "VCPU",
    "PCPU",
    "MEMORY_MB",
    "DISK_GB",
    "MEM_ENCRYPTION_CONTEXT",
    "VGPU",
    "CUSTOM_GPU",
    "CUSTOM_PMEM_NAMESPACE_4GB",
]
# negative amounts (nova-api takes them, nova's scheduler drops them) and zeros, now and then
_AMOUNTS = ["-1", "0"] + ["1", "2", "4"] * 3
_TRAITS = ["CUSTOM_A", "HW_CPU_HYPERTHREADING", "COMPUTE_SECURITY_TPM_2_0", "HW_CPU_X86_AVX2"]
_BOOL_TEXT = st.sampled_from(["true", "false", "yes", "no", "1", "0", "True", "off"])
_MEM_ENCRYPTION_MODELS = ["amd-sev", "amd-sev-es", "amd-sev-snp", "intel-tdx"]
_PCI_NUMA_POLICIES = ["required", "preferred", "legacy", "socket"]
AGGREGATES = [f"a99a0000-0000-4000-8000-00000000000{i}" for i in range(5)]
_REQUEST_IDS = [
    "7d3e2f2a-4a8e-4c1e-9a51-0c1f6f0e7c11",
    "0b5a3c3e-91d2-4f77-b1a0-55c6d1a3e2f4",
    "c0ffee00-1111-4222-8333-444455556666",
]


@st.composite
def _cpu_masks(draw: st.DrawFn) -> str:
    """A mask as nova's validator accepts it: ``\\^?\\d+(-\\d+)?`` items joined by commas."""
    items = []
    for _ in range(draw(st.integers(1, 3))):
        low = draw(st.integers(0, 7))
        item = ("^" if draw(st.booleans()) else "") + str(low)
        if draw(st.integers(0, 3)) == 0:
            item += f"-{draw(st.integers(max(low - 1, 0), 8))}"
        items.append(item)
    return ",".join(items)


_PMEM = st.lists(st.sampled_from(["4GB", "SMALL", "large_1"]), min_size=1, max_size=3).map(",".join)

# the CPU pinning settings, drawn together: a policy and maybe its masks and thread policies
_CPU_SETTINGS = st.fixed_dictionaries(
    {"hw:cpu_policy": st.sampled_from(["dedicated", "shared", "mixed", "mixed"])},
    optional={
        "hw:cpu_thread_policy": st.sampled_from(["prefer", "isolate", "require"]),
        "hw:emulator_threads_policy": st.sampled_from(["isolate", "share"]),
        "hw:cpu_dedicated_mask": _cpu_masks(),
        "hw:cpu_realtime": _BOOL_TEXT,
        "hw:cpu_realtime_mask": _cpu_masks(),
    },
)

_FLAVOR_SETTINGS = {
    "hw:cpu_thread_policy": st.sampled_from(["prefer", "isolate", "require"]),
    "hw:mem_encryption": _BOOL_TEXT,
    "hw:mem_encryption_model": st.sampled_from(_MEM_ENCRYPTION_MODELS),
    "hw:pmem": _PMEM,
    "hw:tpm_version": st.sampled_from(["1.2", "2.0"]),
    "hw:tpm_model": st.sampled_from(["tpm-tis", "tpm-crb"]),
    "hw:tpm_secret_security": st.sampled_from(["user", "host"]),
    "hw:pci_numa_affinity_policy": st.sampled_from(_PCI_NUMA_POLICIES),
    "hw:maxphysaddr_mode": st.sampled_from(["passthrough", "emulate"]),
    "hw:maxphysaddr_bits": st.sampled_from(["39", "42"]),
    "os:secure_boot": st.sampled_from(["disabled", "required"]),
    "hw:mem_page_size": st.sampled_from(["large", "small", "2048"]),
    "hw:numa_nodes": st.sampled_from(["1", "2"]),
}

_IMAGE_SETTINGS = {
    "hw_cpu_policy": st.sampled_from(["dedicated", "shared", "mixed"]),
    "hw_cpu_thread_policy": st.sampled_from(["prefer", "isolate", "require"]),
    "hw_cpu_realtime_mask": _cpu_masks(),
    "hw_tpm_version": st.sampled_from(["1.2", "2.0"]),
    "hw_tpm_model": st.sampled_from(["tpm-tis", "tpm-crb"]),
    "os_secure_boot": st.sampled_from(["required", "disabled", "optional"]),
    "hw_mem_encryption": st.sampled_from(["true", "false", True, False]),
    "hw_mem_encryption_model": st.sampled_from(_MEM_ENCRYPTION_MODELS),
    "hw_firmware_type": st.sampled_from(["uefi", "uefi", "bios"]),
    "hw_firmware_stateless": st.sampled_from(["true", "false", True]),
    "hw_machine_type": st.sampled_from(["q35", "pc-q35-8.2", "pc-i440fx-8.2"]),
    "hw_video_model": st.sampled_from(["none", "virtio", "vga"]),
    "hw_pci_numa_affinity_policy": st.sampled_from(_PCI_NUMA_POLICIES),
    "hw_maxphysaddr_mode": st.sampled_from(["passthrough", "emulate"]),
    "hw_maxphysaddr_bits": st.sampled_from(["42", 46]),
    # Glance's form of traits_required
    "trait:CUSTOM_IMG": st.just("required"),
    "trait:HW_CPU_HYPERTHREADING": st.just("required"),
}


_ENCRYPTABLE_IMAGE = st.fixed_dictionaries(
    {"hw_firmware_type": st.just("uefi")},
    optional={
        "hw_firmware_stateless": st.just(True),
        "hw_video_model": st.just("none"),
        "hw_machine_type": st.just("q35"),
    },
)


def _some(settings: dict[str, st.SearchStrategy], most: int) -> st.SearchStrategy:
    """A few of ``settings`` (at most ``most``), so that most requests make sense."""
    return st.lists(st.sampled_from(sorted(settings)), max_size=most, unique=True).flatmap(
        lambda keys: st.fixed_dictionaries({k: settings[k] for k in keys})
    )


@st.composite
def _granular(draw: st.DrawFn) -> dict[str, str]:
    """``resources[$S]:RC=N`` and ``trait[$S]:T=required|forbidden`` extra specs (a group's
    resources, maybe with traits, now and then traits alone) and ``group_policy``."""
    specs: dict[str, str] = {}
    suffixes = draw(st.lists(st.sampled_from(_SUFFIXES), max_size=3, unique=True))
    for suffix in suffixes:
        if draw(st.integers(0, 7)):
            rc = draw(st.sampled_from(_RESOURCE_CLASSES))
            specs[f"resources{suffix}:{rc}"] = draw(st.sampled_from(_AMOUNTS))
        if draw(st.booleans()):
            trait = draw(st.sampled_from(_TRAITS))
            specs[f"trait{suffix}:{trait}"] = draw(st.sampled_from(["required", "forbidden"]))
    if (
        draw(st.integers(0, 3))
        if len([s for s in suffixes if s]) > 1
        else not draw(st.integers(0, 5))
    ):
        specs["group_policy"] = draw(st.sampled_from(["none", "isolate"]))
    return specs


@st.composite
def _flavors(draw: st.DrawFn) -> dict[str, Any]:
    extra_specs = draw(_CPU_SETTINGS) if draw(st.booleans()) else {}
    extra_specs.update(draw(_some(_FLAVOR_SETTINGS, 4)))
    extra_specs.update(draw(_granular()))
    return {
        "vcpus": draw(st.integers(1, 8)),
        "memory_mb": draw(st.sampled_from([512, 2048])),
        "root_gb": draw(st.sampled_from([0, 1, 20])),
        "ephemeral_gb": draw(st.sampled_from([0, 0, 5])),
        "swap": draw(st.sampled_from([0, 0, 512, 1025])),
        "extra_specs": extra_specs,
    }


_PORT_GROUPS = st.fixed_dictionaries(
    {
        # "1" and "port-a" may also be flavor group suffixes: nova refuses the request
        "requester_id": st.sampled_from(["port-a", "port-b", "acc-0"] * 2 + ["1"]),
        "resources": st.sampled_from(
            [
                {"NET_BW_EGR_KILOBIT_PER_SEC": 1000},
                {"NET_BW_IGR_KILOBIT_PER_SEC": 10, "NET_BW_EGR_KILOBIT_PER_SEC": 10},
                {"NET_PACKET_RATE_KILOPACKET_PER_SEC": 10},
                {"CUSTOM_FPGA": 1},
                # a port asking nothing, which nova's first query empties in place
                {"NET_BW_EGR_KILOBIT_PER_SEC": 0},
                {"NET_BW_EGR_KILOBIT_PER_SEC": 0, "NET_BW_IGR_KILOBIT_PER_SEC": 0},
            ]
        ),
    },
    optional={
        "required_traits": st.just(["CUSTOM_PHYSNET_A"]),
        "aggregates": st.just([[AGGREGATES[3]]]),
    },
)

_PCI_REQUESTS = st.fixed_dictionaries(
    {
        "count": st.integers(1, 2),
        "alias_name": st.sampled_from(["a1", "a1", None]),
        "request_id": st.sampled_from(_REQUEST_IDS),
        "spec": st.fixed_dictionaries(
            {"vendor_id": st.just("8086"), "product_id": st.just("154d")},
            optional={
                "resource_class": st.sampled_from(["CUSTOM_GPU", "pgpu"]),
                "traits": st.sampled_from(["CUSTOM_T", "HW_GPU_API_VULKAN,blue"]),
            },
        ),
    }
)

_REQUEST_LEVEL = st.fixed_dictionaries(
    {},
    optional={
        "root_required": st.lists(st.sampled_from(["CUSTOM_ROOT", "OWNER_NOVA"]), unique=True),
        "root_forbidden": st.just(["COMPUTE_STATUS_DISABLED"]),
    },
)

_DESTINATIONS = st.fixed_dictionaries(
    {},
    optional={
        "aggregates": st.sampled_from(
            [[f"{AGGREGATES[0]},{AGGREGATES[1]}"], [AGGREGATES[0], AGGREGATES[2]]]
        ),
        "forbidden_aggregates": st.just([AGGREGATES[4]]),
    },
)

_HINTS = st.dictionaries(
    st.sampled_from(["group", "same_host", "different_host", "build_near_host_ip"]),
    st.just(["3c9e2b6e-7f0a-4a8e-9f43-2f0d6c8e9a11"]),
    max_size=2,
)


@st.composite
def request_payloads(draw: st.DrawFn) -> dict[str, Any]:
    """One request, as the payload both sides build their objects from."""
    payload: dict[str, Any] = {"flavor": draw(_flavors()), "is_bfv": draw(st.booleans())}
    if draw(st.integers(0, 3)):
        properties = draw(_some(_IMAGE_SETTINGS, 6))
        encrypted = "hw:mem_encryption" in payload["flavor"]["extra_specs"]
        if (encrypted or "hw_mem_encryption" in properties) and draw(st.integers(0, 3)):
            # what memory encryption needs of the image, mostly there
            properties.update(draw(_ENCRYPTABLE_IMAGE))
        payload["image"] = {"properties": properties}
    payload["requested_resources"] = draw(
        st.lists(_PORT_GROUPS, max_size=2, unique_by=lambda g: g["requester_id"])
    )
    payload["pci_requests"] = draw(
        st.lists(_PCI_REQUESTS, max_size=2, unique_by=lambda r: r["request_id"])
    )
    payload["request_level_params"] = draw(_REQUEST_LEVEL)
    ports = [g["requester_id"] for g in payload["requested_resources"]]
    if len(ports) == 2 and draw(st.booleans()):
        # a port's groups, which must come from one subtree (neutron's same_subtree)
        payload["request_level_params"]["same_subtree"] = [ports]
    payload["destination"] = draw(st.one_of(st.none(), _DESTINATIONS))
    payload["scheduler_hints"] = draw(_HINTS)
    payload["nodes"] = draw(st.sampled_from([None, None, 1, 2]))
    payload["owner_nova"] = draw(st.booleans())
    payload["conf"] = {
        "max_placement_results": draw(st.sampled_from([1000, 7])),
        "disable_fallback_pcpu_query": draw(st.booleans()),
        "pci_in_placement": draw(st.booleans()),
    }
    return payload


# -- our side ----------------------------------------------------------------------------------
class _Computes:
    """What ``owner_nova_filter`` asks of the host manager: the oldest nova-compute."""

    def __init__(self, new: bool):
        self.new = new

    def minimum_compute_version(self) -> int:
        return prefilters.OWNER_NOVA_MIN_COMPUTE_VERSION - (0 if self.new else 1)


def _conf(options: dict[str, Any]) -> cfg.ConfigOpts:
    conf = cfg.ConfigOpts()
    sched_conf.register_opts(conf)
    conf([], project="novasched-test", default_config_files=[])
    conf.set_override("max_placement_results", options["max_placement_results"], "scheduler")
    conf.set_override(
        "disable_fallback_pcpu_query", options["disable_fallback_pcpu_query"], "workarounds"
    )
    return conf


def ours(payload: dict[str, Any], primitive: dict[str, Any]) -> list[dict[str, Any]] | str:
    """Our outcome for the RequestSpec primitive nova's conductor would send: the parsed
    queries, ``REFUSED`` or ``NO_HOST``."""
    conf = _conf(payload["conf"])
    # as the driver runs it: a SchedulingRequest, and the names of the prefilters that
    # changed it
    spec = SchedulingRequest.of(wire.request_spec_from_primitive(primitive))
    if prefilters.owner_nova_filter(spec, _Computes(payload["owner_nova"]), conf):
        spec.trace.prefilters.append("owner_nova_filter")
    nodes = payload["nodes"]
    # the forced host's nodes, as FilterScheduler._forced_in_tree finds them
    in_tree = "00000000-0000-4000-8000-000000000000" if nodes == 1 else None
    try:
        queries = build_queries(spec, conf, in_tree=in_tree, unlimited=nodes == 2)
    except InvalidRequest:
        return REFUSED
    except NoValidHost:
        return NO_HOST
    strings = [q.to_querystring() for q in queries]
    if any(placement_refuses(q) for q in strings):
        # the driver fails the request on Placement's 400
        return NO_HOST
    return [parse(q) for q in strings]


def novas(answer: dict[str, Any]) -> list[dict[str, Any]] | str:
    """nova's outcome: the parsed queries Placement accepts (the manager merges their
    candidates; a fallback identical to the first left out), ``NO_HOST`` when it accepts
    none, ``REFUSED`` when nova raised."""
    if "error" in answer:
        return REFUSED
    queries = [parse(q) for q in answer["queries"] if not placement_refuses(q)]
    if not queries:
        return NO_HOST
    if len(queries) == 2 and queries[0] == queries[1]:
        queries.pop()
    return queries


# -- comparing ---------------------------------------------------------------------------------
_PLACEMENT_VERSION = microversion_parse.extract_version(
    {"openstack-api-version": f"placement {MV_CANDIDATES}"}, "placement", microversion.VERSIONS
)


def placement_refuses(querystring: str) -> str | None:
    """Why Placement (its own parsing of GET /allocation_candidates, at our microversion,
    which is nova's) answers 400 to this query string, or None."""
    req = webob.Request.blank(f"/allocation_candidates?{querystring}")
    req.environ[microversion.MICROVERSION_ENVIRON] = _PLACEMENT_VERSION
    try:
        params = placement_lib.RequestWideParams.from_request(req)
        groups = placement_lib.RequestGroup.dict_from_request(req, params)
    except webob.exc.HTTPBadRequest as exc:
        return str(exc)
    if len([s for s in groups if s]) > 1 and not params.group_policy:
        return "group_policy required with more than one numbered group"
    return None


_GROUP_KEYS = ("resources", "required", "member_of", "in_tree")


def parse(querystring: str) -> dict[str, Any]:
    """A query string as ``{"limit", "group_policy", "root_required", "same_subtree",
    "groups": {suffix: {"resources", "required", "forbidden", "member_of", "in_tree"}}}``."""
    query: dict[str, Any] = {"groups": {}, "same_subtree": []}
    for key, value in parse_qsl(querystring, keep_blank_values=True):
        if key in ("limit", "group_policy"):
            query[key] = value
        elif key == "root_required":
            query[key] = sorted(value.split(","))
        elif key == "same_subtree":
            query[key].append(",".join(sorted(value.split(","))))
        else:
            prefix = next(p for p in _GROUP_KEYS if key.startswith(p))
            group = query["groups"].setdefault(
                key[len(prefix) :],
                {
                    "resources": {},
                    "required": [],
                    "forbidden": [],
                    "member_of": [],
                    "in_tree": None,
                },
            )
            if prefix == "resources":
                group["resources"] = dict(_amount(item) for item in value.split(",") if item)
            elif prefix == "required":
                traits = value.split(",")
                group["required"] = sorted(t for t in traits if not t.startswith("!"))
                group["forbidden"] = sorted(t[1:] for t in traits if t.startswith("!"))
            elif prefix == "member_of":
                group["member_of"] = sorted([*group["member_of"], value])
            else:
                group["in_tree"] = value
    query["same_subtree"].sort()
    return query


def _amount(item: str) -> tuple[str, int]:
    rc, amount = item.split(":")
    return rc, int(amount)


def _classify(nova: Any, answer: dict[str, Any], stats: Counter) -> None:
    """Count what an example covered: nova's refusal, Placement's, or what it asked."""
    if nova == REFUSED:
        stats[f"nova refuses: {answer['error']}"] += 1
        return
    if nova == NO_HOST:
        reason = placement_refuses(answer["queries"][0]) or "the fallback"
        stats[f"Placement refuses nova's query: {reason[:60]}"] += 1
        return
    stats["queries"] += 1
    if len(answer["queries"]) == 2:
        stats["with the VCPU fallback"] += 1
    groups = parse(answer["queries"][0])["groups"]
    base = groups.get("", {"resources": {}, "required": [], "forbidden": []})
    asked = {*base["resources"], *base["required"], *(f"!{t}" for t in base["forbidden"])}
    if {"PCPU", "VCPU"} <= asked:
        stats["asks for PCPU and VCPU (mixed)"] += 1
    for name in sorted(asked):
        if name.startswith(_TRANSLATED):
            stats[f"asks for {name}"] += 1
    if any(suffix and "OWNER_NOVA" in g["required"] for suffix, g in groups.items()):
        stats["asks for OWNER_NOVA on a PCI group"] += 1


# what the translations ask for, counted in hunt mode's report
_TRANSLATED = (
    "MEM_ENCRYPTION_CONTEXT",
    "CUSTOM_PMEM_NAMESPACE_",
    "COMPUTE_SECURITY_",
    "COMPUTE_SOCKET_PCI_NUMA_AFFINITY",
    "COMPUTE_ADDRESS_SPACE_",
    "HW_CPU_X86_AMD_SEV",
    "HW_CPU_X86_INTEL_TDX",
    "HW_CPU_HYPERTHREADING",
    "!HW_CPU_HYPERTHREADING",
)


# -- the property ------------------------------------------------------------------------------
def test_placement_query_equals_novas(nova) -> None:
    stats: Counter[str] = Counter()

    @settings(
        max_examples=examples(150),
        deadline=None,
        derandomize=not HUNTING,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(payload=request_payloads())
    def example(payload: dict[str, Any]) -> None:
        answer = nova.call("query", "queries", payload)
        expected = novas(answer)
        _classify(expected, answer, stats)
        mine = ours(payload, answer["spec"])
        for bug, outcome in answer.get("without_bug", {}).items():
            # a nova bug changes nova's answer: ours must be nova's without it
            if mine != expected and mine == novas(outcome):
                expected = mine
                stats[f"nova bug recognised: {bug}"] += 1
        assert mine == expected, (
            f"nova: {answer.get('error') or answer['queries']}\n"
            f"nova's message: {answer.get('message')}"
        )

    example()
    if HUNTING:
        print("\nPlacement query, nova 34 vs ours:")
        for key, count in sorted(stats.items()):
            print(f"  {count:5d}  {key}")
    # the examples reach both outcomes and the translations, or they prove little
    refused = sum(n for k, n in stats.items() if k.startswith("nova refuses"))
    no_host = sum(n for k, n in stats.items() if k.startswith("Placement refuses"))
    assert refused and stats["queries"] >= 0.4 * (stats["queries"] + refused + no_host), stats
    assert stats["with the VCPU fallback"] and stats["asks for COMPUTE_SECURITY_TPM_2_0"], stats
