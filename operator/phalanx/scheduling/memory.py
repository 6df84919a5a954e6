"""What the loop remembers of each PodGroup between cycles: one record per group, forgotten with the group.

Each field is something the watch may not show yet (a write of this
process), or a time this process first saw something (monotonic), or a
read it need not repeat while nothing it depends on changed.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import schema
from phalanx.scheduling.quiet import Quiet


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
    counts_at: float = -math.inf
    """When this loop last wrote its member counts."""
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
    ungated_told: frozenset[str] = frozenset()
    """Members of a group of its own admitted without the gate that a Warning already named."""
    quiet: Quiet | None = None
    """Its last visit found it short and wrote nothing: passed over while nothing it reads changes (`quiet`)."""
    quiet_at: tuple[Any, ...] | None = None
    """The stores that memo reads, by their `written`, as the cycle that last found it true began: while they stand,
    it is true without reading it again."""


class Memory:
    """PodGroup uid -> its record."""

    def __init__(self) -> None:
        self._groups: dict[str, GroupMemory] = {}

    def of(self, uid: str) -> GroupMemory:
        """The group's record, made on first use."""
        return self._groups.setdefault(uid, GroupMemory())

    def get(self, uid: str) -> GroupMemory | None:
        return self._groups.get(uid)

    def keep_only(self, live: set[str]) -> None:
        """The records of PodGroups that are gone go with them."""
        self._groups = {uid: m for uid, m in self._groups.items() if uid in live}

    def items(self) -> Iterator[tuple[str, GroupMemory]]:
        return iter(list(self._groups.items()))
