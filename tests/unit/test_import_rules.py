"""Which package may import which (docs/architecture.md, "Packages and who may import whom").

Every module of the product is read as text (nothing is imported) and each of its imports,
at the top or inside a function, is checked against the rules below. A new import that
breaks a rule fails here with the module, the line and the rule: move the code to the
package that owns it instead of adding an exception.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduler", "filters", "weighers", "db", "placement_client")

# what sits above the request path: only the console commands and the demo may use it
_TOP = ("scheduler.cmd", "scheduler.demo")
_SERVICE = ("scheduler.rpc", "scheduler.drivers", "scheduler.explain", *_TOP)

# the telemetry a request path may count into: only the metrics themselves, never the
# listener, the health monitor or the report
_TELEMETRY_SERVICE = (
    "scheduler.telemetry.exporter",
    "scheduler.telemetry.monitor",
    "scheduler.telemetry.gmr",
)

# what writes nova's database beside the request path, started by the service: nova's
# tables, the options, the shared model; none of the request path's stages
_NOVA_WRITER = (
    *_SERVICE,
    "scheduler.hosts",
    "placement_client",
    "scheduler.telemetry",
    "filters",
    "weighers",
    "placement_client.api",
    "placement_client.view",
)

# module prefix -> prefixes it must not import (a prefix matches the module and its children)
RULES: dict[str, tuple[str, ...]] = {
    # the leaves: HTTP to Placement, nova's tables
    "placement_client.api": ("scheduler", "placement_client.", "filters", "weighers", "db"),
    "db": ("scheduler", "filters", "weighers"),
    # Placement's providers held in the scheduler: reads Placement (client or its database),
    # knows nothing of nova, requests or hosts
    "placement_client.view": ("scheduler", "placement_client.", "filters", "weighers", "db"),
    # the model every stage shares
    "scheduler.objects": ("scheduler.", "placement_client", "filters", "weighers", "db"),
    "scheduler.exceptions": ("scheduler.", "placement_client", "filters", "weighers", "db"),
    "scheduler.conf": ("scheduler.", "placement_client", "filters", "weighers", "db"),
    "scheduler.primitives": ("scheduler.", "placement_client", "filters", "weighers", "db"),
    # what an operator watches: the metrics are a leaf every stage may count into; the
    # listener, monitor and report are handed the service and its driver, never import them
    "scheduler.telemetry.metrics": (
        "scheduler.",
        "filters",
        "weighers",
        "db",
        "placement_client.api",
        "placement_client.view",
    ),
    "scheduler.telemetry": (
        *_SERVICE,
        "scheduler.hosts",
        "placement_client",
        "filters",
        "weighers",
        "db",
        "placement_client.api",
        "placement_client.view",
    ),
    "scheduler.request": (*_SERVICE, "scheduler.hosts", "placement_client", "filters"),
    # nova's plugins under nova's names: the shared model only (the adapters in filters/
    # and weighers/ use it)
    "scheduler.nova_plugins": (
        *_SERVICE,
        "scheduler.hosts",
        "placement_client",
        "scheduler.telemetry",
        "filters",
        "weighers",
        "db",
        "placement_client.api",
        "placement_client.view",
    ),
    # the scheduler's own services row: a write to nova's database, started by the service
    "scheduler.servicegroup": _NOVA_WRITER,
    # host discovery on the elected scheduler: writes host mappings as nova-manage does,
    # started by the service
    "scheduler.discovery": _NOVA_WRITER,
    "scheduler.leader": _NOVA_WRITER,
    # pure maths over plain data
    "scheduler.resources": (
        *_SERVICE,
        "scheduler.hosts",
        "placement_client",
        "filters",
        "weighers",
        "db",
        "placement_client.api",
    ),
    # plugins see the request, the host state and the maths; never the wire, RPC, I/O
    "filters": (
        *_SERVICE,
        "scheduler.telemetry",
        "placement_client",
        "placement_client.view",
        "scheduler.hosts.manager",
        "scheduler.hosts.cells",
        "scheduler.hosts.cell_reads",
        "scheduler.hosts.aggregate_cache",
        "scheduler.hosts.consumption",
        "scheduler.hosts.refresher",
        "scheduler.hosts.gc_policy",
        "scheduler.hosts.instances",
        "weighers",
        "db",
        "placement_client.api",
    ),
    "weighers": (
        *_SERVICE,
        "scheduler.telemetry",
        "placement_client",
        "placement_client.view",
        "scheduler.hosts.manager",
        "scheduler.hosts.cells",
        "scheduler.hosts.cell_reads",
        "scheduler.hosts.aggregate_cache",
        "scheduler.hosts.consumption",
        "scheduler.hosts.refresher",
        "scheduler.hosts.gc_policy",
        "scheduler.hosts.instances",
        "filters",
        "db",
        "placement_client.api",
    ),
    # the scheduling framework: the plugins' handlers over the hosts given; never what
    # asks (the drivers, RPC, explain), Placement or the host cache's reads
    "scheduler.framework": (
        *_SERVICE,
        "placement_client",
        "scheduler.hosts.manager",
        "scheduler.hosts.cells",
        "scheduler.hosts.cell_reads",
        "scheduler.hosts.aggregate_cache",
        "scheduler.hosts.consumption",
        "scheduler.hosts.refresher",
        "scheduler.telemetry",
        "scheduler.records",
        "db",
    ),
    # the host cache reads the cell databases; it knows nothing of requests in flight
    "scheduler.hosts": (
        *_SERVICE,
        *_TELEMETRY_SERVICE,
        "placement_client",
        "placement_client.view",
        "filters",
        "weighers",
        "placement_client.api",
    ),
    # the Placement query
    "placement_client": (*_SERVICE, "scheduler.hosts", "filters", "weighers", "db"),
    # the drivers decide; they do not speak RPC and do not run explain
    "scheduler.drivers": (
        "scheduler.rpc",
        "scheduler.explain.dry_run",
        "scheduler.explain.render",
        "scheduler.explain.request_file",
        *_TELEMETRY_SERVICE,
        *_TOP,
        "db",
    ),
    # explain runs the driver's public steps on the driver object it is given
    "scheduler.explain": (
        "scheduler.drivers",
        "scheduler.rpc.manager",
        "scheduler.rpc.service",
        "scheduler.rpc.rpcapi",
        "scheduler.rpc.transport",
        *_TOP,
        "db",
    ),
    # the decision records: the options, the model, the exceptions and the metrics, with
    # SQLAlchemy; handed their records, they reach into no stage of the request path
    "scheduler.records": (
        *_SERVICE,
        *_TELEMETRY_SERVICE,
        "scheduler.hosts",
        "placement_client",
        "scheduler.request",
        "scheduler.resources",
        "scheduler.nova_plugins",
        "scheduler.servicegroup",
        "scheduler.primitives",
        "filters",
        "weighers",
        "db",
    ),
    # capacity counts over the driver object it is given, as explain does, and reads the
    # flavors from the API database
    "scheduler.capacity": (
        "scheduler.drivers",
        "scheduler.rpc",
        "scheduler.explain",
        *_TELEMETRY_SERVICE,
        *_TOP,
    ),
    # the replay runs the driver object it is given on the fleet it holds, with the records
    # the command decoded
    "scheduler.replay": (
        "scheduler.drivers",
        "scheduler.rpc",
        "scheduler.explain",
        "scheduler.capacity",
        *_TELEMETRY_SERVICE,
        *_TOP,
        "db",
    ),
    # the RPC edge reaches the driver through the object the service loads
    "scheduler.rpc": (
        *_TOP,
        "scheduler.drivers",
        "scheduler.hosts",
        "placement_client",
        "filters",
        "weighers",
        "db",
        "placement_client.api",
    ),
}


# modules every layer may import: names for shapes that travel through every stage, with
# no code of their own beyond the data (Placement's allocation request, a TypedDict; the
# guest's NUMA nodes and PCI requests the RPC edge decodes); they import nothing
EVERYWHERE = ("placement_client.api.shapes", "scheduler.resources.shapes")

# module prefix -> prefixes its rule lets it import all the same (a leaf inside a package)
ALLOWED: dict[str, tuple[str, ...]] = {
    # the RPC edge and the service call a driver through its declared seam alone
    "scheduler.rpc": ("scheduler.drivers.base",),
    # the view reads Placement through its HTTP client
    "placement_client.view": ("placement_client.api",),
    # whether a scheduler is up: the one rule of the host table
    "scheduler.leader": ("scheduler.hosts.table",),
}


def _matches(module: str, prefix: str) -> bool:
    if prefix.endswith("."):
        return module.startswith(prefix)
    return module == prefix or module.startswith(prefix + ".")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names taken from it) for every import of the module."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [alias.name for alias in node.names]
            out.append((node.lineno, node.module, names))
            # "from scheduler import explain" imports the module scheduler.explain
            out.extend((node.lineno, f"{node.module}.{name}", []) for name in names)
    return out


def _product_modules() -> list[tuple[str, Path]]:
    return sorted(
        (_module_name(path), path) for pkg in PACKAGES for path in (ROOT / pkg).rglob("*.py")
    )


def test_every_rule_names_a_package_that_exists():
    modules = {name for name, _ in _product_modules()}
    for owner, forbidden in RULES.items():
        assert any(_matches(m, owner) for m in modules), owner
        for prefix in forbidden:
            assert any(_matches(m, prefix.rstrip(".")) or _matches(m, prefix) for m in modules), (
                f"rule for {owner} names {prefix}, which does not exist"
            )


@pytest.mark.parametrize("owner", sorted(RULES))
def test_packages_import_only_what_their_layer_allows(owner):
    broken = []
    for name, path in _product_modules():
        if not _matches(name, owner):
            continue
        # a more specific rule (scheduler.hosts for scheduler.hosts.state) is checked on its own
        if any(
            other != owner and _matches(name, other) and len(other) > len(owner) for other in RULES
        ):
            continue
        allowed = ALLOWED.get(owner, ()) + EVERYWHERE
        for line, imported, _ in _imports(path):
            if any(_matches(imported, prefix) for prefix in allowed):
                continue
            for prefix in RULES[owner]:
                if _matches(imported, prefix) and not _matches(imported, owner):
                    broken.append(f"{path.relative_to(ROOT)}:{line} imports {imported} ({prefix})")
    assert broken == []


def test_what_every_layer_may_import_imports_nothing_of_the_product():
    for module in EVERYWHERE:
        path = ROOT / (module.replace(".", "/") + ".py")
        assert [m for _, m, _ in _imports(path) if m.startswith(PACKAGES)] == [], module


def test_no_module_takes_another_packages_private_names():
    taken = []
    for name, path in _product_modules():
        package = name.rsplit(".", 1)[0]
        for line, imported, names in _imports(path):
            if not imported.startswith(PACKAGES) or imported.rsplit(".", 1)[0] == package:
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                taken.append(f"{path.relative_to(ROOT)}:{line} takes {private} from {imported}")
    assert taken == []


def test_the_rules_catch_a_forbidden_import(tmp_path):
    # the checker itself: a filter importing the wire codec is refused
    bad = ROOT / "filters" / "_probe_import_rules.py"
    bad.write_text("from scheduler.rpc import wire\n")
    try:
        with pytest.raises(AssertionError, match="filters/_probe_import_rules.py:1 imports"):
            test_packages_import_only_what_their_layer_allows("filters")
    finally:
        bad.unlink()


def _trace_uses(path: Path) -> list[int]:
    """Lines where a module reads or writes an attribute named ``trace``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    return [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr == "trace"]


def test_plugins_never_touch_the_drivers_trace():
    # scheduler/request.py: the trace is the driver's record; plugins write the scratch area
    touching = [
        f"{path.relative_to(ROOT)}:{line}"
        for name, path in _product_modules()
        if name.startswith(("filters", "weighers"))
        for line in _trace_uses(path)
    ]
    assert touching == []


def test_the_trace_check_sees_a_plugin_writing_the_trace(tmp_path):
    probe = tmp_path / "probe.py"
    probe.write_text("def check(host, spec_obj):\n    spec_obj.trace.claimed.append('x')\n")
    assert _trace_uses(probe) == [2]
