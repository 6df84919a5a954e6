"""Where a group stands, from one cycle's facts: the loop acts on it, `explain` reports it, one ladder for both.

Pure: the facts are read (and the owner looked up) by the caller; nothing
here reads the API or the clock. The order of the ladder is the order of
precedence: an unfinished reservation is resumed before anything else is
judged, an owner that suspended or finished overrides its members' losses,
a group never placed waits for quorum before it is planned.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from phalanx.api import keys
from phalanx.scheduling import accessors, composites, conditions


class Phase(enum.StrEnum):
    RESUMING = "Resuming"
    """A reservation recorded but not finished (the operator restarted mid-release): complete it or roll it back."""
    EACH = "MemberByMember"
    """A basic group, or a scheduled one with no record: each member is released as it comes."""
    SUSPENDED = "Suspended"
    """Members lost because their owner was suspended after the release: torn down, admitted again once resumed."""
    FINISHED = "Finished"
    """Members lost because their owner finished (its success or failure policy ended them): nothing to take down."""
    GOING = "OwnerGoing"
    """Members lost in disruptionMode all while their owner is being deleted: its pods go with it."""
    LOST = "Lost"
    """A released gang lost a member in disruptionMode all (bound yet or not): the whole group is torn down."""
    BELOW_MIN = "BelowMinCount"
    """A scheduled gang runs below minCount (disruptionMode single): reported, late members still released."""
    RUNNING = "Running"
    """A scheduled gang at or above minCount: late members released as they fit."""
    AWAITING_BIND = "AwaitingBind"
    """Released, minCount not bound yet: Scheduled once they are, torn down at the bind deadline."""
    IDLE = "Idle"
    """Never placed and no member behind the gate: nothing to do."""
    QUORUM = "WaitingForQuorum"
    """Members behind the gate, fewer than minCount with their claims: waiting for the rest."""
    PLANNABLE = "Plannable"
    """Quorum there: planned on this cycle's snapshot."""
    PREEMPTING = "Preempting"
    """Quorum there and a preemption under way for it: its victims go, then it is planned on the room they left."""


class OwnerState(enum.StrEnum):
    """What the group's owner says, as far as it matters here (only looked up once a member is lost)."""

    ACTIVE = "Active"
    SUSPENDED = "Suspended"
    """Suspended since this incarnation was released: its pods were deleted, its next ones are a new gang."""
    FINISHED = "Finished"
    GONE = "Gone"
    """Deleted, being deleted, or replaced by another of the same name."""


@dataclass(frozen=True)
class Facts:
    gang: bool
    reservation: str | None
    """The recorded reservation's state (`Reserving`, `Released`), or None."""
    scheduled: bool
    """PodGroupInitiallyScheduled is True."""
    lost: bool = False
    """A released member was lost (only judged once the reservation says Released)."""
    owner: OwnerState = OwnerState.ACTIVE
    all_mode: bool = False
    """disruptionMode all."""
    running: int = 0
    """Members bound to a node, plus those that finished their work."""
    done: int = 0
    """Members that finished their work (`disruption.finished`): they count toward minCount, never wait again."""
    min_count: int = 1
    waiting: int = 0
    """Live members behind the gate."""
    ready: int = 0
    """Of those, the ones whose claims all exist."""
    nominated: bool = False
    roles_below: bool = False
    """A role of a composite has fewer members bound than its minimum (`composites.below`)."""

    @property
    def needed(self) -> int:
        """The members still to be placed together for minCount: those done count, at least one (a member waits)."""
        return max(1, self.min_count - self.done)


def classify(facts: Facts) -> Phase:
    if facts.reservation == "Reserving":
        return Phase.RESUMING
    if not facts.gang:
        return Phase.EACH
    released = facts.reservation == "Released"
    if released and facts.lost and facts.owner is OwnerState.SUSPENDED:
        return Phase.SUSPENDED
    if released and facts.lost and facts.owner is OwnerState.FINISHED:
        return Phase.FINISHED
    if facts.scheduled and facts.reservation is None:
        return Phase.EACH
    if released and facts.lost and facts.all_mode:
        # bound or not yet: waiting out the bind deadline would only keep the others' devices from use
        return Phase.GOING if facts.owner is OwnerState.GONE else Phase.LOST
    if facts.scheduled:
        return Phase.BELOW_MIN if facts.running < facts.min_count or facts.roles_below else Phase.RUNNING
    if released:
        return Phase.AWAITING_BIND
    if not facts.waiting:
        return Phase.IDLE
    if facts.ready < facts.needed:
        return Phase.QUORUM
    return Phase.PREEMPTING if facts.nominated else Phase.PLANNABLE


def read(
    pod_group: Mapping[str, Any],
    live: Sequence[Mapping[str, Any]],
    claim: Callable[[str, str], Mapping[str, Any] | None],
    *,
    lost: bool = False,
    owner: OwnerState = OwnerState.ACTIVE,
    done: int = 0,
) -> Facts:
    """The facts of a group from its objects: `live` its members neither terminal nor terminating, `claim` looks a
    ResourceClaim up by namespace and name; the losses and the owner are the caller's to find (judged only once the
    group was released), and the members done (`disruption.finished`), which count toward minCount in every phase."""
    reservation = accessors.reservation(pod_group)
    waiting = [p for p in live if accessors.gated(p)]
    return Facts(
        gang=accessors.gang(pod_group),
        reservation=reservation.state if reservation is not None else None,
        scheduled=conditions.true(pod_group, keys.INITIALLY_SCHEDULED),
        lost=lost,
        owner=owner,
        all_mode=accessors.disrupts_all(pod_group),
        running=sum(1 for p in live if accessors.bound(p)) + done,
        done=done,
        min_count=accessors.min_count(pod_group),
        waiting=len(waiting),
        ready=sum(1 for p in waiting if accessors.claims_ready(p, claim)),
        nominated=accessors.nomination(pod_group) is not None,
        roles_below=bool(composites.below(pod_group, (p for p in live if accessors.bound(p)))),
    )
