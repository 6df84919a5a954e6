"""One toleration rule for nodes and devices, upstream's `ToleratesTaint`: an empty operator is `Equal`."""

from __future__ import annotations

from builders import cluster, gang, gpus, node, with_claims
from phalanx.planner import Fits, plan
from phalanx.planner.model import Group, Member, Snapshot, Taint, Toleration
from phalanx.planner.nodes import blocking_reason
from phalanx.planner.taints import tolerates

DEDICATED = Taint("dedicated", "training", "NoSchedule")


def test_an_empty_operator_is_equal_on_a_node_as_upstream() -> None:
    """A pod may write `operator: ""` (the API server keeps it): kube-scheduler reads it as Equal, so must the node filter."""
    member = Member("ml", "rank-0", "uid-0", tolerations=(Toleration("dedicated", "", "training"),))
    assert blocking_reason(member, node("reserved", taints=[DEDICATED])) is None
    wrong = Member("ml", "rank-0", "uid-0", tolerations=(Toleration("dedicated", "", "serving"),))
    assert blocking_reason(wrong, node("reserved", taints=[DEDICATED])) == "node(s) had untolerated taint(s)"


def test_the_node_filter_and_the_allocator_read_a_toleration_alike() -> None:
    cases = [
        (Toleration("dedicated", "", "training"), True),
        (Toleration("dedicated", "Equal", "training"), True),
        (Toleration("dedicated", "Equal", "serving"), False),
        (Toleration("", "Exists"), True),
        (Toleration("dedicated", "Exists", effect="NoExecute"), False),
        (Toleration("other", "Exists"), False),
    ]
    for toleration, expected in cases:
        assert tolerates((toleration,), DEDICATED) is expected, toleration


def test_a_gang_tolerating_with_an_empty_operator_is_placed_on_the_tainted_workers() -> None:
    base = cluster(workers=0)
    workers = [node(f"worker-{i}", taints=[DEDICATED]) for i in (1, 2)]
    snapshot = Snapshot((*base.nodes, *workers), tuple(d for w in workers for d in gpus(w.name, 2)), base.classes, base.claims)
    group, claims = gang("train", 4)
    members = tuple(
        Member(m.namespace, m.name, m.uid, m.requests, tolerations=(Toleration("dedicated", "", "training"),), claims=m.claims)
        for m in group.members
    )
    result = plan(with_claims(snapshot, claims), Group("ml", "train", 4, members))
    assert isinstance(result, Fits) and result.nodes == {"worker-1", "worker-2"}
