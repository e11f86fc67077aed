"""How many examples the Hypothesis-driven suites run: bounded in ``make test``, more when a
maintainer hunts. ``NOVASCHED_HUNT=1`` runs 2,000 examples per test, ``NOVASCHED_HUNT=<n>``
runs n::

    NOVASCHED_HUNT=5000 .venv/bin/pytest tests/differential tests/faults/test_fuzz.py -x
"""

from __future__ import annotations

import os

HUNT_DEFAULT = 2000


def examples(bounded: int) -> int:
    """``bounded`` in the ordinary suite; the hunt's number with ``NOVASCHED_HUNT`` set."""
    hunt = os.environ.get("NOVASCHED_HUNT", "").strip()
    if not hunt or hunt == "0":
        return bounded
    if hunt.isdigit() and int(hunt) > 1:
        return int(hunt)
    return HUNT_DEFAULT
