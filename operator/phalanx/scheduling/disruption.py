"""Which members of a running group were lost, and why: the input of disruptionMode `all` and `single`.

A member is a pod released in the group's current incarnation (the
placements of its reservation record). It is lost when it was evicted,
preempted (by Phalanx or by kube-scheduler), deleted, failed, or its node
went away; a member that Succeeded finished its work and is not lost, nor is
one removed after it Succeeded (PodGC, a cleanup), nor any member of a Job
that has finished (its successPolicy deletes the rest). Pods of
an earlier incarnation (failed and kept by the Job) are not members any more.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys, schema
from phalanx.scheduling import accessors, conditions


@dataclass(frozen=True)
class Loss:
    name: str
    uid: str
    cause: str

    def __str__(self) -> str:
        return f"{self.name} ({self.cause})"


PREEMPTED = "PreemptedByGang"
"""The DisruptionTarget reason Phalanx puts on the victims of a gang preemption (`scheduling.nomination`)."""


def _disruption_reason(pod: Mapping[str, Any]) -> str | None:
    """Phalanx's preemption mark says who preempted (its message); any other mark, its reason. (The API server's
    own mark, which a victim gets before Phalanx's lands, is covered by the nomination: see `losses`.)"""
    cond = conditions.find(pod, keys.DISRUPTION_TARGET)
    if cond is None or cond.get("status") != "True":
        return None
    if cond.get("reason") == PREEMPTED and cond.get("message"):
        return str(cond["message"])
    return cond.get("reason") or "disrupted"


def preempted_by(preemptor: str, priority: int) -> str:
    """The cause of a gang preemption's victims, in the words every report of it uses."""
    return f"preempted by {preemptor}, priority {priority}"


def _exit(pod: Mapping[str, Any]) -> str:
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        terminated = (status.get("state") or {}).get("terminated")
        if terminated and terminated.get("exitCode"):
            return f"failed: container {status['name']} exited {terminated['exitCode']}"
    return "failed"


def cause(pod: Mapping[str, Any] | None, nodes: AbstractSet[str], finished: bool = False) -> str | None:
    """Why this member is lost, or None while it runs (or after it Succeeded, even once its pod is removed)."""
    if pod is None:
        return None if finished else "deleted"
    phase = (pod.get("status") or {}).get("phase")
    if phase == "Succeeded":
        return None
    disrupted = _disruption_reason(pod)
    if phase == "Failed":
        return disrupted or _exit(pod)
    if pod["metadata"].get("deletionTimestamp"):
        return disrupted or "deleted"
    node = pod["spec"].get("nodeName")
    if node and node not in nodes:
        return f"node {node} is gone"
    return None


def losses(
    reservation: schema.Reservation,
    pods: Iterable[Mapping[str, Any]],
    nodes: AbstractSet[str],
    finished: Container[str] = (),
    known: Mapping[str, str] | None = None,
    preempted: Mapping[str, str] | None = None,
) -> list[Loss]:
    """Members of this incarnation that are lost, in placement order; `finished`: uids of pods that Succeeded and went.

    A loss keeps the cause it was first recorded with (`known`, uid -> cause, from `status.lost`), and a victim of a
    preemption under way (`preempted`, uid -> cause) is said to be so: a pod deleted, or marked by the API server
    before Phalanx, reads the same in `single` and `all` mode, and the message does not change as the pod goes."""
    by_uid = {p["metadata"]["uid"]: p for p in pods}
    out = []
    for placement in reservation.placements:
        why = cause(by_uid.get(placement.uid), nodes, placement.uid in finished)
        if why is not None:
            why = (known or {}).get(placement.uid) or (preempted or {}).get(placement.uid) or why
            out.append(Loss(placement.name, placement.uid, why))
    return out


def recorded(pod_group: Mapping[str, Any]) -> dict[str, str]:
    """uid -> cause of the losses in `status.lost`."""
    return {m["uid"]: m["cause"] for m in (pod_group.get("status") or {}).get("lost") or []}


def record(lost: Iterable[Loss]) -> list[dict[str, str]]:
    """`status.lost` for these losses."""
    return [{"name": loss.name, "uid": loss.uid, "cause": loss.cause} for loss in lost]


def done(pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The pods that Succeeded: members whose work is done, whichever incarnation ran them."""
    return [p for p in pods if (p.get("status") or {}).get("phase") == "Succeeded"]


def finished_uids(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], gone: Container[str] = ()) -> set[str]:
    """The members that finished their work: done, not missing, and counted toward minCount wherever it is judged.

    Every pod of the owner that Succeeded, of this incarnation or an earlier one (a rank that exited 0 is not run
    again by its Job, whatever became of the others); the members of this incarnation whose pods were removed after
    they Succeeded (`gone`); and those an earlier teardown kept (`status.finished`), whose pods may be gone since.
    Without them a Job whose ranks 0-2 finished while rank 3 was lost waits for a quorum of 4 that can never exist
    again."""
    succeeded = {p["metadata"]["uid"] for p in done(pods)}
    reservation = accessors.reservation(pod_group)
    removed = {p.uid for p in reservation.placements if p.uid in gone} if reservation is not None else set()
    kept = (pod_group.get("status") or {}).get("finished") or ()
    return succeeded | removed | set(kept)


def finished(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], gone: Container[str] = ()) -> int:
    """How many members finished their work (`finished_uids`)."""
    return len(finished_uids(pod_group, pods, gone))


def kept_finished(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], gone: Container[str] = ()) -> list[str] | None:
    """What a teardown writes to `status.finished` as it ends the record (whose placements are how a member removed
    after it Succeeded is known): at most minCount uids, as more never change a count judged against it."""
    uids = sorted(finished_uids(pod_group, pods, gone))[: accessors.min_count(pod_group)]
    return uids or None


def current(
    record: schema.Reservation, pods: Iterable[Mapping[str, Any]], claims: Container[str], gone: Container[str] = ()
) -> schema.Reservation:
    """The record cut to the members still in this incarnation, when late members join it.

    A member that stopped before finishing (gone, or Failed) had its loss reported when it happened and is replaced
    by the member joining now; its entries go, with every claim that no longer exists (by uid), so a long-running
    Job's record stays the size of its gang instead of growing with every replacement until its writes fail."""
    by_uid = {p["metadata"]["uid"]: p for p in pods}

    def stays(uid: str) -> bool:
        pod = by_uid.get(uid)
        return uid in gone if pod is None else (pod.get("status") or {}).get("phase") != "Failed"

    return record.model_copy(
        update={
            "placements": [p for p in record.placements if stays(p.uid)],
            "claims": [c for c in record.claims if c.uid in claims],
            "planned": [p for p in record.planned or () if stays(p.uid)] or None,
        }
    )
