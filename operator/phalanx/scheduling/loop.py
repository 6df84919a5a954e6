"""The scheduling loop, the driver: each cycle, every PodGroup in priority then FIFO order is visited, passed over,
or left to its back-off; then the head of the line's hold is updated.

One cycle:
1. repair: a device held beyond what it allows (two allocators raced) is
   given back by the holder that allocated later (`repair`); the claims of
   members torn down are freed as they stop (`teardown.Freeing`); gated
   members are pointed at their group (`pointers`);
2. the walk, in queue order (`queue`: priority, then age): a group whose last
   visit found nothing to do is passed over while no write marked it
   (`hints`) and nothing it could use was freed (`shortfall`); every other
   group is visited (`visit`): its phase (`phase.classify`) picks its action;
3. a reservation recorded but not finished (operator restarted) is
   re-validated, then completed or rolled back (`attempt`, `reserve`);
4. each PodGroup still waiting for its first placement, once its quorum
   exists, is planned on the cycle's snapshot (`cache`); on Fits it is
   reserved and released as a unit (several under way at once: `assumed`)
   unless a group ahead of it still waiting could use the same room now; on
   Short the exact reason goes to its status, or a preemption is planned
   (`attempt`, `preempting`);
5. a released group past its bind or ready deadline, or whose gate lift was
   refused in part, is torn down as a unit (`deadlines`, `teardown`); a lost
   member takes a gang in disruptionMode all down (`visit`); late members
   are released one by one;
6. devices are held for the head of the line once it has waited past its
   hold-after (`headhold`).
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
from typing import Any

from phalanx.api import schema
from phalanx.kube.client import Kube, NotFound
from phalanx.kube.informers import ClusterView
from phalanx.owners.seam import OwnerKind
from phalanx.planner import DeviceMatcher
from phalanx.scheduling import (
    accessors,
    assumed,
    headhold,
    hints,
    membership,
    memory,
    metrics,
    pacing,
    pointers,
    queue,
    repair,
    shortfall,
    status,
    teardown,
    waits,
)
from phalanx.scheduling.attempt import Attempts
from phalanx.scheduling.background import Background
from phalanx.scheduling.cache import ClusterCache
from phalanx.scheduling.cycle import Cycle
from phalanx.scheduling.deadlines import Deadlines
from phalanx.scheduling.holes import HELD, NOMINATED, Holes
from phalanx.scheduling.nomination import Preemptor
from phalanx.scheduling.outcome import NotLeading
from phalanx.scheduling.preempting import Preempting
from phalanx.scheduling.reserve import Releaser
from phalanx.scheduling.visit import Visits

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Met:
    """The groups this loop schedules, as a cycle meets them."""

    scheduled: list[dict[str, Any]]
    """Every PodGroup of an owner this loop schedules, not being deleted."""
    facts: list[membership.Facts]
    """Each one's members, as `membership` reads them."""
    groups: list[tuple[dict[str, Any], list[dict[str, Any]]]]
    """Each one with its live members."""


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
        release_concurrency: int = assumed.CONCURRENCY,
    ) -> None:
        self.kube = kube
        self.view = view
        self.owner = owner
        """The workload kind whose groups this loop schedules: their members, their owner, its state."""
        self.period = period
        self.bind_deadline = bind_deadline
        self.memory = memory.Memory(counts_every=status.COUNTS_EVERY, quiet_for=status.QUIET_FOR)
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
        self.hints = hints.Hints(view, hints.member_keys(owner))
        """Which groups each write may concern: a group a visit found short or settled is passed over until one is
        marked (`hints`)."""
        self.cycle_state = Cycle(woken_for=time.monotonic())
        """The cycle under way: what its actions share."""
        self.line = queue.Line()
        """The groups this cycle found waiting, ahead of the one being reconciled (the cycle goes in queue order)."""
        self._budget = pacing.CpuBudget()
        self.leading: Callable[[], bool] = lambda: True
        """False once this replica may have lost its Lease: no group is touched after that."""
        self.releases = assumed.Releases(release_concurrency)
        """Releases under way beside the loop's next plans, which count each as done."""
        self.background = Background(lambda: self.leading())
        """Writes no decision waits for (a waiting gang's status, pointer Events), beside the walk."""
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
        self.attempts = Attempts(
            view,
            self.cycle_state,
            memory=self.memory,
            status=self.status,
            cache=self.cache,
            matcher=self.matcher,
            shortfalls=self.shortfalls,
            line=self.line,
            members=self.members,
            preempting=self.preempting,
            preemptor=self.preemptor,
            releaser=self.releaser,
            releases=self.releases,
            tear_down=self.tear_down,
            priority=self._priority,
            guarded=self._guarded,
            bind_deadline=bind_deadline,
        )
        """A waiting gang's plan and release, and the other releases a visit makes."""
        self.visit = Visits(
            kube,
            view,
            owner,
            self.cycle_state,
            memory=self.memory,
            status=self.status,
            cache=self.cache,
            members=self.members,
            hints=self.hints,
            deadlines=self.deadlines,
            tear_down=self.tear_down,
            attempts=self.attempts,
            releaser=self.releaser,
            background=self.background,
        )
        """One group's visit: where it stands, and its phase's action."""
        self._hold_line: tuple[list[queue.Ahead], shortfall.Standing, Any] | None = None
        """The line a settled head-of-line hold was last updated on, the verdicts of its gangs passed over, and the
        groups' `written` then (another replica's `status.hold` on any group is cleared on the next update)."""

    async def run(self) -> None:
        try:
            await self._cycles()
        finally:
            self.background.cancel()  # a stopped loop (its Lease lost, the operator stopping) writes nothing more

    async def _cycles(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.view.changed.wait(), timeout=self._next_wake())
            by_change = self.view.changed.is_set()
            self.cycle_state.woken_for = self.view.changed_since if by_change else time.monotonic()
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
        wake = 0.0 if self.cycle_state.again else self.memory.summary().wake - time.monotonic()
        return max(0.05, min(self.period, wake))

    async def cycle(self) -> None:
        self.attempts.derived.sweep()
        self.releaser.forget(self.cache.pod_uids)
        self.cycle_state.begin(self.hints.seq)  # before anything is read: a memo is never newer than what its visit read
        reads = (self.view.groups.written, self.members.writes, self.view.claims.written, self.view.priorities.written)
        met: Met = self.cache.of_view("groups met", reads[:2], self._meet)
        scheduled, facts, groups = met.scheduled, met.facts, met.groups
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
        self.cycle_state.preempted = {v.uid: self.preempting.cause(g) for g, n in nominated.values() for v in n.victims}
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
        if self.leading():  # an Event refused holds no gang: the pods not pointed at are tried on the next cycle
            gated = [(g, f.gated) for g, f in zip(scheduled, facts, strict=True)]
            self.background.run("pointers", "pointers", lambda: self.pointers.point(gated))
        self.line.clear()
        if self.memory.summary().quiet:
            await self.cache.snapshot()  # capacity freed since the last cycle is observed before any group is passed over
        try:
            await self._walk(self.cache.of_view("queue order", reads, lambda: self._in_order(scheduled, groups)))
        except asyncio.CancelledError:
            self.releases.cancel()  # each stops where its record says, resumed as after a crash
            raise
        finally:
            metrics.PASSED_OVER.inc(self.cycle_state.passed)  # once a cycle: a thousand increments, each taking a lock, cost 2 ms
            metrics.SETTLED_PASSED.inc(self.cycle_state.settled)
            await self.releases.drain()
        if not self.cycle_state.deposed:
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
            if not self.leading() or self.cycle_state.deposed:
                return
            remembered = self.memory.get(pod_group["metadata"]["uid"])
            if remembered is not None:
                if remembered.backoff is not None and remembered.backoff[0] > time.monotonic():
                    continue
                if self._passed_over(pod_group, remembered):
                    continue
            await self._guarded(pod_group, self.visit(pod_group, pods))

    async def _guarded(self, pod_group: Mapping[str, Any], attempt: Coroutine[Any, Any, bool]) -> None:
        """One group's reconcile, or its release under way: an error is that group's alone (logged, counted, retried
        with backoff); a lost Lease stops the cycle (`Cycle.deposed`)."""
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
            self.cycle_state.deposed = True
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
        if kept is not None and kept[2] == self.view.groups.written and self.line.ahead == kept[0] and self.shortfalls.stands(kept[1]):
            self._hold_line = kept
            return
        try:
            written = self.view.groups.written
            # every group whose last attempt failed and that no visit has tried since, its back-off over or not: one
            # that ended after the walk passed the group over is not in the line either, and its hold must not go
            backing_off = {uid for uid, _ in self.memory.summary().backoffs}
            # the snapshot only if the head's hold is planned again: a cycle with no gang waiting (a recovering gang
            # waits for its quorum) builds none for it, however much the pods churn
            if await self.headhold.update(
                self.line.ahead, self.view.groups.items(), self.cache.snapshot, self.cache.revision(), self.matcher, backing_off
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
            self.cycle_state.settled += 1
            return True
        self.line.join(pod_group, key.group, key.priority, key=key)
        self.cycle_state.passed += 1
        return True

    def _meet(self) -> Met:
        """The groups as the cycle meets them, read again only once a group or a member was written; what the loop
        remembers of the groups gone goes with them then."""
        podgroups = self.view.groups.items()
        self.members.refresh(podgroups)
        scheduled = [g for g in podgroups if self.members.owner_uid(g) and not g["metadata"].get("deletionTimestamp")]
        facts = [self.members.facts(g) for g in scheduled]
        self._forget({g["metadata"]["uid"] for g in scheduled})
        return Met(scheduled, facts, [(g, f.live) for g, f in zip(scheduled, facts, strict=True)])

    def _forget(self, live: set[str]) -> None:
        """What the loop remembers of PodGroups that are gone goes with them (when the groups have changed)."""
        self.memory.keep_only(live)
        self.shortfalls.keep_only(live)
        self.background.keep_only(live)
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
            (self.view.groups.written,),
            lambda: {g["metadata"]["uid"]: (g, n) for g in scheduled if (n := accessors.nomination(g)) is not None},
        )

    def _back_off(self, pod_group: Mapping[str, Any]) -> float:
        return self.memory.of(pod_group["metadata"]["uid"]).back_off()

    def _priority(self, pod_group: Mapping[str, Any]) -> int:
        return self.members.derived(pod_group, "priority", self._read_priority, also=self.view.priorities.written)

    def _read_priority(self, pod_group: Mapping[str, Any], _: Any = None) -> int:
        return accessors.priority(pod_group, lambda name: self.view.priorities.get("", name))

    def _order(self, pod_group: Mapping[str, Any]) -> tuple[int, str, str]:
        return queue.order(pod_group, self._priority(pod_group))
