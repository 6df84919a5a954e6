"""An operator that dies mid-release resumes from the intent it recorded, or undoes it; nothing leaks.

The crash is staged exactly: with the operator stopped, the PodGroup gets the
`status.reservation` a release records first, and one claim gets the
allocation a release writes next. The restarted operator must finish the job.

Slices: the session cluster's, from dra-example-driver's plugin; the staged plan names
its pools and devices (worker-N, gpu-N).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import WORKLOADS, Cluster, wait_for

from jobs import gpu_gang, one_gpu_pod_spec, priority_classes
from phalanx.api import keys
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]


@pytest.fixture
def stoppable(cluster: Cluster) -> Iterator[list[operatorproc.OperatorProcess]]:
    if cluster.local is None:
        pytest.skip("stops and starts the operator process")
    started: list[operatorproc.OperatorProcess] = []
    yield started
    for handle in started:
        handle.stop()


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"scheduling.phalanx.dev/job-name={job}")["items"]
    return items[0] if items else {}


def _reason(pg: dict) -> str | None:
    for cond in (pg.get("status") or {}).get("conditions") or []:
        if cond["type"] == "PodGroupInitiallyScheduled":
            return cond["reason"]
    return None


def _claims_of(cluster: Cluster, namespace: str, job: str) -> dict[str, dict]:
    claims = cluster.get("resourceclaims", "-n", namespace)["items"]
    return {c["metadata"]["name"]: c for c in claims if c["metadata"]["name"].startswith(f"{job}-")}


def _allocated(cluster: Cluster) -> list[tuple]:
    return [
        (r["driver"], r["pool"], r["device"])
        for c in cluster.get("resourceclaims", "-A")["items"]
        if (c.get("status") or {}).get("allocation")
        for r in c["status"]["allocation"]["devices"]["results"]
    ]


def _stage_crash(cluster: Cluster, namespace: str, devices: list[tuple[str, str, str]]) -> dict:
    """Record train-b's reservation on `devices` and write its first claim, as a release does before dying."""
    pg = _pod_group(cluster, namespace, "train-b")
    pods = sorted(
        cluster.get("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=train-b")["items"], key=lambda p: p["metadata"]["name"]
    )
    claims = _claims_of(cluster, namespace, "train-b")
    placements, reserved = [], []
    for pod, (driver, pool, device) in zip(pods, devices, strict=False):
        claim_name = pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
        placements.append({"name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"], "node": pool})
        reserved.append(
            {
                "name": claim_name,
                "uid": claims[claim_name]["metadata"]["uid"],
                "node": pool,
                "results": [{"request": "gpu", "driver": driver, "pool": pool, "device": device}],
            }
        )
    status = {"status": {"reservation": {"state": "Reserving", "placements": placements, "claims": reserved}}}
    cluster.kubectl(
        "patch",
        "podgroups.scheduling.phalanx.dev",
        pg["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    first, pod = reserved[0], pods[0]
    cluster.kubectl(
        "patch",
        "resourceclaim",
        first["name"],
        "-n",
        namespace,
        "--type=merge",
        "-p",
        json.dumps({"metadata": {"finalizers": ["resource.kubernetes.io/delete-protection"]}}),
    )
    allocation = {
        "status": {
            "allocation": {
                "devices": {"results": first["results"]},
                "nodeSelector": {
                    "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [first["node"]]}]}]
                },
            },
            "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}],
        }
    }
    cluster.kubectl(
        "patch", "resourceclaim", first["name"], "-n", namespace, "--subresource=status", "--type=merge", "-p", json.dumps(allocation)
    )
    return {c["name"]: c["results"][0] for c in reserved}


def _setup_blocked_gang(cluster: Cluster, stoppable: list, namespace: str) -> None:
    stoppable.append(operatorproc.start(cluster.local, ROOT))
    try:
        _block(cluster, stoppable, namespace)
    except TimeoutError as exc:
        state = cluster.kubectl("get", "pods,podgroups.scheduling.phalanx.dev,resourceclaims", "-n", namespace, "-o", "wide").stdout
        logs = stoppable[-1].logs()[-8000:] if stoppable else ""
        raise TimeoutError(f"{exc}\n{state}\n--- operator log ---\n{logs}") from None


def _block(cluster: Cluster, stoppable: list, namespace: str) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml", "gang-train-a.yaml"], namespace)
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train-a")) == "Scheduled", "train-a Scheduled")
    demo.apply(cluster.kubectl, WORKLOADS, ["gang-train-b.yaml"], namespace)
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train-b")) == "Unschedulable", "train-b Unschedulable")
    stoppable.pop().stop()
    cluster.kubectl("delete", "job", "train-a", "-n", namespace, "--cascade=foreground", "--wait=true")
    wait_for(lambda: not _claims_of(cluster, namespace, "train-a"), "train-a's claims gone")


def test_a_restarted_operator_finishes_the_recorded_release(cluster: Cluster, stoppable: list, namespace: str) -> None:
    _setup_blocked_gang(cluster, stoppable, namespace)
    free = [("gpu.example.com", f"worker-{w}", f"gpu-{i}") for w in (1, 2, 3) for i in (0, 1)]
    free = [d for d in free if d not in _allocated(cluster)]
    recorded = _stage_crash(cluster, namespace, free[:4])

    stoppable.append(operatorproc.start(cluster.local, ROOT))
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train-b")) == "Scheduled", "train-b Scheduled after the restart")
    claims = _claims_of(cluster, namespace, "train-b")
    actual = {name: c["status"]["allocation"]["devices"]["results"][0] for name, c in claims.items()}
    assert actual == recorded, "the restarted operator completed the recorded plan, device for device"
    assert _pod_group(cluster, namespace, "train-b")["status"]["reservation"]["state"] == "Released"


def test_a_recorded_release_that_cannot_finish_is_rolled_back(cluster: Cluster, stoppable: list, namespace: str) -> None:
    _setup_blocked_gang(cluster, stoppable, namespace)
    free = [("gpu.example.com", f"worker-{w}", f"gpu-{i}") for w in (1, 2, 3) for i in (0, 1)]
    free = [d for d in free if d not in _allocated(cluster)]
    _stage_crash(cluster, namespace, free[:4])
    pods = cluster.get("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=train-b")["items"]
    doomed = sorted(pods, key=lambda p: p["metadata"]["name"])[-1]["metadata"]["name"]
    cluster.kubectl("patch", "job", "train-b", "-n", namespace, "--type=merge", "-p", '{"spec": {"backoffLimit": 3}}')
    cluster.kubectl("delete", "pod", doomed, "-n", namespace, "--wait=true")  # a recorded member is gone; the Job replaces it

    stoppable.append(operatorproc.start(cluster.local, ROOT))

    def rolled_back_and_replanned() -> bool:
        pg = _pod_group(cluster, namespace, "train-b")
        reservation = (pg.get("status") or {}).get("reservation")
        return reservation is None or reservation["state"] == "Released"

    wait_for(rolled_back_and_replanned, "the stale reservation undone")
    events = cluster.get("events", "-n", namespace, "--field-selector", "reason=ReservationRolledBack")["items"]
    assert events and "gone" in events[0]["message"]
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train-b")) == "Scheduled", "train-b planned again and Scheduled")
    held = _allocated(cluster)
    assert len(held) == len(set(held)) == 4, f"exactly the 4 members' devices, none leaked: {held}"


def test_a_release_killed_after_its_first_gate_lift_is_torn_down_not_stranded(cluster: Cluster, stoppable: list, namespace: str) -> None:
    """kill -9 after one gate lift: one member released and bound on its reserved device, then another member is
    deleted while the operator is down, so the recorded release cannot finish. The released member must not run on
    alone below minCount with no record: it is torn down, and the group admitted again whole."""
    _setup_blocked_gang(cluster, stoppable, namespace)
    free = [("gpu.example.com", f"worker-{w}", f"gpu-{i}") for w in (1, 2, 3) for i in (0, 1)]
    free = [d for d in free if d not in _allocated(cluster)]
    _stage_crash(cluster, namespace, free[:4])
    pods = sorted(
        cluster.get("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=train-b")["items"], key=lambda p: p["metadata"]["name"]
    )
    first, doomed = pods[0], pods[-1]
    node = free[0][1]
    released = {
        "metadata": {"annotations": {keys.PINNED_NODE: node}},
        "spec": {
            "schedulingGates": None,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
                    }
                }
            },
        },
    }
    cluster.kubectl("patch", "pod", first["metadata"]["name"], "-n", namespace, "--type=merge", "-p", json.dumps(released))
    wait_for(
        lambda: cluster.get("pod", first["metadata"]["name"], "-n", namespace)["spec"].get("nodeName") == node, "the first member bound"
    )
    cluster.kubectl("patch", "job", "train-b", "-n", namespace, "--type=merge", "-p", '{"spec": {"backoffLimit": 3}}')
    cluster.kubectl("delete", "pod", doomed["metadata"]["name"], "-n", namespace, "--wait=true")

    stoppable.append(operatorproc.start(cluster.local, ROOT))

    def first_taken_down() -> bool:
        pod = cluster.get("pod", first["metadata"]["name"], "-n", namespace, "--ignore-not-found")
        return not pod or bool(pod["metadata"].get("deletionTimestamp")) or pod["status"].get("phase") == "Failed"

    wait_for(first_taken_down, "the member released alone taken down", timeout=20)
    torn = cluster.get("events", "-n", namespace, "--field-selector", "reason=GangTornDown")["items"]
    assert any("released in part" in e["message"] for e in torn), [e["message"] for e in torn]
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train-b")) == "Scheduled", "train-b admitted again whole", timeout=120)
    assert first["metadata"]["uid"] not in {p["metadata"]["uid"] for p in _running(cluster, namespace, "train-b")}
    held = _allocated(cluster)
    assert len(held) == len(set(held)) == 4, f"exactly the 4 new members' devices, none leaked: {held}"


def test_a_device_taken_while_the_operator_was_down_is_left_to_its_new_holder(cluster: Cluster, stoppable: list, namespace: str) -> None:
    """The recorded plan names worker-1's two GPUs; one was written before the crash, a bare pod takes the other
    while the operator is down. The restarted operator must not evict the bare pod: it re-plans the gang elsewhere."""
    _setup_blocked_gang(cluster, stoppable, namespace)
    planned = [("gpu.example.com", "worker-1", "gpu-0"), ("gpu.example.com", "worker-1", "gpu-1")]
    planned += [("gpu.example.com", "worker-2", "gpu-0"), ("gpu.example.com", "worker-2", "gpu-1")]
    assert not set(planned) & set(_allocated(cluster)), "every planned device is free before the crash"
    _stage_crash(cluster, namespace, planned)  # the first claim now holds worker-1/gpu-0
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {**one_gpu_pod_spec(), "nodeSelector": {"kubernetes.io/hostname": "worker-1"}},
    }
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(bare))
    wait_for(lambda: cluster.get("pod", "bare", "-n", namespace)["spec"].get("nodeName"), "the bare pod bound on worker-1")
    bare_uid = cluster.get("pod", "bare", "-n", namespace)["metadata"]["uid"]
    bare_claim = cluster.get("pod", "bare", "-n", namespace)["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    taken = cluster.get("resourceclaim", bare_claim, "-n", namespace)["status"]["allocation"]["devices"]["results"][0]
    assert (taken["driver"], taken["pool"], taken["device"]) == planned[1], "the bare pod took a device of the recorded plan"

    stoppable.append(operatorproc.start(cluster.local, ROOT))
    wait_for(lambda: _reason(_pod_group(cluster, namespace, "train-b")) == "Scheduled", "train-b re-planned and Scheduled")
    pod = cluster.get("pod", "bare", "-n", namespace)
    assert pod["metadata"]["uid"] == bare_uid and not pod["metadata"].get("deletionTimestamp"), "the bare pod was left alone"
    events = cluster.get("events", "-n", namespace, "--field-selector", "reason=ReservationRolledBack")["items"]
    assert any("taken by" in e["message"] for e in events), [e["message"] for e in events]
    held = _allocated(cluster)
    assert len(held) == len(set(held)) == 5, f"4 gang devices and the bare pod's, none twice: {held}"


def test_a_pod_that_tolerates_every_taint_does_not_keep_a_device_held_for_a_preemptor(
    cluster: Cluster, stoppable: list, namespace: str
) -> None:
    """A DeviceTaintRule holds a freed device only against requests that do not tolerate it. The operator is down
    while the victims stop; a low-priority pod whose claim tolerates every taint (`operator: Exists`) is given one
    of the held devices by kube-scheduler. The restarted operator evicts it as a victim, and the preemptor runs."""
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        stoppable.append(operatorproc.start(cluster.local, ROOT))
        demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
        research = gpu_gang("research", 4, mode="all", priority_class=low, grace=6)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(research))
        wait_for(lambda: len(_running(cluster, namespace, "research")) == 4, "research running")
        for i in range(2):
            filler = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": f"filler-{i}"},
                "spec": {**one_gpu_pod_spec(), "priorityClassName": urgent},
            }
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(filler))
        wait_for(
            lambda: all(cluster.get("pod", f"filler-{i}", "-n", namespace)["spec"].get("nodeName") for i in range(2)), "the fillers bound"
        )
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("urgent", 4, mode="all", priority_class=urgent)))
        wait_for(
            lambda: (
                (_pod_group(cluster, namespace, "urgent").get("status") or {}).get("nomination")
                and all(
                    p["metadata"].get("deletionTimestamp")
                    for p in cluster.get("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=research")["items"]
                )
            ),
            "research nominated and evicted",
        )
        stoppable.pop().stop()
        wait_for(lambda: not cluster.get("pods", "-n", namespace, "-l", "app=research")["items"], "the victims gone", timeout=40)
        tolerant = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": "tolerant-gpu"},
            "spec": {
                "spec": {
                    "devices": {
                        "requests": [
                            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com", "tolerations": [{"operator": "Exists"}]}}
                        ]
                    }
                }
            },
        }
        spec = {**one_gpu_pod_spec(), "priorityClassName": low}
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "tolerant-gpu"}]
        intruder = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "intruder"}, "spec": spec}
        cluster.kubectl(
            "apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [tolerant, intruder]})
        )
        wait_for(
            lambda: cluster.get("pod", "intruder", "-n", namespace)["spec"].get("nodeName"),
            "kube-scheduler gave the intruder a held device",
        )

        stoppable.append(operatorproc.start(cluster.local, ROOT))
        wait_for(
            lambda: cluster.get("events", "-n", namespace, "--field-selector", "reason=PreemptedByGang,involvedObject.name=intruder")[
                "items"
            ],
            "the intruder evicted as a victim",
            # 20 s ran out once in a clean-clone CI run (never in 8 runs here, 23-25 s in all): a first cycle after a
            # restart that is slow there, cause not found; the eviction itself is what the test asserts
            timeout=60,
        )
        wait_for(lambda: len(_running(cluster, namespace, "urgent")) == 4, "the preemptor running", timeout=60)


def test_a_preemption_killed_after_its_first_eviction_finishes_with_the_victims_it_chose(
    cluster: Cluster, stoppable: list, namespace: str
) -> None:
    """kill -9 between the first and the last eviction: the nomination names train-a-0 and train-a-3, train-a-0 is
    already gone. The restarted operator evicts train-a-3 and nobody else (train-a-1 and -2 are valid victims too),
    and the preemptor gets the devices."""
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        stoppable.append(operatorproc.start(cluster.local, ROOT))
        demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("train-a", 4, mode="single", priority_class=low)))
        running = wait_for(lambda: (r := _running(cluster, namespace, "train-a")) and len(r) == 4 and r, "train-a running")
        held = cluster.get("resourceclaims", "-n", namespace)["items"]
        cluster.kubectl(
            "apply",
            "-n",
            namespace,
            "-f",
            "-",
            stdin=json.dumps(gpu_gang("train-urgent", 4, mode="all", priority_class=urgent, suspend=True)),
        )
        wait_for(lambda: _pod_group(cluster, namespace, "train-urgent"), "train-urgent's PodGroup")
        crashed = stoppable.pop()
        os.killpg(crashed.process.pid, signal.SIGKILL)
        crashed.process.wait()

        # A fresh search would pick train-a-1 first (equal priority and age: by name); the nomination says train-a-3.
        victims, bystanders = [running[0], running[3]], running[1:3]
        devices = [
            "/".join((r["driver"], r["pool"], r["device"]))
            for c in held
            if any(u["uid"] in {v["metadata"]["uid"] for v in victims} for u in (c.get("status") or {}).get("reservedFor") or [])
            for r in c["status"]["allocation"]["devices"]["results"]
        ]
        refs = [{"namespace": namespace, "name": v["metadata"]["name"], "uid": v["metadata"]["uid"]} for v in victims]
        nomination = {"victims": refs, "devices": devices, "nodes": [], "nominatedAt": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        pg = _pod_group(cluster, namespace, "train-urgent")["metadata"]["name"]
        cluster.kubectl(
            "patch",
            "podgroups.scheduling.phalanx.dev",
            pg,
            "-n",
            namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"nomination": nomination}}),
        )
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": victims[0]["metadata"]["name"], "namespace": namespace},
        }
        cluster.kubectl(
            "create",
            "--raw",
            f"/api/v1/namespaces/{namespace}/pods/{victims[0]['metadata']['name']}/eviction",
            "-f",
            "-",
            stdin=json.dumps(eviction),
        )
        cluster.kubectl("patch", "job", "train-urgent", "-n", namespace, "--type=merge", "-p", '{"spec": {"suspend": false}}')

        stoppable.append(operatorproc.start(cluster.local, ROOT))
        wait_for(lambda: len(_running(cluster, namespace, "train-urgent")) == 4, "train-urgent running after the restart", timeout=120)
        pods = {p["metadata"]["uid"]: p for p in cluster.get("pods", "-n", namespace)["items"]}
        second = pods.get(victims[1]["metadata"]["uid"])
        assert second is None or second["metadata"].get("deletionTimestamp") or second["status"]["phase"] == "Failed", (
            "the second victim went"
        )
        for pod in bystanders:
            kept = pods.get(pod["metadata"]["uid"])
            assert kept and not kept["metadata"].get("deletionTimestamp") and kept["status"]["phase"] == "Running", (
                f"{pod['metadata']['name']} kept"
            )
        assert not (_pod_group(cluster, namespace, "train-urgent").get("status") or {}).get("nomination"), "the nomination is finished"


def _running(cluster: Cluster, namespace: str, job: str) -> list[dict]:
    pods = cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]
    ready = [
        p
        for p in pods
        if p["spec"].get("nodeName") and not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") == "Running"
    ]
    return sorted(ready, key=lambda p: p["metadata"]["name"])
