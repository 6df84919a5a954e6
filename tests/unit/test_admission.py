"""Job admission as pure functions: defaults, gating, warnings, and every refusal's message."""

from __future__ import annotations

from typing import Any

import pytest

from phalanx.api import intent, keys
from phalanx.jobs import admission


def job(annotations: dict[str, str] | None = None, scheduling: dict | None = None, parallelism: int | None = 4) -> dict:
    spec: dict[str, Any] = {"template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}}
    if parallelism is not None:
        spec["parallelism"] = parallelism
    if scheduling is not None:
        spec["scheduling"] = scheduling
    return {"metadata": {"name": "train-a", "annotations": annotations or {}}, "spec": spec}


def mutate(j: dict, old: dict | None = None) -> admission.Mutation:
    return admission.mutate_job(j, old, gang_default_mode="all", field_dropped=True)


def test_a_job_without_gang_intent_is_left_alone() -> None:
    assert mutate(job()) == admission.Mutation()


def test_annotations_get_the_gang_default_mode_and_the_template_is_gated() -> None:
    m = mutate(job({keys.MIN_COUNT: "4"}))
    assert m.patch["metadata"]["annotations"] == {keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"}
    template = m.patch["spec"]["template"]
    assert template["spec"]["schedulingGates"] == [{"name": "scheduling.phalanx.dev/gang"}]
    assert template["metadata"]["labels"] == {"scheduling.phalanx.dev/pod-group-template": "train-a-pgt-0"}
    assert m.warnings == ()


def test_spec_scheduling_is_recorded_with_a_warning() -> None:
    m = mutate(job(scheduling={"schedulingPolicy": {"gang": {"minCount": 4}}, "disruptionMode": {"single": {}}}))
    assert m.patch["metadata"]["annotations"] == {keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "single"}
    (warning,) = m.warnings
    assert warning.startswith("spec.scheduling is dropped silently by this API server")


def test_basic_policy_defaults_to_single() -> None:
    m = mutate(job({keys.POLICY: "basic"}))
    assert m.patch["metadata"]["annotations"][keys.DISRUPTION_MODE] == "single"


def test_existing_gates_are_kept() -> None:
    j = job({keys.POLICY: "gang"})
    j["spec"]["template"]["spec"]["schedulingGates"] = [{"name": "example.com/other"}]
    gates = mutate(j).patch["spec"]["template"]["spec"]["schedulingGates"]
    assert gates == [{"name": "example.com/other"}, {"name": "scheduling.phalanx.dev/gang"}]


def test_update_does_not_touch_the_template_and_keeps_the_mode() -> None:
    old = job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"})
    new = job({keys.POLICY: "gang", keys.MIN_COUNT: "3", keys.DISRUPTION_MODE: "all"})
    assert mutate(new, old) == admission.Mutation()


ANN = "metadata.annotations[scheduling.phalanx.dev/"
BAD = [
    ({keys.MIN_COUNT: "0"}, None, 4, f"{ANN}min-count]: Invalid value: 0: must be greater than or equal to 1"),
    ({keys.MIN_COUNT: "-2"}, None, 4, f'{ANN}min-count]: Invalid value: "-2": must be a whole number'),
    ({keys.MIN_COUNT: "four"}, None, 4, f'{ANN}min-count]: Invalid value: "four": must be a whole number'),
    ({keys.MIN_COUNT: "5"}, None, 4, f"{ANN}min-count]: Invalid value: 5: must not be greater than parallelism (4)"),
    ({keys.MIN_COUNT: "2"}, None, None, f"{ANN}min-count]: Invalid value: 2: must not be greater than parallelism (1)"),
    (
        {keys.POLICY: "gang", keys.DISRUPTION_MODE: "some"},
        None,
        4,
        f'{ANN}disruption-mode]: Invalid value: "some": unknown disruption mode',
    ),
    (
        {keys.POLICY: "basic", keys.DISRUPTION_MODE: "all"},
        None,
        4,
        f'{ANN}disruption-mode]: Invalid value: "all": the disruptionMode `all` is not supported with the basic',
    ),
    ({keys.POLICY: "clique"}, None, 4, f'{ANN}policy]: Invalid value: "clique": unknown policy'),
    ({keys.POLICY: "basic", keys.MIN_COUNT: "2"}, None, 4, f"{ANN}min-count]: Invalid value: 2: minCount only applies to the gang policy"),
    ({keys.DISRUPTION_MODE: "all"}, None, 4, f"{ANN}policy]: Invalid value: null: required when other gang annotations are set"),
    (
        {keys.POLICY: "gang", keys.TOPOLOGY_KEY: "no spaces allowed"},
        None,
        4,
        f'{ANN}topology-key]: Invalid value: "no spaces allowed": must be a node label key',
    ),
    (
        {keys.MIN_COUNT: "3"},
        {"schedulingPolicy": {"gang": {"minCount": 4}}},
        4,
        f"{ANN}min-count]: Invalid value: 3: contradicts spec.scheduling.schedulingPolicy.gang.minCount (4)",
    ),
    (
        {},
        {"schedulingPolicy": {"gang": {"minCount": 0}}},
        4,
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 0: must be greater than or equal to 1",
    ),
    ({}, {"schedulingPolicy": {"gang": {}, "basic": {}}}, 4, "spec.scheduling.schedulingPolicy: Invalid value: "),
    (
        {},
        {"disruptionMode": {"all": {}}},
        4,
        'spec.scheduling.disruptionMode: Invalid value: "all": the disruptionMode `all` is not supported with the basic',
    ),
]


@pytest.mark.parametrize(("annotations", "scheduling", "parallelism", "message"), BAD)
def test_bad_input_is_refused_with_field_and_fix(annotations, scheduling, parallelism, message) -> None:
    j = job(annotations, scheduling, parallelism)
    with pytest.raises(intent.GangSpecError) as refused:
        m = mutate(j)
        j["metadata"]["annotations"].update(m.patch.get("metadata", {}).get("annotations", {}))
        admission.validate_job(j, None)
    assert str(refused.value).startswith(message), str(refused.value)
    assert "; " in str(refused.value), "every error carries a fix"


def test_only_min_count_may_change() -> None:
    old = job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"})
    admission.validate_job(job({keys.POLICY: "gang", keys.MIN_COUNT: "2", keys.DISRUPTION_MODE: "all"}), old)
    with pytest.raises(intent.GangSpecError, match=r"disruption-mode\]: Invalid value: \"single\": field is immutable"):
        admission.validate_job(job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "single"}), old)
    with pytest.raises(intent.GangSpecError, match="cannot be added to or removed from an existing Job"):
        admission.validate_job(job(), old)
    with pytest.raises(intent.GangSpecError, match="cannot be added to or removed from an existing Job"):
        admission.validate_job(old, job())


def test_parallelism_cannot_drop_below_min_count() -> None:
    old = job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"})
    with pytest.raises(intent.GangSpecError, match=r"must not be greater than parallelism \(2\)"):
        admission.validate_job(job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"}, parallelism=2), old)
