"""A driver for capacity tests: the real FilterScheduler and filters, a real ProviderView,
and a Placement stand-in that answers from that view (so it refuses what the view has no
room for) and takes the claims the view then counts."""

from __future__ import annotations

import uuid as uuidlib

from placement_client.view import Inventory, ProviderRecord, ProviderView, ViewRefresher
from scheduler.drivers.filter_scheduler import FilterScheduler
from scheduler.exceptions import NoValidHost
from scheduler.objects import Aggregate, Flavor, RequestSpec
from tests.unit.scheduler.drivers.fakes import CONTEXT, FakeHostManager, FakePlacement, NoFeed


class ViewPlacement(FakePlacement):
    """Placement as the view sees it: its candidates are the view's, nothing more."""

    def __init__(self, hosts, view):
        super().__init__(hosts)
        self.view = view

    def get_allocation_candidates(self, query, request_id=None, *, not_before=None):
        self.queries.append(query)
        answer = self.view.candidates(query)
        assert answer.candidates is not None, answer.reason
        return answer.candidates


def provider_record_of(host, inventories=None):
    """Placement's record of a host's compute node, as nova-compute reports it.
    ``inventories``: resource class -> Inventory to add or replace (PCPU, a custom class),
    or None to leave a class out (a host whose CPUs are all dedicated reports no VCPU)."""
    records = {
        "VCPU": Inventory(host.vcpus_total, allocation_ratio=host.cpu_allocation_ratio),
        "MEMORY_MB": Inventory(
            host.total_usable_ram_mb, allocation_ratio=host.ram_allocation_ratio
        ),
        "DISK_GB": Inventory(
            host.total_usable_disk_gb, allocation_ratio=host.disk_allocation_ratio
        ),
    }
    for rc, inventory in (inventories or {}).items():
        if inventory is None:
            records.pop(rc, None)
        else:
            records[rc] = inventory
    return ProviderRecord(
        uuid=host.uuid,
        generation=1,
        name=host.nodename,
        inventories=records,
        aggregates=frozenset(a.uuid for a in host.aggregates),
    )


def view_cloud(hosts, aggregates=(), inventories=None):
    """The driver and Placement of ``hosts``; ``inventories``: host name -> the changes to
    its compute node's inventories (see ``provider_record_of``)."""
    inventories = inventories or {}
    view = ProviderView()
    view.replace_all([provider_record_of(h, inventories.get(h.host)) for h in hosts], 0.0)
    view.mark_refreshed(view.now())
    placement = ViewPlacement(hosts, view)
    driver = FilterScheduler(
        placement=placement,
        host_manager=FakeHostManager(hosts, list(aggregates)),
        view=ViewRefresher(view, NoFeed()),
    )
    return driver, placement


def boots_until_no_valid_host(driver, flavor: Flavor, limit: int = 500) -> int:
    """Boots of ``flavor`` through the driver, one after another, until a NoValidHost."""
    for n in range(limit):
        spec = RequestSpec(flavor=flavor, num_instances=1, project_id="p", user_id="u")
        try:
            driver.select_destinations(CONTEXT, spec, [str(uuidlib.uuid4())], False)
        except NoValidHost:
            return n
    raise AssertionError(f"more than {limit} boots fit")


def az_aggregate(name: str, hosts: list[str], agg_id: int) -> Aggregate:
    return Aggregate(
        id=agg_id,
        uuid=f"agg-{name}",
        name=name,
        hosts=set(hosts),
        metadata={"availability_zone": name},
    )
