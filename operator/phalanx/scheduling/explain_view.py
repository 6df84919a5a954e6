"""What `explain` reads and what it answers: one list of each kind of object in, rows for a person or a tool out.

Frozen and plain so `explain_text` can render them and a test can compare them whole; `explanation` fills them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]


@dataclass(frozen=True)
class Objects:
    """One list of each kind the operator reads, plus the namespace's Events."""

    nodes: Sequence[JSON] = ()
    pods: Sequence[JSON] = ()
    slices: Sequence[JSON] = ()
    claims: Sequence[JSON] = ()
    classes: Sequence[JSON] = ()
    priorities: Sequence[JSON] = ()
    podgroups: Sequence[JSON] = ()
    budgets: Sequence[JSON] = ()
    taint_rules: Sequence[JSON] = ()
    events: Sequence[JSON] = ()
    owners: Sequence[JSON] = ()
    """The namespace's owners of the group's kind: after a teardown, the owner's status says what it owes."""


@dataclass(frozen=True)
class MemberRow:
    name: str
    state: str
    node: str | None
    devices: tuple[str, ...]
    """pool/device of each device its claims hold."""


@dataclass(frozen=True)
class ShortRow:
    resource: str
    needed: int
    free: int
    total: int


@dataclass(frozen=True)
class NodeRow:
    name: str
    excluded_by: str | None
    """The filter that keeps the group's members off this node (the scheduler's words), or None."""
    free: Mapping[str, str]
    """What the members request, free on this node."""
    devices_free: int
    devices: int
    """Node-local devices of the classes the members' claims ask for: free, and in all."""


@dataclass(frozen=True)
class VictimRow:
    victim: str
    priority: int
    pods: tuple[str, ...]


@dataclass(frozen=True)
class PlanView:
    """The planner's answer for the members waiting now."""

    fits: bool
    fit: int
    members: int
    min_count: int
    message: str
    shortages: tuple[ShortRow, ...] = ()
    blocked: tuple[tuple[str, int], ...] = ()
    unmodelled: tuple[str, ...] = ()
    nowhere: str | None = None
    """Why no node can ever take it (`Short.nowhere`)."""
    placements: tuple[tuple[str, str], ...] = ()
    nodes: tuple[NodeRow, ...] = ()
    network_devices_free: int = 0
    network_devices: int = 0


@dataclass(frozen=True)
class PreemptionView:
    """What preemption would take (a dry run of the loop's search), or why it cannot help, or the one under way."""

    under_way: bool
    victims: tuple[VictimRow, ...] = ()
    reason: str | None = None


@dataclass(frozen=True)
class ConditionRow:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class EventRow:
    age: str
    type: str
    reason: str
    object: str
    message: str


@dataclass(frozen=True)
class LossRow:
    member: str
    cause: str


@dataclass(frozen=True)
class HolderRow:
    resource: str
    holder: str
    held: str
    total: str
    priority: int


@dataclass(frozen=True)
class RoleRow:
    name: str
    min_count: int
    members: int
    bound: int


@dataclass(frozen=True)
class Explanation:
    namespace: str
    kind: str
    """The owner's kind."""
    job: str
    """The owner's name."""
    pod_group: str
    state: str
    """Waiting (quorum not there), Pending, Preempting, Releasing, Running, Disrupted."""
    summary: str
    min_count: int
    members: int
    bound: int
    priority: int
    disruption_mode: str
    topology: str | None
    """The group's topology key (`schedulingConstraints.topology`): every member in one domain of it."""
    devices_below_min_count: int
    """What this group adds to phalanx_incomplete_group_devices."""
    plan: PlanView | None = None
    preemption: PreemptionView | None = None
    losses: tuple[LossRow, ...] = ()
    holders: tuple[HolderRow, ...] = ()
    """Who holds what the group is short of (a shortage that can never be met has none worth naming)."""
    to_run: tuple[str, ...] = ()
    """What would let the group run: capacity to free, a priority to outrank, or that nothing will."""
    job_pods: str | None = None
    """After a teardown: what the Job's status says of the pods it owes, and when its back-off lets them come."""
    queue: str | None = None
    """A gang waiting for its first placement: where it stands in the queue (priority, then age) and who is ahead."""
    member_rows: tuple[MemberRow, ...] = ()
    conditions: tuple[ConditionRow, ...] = ()
    events: tuple[EventRow, ...] = field(default_factory=tuple)
    roles: tuple[RoleRow, ...] = ()
    """A CompositePodGroup's roles (`scheduling.composites`), each against its minimum."""
    others: tuple[str, ...] = ()
    """The owner's other groups (a LeaderWorkerSet's other replicas), each with where it stands (`others`)."""
