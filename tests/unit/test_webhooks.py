"""The webhook configurations: scoped to gang Jobs, reachable by URL locally and by Service in a cluster."""

from __future__ import annotations

import base64
import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import cel
import pytest
import yaml

from phalanx.api import keys
from phalanx.jobs import webhook_rules as job_rules
from phalanx.jobsets import webhook_rules as jobset_rules
from phalanx.kinds import HOOKS, manifest
from phalanx.owners import webhook_config
from phalanx.podgroups import webhook_rules as pod_group_rules


def test_local_endpoint_is_a_url_per_handler() -> None:
    configs = webhook_config.configurations(webhook_config.Endpoint(url="https://127.0.0.1:9443"), b"CA", "phalanx-system", HOOKS)
    (mutating, pods, jobsets, lwss, lws_pods, labelled) = configs["MutatingWebhookConfiguration"]["webhooks"]
    (validating, validating_jobsets, validating_lwss, validating_groups) = configs["ValidatingWebhookConfiguration"]["webhooks"]
    assert validating_groups["clientConfig"]["url"] == "https://127.0.0.1:9443/podgroup-validate"
    assert validating_groups["rules"] == [
        {
            "apiGroups": ["scheduling.phalanx.dev"],
            "apiVersions": ["v1beta1"],
            "resources": ["podgroups"],
            "operations": ["CREATE", "UPDATE"],
            "scope": "Namespaced",
        }
    ]
    assert labelled["clientConfig"]["url"] == "https://127.0.0.1:9443/pod-group-member"
    assert mutating["clientConfig"] == {"caBundle": base64.b64encode(b"CA").decode(), "url": "https://127.0.0.1:9443/job-gang-mutate"}
    assert pods["clientConfig"]["url"] == "https://127.0.0.1:9443/pod-group-claims"
    assert validating["clientConfig"]["url"] == "https://127.0.0.1:9443/job-gang-validate"
    assert jobsets["clientConfig"]["url"] == "https://127.0.0.1:9443/jobset-gang-mutate"
    assert validating_jobsets["clientConfig"]["url"] == "https://127.0.0.1:9443/jobset-gang-validate"
    assert lwss["clientConfig"]["url"] == "https://127.0.0.1:9443/lws-gang-mutate"
    assert validating_lwss["clientConfig"]["url"] == "https://127.0.0.1:9443/lws-gang-validate"
    assert lws_pods["clientConfig"]["url"] == "https://127.0.0.1:9443/lws-gang-member"
    assert lwss["rules"] == validating_lwss["rules"]
    assert lwss["rules"][0]["apiGroups"] == ["leaderworkerset.x-k8s.io"] and lwss["rules"][0]["resources"] == ["leaderworkersets"]
    assert (
        jobsets["rules"]
        == validating_jobsets["rules"]
        == [
            {
                "apiGroups": ["jobset.x-k8s.io"],
                "apiVersions": ["v1alpha2"],
                "resources": ["jobsets"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ]
    )


def test_in_cluster_endpoint_is_a_service() -> None:
    endpoint = webhook_config.Endpoint(service_namespace="phalanx-system", service_name="phalanx-webhook")
    configs = webhook_config.configurations(endpoint, b"CA", "phalanx-system", HOOKS)
    client = configs["ValidatingWebhookConfiguration"]["webhooks"][0]["clientConfig"]
    assert "url" not in client
    assert client["service"] == {"namespace": "phalanx-system", "name": "phalanx-webhook", "port": 443, "path": "/job-gang-validate"}


def test_blast_radius_is_gang_jobs_outside_system_namespaces() -> None:
    configs = webhook_config.configurations(webhook_config.Endpoint(url="https://x"), b"CA", "phalanx-system", HOOKS)
    (_, pods, _, _, lws_pods, labelled) = configs["MutatingWebhookConfiguration"]["webhooks"]
    assert (
        pods["rules"]
        == labelled["rules"]
        == lws_pods["rules"]
        == [{"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"], "scope": "Namespaced"}]
    )
    # only pods that carry the pod-group label reach it, and those fail closed (ungated, they would run alone)
    assert labelled["objectSelector"] == {"matchExpressions": [{"key": keys.POD_GROUP_LABEL, "operator": "Exists"}]}
    # and only pods of a LeaderWorkerSet reach the LWS kind's (whether their LWS asks for a gang is read there)
    assert lws_pods["objectSelector"] == {"matchExpressions": [{"key": "leaderworkerset.sigs.k8s.io/name", "operator": "Exists"}]}
    assert "matchConditions" not in labelled and labelled["failurePolicy"] == "Fail"
    assert labelled.get("reinvocationPolicy", "Never") == "Never", "a gated Job pod seen again would look like two gangs"
    assert pods["matchConditions"] == [{"name": "group-claims", "expression": job_rules.POD_MATCH_CONDITION}]
    assert (
        pods["failurePolicy"] == "Fail"
        and pods["namespaceSelector"] == configs["ValidatingWebhookConfiguration"]["webhooks"][0]["namespaceSelector"]
    )
    for config in configs.values():
        hook = config["webhooks"][0]
        assert hook["failurePolicy"] == "Fail"
        assert hook["rules"] == [
            {
                "apiGroups": ["batch"],
                "apiVersions": ["v1"],
                "resources": ["jobs"],
                "operations": ["CREATE", "UPDATE"],
                "scope": "Namespaced",
            }
        ]
        (expr,) = hook["namespaceSelector"]["matchExpressions"]
        assert (expr["operator"], expr["values"]) == ("NotIn", ["kube-system", "phalanx-system"])
        (condition,) = hook["matchConditions"]
        assert condition["expression"] == job_rules.MATCH_CONDITION


GANG_JOB = {
    "metadata": {"name": "train", "namespace": "ml", "annotations": {"scheduling.phalanx.dev/min-count": "4", "team": "a"}},
    "spec": {"parallelism": 4, "template": {"spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
}
GATED_GANG = {
    "metadata": GANG_JOB["metadata"],
    "spec": {"parallelism": 4, "template": {"spec": {"schedulingGates": [{"name": "scheduling.phalanx.dev/gang"}]}}},
}
PLAIN_JOB = {"metadata": {"name": "etl", "namespace": "ml", "annotations": {"team": "a"}}, "spec": {"parallelism": 4}}


def _changed(job: dict[str, Any], change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    out = copy.deepcopy(job)
    change(out)
    return out


@pytest.mark.parametrize(
    ("operation", "new", "old", "sent"),
    [
        pytest.param("CREATE", GANG_JOB, None, True, id="create-gang-annotations"),
        pytest.param(
            "CREATE",
            _changed(PLAIN_JOB, lambda j: j["spec"].update(scheduling={"schedulingPolicy": {"gang": {"minCount": 2}}})),
            None,
            True,
            id="create-spec-scheduling",
        ),
        pytest.param("CREATE", PLAIN_JOB, None, False, id="create-plain"),
        pytest.param(
            "CREATE",
            _changed(PLAIN_JOB, lambda j: j["metadata"]["annotations"].update({"scheduling.phalanx.dev/mincount": "3"})),
            None,
            True,
            id="create-typo-only",
        ),
        pytest.param(
            "UPDATE",
            _changed(PLAIN_JOB, lambda j: j["metadata"]["annotations"].update({"scheduling.phalanx.dev/mincount": "3"})),
            PLAIN_JOB,
            True,
            id="typo-added",
        ),
        pytest.param("UPDATE", _changed(PLAIN_JOB, lambda j: j["spec"].update(parallelism=8)), PLAIN_JOB, False, id="plain-parallelism"),
        pytest.param(
            "UPDATE",
            _changed(GANG_JOB, lambda j: j["metadata"]["annotations"].update({"scheduling.phalanx.dev/min-count": "3"})),
            GANG_JOB,
            True,
            id="gang-min-count",
        ),
        pytest.param("UPDATE", _changed(GANG_JOB, lambda j: j["spec"].update(parallelism=2)), GANG_JOB, True, id="gang-parallelism"),
        pytest.param(
            "UPDATE",
            _changed(GANG_JOB, lambda j: j["metadata"]["annotations"].pop("scheduling.phalanx.dev/min-count")),
            GANG_JOB,
            True,
            id="gang-removed",
        ),
        pytest.param("UPDATE", _changed(GANG_JOB, lambda j: j["spec"].update(completions=2)), GANG_JOB, True, id="gang-completions"),
        pytest.param(
            "UPDATE",
            _changed(GATED_GANG, lambda j: j["spec"]["template"]["spec"].pop("schedulingGates")),
            GATED_GANG,
            True,
            id="gate-removed",
        ),
        pytest.param(
            "UPDATE",
            _changed(GATED_GANG, lambda j: j["spec"]["template"]["spec"].update(schedulingGates=[{"name": "example.com/other"}])),
            GATED_GANG,
            True,
            id="gate-replaced",
        ),
        pytest.param(
            "UPDATE",
            _changed(GATED_GANG, lambda j: j["spec"]["template"]["spec"]["schedulingGates"].append({"name": "example.com/other"})),
            GATED_GANG,
            False,
            id="gate-kept",
        ),
        pytest.param(
            "UPDATE",
            _changed(PLAIN_JOB, lambda j: j["spec"].update(template={"spec": {"schedulingGates": [{"name": "example.com/x"}]}})),
            PLAIN_JOB,
            False,
            id="plain-gates",
        ),
        pytest.param(
            "UPDATE",
            _changed(GANG_JOB, lambda j: j["metadata"].update(finalizers=["batch.kubernetes.io/job-tracking"])),
            GANG_JOB,
            False,
            id="gang-finalizer-only",
        ),
        pytest.param(
            "UPDATE",
            _changed(GANG_JOB, lambda j: j["metadata"]["annotations"].update(team="b")),
            GANG_JOB,
            False,
            id="gang-other-annotation",
        ),
        pytest.param(
            "UPDATE",
            _changed(GANG_JOB, lambda j: j["metadata"].update(deletionTimestamp="2026-11-29T00:00:00Z", finalizers=[], annotations={})),
            GANG_JOB,
            False,
            id="gang-being-deleted",
        ),
    ],
)
def test_match_condition_sends_only_gang_changes(operation: str, new: dict, old: dict | None, sent: bool) -> None:
    """Evaluated as the API server would: whatever is not sent never waits for Phalanx, even when it is down."""
    verdict = cel.compile(job_rules.MATCH_CONDITION).execute({"request": {"operation": operation}, "object": new, "oldObject": old})
    assert verdict is sent


def _jobset(annotations: dict[str, str], gates: list[dict[str, str]]) -> dict:
    rjob = {"name": "w", "replicas": 1, "template": {"spec": {"template": {"spec": {"schedulingGates": gates}}}}}
    return {"metadata": {"name": "train", "annotations": annotations}, "spec": {"replicatedJobs": [rjob, copy.deepcopy(rjob)]}}


GANG = {"scheduling.phalanx.dev/policy": "gang"}
GATE = [{"name": "scheduling.phalanx.dev/gang"}]


@pytest.mark.parametrize(
    ("operation", "new", "old", "sent"),
    [
        pytest.param("CREATE", _jobset(GANG, []), None, True, id="create-gang"),
        pytest.param("CREATE", _jobset({"team": "a"}, []), None, False, id="create-plain"),
        pytest.param("UPDATE", _jobset({**GANG, "team": "b"}, GATE), _jobset({**GANG, "team": "a"}, GATE), False, id="other-annotation"),
        pytest.param("UPDATE", _jobset({**GANG, "scheduling.phalanx.dev/min-count": "2"}, GATE), _jobset(GANG, GATE), True, id="min-count"),
        pytest.param("UPDATE", _jobset(GANG, []), _jobset(GANG, GATE), True, id="gate-removed"),
        pytest.param("UPDATE", _jobset({"team": "a"}, []), _jobset({"team": "a"}, GATE), False, id="plain-gate-removed"),
    ],
)
def test_only_gang_jobset_changes_reach_the_jobset_webhooks(operation: str, new: dict, old: dict | None, sent: bool) -> None:
    verdict = cel.compile(jobset_rules.MATCH_CONDITION).execute({"request": {"operation": operation}, "object": new, "oldObject": old})
    assert verdict is sent


def _group(annotations: dict[str, str], made_for: str | None = None) -> dict:
    labels = {"scheduling.phalanx.dev/job-name": made_for} if made_for else {"team": "a"}
    return {"metadata": {"name": "train", "labels": labels, "annotations": annotations}, "spec": {}}


DEADLINE = {"scheduling.phalanx.dev/ready-deadline": "5m"}


@pytest.mark.parametrize(
    ("operation", "new", "old", "sent"),
    [
        pytest.param("CREATE", _group(DEADLINE), None, True, id="create-annotated"),
        pytest.param("CREATE", _group({"team": "a"}), None, False, id="create-plain"),
        pytest.param("CREATE", _group(DEADLINE, made_for="train"), None, False, id="made-by-phalanx"),
        pytest.param("UPDATE", _group({**DEADLINE, "team": "b"}), _group(DEADLINE), False, id="other-annotation"),
        pytest.param("UPDATE", _group({"scheduling.phalanx.dev/ready-deadline": "1m"}), _group(DEADLINE), True, id="deadline-changed"),
        pytest.param("UPDATE", _group({}), _group(DEADLINE), True, id="deadline-removed"),
    ],
)
def test_only_users_podgroups_changing_our_annotations_reach_the_podgroup_webhook(
    operation: str, new: dict, old: dict | None, sent: bool
) -> None:
    verdict = cel.compile(pod_group_rules.MATCH_CONDITION).execute({"request": {"operation": operation}, "object": new, "oldObject": old})
    assert verdict is sent


CLAIMS = {"scheduling.phalanx.dev/resource-claims": "[]"}


@pytest.mark.parametrize(
    ("pod", "sent"),
    [
        pytest.param({"metadata": {"annotations": CLAIMS}, "spec": {"schedulingGates": GATE}}, True, id="gated-member-with-group-claims"),
        pytest.param({"metadata": {"annotations": CLAIMS}, "spec": {}}, False, id="ungated"),
        pytest.param({"metadata": {"annotations": {"team": "a"}}, "spec": {"schedulingGates": GATE}}, False, id="gang-member-without"),
        pytest.param({"metadata": {}, "spec": {}}, False, id="any-other-pod"),
    ],
)
def test_only_gated_members_with_group_claims_reach_the_pod_webhook(pod: dict, sent: bool) -> None:
    assert cel.compile(job_rules.POD_MATCH_CONDITION).execute({"object": pod}) is sent


ROOT = Path(__file__).parents[2]


def test_the_shipped_configurations_are_the_generated_ones() -> None:
    """manifests/webhooks.yaml is what the code would write: `./task webhooks` regenerates it."""
    assert (ROOT / "manifests" / "webhooks.yaml").read_text() == manifest()
    shipped = list(yaml.safe_load_all((ROOT / "manifests" / "webhooks.yaml").read_text()))
    assert all("caBundle" not in hook["clientConfig"] for doc in shipped for hook in doc["webhooks"]), "the operator sets it"
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    assert {"webhooks.yaml", "admission-policy.yaml", "rbac.yaml"} <= set(kustomization["resources"])


def test_in_cluster_the_operator_patches_only_the_ca_bundle() -> None:
    (mutating, _) = webhook_config.configurations(webhook_config.IN_CLUSTER, b"CA", "phalanx-system", HOOKS).values()
    patch = webhook_config.ca_bundle_patch(mutating, b"CA")
    assert patch == [
        {"op": "test", "path": "/webhooks/0/name", "value": "jobs-mutate.scheduling.phalanx.dev"},
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": base64.b64encode(b"CA").decode()},
        {"op": "test", "path": "/webhooks/1/name", "value": "pods-group-claims.scheduling.phalanx.dev"},
        {"op": "add", "path": "/webhooks/1/clientConfig/caBundle", "value": base64.b64encode(b"CA").decode()},
        {"op": "test", "path": "/webhooks/2/name", "value": "jobsets-mutate.scheduling.phalanx.dev"},
        {"op": "add", "path": "/webhooks/2/clientConfig/caBundle", "value": base64.b64encode(b"CA").decode()},
        {"op": "test", "path": "/webhooks/3/name", "value": "leaderworkersets-mutate.scheduling.phalanx.dev"},
        {"op": "add", "path": "/webhooks/3/clientConfig/caBundle", "value": base64.b64encode(b"CA").decode()},
        {"op": "test", "path": "/webhooks/4/name", "value": "pods-lws-member.scheduling.phalanx.dev"},
        {"op": "add", "path": "/webhooks/4/clientConfig/caBundle", "value": base64.b64encode(b"CA").decode()},
        {"op": "test", "path": "/webhooks/5/name", "value": "pods-group-member.scheduling.phalanx.dev"},
        {"op": "add", "path": "/webhooks/5/clientConfig/caBundle", "value": base64.b64encode(b"CA").decode()},
    ]
