"""The rule that keeps a group known to be short from being planned again on every watch change."""

from __future__ import annotations

from dataclasses import replace

from builders import GPU, cluster, gang, node, running, term, with_rules
from phalanx.planner import DeviceMatcher, Short, plan
from phalanx.planner.model import Pod, PodTerm, Requirement, Taint, frozen_map
from phalanx.scheduling import shortfall
from phalanx.scheduling.shortfall import Shortfalls, capacity, dimensions_of, freed, group_key


def _with_claims(snapshot, claims):
    return replace(snapshot, claims=frozen_map({c.key: c for c in claims}))


def _held(snapshot, *devices):
    return replace(snapshot, held=frozenset((GPU, n, d) for n, d in devices))


def test_binding_consumes_and_frees_nothing() -> None:
    before = cluster(workers=3, gpus_per_worker=2)
    after = _held(before, ("worker-1", "gpu-0"), ("worker-1", "gpu-1"))
    after = replace(after, nodes=tuple(replace(n, requested=frozen_map({"cpu": 100})) for n in after.nodes))
    assert freed(capacity(before), capacity(after)) == set()


def test_a_device_given_back_frees_devices() -> None:
    before = _held(cluster(), ("worker-1", "gpu-0"), ("worker-2", "gpu-0"))
    after = _held(cluster(), ("worker-1", "gpu-0"))
    assert freed(capacity(before), capacity(after)) == {shortfall.DEVICES}


def test_a_republished_device_counts_as_new() -> None:
    before = cluster()
    after = replace(before, devices=tuple(replace(d, generation=1) if d.name == "gpu-0" else d for d in before.devices))
    assert shortfall.DEVICES in freed(capacity(before), capacity(after))


def test_a_device_untainted_counts_as_new() -> None:
    """A maintainer's DeviceTaintRule deleted frees nothing held, yet a group that did not tolerate the taint may now
    use the device: a move, or the gang waiting for it would wait until something else moved."""
    group, claims = gang("g", 2)
    untainted = _with_claims(cluster(), claims)
    tainted = replace(untainted, devices=tuple(replace(d, taints=(Taint("maintenance"),)) for d in untainted.devices))
    assert shortfall.DEVICES in freed(capacity(tainted), capacity(untainted))
    assert isinstance(plan(tainted, group, DeviceMatcher()), Short)
    memo = Shortfalls()
    memo.observe(capacity(tainted))
    memo.remember("uid-g", group_key(group, tainted, 0))
    assert memo.still_short("uid-g", group_key(group, tainted, 0))
    memo.observe(capacity(untainted))
    assert not memo.still_short("uid-g", group_key(group, untainted, 0)), "planned again once its devices are untainted"
    assert not isinstance(plan(untainted, group, DeviceMatcher()), Short)


def test_a_node_added_or_untainted_frees_nodes_and_its_resources() -> None:
    before = cluster(workers=2)
    after = replace(before, nodes=(*before.nodes, node("worker-9")))
    moved = freed(capacity(before), capacity(after))
    assert shortfall.NODES in moved and shortfall.RESOURCE + "cpu" in moved
    untainted = replace(before, nodes=tuple(replace(n, taints=()) for n in before.nodes))
    assert freed(capacity(before), capacity(untainted)) == {shortfall.NODES}


def test_capacity_kept_between_snapshots_equals_capacity_afresh_through_changes() -> None:
    """What is kept is served only for the same objects (the same devices and held, a node's same labels and taints):
    each change below gives what a fresh computation gives, and the moves between them are the same."""
    kept = shortfall.Kept()
    base = cluster(workers=2)
    steps = [
        base,
        replace(base, nodes=tuple(replace(n, requested=frozen_map({"cpu": 100})) for n in base.nodes)),  # a bind
        _held(base, ("worker-1", "gpu-0")),  # a device taken
        replace(base, nodes=(*base.nodes, node("worker-9"))),  # a node added
        replace(base, nodes=tuple(replace(n, taints=()) for n in base.nodes)),  # untainted
        replace(base, nodes=tuple(replace(n, labels=frozen_map({"pool": "a"})) for n in base.nodes)),  # relabelled
        base,
    ]
    before = None
    for snapshot in steps:
        now = capacity(snapshot, kept=kept)
        assert now == capacity(snapshot)
        if before is not None:
            assert freed(before, now) == freed(before, capacity(snapshot))
        before = now
    assert capacity(base, kept=kept).free_devices is kept.devices[2], "the same devices and held: served again"


def test_cpu_given_back_frees_that_resource_only() -> None:
    busy = replace(cluster(), nodes=tuple(replace(n, requested=frozen_map({"cpu": 500})) for n in cluster().nodes))
    assert freed(capacity(busy), capacity(cluster())) == {shortfall.RESOURCE + "cpu"}


def test_pods_leaving_and_arriving_are_told_apart() -> None:
    pod = Pod("ml", "p", "worker-1")
    empty, one = cluster(), replace(cluster(), pods=(pod,))
    assert freed(capacity(one), capacity(empty)) == {shortfall.PODS_GONE}
    assert freed(capacity(empty), capacity(one)) == {shortfall.PODS_ADDED}


def test_what_a_group_could_use() -> None:
    group, _ = gang("a", 2)
    assert dimensions_of(group) == {
        shortfall.NODES,
        shortfall.PODS_GONE,
        shortfall.POLICY,
        shortfall.DEVICES,
        shortfall.CLASSES,
        shortfall.RESOURCE + "cpu",
        shortfall.RESOURCE + "pods",
    }
    term = PodTerm("kubernetes.io/hostname", (Requirement("app", "In", ("db",)),), frozenset({"ml"}))
    affine = replace(group, members=tuple(replace(m, pod_affinity=(term,)) for m in group.members))
    assert shortfall.PODS_ADDED in dimensions_of(affine)
    extended = replace(group, members=tuple(replace(m, claims=(), requests=frozen_map({"example.com/gpu": 1})) for m in group.members))
    assert {shortfall.DEVICES, shortfall.CLASSES} <= dimensions_of(extended), "a DeviceClass may serve an extended resource"


def test_a_class_that_starts_serving_an_extended_resource_frees_classes() -> None:
    before = cluster()
    after = replace(before, extended=frozen_map({"example.com/gpu": GPU}))
    assert freed(capacity(before), capacity(after)) == {shortfall.CLASSES}


def test_a_short_group_waits_for_freed_capacity_it_could_use() -> None:
    """Six GPUs, four held by a running gang: a gang of 4 is short; binds and cpu churn do not wake it, the
    running gang's devices coming back do, and then it fits."""
    group, claims = gang("b", 4)
    full = _with_claims(_held(cluster(), *[(f"worker-{i}", f"gpu-{j}") for i in (1, 2) for j in (0, 1)]), claims)
    memo = Shortfalls()
    memo.observe(capacity(full))
    key = group_key(group, full, 0)
    assert isinstance(plan(full, group, DeviceMatcher()), Short)
    memo.remember("uid-b", key)
    assert memo.still_short("uid-b", key)

    busier = _held(full, *[(f"worker-{i}", f"gpu-{j}") for i in (1, 2, 3) for j in (0, 1)])
    assert memo.observe(capacity(busier)) == set()
    assert memo.still_short("uid-b", group_key(group, busier, 0))

    freed_up = _with_claims(cluster(), claims)
    assert memo.observe(capacity(freed_up)) == {shortfall.DEVICES}
    assert not memo.still_short("uid-b", group_key(group, freed_up, 0))
    assert not isinstance(plan(freed_up, group, DeviceMatcher()), Short)


def test_freed_capacity_of_another_kind_does_not_wake_the_group() -> None:
    """A group without claims is short on cpu: devices coming back are nothing it could use."""
    group, _ = gang("c", 2, cpu=40_000)
    group = replace(group, members=tuple(replace(m, claims=()) for m in group.members))
    snapshot = _held(cluster(), ("worker-1", "gpu-0"))
    memo = Shortfalls()
    memo.observe(capacity(snapshot))
    memo.remember("uid-c", group_key(group, snapshot, 0))
    assert memo.observe(capacity(cluster())) == {shortfall.DEVICES}
    assert memo.still_short("uid-c", group_key(group, cluster(), 0))


def test_a_changed_group_is_a_new_question() -> None:
    group, claims = gang("d", 4)
    snapshot = _with_claims(cluster(), claims)
    memo = Shortfalls()
    memo.observe(capacity(snapshot))
    memo.remember("uid-d", group_key(group, snapshot, 0))
    assert not memo.still_short("uid-d", group_key(replace(group, min_count=2), snapshot, 0))
    assert not memo.still_short("uid-d", group_key(replace(group, members=group.members[:3]), snapshot, 0))
    assert not memo.still_short("uid-d", group_key(group, snapshot, 10)), "a new priority may find victims"
    changed = replace(claims[0], requests=(replace(claims[0].requests[0], count=2),))
    assert not memo.still_short("uid-d", group_key(group, _with_claims(snapshot, [changed, *claims[1:]]), 0))
    assert memo.still_short("uid-d", group_key(group, snapshot, 0))


def test_freed_then_consumed_between_snapshots_keeps_the_verdict() -> None:
    """A chain of snapshots in which nothing was freed only shrinks: the group stays short on the last one."""
    group, claims = gang("e", 4)
    half = _with_claims(_held(cluster(), ("worker-1", "gpu-0"), ("worker-1", "gpu-1"), ("worker-2", "gpu-0")), claims)
    memo = Shortfalls()
    memo.observe(capacity(half))
    memo.remember("uid-e", group_key(group, half, 0))
    fuller = _held(half, ("worker-1", "gpu-0"), ("worker-1", "gpu-1"), ("worker-2", "gpu-0"), ("worker-3", "gpu-0"))
    assert memo.observe(capacity(fuller)) == set()
    assert memo.still_short("uid-e", group_key(group, fuller, 0))


def test_preemption_inputs_wake_every_group() -> None:
    group, claims = gang("f", 4)
    snapshot = _with_claims(cluster(), claims)
    memo = Shortfalls()
    memo.observe(capacity(snapshot, policy=("pc", "1")))
    memo.remember("uid-f", group_key(group, snapshot, 0))
    assert memo.observe(capacity(snapshot, policy=("pc", "2"))) == {shortfall.POLICY}
    assert not memo.still_short("uid-f", group_key(group, snapshot, 0))


def test_the_preemption_inputs_move_with_a_spec_changed_not_with_a_group_made_or_gone() -> None:
    """A thousand gangs submitted or deleted are no news to a preemption (their pods, placed or gone, are moves of
    their own); a PriorityClass, a budget, or a group's spec changed after it was made (a victim's disruption mode,
    a preemptor's own policy) is."""

    def obj(uid: str, version: str = "1", generation: int | None = 1) -> dict:
        return {"metadata": {"uid": uid, "resourceVersion": version, "generation": generation}}

    classes, budgets = [obj("pc")], [obj("pdb")]
    groups = [obj("g1"), obj("g2", generation=None)]
    before = shortfall.policy(classes, budgets, groups)
    assert shortfall.policy(classes, budgets, [*groups, obj("g3")]) == before, "a group made"
    assert shortfall.policy(classes, budgets, groups[:1]) == before, "a group gone"
    assert shortfall.policy(classes, budgets, [obj("g1", generation=2), groups[1]]) != before, "a spec changed"
    changed = shortfall.policy(classes, budgets, [obj("g1", generation=2)])
    assert shortfall.policy(classes, budgets, [obj("g1", generation=3)]) != changed, "changed again"
    assert shortfall.policy([obj("pc", "2")], budgets, groups) != before, "a PriorityClass"
    assert shortfall.policy(classes, [obj("pdb", "2")], groups) != before, "a budget"


def test_forgotten_groups_go() -> None:
    group, claims = gang("g", 4)
    snapshot = _with_claims(cluster(), claims)
    memo = Shortfalls()
    memo.observe(capacity(snapshot))
    memo.remember("uid-g", group_key(group, snapshot, 0))
    memo.keep_only({"other"})
    assert not memo.still_short("uid-g", group_key(group, snapshot, 0))


def test_the_loops_memos_of_a_group_stay_while_the_group_does() -> None:
    """The loop keeps verdicts of its own under a group's uid (`UID/members`, late members short; `UID/hold`, the
    head's hold that could not fit): they go with their group, not with every cycle's sweep of the live groups."""
    group, claims = gang("g", 4)
    snapshot = _with_claims(cluster(), claims)
    memo = Shortfalls()
    memo.observe(capacity(snapshot))
    for uid in ("uid-g/members", "uid-g/hold", "uid-x/hold"):
        memo.remember(uid, group_key(group, snapshot, 0))
    memo.keep_only({"uid-g"})
    assert memo.still_short("uid-g/members", group_key(group, snapshot, 0))
    assert memo.still_short("uid-g/hold", group_key(group, snapshot, 0))
    assert not memo.still_short("uid-x/hold", group_key(group, snapshot, 0))


def _pinned_to(group, node_name: str):
    """Every member may only go to `node_name` (a nodeSelector on its hostname)."""
    return replace(group, members=tuple(replace(m, node_selector=frozen_map({"kubernetes.io/hostname": node_name})) for m in group.members))


def _short_on(snapshot, group, uid: str = "uid-n") -> Shortfalls:
    memo = Shortfalls()
    memo.observe(capacity(snapshot))
    memo.remember(uid, group_key(group, snapshot, 0), shortfall.eligible(group, snapshot))
    return memo


def test_capacity_freed_on_a_node_the_group_cannot_use_leaves_it_short() -> None:
    """A gang that may only use worker-1 (both its GPUs held): a pod leaving worker-2, and worker-2's GPUs coming
    back, are nothing it could use; a pod leaving worker-1 is."""
    group, claims = gang("n", 2)
    group = _pinned_to(group, "worker-1")
    there, elsewhere = Pod("ml", "there", "worker-1"), Pod("ml", "elsewhere", "worker-2")
    full = _with_claims(
        replace(_held(cluster(), *[(f"worker-{i}", f"gpu-{j}") for i in (1, 2) for j in (0, 1)]), pods=(there, elsewhere)), claims
    )
    assert isinstance(plan(full, group, DeviceMatcher()), Short)
    assert shortfall.eligible(group, full) == {"worker-1"}
    memo = _short_on(full, group)
    key = group_key(group, full, 0)

    elsewhere_freed = _held(replace(full, pods=(there,)), ("worker-1", "gpu-0"), ("worker-1", "gpu-1"))
    assert memo.observe(capacity(elsewhere_freed)) == {shortfall.PODS_GONE, shortfall.DEVICES}
    assert memo.still_short("uid-n", key)

    there_gone = replace(elsewhere_freed, pods=())
    assert memo.observe(capacity(there_gone)) == {shortfall.PODS_GONE}
    assert not memo.still_short("uid-n", key)


def test_a_pod_with_anti_affinity_leaving_any_node_wakes_every_group() -> None:
    """Its terms kept pods off a whole topology domain, which may hold nodes the group can use."""
    group, claims = gang("n", 2)
    group = _pinned_to(group, "worker-1")
    keeper = running("keeper", "worker-2", anti=(term("zone", app="x"),))
    full = _with_claims(replace(cluster(), pods=(keeper,)), claims)
    memo = _short_on(full, group)
    assert memo.observe(capacity(replace(full, pods=()))) == {shortfall.PODS_GONE}
    assert not memo.still_short("uid-n", group_key(group, full, 0))


def test_a_group_that_counts_other_pods_takes_every_move_as_its_own() -> None:
    group, claims = gang("n", 2)
    spread = with_rules(_pinned_to(group, "worker-1"), pod_anti_affinity=(term(app="n"),))
    assert shortfall.eligible(spread, cluster()) is None
    full = _with_claims(replace(cluster(), pods=(Pod("ml", "elsewhere", "worker-2"),)), claims)
    memo = _short_on(full, spread)
    memo.observe(capacity(replace(full, pods=())))
    assert not memo.still_short("uid-n", group_key(spread, full, 0))


def test_a_node_relabelled_anywhere_wakes_a_group_that_could_not_use_it() -> None:
    """Eligibility was computed on the old labels: a label that makes worker-3 usable is a move everywhere."""
    group, claims = gang("n", 2)
    group = replace(group, members=tuple(replace(m, node_selector=frozen_map({"pool": "a"})) for m in group.members))
    full = _with_claims(cluster(), claims)
    assert shortfall.eligible(group, full) == frozenset()
    memo = _short_on(full, group)
    nodes = tuple(node(n.name, labels={"pool": "a"}) if n.name == "worker-3" else n for n in full.nodes)
    assert memo.observe(capacity(replace(full, nodes=nodes))) == {shortfall.NODES}
    assert not memo.still_short("uid-n", group_key(group, full, 0))


def test_moves_no_verdict_can_see_are_dropped() -> None:
    group, claims = gang("n", 2)
    group = _pinned_to(group, "worker-1")
    full = _with_claims(replace(cluster(), pods=(Pod("ml", "a", "worker-2"), Pod("ml", "b", "worker-2"))), claims)
    memo = _short_on(full, group)
    memo.observe(capacity(replace(full, pods=full.pods[:1])))
    assert memo.still_short("uid-n", group_key(group, full, 0)) and len(memo.moves) == 1
    memo.observe(capacity(replace(full, pods=())))
    assert len(memo.moves) == 1, "the first move is before the verdict, carried on by the check"
    memo.forget("uid-n")
    memo.observe(capacity(full))
    assert memo.moves == []


def test_capacity_is_computed_only_when_a_group_is_short_to_compare_for() -> None:
    """While no group is known short, an observed snapshot's capacity is not computed; remembered on, it is (the
    capacity of that snapshot, not of a later one), and from then on each is computed as observed."""
    group, claims = gang("b", 4)
    full = _with_claims(_held(cluster(), *[(f"worker-{i}", f"gpu-{j}") for i in (1, 2) for j in (0, 1)]), claims)
    computed: list[str] = []

    def lazily(name, snapshot):
        def compute():
            computed.append(name)
            return capacity(snapshot)

        return compute

    memo = Shortfalls()
    assert memo.observe(lazily("first", cluster())) == set()
    assert memo.observe(lazily("full", full)) == set()
    assert computed == [], "nothing short: nothing to compare for"
    memo.remember("uid-b", group_key(group, full, 0))
    assert computed == ["full"], "the verdict's snapshot, once"
    assert memo.still_short("uid-b", group_key(group, full, 0))
    assert memo.observe(lazily("freed", _with_claims(cluster(), claims))) == {shortfall.DEVICES}
    assert computed == ["full", "freed"]
    assert not memo.still_short("uid-b", group_key(group, _with_claims(cluster(), claims), 0))
    memo.forget("uid-b")
    memo.observe(lazily("quiet again", full))
    assert computed == ["full", "freed"]


def test_why_a_short_group_is_planned_again_is_counted() -> None:
    """What woke a group known short, by kind (the operator's `phalanx_short_groups_replanned_total`): its own change,
    or the capacity freed that it could use."""
    from prometheus_client import REGISTRY

    def count(why: str) -> float:
        return REGISTRY.get_sample_value("phalanx_short_groups_replanned_total", {"why": why}) or 0.0

    group, claims = gang("b", 4)
    full = _with_claims(_held(cluster(), *[(f"worker-{i}", f"gpu-{j}") for i in (1, 2) for j in (0, 1)]), claims)
    memo = Shortfalls()
    memo.observe(capacity(full))
    memo.remember("uid-b", group_key(group, full, 0))
    changed, devices = count("changed"), count(shortfall.DEVICES)
    assert not memo.still_short("uid-b", group_key(group, full, 10)), "a new priority is a new question"
    assert count("changed") == changed + 1
    memo.remember("uid-b", group_key(group, full, 0))
    memo.observe(capacity(_with_claims(cluster(), claims)))
    assert not memo.still_short("uid-b", group_key(group, _with_claims(cluster(), claims), 0))
    assert count(shortfall.DEVICES) == devices + 1


def test_a_line_of_verdicts_stands_together_until_something_freed_is_of_use_to_one() -> None:
    """`standing` / `stands`: one check for the line a cycle passed over, as `still_short` is one for each group. A pod
    leaving a node none of them can use leaves the line standing (each verdict carried to the new epoch); one leaving a
    node one of them can use does not, and then that one alone is not short; a verdict made again is a new line."""
    n, n_claims = gang("n", 2)
    m, m_claims = gang("m", 2)
    n, m = _pinned_to(n, "worker-1"), _pinned_to(m, "worker-2")
    pods = (Pod("ml", "a", "worker-1"), Pod("ml", "b", "worker-2"), Pod("ml", "c", "worker-3"))
    full = _with_claims(
        replace(_held(cluster(), *[(f"worker-{i}", f"gpu-{j}") for i in (1, 2, 3) for j in (0, 1)]), pods=pods), n_claims + m_claims
    )
    memo = Shortfalls()
    memo.observe(capacity(full))
    for uid, group in (("uid-n", n), ("uid-m", m)):
        memo.remember(uid, group_key(group, full, 0), shortfall.eligible(group, full))
    line = memo.standing(["uid-n", "uid-m"])
    assert line is not None and line.nodes == {"worker-1", "worker-2"}

    assert memo.observe(capacity(replace(full, pods=pods[:2]))) == {shortfall.PODS_GONE}, "c left worker-3"
    assert memo.stands(line)
    assert {v.epoch for v in memo.short.values()} == {memo.epoch}, "carried, as still_short would"

    memo.observe(capacity(replace(full, pods=pods[:1])))  # b left worker-2
    assert not memo.stands(line)
    assert memo.still_short("uid-n", group_key(n, full, 0)) and not memo.still_short("uid-m", group_key(m, full, 0))

    again = memo.standing(["uid-n", "uid-m"])
    assert again is not None and memo.stands(again)
    memo.remember("uid-x", group_key(m, full, 0), frozenset({"worker-2"}))
    memo.remember("uid-x", group_key(m, full, 0), frozenset({"worker-2"}))
    assert memo.stands(again), "another group's verdict made again"
    memo.remember("uid-m", group_key(m, full, 0), frozenset({"worker-2"}))
    assert not memo.stands(again), "one of theirs made again"
    assert memo.standing(["uid-n", "uid-none"]) is None, "a group with no verdict: no run"
    anywhere = memo.standing(["uid-n", "uid-m"])
    memo.clear()
    assert anywhere is not None and not memo.stands(anywhere), "every verdict dropped"


def test_a_placed_pod_relabelled_wakes_a_group_whose_anti_affinity_read_its_labels() -> None:
    """Rank pods must not share a node with an `app=x` pod: one sits on worker-1, the only node the group may use.
    Relabelled `app=y`, it blocks nothing: a move, though no pod came or went and nothing was freed."""
    group, claims = gang("n", 2)
    group = with_rules(_pinned_to(group, "worker-1"), pod_anti_affinity=(term(app="x"),))
    blocker = running("blocker", "worker-1", labels={"app": "x"})
    full = _with_claims(replace(cluster(), pods=(blocker,)), claims)
    assert isinstance(plan(full, group), Short)
    memo = _short_on(full, group)
    assert memo.observe(capacity(replace(full, pods=(running("blocker", "worker-1", labels={"app": "x"}),)))) == set(), (
        "the same labels in a pod built again are no move"
    )
    relabelled = replace(full, pods=(running("blocker", "worker-1", labels={"app": "y"}),))
    assert memo.observe(capacity(relabelled)) == {shortfall.PODS_GONE, shortfall.PODS_ADDED}
    assert not memo.still_short("uid-n", group_key(group, full, 0))
    assert not isinstance(plan(relabelled, group), Short), "and it fits now"
