"""Gang preemption as an action: victims chosen so the whole group fits (`planner.plan_preemption`, pure), their
eviction started and seen through, the devices they free held for the preemptor meanwhile (`nomination`), and
the end: the preemptor reserves them, or gives up by its deadline and says why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from phalanx.api import keys, schema, times
from phalanx.kube.informers import ClusterView
from phalanx.owners.seam import OwnerKind
from phalanx.planner import DeviceMatcher, NoVictims, Preemption, plan_preemption
from phalanx.planner.model import Group, Snapshot
from phalanx.planner.preemption import no_candidates
from phalanx.scheduling import accessors, disruption, metrics, victims
from phalanx.scheduling.memory import Memory
from phalanx.scheduling.nomination import PREEMPTED, Preemptor
from phalanx.scheduling.nomination import intruders as nomination_intruders
from phalanx.scheduling.status import Status


class Preempting:
    """Plans, starts and sees through the preemptions of waiting gangs."""

    def __init__(
        self,
        view: ClusterView,
        owner: OwnerKind,
        preemptor: Preemptor,
        status: Status,
        memory: Memory,
        matcher: DeviceMatcher,
        *,
        pods_of: Mapping[str, list[dict[str, Any]]],
        priority: Callable[[Mapping[str, Any]], int],
        pins: Callable[[], Mapping[str, str]],
        evict_holders: Callable[[Mapping[str, Any], str, str], Awaitable[None]],
        bind_deadline: float,
    ) -> None:
        self.view = view
        self.owner = owner
        self.preemptor = preemptor
        self.status = status
        self.memory = memory
        self.matcher = matcher
        self.pods_of = pods_of
        """PodGroup uid -> every pod of its owner."""
        self.priority = priority
        self.pins = pins
        self.evict_holders = evict_holders
        """Evicts the pods using a claim that took a device held for a preemption."""
        self.bind_deadline = bind_deadline
        """How long a preemption waits, three ways (see `under_way`)."""

    async def plan(self, pod_group: dict[str, Any], snapshot: Snapshot, group: Group) -> Preemption | NoVictims:
        """Victims of lower priority whose going lets the whole group fit; pure, on this cycle's snapshot, in a worker
        thread (it plans the group once per victim set tried). The candidates are read from the view here, on the loop."""
        view = self.view
        candidates = victims.for_preemptor(
            pod_group,
            (m.uid for m in group.members),
            view.pods.items(),
            view.claims.items(),
            view.groups.items(),
            self.pods_of,
            view.budgets.items(),
            pinned=self.pins(),
        )
        if candidates is None:
            return NoVictims("preemptionPolicy is Never")
        if (none := no_candidates(candidates, self.priority(pod_group))) is not None:
            metrics.PREEMPTION_ATTEMPTS.labels(result="Unschedulable").inc()
            return none
        started = time.monotonic()
        budgets = victims.allowed(view.budgets.items())
        verdict = await asyncio.to_thread(plan_preemption, snapshot, group, candidates, self.priority(pod_group), self.matcher, budgets)
        result = "Success" if isinstance(verdict, Preemption) and verdict.victims else "Unschedulable"
        metrics.PREEMPTION_DURATION.labels(preemptor="podgroup", result=result).observe(time.monotonic() - started)
        metrics.PREEMPTION_ATTEMPTS.labels(result=result).inc()
        return verdict

    def cause(self, pod_group: Mapping[str, Any]) -> str:
        """What the victims of this group's preemption are told, and what their losses say: its Job and priority."""
        return disruption.preempted_by(
            f"{accessors.namespace(pod_group)}/{self.owner.name(pod_group) or accessors.name(pod_group)}", self.priority(pod_group)
        )

    async def start(self, pod_group: dict[str, Any], preemption: Preemption) -> None:
        names = ", ".join(v.key for v in preemption.victims)
        why = self.cause(pod_group)
        await self.preemptor.start(pod_group, preemption, why)
        metrics.SCHEDULE_ATTEMPTS.labels(result="waiting_on_preemption", profile=metrics.PROFILE).inc()
        message = f"preempting {names} ({len(preemption.pods)} pods) to place the whole group"
        await self.status.scheduled(pod_group, False, keys.PREEMPTING, message)
        await self.status.event(pod_group, "Normal", keys.PREEMPTING, message)

    async def under_way(self, pod_group: dict[str, Any], nomination: schema.Nomination, short: str) -> bool:
        """A preemption under way: its victims go (evicted again after a restart or a refusal), nobody else takes their
        devices, and it ends: the preemptor reserves them, or it gives up by the deadline and says why.

        The deadline is `bind_deadline` three ways: for a victim whose eviction is still refused (a budget), since the
        nomination; for a victim that does not stop, past the end of its grace period; and once every victim is gone,
        since this process saw them gone (a restart holds the devices one deadline longer, never shorter), so a
        victim's long grace period does not eat the time the freed devices are held for the preemptor."""
        uid = pod_group["metadata"]["uid"]
        why = self.cause(pod_group)
        # a crash between recording the nomination and covering its devices left them open: cover them (idempotent)
        await self.preemptor.nominated.cover(accessors.nominated_devices(nomination), why)
        await self._evict_intruders(pod_group, nomination)
        remaining = self.preemptor.remaining(nomination)
        if remaining:
            self.memory.of(uid).victims_gone_at = None
            refused = await self.preemptor.evict(nomination, why)
            stuck = [
                accessors.name(p)
                for p in remaining
                if times.waited(p["metadata"].get("deletionTimestamp") or "9999-12-31T00:00:00Z") > self.bind_deadline
            ]
            waited = times.waited(nomination.nominated_at)
            if (refused and waited >= self.bind_deadline) or stuck:
                cause = (
                    f"the eviction of {', '.join(refused)} was refused for {waited:.0f}s (a disruption budget)"
                    if refused
                    else f"{', '.join(stuck)} did not stop {self.bind_deadline:.0f}s past its grace period"
                )
                return await self._give_up(pod_group, nomination, cause)
            note = f"; refused for now: {', '.join(refused)}" if refused else ""
            await self.status.scheduled(
                pod_group, False, keys.PREEMPTING, f"waiting for {len(remaining)} of {len(nomination.victims)} victims to go{note}"
            )
            return not refused
        remembered = self.memory.of(uid)
        if remembered.victims_gone_at is None:
            remembered.victims_gone_at = time.monotonic()
        gone_at = remembered.victims_gone_at
        if time.monotonic() - gone_at < self.bind_deadline:
            await self.status.scheduled(
                pod_group, False, keys.PREEMPTING, f"victims gone, waiting for their devices to be released: {short}"
            )
            return True
        return await self._give_up(pod_group, nomination, f"the preemption freed too little in {self.bind_deadline:.0f}s: {short}")

    async def _evict_intruders(self, pod_group: Mapping[str, Any], nomination: schema.Nomination) -> None:
        """A pod of lower priority that took a device held for this preemption (its claim tolerates every taint) goes as
        a victim would; one of the preemptor's priority or above keeps it, and the preemption may give up."""
        members = {p["metadata"]["uid"] for p in self.pods_of.get(pod_group["metadata"]["uid"], [])}
        priority = self.priority(pod_group)
        for claim in nomination_intruders(nomination, self.view.claims.items(), members):
            reserved = [(self.view.pods.get(accessors.namespace(claim), r["name"]), r["uid"]) for r in claim["status"]["reservedFor"]]
            users = [p for p, uid in reserved if p is not None and p["metadata"]["uid"] == uid]
            if users and all(int(p["spec"].get("priority") or 0) < priority for p in users):
                taken = sorted(set(accessors.nominated_devices(nomination)) & set(accessors.consuming_ids(claim) or ()))
                why = f"it took device {'/'.join(taken[0])}, held for gang {accessors.namespace(pod_group)}/{accessors.name(pod_group)} (priority {priority})"
                await self.evict_holders(claim, why, PREEMPTED)

    async def _give_up(self, pod_group: dict[str, Any], nomination: schema.Nomination, cause: str) -> bool:
        """The preemption ends without its room: the devices it held go back to everyone, and the status says why."""
        self.memory.of(pod_group["metadata"]["uid"]).victims_gone_at = None
        await self.preemptor.finish(pod_group, nomination)
        metrics.PREEMPTION_ATTEMPTS.labels(result="GaveUp").inc()
        await self.status.scheduled(
            pod_group, False, keys.UNSCHEDULABLE, f"preemption given up, its held devices released: {cause}", warn=True
        )
        return False
