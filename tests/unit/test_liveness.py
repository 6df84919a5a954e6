"""The liveness oracle's tracker (tests/integration/liveness.py) on worlds made by hand: a gang that fits and waits past
the bound is named; a gang a group ahead could use the room of, one whose fit shows only briefly, and one the loop
rightly keeps waiting (a hold for the head of the line, a ready-deadline back-off, a device a terminating pod still
holds, no operator leading) are not."""

from __future__ import annotations

import datetime
from dataclasses import replace
from typing import Any

import liveness
from phalanx.api import keys

T0 = datetime.datetime(2026, 8, 26, 12, 0, tzinfo=datetime.UTC)
DRIVER = "gpu.example.com"
JSON = dict[str, Any]


def at(seconds: float) -> datetime.datetime:
    return T0 + datetime.timedelta(seconds=seconds)


def stamp(when: datetime.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def node(name: str) -> JSON:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"allocatable": {"cpu": "4", "pods": "110"}},
    }


def gpus(name: str, count: int) -> JSON:
    """The node's ResourceSlice: `count` GPUs in pool `name`."""
    return {
        "metadata": {"name": f"{name}-gpus"},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "nodeName": name,
            "devices": [{"name": f"gpu-{i}"} for i in range(count)],
        },
    }


def claim(name: str, device: tuple[str, str] | None = None) -> JSON:
    """One GPU asked for; allocated `device` (pool, name) when given."""
    obj: JSON = {
        "metadata": {"namespace": "ml", "name": name, "uid": f"{name}-uid"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}},
        "status": {},
    }
    if device:
        results = [{"driver": DRIVER, "pool": device[0], "device": device[1], "request": "gpu"}]
        obj["status"] = {"allocation": {"devices": {"results": results}}}
    return obj


def pod(name: str, job: str, *, node: str | None = None, gated: bool = False, phase: str | None = None, deleted: bool = False) -> JSON:
    meta: JSON = {
        "namespace": "ml",
        "name": name,
        "uid": f"{name}-uid",
        "labels": {keys.JOB_UID_LABEL: f"{job}-job"},
        "ownerReferences": [{"kind": "Job", "controller": True, "uid": f"{job}-job", "name": job}],
    }
    if deleted:
        meta["deletionTimestamp"] = stamp(T0)
    return {
        "metadata": meta,
        "spec": {
            "nodeName": node,
            "schedulingGates": [{"name": keys.SCHEDULING_GATE}] if gated else [],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
        },
        "status": {"phase": phase or ("Running" if node else "Pending")},
    }


def group(job: str, min_count: int, *, priority: int = 0, created: str = "2026-08-26T11:00:00Z", **status: Any) -> JSON:
    return {
        "metadata": {
            "namespace": "ml",
            "name": job,
            "uid": f"{job}-pg",
            "creationTimestamp": created,
            "labels": {keys.JOB_NAME_LABEL: job},
            "ownerReferences": [{"kind": "Job", "controller": True, "uid": f"{job}-job", "name": job}],
        },
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}, "priority": priority, "disruptionMode": {"all": {}}},
        "status": {
            "conditions": [{"type": keys.INITIALLY_SCHEDULED, "status": "False", "reason": "Unschedulable", "message": "m"}],
            **status,
        },
    }


def gang(job: str, size: int, **kw: Any) -> tuple[list[JSON], list[JSON], JSON]:
    """A gang of `size` one-GPU ranks, all behind the gate with their claims: (pods, claims, PodGroup)."""
    names = [f"{job}-{i}" for i in range(size)]
    return [pod(n, job, gated=True) for n in names], [claim(f"{n}-gpu") for n in names], group(job, size, **kw)


def world(*gangs: tuple[list[JSON], list[JSON], JSON], pods: list[JSON] = (), claims: list[JSON] = (), **kw: Any) -> liveness.Objects:  # type: ignore[assignment]
    """Two nodes of two GPUs each, these gangs, and these other pods and claims."""
    return liveness.Objects(
        nodes=[node("n1"), node("n2")],
        slices=[gpus("n1", 2), gpus("n2", 2)],
        classes=[{"metadata": {"name": "gpu"}, "spec": {}}],
        pods=[p for g in gangs for p in g[0]] + list(pods),
        claims=[c for g in gangs for c in g[1]] + list(claims),
        podgroups=[g[2] for g in gangs],
        **kw,
    )


def running(job: str, devices: list[tuple[str, str]]) -> tuple[list[JSON], list[JSON]]:
    """A job's pods running on these devices (pool = node), and their claims."""
    names = [f"{job}-{i}" for i in range(len(devices))]
    return [pod(n, job, node=d[0]) for n, d in zip(names, devices, strict=True)], [
        claim(f"{n}-gpu", d) for n, d in zip(names, devices, strict=True)
    ]


def rule(purpose: str, pool: str, device: str) -> JSON:
    """A DeviceTaintRule of Phalanx's on one device (`scheduling.holes.rule`'s shape)."""
    return {
        "metadata": {
            "name": f"phalanx-{purpose}-{pool}-{device}",
            "labels": {keys.MANAGED_BY_LABEL: keys.MANAGER_NAME, keys.TAINT_PURPOSE_LABEL: purpose},
            "annotations": {keys.HELD_DEVICE_ANNOTATION: f"{DRIVER}/{pool}/{device}"},
        },
        "spec": {
            "deviceSelector": {"driver": DRIVER, "pool": pool, "device": device},
            "taint": {"key": keys.HELD_TAINT, "value": purpose, "effect": "NoSchedule"},
        },
    }


def named(findings: list[liveness.Finding]) -> list[str]:
    return [f.waiter.name for f in findings]


def test_a_gang_that_fits_and_waits_past_the_bound_is_named_with_its_plan() -> None:
    objects = world(gang("train", 3))
    tracker = liveness.Liveness(bound=15)
    assert tracker.observe(objects, at(0)) == []
    assert tracker.observe(objects, at(8)) == [], "not yet: within the bound"
    found = tracker.observe(objects, at(16))
    assert named(found) == ["train"]
    assert found[0].observations == 3 and found[0].waited == 16
    assert [m for m, _ in found[0].waiter.placements] == ["train-0", "train-1", "train-2"]
    text = str(found[0])
    assert "PodGroup ml/train" in text and "fit and waited 16s over 3 observations" in text
    assert "explain: Pending: all 3 of 3 members fit" in text, text


def test_a_gang_that_does_not_fit_is_not_named() -> None:
    pods, claims = running("holder", [("n1", "gpu-0"), ("n1", "gpu-1"), ("n2", "gpu-0")])
    objects = world(gang("train", 2), pods=pods, claims=claims)
    tracker = liveness.Liveness(bound=15)
    assert tracker.observe(objects, at(0)) == [] and tracker.observe(objects, at(30)) == []
    assert tracker.pending == 0


def test_a_gang_behind_one_that_could_use_the_same_room_is_not_named_but_the_one_ahead_is() -> None:
    """Both fit alone, not together: the older waits its turn behind the higher priority, which itself is forgotten."""
    pods, claims = running("holder", [("n1", "gpu-0")])
    objects = world(gang("older", 2, created="2026-08-26T10:00:00Z"), gang("urgent", 3, priority=100), pods=pods, claims=claims)
    tracker = liveness.Liveness(bound=15)
    tracker.observe(objects, at(0))
    assert named(tracker.observe(objects, at(20))) == ["urgent"]


def test_a_gang_behind_a_preempting_one_is_not_named_the_room_its_victims_leave_is_the_preemptors() -> None:
    """The urgent gang needs all four GPUs; its victim still holds one: the three free ones are its room too."""
    victim, victim_claims = running("low", [("n1", "gpu-0")])
    nomination = {
        "victims": [{"namespace": "ml", "name": "low-0", "uid": "low-0-uid"}],
        "devices": [f"{DRIVER}/n1/gpu-0"],
        "nodes": ["n1"],
        "nominatedAt": "2026-08-26T11:59:00Z",
    }
    urgent = gang("urgent", 4, priority=100, nomination=nomination)
    objects = world(urgent, gang("small", 1), pods=victim, claims=victim_claims, taint_rules=[rule("nominated", "n1", "gpu-0")])
    tracker = liveness.Liveness(bound=15)
    tracker.observe(objects, at(0))
    assert tracker.observe(objects, at(20)) == []
    without = world(gang("small", 1), pods=victim, claims=victim_claims)
    tracker = liveness.Liveness(bound=15)
    tracker.observe(without, at(0))
    assert named(tracker.observe(without, at(20))) == ["small"], "alone, the same gang is named: the preemptor made the difference"


def test_a_fit_that_shows_only_briefly_is_not_named_and_the_wait_starts_over() -> None:
    free = world(gang("train", 2))
    pods, claims = running("other", [("n1", "gpu-0"), ("n1", "gpu-1"), ("n2", "gpu-0")])
    taken = world(gang("train", 2), pods=pods, claims=claims)
    tracker = liveness.Liveness(bound=15)
    assert tracker.observe(free, at(0)) == []
    assert tracker.observe(taken, at(5)) == [], "room taken by another: it waits rightly"
    assert tracker.observe(free, at(10)) == []
    assert tracker.observe(free, at(20)) == [], "10 s since the room came back"
    assert named(tracker.observe(free, at(26))) == ["train"]


def test_a_released_or_scheduled_gang_is_not_waiting() -> None:
    pods, claims, pg = gang("train", 2)
    reserving = replace(world((pods, claims, {**pg, "status": {"reservation": {"state": "Reserving"}}})))
    scheduled = {**pg, "status": {"conditions": [{"type": keys.INITIALLY_SCHEDULED, "status": "True", "reason": "Scheduled"}]}}
    for objects in (reserving, world((pods, claims, scheduled))):
        tracker = liveness.Liveness(bound=15)
        tracker.observe(objects, at(0))
        assert tracker.observe(objects, at(20)) == []


def test_a_gang_short_of_its_quorum_is_not_waiting_but_finished_members_count_toward_it() -> None:
    pods, claims, pg = gang("train", 2)
    short = world((pods[:1], claims[:1], pg))
    tracker = liveness.Liveness(bound=15)
    tracker.observe(short, at(0))
    assert tracker.observe(short, at(20)) == [], "one of minCount 2: waiting for quorum"
    done = pod("train-9", "train", node="n2", phase="Succeeded")
    finished = world(([*pods[:1], done], claims[:1], pg))
    tracker = liveness.Liveness(bound=15)
    tracker.observe(finished, at(0))
    assert named(tracker.observe(finished, at(20))) == ["train"], "a rank that exited 0 counts toward minCount"


def test_a_device_a_terminating_pod_still_holds_is_not_room() -> None:
    """Three GPUs held by a Job being deleted (its pods run out their grace period): not free until deallocated."""
    pods, claims = running("going", [("n1", "gpu-0"), ("n1", "gpu-1"), ("n2", "gpu-0")])
    pods = [{**p, "metadata": {**p["metadata"], "deletionTimestamp": stamp(T0)}} for p in pods]
    objects = world(gang("train", 2), pods=pods, claims=claims)
    tracker = liveness.Liveness(bound=15)
    tracker.observe(objects, at(0))
    assert tracker.observe(objects, at(20)) == []
    deallocated = world(gang("train", 2), pods=pods, claims=[claim(c["metadata"]["name"]) for c in claims])
    tracker.observe(deallocated, at(21))
    assert named(tracker.observe(deallocated, at(40))) == ["train"], "once the claims let go, the room is there"


def test_devices_held_for_the_head_of_the_line_are_not_room_for_a_gang_behind_it() -> None:
    """The head (priority 100, three GPUs, short) holds the three free GPUs as they free; a small gang of lower
    priority waits for room elsewhere, though the GPUs are free."""
    pods, claims = running("holder", [("n2", "gpu-1")])
    hold = {
        "devices": [f"{DRIVER}/n1/gpu-0", f"{DRIVER}/n1/gpu-1", f"{DRIVER}/n2/gpu-0"],
        "heldAt": "2026-08-26T11:50:00Z",
        "waitingSince": "x",
    }
    head = gang("head", 4, priority=100, hold=hold)
    rules = [rule("head", *d.split("/")[1:]) for d in hold["devices"]]
    objects = world(head, gang("small", 1), pods=pods, claims=claims, taint_rules=rules)
    tracker = liveness.Liveness(bound=15)
    tracker.observe(objects, at(0))
    assert tracker.observe(objects, at(20)) == []
    freed = world(head, gang("small", 1), taint_rules=rules)
    tracker.observe(freed, at(21))
    assert named(tracker.observe(freed, at(40))) == ["head"], "the held devices are the head's own room"


def test_a_gang_backing_off_after_its_ready_deadline_is_not_named_until_the_back_off_ends() -> None:
    readiness = {"attempts": 1, "timedOutAt": "2026-08-26T11:59:00Z", "notBefore": stamp(at(60))}
    objects = world(gang("train", 2, readiness=readiness))
    tracker = liveness.Liveness(bound=15)
    tracker.observe(objects, at(0))
    assert tracker.observe(objects, at(30)) == []
    tracker.observe(objects, at(61))
    assert named(tracker.observe(objects, at(80))) == ["train"]


def test_a_release_undone_gets_the_loops_back_off_as_grace() -> None:
    pods, claims, pg = gang("train", 2)
    pg["status"]["conditions"][0].update(reason="Pending", message="reservation undone, will plan again: x")
    objects = world((pods, claims, pg))
    tracker = liveness.Liveness(bound=15)
    tracker.observe(objects, at(0))
    assert tracker.observe(objects, at(60)) == []
    assert named(tracker.observe(objects, at(76))) == ["train"]


def lease(holder: str | None, renewed: datetime.datetime) -> JSON:
    spec = {"holderIdentity": holder, "renewTime": stamp(renewed), "leaseDurationSeconds": 10}
    return {"metadata": {"namespace": liveness.LEASE_NAMESPACE, "name": liveness.LEASE_NAME}, "spec": spec}


def test_no_gang_is_named_while_no_operator_leads_and_a_new_leader_starts_the_wait_over() -> None:
    base = world(gang("train", 2))
    tracker = liveness.Liveness(bound=15)
    for t in (0, 10, 20):  # the leader froze at 0: its Lease went stale at 10
        assert tracker.observe(replace(base, leases=[lease("a", at(0))]), at(t)) == []
    assert tracker.observe(replace(base, leases=[lease(None, at(20))]), at(21)) == [], "released on a clean shutdown"
    tracker.observe(replace(base, leases=[lease("a", at(30))]), at(30))
    assert tracker.observe(replace(base, leases=[lease("b", at(44))]), at(45)) == [], "b took over: its wait starts now"
    assert tracker.observe(replace(base, leases=[lease("b", at(59))]), at(60)) != []


def test_a_group_being_deleted_is_not_judged() -> None:
    pods, claims, pg = gang("train", 2)
    pg["metadata"]["deletionTimestamp"] = stamp(T0)
    tracker = liveness.Liveness(bound=15)
    tracker.observe(world((pods, claims, pg)), at(0))
    assert tracker.observe(world((pods, claims, pg)), at(20)) == []


def test_devices_under_a_rule_of_phalanxs_for_another_group_are_not_room() -> None:
    """A hold's rules outlive its record by a write (and a nomination's its preemption's): the devices are not free."""
    pods, claims = running("holder", [("n2", "gpu-1")])
    rules = [rule("head", "n1", "gpu-0"), rule("head", "n1", "gpu-1"), rule("nominated", "n2", "gpu-0")]
    objects = world(gang("small", 1), pods=pods, claims=claims, taint_rules=rules)
    tracker = liveness.Liveness(bound=15)
    tracker.observe(objects, at(0))
    assert tracker.observe(objects, at(20)) == []
    fewer = replace(objects, taint_rules=rules[1:])
    tracker.observe(fewer, at(21))
    assert named(tracker.observe(fewer, at(40))) == ["small"]
