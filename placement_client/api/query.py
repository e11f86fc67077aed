"""The GET /allocation_candidates query, as a value, and its query string in nova's format.

``AllocationCandidatesQuery.to_querystring()`` writes exactly what nova's
``ResourceRequest.to_querystring`` writes (every (key, value) pair sorted, then urlencoded),
so logs, tests and Placement's own request log look the same as under nova.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from urllib.parse import urlencode


@dataclass(slots=True)
class QueryGroup:
    """One request group: satisfied by one provider (suffixed) or by a provider tree
    (the unsuffixed group, ``suffix == ""``)."""

    suffix: str = ""
    resources: dict[str, int] = field(default_factory=dict)
    required_traits: set[str] = field(default_factory=set)
    forbidden_traits: set[str] = field(default_factory=set)
    # any-of trait sets (microversion 1.39's ``required=in:A,B``): one of each is required
    required_any: list[set[str]] = field(default_factory=list)
    # each inner list is an OR-set of aggregate uuids; the lists are ANDed
    member_of: list[list[str]] = field(default_factory=list)
    forbidden_aggregates: set[str] = field(default_factory=set)
    in_tree: str | None = None

    def has_resources(self) -> bool:
        return any(amount for amount in self.resources.values())

    def is_empty(self) -> bool:
        """Nothing for Placement to match: no (non-zero) resources, traits or aggregates
        (nova's ``RequestGroup.is_empty``; ``in_tree`` alone does not count)."""
        return not (
            self.has_resources()
            or self.required_traits
            or self.forbidden_traits
            or self.required_any
            or self.member_of
            or self.forbidden_aggregates
        )

    def to_params(self) -> list[tuple[str, str]]:
        """The (key, value) pairs of this group, unsorted."""
        s = self.suffix
        params: list[tuple[str, str]] = []
        resources = ",".join(
            f"{rc}:{amount}" for rc, amount in sorted(self.resources.items()) if amount
        )
        if resources:
            params.append((f"resources{s}", resources))
        traits = _traits_value(self.required_traits, self.forbidden_traits)
        if traits:
            params.append((f"required{s}", traits))
        for any_of in self.required_any:
            if any_of:
                params.append((f"required{s}", "in:" + ",".join(sorted(any_of))))
        for or_set in self.member_of:
            if or_set:
                params.append((f"member_of{s}", "in:" + ",".join(sorted(or_set))))
        if self.in_tree:
            params.append((f"in_tree{s}", self.in_tree))
        if self.forbidden_aggregates:
            params.append((f"member_of{s}", "!in:" + ",".join(sorted(self.forbidden_aggregates))))
        return params

    def describe(self) -> str:
        """The group in words, e.g. ``resources=VCPU:1,MEMORY_MB:512 required=CUSTOM_SSD``."""
        prefix = f"group {self.suffix}: " if self.suffix else ""
        parts = []
        resources = ",".join(f"{rc}:{n}" for rc, n in _standard_first(self.resources) if n)
        if resources:
            parts.append(f"resources={resources}")
        traits = _traits_value(self.required_traits, self.forbidden_traits)
        if traits:
            parts.append(f"required={traits}")
        for any_of in self.required_any:
            if any_of:
                parts.append("required=in:" + ",".join(sorted(any_of)))
        for or_set in self.member_of:
            if or_set:
                parts.append("member_of=in:" + ",".join(sorted(or_set)))
        if self.forbidden_aggregates:
            parts.append("member_of=!in:" + ",".join(sorted(self.forbidden_aggregates)))
        if self.in_tree:
            parts.append(f"in_tree={self.in_tree}")
        return prefix + (" ".join(parts) or "no resources")


@dataclass(slots=True)
class AllocationCandidatesQuery:
    """Everything sent as the query string of GET /allocation_candidates (microversion 1.36)."""

    groups: list[QueryGroup] = field(default_factory=list)
    limit: int | None = None
    group_policy: str | None = None
    root_required: set[str] = field(default_factory=set)
    root_forbidden: set[str] = field(default_factory=set)
    same_subtree: list[list[str]] = field(default_factory=list)

    def group(self, suffix: str = "") -> QueryGroup:
        """The group with this suffix, created (appended) if missing."""
        for g in self.groups:
            if g.suffix == suffix:
                return g
        g = QueryGroup(suffix=suffix)
        self.groups.append(g)
        return g

    def confined_to(self, tree: str) -> AllocationCandidatesQuery:
        """A copy that asks for the candidates of one provider tree alone: the unsuffixed
        group's ``in_tree`` is ``tree`` and there is no ``limit`` (a tree has few)."""
        query = copy.deepcopy(self)
        query.limit = None
        query.group("").in_tree = tree
        return query

    def effective_groups(self) -> list[QueryGroup]:
        """The groups that go on the wire: empty ones are dropped, except resourceless
        groups that a same_subtree names."""
        in_subtree = {s for subtree in self.same_subtree for s in subtree}
        return [g for g in self.groups if not g.is_empty() or (g.suffix and g.suffix in in_subtree)]

    def to_params(self) -> list[tuple[str, str]]:
        """The sorted (key, value) pairs of the query string."""
        params: list[tuple[str, str]] = []
        if self.limit is not None:
            params.append(("limit", str(self.limit)))
        if self.group_policy:
            params.append(("group_policy", self.group_policy))
        root = _traits_value(self.root_required, self.root_forbidden)
        if root:
            params.append(("root_required", root))
        for subtree in self.same_subtree:
            if subtree:
                params.append(("same_subtree", ",".join(sorted(subtree))))
        for g in self.effective_groups():
            params.extend(g.to_params())
        params.sort()
        return params

    def microversion(self) -> str:
        """The microversion the query needs: nova's 1.36, or 1.39 for any-of traits."""
        return "1.39" if any(g.required_any for g in self.groups) else "1.36"

    def to_querystring(self) -> str:
        """The query string, exactly as nova sends it; unquoted it reads e.g.
        ``limit=1000&resources=DISK_GB:20,MEMORY_MB:2048,VCPU:1&root_required=!COMPUTE_STATUS_DISABLED``.
        """
        # Byte for byte what nova sends: urlencode() of the sorted pairs, so ':' ',' '!' are
        # percent-encoded (``resources=VCPU%3A1``). ``unquote()`` of it reads as above.
        return urlencode(self.to_params())

    def describe(self) -> str:
        """The query in words, for NoValidHost reasons and logs."""
        parts = [g.describe() for g in self.effective_groups()]
        root = _traits_value(self.root_required, self.root_forbidden)
        if root:
            parts.append(f"root_required={root}")
        for subtree in self.same_subtree:
            parts.append("same_subtree=" + ",".join(sorted(subtree)))
        if self.group_policy:
            parts.append(f"group_policy={self.group_policy}")
        if self.limit is not None:
            parts.append(f"limit={self.limit}")
        return "; ".join(parts) if parts else "empty query"

    def total_resources(self) -> dict[str, int]:
        """Sum of the amounts over all groups, by resource class."""
        total: dict[str, int] = {}
        for g in self.groups:
            for rc, n in g.resources.items():
                if n:
                    total[rc] = total.get(rc, 0) + n
        return total


def _traits_value(required: set[str], forbidden: set[str]) -> str:
    return ",".join(sorted(required) + ["!" + t for t in sorted(forbidden)])


_STANDARD_ORDER = {"VCPU": 0, "PCPU": 1, "MEMORY_MB": 2, "DISK_GB": 3}


def _standard_first(resources: dict[str, int]) -> list[tuple[str, int]]:
    """Resources in the order people read them: VCPU, PCPU, MEMORY_MB, DISK_GB, then others."""
    return sorted(resources.items(), key=lambda kv: (_STANDARD_ORDER.get(kv[0], 9), kv[0]))
