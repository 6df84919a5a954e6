"""The scheduling loop: each cycle, every PodGroup in priority then FIFO order gets a plan, a reason, or a repair.

One cycle:
1. repair: a device held beyond what it allows (two allocators raced) is
   given back by the holder that allocated later (`repair`);
2. resume: a reservation recorded but not finished (operator restarted) is
   re-validated, then completed or rolled back (`reserve`);
3. each PodGroup still waiting for its first placement, once its quorum
   exists (minCount gated pods whose claims exist), is planned on a fresh
   snapshot; on Fits it is reserved and released as a unit (up to
   `release_concurrency` releases under way at once, each counted as done by
   the plans made meanwhile: `assumed`), unless a group
   ahead of it in the queue (`queue`: priority, then age) still waiting
   could use the same room now, on Short the exact reason goes to its status;
4. a released group that does not reach minCount bound within the bind
   deadline, or whose gate lift was refused in part, is torn down as a
   unit and admitted again (`teardown`); so is one whose members are not
   all Ready within the ready deadline, admitted again only after a
   back-off that doubles to a cap (`podsready`);
5. members arriving after the group was scheduled are released one by one;
   PodGroupInitiallyScheduled turns True once minCount members are bound;
   a Job suspended after its release starts over: the pods it creates once
   resumed are admitted as a gang again.
Groups are isolated: an error in one is logged, counted and retried with
backoff, and never stops the others. Cycles run on every watch change
(coalesced) and at least every `period` seconds; after each, the loop rests
once it has spent more than a third of a core (`pacing`), so a stream of
changes cannot keep it busy.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from phalanx.api import keys, schema, times
from phalanx.kube.client import Kube, NotFound, all_answered, custom_path
from phalanx.kube.informers import ClusterView
from phalanx.owners.seam import OwnerKind
from phalanx.planner import DeviceMatcher, Fits, NoVictims, Preemption, plan
from phalanx.planner.model import Member
from phalanx.planner.queue import takes_room
from phalanx.scheduling import (
    accessors,
    assumed,
    conditions,
    disruption,
    groupclaims,
    headhold,
    hints,
    inputs,
    membership,
    memory,
    metrics,
    pacing,
    phase,
    pointers,
    queue,
    repair,
    shortfall,
    status,
    teardown,
    waits,
)
from phalanx.scheduling.cache import ClusterCache
from phalanx.scheduling.deadlines import Deadlines
from phalanx.scheduling.derived import Derived
from phalanx.scheduling.holes import HELD, NOMINATED, Holes
from phalanx.scheduling.nomination import Preemptor
from phalanx.scheduling.preempting import Preempting
from phalanx.scheduling.reserve import GatesRefused, NotLeading, ReleaseAborted, Releaser, Steps, planned_devices

logger = logging.getLogger(__name__)


def _cause_label(cause: str) -> str:
    """A bounded metric label from a loss cause (the cause text names pods and nodes)."""
    for label in ("Eviction", "Preemption", "Taint", "PodGC", "node", "failed", "deleted", "preempted"):
        if label.lower() in cause.lower():
            return label.lower()
    return "other"


@dataclass
class _Visit:
    """One visit of one group: what `_reconcile` read, and the phase it put the group in. The group and its record
    are replaced as the visit writes them (`_unbind_late`), so later steps never write the old record back."""

    pod_group: dict[str, Any]
    pods: list[dict[str, Any]]
    """The group's live members."""
    reservation: schema.Reservation | None
    lost: list[disruption.Loss]
    owner_state: phase.OwnerState
    facts: phase.Facts
    stands: phase.Phase
    """Where the group stands (`phase.classify`)."""

    @property
    def released(self) -> bool:
        return self.reservation is not None and self.reservation.state == "Released"

    @property
    def bound(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if p["spec"].get("nodeName")]

    @property
    def waiting(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if accessors.gated(p)]


class SchedulingLoop:
    def __init__(
        self,
        kube: Kube,
        view: ClusterView,
        owner: OwnerKind,
        *,
        period: float = 5.0,
        settle: float = 0.2,
        bind_deadline: float = 60.0,
        ready_deadline: float = 0.0,
        ready_backoff: tuple[float, float] = (60.0, 3600.0),
        hold_after: float = headhold.DEFAULT_HOLD_AFTER,
        release_concurrency: int = 4,
    ) -> None:
        self.kube = kube
        self.view = view
        self.owner = owner
        """The workload kind whose groups this loop schedules: their members, their owner, its state."""
        self.period = period
        self.bind_deadline = bind_deadline
        self.memory = memory.Memory(counts_every=status.COUNTS_EVERY)
        """What the loop remembers of each group between cycles."""
        self.status = status.Status(kube, self.memory, owner)
        """What the loop writes of a group for users: its conditions, its counts, Events."""
        self.matcher = DeviceMatcher()
        self.holes = Holes(kube)
        self.freeing = teardown.Freeing(kube)
        """The claims of members torn down, freed as they stop."""
        self.releaser = Releaser(kube, view, self.holes, settle=settle, leading=lambda: self.leading())
        self.preemptor = Preemptor(kube, view, Holes(kube, NOMINATED))
        self.pointers = pointers.Pointers(kube, owner.name)
        self.shortfalls = shortfall.Shortfalls()
        """Groups found short, planned again only when capacity they could use is freed or they change."""
        self.headhold = headhold.HeadHold(kube, hold_after, self.shortfalls)
        """Devices held for the gang at the head of the line once it has waited past its hold-after."""
        self.members = membership.Membership(view.pods, owner)
        """PodGroup uid -> every pod of its owner, terminal and terminating ones included (losses are found among them),
        looked up in the pods informer's index; and what the cycle derives from each group, kept while it stands."""
        self._pods_of: Mapping[str, list[dict[str, Any]]] = self.members
        self.hints = hints.Hints(view, hints.member_keys(owner))
        """Which groups each write may concern: a group a visit found short or settled is passed over until one is
        marked (`hints`)."""
        self._seq = 0
        """The last mark as this cycle read its groups and their pods: a memo a visit sets is as old as that."""
        self._members: Derived[Member] = Derived()
        """Each waiting pod's planner member, by version and claims: a cycle meets every waiting gang again."""
        self._preempted: dict[str, str] = {}
        """Pod uid -> the cause of its loss, for the victims of every preemption under way (from the nominations)."""
        self.line = queue.Line()
        """The groups this cycle found waiting, ahead of the one being reconciled (the cycle goes in queue order)."""
        self._again = False
        """A release was held back for a group ahead that fits: the next cycle runs at once, and releases it."""
        self._budget = pacing.CpuBudget()
        self._woken_for = time.monotonic()
        """When the oldest change this cycle runs for arrived (monotonic)."""
        self.leading: Callable[[], bool] = lambda: True
        """False once this replica may have lost its Lease: no group is touched after that."""
        self.releases = assumed.Releases(release_concurrency)
        """Releases under way beside the loop's next plans, which count each as done."""
        self.cache = ClusterCache(view, self.releaser, self.releases, self.shortfalls, self.headhold, self._priority)
        """The planner's snapshot and what else is derived from whole stores of the view."""
        self.tear_down = teardown.TearDown(kube, view, self.releaser, self.freeing, self.status, self.members, self.cache.pins)
        """Takes a gang down as a unit."""
        self.deadlines = Deadlines(
            kube,
            view,
            self.memory,
            self.status,
            self.releaser,
            self.tear_down,
            bind_deadline=bind_deadline,
            ready_deadline=ready_deadline,
            ready_backoff=ready_backoff,
        )
        """The bind and ready deadlines of released gangs and late members."""
        self.repair = repair.Repair(kube, view, self.holes, self.tear_down)
        """Double allocations given back by the holder that allocated later."""
        self.preempting = Preempting(
            view,
            owner,
            self.preemptor,
            self.status,
            self.memory,
            self.matcher,
            pods_of=self.members,
            priority=self._priority,
            pins=self.cache.pins,
            evict_holders=self.repair.evict_holders,
            bind_deadline=bind_deadline,
        )
        """Gang preemption: victims chosen, evicted, their devices held for the preemptor, the end."""
        self._deposed = False
        """A release or reconcile this cycle found another replica's record: the cycle touches no other group."""
        self._passed = 0
        """Waiting groups this cycle passed over (`_passed_over`), counted into the metric as the cycle ends."""
        self._settled = 0
        """Running gangs this cycle passed over (`_passed_over`), counted into the metric as the cycle ends."""
        self._met: (
            tuple[tuple[Any, ...], list[dict[str, Any]], list[membership.Facts], list[tuple[dict[str, Any], list[dict[str, Any]]]]] | None
        ) = None
        """(the groups' and their pods' `written`, the groups this loop schedules, their facts, each with its live
        members): read again only once a group or a member was written."""
        self._pointed: tuple[Any, ...] | None = None
        """The groups' and their pods' `written` when every gated member was found pointed at."""
        self._hold_line: tuple[list[queue.Ahead], shortfall.Standing, Any] | None = None
        """The line a settled head-of-line hold was last updated on, the verdicts of its gangs passed over, and the
        groups' `written` then (another replica's `status.hold` on any group is cleared on the next update)."""

    async def run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.view.changed.wait(), timeout=self._next_wake())
            by_change = self.view.changed.is_set()
            self._woken_for = self.view.changed_since if by_change else time.monotonic()
            metrics.CYCLES.labels(woken_by="change" if by_change else "timer").inc()
            self.view.changed.clear()
            cpu, self.cache.built_cpu = time.thread_time(), 0.0
            try:
                await self.cycle()
            except asyncio.CancelledError:
                raise
            except Exception:  # only a bug in the loop itself gets here; every group is guarded
                logger.exception("scheduling cycle failed; retrying on the next change")
                await asyncio.sleep(1)
            await asyncio.sleep(self._budget.rest(time.monotonic(), time.thread_time() - cpu + self.cache.built_cpu))

    def _next_wake(self) -> float:
        wake = 0.0 if self._again else self.memory.summary().wake - time.monotonic()
        return max(0.05, min(self.period, wake))

    async def cycle(self) -> None:
        self._members.sweep()
        self.releaser.forget(self.cache.pod_uids)
        self._seq = self.hints.seq  # before anything is read: a memo is never newer than what its visit read
        reads = (self.view.podgroups.written, self.members.writes, self.view.claims.written, self.view.priorities.written)
        if self._met is None or self._met[0] != reads[:2]:
            podgroups = self.view.podgroups.items()
            self.members.refresh(podgroups)
            scheduled = [g for g in podgroups if self.members.owner_uid(g) and not g["metadata"].get("deletionTimestamp")]
            known = [self.members.facts(g) for g in scheduled]
            self._met = (reads[:2], scheduled, known, [(g, f.live) for g, f in zip(scheduled, known, strict=True)])
            self._forget({g["metadata"]["uid"] for g in scheduled})
        _, scheduled, facts, groups = self._met
        self._forget_due()
        nominated = self._nominated(scheduled)
        try:
            for rules in (self.holes, self.preemptor.nominated):
                if rules.served is None:
                    await rules.load()  # the rules a previous run left behind
            await self.repair(groups)
            devices = {d for _, n in nominated.values() for d in accessors.nominated_devices(n)}
            await self.preemptor.nominated.uncover([d for d in self.preemptor.nominated.covered if d not in devices])
        except asyncio.CancelledError:
            raise
        except Exception:
            metrics.ERRORS.labels(stage="repair").inc()
            logger.exception("double-allocation repair failed; retrying next cycle")
        if self.freeing.pending and self.leading():
            try:
                freed = await self.freeing.sweep({p["metadata"]["uid"]: p for p in self.view.pods.items()}, self.view.claims.get)
                if freed:
                    logger.info("freed the devices of %d claim(s) of members torn down, now stopped", freed)
            except asyncio.CancelledError:
                raise
            except Exception:
                metrics.ERRORS.labels(stage="free").inc()
                logger.exception("claims of members torn down not freed; the resourceclaim controller frees them, or the next cycle")
        self._preempted = {v.uid: self.preempting.cause(g) for g, n in nominated.values() for v in n.victims}
        held = self.cache.of_view(
            "held below quorum", reads, lambda: sum(self.members.held(g, self.view.claims.get, reads[2]) for g in scheduled)
        )
        metrics.INCOMPLETE_GROUP_DEVICES.set(held)
        remembered = self.memory.summary()
        waiting = self.cache.of_view(
            "waiting",
            (*reads[:2], remembered),
            lambda: waits.since([(g, f.waits_in) for g, f in zip(scheduled, facts, strict=True)], remembered.quorum_at),
        )
        waits.publish(waits.at(waiting, time.monotonic()))  # every cycle: fresh on a quiet cluster
        if self.leading() and self._pointed != reads[:2]:
            try:
                await self.pointers.point((g, f.gated) for g, f in zip(scheduled, facts, strict=True))
                if not self.pointers.owed:
                    self._pointed = reads[:2]  # none was due: none is until a group or a member is written
            except asyncio.CancelledError:
                raise
            except Exception:  # an Event refused holds no gang: the pods not pointed are tried next cycle
                metrics.ERRORS.labels(stage="pointers").inc()
                logger.exception("events on gated members not written; retrying next cycle")
        self.line.clear()
        self._again = False
        if self.memory.summary().quiet:
            await self.cache.snapshot()  # capacity freed since the last cycle is observed before any group is passed over
        self._deposed = False
        self._passed = 0
        self._settled = 0
        try:
            await self._walk(self.cache.of_view("queue order", reads, lambda: self._in_order(scheduled, groups)))
        except asyncio.CancelledError:
            self.releases.cancel()  # each stops where its record says, resumed as after a crash
            raise
        finally:
            metrics.PASSED_OVER.inc(self._passed)  # once a cycle: a thousand increments, each taking a lock, cost 2 ms
            metrics.SETTLED_PASSED.inc(self._settled)
            await self.releases.drain()
        if not self._deposed:
            await self._hold_for_head()

    def _in_order(
        self, scheduled: list[dict[str, Any]], groups: list[tuple[dict[str, Any], list[dict[str, Any]]]]
    ) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
        """The groups with their live members in queue order (`queue.order`)."""
        position = {g["metadata"]["uid"]: i for i, g in enumerate(sorted(scheduled, key=self._order))}
        return sorted(groups, key=lambda gp: position[gp[0]["metadata"]["uid"]])

    async def _walk(self, ordered: list[tuple[dict[str, Any], list[dict[str, Any]]]]) -> None:
        """Every group in queue order: skipped while backing off, passed over while nothing marked it since a visit
        found it short or settled (`_passed_over`), else visited."""
        for pod_group, pods in ordered:
            if not self.leading() or self._deposed:
                return
            remembered = self.memory.get(pod_group["metadata"]["uid"])
            if remembered is not None:
                if remembered.backoff is not None and remembered.backoff[0] > time.monotonic():
                    continue
                if self._passed_over(pod_group, remembered):
                    continue
            await self._guarded(pod_group, self._reconcile(pod_group, pods))

    async def _guarded(self, pod_group: Mapping[str, Any], attempt: Coroutine[Any, Any, bool]) -> None:
        """One group's reconcile, or its release under way: an error is that group's alone (logged, counted, retried
        with backoff); a lost Lease stops the cycle (`_deposed`)."""
        uid = pod_group["metadata"]["uid"]
        try:
            if await attempt:
                self.memory.of(uid).backoff = None
            else:
                self._back_off(pod_group)
        except asyncio.CancelledError:
            raise
        except NotLeading as exc:
            logger.warning("%s/%s: %s", accessors.namespace(pod_group), accessors.name(pod_group), exc)
            self._deposed = True
        except NotFound as exc:
            logger.info(
                "%s/%s: an object went away mid-reconcile (%s); next cycle sees the new state",
                accessors.namespace(pod_group),
                accessors.name(pod_group),
                exc,
            )
        except Exception as exc:
            delay = self._back_off(pod_group)
            metrics.ERRORS.labels(stage="reconcile").inc()
            logger.exception(
                "%s/%s: reconcile failed (%s); retrying in %.1fs", accessors.namespace(pod_group), accessors.name(pod_group), exc, delay
            )

    async def _hold_for_head(self) -> None:
        """After every group was met in queue order: devices held for the head of the line, the rest given back. A
        hold settled on a line (`HeadHold.settled`) stays so while no group was written, the line is the same (each gang
        joined as the same `Ahead`), and the verdicts of those passed over stand: the update would look at the same
        gangs, plan none and write nothing."""
        kept, self._hold_line = self._hold_line, None
        if kept is not None and kept[2] == self.view.podgroups.written and self.line.ahead == kept[0] and self.shortfalls.stands(kept[1]):
            self._hold_line = kept
            return
        try:
            now, written = time.monotonic(), self.view.podgroups.written
            backing_off = {uid for uid, until in self.memory.summary().backoffs if until > now}
            # the snapshot only if the head's hold is planned again: a cycle with no gang waiting (a recovering gang
            # waits for its quorum) builds none for it, however much the pods churn
            if await self.headhold.update(
                self.line.ahead, self.view.podgroups.items(), self.cache.snapshot, self.cache.revision(), self.matcher, backing_off
            ):
                self.shortfalls.clear()  # devices given back are room for every group known short
            if self.headhold.settled:
                standing = self.shortfalls.standing([a.pod_group["metadata"]["uid"] for a in self.line.ahead if a.key is not None])
                self._hold_line = (list(self.line.ahead), standing, written) if standing is not None else None
        except asyncio.CancelledError:
            raise
        except Exception:
            metrics.ERRORS.labels(stage="hold").inc()
            logger.exception("hold for the head of the line not updated; retrying next cycle")
        for purpose, rules in ((HELD, self.holes), (NOMINATED, self.preemptor.nominated)):
            metrics.HELD_DEVICES.labels(purpose=purpose).set(len(rules.covered))

    def _passed_over(self, pod_group: Mapping[str, Any], remembered: memory.GroupMemory) -> bool:
        """A group whose last visit found nothing to do, passed over while nothing marked it since (`hints`), nothing
        of its own is due, and (waiting) nothing it could use was freed or (running) no node changed: the visit would
        end where that one did. A waiting group keeps its place in the line unvisited, so a change costs the same
        however many wait."""
        key, settled = remembered.quiet, remembered.settled
        if key is None and not settled:
            return False
        uid = pod_group["metadata"]["uid"]
        if (
            remembered.due is not None
            or remembered.counts_due
            or not self.hints.unmarked(uid, self.members.key(uid), remembered.since)
            or (settled and not self.hints.nodes_unmarked(remembered.since))
            or (key is not None and not self.shortfalls.still_short(uid, key))
        ):
            remembered.quiet, remembered.settled = None, False
            return False
        if key is None:
            self._settled += 1
            return True
        self.line.join(pod_group, key.group, key.priority, key=key)
        self._passed += 1
        return True

    def _forget(self, live: set[str]) -> None:
        """What the loop remembers of PodGroups that are gone goes with them (when the groups have changed)."""
        self.memory.keep_only(live)
        self.shortfalls.keep_only(live)
        self.hints.keep_only(live, self.members.keys_in_use())

    def _forget_due(self) -> None:
        """Each cycle: deadlines passed, and what is remembered of pods and claims that are gone."""
        now = time.monotonic()
        if self.memory.summary().due <= now:
            for _, remembered in self.memory.items():
                if remembered.due is not None and remembered.due <= now:
                    remembered.due = None
        pods = self.cache.pod_uids
        self.repair.forget(pods, now)
        if len(self.pointers.done) > len(self.view.pods.store):  # some pod pointed at is gone (uids are never reused)
            self.pointers.keep_only(pods)

    def _nominated(self, scheduled: list[dict[str, Any]]) -> dict[str, tuple[dict[str, Any], schema.Nomination]]:
        """PodGroup uid -> (the group, its nomination), of every group preempting (read once per state of the groups)."""
        return self.cache.of_view(  # type: ignore[no-any-return]
            "nominations",
            (self.view.podgroups.written,),
            lambda: {g["metadata"]["uid"]: (g, n) for g in scheduled if (n := accessors.nomination(g)) is not None},
        )

    def _back_off(self, pod_group: Mapping[str, Any]) -> float:
        """The group is not tried again for a while (doubling from 0.5 s to 60 s), so one that keeps failing cannot spin."""
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        delay = min(60.0, 2 * (remembered.backoff or (0.0, 0.25))[1])
        remembered.backoff = (time.monotonic() + delay, delay)
        return delay

    def _priority(self, pod_group: Mapping[str, Any]) -> int:
        return self.members.derived(pod_group, "priority", self._read_priority, also=self.view.priorities.written)

    def _read_priority(self, pod_group: Mapping[str, Any], _: Any = None) -> int:
        return accessors.priority(pod_group, lambda name: self.view.priorities.get("", name))

    def _order(self, pod_group: Mapping[str, Any]) -> tuple[int, str, str]:
        return queue.order(pod_group, self._priority(pod_group))

    async def _held_back(self, fits: Fits) -> queue.Ahead | None:
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
        position = queue.positions(self.view.podgroups.items(), self._pods_of, self._priority).get(pod_group["metadata"]["uid"])
        where = f"; position {position[0]} of {position[1]} in the queue" if position else ""
        return f"fits, but waits its turn: {ahead.name} (priority {ahead.priority}), ahead in the queue, could use the same room now{where}"

    async def _reconcile(self, pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """Read where the group stands (`phase.classify`), write what every visit writes, then run the action of its
        phase (one table, `_ACTIONS`). False when an attempt was undone: the group then backs off before the next."""
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        remembered.quiet, remembered.settled = None, False  # set again only by a visit that finds nothing to do
        self.hints.reads(pod_group["metadata"]["uid"], self.members.facts(pod_group).claims)
        visit = await self._read(pod_group, pods)
        if visit.stands is phase.Phase.RESUMING:
            return await self._resume(pod_group, visit.reservation, pods)  # type: ignore[arg-type]
        scheduled_or_released = visit.facts.scheduled or visit.released
        await self.status.counters(pod_group, len(pods), len(visit.bound), len(visit.waiting) if scheduled_or_released else 0)
        await self._ungated(pod_group, pods)
        return await self._ACTIONS[visit.stands](self, visit)

    async def _read(self, pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> _Visit:
        """The facts of one visit: the members lost (of a released gang), its owner's state when one was, the members
        done, and the phase they put the group in."""
        reservation = accessors.reservation(pod_group)
        uid = pod_group["metadata"]["uid"]
        gang = accessors.gang(pod_group)
        released = reservation is not None and reservation.state == "Released"
        lost: list[disruption.Loss] = []
        if gang and released:
            lost = disruption.losses(
                reservation,  # type: ignore[arg-type]
                self._pods_of.get(uid, []),
                self.cache.node_names(),
                self.view.finished,
                known=disruption.recorded(pod_group),
                preempted=self._preempted,
            )
        owner = await self._owner(pod_group, lost) if lost else None
        owner_state = phase.OwnerState.ACTIVE
        if lost:
            owner_state = phase.OwnerState.GONE if owner is None else self.owner.state(owner, reservation.released_at)  # type: ignore[union-attr]
        done = disruption.finished(pod_group, self._pods_of.get(uid, []), self.view.finished) if gang else 0
        facts = phase.read(pod_group, pods, self.view.claims.get, lost=bool(lost), owner=owner_state, done=done)
        return _Visit(pod_group, pods, reservation, lost, owner_state, facts, phase.classify(facts))

    async def _each(self, visit: _Visit) -> bool:
        """Not a gang, or a gang scheduled whose record was dropped: each member released as it fits."""
        visit.pod_group, visit.reservation = await self.deadlines.unbind_late(visit.pod_group, visit.pods, visit.reservation)
        await self._release_each(visit.pod_group, visit.waiting)
        return True

    async def _suspended(self, visit: _Visit) -> bool:
        what = (self.owner.ref(visit.pod_group) or {}).get("kind", "owner")
        why = f"the {what} was suspended, which deleted its pods; once resumed, its new pods are admitted as a gang again"
        return await self.tear_down(visit.pod_group, visit.pods, visit.reservation, why, reason=keys.SUSPENDED)

    async def _nothing(self, visit: _Visit) -> bool:
        """FINISHED: its owner's successPolicy or failure ended the rest, nothing to take down; GOING: the owner is
        going and its pods with it, nothing is lost; IDLE: no member waits."""
        return True

    async def _released(self, visit: _Visit) -> bool | None:
        """What every released gang's visit does first: its losses recorded (while its owner lives), and, with none,
        the ready deadline judged; a verdict that ends the visit is returned."""
        if visit.lost and visit.owner_state is not phase.OwnerState.GONE:
            await self._record_lost(visit.pod_group, visit.lost)
        if not visit.lost:
            return await self.deadlines.ready(visit.pod_group, visit.pods, visit.reservation, visit.facts.min_count, visit.facts.done)  # type: ignore[arg-type]
        return None

    async def _lost(self, visit: _Visit) -> bool:
        await self._released(visit)
        return await self._disrupt(visit.pod_group, visit.pods, visit.reservation, visit.lost)  # type: ignore[arg-type]

    async def _running(self, visit: _Visit) -> bool:
        """A scheduled gang, at minCount or below it (mode single): late members released, minCount raised since the
        release honoured as a gang, and a calm gang passed over until something marks it (`settled`)."""
        visit.pod_group, visit.reservation = await self.deadlines.unbind_late(visit.pod_group, visit.pods, visit.reservation)
        ended = await self._released(visit)
        if ended is not None:
            return ended
        pod_group, pods, facts = visit.pod_group, visit.pods, visit.facts
        await self._below_min_count(pod_group, visit.bound, visit.lost, facts.min_count, facts.done)
        # minCount may have been raised since the release: the members it adds go together, as a gang
        released_members = sum(1 for p in pods if not accessors.gated(p))
        wanted = await self._min_count_now(pod_group, visit.waiting, facts.min_count)
        await self._release_each(pod_group, visit.waiting, max(1, wanted - released_members - facts.done))
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        if (
            visit.stands is phase.Phase.RUNNING
            and not visit.lost
            and not visit.waiting
            and remembered.due is None
            and not remembered.counts_due
        ):
            remembered.settled, remembered.since = True, self._seq
        return True

    async def _awaiting_bind(self, visit: _Visit) -> bool:
        ended = await self._released(visit)
        if ended is not None:
            return ended
        facts = visit.facts
        return await self.deadlines.bound(visit.pod_group, visit.pods, visit.bound, visit.reservation, facts.min_count, facts.done)  # type: ignore[arg-type]

    async def _waiting(self, visit: _Visit) -> bool:
        """Never placed, members behind the gate: its group claims made, its ready back-off waited out, then waiting
        for quorum, or an attempt (a plan, a release, a preemption)."""
        pod_group, facts = visit.pod_group, visit.facts
        if pod_group["spec"].get("resourceClaims"):
            missing = await groupclaims.ensure(self.kube, pod_group, self.view.claims.get)
            if missing is not None:
                await self.status.scheduled(pod_group, False, keys.PENDING, missing)
                return True
        if await self.deadlines.backing_off(pod_group):
            return True
        ready = [p for p in visit.waiting if self._claims_ready(p)]
        if visit.stands is phase.Phase.QUORUM:
            # while the others arrive the claims get their finalizer, so the release writes only allocations; and no
            # running count in the message: status.members counts, and one status write per arriving member is enough
            finished = f" ({facts.done} finished count toward it)" if facts.done else ""
            why = f"waiting for quorum: minCount {facts.min_count} members created with their claims{finished}"
            await all_answered([self.releaser.protect(ready), self.status.scheduled(pod_group, False, keys.PENDING, why)])
            return True
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        remembered.quorum_at = remembered.quorum_at if remembered.quorum_at is not None else time.monotonic()
        return await self._attempt(pod_group, ready, facts.needed)

    _ACTIONS: ClassVar[Mapping[phase.Phase, Callable[[SchedulingLoop, _Visit], Coroutine[Any, Any, bool]]]] = {
        phase.Phase.EACH: _each,
        phase.Phase.SUSPENDED: _suspended,
        phase.Phase.FINISHED: _nothing,
        phase.Phase.LOST: _lost,
        phase.Phase.GOING: _nothing,
        phase.Phase.RUNNING: _running,
        phase.Phase.BELOW_MIN: _running,
        phase.Phase.AWAITING_BIND: _awaiting_bind,
        phase.Phase.IDLE: _nothing,
        phase.Phase.QUORUM: _waiting,
        phase.Phase.PLANNABLE: _waiting,
        phase.Phase.PREEMPTING: _waiting,
    }
    """The action of each phase but RESUMING (which comes before anything is written): one entry per phase."""

    async def _owner(self, pod_group: Mapping[str, Any], lost: list[disruption.Loss]) -> dict[str, Any] | None:
        """The group's owner, read afresh when its lost members change (a lost member stays lost: no read every cycle);
        None when it is gone or being deleted."""
        uid = pod_group["metadata"]["uid"]
        key = frozenset(loss.uid for loss in lost)
        remembered = self.memory.of(uid)
        if remembered.owner is not None and remembered.owner[0] == key:
            return remembered.owner[1]
        owner = await self.owner.read(self.kube, pod_group)
        remembered.owner = (key, owner)
        return owner

    async def _min_count_now(self, pod_group: Mapping[str, Any], waiting: list[dict[str, Any]], recorded: int) -> int:
        """minCount as the Job says it now, while members wait to join a scheduled gang. A raised minCount comes
        with the pods it adds, which the Job controller creates at once; the PodGroup learns it a moment later, and
        a member released in between would run below it. Read once per set of waiting members."""
        if not waiting:
            return recorded
        uid = pod_group["metadata"]["uid"]
        key = frozenset(p["metadata"]["uid"] for p in waiting)
        remembered = self.memory.of(uid)
        known = remembered.intended
        if known is None or known[0] != key:
            owner = await self.owner.read(self.kube, pod_group)
            known = remembered.intended = (key, self.owner.min_count(owner) if owner is not None else None)
        return max(recorded, known[1] or 0)

    async def _disrupt(
        self, pod_group: dict[str, Any], pods: list[dict[str, Any]], reservation: schema.Reservation, lost: list[disruption.Loss]
    ) -> bool:
        """disruptionMode all: one member lost takes the whole group down, so no member holds devices without quorum
        (before the group is bound as after: the claims of members that never ran are freed at once, as at the bind
        deadline)."""
        why = f"member {', '.join(str(loss) for loss in lost)} lost; disruptionMode all takes the whole group down"
        if not await self.tear_down(pod_group, pods, reservation, why, reason=keys.DISRUPTED, lost={loss.uid for loss in lost}):
            return False  # the condition says what the teardown waits for
        metrics.DISRUPTIONS.labels(mode="all", cause=_cause_label(lost[0].cause)).inc()
        await self.status.condition(pod_group, keys.DISRUPTION_TARGET, True, keys.DISRUPTED, why)
        return True

    async def _below_min_count(
        self, pod_group: dict[str, Any], bound: list[dict[str, Any]], lost: list[disruption.Loss], min_count: int, done: int
    ) -> None:
        """disruptionMode single: nothing else is touched; the status says how far below minCount the group runs.
        Members that finished their work (`done`) count with those that run: the gang is short of nobody."""
        said = conditions.find(pod_group, keys.DISRUPTION_TARGET) or self.memory.of(pod_group["metadata"]["uid"]).conditions.get(
            keys.DISRUPTION_TARGET
        )
        finished = f", {done} finished" if done else ""
        if len(bound) + done >= min_count:
            if said is not None and said["status"] == "True":
                await self.status.condition(
                    pod_group,
                    keys.DISRUPTION_TARGET,
                    False,
                    "MinCountRunning",
                    f"{len(bound)} members run{finished} (minCount {min_count})",
                )
            return
        message = f"below minCount: {len(bound)} of minCount {min_count} members run{finished}"
        if lost:
            message += f"; lost {', '.join(str(loss) for loss in lost)}"
        if said is None or said["status"] != "True":
            metrics.DISRUPTIONS.labels(mode="single", cause=_cause_label(lost[0].cause if lost else "other")).inc()
        await self.status.condition(pod_group, keys.DISRUPTION_TARGET, True, "BelowMinCount", message, warn=True)

    def _claims_ready(self, pod: Mapping[str, Any]) -> bool:
        return accessors.claims_ready(pod, self.view.claims.get)

    async def _attempt(self, pod_group: dict[str, Any], ready: list[dict[str, Any]], min_count: int) -> bool:
        started = time.monotonic()
        steps = Steps(self._woken_for)
        steps.done("wait for the loop")
        snapshot = await self.cache.snapshot(pod_group)
        steps.done("snapshot")
        decided = time.monotonic()
        group = inputs.group(pod_group, ready, min_count, self._members)
        nomination = accessors.nomination(pod_group)
        key = shortfall.group_key(group, snapshot, self._priority(pod_group))
        if nomination is None and self.shortfalls.still_short(pod_group["metadata"]["uid"], key):
            self.line.join(pod_group, group, self._priority(pod_group))
            if not pod_group["spec"].get("resourceClaims"):  # a group's own claims are made and checked on each visit
                remembered = self.memory.of(pod_group["metadata"]["uid"])
                remembered.quiet, remembered.since = key, self._seq
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
                self.line.join(pod_group, group, self._priority(pod_group), accessors.nominated_devices(nomination))
                return await self.preempting.under_way(pod_group, nomination, result.message)
            verdict = await self.preempting.plan(pod_group, snapshot, group)
            if isinstance(verdict, Preemption) and verdict.victims:
                self.line.join(pod_group, group, self._priority(pod_group), (d for p in verdict.pods for d in p.devices))
                await self.preempting.start(pod_group, verdict)
                return True
            metrics.SCHEDULE_ATTEMPTS.labels(result="unschedulable", profile=metrics.PROFILE).inc()
            metrics.ATTEMPT_DURATION.labels(result="unschedulable", profile=metrics.PROFILE).observe(time.monotonic() - started)
            why_not = f"; preemption: {verdict.reason}" if isinstance(verdict, NoVictims) else ""
            self.shortfalls.remember(pod_group["metadata"]["uid"], key, shortfall.eligible(group, snapshot))
            self.line.join(pod_group, group, self._priority(pod_group))
            await self.status.scheduled(pod_group, False, keys.UNSCHEDULABLE, result.message + why_not, warn=True)
            return True
        ahead = await self._held_back(result)
        if ahead is not None:
            self.line.join(pod_group, group, self._priority(pod_group), accessors.nominated_devices(nomination) if nomination else ())
            self._again = True
            metrics.HELD_BACK.inc()
            await self.status.scheduled(pod_group, False, keys.PENDING, self._hold_back_message(pod_group, ahead))
            return True
        release = self._release(pod_group, result, steps, started, ready, min_count)
        await self.releases.start(pod_group["metadata"]["uid"], result, self._guarded(pod_group, release))
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

    async def _record_lost(self, pod_group: Mapping[str, Any], lost: list[disruption.Loss]) -> None:
        """`status.lost`: the losses with the cause first seen, written when they change, kept after a teardown."""
        record = disruption.record(lost)
        uid = pod_group["metadata"]["uid"]
        remembered = self.memory.of(uid)
        if not lost or record == (pod_group.get("status") or {}).get("lost") or record == remembered.lost_written:
            return
        await self.kube.merge_patch(
            custom_path("podgroups", accessors.namespace(pod_group), accessors.name(pod_group), status=True), {"status": {"lost": record}}
        )
        remembered.lost_written = record

    def _current(self, pod_group: Mapping[str, Any], pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The latest version of each pod from the watch (a release changed them)."""
        latest = [self.view.pods.get(accessors.namespace(pod_group), accessors.name(p)) for p in pods]
        return [p for p in latest if p is not None and not p["metadata"].get("deletionTimestamp")]

    async def _release_each(self, pod_group: dict[str, Any], waiting: list[dict[str, Any]], quorum: int = 1) -> None:
        """Late members of a scheduled gang (and every member of a basic group) go as they come.

        They are planned together on this cycle's snapshot (minCount `quorum`: every one that fits goes, once at
        least that many fit) and released in one reservation, so a cycle reads the cluster once, not once per pod.
        A gang whose minCount was raised past its released members needs the difference placed together; a
        replacement of a lost member, or one beyond minCount, goes alone. A late member joins the group's
        incarnation (its record), so its loss counts as a member's.
        """
        joined: list[schema.Reservation] = []
        ready = [p for p in waiting if self._claims_ready(p)]
        if len(ready) >= quorum:
            # one plan, in a worker thread as every plan
            group = inputs.group(pod_group, ready, quorum, self._members)
            snapshot = await self.cache.snapshot()
            result = await asyncio.to_thread(plan, snapshot, group, self.matcher)
            ahead = await self._held_back(result) if isinstance(result, Fits) else None
            if ahead is not None:
                self._again = True
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
                    key = shortfall.group_key(group, snapshot, self._priority(pod_group))
                    self.shortfalls.remember(memo, key, shortfall.eligible(group, snapshot))
                self.line.join(pod_group, group, self._priority(pod_group), memo=memo)
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
            pods = self._pods_of.get(pod_group["metadata"]["uid"], [])
            record = disruption.current(record, pods, {c["metadata"]["uid"] for c in self.view.claims.items()}, self.view.finished)
            grown = record.model_copy(
                update={
                    "placements": [*record.placements, *(p for r in joined for p in r.placements)],
                    "claims": [*record.claims, *(c for r in joined for c in r.claims)],
                    "planned": [*(record.planned or ()), *(p for r in joined for p in r.planned or ())] or None,
                }
            )
            await self.releaser.record(pod_group, grown)

    async def _resume(self, pod_group: dict[str, Any], reservation: schema.Reservation, pods: list[dict[str, Any]]) -> bool:
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
        members released into a placed gang are the gang's: `_release_each` keeps what did go.)"""
        if isinstance(exc, GatesRefused):
            await self.tear_down(pod_group, self._current(pod_group, pods), exc.reservation, str(exc))
            return False
        message = f"{what} undone, will plan again: {exc}"
        await self.status.scheduled(pod_group, False, keys.PENDING, message)
        await self.status.event(pod_group, "Warning", "ReservationRolledBack", message)
        return False

    async def _ungated(self, pod_group: Mapping[str, Any], pods: list[dict[str, Any]]) -> None:
        """A group of its own whose members came without the gate and were never placed by Phalanx (the pod webhook
        absent, or a namespace it leaves out): they are scheduled one by one, so the group is told, once per member.
        An owner's group is its controller's to tell (GangNotEnforced on the owner, from its template)."""
        ref = self.owner.ref(pod_group)
        if ref is None or ref["metadata"].get("uid") != pod_group["metadata"]["uid"]:
            return
        loose = {
            p["metadata"]["name"]
            for p in pods
            if not accessors.gated(p) and keys.PINNED_NODE not in (p["metadata"].get("annotations") or {})
        }
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        new = loose - remembered.ungated_told
        if not new:
            return
        message = (
            f"member(s) {', '.join(sorted(new))} came without the scheduling gate {keys.SCHEDULING_GATE}: admitted without "
            "Phalanx's pod webhook (not installed, the operator down in local mode, or a namespace it leaves out: "
            "kube-system and the operator's), they are scheduled one by one and may deadlock; delete them and create "
            "them again where the webhook runs"
        )
        logger.warning("%s/%s: %s", accessors.namespace(pod_group), accessors.name(pod_group), message)
        await self.status.event(pod_group, "Warning", "GangNotEnforced", message)
        remembered.ungated_told = remembered.ungated_told | new
