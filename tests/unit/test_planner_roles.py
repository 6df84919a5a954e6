"""A gang of roles (`model.Role`): each role's minimum placed together, or nothing.

Upstream's CompositePodGroup (KEP-6012) says "one launcher and at least three
workers" with a child PodGroup per role; a count over all members cannot say
it, and would let four workers go without their launcher. These tests pin the
planner's side: the first pass places every role's minimum before any extra,
the search never stops at a count that leaves a role short, and a Short names
each role against its minimum.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from builders import GPU, GPU_CLASS, gpus, node, one_gpu_claim
from phalanx.planner import Fits, Short, plan
from phalanx.planner.model import Group, Member, Role, Snapshot, frozen_map
from test_planner_properties import cases, feasible_on, planted

NS = "ml"


def launcher_and_workers(workers: int, *, launcher_selector: dict | None = None) -> tuple[Snapshot, list[Member], list]:
    """Two nodes of 2 GPUs; a launcher `z-launcher` (named last, so a pass in name order meets it last) and workers
    `a-worker-i`, each pod with one GPU claim."""
    claims = [one_gpu_claim(NS, "launcher-gpu")] + [one_gpu_claim(NS, f"worker-{i}-gpu") for i in range(workers)]
    launcher = Member(
        NS,
        "z-launcher",
        "uid-launcher",
        frozen_map({"cpu": 100}),
        node_selector=frozen_map(launcher_selector or {}),
        claims=("launcher-gpu",),
    )
    members = [launcher] + [
        Member(NS, f"a-worker-{i}", f"uid-worker-{i}", frozen_map({"cpu": 100}), claims=(f"worker-{i}-gpu",)) for i in range(workers)
    ]
    nodes = (node("n1"), node("n2"))
    snapshot = Snapshot(
        nodes=nodes,
        devices=tuple(d for n in nodes for d in gpus(n.name, 2)),
        classes=frozen_map({GPU: GPU_CLASS}),
        claims=frozen_map({c.key: c for c in claims}),
    )
    return snapshot, members, claims


def composite(members: list[Member], launchers: int, workers: int) -> Group:
    roles = (
        Role("launcher", launchers, frozenset(m.uid for m in members if "launcher" in m.name)),
        Role("workers", workers, frozenset(m.uid for m in members if "worker" in m.name)),
    )
    return Group(NS, "train", launchers + workers, tuple(members), roles=roles)


def placed_by_role(result: Fits, group: Group) -> dict[str, int]:
    uids = {m.uid for m, _ in result.placements}
    return {r.name: len(uids & r.members) for r in group.roles}


def test_the_launcher_goes_with_its_workers_when_a_count_would_leave_it_out() -> None:
    """4 GPUs, 1 launcher that only n1 takes and 4 workers: minCount 4 over all places four workers (the scenario a
    count allows); the roles' minimums (1 launcher, 3 workers) place the launcher on n1 with three workers."""
    snapshot, members, _ = launcher_and_workers(4, launcher_selector={"kubernetes.io/hostname": "n1"})
    by_count = plan(snapshot, Group(NS, "train", 4, tuple(members)))
    assert isinstance(by_count, Fits)
    assert "z-launcher" not in {m.name for m, _ in by_count.placements}, "the scenario: a count lets the workers go alone"

    group = composite(members, 1, 3)
    result = plan(snapshot, group)
    assert isinstance(result, Fits), result
    assert placed_by_role(result, group) == {"launcher": 1, "workers": 3}
    assert dict((m.name, n) for m, n in result.placements)["z-launcher"] == "n1"


def test_each_role_alone_fits_but_not_together() -> None:
    """3 free GPUs: the launcher alone fits, and so do three workers alone; together they need 4, so nothing goes,
    and the Short says each role's count against its minimum."""
    snapshot, members, _ = launcher_and_workers(3)
    snapshot = replace(snapshot, held=frozenset({(GPU, "n2", "gpu-1")}))
    group = composite(members, 1, 3)
    launcher_only = replace(group, min_count=1, members=tuple(m for m in members if "launcher" in m.name), roles=group.roles[:1])
    workers_only = replace(group, min_count=3, members=tuple(m for m in members if "worker" in m.name), roles=group.roles[1:])
    assert isinstance(plan(snapshot, launcher_only), Fits)
    assert isinstance(plan(snapshot, workers_only), Fits)

    result = plan(snapshot, group)
    assert isinstance(result, Short), result
    assert [(r.name, r.min_count, r.members) for r in result.roles] == [("launcher", 1, 1), ("workers", 3, 3)]
    assert "launcher" in result.message and "workers" in result.message, result.message
    assert any(s.resource == GPU and s.needed == 4 for s in result.shortages), result.shortages


def test_a_role_with_fewer_members_than_its_minimum_is_named() -> None:
    snapshot, members, _ = launcher_and_workers(2)
    result = plan(snapshot, composite(members, 1, 3))
    assert isinstance(result, Short)
    assert result.message == "minCount 4: workers has 2 of minCount 3", result.message


def test_extras_of_a_role_go_when_they_fit() -> None:
    """Upstream's rule for groups larger than their minimum holds per role: every member that fits goes along."""
    snapshot, members, _ = launcher_and_workers(3)
    group = composite(members, 1, 2)
    result = plan(snapshot, group)
    assert isinstance(result, Fits)
    assert placed_by_role(result, group) == {"launcher": 1, "workers": 3}


@st.composite
def with_roles(draw: st.DrawFn) -> tuple[Snapshot, Group]:
    """A random or planted case, its members split into two roles with minimums of their own."""
    snapshot, group = draw(st.one_of(cases(max_nodes=3), planted(max_nodes=3)))
    members = group.members
    cut = draw(st.integers(0, len(members)))
    parts = [members[:cut], members[cut:]]
    roles = tuple(
        Role(f"role-{i}", draw(st.integers(1, len(part))), frozenset(m.uid for m in part)) for i, part in enumerate(parts) if part
    )
    return snapshot, replace(group, min_count=sum(r.min_count for r in roles), roles=roles)


def oracle(snapshot: Snapshot, group: Group) -> bool:
    """Brute force, as `test_planner_properties.oracle`, counting each role against its minimum."""
    names = [n.name for n in snapshot.nodes]
    for assignment in itertools.product([None, *names], repeat=len(group.members)):
        chosen = {m.uid for m, a in zip(group.members, assignment, strict=True) if a is not None}
        if len(chosen) < group.min_count or any(len(chosen & r.members) < r.min_count for r in group.roles):
            continue
        on = {name: [m for m, a in zip(group.members, assignment, strict=True) if a == name] for name in names}
        if all(feasible_on(snapshot, name, ms) for name, ms in on.items()):
            return True
    return False


@settings(max_examples=300, deadline=None)
@given(with_roles())
def test_short_exactly_when_no_assignment_meets_every_role(case: tuple[Snapshot, Group]) -> None:
    """Exhaustive on small cases: a Fits places each role's minimum, and Short means no assignment could."""
    snapshot, group = case
    result = plan(snapshot, group)
    if isinstance(result, Fits):
        assert all(n >= r.min_count for r, n in zip(group.roles, placed_by_role(result, group).values(), strict=True)), result
    assert isinstance(result, Short) == (not oracle(snapshot, group)), result
