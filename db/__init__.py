"""nova's database schema for what the scheduler reads, engines, and the read functions.

A leaf package: it imports nothing of ``scheduler``, ``filters``, ``weighers`` or
``placement_client``.
"""

from db.api import (
    CELL0_UUID,
    DatabaseError,
    create_cell_mapping,
    create_schema,
    dispose_engines,
    drop_database,
    ensure_cell0,
    ensure_database,
    get_engine,
    map_hosts,
    touch_services,
)
from db.queries import (
    AggregatesFingerprint,
    ComputeNodeRow,
    ServiceRow,
    get_aggregates,
    get_aggregates_by_metadata,
    get_aggregates_fingerprint,
    get_cell_mappings,
    get_compute_node_reports,
    get_compute_nodes,
    get_compute_nodes_by_host_or_node,
    get_compute_services,
    get_flagged_services,
    get_host_mappings,
    get_instance_details_by_host,
    get_instance_group,
    get_instance_uuids_by_host,
    get_minimum_service_version,
)

__all__ = [
    "AggregatesFingerprint",
    "CELL0_UUID",
    "ComputeNodeRow",
    "DatabaseError",
    "ServiceRow",
    "create_cell_mapping",
    "create_schema",
    "dispose_engines",
    "drop_database",
    "ensure_cell0",
    "ensure_database",
    "get_aggregates",
    "get_aggregates_fingerprint",
    "get_aggregates_by_metadata",
    "get_cell_mappings",
    "get_compute_node_reports",
    "get_compute_nodes",
    "get_compute_nodes_by_host_or_node",
    "get_compute_services",
    "get_engine",
    "get_flagged_services",
    "get_host_mappings",
    "get_instance_group",
    "get_instance_details_by_host",
    "get_instance_uuids_by_host",
    "get_minimum_service_version",
    "map_hosts",
    "touch_services",
]
