"""extra_specs_ops.match: nova's operator grammar."""

from __future__ import annotations

import pytest

from filters.extra_specs_ops import match


@pytest.mark.parametrize(
    ("value", "req", "expected"),
    [
        # no operator: plain string equality with the whole requirement
        ("1", "1", True),
        ("1", "2", False),
        ("x86_64", "x86_64", True),
        ("1.0", "1", False),
        # '=' means "at least", numerically
        ("2", "= 1", True),
        ("1", "= 1", True),
        ("0.5", "= 1", False),
        ("12", "= 2", True),  # numeric, not string, comparison
        ("1", "== 1.0", True),
        ("1", "== 2", False),
        ("1", "!= 2", True),
        ("1", "!= 1.0", False),
        ("3", ">= 3", True),
        ("2", ">= 3", False),
        ("3", "<= 3", True),
        ("4", "<= 3", False),
        # string comparisons
        ("abc", "s== abc", True),
        ("abc", "s== abd", False),
        ("abc", "s!= abd", True),
        ("12", "s< 2", True),  # string order: "12" < "2"
        ("abc", "s<= abc", True),
        ("b", "s> a", True),
        ("a", "s>= b", False),
        # substring and lists
        ("sse sse2 avx", "<in> avx", True),
        ("sse sse2", "<in> avx", False),
        ("sse sse2 avx", "<all-in> sse avx", True),
        ("sse sse2", "<all-in> sse avx", False),
        ("kvm", "<or> qemu <or> kvm", True),
        ("xen", "<or> qemu <or> kvm", False),
        ("qemu", "<or> qemu", True),
        # an operator without an operand matches nothing
        ("1", ">=", False),
        ("1", "<or>", False),
        # a numeric operator on a non-number fails instead of raising
        ("abc", ">= 1", False),
        ("1", "= abc", False),
    ],
)
def test_match(value, req, expected):
    assert match(value, req) is expected


def test_none_value_fails_any_requirement():
    assert match(None, "1") is False
    assert match(None, ">= 1") is False
    assert match(None, "<or> a <or> b") is False


def test_none_requirement_matches_only_none():
    assert match(None, None) is True
    assert match("1", None) is False
