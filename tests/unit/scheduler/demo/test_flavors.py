"""The demo's flavors, written into the API database as nova-api writes them."""

from __future__ import annotations

from types import SimpleNamespace

import db
from scheduler.capacity import load_flavors
from scheduler.demo import fleet
from scheduler.demo.flavors import FLAVORS, flavor, write_flavors


def test_capacity_reads_the_demo_flavors_public_ones_by_default_and_huge_by_name(tmp_path):
    url = f"sqlite:///{tmp_path / 'nova_api.sqlite'}"
    db.create_schema(db.get_engine(url), "api")
    write_flavors(db.get_engine(url))
    conf = SimpleNamespace(api_database=SimpleNamespace(connection=url))
    try:
        public = load_flavors(conf)
        assert [f.name for f in public] == [
            "m1.tiny",
            "m1.small",
            "ssd.small",
            "m1.medium",
            "m1.large",
            "m1.xlarge",
        ]
        (ssd,) = load_flavors(conf, ["ssd.small"])
        assert ssd.extra_specs == {"trait:CUSTOM_SSD": "required"}
        (huge,) = load_flavors(conf, ["huge"])
        assert (huge.memory_mb, huge.is_public) == (4 * 1024 * 1024, False)
        # as a boot of the demo carries it
        assert load_flavors(conf, ["m1.small"])[0] == flavor("m1.small")
    finally:
        db.dispose_engines()


def test_the_fleet_instances_flavor_ids_are_the_demo_flavors():
    # the fleet's instances carry instance_type_id = position in fleet._FLAVORS + 1
    for position, (vcpus, memory_mb, root_gb, name) in enumerate(fleet._FLAVORS, start=1):
        row = FLAVORS[position - 1]
        assert (row.id, row.name, row.vcpus, row.memory_mb, row.root_gb) == (
            position,
            name,
            vcpus,
            memory_mb,
            root_gb,
        )
