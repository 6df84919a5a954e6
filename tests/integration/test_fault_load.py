"""Load: a stream of gangs through 6 GPUs, members deleted at random while it runs (running ones and gated ones).

A gang is submitted each step; a gang whose members all run is finished a few steps later (its pods complete, as
kwok's opt-in stage lets a test ask); every few steps one live member of an unfinished gang is deleted. At every
step no device may be held twice. Once every Job has finished or failed, the settled cluster must pass the fault
suite's invariants (nothing stranded, no gang half released), and once the Jobs are deleted every device is free.
Throughout, no gang may fit and wait with nothing ahead of it able to use the room for longer than the liveness
oracle's bound (`liveness.Watch`, judged every few steps). The short form streams 6 gangs; PHALANX_FAULT_RUNS
(`./task faults`) streams 40.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import WORKLOADS, Cluster, started_operator, wait_for

import faultcheck
import liveness
from jobs import gpu_gang
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]
GANGS = 40 if int(os.environ.get("PHALANX_FAULT_RUNS", "0")) > 0 else 6
SIZES = (2, 3, 4)


@pytest.fixture
def loaded_operator(cluster: Cluster) -> Iterator[operatorproc.OperatorProcess]:
    if cluster.local is None:
        pytest.skip("reads the operator's own process")
    yield from started_operator(cluster.local)


def job_states(cluster: Cluster, namespace: str) -> dict[str, str]:
    out = {}
    for job in cluster.get("jobs", "-n", namespace)["items"]:
        done = [
            c["type"]
            for c in (job.get("status") or {}).get("conditions") or []
            if c["type"] in ("Complete", "Failed") and c["status"] == "True"
        ]
        out[job["metadata"]["name"]] = done[0] if done else "Active"
    return out


def test_a_stream_of_gangs_with_random_deletions_holds_nothing_twice_and_strands_nothing(
    cluster: Cluster, loaded_operator: operatorproc.OperatorProcess, namespace: str
) -> None:
    rng = random.Random(int(os.environ.get("PHALANX_FAULT_SEED", "14")))
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    submitted, finishing, deleted = 0, {}, 0
    deadline = time.monotonic() + 120 + 30 * GANGS
    step = 0
    continuous = faultcheck.Continuous()
    live = liveness.Watch(cluster.kubectl)
    while True:
        step += 1
        if submitted < GANGS:
            job = gpu_gang(f"s{submitted}", SIZES[submitted % len(SIZES)], mode="all", backoff_limit=20)
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
            submitted += 1
        snapshot = faultcheck.take(cluster.kubectl, namespace)
        wrong = continuous.check(snapshot)
        assert not wrong, f"step {step}: {wrong}"
        forgotten = live.check()
        assert not forgotten, f"step {step}: " + "; ".join(map(str, forgotten))
        states = job_states(cluster, namespace)
        by_job: dict[str, list[dict]] = {}
        for pod in snapshot.pods:
            if faultcheck.live(pod):
                by_job.setdefault(pod["metadata"]["labels"].get("batch.kubernetes.io/job-name", ""), []).append(pod)
        for job, pods in by_job.items():
            size = SIZES[int(job[1:]) % len(SIZES)]
            running = [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]
            if len(running) >= size and job not in finishing:
                finishing[job] = step + rng.randint(1, 4)
            if finishing.get(job) == step:
                faultcheck.finish(cluster.kubectl, namespace, job)
        unfinished = [p for job, pods in by_job.items() if job not in finishing for p in pods]
        if unfinished and step % 3 == 0 and deleted < GANGS // 2:
            victim = rng.choice(unfinished)["metadata"]["name"]
            cluster.kubectl("delete", "pod", victim, "-n", namespace, "--wait=false", check=False)
            deleted += 1
        if submitted == GANGS and len(states) == GANGS and all(s != "Active" for s in states.values()):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"the stream did not drain: {states}\n{faultcheck.summary(snapshot)}")
        # A gang still waiting for its turn must not wait for a finish that will never be asked for.
        for job in [j for j, at in finishing.items() if at < step and states.get(j) == "Active" and j in by_job]:
            finishing[job] = step + 1
        time.sleep(0.5)

    snapshot = faultcheck.settle(cluster, namespace, {}, continuous=continuous)
    problems = faultcheck.violations(snapshot)
    assert not problems, f"after the stream: {problems}\n{faultcheck.summary(snapshot)}"
    outcome = job_states(cluster, namespace)
    assert deleted >= min(3, GANGS // 2), f"only {deleted} members deleted: the storm did not happen"
    assert sum(s == "Complete" for s in outcome.values()) >= GANGS // 2, f"most gangs completed despite the deletions: {outcome}"

    cluster.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
    wait_for(lambda: not cluster.get("pods", "-n", namespace)["items"], "every pod gone once the Jobs are deleted", timeout=120)
    held = wait_for(
        lambda: (s := faultcheck.take(cluster.kubectl, namespace)) and not any(faultcheck.held(c) for c in s.claims) and s,
        "every device free",
        timeout=120,
    )
    assert not faultcheck.violations(held)
    assert loaded_operator.process.poll() is None, "the operator lived through the stream"
    assert live.tracker.observations >= 3, f"liveness judged only {live.tracker.observations} times along the stream"
    completed = sum(s == "Complete" for s in outcome.values())
    print(
        f"load: {GANGS} gangs, {deleted} members deleted, {completed} completed, {GANGS - completed} failed, {step} steps; "
        f"liveness: {live.tracker.observations} observations, {live.tracker.sightings} sightings of a gang fitting and waiting"
    )
