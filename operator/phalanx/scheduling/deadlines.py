"""The deadlines of a released gang: minCount bound within the bind deadline, every member Ready within the ready
deadline (then a back-off before it is admitted again), and every member released later bound within the bind
deadline too. Each past its deadline is taken down (`teardown.TearDown`); each not yet due sets when the loop
wakes for it (`memory`), so a gang that waits is never forgotten between events.
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from phalanx.api import intent, keys, schema, times
from phalanx.crashpoints import crash_point
from phalanx.kube.client import Kube
from phalanx.kube.informers import ClusterView
from phalanx.scheduling import accessors, conditions, metrics, podsready, teardown
from phalanx.scheduling.memory import Memory
from phalanx.scheduling.reserve import Releaser
from phalanx.scheduling.status import Status

logger = logging.getLogger(__name__)


class Deadlines:
    """Judges a released gang's bind and ready deadlines, and the bind deadline of each member released later."""

    def __init__(
        self,
        kube: Kube,
        view: ClusterView,
        memory: Memory,
        status: Status,
        releaser: Releaser,
        tear_down: teardown.TearDown,
        *,
        bind_deadline: float,
        ready_deadline: float,
        ready_backoff: tuple[float, float],
    ) -> None:
        self.kube = kube
        self.view = view
        self.memory = memory
        self.status = status
        self.releaser = releaser
        self.tear_down = tear_down
        self.freeing = tear_down.freeing
        self.bind_deadline = bind_deadline
        """Seconds a released gang (and each member released later) has to be bound."""
        self.ready_deadline = ready_deadline
        """Seconds a released gang has to get every member Ready (0: no deadline); a Job's annotation overrides it."""
        self.ready_backoff = ready_backoff
        """(base, cap) seconds of the back-off before a gang torn down at its ready deadline is admitted again."""

    def _ready_record(self, pod_group: Mapping[str, Any]) -> schema.Readiness:
        remembered = self.memory.get(pod_group["metadata"]["uid"])
        mine = remembered.readiness if remembered is not None else None
        if mine is not None:
            return mine
        raw = (pod_group.get("status") or {}).get("readiness")
        return schema.Readiness.model_validate(raw) if raw else schema.Readiness()

    async def _write_readiness(self, pod_group: Mapping[str, Any], record: schema.Readiness) -> None:
        await self.kube.merge_patch(
            accessors.path(pod_group, status=True),
            {"status": {"readiness": record.wire()}},
        )
        self.memory.of(pod_group["metadata"]["uid"]).readiness = record

    def _deadline_of(self, pod_group: Mapping[str, Any]) -> float:
        """The Job's ready-deadline annotation (copied onto its PodGroup), else the operator's flag; 0: none."""
        with contextlib.suppress(intent.GangSpecError):
            said = intent.ready_deadline(pod_group["metadata"].get("annotations"))
            if said is not None:
                return said
        return self.ready_deadline

    async def ready(
        self, pod_group: dict[str, Any], pods: list[dict[str, Any]], reservation: schema.Reservation, min_count: int, done: int
    ) -> bool | None:
        """A released gang whose members are not all Ready by the ready deadline is torn down as a unit
        (`podsready.judge`); None when there is nothing to do."""
        placed = {p.uid for p in reservation.placements}
        verdict = podsready.judge(
            self._ready_record(pod_group),
            self._deadline_of(pod_group),
            reservation.released_at,
            [p for p in pods if p["metadata"]["uid"] in placed],
            min_count,
            done=done,
            now=times.now(),
            backoffs=self.ready_backoff,
        )
        if verdict is None:
            return None
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        if verdict.wake_in is not None:
            remembered.due = time.monotonic() + verdict.wake_in
        elif verdict.tear_down is None:
            remembered.due = None  # every member Ready: nothing to wake for
        if verdict.record is not None:
            await self._write_readiness(pod_group, verdict.record)
        if verdict.counted:
            metrics.READY_TIMEOUTS.inc()
        if verdict.tear_down is None:
            return None
        return await self.tear_down(pod_group, pods, reservation, verdict.tear_down, reason=keys.READY_TIMEOUT)

    async def backing_off(self, pod_group: dict[str, Any]) -> bool:
        """True while a gang torn down at its ready deadline waits out its back-off (the condition says until when)."""
        waiting = podsready.backing_off(self._ready_record(pod_group), times.now())
        if waiting is None:
            return False
        left, why = waiting
        self.memory.of(pod_group["metadata"]["uid"]).due = time.monotonic() + left
        await self.status.scheduled(pod_group, False, keys.READY_TIMEOUT, why)
        return True

    async def bound(
        self,
        pod_group: dict[str, Any],
        pods: list[dict[str, Any]],
        bound: list[dict[str, Any]],
        reservation: schema.Reservation,
        min_count: int,
        done: int,
    ) -> bool:
        """A released group becomes Scheduled once minCount members are bound or finished (a rank may exit 0 before
        the last is bound), or is torn down at the deadline."""
        finished = f", {done} finished" if done else ""
        if len(bound) + done >= min_count:
            nodes = len({p["spec"]["nodeName"] for p in bound})
            await self.status.scheduled(
                pod_group, True, keys.SCHEDULED, f"{len(bound)} of {len(pods)} members bound to {nodes} node(s){finished}"
            )
            return True
        waited = times.waited(reservation.released_at)
        if waited >= self.bind_deadline:
            why = (
                f"only {len(bound)} of minCount {min_count} members bound{finished} {self.bind_deadline:.0f}s after release "
                f"({len(pods)} members exist)"
            )
            return await self.tear_down(pod_group, pods, reservation, why)
        return True

    async def unbind_late(
        self, pod_group: dict[str, Any], pods: list[dict[str, Any]], reservation: schema.Reservation | None
    ) -> tuple[dict[str, Any], schema.Reservation | None]:
        """Every released member has a bind deadline, not only a gang's first minCount (`_await_binding`): a member
        released once the group was placed (a late one, one beyond minCount, a basic group's) that kube-scheduler does
        not bind (another pod took the node's CPU, the node was cordoned) would keep its devices for ever. Past the
        deadline it leaves the record (so its going is no loss of the gang's), then is taken down as a teardown takes
        a member that never ran (its owner creates it again behind the gate, uncounted) and its claims are freed as it
        stops. Returns the group and its record as they now stand (the rest of the visit must not write the old record
        back, with the member in it)."""
        uid = pod_group["metadata"]["uid"]
        remembered = self.memory.of(uid)
        now = time.monotonic()
        unbound = {
            p["metadata"]["uid"]: p
            for p in pods
            if not accessors.bound(p) and not accessors.gated(p) and keys.PINNED_NODE in (p["metadata"].get("annotations") or {})
        }
        seen = {u: remembered.unbound.get(u, now) for u in unbound}
        if seen != remembered.unbound:
            remembered.unbound = seen
        late = [unbound[u] for u, since in seen.items() if now - since >= self.bind_deadline]
        waiting = [since + self.bind_deadline for u, since in seen.items() if now - since < self.bind_deadline]
        if waiting:
            remembered.due = min(remembered.due if remembered.due is not None else math.inf, *waiting)  # woken then, never settled
        if not late:
            return pod_group, reservation
        gone = {p["metadata"]["uid"] for p in late}
        if reservation is not None and any(p.uid in gone for p in reservation.placements):
            reservation = reservation.model_copy(
                update={
                    "placements": [p for p in reservation.placements if p.uid not in gone],
                    "planned": [p for p in reservation.planned or () if p.uid not in gone] or None,
                }
            )
            pod_group = await self.releaser.record(pod_group, reservation)
            crash_point("unbind.after-record")
        names = ", ".join(sorted(accessors.name(p) for p in late))
        nodes = ", ".join(sorted({p["metadata"]["annotations"][keys.PINNED_NODE] for p in late}))
        refused = next((c.get("message") for p in late if (c := conditions.find(p, "PodScheduled")) and c.get("message")), None)
        said = f" (kube-scheduler: {refused})" if refused else ""
        why = (
            f"member(s) {names} released onto {nodes} and not bound by kube-scheduler {self.bind_deadline:.0f}s later{said}: "
            "taken down and their devices freed"
        )
        if all(any(o.get("controller") for o in p["metadata"].get("ownerReferences") or []) for p in late):
            why += "; their owner creates them again behind the gate, placed afresh"
        self.freeing.watch(late, self.view.claims.get)
        await teardown.evict_all(self.kube, late, reason=keys.NOT_BOUND, message=why, uncount=gone)
        await self.status.event(pod_group, "Warning", keys.NOT_BOUND, why)
        logger.warning("%s/%s: %s", accessors.namespace(pod_group), accessors.name(pod_group), why)
        return pod_group, reservation
