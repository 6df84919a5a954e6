"""What the loop remembers of each PodGroup between cycles: one record per group, forgotten with the group.

Each field is something the watch may not show yet (a write of this
process), or a time this process first saw something (monotonic), or a
read it need not repeat while nothing it depends on changed.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from phalanx.api import schema
from phalanx.scheduling.shortfall import GroupKey


@dataclass
class GroupMemory:
    conditions: dict[str, dict[str, Any]] = field(default_factory=dict)
    """The conditions this loop last wrote."""
    backoff: tuple[float, float] | None = None
    """(not before, last delay): a group whose reconcile failed waits before it is tried again."""
    quorum_at: float | None = None
    """When this loop first saw its quorum waiting, until the group is released."""
    owner: tuple[frozenset[str], Any] | None = None
    """(its lost members, its owner as read when they were lost)."""
    counts: dict[str, int] | None = None
    """Its member counts as its last visit found them (`status.Status.want`): every apply of its status carries them."""
    counts_written: dict[str, int] | None = None
    """The member counts this loop last wrote."""
    met_at: float = field(default_factory=time.monotonic)
    """When this loop first met the group: its counts, and its wait for quorum, are written no sooner than
    `Memory.quiet_for` after (`status.Status.quiet`)."""
    counts_at: float = -math.inf
    """When this loop last wrote its member counts, on their own or with a condition (`status.Status._apply`)."""
    counts_due: bool = False
    """Its counts changed since that write: written once the interval has passed."""
    intended: tuple[frozenset[str], int | None] | None = None
    """(the members waiting to join it, the minCount its owner said when they were first seen)."""
    victims_gone_at: float | None = None
    """When this loop first saw every victim of its preemption gone."""
    lost_written: list[dict[str, str]] | None = None
    """The `status.lost` this loop last wrote."""
    readiness: schema.Readiness | None = None
    """The `status.readiness` this loop last wrote."""
    due: float | None = None
    """When its ready deadline or back-off ends: the loop wakes for it."""
    unbound: Mapping[str, float] = field(default_factory=dict)
    """Pod uid -> when this loop first saw it released (pinned, gate lifted) and not bound, for a group past its
    first placement: its bind deadline counts from then (a restart gives it one deadline more, never less)."""
    ungated_told: frozenset[str] = frozenset()
    """Members of a group of its own admitted without the gate that a Warning already named."""
    quiet: GroupKey | None = None
    """Its last visit found it short and wrote nothing (its shortfall key): passed over while nothing marks it and
    nothing it could use is freed (`loop.SchedulingLoop._passed_over`)."""
    settled: bool = False
    """A released gang whose last visit found it running with nothing to do (nothing lost, nothing waiting, no
    deadline ahead): passed over while nothing marks it and no node changes."""
    since: int = 0
    """The mark (`hints.Hints.seq`) as the cycle whose visit set `quiet` or `settled` read the group: a mark newer
    than it is a write that visit did not see."""

    writes: ClassVar[int] = 0
    """Moves with every field set on any record to another value (but the memos no summary reads, set on each visit
    or pass): what is summed over the records (`Memory.summary`) is summed again only then."""

    def back_off(self) -> float:
        """Not tried again for a while (doubling from 0.5 s to 60 s), so a group that keeps failing cannot spin; the
        delay."""
        delay = min(60.0, 2 * (self.backoff or (0.0, 0.25))[1])
        self.backoff = (time.monotonic() + delay, delay)
        return delay

    def __setattr__(self, name: str, value: Any) -> None:
        changed = self.__dict__.get(name, _UNSET) is not value
        object.__setattr__(self, name, value)
        if changed and name not in _UNSUMMED:
            GroupMemory.writes += 1


_UNSET = object()
_UNSUMMED = frozenset({"since", "settled", "counts", "counts_written"})


@dataclass(frozen=True)
class Summary:
    """What the loop reads across every record each cycle, read once per state of the records: a thousand gangs
    waiting made each cycle walk (and copy) all of theirs five times."""

    wake: float
    """The earliest a record asks the loop to wake (monotonic): a back-off ending, counts due, a deadline."""
    due: float
    """The earliest deadline (`due`): past it, it is cleared."""
    backoffs: tuple[tuple[str, float], ...]
    """(uid, not before) of each record backing off."""
    quorum_at: Mapping[str, float]
    """uid -> when the loop first saw its quorum, of each group still waiting for its release."""
    quiet: bool
    """Some group is passed over while quiet."""


class Memory:
    """PodGroup uid -> its record."""

    def __init__(self, counts_every: float = 0.0, quiet_for: float = 0.0) -> None:
        self._groups: dict[str, GroupMemory] = {}
        self.counts_every = counts_every
        """Seconds between two writes of a group's counts: counts due wake the loop that long after the last."""
        self.quiet_for = quiet_for
        """Seconds after the loop first met a group before its counts are written: due, they wake the loop then."""
        self._dropped = 0
        self._summary: tuple[tuple[int, int], Summary] | None = None

    def of(self, uid: str) -> GroupMemory:
        """The group's record, made on first use."""
        found = self._groups.get(uid)
        if found is None:
            found = self._groups[uid] = GroupMemory()
        return found

    def get(self, uid: str) -> GroupMemory | None:
        return self._groups.get(uid)

    def keep_only(self, live: set[str]) -> None:
        """The records of PodGroups that are gone go with them."""
        kept = {uid: m for uid, m in self._groups.items() if uid in live}
        if len(kept) != len(self._groups):
            self._groups = kept
            self._dropped += 1

    def summary(self) -> Summary:
        version = (GroupMemory.writes, self._dropped)
        if self._summary is None or self._summary[0] != version:
            records = self._groups.values()
            backoffs = tuple((uid, m.backoff[0]) for uid, m in self._groups.items() if m.backoff is not None)
            due = min((m.due for m in records if m.due is not None), default=math.inf)
            counts = min(
                (max(m.counts_at + self.counts_every, m.met_at + self.quiet_for) for m in records if m.counts_due), default=math.inf
            )
            summary = Summary(
                wake=min(due, counts, min((t for _, t in backoffs), default=math.inf)),
                due=due,
                backoffs=backoffs,
                quorum_at={uid: m.quorum_at for uid, m in self._groups.items() if m.quorum_at is not None},
                quiet=any(m.quiet is not None for m in records),
            )
            self._summary = (version, summary)
        return self._summary[1]

    def items(self) -> Iterator[tuple[str, GroupMemory]]:
        return iter(list(self._groups.items()))
