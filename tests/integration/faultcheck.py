"""The fault suite's one judge: pure checks over a snapshot of the cluster, after a crash, a restart or a storm.

`violations` reads only the snapshot (pods, claims, PodGroups and how many
devices the slices publish) and returns what is wrong, in words, so every
fault test asserts the same invariants:
- no device is held by two claims;
- no pod that still runs (bound, and not stopped: a deleted pod runs out its
  grace period) has lost the devices of its claims, and once settled each
  of its claims is reserved for it (a kubelet prepares no other);
- no device is held for a pod that is gone, or once it has stopped;
- no device is held, and no pod pinned, for a pod still behind our gate
  unless a PodGroup's recorded reservation names it (the intent a restart
  finishes or undoes);
- no reservation is left half done (state Reserving) once the cluster settled;
- no gang is released in part: its released members are none or at least
  minCount (a Scheduled group in disruptionMode single may run below it);
- every gang that fits runs: while a whole gang waits, fewer devices are free
  than its minCount (the suite's ranks hold one device each).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys

EXIT = "localcluster.phalanx.dev/exit"
"""The annotation by which the local kubelet ends a container with the given code."""


@dataclass(frozen=True)
class Snapshot:
    pods: list[dict[str, Any]]
    claims: list[dict[str, Any]]
    podgroups: list[dict[str, Any]]
    devices: int
    """Devices the ResourceSlices publish."""


def take(kubectl: Callable[..., Any], namespace: str) -> Snapshot:
    """The namespace's pods, claims and PodGroups, and the cluster's published devices, as kubectl reads them."""

    def items(*args: str) -> list[dict[str, Any]]:
        return json.loads(kubectl("get", *args, "-o", "json").stdout)["items"]

    slices = items("resourceslices")
    return Snapshot(
        pods=items("pods", "-n", namespace),
        claims=items("resourceclaims", "-n", namespace),
        podgroups=items("podgroups.scheduling.phalanx.dev", "-n", namespace),
        devices=sum(len(s["spec"].get("devices") or []) for s in slices),
    )


def finish(kubectl: Callable[..., Any], namespace: str, job: str) -> None:
    """Ask every pod of a Job to exit 0 (the local kubelet's exit annotation).

    kubectl lists the pods, then patches each: a pod deleted in between (a
    member lost with its node runs out its grace period) answers NotFound,
    which is not a failure of the ask; kubectl goes on with the others.
    """
    proc = kubectl(
        "annotate", "pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}", f"{EXIT}=0", "--overwrite", check=False
    )
    errors = [line for line in proc.stderr.splitlines() if line.strip() and "(NotFound)" not in line]
    if proc.returncode != 0 and errors:
        raise AssertionError(f"asking {job}'s pods to exit failed ({proc.returncode}): {proc.stderr.strip()}")


def held(claim: dict[str, Any]) -> list[tuple[str, str, str]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return [(r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or []]


def gated(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == keys.SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or [])


def live(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _users(claim: dict[str, Any]) -> set[str]:
    uids = {r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"}
    return uids | {o["uid"] for o in claim["metadata"].get("ownerReferences") or [] if o.get("kind") == "Pod"}


def _min_count(pod_group: dict[str, Any]) -> int:
    gang = pod_group["spec"]["schedulingPolicy"].get("gang")
    return int(gang["minCount"]) if gang else 1


def _job_uid(obj: dict[str, Any]) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == "Job" and ref.get("controller"):
            return ref["uid"]
    return None


def _scheduled(pod_group: dict[str, Any]) -> bool:
    conditions = (pod_group.get("status") or {}).get("conditions") or []
    return any(c["type"] == keys.INITIALLY_SCHEDULED and c["status"] == "True" for c in conditions)


def double_held(snapshot: Snapshot) -> list[str]:
    """Devices held by more than one claim: checked at any moment, not only at rest."""
    holders: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for claim in snapshot.claims:
        for device in set(held(claim)):
            holders[device].append(claim["metadata"]["name"])
    return [f"device {'/'.join(d)} held by {', '.join(sorted(c))}" for d, c in holders.items() if len(c) > 1]


def _claims_of(pod: dict[str, Any]) -> set[str]:
    named = {r["resourceClaimName"] for r in pod["spec"].get("resourceClaims") or [] if r.get("resourceClaimName")}
    return named | {
        s["resourceClaimName"] for s in (pod.get("status") or {}).get("resourceClaimStatuses") or [] if s.get("resourceClaimName")
    }


def _running_claims(snapshot: Snapshot) -> list[tuple[dict[str, Any], str, dict[str, Any] | None]]:
    """(pod, claim name, claim or None) for each claim of each pod bound and not yet stopped."""
    claims = {c["metadata"]["name"]: c for c in snapshot.claims}
    return [
        (pod, name, claims.get(name))
        for pod in snapshot.pods
        if pod["spec"].get("nodeName") and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        for name in sorted(_claims_of(pod))
    ]


def _reserved(claim: dict[str, Any] | None) -> set[str]:
    return {r["uid"] for r in ((claim or {}).get("status") or {}).get("reservedFor") or []}


def unbacked(snapshot: Snapshot) -> list[str]:
    """Pods bound and not yet stopped (a deleted one runs out its grace period) whose claim no longer holds their
    devices for them: deallocated, deleted, or reserved for others. The device can then go to a second pod while the
    first still uses it. Checked at any moment; a pod binding between the two reads of a snapshot can show here
    once, a real loss shows in every snapshot until the pod stops.

    A claim left allocated and reserved for no one is no loss: kube-scheduler's Unreserve leaves exactly that when
    a binding it saw fail had gone through (an API server killed under it), no allocator can take those devices,
    and the resourceclaim controller reserves the claim for its bound pod again (`unreserved`, once settled)."""
    return [
        f"pod {pod['metadata']['name']} still runs but its claim {name} no longer holds its devices for it"
        for pod, name, claim in _running_claims(snapshot)
        if claim is None or not held(claim) or (_reserved(claim) and pod["metadata"]["uid"] not in _reserved(claim))
    ]


def unreserved(snapshot: Snapshot) -> list[str]:
    """Pods bound and not yet stopped whose allocated claim does not list them in reservedFor: a kubelet refuses to
    prepare such a claim, so the pod would never start. Judged once settled (see `unbacked`)."""
    return [
        f"pod {pod['metadata']['name']} is bound but its claim {name} is not reserved for it"
        for pod, name, claim in _running_claims(snapshot)
        if claim is not None and held(claim) and not _reserved(claim)
    ]


class Continuous:
    """What must hold throughout, not only once the cluster has settled, judged on each snapshot of a series: a
    device held twice at once, or a running pod that lost its devices in two snapshots in a row."""

    def __init__(self) -> None:
        self._unbacked: set[str] = set()
        self.snapshots = 0
        self.unreserved: list[str] = []
        """Claims seen held but reserved for no one under a bound pod (no fault until settled; see `unbacked`)."""

    def check(self, snapshot: Snapshot) -> list[str]:
        self.snapshots += 1
        self.unreserved += [f"#{self.snapshots}: {u}" for u in unreserved(snapshot)]
        now = set(unbacked(snapshot))
        persistent, self._unbacked = now & self._unbacked, now
        return double_held(snapshot) + sorted(persistent)


def violations(snapshot: Snapshot) -> list[str]:
    out = double_held(snapshot) + unbacked(snapshot) + unreserved(snapshot)
    pods = {p["metadata"]["uid"]: p for p in snapshot.pods}
    intended_claims = {c["uid"] for g in snapshot.podgroups for c in ((g.get("status") or {}).get("reservation") or {}).get("claims") or []}
    intended_pods = {
        p["uid"] for g in snapshot.podgroups for p in ((g.get("status") or {}).get("reservation") or {}).get("placements") or []
    }
    for claim in snapshot.claims:
        if not held(claim):
            continue
        name, users = claim["metadata"]["name"], [pods[u] for u in _users(claim) if u in pods]
        if not users:
            out.append(f"claim {name} holds {len(held(claim))} device(s) for pods that are gone")
        elif all((p.get("status") or {}).get("phase") in ("Succeeded", "Failed") for p in users):
            out.append(f"claim {name} holds {len(held(claim))} device(s) for pods that have stopped")
        elif all(gated(p) for p in users) and claim["metadata"]["uid"] not in intended_claims:
            out.append(f"claim {name} holds devices for gated pod(s) {[p['metadata']['name'] for p in users]} with no recorded intent")
    for pod in snapshot.pods:
        pinned = keys.PINNED_NODE in (pod["metadata"].get("annotations") or {})
        if live(pod) and gated(pod) and pinned and pod["metadata"]["uid"] not in intended_pods:
            out.append(f"pod {pod['metadata']['name']} is pinned and gated with no recorded intent")
    members: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for pod in snapshot.pods:
        job = (pod["metadata"].get("labels") or {}).get(keys.JOB_UID_LABEL)
        if job and live(pod):
            members[job].append(pod)
    free = snapshot.devices - len({d for c in snapshot.claims for d in held(c)})
    for group in snapshot.podgroups:
        name, min_count = group["metadata"]["name"], _min_count(group)
        reservation = (group.get("status") or {}).get("reservation") or {}
        if reservation.get("state") == "Reserving":
            out.append(f"PodGroup {name}: reservation left half done (Reserving)")
        mine = members.get(_job_uid(group) or "", [])
        released = [p for p in mine if not gated(p)]
        single = "single" in (group["spec"].get("disruptionMode") or {})
        if 0 < len(released) < min_count and not (single and _scheduled(group)):
            out.append(f"PodGroup {name}: {len(released)} of minCount {min_count} members released")
        waiting = [p for p in mine if gated(p)]
        if not released and len(waiting) >= min_count and free >= min_count:
            out.append(f"PodGroup {name}: {len(waiting)} members wait while {free} devices are free (minCount {min_count})")
    return out


def fingerprint(snapshot: Snapshot) -> tuple[Any, ...]:
    """What changes while the cluster is still moving: who is bound, gated, and what each claim holds and for whom."""
    pods = sorted((p["metadata"]["name"], p["metadata"]["uid"], bool(p["spec"].get("nodeName")), gated(p), live(p)) for p in snapshot.pods)
    claims = sorted((c["metadata"]["name"], tuple(held(c)), tuple(sorted(_reserved(c)))) for c in snapshot.claims)
    states = sorted(
        (g["metadata"]["name"], ((g.get("status") or {}).get("reservation") or {}).get("state") or "") for g in snapshot.podgroups
    )
    return (tuple(pods), tuple(claims), tuple(states))


def summary(snapshot: Snapshot) -> str:
    phases = Counter("gated" if gated(p) else ("bound" if p["spec"].get("nodeName") else "pending") for p in snapshot.pods if live(p))
    devices = sum(len(held(c)) for c in snapshot.claims)
    return f"{dict(phases)} live pods, {devices}/{snapshot.devices} devices held, {len(snapshot.podgroups)} PodGroups"


def bound(snapshot: Snapshot, job: str) -> int:
    return sum(
        1
        for p in snapshot.pods
        if p["metadata"].get("labels", {}).get("batch.kubernetes.io/job-name") == job and live(p) and p["spec"].get("nodeName")
    )


def settle(
    cluster: Any,
    namespace: str,
    expect: dict[str, int],
    timeout: float = 240,
    quiet: float = 4,
    continuous: Continuous | None = None,
) -> Snapshot:
    """Wait until each Job in `expect` has that many members bound, no reservation is half done, every bound pod's
    claims are reserved for it, and nothing moved for `quiet` s; every snapshot on the way is judged as it is taken (`Continuous`), not only the last."""
    continuous = continuous or Continuous()
    deadline = time.monotonic() + timeout
    last, since = None, time.monotonic()
    while True:
        snapshot = take(cluster.kubectl, namespace)
        wrong = continuous.check(snapshot)
        assert not wrong, f"after {continuous.snapshots} snapshots: {wrong}\n{summary(snapshot)}"
        done = (
            all(bound(snapshot, job) == n for job, n in expect.items())
            and not any(((g.get("status") or {}).get("reservation") or {}).get("state") == "Reserving" for g in snapshot.podgroups)
            and not unreserved(snapshot)
        )
        now = time.monotonic()
        if fingerprint(snapshot) != last or not done:
            last, since = fingerprint(snapshot), now
        elif now - since >= quiet:
            return snapshot
        if now > deadline:
            state = cluster.kubectl("get", "pods,resourceclaims,podgroups.scheduling.phalanx.dev", "-n", namespace, "-o", "wide").stdout
            raise TimeoutError(f"not settled on {expect} in {timeout}s: {summary(snapshot)}\n{state}")
        time.sleep(0.5)
