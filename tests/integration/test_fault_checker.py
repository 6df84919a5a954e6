"""The fault suite's judge catches what it is there to catch (pure: no cluster)."""

from __future__ import annotations

from typing import Any

import faultcheck
from phalanx.api import keys

JOB = "job-uid"


def pod(name: str, *, gated: bool = False, node: str | None = None, pinned: bool = False) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "labels": {keys.JOB_UID_LABEL: JOB},
            "annotations": {keys.PINNED_NODE: "worker-1"} if pinned else {},
        },
        "spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}] if gated else [], "nodeName": node},
        "status": {"phase": "Running" if node else "Pending"},
    }


def claim(name: str, user: str, *devices: str) -> dict[str, Any]:
    results = [{"driver": "gpu.example.com", "pool": "worker-1", "device": d, "request": "gpu"} for d in devices]
    status = {"allocation": {"devices": {"results": results}}, "reservedFor": [{"resource": "pods", "name": user, "uid": f"uid-{user}"}]}
    return {"metadata": {"name": name, "uid": f"cuid-{name}"}, "status": status if devices else {}}


def group(min_count: int, reservation: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "g", "ownerReferences": [{"kind": "Job", "controller": True, "uid": JOB}]},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, "disruptionMode": {"all": {}}},
        "status": {"reservation": reservation} if reservation else {},
    }


def check(pods: list, claims: list, groups: list, devices: int = 2) -> list[str]:
    return faultcheck.violations(faultcheck.Snapshot(pods=pods, claims=claims, podgroups=groups, devices=devices))


def test_a_whole_running_gang_is_clean() -> None:
    assert check([pod("a", node="w"), pod("b", node="w")], [claim("ca", "a", "gpu-0"), claim("cb", "b", "gpu-1")], [group(2)]) == []


def test_each_fault_is_named() -> None:
    assert check([pod("a", node="w")], [claim("ca", "a", "gpu-0"), claim("cb", "b", "gpu-0")], [])[0].startswith("device")
    assert "gone" in check([], [claim("ca", "a", "gpu-0")], [])[0]
    assert "stopped" in check([{**pod("a", node="w"), "status": {"phase": "Failed"}}], [claim("ca", "a", "gpu-0")], [])[0]
    assert "no recorded intent" in check([pod("a", gated=True)], [claim("ca", "a", "gpu-0")], [])[0]
    intent = {"state": "Released", "claims": [{"uid": "cuid-ca"}], "placements": [{"uid": "uid-a"}]}
    assert check([pod("a", gated=True, pinned=True)], [claim("ca", "a", "gpu-0")], [group(1, intent)], devices=1) == []
    assert "pinned" in check([pod("a", gated=True, pinned=True)], [], [])[0]
    assert "half done" in check([], [], [group(2, {"state": "Reserving"})])[0]
    assert "1 of minCount 2 members released" in check([pod("a", node="w"), pod("b", gated=True)], [], [group(2)])[0]
    assert "wait while 2 devices are free" in check([pod("a", gated=True), pod("b", gated=True)], [], [group(2)])[0]


def test_a_running_pod_whose_claim_lost_its_devices_is_named() -> None:
    stopping = pod("a", node="w")
    stopping["metadata"]["deletionTimestamp"] = "2026-12-01T00:00:30Z"  # deleted, still in its grace period
    stopping["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "ca"}]
    assert check([stopping], [claim("ca", "a", "gpu-0")], []) == []
    assert "no longer holds its devices" in check([stopping], [claim("ca", "a")], [])[0]
    assert "no longer holds its devices" in check([stopping], [], [])[0]
    assert "no longer holds its devices" in check([stopping], [claim("ca", "b", "gpu-0")], [])[0]
    stopped = {**stopping, "status": {"phase": "Failed"}}
    assert check([stopped], [claim("ca", "a")], []) == []


def test_the_continuous_check_names_a_lost_device_seen_twice_in_a_row() -> None:
    running = pod("a", node="w")
    running["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "ca"}]
    lost = faultcheck.Snapshot(pods=[running], claims=[claim("ca", "a")], podgroups=[], devices=1)
    held = faultcheck.Snapshot(pods=[running], claims=[claim("ca", "a", "gpu-0")], podgroups=[], devices=1)
    continuous = faultcheck.Continuous()
    assert continuous.check(lost) == []  # bound between the two reads of one snapshot: not yet a fault
    assert continuous.check(held) == []
    assert continuous.check(lost) == []
    assert "no longer holds its devices" in continuous.check(lost)[0]


def test_a_claim_kube_scheduler_unreserved_is_no_loss_while_it_holds_the_devices_but_is_named_once_settled() -> None:
    running = pod("a", node="w")
    running["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "ca"}]
    stripped = claim("ca", "a", "gpu-0")
    stripped["status"]["reservedFor"] = []  # Unreserve's strategic-merge delete, the allocation left as it was
    stripped["metadata"]["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": "a", "uid": "uid-a"}]  # made from a template
    snapshot = faultcheck.Snapshot(pods=[running], claims=[stripped], podgroups=[], devices=1)
    continuous = faultcheck.Continuous()
    assert continuous.check(snapshot) == [] and continuous.check(snapshot) == [], "the devices stay held: no loss"
    assert faultcheck.violations(snapshot) == ["pod a is bound but its claim ca is not reserved for it"]
