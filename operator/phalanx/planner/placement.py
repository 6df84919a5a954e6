"""Placement of a whole group: every member needed for quorum, or none.

`plan(snapshot, group)` returns `Fits` (pod -> node, claim -> devices) or
`Short` (how many members fit and what is short, by how much). The caller's
reaction: on `Fits`, reserve the claims and release the pods as a unit; on
`Short`, report it and plan again when the cluster changes.

Search: a greedy first-fit in packing order (nodes this plan already uses,
then the busiest), which settles the common case of identical members in one
pass; when it falls short of quorum, a depth-first search with symmetry
breaking over identical members and a node budget, exhaustive on small cases.
Upstream's rule for groups larger than minCount: the group goes once minCount
members fit together, and every member that fits goes with it.

Besides node filters, resources and devices, a member must pass what other
pods allow (`phalanx.planner.pods`: pod affinity, topology spread, host
ports), against the cluster's pods and the members placed before it. What
the planner cannot judge it names in `Short.unmodelled` instead of guessing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.planner import nodes as nodefilter
from phalanx.planner import pods as podrules
from phalanx.planner.devices import DeviceMatcher, Result, allocate
from phalanx.planner.model import Claim, ClaimKey, Device, DeviceId, Group, Member, Node, Snapshot

DEFAULT_BUDGET = 20_000


@dataclass(frozen=True)
class ClaimPlan:
    """An allocation to write: results, the node it is pinned to, config copied as the scheduler does."""

    namespace: str
    name: str
    uid: str
    node: str
    results: tuple[Result, ...]
    config: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class Fits:
    placements: tuple[tuple[Member, str], ...]
    claims: tuple[ClaimPlan, ...]

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(node for _, node in self.placements)


@dataclass(frozen=True)
class Shortage:
    resource: str
    needed: int
    free: int
    total: int

    def __str__(self) -> str:
        return f"short {self.needed - self.free} x {self.resource} ({self.free} free of {self.total})"


@dataclass(frozen=True)
class Short:
    min_count: int
    members: int
    fit: int
    shortages: tuple[Shortage, ...] = ()
    blocked: tuple[tuple[str, int], ...] = ()
    """Scheduler-style filter reasons: (reason, number of nodes)."""
    unmodelled: tuple[str, ...] = ()
    """Rules of the members the planner cannot judge, so it made no plan: one kube-scheduler may refuse sticks the gang."""

    @property
    def message(self) -> str:
        head = f"minCount {self.min_count}: {self.fit} of {self.members} members fit"
        if self.members < self.min_count:
            return f"minCount {self.min_count}: only {self.members} members exist"
        if self.unmodelled:
            return f"minCount {self.min_count}: not planned; " + "; ".join(self.unmodelled)
        details = [str(s) for s in self.shortages] or ["no combination of nodes fits the group"]
        details += [f"{count} {reason}" for reason, count in self.blocked]
        return f"{head}; " + "; ".join(details)


@dataclass
class _State:
    """The tentative plan during search; every change is undone on backtrack."""

    free: dict[str, Counter[str]]
    taken: set[DeviceId]
    claims: dict[ClaimKey, ClaimPlan] = field(default_factory=dict)
    placed: list[tuple[Member, str]] = field(default_factory=list)
    used_nodes: dict[str, int] = field(default_factory=dict)
    tally: podrules.Tally | None = None
    """What the members placed add to pod affinity, spreading and host ports; None when no member has such rules."""


class _Planner:
    def __init__(self, snapshot: Snapshot, group: Group, matcher: DeviceMatcher, budget: int) -> None:
        self.snapshot = snapshot
        self.group = group
        self.matcher = matcher
        self.budget = budget
        self.node_by_name = {n.name: n for n in snapshot.nodes}
        self.rules = podrules.Rules(snapshot, group.members, self.node_by_name)
        shapes: dict[tuple[Any, ...], int] = {}
        self._shape_id = {m.uid: shapes.setdefault(_shape(m), len(shapes)) for m in group.members}
        self._local: dict[str, list[Device]] = {}
        self._network: list[Device] = []
        for device in snapshot.devices:
            if device.node_name is not None:
                self._local.setdefault(device.node_name, []).append(device)
            else:
                self._network.append(device)
        self._reach: dict[str, list[Device]] = {}
        self._matching: dict[tuple[Any, ...], list[Device]] = {}
        self._member_needs: dict[str, Counter[str]] = {}
        self._eligible: dict[tuple[int, str], str | None] = {}
        users = Counter((m.namespace, c) for m in group.members for c in m.claims)
        self._alone = {
            m.uid: all(
                users[(m.namespace, c)] == 1 and (claim := snapshot.claims.get((m.namespace, c))) is not None and claim.allocated is None
                for c in m.claims
            )
            for m in group.members
        }

    def key(self, member: Member) -> Any:
        """Members with equal keys are interchangeable; one with a shared or allocated claim is unique, and so is
        every member when a rule depends on the order members are placed (pod affinity, topology spread)."""
        return self._shape_id[member.uid] if self._alone.get(member.uid, False) and not self.rules.ordered else member.uid

    def reachable(self, node: Node) -> list[Device]:
        found = self._reach.get(node.name)
        if found is None:
            network = [
                d for d in self._network if d.all_nodes or (d.node_selector is not None and nodefilter.matches_terms(node, d.node_selector))
            ]
            found = self._reach[node.name] = self._local.get(node.name, []) + network
        return found

    def blocked(self, member: Member, node: Node) -> str | None:
        """Why `member` can never use `node`, whatever else the plan places: node filters, then existing pods."""
        key = (self._shape_id[member.uid], node.name)
        if key not in self._eligible:
            reason = nodefilter.blocking_reason(member, node)
            if reason is None and self.rules.static:
                reason = self.rules.fixed(member, node)
            self._eligible[key] = reason
        return self._eligible[key]

    def reason(self, state: _State, member: Member, node: Node) -> str | None:
        """Why a filter refuses `node` to `member` in the plan so far (resources and devices are not filters)."""
        reason = self.blocked(member, node)
        if reason is None and state.tally is not None:
            reason = self.rules.refused(state.tally, member, node)
        return reason

    def initial_state(self) -> _State:
        free = {n.name: Counter({k: v - n.requested.get(k, 0) for k, v in n.allocatable.items()}) for n in self.snapshot.nodes}
        return _State(free=free, taken=set(self.snapshot.held), tally=self.rules.tally() if self.rules.active else None)

    def try_place(self, state: _State, member: Member, node: Node) -> list[ClaimPlan] | None:
        """Place `member` on `node` in `state` if it fits; returns the new claim plans (to undo), else None."""
        if self.reason(state, member, node) is not None:
            return None
        free = state.free[node.name]
        needs = self._needs(member)
        if any(free.get(k, 0) < v for k, v in needs.items() if v > 0):
            return None
        new: list[ClaimPlan] = []
        new_taken: set[DeviceId] = set()
        for claim_name in member.claims:
            claim = self.snapshot.claims.get((member.namespace, claim_name))
            if claim is None:
                return None
            planned = state.claims.get(claim.key)
            if planned is not None or claim.allocated is not None:
                pinned = planned.node if planned is not None else claim.allocated_node
                if pinned is not None and pinned != node.name:
                    return None
                continue
            taken = state.taken | new_taken if new_taken else state.taken
            results = allocate(claim, self.reachable(node), taken, self.snapshot.classes, self.matcher, self._matching, node.name)
            if results is None:
                return None
            new_taken.update(r.device_id for r in results)
            new.append(_claim_plan(claim, node.name, results, self.snapshot))
        free.subtract(needs)
        state.taken.update(new_taken)
        for plan in new:
            state.claims[(plan.namespace, plan.name)] = plan
        state.placed.append((member, node.name))
        state.used_nodes[node.name] = state.used_nodes.get(node.name, 0) + 1
        if state.tally is not None:
            self.rules.add(state.tally, member, node)
        return new

    def _needs(self, member: Member) -> Counter[str]:
        """What placing `member` takes from a node's free resources: its requests and one pod slot (never mutated)."""
        needs = self._member_needs.get(member.uid)
        if needs is None:
            needs = self._member_needs[member.uid] = Counter(member.requests)
            needs["pods"] += 1
        return needs

    def undo(self, state: _State, member: Member, node: Node, new: list[ClaimPlan]) -> None:
        needs = self._needs(member)
        state.free[node.name].update(needs)
        for plan in new:
            del state.claims[(plan.namespace, plan.name)]
            state.taken.difference_update(r.device_id for r in plan.results)
        state.placed.pop()
        state.used_nodes[node.name] -= 1
        if not state.used_nodes[node.name]:
            del state.used_nodes[node.name]
        if state.tally is not None:
            self.rules.remove(state.tally, member, node)

    def order(self, domain: Sequence[Node], state: _State) -> Iterator[Node]:
        """Packing: nodes this plan already uses, then the busiest nodes first.

        Lazy: a member usually fits on one of the first few, so the rest of a large domain is never listed.
        The caller stops at the first placement (the only change to `state.used_nodes`)."""
        used = list(state.used_nodes)
        yield from (self.node_by_name[n] for n in used)
        yield from (n for n in domain if n.name not in state.used_nodes)

    def greedy(self, domain: Sequence[Node], members: Sequence[Member]) -> _State:
        state = self.initial_state()
        dead: set[tuple[Any, str]] = set()
        for member in members:
            shape = self.key(member)
            for node in self.order(domain, state):
                if (shape, node.name) in dead:
                    continue
                if self.try_place(state, member, node) is not None:
                    break
                if not self.rules.ordered:
                    dead.add((shape, node.name))  # capacity only shrinks during a greedy pass, and so does what other pods allow
        return state

    def search(self, domain: Sequence[Node], members: Sequence[Member], need: int) -> _State | None:
        state = self.initial_state()
        visits = 0

        def dfs(i: int, lower: int) -> bool:
            nonlocal visits
            if len(state.placed) >= need:
                return True
            if len(members) - i < need - len(state.placed) or visits > self.budget:
                return False
            member = members[i]
            same_as_previous = i > 0 and self.key(members[i - 1]) == self.key(member)
            for index in range(lower if same_as_previous else 0, len(domain)):
                node = domain[index]
                visits += 1
                if visits > self.budget:
                    return False
                new = self.try_place(state, member, node)
                if new is None:
                    continue
                if dfs(i + 1, index):
                    return True
                self.undo(state, member, node, new)
            return dfs(i + 1, 0)

        return state if dfs(0, 0) else None

    def fill(self, domain: Sequence[Node], state: _State, members: Sequence[Member]) -> None:
        placed = {m.uid for m, _ in state.placed}
        for member in members:
            if member.uid in placed:
                continue
            for node in self.order(domain, state):
                if self.try_place(state, member, node) is not None:
                    break

    def domains(self) -> list[list[Node]]:
        nodes = sorted(self.snapshot.nodes, key=self._busy_first)
        key = self.group.topology_key
        if key is None:
            return [nodes]
        grouped: dict[str, list[Node]] = {}
        for node in nodes:
            if key in node.labels:
                grouped.setdefault(node.labels[key], []).append(node)
        return [grouped[v] for v in sorted(grouped, key=lambda v: (-len(grouped[v]), v))]

    def _busy_first(self, node: Node) -> tuple[bool, int, int, str]:
        """Packing order: the fullest nodes that still have a free device, then nodes with none."""
        free_devices = sum(1 for d in self._local.get(node.name, ()) if d.id not in self.snapshot.held)
        free_cpu = node.allocatable.get("cpu", 0) - node.requested.get("cpu", 0)
        return (bool(self._local.get(node.name)) and free_devices == 0, free_devices, free_cpu, node.name)


def _shape(member: Member) -> tuple[Any, ...]:
    """Members with equal shapes are interchangeable for placement (claims differ only by name)."""
    return (
        tuple(sorted(member.requests.items())),
        member.tolerations,
        tuple(sorted(member.node_selector.items())),
        member.affinity,
        len(member.claims),
        member.namespace,
        tuple(sorted(member.labels.items())),
        member.pod_affinity,
        member.pod_anti_affinity,
        member.spread,
        member.host_ports,
    )


def _claim_plan(claim: Claim, node: str, results: tuple[Result, ...], snapshot: Snapshot) -> ClaimPlan:
    """Config as the scheduler copies it: the classes' first (FromClass), then the claim's own (FromClaim)."""
    config: list[Mapping[str, Any]] = []
    for request in claim.requests:
        device_class = snapshot.classes[request.device_class]
        for entry in device_class.config:
            config.append({"source": "FromClass", "requests": [request.name], **entry})
    for entry in claim.config:
        config.append({"source": "FromClaim", **entry})
    return ClaimPlan(claim.namespace, claim.name, claim.uid, node, results, tuple(config))


def plan(snapshot: Snapshot, group: Group, matcher: DeviceMatcher | None = None, budget: int = DEFAULT_BUDGET) -> Fits | Short:
    """Pure: reads the snapshot, never changes it; the same inputs give the same answer."""
    matcher = matcher or DeviceMatcher()
    # Members without pod affinity go first: they are what the others' affinity looks for.
    members = tuple(sorted(group.members, key=lambda m: (bool(m.pod_affinity), m.name)))
    if len(members) < group.min_count:
        return Short(group.min_count, len(members), 0)
    planner = _Planner(snapshot, group, matcher, budget)
    if planner.rules.unmodelled:
        return Short(group.min_count, len(members), 0, unmodelled=planner.rules.unmodelled)
    best = 0
    short: Short | None = None
    probe: _State | None = None
    for domain in planner.domains():
        state = planner.greedy(domain, members)
        if len(state.placed) < group.min_count:
            best = max(best, len(state.placed))
            if short is None:
                probe = state
                short = _short(planner, members, best, probe)
            if short.shortages and group.topology_key is None:
                return short  # not enough in all, however it is arranged: no search can help
            state = planner.search(domain, members, group.min_count)
            if state is None:
                continue
        planner.fill(domain, state, members)
        return Fits(placements=tuple(state.placed), claims=tuple(state.claims.values()))
    return _short(planner, members, best, probe)


def _short(planner: _Planner, members: Sequence[Member], fit: int, probe: _State | None) -> Short:
    """Filter reasons are the scheduler's for the first member the greedy pass left out, on the plan it made."""
    snapshot, group = planner.snapshot, planner.group
    quorum = members[: group.min_count]
    placed = {m.uid for m, _ in probe.placed} if probe is not None else set()
    left_out = next((m for m in members if m.uid not in placed), quorum[0])
    state = probe if probe is not None else planner.initial_state()
    reasons = Counter(r for node in snapshot.nodes if (r := planner.reason(state, left_out, node)) is not None)
    # the lower bound below counts capacity on nodes the node filters allow, never less because of what the plan placed
    usable = [node for node in snapshot.nodes if nodefilter.blocking_reason(quorum[0], node) is None]
    shortages: list[Shortage] = []
    needed: Counter[str] = Counter()
    for resource in {r for m in members for r in m.requests}:
        # the cheapest quorum: a lower bound, so a shortage here means no arrangement can fit
        needed[resource] = sum(sorted(m.requests.get(resource, 0) for m in members)[: group.min_count])
    for resource, amount in sorted(needed.items()):
        free = sum(max(0, n.allocatable.get(resource, 0) - n.requested.get(resource, 0)) for n in usable)
        total = sum(n.allocatable.get(resource, 0) for n in snapshot.nodes)
        if amount > free:
            shortages.append(Shortage(resource, amount, free, total))
    shortages.extend(_device_shortages(planner, members, usable))
    return Short(group.min_count, len(members), fit, tuple(shortages), tuple(sorted(reasons.items())))


def _device_shortages(planner: _Planner, members: Sequence[Member], usable: Sequence[Node]) -> list[Shortage]:
    """Devices the cheapest quorum needs; a claim shared or already allocated counts as needing none."""
    snapshot = planner.snapshot
    per_member: list[Counter[str]] = []
    for member in members:
        need: Counter[str] = Counter()
        for name in member.claims:
            claim = snapshot.claims.get((member.namespace, name))
            if claim is None or claim.allocated is not None or not planner._alone.get(member.uid, False):
                continue
            for request in claim.requests:
                need[request.device_class] += request.count if request.mode == "ExactCount" else 1
        per_member.append(need)
    wanted: Counter[str] = Counter()
    for class_name in {c for need in per_member for c in need}:
        wanted[class_name] = sum(sorted(need[class_name] for need in per_member)[: planner.group.min_count])
    out = []
    for class_name, count in sorted(wanted.items()):
        if count == 0:
            continue
        device_class = snapshot.classes.get(class_name)
        if device_class is None:
            out.append(Shortage(f"{class_name} (no such DeviceClass)", count, 0, 0))
            continue
        of_class = [d for d in snapshot.devices if all(planner.matcher.matches(e, d) for e in device_class.selectors)]
        reachable = {d.id for n in usable for d in planner.reachable(n)}
        free = sum(1 for d in of_class if d.id not in snapshot.held and d.id in reachable)
        if count > free:
            out.append(Shortage(class_name, count, free, len(of_class)))
    return out
