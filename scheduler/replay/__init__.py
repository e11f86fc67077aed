"""What-if replay: recorded requests re-run on a private copy of today's fleet with another
configuration, claiming nothing (``novasched-manage replay``; docs/operations.md,
"What-if replay").

``fleet`` holds the private hosts and providers with the recorded instances taken out;
``run`` replays and compares; ``render`` says it in words.
"""

from scheduler.replay.fleet import NotReplayable, ReplayFleet, ReplayPlacement, TakenOut
from scheduler.replay.run import (
    Builds,
    Recorded,
    Replayed,
    ReplayReport,
    Spread,
    against_baseline,
    replay,
    spread,
)

__all__ = [
    "Builds",
    "NotReplayable",
    "Recorded",
    "ReplayFleet",
    "ReplayPlacement",
    "ReplayReport",
    "Replayed",
    "Spread",
    "TakenOut",
    "against_baseline",
    "replay",
    "spread",
]
