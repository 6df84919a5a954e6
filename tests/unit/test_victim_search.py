"""Gang preemption on clusters described as data: which victims go, in upstream's order, and no more than needed."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import (
    GPU,
    cluster,
    gang,
    group_victim,
    node,
    occupied,
    pod_victims,
    ranks,
    running,
    term,
    with_claims,
    with_pods,
)
from phalanx.planner import DeviceMatcher, Fits, NoVictims, Preemption, Victim, VictimPod, plan, plan_preemption
from phalanx.planner.model import Claim, Device, DeviceClass, DeviceRequest, Group, Member, Snapshot, frozen_map
from phalanx.planner.preemption import _shortest_prefix, no_candidates, order, without

URGENT = 10_000
TRAIN_A = [("worker-1", 0), ("worker-1", 1), ("worker-2", 0), ("worker-2", 1)]


def gpu(node_name: str, index: int) -> tuple[str, str, str]:
    return (GPU, node_name, f"gpu-{index}")


def _devices(fits: Fits) -> set:
    return {r.device_id for c in fits.claims for r in c.results}


def _keys(result: Preemption | NoVictims) -> list[str]:
    assert isinstance(result, Preemption), result.reason
    return [v.key for v in result.victims]


def _preempt(snapshot: Snapshot, victims, ranks_wanted: int, priority: int = URGENT) -> Preemption | NoVictims:
    """`train-urgent` (one GPU per rank) against `victims` running on `snapshot`."""
    group, claims = gang("train-urgent", ranks_wanted)
    on = with_claims(occupied(snapshot, victims), claims)
    assert not isinstance(plan(on, group), Fits), "the case must need preemption"
    return plan_preemption(on, group, victims, priority)


def _check_plan(result: Preemption, snapshot: Snapshot, victims) -> None:
    """Each rank placed has a device of its own, free once the chosen victims are gone."""
    before = occupied(snapshot, victims)
    after = without(before, result.victims)
    used = _devices(result.fits)
    assert len(result.fits.placements) == len(used)
    assert not used & after.held, "a device some pod that stays still holds"


def test_the_articles_dra_case_evicts_train_a_whole_and_runs_on_its_devices() -> None:
    train_a = group_victim("train-a", 100, ranks("train-a", TRAIN_A))
    result = _preempt(cluster(), [train_a], 4)
    assert _keys(result) == ["group ml/train-a"]
    assert len(result.pods) == 4
    _check_plan(result, cluster(), [train_a])
    freed = {d for p in train_a.pods for d in p.devices}
    assert len(_devices(result.fits) & freed) >= 2, "2 GPUs were free: the other 2 must be train-a's"


def test_single_mode_evicts_only_the_members_needed() -> None:
    victims = pod_victims(100, ranks("train-a", TRAIN_A))
    result = _preempt(cluster(), victims, 4)
    assert _keys(result) == ["pod ml/train-a-0", "pod ml/train-a-1"], "2 free + 2 freed = 4"
    _check_plan(result, cluster(), victims)
    assert {gpu("worker-1", 0), gpu("worker-1", 1)} <= _devices(result.fits)


@pytest.mark.parametrize(
    ("priorities", "reason"),
    [
        ([10_000], "no lower-priority victims: 1 running, the lowest at priority 10000, not below the preemptor's 10000"),
        ([20_000, 10_000], "no lower-priority victims: 2 running, the lowest at priority 10000, not below the preemptor's 10000"),
        ([], "no lower-priority victims: nothing runs that preemption may evict"),
    ],
)
def test_victims_of_equal_or_higher_priority_are_never_taken(priorities: list[int], reason: str) -> None:
    """Every GPU but worker-3's is the victims'; worker-3's are held by a pod that is no victim."""
    where = {0: [], 1: [TRAIN_A], 2: [TRAIN_A[:2], TRAIN_A[2:]]}[len(priorities)]
    victims = [group_victim(f"v{i}", p, ranks(f"v{i}", where[i])) for i, p in enumerate(priorities)]
    held = [gpu("worker-3", 0), gpu("worker-3", 1)] + ([] if victims else [gpu(n, i) for n, i in TRAIN_A])
    result = _preempt(cluster(held=held), victims, 2)
    assert isinstance(result, NoVictims) and result.reason == reason
    assert no_candidates(victims, 10_000) == result, "the loop's answer before any plan is the search's"


def test_a_lower_priority_victim_with_pods_is_a_candidate() -> None:
    assert no_candidates([group_victim("v", 100, ranks("v", TRAIN_A))], 10_000) is None


def test_no_victims_when_even_evicting_all_of_them_leaves_the_group_short() -> None:
    train_a = group_victim("train-a", 100, ranks("train-a", TRAIN_A))
    result = _preempt(cluster(), [train_a], 8)
    assert isinstance(result, NoVictims)
    assert result.reason == (
        "even evicting every lower-priority victim (1 victim, 4 pods) leaves: minCount 8: 6 of 8 members fit; "
        "can never fit: needs 8 x gpu.example.com, the cluster has 6; 1 node(s) had untolerated taint(s)"
    )


def test_a_group_that_fits_already_needs_no_victims() -> None:
    group, claims = gang("small", 2)
    snapshot = with_claims(cluster(), claims)
    result = plan_preemption(snapshot, group, [group_victim("train-a", 100, ranks("train-a", TRAIN_A[:2]))], URGENT)
    assert isinstance(result, Preemption) and result.victims == () and len(result.fits.placements) == 2


# Two workers with two GPUs each, every GPU taken unless a case leaves one free.
TWO_BY_TWO = cluster(workers=2, control_plane=False)
W1 = [("worker-1", 0), ("worker-1", 1)]
W2 = [("worker-2", 0), ("worker-2", 1)]
OLD, YOUNG = "2025-01-01T00:00:00Z", "2025-06-01T12:00:00+00:00"


@pytest.mark.parametrize(
    ("victims", "wanted", "expected"),
    [
        pytest.param(
            [group_victim("a", 200, ranks("a", W1)), group_victim("b", 100, ranks("b", W2))],
            2,
            ["group ml/b"],
            id="lowest-priority-first",
        ),
        pytest.param(
            [*pod_victims(100, ranks("a", W1)), group_victim("b", 100, ranks("b", W2))],
            2,
            ["group ml/b"],
            id="group-before-single-pods-at-equal-priority",
        ),
        pytest.param(
            [group_victim("a", 100, ranks("a", W1)), group_victim("b", 100, ranks("b", W2[:1]))],
            2,  # worker-2's gpu-1 is free: b's one GPU is enough
            ["group ml/b"],
            id="fewer-pods-first",
        ),
        pytest.param(
            [*pod_victims(100, ranks("a", W1), created=OLD), *pod_victims(100, ranks("b", W2), created=YOUNG)],
            1,
            ["pod ml/b-0"],
            id="younger-first",
        ),
        pytest.param(
            [*pod_victims(100, ranks("a", W1)), *pod_victims(100, ranks("b", W2))],
            1,
            ["pod ml/a-0"],
            id="then-the-key",
        ),
    ],
)
def test_victims_are_taken_in_upstreams_order(victims: list[Victim], wanted: int, expected: list[str]) -> None:
    assert _keys(_preempt(TWO_BY_TWO, victims, wanted)) == expected
    assert _keys(_preempt(TWO_BY_TWO, victims[::-1], wanted)) == expected, "the input order does not matter"


def test_a_victim_added_early_is_left_out_when_a_later_one_suffices() -> None:
    """a (lowest priority) frees 2 GPUs, not the 3 needed; adding b frees 5; b alone frees 3, so a stays."""
    snapshot = cluster(control_plane=False, held=[gpu("worker-3", 1)])
    a = group_victim("a", 10, ranks("a", W1))
    b = group_victim("b", 20, ranks("b", [*W2, ("worker-3", 0)]))
    result = _preempt(snapshot, [a, b], 3)
    assert _keys(result) == ["group ml/b"]
    _check_plan(result, snapshot, [a, b])


def test_single_pods_added_early_are_left_out_in_reverse_order() -> None:
    """Five singles at rising priority, one GPU each, 2 needed: the two cheapest, and no third."""
    snapshot = cluster(control_plane=False, held=[gpu("worker-3", 1)])
    victims = [v for i, (n, g) in enumerate([*W1, *W2, ("worker-3", 0)]) for v in pod_victims(i, ranks(f"p{i}", [(n, g)]))]
    assert _keys(_preempt(snapshot, victims, 2)) == ["pod ml/p0-0", "pod ml/p1-0"]


@pytest.mark.parametrize(
    ("budgets", "wanted", "expected"),
    [
        pytest.param({"a": True, "b": False}, 2, ["group ml/b"], id="a-set-within-budgets-wins-over-order"),
        pytest.param({"a": True, "b": True}, 2, None, id="only-violating-sets-exist"),
        pytest.param({"a": True, "b": False}, 3, None, id="the-budget-keeping-victims-are-not-enough"),
        pytest.param({"a": False, "b": False}, 2, ["group ml/a"], id="no-budgets-plain-order"),
    ],
)
def test_disruption_budgets_are_never_broken(budgets: dict, wanted: int, expected: list[str] | None) -> None:
    """The Eviction API refuses what would break a budget: a preemption that needs it could never finish."""
    victims = [
        group_victim("a", 10, ranks("a", W1), budget=budgets["a"]),
        group_victim("b", 20, ranks("b", W2), budget=budgets["b"]),
    ]
    result = _preempt(TWO_BY_TWO, victims, wanted)
    if expected is None:
        assert isinstance(result, NoVictims) and "PodDisruptionBudget ml/guard (allows 0)" in result.reason, result
    else:
        assert _keys(result) == expected


def test_a_budget_is_summed_over_the_victims_chosen() -> None:
    """Four single ranks under one budget that allows two disruptions: each alone is within it, all four are not.
    The two cheapest go, and a gang that needs three is told which budget stops it."""
    victims = pod_victims(10, ranks("a", [*W1, *W2]), budget="ml/ranks")
    group, claims = gang("train-urgent", 2)
    on = with_claims(occupied(TWO_BY_TWO, victims), claims)
    chosen = plan_preemption(on, group, victims, URGENT, allowed={"ml/ranks": 2})
    assert _keys(chosen) == ["pod ml/a-0", "pod ml/a-1"]
    group, claims = gang("train-urgent", 3)
    on = with_claims(occupied(TWO_BY_TWO, victims), claims)
    refused = plan_preemption(on, group, victims, URGENT, allowed={"ml/ranks": 2})
    assert isinstance(refused, NoVictims) and "ml/ranks (allows 2)" in refused.reason, refused


ACCEL = "example.com/accel"


@pytest.mark.parametrize(("single", "evicted"), [(False, 4), (True, 2)])
def test_a_node_local_extended_resource_is_freed_by_the_victims_requests(single: bool, evicted: int) -> None:
    nodes = [node(f"n{i}") for i in (1, 2, 3)]
    nodes = [replace(n, allocatable=frozen_map({**n.allocatable, ACCEL: 2})) for n in nodes]
    pods = ranks("train-a", [("n1", None), ("n1", None), ("n2", None), ("n2", None)], **{ACCEL: 1})
    victims = pod_victims(100, pods) if single else [group_victim("train-a", 100, pods)]
    snapshot = occupied(Snapshot(tuple(nodes)), victims)
    members = tuple(Member("ml", f"urgent-{i}", f"uid-urgent-{i}", requests=frozen_map({"cpu": 50, ACCEL: 1})) for i in range(4))
    group = Group("ml", "train-urgent", 4, members)
    assert not isinstance(plan(snapshot, group), Fits)
    result = plan_preemption(snapshot, group, victims, URGENT)
    assert isinstance(result, Preemption) and len(result.pods) == evicted
    used = {n: sum(1 for _, on in result.fits.placements if on == n) for n in ("n1", "n2", "n3")}
    assert sum(used.values()) == 4 and max(used.values()) == 2
    if single:
        assert used == {"n1": 2, "n2": 0, "n3": 2}, "on the 2 accelerators free and the 2 freed"


def test_a_network_attached_device_freed_on_another_node_counts() -> None:
    """The links serve every node; the preemptor may only run on n2, the links' holder runs on n1."""
    links = tuple(Device("fabric.example.com", "fabric", f"link-{i}", all_nodes=True) for i in range(2))
    classes = frozen_map({"link": DeviceClass("link", ("device.driver == 'fabric.example.com'",))})
    claims = [Claim("ml", f"c{i}", f"u{i}", (DeviceRequest("r", "link"),)) for i in range(2)]
    nodes = (node("n1", labels={"pool": "a"}), node("n2", labels={"pool": "b"}))
    holder = VictimPod("ml", "holder", "uid-holder", "n1", frozen_map({"cpu": 50}), tuple(d.id for d in links))
    bystander = VictimPod("ml", "bystander", "uid-bystander", "n2", frozen_map({"cpu": 50}))
    victims = [Victim("pod ml/holder", 0, OLD, False, (holder,)), Victim("pod ml/bystander", 0, YOUNG, False, (bystander,))]
    snapshot = occupied(Snapshot(nodes, links, classes, frozen_map({c.key: c for c in claims})), victims)
    members = tuple(Member("ml", f"p{i}", f"up{i}", node_selector=frozen_map({"pool": "b"}), claims=(f"c{i}",)) for i in range(2))
    group = Group("ml", "g", 2, members)
    assert not isinstance(plan(snapshot, group), Fits)
    result = plan_preemption(snapshot, group, victims, URGENT)
    assert _keys(result) == ["pod ml/holder"], "the younger bystander goes first in order, then is left out"
    assert result.fits.nodes == {"n2"} and _devices(result.fits) == {d.id for d in links}


def test_a_victims_anti_affinity_and_host_ports_go_with_it() -> None:
    """Not only resources: a pod that keeps the gang off its node by its anti-affinity is a victim like any other."""
    guard = VictimPod("ml", "guard", "uid-guard", "worker-1", frozen_map({"cpu": 50}))
    group, claims = gang("train", 2)
    group = replace(group, members=tuple(replace(m, labels=frozen_map({"app": "train"})) for m in group.members))
    snapshot = occupied(with_claims(cluster(workers=1, control_plane=False), claims), [])
    snapshot = with_pods(snapshot, [running("guard", "worker-1", anti=[term(app="train")])])
    snapshot = replace(snapshot, nodes=(replace(snapshot.nodes[0], requested=frozen_map({"cpu": 50, "pods": 1})),))
    assert not isinstance(plan(snapshot, group), Fits)
    result = plan_preemption(snapshot, group, [Victim("pod ml/guard", 0, OLD, False, (guard,))], URGENT)
    assert _keys(result) == ["pod ml/guard"] and result.fits.nodes == {"worker-1"}


def test_without_removes_exactly_the_victims_requests_devices_and_pods() -> None:
    base = cluster(workers=2, control_plane=False, held=[gpu("worker-2", 0)])
    base = with_pods(base, [running("other", "worker-1")])
    gone = ranks("v", [("worker-1", 0), ("worker-1", 1)], cpu=100, memory=2**30)
    stays = ranks("w", [("worker-2", 1)], cpu=700)
    victims = [group_victim("v", 1, gone), group_victim("w", 1, stays)]
    snapshot = occupied(base, victims)
    assert snapshot.nodes[0].requested == {"cpu": 200, "memory": 2**31, "pods": 2}
    frozen_before = repr(snapshot)

    after = without(snapshot, victims[:1])
    assert after.nodes[0].requested == {"cpu": 0, "memory": 0, "pods": 0}
    assert after.nodes[0].allocatable == snapshot.nodes[0].allocatable
    assert after.nodes[1] is snapshot.nodes[1], "a node without victims is untouched"
    assert after.held == {gpu("worker-2", 0), gpu("worker-2", 1)}
    assert [p.name for p in after.pods] == ["other", "w-0"]
    assert (after.devices, after.classes, after.claims) == (snapshot.devices, snapshot.classes, snapshot.claims)
    assert repr(snapshot) == frozen_before, "the input is not changed"
    assert without(snapshot, []) is snapshot
    assert without(snapshot, victims) == without(after, victims[1:])


def _one_at_a_time(snapshot: Snapshot, group: Group, victims, priority: int) -> list[str] | None:
    """The search as specified, with no shortcut: add candidates one by one, then the reverse pass; only victims
    no budget protects (the budgets here allow no disruption)."""
    if isinstance(plan(snapshot, group), Fits):
        return []
    candidates = order(v for v in victims if v.priority < priority and v.pods)
    chosen: list[Victim] = []
    for victim in (v for v in candidates if not v.budgets):
        chosen.append(victim)
        if isinstance(plan(without(snapshot, chosen), group), Fits):
            break
    else:
        return None
    for i in range(len(chosen) - 2, -1, -1):
        if isinstance(plan(without(snapshot, chosen[:i] + chosen[i + 1 :]), group), Fits):
            del chosen[i]
    return [v.key for v in chosen]


@st.composite
def contested(draw: st.DrawFn) -> tuple[Snapshot, Group, list[Victim], int]:
    """Up to 3 workers x 3 GPUs, every GPU a victim's, a pod's that is no victim, or free; groups and single pods
    at priorities 0-3 created at one of three times, some protected by a budget; a gang of 1-5 one-GPU ranks."""
    snapshot = cluster(draw(st.integers(1, 3)), 3, control_plane=False)
    slots = [(d.node_name, int(d.name.removeprefix("gpu-"))) for d in snapshot.devices]
    owner = draw(st.lists(st.integers(-2, 5), min_size=len(slots), max_size=len(slots)))  # -2: free, -1: no victim
    victims: list[Victim] = []
    for v in range(6):
        where = [s for s, o in zip(slots, owner, strict=True) if o == v]
        if not where:
            continue
        pods = ranks(f"v{v}", where)
        priority, created = draw(st.integers(0, 3)), f"2025-0{draw(st.integers(1, 3))}-01T00:00:00Z"
        budget = draw(st.booleans())
        if draw(st.booleans()):
            victims.append(group_victim(f"v{v}", priority, pods, created=created, budget=budget))
        else:
            victims += pod_victims(priority, pods, created=created, budget=budget)
    held = [gpu(n, i) for (n, i), o in zip(slots, owner, strict=True) if o == -1]
    group, claims = gang("urgent", draw(st.integers(1, 5)))
    on = with_claims(occupied(replace(snapshot, held=frozenset(held)), victims), claims)
    return on, group, draw(st.permutations(victims)), draw(st.integers(1, 4))


@settings(max_examples=150, deadline=None)
@given(contested())
def test_the_search_chooses_as_adding_one_at_a_time_would_and_every_victim_is_needed(case) -> None:
    snapshot, group, victims, priority = case
    result = plan_preemption(snapshot, group, victims, priority)
    expected = _one_at_a_time(snapshot, group, victims, priority)
    if expected is None:
        assert isinstance(result, NoVictims)
        return
    assert _keys(result) == expected
    after = without(snapshot, result.victims)
    assert not _devices(result.fits) & after.held
    assert all(v.priority < priority for v in result.victims)
    for i in range(len(result.victims)):
        fewer = result.victims[:i] + result.victims[i + 1 :]
        assert not isinstance(plan(without(snapshot, fewer), group), Fits), "a victim that was not needed"


@pytest.mark.parametrize("needed", range(1, 13))
def test_the_shortest_prefix_is_found_wherever_it_ends(needed: int) -> None:
    """Doubling then bisection must land on the prefix adding one at a time would: here the one ending with the
    only victim that frees a GPU, after `needed - 1` that free none."""
    snapshot = cluster(workers=1, gpus_per_worker=1, control_plane=False)
    where = [("worker-1", 0 if i == needed - 1 else None) for i in range(12)]
    pool = [v for i, p in enumerate(ranks("p", where)) for v in pod_victims(i, [p])]
    group, claims = gang("urgent", 1)
    on = with_claims(occupied(snapshot, pool), claims)
    everyone = plan(without(on, pool), group)
    assert isinstance(everyone, Fits)
    size, fits = _shortest_prefix(on, group, pool, everyone, DeviceMatcher())
    assert size == needed and _devices(fits) == {gpu("worker-1", 0)}
