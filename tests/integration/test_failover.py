"""Two replicas; the leader is killed (SIGKILL) in the middle of a release; the standby finishes it and nobody notices.

Both replicas serve the webhooks behind a TCP balancer (`tcpbalancer.py`,
what a Service is in a cluster) and elect a leader on the Lease. The release
is caught between its record and its gate lift: the operators run with
`--race-settle 5`, and a bystander pod that kube-scheduler may be allocating
for (pending, ungated, its claim unallocated; it never fits, its node does
not exist) stands beside the gangs, so after writing the claims the leader
waits 5 s for that allocation before it verifies them and lifts the gates.
The test kills it as soon as the API shows the PodGroup's reservation
Reserving with a claim allocated. Meanwhile
a thread keeps creating gang Jobs through the webhooks.

Shown: the standby takes the Lease (the time it took is printed); the
release completes or is rolled back and planned again; each member is
released once (same pods, none evicted), no device is held twice, no
reservation is left Reserving; every Job created during the failover was
admitted (gated) and got its PodGroup. The one kind of admission failure
allowed is a review the killed replica was processing at the instant of the
SIGKILL (its connection is cut; see `Admissions.in_flight_on_the_killed_replica`):
each review gets its own connection (`kube/webhookserver.py`), so no later
review is sent to a dead replica.

PHALANX_FAILOVER_ROUNDS=10 (`./task test:failover`) repeats it, killing
whichever replica leads, and restarting the killed one as the new standby.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, wait_for

import faultcheck
import flakyapi
import test_release_path
from jobs import gpu_gang, one_gpu_pod_spec
from phalanx.api import keys
from phalanx_dev.localcluster import demo, operatorproc
from test_release_path import remove_policy

ROOT = Path(__file__).parents[2]
ROUNDS = int(os.environ.get("PHALANX_FAILOVER_ROUNDS", "1"))
LEASE = "phalanx-leader"
SETTLE = ("--race-settle", "5")
admission_policy = test_release_path.admission_policy
"""The release path's fixture: ValidatingAdmissionPolicies a test makes, removed at its end."""


@dataclass
class Replica:
    identity: str
    webhook_port: int
    handle: operatorproc.OperatorProcess | None = None


@dataclass
class Admissions:
    """Gang Jobs created one after another through the webhooks, each with when it was sent and answered."""

    cluster: Cluster
    namespace: str
    created: list[tuple[str, float]] = field(default_factory=list)
    failures: list[tuple[str, float, float, str]] = field(default_factory=list)
    kills: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            name = f"adm-{n}"
            job = gpu_gang(name, 2, suspend=True)
            job["metadata"]["labels"] = {"failover": "admission"}
            sent = time.monotonic()
            proc = self.cluster.kubectl("create", "-n", self.namespace, "-f", "-", stdin=json.dumps(job), check=False)
            if proc.returncode == 0:
                self.created.append((name, time.monotonic()))
            else:
                self.failures.append((name, sent, time.monotonic(), proc.stderr.strip()))
            n += 1

    def in_flight_on_the_killed_replica(self, failure: tuple[str, float, float, str]) -> bool:
        """Sent before a SIGKILL and answered after it, with the connection cut (EOF, reset): the killed replica was
        processing it. TLS ends at the replica and the API server does not retry a webhook POST, so nobody can answer it."""
        _, sent, answered, error = failure
        cut = "EOF" in error or "connection reset" in error
        return cut and any(sent <= after and answered >= before for before, after in self.kills)


def _holder(cluster: Cluster) -> str | None:
    proc = cluster.kubectl("get", "lease", LEASE, "-n", operatorproc.NAMESPACE, "-o", "json", check=False)
    return json.loads(proc.stdout)["spec"].get("holderIdentity") if proc.returncode == 0 else None


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else {}


def _scheduled(pg: dict) -> bool:
    return any(c["type"] == keys.INITIALLY_SCHEDULED and c["status"] == "True" for c in (pg.get("status") or {}).get("conditions") or [])


def _claims(cluster: Cluster, namespace: str, job: str) -> list[dict]:
    return [c for c in cluster.get("resourceclaims", "-n", namespace)["items"] if c["metadata"]["name"].startswith(f"{job}-")]


def _allocated(claim: dict) -> list[tuple[str, str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or []]


@pytest.fixture
def replicas(cluster: Cluster) -> Iterator[tuple[list[Replica], int]]:
    if cluster.local is None:
        pytest.skip("runs two operator processes beside the local control plane")
    listen, a, b = operatorproc.free_ports(3)
    balancer = subprocess.Popen(
        [sys.executable, str(Path(__file__).with_name("tcpbalancer.py")), str(listen), str(a), str(b)], stdout=subprocess.PIPE, text=True
    )
    assert balancer.stdout is not None and balancer.stdout.readline().strip() == "listening"
    pair = [Replica(f"replica-a-{os.getpid()}", a), Replica(f"replica-b-{os.getpid()}", b)]
    try:
        yield pair, listen
    finally:
        for replica in pair:
            if replica.handle is not None:
                replica.handle.stop()
                if not os.environ.get("PHALANX_KEEP_LOGS"):
                    replica.handle.log.unlink(missing_ok=True)
        balancer.terminate()
        balancer.wait()


def _start(cluster: Cluster, replica: Replica, listen: int, extra: tuple[str, ...] = SETTLE) -> None:
    replica.handle = operatorproc.start(
        cluster.local,
        ROOT,
        webhook_port=replica.webhook_port,
        advertise_port=listen,
        extra_args=("--leader-identity", replica.identity, *extra),
    )


def test_the_standby_finishes_a_release_the_killed_leader_began(
    cluster: Cluster, replicas: tuple[list[Replica], int], namespace: str
) -> None:
    pair, listen = replicas
    for replica in pair:
        _start(cluster, replica, listen)
    wait_for(lambda: _holder(cluster) in {r.identity for r in pair}, "a replica holds the Lease")
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    bystander = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "bystander"}, "spec": one_gpu_pod_spec()}
    bystander["spec"]["nodeSelector"] = {"kubernetes.io/hostname": "no-such-node"}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(bystander))

    admissions = Admissions(cluster, namespace)
    thread = threading.Thread(target=admissions.run, daemon=True)
    thread.start()
    takeovers: list[float] = []
    try:
        for round_ in range(ROUNDS):
            takeovers.append(_round(cluster, pair, listen, namespace, round_, admissions))
    finally:
        admissions.stop.set()
        thread.join()
    print(f"\ntakeover after SIGKILL of the leader, per round: {', '.join(f'{t:.1f}s' for t in takeovers)}")
    cut = [f for f in admissions.failures if admissions.in_flight_on_the_killed_replica(f)]
    print(
        f"admissions during the test: {len(admissions.created)} created, {len(admissions.failures)} failed, "
        f"{len(cut)} of them in flight on the replica at the instant it was killed"
    )
    refused = [f"{f[0]}: {f[3]}" for f in admissions.failures if f not in cut]
    assert not refused, f"admissions failed during the failover: {refused}"
    jobs = cluster.get("jobs", "-n", namespace, "-l", "failover=admission")["items"]
    assert len(jobs) == len(admissions.created) > 0, "every admitted Job exists, and only those"
    for job in jobs:
        gates = job["spec"]["template"]["spec"].get("schedulingGates") or []
        assert {"name": keys.SCHEDULING_GATE} in gates, f"{job['metadata']['name']} was admitted without the mutating webhook"
    names = {j["metadata"]["name"] for j in jobs}

    def every_job_has_its_pod_group() -> bool:
        groups = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace)["items"]
        return names <= {(g["metadata"].get("labels") or {}).get(keys.JOB_NAME_LABEL) for g in groups}

    wait_for(every_job_has_its_pod_group, "a PodGroup for every Job created during the failovers")


def _round(cluster: Cluster, pair: list[Replica], listen: int, namespace: str, round_: int, admissions: Admissions) -> float:
    by_identity = {r.identity: r for r in pair}
    leader = by_identity[wait_for(lambda: _holder(cluster) in by_identity and _holder(cluster), "a leader")]
    (standby,) = [r for r in pair if r is not leader]
    assert standby.handle is not None and standby.handle.ready(), "the standby serves before the failover"
    job = f"train-{round_}"
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang(job, 4)))

    def mid_release() -> bool:
        reservation = (_pod_group(cluster, namespace, job).get("status") or {}).get("reservation") or {}
        return reservation.get("state") == "Reserving" and any(_allocated(c) for c in _claims(cluster, namespace, job))

    wait_for(mid_release, f"{job}'s reservation recorded and a claim written", timeout=120)
    assert leader.handle is not None
    before = time.monotonic()
    leader.handle.kill()
    killed = time.monotonic()
    admissions.kills.append((before, killed))
    members = cluster.get("pods", "-n", namespace, "-l", f"app={job}")["items"]
    pods_before = {p["metadata"]["name"]: p["metadata"]["uid"] for p in members}
    assert len(members) == 4 and all(p["spec"].get("schedulingGates") for p in members), "killed before any gate was lifted"
    admitted_before = len(admissions.created)

    wait_for(lambda: _holder(cluster) == standby.identity, "the standby holds the Lease", timeout=60)
    took = time.monotonic() - killed
    print(f"round {round_}: {standby.identity} took over {took:.1f}s after {leader.identity} was killed")

    wait_for(lambda: _scheduled(_pod_group(cluster, namespace, job)), f"{job} Scheduled by the new leader", timeout=120)
    pods = {p["metadata"]["name"]: p for p in cluster.get("pods", "-n", namespace, "-l", f"app={job}")["items"]}
    assert {n: p["metadata"]["uid"] for n, p in pods.items()} == pods_before, "each member released once: the same pods, none replaced"
    assert all(p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp") for p in pods.values())
    everywhere = [d for c in cluster.get("resourceclaims", "-A")["items"] for d in _allocated(c)]
    assert len(everywhere) == len(set(everywhere)), f"no device allocated twice: {sorted(everywhere)}"
    ours = [d for c in _claims(cluster, namespace, job) for d in _allocated(c)]
    assert len(ours) == 4, f"one device per member, none leaked: {ours}"
    states = [
        ((g.get("status") or {}).get("reservation") or {}).get("state")
        for g in cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace)["items"]
    ]
    assert "Reserving" not in states, "no reservation stranded half-way"
    torn = cluster.get("events", "-n", namespace, "--field-selector", "reason=GangTornDown")["items"]
    assert not torn, [e["message"] for e in torn]

    wait_for(lambda: len(admissions.created) > admitted_before + 2, "Jobs admitted after the takeover")
    cluster.kubectl("delete", "job", job, "-n", namespace, "--cascade=foreground", "--wait=true")
    wait_for(lambda: not _claims(cluster, namespace, job), f"{job}'s claims gone")
    leader.handle.stop()
    _start(cluster, leader, listen)  # the killed replica comes back as the standby
    return took


QUICK_LEASE = ("--leader-lease-duration", "4", "--leader-renew-deadline", "3", "--leader-retry-period", "0.5")


def test_a_deposed_leaders_gate_lift_does_not_land_after_the_new_leaders_rollback(
    cluster: Cluster, replicas: tuple[list[Replica], int], namespace: str, admission_policy: Any
) -> None:
    """The leader's gate lifts of a 2-rank gang are held in admission, in flight in the API server; meanwhile the
    leader is frozen (SIGSTOP) past its Lease, a rank is deleted (and not replaced: new pods are refused for now),
    and the standby takes the Lease and undoes the recorded release (a member is gone). Then the held lifts are let
    through: rank 0's must not land, or rank 0 would run alone, with the device the rollback freed handed to it by
    kube-scheduler and no record that it belongs to a gang."""
    pair, listen = replicas
    for replica in pair:
        _start(cluster, replica, listen, QUICK_LEASE)
    by_identity = {r.identity: r for r in pair}
    leader = by_identity[wait_for(lambda: _holder(cluster) in by_identity and _holder(cluster), "a leader")]
    (standby,) = [r for r in pair if r is not leader]
    assert leader.handle is not None and standby.handle is not None
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    go = threading.Event()
    flaky = flakyapi.FlakyLifts(None, 1, {"0", "1"}, delay=25, until=go)
    with flakyapi.flaky_lifts(cluster, namespace, flaky, timeout=30):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("pair", 2)))
        wait_for(lambda: len(flaky.answered) == 2, "both gate lifts of the leader held in admission", timeout=60)
        ranks = cluster.get("pods", "-n", namespace, "-l", "app=pair")["items"]
        first = {p["metadata"]["annotations"][flakyapi.INDEX]: p for p in ranks}
        admission_policy(policy := f"no-pods-{namespace}", namespace, ["pods"], "request.operation != 'CREATE'", "no new pods")
        os.killpg(leader.handle.process.pid, signal.SIGSTOP)
        try:
            cluster.kubectl("delete", "pod", first["1"]["metadata"]["name"], "-n", namespace, "--wait=false")
            wait_for(lambda: _holder(cluster) == standby.identity, "the standby holds the Lease", timeout=60)

            def undone() -> bool:
                pod = cluster.get("pod", first["0"]["metadata"]["name"], "-n", namespace)
                reservation = (_pod_group(cluster, namespace, "pair").get("status") or {}).get("reservation")
                return (
                    faultcheck.gated(pod) and not reservation and not any(faultcheck.held(c) for c in _claims(cluster, namespace, "pair"))
                )

            wait_for(undone, "the new leader undid the recorded release, rank 0 still gated", timeout=60)
            assert len(flaky.answered) == 2, "the deposed leader's lifts were still held while the new leader undid the release"
        finally:
            go.set()
            os.killpg(leader.handle.process.pid, signal.SIGCONT)
        continuous = faultcheck.Continuous()

        def judged() -> faultcheck.Snapshot:
            snapshot = faultcheck.take(cluster.kubectl, namespace)  # pods read before PodGroups: a record shows if it came first
            wrong = continuous.check(snapshot)
            assert not wrong, wrong
            rank_0 = next(p for p in snapshot.pods if p["metadata"]["uid"] == first["0"]["metadata"]["uid"])
            recorded = {
                p["uid"] for g in snapshot.podgroups for p in ((g.get("status") or {}).get("reservation") or {}).get("placements") or []
            }
            assert faultcheck.gated(rank_0) or rank_0["metadata"]["uid"] in recorded, "rank 0 released outside any recorded reservation"
            return snapshot

        wait_for(lambda: judged() and flaky.held_answered == 2, "the held lifts let through by the webhook", timeout=30)
        for _ in range(10):  # a lift that landed shows by now
            judged()
            time.sleep(0.3)
        remove_policy(cluster, policy)

        def scheduled_again() -> bool:
            judged()
            return _scheduled(_pod_group(cluster, namespace, "pair"))

        wait_for(scheduled_again, "the gang released whole again, by the new leader, once its rank is replaced", timeout=120)
    pods = [p for p in cluster.get("pods", "-n", namespace, "-l", "app=pair")["items"] if not p["metadata"].get("deletionTimestamp")]
    assert len(pods) == 2 and all(p["spec"].get("nodeName") for p in pods), [p["metadata"]["name"] for p in pods]
    assert first["0"]["metadata"]["uid"] in {p["metadata"]["uid"] for p in pods}, "rank 0 released once, with its gang"
    wrong = faultcheck.violations(faultcheck.take(cluster.kubectl, namespace))
    assert not wrong, wrong
