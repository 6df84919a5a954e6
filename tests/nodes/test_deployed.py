"""On real nodes, the operator as a user installs it: containers run, devices are prepared, pods take time to stop.

Run by `./task test:nodes`, which starts a cluster whose workers are real
kubelets with containerd and runc (`phalanx cluster up --real-nodes 3
--workers 0`), installs the operator with `phalanx cluster install` (its
image built here, `kubectl apply -k e2e/install`: manifests/ with only the
image name and pull policy changed), then runs this module and the e2e suite
against it with PHALANX_E2E_KUBECONFIG. The ranks here are real busybox
processes: `sleep` as PID 1 ignores SIGTERM, so a deleted rank runs its whole
grace period, as a checkpointing job would.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import time
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, wait_for

import faultcheck
import flakyapi
from jobs import gpu_gang, priority_classes
from phalanx.api import keys
from phalanx_dev.localcluster import demo

NAMESPACE = "phalanx-system"
LEASE = "phalanx-leader"
GRACE = 20
REAL_NODE = "phalanx.dev/real-node"
INDEX = "batch.kubernetes.io/job-completion-index"
WEBHOOK_HOST = "phalanx-webhook.phalanx-system.svc"


@pytest.fixture(scope="module", autouse=True)
def real_nodes(cluster: Cluster) -> list[str]:
    """Every schedulable node is a kubelet, and the operator runs as its Deployment: else this is not the tier it claims to be."""
    nodes = [n for n in cluster.get("nodes")["items"] if not n["spec"].get("taints")]
    real = [n["metadata"]["name"] for n in nodes if (n["metadata"].get("labels") or {}).get(REAL_NODE) == "true"]
    assert real and len(real) == len(nodes), (
        f"real nodes {real} of schedulable {[n['metadata']['name'] for n in nodes]}: run ./task test:nodes"
    )
    assert cluster.get("deployment", "phalanx", "-n", NAMESPACE)["status"].get("readyReplicas") == 2, "the operator is not deployed"
    return real


def _pods(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    return cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def _running(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Running"]


def _operator_pods(cluster: Cluster) -> dict[str, dict[str, Any]]:
    items = cluster.get("pods", "-n", NAMESPACE, "-l", "app.kubernetes.io/name=phalanx")["items"]
    return {p["metadata"]["name"]: p for p in items}


def _ready(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True" for c in (pod.get("status") or {}).get("conditions") or []
    )


def _leader(cluster: Cluster) -> str | None:
    return (cluster.get("lease", LEASE, "-n", NAMESPACE).get("spec") or {}).get("holderIdentity")


def _start(cluster: Cluster, namespace: str, job: dict[str, Any], running: int | None = None) -> list[dict[str, Any]]:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    name, size = job["metadata"]["name"], running or job["spec"]["parallelism"]
    return wait_for(lambda: len(r := _running(_pods(cluster, namespace, name))) == size and r, f"{name}: {size} containers running", 120)


def _device_of(cluster: Cluster, namespace: str, pod: dict[str, Any]) -> str:
    """The device Phalanx reserved for the pod's claim (its allocation result)."""
    claim = next(s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"] if s["name"] == "gpu")
    results = cluster.get("resourceclaim", claim, "-n", namespace)["status"]["allocation"]["devices"]["results"]
    assert len(results) == 1, results
    return f"{results[0]['pool']}/{results[0]['device']}"


def test_installed_as_two_replicas_behind_the_webhook_service(cluster: Cluster, namespace: str, real_nodes: list[str]) -> None:
    """Both replicas Ready on real nodes, one leading; the API server calls the webhooks through the Service (a gang's
    pods get the gate from the mutating webhook), with the one CA both replicas share from the generated Secret."""
    pods = _operator_pods(cluster)
    ready = [name for name, p in pods.items() if _ready(p)]
    assert len(ready) == 2 and {pods[n]["spec"]["nodeName"] for n in ready} <= set(real_nodes), pods.keys()
    assert _leader(cluster) in ready
    secret = cluster.get("secret", "phalanx-webhook-tls", "-n", NAMESPACE)
    webhooks = cluster.get("mutatingwebhookconfigurations", "-l", "app.kubernetes.io/name=phalanx")["items"]
    assert webhooks, "the mutating webhook configuration is installed"
    for config in webhooks:
        for hook in config["webhooks"]:
            assert hook["clientConfig"]["service"]["name"] == "phalanx-webhook", hook["clientConfig"]
            assert hook["clientConfig"]["caBundle"] == secret["data"]["ca.crt"], "the caBundle is the shared Secret's CA"
    ca = base64.b64decode(secret["data"]["ca.crt"])
    for name in ready:
        assert _serving_ca_ok(pods[name]["status"]["podIP"], ca), f"{name} serves a certificate of the shared CA"
    job = gpu_gang("gated", 8)  # 8 GPUs on 6: held behind the gate for good
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    members = wait_for(lambda: len(p := _pods(cluster, namespace, "gated")) == 8 and p, "8 pods made")
    assert all(any(g["name"] == keys.SCHEDULING_GATE for g in p["spec"].get("schedulingGates") or []) for p in members)


def _serving_ca_ok(pod_ip: str, ca: bytes) -> bool:
    """A TLS handshake with the replica's webhook port (its pod address, inside the node's namespace), verified
    against `ca` for the Service's name, as the API server verifies it."""
    context = ssl.create_default_context(cadata=ca.decode())
    with socket.create_connection((pod_ip, 9443), timeout=5) as raw, context.wrap_socket(raw, server_hostname=WEBHOOK_HOST) as tls:
        return tls.version() is not None


def test_the_disruption_budget_keeps_one_replica(cluster: Cluster) -> None:
    """Evictions, as a drain sends them: the first replica's is accepted, the second's refused (429) while the first
    is gone, so the webhooks always have a server; the Deployment comes back to two."""
    pods = [n for n, p in _operator_pods(cluster).items() if _ready(p)]
    leader = _leader(cluster)
    order = sorted(pods, key=lambda n: n == leader)  # the standby first

    def evict(name: str) -> subprocess.CompletedProcess[str]:
        body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": NAMESPACE}}
        path = f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction"
        return cluster.kubectl("create", "--raw", path, "-f", "-", stdin=json.dumps(body), check=False)

    first, second = evict(order[0]), evict(order[1])
    assert first.returncode == 0, first.stderr
    assert second.returncode != 0 and "disruption budget" in second.stderr, second.stderr
    wait_for(lambda: sum(_ready(p) for p in _operator_pods(cluster).values()) == 2, "two Ready replicas again", 120)
    assert wait_for(lambda: _leader(cluster) in _operator_pods(cluster), "a replica leads", 30)


def test_each_rank_sees_the_device_reserved_for_it(cluster: Cluster, namespace: str) -> None:
    """The kubelet calls dra-example-driver's NodePrepareResources, containerd injects the CDI spec: each rank's log
    names the device Phalanx allocated to its claim (the driver's CDI spec sets GPU_DEVICE_<n> to the device's name)."""
    job = gpu_gang("ranks", 4)
    rank = job["spec"]["template"]["spec"]["containers"][0]
    given = "$(env | sed -n 's/^GPU_DEVICE_[0-9]*=//p')"
    rank["command"] = ["sh", "-c", f'echo "rank $JOB_COMPLETION_INDEX holding {given} on $NODE"; exec sleep 3600']
    rank["env"] = [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    members = _start(cluster, namespace, job)
    seen = {}
    for pod in members:
        name, index = pod["metadata"]["name"], pod["metadata"]["annotations"][INDEX]
        log = wait_for(lambda n=name: cluster.kubectl("logs", n, "-n", namespace, check=False).stdout.strip(), f"{name}'s log")
        pool, device = _device_of(cluster, namespace, pod).split("/")
        assert pool == pod["spec"]["nodeName"], "the device is on the rank's own node"
        assert log == f"rank {index} holding {device} on {pool}", log
        seen[name] = (pool, device)
    assert len(set(seen.values())) == 4, f"four ranks, four devices: {seen}"


def test_the_leader_killed_mid_release_the_standby_finishes_it(cluster: Cluster, namespace: str) -> None:
    """The leader's pod is killed (grace 0: SIGKILL) while a release is half done: rank 0's gate lifted, the other
    lifts held by the API server (a webhook answering 503 slowly, as an overloaded control plane does). The other
    replica takes the Lease within its duration and finishes the release; every rank runs on its own device."""
    flaky = flakyapi.FlakyLifts(503, 10**6, {"1", "2", "3"}, delay=3.0)
    with flakyapi.flaky_lifts(cluster, namespace, flaky):
        leader = _leader(cluster)
        demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("failover", 4)))

        def half_released() -> list[dict[str, Any]]:
            pods = _pods(cluster, namespace, "failover")
            lifted = [p for p in pods if not faultcheck.gated(p)]
            return sum(flaky.answered.values()) > 0 and len(lifted) == 1 and pods

        at_kill = wait_for(half_released, "rank 0 lifted, the other lifts held", 60)
        cluster.kubectl("delete", "pod", leader, "-n", NAMESPACE, "--grace-period=0", "--force")
        killed = time.monotonic()
        flaky.times = 0
        successor = wait_for(lambda: (h := _leader(cluster)) not in (None, leader) and h, "another replica leads", 30)
        took_over = time.monotonic() - killed
        members = wait_for(lambda: len(r := _running(_pods(cluster, namespace, "failover"))) == 4 and r, "all four ranks running", 120)
    assert sum(1 for p in at_kill if faultcheck.gated(p)) == 3, "killed with three of four gates still on"
    assert successor in _operator_pods(cluster), successor
    assert took_over < 10 + 5, f"the standby led {took_over:.1f}s after the kill (lease 10 s)"
    devices = [_device_of(cluster, namespace, p) for p in members]
    assert len(set(devices)) == 4, devices
    wait_for(lambda: sum(_ready(p) for p in _operator_pods(cluster).values()) == 2, "the Deployment back at two Ready replicas", 120)


def _watch_until(
    cluster: Cluster, namespace: str, done: Any, continuous: faultcheck.Continuous, timeout: float
) -> list[faultcheck.Snapshot]:
    """Snapshots judged as they are taken (no running pod without its device, no device held twice) until `done`."""
    seen = []
    deadline = time.monotonic() + timeout
    while True:
        snapshot = faultcheck.take(cluster.kubectl, namespace)
        wrong = continuous.check(snapshot)
        assert not wrong, f"after {continuous.snapshots} snapshots: {wrong}\n{faultcheck.summary(snapshot)}"
        seen.append(snapshot)
        if done(snapshot):
            return seen
        assert time.monotonic() < deadline, f"not done after {timeout}s\n{faultcheck.summary(snapshot)}"


def _stopping(snapshot: faultcheck.Snapshot, job: str) -> int:
    return sum(
        1
        for p in snapshot.pods
        if p["metadata"].get("deletionTimestamp")
        and (p.get("status") or {}).get("phase") == "Running"
        and (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job
    )


def _stopped_after(seen: list[tuple[float, faultcheck.Snapshot]], job: str) -> float:
    """How long members of `job` were seen stopping (deleted, still running)."""
    times = [t for t, s in seen if _stopping(s, job)]
    return max(times) - min(times) if times else 0.0


def _timed(cluster: Cluster, namespace: str, done: Any, timeout: float = 150) -> list[tuple[float, faultcheck.Snapshot]]:
    stamped: list[tuple[float, faultcheck.Snapshot]] = []

    def stamp(snapshot: faultcheck.Snapshot) -> bool:
        stamped.append((time.monotonic(), snapshot))
        return done(snapshot)

    _watch_until(cluster, namespace, stamp, faultcheck.Continuous(), timeout)
    return stamped


def _all_free(snapshot: faultcheck.Snapshot) -> bool:
    return not any(faultcheck.held(c) for c in snapshot.claims)


def test_a_teardown_frees_the_devices_only_after_the_containers_stopped(cluster: Cluster, namespace: str) -> None:
    """A released gang's Job is suspended: its ranks run their 20 s grace period, and every claim stays theirs until
    its container has stopped (the kubelet unprepares, the resourceclaim controller frees)."""
    _start(cluster, namespace, gpu_gang("slow", 4, grace=GRACE))
    cluster.kubectl("patch", "job", "slow", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": true}}')
    seen = _timed(cluster, namespace, lambda s: _all_free(s) and not _running(s.pods))
    assert _stopped_after(seen, "slow") >= GRACE - 5, "the ranks ran out their grace period before the devices were freed"


def test_disruption_mode_all_takes_the_gang_down_and_keeps_devices_until_stopped(cluster: Cluster, namespace: str) -> None:
    """disruptionMode all: one rank is deleted, the other three are taken down as a unit; each of the four runs its
    20 s grace period holding its device, and the gang comes back whole on the devices once they are free."""
    members = _start(cluster, namespace, gpu_gang("unit", 4, mode="all", grace=GRACE))
    cluster.kubectl("delete", "pod", members[0]["metadata"]["name"], "-n", namespace, "--wait=false")
    first = {p["metadata"]["uid"] for p in members}

    def whole_again(s: faultcheck.Snapshot) -> bool:
        fresh = [p for p in _running(s.pods) if p["metadata"]["uid"] not in first and not p["metadata"].get("deletionTimestamp")]
        return len(fresh) == 4

    seen = _timed(cluster, namespace, whole_again, timeout=240)
    assert max(_stopping(s, "unit") for _, s in seen) == 4, "all four ranks were seen stopping together"
    assert _stopped_after(seen, "unit") >= GRACE - 5


def test_preemption_waits_for_the_victims_containers_to_stop(cluster: Cluster, namespace: str) -> None:
    """An urgent gang preempts a low-priority gang (20 s grace) for its GPUs: the victims run out their grace period
    holding their devices, and no urgent rank runs on a device before its victim has stopped."""
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        _start(cluster, namespace, gpu_gang("research", 4, mode="all", priority_class=low, grace=GRACE))
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("urgent", 4, priority_class=urgent)))
        seen = _timed(cluster, namespace, lambda s: len([p for p in _running(s.pods) if "urgent" in p["metadata"]["name"]]) == 4, 240)
    assert _stopped_after(seen, "research") >= GRACE - 5, "the victims ran out their grace period"
    for _, snapshot in seen:
        devices: dict[str, list[str]] = {}
        claims = {c["metadata"]["name"]: c for c in snapshot.claims}
        for pod in _running(snapshot.pods):
            for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
                for device in faultcheck.held(claims.get(status.get("resourceClaimName"), {})):
                    devices.setdefault("/".join(device), []).append(pod["metadata"]["name"])
        assert all(len(users) == 1 for users in devices.values()), f"a device used by two running pods: {devices}"
