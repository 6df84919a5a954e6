"""A CompositePodGroup and its child PodGroups as the loop's one group (`scheduling.composites`), and how a pod of
one of its roles is labelled into it (`podgroups.admission`) and found (`podgroups.owner`)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.api import keys, schema
from phalanx.api.intent import GangSpecError
from phalanx.kube.informers import Informer
from phalanx.podgroups import admission
from phalanx.podgroups.owner import PODGROUPS, composite_key, member_key
from phalanx.scheduling import accessors, composites, disruption, inputs


def composite(name: str = "train", min_groups: int = 2, *, gang: bool = True, **spec: Any) -> dict[str, Any]:
    policy = {"gang": {"minGroupCount": min_groups}} if gang else {"basic": {}}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": "1"},
        "spec": {"schedulingPolicy": policy, **spec},
    }


def child(name: str, parent: str | None, min_count: int | None, version: str = "1") -> dict[str, Any]:
    policy = {"gang": {"minCount": min_count}} if min_count is not None else {"basic": {}}
    spec: dict[str, Any] = {"schedulingPolicy": policy, "disruptionMode": {"single": {}}}
    if parent is not None:
        spec["parentCompositePodGroupName"] = parent
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": version}, "spec": spec}


def pod(name: str, group: str, composite_name: str | None = None) -> dict[str, Any]:
    labels = {keys.POD_GROUP_LABEL: group} | ({keys.COMPOSITE_LABEL: composite_name} if composite_name else {})
    return {"metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "labels": labels}, "spec": {"containers": []}}


def test_a_gang_composite_and_its_children_are_one_group_with_roles() -> None:
    made = composites.groups(
        [child("launcher", "train", 1), child("workers", "train", 3), child("alone", None, 2)],
        [composite("train", 2, priorityClassName="high", disruptionMode={"single": {}})],
    )
    assert [g["metadata"]["name"] for g in made] == ["alone", "train"], "the children are not groups of their own"
    group = made[1]
    assert composites.is_composite(group) and accessors.kind(group) == "CompositePodGroup"
    assert composites.roles(group) == (("launcher", 1), ("workers", 3))
    assert accessors.min_count(group) == 4
    assert accessors.spec(group).priority_class_name == "high"
    assert not accessors.disrupts_all(group), "the composite's own disruptionMode"
    assert accessors.path(group, status=True).endswith("/namespaces/ml/compositepodgroups/train/status")
    assert accessors.path(made[0]).endswith("/namespaces/ml/podgroups/alone")


def test_a_composite_says_all_unless_told_and_a_basic_child_is_a_role_of_none() -> None:
    group = composites.as_group(composite(), [child("launcher", "train", 1), child("sidecars", "train", None)])
    assert accessors.disrupts_all(group)
    assert composites.roles(group) == (("launcher", 1), ("sidecars", 0))
    assert accessors.min_count(group) == 1


def test_children_still_missing_are_roles_no_member_can_fill() -> None:
    group = composites.as_group(composite(min_groups=3), [child("launcher", "train", 1)])
    assert [name for name, _ in composites.roles(group)] == [
        "launcher",
        "(child 2 of minGroupCount 3, not created)",
        "(child 3 of minGroupCount 3, not created)",
    ]
    assert "not created" in composites.describe(group)
    planned = inputs.group(group, [pod("l", "launcher", "train")], 3)
    assert [(r.name, r.min_count, len(r.members)) for r in planned.roles][1:] == [
        ("(child 2 of minGroupCount 3, not created)", 1, 0),
        ("(child 3 of minGroupCount 3, not created)", 1, 0),
    ]


def test_a_basic_composites_children_are_groups_of_their_own_and_a_nested_one_is_none() -> None:
    made = composites.groups([child("a", "free", 1), child("b", "free", 2)], [composite("free", gang=False)])
    assert [g["metadata"]["name"] for g in made] == ["a", "b"]
    nested = composite("inner")
    nested["spec"]["parentCompositePodGroupName"] = "outer"
    assert composites.groups([child("c", "inner", 1)], [nested]) == [child("c", "inner", 1)]
    with pytest.raises(ValueError):
        schema.CompositePodGroupSpec.model_validate({"schedulingPolicy": {"gang": {"minGroupCount": 0}}})


def test_members_of_a_role_are_found_by_the_composite_and_planned_in_their_role() -> None:
    group = composites.as_group(composite(), [child("launcher", "train", 1), child("workers", "train", 3)])
    assert PODGROUPS.owner_uid(group) == composite_key("train")
    assert PODGROUPS.member_uids(pod("w", "workers", "train")) == (composite_key("train"),)
    assert PODGROUPS.member_uids(pod("x", "alone")) == (member_key("alone"),)
    assert PODGROUPS.member_uids({"metadata": {"labels": {keys.COMPOSITE_LABEL: "train"}}}) == (), (
        "the composite label alone is no membership"
    )
    pods = [pod("l", "launcher", "train"), pod("w0", "workers", "train"), pod("stray", "gone", "train")]
    planned = inputs.group(group, pods, 4)
    assert [(r.name, r.min_count, sorted(r.members)) for r in planned.roles] == [
        ("launcher", 1, ["uid-l"]),
        ("workers", 3, ["uid-w0"]),
        ("gone", 0, ["uid-stray"]),
    ], "a member whose PodGroup is no longer a child goes along, needed by no role"


def informer(name: str, items: list[dict[str, Any]]) -> Informer:
    store = Informer(name, None, f"/{name}", None, lambda: None, keep=lambda obj: obj)  # type: ignore[arg-type]
    for obj in items:
        store.apply("ADDED", obj)
    return store


def test_the_view_makes_a_composite_again_only_when_it_or_a_childs_minimum_changes() -> None:
    podgroups = informer("podgroups", [child("launcher", "train", 1), child("workers", "train", 3)])
    view = composites.Groups(podgroups, informer("composites", [composite()]))
    first = view.items()[0]
    podgroups.apply("MODIFIED", child("launcher", "train", 1, version="2"))
    assert view.items()[0] is first, "a child written without a new minimum: the same group, so what is kept of it stays"
    podgroups.apply("MODIFIED", child("workers", "train", 5))
    again = view.items()[0]
    assert again is not first and accessors.min_count(again) == 6


PARENTS = {"a": None, "b": None, "c": "train", "d": "gone"}
"""Each PodGroup's parent: whether it has one is immutable (the CRD's rule)."""
NAMES = st.sampled_from(sorted(PARENTS))
WRITES = st.lists(
    st.one_of(
        st.tuples(st.just("podgroup"), NAMES, st.booleans()),
        st.tuples(st.just("composite"), st.sampled_from(["train", "other"]), st.booleans()),
        st.tuples(st.just("relist"), st.just(""), st.booleans()),
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None)
@given(WRITES)
def test_the_view_is_every_group_the_stores_make_whatever_their_writes_deletes_and_relists(writes: list[Any]) -> None:
    """`Groups.items` kept from the watches (each PodGroup a group while no composite or child is there) equals
    `groups` made from the two stores, in their order, after any writes."""
    podgroups, composite_store = informer("podgroups", []), informer("composites", [])
    view = composites.Groups(podgroups, composite_store)
    for version, (what, name, keep) in enumerate(writes):
        if what == "relist":
            podgroups.store = dict(reversed(list(podgroups.store.items())))
            for listener in podgroups.indexes.values():
                listener.rebuild(podgroups.store)
            podgroups.relists += 1
        else:
            store = podgroups if what == "podgroup" else composite_store
            obj = child(name, PARENTS[name], 2, str(version)) if what == "podgroup" else composite(name)
            store.apply("MODIFIED" if keep else "DELETED", obj)
        assert view.items() == composites.groups(podgroups.items(), composite_store.items())


def test_the_answer_to_a_write_is_the_loops_group_again() -> None:
    group = composites.as_group(composite(), [child("launcher", "train", 1)])
    answer = {**composite(), "kind": "CompositePodGroup", "status": {"bound": 1}}
    assert composites.as_written(group, answer)["spec"] == group["spec"]
    assert composites.as_written(group, answer)["status"] == {"bound": 1}
    plain = child("alone", None, 2)
    assert composites.as_written(plain, {"x": 1}) == {"x": 1}


def test_a_pod_of_a_role_is_labelled_into_its_composite_and_a_missing_composite_is_refused() -> None:
    role = child("workers", "train", 3)
    labelled = admission.mutate_pod(pod("w", "workers"), role, composite())
    assert labelled.patch["metadata"] == {"labels": {keys.COMPOSITE_LABEL: "train"}}
    assert keys.SCHEDULING_GATE in [g["name"] for g in labelled.patch["spec"]["schedulingGates"]]
    forged = admission.mutate_pod(pod("x", "alone", "train"), child("alone", None, 2))
    assert forged.patch["metadata"] == {"labels": {keys.COMPOSITE_LABEL: None}}, "a composite label the group does not give is taken off"
    basic = admission.mutate_pod(pod("b", "workers"), role, composite(gang=False))
    assert "metadata" not in basic.patch, "a basic composite's role is a group of its own"
    with pytest.raises(GangSpecError) as refused:
        admission.mutate_pod(pod("w", "workers"), role, None)
    assert "CompositePodGroup train, which does not exist" in str(refused.value)
    assert "create CompositePodGroup train first" in str(refused.value)


def test_a_single_composite_with_a_role_below_its_minimum_runs_below_min_count() -> None:
    """4 bound of minCount 4, but none of them the launcher: the count is met, the role is not."""
    from phalanx.scheduling import phase

    group = composites.as_group(composite(disruptionMode={"single": {}}), [child("launcher", "train", 1), child("workers", "train", 3)])
    group["status"] = {
        "conditions": [{"type": keys.INITIALLY_SCHEDULED, "status": "True", "reason": "Scheduled"}],
        "reservation": {"state": "Released", "placements": [], "claims": []},
    }
    workers = [pod(f"w{i}", "workers", "train") for i in range(4)]
    for p in workers:
        p["spec"]["nodeName"] = "worker-1"
    assert composites.below(group, workers) == ["launcher 0 of minCount 1"]
    facts = phase.read(group, workers, lambda ns, n: None)
    assert facts.running == 4 and facts.min_count == 4 and facts.roles_below
    assert phase.classify(facts) is phase.Phase.BELOW_MIN
    launcher = pod("l", "launcher", "train")
    launcher["spec"]["nodeName"] = "worker-2"
    assert composites.below(group, [launcher, *workers[:3]]) == []
    assert phase.classify(phase.read(group, [launcher, *workers[:3]], lambda ns, n: None)) is phase.Phase.RUNNING


def test_late_members_of_a_role_at_its_minimum_are_planned_alone() -> None:
    """The gang ran with its launcher and 3 workers: a fourth worker is a late member, needed by no role (planned at
    the workers' full minimum it could never fit alone); a role left below its minimum (mode single) needs the rest."""
    group = composites.as_group(composite(), [child("launcher", "train", 1), child("workers", "train", 3)])
    running = [pod("l", "launcher", "train"), *(pod(f"w{i}", "workers", "train") for i in range(3))]
    assert composites.roles(composites.less(group, running)) == (("launcher", 0), ("workers", 0))
    assert composites.roles(composites.less(group, running[:3])) == (("launcher", 0), ("workers", 1))
    assert composites.less(child("alone", None, 2), running) == child("alone", None, 2), "a group without roles is as it was"
    late = inputs.group(composites.less(group, running), [pod("w3", "workers", "train")], 1)
    assert [(r.name, r.min_count) for r in late.roles] == [("launcher", 0), ("workers", 0)]


def test_a_role_whose_members_finished_needs_only_the_rest() -> None:
    """The launcher exited 0 and its Job does not run it again: a gang of the workers made again (a worker lost in
    mode all) must not wait for a launcher that never comes, as a count over all members counts those done."""
    group = composites.as_group(composite(), [child("launcher", "train", 1), child("workers", "train", 3)])
    launcher = {**pod("l", "launcher", "train"), "status": {"phase": "Succeeded"}}
    workers = [{**pod(f"w{i}", "workers", "train"), "status": {"phase": "Running"}} for i in range(3)]
    assert disruption.done([launcher, *workers]) == [launcher]
    counted = composites.less(group, disruption.done([launcher, *workers]))
    assert composites.roles(counted) == (("launcher", 0), ("workers", 3))
    assert composites.below(counted, workers) == [], "no role short: the launcher's is met by the one done"
    assert composites.below(group, workers) == ["launcher 0 of minCount 1"], "without it, the launcher's role is short for ever"
    assert composites.less(group, workers[:0]) is group, "nothing counted: the same group (kept by identity downstream)"
