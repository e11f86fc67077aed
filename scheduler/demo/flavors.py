"""The demo's flavors: the ones its fleet's instances were booted with and the ones it boots.

They are written into the API database's ``flavors`` table as nova-api writes them (with
their extra specs), so that ``novasched-manage capacity`` counts them and ``explain --flavor
m1.small`` finds them by name on the cloud the demo leaves. The ids of the first four are the
``instance_type_id`` the fleet's instances carry (``fleet._FLAVORS``, in that order).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import sqlalchemy as sa
from oslo_utils import timeutils
from sqlalchemy.engine import Engine

from db import models
from scheduler.objects import Flavor


@dataclass(frozen=True, slots=True)
class DemoFlavor:
    """One row of nova's flavors table, and its extra specs."""

    id: int
    name: str
    vcpus: int
    memory_mb: int
    root_gb: int
    extra_specs: dict[str, str] = field(default_factory=dict)
    is_public: bool = True

    @property
    def flavorid(self) -> str:
        # nova's default flavors are "1", "2", ... by id
        return str(self.id)

    def flavor(self) -> Flavor:
        """The Flavor a boot of this flavor carries (as nova-api reads it from its row)."""
        return Flavor(
            id=self.id,
            name=self.name,
            flavorid=self.flavorid,
            vcpus=self.vcpus,
            memory_mb=self.memory_mb,
            root_gb=self.root_gb,
            extra_specs=dict(self.extra_specs),
            is_public=self.is_public,
        )


FLAVORS = (
    DemoFlavor(1, "m1.tiny", 1, 512, 1),
    DemoFlavor(2, "m1.small", 2, 2048, 20),
    DemoFlavor(3, "m1.medium", 4, 8192, 40),
    DemoFlavor(4, "m1.large", 8, 16384, 80),
    DemoFlavor(5, "m1.xlarge", 16, 32768, 160),
    DemoFlavor(6, "ssd.small", 2, 2048, 20, {"trait:CUSTOM_SSD": "required"}),
    # 4 TiB of RAM: the demo's boot that fits nowhere. Private (an admin's, found by name),
    # so that capacity's default list, the public flavors, holds the ones that fit somewhere
    # (a flavor that fits nowhere asks Placement's API why, which the demo's cloud serves
    # only on demand)
    DemoFlavor(7, "huge", 8, 4 * 1024 * 1024, 20, is_public=False),
)
_BY_NAME = {f.name: f for f in FLAVORS}


def flavor(name: str) -> Flavor:
    """The demo's flavor ``name``, as a boot carries it."""
    return _BY_NAME[name].flavor()


def write_flavors(api_engine: Engine) -> None:
    """Insert the demo's flavors, enabled, into the API database (empty of them)."""
    now = timeutils.utcnow()
    rows = [
        {
            "id": f.id,
            "name": f.name,
            "flavorid": f.flavorid,
            "vcpus": f.vcpus,
            "memory_mb": f.memory_mb,
            "root_gb": f.root_gb,
            "ephemeral_gb": 0,
            "swap": 0,
            "rxtx_factor": 1.0,
            "disabled": False,
            "is_public": f.is_public,
            "created_at": now,
        }
        for f in FLAVORS
    ]
    specs = [
        {"flavor_id": f.id, "key": key, "value": value, "created_at": now}
        for f in FLAVORS
        for key, value in f.extra_specs.items()
    ]
    with api_engine.begin() as conn:
        conn.execute(sa.insert(models.flavors), rows)
        if specs:
            conn.execute(sa.insert(models.flavor_extra_specs), specs)
