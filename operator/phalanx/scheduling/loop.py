"""The release loop: each cycle, every waiting PodGroup in priority then FIFO order gets a plan or a reason.

One cycle:
1. repair: a device held by a Phalanx claim and another claim (kube-scheduler
   allocated it in the race window) is returned by evicting the intruder;
2. resume: a reservation recorded but not finished (operator restarted) is
   completed or rolled back;
3. for each PodGroup still waiting for its first placement, once its quorum
   exists (minCount gated pods whose claims were created), build a snapshot,
   ask the planner, and on Fits reserve and release the group as a unit;
   on Short, report the exact reason in the PodGroup status;
4. members arriving after the group was scheduled are released one by one;
5. PodGroupInitiallyScheduled turns True once minCount members are bound.
Cycles run on every watch change (coalesced) and at least every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys, schema
from phalanx.kube.client import Kube
from phalanx.kube.informers import ClusterView
from phalanx.planner import DeviceMatcher, Fits, plan
from phalanx.planner.model import Group
from phalanx.scheduling import conditions, inputs, metrics, repair
from phalanx.scheduling.reserve import ReleaseAborted, Releaser

logger = logging.getLogger(__name__)


def _owner_uid(obj: Mapping[str, Any], kind: str) -> str | None:
    for ref in obj["metadata"].get("ownerReferences") or []:
        if ref.get("kind") == kind and ref.get("controller"):
            return ref["uid"]
    return None


def _condition(pod_group: Mapping[str, Any], type_: str) -> dict[str, Any] | None:
    for cond in (pod_group.get("status") or {}).get("conditions") or []:
        if cond["type"] == type_:
            return cond
    return None


def _min_count(pod_group: Mapping[str, Any]) -> int:
    gang_policy = pod_group["spec"]["schedulingPolicy"].get("gang")
    return int(gang_policy["minCount"]) if gang_policy else 1


class SchedulingLoop:
    def __init__(self, kube: Kube, view: ClusterView, *, period: float = 5.0, settle: float = 0.5) -> None:
        self.kube = kube
        self.view = view
        self.period = period
        self.matcher = DeviceMatcher()
        self.releaser = Releaser(kube, view, settle=settle)
        self._evicted: set[str] = set()
        self._written: dict[str, tuple[bool, str, str]] = {}

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.view.changed.wait(), timeout=self.period)
            self.view.changed.clear()
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.exception("release cycle failed; retrying on the next change")
                await asyncio.sleep(1)

    async def cycle(self) -> None:
        await self._repair_double_allocations()
        pods_by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in self.view.pods.items():
            job_uid = (pod["metadata"].get("labels") or {}).get(keys.JOB_UID_LABEL)
            if job_uid and not inputs.terminal(pod) and not pod["metadata"].get("deletionTimestamp"):
                pods_by_job[job_uid].append(pod)
        for pod_group in sorted(self.view.podgroups.items(), key=self._order):
            job_uid = _owner_uid(pod_group, "Job")
            if job_uid is None or pod_group["metadata"].get("deletionTimestamp"):
                continue
            await self._reconcile(pod_group, sorted(pods_by_job.get(job_uid, []), key=lambda p: p["metadata"]["name"]))

    def _order(self, pod_group: Mapping[str, Any]) -> tuple[int, str, str]:
        name = pod_group["spec"].get("priorityClassName")
        priority = pod_group["spec"].get("priority")
        if priority is None and name:
            pc = self.view.priorities.get("", name)
            priority = (pc or {}).get("value", 0)
        return (-(priority or 0), pod_group["metadata"].get("creationTimestamp", ""), pod_group["metadata"]["name"])

    async def _reconcile(self, pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        reservation_raw = (pod_group.get("status") or {}).get("reservation")
        reservation = schema.Reservation.model_validate(reservation_raw) if reservation_raw else None
        if reservation is not None and reservation.state == "Reserving":
            await self._resume(pod_group, reservation)
            return
        bound = [p for p in pods if p["spec"].get("nodeName")]
        waiting = [p for p in pods if inputs.gated(p)]
        await self._counters(pod_group, len(pods), len(bound))
        if pod_group["spec"]["schedulingPolicy"].get("basic") is not None:
            await self._release_each(pod_group, waiting)
            return
        scheduled = _condition(pod_group, keys.INITIALLY_SCHEDULED)
        if scheduled is not None and scheduled["status"] == "True":
            await self._release_each(pod_group, waiting)
            return
        min_count = _min_count(pod_group)
        if reservation is not None and reservation.state == "Released":
            if len(bound) >= min_count:
                nodes = len({p["spec"]["nodeName"] for p in bound})
                await self._set(pod_group, True, "Scheduled", f"{len(bound)} of {len(pods)} members bound to {nodes} node(s)")
            return
        if not waiting:
            return
        ready = [p for p in waiting if self._claims_ready(p)]
        if len(ready) < min_count:
            await self._set(
                pod_group, False, "Pending", f"waiting for quorum: {len(ready)} of minCount {min_count} members created with their claims"
            )
            return
        await self._attempt(pod_group, ready, min_count)

    def _claims_ready(self, pod: Mapping[str, Any]) -> bool:
        names = inputs.claim_names(pod)
        return names is not None and all(self.view.claims.get(pod["metadata"]["namespace"], n) for n in names)

    def _snapshot(self) -> Any:
        return inputs.build(
            self.view.nodes.items(), self.view.pods.items(), self.view.slices.items(), self.view.claims.items(), self.view.classes.items()
        )

    def _group(self, pod_group: Mapping[str, Any], pods: list[dict[str, Any]], min_count: int) -> Group:
        topology = (pod_group["spec"].get("schedulingConstraints") or {}).get("topology") or []
        members = tuple(inputs.member(p, inputs.claim_names(p) or ()) for p in pods)
        return Group(
            pod_group["metadata"]["namespace"], pod_group["metadata"]["name"], min_count, members, topology[0]["key"] if topology else None
        )

    async def _attempt(self, pod_group: dict[str, Any], ready: list[dict[str, Any]], min_count: int) -> None:
        started = time.monotonic()
        snapshot = self._snapshot()
        decided = time.monotonic()
        result = plan(snapshot, self._group(pod_group, ready, min_count), self.matcher)
        metrics.ALGORITHM_DURATION.observe(time.monotonic() - decided)
        if not isinstance(result, Fits):
            metrics.SCHEDULE_ATTEMPTS.labels(result="unschedulable").inc()
            metrics.ATTEMPT_DURATION.labels(result="unschedulable").observe(time.monotonic() - started)
            await self._set(pod_group, False, "Unschedulable", result.message, warn=True)
            return
        try:
            await self.releaser.release(pod_group, result)
        except ReleaseAborted as exc:
            metrics.SCHEDULE_ATTEMPTS.labels(result="aborted").inc()
            await self._event(pod_group, "Warning", "ReservationRolledBack", f"reservation undone, will plan again: {exc}")
            return
        metrics.SCHEDULE_ATTEMPTS.labels(result="scheduled").inc()
        metrics.ATTEMPT_DURATION.labels(result="scheduled").observe(time.monotonic() - started)
        nodes = sorted(result.nodes)
        message = (
            f"released {len(result.placements)} members on {len(nodes)} node(s) ({', '.join(nodes)}) "
            f"with {sum(len(c.results) for c in result.claims)} device(s) reserved"
        )
        await self._set(pod_group, False, "Released", message)
        await self._event(pod_group, "Normal", "Released", message)

    async def _release_each(self, pod_group: dict[str, Any], waiting: list[dict[str, Any]]) -> None:
        """Late members of a scheduled gang (and every member of a basic group) go one by one."""
        for pod in waiting:
            if not self._claims_ready(pod):
                continue
            result = plan(self._snapshot(), self._group(pod_group, [pod], 1), self.matcher)
            if isinstance(result, Fits):
                try:
                    await self.releaser.release_member(pod_group, result)
                except ReleaseAborted:
                    continue

    async def _resume(self, pod_group: dict[str, Any], reservation: schema.Reservation) -> None:
        try:
            await self.releaser.complete(pod_group, reservation)
        except ReleaseAborted as exc:
            await self._event(pod_group, "Warning", "ReservationRolledBack", f"unfinished reservation undone: {exc}")

    async def _repair_double_allocations(self) -> None:
        for conflict in repair.double_allocations(self.view.claims.items(), repair.reserved_claims(self.view.podgroups.items())):
            for intruder in conflict.intruders:
                if intruder["metadata"]["uid"] in self._evicted:
                    continue
                self._evicted.add(intruder["metadata"]["uid"])
                metrics.CONFLICTS.labels(stage="after-release").inc()
                logger.warning(
                    "device %s held by %s; evicting the holders of %s", conflict.device, conflict.holders, intruder["metadata"]["name"]
                )
                await self.releaser.evict_holders(intruder)

    async def _counters(self, pod_group: Mapping[str, Any], members: int, bound: int) -> None:
        current = pod_group.get("status") or {}
        if current.get("members") == members and current.get("bound") == bound:
            return
        await self.kube.patch_custom(
            "podgroups",
            pod_group["metadata"]["namespace"],
            pod_group["metadata"]["name"],
            {"status": {"members": members, "bound": bound}},
            status=True,
        )

    async def _set(self, pod_group: dict[str, Any], ok: bool, reason: str, message: str, *, warn: bool = False) -> None:
        uid = pod_group["metadata"]["uid"]
        if self._written.get(uid) == (ok, reason, message):
            return  # our last write has not reached the watch yet
        existing = (pod_group.get("status") or {}).get("conditions") or []
        new = conditions.condition(keys.INITIALLY_SCHEDULED, ok, reason, message, pod_group["metadata"].get("generation"))
        merged = conditions.merged(existing, new)
        if merged is None:
            self._written[uid] = (ok, reason, message)
            return
        logger.info("%s/%s: %s %s", pod_group["metadata"]["namespace"], pod_group["metadata"]["name"], reason, message)
        (current,) = [c for c in merged if c["type"] == keys.INITIALLY_SCHEDULED]
        await self.kube.apply_status(
            "PodGroup", pod_group["metadata"]["namespace"], pod_group["metadata"]["name"], {"conditions": [current]}, keys.SCHEDULING_LOOP
        )
        self._written[uid] = (ok, reason, message)
        if warn or ok:
            await self._event(pod_group, "Warning" if warn else "Normal", reason, message)

    async def _event(self, pod_group: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        ref = {"apiVersion": schema.API_VERSION, "kind": "PodGroup", "metadata": pod_group["metadata"]}
        await self.kube.event(ref, type_=type_, reason=reason, message=message)
        job_name = (pod_group["metadata"].get("labels") or {}).get(keys.JOB_NAME_LABEL)
        job_uid = _owner_uid(pod_group, "Job")
        if job_name and job_uid:
            job_ref = {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": job_name, "namespace": pod_group["metadata"]["namespace"], "uid": job_uid},
            }
            await self.kube.event(job_ref, type_=type_, reason=reason, message=message)
