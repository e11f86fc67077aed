"""JsonFilter: nova's query grammar, its quirks, malformed queries, and run_filter == per host."""

from __future__ import annotations

import json
import operator

from hypothesis import given, settings
from hypothesis import strategies as st

from filters.json_filter import JsonFilter
from tests.unit.filters.fakes import make_host, make_spec, run_filter

HOSTS = [
    make_host("h1", free_ram_mb=512, num_instances=3, stats={"rack": "r1", "gpu": "1"}),
    make_host("h2", free_ram_mb=2048, num_instances=0, stats={"rack": "r2"}),
    make_host("h3", free_ram_mb=4096, num_instances=9, stats={}),
]


def run(query):
    """The reasons (or True) per host of HOSTS, checking that both paths agree."""
    spec = make_spec(hints={"query": [query if isinstance(query, str) else json.dumps(query)]})
    filt = JsonFilter()
    per_host = [filt.host_passes(h, spec) for h in HOSTS]
    outcome = run_filter(filt, HOSTS, spec)
    assert outcome.passed == [h for h, r in zip(HOSTS, per_host, strict=True) if r]
    assert [r for _, r in outcome.rejected] == [r.reason for r in per_host if not r]
    return [True if r is True else r.reason for r in per_host]


def names(query):
    return [h.host for h, r in zip(HOSTS, run(query), strict=True) if r is True]


NO = "does not match the query hint"


def test_without_a_query_every_host_passes():
    filt = JsonFilter()
    assert all(filt.host_passes(h, make_spec()) is True for h in HOSTS)
    assert run_filter(filt, HOSTS, make_spec()).passed == HOSTS
    assert names([]) == ["h1", "h2", "h3"]


def test_comparisons_on_attributes():
    assert names([">=", "$free_ram_mb", 1024]) == ["h2", "h3"]
    assert names(["<", "$free_ram_mb", 1024]) == ["h1"]
    assert names(["=", "$num_instances", 0]) == ["h2"]
    assert names([">", "$num_instances", 1]) == ["h1", "h3"]
    assert names(["<=", "$num_instances", 3]) == ["h1", "h2"]
    assert run(["<", "$free_ram_mb", 1024])[1] == NO


def test_first_argument_is_compared_with_every_other_one():
    assert names(["<", "$num_instances", 5, 10]) == ["h1", "h2"]
    assert names(["<", "$num_instances", 5, 1]) == ["h2"]


def test_in_checks_membership_among_the_other_arguments():
    assert names(["in", "$host", "h1", "h3"]) == ["h1", "h3"]
    assert names(["in", "$stats.rack", "r2", "r9"]) == ["h2"]


def test_and_or_nest():
    query = ["or", ["=", "$stats.rack", "r1"], ["and", [">", "$free_ram_mb", 3000], ["<", 1, 2]]]
    assert names(query) == ["h1", "h3"]
    assert names(["and", [">", "$free_ram_mb", 1000], ["<", "$num_instances", 5]]) == ["h2"]


def test_dict_keys_are_followed_and_missing_values_are_dropped():
    assert names(["=", "$stats.gpu", "1"]) == ["h1"]
    # h2 and h3 have no gpu stat: the argument is dropped, one argument left -> false
    assert run(["=", "$stats.gpu", "1"])[1:] == [NO, NO]
    # a missing attribute is dropped too; with two literals left the comparison runs
    assert names(["=", "$no_such_attr", 1, 1]) == ["h1", "h2", "h3"]
    # null and "" are dropped like missing values
    assert names(["=", None, "", 1, 1]) == ["h1", "h2", "h3"]


def test_not_quirks_are_nova_s():
    # "not" returns a list; at the top a list passes if any element is true
    assert names(["not", ["=", 1, 1]]) == []
    assert names(["not", ["=", 1, 2]]) == ["h1", "h2", "h3"]
    assert names(["not", ["=", 1, 1], ["=", 1, 2]]) == ["h1", "h2", "h3"]
    # nested in "and", the (non-empty) list is truthy whatever it holds
    assert names(["and", ["not", ["=", 1, 1]]]) == ["h1", "h2", "h3"]
    assert names(["not", [">", "$free_ram_mb", 1000]]) == ["h1"]


def test_empty_nested_expression_is_true():
    assert names(["and", [], [">", "$free_ram_mb", 1000]]) == ["h2", "h3"]


def test_malformed_queries_reject_every_host_with_a_reason():
    assert run("not json") == ["query hint is not valid JSON"] * 3
    assert run('{"=": 1}') == ["query hint is not a JSON list expression"] * 3
    assert run("5") == ["query hint is not a JSON list expression"] * 3
    assert run(["xor", 1, 2]) == ["query hint has an unknown operator"] * 3
    # nova evaluates every sub-expression, so a bad operator anywhere is fatal
    assert run(["or", ["=", 1, 1], ["bogus", 1]]) == ["query hint has an unknown operator"] * 3
    assert run([["=", 1, 1]]) == ["query hint has an unknown operator"] * 3
    # too deep for the JSON parser, or for the evaluation: a reason, never an exception
    assert run("[" * 50000 + "]" * 50000) == ["query hint is nested too deeply"] * 3
    for depth in (200, 600, 900, 990):
        text = '["and", ' + '["or", ' * depth + "[]" + "]" * depth + "]"
        assert run(text) in ([True] * 3, ["query hint is nested too deeply"] * 3)


def test_falsy_json_values_pass_like_nova():
    for text in ("[]", "0", "{}", '""', "null", "false"):
        assert run(text) == [True] * 3


def test_values_that_cannot_be_ordered_reject_the_host_not_the_request():
    assert run(["<", "$host", 5]) == ["query compares values that cannot be ordered"] * 3
    # equality never raises
    assert names(["=", "$host", 5]) == []


def test_lookups_reach_only_public_attributes_and_dicts():
    assert names(["=", "$_lock_name", "h1-h1", "h1-h1"]) == ["h1", "h2", "h3"]
    assert run(["=", "$_lock_name", "h1-h1"]) == [NO] * 3
    # "$host.x": host is a string, not a dict: the argument is dropped
    assert run(["=", "$host.x", "h1"]) == [NO] * 3


def test_run_flags_match_nova():
    assert JsonFilter.RUN_ON_REBUILD is False
    assert JsonFilter.run_filter_once_per_request is False


# -- a straightforward interpreter of nova's documented algorithm, to compare against ----------


def _reference(query, host):
    def compare(op):
        def run_(args):
            if len(args) < 2:
                return False
            if op is operator.contains:
                return args[0] in args[1:]
            return not [a for a in args[1:] if not op(args[0], a)]

        return run_

    commands = {
        "=": compare(operator.eq),
        "<": compare(operator.lt),
        ">": compare(operator.gt),
        "in": compare(operator.contains),
        "<=": compare(operator.le),
        ">=": compare(operator.ge),
        "not": lambda args: [not a for a in args],
        "or": any,
        "and": all,
    }

    def parse(string):
        if not string:
            return None
        if not string.startswith("$"):
            return string
        path = string[1:].split(".")
        obj = getattr(host, path[0], None)
        if obj is None:
            return None
        for item in path[1:]:
            obj = obj.get(item)
            if obj is None:
                return None
        return obj

    def process(q):
        if not q:
            return True
        args = []
        for arg in q[1:]:
            if isinstance(arg, list):
                arg = process(arg)
            elif isinstance(arg, str):
                arg = parse(arg)
            if arg is not None:
                args.append(arg)
        return commands[q[0]](args)

    result = process(query)
    if isinstance(result, list):
        result = any(result)
    return bool(result)


LEAVES = (
    st.integers(-3, 12)
    | st.sampled_from(
        ["$free_ram_mb", "$num_instances", "$num_io_ops", "$stats.rack", "$stats.gpu", "$nope"]
    )
    | st.sampled_from(["$host", "h1", "r1", "r2", "", "1"])
    | st.none()
    | st.booleans()
)
OPS = st.sampled_from(["=", "<", ">", "in", "<=", ">=", "not", "or", "and"])
EXPRS = st.recursive(
    st.builds(lambda op, args: [op, *args], OPS, st.lists(LEAVES, max_size=4)),
    lambda inner: st.builds(
        lambda op, args: [op, *args], OPS, st.lists(inner | LEAVES, max_size=4)
    ),
    max_leaves=12,
)
HOST_DATA = st.lists(
    st.tuples(
        st.integers(0, 10),
        st.integers(0, 10),
        st.fixed_dictionaries(
            {}, optional={"rack": st.sampled_from(["r1", "r2"]), "gpu": st.just("1")}
        ),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(EXPRS, HOST_DATA)
def test_run_filter_equals_per_host_equals_nova_s_algorithm(query, host_data):
    hosts = [
        make_host(f"h{i}", free_ram_mb=ram, num_instances=n, num_io_ops=n, stats=stats)
        for i, (ram, n, stats) in enumerate(host_data)
    ]
    spec = make_spec(hints={"query": [json.dumps(query)]})
    filt = JsonFilter()
    outcome = run_filter(filt, hosts, spec)
    per_host = [filt.host_passes(h, spec) for h in hosts]
    assert outcome.passed == [h for h, r in zip(hosts, per_host, strict=True) if r]
    assert outcome.rejected == [
        (h, r.reason) for h, r in zip(hosts, per_host, strict=True) if not r
    ]
    for host, result in zip(hosts, per_host, strict=True):
        try:
            expected = _reference(query, host)
        except TypeError:
            assert result.reason == "query compares values that cannot be ordered"
            continue
        assert bool(result) is expected
