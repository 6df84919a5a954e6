"""Properties of the planner on random small clusters, checked against a brute-force oracle.

The example tests in test_planner.py pin the article's scenarios; these
guard what must hold for *every* input: a plan never overbooks a node or a
device, and the search never calls a group Short when some assignment fits.
Some members are "lonely": labelled and with required anti-affinity on the
hostname against that label, so at most one per node, a pairwise rule under
which the search still treats identical members as interchangeable.
"""

from __future__ import annotations

import itertools
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import GPU, GPU_CLASS, gpus, node, one_gpu_claim, term
from phalanx.planner import DeviceMatcher, Fits, Short, plan
from phalanx.planner.model import Group, Member, Snapshot, frozen_map

NS = "ml"
CPU_STEP = 500
LONELY = {"lonely": "yes"}


def lonely(member: Member) -> bool:
    return bool(member.pod_anti_affinity)


def build(nodes: list, devices: list, held: set, shapes: list[tuple[int, bool, bool]], min_count: int) -> tuple[Snapshot, Group]:
    """The snapshot and group for members of the given (cpu, wants a GPU, lonely) shapes, named in order."""
    members, claims = [], []
    for i, (cpu, gpu, alone) in enumerate(shapes):
        if gpu:
            claims.append(one_gpu_claim(NS, f"m{i}-gpu"))
        rules = {"labels": frozen_map(LONELY), "pod_anti_affinity": (term(lonely="yes"),)} if alone else {}
        members.append(Member(NS, f"m{i}", f"uid-m{i}", requests=frozen_map({"cpu": cpu}), claims=(f"m{i}-gpu",) * gpu, **rules))
    snapshot = Snapshot(
        nodes=tuple(nodes),
        devices=tuple(devices),
        classes=frozen_map({GPU: GPU_CLASS}),
        claims=frozen_map({c.key: c for c in claims}),
        held=frozenset(held),
    )
    return snapshot, Group(NS, "g", min_count, tuple(members))


@st.composite
def cases(draw: st.DrawFn, max_nodes: int = 4, max_members: int = 4) -> tuple[Snapshot, Group]:
    """A cluster and a group, sized so capacity, pods and GPUs all bind sometimes.

    Allocatable cpu is a few steps of 500m and a node already carries at most
    its allocatable (an overcommitted node is a different question: the
    scheduler skips the check for a zero request, and so does the planner).
    Pods allocatable is 0-3 so the pod count binds too. Some GPUs are held.
    """
    nodes, devices = [], []
    for i in range(draw(st.integers(1, max_nodes))):
        cpu = CPU_STEP * draw(st.integers(0, 6))
        used = CPU_STEP * draw(st.integers(0, cpu // CPU_STEP))
        nodes.append(node(f"n{i}", cpu=cpu, used_cpu=used, pods=draw(st.integers(0, 3))))
        devices += gpus(f"n{i}", draw(st.integers(0, 3)))
    held = draw(st.sets(st.sampled_from([d.id for d in devices]))) if devices else set()
    shapes = draw(
        st.lists(st.tuples(st.integers(0, 4).map(CPU_STEP.__mul__), st.booleans(), st.booleans()), min_size=1, max_size=max_members)
    )
    return build(nodes, devices, held, shapes, draw(st.integers(1, len(shapes))))


@st.composite
def planted(draw: st.DrawFn, max_nodes: int = 4, max_members: int = 4) -> tuple[Snapshot, Group]:
    """Tight cases with a known plan: members cut exactly out of each node's cpu, pods and GPUs, then reordered.

    Random cases almost never defeat the greedy first pass (under 1 in 1,000
    needs the search); these, with sizes often named smallest first, which
    first-fit packs badly, do about 1 in 15 times, so the search itself is
    tested. Sometimes one more member fits nowhere, so the search must skip it.
    """
    nodes, devices, shapes = [], [], []
    for i in range(draw(st.integers(1, max_nodes))):
        k = draw(st.integers(0 if i else 1, max_members - len(shapes)))
        cuts = sorted(draw(st.lists(st.integers(0, 6), min_size=k, max_size=k)))
        alone = draw(st.integers(-1, k - 1))  # at most one lonely member per node in the planted plan
        here = [(CPU_STEP * (b - a), draw(st.booleans()), j == alone) for j, (a, b) in enumerate(zip([0, *cuts], cuts, strict=False))]
        slack_cpu, slack_pods = draw(st.integers(0, 1)), draw(st.integers(0, 1))
        nodes.append(node(f"n{i}", cpu=CPU_STEP * (max(cuts, default=0) + slack_cpu), pods=k + slack_pods))
        devices += gpus(f"n{i}", sum(g for _, g, _ in here) + draw(st.integers(0, 1)))
        shapes += here
    min_count = len(shapes)  # every member the cut made; a smaller quorum is greedy's easy case
    shapes = sorted(shapes) if draw(st.booleans()) else draw(st.permutations(shapes))
    if len(shapes) < max_members and draw(st.booleans()):
        shapes.insert(0, (CPU_STEP * 8, False, False))  # fits no node: the search must leave it out
    return build(nodes, devices, set(), shapes, min_count)


def feasible_on(snapshot: Snapshot, node_name: str, members: list[Member]) -> bool:
    """One node can take these members together: cpu, pods, one free GPU per member with a claim, one lonely member."""
    n = next(x for x in snapshot.nodes if x.name == node_name)
    cpu = sum(m.requests.get("cpu", 0) for m in members) + n.requested.get("cpu", 0)
    free_gpus = sum(1 for d in snapshot.devices if d.node_name == node_name and d.id not in snapshot.held)
    return (
        cpu <= n.allocatable.get("cpu", 0)
        and len(members) + n.requested.get("pods", 0) <= n.allocatable.get("pods", 0)
        and sum(1 for m in members if m.claims) <= free_gpus
        and sum(1 for m in members if lonely(m)) <= 1
    )


def oracle(snapshot: Snapshot, group: Group) -> bool:
    """Brute force: does any map of members to (a node or "not placed") fit and place >= min_count?

    (len(nodes) + 1) ** len(members) assignments: at most 4 ** 4 = 256 on the sizes used here.
    """
    names = [n.name for n in snapshot.nodes]
    for assignment in itertools.product([None, *names], repeat=len(group.members)):
        if sum(a is not None for a in assignment) < group.min_count:
            continue
        on = {name: [m for m, a in zip(group.members, assignment, strict=False) if a == name] for name in names}
        if all(feasible_on(snapshot, name, ms) for name, ms in on.items()):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(st.one_of(cases(), planted()))
def test_a_plan_never_overbooks_a_node_or_a_device(case: tuple[Snapshot, Group]) -> None:
    """Whatever the search does, the plan it returns must be one the cluster can actually run."""
    snapshot, group = case
    result = plan(snapshot, group)
    if not isinstance(result, Fits):
        return
    uids = [m.uid for m, _ in result.placements]
    assert len(uids) == len(set(uids)), "a member placed twice"
    assert len(uids) >= group.min_count
    placed = {m.uid: n for m, n in result.placements}
    by_node = Counter(n for _, n in result.placements)
    for n in snapshot.nodes:
        cpu = sum(m.requests.get("cpu", 0) for m, where in result.placements if where == n.name)
        assert cpu + n.requested.get("cpu", 0) <= n.allocatable["cpu"], f"cpu overbooked on {n.name}"
        assert by_node[n.name] + n.requested.get("pods", 0) <= n.allocatable["pods"], f"pods overbooked on {n.name}"
        assert sum(1 for m, where in result.placements if where == n.name and lonely(m)) <= 1, f"two lonely members on {n.name}"
    devices = [r.device_id for c in result.claims for r in c.results]
    assert len(devices) == len(set(devices)), "a device in two claim plans"
    assert not set(devices) & snapshot.held, "a held device planned"
    owner = {(m.namespace, c): m for m in group.members for c in m.claims}
    planned = {(c.namespace, c.name) for c in result.claims}
    for member, _where in result.placements:
        for c in member.claims:
            assert (member.namespace, c) in planned, f"{member.name} placed without its claim"
    for claim in result.claims:
        member = owner[(claim.namespace, claim.name)]
        assert member.uid in placed, f"claim {claim.name} planned for an unplaced member"
        assert claim.node == placed[member.uid]
        assert all(r.pool == claim.node for r in claim.results), "a device from another node"


@settings(max_examples=300, deadline=None)
@given(st.one_of(cases(max_nodes=3), planted(max_nodes=3)))
def test_short_exactly_when_no_assignment_fits(case: tuple[Snapshot, Group]) -> None:
    """The search is exhaustive on small cases: Short must mean impossible, and Fits must mean possible."""
    snapshot, group = case
    result = plan(snapshot, group)
    assert isinstance(result, (Fits, Short))
    assert isinstance(result, Short) == (not oracle(snapshot, group)), result


SHARED = DeviceMatcher()


@settings(max_examples=300, deadline=None)
@given(st.one_of(cases(), planted()))
def test_a_warm_matcher_gives_the_answer_of_a_fresh_one(case: tuple[Snapshot, Group]) -> None:
    """The matcher is the planner's only state, reused across cycles: its cache must never change a verdict."""
    snapshot, group = case
    assert plan(snapshot, group, SHARED) == plan(snapshot, group, DeviceMatcher())
