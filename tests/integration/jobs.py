"""Builders for the Jobs the integration tests submit with kubectl.

Each rank asks for more cpu than any node has, so a gang built here is held
behind its gate for good: admission and Job-controller tests then see the
objects and pods as they are before any release.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from conftest import wait_for

from phalanx.api import keys

BASE: dict[str, Any] = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "train"},
    "spec": {
        "completions": 4,
        "parallelism": 4,
        "completionMode": "Indexed",
        "backoffLimit": 0,
        "template": {
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {"name": "rank", "image": "busybox:1.36", "command": ["sleep", "3600"], "resources": {"requests": {"cpu": "64"}}}
                ],
            }
        },
    },
}


def gang_job(
    name: str = "train",
    *,
    annotations: dict[str, str] | None = None,
    scheduling: dict[str, Any] | None = None,
    parallelism: int | None = 4,
) -> dict[str, Any]:
    job = copy.deepcopy(BASE)
    job["metadata"]["name"] = name
    if annotations is not None:
        job["metadata"]["annotations"] = annotations
    if scheduling is not None:
        job["spec"]["scheduling"] = scheduling
    if parallelism is None:
        del job["spec"]["parallelism"]
        del job["spec"]["completions"]
    else:
        job["spec"]["parallelism"] = job["spec"]["completions"] = parallelism
    return job


def as_json(job: dict[str, Any]) -> str:
    return json.dumps(job)


MIN4 = {keys.MIN_COUNT: "4"}
IGNORE_DISRUPTIONS = {"rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}
"""The podFailurePolicy the README recommends for gang Jobs: a member Phalanx takes down spends no backoffLimit."""


def one_gpu_pod_spec(restart_policy: str = "Never", *, grace: int = 1) -> dict[str, Any]:
    """A rank that holds one fake GPU (ResourceClaimTemplate `one-gpu`) and keeps running; once deleted it runs
    `grace` seconds more, as on a kubelet (a checkpointing rank takes minutes; 1 s keeps the suite quick)."""
    return {
        "restartPolicy": restart_policy,
        "terminationGracePeriodSeconds": grace,
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        "containers": [
            {
                "name": "rank",
                "image": "busybox:1.36",
                "command": ["sleep", "3600"],
                "resources": {"requests": {"cpu": "50m"}, "claims": [{"name": "gpu"}]},
            }
        ],
    }


def gpu_gang(
    name: str,
    size: int,
    *,
    mode: str | None = None,
    priority_class: str | None = None,
    backoff_limit: int = 3,
    suspend: bool = False,
    affinity: dict[str, Any] | None = None,
    grace: int = 1,
    ignore_disruptions: bool = True,
) -> dict[str, Any]:
    """A gang of one-GPU ranks whose disrupted members do not count against backoffLimit: the podFailurePolicy the
    README recommends (`ignore_disruptions` False: no podFailurePolicy at all, as a new user writes a Job)."""
    spec = one_gpu_pod_spec(grace=grace)
    if priority_class:
        spec["priorityClassName"] = priority_class
    if affinity:
        spec["affinity"] = affinity
    annotations = {keys.MIN_COUNT: str(size)}
    if mode:
        annotations[keys.DISRUPTION_MODE] = mode
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {
            "suspend": suspend,
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "backoffLimit": backoff_limit,
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        }
        | ({"podFailurePolicy": IGNORE_DISRUPTIONS} if ignore_disruptions else {}),
    }


def gpu_jobset(name: str, workers: int, annotations: dict[str, str]) -> dict:
    """A leader and `workers` workers, one GPU each, in two replicated Jobs that ignore disruptions (the README's rule)."""

    def replicated(role: str, pods: int) -> dict:
        return {
            "name": role,
            "replicas": 1,
            "template": {
                "spec": {
                    "parallelism": pods,
                    "completions": pods,
                    "completionMode": "Indexed",
                    "backoffLimit": 3,
                    "podFailurePolicy": IGNORE_DISRUPTIONS,
                    "template": {"spec": one_gpu_pod_spec()},
                }
            },
        }

    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"replicatedJobs": [replicated("leader", 1), replicated("workers", workers)]},
    }


@contextmanager
def priority_classes(kubectl: Callable[..., Any], namespace: str) -> Iterator[tuple[str, str]]:
    """Two PriorityClasses of the test's own, (low 100, urgent 10000), deleted afterwards."""
    low, urgent = f"low-{namespace}", f"urgent-{namespace}"
    classes = [
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": low}, "value": 100},
        {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": urgent}, "value": 10000},
    ]
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": classes}))
    try:
        yield low, urgent
    finally:
        kubectl("delete", "priorityclass", low, urgent, "--ignore-not-found")


def job_pods(cluster: Any, namespace: str, job: str) -> list[dict[str, Any]]:
    """The pods the Job controller made for `job`."""
    return cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def bound_pods(cluster: Any, namespace: str, job: str, size: int, timeout: float = 120) -> list[dict[str, Any]]:
    """Wait until `size` pods of `job` are bound to a node, and return them."""

    def probe() -> list[dict[str, Any]] | None:
        pods = [p for p in job_pods(cluster, namespace, job) if p["spec"].get("nodeName")]
        return pods if len(pods) == size else None

    return wait_for(probe, f"{size} pods of {job} bound", timeout=timeout)
