"""The article's DRA preemption read back once the preemption is over, against a cluster played by a script.

The urgent gang is released as soon as the devices it needs are free, which can be while a member taken down is
still in its grace period (Running, with its deletionTimestamp) holding its own device. The table counts the state
once the members taken down stopped and their devices are free: the census must not be taken before.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from phalanx_dev.localcluster import demo

JSON = dict[str, Any]
WORKLOADS = Path(__file__).resolve().parents[2] / "e2e" / "workloads"
NS = "ml"


def _pod(name: str, job: str, *, phase: str = "Running", deleting: bool = False) -> JSON:
    meta: JSON = {"name": name, "namespace": NS, "uid": f"{name}-uid", "labels": {"batch.kubernetes.io/job-name": job}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T16:45:30Z"
    return {"metadata": meta, "spec": {"nodeName": "worker-1"}, "status": {"phase": phase}}


def _claim(pod: str, *, allocated: bool = True) -> JSON:
    uid = f"{pod}-uid"
    claim: JSON = {
        "metadata": {
            "name": f"{pod}-gpu",
            "namespace": NS,
            "ownerReferences": [{"kind": "Pod", "name": pod, "uid": uid, "controller": True}],
        },
        "status": {},
    }
    if allocated:
        claim["status"] = {
            "allocation": {"devices": {"results": [{"driver": "gpu.example.com", "pool": "p", "device": f"gpu-{pod}", "request": "gpu"}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": uid}],
        }
    return claim


def _job(name: str) -> JSON:
    return {"metadata": {"name": name, "namespace": NS}, "spec": {"parallelism": 4}}


class Scripted:
    """A cluster that moves one step along `steps` at each sleep of the reader, and to `released` once the urgent Job is
    applied; `kubectl` answers the reads the demo makes."""

    def __init__(self, before: tuple[list[JSON], list[JSON]], released: list[tuple[list[JSON], list[JSON]]]) -> None:
        self.pods, self.claims = before
        self.jobs = [_job("train-a")]
        self._released = released
        self._steps: list[tuple[list[JSON], list[JSON]]] = []
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        if self._steps:
            self.pods, self.claims = self._steps.pop(0)

    def monotonic(self) -> float:
        return self.now

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
        words = [a for a in args if a not in ("-o", "json", "-A")]
        if words[0] == "apply":
            if stdin and "train-urgent" in stdin:
                self.jobs.append(_job("train-urgent"))
                (self.pods, self.claims), *self._steps = self._released
            return subprocess.CompletedProcess(args, 0, "", "")
        if words[0] == "-n":
            words = words[2:]
        assert words[0] == "get", args
        kind, rest = words[1], words[2:]
        if kind == "resourceslices":
            items: list[JSON] = [{"spec": {"devices": [{"name": f"gpu-{i}"} for i in range(6)]}}]
        elif kind == "jobs":
            items = self.jobs
        elif kind == "resourceclaims":
            items = self.claims
        else:
            assert kind == "pods", args
            items = self.pods
            if rest[:1] == ["-l"]:
                job = rest[1].split("=", 1)[1]
                items = [p for p in items if p["metadata"]["labels"]["batch.kubernetes.io/job-name"] == job]
        return subprocess.CompletedProcess(args, 0, json.dumps({"items": items}), "")


RESEARCH = [f"train-a-{i}" for i in range(4)]
URGENT = [f"train-urgent-{i}" for i in range(4)]
BEFORE = ([_pod(n, "train-a") for n in RESEARCH], [_claim(n) for n in RESEARCH])


def _released(last: JSON, last_claim: JSON | None) -> tuple[list[JSON], list[JSON]]:
    """The urgent gang runs on the devices three victims freed; the fourth victim is `last`, its claim `last_claim`."""
    pods = [last, *(_pod(n, "train-urgent") for n in URGENT)]
    claims = [*(_claim(n) for n in URGENT), *([last_claim] if last_claim else [])]
    return pods, claims


def _run(cluster: Scripted, monkeypatch: pytest.MonkeyPatch) -> demo.Preemption:
    monkeypatch.setattr(demo, "time", SimpleNamespace(sleep=cluster.sleep, monotonic=cluster.monotonic))
    return demo.run_dra_preempt(cluster.kubectl, WORKLOADS, NS)


def test_the_census_waits_for_a_victim_in_its_grace_period_to_stop_and_free_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """The flake of issue 40: `devices_held=5, pods_running=5` when the census read a victim still in its grace."""
    last = "train-a-3"
    cluster = Scripted(
        BEFORE,
        [
            _released(_pod(last, "train-a", deleting=True), _claim(last)),  # in its grace period, holding its device
            _released(_pod(last, "train-a", phase="Failed", deleting=True), _claim(last)),  # stopped, device not yet freed
            _released(_pod(last, "train-a", phase="Failed", deleting=True), _claim(last, allocated=False)),  # freed
        ],
    )
    outcome = _run(cluster, monkeypatch)
    assert (outcome.preemptor_running, outcome.victims_taken, outcome.victims) == (4, 4, 4), outcome
    assert (outcome.census.devices_held, outcome.census.pods_running, outcome.census.jobs_training) == (4, 4, 1), outcome.census


def test_a_victim_that_never_frees_its_device_fails_the_scenario(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wait is for a condition, bounded: a victim whose device stays held is an error naming it, not a table row."""
    last = "train-a-3"
    cluster = Scripted(BEFORE, [_released(_pod(last, "train-a", phase="Failed", deleting=True), _claim(last))])
    with pytest.raises(TimeoutError, match="train-a-3-gpu"):
        _run(cluster, monkeypatch)


def test_an_urgent_gang_that_never_runs_is_reported_so(monkeypatch: pytest.MonkeyPatch) -> None:
    """Upstream's row: nobody is taken down, the urgent gang waits Unschedulable; read back as such, without waiting."""
    pending = {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
    urgent = [{**_pod(n, "train-urgent"), "status": pending} for n in URGENT]
    cluster = Scripted(BEFORE, [(BEFORE[0] + urgent, BEFORE[1])])
    outcome = _run(cluster, monkeypatch)
    assert (outcome.preemptor_running, outcome.victims_taken) == (0, 0)
    assert outcome.census.devices_held == 4 and outcome.preempted() == "0 of 4: urgent gang never runs"
