"""How many examples the Hypothesis-driven suites run: bounded in ``make test``, more when a
maintainer hunts. ``NOVASCHED_HUNT=1`` runs 2,000 examples per test, ``NOVASCHED_HUNT=<n>``
runs n::

    NOVASCHED_HUNT=5000 .venv/bin/pytest tests/differential tests/faults/test_fuzz.py -x
"""

from __future__ import annotations

import os

HUNT_DEFAULT = 2000


def hunting() -> bool:
    """Whether a maintainer is hunting (``NOVASCHED_HUNT`` set): then the examples are new
    each run; otherwise a suite may fix them, so that it passes alike on every machine."""
    return os.environ.get("NOVASCHED_HUNT", "").strip() not in ("", "0")


def examples(bounded: int) -> int:
    """``bounded`` in the ordinary suite; the hunt's number with ``NOVASCHED_HUNT`` set."""
    if not hunting():
        return bounded
    hunt = os.environ["NOVASCHED_HUNT"].strip()
    if hunt.isdigit() and int(hunt) > 1:
        return int(hunt)
    return HUNT_DEFAULT
