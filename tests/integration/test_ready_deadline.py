"""The ready deadline on the local control plane: a released gang with a member that never gets Ready is torn down as a
unit, counted, named with its container state, and admitted again after a back-off that doubles.

A member that never gets Ready: kwok runs only nodes annotated `kwok.x-k8s.io/node=fake` (localcluster/kwokctl.yaml),
so a Node created here without it is one nobody runs: its pods are bound and stay Pending. The test plays its kubelet:
it keeps the node's Ready condition fresh and reports the member's container as waiting on ErrImageNeverPull, as a
kubelet does for an image it may not pull.
"""

from __future__ import annotations

import datetime
import json
import time
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Cluster, started_operator, wait_for

from jobs import IGNORE_DISRUPTIONS
from phalanx.api import keys
from phalanx_dev.localcluster import operatorproc

LIMBO = "limbo"
LABEL = "phalanx-test/ready-deadline"


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _heartbeat(cluster: Cluster) -> None:
    status = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "lastHeartbeatTime": _now()}]}}
    cluster.kubectl("patch", "node", LIMBO, "--subresource=status", "--type=strategic", "-p", json.dumps(status))


@pytest.fixture
def limbo(cluster: Cluster) -> Iterator[None]:
    """A node nobody runs, and worker-3, both labelled for the gang's nodeSelector."""
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": LIMBO, "labels": {"kubernetes.io/hostname": LIMBO, LABEL: "yes"}},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(node))
    capacity = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    cluster.kubectl(
        "patch", "node", LIMBO, "--subresource=status", "-p", json.dumps({"status": {"capacity": capacity, "allocatable": capacity}})
    )
    _heartbeat(cluster)
    cluster.kubectl("label", "node", "worker-3", f"{LABEL}=yes", "--overwrite")
    try:
        yield
    finally:
        cluster.kubectl("label", "node", "worker-3", f"{LABEL}-")
        cluster.kubectl("delete", "node", LIMBO, "--ignore-not-found")


@pytest.fixture
def operator_with_backoff(cluster: Cluster) -> Iterator[operatorproc.OperatorProcess]:
    assert cluster.local is not None, "starts an operator of its own"
    yield from started_operator(cluster.local, extra_args=("--ready-backoff", "2", "--ready-backoff-max", "8"))


def _job(name: str) -> dict[str, Any]:
    """Two cpu-only ranks on two nodes of the label: one lands on worker-3 (kwok: Ready at once), one on limbo."""
    spread = {"labelSelector": {"matchLabels": {"app": name}}, "topologyKey": "kubernetes.io/hostname"}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": {keys.MIN_COUNT: "2", keys.READY_DEADLINE: "3"}},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "completionMode": "Indexed",
            "backoffLimit": 6,
            "podFailurePolicy": IGNORE_DISRUPTIONS,
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "nodeSelector": {LABEL: "yes"},
                    "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [spread]}},
                    "containers": [
                        {
                            "name": "rank",
                            "image": "never-pulled:1",
                            "command": ["sleep", "3600"],
                            "resources": {"requests": {"cpu": "100m"}},
                        }
                    ],
                },
            },
        },
    }


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else {}


def _play_kubelet(cluster: Cluster, namespace: str, reported: set[str]) -> None:
    """Keep limbo Ready, and report each member bound there as waiting on an image it may not pull."""
    _heartbeat(cluster)
    for pod in cluster.get("pods", "-n", namespace, "--field-selector", f"spec.nodeName={LIMBO}")["items"]:
        uid, name = pod["metadata"]["uid"], pod["metadata"]["name"]
        if pod["metadata"].get("deletionTimestamp"):  # stopped as a kubelet stops it: Failed, then gone
            if pod["status"].get("phase") != "Failed":
                cluster.kubectl("patch", "pod", "-n", namespace, name, "--subresource=status", "-p", '{"status": {"phase": "Failed"}}')
            cluster.kubectl("delete", "pod", "-n", namespace, name, "--grace-period=0", "--force", "--wait=false", check=False)
            continue
        if uid in reported:
            continue
        waiting = {"reason": "ErrImageNeverPull", "message": 'Container image "never-pulled:1" is not present with pull policy of Never'}
        status = {
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
            "containerStatuses": [
                {"name": "rank", "image": "never-pulled:1", "imageID": "", "ready": False, "restartCount": 0, "state": {"waiting": waiting}}
            ],
        }
        cluster.kubectl(
            "patch", "pod", "-n", namespace, pod["metadata"]["name"], "--subresource=status", "-p", json.dumps({"status": status})
        )
        reported.add(uid)


def _timeouts(port: int) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith("phalanx_podgroup_ready_timeouts_total "):
                return float(line.split()[1])
    return 0.0


def test_a_gang_with_a_member_never_ready_is_torn_down_at_its_deadline_and_admitted_again_after_a_doubling_backoff(
    cluster: Cluster, operator_with_backoff: operatorproc.OperatorProcess, namespace: str, limbo: None
) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(_job("stuck")))
    reported: set[str] = set()

    def bound_both() -> list[dict[str, Any]] | None:
        _play_kubelet(cluster, namespace, reported)
        pods = [p for p in cluster.get("pods", "-n", namespace, "-l", "app=stuck")["items"] if p["spec"].get("nodeName")]
        return pods if len(pods) == 2 else None

    first = wait_for(bound_both, "both ranks bound, one on limbo")
    assert {p["spec"]["nodeName"] for p in first} == {"worker-3", LIMBO}
    on_limbo = next(p["metadata"]["name"] for p in first if p["spec"]["nodeName"] == LIMBO)
    released = time.monotonic()

    def timed_out(attempts: int) -> dict[str, Any] | None:
        _play_kubelet(cluster, namespace, reported)
        record = (_pod_group(cluster, namespace, "stuck").get("status") or {}).get("readiness") or {}
        return record if record.get("attempts") == attempts else None

    record = wait_for(lambda: timed_out(1), "the first ready deadline timeout recorded", timeout=30)
    took = time.monotonic() - released
    assert record["member"] == on_limbo, record
    assert record["reason"].startswith("container rank waiting ErrImageNeverPull"), record
    # torn down as a unit: the rank that was Ready on worker-3 goes too
    gone = {p["metadata"]["uid"] for p in first}
    wait_for(
        lambda: (
            not [
                p
                for p in cluster.get("pods", "-n", namespace, "-l", "app=stuck")["items"]
                if p["metadata"]["uid"] in gone
                and not p["metadata"].get("deletionTimestamp")
                and p["status"].get("phase") not in ("Failed", "Succeeded")
            ]
        ),
        "both first ranks taken down",
    )
    # the condition says so only until the group is admitted again, 2 s later; the Event stays
    events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.kind=PodGroup,reason=PodsReadyTimeout")["items"]
    assert [e["type"] for e in events] == ["Warning"] and on_limbo in events[0]["message"], events
    assert _timeouts(operator_with_backoff.metrics_port) == 1

    # admitted again (after the Job controller's own back-off), and timed out again: the back-off doubles
    record = wait_for(lambda: timed_out(2), "the second release timed out too", timeout=120)
    first_wait = datetime.datetime.fromisoformat(record["notBefore"]) - datetime.datetime.fromisoformat(record["timedOutAt"])
    assert 3 <= first_wait.total_seconds() <= 5, record  # 2 s x 2^(2-1), to the second
    assert record["member"] != on_limbo and record["reason"].startswith("container rank waiting ErrImageNeverPull"), record
    assert _timeouts(operator_with_backoff.metrics_port) == 2
    print(f"first timeout recorded {took:.1f}s after both ranks were bound (deadline 3s)")
