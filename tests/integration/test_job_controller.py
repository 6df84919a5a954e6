"""The Job controller against the real control plane: Workload and PodGroup per gang Job, kept in step.

Slices: the session cluster's, from dra-example-driver's plugin.
"""

from __future__ import annotations

import json
import logging
import time

import pytest
from conftest import OPERATOR_NAMESPACE, Cluster, Operator, wait_for
from kubernetes_asyncio import client, config

from jobs import MIN4, as_json, gang_job
from phalanx.api import keys
from phalanx.jobs import objects
from phalanx.kube.client import Kube, custom_path
from phalanx.owners import controller
from phalanx.owners.objects import GangSource

# kube-controller-manager's garbage collector learns new CRDs on a 30 s discovery cycle.
GC_DISCOVERY_TIMEOUT = 75


def _items(cluster: Cluster, kind: str, namespace: str) -> list[dict]:
    return cluster.get(kind, "-n", namespace)["items"]


def _job_events(cluster: Cluster, namespace: str, name: str) -> list[tuple[str, str, str]]:
    events = cluster.get("events", "-n", namespace, "--field-selector", f"involvedObject.kind=Job,involvedObject.name={name}")
    return [(e["type"], e["reason"], e["message"]) for e in events["items"]]


def test_the_articles_gang_job_gets_a_workload_a_podgroup_and_gated_pods(cluster: Cluster, operator: Operator, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=as_json(gang_job("train-a", annotations=MIN4)))
    job = cluster.get("job", "train-a", "-n", namespace)
    uid = job["metadata"]["uid"]

    (workload,) = wait_for(lambda: _items(cluster, "workloads.scheduling.phalanx.dev", namespace), "Workload")
    (pod_group,) = wait_for(lambda: _items(cluster, "podgroups.scheduling.phalanx.dev", namespace), "PodGroup")
    assert workload["metadata"]["name"].startswith("train-a-")
    assert workload["metadata"]["ownerReferences"] == [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "train-a", "uid": uid, "controller": True}
    ]
    assert workload["spec"] == {
        "controllerRef": {"apiGroup": "batch", "kind": "Job", "name": "train-a"},
        "podGroupTemplates": [{"name": "train-a-pgt-0", "schedulingPolicy": {"gang": {"minCount": 4}}, "disruptionMode": {"all": {}}}],
    }
    assert (
        pod_group["metadata"]["name"] == f"{workload['metadata']['name']}-train-a-pgt-0-" + pod_group["metadata"]["name"].rsplit("-", 1)[-1]
    )
    assert pod_group["spec"] == {
        "workloadRef": {"workloadName": workload["metadata"]["name"], "templateName": "train-a-pgt-0"},
        "schedulingPolicy": {"gang": {"minCount": 4}},
        "disruptionMode": {"all": {}},
    }
    owners = {(o["kind"], o["name"]) for o in pod_group["metadata"]["ownerReferences"]}
    assert owners == {("Job", "train-a"), ("Workload", workload["metadata"]["name"])}

    def four_pods() -> list[dict] | None:
        pods = _items(cluster, "pods", namespace)
        return pods if len(pods) == 4 else None

    pods = wait_for(four_pods, "4 pods")
    for pod in pods:
        assert pod["spec"]["schedulingGates"] == [{"name": "scheduling.phalanx.dev/gang"}]
        assert pod["metadata"]["labels"][keys.TEMPLATE_LABEL] == "train-a-pgt-0"
        assert "nodeName" not in pod["spec"]
        assert not any(k.startswith("kopf.") for k in pod["metadata"].get("annotations", {})), "Kopf writes nothing to pods"
        assert not [f for f in pod["metadata"].get("finalizers", []) if "kopf" in f]
    assert not any(k.startswith("kopf.") for k in job["metadata"].get("annotations", {}))

    table = cluster.kubectl("get", "podgroups.scheduling.phalanx.dev", "-n", namespace).stdout.splitlines()
    assert table[0].split() == ["NAME", "POLICY", "WORKLOAD", "STATUS", "BOUND", "DISRUPTION", "AGE"]
    assert table[1].split()[:3] == [pod_group["metadata"]["name"], "Gang", workload["metadata"]["name"]]
    assert table[1].split()[3] in ("Pending", "Unschedulable"), table[1]
    reasons = {reason for _, reason, _ in _job_events(cluster, namespace, "train-a")}
    assert {"WorkloadCreated", "PodGroupCreated"} <= reasons


def test_deleting_the_job_removes_workload_and_podgroup(cluster: Cluster, operator: Operator, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=as_json(gang_job(annotations=MIN4)))
    wait_for(lambda: _items(cluster, "podgroups.scheduling.phalanx.dev", namespace), "PodGroup")
    cluster.kubectl("delete", "job", "train", "-n", namespace, "--cascade=background")
    wait_for(
        lambda: (
            not _items(cluster, "podgroups.scheduling.phalanx.dev", namespace)
            and not _items(cluster, "workloads.scheduling.phalanx.dev", namespace)
        ),
        "garbage collection of Workload and PodGroup",
        timeout=GC_DISCOVERY_TIMEOUT,
    )


def test_a_recreated_job_gets_new_objects(cluster: Cluster, operator: Operator, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=as_json(gang_job(annotations=MIN4)))
    (first,) = wait_for(lambda: _items(cluster, "podgroups.scheduling.phalanx.dev", namespace), "PodGroup")
    cluster.kubectl("delete", "job", "train", "-n", namespace, "--cascade=background", "--wait=true")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=as_json(gang_job(annotations=MIN4)))
    second = wait_for(
        lambda: [
            p for p in _items(cluster, "podgroups.scheduling.phalanx.dev", namespace) if p["metadata"]["name"] != first["metadata"]["name"]
        ],
        "the new Job's PodGroup",
    )
    assert len(second) == 1


def test_min_count_updates_reach_workload_and_podgroup(cluster: Cluster, operator: Operator, namespace: str) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=as_json(gang_job(annotations=MIN4)))
    wait_for(lambda: _items(cluster, "podgroups.scheduling.phalanx.dev", namespace), "PodGroup")
    cluster.kubectl(
        "patch", "job", "train", "-n", namespace, "--type=merge", "-p", json.dumps({"metadata": {"annotations": {keys.MIN_COUNT: "3"}}})
    )

    def updated() -> bool:
        (pg,) = _items(cluster, "podgroups.scheduling.phalanx.dev", namespace)
        (wl,) = _items(cluster, "workloads.scheduling.phalanx.dev", namespace)
        return (
            pg["spec"]["schedulingPolicy"]["gang"]["minCount"] == 3
            and wl["spec"]["podGroupTemplates"][0]["schedulingPolicy"]["gang"]["minCount"] == 3
        )

    wait_for(updated, "minCount 3 on both objects")
    assert ("Normal", "MinCountUpdated") in {(t, r) for t, r, _ in _job_events(cluster, namespace, "train")}


def test_a_gang_job_admitted_without_the_webhook_is_reported(cluster: Cluster, operator: Operator) -> None:
    """The operator's own namespace is outside the webhook's scope, as a bypass would be."""
    name = f"ungated-{int(time.time() * 1000) % 100000}"
    cluster.kubectl(
        "apply", "-n", OPERATOR_NAMESPACE, "-f", "-", stdin=as_json(gang_job(name, annotations={keys.POLICY: "gang", keys.MIN_COUNT: "4"}))
    )
    try:

        def condition() -> dict | None:
            for pg in _items(cluster, "podgroups.scheduling.phalanx.dev", OPERATOR_NAMESPACE):
                if pg["metadata"]["labels"].get("scheduling.phalanx.dev/job-name") == name:
                    conds = {c["type"]: c for c in pg.get("status", {}).get("conditions", [])}
                    return conds.get("PodsGated")
            return None

        gated = wait_for(condition, "PodsGated condition")
        assert (gated["status"], gated["reason"]) == ("False", "PodsNotGated")
        assert "lacks the scheduling gate scheduling.phalanx.dev/gang" in gated["message"]
        warnings = [m for t, r, m in _job_events(cluster, OPERATOR_NAMESPACE, name) if (t, r) == ("Warning", "GangNotEnforced")]
        assert warnings and "delete and recreate the Job" in warnings[0]
    finally:
        cluster.kubectl("delete", "job", name, "-n", OPERATOR_NAMESPACE, "--cascade=background", check=False)


async def test_a_podgroup_gone_before_its_gating_condition_is_written_ends_the_reconcile_quietly(
    cluster: Cluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A Job deleted while one of its events is reconciled: the garbage collector takes its PodGroup between the
    reconcile's read and its status write (seen at 2,048 ranks, a Kopf handler failing with a 404 traceback on
    every such deletion). The write's 404 ends the reconcile with a line that says why, not an error."""
    source = _source_of_no_job(namespace, "gone")
    async with await _api(cluster) as api:
        kube = Kube(api)
        assert await kube.get(custom_path("podgroups", namespace, source.pod_group_name)) is None  # the scenario
        with caplog.at_level(logging.INFO, logger="test.reconcile"):
            await controller._report_gating(kube, source.reference(), source, {"metadata": {}}, logging.getLogger("test.reconcile"))
    assert any("went before its PodsGated condition was written" in r.getMessage() for r in caplog.records), caplog.text


async def test_an_event_of_a_job_already_deleted_makes_no_workload_or_podgroup(
    cluster: Cluster, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Kopf's events can be minutes old on a busy operator: one answered after its Job was deleted made the Workload
    and PodGroup again, which the garbage collector took again, over and over (a 2,048-rank Job's status updates).
    The owner is read fresh before either is made."""
    source = _source_of_no_job(namespace, "deleted")
    async with await _api(cluster) as api:
        kube = Kube(api)
        with caplog.at_level(logging.INFO, logger="test.reconcile"):
            await controller.reconcile(kube, source, logging.getLogger("test.reconcile"))
    assert any("is gone or going: no Workload or PodGroup made" in r.getMessage() for r in caplog.records), caplog.text
    assert not _items(cluster, "workloads.scheduling.phalanx.dev", namespace)
    assert not _items(cluster, "podgroups.scheduling.phalanx.dev", namespace)


def _source_of_no_job(namespace: str, name: str) -> GangSource:
    """The gang source of a Job that is not on the API server (as a late event's is, once its Job was deleted)."""
    job = gang_job(name, annotations=MIN4)
    job["metadata"] |= {"namespace": namespace, "uid": "00000000-0000-0000-0000-00000000dead"}
    source = objects.from_job(job)
    assert source is not None
    return source


async def _api(cluster: Cluster) -> client.ApiClient:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)
