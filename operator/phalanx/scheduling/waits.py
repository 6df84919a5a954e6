"""Gangs waiting for room: how many, and for how long, by priority class (the `phalanx_podgroups_waiting` and
`phalanx_podgroup_oldest_wait_seconds` gauges).

A gang that can never fit is not planned again until something changes, so the attempt counters stay flat on a quiet
cluster; these gauges are set on every cycle (at least every 5 s) from what the loop already holds, so an alert on
them fires however long nothing changes.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api import keys
from phalanx.scheduling import accessors, conditions, metrics

Wait = tuple[int, float]
"""(gangs waiting, seconds the oldest of them has waited)."""


def _scheduled(pod_group: Mapping[str, Any]) -> bool:
    return conditions.true(pod_group, keys.INITIALLY_SCHEDULED)


def current(waiting: Iterable[tuple[Mapping[str, Any], str | None]], quorum_at: Mapping[str, float], now: float) -> dict[str, Wait]:
    """Priority class ("" for none) -> its gangs waiting. `waiting`: each group with the class it waits in
    (`priority_class`; None: it does not wait). A gang waits from the loop first seeing its quorum (`quorum_at`,
    monotonic like `now`)."""
    return at(since(waiting, quorum_at), now)


def since(waiting: Iterable[tuple[Mapping[str, Any], str | None]], quorum_at: Mapping[str, float]) -> dict[str, Wait]:
    """Priority class -> (its gangs waiting, when the oldest began to wait): what `current` reads of the groups, which
    the loop keeps while they and its memory stand, so that only the clock is read each cycle."""
    out: dict[str, Wait] = {}
    for pod_group, name in waiting:
        began = quorum_at.get(pod_group["metadata"]["uid"])
        if began is None or name is None:
            continue
        count, oldest = out.get(name, (0, math.inf))
        out[name] = (count + 1, min(oldest, began))
    return out


def at(since: Mapping[str, Wait], now: float) -> dict[str, Wait]:
    """`since`, with the oldest wait in seconds at `now`."""
    return {name: (count, max(0.0, now - began)) for name, (count, began) in since.items()}


def priority_class(pod_group: Mapping[str, Any], pods: list[Mapping[str, Any]]) -> str | None:
    """The priority class a gang waits in ("" for none), if it has minCount gated live members and is neither released
    nor scheduled; None if it does not wait. Depends on the group and its pods alone: the loop keeps it."""
    if not accessors.gang(pod_group) or _scheduled(pod_group):
        return None
    reservation = accessors.reservation(pod_group)
    if reservation is not None and reservation.state == "Released":
        return None
    if sum(1 for p in pods if accessors.live(p) and accessors.gated(p)) < accessors.min_count(pod_group):
        return None
    return pod_group["spec"].get("priorityClassName") or ""


_published: set[str] = {""}
"""Priority classes the gauges have shown: kept at 0 once none of theirs waits (bounded by the PriorityClasses)."""


def publish(current: Mapping[str, Wait]) -> None:
    """Sets both gauges for every priority class seen so far; "" is always there, so "nothing waits" is a 0, not no data."""
    _published.update(current)
    for name in _published:
        count, oldest = current.get(name, (0, 0.0))
        metrics.PODGROUPS_WAITING.labels(priority_class=name).set(count)
        metrics.OLDEST_WAIT.labels(priority_class=name).set(oldest)
