"""The queue's order on the local control plane: when devices free up, the higher-priority waiting gang gets them,
and no pod of a lower one is released or bound in between (it would only be preempted again).

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import bound_pods, gpu_gang, one_gpu_pod_spec
from phalanx.api import keys
from phalanx_dev.localcluster import demo


@pytest.fixture
def priorities(cluster: Cluster, namespace: str) -> Iterator[dict[str, str]]:
    values = {"low": 100, "high": 10000, "top": 1000000}
    names = {k: f"{k}-{namespace}" for k in values}
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": names[k]}, "value": v}
        for k, v in values.items()
    ]
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": classes}))
    yield names
    cluster.kubectl("delete", "priorityclass", *names.values(), "--ignore-not-found")


def _apply(cluster: Cluster, namespace: str, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _condition(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    conds = ((items[0].get("status") or {}).get("conditions") or []) if items else []
    return next((c for c in conds if c["type"] == keys.INITIALLY_SCHEDULED), {})


class PodWatch:
    """Every version of every pod of one Job the API server shows, from a list and an unbroken watch after it
    (`kubectl get --watch`), collected in a thread: a pod released and taken down again between two polls is seen."""

    def __init__(self, cluster: Cluster, namespace: str, job: str) -> None:
        fields = "{.type} {.object.metadata.name} {.object.spec.schedulingGates[*].name} node={.object.spec.nodeName}"
        args = ["get", "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}", "--watch", "--output-watch-events"]
        self.proc = subprocess.Popen(
            [cluster.kubectl_binary, *args, "-o", "jsonpath=" + fields + '{"\\n"}'],
            env=dict(os.environ, KUBECONFIG=str(cluster.kubeconfig)),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.strip())

    def stop(self) -> list[str]:
        self.proc.terminate()
        self.proc.wait(timeout=10)
        self.thread.join(timeout=10)
        return self.lines

    def released(self) -> list[str]:
        """Versions of a pod whose gate is lifted or that is bound to a node."""
        return [line for line in self.lines if keys.SCHEDULING_GATE not in line or not line.endswith("node=")]


def test_freed_devices_go_to_the_higher_priority_gang_and_no_lower_pod_is_released_meanwhile(
    cluster: Cluster, operator: Operator, namespace: str, priorities: dict[str, str]
) -> None:
    """6 GPUs, all held by pods no gang may preempt; a 4-rank gang of priority 100 and one of 10000 wait, each would
    fit alone once they go, not both. The blockers go at once: the high gang runs, and not one pod of the low gang
    is released or bound at any moment in between (watched without a gap)."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    blockers = []
    for i in range(6):
        spec = one_gpu_pod_spec()
        spec["priorityClassName"] = priorities["top"]
        blockers.append(
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"blocker-{i}", "labels": {"app": "blocker"}}, "spec": spec}
        )
    _apply(cluster, namespace, *blockers)
    wait_for(
        lambda: all(p["spec"].get("nodeName") for p in cluster.get("pods", "-n", namespace, "-l", "app=blocker")["items"]), "blockers bound"
    )
    _apply(cluster, namespace, gpu_gang("low", 4, mode="all", priority_class=priorities["low"]))
    wait_for(lambda: _condition(cluster, namespace, "low").get("reason") == "Unschedulable", "low waits, short of devices")
    _apply(cluster, namespace, gpu_gang("high", 4, mode="all", priority_class=priorities["high"]))
    wait_for(lambda: _condition(cluster, namespace, "high").get("reason") == "Unschedulable", "high waits, short of devices")

    watch = PodWatch(cluster, namespace, "low")
    wait_for(lambda: len(watch.lines) >= 4, "the watch lists low's 4 pods")
    cluster.kubectl("delete", "pods", "-n", namespace, "-l", "app=blocker", "--wait=false")
    started = time.monotonic()
    high = bound_pods(cluster, namespace, "high", 4)
    took = time.monotonic() - started
    time.sleep(3)  # long enough for a released low pod to be bound, or preempted and replaced
    lines = watch.stop()

    assert len(lines) >= 4, lines
    assert not watch.released(), f"a low-priority pod was released or bound while the high gang got its room: {watch.released()}"
    assert len({p["spec"]["nodeName"] for p in high}) >= 2, "the high gang runs on the freed devices"
    low = _condition(cluster, namespace, "low")
    assert low.get("reason") == "Unschedulable" and "2 free of 6" in low["message"], low
    events = cluster.get("events", "-n", namespace, "--field-selector", "reason=PreemptedByGang")["items"]
    assert not events, "nothing was preempted"
    print(f"high gang bound {took:.2f}s after the blockers were deleted")
