"""JsonFilter: hosts that satisfy the JSON expression of the ``query`` scheduler hint.

The grammar is nova's: a JSON list ``[operator, arg, ...]`` where an argument is a number,
a literal string, ``"$attr"`` or ``"$attr.key.key"`` (a HostState attribute, then dict keys:
``"$free_ram_mb"``, ``"$stats.num_instances"``) or a nested expression. Operators::

    =  <  >  <=  >=   the first argument compared with every other one (all must hold)
    in                the first argument is one of the others
    not               the negation of each argument (a list)
    and  or           all / any of the arguments

nova's quirks are kept, because queries written for nova must select the same hosts:
arguments that resolve to nothing (a missing attribute or key, ``null``, ``""``) are dropped
before the operator runs, a comparison with fewer than two arguments is false, ``not``
returns a list (so ``["and", ["not", ...]]`` is always true), an empty expression is true,
and a top-level list result passes if any element is true.

Unlike nova, a malformed query (bad JSON, not a list, an unknown operator) rejects every host
with a reason saying so, and values that cannot be ordered (``"$host" < 5``) reject that host,
instead of failing the whole request with an exception. Lookups reach only public attributes,
and a key lookup on something that is not a dict resolves to nothing.
"""

from __future__ import annotations

import functools
import json
import logging
import operator
from collections.abc import Callable, Mapping
from typing import Any

from filters import PASS_ALL, BaseHostFilter, Reject

LOG = logging.getLogger(__name__)

NO_MATCH = Reject("does not match the query hint")
NOT_JSON = Reject("query hint is not valid JSON")
NOT_A_LIST = Reject("query hint is not a JSON list expression")
UNKNOWN_OPERATOR = Reject("query hint has an unknown operator")
TOO_DEEP = Reject("query hint is nested too deeply")
NOT_COMPARABLE = Reject("query compares values that cannot be ordered")


def _compare(op: Callable[[Any, Any], bool]) -> Callable[[list[Any]], bool]:
    def run(args: list[Any]) -> bool:
        if len(args) < 2:
            return False
        first = args[0]
        # every comparison is made (no short cut), so values that cannot be ordered are
        # found whatever comes before them, as in nova
        return all([op(first, other) for other in args[1:]])

    return run


def _in(args: list[Any]) -> bool:
    if len(args) < 2:
        return False
    return args[0] in args[1:]


def _not(args: list[Any]) -> list[bool]:
    return [not arg for arg in args]


OPERATORS: dict[str, Callable[[list[Any]], Any]] = {
    "=": _compare(operator.eq),
    "<": _compare(operator.lt),
    ">": _compare(operator.gt),
    "in": _in,
    "<=": _compare(operator.le),
    ">=": _compare(operator.ge),
    "not": _not,
    "or": any,
    "and": all,
}


Evaluator = Callable[[Any], Any]


def _constant(value: Any) -> Evaluator:
    return lambda _host: value


def _lookup(path: str) -> Evaluator | None:
    """A ``$attr.key...`` argument: the attribute, then dict keys; None when it can never
    resolve (an empty or private attribute name)."""
    attr, *keys = path.split(".")
    if not attr or attr.startswith("_"):
        return None
    if not keys:
        return lambda host: getattr(host, attr, None)

    def resolve(host: Any) -> Any:
        value = getattr(host, attr, None)
        for key in keys:
            if not isinstance(value, Mapping):
                return None  # missing, or not a dict: nothing to look into
            value = value.get(key)
        return value

    return resolve


def _always_true(_host: Any) -> bool:
    return True


class _Malformed(Exception):
    def __init__(self, reject: Reject):
        self.reject = reject


def _compile_expr(node: list[Any]) -> Evaluator:
    """``[operator, arg, ...]`` as a function of the host. Arguments that are null, ``""``
    or a lookup that can never resolve are dropped here; lookups that resolve to None are
    dropped per host."""
    if not node:
        return _always_true
    name = node[0]
    run = OPERATORS.get(name) if isinstance(name, str) else None
    if run is None:
        raise _Malformed(UNKNOWN_OPERATOR)
    args: list[Evaluator] = []
    for arg in node[1:]:
        if isinstance(arg, list):
            args.append(_compile_expr(arg))
        elif isinstance(arg, str):
            getter = _lookup(arg[1:]) if arg.startswith("$") else _constant(arg) if arg else None
            if getter is not None:
                args.append(getter)
        elif arg is not None:
            args.append(_constant(arg))
    getters = tuple(args)

    def evaluate(host: Any) -> Any:
        values = []
        for getter in getters:
            value = getter(host)
            if value is not None:
                values.append(value)
        return run(values)

    return evaluate


@functools.lru_cache(maxsize=128)
def _compile_text(text: str) -> Evaluator | Reject:
    try:
        query = json.loads(text)
    except RecursionError:
        return TOO_DEEP
    except ValueError:
        return NOT_JSON
    if not query:
        return _always_true
    if not isinstance(query, list):
        return NOT_A_LIST
    try:
        return _compile_expr(query)
    except _Malformed as exc:
        return exc.reject
    except RecursionError:
        return TOO_DEEP


def compile_query(spec_obj: Any) -> Evaluator | Reject | None:
    """The request's query as a function of the host; None without a query; a Reject if it
    is malformed."""
    text = spec_obj.get_scheduler_hint("query")
    if not text:
        return None
    if not isinstance(text, str):
        return NOT_JSON
    return _compile_text(text)


def _host_matches(expr: Evaluator, host_state: Any) -> bool | Reject:
    try:
        result = expr(host_state)
    except TypeError:
        if LOG.isEnabledFor(logging.DEBUG):
            LOG.debug("%s: the query compares values that cannot be ordered", host_state)
        return NOT_COMPARABLE
    except RecursionError:
        return TOO_DEEP
    if isinstance(result, list):
        result = any(result)
    if result:
        return True
    if LOG.isEnabledFor(logging.DEBUG):
        LOG.debug("%s does not match the query hint", host_state)
    return NO_MATCH


class JsonFilter(BaseHostFilter):
    """Passes hosts for which the JSON expression in the ``query`` scheduler hint is true
    (every host when there is no query), e.g. ``[">=", "$free_ram_mb", 1024]``."""

    RUN_ON_REBUILD = False
    # host values change as instances of the request are placed: check again for each one
    run_filter_once_per_request = False

    def prepare(self, spec_obj: Any) -> Any:
        """The query compiled once per request; PASS_ALL without a query; a malformed query
        is a Reject (logged once) that every host gets."""
        expr = compile_query(spec_obj)
        if expr is None:
            return PASS_ALL
        if isinstance(expr, Reject):
            LOG.warning("Invalid query scheduler hint: %s", expr.reason)
        return expr

    def check(self, host_state: Any, expr: Evaluator | Reject) -> bool | Reject:
        if isinstance(expr, Reject):
            return expr
        return _host_matches(expr, host_state)
