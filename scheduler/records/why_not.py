"""Why a host was or was not chosen, as one decision record says (``why_not``), read back
from the record's document (``scheduler/drivers/decisions.py`` writes it): what
``novasched-manage decision show --host`` prints, for any other reader of records too."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scheduler.records.record import DecisionRecord
from scheduler.records.words import diff, fmt, gap_words, number, share_gaps, weighers_of

# the document version that brought ``per_host`` (scheduler/drivers/decisions.py)
PER_HOST_VERSION = 4

# what a record says of a host: ``HostAnswer.verdict``
CHOSEN = "chosen"
PASSED = "passed"
REMOVED = "removed"
NARROWED = "narrowed"
NOT_CANDIDATE = "not_candidate"
NOT_RECORDED = "not_recorded"  # capped before it, or not written
NO_FILTERS = "no_filters"  # the filters never ran
PREDATES = "predates"  # a document before per-host detail


@dataclass(slots=True)
class HostAnswer:
    """Why a host was or was not chosen, as one decision record says: ``verdict`` (CHOSEN,
    PASSED, REMOVED, NARROWED, NOT_CANDIDATE, NOT_RECORDED, NO_FILTERS, PREDATES), the
    answer in words (``lines``) and its figures (``detail``: filter, reason, rank, weight,
    behind, ...)."""

    host: str
    verdict: str
    lines: list[str]
    detail: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"host": self.host, "verdict": self.verdict, "answer": self.lines, **self.detail}


def why_not(rec: DecisionRecord, host: str) -> HostAnswer:
    """What ``rec`` says of ``host`` (a host or node name, in any case): chosen; narrowed
    out before the filters; removed by a filter, with its reason; passed, with its rank,
    its weight and how far behind the chosen host it was, by weigher; or not a candidate.
    The per-host detail is the first instance's."""
    doc = rec.document
    want = host.strip().lower()
    chosen_for = [i for i, h in enumerate(rec.hosts, 1) if str(h).lower() == want]
    lines = []
    if chosen_for:
        many = "s" if len(chosen_for) > 1 else ""
        lines.append(f"chosen for instance{many} {', '.join(map(str, chosen_for))}")
    unrecorded = doc.get("unrecorded") or _get(doc.get("per_host"), "unrecorded")
    if unrecorded:  # the document, or its per-host detail, could not be written
        lines.append(f"the record does not say: its detail was not kept ({fmt(unrecorded)})")
        return HostAnswer(host, CHOSEN if chosen_for else NOT_RECORDED, lines)
    if "per_host" not in doc:
        lines.append(
            f"this record predates per-host detail (document version "
            f"{fmt(doc.get('version', 1))}; per-host detail came with {PER_HOST_VERSION})"
        )
        return HostAnswer(host, CHOSEN if chosen_for else PREDATES, lines)
    per_host = doc["per_host"]
    if not isinstance(per_host, dict):
        reason = doc.get("reason") or "Placement returned no candidate"
        lines.append(f"the filters never ran: {fmt(reason)}")
        return HostAnswer(host, NO_FILTERS, lines)
    answer = _per_host_answer(rec, per_host, want)
    if answer is None:
        answer = _not_given_answer(doc, per_host, want)
    answer.host = host
    answer.lines = lines + answer.lines
    if chosen_for:
        answer.verdict = CHOSEN
    instances = _num_instances(doc)
    if instances > 1 and answer.verdict not in (NARROWED, NOT_CANDIDATE):
        answer.lines.append(f"(the per-host detail is the first instance's, of {instances})")
    return answer


def _per_host_answer(rec: DecisionRecord, per_host: dict[str, Any], want: str) -> HostAnswer | None:
    """The answer of a host the filters were given: the filter that removed it, or its
    place among the hosts that passed; one per node when a host has several (ironic). None
    if the record does not name it."""
    found: list[tuple[Any, HostAnswer]] = []
    for group in per_host.get("removed") or ():
        if isinstance(group, dict):
            found += [
                (e, _removed_answer(rec.document, group))
                for e in group.get("hosts") or ()
                if _matches(e, want)
            ]
    for entry in per_host.get("passed") or ():
        if _matches(entry, want):
            found.append((entry, _passed_answer(rec, per_host, entry)))
    if len(found) <= 1:
        return found[0][1] if found else None
    # a host of several nodes: each node's answer; it passed if one of them did
    nodes = {_entry_node(e): a for e, a in found}
    lines = [f"node {node}: {line}" for node, a in nodes.items() for line in a.lines]
    verdict = PASSED if any(a.verdict == PASSED for a in nodes.values()) else REMOVED
    return HostAnswer("", verdict, lines, {"nodes": {n: a.as_dict() for n, a in nodes.items()}})


def _not_given_answer(doc: dict[str, Any], per_host: dict[str, Any], want: str) -> HostAnswer:
    """A host the filters were not given: narrowed out, left out of the record (capped) or
    not a candidate."""
    narrowed = _narrowed_by(doc, want)
    if narrowed:
        return HostAnswer(
            "", NARROWED, [f"taken out before the filters: {narrowed}"], {"narrowed": narrowed}
        )
    given = fmt(per_host.get("hosts_in"))
    capped = per_host.get("capped")
    if isinstance(capped, dict):
        text = (
            f"not among the hosts the record names: {fmt(capped.get('left_out'))} of the "
            f"{given} given to the filters were left out (it names {fmt(capped.get('limit'))} "
            "at most)"
        )
        return HostAnswer("", NOT_RECORDED, [text])
    text = (
        "not a candidate: Placement did not return it, or it is in another cell (the "
        f"filters were given {given} hosts)"
    )
    return HostAnswer("", NOT_CANDIDATE, [text])


def _get(value: Any, key: str) -> Any:
    return value.get(key) if isinstance(value, dict) else None


def _num_instances(doc: dict[str, Any]) -> int:
    request = doc.get("request")
    value = request.get("num_instances") if isinstance(request, dict) else None
    return value if isinstance(value, int) else 1


def _entry_name(entry: Any) -> str:
    """A per-host entry's host name (an entry is a name, or ``[host, node]``)."""
    return str(entry[0]) if isinstance(entry, list) and entry else str(entry)


def _entry_node(entry: Any) -> str:
    """A per-host entry's node name (its host's, unless named otherwise)."""
    return str(entry[-1]) if isinstance(entry, list) and entry else str(entry)


def _matches(entry: Any, want: str) -> bool:
    """Whether a per-host entry is the host or the node ``want`` (lower-case)."""
    names = entry if isinstance(entry, list) else [entry]
    return any(str(n).lower() == want for n in names)


def _removed_answer(doc: dict[str, Any], group: dict[str, Any]) -> HostAnswer:
    name = group.get("filter")
    reason = group.get("reason")
    text = f"removed by {fmt(name)}"
    if reason:
        text += f": {fmt(reason)}"
    filters = [f for f in doc.get("filters") or () if isinstance(f, dict)]
    place = next((i for i, f in enumerate(filters, 1) if f.get("name") == name), None)
    if place is not None:
        step = filters[place - 1]
        hosts_in, passed = number(step.get("hosts_in")), number(step.get("hosts_passed"))
        text += f" (filter {place} of {len(filters)}"
        if hosts_in is not None and passed is not None:
            text += f", which removed {hosts_in - passed:.0f} of the {hosts_in:.0f} it was given"
        text += ")"
    return HostAnswer("", REMOVED, [text], {"filter": name, "reason": reason})


def _passed_answer(rec: DecisionRecord, per_host: dict[str, Any], entry: Any) -> HostAnswer:
    """A host that passed every filter: its rank and weight, when it is among the best
    weighed hosts the record keeps the weights of, and how far behind the first instance's
    chosen host it was (else the best weighed one), by weigher when the record details
    both (the best ``[decision_records] top_weighed``)."""
    doc = rec.document
    weights = [float(w) for w in per_host.get("weights") or () if number(w) is not None]
    best = list(per_host.get("best") or ())[: len(weights)]
    filters = [f for f in doc.get("filters") or () if isinstance(f, dict)]
    total = filters[-1].get("hosts_passed") if filters else len(per_host.get("passed") or ())
    passed = "passed every filter" if filters else "passed (forced hosts: no filter ran)"
    if not best:
        return HostAnswer("", PASSED, [f"{passed}; the record keeps no weight"])
    chosen = str(rec.hosts[0]).lower() if rec.hosts else ""
    ref = next((i for i, e in enumerate(best) if _matches(e, chosen)), None)
    role = "the chosen host" if ref is not None else "the best weighed host"
    ref = ref or 0
    ref_name, ref_weight = _entry_name(best[ref]), weights[ref]
    rank = next((i for i, e in enumerate(best) if e == entry), None)
    if rank is None:
        last = weights[-1]
        behind = diff(ref_weight, last)
        return HostAnswer(
            "",
            PASSED,
            [
                f"{passed}, but was not among the {len(best)} best weighed hosts, whose "
                f"weights the record keeps: its weight was at most {fmt(last)} "
                f"(#{len(best)}'s of {fmt(total)})",
                f"at least {fmt(behind)} behind {ref_name}, {role}",
            ],
            {"weight_at_most": last + 0.0, "behind_at_least": behind, "behind_host": ref_name},
        )
    weight = weights[rank]
    lines = [f"{passed}: weighed #{rank + 1} of {fmt(total)} (weight {fmt(weight)})"]
    detail: dict[str, Any] = {"rank": rank + 1, "weight": weight + 0.0}
    if rank == ref:
        return HostAnswer("", PASSED, lines, detail)
    behind = diff(ref_weight, weight)
    lines.append(f"{fmt(behind)} behind {ref_name}, {role} (weight {fmt(ref_weight)})")
    detail.update(behind=behind, behind_host=ref_name)
    gaps = _weigher_gaps(doc, _entry_name(best[rank]), ref_name)
    if gaps is None:
        lines.append(
            "by weigher: not recorded (the record details the best [decision_records] "
            "top_weighed hosts only)"
        )
    elif gaps:
        lines.append(f"by weigher (its share less {ref_name}'s): {gap_words(gaps)}")
        detail["by_weigher"] = {n: diff(g, 0.0) for n, g in gaps}
    return HostAnswer("", PASSED, lines, detail)


def _weigher_gaps(doc: dict[str, Any], host: str, ref: str) -> list[tuple[str, float]] | None:
    """Per weigher, how far ``host``'s share was behind ``ref``'s (negative: behind), the
    largest first, from the first instance's weighed hosts; None when either is not there."""
    weighed = doc.get("weighed")
    if not isinstance(weighed, list) or not weighed:
        return None
    first = weighed[0] if isinstance(weighed[0], list) else weighed
    entries = {str(h.get("host")).lower(): h for h in first if isinstance(h, dict)}
    a, b = entries.get(host.lower()), entries.get(ref.lower())
    if a is None or b is None:
        return None
    names = list(dict.fromkeys([*weighers_of(a), *weighers_of(b)]))
    return share_gaps(a, b, names)


def _narrowed_by(doc: dict[str, Any], want: str) -> str | None:
    """Why the narrowing took ``want`` out before the filters, from the request (the record
    keeps how many it took out, not which): the requested destination, ignore_hosts,
    force_hosts, force_nodes. None if none of them excludes it."""
    request = doc.get("request")
    if not isinstance(request, dict):
        return None
    dest = request.get("requested_destination")
    if isinstance(dest, dict) and dest.get("host") and str(dest["host"]).lower() != want:
        return f"not the requested destination ({fmt(dest['host'])})"
    ignored = [str(h).lower() for h in request.get("ignore_hosts") or ()]
    if want in ignored:
        return "in the request's ignore_hosts"
    forced = [str(h) for h in request.get("force_hosts") or ()]
    if forced and want not in (h.lower() for h in forced):
        return f"not in the request's force_hosts ({', '.join(forced)})"
    nodes = [str(n) for n in request.get("force_nodes") or ()]
    if nodes and want not in (n.lower() for n in nodes):
        return f"not in the request's force_nodes ({', '.join(nodes)})"
    return None
