"""Job admission as pure functions: defaults, gating, warnings, and every refusal's message."""

from __future__ import annotations

import json
from typing import Any

import pytest

from phalanx.api import intent, keys
from phalanx.jobs import admission

IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
"""The podFailurePolicy the README asks gang Jobs for; without it admission warns."""


def job(annotations: dict[str, str] | None = None, scheduling: dict | None = None, parallelism: int | None = 4) -> dict:
    spec: dict[str, Any] = {
        "podFailurePolicy": IGNORE_DISRUPTIONS,
        "template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}},
    }
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
    (
        {},
        {"schedulingPolicy": {"gang": {"minCount": 9}}},
        4,
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 9: must not be greater than parallelism (4)",
    ),
    (
        {keys.POLICY: "gang", keys.TOPOLOGY_KEY: "rack"},
        {"schedulingPolicy": {"gang": {"minCount": 0}}},
        4,
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 0",
    ),
    (
        {keys.MIN_COUNT: "9" * 5000},
        None,
        4,
        f'{ANN}min-count]: Invalid value: "{"9" * 63}... (5002 characters): must be at most 2147483647',
    ),
    ({keys.MIN_COUNT: "2147483648"}, None, 4, f'{ANN}min-count]: Invalid value: "2147483648": must be at most 2147483647'),
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


FABRIC = {"name": "fabric", "resourceClaimTemplateName": "one-channel"}


def claims_job(group: list | None, pod: list | None = None, *, annotation: str | None = None, parallelism: int = 4) -> dict:
    """A gang Job whose pods use `pod` (default: the group's own entries) and whose group shares `group`."""
    scheduling = {"schedulingPolicy": {"gang": {"minCount": 4}}}
    if group is not None:
        scheduling["resourceClaims"] = group
    j = job({keys.POLICY: "gang", keys.RESOURCE_CLAIMS: annotation} if annotation is not None else None, scheduling, parallelism)
    j["spec"]["completions"] = parallelism
    j["spec"]["template"]["spec"]["resourceClaims"] = pod if pod is not None else list(group or [])
    return j


def refusal(j: dict, old: dict | None = None) -> str:
    with pytest.raises(intent.GangSpecError) as refused:
        m = mutate(j, old)
        j["metadata"]["annotations"].update(m.patch.get("metadata", {}).get("annotations", {}))
        j["spec"].pop("scheduling", None)
        admission.validate_job(j, old)
    assert refused.value.code == 422
    return str(refused.value)


RC = "spec.scheduling.resourceClaims"
BAD_CLAIMS = [
    pytest.param(
        [dict(FABRIC, name=f"c{i}") for i in range(5)],
        None,
        f'{RC}: Invalid value: ["c0", "c1", "c2", "c3", "c4"]: must have at most 4 items; share at most 4 claims per group',
        id="five",
    ),
    pytest.param(
        [{"name": "fabric", "resourceClaimTemplateName": "one-channel", "resourceClaimName": "mine"}],
        [FABRIC],
        f'{RC}[0]: Invalid value: ["resourceClaimName", "resourceClaimTemplateName"]: '
        "must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`",
        id="two-sources",
    ),
    pytest.param([{"name": "fabric"}], [FABRIC], f"{RC}[0]: Invalid value: []: must specify exactly one of", id="no-source"),
    pytest.param([dict(FABRIC, name="Fabric_1")], [FABRIC], f'{RC}[0].name: Invalid value: "Fabric_1": must be a DNS label', id="name"),
    pytest.param(
        [dict(FABRIC, resourceClaimTemplateName="One Channel")],
        [FABRIC],
        f'{RC}[0].resourceClaimTemplateName: Invalid value: "One Channel": must be a DNS subdomain',
        id="template-name",
    ),
    pytest.param([FABRIC, FABRIC], [FABRIC], f'{RC}[1].name: Invalid value: "fabric": Duplicate value', id="duplicate"),
    pytest.param(
        [FABRIC],
        [{"name": "fabric", "resourceClaimTemplateName": "two-channels"}],
        'spec.template.spec.resourceClaims[0]: Invalid value: {"name": "fabric", "resourceClaimTemplateName": "two-channels"}: '
        f"has the name of the group's claim {RC}[0] but another source, so each pod would get a claim of its own; "
        'give it the group\'s source {"resourceClaimTemplateName": "one-channel"}, or rename it',
        id="mismatched-source",
    ),
    pytest.param(
        [FABRIC],
        [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        f'{RC}[0].name: Invalid value: "fabric": no entry of spec.template.spec.resourceClaims has this name',
        id="unused",
    ),
]


@pytest.mark.parametrize(("group", "pod", "message"), BAD_CLAIMS)
def test_bad_group_claims_are_refused_naming_the_field(group: list, pod: list | None, message: str) -> None:
    got = refusal(claims_job(group, pod))
    assert got.startswith(message), got
    assert "; " in got


def test_bad_group_claims_in_the_annotation_name_the_annotation() -> None:
    path = f"metadata.annotations[{keys.RESOURCE_CLAIMS}]"
    got = refusal(claims_job(None, [FABRIC], annotation="fabric"))
    assert got.startswith(f'{path}: Invalid value: "fabric": must be a JSON list'), got
    got = refusal(claims_job(None, [FABRIC], annotation='[{"name": "fabric", "resourceClaimTemplate": "one-channel"}]'))
    assert got.startswith(f'{path}[0].resourceClaimTemplate: Invalid value: "one-channel": unknown field'), got


def test_a_group_claim_needs_few_enough_members_for_reserved_for() -> None:
    got = refusal(claims_job([FABRIC], parallelism=257))
    assert got.startswith("spec.parallelism: Invalid value: 257: must not be greater than 256 with spec.scheduling.resourceClaims"), got


def test_group_claims_contradicting_the_annotation_are_refused() -> None:
    other = json.dumps([{"name": "fabric", "resourceClaimName": "shared"}])
    got = refusal(claims_job([FABRIC], annotation=other))
    assert got.startswith(f"metadata.annotations[{keys.RESOURCE_CLAIMS}]: Invalid value: "), got
    assert f"contradicts {RC} (" in got


def test_group_claims_are_immutable() -> None:
    old = intent.GangIntent("gang", 4, "all", resource_claims=(intent.GroupClaim("fabric", resource_claim_template_name="one-channel"),))
    for new in (intent.replace(old, resource_claims=None), intent.replace(old, resource_claims=(intent.GroupClaim("fabric", "shared"),))):
        with pytest.raises(intent.GangSpecError) as refused:
            intent.validate_update(old, new)
        assert str(refused.value).startswith(f"metadata.annotations[{keys.RESOURCE_CLAIMS}]: Invalid value: "), str(refused.value)
        assert "field is immutable; delete and recreate the Job" in str(refused.value)
    intent.validate_update(old, intent.replace(old, min_count=2))


def test_group_claims_are_recorded_and_copied_onto_the_pod_template() -> None:
    """Recorded in the annotations, nothing dropped; the warning says what becomes of them."""
    j = claims_job([FABRIC])
    m = mutate(j)
    recorded = m.patch["metadata"]["annotations"][keys.RESOURCE_CLAIMS]
    assert json.loads(recorded) == [FABRIC]
    assert m.patch["spec"]["template"]["metadata"]["annotations"] == {keys.RESOURCE_CLAIMS: recorded}
    (warning,) = m.warnings
    assert warning.endswith("its resourceClaims (fabric) become one ResourceClaim per PodGroup, made and reserved by Phalanx"), warning
    j["metadata"]["annotations"].update(m.patch["metadata"]["annotations"])
    admission.validate_job(j, None)


def test_only_min_count_may_change() -> None:
    old = job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"})
    admission.validate_job(job({keys.POLICY: "gang", keys.MIN_COUNT: "2", keys.DISRUPTION_MODE: "all"}), old)
    with pytest.raises(intent.GangSpecError, match=r"disruption-mode\]: Invalid value: \"single\": field is immutable"):
        admission.validate_job(job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "single"}), old)
    with pytest.raises(intent.GangSpecError, match="cannot be added to or removed from an existing Job"):
        admission.validate_job(job(), old)
    with pytest.raises(intent.GangSpecError, match="cannot be added to or removed from an existing Job"):
        admission.validate_job(old, job())


def sized(annotations: dict[str, str], parallelism: int | None, completions: int | None) -> dict:
    j = job(annotations, parallelism=parallelism)
    if completions is not None:
        j["spec"]["completions"] = completions
    return j


@pytest.mark.parametrize(
    ("parallelism", "completions", "min_count", "refusal"),
    [
        (4, 4, "4", None),
        (4, None, "4", None),
        (4, 2, "2", None),
        (
            4,
            2,
            "3",
            "min-count]: Invalid value: 3: must not be greater than completions (2); lower it to at most 2 or raise spec.completions",
        ),
        (
            2,
            8,
            "3",
            "min-count]: Invalid value: 3: must not be greater than parallelism (2); lower it to at most 2 or raise spec.parallelism",
        ),
    ],
)
def test_min_count_fits_what_the_job_can_run_at_once(parallelism, completions, min_count, refusal) -> None:
    """A gang larger than min(parallelism, completions) would stay gated forever."""
    j = sized({keys.MIN_COUNT: min_count}, parallelism, completions)
    if refusal is None:
        mutate(j)
        admission.validate_job(j, None)
        return
    with pytest.raises(intent.GangSpecError) as refused:
        mutate(j)
    assert str(refused.value) == f"{ANN}{refusal}"


def test_unset_min_count_is_the_most_the_job_can_run_at_once() -> None:
    gang = intent.GangIntent(policy="gang")
    assert gang.min_count_for(4, None) == 4
    assert gang.min_count_for(4, 2) == 2, "completions 2 never run 4 pods at once"
    assert gang.min_count_for(None, None) == 1
    assert gang.min_count_for(0, None) == 1


def test_scaling_below_min_count_names_the_size_the_user_changed() -> None:
    old = sized({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"}, 4, 4)
    smaller = sized({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"}, 2, 4)
    expected = "spec.parallelism: Invalid value: 2: must not be less than the gang's minCount (4); keep it at 4 or more, or lower the minCount first"
    for check in (lambda: mutate(smaller, old), lambda: admission.validate_job(smaller, old)):
        with pytest.raises(intent.GangSpecError) as refused:
            check()
        assert str(refused.value) == expected


def test_generate_name_jobs_are_gated_without_a_template_label() -> None:
    j = job({keys.MIN_COUNT: "4"})
    del j["metadata"]["name"]
    j["metadata"]["generateName"] = "train-"
    template = mutate(j).patch["spec"]["template"]
    assert template == {"spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}]}}, "the name is not known yet: no `-pgt-0` label"


@pytest.mark.parametrize("length", [57, 58, 63])
def test_long_names_get_a_valid_template_label(length: int) -> None:
    j = job({keys.MIN_COUNT: "4"})
    j["metadata"]["name"] = name = "j" * (length - 1) + "a"
    label = mutate(j).patch["spec"]["template"]["metadata"]["labels"][keys.TEMPLATE_LABEL]
    assert len(label) <= 63 and label.endswith("-pgt-0")
    if length <= 57:
        assert label == f"{name}-pgt-0", "upstream's name while it fits"
    else:
        other = job({keys.MIN_COUNT: "4"})
        other["metadata"]["name"] = "j" * (length - 1) + "b"
        assert mutate(other).patch["spec"]["template"]["metadata"]["labels"][keys.TEMPLATE_LABEL] != label, "the hash keeps cut names apart"


GATED = [{"name": keys.SCHEDULING_GATE}]


def gang_with_gates(gates: list[dict]) -> dict:
    j = job({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"})
    j["spec"]["template"]["spec"]["schedulingGates"] = gates
    return j


def test_the_gate_stays_for_the_jobs_whole_life() -> None:
    old = gang_with_gates(GATED)
    with pytest.raises(intent.GangSpecError) as refused:
        admission.validate_job(gang_with_gates([]), old)
    assert str(refused.value) == (
        "spec.template.spec.schedulingGates: Invalid value: []: the scheduling gate scheduling.phalanx.dev/gang must stay on "
        "a gang Job's pod template for the Job's whole life; keep it: Phalanx lifts it from each pod once the whole gang can be placed"
    )
    admission.validate_job(gang_with_gates([*GATED, {"name": "example.com/other"}]), old)
    admission.validate_job(gang_with_gates([]), gang_with_gates([])), "a Job admitted without the gate is only reported"


@pytest.mark.parametrize(
    ("min_count", "code"),
    [("9" * 5000, 400), ("2147483648", 400), ("0", 422), ("5", 422), ("four", 422)],
)
def test_a_number_no_integer_holds_is_a_bad_request_and_an_invalid_gang_is_unprocessable(min_count: str, code: int) -> None:
    with pytest.raises(intent.GangSpecError) as refused:
        admission.validate_job(job({keys.MIN_COUNT: min_count}), None)
    assert refused.value.code == code, str(refused.value)
    assert f"[{keys.MIN_COUNT}]" in str(refused.value)


K = "scheduling.phalanx.dev/"


@pytest.mark.parametrize(
    ("annotations", "message"),
    [
        pytest.param(
            {K + "mincount": "3"},
            f'{ANN}mincount]: Invalid value: "3": unknown key under {K}, which Phalanx would ignore; did you mean {K}min-count?',
            id="typo-alone",
        ),
        pytest.param(
            {K + "policy": "gang", K + "disruptionmode": "all"},
            f'{ANN}disruptionmode]: Invalid value: "all": unknown key under {K}, which Phalanx would ignore; did you mean {K}disruption-mode?',
            id="typo-beside-intent",
        ),
        pytest.param(
            {K + "MinCount": "3"},
            f'{ANN}MinCount]: Invalid value: "3": unknown key under {K}, which Phalanx would ignore; did you mean {K}min-count?',
            id="case",
        ),
        pytest.param(
            {K + "gang": "true"},
            f'{ANN}gang]: Invalid value: "true": unknown key under {K}, which Phalanx would ignore; '
            f"use one of {K}policy, {K}min-count, {K}disruption-mode, {K}topology-key, {K}resource-claims, {K}ready-deadline, {K}hold-after, or remove it",
            id="nothing-close",
        ),
        pytest.param(
            {K + "min-count": "9", K + "topologykey": "rack"},
            f'{ANN}topologykey]: Invalid value: "rack": unknown key under {K}, which Phalanx would ignore; did you mean {K}topology-key?; '
            f"{ANN}min-count]: Invalid value: 9: must not be greater than parallelism (4)",
            id="reported-with-the-other-errors",
        ),
    ],
)
def test_an_unknown_key_under_our_prefix_is_refused_with_the_nearest_known_one(annotations: dict, message: str) -> None:
    """A typo would be ignored: the Job admitted ungated (or its setting dropped) with no word."""
    for check in (lambda: mutate(job(annotations)), lambda: admission.validate_job(job(annotations), None)):
        with pytest.raises(intent.GangSpecError) as refused:
            check()
        assert str(refused.value).startswith(message), str(refused.value)
        assert refused.value.code == 422


def test_on_update_only_an_added_unknown_key_is_refused() -> None:
    """A Job an older Phalanx admitted with such a key can still be changed, and the key removed."""
    gang = {keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"}
    old = job({**gang, K + "mincount": "4"})
    for new in (job({**gang, K + "mincount": "4", keys.MIN_COUNT: "2"}), job(gang)):
        mutate(new, old)
        admission.validate_job(new, old)
    plain = job({K + "mincount": "4"})
    admission.validate_job(job({K + "mincount": "5", "team": "a"}), plain)
    admission.validate_job(job(), plain)
    for new in (job({**gang, K + "mincount": "4", K + "minCount": "4"}), job({**gang, K + "disruptionmode": "all"})):
        with pytest.raises(intent.GangSpecError, match=r"did you mean scheduling\.phalanx\.dev/"):
            admission.validate_job(new, old)
        with pytest.raises(intent.GangSpecError, match=r"did you mean scheduling\.phalanx\.dev/"):
            mutate(new, old)


def test_other_prefixes_and_known_keys_pass() -> None:
    assert mutate(job({"example.com/mincount": "3", "phalanx.dev/x": "y"})) == admission.Mutation()
    admission.validate_job(job({"example.com/mincount": "3"}), None)
    admission.validate_job(job({k: v for k, v in zip(keys.INTENT_ANNOTATIONS[:4], ("gang", "4", "all", "rack"), strict=True)}), None)


def without_rule(annotations: dict[str, str] | None = None, scheduling: dict | None = None, **spec: Any) -> dict:
    j = job(annotations, scheduling)
    del j["spec"]["podFailurePolicy"]
    j["spec"].update(spec)
    return j


RULE = "{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}"


def test_a_gang_job_without_the_disruption_rule_is_warned_with_the_rule_to_add() -> None:
    (warning,) = mutate(without_rule({keys.MIN_COUNT: "4"})).warnings
    assert warning == (
        f"spec.podFailurePolicy has no rule {RULE}: each member this gang loses to an eviction, a preemption or a node "
        "drained or gone counts against spec.backoffLimit (6) as a failed container does, so the 7th such loss fails "
        "the Job (the members Phalanx takes down with it are not counted); "
        f"recreate the Job with spec.podFailurePolicy: {{rules: [{RULE}]}} "
        '(the policy is immutable; see docs/concepts.md, "When a member of a running gang is lost")'
    )
    (warning,) = mutate(without_rule({keys.MIN_COUNT: "4"}, backoffLimit=0)).warnings
    assert "spec.backoffLimit (0) as a failed container does, so the first such loss fails the Job" in warning
    (warning,) = mutate(without_rule({keys.MIN_COUNT: "4"}, backoffLimit=1)).warnings
    assert "so the 2nd such loss fails the Job" in warning
    (warning,) = mutate(without_rule({keys.MIN_COUNT: "4"}, backoffLimit=10)).warnings
    assert "so the 11th such loss fails the Job" in warning
    (warning,) = mutate(without_rule({keys.MIN_COUNT: "4"}, backoffLimitPerIndex=1)).warnings
    assert (
        "counts against its index's spec.backoffLimitPerIndex (1) as a failed container does, and so does a member "
        "Phalanx takes down with it whose index has failed before, so the 2nd such loss of one index fails that index;"
    ) in warning
    j = without_rule({keys.MIN_COUNT: "4"})
    j["spec"]["template"]["spec"]["restartPolicy"] = "OnFailure"
    (warning,) = mutate(j).warnings
    assert f"{{rules: [{RULE}]}} and spec.template.spec.restartPolicy: Never (the policy needs it)" in warning
    copied, warning = mutate(without_rule(scheduling={"schedulingPolicy": {"gang": {"minCount": 4}}})).warnings
    assert copied.startswith("spec.scheduling is dropped") and warning.startswith("spec.podFailurePolicy has no rule")


@pytest.mark.parametrize(("grace", "warned"), [(None, False), (30, False), (admission.SLOW_GRACE, False), (admission.SLOW_GRACE + 1, True)])
def test_a_long_grace_period_is_warned_with_what_each_teardown_costs(grace: int | None, warned: bool) -> None:
    j = job({keys.MIN_COUNT: "4"})
    if grace is not None:
        j["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = grace
    warnings = mutate(j).warnings
    assert len(warnings) == warned, warnings
    if warned:
        assert warnings[0] == (
            f"spec.template.spec.terminationGracePeriodSeconds is {grace}: each time Phalanx tears this gang down, its "
            f"members keep their devices until they stop, up to {grace} s, and the gang runs again only once it has "
            "room; lower it to what a rank needs to stop (its checkpoint)"
        )


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param(IGNORE_DISRUPTIONS, id="the-rule"),
        pytest.param(
            {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]}]},
            id="status-true",
        ),
        pytest.param(
            {
                "rules": [
                    {"action": "FailJob", "onExitCodes": {"operator": "In", "values": [42]}},
                    {"action": "Ignore", "onPodConditions": [{"type": "ConfigIssue"}, {"type": "DisruptionTarget"}]},
                ]
            },
            id="among-others",
        ),
    ],
)
def test_a_gang_job_with_the_disruption_rule_is_not_warned(policy: dict) -> None:
    assert mutate(without_rule({keys.MIN_COUNT: "4"}, podFailurePolicy=policy)).warnings == ()


@pytest.mark.parametrize(
    "policy",
    [
        pytest.param({"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "False"}]}]}, id="false"),
        pytest.param({"rules": [{"action": "Count", "onPodConditions": [{"type": "DisruptionTarget"}]}]}, id="count"),
        pytest.param({"rules": [{"action": "Ignore", "onExitCodes": {"operator": "In", "values": [137]}}]}, id="exit-codes"),
    ],
)
def test_a_rule_that_does_not_ignore_disruptions_is_warned(policy: dict) -> None:
    (warning,) = mutate(without_rule({keys.MIN_COUNT: "4"}, podFailurePolicy=policy)).warnings
    assert warning.startswith("spec.podFailurePolicy has no rule")


def test_only_gang_jobs_on_create_are_warned_about_disruptions() -> None:
    assert mutate(without_rule()) == admission.Mutation(), "not a Phalanx Job"
    assert mutate(without_rule({keys.POLICY: "basic"})).warnings == (), "a basic group is never torn down as a unit"
    old = without_rule({keys.POLICY: "gang", keys.MIN_COUNT: "4", keys.DISRUPTION_MODE: "all"})
    new = without_rule({keys.POLICY: "gang", keys.MIN_COUNT: "3", keys.DISRUPTION_MODE: "all"})
    assert mutate(new, old).warnings == (), "podFailurePolicy is immutable: an update cannot act on it"
