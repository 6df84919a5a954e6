"""Room that appears and goes without a pod being deleted: a stream of gangs through the GPUs while the cluster around
them changes, judged at every step.

Gangs of one-GPU ranks are submitted one a step, as in test_fault_load.py, and a gang whose members all run is finished
(exit 0) a few steps later, so finished Jobs' claims are freed by the resourceclaim controller while other gangs wait.
Between them a seeded RNG (PHALANX_FAULT_SEED) picks the cluster's own events, the way an admin, a driver and the node
lifecycle make them:
- a kwok node joins, with a ResourceSlice shaped like dra-example-driver's (driver gpu.example.com, pool = node name,
  devices gpu-0..N, owned by the Node), and leaves later, whether or not members run on it (their pods are then
  collected by PodGC, their slice by the garbage collector);
- a node is cordoned, and uncordoned later;
- an admin's DeviceTaintRule taints a device NoSchedule, or NoExecute a device a running member holds (the device
  taint eviction controller evicts it), and is deleted later;
- an added node's slice is republished with more or fewer devices (the pool's generation bumped);
- a placed member is relabelled.
Nothing in the stream deletes a pod. Each kind of event is counted and must have happened; the ones with an effect
elsewhere are proven by it (a member seen on an added node, the device taint eviction controller's Events, members of a
departed node gone, a claim freed under a Succeeded pod while a gang waited).

At every step no device may be held twice, no running member may lose its devices (`faultcheck.Continuous`), and no
gang may fit and wait past the liveness oracle's bound (`liveness.Watch`, `_judge_liveness`); a stream where no Job
finishes for STALL seconds fails naming what each unfinished Job and its PodGroup say. Once every Job finished, the
settled cluster must pass the fault suite's invariants and the oracle; every Job completed (the stream makes
none fail on purpose), every device is free once the Jobs are deleted, and the operator lived through it. The shared
cluster is restored in a `finally`: added nodes, their slices and the rules deleted, cordoned nodes uncordoned.
The short form streams 22 gangs; PHALANX_FAULT_RUNS (`./task faults`) streams 60.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, started_operator, wait_for

import faultcheck
import liveness
from jobs import gpu_gang
from phalanx.api import keys
from phalanx_dev.localcluster import demo, fakegpu, operatorproc
from phalanx_dev.localcluster.dradriver import DRIVER

LONG = int(os.environ.get("PHALANX_FAULT_RUNS", "0")) > 0
GANGS = 60 if LONG else 22
SIZES = (2, 3, 4)
EXIT = faultcheck.EXIT
JOB_NAME = "batch.kubernetes.io/job-name"
ROOM = "room.phalanx.test/run"
"""Label on every node, slice and DeviceTaintRule this test makes, valued with the test's namespace."""
TAINT_KEY = "room.phalanx.test/admin"
RELABEL = "room.phalanx.test/relabelled"
MAX_ADDED = 3 if LONG else 2
"""Nodes of the test's own at once."""
MAX_CORDONED = 2 if LONG else 1
MAX_RULES = 3 if LONG else 2
MAX_DEVICES = 4
"""Devices an added node's slice publishes at most (at least 1)."""
LEAVE_GRACE = 10
"""Steps a node due to leave waits for a member to run on it, until one node has left under running members."""
STALL = 240
"""Seconds the stream may go without a Job finishing (PodGC collects a departed node's pods 40-60 s after it left, a
member kube-scheduler cannot bind is taken down after the operator's 60 s bind deadline) before it is reported."""
EVENT_RATE = 0.6
"""Chance that a step starts one event."""
TAINT_EVICTION = "DeviceTaintManagerEviction"
"""The reason of the Event the device taint eviction controller records on a pod it deletes."""

STARTED = ("join", "cordon", "taint NoSchedule", "taint NoExecute", "republish more", "republish fewer", "relabel")
"""The events a step may start; `leave`, `uncordon` and `untaint` end them at a step drawn when they start."""
EXPECTED = (
    *STARTED,
    "leave",
    "uncordon",
    "untaint",
    "finish",
    "member placed on an added node",
    "member evicted by a NoExecute taint",
    "member lost with its node",
    "claim freed by the resourceclaim controller while a gang waited",
)


@pytest.fixture
def room_operator(cluster: Cluster) -> Iterator[operatorproc.OperatorProcess]:
    if cluster.local is None:
        pytest.skip("reads the operator's own process, and adds kwok nodes")
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


def _judge_liveness(watch: liveness.Watch) -> list[str]:
    """The liveness oracle's call site, at every step of the stream: no gang may fit and wait, with nothing ahead of it
    able to use the room, for longer than the oracle's bound (room that appears must be used; room that goes must not
    leave a gang that still fits waiting). `liveness.Watch` reads the cluster itself, at most every 2 s of steps."""
    return [str(finding) for finding in watch.check()]


@dataclass
class Added:
    """A node this test added, and the slice it publishes for it."""

    slice: str
    devices: int
    leaves_at: int


@dataclass
class Room:
    """What the stream changes in the shared cluster, each change counted, all of it undone by `restore`."""

    cluster: Cluster
    tag: str
    rng: random.Random
    counts: Counter[str] = field(default_factory=Counter)
    added: dict[str, Added] = field(default_factory=dict)
    ever_added: set[str] = field(default_factory=set)
    cordoned: dict[str, int] = field(default_factory=dict)
    """Node -> the step it is uncordoned."""
    rules: dict[str, tuple[str, tuple[str, str, str], int]] = field(default_factory=dict)
    """Rule -> (effect, device, the step it is deleted)."""
    orphans: dict[str, tuple[str, str, int]] = field(default_factory=dict)
    """Uid -> (pod, node, step) of each member that was live on a node when it left."""
    serial: int = 0
    step: int = 0
    journal: list[str] = field(default_factory=list)
    """What happened at which step, printed at the end (and on a failure, with the counts)."""

    def note(self, kind: str, detail: str) -> None:
        self.counts[kind] += 1
        self.journal.append(f"step {self.step}: {kind}: {detail}")

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        return self.cluster.kubectl(*args, stdin=stdin, check=check)

    def _next(self) -> int:
        self.serial += 1
        return self.serial

    def join(self) -> str:
        """A kwok node (kwok manages it by its annotation) and its GPUs, as dra-example-driver's plugin would publish them."""
        name = f"room-{self.tag}-{self._next()}"
        node = fakegpu.node(name, fakegpu.NodeShape())
        node["metadata"]["labels"][ROOM] = self.tag
        made = json.loads(self.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(node)).stdout)
        self.kubectl("patch", "node", name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": node["status"]}))
        devices = self.rng.randint(1, 3)
        body = fakegpu.resource_slice(name, made["metadata"]["uid"], devices)
        body["metadata"]["labels"] = {ROOM: self.tag}
        published = json.loads(self.kubectl("create", "-f", "-", "-o", "json", stdin=json.dumps(body)).stdout)
        lifetime = (6, 25) if LONG else (6, 14)
        self.added[name] = Added(published["metadata"]["name"], devices, self.step + self.rng.randint(*lifetime))
        self.ever_added.add(name)
        self.note("join", f"{name} with {devices} device(s) in slice {published['metadata']['name']}")
        return name

    def leave(self, name: str, snapshot: faultcheck.Snapshot) -> None:
        """The Node deleted, members running on it or not; its slice goes with it (owned by the Node)."""
        on_it = {
            p["metadata"]["uid"]: p["metadata"]["name"] for p in snapshot.pods if p["spec"].get("nodeName") == name and faultcheck.live(p)
        }
        self.kubectl("delete", "node", name, "--wait=false")
        del self.added[name]
        self.cordoned.pop(name, None)
        self.orphans |= {uid: (pod, name, self.step) for uid, pod in on_it.items()}
        self.note("leave", f"{name} deleted under {sorted(on_it.values()) or 'no member'}")
        self.counts["leave under members"] += bool(on_it)

    def cordon(self, node: str) -> None:
        self.kubectl("cordon", node)
        self.cordoned[node] = self.step + self.rng.randint(2, 6)
        self.note("cordon", node)

    def uncordon(self, node: str) -> None:
        self.kubectl("uncordon", node)
        del self.cordoned[node]
        self.note("uncordon", node)

    def taint(self, effect: str, device: tuple[str, str, str], holder: str = "") -> None:
        """An admin's DeviceTaintRule on one device (not Phalanx's: another key, no Phalanx labels)."""
        driver, pool, name = device
        rule = f"room-{self.tag}-{effect.lower()}-{self._next()}"
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceTaintRule",
            "metadata": {"name": rule, "labels": {ROOM: self.tag}},
            "spec": {
                "deviceSelector": {"driver": driver, "pool": pool, "device": name},
                "taint": {"key": TAINT_KEY, "value": "maintenance", "effect": effect},
            },
        }
        self.kubectl("create", "-f", "-", stdin=json.dumps(body))
        self.rules[rule] = (effect, device, self.step + self.rng.randint(2, 6))
        self.note(f"taint {effect}", f"{rule} on {'/'.join(device)}" + (f", held by {holder}" if holder else ""))

    def untaint(self, rule: str) -> None:
        self.kubectl("delete", "devicetaintrule", rule, "--wait=false")
        self.note("untaint", f"{rule} ({self.rules.pop(rule)[0]}) deleted")

    def republish(self, node: str, more: bool) -> None:
        """The node's pool published again with more or fewer devices, its generation bumped, as the driver's slice
        controller does when what the node has changes."""
        added = self.added[node]
        current = json.loads(self.kubectl("get", "resourceslice", added.slice, "-o", "json").stdout)
        count = self.rng.randint(added.devices + 1, MAX_DEVICES) if more else self.rng.randint(1, added.devices - 1)
        current["spec"]["devices"] = [fakegpu.device(node, i) for i in range(count)]
        current["spec"]["pool"]["generation"] = int(current["spec"]["pool"]["generation"]) + 1
        self.kubectl("replace", "-f", "-", stdin=json.dumps(current))
        self.note(
            "republish more" if more else "republish fewer",
            f"{node}: {added.devices} -> {count} devices, generation {current['spec']['pool']['generation']}",
        )
        added.devices = count

    def relabel(self, pod: dict[str, Any], namespace: str) -> None:
        value = f"r{self._next()}"
        self.kubectl("label", "pod", pod["metadata"]["name"], "-n", namespace, f"{RELABEL}={value}", "--overwrite")
        where = pod["spec"].get("nodeName") or f"{(pod['metadata'].get('annotations') or {}).get(keys.PINNED_NODE)} (pinned, not yet bound)"
        self.note("relabel", f"{pod['metadata']['name']} on {where}: {RELABEL}={value}")

    def restore(self) -> None:
        """Undo everything the stream changed, whatever state it stopped in (idempotent)."""
        selector = f"{ROOM}={self.tag}"
        self.kubectl("delete", "devicetaintrules", "-l", selector, "--wait=false", check=False)
        for node in list(self.cordoned):
            self.kubectl("uncordon", node, check=False)
            del self.cordoned[node]
        self.kubectl("delete", "nodes", "-l", selector, "--wait=false", check=False)
        self.kubectl("delete", "resourceslices", "-l", selector, "--wait=false", check=False)
        self.added.clear()
        wait_for(
            lambda: (
                not self.kubectl("get", "nodes,resourceslices,devicetaintrules", "-l", selector, "-o", "name", check=False).stdout.strip()
            ),
            "the nodes, slices and rules the stream made gone",
            timeout=60,
        )


def _devices(cluster: Cluster) -> list[tuple[str, str, str]]:
    slices = cluster.get("resourceslices")["items"]
    return [
        (s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"])
        for s in slices
        if s["spec"]["driver"] == DRIVER
        for d in s["spec"].get("devices") or []
    ]


def _running_holders(snapshot: faultcheck.Snapshot) -> list[tuple[tuple[str, str, str], str]]:
    """(device, pod) for each device held by a claim of a member that is bound, running, not deleted and not asked
    to exit: what a NoExecute taint evicts."""
    running = {
        p["metadata"]["uid"]: p["metadata"]["name"]
        for p in snapshot.pods
        if faultcheck.live(p)
        and p["spec"].get("nodeName")
        and _phase(p) == "Running"
        and EXIT not in (p["metadata"].get("annotations") or {})
    }
    return [(d, running[u]) for c in snapshot.claims for u in _users(c) if u in running for d in faultcheck.held(c)]


def _users(claim: dict[str, Any]) -> set[str]:
    """The uids of the pods a claim is reserved for or owned by."""
    reserved = {r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"}
    return reserved | {o["uid"] for o in claim["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"}


def _phase(pod: dict[str, Any]) -> str:
    return (pod.get("status") or {}).get("phase") or ""


def _state(pod: dict[str, Any]) -> str:
    """gated, or its phase, and whether it is deleted and why it is a DisruptionTarget."""
    state = "gated" if faultcheck.gated(pod) else _phase(pod)
    state += ", deleted" if pod["metadata"].get("deletionTimestamp") else ""
    return state + (f", {_disruption(pod)}" if _disruption(pod) else "")


def _disruption(pod: dict[str, Any]) -> str:
    """Why the pod is a DisruptionTarget (DeletionByPodGC, DeletionByDeviceTaintManager, ...), or ''."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c.get("reason") or "" for c in conditions if c["type"] == "DisruptionTarget" and c["status"] == "True"), "")


def test_room_that_appears_and_goes_without_a_pod_deleted_holds_nothing_twice_and_strands_nothing(
    cluster: Cluster, room_operator: operatorproc.OperatorProcess, namespace: str
) -> None:
    seed = int(os.environ.get("PHALANX_FAULT_SEED", "14"))
    rng = random.Random(seed)
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    room = Room(cluster, namespace, rng)
    base_devices = faultcheck.take(cluster.kubectl, namespace).devices
    workers = sorted(
        n["metadata"]["name"]
        for n in cluster.get("nodes")["items"]
        if fakegpu.CONTROL_PLANE_TAINT not in (n["metadata"].get("labels") or {})
    )
    started = time.monotonic()
    try:
        continuous, outcome = _stream(cluster, namespace, room, workers, rng)
        snapshot = faultcheck.settle(cluster, namespace, {}, continuous=continuous)
        problems = faultcheck.violations(snapshot) + [str(f) for f in liveness.judge(cluster.kubectl).findings]
        assert not problems, f"after the stream: {problems}\n{faultcheck.summary(snapshot)}"
        evicted = {
            e["involvedObject"]["name"]
            for e in cluster.get("events", "-n", namespace, f"--field-selector=reason={TAINT_EVICTION}")["items"]
            if e["involvedObject"].get("kind") == "Pod"
        }
        for pod in sorted(evicted):
            room.note("member evicted by a NoExecute taint", f"{pod} (an Event {TAINT_EVICTION} on it)")
        room.restore()
        assert faultcheck.take(cluster.kubectl, namespace).devices == base_devices, "the session's devices are published as before"
        unschedulable = [n for n in workers if cluster.get("node", n)["spec"].get("unschedulable")]
        assert not unschedulable, f"every node the stream cordoned is uncordoned: {unschedulable}"

        missing = [kind for kind in EXPECTED if room.counts[kind] <= 0]
        assert not missing, f"these events never happened: {missing} (counts {dict(room.counts)})"
        assert all(s == "Complete" for s in outcome.values()), f"every gang Job completed (the stream fails none on purpose): {outcome}"

        cluster.kubectl("delete", "jobs", "--all", "-n", namespace, "--wait=false")
        wait_for(lambda: not cluster.get("pods", "-n", namespace)["items"], "every pod gone once the Jobs are deleted", timeout=120)
        held = wait_for(
            lambda: (s := faultcheck.take(cluster.kubectl, namespace)) and not any(faultcheck.held(c) for c in s.claims) and s,
            "every device free",
            timeout=120,
        )
        assert not faultcheck.violations(held)
        assert room_operator.process.poll() is None, "the operator lived through the stream"
    finally:
        print("\n".join(room.journal))
        room.restore()
    counts = ", ".join(f"{k} {room.counts[k]}" for k in EXPECTED)
    print(f"room: seed {seed}, {GANGS} gangs, {room.step} steps, {time.monotonic() - started:.0f}s; {counts}")


def _stream(
    cluster: Cluster, namespace: str, room: Room, workers: list[str], rng: random.Random
) -> tuple[faultcheck.Continuous, dict[str, str]]:
    """Submit the gangs and run the cluster's events until every Job has finished; return the judge that saw every
    snapshot, and each Job's outcome."""
    submitted, finishing, finished = 0, {}, set()
    deadline = time.monotonic() + 300 + 15 * GANGS
    last_states: dict[str, str] = {}
    moved = time.monotonic()
    continuous = faultcheck.Continuous()
    watch = liveness.Watch(cluster.kubectl)
    held_before: dict[str, str] = {}
    """Claim -> the uid of the pod it was reserved for or owned by, as the last snapshot showed it held."""
    placed: set[str] = set()
    while True:
        room.step += 1
        step = room.step
        if submitted < GANGS:
            job = gpu_gang(f"r{submitted}", SIZES[submitted % len(SIZES)], mode="all", backoff_limit=20)
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
            submitted += 1
        snapshot = faultcheck.take(cluster.kubectl, namespace)
        wrong = continuous.check(snapshot) + _judge_liveness(watch)
        assert not wrong, f"step {step}: {wrong}\n{faultcheck.summary(snapshot)}"
        states = job_states(cluster, namespace)
        pods = {p["metadata"]["uid"]: p for p in snapshot.pods}
        waiting = sorted({p["metadata"]["labels"].get(JOB_NAME, "") for p in snapshot.pods if faultcheck.live(p) and faultcheck.gated(p)})

        # What the last steps' events did, read off this snapshot.
        for pod in snapshot.pods:
            if pod["spec"].get("nodeName") in room.ever_added and pod["metadata"]["uid"] not in placed:
                placed.add(pod["metadata"]["uid"])
                room.note("member placed on an added node", f"{pod['metadata']['name']} on {pod['spec']['nodeName']}")
        for uid, (name, node, left) in list(room.orphans.items()):
            pod = pods.get(uid)
            if pod is None or pod["metadata"].get("deletionTimestamp") or _phase(pod) == "Failed":
                how = "gone" if pod is None else _state(pod)
                room.note("member lost with its node", f"{name} on {node}: {how}, {step - left} step(s) after the node left")
                del room.orphans[uid]
            elif _phase(pod) == "Succeeded":
                del room.orphans[uid]  # finished before the loss was seen: not a loss
        now_held = {c["metadata"]["name"] for c in snapshot.claims if faultcheck.held(c)}
        for claim, uid in held_before.items():
            pod = pods.get(uid)
            if claim not in now_held and pod and _phase(pod) == "Succeeded" and waiting:
                room.note(
                    "claim freed by the resourceclaim controller while a gang waited",
                    f"{claim} of {pod['metadata']['name']} (Succeeded) while {', '.join(waiting)} wait(s)",
                )
        held_before = {c["metadata"]["name"]: next(iter(_users(c)), "") for c in snapshot.claims if faultcheck.held(c)}

        # Gangs whose members all run finish a few steps later (exit 0).
        by_job: dict[str, list[dict]] = {}
        for pod in snapshot.pods:
            if faultcheck.live(pod):
                by_job.setdefault(pod["metadata"]["labels"].get(JOB_NAME, ""), []).append(pod)
        for job, members in by_job.items():
            size = SIZES[int(job[1:]) % len(SIZES)]
            running = [p for p in members if _phase(p) == "Running"]
            if len(running) >= size and job not in finishing:
                finishing[job] = step + rng.randint(1, 4)
            if finishing.get(job) == step:
                faultcheck.finish(cluster.kubectl, namespace, job)
                if job not in finished:
                    finished.add(job)
                    room.note("finish", f"{job}'s {len(running)} running member(s) asked to exit 0")

        # Events started earlier end when due.
        for node in [n for n, at in room.cordoned.items() if at <= step]:
            room.uncordon(node)
        for rule in [r for r, (_, _, at) in room.rules.items() if at <= step]:
            room.untaint(rule)
        for node, added in list(room.added.items()):
            occupied = any(p["spec"].get("nodeName") == node and faultcheck.live(p) for p in snapshot.pods)
            # until one node has left under running members, an empty one waits up to LEAVE_GRACE steps for some
            if added.leaves_at <= step and (occupied or room.counts["leave under members"] or added.leaves_at + LEAVE_GRACE <= step):
                room.leave(node, snapshot)

        # One new event, most steps, while gangs still come or wait.
        active = sum(s == "Active" for s in states.values())
        if (submitted < GANGS or active >= 2) and rng.random() < EVENT_RATE:
            _start_one(room, snapshot, namespace, workers, rng)

        if submitted == GANGS and len(states) == GANGS and all(s != "Active" for s in states.values()):
            assert watch.tracker.observations >= 3, f"liveness judged only {watch.tracker.observations} times along the stream"
            room.journal.append(
                f"liveness: {watch.tracker.observations} observations, {watch.tracker.sightings} sightings of a gang fitting and waiting"
            )
            return continuous, states
        if states != last_states:
            last_states, moved = states, time.monotonic()
        if time.monotonic() - moved > STALL or time.monotonic() > deadline:
            why = f"no Job finished for {STALL}s" if time.monotonic() - moved > STALL else "the stream did not drain"
            raise TimeoutError(f"{why}: {_stalled(cluster, namespace, states, snapshot)}\ncounts {dict(room.counts)}")
        # A gang still waiting for its turn must not wait for a finish that will never be asked for.
        for job in [j for j, at in finishing.items() if at < step and states.get(j) == "Active" and j in by_job]:
            finishing[job] = step + 1
        time.sleep(0.5)


def _stalled(cluster: Cluster, namespace: str, states: dict[str, str], snapshot: faultcheck.Snapshot) -> str:
    """What each unfinished Job and its PodGroup say, and the devices: the report of a gang the stream left waiting."""
    jobs = {j["metadata"]["uid"]: j for j in cluster.get("jobs", "-n", namespace)["items"] if states.get(j["metadata"]["name"]) == "Active"}
    lines = [faultcheck.summary(snapshot)]
    for group in snapshot.podgroups:
        owner = next((o["uid"] for o in group["metadata"].get("ownerReferences") or [] if o.get("kind") == "Job"), "")
        job = jobs.get(owner)
        if job is None:
            continue
        status = job.get("status") or {}
        conditions = {c["type"]: f"{c.get('reason')}: {c.get('message')}" for c in (group.get("status") or {}).get("conditions") or []}
        name = job["metadata"]["name"]
        members = [f"{p['metadata']['name']} ({_state(p)})" for p in snapshot.pods if p["metadata"]["labels"].get(JOB_NAME) == name]
        lost = (group.get("status") or {}).get("lost")
        lines.append(
            f"Job {name}: succeeded {status.get('succeeded', 0)}, completedIndexes {status.get('completedIndexes', '')!r}, "
            f"active {status.get('active', 0)}; its pods {members}; PodGroup {group['metadata']['name']}: {conditions}, lost {lost}"
        )
    return "\n".join(lines)


def _start_one(room: Room, snapshot: faultcheck.Snapshot, namespace: str, workers: list[str], rng: random.Random) -> None:
    """Start one event among those that can happen now; half the time among those that happened least, so a short
    stream has every kind."""
    ruled = {device for _, device, _ in room.rules.values()}
    noexecute = [(d, pod) for d, pod in _running_holders(snapshot) if d not in ruled]
    placed = [
        p
        for p in snapshot.pods
        if faultcheck.live(p) and (p["spec"].get("nodeName") or keys.PINNED_NODE in (p["metadata"].get("annotations") or {}))
    ]
    nodes = [n for n in [*workers, *room.added] if n not in room.cordoned]
    can: dict[str, Callable[[], object]] = {}
    if len(room.added) < MAX_ADDED:
        can["join"] = room.join
    if len(room.cordoned) < MAX_CORDONED and len(nodes) > 1:
        can["cordon"] = lambda: room.cordon(rng.choice(nodes))
    if len(room.rules) < MAX_RULES and (untainted := [d for d in _devices(room.cluster) if d not in ruled]):
        can["taint NoSchedule"] = lambda: room.taint("NoSchedule", rng.choice(untainted))
        if noexecute and not any(effect == "NoExecute" for effect, _, _ in room.rules.values()):
            can["taint NoExecute"] = lambda: room.taint("NoExecute", *rng.choice(noexecute))
    if grow := [n for n, a in room.added.items() if a.devices < MAX_DEVICES]:
        can["republish more"] = lambda: room.republish(rng.choice(grow), more=True)
    if shrink := [n for n, a in room.added.items() if a.devices > 1]:
        can["republish fewer"] = lambda: room.republish(rng.choice(shrink), more=False)
    if placed:
        can["relabel"] = lambda: room.relabel(rng.choice(placed), namespace)
    if not can:
        return
    kinds = sorted(can)
    if rng.random() < 0.5:
        least = min(room.counts[k] for k in kinds)
        kinds = [k for k in kinds if room.counts[k] == least]
    can[rng.choice(kinds)]()
