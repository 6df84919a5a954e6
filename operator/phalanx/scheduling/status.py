"""What the loop writes of a group for its users to read: the two conditions it owns, the member counts, and Events.

Every write of the loop's conditions and counts is one server-side apply under the loop's field manager carrying
every condition the loop owns and the counts (an apply that left one out would drop it): a visit's counts go with the
condition it writes (a gang's release, its Scheduled), and on their own after the visit only when it wrote none, at
most every COUNTS_EVERY after the last write that carried them.
What was written is remembered (`memory`), so a second write of the same state costs nothing. Events name the
PodGroup and, when another object owns it, that owner too, where `kubectl describe job` shows them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys, schema
from phalanx.kube.client import Kube, all_answered
from phalanx.owners.seam import OwnerKind
from phalanx.scheduling import accessors, conditions
from phalanx.scheduling.memory import Memory

logger = logging.getLogger("phalanx.scheduling.loop")

LOOP_CONDITIONS = (keys.INITIALLY_SCHEDULED, keys.DISRUPTION_TARGET)
"""The conditions the loop owns (the Job controller owns PodsGated)."""
COUNTS_EVERY = 5.0
"""Seconds after any write of a group's counts (on their own or with a condition) before they are written on their
own again: a gang binding reports its bound members in its Scheduled, not in a write per bind (in the 5,000-node
burst, 1.5 of each gang's 5.5 status applies were counts on their own)."""
QUIET_FOR = 10.0
"""Seconds after the loop first met a group during which it writes neither the group's counts on their own nor that
it waits for quorum (`quiet`), as kube-scheduler writes nothing of a pod that waits for its claims: a gang of a burst
has its members and claims within seconds and its first write is its release, which carries its counts (a lone
gang on the test cluster had "waiting for quorum" as the first of its seven PodGroup writes)."""


class Status:
    def __init__(self, kube: Kube, memory: Memory, owner: OwnerKind) -> None:
        self.kube = kube
        self.memory = memory
        self.owner = owner

    def want(self, pod_group: Mapping[str, Any], members: int, bound: int, late: int) -> None:
        """status.members, .bound and .lateMembers (members behind the gate of a group already placed: a Job's
        replacements, a labelled pod created after the release) as a visit finds them, before its action: any apply
        of its status carries them, and `counters` writes them after it if none did."""
        self.memory.of(pod_group["metadata"]["uid"]).counts = {"members": members, "bound": bound, "lateMembers": late}

    async def counters(self, pod_group: Mapping[str, Any]) -> None:
        """After a visit's action: the counts it found (`want`), when no write of its own carried them, at most every
        COUNTS_EVERY (the loop wakes for them when due)."""
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        if remembered.counts is None or remembered.counts == self._written(pod_group):
            remembered.counts_due = False
            return
        if time.monotonic() - remembered.counts_at < COUNTS_EVERY or self.quiet(pod_group):
            remembered.counts_due = True
            return
        await self._apply(pod_group, self._owned(pod_group))

    def quiet(self, pod_group: Mapping[str, Any]) -> bool:
        """Whether the loop met the group less than QUIET_FOR ago: until then only a change of its state is written
        (a release, Unschedulable, ...), never its counts alone nor its wait for quorum."""
        return time.monotonic() < self.memory.of(pod_group["metadata"]["uid"]).met_at + QUIET_FOR

    def _written(self, pod_group: Mapping[str, Any]) -> dict[str, int] | None:
        """The counts as this loop last wrote them, else as the group shows them (None: it shows none)."""
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        if remembered.counts_written is not None:
            return remembered.counts_written
        current = pod_group.get("status") or {}
        if current.get("members") is None:
            return None
        return {"members": current["members"], "bound": current.get("bound", 0), "lateMembers": current.get("lateMembers", 0)}

    def _owned(self, pod_group: Mapping[str, Any]) -> list[dict[str, Any]]:
        """The loop's conditions as it last wrote them, else as the group shows them."""
        mine = self.memory.of(pod_group["metadata"]["uid"]).conditions
        shown = [c for c in (pod_group.get("status") or {}).get("conditions") or [] if c["type"] in LOOP_CONDITIONS]
        return [mine.get(c["type"], c) for c in shown] + [c for t, c in mine.items() if t not in {c["type"] for c in shown}]

    async def _apply(self, pod_group: Mapping[str, Any], owned: list[dict[str, Any]]) -> None:
        """The one write of the loop's conditions and counts: `owned` and the counts wanted (else those written)."""
        remembered = self.memory.of(pod_group["metadata"]["uid"])
        counts = remembered.counts or self._written(pod_group) or {}
        if counts:
            remembered.counts_at = time.monotonic()
        await self.kube.apply_status(
            accessors.kind(pod_group),
            pod_group["metadata"]["namespace"],
            pod_group["metadata"]["name"],
            {"conditions": owned, **counts},
            keys.SCHEDULING_LOOP,
        )
        remembered.conditions.update({c["type"]: c for c in owned})
        if counts:
            remembered.counts_written, remembered.counts_due = counts, False

    async def scheduled(
        self, pod_group: dict[str, Any], ok: bool, reason: str, message: str, *, warn: bool = False, readmit: bool = False
    ) -> None:
        await self.condition(pod_group, keys.INITIALLY_SCHEDULED, ok, reason, message, warn=warn, readmit=readmit)

    async def condition(
        self, pod_group: dict[str, Any], type_: str, ok: bool, reason: str, message: str, *, warn: bool = False, readmit: bool = False
    ) -> None:
        """Set one of the loop's conditions; every condition this loop owns, and the counts, go in the same apply."""
        new = conditions.condition(type_, ok, reason, message, pod_group["metadata"].get("generation"))
        merged = conditions.merged(self._owned(pod_group), new, readmit=readmit)
        if merged is None:
            return
        logger.info(
            "%s/%s: %s=%s %s %s", pod_group["metadata"]["namespace"], pod_group["metadata"]["name"], type_, new["status"], reason, message
        )
        await self._apply(pod_group, merged)
        if warn or (ok and type_ == keys.INITIALLY_SCHEDULED):
            await self.event(pod_group, "Warning" if warn else "Normal", reason, message)

    async def event(self, pod_group: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        refs = [{"apiVersion": schema.API_VERSION, "kind": accessors.kind(pod_group), "metadata": pod_group["metadata"]}]
        owner = self.owner.ref(pod_group)
        if owner is not None and owner["metadata"].get("uid") != pod_group["metadata"]["uid"]:  # a group its own owner
            refs.append(owner)
        await all_answered(self.kube.event(ref, type_=type_, reason=reason, message=message) for ref in refs)
