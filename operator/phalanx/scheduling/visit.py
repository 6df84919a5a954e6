"""One visit of one group: where it stands (`phase.classify`), what every visit writes (its counts, a Warning for
members that came without the gate), and the action of its phase, from one table (`Visits.ACTIONS`).

The actions of a released gang live here (its losses recorded, disruptionMode all or single, late members, a
minCount raised since the release); those of a waiting one are `attempt`'s, the deadlines `deadlines`', a gang
taken down `teardown`'s.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Coroutine, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from phalanx.api import keys, schema
from phalanx.kube.client import Kube, all_answered
from phalanx.kube.informers import ClusterView
from phalanx.owners.seam import OwnerKind
from phalanx.scheduling import accessors, composites, conditions, disruption, groupclaims, hints, memory, metrics, phase, status, teardown
from phalanx.scheduling.attempt import Attempts
from phalanx.scheduling.background import Background
from phalanx.scheduling.cache import ClusterCache
from phalanx.scheduling.cycle import Cycle
from phalanx.scheduling.deadlines import Deadlines
from phalanx.scheduling.membership import Membership
from phalanx.scheduling.reserve import Releaser

logger = logging.getLogger(__name__)


def _cause_label(cause: str) -> str:
    """A bounded metric label from a loss cause (the cause text names pods and nodes)."""
    for label in ("Eviction", "Preemption", "Taint", "PodGC", "node", "failed", "deleted", "preempted"):
        if label.lower() in cause.lower():
            return label.lower()
    return "other"


@dataclass
class Visit:
    """One visit of one group: what `Visits` read, and the phase it put the group in. The group and its record
    are replaced as the visit writes them (`Deadlines.unbind_late`), so later steps never write the old record back."""

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
        return [p for p in self.pods if accessors.bound(p)]

    @property
    def waiting(self) -> list[dict[str, Any]]:
        return [p for p in self.pods if accessors.gated(p)]


WAITING = frozenset({phase.Phase.IDLE, phase.Phase.QUORUM})
"""Phases of a group that waits for its members: its visit decides nothing, and its writes (counts, the Pending
condition, its claims' finalizers) go beside the walk."""


def beside(visit: Visit) -> bool:
    """A visit whose writes only report, so they go beside the walk: a group waiting for its members (`WAITING`),
    or a released gang whose quorum kube-scheduler has just bound, lost none, to be marked Scheduled. At a burst of
    1,000 gangs of 3 on 5,000 nodes, the walk awaited that condition for every gang released (30-80 ms each), and
    stopped releasing for 13 s while it wrote the conditions of the ~400 gangs the previous walk had released."""
    if visit.stands in WAITING:
        return True
    bound = len(visit.bound) + visit.facts.done >= visit.facts.min_count
    return visit.stands is phase.Phase.AWAITING_BIND and not visit.lost and bound


class Visits:
    """Visits groups: `await visits(pod_group, pods)` reads, writes what every visit writes, and runs its phase's action."""

    def __init__(
        self,
        kube: Kube,
        view: ClusterView,
        owner: OwnerKind,
        cycle: Cycle,
        *,
        memory: memory.Memory,
        status: status.Status,
        cache: ClusterCache,
        members: Membership,
        hints: hints.Hints,
        deadlines: Deadlines,
        tear_down: teardown.TearDown,
        attempts: Attempts,
        releaser: Releaser,
        background: Background,
    ) -> None:
        self.kube = kube
        self.view = view
        self.owner = owner
        self.cycle = cycle
        self.memory = memory
        self.status = status
        self.cache = cache
        self.members = members
        self.hints = hints
        self.deadlines = deadlines
        self.tear_down = tear_down
        self.attempts = attempts
        self.releaser = releaser
        self.background = background
        """Writes no decision waits for, beside the walk."""

    async def __call__(self, pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> bool:
        """Read where the group stands (`phase.classify`), write what every visit writes, then run the action of its
        phase (one table, `ACTIONS`). False when an attempt was undone: the group then backs off before the next."""
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        remembered.quiet, remembered.settled = None, False  # set again only by a visit that finds nothing to do
        self.hints.reads(pod_group["metadata"]["uid"], self.members.facts(pod_group).claims)
        visit = await self._read(pod_group, pods)
        if visit.stands is phase.Phase.RESUMING:
            return await self.attempts.resume(pod_group, visit.reservation, pods)  # type: ignore[arg-type]
        uid = pod_group["metadata"]["uid"]
        if beside(visit):
            # nothing to decide: its writes go beside the walk (`background`), and none while its last visit's are
            # under way (they are these: the watch does not show them yet)
            self.background.run(uid, "reconcile", lambda: self._act(visit))
            return True
        await self.background.after(uid)  # a group's writes land in the order they were made
        return await self._act(visit)

    async def _act(self, visit: Visit) -> bool:
        """What every visit writes (a Warning for members without the gate; its counts, with the condition its action
        writes or after it), and its phase's action."""
        pods = visit.pods
        scheduled_or_released = visit.facts.scheduled or visit.released
        self.status.want(visit.pod_group, len(pods), len(visit.bound), len(visit.waiting) if scheduled_or_released else 0)
        await self._ungated(visit.pod_group, pods)
        verdict = await self.ACTIONS[visit.stands](self, visit)
        await self.status.counters(visit.pod_group)
        return verdict

    async def _read(self, pod_group: dict[str, Any], pods: list[dict[str, Any]]) -> Visit:
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
                self.members.get(uid, []),
                self.cache.node_names(),
                self.view.finished,
                known=disruption.recorded(pod_group),
                preempted=self.cycle.preempted,
            )
        owner = await self._owner(pod_group, lost) if lost else None
        owner_state = phase.OwnerState.ACTIVE
        if lost:
            owner_state = phase.OwnerState.GONE if owner is None else self.owner.state(owner, reservation.released_at)  # type: ignore[union-attr]
        done = disruption.finished(pod_group, self.members.get(uid, []), self.view.finished) if gang else 0
        if done:  # a role's members done count toward its minimum, as all members done count toward minCount
            pod_group = composites.less(pod_group, disruption.done(self.members.get(uid, [])))
        facts = phase.read(pod_group, pods, self.view.claims.get, lost=bool(lost), owner=owner_state, done=done)
        return Visit(pod_group, pods, reservation, lost, owner_state, facts, phase.classify(facts))

    async def _each(self, visit: Visit) -> bool:
        """Not a gang, or a gang scheduled whose record was dropped: each member released as it fits."""
        visit.pod_group, visit.reservation = await self.deadlines.unbind_late(visit.pod_group, visit.pods, visit.reservation)
        await self.attempts.each(visit.pod_group, visit.waiting, placed=[p for p in visit.pods if not accessors.gated(p)])
        return True

    async def _suspended(self, visit: Visit) -> bool:
        what = (self.owner.ref(visit.pod_group) or {}).get("kind", "owner")
        why = f"the {what} was suspended, which deleted its pods; once resumed, its new pods are admitted as a gang again"
        return await self.tear_down(visit.pod_group, visit.pods, visit.reservation, why, reason=keys.SUSPENDED)

    async def _nothing(self, visit: Visit) -> bool:
        """FINISHED: its owner's successPolicy or failure ended the rest, nothing to take down; GOING: the owner is
        going and its pods with it, nothing is lost; IDLE: no member waits."""
        return True

    async def _released(self, visit: Visit) -> bool | None:
        """What every released gang's visit does first: its losses recorded (while its owner lives), and, with none,
        the ready deadline judged; a verdict that ends the visit is returned."""
        if visit.lost and visit.owner_state is not phase.OwnerState.GONE:
            await self._record_lost(visit.pod_group, visit.lost)
        if not visit.lost:
            return await self.deadlines.ready(visit.pod_group, visit.pods, visit.reservation, visit.facts.min_count, visit.facts.done)  # type: ignore[arg-type]
        return None

    async def _lost(self, visit: Visit) -> bool:
        await self._released(visit)
        return await self._disrupt(visit.pod_group, visit.pods, visit.reservation, visit.lost)  # type: ignore[arg-type]

    async def _running(self, visit: Visit) -> bool:
        """A scheduled gang, at minCount or below it (mode single): late members released, minCount raised since the
        release honoured as a gang, and a calm gang passed over until something marks it (`settled`)."""
        visit.pod_group, visit.reservation = await self.deadlines.unbind_late(visit.pod_group, visit.pods, visit.reservation)
        ended = await self._released(visit)
        if ended is not None:
            return ended
        pod_group, pods, facts = visit.pod_group, visit.pods, visit.facts
        await self._below_min_count(pod_group, visit.bound, visit.lost, facts.min_count, facts.done)
        # minCount may have been raised since the release: the members it adds go together, as a gang
        released = [p for p in pods if not accessors.gated(p)]
        wanted = await self._min_count_now(pod_group, visit.waiting, facts.min_count)
        await self.attempts.each(pod_group, visit.waiting, max(1, wanted - len(released) - facts.done), released)
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        if (
            visit.stands is phase.Phase.RUNNING
            and not visit.lost
            and not visit.waiting
            and remembered.due is None
            and not remembered.counts_due
        ):
            remembered.settled, remembered.since = True, self.cycle.seq
        return True

    async def _awaiting_bind(self, visit: Visit) -> bool:
        ended = await self._released(visit)
        if ended is not None:
            return ended
        facts = visit.facts
        return await self.deadlines.bound(visit.pod_group, visit.pods, visit.bound, visit.reservation, facts.min_count, facts.done)  # type: ignore[arg-type]

    async def _waiting(self, visit: Visit) -> bool:
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
        ready = [p for p in visit.waiting if self.attempts.claims_ready(p)]
        if visit.stands is phase.Phase.QUORUM:
            # while the others arrive the claims get their finalizer, so the release writes only allocations; and no
            # running count in the message: status.members counts, and one status write per arriving member is enough
            if self.status.quiet(pod_group):  # said only if it still waits once the loop may write (woken for it)
                remembered = self.memory.of(pod_group["metadata"]["uid"])
                remembered.due = min(remembered.due or math.inf, remembered.met_at + status.QUIET_FOR)
                await self.releaser.protect(ready)
                return True
            finished = f" ({facts.done} finished count toward it)" if facts.done else ""
            why = f"waiting for quorum: minCount {facts.min_count} members created with their claims{finished}"
            why += composites.describe(pod_group)
            await all_answered([self.releaser.protect(ready), self.status.scheduled(pod_group, False, keys.PENDING, why)])
            return True
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        remembered.quorum_at = remembered.quorum_at if remembered.quorum_at is not None else time.monotonic()
        return await self.attempts(pod_group, ready, facts.needed)

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
        short_roles = composites.below(pod_group, bound)
        if len(bound) + done >= min_count and not short_roles:
            if said is not None and said["status"] == "True":
                await self.status.condition(
                    pod_group,
                    keys.DISRUPTION_TARGET,
                    False,
                    keys.MIN_COUNT_RUNNING,
                    f"{len(bound)} members run{finished} (minCount {min_count})",
                )
            return
        message = f"below minCount: {len(bound)} of minCount {min_count} members run{finished}"
        if short_roles:
            message += f"; roles below their minCount: {', '.join(short_roles)}"
        if lost:
            message += f"; lost {', '.join(str(loss) for loss in lost)}"
        if said is None or said["status"] != "True":
            metrics.DISRUPTIONS.labels(mode="single", cause=_cause_label(lost[0].cause if lost else "other")).inc()
        await self.status.condition(pod_group, keys.DISRUPTION_TARGET, True, keys.BELOW_MIN_COUNT, message, warn=True)

    async def _record_lost(self, pod_group: Mapping[str, Any], lost: list[disruption.Loss]) -> None:
        """`status.lost`: the losses with the cause first seen, written when they change, kept after a teardown."""
        record = disruption.record(lost)
        uid = pod_group["metadata"]["uid"]
        remembered = self.memory.of(uid)
        if not lost or record == (pod_group.get("status") or {}).get("lost") or record == remembered.lost_written:
            return
        await self.kube.merge_patch(accessors.path(pod_group, status=True), {"status": {"lost": record}})
        remembered.lost_written = record

    async def _ungated(self, pod_group: Mapping[str, Any], pods: list[dict[str, Any]]) -> None:
        """A group of its own whose members came without the gate and were never placed by Phalanx (the pod webhook
        absent, or a namespace it leaves out): they are scheduled one by one, so the group is told, once per member.
        An owner's group is its controller's to tell (GangNotEnforced on the owner, from its template)."""
        ref = self.owner.ref(pod_group)
        if ref is None or ref["metadata"].get("uid") != pod_group["metadata"]["uid"]:
            return
        loose = {
            accessors.name(p) for p in pods if not accessors.gated(p) and keys.PINNED_NODE not in (p["metadata"].get("annotations") or {})
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
        await self.status.event(pod_group, "Warning", keys.GANG_NOT_ENFORCED, message)
        remembered.ungated_told = remembered.ungated_told | new

    ACTIONS: ClassVar[Mapping[phase.Phase, Callable[[Visits, Visit], Coroutine[Any, Any, bool]]]] = {
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
