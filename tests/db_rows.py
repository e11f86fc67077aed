"""The smallest rows nova's cell tables accept, for tests that write a compute node (or a
nova-compute service) of their own beside a loaded fleet."""

from __future__ import annotations

from typing import Any


def compute_node(uuid: str, host: str, **values: Any) -> dict[str, Any]:
    """A ``compute_nodes`` row: every NOT NULL column, the node named after its host."""
    row: dict[str, Any] = dict(
        uuid=uuid,
        host=host,
        hypervisor_hostname=host,
        vcpus=8,
        memory_mb=16384,
        local_gb=100,
        vcpus_used=0,
        memory_mb_used=0,
        local_gb_used=0,
        hypervisor_type="QEMU",
        hypervisor_version=8002002,
        cpu_info="{}",
        deleted=0,
    )
    row.update(values)
    return row


def compute_service(host: str, **values: Any) -> dict[str, Any]:
    """A live ``services`` row of nova-compute on ``host``."""
    row: dict[str, Any] = dict(
        host=host, binary="nova-compute", topic="compute", report_count=1, deleted=0
    )
    row.update(values)
    return row


def compute_node_row(host: str, **values: Any) -> Any:
    """A compute node as a cell read returns it (``db.queries.ComputeNodeRow``): the columns
    of ``compute_node`` (uuid ``node-HOST``), the others None, ``values`` over them."""
    from db.queries import ComputeNodeRow

    row: dict[str, Any] = dict.fromkeys(ComputeNodeRow._fields)
    row.update((k, v) for k, v in compute_node(f"node-{host}", host).items() if k in row)
    row.update(values)
    return ComputeNodeRow(**row)
