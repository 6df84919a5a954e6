"""No starvation: the gang at the head of the line, once it has waited past its hold-after, gets the devices its plan
needs held for it as they free.

The queue lets anything the head cannot use now go first (backfill), so without a hold a stream of small pods or
gangs takes every device the moment it frees and a large gang waits for ever. Volcano's `sla-waiting-time` and
YuniKorn's placeholders reserve for such a job; Phalanx holds devices with the DeviceTaintRules it already uses for
repairs and preemptions (`holes`, purpose `head`). Each cycle, after every group was reconciled in queue order:

1. the head is the first gang in the cycle's line (`queue.Line`) waiting for its first placement that could fit on
   the cluster with no device in use; a group that can never fit is passed over, and when the first is preempting
   (its nomination holds its own devices) nobody is held for;
2. once it has waited past its hold-after (the Job's `scheduling.phalanx.dev/hold-after`, copied onto its PodGroup,
   else `--hold-after`), counted from its PodGroupInitiallyScheduled last turning False as the API server keeps it
   (a restart does not reset it), its plan on the cluster emptied of devices (`planner.queue.hold_for`: packed as any
   plan, and kept while it still fits on the devices it holds) names the devices; each gets a NoSchedule rule, which
   leaves a running holder alone and keeps kube-scheduler from giving the device out again once it frees, and the
   loop plans no other group onto them (`elsewhere`);
3. a pod or gang whose devices the plan does not need still runs; the head is released once all it needs is free,
   on the held devices or any others;
4. the hold is what the line says each cycle: given back (rules deleted, `status.hold` cleared) when the head is
   released, deleted, needs fewer devices (a lower minCount), or is no longer at the head; a restarted operator loads
   the rules and `status.hold` and reconciles them the same way. Devices given back are room for everyone: every
   group known short is planned again. A holder backing off after an attempt undone (its release aborted) is not in
   the line, as it holds no group behind it back, but it is still at the head: its hold is kept as it was, unless a
   group ahead of it in queue order has become the head meanwhile. Given back, the devices it waited for would go to
   the first pod or group to ask in the back-off (a stream of small pods at once), and its wait would start over.

Node resources (cpu, memory, pods) are not held: a backfill pod may take them, and the head then waits for those too.
A request that tolerates every taint (`operator: Exists`) is not kept off a held device.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Awaitable, Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from phalanx.api import intent, keys, schema, times
from phalanx.kube.client import Kube, NotFound
from phalanx.planner import DeviceMatcher
from phalanx.planner.model import DeviceId, Snapshot
from phalanx.planner.queue import hold_for
from phalanx.scheduling import accessors, metrics, shortfall
from phalanx.scheduling.holes import Holes
from phalanx.scheduling.queue import Ahead, order

logger = logging.getLogger(__name__)

Priority = Callable[[Mapping[str, Any]], int]
"""A PodGroup's priority, as the queue orders it."""

HEAD = "head"
"""Purpose of a DeviceTaintRule: a device held for the gang at the head of the line."""
DEFAULT_HOLD_AFTER = 300.0
"""Seconds: kube-scheduler's podMaxInUnschedulablePodsDuration and Kueue's waitForPodsReady timeout are 5 minutes."""


@dataclass(frozen=True)
class Held:
    """The hold this cycle decided on: for whom, which devices, since when."""

    uid: str
    namespace: str
    name: str
    devices: frozenset[DeviceId]
    held_at: str
    waiting_since: str
    priority: int

    def record(self) -> schema.Hold:
        return schema.Hold(devices=sorted("/".join(d) for d in self.devices), held_at=self.held_at, waiting_since=self.waiting_since)


def waiting_since(pod_group: Mapping[str, Any]) -> str:
    """When the gang began waiting: its PodGroupInitiallyScheduled last turned False, else its creation."""
    for cond in (pod_group.get("status") or {}).get("conditions") or []:
        if cond["type"] == keys.INITIALLY_SCHEDULED and cond["status"] == "False" and cond.get("lastTransitionTime"):
            return str(cond["lastTransitionTime"])
    return str(pod_group["metadata"].get("creationTimestamp") or "")


def hold_after(pod_group: Mapping[str, Any], default: float) -> float:
    """The PodGroup's hold-after annotation (copied from its Job), else the operator's; 0: never held for."""
    with contextlib.suppress(intent.GangSpecError):
        said = intent.hold_after(pod_group["metadata"].get("annotations"))
        if said is not None:
            return said
    return default


def recorded(pod_group: Mapping[str, Any]) -> schema.Hold | None:
    raw = (pod_group.get("status") or {}).get("hold")
    return schema.Hold.model_validate(raw) if raw else None


def devices(record: schema.Hold) -> frozenset[DeviceId]:
    return frozenset(tuple(d.split("/", 2)) for d in record.devices)  # type: ignore[misc]


def from_status(podgroups: Iterable[Mapping[str, Any]], priority: Priority) -> Held | None:
    """The hold the PodGroups record (the earliest, should a crash have left two), for readers without the loop: explain."""
    found = sorted(((r, g) for g in podgroups if (r := recorded(g)) is not None), key=lambda rg: rg[0].held_at)
    if not found:
        return None
    record, g = found[0]
    meta = g["metadata"]
    return Held(meta["uid"], meta["namespace"], meta["name"], devices(record), record.held_at, record.waiting_since, priority(g))


def elsewhere(snapshot: Snapshot, held: Held | None, for_group: Mapping[str, Any] | None, priority: Priority) -> Snapshot:
    """`snapshot` as a group other than the holder is planned on: the held devices count as held. Not for a group of
    higher priority (it is ahead of the holder, which holds until the next cycle sees it at the head): it must not
    preempt for room the hold keeps free."""
    if held is None or not held.devices:
        return snapshot
    if for_group is not None and (for_group["metadata"]["uid"] == held.uid or priority(for_group) > held.priority):
        return snapshot
    return replace(snapshot, held=snapshot.held | held.devices)


def note(pod_group: Mapping[str, Any], held: Held | None, snapshot: Snapshot | None = None) -> str | None:
    """What explain says of the hold: held for this group (how many free now), or for whom, when another is held for."""
    if held is None:
        return None
    if pod_group["metadata"]["uid"] == held.uid:
        free = f", {len(held.devices - snapshot.held)} of them free now" if snapshot is not None else ""
        return f"{len(held.devices)} device(s) held for it as they free, since {held.held_at} (waiting since {held.waiting_since}){free}"
    return f"{len(held.devices)} device(s) held for {held.namespace}/{held.name}, the head of the line"


def _waiting(pod_group: Mapping[str, Any], memo: str) -> bool:
    """A gang waiting for its first placement (not a running gang's late members, nor a basic group)."""
    return memo == pod_group["metadata"]["uid"] and accessors.gang(pod_group) and not accessors.reservation(pod_group)


def _past(pod_group: Mapping[str, Any], default_after: float) -> bool:
    """It has waited past its hold-after (0: never held for)."""
    after = hold_after(pod_group, default_after)
    since = waiting_since(pod_group)
    return after > 0 and bool(since) and times.seconds_since(since) >= after


class HeadHold:
    """The one hold for the head of the line: its DeviceTaintRules and its PodGroup's `status.hold`, kept to what the line says."""

    def __init__(self, kube: Kube, default_after: float = DEFAULT_HOLD_AFTER, shortfalls: shortfall.Shortfalls | None = None) -> None:
        self.kube = kube
        self.shortfalls = shortfalls if shortfalls is not None else shortfall.Shortfalls()
        """The loop's memo of short groups: a gang that cannot fit even on an empty cluster is not planned again for
        a hold until capacity it could use appears (memo `UID/hold`)."""
        self.rules = Holes(kube, HEAD)
        self.default_after = default_after
        self.current: Held | None = None
        self._written: dict[str, dict[str, Any] | None] = {}
        """PodGroup uid -> the `status.hold` this process last wrote: the watch may not show it yet."""
        self._planned: tuple[Hashable, frozenset[DeviceId] | None] | None = None
        """(what the last plan read, its answer): the head's hold is planned again only when either changes."""
        self.settled = False
        """The last update held nothing, gave nothing back, wrote nothing, and planned for no gang of its line (each
        never fits, or waits for no first placement): on the same line, with its verdicts standing, the next would
        do the same, whatever the time (no gang's hold-after is read)."""
        self._looked = False
        """The last `_desired` read some gang's hold-after, planned, or kept a hold: its answer may change alone."""

    def elsewhere(self, snapshot: Snapshot, for_group: Mapping[str, Any] | None, priority: Priority) -> Snapshot:
        return elsewhere(snapshot, self.current, for_group, priority)

    async def update(
        self,
        line: Sequence[Ahead],
        podgroups: Sequence[Mapping[str, Any]],
        snapshot: Callable[[], Awaitable[Snapshot]],
        revision: Hashable,
        matcher: DeviceMatcher,
        backing_off: Collection[str] = (),
    ) -> bool:
        """Hold for the head of `line` (this cycle's, in queue order) what its plan needs, give back the rest. True when
        devices were given back (the caller plans every short group again). `snapshot` builds the cluster at
        `revision`, called only when the head's hold is planned again; `backing_off`: the uids of the groups whose
        last attempt failed and that no visit has tried since (not in the line: passed over for their back-off).
        Devices given back are those the hold held (its record or its rules) and holds no longer, whether or not the
        server serves the rules."""
        if self.rules.served is None:
            await self.rules.load()
        built: list[Snapshot] = []

        async def once() -> Snapshot:
            """The cluster, taken at most once however many gangs of the line are looked at (taking it reads every group)."""
            if not built:
                built.append(await snapshot())
            return built[0]

        self.settled = False
        # what was held before this update, by the hold's record as by its rules: where the rules are not served
        # (1.34-1.36 without the gate) only the record holds, and a write that failed after the rules were deleted
        # left the record as it was, so the next update gives those devices back (and says so) again
        before = (self.current.devices if self.current is not None else frozenset()) | set(self.rules.covered)
        desired = await self._desired(line, podgroups, once, revision, matcher, self._backing_off(podgroups, backing_off))
        want = desired.devices if desired is not None else frozenset()
        if desired is not None:
            holder = next((g for g in podgroups if g["metadata"]["uid"] == desired.uid), None)
            if holder is not None:  # the line and the groups are one reading of the view: it is there
                await self._write(holder, desired.record().wire())
            await self.rules.cover(
                sorted(want - set(self.rules.covered)), f"held for {desired.namespace}/{desired.name}, the head of the line"
            )
        given_back = sorted(set(self.rules.covered) - want)
        await self.rules.uncover(given_back)
        wrote = False
        for g in podgroups:
            uid = g["metadata"]["uid"]
            if (desired is None or uid != desired.uid) and (
                self._written.get(uid) or ((g.get("status") or {}).get("hold") and uid not in self._written)
            ):
                await self._write(g, None)
                wrote = True
        live = {g["metadata"]["uid"] for g in podgroups}
        self._written = {u: w for u, w in self._written.items() if u in live}
        if desired != self.current:
            logger.info("hold for the head of the line: %s", desired.record() if desired is not None else "none")
        freed = before - want
        self.settled = desired is None and self.current is None and not self._looked and not freed and not wrote
        self.current = desired
        metrics.HELD_DEVICES.labels(purpose=HEAD).set(len(want))
        return bool(freed)

    def _backing_off(
        self, podgroups: Sequence[Mapping[str, Any]], backing_off: Collection[str]
    ) -> tuple[Held, tuple[int, str, str]] | None:
        """The current hold and its holder's place in the queue, while the holder backs off still waiting for its first
        placement (not deleted, nothing reserved)."""
        held = self.current
        if held is None or held.uid not in backing_off:
            return None
        holder = next((g for g in podgroups if g["metadata"]["uid"] == held.uid), None)
        if holder is None or holder["metadata"].get("deletionTimestamp") or accessors.reservation(holder) is not None:
            return None
        return held, order(holder, held.priority)

    async def _desired(
        self,
        line: Sequence[Ahead],
        podgroups: Sequence[Mapping[str, Any]],
        snapshot: Callable[[], Awaitable[Snapshot]],
        revision: Hashable,
        matcher: DeviceMatcher,
        kept_for: tuple[Held, tuple[int, str, str]] | None = None,
    ) -> Held | None:
        """The hold the line asks for; `kept_for`: the hold of a holder backing off, and its place in the queue, which
        stays the head's unless a group met before that place is. Only a gang past its hold-after is held for, so
        while none in the line is, nothing is planned."""
        self._looked = True
        if kept_for is None and not any(not self._never_fits(a) and _waiting(a.pod_group, a.memo) for a in line):
            self._looked = False  # each gang of the line never fits, or waits for no first placement
            return None
        if kept_for is None and not any(_waiting(a.pod_group, a.memo) and _past(a.pod_group, self.default_after) for a in line):
            return None

        @functools.cache
        def nominated() -> dict[str, frozenset[DeviceId]]:
            """Each preempting group's devices, read only if a plan is made (a thousand gangs may be looked through)."""
            return {
                g["metadata"]["uid"]: frozenset(accessors.nominated_devices(n))
                for g in podgroups
                if (n := accessors.nomination(g)) is not None
            }

        for ahead in line:
            pod_group = ahead.pod_group
            if kept_for is not None and order(pod_group, ahead.priority) > kept_for[1]:
                return kept_for[0]
            meta = pod_group["metadata"]
            if self._never_fits(ahead):
                continue
            if not _waiting(pod_group, ahead.memo):
                continue  # late members of a running gang, or a basic group: no first placement to wait for
            if ahead.freed:
                return None  # preempting: its nomination holds its own devices
            since = waiting_since(pod_group)
            mine = (
                self.current
                if self.current is not None and self.current.uid == meta["uid"]
                else from_status([pod_group], lambda _, p=ahead.priority: p)
            )
            kept = mine.devices if mine is not None else frozenset()
            found = await self._plan(ahead, nominated, snapshot, revision, kept, matcher)
            if found is None:
                continue  # can never fit, even on an empty cluster: holding would not help, and it holds no line
            if not _past(pod_group, self.default_after):
                return None
            held_at = mine.held_at if mine is not None and mine.devices else times.stamp()
            return Held(meta["uid"], meta["namespace"], meta["name"], found, held_at, since, ahead.priority)
        return kept_for[0] if kept_for is not None else None

    def _never_fits(self, ahead: Ahead) -> bool:
        """A gang the cycle passed over that holds nothing and could not fit even on an empty cluster, with nothing
        changed since that it could use: `_plan` would say so again. Said first, at the cost of one memo look, as a
        thousand such gangs can stand in the line."""
        uid = ahead.pod_group["metadata"]["uid"]
        if ahead.key is None or (self.current is not None and self.current.uid == uid) or (ahead.pod_group.get("status") or {}).get("hold"):
            return False
        return self.shortfalls.nowhere(uid, ahead.key)

    async def _plan(
        self,
        ahead: Ahead,
        nominated: Callable[[], Mapping[str, frozenset[DeviceId]]],
        snapshot: Callable[[], Awaitable[Snapshot]],
        revision: Hashable,
        kept: frozenset[DeviceId],
        matcher: DeviceMatcher,
    ) -> frozenset[DeviceId] | None:
        uid = ahead.pod_group["metadata"]["uid"]
        key = (uid, revision, ahead.group, kept)
        if self._planned is not None and self._planned[0] == key:
            return self._planned[1]
        base = await snapshot()
        question = ahead.key if ahead.key is not None else shortfall.group_key(ahead.group, base, ahead.priority)
        memo = f"{uid}/hold"
        if not kept and (self.shortfalls.nowhere(uid, question) or self.shortfalls.still_short(memo, question)):
            return None  # could not fit on the cluster emptied of devices, and nothing it could use appeared since
        others = frozenset(d for g, devices in nominated().items() if g != uid for d in devices)
        # in a worker thread, as every plan
        found = await asyncio.to_thread(hold_for, replace(base, held=others), ahead.group, kept, matcher)
        if found is None:
            self.shortfalls.remember(memo, question, shortfall.eligible(ahead.group, base))
        self._planned = (key, found)
        return found

    async def _write(self, group: Mapping[str, Any], body: dict[str, Any] | None) -> None:
        uid = group["metadata"]["uid"]
        if uid in self._written and self._written[uid] == body:
            return
        with contextlib.suppress(NotFound):  # a PodGroup deleted meanwhile takes its record with it
            await self.kube.merge_patch(accessors.path(group, status=True), {"status": {"hold": body}})
        self._written[uid] = body
