"""A decision record's values in words and numbers, for whoever reads records back
(``novasched-manage decision show``, ``why_not``): the document's numbers to its precision,
and the weighers' shares of a weighed host compared between two hosts."""

from __future__ import annotations

from typing import Any

# the weighers named for a margin or a gap (the rest are summed)
MARGIN_WEIGHERS = 3


def weighers_of(host: dict[str, Any]) -> dict[str, Any]:
    """A weighed host's parts by weigher ({} if it has none)."""
    parts = host.get("weighers")
    return parts if isinstance(parts, dict) else {}


def share(part: Any) -> float | None:
    """A weigher's part's share (never -0), or None if it has none."""
    if isinstance(part, dict):
        value = number(part.get("share"))
        if value is not None:
            return round(value, 6) + 0.0
    return None


def number(value: Any) -> float | None:
    """``value`` as a float if it is a number (not a bool), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def share_gaps(a: dict[str, Any], b: dict[str, Any], names: list[str]) -> list[tuple[str, float]]:
    """Per weigher of ``names``, ``a``'s share less ``b``'s, the largest first (none where
    either has no share, or they are equal)."""
    gaps = []
    for name in names:
        mine, theirs = share(weighers_of(a).get(name)), share(weighers_of(b).get(name))
        if mine is not None and theirs is not None and diff(mine, theirs):
            gaps.append((name, diff(mine, theirs)))
    gaps.sort(key=lambda g: -abs(g[1]))
    return gaps


def gap_words(gaps: list[tuple[str, float]]) -> str:
    """The largest gaps by name, the rest summed: ``a +0.5, b -0.1, 2 more +0.01``."""
    words = [f"{name} {signed(gap)}" for name, gap in gaps[:MARGIN_WEIGHERS]]
    rest = gaps[MARGIN_WEIGHERS:]
    if rest:
        words.append(f"{len(rest)} more {signed(sum(g for _, g in rest))}")
    return ", ".join(words)


def fmt(value: Any) -> str:
    """A document's value in words: ``-`` for None, yes/no, floats to six digits."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value + 0.0:.6g}"  # -0.0 as 0
    return str(value)


def diff(a: float, b: float) -> float:
    """``a - b`` to the document's precision (its numbers have six decimals), never -0."""
    return round(a - b, 6) + 0.0


def signed(value: float) -> str:
    """``value`` to six decimals with its sign, never ``-0``."""
    return f"{round(value, 6) + 0.0:+.6g}"
