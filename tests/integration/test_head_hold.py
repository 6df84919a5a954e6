"""No starvation on the local control plane: a 4-rank gang behind a stream of 1-GPU pods, past its hold-after, gets
the devices its plan needs held for it as they free, while the stream goes on running on the others (backfill); the
hold is gone once the gang runs, or once it is deleted, and a restarted operator keeps the same hold, leaking nothing.

The stream ends its pods oldest first and always has pods waiting, so every device that frees is wanted at once: the
gang's bound is structural, not timed. Each of the devices it needs is held by one of the first 6 pods, so it runs
once those have ended (one more ends first, on a device the gang does not need, to show backfill); without a hold,
each freed device goes to a waiting pod and it never runs.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT, WORKLOADS, Cluster, wait_for

import test_release_path
from jobs import bound_pods, gpu_gang, one_gpu_pod_spec
from phalanx.api import keys
from phalanx_dev.localcluster import demo, operatorproc

HEAD = "head"
admission_policy = test_release_path.admission_policy


@pytest.fixture
def own_operator(cluster: Cluster) -> Iterator[list[operatorproc.OperatorProcess]]:
    """An operator of this module's own, so a test can kill it and start another; the list holds the one running."""
    assert cluster.local is not None, "starts an operator of its own"
    running = [operatorproc.start(cluster.local, ROOT)]
    try:
        yield running
    finally:
        running[-1].stop()
        if not os.environ.get("PHALANX_KEEP_LOGS"):
            for handle in running:
                handle.log.unlink(missing_ok=True)


def _pod(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"app": "stream"}}, "spec": one_gpu_pod_spec(grace=0)}


def _apply(cluster: Cluster, namespace: str, *objects: dict[str, Any]) -> None:
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


def _big(name: str = "big") -> dict[str, Any]:
    job = gpu_gang(name, 4, mode="all")
    job["metadata"]["annotations"][keys.HOLD_AFTER] = "2"
    return job


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict[str, Any] | None:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else None


def _hold(cluster: Cluster, namespace: str, job: str = "big") -> dict[str, Any] | None:
    group = _pod_group(cluster, namespace, job)
    return ((group or {}).get("status") or {}).get("hold")


def _rules(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Device (driver/pool/device) -> the DeviceTaintRule holding it for the head of the line."""
    items = cluster.get("devicetaintrules", "-l", f"{keys.TAINT_PURPOSE_LABEL}={HEAD}")["items"]
    return {r["metadata"]["annotations"][keys.HELD_DEVICE_ANNOTATION]: r for r in items}


def _devices_of(cluster: Cluster, namespace: str) -> dict[str, str]:
    """Pod name -> the device (driver/pool/device) its claim is allocated, for every stream pod that has one."""
    out = {}
    for claim in cluster.get("resourceclaims", "-n", namespace)["items"]:
        owner = next((o["name"] for o in claim["metadata"].get("ownerReferences") or [] if o["kind"] == "Pod"), None)
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        if owner and owner.startswith("s-") and results:
            r = results[0]
            out[owner] = f"{r['driver']}/{r['pool']}/{r['device']}"
    return out


def _stream(cluster: Cluster, namespace: str, names: list[str]) -> None:
    _apply(cluster, namespace, *(_pod(n) for n in names))


def _fill(cluster: Cluster, namespace: str) -> None:
    """6 stream pods on the 6 GPUs, then the gang, then 3 more pods waiting behind it; the gang's hold-after passes."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    _stream(cluster, namespace, [f"s-{i}" for i in range(6)])
    wait_for(lambda: len(_devices_of(cluster, namespace)) == 6, "the stream holds all 6 GPUs")
    _apply(cluster, namespace, _big())
    _stream(cluster, namespace, [f"s-{i}" for i in range(6, 9)])


def test_a_big_gang_behind_a_stream_of_one_gpu_pods_gets_its_devices_while_the_rest_backfills(
    cluster: Cluster, own_operator: list[operatorproc.OperatorProcess], namespace: str
) -> None:
    _fill(cluster, namespace)
    hold = wait_for(lambda: _hold(cluster, namespace), "a hold for the gang at the head of the line")
    held = set(hold["devices"])
    assert len(held) == 4, hold
    assert set(_rules(cluster)) == held, "one DeviceTaintRule per device held, and no other"

    later = {f"s-{i}" for i in range(6, 9)}
    """Stream pods that came after the gang: none may get a held device."""
    # backfill: a device the gang's plan does not need goes on serving the stream while the gang waits
    other, device = next((p, d) for p, d in sorted(_devices_of(cluster, namespace).items()) if d not in held)
    cluster.kubectl("delete", "pod", other, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    backfill = wait_for(
        lambda: next((p for p, d in _devices_of(cluster, namespace).items() if d == device and p in later), None),
        f"a later pod of the stream on {device}, freed by {other}",
    )
    assert not any(p["spec"].get("nodeName") for p in _job_pods(cluster, namespace)), "the gang still waits for its held devices"
    ended, created = 1, 9
    while ended < 7 and not any(p["spec"].get("nodeName") for p in _job_pods(cluster, namespace)):
        running = sorted(
            (p for p in cluster.get("pods", "-n", namespace, "-l", "app=stream")["items"] if p["spec"].get("nodeName")),
            key=lambda p: int(p["metadata"]["name"].split("-")[1]),
        )
        oldest = running[0]["metadata"]["name"]
        device = _devices_of(cluster, namespace)[oldest]
        cluster.kubectl("delete", "pod", oldest, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
        ended += 1
        _stream(cluster, namespace, [f"s-{created}"])  # the stream goes on: pods always wait for a device
        later.add(f"s-{created}")
        created += 1

        def settled(device: str = device, oldest: str = oldest) -> bool:
            taken = {d: p for p, d in _devices_of(cluster, namespace).items()}
            gang = any(p["spec"].get("nodeName") for p in _job_pods(cluster, namespace))
            return gang or taken.get(device, oldest) != oldest or (device in held and device not in taken)

        wait_for(settled, f"the device {device} of {oldest} taken again, or kept free for the gang")
        stolen = {p: d for p, d in _devices_of(cluster, namespace).items() if p in later and d in held}
        assert not stolen, f"a pod of the stream got a held device while the gang waited: {stolen}"

    gang = bound_pods(cluster, namespace, "big", 4)
    assert len({p["spec"]["nodeName"] for p in gang}) == 2
    wait_for(lambda: not _rules(cluster) and _hold(cluster, namespace) is None, "the hold given back once the gang runs")
    print(f"gang bound after {ended} pods of the stream ended; {backfill} backfilled {device}")


def _explain(cluster: Cluster, namespace: str, job: str) -> str:
    env = dict(os.environ, KUBECONFIG=str(cluster.kubeconfig))
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "phalanx"), "explain", job, "-n", namespace], env=env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def _job_pods(cluster: Cluster, namespace: str, job: str = "big") -> list[dict[str, Any]]:
    return cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def test_the_hold_survives_a_restart_unchanged_and_is_gone_when_the_gang_is_deleted(
    cluster: Cluster, own_operator: list[operatorproc.OperatorProcess], namespace: str
) -> None:
    _fill(cluster, namespace)
    hold = wait_for(lambda: _hold(cluster, namespace), "a hold for the gang at the head of the line")
    before = {d: r["metadata"]["uid"] for d, r in _rules(cluster).items()}
    assert set(before) == set(hold["devices"])
    _apply(cluster, namespace, gpu_gang("next", 2, mode="all"))
    wait_for(lambda: ((_pod_group(cluster, namespace, "next") or {}).get("status") or {}).get("conditions"), "the gang behind planned")
    head = _pod_group(cluster, namespace, "big")
    assert head is not None
    said = _explain(cluster, namespace, "big")
    assert (
        f"Queue:       position 1 of 2 waiting (priority, then age); 4 device(s) held for it as they free, since {hold['heldAt']}" in said
    ), said
    said = _explain(cluster, namespace, "next")
    assert f"4 device(s) held for {namespace}/{head['metadata']['name']}, the head of the line" in said, said

    own_operator[-1].kill()
    victim, freed = next((p, d) for p, d in _devices_of(cluster, namespace).items() if d in before)
    cluster.kubectl("delete", "pod", victim, "-n", namespace, "--grace-period=0", "--force", "--wait=false")
    wait_for(lambda: victim not in _devices_of(cluster, namespace), f"{victim} gone and its device free")
    assert cluster.local is not None
    own_operator.append(operatorproc.start(cluster.local, ROOT))
    wait_for(lambda: "hold for the head of the line" in own_operator[-1].logs(), "the new operator's hold decided")
    _stream(cluster, namespace, ["s-9"])
    wait_for(lambda: "s-9" in cluster.kubectl("get", "pods", "-n", namespace, "-o", "name").stdout, "one more pod of the stream")

    after = {d: r["metadata"]["uid"] for d, r in _rules(cluster).items()}
    assert after == before, "the same rules hold the same devices: none made again, none lost, none left over"
    assert _hold(cluster, namespace) == hold, "status.hold as before the restart"
    assert freed not in _devices_of(cluster, namespace).values(), f"{freed}, held, freed while no operator ran, stays free"

    cluster.kubectl("delete", "job", "big", "-n", namespace, "--wait=false")
    wait_for(lambda: not _rules(cluster), "the hold given back once the gang is deleted")
    wait_for(lambda: _pod_group(cluster, namespace, "big") is None, "the PodGroup gone with its Job")


def test_the_hold_survives_the_holders_back_off_after_an_aborted_release(
    cluster: Cluster, own_operator: list[operatorproc.OperatorProcess], namespace: str, admission_policy: Any
) -> None:
    """Every gate lift of the gang is refused (a policy), so each release it tries is rolled back and it backs off.
    Its hold stays while it does: the same rules on the same devices, none given to the stream pods waiting behind
    it. Before, the holder backing off was not in the line, and the cycle that undid its release gave the hold
    back: the pods waiting took the devices it had waited for."""
    _fill(cluster, namespace)
    hold = wait_for(lambda: _hold(cluster, namespace), "a hold for the gang at the head of the line")
    before = {d: r["metadata"]["uid"] for d, r in _rules(cluster).items()}
    assert set(before) == set(hold["devices"])
    gate = keys.SCHEDULING_GATE
    admission_policy(
        policy := f"no-big-lift-{namespace}",
        namespace,
        ["pods"],
        f"!(object.metadata.name.startsWith('big-') && has(oldObject.spec.schedulingGates) "
        f"&& oldObject.spec.schedulingGates.exists(g, g.name == '{gate}') "
        f"&& !(has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == '{gate}')))",
        "test policy: the gang stays gated",
    )
    later = {"s-6", "s-7", "s-8"}
    for pod in sorted(p for p, d in _devices_of(cluster, namespace).items() if d in before):
        cluster.kubectl("delete", "pod", pod, "-n", namespace, "--grace-period=0", "--force", "--wait=false")

    def rolled_back() -> int:
        selector = "involvedObject.kind=PodGroup,reason=ReservationRolledBack"
        return len(cluster.get("events", "-n", namespace, "--field-selector", selector)["items"])

    # two releases undone, the second after the back-off the first began; or the hold gone meanwhile
    def rule_uids() -> dict[str, str]:
        return {d: r["metadata"]["uid"] for d, r in _rules(cluster).items()}

    def held_as_before() -> None:
        assert rule_uids() == before, "the same rules hold the same devices while the holder backs off"
        assert _hold(cluster, namespace) == hold, "status.hold unchanged"
        stolen = {p: d for p, d in _devices_of(cluster, namespace).items() if p in later and d in before}
        assert not stolen, f"pods waiting behind the gang got devices held for it: {stolen}"

    wait_for(lambda: rolled_back() >= 2 or rule_uids() != before, "a second release undone")
    held_as_before()
    # the policy goes between two attempts, not during one: once the fifth release is undone, its back-off (8 s)
    # leaves the removal time to reach the API server's admission before the next gate lift. Removed while a release
    # lifts its gates, some lifts would pass and others not, and the gang, released in part, would be torn down
    # instead (test_release_path's subject), giving its hold back as it is admitted again
    wait_for(lambda: rolled_back() >= 5 or rule_uids() != before, "a fifth release undone")
    held_as_before()
    test_release_path.remove_policy(cluster, policy)
    bound_pods(cluster, namespace, "big", 4)
    torn = cluster.get("events", "-n", namespace, "--field-selector", f"involvedObject.kind=PodGroup,reason={keys.TORN_DOWN}")
    assert not torn["items"], "released whole once the policy went: the scenario this test is for"
    wait_for(lambda: not _rules(cluster) and _hold(cluster, namespace) is None, "the hold given back once the gang runs")
