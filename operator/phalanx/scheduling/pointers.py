"""A gated member points at its group: one Event per pod that `kubectl describe pod` shows.

A pod held by the gang gate shows only `SchedulingGated` to a user who
looks at the pod, not that it waits for a gang, which one, or where to ask
why. Each gated member of a gang that waits gets one Event naming its
PodGroup and the `explain` command. A gang waits once a visit found it so
(its PodGroupInitiallyScheduled False), as kube-scheduler's FailedScheduling
follows an attempt, not a place in the queue: at once when it cannot be
placed (Unschedulable), after `WAITED` when it lacks members (its owner has
not made minCount of them). A gang with its members on its way (queued for
its turn, preempting) gets none, as kube-scheduler writes none for a pod in
its queue: in a burst of 1,000 gangs at 5,000 nodes, the Events on gangs
queued for their turn (about 2,000 in a slow run) took the API server from
the releases and so queued more gangs for longer. One per pod, not per
cycle: the Event's name is derived from the pod's uid, so a restart or a
second replica finds it there (AlreadyExists) instead of writing it again,
and the pods already done are remembered until they go.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Container, Iterable, Mapping, Sized
from typing import Any

from phalanx.api import keys, times
from phalanx.kube.client import Kube, all_answered
from phalanx.scheduling import accessors, conditions

logger = logging.getLogger(__name__)

REASON = "WaitingForGang"
PER_CYCLE = 64
"""Events written per cycle at most: the cycle awaits them before it plans any group, and 1,000 gangs of 3 submitted
at once made 3,000 at once, which kept every cycle (and the Lease renewal, on the same event loop) waiting for
minutes (`./task bench -- --scale`). The rest go on the next cycles."""
WAITED = 60.0
"""Seconds a gang short of members waits for them before the members it has are pointed: in a burst, an owner makes
its pods within seconds."""


def event_name(pod: Mapping[str, Any]) -> str:
    """Unique per pod (its uid), a valid Event name whatever the pod's name's length."""
    return f"{pod['metadata']['name'][:200]}.{pod['metadata']['uid']}.gang"


def message(pod_group: Mapping[str, Any], owner: str | None) -> str:
    """`owner`: the name of the group's owner, which explain takes (else the PodGroup's)."""
    meta = pod_group["metadata"]
    job = owner or meta["name"]
    return (
        f"member of PodGroup {meta['namespace']}/{meta['name']} (gang, minCount {accessors.min_count(pod_group)}): held by "
        f"{keys.SCHEDULING_GATE} until the whole group can be placed; why it waits: "
        f"kubectl phalanx explain {job} -n {meta['namespace']}"
    )


def gated_members(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The live members behind the gate of a gang a visit found waiting (its PodGroupInitiallyScheduled False; none
    for a basic group): those a pointer may be due on (`due`). Depends on the group and its pods alone: the loop
    keeps it."""
    waiting = conditions.find(pod_group, keys.INITIALLY_SCHEDULED)
    if not accessors.gang(pod_group) or waiting is None or waiting.get("status") != "False":
        return []
    return [p for p in pods if accessors.live(p) and accessors.gated(p)]


def due(pod_group: Mapping[str, Any], gated: Sized) -> bool:
    """Whether the `gated` members of a gang a visit found waiting (`gated_members`) are pointed now: at once when it
    cannot be placed, after `WAITED` (since its condition turned False; one written without a time counts as long
    past) while it lacks members, never while it has them and is on its way."""
    waiting = conditions.find(pod_group, keys.INITIALLY_SCHEDULED) or {}
    if waiting.get("reason") == keys.UNSCHEDULABLE:
        return True
    return len(gated) < accessors.min_count(pod_group) and times.waited(waiting.get("lastTransitionTime")) >= WAITED


class Pointers:
    def __init__(self, kube: Kube, owner: Callable[[Mapping[str, Any]], str | None]) -> None:
        """`owner`: a group's owner's name, as its workload kind records it (`owners.seam`)."""
        self.kube = kube
        self.owner = owner
        self.done: set[str] = set()
        """Uids of pods whose Event exists: not written again while they live."""
        self._complete: dict[str, list[Mapping[str, Any]]] = {}
        """PodGroup uid -> its members as last given, every one of them pointed: the loop gives the same list while
        the group and its pods are unchanged (`membership`), so a thousand waiting gangs are not looked through again."""

    async def point(self, groups: Iterable[tuple[Mapping[str, Any], list[Mapping[str, Any]]]]) -> int:
        """An Event on each member given (`gated_members` of each group) not yet pointed, of each group `due`,
        PER_CYCLE at most; returns how many were written. Raises on any refusal but "exists" (the pods not written are
        tried on the next cycle)."""
        todo = []
        complete: dict[str, list[Mapping[str, Any]]] = {}
        for pod_group, pods in groups:
            uid = pod_group["metadata"]["uid"]
            if self._complete.get(uid) is pods:  # the same members as when each was found pointed: done only grows
                complete[uid] = pods
                continue
            if pods and not due(pod_group, pods):
                continue  # looked at again on the next cycle: it may be due by then
            missing = [(pod_group, pod) for pod in pods if pod["metadata"]["uid"] not in self.done]
            if missing:
                todo += missing
            else:
                complete[uid] = pods
        self._complete = complete
        written = await all_answered(self._point(pod_group, pod) for pod_group, pod in todo[:PER_CYCLE])
        return sum(written)

    async def _point(self, pod_group: Mapping[str, Any], pod: Mapping[str, Any]) -> bool:
        ref = {"apiVersion": "v1", "kind": "Pod", "metadata": pod["metadata"]}
        created = await self.kube.event_once(
            ref, name=event_name(pod), type_="Normal", reason=REASON, message=message(pod_group, self.owner(pod_group))
        )
        self.done.add(pod["metadata"]["uid"])
        return created

    def keep_only(self, live: Container[str]) -> None:
        """Pods that are gone are forgotten."""
        self.done = {uid for uid in self.done if uid in live}
