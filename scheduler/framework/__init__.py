"""The scheduling framework: the enabled filters, weighers and picker, and one instance's step
(``core.py``); the pickers (``pickers.py``)."""

from scheduler.framework.core import (
    Cycle,
    Framework,
    InstanceStep,
    Placed,
    Placer,
    Ranked,
    narrow,
    take_best,
)
from scheduler.framework.pickers import NovaPick, Picker, RandomPick

__all__ = [
    "Cycle",
    "Framework",
    "InstanceStep",
    "NovaPick",
    "Picker",
    "Placed",
    "Placer",
    "RandomPick",
    "Ranked",
    "narrow",
    "take_best",
]
