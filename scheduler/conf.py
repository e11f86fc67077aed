"""Configuration options, with nova's group names, option names and defaults.

Every option novasched reads is registered here (as ``nova/conf/`` does) so that one
``list_opts()`` feeds oslo-config-generator and ``etc/novasched.conf.sample`` stays complete.
An operator's nova.conf can be given unchanged: options of these groups that we do not
implement are reported once at start-up (see ``warn_unsupported_options``) and ignored.

A nova.conf written before Ocata moved the scheduler options out of ``[DEFAULT]`` works too:
each old ``[DEFAULT]`` name (``scheduler_default_filters``, ``ram_weight_multiplier``, ...) is
a deprecated name of today's option, as nova declared it until it dropped them, so
oslo.config reads it and logs a deprecation warning naming the new group and option.
"""

from __future__ import annotations

import configparser
import logging
import socket

from keystoneauth1 import loading as ks_loading
from oslo_config import cfg

CONF = cfg.CONF
LOG = logging.getLogger(__name__)

# nova writes these two class paths as the defaults of available_filters/weight_classes;
# we read them as "every plugin registered in our stevedore namespace".
NOVA_ALL_FILTERS = "nova.scheduler.filters.all_filters"
NOVA_ALL_WEIGHERS = "nova.scheduler.weights.all_weighers"

# ``[scheduler] driver`` before nova Ocata named a class (nova's Newton manager still loaded
# one with a warning): the class path -> our entry point of the same driver.
NOVA_DRIVER_CLASS_PATHS = {
    "nova.scheduler.filter_scheduler.FilterScheduler": "filter_scheduler",
    "nova.scheduler.chance.ChanceScheduler": "chance_scheduler",
    "nova.scheduler.caching_scheduler.CachingScheduler": "caching_scheduler",
}

DEFAULT_ENABLED_FILTERS = [
    "ComputeFilter",
    "ComputeCapabilitiesFilter",
    "ImagePropertiesFilter",
    "ServerGroupAntiAffinityFilter",
    "ServerGroupAffinityFilter",
]

default_opts = [
    cfg.StrOpt(
        "host",
        default=socket.gethostname(),
        sample_default="<current_hostname>",
        help="Name of this scheduler host; the RPC server listens as topic 'scheduler' on this "
        "server name, as nova-scheduler does.",
    ),
    cfg.IntOpt(
        "service_down_time",
        default=60,
        min=1,
        help="Maximum seconds since a nova-compute service last checked in for it to count as "
        "up (ComputeFilter).",
    ),
    cfg.StrOpt(
        "state_path",
        default="/var/lib/nova",
        help="nova's: top-level directory for nova's state. novasched keeps its decision "
        "records there unless [decision_records] connection says otherwise.",
    ),
    cfg.IntOpt(
        "report_interval",
        default=10,
        help="Seconds between two heartbeats of the scheduler's own services row (binary "
        "nova-scheduler, in the database of [database] connection), as nova's services "
        "write. 0 writes the row at start and never again.",
    ),
    cfg.StrOpt(
        "servicegroup_driver",
        default="db",
        choices=[
            ("db", "heartbeats in the services table of each cell database"),
            ("mc", "heartbeats in memcached: not supported, the scheduler refuses to start"),
        ],
        help="Where nova's services keep their heartbeats. novasched reads a compute "
        "service's liveness from the services table of the cell databases, as nova's db "
        "driver does, and supports 'db' only.",
    ),
    cfg.StrOpt(
        "default_availability_zone",
        default="nova",
        help="Availability zone reported for hosts that belong to no aggregate with "
        "availability_zone metadata.",
    ),
    cfg.StrOpt(
        "concurrency_backend",
        default="threading",
        choices=[
            ("threading", "Native threads (nova's default since 2026.1)."),
            ("eventlet", "Green threads; the process is monkey-patched at start."),
        ],
        help="How the RPC executor and the cell database scatter-gather run concurrently.",
    ),
    cfg.IntOpt(
        "long_rpc_timeout",
        default=1800,
        help="Timeout (seconds) the conductor-side client uses for select_destinations, as "
        "nova's does; rpc_response_timeout is the call-monitor heartbeat.",
    ),
    cfg.IntOpt(
        "cell_worker_thread_pool_size",
        default=5,
        min=1,
        help="Threads used to read the cell databases in parallel.",
    ),
]

scheduler_opts = [
    cfg.StrOpt(
        "driver",
        deprecated_name="scheduler_driver",
        deprecated_group="DEFAULT",
        default="filter_scheduler",
        help="Scheduler driver, by entry point name in the 'novasched.scheduler.driver' "
        "namespace: filter_scheduler, chance_scheduler, caching_scheduler or a plugin's. "
        "nova's old class paths (nova.scheduler.filter_scheduler.FilterScheduler, "
        "nova.scheduler.chance.ChanceScheduler, "
        "nova.scheduler.caching_scheduler.CachingScheduler) are read as these names, with a "
        "warning.",
    ),
    cfg.IntOpt(
        "max_attempts",
        deprecated_name="scheduler_max_attempts",
        deprecated_group="DEFAULT",
        default=3,
        min=1,
        help="Maximum number of schedule attempts per instance: one chosen host plus up to "
        "max_attempts - 1 alternates.",
    ),
    cfg.IntOpt(
        "max_placement_results",
        default=1000,
        min=1,
        help="Maximum number of allocation candidates asked of Placement (its 'limit').",
    ),
    cfg.IntOpt(
        "workers",
        min=0,
        help="Number of scheduler processes consuming the same topic. Default: CPU count.",
    ),
    cfg.IntOpt(
        "discover_hosts_in_cells_interval",
        default=-1,
        min=-1,
        help="Accepted for nova.conf compatibility. novasched does not map hosts into cells "
        "(that is nova-manage's job); any value other than -1 is logged and ignored.",
    ),
    cfg.FloatOpt(
        "cell_timeout",
        default=10.0,
        min=0.1,
        help="Seconds to wait for one cell database per request. A cell that fails or does not "
        "answer in time is skipped with a warning and the request goes on with the others "
        "(nova hard-codes 60).",
    ),
    cfg.IntOpt(
        "periodic_task_interval",
        deprecated_name="scheduler_driver_task_period",
        deprecated_group="DEFAULT",
        default=60,
        help="caching_scheduler: seconds between refreshes of its host states (0 means 60, "
        "a negative value never refreshes after start-up), as nova's CachingScheduler had.",
    ),
    cfg.FloatOpt(
        "service_refresh_interval",
        default=1.0,
        min=0.0,
        help="(novasched) Seconds between the refresher thread's reads of each cell's "
        "service rows (heartbeats) and of compute nodes created or deleted. Requests do not "
        "wait for it: with read_your_writes each request reads the compute-node reports and "
        "the disabled or forced-down services itself. 0: no refresher, every request reads "
        "everything. nova's own tolerance for heartbeats is service_down_time.",
    ),
    cfg.BoolOpt(
        "read_your_writes",
        default=True,
        help="(novasched) Every request sees every change committed before it arrived, as "
        "nova's per-request reads do: a service enabled, disabled or forced down, compute "
        "nodes created, deleted or reporting, aggregates, their hosts and metadata. Each "
        "request then reads each cell's exceptional services (disabled, forced down, or "
        "near or past service_down_time: a scan of the services table, about 0.9 ms at "
        "1,000 services, 3.3 ms at 10,000, 28 ms at 100,000 on MariaDB, shared by concurrent "
        "requests and run while the request asks for its candidates), compares the API "
        "database's aggregate tables with those held (one statement), and, with the "
        "provider view's database feed, checks Placement's providers (one statement). Off: "
        "services come from the refresher (service_refresh_interval), aggregates from "
        "nova-api's casts and aggregate_cache_ttl, the provider view from its last refresh, "
        "so a request may not see a change made just before it.",
    ),
    cfg.FloatOpt(
        "consumption_max_age",
        default=120.0,
        min=0.0,
        help="(novasched) Seconds an instance this scheduler placed stays counted on its host's "
        "cached state when nothing else releases it first. It is released as soon as the "
        "compute node reports newer data, nova says the instance was deleted or is elsewhere, "
        "its claim is rolled back, or Placement no longer holds its allocation; this bound "
        "covers the rest (an instance that never reached its host, a compute that never "
        "writes its row again). nova-compute writes its row when it claims the instance, and "
        "its periodic resource update (every 60 s) writes any change missed: 120 s leaves one "
        "such period for the conductor and the compute's build queue to reach the claim and "
        "one for the report. 0 keeps a consumption until something else releases it.",
    ),
    cfg.FloatOpt(
        "request_deadline",
        default=300.0,
        min=0.0,
        help="(novasched) Seconds a select_destinations request may take, from its arrival, "
        "before the scheduler stops claiming, rolls back every claim the request made and "
        "answers NoValidHost. The caller's own limit, [DEFAULT] long_rpc_timeout (1800 s), "
        "applies too: the deadline is the earlier of the two, so no claim is made for a "
        "caller who has stopped listening. A healthy request takes well under a second; 300 s "
        "leaves room for a slow Placement while freeing a stuck request's claims long before "
        "the conductor gives up. 0 leaves only long_rpc_timeout.",
    ),
    cfg.IntOpt(
        "max_instances_per_request",
        default=0,
        min=0,
        help="(novasched) The most instances one select_destinations may ask for "
        "(num_instances and the length of instance_uuids); a larger request is refused as "
        "InvalidRequest before any work. nova bounds the number only by the project's "
        "[quota] instances (which may be unlimited) and sends one uuid per instance, so the "
        "default, 0, takes as many as max_request_bytes can carry (39 bytes a uuid: 26,886 "
        "at 1 MiB).",
    ),
    cfg.IntOpt(
        "max_request_bytes",
        default=1048576,
        min=1024,
        help="(novasched) The largest decoded request (the RequestSpec and the other "
        "arguments, measured as their JSON text) the scheduler reads; a larger one is refused "
        "as InvalidRequest before any work. nova puts no bound on a flavor's extra specs, so "
        "this guard is their only one; it is nine times the largest boot nova-api takes "
        "(oslo.middleware's max_request_body_size, 114,688 bytes, which bounds the scheduler "
        "hints). nova's own requests are a few kilobytes.",
    ),
    cfg.IntOpt(
        "aggregate_cache_ttl",
        default=30,
        min=-1,
        help="Seconds the in-memory copy of the API database's aggregates is trusted before it "
        "is re-read (nova keeps it current only through the update_aggregates RPC, which "
        "novasched also applies). 0 re-reads on every request; -1 never re-reads. Not used "
        "while read_your_writes and the refresher run: every request checks the aggregates "
        "then, and the refresher every service_refresh_interval.",
    ),
    cfg.BoolOpt(
        "limit_tenants_to_placement_aggregate",
        default=False,
        help="require_tenant_aggregate prefilter: restrict a project to the aggregates whose "
        "filter_tenant_id* metadata names it.",
    ),
    cfg.BoolOpt(
        "placement_aggregate_required_for_tenants",
        default=False,
        help="With limit_tenants_to_placement_aggregate, fail a request whose project is in no "
        "aggregate instead of letting it go anywhere.",
    ),
    cfg.BoolOpt(
        "query_placement_for_image_type_support",
        default=False,
        help="require_image_type_support prefilter: ask Placement for hosts supporting the "
        "image's disk format (COMPUTE_IMAGE_TYPE_*).",
    ),
    cfg.BoolOpt(
        "enable_isolated_aggregate_filtering",
        default=False,
        help="isolate_aggregates prefilter: keep requests off aggregates whose trait:X=required "
        "metadata names traits the request does not require.",
    ),
    cfg.BoolOpt(
        "image_metadata_prefilter",
        default=False,
        help="transform_image_metadata prefilter: image properties (disk/cdrom bus, video, vif, "
        "architecture, vIOMMU models) become required traits.",
    ),
    cfg.BoolOpt(
        "novalidhost_detail",
        default=False,
        help="(novasched) Send the full NoValidHost explanation to nova's conductor. nova "
        "stores the reason as the instance fault, which the instance's owner sees: the "
        "explanation names filters, host counts, aggregate and provider UUIDs and the "
        "Placement query, so by default the conductor gets nova's own 'There are not enough "
        "hosts available.' and the request id, and the explanation is logged at INFO with "
        "that id (and counted in the metrics; `novasched-manage explain` shows it). Turn it "
        "on only where every tenant may see how the cloud is built (a private cloud).",
    ),
    cfg.BoolOpt(
        "query_placement_for_routed_network_aggregates",
        default=False,
        help="routed_networks_filter prefilter: send a request that names networks or "
        "ports only to hosts in the Placement aggregates of their routed network segments "
        "(each network's segments, or the segment of the subnet of a port that has an IP "
        "address). Segments come from Neutron, through the [neutron] options; a Neutron or "
        "Placement error fails the request with NoValidHost.",
    ),
]

# deprecated_name/deprecated_group (here and in scheduler_opts): the option's [DEFAULT] name
# in nova until Ocata. A name that did not change is spelled out too, so that the sample
# config lists it (oslo-config-generator leaves out a deprecated group without a name).
filter_scheduler_opts = [
    cfg.MultiStrOpt(
        "available_filters",
        deprecated_name="scheduler_available_filters",
        deprecated_group="DEFAULT",
        default=[NOVA_ALL_FILTERS],
        help="Filter classes enabled_filters may name, as in nova: "
        "'nova.scheduler.filters.all_filters' (the default) is every filter registered in the "
        "'novasched.filters' entry-point namespace; nova's path to a built-in novasched "
        "implements loads novasched's; any other class path (a filter written for nova, or "
        "a function returning such classes) is imported in novasched's Python and run "
        "through an adapter. A path that cannot be imported stops the service at start-up.",
    ),
    cfg.ListOpt(
        "enabled_filters",
        deprecated_name="scheduler_default_filters",
        deprecated_group="DEFAULT",
        default=DEFAULT_ENABLED_FILTERS,
        help="Filters to run, in this order, by class name; each must be among the classes "
        "of available_filters (else the service does not start, as nova raises "
        "SchedulerHostFilterNotFound).",
    ),
    cfg.ListOpt(
        "weight_classes",
        deprecated_name="scheduler_weight_classes",
        deprecated_group="DEFAULT",
        default=[NOVA_ALL_WEIGHERS],
        help="Weighers to use: names registered in the 'novasched.weighers' entry-point "
        "namespace, or class paths. nova's 'nova.scheduler.weights.all_weighers' (the "
        "default) means every built-in weigher; nova's path to a built-in novasched "
        "implements loads novasched's; any other class path (a weigher written for nova) is "
        "imported in novasched's Python and run through an adapter.",
    ),
    cfg.IntOpt(
        "host_subset_size",
        deprecated_name="scheduler_host_subset_size",
        deprecated_group="DEFAULT",
        default=1,
        min=1,
        help="Pick the host at random among this many best-weighed hosts.",
    ),
    cfg.BoolOpt(
        "shuffle_best_same_weighed_hosts",
        default=False,
        help="Shuffle the hosts that share the best weight before picking.",
    ),
    cfg.IntOpt(
        "max_io_ops_per_host",
        deprecated_name="max_io_ops_per_host",
        deprecated_group="DEFAULT",
        default=8,
        min=0,
        help="IoOpsFilter: hosts with this many or more concurrent I/O-heavy operations are "
        "filtered out.",
    ),
    cfg.IntOpt(
        "max_instances_per_host",
        deprecated_name="max_instances_per_host",
        deprecated_group="DEFAULT",
        default=50,
        min=1,
        help="NumInstancesFilter: hosts with this many or more instances are filtered out.",
    ),
    cfg.BoolOpt(
        "track_instance_changes",
        deprecated_name="scheduler_tracks_instance_changes",
        deprecated_group="DEFAULT",
        default=True,
        help="Keep per-host instance lists from the compute services' RPC updates.",
    ),
    cfg.StrOpt(
        "image_properties_default_architecture",
        choices=[
            "alpha",
            "armv6",
            "armv7l",
            "armv7b",
            "aarch64",
            "cris",
            "i686",
            "ia64",
            "lm32",
            "m68k",
            "microblaze",
            "microblazeel",
            "mips",
            "mipsel",
            "mips64",
            "mips64el",
            "openrisc",
            "parisc",
            "parisc64",
            "ppc",
            "ppcle",
            "ppc64",
            "ppc64le",
            "ppcemb",
            "s390",
            "s390x",
            "sh4",
            "sh4eb",
            "sparc",
            "sparc64",
            "unicore32",
            "x86_64",
            "xtensa",
            "xtensaeb",
        ],
        help="ImagePropertiesFilter: architecture assumed for images without hw_architecture.",
    ),
    cfg.FloatOpt(
        "ram_weight_multiplier",
        deprecated_name="ram_weight_multiplier",
        deprecated_group="DEFAULT",
        default=1.0,
        help="RAMWeigher multiplier; negative stacks, positive spreads.",
    ),
    cfg.FloatOpt(
        "cpu_weight_multiplier",
        default=1.0,
        help="CPUWeigher multiplier; negative stacks, positive spreads.",
    ),
    cfg.FloatOpt(
        "disk_weight_multiplier",
        deprecated_name="disk_weight_multiplier",
        deprecated_group="DEFAULT",
        default=1.0,
        help="DiskWeigher multiplier; negative stacks, positive spreads.",
    ),
    cfg.FloatOpt(
        "io_ops_weight_multiplier",
        deprecated_name="io_ops_weight_multiplier",
        deprecated_group="DEFAULT",
        default=-1.0,
        help="IoOpsWeigher multiplier; negative prefers hosts with fewer I/O operations.",
    ),
    cfg.FloatOpt(
        "num_instances_weight_multiplier",
        default=0.0,
        help="NumInstancesWeigher multiplier; positive prefers hosts with more instances.",
    ),
    cfg.FloatOpt(
        "hypervisor_version_weight_multiplier",
        default=1.0,
        help="HypervisorVersionWeigher multiplier; positive prefers newer hypervisors.",
    ),
    cfg.FloatOpt(
        "build_failure_weight_multiplier",
        default=1000000.0,
        help="BuildFailureWeigher multiplier (applied negated): hosts with recent build "
        "failures sink.",
    ),
    cfg.FloatOpt(
        "cross_cell_move_weight_multiplier",
        default=1000000.0,
        help="CrossCellWeigher multiplier: prefer the source cell for moves.",
    ),
    cfg.FloatOpt(
        "pci_weight_multiplier",
        default=1.0,
        min=0.0,
        help="PCIWeigher multiplier: keep hosts with PCI devices for requests that need them.",
    ),
    cfg.FloatOpt(
        "soft_affinity_weight_multiplier",
        deprecated_name="soft_affinity_weight_multiplier",
        deprecated_group="DEFAULT",
        default=1.0,
        min=0.0,
        help="ServerGroupSoftAffinityWeigher multiplier.",
    ),
    cfg.FloatOpt(
        "soft_anti_affinity_weight_multiplier",
        deprecated_name="soft_anti_affinity_weight_multiplier",
        deprecated_group="DEFAULT",
        default=1.0,
        min=0.0,
        help="ServerGroupSoftAntiAffinityWeigher multiplier.",
    ),
    cfg.FloatOpt(
        "image_props_weight_multiplier",
        default=0.0,
        help="ImagePropertiesWeigher multiplier; 0 turns it off.",
    ),
    cfg.ListOpt(
        "image_props_weight_setting",
        default=[],
        help="ImagePropertiesWeigher: 'property=ratio' pairs weighing each image property.",
    ),
    cfg.ListOpt(
        "isolated_images",
        deprecated_name="isolated_images",
        deprecated_group="DEFAULT",
        default=[],
        help="IsolatedHostsFilter: image uuids that may only run on isolated_hosts.",
    ),
    cfg.ListOpt(
        "isolated_hosts",
        deprecated_name="isolated_hosts",
        deprecated_group="DEFAULT",
        default=[],
        help="IsolatedHostsFilter: hosts reserved for isolated_images.",
    ),
    cfg.BoolOpt(
        "restrict_isolated_hosts_to_isolated_images",
        deprecated_name="restrict_isolated_hosts_to_isolated_images",
        deprecated_group="DEFAULT",
        default=True,
        help="IsolatedHostsFilter: isolated hosts take only isolated images.",
    ),
    cfg.StrOpt(
        "aggregate_image_properties_isolation_namespace",
        deprecated_name="aggregate_image_properties_isolation_namespace",
        deprecated_group="DEFAULT",
        deprecated_for_removal=True,
        help="AggregateImagePropertiesIsolation: only aggregate metadata keys in this "
        "namespace are checked.",
    ),
    cfg.StrOpt(
        "aggregate_image_properties_isolation_separator",
        deprecated_name="aggregate_image_properties_isolation_separator",
        deprecated_group="DEFAULT",
        default=".",
        deprecated_for_removal=True,
        help="AggregateImagePropertiesIsolation: separator between namespace and key.",
    ),
    cfg.BoolOpt(
        "pci_in_placement",
        default=False,
        help="PCI devices are tracked in Placement (PCI request groups in the query).",
    ),
]

metrics_opts = [
    cfg.FloatOpt(
        "weight_multiplier",
        default=1.0,
        help="MetricsWeigher multiplier (aggregate key: metrics_weight_multiplier).",
    ),
    cfg.ListOpt(
        "weight_setting",
        default=[],
        help="MetricsWeigher and MetricsFilter: 'metric=ratio' pairs.",
    ),
    cfg.BoolOpt(
        "required",
        default=True,
        help="MetricsWeigher: a host missing a metric is an error (True) or weighs "
        "weight_of_unavailable (False).",
    ),
    cfg.FloatOpt(
        "weight_of_unavailable",
        default=-10000.0,
        help="MetricsWeigher: the weight of a host missing a metric when required is False.",
    ),
]

workarounds_opts = [
    cfg.BoolOpt(
        "disable_fallback_pcpu_query",
        default=False,
        help="Do not make the second allocation-candidates query (VCPU instead of PCPU) for "
        "hw:cpu_policy=dedicated flavors.",
    ),
]

# nova's [compute] option that decides the order in which a NUMA guest's nodes try the host's
# cells (nova reads it in hardware.numa_fit_instance_to_host, which NUMATopologyFilter runs)
compute_opts = [
    cfg.BoolOpt(
        "packing_host_numa_cells_allocation_strategy",
        default=False,
        help="How the NUMA cells of a host are chosen for an instance's NUMA nodes, as nova's "
        "option of the same name. False (the default): spread, trying first the host cells "
        "with the most resources available (the fewest used shared CPUs, or for pinned "
        "instances the most free dedicated CPUs; then the most free memory). True: pack, "
        "trying the most used cells first, so that a cell is filled before a new one is used. "
        "Only hosts with more NUMA cells than the instance has nodes have a choice; cells "
        "with PCI devices come last (first for instances that ask for PCI devices) either way.",
    ),
]

upgrade_levels_opts = [
    cfg.StrOpt(
        "scheduler",
        help="Cap the scheduler RPC version the conductor-side client sends (e.g. 4.4).",
    ),
]

metrics_exporter_opts = [
    cfg.StrOpt(
        "listen",
        default=None,
        help="ours: HOST:PORT on which the scheduler serves Prometheus metrics (/metrics) and "
        "its health (/healthz, /livez, /readyz), for example 127.0.0.1:9180 or [::1]:9180. "
        "Unset (the default): no listener. With [scheduler] workers > 1 the supervising "
        "process serves the metrics of every worker together.",
    ),
    cfg.IntOpt(
        "ready_max_age",
        default=60,
        min=1,
        help="ours: /readyz reports unready when a worker's last successful cell read or its "
        "last answer from Placement is older than this many seconds (an idle worker asks "
        "Placement for its version document to keep the second current).",
    ),
    cfg.FloatOpt(
        "probe_interval",
        default=2.0,
        min=0.1,
        help="ours: how often each worker checks its broker connection and publishes its "
        "health and gauges (host count per cell, refresher lag, provider view age).",
    ),
    cfg.StrOpt(
        "multiproc_dir",
        default=None,
        help="ours: directory for prometheus-client's per-process metric files "
        "(PROMETHEUS_MULTIPROC_DIR; its *.db files are deleted at start). Unset: the "
        "environment's PROMETHEUS_MULTIPROC_DIR, else a private temporary directory "
        "removed at exit.",
    ),
]

api_database_opts = [
    cfg.StrOpt(
        "connection",
        secret=True,
        help="SQLAlchemy URL of nova's API database (cell_mappings, host_mappings, aggregates, "
        "instance groups).",
    ),
]

# nova's [notifications] options that decide what the scheduler's notifications look like
notifications_opts = [
    cfg.StrOpt(
        "notification_format",
        deprecated_group="DEFAULT",
        default="unversioned",
        choices=[
            ("both", "Both the legacy unversioned and the versioned notifications are emitted"),
            ("versioned", "Only the versioned notifications are emitted"),
            ("unversioned", "Only the legacy unversioned notifications are emitted"),
        ],
        help="Which notification format to emit, as nova's. Notifications are sent only when "
        "[oslo_messaging_notifications] driver is set (messagingv2, as nova's services).",
    ),
    cfg.ListOpt(
        "versioned_notifications_topics",
        default=["versioned_notifications"],
        help="The topics the versioned notifications are sent to, as nova's.",
    ),
]

database_opts = [
    cfg.StrOpt(
        "connection",
        secret=True,
        help="SQLAlchemy URL of the database of this scheduler's own services row (nova's "
        "main database, as nova-scheduler writes it), and the URL whose parts fill a cell "
        "mapping's templated database_connection ('{scheme}://{username}:{password}@"
        "{hostname}/cell1'). Unset: the scheduler does not appear in the service list.",
    ),
]


def _register_database_opts(conf: cfg.ConfigOpts) -> None:
    # oslo.db registers this group on the global CONF whenever it runs in the process (an
    # embedded Placement does): register its option objects when it is installed, so that
    # both registrations agree
    try:
        from oslo_db import options as db_options

        opts = db_options.database_opts
    except ImportError:
        opts = database_opts
    try:
        conf.register_opts(opts, group="database")
    except cfg.DuplicateOptError:
        pass


def database_connection(conf: cfg.ConfigOpts) -> str | None:
    """``[database] connection`` of ``conf`` (None when unset or not registered)."""
    try:
        return conf.database.connection or None
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError, AttributeError):
        return None


placement_opts = [
    cfg.StrOpt(
        "noauth2_user",
        default="admin",
        help="With auth_type = noauth2: the token sent as X-Auth-Token ('user[:project]'); "
        "Placement's noauth2 grants 'admin' the admin role.",
    ),
    cfg.IntOpt(
        "claim_retries",
        default=4,
        min=1,
        help="Attempts at a claim that hits a provider-generation conflict (409 "
        "placement.concurrent_update), with jittered back-off, as nova makes.",
    ),
    cfg.FloatOpt(
        "claim_retry_backoff",
        default=1.0,
        min=0.0,
        help="Back-off scale (seconds) between claim attempts: before attempt N the client "
        "sleeps a random time up to 2 * N * claim_retry_backoff, as nova does with 1.0.",
    ),
    cfg.BoolOpt(
        "coalesce_candidate_queries",
        default=True,
        help="(novasched) A GET /allocation_candidates identical to one this process sent "
        "after the request arrived, and still has in flight, waits for that one and shares "
        "its answer instead of asking Placement again: concurrent boots of the same flavor "
        "then cost Placement one query, not one each, and each answer holds every change "
        "committed before its request arrived. False asks Placement once per request, as "
        "nova does.",
    ),
    cfg.StrOpt(
        "view_feed",
        default="auto",
        choices=[
            ("auto", "database when view_database_connection is set, else none"),
            ("api", "Placement's HTTP API alone (opt-in: not fresh per request)"),
            ("database", "Placement's database, read-only (view_database_connection)"),
            ("none", "no provider view: every request asks GET /allocation_candidates"),
        ],
        help="(novasched) How the provider view is kept current. The view is the scheduler's "
        "own copy of Placement's resource providers (inventories, usage, traits, aggregates, "
        "trees); requests of the common shapes take their allocation candidates from it "
        "instead of GET /allocation_candidates, and Placement still checks every claim. "
        "With the database feed every request first checks Placement's database (one "
        "statement over resource_providers, shared by concurrent requests) and reads what "
        "changed, so it sees every change committed before it arrived, as nova does. The "
        "API feed cannot be checked per request cheaply: its view may miss a change made "
        "by someone else for up to view_refresh_interval (longer under load, never past "
        "view_max_age); every claim on its candidates is therefore first confirmed with "
        "Placement (view_confirm_claims), so no host is claimed that Placement would not "
        "offer. Through the API a refresh lists every provider each view_refresh_interval "
        "(about 0.07 s of Placement CPU per 1,000 providers) and the start-up load costs "
        "four GETs per provider: fine to a few thousand providers. See "
        "docs/architecture.md, 'The provider view'.",
    ),
    cfg.FloatOpt(
        "view_refresh_interval",
        default=1.0,
        min=0.05,
        help="(novasched) Seconds between two refreshes of the provider view: a change made "
        "by anyone else (another scheduler's claim, a compute's inventory or trait update, "
        "an aggregate change, a deleted provider) is in the view within about this long. "
        "A claim Placement refuses has its providers read again at once.",
    ),
    cfg.StrOpt(
        "view_database_connection",
        secret=True,
        help="(novasched) SQLAlchemy URL of Placement's database (its [placement_database] "
        "connection), read-only, for view_feed = database or auto. A database user with "
        "SELECT only is enough; novasched never writes to it.",
    ),
    cfg.FloatOpt(
        "view_max_age",
        default=10.0,
        min=0.1,
        help="(novasched) A provider view whose last successful refresh is older than this "
        "(seconds) is not used: requests ask Placement until it is refreshed again.",
    ),
    cfg.StrOpt(
        "view_confirm_claims",
        default="auto",
        choices=[
            (
                "auto",
                "confirm when the view was not proven current for the request (the API feed)",
            ),
            ("always", "confirm every claim on candidates from the view"),
        ],
        help="(novasched) Before a host chosen from the provider view's candidates is "
        "claimed, ask Placement for the request's candidates in that host's tree alone "
        "(GET /allocation_candidates with in_tree): Placement's claim checks capacity, "
        "not traits, aggregates or trees, so a view that missed such a change could "
        "otherwise place an instance where Placement would not. A host Placement no "
        "longer offers is not claimed; its providers are read again and the next host is "
        "tried. The database feed proves its view current for each request, so 'auto' "
        "confirms only with the API feed; 'always' also confirms with the database feed "
        "(about one small Placement query per instance).",
    ),
    cfg.IntOpt(
        "max_allocation_candidates",
        default=-1,
        min=-1,
        help="(novasched) Set it to Placement's own [placement] max_allocation_candidates "
        "(placement.conf): the provider view then stops generating allocation candidates "
        "where Placement stops (-1: no limit, Placement's default). Placement does not "
        "publish its configuration, so novasched-manage check cannot confirm the two agree. "
        "nova's gate job nova-next runs Placement with 100000.",
    ),
    cfg.StrOpt(
        "allocation_candidates_generation_strategy",
        default="depth-first",
        choices=[
            (
                "depth-first",
                "every candidate of one root provider before the next (Placement's default)",
            ),
            ("breadth-first", "one candidate of each root provider in turn"),
        ],
        help="(novasched) Set it to Placement's own [placement] "
        "allocation_candidates_generation_strategy (placement.conf): with "
        "max_allocation_candidates it decides which root providers the provider view's "
        "candidates come from, as in Placement.",
    ),
    cfg.FloatOpt(
        "view_sweep_period",
        default=600.0,
        min=0.0,
        help="(novasched) With the API feed: seconds over which every provider's "
        "allocations are read once more. DELETE /allocations (nova's instance delete) frees "
        "usage without changing a provider's generation; until the sweep, or nova's "
        "delete_instance_info cast, reaches it the view counts that usage as still used. "
        "0 turns the sweep off.",
    ),
]

# [neutron]: what the routed networks and remote-managed ports prefilters read, with nova's
# names and defaults; the keystoneauth options (auth_type, endpoint_override, region_name,
# valid_interfaces, timeout ...) are registered beside them, as nova registers them.
neutron_opts = [
    cfg.IntOpt(
        "extension_sync_interval",
        default=600,
        min=0,
        help="Seconds between two reads of Neutron's extension list (GET /v2.0/extensions), "
        "which says whether its 'segment' extension (routed networks) is enabled.",
    ),
    cfg.IntOpt(
        "http_retries",
        default=3,
        min=0,
        help="Retries of a Neutron request whose connection failed, with back-off (nova's "
        "default).",
    ),
]

capacity_opts = [
    cfg.IntOpt(
        "interval",
        default=300,
        min=0,
        help="ours: seconds between two computations of the capacity gauges "
        "(novasched_flavor_capacity_instances, novasched_stranded_capacity) by the scheduler "
        "service of the elected host (the lowest-sorted nova-scheduler service row that is "
        "up, as nova elects its discovery leader), on a thread of one of its workers, never "
        "on a request's path; 0: none. "
        "novasched-manage capacity computes the same figures on demand.",
    ),
    cfg.ListOpt(
        "flavors",
        default=[],
        help="ours: the flavors (names or flavor ids) the capacity gauges are computed for; "
        "empty: every public, enabled flavor of nova's API database.",
    ),
    cfg.StrOpt(
        "project_id",
        default=None,
        help="ours: the project the capacity is computed for: tenant-isolated aggregates "
        "and the project's own filters admit it. Unset: a project no tenant-isolated "
        "aggregate admits.",
    ),
]

decision_records_opts = [
    cfg.BoolOpt(
        "enabled",
        default=True,
        help="ours: record each select_destinations decision (request id, instances, request "
        "summary, candidate source, per-filter counts, the chosen hosts and alternates, the "
        "best weighed hosts with each weigher's value), written off the request's path. "
        "Read them back with novasched-manage decision show / list.",
    ),
    cfg.StrOpt(
        "connection",
        secret=True,
        default=None,
        help="ours: SQLAlchemy URL of the database the decision records go to: ours or the "
        "operator's (their tables are named novasched_* and created if missing). Unset: "
        "sqlite:///$state_path/novasched-decisions.sqlite.",
    ),
    cfg.IntOpt(
        "max_age",
        default=7 * 24 * 3600,
        min=60,
        help="ours: seconds a decision record is kept.",
    ),
    cfg.IntOpt(
        "max_records",
        default=100_000,
        min=1,
        help="ours: the most decision records kept; the oldest go first (a record takes "
        "about 6.5 KB in the store, the whole request included).",
    ),
    cfg.IntOpt(
        "queue_size",
        default=10_000,
        min=1,
        help="ours: decision records waiting to be written, per worker; beyond it a record "
        'is dropped (counted in novasched_decision_records_total{result="dropped"}) '
        "rather than slow a request.",
    ),
    cfg.IntOpt(
        "top_weighed",
        default=5,
        min=0,
        help="ours: how many of the best weighed hosts a record keeps, each with every "
        "weigher's value.",
    ),
]

# Groups whose every option is novasched's or nova's scheduler's: their unknown keys are
# reported once at start-up, and refused by novasched-manage (scheduler/cmd/config_check.py).
# Other groups of a nova.conf ([DEFAULT], [api], [libvirt], ...) belong to other nova
# services and are silently skipped.
CHECKED_GROUPS = (
    "scheduler",
    "filter_scheduler",
    "placement",
    "metrics",
    "metrics_exporter",
    "capacity",
    "decision_records",
)

# Old [DEFAULT] names of nova scheduler options (deprecated names of [scheduler] host_manager
# and [filter_scheduler] use_baremetal_filters / baremetal_enabled_filters, until nova dropped
# them) that have no novasched counterpart: reported with the unsupported options above.
# Every other old [DEFAULT] scheduler name is a deprecated name of one of our options.
_IGNORED_OLD_DEFAULT_OPTS = (
    "scheduler_host_manager",
    "scheduler_use_baremetal_filters",
    "baremetal_scheduler_default_filters",
)

_PLACEMENT_GROUP = "placement"
_NEUTRON_GROUP = "neutron"


def _placement_ks_opts() -> list[cfg.Opt]:
    opts = ks_loading.get_session_conf_options() + ks_loading.get_adapter_conf_options()
    opts += ks_loading.get_auth_common_conf_options()
    opts += ks_loading.get_auth_plugin_conf_options("password")
    # de-duplicate by dest, as keystoneauth's lists overlap
    seen: dict[str, cfg.Opt] = {}
    for opt in opts:
        seen.setdefault(opt.dest, opt)
    return list(seen.values())


def register_opts(conf: cfg.ConfigOpts) -> None:
    conf.register_opts(default_opts)
    conf.register_opts(scheduler_opts, group="scheduler")
    conf.register_opts(filter_scheduler_opts, group="filter_scheduler")
    conf.register_opts(metrics_opts, group="metrics")
    conf.register_opts(workarounds_opts, group="workarounds")
    conf.register_opts(compute_opts, group="compute")
    conf.register_opts(upgrade_levels_opts, group="upgrade_levels")
    conf.register_opts(api_database_opts, group="api_database")
    _register_database_opts(conf)
    conf.register_opts(metrics_exporter_opts, group="metrics_exporter")
    conf.register_opts(notifications_opts, group="notifications")
    conf.register_opts(capacity_opts, group="capacity")
    conf.register_opts(decision_records_opts, group="decision_records")
    conf.register_opts(placement_opts, group=_PLACEMENT_GROUP)
    ks_loading.register_session_conf_options(conf, _PLACEMENT_GROUP)
    ks_loading.register_adapter_conf_options(conf, _PLACEMENT_GROUP)
    ks_loading.register_auth_conf_options(conf, _PLACEMENT_GROUP)
    conf.register_opts(neutron_opts, group=_NEUTRON_GROUP)
    ks_loading.register_session_conf_options(conf, _NEUTRON_GROUP)
    ks_loading.register_adapter_conf_options(conf, _NEUTRON_GROUP)
    ks_loading.register_auth_conf_options(conf, _NEUTRON_GROUP)
    set_defaults(conf)


def set_defaults(conf: cfg.ConfigOpts) -> None:
    """Defaults we give to options registered by libraries (again after ``conf.reset()``)."""
    conf.set_default("service_type", "placement", group=_PLACEMENT_GROUP)
    conf.set_default("valid_interfaces", ["internal", "public"], group=_PLACEMENT_GROUP)
    conf.set_default("service_type", "network", group=_NEUTRON_GROUP)
    conf.set_default("valid_interfaces", ["internal", "public"], group=_NEUTRON_GROUP)


def list_opts() -> list[tuple[str, list[cfg.Opt]]]:
    """The options for oslo-config-generator (entry point ``oslo.config.opts: novasched``)."""
    return [
        ("DEFAULT", default_opts),
        ("scheduler", scheduler_opts),
        ("filter_scheduler", filter_scheduler_opts),
        ("metrics", metrics_opts),
        ("workarounds", workarounds_opts),
        ("compute", compute_opts),
        ("upgrade_levels", upgrade_levels_opts),
        ("api_database", api_database_opts),
        ("database", database_opts),
        ("metrics_exporter", metrics_exporter_opts),
        ("notifications", notifications_opts),
        ("capacity", capacity_opts),
        ("decision_records", decision_records_opts),
        (_PLACEMENT_GROUP, placement_opts + _placement_ks_opts()),
        (_NEUTRON_GROUP, neutron_opts + _placement_ks_opts()),
    ]


def unsupported_options(conf: cfg.ConfigOpts) -> list[str]:
    """The options of our groups that the config files set but we do not implement, as
    sorted ``group.name`` spellings. Nothing is logged (``novasched-manage check`` lists
    them; the service warns with ``warn_unsupported_options``)."""
    known: dict[str, set[str]] = {}
    for group, opts in list_opts():
        known.setdefault(group.lower(), set()).update(o.dest for o in opts)
    for group in CHECKED_GROUPS:
        try:
            known.setdefault(group, set()).update(conf[group].keys())
        except cfg.NoSuchOptError:
            pass
    # the options of the keystoneauth plugin [placement] names (admin_token: endpoint, token;
    # v3password: ...), which keystoneauth registers only when it loads the plugin
    known.setdefault(_PLACEMENT_GROUP, set()).update(auth_plugin_options(conf))
    unknown: list[str] = []
    files = list(conf.config_file or []) + _dir_files(conf)
    for path in files:
        # nova.conf's [DEFAULT] must not leak into the other sections as configparser's would
        parser = configparser.RawConfigParser(strict=False, default_section="\0none")
        try:
            parser.read(path)
        except (configparser.Error, UnicodeDecodeError):
            continue  # oslo.config has already reported a file it cannot parse
        for group in CHECKED_GROUPS:
            if not parser.has_section(group):
                continue
            for key in parser.options(group):
                dest = key.replace("-", "_")
                if dest not in known.get(group, set()) and f"{group}.{key}" not in unknown:
                    unknown.append(f"{group}.{key}")
        if parser.has_section("DEFAULT"):
            for key in parser.options("DEFAULT"):
                dest = key.replace("-", "_")
                if dest in _IGNORED_OLD_DEFAULT_OPTS and f"DEFAULT.{key}" not in unknown:
                    unknown.append(f"DEFAULT.{key}")
    unknown.sort()
    return unknown


def auth_plugin_options(conf: cfg.ConfigOpts, group: str = _PLACEMENT_GROUP) -> set[str]:
    """The option names of ``[group] auth_type``'s Keystone plugin, which keystoneauth
    registers only when it loads the plugin (none for noauth2 and the like, which are the
    Placement client's own, and none for a plugin that is not installed: loading it would
    log a warning, and the client says so when it loads it)."""
    try:
        auth_type = conf[group].auth_type
    except (cfg.NoSuchOptError, cfg.NoSuchGroupError, AttributeError, ValueError, cfg.Error):
        return set()
    if not auth_type or auth_type not in _installed_auth_plugins():
        return set()
    try:
        return {opt.dest for opt in ks_loading.get_auth_plugin_conf_options(auth_type)}
    except Exception:  # a plugin that fails to load: the client reports it when it loads
        return set()


def _installed_auth_plugins() -> set[str]:
    """The names of the installed keystoneauth plugins, from their entry points (keystoneauth's
    own listing loads every plugin, and logs an error for each one whose library is missing)."""
    from importlib.metadata import entry_points

    return {ep.name for ep in entry_points(group="keystoneauth1.plugin")}


def warn_unsupported_options(conf: cfg.ConfigOpts) -> list[str]:
    """Log one warning listing the options of our groups that the config files set but we
    do not implement; return their ``group.name`` spellings."""
    unknown = unsupported_options(conf)
    if unknown:
        LOG.warning(
            "Ignoring configuration options novasched does not support: %s", ", ".join(unknown)
        )
    return unknown


def _dir_files(conf: cfg.ConfigOpts) -> list[str]:
    import glob
    import os

    out: list[str] = []
    for d in conf.config_dir and [conf.config_dir] or []:
        out.extend(sorted(glob.glob(os.path.join(d, "*.conf"))))
    return out


register_opts(CONF)
