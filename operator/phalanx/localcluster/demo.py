"""The article's scenarios, run for real against a cluster and summarised as its table.

Everything goes through `kubectl apply`, as a user would drive it; the census
reads back what the cluster actually did (claims allocated, pods running), so
the table is a measurement, never a script of expected numbers.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

Kubectl = Callable[..., subprocess.CompletedProcess[str]]

ROW_HEADERS = ("", "GPUs held", "Jobs training", "GPUs free")


@dataclass(frozen=True)
class Census:
    """What the article's table counts, read from one namespace of one cluster."""

    devices_total: int
    devices_held: int
    jobs: int
    jobs_training: int
    pods_running: int
    pods_pending: int

    @property
    def devices_free(self) -> int:
        return self.devices_total - self.devices_held

    def row(self, label: str) -> tuple[str, str, str, str]:
        return (label, f"{self.devices_held}/{self.devices_total}", str(self.jobs_training), str(self.devices_free))


def take_census(kubectl: Kubectl, namespace: str) -> Census:
    slices = _items(kubectl, "get", "resourceslices")
    pods = _items(kubectl, "-n", namespace, "get", "pods")
    jobs = _items(kubectl, "-n", namespace, "get", "jobs")
    total = sum(len(s["spec"].get("devices", [])) for s in slices)
    # Devices held cluster-wide, not just in this namespace: a free GPU is one no claim holds.
    all_claims = _items(kubectl, "get", "resourceclaims", "-A")
    held = sum(len(c["status"]["allocation"]["devices"]["results"]) for c in all_claims if _allocated(c))
    running = Counter(_job_of(p) for p in pods if p.get("status", {}).get("phase") == "Running")
    training = sum(1 for j in jobs if running[j["metadata"]["name"]] >= j["spec"].get("parallelism", 1))
    return Census(
        devices_total=total,
        devices_held=held,
        jobs=len(jobs),
        jobs_training=training,
        pods_running=sum(running.values()),
        pods_pending=sum(1 for p in pods if p.get("status", {}).get("phase") == "Pending"),
    )


def settle(kubectl: Kubectl, namespace: str, pods_expected: int, timeout: float = 90) -> Census:
    """Wait until every pod is Running or reported unschedulable and the census stops changing."""
    deadline = time.monotonic() + timeout
    previous: Census | None = None
    while True:
        pods = _items(kubectl, "-n", namespace, "get", "pods")
        decided = [p for p in pods if p.get("status", {}).get("phase") == "Running" or _unschedulable(p)]
        census = take_census(kubectl, namespace)
        if len(pods) >= pods_expected and len(decided) == len(pods) and census == previous:
            return census
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {namespace} did not settle in {timeout}s: {census}")
        previous = census
        time.sleep(1.0)


def apply(kubectl: Kubectl, workloads: Path, files: Sequence[str], namespace: str) -> None:
    """Apply manifests from `workloads`, moved into `namespace` so tests never share one."""
    docs = []
    for name in files:
        for doc in _load_yaml_docs(workloads / name):
            if doc.get("kind") != "Namespace":
                doc.setdefault("metadata", {})["namespace"] = namespace
                docs.append(doc)
    kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": docs}))


def run_deadlock(kubectl: Kubectl, workloads: Path, namespace: str = "ml-team") -> Census:
    """Example 1: two 4-rank Jobs, no gang policy."""
    kubectl("apply", "-f", str(workloads / "namespace.yaml"))
    apply(kubectl, workloads, ["one-gpu.yaml", "train-a.yaml", "train-b.yaml"], namespace)
    return settle(kubectl, namespace, pods_expected=8)


def run_gang(kubectl: Kubectl, workloads: Path, namespace: str = "ml-team") -> tuple[Census, Census]:
    """Example 2: the same Jobs with gang.minCount 4; then train-a is deleted and train-b goes as a unit."""
    apply(kubectl, workloads, ["one-gpu.yaml", "gang-train-a.yaml"], namespace)
    settle(kubectl, namespace, pods_expected=4)
    apply(kubectl, workloads, ["gang-train-b.yaml"], namespace)
    both = settle(kubectl, namespace, pods_expected=8)
    kubectl("-n", namespace, "delete", "job", "train-a", "--cascade=foreground", "--wait=true")
    after = settle(kubectl, namespace, pods_expected=4)
    return both, after


def clean(kubectl: Kubectl, namespace: str, timeout: float = 60) -> None:
    """Delete the scenario's Jobs and wait until their claims have released every device."""
    kubectl("-n", namespace, "delete", "jobs", "--all", "--cascade=foreground", "--wait=true")
    deadline = time.monotonic() + timeout
    while _items(kubectl, "-n", namespace, "get", "resourceclaims"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"claims in {namespace} not released after {timeout}s")
        time.sleep(0.5)


def format_table(rows: Sequence[tuple[str, ...]]) -> str:
    table = [ROW_HEADERS, *rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(ROW_HEADERS))]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=False)) + " |" for r in table]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _items(kubectl: Kubectl, *args: str) -> list[dict[str, Any]]:
    return json.loads(kubectl(*args, "-o", "json").stdout)["items"]


def _load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _allocated(claim: dict[str, Any]) -> bool:
    return bool(claim.get("status", {}).get("allocation"))


def _job_of(pod: dict[str, Any]) -> str:
    return pod["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name", "")


def _unschedulable(pod: dict[str, Any]) -> bool:
    """Unschedulable by the scheduler, or held whole by Phalanx's gate."""
    return any(
        c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("reason") in ("Unschedulable", "SchedulingGated")
        for c in pod.get("status", {}).get("conditions", [])
    )
