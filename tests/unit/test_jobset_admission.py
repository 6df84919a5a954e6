"""A gang JobSet: one group over every pod of every Job it makes, its templates gated at creation."""

from __future__ import annotations

import copy

import pytest

from phalanx.api import keys
from phalanx.api.intent import GangSpecError
from phalanx.jobsets import admission


def jobset(annotations: dict[str, str] | None = None, workers: int = 3, worker_replicas: int = 1, **pod: object) -> dict:
    def rjob(name: str, parallelism: int, replicas: int) -> dict:
        return {
            "name": name,
            "replicas": replicas,
            "template": {
                "spec": {
                    "parallelism": parallelism,
                    "completions": parallelism,
                    "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox"}], **pod}},
                }
            },
        }

    return {
        "apiVersion": admission.API_VERSION,
        "kind": admission.KIND,
        "metadata": {"name": "train", "namespace": "ml", "annotations": dict(annotations or {})},
        "spec": {"replicatedJobs": [rjob("leader", 1, 1), rjob("workers", workers, worker_replicas)]},
    }


def test_size_sums_replicas_times_parallelism_over_replicated_jobs() -> None:
    assert admission.size(jobset(workers=3, worker_replicas=2)) == admission.Size(parallelism=7, completions=7)


def test_create_gates_and_labels_every_template_and_records_the_default_mode() -> None:
    js = jobset({keys.POLICY: "gang"})
    out = admission.mutate_jobset(js, None, gang_default_mode="all").jobset
    assert out["metadata"]["annotations"][keys.DISRUPTION_MODE] == "all"
    for rjob in out["spec"]["replicatedJobs"]:
        pod = rjob["template"]["spec"]["template"]
        assert pod["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]
        assert pod["metadata"]["labels"][keys.TEMPLATE_LABEL].startswith("train")
    assert admission.gated(out)
    admission.validate_jobset(out, None)


def test_a_jobset_that_asks_for_nothing_is_left_alone() -> None:
    js = jobset()
    assert admission.mutate_jobset(js, None, gang_default_mode="all").jobset == js
    assert not admission.gated(js)


def test_each_replicated_job_without_the_disruption_rule_is_warned_by_name() -> None:
    js = jobset({keys.POLICY: "gang"})
    warnings = admission.mutate_jobset(js, None, gang_default_mode="all").warnings
    assert [w.split(":")[0] for w in warnings] == ["replicated Job leader", "replicated Job workers"]
    assert all(f"spec.replicatedJobs[{i}].template.spec.podFailurePolicy has no rule" in w for i, w in enumerate(warnings))
    assert all("recreate the JobSet with" in w and "recreate the Job " not in w for w in warnings), warnings


def test_a_replicated_job_with_the_rule_as_the_jobset_stores_it_is_not_warned() -> None:
    """The README's rule in each replicated Job: the JobSet keeps the condition's unset status as "" (the Job API
    defaults it to True), which is the same rule."""
    js = jobset({keys.POLICY: "gang"})
    for rjob in js["spec"]["replicatedJobs"]:
        rule = {"action": "Ignore", "onPodConditions": [{"type": keys.DISRUPTION_TARGET, "status": ""}]}
        rjob["template"]["spec"]["podFailurePolicy"] = {"rules": [rule]}
        rjob["template"]["spec"]["template"]["spec"]["restartPolicy"] = "Never"
    assert admission.mutate_jobset(js, None, gang_default_mode="all").warnings == ()


def test_min_count_above_the_jobsets_size_names_the_field_and_the_total() -> None:
    js = jobset({keys.POLICY: "gang", keys.MIN_COUNT: "5"}, workers=3)
    with pytest.raises(GangSpecError) as err:
        admission.mutate_jobset(js, None, gang_default_mode="all")
    (error,) = err.value.errors
    assert error.path == f"metadata.annotations[{keys.MIN_COUNT}]"
    assert "(4: replicas x parallelism" in error.detail


def test_a_typo_under_the_prefix_is_refused_with_the_key_it_meant() -> None:
    js = jobset({keys.POLICY: "gang", f"{keys.ANNOTATION_PREFIX}mincount": "4"})
    with pytest.raises(GangSpecError) as err:
        admission.mutate_jobset(js, None, gang_default_mode="all")
    assert "did you mean scheduling.phalanx.dev/min-count?" in str(err.value)


def test_templates_with_different_priorities_are_refused() -> None:
    js = jobset({keys.POLICY: "gang"})
    js["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["priorityClassName"] = "high"
    with pytest.raises(GangSpecError, match="same priorityClassName"):
        admission.validate_jobset(js, None)


def test_group_claims_are_refused_on_a_jobset() -> None:
    claims = '[{"name":"shared","resourceClaimTemplateName":"one-gpu"}]'
    with pytest.raises(GangSpecError, match="not supported on a JobSet"):
        admission.validate_jobset(jobset({keys.POLICY: "gang", keys.RESOURCE_CLAIMS: claims}), None)


def test_the_gate_must_stay_and_the_mode_is_immutable() -> None:
    js = jobset({keys.POLICY: "gang"})
    created = admission.mutate_jobset(js, None, gang_default_mode="all").jobset
    ungated = copy.deepcopy(created)
    ungated["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"]["schedulingGates"] = []
    with pytest.raises(GangSpecError, match="must stay on every pod template"):
        admission.validate_jobset(ungated, created)
    single = copy.deepcopy(created)
    single["metadata"]["annotations"][keys.DISRUPTION_MODE] = "single"
    with pytest.raises(GangSpecError, match="immutable"):
        admission.validate_jobset(single, created)


def test_a_gang_that_starts_in_order_is_refused_as_it_would_wait_for_ever() -> None:
    js = jobset({keys.POLICY: "gang"})
    js["spec"]["startupPolicy"] = {"startupPolicyOrder": "InOrder"}
    with pytest.raises(GangSpecError) as err:
        admission.validate_jobset(js, None)
    assert [e.path for e in err.value.errors] == ["spec.startupPolicy.startupPolicyOrder"]
    js["spec"]["startupPolicy"] = {"startupPolicyOrder": "AnyOrder"}
    admission.validate_jobset(js, None)


def test_a_typo_alone_is_refused_and_does_not_run_the_jobset_ungated() -> None:
    js = jobset({f"{keys.ANNOTATION_PREFIX}mincount": "4"})
    with pytest.raises(GangSpecError, match=r"did you mean scheduling\.phalanx\.dev/min-count"):
        admission.mutate_jobset(js, None, gang_default_mode="all")
    with pytest.raises(GangSpecError, match="did you mean"):
        admission.validate_jobset(js, None)


def test_a_replicated_job_of_a_gang_jobset_may_not_ask_for_a_gang_of_its_own() -> None:
    js = jobset({keys.POLICY: "gang"})
    js["spec"]["replicatedJobs"][1]["template"]["metadata"] = {"annotations": {keys.MIN_COUNT: "3"}}
    with pytest.raises(GangSpecError) as err:
        admission.validate_jobset(js, None)
    assert [e.path for e in err.value.errors] == ["spec.replicatedJobs[1].template.metadata.annotations"]
