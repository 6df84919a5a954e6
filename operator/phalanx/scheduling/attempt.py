"""A waiting gang's attempt: planned on the cycle's snapshot, then released whole, held back for a group ahead, or
found short (the reason to its status; a preemption planned when one can free room); and the other releases a
visit makes: late members of a placed gang and members of a basic group, a recorded reservation resumed, a release
undone.

A plan that fits is reserved and released as a unit beside the loop's next plans (`assumed`): up to
`release_concurrency` under way at once, each counted as done by the plans made meanwhile. A plan that fits is
released only if no group ahead of it in the queue, still waiting, could use the same room now (`queue`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from typing import Any

from phalanx.api import keys, schema, times
from phalanx.kube.informers import ClusterView
from phalanx.planner import DeviceMatcher, Fits, NoVictims, Preemption, plan
from phalanx.planner.model import Member
from phalanx.planner.queue import takes_room
from phalanx.scheduling import accessors, assumed, composites, disruption, inputs, memory, metrics, queue, shortfall, status, teardown
from phalanx.scheduling.cache import ClusterCache
from phalanx.scheduling.cycle import Cycle
from phalanx.scheduling.derived import Derived
from phalanx.scheduling.membership import Membership
from phalanx.scheduling.nomination import Preemptor
from phalanx.scheduling.outcome import GatesRefused, ReleaseAborted
from phalanx.scheduling.preempting import Preempting
from phalanx.scheduling.record import planned_devices
from phalanx.scheduling.reserve import Releaser, Steps

logger = logging.getLogger(__name__)


class Attempts:
    """Plans and releases, for the visits of the groups that wait."""

    def __init__(
        self,
        view: ClusterView,
        cycle: Cycle,
        *,
        memory: memory.Memory,
        status: status.Status,
        cache: ClusterCache,
        matcher: DeviceMatcher,
        shortfalls: shortfall.Shortfalls,
        line: queue.Line,
        members: Membership,
        preempting: Preempting,
        preemptor: Preemptor,
        releaser: Releaser,
        releases: assumed.Releases,
        tear_down: teardown.TearDown,
        priority: Callable[[Mapping[str, Any]], int],
        guarded: Callable[[Mapping[str, Any], Coroutine[Any, Any, bool]], Coroutine[Any, Any, None]],
        bind_deadline: float,
    ) -> None:
        self.view = view
        self.cycle = cycle
        self.memory = memory
        self.status = status
        self.cache = cache
        self.matcher = matcher
        self.shortfalls = shortfalls
        self.line = line
        """The groups this cycle found waiting, ahead of the one being planned."""
        self.members = members
        self.derived: Derived[Member] = Derived()
        """Each waiting pod's planner member, by version and claims: a cycle meets every waiting gang again."""
        self.preempting = preempting
        self.preemptor = preemptor
        self.releaser = releaser
        self.releases = releases
        self.tear_down = tear_down
        self.priority = priority
        self.guarded = guarded
        """How the loop runs one group's work (its errors that group's alone): a release under way runs in it."""
        self.bind_deadline = bind_deadline

    async def held_back(self, fits: Fits) -> queue.Ahead | None:
        """The first group ahead in the queue, still waiting, that could use room this plan would take now.

        Judged on the latest snapshot, which may show room freed since the group ahead was planned this cycle (a
        watch event between two groups): a group ahead known short since nothing it could use was freed is skipped
        without a plan; one preempting is judged with its victims' devices free, so no group behind takes the
        rest of the room its preemption counts on."""
        base = await self.cache.snapshot()  # the claims a group's memo key reads do not depend on whose nomination is held
        for ahead in self.line.ahead:
            if not ahead.freed and self.shortfalls.still_short(ahead.memo, shortfall.group_key(ahead.group, base, ahead.priority)):
                continue
            snapshot = queue.Line.room(await self.cache.snapshot(ahead.pod_group), ahead)
            if await asyncio.to_thread(takes_room, snapshot, ahead.group, fits, self.matcher):
                return ahead
        return None

    def _hold_back_message(self, pod_group: Mapping[str, Any], ahead: queue.Ahead) -> str:
        position = queue.positions(self.view.groups.items(), self.members, self.priority).get(pod_group["metadata"]["uid"])
        where = f"; position {position[0]} of {position[1]} in the queue" if position else ""
        return f"fits, but waits its turn: {ahead.name} (priority {ahead.priority}), ahead in the queue, could use the same room now{where}"

    def claims_ready(self, pod: Mapping[str, Any]) -> bool:
        return accessors.claims_ready(pod, self.view.claims.get)

    async def __call__(self, pod_group: dict[str, Any], ready: list[dict[str, Any]], min_count: int) -> bool:
        started = time.monotonic()
        steps = Steps(self.cycle.woken_for)
        steps.done("wait for the loop")
        snapshot = await self.cache.snapshot(pod_group)
        steps.done("snapshot")
        decided = time.monotonic()
        group = inputs.group(pod_group, ready, min_count, self.derived)
        nomination = accessors.nomination(pod_group)
        key = shortfall.group_key(group, snapshot, self.priority(pod_group))
        if nomination is None and self.shortfalls.still_short(pod_group["metadata"]["uid"], key):
            self.line.join(pod_group, group, self.priority(pod_group))
            if not pod_group["spec"].get("resourceClaims"):  # a group's own claims are made and checked on each visit
                remembered = self.memory.of(pod_group["metadata"]["uid"])
                remembered.quiet, remembered.since = key, self.cycle.seq
            return True  # its status already says why; nothing it could use was freed
        # in a worker thread: a costly claim must not keep the webhooks and probes this event loop serves from answering
        result = await asyncio.to_thread(plan, snapshot, group, self.matcher)
        steps.done("plan")
        metrics.ALGORITHM_DURATION.observe(time.monotonic() - decided)
        if not isinstance(result, Fits) and result.timed_out:
            # nothing is known of the fit: no preemption, no shortfall memo; back off, and the next attempt goes on
            # from the verdicts this one reached, while the other groups are planned meanwhile
            metrics.SCHEDULE_ATTEMPTS.labels(result="error", profile=metrics.PROFILE).inc()
            await self.status.scheduled(pod_group, False, keys.UNSCHEDULABLE, result.message, warn=True)
            return False
        if not isinstance(result, Fits):
            if nomination is not None:
                self.line.join(pod_group, group, self.priority(pod_group), accessors.nominated_devices(nomination))
                return await self.preempting.under_way(pod_group, nomination, result.message)
            verdict = await self.preempting.plan(pod_group, snapshot, group)
            if isinstance(verdict, Preemption) and verdict.victims:
                self.line.join(pod_group, group, self.priority(pod_group), (d for p in verdict.pods for d in p.devices))
                await self.preempting.start(pod_group, verdict)
                return True
            metrics.SCHEDULE_ATTEMPTS.labels(result="unschedulable", profile=metrics.PROFILE).inc()
            metrics.ATTEMPT_DURATION.labels(result="unschedulable", profile=metrics.PROFILE).observe(time.monotonic() - started)
            why_not = f"; preemption: {verdict.reason}" if isinstance(verdict, NoVictims) else ""
            self.shortfalls.remember(pod_group["metadata"]["uid"], key, shortfall.eligible(group, snapshot))
            self.line.join(pod_group, group, self.priority(pod_group))
            await self.status.scheduled(pod_group, False, keys.UNSCHEDULABLE, result.message + why_not, warn=True)
            return True
        ahead = await self.held_back(result)
        if ahead is not None:
            self.line.join(pod_group, group, self.priority(pod_group), accessors.nominated_devices(nomination) if nomination else ())
            self.cycle.again = True
            metrics.HELD_BACK.inc()
            await self.status.scheduled(pod_group, False, keys.PENDING, self._hold_back_message(pod_group, ahead))
            return True
        release = self._release(pod_group, result, steps, started, ready, min_count)
        await self.releases.start(pod_group["metadata"]["uid"], result, self.guarded(pod_group, release))
        return True

    async def _release(
        self, pod_group: dict[str, Any], result: Fits, steps: Steps, started: float, ready: list[dict[str, Any]], min_count: int
    ) -> bool:
        """Reserve and release a plan that fits, then say so; under way beside the loop's next plans (`assumed`)."""
        nomination = accessors.nomination(pod_group)
        try:
            reservation = await self.releaser.release(pod_group, result, steps)
        except (ReleaseAborted, GatesRefused) as exc:
            metrics.SCHEDULE_ATTEMPTS.labels(result="aborted", profile=metrics.PROFILE).inc()
            return await self._undone(pod_group, ready, exc, "reservation")
        metrics.SCHEDULE_ATTEMPTS.labels(result="scheduled", profile=metrics.PROFILE).inc()
        metrics.ATTEMPT_DURATION.labels(result="scheduled", profile=metrics.PROFILE).observe(time.monotonic() - started)
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        quorum_at, remembered.quorum_at = remembered.quorum_at, None
        metrics.QUORUM_TO_RELEASE.observe(time.monotonic() - (started if quorum_at is None else quorum_at))
        metrics.RESERVATIONS.inc()
        metrics.RESERVED_DEVICES.inc(sum(len(c.results) for c in reservation.claims))
        nodes = sorted({p.node for p in reservation.placements})
        planned = planned_devices(reservation)
        left = f", {planned} device(s) for extended resources left to kube-scheduler on the pinned node(s)" if planned else ""
        message = (
            f"all {len(reservation.placements)} members placed on {len(nodes)} node(s) ({', '.join(nodes)}) "
            f"with {sum(len(c.results) for c in reservation.claims)} device(s) reserved{left} and their gates lifted; "
            f"waiting up to {self.bind_deadline:.0f}s for minCount {min_count} to be bound"
        )
        await self.status.scheduled(pod_group, False, keys.RELEASED, message)
        await self.status.event(pod_group, "Normal", keys.RELEASED, message)
        if nomination is not None:
            metrics.PREEMPTION_ATTEMPT_DURATION.observe(times.waited(nomination.nominated_at))
            await self.preemptor.finish(pod_group, nomination)
        return True

    def _current(self, pod_group: Mapping[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The latest version of each pod from the watch (a release changed them)."""
        latest = [self.view.pods.get(accessors.namespace(pod_group), accessors.name(p)) for p in pods]
        return [p for p in latest if p is not None and not p["metadata"].get("deletionTimestamp")]

    async def each(
        self, pod_group: dict[str, Any], waiting: list[dict[str, Any]], quorum: int = 1, placed: Sequence[Mapping[str, Any]] = ()
    ) -> None:
        """Late members of a scheduled gang (and every member of a basic group) go as they come.

        They are planned together on this cycle's snapshot (minCount `quorum`: every one that fits goes, once at
        least that many fit) and released in one reservation, so a cycle reads the cluster once, not once per pod.
        A gang whose minCount was raised past its released members needs the difference placed together; a
        replacement of a lost member, or one beyond minCount, goes alone. A late member joins the group's
        incarnation (its record), so its loss counts as a member's. Of a gang of roles, each role needs only what
        its members already past the gate (`placed`) leave of its minimum (`composites.less`).
        """
        joined: list[schema.Reservation] = []
        ready = [p for p in waiting if self.claims_ready(p)]
        if len(ready) >= quorum:
            # one plan, in a worker thread as every plan
            group = inputs.group(composites.less(pod_group, placed), ready, quorum, self.derived)
            snapshot = await self.cache.snapshot()
            result = await asyncio.to_thread(plan, snapshot, group, self.matcher)
            ahead = await self.held_back(result) if isinstance(result, Fits) else None
            if ahead is not None:
                self.cycle.again = True
                metrics.HELD_BACK.inc()
                logger.info(
                    "%s/%s: members held back: %s",
                    accessors.namespace(pod_group),
                    accessors.name(pod_group),
                    self._hold_back_message(pod_group, ahead),
                )
            if not isinstance(result, Fits) or ahead is not None:
                # members known short for the groups behind (a memo of their own, never the gang's)
                memo = f"{pod_group['metadata']['uid']}/members"
                if not isinstance(result, Fits) and not result.timed_out:
                    key = shortfall.group_key(group, snapshot, self.priority(pod_group))
                    self.shortfalls.remember(memo, key, shortfall.eligible(group, snapshot))
                self.line.join(pod_group, group, self.priority(pod_group), memo=memo)
            else:
                try:
                    joined.append(await self.releaser.release_member(pod_group, result))
                except GatesRefused as exc:
                    joined.append(exc.reservation)  # its claims are written: the record keeps them for a teardown
                    logger.warning(
                        "%s/%s: late members not all released: %s", accessors.namespace(pod_group), accessors.name(pod_group), exc
                    )
                except ReleaseAborted as exc:
                    logger.warning("%s/%s: late members not released: %s", accessors.namespace(pod_group), accessors.name(pod_group), exc)
        record = accessors.reservation(pod_group)
        if joined and record is not None:
            pods = self.members.get(pod_group["metadata"]["uid"], [])
            record = disruption.current(record, pods, {c["metadata"]["uid"] for c in self.view.claims.items()}, self.view.finished)
            grown = record.model_copy(
                update={
                    "placements": [*record.placements, *(p for r in joined for p in r.placements)],
                    "claims": [*record.claims, *(c for r in joined for c in r.claims)],
                    "planned": [*(record.planned or ()), *(p for r in joined for p in r.planned or ())] or None,
                }
            )
            await self.releaser.record(pod_group, grown)

    async def resume(self, pod_group: dict[str, Any], reservation: schema.Reservation, pods: list[dict[str, Any]]) -> bool:
        try:
            released = await self.releaser.complete(pod_group, reservation, resumed=True)
            await self.status.scheduled(
                pod_group,
                False,
                keys.RELEASED,
                f"{len(released.placements)} members placed and their gates lifted, finishing a recorded reservation",
            )
            return True
        except (ReleaseAborted, GatesRefused) as exc:
            return await self._undone(pod_group, pods, exc, "unfinished reservation")

    async def _undone(self, pod_group: dict[str, Any], pods: list[dict[str, Any]], exc: ReleaseAborted | GatesRefused, what: str) -> bool:
        """A release that did not finish, one rule for a new one and a resumed one: rolled back whole
        (ReleaseAborted), the group says so and is planned again; some gates lifted and another refused
        (GatesRefused), the gang is torn down as a unit. False: the group backs off before its next attempt. (Late
        members released into a placed gang are the gang's: `each` keeps what did go.)"""
        if isinstance(exc, GatesRefused):
            await self.tear_down(pod_group, self._current(pod_group, pods), exc.reservation, str(exc))
            return False
        message = f"{what} undone, will plan again: {exc}"
        await self.status.scheduled(pod_group, False, keys.PENDING, message)
        await self.status.event(pod_group, "Warning", keys.RESERVATION_ROLLED_BACK, message)
        return False
