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

ROW_HEADERS = ("", "GPUs held", "Jobs training", "GPUs free", "preempted")
NAMESPACE = "ml-team"
METRIC_PREFIXES = (
    "phalanx_podgroup_schedule_attempts_total",
    "phalanx_released_pods_total",
    "phalanx_podgroup_disruptions_total",
    "phalanx_preemption_victims_count",
    "phalanx_preemption_attempt_duration_seconds_count",
    "phalanx_podgroup_scheduling_attempt_duration_seconds_count",
)
ACCEL = "example.com/accel"


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

    def row(self, label: str, preempted: str = "-") -> tuple[str, str, str, str, str]:
        return (label, f"{self.devices_held}/{self.devices_total}", str(self.jobs_training), str(self.devices_free), preempted)


@dataclass(frozen=True)
class Preemption:
    """A preemption scenario read back: did the urgent gang run, and how many of the victim's first members went."""

    census: Census
    preemptor_running: int
    victims_taken: int
    victims: int

    def preempted(self) -> str:
        if self.preemptor_running == 0:
            return f"0 of {self.victims}: urgent gang never runs"
        return f"{self.victims_taken} of {self.victims}"

    def row(self, label: str, *, devices: bool = True) -> tuple[str, str, str, str, str]:
        if devices:
            return self.census.row(label, self.preempted())
        return (label, "-", str(self.census.jobs_training), "-", self.preempted())


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


def run_gang_pair(kubectl: Kubectl, workloads: Path, namespace: str = NAMESPACE) -> Census:
    """Example 2: the same Jobs with gang.minCount 4: one runs whole, the other waits whole, holding nothing."""
    apply(kubectl, workloads, ["one-gpu.yaml", "gang-train-a.yaml"], namespace)
    settle(kubectl, namespace, pods_expected=4)
    apply(kubectl, workloads, ["gang-train-b.yaml"], namespace)
    return settle(kubectl, namespace, pods_expected=8)


def run_gang(kubectl: Kubectl, workloads: Path, namespace: str = NAMESPACE) -> tuple[Census, Census]:
    """Example 2, then train-a is deleted and train-b goes as a unit."""
    both = run_gang_pair(kubectl, workloads, namespace)
    kubectl("-n", namespace, "delete", "job", "train-a", "--cascade=foreground", "--wait=true")
    after = settle(kubectl, namespace, pods_expected=4)
    return both, after


def run_dra_preempt(kubectl: Kubectl, workloads: Path, namespace: str = NAMESPACE, *, timeout: float = 120) -> Preemption:
    """The article's gap: research gang train-a (priority 100) holds 4 GPUs, urgent gang train-urgent (10000) needs 4 of 6."""
    kubectl("apply", "-f", str(workloads / "priorityclasses.yaml"))
    apply(kubectl, workloads, ["one-gpu.yaml", "dra-preempt-train-a.yaml"], namespace)
    return _preempt(kubectl, workloads, namespace, "train-a", "dra-preempt-train-urgent.yaml", timeout)


def run_preempt(kubectl: Kubectl, workloads: Path, mode: str, namespace: str = NAMESPACE, *, timeout: float = 120) -> Preemption:
    """The article's node-local case: `example.com/accel: 2` on each worker, research gang in `mode`, urgent gang needs 4 of 6."""
    set_accelerators(kubectl, 2)
    kubectl("apply", "-f", str(workloads / "priorityclasses.yaml"))
    apply(kubectl, workloads, [f"preempt-research-{mode}.yaml"], namespace)
    return _preempt(kubectl, workloads, namespace, "research", "preempt-train-urgent.yaml", timeout)


def set_accelerators(kubectl: Kubectl, count: int | None) -> None:
    """Give every worker `count` of the node-local extended resource (None removes it), as a device plugin would."""
    value = None if count is None else str(count)
    for node in _items(kubectl, "get", "nodes"):
        if not node["spec"].get("taints"):
            patch = {"status": {"capacity": {ACCEL: value}, "allocatable": {ACCEL: value}}}
            kubectl("patch", "node", node["metadata"]["name"], "--subresource=status", "--type=merge", "-p", json.dumps(patch))


def _preempt(kubectl: Kubectl, workloads: Path, namespace: str, victim: str, urgent_file: str, timeout: float) -> Preemption:
    first = _wait_running(kubectl, namespace, victim, 4, timeout)
    apply(kubectl, workloads, [urgent_file], namespace)
    deadline = time.monotonic() + timeout
    previous: tuple[int, int] | None = None
    while True:
        urgent = _running(kubectl, namespace, "train-urgent")
        taken = len(_taken(first, _job_pods(kubectl, namespace, victim)))
        now = (len(urgent), taken)
        # Done when the urgent gang runs whole, or when nothing moved for a while and it is held as Unschedulable.
        if len(urgent) == 4 or (now == previous and time.monotonic() > deadline - timeout / 2 and _all_unschedulable(kubectl, namespace)):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"train-urgent: {len(urgent)} of 4 running, {taken} of {victim}'s members taken down after {timeout}s")
        previous = now
        time.sleep(1.0)
    # The urgent gang is released once the devices it needs are free, which may be while another member taken down
    # still runs out its grace period holding its own: the table is the state once the preemption is over.
    taken = _wait_stopped(kubectl, namespace, victim, first, timeout)
    urgent = _running(kubectl, namespace, "train-urgent")
    return Preemption(take_census(kubectl, namespace), len(urgent), taken, len(first))


def _taken(first: list[dict[str, Any]], now: list[dict[str, Any]]) -> set[str]:
    """The uids of the pods of `first` taken down (deleted or being deleted, or Failed), given the victim's pods `now`."""
    still = {p["metadata"]["uid"]: p for p in now}
    return {u for p in first if (q := still.get(u := p["metadata"]["uid"])) is None or _taken_down(q)}


def _wait_stopped(kubectl: Kubectl, namespace: str, victim: str, first: list[dict[str, Any]], timeout: float) -> int:
    """Wait until every member of `first` taken down has stopped (gone, or in a final phase) and no claim it held is
    allocated any more; how many were taken down. A member still running, or a device still held, after `timeout`
    is an error naming them."""
    deadline = time.monotonic() + timeout
    while True:
        pods = _job_pods(kubectl, namespace, victim)
        taken = _taken(first, pods)
        running = sorted(p["metadata"]["name"] for p in pods if p["metadata"]["uid"] in taken and not _stopped(p))
        claims = _items(kubectl, "-n", namespace, "get", "resourceclaims")
        holding = sorted(c["metadata"]["name"] for c in claims if _allocated(c) and _holders(c) & taken)
        if not running and not holding:
            return len(taken)
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{victim}'s members taken down not stopped after {timeout}s: {running} still running, claims {holding} still allocated"
            )
        time.sleep(0.5)


def _job_pods(kubectl: Kubectl, namespace: str, job: str) -> list[dict[str, Any]]:
    return _items(kubectl, "-n", namespace, "get", "pods", "-l", f"batch.kubernetes.io/job-name={job}")


def _running(kubectl: Kubectl, namespace: str, job: str) -> list[dict[str, Any]]:
    return [
        p
        for p in _job_pods(kubectl, namespace, job)
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def _wait_running(kubectl: Kubectl, namespace: str, job: str, count: int, timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    while len(pods := _running(kubectl, namespace, job)) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{job}: {len(pods)} of {count} pods running after {timeout}s")
        time.sleep(0.5)
    return pods


def _taken_down(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp")) or pod["status"].get("phase") == "Failed"


def _stopped(pod: dict[str, Any]) -> bool:
    return pod["status"].get("phase") in ("Failed", "Succeeded")


def _holders(claim: dict[str, Any]) -> set[str]:
    """The uids of the pods a claim is for: its owner (a claim made from a pod's template) and those it is reserved for."""
    owners = {r.get("uid") for r in claim["metadata"].get("ownerReferences") or [] if r.get("kind") == "Pod"}
    return owners | {r.get("uid") for r in (claim.get("status") or {}).get("reservedFor") or []}


def _all_unschedulable(kubectl: Kubectl, namespace: str) -> bool:
    pending = [p for p in _job_pods(kubectl, namespace, "train-urgent") if p["status"].get("phase") == "Pending"]
    return bool(pending) and all(_unschedulable(p) for p in pending)


def show(kubectl: Kubectl, namespace: str = NAMESPACE, *, events: int = 12) -> str:
    """What the article prints after each scenario: the pods, the PodGroups and the latest events."""
    parts = []
    pods = kubectl("-n", namespace, "get", "pods", "-o", "wide", check=False)
    parts.append(f"$ kubectl -n {namespace} get pods -o wide\n{(pods.stdout or pods.stderr).rstrip()}")
    for resource in ("podgroups.scheduling.phalanx.dev", "podgroups.scheduling.k8s.io"):
        groups = kubectl("-n", namespace, "get", resource, check=False)
        if groups.returncode == 0:
            parts.append(f"$ kubectl -n {namespace} get {resource}\n{(groups.stdout or groups.stderr).rstrip()}")
    recent = kubectl(
        "-n",
        namespace,
        "get",
        "events",
        "--sort-by=.lastTimestamp",
        "-o",
        "custom-columns=TYPE:.type,REASON:.reason,OBJECT:.involvedObject.name,MESSAGE:.message",
        check=False,
    )
    lines = (recent.stdout or recent.stderr).rstrip().splitlines()
    body = "\n".join(lines[:1] + lines[1:][-events:])
    parts.append(f"$ kubectl -n {namespace} get events --sort-by=.lastTimestamp   (last {events})\n{body}")
    return "\n\n".join(parts)


def clean(kubectl: Kubectl, namespace: str, timeout: float = 60) -> None:
    """Delete the scenario's Jobs and events and wait until their claims have released every device."""
    kubectl("-n", namespace, "delete", "jobs", "--all", "--cascade=foreground", "--wait=true")
    kubectl("-n", namespace, "delete", "events", "--all", check=False)
    deadline = time.monotonic() + timeout
    while _items(kubectl, "-n", namespace, "get", "resourceclaims"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"claims in {namespace} not released after {timeout}s")
        time.sleep(0.5)


def run_upstream(cluster: Any, workloads: Path, namespace: str = NAMESPACE) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The in-tree feature's rows, measured on a second local cluster with the 1.37 gates (and no Phalanx), then stopped.

    `cluster` is a LocalCluster with `upstream_gang=True`; a scenario that fails is reported in its row, not raised,
    so the rest of the table still prints.
    """
    cluster.up()
    try:
        kubectl = cluster.kubectl
        kubectl("apply", "-f", str(workloads / "namespace.yaml"))
        try:
            gang = run_gang_pair(kubectl, workloads, namespace).row("1.37 in-tree: gang.minCount 4")
        except (TimeoutError, subprocess.CalledProcessError) as exc:
            gang = ("1.37 in-tree: gang.minCount 4", "not measured", "-", "-", str(exc).splitlines()[0][:60])
        print(show(kubectl, namespace, events=6), flush=True)
        clean(kubectl, namespace)
        try:
            dra = run_dra_preempt(kubectl, workloads, namespace, timeout=60).row("1.37 in-tree: DRA preemption")
        except (TimeoutError, subprocess.CalledProcessError) as exc:
            dra = ("1.37 in-tree: DRA preemption", "not measured", "-", "-", str(exc).splitlines()[0][:60])
        print(show(kubectl, namespace, events=6), flush=True)
        return gang, dra
    finally:
        cluster.down()


def metric_samples(exposition: str, prefixes: Sequence[str] = METRIC_PREFIXES) -> str:
    """The samples of an exposition whose names start with one of `prefixes`, without those still at zero."""
    return "\n".join(line for line in exposition.splitlines() if line.startswith(tuple(prefixes)) and not line.endswith(" 0.0"))


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
