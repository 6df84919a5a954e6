"""Job admission against the real API server: a gang is granted, or refused at once with the fix.

Slices: the session cluster's, from dra-example-driver's plugin (admission never looks at them).
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import Cluster, Operator

from jobs import IGNORE_DISRUPTIONS, MIN4, as_json, gang_job
from phalanx.api import keys

ANN = "metadata.annotations[scheduling.phalanx.dev/"
UNKNOWN = "unknown key under scheduling.phalanx.dev/, which Phalanx would ignore"


def _apply(cluster: Cluster, namespace: str, job: dict, *, verb: str = "apply"):
    return cluster.kubectl(verb, "-n", namespace, "-f", "-", stdin=as_json(job), check=False)


def test_spec_scheduling_is_kept_as_annotations_with_a_warning(cluster: Cluster, operator: Operator, namespace: str) -> None:
    scheduling = {"schedulingPolicy": {"gang": {"minCount": 3}}, "disruptionMode": {"single": {}}}
    proc = _apply(cluster, namespace, gang_job(scheduling=scheduling))
    assert proc.returncode == 0, proc.stderr
    assert (
        "Warning: spec.scheduling is dropped silently by this API server (feature gate WorkloadWithJob is off); "
        "Phalanx recorded it in the annotations scheduling.phalanx.dev/* and will gang-schedule this Job"
    ) in proc.stderr
    job = cluster.get("job", "train", "-n", namespace)
    assert "scheduling" not in job["spec"], "the API server pruned the field, as the article shows"
    annotations = job["metadata"]["annotations"]
    assert (annotations[keys.POLICY], annotations[keys.MIN_COUNT], annotations[keys.DISRUPTION_MODE]) == ("gang", "3", "single")
    assert job["spec"]["template"]["spec"]["schedulingGates"] == [{"name": "scheduling.phalanx.dev/gang"}]
    deadline = time.monotonic() + 30
    while not (groups := cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace)["items"]):
        assert time.monotonic() < deadline, "no PodGroup for the spec.scheduling Job"
        time.sleep(0.3)
    (pod_group,) = groups
    assert pod_group["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}
    assert pod_group["spec"]["disruptionMode"] == {"single": {}}


def test_a_job_without_gang_intent_never_reaches_the_webhook(cluster: Cluster, operator: Operator, namespace: str) -> None:
    calls_before = operator.logs().count("POST /job-gang-")
    proc = _apply(cluster, namespace, gang_job())
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr
    job = cluster.get("job", "train", "-n", namespace)
    assert "schedulingGates" not in job["spec"]["template"]["spec"]
    assert not any(k.startswith("scheduling.phalanx.dev/") for k in job["metadata"].get("annotations", {}))
    if operator.log is not None:
        assert operator.logs().count("POST /job-gang-") == calls_before, "matchConditions keep plain Jobs away"


BAD_CREATES = [
    (
        gang_job(annotations={"scheduling.phalanx.dev/mincount": "3"}),
        f'{ANN}mincount]: Invalid value: "3": {UNKNOWN}; did you mean scheduling.phalanx.dev/min-count?',
    ),
    (
        gang_job(annotations={keys.POLICY: "gang", "scheduling.phalanx.dev/disruptionmode": "all"}),
        f'{ANN}disruptionmode]: Invalid value: "all": {UNKNOWN}; did you mean scheduling.phalanx.dev/disruption-mode?',
    ),
    (
        gang_job(annotations={keys.MIN_COUNT: "0"}),
        f"{ANN}min-count]: Invalid value: 0: must be greater than or equal to 1; a gang needs at least one pod",
    ),
    (
        gang_job(annotations={keys.MIN_COUNT: "-1"}),
        f'{ANN}min-count]: Invalid value: "-1": must be a whole number; write the gang size as digits, e.g. "4"',
    ),
    (
        gang_job(annotations={keys.MIN_COUNT: "2.5"}),
        f'{ANN}min-count]: Invalid value: "2.5": must be a whole number; write the gang size as digits, e.g. "4"',
    ),
    (
        gang_job(annotations={keys.MIN_COUNT: "5"}),
        f"{ANN}min-count]: Invalid value: 5: must not be greater than parallelism (4); lower it to at most 4 or raise spec.parallelism",
    ),
    (
        gang_job(annotations={keys.MIN_COUNT: "2"}, parallelism=None),
        f"{ANN}min-count]: Invalid value: 2: must not be greater than parallelism (1); lower it to at most 1 or raise spec.parallelism",
    ),
    (
        gang_job(annotations={keys.POLICY: "gang", keys.DISRUPTION_MODE: "everything"}),
        f'{ANN}disruption-mode]: Invalid value: "everything": unknown disruption mode; use `all` or `single`',
    ),
    (
        gang_job(annotations={keys.POLICY: "basic", keys.DISRUPTION_MODE: "all"}),
        f'{ANN}disruption-mode]: Invalid value: "all": the disruptionMode `all` is not supported with the basic scheduling policy; use the `gang` policy or the `single` mode',
    ),
    (gang_job(annotations={keys.POLICY: "clique"}), f'{ANN}policy]: Invalid value: "clique": unknown policy; use `gang` or `basic`'),
    (
        gang_job(annotations={keys.POLICY: "basic", keys.MIN_COUNT: "2"}),
        f"{ANN}min-count]: Invalid value: 2: minCount only applies to the gang policy; remove it or set the policy to `gang`",
    ),
    (
        gang_job(annotations={keys.DISRUPTION_MODE: "all"}),
        f"{ANN}policy]: Invalid value: null: required when other gang annotations are set; set it to `gang` or `basic`",
    ),
    (
        gang_job(annotations={keys.POLICY: "gang", keys.TOPOLOGY_KEY: "rack id"}),
        f'{ANN}topology-key]: Invalid value: "rack id": must be a node label key; use a key such as topology.kubernetes.io/zone',
    ),
    (
        gang_job(annotations={keys.MIN_COUNT: "3"}, scheduling={"schedulingPolicy": {"gang": {"minCount": 4}}}),
        f"{ANN}min-count]: Invalid value: 3: contradicts spec.scheduling.schedulingPolicy.gang.minCount (4); set the value in one place only",
    ),
    (
        gang_job(scheduling={"schedulingPolicy": {"gang": {"minCount": 0}}}),
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 0: must be greater than or equal to 1; a gang needs at least one pod",
    ),
    (
        gang_job(scheduling={"schedulingPolicy": {"gang": {"minCount": 4}, "basic": {}}}),
        'spec.scheduling.schedulingPolicy: Invalid value: {"basic": {}, "gang": {"minCount": 4}}: must specify exactly one of: `basic`, `gang`; keep one of them',
    ),
    (
        gang_job(scheduling={"disruptionMode": {"all": {}}}),
        'spec.scheduling.disruptionMode: Invalid value: "all": the disruptionMode `all` is not supported with the basic scheduling policy; use the `gang` policy or the `single` mode',
    ),
    (
        gang_job(
            scheduling={
                "schedulingPolicy": {"gang": {"minCount": 4}},
                "resourceClaims": [{"name": "fabric", "resourceClaimTemplateName": "one-channel"}],
            }
        ),
        'spec.scheduling.resourceClaims[0].name: Invalid value: "fabric": no entry of spec.template.spec.resourceClaims has '
        'this name, so no member would use the claim; add {"name": "fabric", "resourceClaimTemplateName": "one-channel"} to '
        "spec.template.spec.resourceClaims (and to the containers that use it), or remove it here",
    ),
    (
        gang_job(scheduling={"schedulingPolicy": {"gang": {"minCount": 9}}}),
        "spec.scheduling.schedulingPolicy.gang.minCount: Invalid value: 9: must not be greater than parallelism (4); lower it to at most 4 or raise spec.parallelism",
    ),
]


@pytest.mark.parametrize(("job", "message"), BAD_CREATES, ids=range(len(BAD_CREATES)))
def test_bad_gang_jobs_are_refused_with_the_field_and_the_fix(
    cluster: Cluster, operator: Operator, module_namespace: str, job: dict, message: str
) -> None:
    namespace = module_namespace
    proc = _apply(cluster, namespace, job)
    assert proc.returncode != 0, "the Job must not be created"
    denial = proc.stderr.strip().split("denied the request: ", 1)[-1]
    assert denial == message
    assert cluster.kubectl("get", "job", job["metadata"]["name"], "-n", namespace, check=False).returncode != 0


def test_only_min_count_may_change_after_creation(cluster: Cluster, operator: Operator, namespace: str) -> None:
    assert _apply(cluster, namespace, gang_job(annotations=MIN4)).returncode == 0
    changes = [
        (
            {keys.DISRUPTION_MODE: "single"},
            f'{ANN}disruption-mode]: Invalid value: "single": field is immutable; delete and recreate the Job to change it',
        ),
        (
            {keys.TOPOLOGY_KEY: "topology.kubernetes.io/zone"},
            f'{ANN}topology-key]: Invalid value: "topology.kubernetes.io/zone": field is immutable; delete and recreate the Job to change it',
        ),
        (
            {keys.POLICY: "basic", keys.MIN_COUNT: None},
            f'{ANN}policy]: Invalid value: "basic": field is immutable; delete and recreate the Job to change it',
        ),
        (
            {keys.MIN_COUNT: "6"},
            f"{ANN}min-count]: Invalid value: 6: must not be greater than parallelism (4); lower it to at most 4 or raise spec.parallelism",
        ),
    ]
    for change, message in changes:
        patch = json.dumps({"metadata": {"annotations": change}})
        proc = cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", patch, check=False)
        assert proc.returncode != 0, change
        assert proc.stderr.strip().split("denied the request: ", 1)[-1] == message
    removal = json.dumps({"metadata": {"annotations": {k: None for k in keys.INTENT_ANNOTATIONS}}})
    proc = cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", removal, check=False)
    assert "gang scheduling cannot be added to or removed from an existing Job" in proc.stderr
    ok = json.dumps({"metadata": {"annotations": {keys.MIN_COUNT: "2"}}})
    cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", ok)
    assert cluster.get("job", "train", "-n", namespace)["metadata"]["annotations"][keys.MIN_COUNT] == "2"


def test_gang_scheduling_cannot_be_added_to_a_running_job(cluster: Cluster, operator: Operator, namespace: str) -> None:
    assert _apply(cluster, namespace, gang_job()).returncode == 0
    patch = json.dumps({"metadata": {"annotations": MIN4}})
    proc = cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", patch, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().split("denied the request: ", 1)[-1] == (
        f'{ANN}policy]: Invalid value: "gang": gang scheduling cannot be added to or removed from an existing Job; '
        "delete and recreate the Job"
    )


def test_an_unknown_key_cannot_be_added_to_an_existing_job(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """A Job with no Phalanx intent still reaches the webhook when a key under our prefix appears."""
    assert _apply(cluster, namespace, gang_job()).returncode == 0
    patch = json.dumps({"metadata": {"annotations": {"scheduling.phalanx.dev/mincount": "4"}}})
    proc = cluster.kubectl("patch", "job", "train", "-n", namespace, "--type=merge", "-p", patch, check=False)
    assert proc.returncode != 0
    assert proc.stderr.strip().split("denied the request: ", 1)[-1] == (
        f'{ANN}mincount]: Invalid value: "4": {UNKNOWN}; did you mean scheduling.phalanx.dev/min-count?'
    )


RULE = "{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}"


def test_a_gang_job_without_the_disruption_rule_is_admitted_with_a_warning(cluster: Cluster, operator: Operator, namespace: str) -> None:
    job = gang_job(annotations=MIN4)
    del job["spec"]["backoffLimit"]
    proc = _apply(cluster, namespace, job)
    assert proc.returncode == 0, proc.stderr
    assert (
        f"Warning: spec.podFailurePolicy has no rule {RULE}: each member this gang loses to an eviction, a preemption "
        "or a node drained or gone counts against spec.backoffLimit (6) as a failed container does, so the 7th such "
        "loss fails the Job (the members Phalanx takes down with it are not counted); "
        f"recreate the Job with spec.podFailurePolicy: {{rules: [{RULE}]}} "
        '(the policy is immutable; see docs/concepts.md, "When a member of a running gang is lost")'
    ) in proc.stderr, "the API server's default backoffLimit is what the webhook sees"
    assert cluster.get("job", "train", "-n", namespace)["spec"]["template"]["spec"]["schedulingGates"] == [{"name": keys.SCHEDULING_GATE}]
    with_rule = gang_job("train-b", annotations=MIN4)
    with_rule["spec"]["podFailurePolicy"] = IGNORE_DISRUPTIONS
    proc = _apply(cluster, namespace, with_rule)
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr
