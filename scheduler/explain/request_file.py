"""The requests ``novasched-manage explain`` reads: flags (``--flavor``, ``--image-props``,
``--hints`` ...) and request files (a nova RequestSpec primitive, or our short form of
docs/explain.md).
"""

from __future__ import annotations

from typing import Any

from scheduler.objects import Flavor, ImageMeta, RequestSpec
from scheduler.rpc import wire


class ExplainInputError(ValueError):
    """A request given to explain (flags or a request file) that cannot be understood."""


def split_pairs(text: str, *, multi: bool = False) -> dict[str, Any]:
    """``k=v,k2=v2`` → dict. A piece without ``=`` continues the previous value (values may
    hold commas: ``hw:cpu_dedicated_mask=0,1``); with ``multi`` it is another value of the
    previous key and every value is a list (``different_host=a,b``)."""
    out: dict[str, Any] = {}
    last: str | None = None
    for piece in text.split(","):
        if not piece.strip():
            continue
        if "=" not in piece:
            if last is None:
                raise ExplainInputError(f"expected key=value, got {piece!r} in {text!r}")
            if multi:
                out[last].append(piece.strip())
            else:
                out[last] += "," + piece.strip()
            continue
        key, value = piece.split("=", 1)
        key = key.strip()
        if not key:
            raise ExplainInputError(f"empty key in {text!r}")
        if multi:
            out.setdefault(key, []).append(value.strip())
        else:
            out[key] = value.strip()
        last = key
    return out


def _int_field(value: Any, what: str) -> int:
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        raise ExplainInputError(f"{what} must be a whole number, got {value!r}") from None
    if number < 0:
        raise ExplainInputError(f"{what} must not be negative, got {value!r}")
    return number


def parse_flavor(text: str) -> Flavor:
    """``NAME:VCPUS:RAM_MB:DISK_GB[:key=val,...]`` → Flavor (extra spec keys may contain
    colons: ``m1:2:2048:20:hw:cpu_policy=dedicated,trait:CUSTOM_GPU=required``)."""
    parts = text.split(":", 4)
    if len(parts) < 4:
        raise ExplainInputError(
            f"--flavor {text!r}: expected NAME:VCPUS:RAM_MB:DISK_GB[:key=val,...]"
        )
    name, vcpus, ram, disk = parts[:4]
    extra = split_pairs(parts[4]) if len(parts) == 5 else {}
    return Flavor(
        name=name,
        vcpus=_int_field(vcpus, "VCPUS"),
        memory_mb=_int_field(ram, "RAM_MB"),
        root_gb=_int_field(disk, "DISK_GB"),
        extra_specs={k: str(v) for k, v in extra.items()},
    )


_JSON_KEYS = {
    "flavor",
    "image_props",
    "hints",
    "az",
    "num_instances",
    "project_id",
    "user_id",
    "force_hosts",
    "ignore_hosts",
    "is_bfv",
}


def _flavor_from_json(value: Any) -> Flavor:
    if isinstance(value, str):
        return parse_flavor(value)
    if not isinstance(value, dict):
        raise ExplainInputError("'flavor' must be a NAME:VCPUS:RAM_MB:DISK_GB string or object")
    unknown = set(value) - {
        "name",
        "vcpus",
        "memory_mb",
        "root_gb",
        "ephemeral_gb",
        "swap",
        "extra_specs",
    }
    if unknown:
        raise ExplainInputError(f"unknown flavor field(s): {', '.join(sorted(unknown))}")
    for key in ("vcpus", "memory_mb"):
        if key not in value:
            raise ExplainInputError(f"flavor.{key} is required")
    extra = value.get("extra_specs") or {}
    if not isinstance(extra, dict):
        raise ExplainInputError("flavor.extra_specs must be an object")
    return Flavor(
        name=str(value.get("name") or ""),
        vcpus=_int_field(value["vcpus"], "flavor.vcpus"),
        memory_mb=_int_field(value["memory_mb"], "flavor.memory_mb"),
        root_gb=_int_field(value.get("root_gb", 0), "flavor.root_gb"),
        ephemeral_gb=_int_field(value.get("ephemeral_gb", 0), "flavor.ephemeral_gb"),
        swap=_int_field(value.get("swap", 0), "flavor.swap"),
        extra_specs={str(k): str(v) for k, v in extra.items()},
    )


def _pairs_from_json(value: Any, what: str, *, multi: bool) -> dict[str, Any]:
    if isinstance(value, str):
        return split_pairs(value, multi=multi)
    if not isinstance(value, dict):
        raise ExplainInputError(f"{what!r} must be an object or a k=v,... string")
    if not multi:
        return dict(value)
    return {k: (list(v) if isinstance(v, list) else [v]) for k, v in value.items()}


def _str_list(value: Any, what: str) -> list[str]:
    if isinstance(value, str):
        return [v.strip() for v in value.split(",") if v.strip()]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ExplainInputError(f"{what!r} must be a list of names")


def spec_from_json(data: Any) -> RequestSpec:
    """A RequestSpec from a request file's content: a nova RequestSpec object primitive
    (``{"nova_object.name": "RequestSpec", ...}``, also inside ``{"spec_obj": ...}`` as
    nova's RPC message carries it), or our short form (docs/explain.md)."""
    if not isinstance(data, dict):
        raise ExplainInputError("the request file must hold a JSON object")
    if isinstance(data.get("spec_obj"), dict):
        data = data["spec_obj"]
    if "nova_object.name" in data:
        return wire.request_spec_from_primitive(data)
    unknown = set(data) - _JSON_KEYS
    if unknown:
        raise ExplainInputError(
            f"unknown request field(s): {', '.join(sorted(unknown))} "
            f"(known: {', '.join(sorted(_JSON_KEYS))})"
        )
    if "flavor" not in data:
        raise ExplainInputError("the request needs a 'flavor'")
    spec = RequestSpec(flavor=_flavor_from_json(data["flavor"]))
    apply_overrides(
        spec,
        image_props=_pairs_from_json(data["image_props"], "image_props", multi=False)
        if "image_props" in data
        else None,
        hints=_pairs_from_json(data["hints"], "hints", multi=True) if "hints" in data else None,
        az=data.get("az"),
        num_instances=_int_field(data["num_instances"], "num_instances")
        if "num_instances" in data
        else None,
    )
    spec.project_id = data.get("project_id")
    spec.user_id = data.get("user_id")
    if "force_hosts" in data:
        spec.force_hosts = _str_list(data["force_hosts"], "force_hosts")
    if "ignore_hosts" in data:
        spec.ignore_hosts = _str_list(data["ignore_hosts"], "ignore_hosts")
    spec.is_bfv = bool(data.get("is_bfv", False))
    return spec


def apply_overrides(
    spec: RequestSpec,
    *,
    flavor: Flavor | None = None,
    image_props: dict[str, Any] | None = None,
    hints: dict[str, list[Any]] | None = None,
    az: str | None = None,
    num_instances: int | None = None,
) -> RequestSpec:
    """Put the command line's values onto ``spec``: the flavor, the availability zone and the
    instance count replace; image properties and hints are merged in."""
    if flavor is not None:
        spec.flavor = flavor
    if image_props:
        if spec.image is None:
            spec.image = ImageMeta()
        spec.image.properties = {**(spec.image.properties or {}), **image_props}
    if hints:
        spec.scheduler_hints = {**(spec.scheduler_hints or {}), **hints}
    if az:
        spec.availability_zone = az
    if num_instances is not None:
        if num_instances < 1:
            raise ExplainInputError("the number of instances must be at least 1")
        spec.num_instances = num_instances
    return spec
