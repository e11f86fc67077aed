"""SQLAlchemy tables with nova's own names and types.

Two metadata objects: ``API_METADATA`` (nova_api: cells, host mappings, aggregates, server
groups, flavors) and ``CELL_METADATA`` (a cell database: compute nodes, services, instances). Each
table has nova 34's full column set, types, nullability, indexes, unique constraints and
foreign keys (nova/db/api/models.py, nova/db/main/models.py, plus the columns nova dropped
from its models but not from its tables), so novasched can point at a live nova deployment
and read its rows as they are, and ``create_schema`` builds a schema nova's own tools and
seed scripts can write to. The scheduler reads only some of the columns. The one addition
is ``compute_nodes_updated_at_idx``, for the scheduler's "reported since" read.
tests/data/nova-34-schema.json (made by scripts/extract-nova-schema.py) is the reference
tests/unit/db/test_schema.py checks against. JSON columns stay text, as nova stores JSON
strings.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.dialects import mysql, postgresql

API_METADATA = sa.MetaData()
CELL_METADATA = sa.MetaData()

# nova's MediumText: TEXT everywhere, MEDIUMTEXT on MySQL (64 KiB is too small for cpu_info).
MediumText = sa.Text().with_variant(mysql.MEDIUMTEXT(), "mysql")
# nova's IPAddress: a 39-character string, INET on PostgreSQL.
IPAddress = sa.String(39).with_variant(postgresql.INET(), "postgresql")


def _timestamps() -> list[sa.Column]:
    return [sa.Column("created_at", sa.DateTime), sa.Column("updated_at", sa.DateTime)]


def _soft_delete() -> list[sa.Column]:
    # nova writes the row's id into ``deleted`` on delete, so live rows are deleted == 0
    return [sa.Column("deleted_at", sa.DateTime), sa.Column("deleted", sa.Integer, default=0)]


# --------------------------------------------------------------------------- API database

cell_mappings = sa.Table(
    "cell_mappings",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("name", sa.String(255)),
    sa.Column("transport_url", sa.Text),
    sa.Column("database_connection", sa.Text),
    sa.Column("disabled", sa.Boolean, default=False),
    sa.UniqueConstraint("uuid", name="uniq_cell_mappings0uuid"),
    sa.Index("uuid_idx", "uuid"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

host_mappings = sa.Table(
    "host_mappings",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("cell_id", sa.Integer, sa.ForeignKey("cell_mappings.id"), nullable=False),
    sa.Column("host", sa.String(255), nullable=False),
    sa.UniqueConstraint("host", name="uniq_host_mappings0host"),
    sa.Index("host_idx", "host"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

aggregates = sa.Table(
    "aggregates",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36)),
    sa.Column("name", sa.String(255)),
    sa.UniqueConstraint("name", name="uniq_aggregate0name"),
    sa.Index("aggregate_uuid_idx", "uuid"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

aggregate_hosts = sa.Table(
    "aggregate_hosts",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("host", sa.String(255)),
    sa.Column("aggregate_id", sa.Integer, sa.ForeignKey("aggregates.id"), nullable=False),
    sa.UniqueConstraint("host", "aggregate_id", name="uniq_aggregate_hosts0host0aggregate_id"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

aggregate_metadata = sa.Table(
    "aggregate_metadata",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("aggregate_id", sa.Integer, sa.ForeignKey("aggregates.id"), nullable=False),
    sa.Column("key", sa.String(255), nullable=False),
    sa.Column("value", sa.String(255), nullable=False),
    sa.UniqueConstraint("aggregate_id", "key", name="uniq_aggregate_metadata0aggregate_id0key"),
    sa.Index("aggregate_metadata_key_idx", "key"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

instance_groups = sa.Table(
    "instance_groups",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("user_id", sa.String(255)),
    sa.Column("project_id", sa.String(255)),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("name", sa.String(255)),
    sa.UniqueConstraint("uuid", name="uniq_instance_groups0uuid"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

instance_group_policy = sa.Table(
    "instance_group_policy",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("policy", sa.String(255)),
    sa.Column("rules", sa.Text),
    sa.Column("group_id", sa.Integer, sa.ForeignKey("instance_groups.id"), nullable=False),
    sa.Index("instance_group_policy_policy_idx", "policy"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

instance_group_member = sa.Table(
    "instance_group_member",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("instance_uuid", sa.String(255)),
    sa.Column("group_id", sa.Integer, sa.ForeignKey("instance_groups.id"), nullable=False),
    sa.Index("instance_group_member_instance_idx", "instance_uuid"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

flavors = sa.Table(
    "flavors",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("name", sa.String(255), nullable=False),
    sa.Column("memory_mb", sa.Integer, nullable=False),
    sa.Column("vcpus", sa.Integer, nullable=False),
    sa.Column("root_gb", sa.Integer),
    sa.Column("ephemeral_gb", sa.Integer),
    sa.Column("flavorid", sa.String(255), nullable=False),
    sa.Column("swap", sa.Integer, nullable=False, default=0),
    sa.Column("rxtx_factor", sa.Float, default=1),
    sa.Column("vcpu_weight", sa.Integer),
    sa.Column("disabled", sa.Boolean, default=False),
    sa.Column("is_public", sa.Boolean, default=True),
    sa.Column("description", sa.Text),
    sa.UniqueConstraint("flavorid", name="uniq_flavors0flavorid"),
    sa.UniqueConstraint("name", name="uniq_flavors0name"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

flavor_extra_specs = sa.Table(
    "flavor_extra_specs",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(255), nullable=False),
    sa.Column("value", sa.String(255)),
    sa.Column("flavor_id", sa.Integer, sa.ForeignKey("flavors.id"), nullable=False),
    sa.Index("flavor_extra_specs_flavor_id_key_idx", "flavor_id", "key"),
    sa.UniqueConstraint("flavor_id", "key", name="uniq_flavor_extra_specs0flavor_id0key"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
    mysql_collate="utf8_bin",
)

flavor_projects = sa.Table(
    "flavor_projects",
    API_METADATA,
    *_timestamps(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("flavor_id", sa.Integer, sa.ForeignKey("flavors.id"), nullable=False),
    sa.Column("project_id", sa.String(255), nullable=False),
    sa.UniqueConstraint(
        "flavor_id", "project_id", name="uniq_flavor_projects0flavor_id0project_id"
    ),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

# -------------------------------------------------------------------------- cell database

services = sa.Table(
    "services",
    CELL_METADATA,
    *_timestamps(),
    *_soft_delete(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("uuid", sa.String(36)),
    sa.Column("host", sa.String(255)),
    sa.Column("binary", sa.String(255)),
    sa.Column("topic", sa.String(255)),
    sa.Column("report_count", sa.Integer, nullable=False, default=0),
    sa.Column("disabled", sa.Boolean, default=False),
    sa.Column("disabled_reason", sa.String(255)),
    sa.Column("last_seen_up", sa.DateTime),
    sa.Column("forced_down", sa.Boolean, default=False),
    sa.Column("version", sa.Integer, default=0),
    sa.UniqueConstraint("host", "topic", "deleted", name="uniq_services0host0topic0deleted"),
    sa.UniqueConstraint("host", "binary", "deleted", name="uniq_services0host0binary0deleted"),
    sa.Index("services_uuid_idx", "uuid", unique=True),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

compute_nodes = sa.Table(
    "compute_nodes",
    CELL_METADATA,
    *_timestamps(),
    *_soft_delete(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("service_id", sa.Integer),
    sa.Column("host", sa.String(255)),
    sa.Column("uuid", sa.String(36)),
    sa.Column("vcpus", sa.Integer, nullable=False),
    sa.Column("memory_mb", sa.Integer, nullable=False),
    sa.Column("local_gb", sa.Integer, nullable=False),
    sa.Column("vcpus_used", sa.Integer, nullable=False),
    sa.Column("memory_mb_used", sa.Integer, nullable=False),
    sa.Column("local_gb_used", sa.Integer, nullable=False),
    sa.Column("hypervisor_type", MediumText, nullable=False),
    sa.Column("hypervisor_version", sa.Integer, nullable=False),
    sa.Column("hypervisor_hostname", sa.String(255)),
    sa.Column("free_ram_mb", sa.Integer),
    sa.Column("free_disk_gb", sa.Integer),
    sa.Column("current_workload", sa.Integer),
    sa.Column("running_vms", sa.Integer),
    sa.Column("cpu_info", MediumText, nullable=False),
    sa.Column("disk_available_least", sa.Integer),
    sa.Column("host_ip", IPAddress),
    sa.Column("supported_instances", sa.Text),
    sa.Column("metrics", sa.Text),
    sa.Column("pci_stats", sa.Text),
    sa.Column("extra_resources", sa.Text),
    sa.Column("stats", sa.Text, default="{}"),
    sa.Column("numa_topology", sa.Text),
    sa.Column("ram_allocation_ratio", sa.Float),
    sa.Column("cpu_allocation_ratio", sa.Float),
    sa.Column("disk_allocation_ratio", sa.Float),
    sa.Column("mapped", sa.Integer, default=0),
    sa.UniqueConstraint(
        "host",
        "hypervisor_hostname",
        "deleted",
        name="uniq_compute_nodes0host0hypervisor_hostname0deleted",
    ),
    sa.Index("compute_nodes_uuid_idx", "uuid", unique=True),
    # the incremental refresh reads "updated since": keep it an index range scan
    sa.Index("compute_nodes_updated_at_idx", "updated_at"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

instances = sa.Table(
    "instances",
    CELL_METADATA,
    *_timestamps(),
    *_soft_delete(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    # dropped from nova's model but still in nova's table (nova.db.main.models.REMOVED_COLUMNS)
    sa.Column("internal_id", sa.Integer),
    sa.Column("user_id", sa.String(255)),
    sa.Column("project_id", sa.String(255)),
    sa.Column("image_ref", sa.String(255)),
    sa.Column("kernel_id", sa.String(255)),
    sa.Column("ramdisk_id", sa.String(255)),
    sa.Column("hostname", sa.String(255)),
    sa.Column("launch_index", sa.Integer),
    sa.Column("key_name", sa.String(255)),
    sa.Column("key_data", MediumText),
    sa.Column("power_state", sa.Integer),
    sa.Column("vm_state", sa.String(255)),
    sa.Column("task_state", sa.String(255)),
    sa.Column("memory_mb", sa.Integer),
    sa.Column("vcpus", sa.Integer),
    sa.Column("root_gb", sa.Integer),
    sa.Column("ephemeral_gb", sa.Integer),
    sa.Column("ephemeral_key_uuid", sa.String(36)),
    sa.Column("host", sa.String(255)),
    sa.Column("node", sa.String(255)),
    sa.Column("compute_id", sa.BigInteger),
    sa.Column("instance_type_id", sa.Integer),
    sa.Column("user_data", MediumText),
    sa.Column("reservation_id", sa.String(255)),
    sa.Column("launched_at", sa.DateTime),
    sa.Column("terminated_at", sa.DateTime),
    sa.Column("availability_zone", sa.String(255)),
    sa.Column("display_name", sa.String(255)),
    sa.Column("display_description", sa.String(255)),
    sa.Column("launched_on", MediumText),
    sa.Column("locked", sa.Boolean),
    sa.Column("locked_by", sa.Enum("owner", "admin", name="instances0locked_by")),
    sa.Column("os_type", sa.String(255)),
    sa.Column("architecture", sa.String(255)),
    sa.Column("vm_mode", sa.String(255)),
    sa.Column("uuid", sa.String(36), nullable=False),
    sa.Column("root_device_name", sa.String(255)),
    sa.Column("default_ephemeral_device", sa.String(255)),
    sa.Column("default_swap_device", sa.String(255)),
    sa.Column("config_drive", sa.String(255)),
    sa.Column("access_ip_v4", IPAddress),
    sa.Column("access_ip_v6", IPAddress),
    sa.Column("auto_disk_config", sa.Boolean),
    sa.Column("progress", sa.Integer),
    sa.Column("shutdown_terminate", sa.Boolean, default=False),
    sa.Column("disable_terminate", sa.Boolean, default=False),
    sa.Column("cell_name", sa.String(255)),
    sa.Column("cleaned", sa.Integer, default=0),
    sa.Column("hidden", sa.Boolean, default=False),
    sa.UniqueConstraint("uuid", name="uniq_instances0uuid"),
    sa.Index("instances_project_id_idx", "project_id"),
    sa.Index("instances_project_id_deleted_idx", "project_id", "deleted"),
    sa.Index("instances_reservation_id_idx", "reservation_id"),
    sa.Index("instances_terminated_at_launched_at_idx", "terminated_at", "launched_at"),
    sa.Index("instances_uuid_deleted_idx", "uuid", "deleted"),
    sa.Index("instances_task_state_updated_at_idx", "task_state", "updated_at"),
    # also serves the scheduler's "live instances on these hosts" read (host, deleted)
    sa.Index("instances_host_node_deleted_idx", "host", "node", "deleted"),
    sa.Index("instances_host_deleted_cleaned_idx", "host", "deleted", "cleaned"),
    sa.Index("instances_deleted_created_at_idx", "deleted", "created_at"),
    sa.Index("instances_updated_at_project_id_idx", "updated_at", "project_id"),
    sa.Index("instances_compute_id_deleted_idx", "compute_id", "deleted"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

# nova keeps each instance's image properties here as ``image_<property>`` keys
instance_system_metadata = sa.Table(
    "instance_system_metadata",
    CELL_METADATA,
    *_timestamps(),
    *_soft_delete(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("key", sa.String(255), nullable=False),
    sa.Column("value", sa.String(255)),
    sa.Column("instance_uuid", sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False),
    sa.Index("instance_uuid", "instance_uuid"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

# what nova keeps of an instance beside its row; novasched reads ``numa_topology`` (the
# NUMA cells and pinned CPUs the compute gave it: a replay takes them back from its host)
instance_extra = sa.Table(
    "instance_extra",
    CELL_METADATA,
    *_timestamps(),
    *_soft_delete(),
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("instance_uuid", sa.String(36), sa.ForeignKey("instances.uuid"), nullable=False),
    *(
        sa.Column(name, sa.Text)
        for name in (
            "device_metadata",
            "numa_topology",
            "pci_requests",
            "flavor",
            "vcpu_model",
            "migration_context",
            "keypairs",
            "trusted_certs",
            "vpmems",
            "resources",
        )
    ),
    sa.Index("instance_extra_idx", "instance_uuid"),
    mysql_engine="InnoDB",
    mysql_charset="utf8",
)

__all__ = [
    "API_METADATA",
    "CELL_METADATA",
    "aggregate_hosts",
    "aggregate_metadata",
    "aggregates",
    "cell_mappings",
    "compute_nodes",
    "host_mappings",
    "instance_group_member",
    "instance_group_policy",
    "instance_extra",
    "instance_groups",
    "instance_system_metadata",
    "instances",
    "services",
]
