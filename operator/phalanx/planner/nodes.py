"""Which nodes a pod may use at all: the scheduler's NodeUnschedulable, TaintToleration,
NodeName/NodeAffinity filters, as pure predicates. Resources and devices come later."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.planner.model import Member, Node, Requirement, SelectorTerm, Taint
from phalanx.planner.taints import tolerates

UNSCHEDULABLE_TAINT = "node.kubernetes.io/unschedulable"


def selector_terms(selector: Mapping[str, Any] | None) -> tuple[SelectorTerm, ...]:
    """A node selector's wire form (`nodeSelectorTerms` of matchExpressions and matchFields) as terms."""
    return tuple(
        SelectorTerm(
            tuple(Requirement(e["key"], e["operator"], tuple(e.get("values") or ())) for e in t.get("matchExpressions") or [])
            + tuple(Requirement(e["key"], e["operator"], tuple(e.get("values") or ()), field=True) for e in t.get("matchFields") or [])
        )
        for t in (selector or {}).get("nodeSelectorTerms") or []
    )


def holds(actual: str | None, req: Requirement) -> bool:
    """One requirement on the value of a label or field (None: absent); label selectors use it too."""
    op = req.operator
    if op == "In":
        return actual is not None and actual in req.values
    if op == "NotIn":
        return actual is None or actual not in req.values
    if op == "Exists":
        return actual is not None
    if op == "DoesNotExist":
        return actual is None
    if op in ("Gt", "Lt") and actual is not None and req.values:
        try:
            a, b = int(actual), int(req.values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def _requirement(node: Node, req: Requirement) -> bool:
    if req.field:
        return holds(node.name if req.key == "metadata.name" else None, req)
    return holds(node.labels.get(req.key), req)


def matches_terms(node: Node, terms: Iterable[SelectorTerm]) -> bool:
    """A node selector: terms ORed, requirements of a term ANDed; no terms matches every node."""
    terms = tuple(terms)
    return not terms or any(all(_requirement(node, r) for r in term.requirements) for term in terms)


def selected(member: Member, node: Node) -> bool:
    """The pod's nodeSelector and required node affinity: what topology spreading honours by default."""
    return all(node.labels.get(k) == v for k, v in member.node_selector.items()) and matches_terms(node, member.affinity)


def tolerated(member: Member, node: Node) -> bool:
    """Every NoSchedule and NoExecute taint of the node is tolerated."""
    return all(t.effect not in ("NoSchedule", "NoExecute") or tolerates(member.tolerations, t) for t in node.taints)


def blocking_reason(member: Member, node: Node) -> str | None:
    """Why `member` can never run on `node`, or None. The words are the scheduler's."""
    if node.unschedulable and not tolerates(member.tolerations, Taint(UNSCHEDULABLE_TAINT, effect="NoSchedule")):
        return "node(s) were unschedulable"
    if not tolerated(member, node):
        return "node(s) had untolerated taint(s)"
    if not selected(member, node):
        return "node(s) didn't match Pod's node affinity/selector"
    return None
