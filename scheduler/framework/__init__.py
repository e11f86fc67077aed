"""The scheduling framework: the enabled filters, weighers and picker, and one instance's step
(``core.py``); the pickers (``pickers.py``)."""

from scheduler.framework.core import Framework, InstanceStep, Ranked, narrow
from scheduler.framework.pickers import NovaPick, Picker, RandomPick

__all__ = ["Framework", "InstanceStep", "NovaPick", "Picker", "RandomPick", "Ranked", "narrow"]
