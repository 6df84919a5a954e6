"""Where a group is taken down as a unit: its members evicted, marked once each eviction is accepted.

Every member taken down carries a `DisruptionTarget` condition, so a Job
with a `podFailurePolicy` rule `{action: Ignore, onPodConditions: [{type:
DisruptionTarget}]}` does not count it against `backoffLimit`; only a member
actually being taken down is marked, or a member left running by a refused
eviction would have its later real failures ignored. A member that runs goes
through the Eviction API, so PodDisruptionBudgets are honoured (a refusal is
retried by the caller on its next cycle); the API server marks it as it
accepts the eviction, and Phalanx then puts its own reason on that mark. A
member that never ran (never bound) is marked Failed first, as the pod
garbage collector marks an unscheduled pod it deletes, so its Job replaces it
at once.

A gang torn down as a unit (`uncount`) is not a failure of its members: each
member that still runs first loses the Job controller's tracking finalizer,
as the Job controller takes it off the pods it removes itself (a suspended
Job's), so the Job neither counts it against backoffLimit nor adds it to its
pod-failure back-off (10 s x 2^(n-1), n every failed pod since the last
success, those podFailurePolicy ignores included: `newBackoffRecord` in
pkg/controller/job/backoff_utils.go, v1.37.2), and recreates the gang at
once. The finalizer is taken off only in a patch that tests the phase the
member was seen in, so a member that ended on its own meanwhile keeps it and
is counted as its Job's rules say; a member whose index already counted a
failure (backoffLimitPerIndex) keeps it too, since its replacement inherits
that count only from a pod that kept it. A refused eviction puts it back.

The devices of a gang torn down are freed by Phalanx as its members stop (`Freeing`), by upstream's rule: a claim
is deallocated once none of the pods it is reserved for can run. The resourceclaim controller would do the same,
but it writes through kube-controller-manager's client (20 requests/s by default), and a gang recreated at once
needs it for the new members' claims: 128 members cost it 256 writes to free the old claims (the allocation, then
the delete-protection finalizer) before or among the 256 that create the new ones and name them in each pod's
status, about 25 s at 128 ranks. Freed here, with the same two writes conditional on the claim as the watch shows
it, the old claims leave it nothing to write and the gang's devices are free once its members stop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection, Container, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys, schema, times
from phalanx.crashpoints import crash_point
from phalanx.kube.client import ApiError, Conflict, Forbidden, Invalid, Kube, NotFound, Throttled, all_answered, pod_path
from phalanx.kube.informers import ClusterView
from phalanx.scheduling import accessors, conditions, deallocation, disruption, metrics
from phalanx.scheduling.accessors import allocated_ids, claim_names, may_run
from phalanx.scheduling.reserve import Releaser
from phalanx.scheduling.status import Status

logger = logging.getLogger(__name__)


def _condition(reason: str, message: str) -> dict[str, Any]:
    return {
        "type": keys.DISRUPTION_TARGET,
        "status": "True",
        "reason": reason,
        "message": message[:1024],
        "lastTransitionTime": times.stamp(),
    }


def tracking_at(pod: Mapping[str, Any]) -> int | None:
    """Where the Job's tracking finalizer is in the member's finalizers, when Phalanx may take it off: the member
    has not ended and is not being deleted, and its index counted no failure yet."""
    meta = pod["metadata"]
    finalizers = meta.get("finalizers") or []
    if keys.JOB_TRACKING not in finalizers or meta.get("deletionTimestamp"):
        return None
    if (pod.get("status") or {}).get("phase") not in ("Pending", "Running"):
        return None
    if (meta.get("annotations") or {}).get(keys.JOB_INDEX_FAILURE_COUNT, "0") != "0":
        return None
    return finalizers.index(keys.JOB_TRACKING)


async def _uncount(kube: Kube, pod: Mapping[str, Any]) -> bool:
    """Take the tracking finalizer off a member about to be torn down; True when this call took it off.

    The patch tests the uid, the finalizer's place and the phase seen, so a member that ended meanwhile keeps it;
    a failed test is tried once more on the member as it is now."""
    meta = pod["metadata"]
    path = pod_path(meta["namespace"], meta["name"])
    for attempt in range(2):
        at = tracking_at(pod)
        if at is None:
            return False
        patch = [
            {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
            {"op": "test", "path": f"/metadata/finalizers/{at}", "value": keys.JOB_TRACKING},
            {"op": "test", "path": "/status/phase", "value": pod["status"]["phase"]},
            {"op": "remove", "path": f"/metadata/finalizers/{at}"},
        ]
        try:
            await kube.json_patch(path, patch)
            return True
        except Invalid:
            fresh = await kube.get(path) if attempt == 0 else None
            if fresh is None or fresh["metadata"]["uid"] != meta["uid"]:
                return False
            pod, meta = fresh, fresh["metadata"]
        except Forbidden as exc:
            logger.warning(
                "%s/%s keeps the Job's tracking finalizer (its Job counts it as taken down): %s",
                meta["namespace"],
                meta["name"],
                exc.message,
            )
            return False
    return False


async def _recount(kube: Kube, pod: Mapping[str, Any]) -> None:
    """Put the tracking finalizer back on a member whose eviction was refused: it keeps running, and its Job must
    count however it ends. A member deleted meanwhile (it cannot take a finalizer any more) or gone is left."""
    meta = pod["metadata"]
    others = [f for f in meta.get("finalizers") or [] if f != keys.JOB_TRACKING]
    patch = [
        {"op": "test", "path": "/metadata/uid", "value": meta["uid"]},
        # the list is gone with its last entry: put it back whole, as it was
        *([{"op": "test", "path": "/metadata/finalizers", "value": others}] if others else []),
        {"op": "add", "path": "/metadata/finalizers", "value": [*others, keys.JOB_TRACKING]},
    ]
    try:
        await kube.json_patch(pod_path(meta["namespace"], meta["name"]), patch)
    except (NotFound, Invalid, Forbidden) as exc:
        logger.warning("tracking finalizer not put back on %s/%s: %s", meta["namespace"], meta["name"], exc.message)


async def evict(kube: Kube, pod: Mapping[str, Any], *, reason: str, message: str, uncount: bool = False) -> bool:
    """Take one pod down; True when it is gone or going, False when a disruption budget refused (try again later).

    `uncount`: the pod is a member of a gang torn down as a unit, and its Job is not to count it (see above)."""
    meta = pod["metadata"]
    if meta.get("deletionTimestamp"):
        return True
    mark = {"metadata": {"uid": meta["uid"]}, "status": {"conditions": [_condition(reason, message)]}}
    uncounted = uncount and await _uncount(kube, pod)
    try:
        if not accessors.bound(pod):
            never_ran = {"phase": "Failed", "reason": reason, "message": message[:1024]}
            await kube.strategic_patch(
                pod_path(meta["namespace"], meta["name"], "status"), {**mark, "status": {**mark["status"], **never_ran}}
            )
            await kube.evict(meta["namespace"], meta["name"], meta["uid"])
        else:
            await kube.evict(meta["namespace"], meta["name"], meta["uid"])
            # the API server marked it (EvictionByEvictionAPI) as it accepted: the mark says why, in Phalanx's words
            await kube.strategic_patch(pod_path(meta["namespace"], meta["name"], "status"), mark)
    except (NotFound, Conflict):
        return True  # gone, or replaced by a pod of the same name: not ours to take down
    except Throttled as exc:
        logger.warning("eviction of %s/%s refused for now: %s", meta["namespace"], meta["name"], exc.message)
        if uncounted:
            await _recount(kube, pod)
        return False
    crash_point(f"evicted.{reason}")
    metrics.EVICTIONS.labels(reason=reason).inc()
    await kube.event({"apiVersion": "v1", "kind": "Pod", "metadata": meta}, type_="Warning", reason=reason, message=message)
    return True


async def evict_all(kube: Kube, pods: list[Mapping[str, Any]], *, reason: str, message: str, uncount: Container[str] = ()) -> list[str]:
    """Evict concurrently; returns the names of pods still standing (refused). `uncount`: the uids of the members
    their Job is not to count (a gang torn down as a unit, less the members it lost)."""
    done = await asyncio.gather(
        *(evict(kube, p, reason=reason, message=message, uncount=p["metadata"]["uid"] in uncount) for p in pods),
        return_exceptions=True,
    )
    standing = []
    for pod, result in zip(pods, done, strict=True):
        if isinstance(result, ApiError):
            logger.warning("eviction of %s failed: %s", accessors.name(pod), result)
            standing.append(accessors.name(pod))
        elif isinstance(result, BaseException):
            raise result
        elif not result:
            standing.append(accessors.name(pod))
    return standing


@dataclass(frozen=True)
class Stopping:
    """An allocated claim of members torn down: freed once none of the pods it is reserved for can run."""

    namespace: str
    name: str
    uid: str
    members: frozenset[str]
    """The uids of the members torn down that use it: a claim reserved for any other consumer is left alone."""


class Freeing:
    """The claims of gangs torn down, deallocated as their members stop (see the module's docstring).

    What it remembers lives in this process only: after a restart the resourceclaim controller frees what is left,
    as it would without Phalanx."""

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.pending: dict[str, Stopping] = {}
        """Claim uid -> the claim and the members it was allocated for."""

    def watch(self, members: Iterable[Mapping[str, Any]], claim: Callable[[str, str], Mapping[str, Any] | None]) -> None:
        """Remember the allocated claims of `members`, a gang being torn down."""
        users: dict[tuple[str, str, str], set[str]] = {}
        for pod in members:
            namespace = accessors.namespace(pod)
            for name in claim_names(pod) or ():
                obj = claim(namespace, name)
                if obj is not None and allocated_ids(obj) is not None:
                    users.setdefault((namespace, name, obj["metadata"]["uid"]), set()).add(pod["metadata"]["uid"])
        for (namespace, name, uid), pods in users.items():
            known = self.pending.get(uid)
            self.pending[uid] = Stopping(namespace, name, uid, frozenset(pods) | (known.members if known else frozenset()))

    def due(self, pods: Mapping[str, Mapping[str, Any]], claim: Callable[[str, str], Mapping[str, Any] | None]) -> list[Mapping[str, Any]]:
        """The remembered claims (as the watch shows them) that none of their users can run any more; `pods` maps a uid
        to the pod the watch shows (a member seen at the teardown and absent now was deleted). Claims gone,
        deallocated, or reserved for anyone else are forgotten: nothing of theirs is Phalanx's to free."""
        out = []
        for uid, stopping in list(self.pending.items()):
            obj = claim(stopping.namespace, stopping.name)
            if obj is None or obj["metadata"]["uid"] != uid or allocated_ids(obj) is None:
                del self.pending[uid]
                continue
            consumers = (obj.get("status") or {}).get("reservedFor") or []
            users = {u.get("uid") for u in consumers if u.get("resource") == "pods" and not u.get("apiGroup")}
            if not consumers or len(users) != len(consumers) or not users <= stopping.members:
                del self.pending[uid]  # reserved for someone else (or for nobody): the resourceclaim controller's to judge
            elif not any(may_run(pods.get(u)) for u in users):
                out.append(obj)
        return out

    async def sweep(self, pods: Mapping[str, Mapping[str, Any]], claim: Callable[[str, str], Mapping[str, Any] | None]) -> int:
        """Free every remembered claim whose users have stopped; returns how many were freed. A write that loses to a
        change (the resourceclaim controller freeing it too) is judged again on the next sweep."""
        freed = await all_answered(self._free(obj) for obj in self.due(pods, claim))
        return sum(freed)

    async def _free(self, obj: Mapping[str, Any]) -> bool:
        """Allocation and reservedFor cleared, then the delete-protection finalizer taken off, as the resourceclaim
        controller does once a claim's users are done; kept (for the next sweep) while a fresh read finds one that
        may still run, which the watch did not show yet."""
        try:
            freed = await deallocation.clear(self.kube, obj, unprotect=True)
        except (Conflict, NotFound):
            return False  # changed or gone meanwhile: the next sweep judges it again, or forgets it
        if freed:
            self.pending.pop(obj["metadata"]["uid"], None)
        return freed


class TearDown:
    """The action that takes a gang down as a unit: at its bind or ready deadline, on a loss in mode all, when its
    owner is suspended, when its release is refused in part, when its devices were allocated second. One rule for
    all of them: what goes, what is freed, what the record keeps, what the status says."""

    def __init__(
        self,
        kube: Kube,
        view: ClusterView,
        releaser: Releaser,
        freeing: Freeing,
        status: Status,
        pods_of: Mapping[str, list[dict[str, Any]]],
        pins: Callable[[], Mapping[str, str]],
    ) -> None:
        self.kube = kube
        self.view = view
        self.releaser = releaser
        self.freeing = freeing
        self.status = status
        self.pods_of = pods_of
        """PodGroup uid -> every pod of its owner, terminating ones included."""
        self.pins = pins
        """Pod uid -> node of every pin Phalanx made."""

    async def __call__(
        self,
        pod_group: dict[str, Any],
        pods: list[dict[str, Any]],
        reservation: schema.Reservation | None,
        why: str,
        *,
        reason: str = keys.TORN_DOWN,
        lost: Collection[str] = (),
    ) -> bool:
        """Evict every member that was released or pinned, release the devices of members that cannot run (never
        bound, and stopped or still gated), forget the reservation: the group starts over. A member still gated and
        never pinned holds nothing and waits for the next admission (evicting it would only spend the Job's back-off).
        The members taken down are not counted by their Job (`evict_all`); those `lost` (uids) are, by its rules.

        False while an eviction is refused (a disruption budget): the caller backs off and tries again.
        """
        message = f"gang {pod_group['metadata']['name']} torn down as a unit: {why}"
        pinned = self.pins()
        released = [p for p in pods if not accessors.gated(p) or p["metadata"]["uid"] in pinned]
        spared = {p["metadata"]["uid"] for p in released} - set(lost)
        standing = await evict_all(self.kube, released, reason=reason, message=message, uncount=spared)
        crash_point("teardown.after-evictions")
        members = self.pods_of.get(pod_group["metadata"]["uid"], pods)
        self.freeing.watch(members, self.view.claims.get)
        if reservation is not None:
            # judged on every pod of the Job, terminating ones included: a member evicted on an earlier pass runs out
            # its grace period on its devices, and the resourceclaim controller frees them once it is done
            every = {p["metadata"]["uid"]: p for p in members}
            users = self.releaser.claim_users(accessors.namespace(pod_group), reservation)
            idle = [c for c in reservation.claims if not any(accessors.may_run(every.get(u["uid"])) for u in users.get(c.name, []))]
            await deallocation.undo(self.kube, accessors.namespace(pod_group), idle)
            crash_point("teardown.after-deallocate")
        if standing:
            waits = f"{why}; waiting for the eviction of {', '.join(standing)}, refused for now and tried again"
            scheduled = conditions.find(pod_group, keys.INITIALLY_SCHEDULED)
            if scheduled is not None and scheduled["status"] == "True":
                # that condition is terminal once True: a running gang's teardown is told where its loss is
                await self.status.condition(pod_group, keys.DISRUPTION_TARGET, True, reason, waits, warn=True)
            else:
                await self.status.scheduled(pod_group, False, keys.TEARING_DOWN, waits)
            return False
        await self.releaser.record(pod_group, None, finished=disruption.kept_finished(pod_group, members, self.view.finished))
        metrics.TEARDOWNS.inc()
        await self.status.scheduled(
            pod_group,
            False,
            reason,
            f"{why}; members evicted and devices released, the group will be admitted again whole",
            readmit=True,
        )
        await self.status.event(pod_group, "Warning", reason, message)
        return True
