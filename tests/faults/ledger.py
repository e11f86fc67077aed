"""What the fault suite did, counted while it runs: calls made and answered, faults injected,
malformed requests tried, Placement audits and the allocations they found without a reply.
``python -m benchmarks --sections faults`` runs the suite and prints these figures."""

from __future__ import annotations

from collections import Counter

COUNTS: Counter[str] = Counter()


def count(name: str, n: int = 1) -> None:
    COUNTS[name] += n
