"""Groups known to be short: planned again only when capacity they could use is freed, or when they change.

Without this, every watch change (a pod's status, a bind, a lease) would plan
every waiting group again: with G waiting groups on N nodes that is G plans
of O(N) each per change, for answers that cannot have changed.

The rule. Capacity only helps a group that is short when something it could
use appears, so each snapshot the loop builds is reduced to its `Capacity`
(free devices, each node's free resources, labels, taints and
schedulability, the placed pods, the device classes, and the preemption
policy inputs), and compared with the previous one. Every *dimension* in
which the new one offers something the old one did not (`freed`) moves that
dimension's generation on. A group found short records:

- its key: the group as the planner saw it (members, their specs and
  claims, minCount, topology) and its priority;
- its "short on" signature: the dimensions it could use (`dimensions_of`) and
  their generations at the time.

It is planned again only when its key differs, or one of those generations
moved. Capacity that is only consumed (a bind, another group's reservation)
moves nothing, so a stream of such changes costs one snapshot per change and
one comparison per waiting group. Freed capacity that was consumed again
before the next snapshot was never usable by the group, and a chain of
snapshots with no generation moved only ever shrinks (each is within the
previous), so the group is still short on the last.

The planner is monotone in capacity for this purpose: a group that does not
fit on a snapshot does not fit on one that offers nothing more.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from phalanx.planner.model import Claim, Group, Snapshot

DEVICES = "devices"
NODES = "nodes"
PODS_GONE = "pods-gone"
PODS_ADDED = "pods-added"
CLASSES = "classes"
POLICY = "policy"
RESOURCE = "resource:"
"""Prefix of a node resource's dimension, e.g. `resource:cpu`."""
NATIVE = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
"""Resources no DeviceClass serves (nor hugepages-*): any other a member asks for may be served by devices."""


@dataclass(frozen=True)
class Capacity:
    """What a snapshot offers a waiting group, reduced to what can be compared cheaply."""

    free_devices: frozenset[tuple[str, str, str, int]]
    """(driver, pool, device, pool generation) of every device not held: a republished device counts as new."""
    free: Mapping[str, Mapping[str, int]]
    """Node -> resource -> allocatable minus requested."""
    shape: Mapping[str, Any]
    """Node -> (labels, taints, unschedulable): what decides whether a member may go there at all."""
    pods: frozenset[tuple[str, str, str]]
    """(namespace, name, node) of every pod placed: inter-pod rules, spreading and host ports see them."""
    classes: Any
    """The device classes, and which extended resource each serves."""
    policy: Any = None
    """The preemption inputs (priority classes, disruption budgets) as the caller fingerprints them."""


def capacity(snapshot: Snapshot, policy: Any = None) -> Capacity:
    free: dict[str, dict[str, int]] = {}
    shape: dict[str, Any] = {}
    for node in snapshot.nodes:
        free[node.name] = {k: v - node.requested.get(k, 0) for k, v in node.allocatable.items()}
        shape[node.name] = (tuple(sorted(node.labels.items())), node.taints, node.unschedulable)
    return Capacity(
        free_devices=frozenset((*d.id, d.generation) for d in snapshot.devices if d.id not in snapshot.held),
        free=free,
        shape=shape,
        pods=frozenset((p.namespace, p.name, p.node) for p in snapshot.pods),
        classes=(tuple(sorted(snapshot.classes.items())), tuple(sorted(snapshot.extended.items()))),
        policy=policy,
    )


def freed(before: Capacity, after: Capacity) -> set[str]:
    """The dimensions in which `after` offers something `before` did not."""
    out: set[str] = set()
    if not after.free_devices <= before.free_devices:
        out.add(DEVICES)
    for name, shape in after.shape.items():
        if before.shape.get(name) != shape:
            out.add(NODES)  # a new node, or one whose labels, taints or schedulability changed
            break
    for name, resources in after.free.items():
        old = before.free.get(name, {})
        out.update(RESOURCE + k for k, v in resources.items() if v > old.get(k, v - 1))
    if not before.pods <= after.pods:
        out.add(PODS_GONE)
    if not after.pods <= before.pods:
        out.add(PODS_ADDED)  # a pod an affinity term wants, or one that evens out a spread
    if after.classes != before.classes:
        out.add(CLASSES)
    if after.policy != before.policy:
        out.add(POLICY)
    return out


def dimensions_of(group: Group) -> frozenset[str]:
    """What a group could use: the nodes, the pods leaving, the preemption inputs always; devices and classes if
    it claims any, or asks for an extended resource (a DeviceClass may serve it); each resource its members request
    (and a pod slot); new pods if an affinity or spread counts them."""
    dims = {NODES, PODS_GONE, POLICY, RESOURCE + "pods"}
    for member in group.members:
        dims.update(RESOURCE + k for k in member.requests)
        if member.claims or any(k not in NATIVE and not k.startswith("hugepages-") for k in member.requests):
            dims.update((DEVICES, CLASSES))
        if member.pod_affinity or member.spread:
            dims.add(PODS_ADDED)
    return frozenset(dims)


@dataclass(frozen=True)
class GroupKey:
    """Everything about the group itself that a plan reads: a change to any of it is a new question."""

    group: Group
    claims: tuple[Claim | None, ...]
    priority: int


def group_key(group: Group, snapshot: Snapshot, priority: int) -> GroupKey:
    claims = tuple(snapshot.claims.get((m.namespace, c)) for m in group.members for c in m.claims)
    return GroupKey(group, claims, priority)


@dataclass
class Shortfalls:
    """The generations of each dimension, and each short group's key and signature."""

    generations: dict[str, int] = field(default_factory=dict)
    last: Capacity | None = None
    short: dict[str, tuple[GroupKey, tuple[tuple[str, int], ...]]] = field(default_factory=dict)
    """PodGroup uid -> (key, ((dimension, generation at the verdict), ...))."""

    def observe(self, now: Capacity) -> set[str]:
        """Compare with the previous capacity seen; the dimensions freed move on. Returns them."""
        moved = freed(self.last, now) if self.last is not None else set()
        for dim in moved:
            self.generations[dim] = self.generations.get(dim, 0) + 1
        self.last = now
        return moved

    def remember(self, uid: str, key: GroupKey) -> None:
        """The group was found short on the capacity last observed."""
        self.short[uid] = (key, tuple((d, self.generations.get(d, 0)) for d in sorted(dimensions_of(key.group))))

    def still_short(self, uid: str, key: GroupKey) -> bool:
        """True when planning again cannot change the verdict: same group, nothing it could use freed since."""
        known = self.short.get(uid)
        if known is None or known[0] != key:
            return False
        return all(self.generations.get(d, 0) == gen for d, gen in known[1])

    def forget(self, uid: str) -> None:
        self.short.pop(uid, None)

    def keep_only(self, live: set[str]) -> None:
        for uid in [u for u in self.short if u not in live]:
            del self.short[uid]
