"""A gang JobSet of roles (`jobsets.roles`): each replicated Job a role with its own minimum, the JobSet's gang a
CompositePodGroup with one child PodGroup per replicated Job, the loop counting each pod in its role."""

from __future__ import annotations

import copy
import json

import pytest

from phalanx.api import keys
from phalanx.api.intent import GangSpecError
from phalanx.jobsets import admission, objects
from phalanx.jobsets.owner import JOBSETS
from phalanx.owners import objects as owner_objects
from phalanx.scheduling import composites, inputs
from test_jobset_admission import jobset


def of_roles(minimums: dict[str, int] | str, workers: int = 4, **more: str) -> dict:
    raw = minimums if isinstance(minimums, str) else json.dumps(minimums)
    return jobset({keys.POLICY: "gang", keys.ROLE_MIN_COUNTS: raw, **more}, workers=workers)


def admitted(js: dict) -> dict:
    out = admission.mutate_jobset(js, None, gang_default_mode="all").jobset
    admission.validate_jobset(out, None)
    out["metadata"]["uid"] = "js-uid"
    return out


def test_each_replicated_job_is_a_role_and_one_not_named_needs_all_its_pods() -> None:
    js = admitted(of_roles({"workers": 3}))
    assert admission.roles(js) == (("leader", 1), ("workers", 3))
    for rjob in js["spec"]["replicatedJobs"]:
        assert rjob["template"]["spec"]["template"]["metadata"]["labels"][keys.ROLE_LABEL] == rjob["name"]
    source = objects.from_jobset(js)
    assert source is not None and source.roles == (("leader", 1), ("workers", 3))
    assert source.min_count == 4
    assert JOBSETS.min_count(js) == 4


def test_a_jobset_of_one_gang_has_no_roles_and_no_role_label() -> None:
    js = admitted(jobset({keys.POLICY: "gang"}))
    assert admission.roles(js) == ()
    assert all(keys.ROLE_LABEL not in r["template"]["spec"]["template"]["metadata"]["labels"] for r in js["spec"]["replicatedJobs"])


@pytest.mark.parametrize(
    ("minimums", "more", "path", "words"),
    [
        ("launcher=1", {}, f"metadata.annotations[{keys.ROLE_MIN_COUNTS}]", "JSON object"),
        ({"workers": -1}, {}, f"metadata.annotations[{keys.ROLE_MIN_COUNTS}]", "whole number"),
        ({"workers": True}, {}, f"metadata.annotations[{keys.ROLE_MIN_COUNTS}]", "whole number"),
        (
            {"launcher": 1},
            {},
            f"metadata.annotations[{keys.ROLE_MIN_COUNTS}]",
            "use the names in spec.replicatedJobs[*].name: leader, workers",
        ),
        ({"workers": 5}, {}, f"metadata.annotations[{keys.ROLE_MIN_COUNTS}]", "workers: 4"),
        ({"workers": 3}, {keys.MIN_COUNT: "4"}, f"metadata.annotations[{keys.MIN_COUNT}]", "their sum is the gang's minCount"),
        ({"workers": 3}, {keys.POLICY: "basic"}, f"metadata.annotations[{keys.ROLE_MIN_COUNTS}]", "roles need a gang"),
        ({"leader": 0, "workers": 0}, {}, f"metadata.annotations[{keys.ROLE_MIN_COUNTS}]", "sum to 0"),
    ],
)
def test_bad_roles_are_refused_naming_the_field_and_the_fix(minimums: dict | str, more: dict, path: str, words: str) -> None:
    js = of_roles(minimums, **more)
    for admit in (lambda: admission.mutate_jobset(js, None, gang_default_mode="all"), lambda: admission.validate_jobset(js, None)):
        with pytest.raises(GangSpecError) as err:
            admit()
        assert path in [e.path for e in err.value.errors], err.value
        assert words in str(err.value), err.value


def test_roles_alone_ask_for_no_gang_and_are_refused() -> None:
    js = jobset({keys.ROLE_MIN_COUNTS: '{"workers": 3}'})
    with pytest.raises(GangSpecError, match=f"add {keys.POLICY}: gang"):
        admission.mutate_jobset(js, None, gang_default_mode="all")


def test_roles_are_set_at_creation_and_a_minimum_moves_but_not_across_zero() -> None:
    created = admitted(of_roles({"workers": 3}))
    raised = copy.deepcopy(created)
    raised["metadata"]["annotations"][keys.ROLE_MIN_COUNTS] = '{"workers": 4}'
    admission.validate_jobset(raised, created)
    dropped = copy.deepcopy(created)
    del dropped["metadata"]["annotations"][keys.ROLE_MIN_COUNTS]
    with pytest.raises(GangSpecError, match="only when the JobSet is created"):
        admission.validate_jobset(dropped, created)
    to_zero = copy.deepcopy(created)
    to_zero["metadata"]["annotations"][keys.ROLE_MIN_COUNTS] = '{"workers": 3, "leader": 0}'
    with pytest.raises(GangSpecError, match="between 0"):
        admission.validate_jobset(to_zero, created)
    one_gang = admitted(jobset({keys.POLICY: "gang"}))
    added = copy.deepcopy(one_gang)
    added["metadata"]["annotations"][keys.ROLE_MIN_COUNTS] = '{"workers": 3}'
    with pytest.raises(GangSpecError, match="only when the JobSet is created"):
        admission.validate_jobset(added, one_gang)


def test_the_objects_are_a_composite_and_a_child_per_role_that_the_loop_folds_into_one_group() -> None:
    """What the controller makes, read back as the loop reads it: one group of roles whose members are the JobSet's
    pods, each counted in the role its template's label names."""
    source = objects.from_jobset(admitted(of_roles({"workers": 3, "leader": 0})))
    assert source is not None
    workload = owner_objects.workload(source).wire()
    assert [(t["name"], t["schedulingPolicy"]) for t in workload["spec"]["podGroupTemplates"]] == [
        ("leader", {"basic": {}}),
        ("workers", {"gang": {"minCount": 3}}),
    ]
    wired = owner_objects.composite(source, "wl-uid").wire()
    composite = {**wired, "metadata": {**wired["metadata"], "uid": "cpg-uid", "resourceVersion": "1"}}
    assert composite["spec"]["schedulingPolicy"] == {"gang": {"minGroupCount": 2}}
    assert composite["spec"]["disruptionMode"] == {"all": {}}
    assert composite["metadata"]["ownerReferences"][0]["kind"] == "JobSet"
    children = [
        {**(c := owner_objects.role_pod_group(source, role, minimum, "wl-uid").wire()), "metadata": {**c["metadata"], "uid": f"pg-{role}"}}
        for role, minimum in source.roles
    ]
    assert {c["spec"]["parentCompositePodGroupName"] for c in children} == {source.pod_group_name}
    assert len({c["metadata"]["name"] for c in children}) == 2
    (group,) = composites.groups(children, [composite])
    assert composites.roles(group) == (("leader", 0), ("workers", 3))
    assert JOBSETS.owner_uid(group) == "js-uid", "the group answers to the JobSet, and its members are the JobSet's pods"
    pods = [
        {"metadata": {"uid": f"u{i}", "name": f"p{i}", "namespace": "ml", "labels": {keys.ROLE_LABEL: role}}, "spec": {"containers": []}}
        for i, role in enumerate(["leader", "workers", "workers", "workers", "workers"])
    ]
    planned = inputs.group(group, pods, 3)
    assert {r.name: (r.min_count, len(r.members)) for r in planned.roles} == {"leader": (0, 1), "workers": (3, 4)}
    assert composites.below(group, pods[:3]) == ["workers 2 of minCount 3"]


def test_a_role_phalanx_made_is_never_a_gang_of_its_own_without_its_composite() -> None:
    source = objects.from_jobset(admitted(of_roles({"workers": 3})))
    assert source is not None
    children = [owner_objects.role_pod_group(source, role, minimum, "wl-uid").wire() for role, minimum in source.roles]
    assert composites.groups(children, []) == []


def test_a_changed_minimum_reaches_its_child_and_the_workload_template() -> None:
    before = objects.from_jobset(admitted(of_roles({"workers": 3})))
    after = objects.from_jobset(admitted(of_roles({"workers": 2})))
    assert before is not None and after is not None
    child = owner_objects.role_pod_group(before, "workers", 3, "wl-uid").wire()
    assert owner_objects.role_patch("workers", 2, child) == {"spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}
    assert owner_objects.role_patch("workers", 3, child) is None
    workload = owner_objects.workload(before).wire()
    patch = owner_objects.min_count_patch(after, workload, workload_kind=True)
    assert patch is not None
    assert [t["schedulingPolicy"] for t in patch["spec"]["podGroupTemplates"]] == [{"gang": {"minCount": 1}}, {"gang": {"minCount": 2}}]
    assert owner_objects.min_count_patch(before, workload, workload_kind=True) is None
