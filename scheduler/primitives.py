"""nova's object envelopes: the form in which nova sends objects over RPC and stores some JSON
columns (a compute node's ``numa_topology`` is a NUMATopology primitive).

``scheduler/rpc/wire/`` is the codec that turns primitives into our model; the reading
helper below is here, apart from it, because the NUMA maths reads stored primitives too.
"""

from __future__ import annotations

from typing import Any

NAME = "nova_object.name"
NAMESPACE = "nova_object.namespace"
VERSION = "nova_object.version"
DATA = "nova_object.data"
CHANGES = "nova_object.changes"


def unwrap(value: Any) -> Any:
    """``value`` with every nova object envelope replaced by its data, recursively."""
    if isinstance(value, dict):
        if DATA in value and NAME in value:
            value = value[DATA]
            if not isinstance(value, dict):
                return value
        return {k: unwrap(v) if isinstance(v, (dict, list)) else v for k, v in value.items()}
    if isinstance(value, list):
        return [unwrap(v) if isinstance(v, (dict, list)) else v for v in value]
    return value
