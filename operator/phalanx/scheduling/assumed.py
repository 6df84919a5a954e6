"""Releases under way: several at once, each counted as done by the plans made meanwhile.

A release is a chain of round trips: its record, every claim's allocation, the
wait for the watch to show them, every member's pin and gate lift, the record
again. One at a time, a burst of small gangs waits for each chain in turn
(about 270 ms a gang of 3 at 1,000 nodes, 80 s for 300 gangs), while the API
server has room for several. So up to `concurrency` releases run at once, as
kube-scheduler's binding cycles run beside its scheduling cycle, and the loop
goes on planning the next group in the line.

A plan made meanwhile sees each release under way as done, as kube-scheduler's
assume cache does: its members on their nodes, its claims' devices taken (a
share consuming its capacity), the devices planned for its extended resources
held. The snapshot builder applies that (`snapshots.build`) without counting
anything twice: a claim the watch already shows allocated is counted from the
watch, and a member is counted from its assumption only while still gated
(released, it is counted from its pin). A release ends only once the watch
shows its claims and its pins, so dropping its assumption then changes nothing
a plan sees; an aborted release's rollback frees its room when it ends, which
is a move of capacity like any other.

Order is kept: each group is planned, and checked against the groups ahead of
it, before the next one is looked at, on a snapshot with every earlier release
counted; and two releases under way never plan the same device, so neither
meets the other in its verification. A cycle ends only when every release it
began has ended: the next cycle never meets a group mid-release.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from phalanx.planner import Fits
from phalanx.planner.model import DeviceId, frozen_map
from phalanx.scheduling import metrics

Share = tuple[DeviceId, Mapping[str, Decimal]]


CONCURRENCY = 8
"""Releases written at once by default (`--release-concurrency`): 1,000 gangs of 3 on 5,000 nodes went at 0.61x of
kube-scheduler alone's pace with 4 and 0.78x with 8 (docs/performance.md), each release a chain of round trips."""


@dataclass(frozen=True)
class ClaimUse:
    """What one claim of a release under way will hold once written."""

    uid: str
    whole: tuple[DeviceId, ...]
    shares: tuple[Share, ...] = ()


@dataclass(frozen=True)
class Assumption:
    """Releases under way, as the snapshot counts them."""

    pods: Mapping[str, str]
    """Member uid -> the node it is planned on."""
    claims: Mapping[tuple[str, str], ClaimUse]
    """(namespace, name) -> what the claim will hold."""
    planned: frozenset[DeviceId] = frozenset()
    """Devices planned for members' extended resources, which kube-scheduler allocates once they are bound."""


NOTHING = Assumption(frozen_map(), frozen_map())


def of(fits: Fits) -> Assumption:
    """A plan as its release will leave the cluster: admin access takes nothing, a share consumes capacity."""
    claims = {
        (c.namespace, c.name): ClaimUse(
            c.uid,
            tuple(r.device_id for r in c.results if r.share_id is None and not r.admin_access),
            tuple((r.device_id, frozen_map(r.consumed)) for r in c.results if r.share_id is not None and not r.admin_access),
        )
        for c in fits.claims
    }
    planned = frozenset(r.device_id for c in fits.planned for r in c.results if not r.admin_access)
    return Assumption(frozen_map({m.uid: node for m, node in fits.placements}), frozen_map(claims), planned)


def merged(assumptions: Iterable[Assumption]) -> Assumption:
    pods: dict[str, str] = {}
    claims: dict[tuple[str, str], ClaimUse] = {}
    planned: set[DeviceId] = set()
    for a in assumptions:
        pods.update(a.pods)
        claims.update(a.claims)
        planned |= a.planned
    return Assumption(frozen_map(pods), frozen_map(claims), frozenset(planned)) if pods or claims or planned else NOTHING


class Releases:
    """The releases under way and what they assume; at most `concurrency` at once (1: one after another)."""

    def __init__(self, concurrency: int = CONCURRENCY) -> None:
        if concurrency < 1:
            raise ValueError(f"release concurrency must be at least 1, got {concurrency}")
        self.concurrency = concurrency
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._assumed: dict[str, Assumption] = {}
        self._merged: Assumption = NOTHING
        self.version = 0
        """Moves on whenever an assumption comes or goes: part of the key a snapshot is built for."""

    def assumed(self) -> Assumption:
        return self._merged

    def under_way(self) -> int:
        return len(self._tasks)

    async def start(self, uid: str, fits: Fits, release: Coroutine[Any, Any, None]) -> None:
        """Begin `release` for the group `uid`, counted as done from now; returns once fewer than `concurrency`
        releases are under way, so with 1 it returns when this one has ended."""
        if self._tasks:
            metrics.RELEASES_OVERLAPPED.inc()
        self._assumed[uid] = of(fits)
        self._moved()
        task = asyncio.create_task(release, name=f"release-{uid}")
        self._tasks[uid] = task
        task.add_done_callback(lambda _: self._ended(uid))
        metrics.RELEASES_UNDER_WAY.set(len(self._tasks))
        while len(running := [t for t in self._tasks.values() if not t.done()]) >= self.concurrency:
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)

    async def drain(self) -> None:
        """Until every release under way has ended."""
        if self._tasks:
            await asyncio.gather(*self._tasks.values(), return_exceptions=True)

    def cancel(self) -> None:
        """Stop every release under way where it is: its record says how far it got, and the next cycle (or the
        next leader) finishes or undoes it, as after a crash."""
        for task in self._tasks.values():
            task.cancel()

    def _ended(self, uid: str) -> None:
        self._tasks.pop(uid, None)
        self._assumed.pop(uid, None)
        self._moved()
        metrics.RELEASES_UNDER_WAY.set(len(self._tasks))

    def _moved(self) -> None:
        self.version += 1
        self._merged = merged(self._assumed.values())
