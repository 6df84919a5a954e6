"""The one queue order for everything that competes for devices, and where a group stands in it.

Order: priority first (the group's, from its PriorityClass: higher goes
first), then age (the PodGroup's creation, older first), then name, so two
replicas and `phalanx explain` agree on it. The loop reconciles every group
in this order each cycle; a group's plan that fits is released only if no
group ahead of it, still waiting, could use the same room now
(`phalanx.planner.queue.takes_room`); the waiting line (`Line`) is what this
cycle has seen ahead.

Waiting, for the position shown: a gang not yet placed (no reservation, never
Scheduled) with a member still behind the gate.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.api import keys
from phalanx.planner.model import DeviceId, Group, Snapshot
from phalanx.scheduling import accessors
from phalanx.scheduling.shortfall import GroupKey


def order(pod_group: Mapping[str, Any], priority: int) -> tuple[int, str, str]:
    """The sort key: priority (higher first), then creation (older first), then name."""
    meta = pod_group["metadata"]
    return (-priority, meta.get("creationTimestamp", ""), meta["name"])


def waiting(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> bool:
    """A gang waiting for its first placement: no reservation, never Scheduled, a live member behind the gate."""
    if not accessors.gang(pod_group) or accessors.reservation(pod_group) is not None:
        return False
    for cond in (pod_group.get("status") or {}).get("conditions") or []:
        if cond["type"] == keys.INITIALLY_SCHEDULED and cond["status"] == "True":
            return False
    return any(accessors.gated(p) and accessors.live(p) for p in pods)


def positions(
    podgroups: Iterable[Mapping[str, Any]], pods_of: Mapping[str, Iterable[Mapping[str, Any]]], priority: Callable[[Mapping[str, Any]], int]
) -> dict[str, tuple[int, int]]:
    """PodGroup uid -> (position from 1, how many wait) of every waiting gang, in queue order."""
    line = sorted((g for g in podgroups if waiting(g, pods_of.get(g["metadata"]["uid"], ()))), key=lambda g: order(g, priority(g)))
    return {g["metadata"]["uid"]: (i, len(line)) for i, g in enumerate(line, 1)}


@dataclass(frozen=True)
class Ahead:
    """A group this cycle found waiting (short, preempting, or itself held back), as the planner saw it."""

    pod_group: Mapping[str, Any]
    group: Group
    priority: int
    freed: frozenset[DeviceId] = frozenset()
    """The devices its preemption's victims free: its room once they go (counted free when judging its claim)."""
    memo: str = ""
    """Its key in the loop's shortfall memo (empty: its uid): a group known short needs no plan to say so."""
    key: GroupKey | None = None
    """Its shortfall key as last found short, for a group the cycle passed over (`hints`): what it reads is unchanged
    since, so the key stands and need not be derived again from the snapshot."""

    @property
    def name(self) -> str:
        return f"{self.pod_group['metadata']['namespace']}/{self.pod_group['metadata']['name']}"


@dataclass
class Line:
    """The groups ahead of the one being reconciled: those this cycle found waiting, in the order it met them."""

    ahead: list[Ahead] = field(default_factory=list)
    _joined: set[str] = field(default_factory=set)
    """The uids in `ahead`: a cycle with a thousand groups waiting joins each in O(1), not O(line)."""
    _last: list[Ahead] = field(default_factory=list)
    """The last cycle's line."""
    _before: dict[str, Ahead] | None = None
    """It by uid, read on the first join (a cycle that takes the line whole joins none): a group joining as it did
    then joins as the same `Ahead`, not a new one."""

    def join(
        self,
        pod_group: Mapping[str, Any],
        group: Group,
        priority: int,
        freed: Iterable[DeviceId] = (),
        memo: str = "",
        key: GroupKey | None = None,
    ) -> None:
        uid = pod_group["metadata"]["uid"]
        if uid in self._joined:
            return
        self._joined.add(uid)
        freed = frozenset(freed)
        if self._before is None:
            self._before = {a.pod_group["metadata"]["uid"]: a for a in self._last}
        before = self._before.get(uid)
        same = (
            before is not None
            and before.pod_group is pod_group
            and before.group is group
            and before.key is key
            and (before.priority, before.freed, before.memo) == (priority, freed, memo or uid)
        )
        self.ahead.append(before if same else Ahead(pod_group, group, priority, freed, memo or uid, key))  # type: ignore[arg-type]

    @staticmethod
    def room(snapshot: Snapshot, ahead: Ahead) -> Snapshot:
        """The room a group ahead is judged on: the snapshot, with the devices its victims free counted free."""
        return replace(snapshot, held=snapshot.held - ahead.freed) if ahead.freed else snapshot

    def clear(self) -> None:
        self._last, self._before = self.ahead, None
        self.ahead = []
        self._joined = set()
