"""nova's extra-spec operator grammar: does a host value satisfy a flavor requirement?

``match(value, req)`` where ``req`` is one of::

    "= 4"            float(value) >= 4
    "== 4" / "!= 4"  float equality / inequality
    ">= 4" / "<= 4"  float comparisons
    "s== x"  "s!= x"  "s< x"  "s<= x"  "s> x"  "s>= x"   string comparisons
    "<in> x"         x is a substring of value
    "<all-in> x y"   every word is in value
    "<or> a <or> b"  value equals one of the words
    "anything else"  plain string equality with the whole requirement

A ``None`` value satisfies nothing (except a ``None`` requirement). Unlike nova, a numeric
operator applied to a value that is not a number fails the match instead of raising.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any


def _float_op(op: Callable[[float, float], bool]) -> Callable[[Any, Any], bool]:
    def compare(value: Any, wanted: Any) -> bool:
        return op(float(value), float(wanted))

    return compare


_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "=": _float_op(operator.ge),
    "==": _float_op(operator.eq),
    "!=": _float_op(operator.ne),
    ">=": _float_op(operator.ge),
    "<=": _float_op(operator.le),
    "s==": operator.eq,
    "s!=": operator.ne,
    "s<": operator.lt,
    "s<=": operator.le,
    "s>": operator.gt,
    "s>=": operator.ge,
    "<in>": lambda value, wanted: wanted in value,
    "<all-in>": lambda value, words: all(word in value for word in words),
}


def match(value: str | None, req: str | None) -> bool:
    """True if the host value ``value`` satisfies the requirement ``req``."""
    if req is None:
        return value is None
    words = req.split()
    op = words.pop(0) if words else None
    method = _OPS.get(op) if op is not None else None
    if op != "<or>" and method is None:
        return value == req
    if value is None:
        return False
    if op == "<or>":
        # "<or> a <or> b": the alternatives sit at every other word
        return value in words[::2]
    if not words:
        return False
    try:
        if op == "<all-in>":
            return method(value, words)
        return method(value, words[0])
    except (TypeError, ValueError):
        return False
