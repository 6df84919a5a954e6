"""Groups known to be short: planned again only when capacity they could use is freed, or when they change.

Without this, every watch change (a pod's status, a bind, a lease) would plan
every waiting group again: with G waiting groups on N nodes that is G plans
of O(N) each per change, for answers that cannot have changed.

The rule. Capacity only helps a group that is short when something it could
use appears, so each snapshot the loop builds is reduced to its `Capacity`
(free devices, each node's free resources, labels, taints and
schedulability, the placed pods, the device classes, and the preemption
policy inputs), and compared with the previous one. Every *dimension* in
which the new one offers something the old one did not (`moves`) is a move,
stamped with the epoch of that snapshot. A group found short records:

- its key: the group as the planner saw it (members, their specs and
  claims, minCount, topology) and its priority;
- its verdict: the dimensions it could use (`dimensions_of`), the epoch, and
  the nodes it could use (`eligible`).

It is planned again only when its key differs, or a move since its epoch is
in one of those dimensions (and on one of those nodes, or on none in
particular). Capacity that is only consumed (a bind, another group's
reservation) moves nothing, so a stream of such changes costs one snapshot
per change and one comparison per waiting group. Freed capacity that was
consumed again before the next snapshot was never usable by the group, and a
chain of snapshots with no move only ever shrinks (each is within the
previous), so the group is still short on the last.

The planner is monotone in capacity for this purpose: a group that does not
fit on a snapshot does not fit on one that offers nothing more.

Where. Most capacity is freed on one node: a pod leaves it, a device of its
slice comes back. A group can only use a node its members may go to at all
(node selector, required node affinity, taints, schedulability: `eligible`),
so a move on another node leaves its verdict standing. A thousand gangs waiting
for nodes labelled for them are not planned again each time a pod elsewhere
ends. What can open a node a group could not use before is global: a node's
labels, taints or schedulability (NODES), a pod with anti-affinity terms leaving
(they keep pods off a whole topology domain), new pods (a pod relabelled is one
gone and one new: the terms that read its labels read it afresh), device classes, the
preemption inputs, a device not local to one node. A group whose members count
other pods (pod affinity, anti-affinity, spreading) takes every move as its own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.planner.model import Claim, Group, Snapshot, Taint
from phalanx.planner.nodes import blocking_reason
from phalanx.scheduling import metrics

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

    free_devices: frozenset[tuple[str, str, str, int, str | None, tuple[Taint, ...]]]
    """(driver, pool, device, pool generation, its node if local to one, its taints) of every device not held: a
    republished device counts as new, and so does one whose taints changed (a DeviceTaintRule deleted, a driver
    untainting it), which may open it to a group that did not tolerate them."""
    free: Mapping[str, Mapping[str, int]]
    """Node -> resource -> allocatable minus requested."""
    shape: Mapping[str, Any]
    """Node -> (labels, taints, unschedulable): what decides whether a member may go there at all."""
    pods: frozenset[tuple[str, str, str, bool, Labels]]
    """(namespace, name, node, has anti-affinity terms, labels) of every pod placed: inter-pod rules, spreading and
    host ports see them. A pod relabelled reads as one gone and one added: an anti-affinity term it no longer
    matches, or an affinity term it now matches, may open a node to a group short."""
    classes: Any
    """The device classes, and which extended resource each serves."""
    policy: Any = None
    """The preemption inputs (priority classes, disruption budgets) as the caller fingerprints them."""


class Labels:
    """A placed pod's labels as `Capacity.pods` compares them: by identity first (a snapshot reuses the pods nothing
    changed, labels and all), else by content; hashed by size only, as they sit in a tuple with the pod's name, so a
    hundred thousand pods cost no sorting of their labels per snapshot."""

    __slots__ = ("labels",)

    def __init__(self, labels: Mapping[str, str]) -> None:
        self.labels = labels

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Labels) and (other.labels is self.labels or dict(other.labels) == dict(self.labels))

    def __hash__(self) -> int:
        return len(self.labels)


@dataclass
class Kept:
    """What `capacity` derived from the snapshots before, served again where the next holds the same objects (a
    snapshot reuses each unchanged node's labels and taints, and the published devices while no slice changed).
    At 1,000 nodes and 8,000 devices capacity was a third of the operator's CPU, computed afresh each snapshot."""

    devices: tuple[Any, Any, frozenset[Any]] | None = None
    """(the snapshot's devices, what it held, the free devices): one tuple, replaced whole (two threads may build)."""
    shapes: dict[str, tuple[Any, Any, bool, Any]] = field(default_factory=dict)
    """Node -> (its labels, its taints, unschedulable, its shape)."""


def capacity(snapshot: Snapshot, policy: Any = None, kept: Kept | None = None) -> Capacity:
    free: dict[str, dict[str, int]] = {}
    shape: dict[str, Any] = {}
    shapes = kept.shapes if kept is not None else {}
    for node in snapshot.nodes:
        free[node.name] = {k: v - node.requested.get(k, 0) for k, v in node.allocatable.items()}
        known = shapes.get(node.name)
        if known is None or known[0] is not node.labels or known[1] is not node.taints or known[2] != node.unschedulable:
            known = (node.labels, node.taints, node.unschedulable, (tuple(sorted(node.labels.items())), node.taints, node.unschedulable))
            if kept is not None:
                kept.shapes[node.name] = known
        shape[node.name] = known[3]
    if kept is not None and len(kept.shapes) > 2 * len(snapshot.nodes) + 64:  # nodes gone
        kept.shapes = {name: kept.shapes[name] for name in shape if name in kept.shapes}
    devices = kept.devices if kept is not None else None
    if devices is None or devices[0] is not snapshot.devices or devices[1] != snapshot.held:
        offered = frozenset((*d.id, d.generation, d.node_name, d.taints) for d in snapshot.devices if d.id not in snapshot.held)
        devices = (snapshot.devices, snapshot.held, offered)
        if kept is not None:
            kept.devices = devices
    return Capacity(
        free_devices=devices[2],
        free=free,
        shape=shape,
        pods=frozenset((p.namespace, p.name, p.node, bool(p.anti_affinity), Labels(p.labels)) for p in snapshot.pods),
        classes=(tuple(sorted(snapshot.classes.items())), tuple(sorted(snapshot.extended.items()))),
        policy=policy,
    )


def policy(
    priorities: Iterable[Mapping[str, Any]], budgets: Iterable[Mapping[str, Any]], podgroups: Iterable[Mapping[str, Any]]
) -> tuple[frozenset[Any], frozenset[Any]]:
    """The preemption inputs besides capacity, fingerprinted: every PriorityClass and PodDisruptionBudget by version,
    and every PodGroup whose spec changed since it was made (generation past 1), by its generation.

    A group as made is no news to a group found short: its pods, placed later, are new candidates for eviction, and a
    new pod of lower priority frees no more than it takes, so the most a preemption can free stays what it was (a
    pod that goes is a move of its own). A spec changed (a victim's disruption mode, a preemptor's own policy) may
    decide a preemption either way. Every group's (uid, generation) was fingerprinted before, so each of a thousand
    gangs submitted or deleted planned every short gang again, each with a preemption search over every pod."""
    versions = frozenset((o["metadata"]["uid"], o["metadata"].get("resourceVersion")) for o in (*priorities, *budgets))
    specs = frozenset((g["metadata"]["uid"], generation) for g in podgroups if (generation := g["metadata"].get("generation") or 1) > 1)
    return versions, specs


Move = tuple[str, str | None]
"""(dimension, the node it was freed on, or None: anywhere)."""


def freed(before: Capacity, after: Capacity) -> set[str]:
    """The dimensions in which `after` offers something `before` did not."""
    return {dim for dim, _ in moves(before, after)}


def moves(before: Capacity, after: Capacity) -> set[Move]:
    """What `after` offers that `before` did not, by dimension and by the node it is on where it is on one."""
    out: set[Move] = set()
    out.update((DEVICES, d[4]) for d in after.free_devices - before.free_devices)
    if any(before.shape.get(name) != shape for name, shape in after.shape.items()):
        out.add((NODES, None))  # a new node, or one whose labels, taints or schedulability changed
    for name, resources in after.free.items():
        old = before.free.get(name, {})
        out.update((RESOURCE + k, name) for k, v in resources.items() if v > old.get(k, v - 1))
    out.update((PODS_GONE, None if terms else node) for _, _, node, terms, _ in before.pods - after.pods)
    if not after.pods <= before.pods:
        out.add((PODS_ADDED, None))  # a pod an affinity term wants, or one that evens out a spread
    if after.classes != before.classes:
        out.add((CLASSES, None))
    if after.policy != before.policy:
        out.add((POLICY, None))
    return out


def eligible(group: Group, snapshot: Snapshot) -> frozenset[str] | None:
    """The nodes some member of `group` may go to at all; None (every node) when a member's place depends on other
    pods (pod affinity, anti-affinity, spreading), as a pod leaving one node can open another."""
    if any(m.pod_affinity or m.pod_anti_affinity or m.spread for m in group.members):
        return None
    kinds = {(m.tolerations, tuple(sorted(m.node_selector.items())), m.affinity): m for m in group.members}.values()
    return frozenset(n.name for n in snapshot.nodes if any(blocking_reason(m, n) is None for m in kinds))


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
class Verdict:
    """A group found short: on which question, when (the epoch of moves then), what it could use, and where."""

    key: GroupKey
    epoch: int
    dimensions: frozenset[str]
    nodes: frozenset[str] | None
    """`eligible`: the nodes where a move could help it (None: anywhere)."""


MAX_MOVES = 100_000
"""Moves kept for verdicts older than this many are dropped with those verdicts (their groups are planned again)."""


@dataclass
class Standing:
    """The verdicts of a run of groups, taken together: all still short while none of them was made again or dropped
    since `revision` and no move since `epoch` falls in what one of them could use, where it could use it (the union
    of their dimensions and nodes). One check for a thousand gangs where `still_short` is one each."""

    revision: int
    epoch: int
    uids: frozenset[str]
    verdicts: tuple[Verdict, ...]
    dimensions: frozenset[str]
    nodes: frozenset[str] | None


DROPS_KEPT = 4096
"""Verdicts replaced or dropped that a `Standing` is checked against; one older than those is not known to stand."""


@dataclass
class Shortfalls:
    """The moves of capacity since the oldest verdict, and each short group's verdict."""

    epoch: int = 0
    """Moves on with each snapshot that freed anything."""
    revision: int = 0
    """Moves on with each verdict replaced or dropped (`drops`)."""
    drops: list[tuple[int, str]] = field(default_factory=list)
    """(revision, uid) of each verdict replaced or dropped, oldest first: a `Standing` of it no longer stands."""
    floor: int = 0
    """A `Standing` older than this revision is not known to stand (every verdict dropped, or its drops not kept)."""
    moves: list[tuple[int, str, str | None]] = field(default_factory=list)
    """(epoch, dimension, node or None) of each move, oldest first."""
    last: Capacity | None = None
    short: dict[str, Verdict] = field(default_factory=dict)
    """PodGroup uid (or a memo of the loop's) -> its verdict."""
    unseen: Callable[[], Capacity] | None = None
    """The last snapshot's capacity, not computed: no group was short when it was observed."""

    def observe(self, now: Capacity | Callable[[], Capacity]) -> set[str]:
        """Compare with the previous capacity seen; what was freed is a move. Returns the dimensions freed.

        `now` may come as the function that computes it. While no group is known short there is nothing to compare
        for, so it is computed only if a verdict is remembered on it: a burst of gangs that all fit computes none (40
        ms a snapshot at 5,000 nodes and 40,000 devices, as much as the snapshot's own build)."""
        if callable(now):
            if not self.short:
                self.last, self.unseen = None, now
                self._prune()
                return set()
            now = now()
        self.unseen = None
        found = moves(self.last, now) if self.last is not None else set()
        if found:
            self.epoch += 1
            self.moves.extend((self.epoch, dim, node) for dim, node in sorted(found, key=lambda m: (m[0], m[1] or "")))
        self.last = now
        self._prune()
        return {dim for dim, _ in found}

    def remember(self, uid: str, key: GroupKey, nodes: frozenset[str] | None = None) -> None:
        """The group was found short on the capacity last observed; `nodes`: where a move could help it (`eligible`)."""
        if self.unseen is not None:
            self.last, self.unseen = self.unseen(), None
        if uid in self.short:
            self._dropped(uid)
        self.short[uid] = Verdict(key, self.epoch, dimensions_of(key.group), nodes)

    def still_short(self, uid: str, key: GroupKey) -> bool:
        """True when planning again cannot change the verdict: same group, nothing it could use freed where it could
        use it since. A verdict checked so is carried to the current epoch: the moves before it need no second look."""
        known = self.short.get(uid)
        if known is None:
            return False
        if known.epoch == self.epoch and known.key is key:
            return True  # checked since the last move, on this very question (a cycle asks twice for each gang it passes)
        if known.key is not key:
            if known.key != key:
                metrics.SHORT_REPLANNED.labels(why="changed").inc()
                return False
            known.key = key  # equal: the caller's, which it asks with again, is compared by identity next time
        for epoch, dim, node in reversed(self.moves):
            if epoch <= known.epoch:
                break
            if dim in known.dimensions and (node is None or known.nodes is None or node in known.nodes):
                metrics.SHORT_REPLANNED.labels(why=dim.removeprefix(RESOURCE) if dim.startswith(RESOURCE) else dim).inc()
                return False
        known.epoch = self.epoch
        return True

    def nowhere(self, uid: str, key: GroupKey) -> bool:
        """True when the group's verdict stands and found no node its members may go to at all: it cannot fit even on
        a cluster emptied of devices and pods, and nothing has changed that (a node's labels or taints would)."""
        known = self.short.get(uid)
        return known is not None and known.nodes == frozenset() and self.still_short(uid, key)

    def standing(self, uids: Sequence[str]) -> Standing | None:
        """The verdicts of `uids` taken together (None when one has none)."""
        verdicts = []
        for uid in uids:
            known = self.short.get(uid)
            if known is None:
                return None
            verdicts.append(known)
        nodes: frozenset[str] | None = frozenset()
        for known in verdicts:
            if known.nodes is None:
                nodes = None
                break
            nodes |= known.nodes  # type: ignore[operator]
        dimensions = frozenset().union(*(known.dimensions for known in verdicts))
        return Standing(self.revision, self.epoch, frozenset(uids), tuple(verdicts), dimensions, nodes)

    def stands(self, standing: Standing) -> bool:
        """True when every verdict of `standing` is still short (as `still_short` would say of each), carried to the
        current epoch as that would."""
        if standing.revision != self.revision:
            if standing.revision < self.floor:
                return False
            for revision, uid in reversed(self.drops):
                if revision <= standing.revision:
                    break
                if uid in standing.uids:
                    return False
            standing.revision = self.revision
        if standing.epoch == self.epoch:
            return True
        for epoch, dim, node in reversed(self.moves):
            if epoch <= standing.epoch:
                break
            if dim in standing.dimensions and (node is None or standing.nodes is None or node in standing.nodes):
                return False
        for known in standing.verdicts:
            known.epoch = self.epoch
        standing.epoch = self.epoch
        return True

    def forget(self, uid: str) -> None:
        if self.short.pop(uid, None) is not None:
            self._dropped(uid)

    def clear(self) -> None:
        """Every verdict dropped: room freed for all (devices given back)."""
        self.short.clear()
        self.revision += 1
        self.floor = self.revision
        self.drops.clear()

    def keep_only(self, live: set[str]) -> None:
        """Only the verdicts of live groups stay, with the loop's own memos of each (`UID/members`, `UID/hold`)."""
        for uid in [u for u in self.short if u.partition("/")[0] not in live]:
            del self.short[uid]
            self._dropped(uid)

    def _dropped(self, uid: str) -> None:
        self.revision += 1
        self.drops.append((self.revision, uid))
        if len(self.drops) > DROPS_KEPT:
            del self.drops[: DROPS_KEPT // 2]
            self.floor = self.drops[0][0] - 1

    def _prune(self) -> None:
        """Moves no verdict can still see go; past MAX_MOVES, the oldest verdicts go too."""
        if not self.moves:
            return
        oldest = min((v.epoch for v in self.short.values()), default=self.epoch)
        if len(self.moves) > MAX_MOVES:
            oldest = self.moves[-MAX_MOVES][0]
            for uid in [u for u, v in self.short.items() if v.epoch < oldest]:
                del self.short[uid]
                self._dropped(uid)
        start = next((i for i, (epoch, _, _) in enumerate(self.moves) if epoch > oldest), len(self.moves))
        del self.moves[:start]
