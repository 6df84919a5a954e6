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
from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.planner import catalog, order
from phalanx.planner import extended as extres
from phalanx.planner import nodes as nodefilter
from phalanx.planner import pods as podrules
from phalanx.planner.allocator import MAX_RESULTS, AllocationError, Ledger, Result, SearchTooLarge, Undo, allocate_all, pool_order
from phalanx.planner.devices import DeviceMatcher, SelectorFailed, SelectorsTooSlow, refusals
from phalanx.planner.model import Claim, ClaimKey, Device, Group, Member, Node, SelectorTerm, Snapshot

DEFAULT_BUDGET = 20_000
MAX_RESERVED_FOR = 256
"""ResourceClaimReservedForMaxSize: the most consumers one claim may list."""


@dataclass(frozen=True)
class ClaimPlan:
    """An allocation to write: results, the node it is pinned to, config copied as the scheduler does."""

    namespace: str
    name: str
    uid: str
    node: str
    results: tuple[Result, ...]
    config: tuple[Mapping[str, Any], ...] = ()
    pinned: bool = True
    """The allocation's nodeSelector names `node` alone (a node-local device, or one that binds to its node)."""
    node_selector: Mapping[str, Any] | None = None
    """Otherwise: the nodeSelector the network-attached devices' slices share, None when they reach every node."""
    extended: bool = False
    """The devices of a member's extended resources (`phalanx.planner.extended`): planned, never written."""


@dataclass(frozen=True)
class Fits:
    placements: tuple[tuple[Member, str], ...]
    claims: tuple[ClaimPlan, ...]
    """The allocations to write."""
    planned: tuple[ClaimPlan, ...] = ()
    """Devices planned for members' extended resources: kube-scheduler allocates them on the pinned node."""

    @property
    def nodes(self) -> frozenset[str]:
        return frozenset(node for _, node in self.placements)


@dataclass(frozen=True)
class Shortage:
    resource: str
    needed: int
    free: int
    total: int

    @property
    def never(self) -> bool:
        """More than the whole cluster has: no wait and no preemption helps, only a smaller gang or more capacity."""
        return self.needed > self.total

    def __str__(self) -> str:
        if self.never:
            return f"can never fit: needs {self.needed} x {self.resource}, the cluster has {self.total}"
        return f"short {self.needed - self.free} x {self.resource} ({self.free} free of {self.total})"


@dataclass(frozen=True)
class RoleFit:
    """How a role of the group (`model.Role`) stands in a plan that fell short."""

    name: str
    min_count: int
    fit: int
    members: int

    def __str__(self) -> str:
        if self.members < self.min_count:
            return f"{self.name} has {self.members} of minCount {self.min_count}"
        return f"{self.name} {self.fit} of minCount {self.min_count}"


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
    timed_out: bool = False
    """The plan ran out of time judging devices: nothing is known of the fit; try again later, not on the next change."""
    nowhere: str | None = None
    """Why no node can ever take the group, whatever is freed (its topology key on no node): only a change of the
    nodes or of the group helps."""
    roles: tuple[RoleFit, ...] = ()
    """Each role's count against its minimum, in the best plan found (a group of roles only)."""

    @property
    def message(self) -> str:
        head = f"minCount {self.min_count}: {self.fit} of {self.members} members fit"
        if self.roles:
            head += " (" + ", ".join(map(str, self.roles)) + ")"
        if self.members < self.min_count or any(r.members < r.min_count for r in self.roles):
            missing = [str(r) for r in self.roles if r.members < r.min_count]
            return f"minCount {self.min_count}: " + ("; ".join(missing) if missing else f"only {self.members} members exist")
        if self.nowhere:
            return f"{head}; can never fit: {self.nowhere}"
        if self.unmodelled:
            return f"minCount {self.min_count}: not planned; " + "; ".join(self.unmodelled)
        details = [str(s) for s in self.shortages] or ["no combination of nodes fits the group"]
        details += [f"{count} {reason}" for reason, count in self.blocked]
        return f"{head}; " + "; ".join(details)


class _Free(dict[str, Counter[str]]):
    """Node name -> its free resources in the plan so far, each derived when the plan first looks at the node: a
    small gang looks at a few of 5,000, and deriving them all took a third of its plan."""

    def __init__(self, nodes: Mapping[str, Node]) -> None:
        super().__init__()
        self._nodes = nodes

    def __missing__(self, name: str) -> Counter[str]:
        node = self._nodes[name]
        free = self[name] = Counter({k: v - node.requested.get(k, 0) for k, v in node.allocatable.items()})
        return free


@dataclass
class _State:
    """The tentative plan during search; every change is undone on backtrack."""

    free: _Free
    ledger: Ledger
    claims: dict[ClaimKey, ClaimPlan] = field(default_factory=dict)
    undos: dict[ClaimKey, Undo] = field(default_factory=dict)
    placed: list[tuple[Member, str]] = field(default_factory=list)
    used_nodes: dict[str, int] = field(default_factory=dict)
    tally: podrules.Tally | None = None
    """What the members placed add to pod affinity, spreading and host ports; None when no member has such rules."""
    roles: list[int] = field(default_factory=list)
    """Members placed in each of the group's roles, by the role's index (empty for a group without roles)."""


class _Planner:
    def __init__(self, snapshot: Snapshot, group: Group, matcher: DeviceMatcher, budget: int) -> None:
        self.snapshot = snapshot
        self.group = group
        self.matcher = matcher
        self.budget = budget
        self.node_by_name = {n.name: n for n in snapshot.nodes}
        self.rules = podrules.Rules(snapshot, group.members, self.node_by_name)
        self.role_of = {uid: i for i, role in enumerate(group.roles) for uid in role.members}
        """Member uid -> the index of its role."""
        shapes: dict[tuple[Any, ...], int] = {}
        self._shape_id = {m.uid: shapes.setdefault(_shape(m) + self._wants(m), len(shapes)) for m in group.members}
        devices = catalog.of(snapshot.devices)
        self.device_by_id = devices.by_id
        self.failures: set[str] = set()
        """Why a pod's device search failed outright on some node: too large, or an error upstream's allocator fails the
        pod on (AllocationError). That node then counts as not fitting the pod in that plan; if no plan fits, these are
        the verdict, naming the claim field."""
        self._local, self._local_ids, self._network = devices.local, devices.local_ids, devices.network
        self._catalog = devices
        self._reach: dict[str, list[Device]] = {}
        self._member_needs: dict[tuple[str, tuple[str, ...]], Counter[str]] = {}
        self._extended_claims: dict[tuple[str, tuple[str, ...]], Claim | None] = {}
        self._mapped: dict[str, tuple[str, ...]] = {}
        self._eligible: dict[tuple[int, str], str | None] = {}
        users = Counter((m.namespace, c) for m in group.members for c in m.claims)
        self._alone = {
            m.uid: all(
                users[(m.namespace, c)] == 1 and (claim := snapshot.claims.get((m.namespace, c))) is not None and claim.allocated is None
                for c in m.claims
            )
            for m in group.members
        }

    def _wants(self, member: Member) -> tuple[Any, ...]:
        """What the member's claims ask for (requests, constraints), not their names: members from one template share
        it, while two claims that differ (one device, or All of them) make members that are not interchangeable. As
        text, since a request's capacity is a mapping (equal text is equal asks; unequal text only costs symmetry)."""
        claims = (self.snapshot.claims.get((member.namespace, c)) for c in member.claims)
        return tuple(repr((c.requests, c.constraints)) if c is not None else None for c in claims)

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
            found = self._reach[node.name] = pool_order([*self._local.get(node.name, ()), *network])
        return found

    def updating(self, node: Node) -> bool:
        """A pool being updated reaches `node`."""
        return any(
            d.node_name == node.name or d.all_nodes or (d.node_selector is not None and nodefilter.matches_terms(node, d.node_selector))
            for d in self.snapshot.incomplete
        )

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
        tally = self.rules.tally() if self.rules.active else None
        return _State(free=_Free(self.node_by_name), ledger=Ledger(self.snapshot), tally=tally, roles=[0] * len(self.group.roles))

    def met(self, state: _State) -> bool:
        """The plan so far holds a quorum: minCount members in all, and each role's minimum."""
        roles = self.group.roles
        return len(state.placed) >= self.group.min_count and all(n >= r.min_count for n, r in zip(state.roles, roles, strict=True))

    def try_place(self, state: _State, member: Member, node: Node) -> list[ClaimPlan] | None:
        """Place `member` on `node` in `state` if it fits; returns the new claim plans (to undo), else None."""
        if self.reason(state, member, node) is not None:
            return None
        free = state.free[node.name]
        served = self._served(member, node)
        needs = self._needs(member, served)
        if any(free.get(k, 0) < v for k, v in needs.items() if v > 0):
            return None
        pending: list[Claim] = []
        for claim_name in member.claims:
            claim = self.snapshot.claims.get((member.namespace, claim_name))
            if claim is None:
                return None
            planned = state.claims.get(claim.key)
            if planned is not None or claim.allocated is not None:
                pinned = (planned.node if planned.pinned else None) if planned is not None else claim.allocated_node
                if pinned is not None and pinned != node.name:
                    return None
                if planned is not None and not _reaches(planned, node):
                    return None
                continue
            if claim not in pending:
                pending.append(claim)
        special = self._extended_claim(member, served) if served else None
        if special is not None:
            pending.append(special)  # kube-scheduler allocates it with the pod's own claims, after them
        new: list[ClaimPlan] = []
        if pending:
            try:
                got = allocate_all(pending, self.reachable(node), state.ledger, self.snapshot.classes, self.matcher, self.updating(node))
            except (SearchTooLarge, AllocationError) as exc:
                self.failures.add(str(exc))
                got = None
            if got is None:
                return None
            per_claim, undo = got
            new = [_claim_plan(c, node, r, self.snapshot, self.device_by_id, c is special) for c, r in zip(pending, per_claim, strict=True)]
            state.undos[(new[0].namespace, new[0].name)] = undo  # one undo gives back every claim of this member
        free.subtract(needs)
        for plan in new:
            state.claims[(plan.namespace, plan.name)] = plan
        state.placed.append((member, node.name))
        if state.roles:
            state.roles[self.role_of[member.uid]] += 1
        state.used_nodes[node.name] = state.used_nodes.get(node.name, 0) + 1
        if state.tally is not None:
            self.rules.add(state.tally, member, node)
        return new

    def _needs(self, member: Member, served: tuple[str, ...] = ()) -> Counter[str]:
        """What placing `member` takes from a node's free resources: its requests and one pod slot, without the
        extended resources the node `served` through a DeviceClass (devices count those). Never mutated."""
        key = (member.uid, served)
        needs = self._member_needs.get(key)
        if needs is None:
            needs = self._member_needs[key] = Counter({k: v for k, v in member.requests.items() if k not in served})
            needs["pods"] += 1
        return needs

    def _served(self, member: Member, node: Node) -> tuple[str, ...]:
        """The member's extended resources `node` serves through a DeviceClass (most members ask for none)."""
        mapped = self._mapped.get(member.uid)
        if mapped is None:
            mapped = self._mapped[member.uid] = extres.mapped(member, self.snapshot.extended)
        return tuple(r for r in mapped if node.allocatable.get(r, 0) <= 0) if mapped else ()

    def _extended_claim(self, member: Member, served: tuple[str, ...]) -> Claim | None:
        key = (member.uid, served)
        if key not in self._extended_claims:
            self._extended_claims[key] = extres.claim(member, served, self.snapshot.extended)
        return self._extended_claims[key]

    def undo(self, state: _State, member: Member, node: Node, new: list[ClaimPlan]) -> None:
        served = self._served(member, node)
        needs = self._needs(member, served)
        state.free[node.name].update(needs)
        for plan in new:
            del state.claims[(plan.namespace, plan.name)]
        if new:
            state.undos.pop((new[0].namespace, new[0].name))()
        state.placed.pop()
        if state.roles:
            state.roles[self.role_of[member.uid]] -= 1
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

    def search(self, domain: Sequence[Node], members: Sequence[Member]) -> _State | None:
        state = self.initial_state()
        visits = 0
        need = self.group.min_count
        rest = self._rest(members)

        def dfs(i: int, lower: int) -> bool:
            nonlocal visits
            if self.met(state):
                return True
            if len(members) - i < need - len(state.placed) or visits > self.budget:
                return False
            if rest and any(n + left < r.min_count for n, left, r in zip(state.roles, rest[i], self.group.roles, strict=True)):
                return False  # a role can no longer reach its minimum with the members left
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

    def _rest(self, members: Sequence[Member]) -> list[tuple[int, ...]]:
        """For each index i, how many of members[i:] each role has (empty for a group without roles)."""
        if not self.group.roles:
            return []
        counts = [0] * len(self.group.roles)
        rest = [tuple(counts)]
        for member in reversed(members):
            counts[self.role_of[member.uid]] += 1
            rest.append(tuple(counts))
        return rest[::-1]

    def fill(self, domain: Sequence[Node], state: _State, members: Sequence[Member]) -> None:
        placed = {m.uid for m, _ in state.placed}
        for member in members:
            if member.uid in placed:
                continue
            for node in self.order(domain, state):
                if self.try_place(state, member, node) is not None:
                    break

    def domains(self) -> list[list[Node]]:
        nodes = order.busy_first(self.snapshot.nodes, self.snapshot.held, self._catalog)
        key = self.group.topology_key
        if key is None:
            return [nodes]
        grouped: dict[str, list[Node]] = {}
        for node in nodes:
            if key in node.labels:
                grouped.setdefault(node.labels[key], []).append(node)
        return [grouped[v] for v in sorted(grouped, key=lambda v: (-len(grouped[v]), v))]


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
        tuple((tuple(sorted(c.requests.items())), c.init, c.sidecar) for c in member.containers),
    )


def _claim_plan(
    claim: Claim, node: Node, results: tuple[Result, ...], snapshot: Snapshot, devices: Mapping[Any, Device], extended: bool = False
) -> ClaimPlan:
    """The allocation as the scheduler writes it: config, then the nodeSelector its devices imply."""
    pinned, selector = _allocation_selector([devices[r.device_id] for r in results])
    config = _config(claim, results, snapshot)
    return ClaimPlan(claim.namespace, claim.name, claim.uid, node.name, results, config, pinned, selector, extended)


def _config(claim: Claim, results: tuple[Result, ...], snapshot: Snapshot) -> tuple[Mapping[str, Any], ...]:
    """Config as the scheduler copies it: each class's config once (FromClass, naming every request of that class), then
    the claim's own (FromClaim) that concern a request allocated; a list naming every request becomes empty (all)."""
    allocated = {r.request for r in results}
    chosen: list[tuple[str, str, str]] = []  # (request, full name, class)
    for request in claim.requests:
        if request.subrequests:
            sub = next((s for s in request.subrequests if f"{request.name}/{s.name}" in allocated), None)
            if sub is not None:
                chosen.append((request.name, f"{request.name}/{sub.name}", sub.device_class))
        else:
            chosen.append((request.name, request.name, request.device_class))
    entries: list[dict[str, Any]] = []
    by_class: dict[str, list[dict[str, Any]]] = {}
    for _, full, class_name in chosen:
        if class_name in by_class:
            for entry in by_class[class_name]:
                entry["requests"].append(full)
            continue
        device_class = snapshot.classes.get(class_name)
        by_class[class_name] = [
            {"source": "FromClass", "requests": [full], **entry} for entry in (device_class.config if device_class else ())
        ]
        entries.extend(by_class[class_name])
    full_names = {full for _, full, _ in chosen}
    for entry in claim.config:
        names = list(entry.get("requests") or ())
        if not names or any(n in full_names or n in {r for r, _, _ in chosen} for n in names):
            entries.append({**entry, "source": "FromClaim", "requests": names})
    for entry in entries:
        names = set(entry["requests"])
        if names and all(r in names or full in names for r, full, _ in chosen):
            entry["requests"] = []
    return tuple({k: v for k, v in e.items() if k != "requests" or v} for e in entries)


def _allocation_selector(devices: list[Device]) -> tuple[bool, Mapping[str, Any] | None]:
    """(pinned, nodeSelector): pinned to the node if any device is node-local or binds to its node; else the merged
    requirements of the devices' slice selectors; None when every device reaches every node."""
    fields: list[dict[str, Any]] = []
    expressions: list[dict[str, Any]] = []
    for device in devices:
        if device.node_name is not None or device.binds_to_node:
            return True, None
        terms: tuple[SelectorTerm, ...] = device.node_selector or ()
        for requirement in terms[0].requirements if len(terms) == 1 else ():
            wire: dict[str, Any] = {"key": requirement.key, "operator": requirement.operator}
            if requirement.values:
                wire["values"] = list(requirement.values)
            target = fields if requirement.field else expressions
            if wire not in target:
                target.append(wire)
    if not fields and not expressions:
        return False, None
    term: dict[str, Any] = {}
    if expressions:
        term["matchExpressions"] = expressions
    if fields:
        term["matchFields"] = fields
    return False, {"nodeSelectorTerms": [term]}


def _reaches(plan: ClaimPlan, node: Node) -> bool:
    """A planned allocation with a nodeSelector (network-attached devices) is usable on the nodes it selects."""
    if plan.pinned or plan.node_selector is None:
        return True
    return nodefilter.matches_terms(node, nodefilter.selector_terms(plan.node_selector))


def _unmodelled(snapshot: Snapshot, group: Group) -> tuple[str, ...]:
    """What the planner cannot honour, or what kube-scheduler would refuse outright, named by field."""
    reasons: list[str] = []
    users: Counter[ClaimKey] = Counter((m.namespace, c) for m in group.members for c in m.claims)
    for key in sorted(users):
        claim = snapshot.claims.get(key)
        if claim is None:
            continue
        reasons.extend(f"claim {claim.name}: {r}" for r in claim.unmodelled)
        if claim.allocated is None and _min_results(claim) > MAX_RESULTS:
            reasons.append(
                f"claim {claim.name}: spec.devices.requests ask for {_min_results(claim)} devices, more than the {MAX_RESULTS} one claim may hold"
            )
        if claim.reserved_for + users[key] > MAX_RESERVED_FOR:
            reasons.append(
                f"claim {claim.name}: status.reservedFor would list {claim.reserved_for + users[key]} pods, more than {MAX_RESERVED_FOR}"
            )
    for member in group.members:
        mapped = tuple(
            sorted(
                r
                for r, v in member.requests.items()
                if v > 0 and r in snapshot.extended and all(n.allocatable.get(r, 0) <= 0 for n in snapshot.nodes)
            )
        )  # served through a DeviceClass on every node
        special = extres.claim(member, mapped, snapshot.extended) if mapped else None
        if special is not None and _min_results(special) > MAX_RESULTS:
            asked = ", ".join(f"resources.requests[{r}] (DeviceClass {snapshot.extended[r]})" for r in mapped)
            reasons.append(
                f"pod {member.name}: {asked} ask for {_min_results(special)} devices, more than the {MAX_RESULTS} the claim "
                "kube-scheduler creates for them may hold"
            )
    return tuple(dict.fromkeys(reasons))


def _min_results(claim: Claim) -> int:
    return sum(
        min((s.count if s.mode == "ExactCount" else 1) for s in r.subrequests)
        if r.subrequests
        else (r.count if r.mode == "ExactCount" else 1)
        for r in claim.requests
    )


def plan(snapshot: Snapshot, group: Group, matcher: DeviceMatcher | None = None, budget: int = DEFAULT_BUDGET) -> Fits | Short:
    """Pure: reads the snapshot, never changes it; the same inputs give the same answer."""
    matcher = matcher or DeviceMatcher()
    members = _ordered(group)
    if len(members) < group.min_count or any(len(r.members) < r.min_count for r in group.roles):
        return _verdict(group, members, None)
    planner = _Planner(snapshot, group, matcher, budget)
    unmodelled = planner.rules.unmodelled + _unmodelled(snapshot, group)
    if unmodelled:
        return _verdict(group, members, None, unmodelled=unmodelled)
    claims = [c for m in members for n in m.claims if (c := snapshot.claims.get((m.namespace, n))) is not None and c.allocated is None]
    refused = refusals(claims, snapshot.classes, matcher)
    if refused:
        return _verdict(group, members, None, unmodelled=refused)
    try:
        with matcher.time_limit():
            return _search(planner, members)
    except SelectorFailed as exc:  # a DeviceClass selector failing where the verdict counts devices
        return _verdict(group, members, None, unmodelled=(str(exc),))
    except SelectorsTooSlow as exc:
        where = _selector_fields(claims, snapshot, exc.expression)
        return _verdict(group, members, None, unmodelled=(f"{where}: {exc}",), timed_out=True)


def _ordered(group: Group) -> tuple[Member, ...]:
    """The order members are tried in. Members without pod affinity go first: they are what the others' affinity
    looks for. In a group of roles each role's minimum goes before any role's extras, so the first pass places a
    quorum of every role before an extra worker takes the room a launcher needs."""
    members = sorted(group.members, key=lambda m: (bool(m.pod_affinity), m.name))
    if not group.roles:
        return tuple(members)
    seen: Counter[str] = Counter()
    extra = set()
    for member in members:
        role = next(r for r in group.roles if member.uid in r.members)
        seen[role.name] += 1
        if seen[role.name] > role.min_count:
            extra.add(member.uid)
    return tuple(sorted(members, key=lambda m: m.uid in extra))


def _verdict(group: Group, members: Sequence[Member], state: _State | None, fit: int = 0, **why: Any) -> Short:
    """The group's Short, with each role's count from `state` (the best plan found, if any)."""
    counts = state.roles if state is not None else [0] * len(group.roles)
    roles = tuple(
        RoleFit(r.name, r.min_count, n, sum(1 for m in members if m.uid in r.members)) for r, n in zip(group.roles, counts, strict=True)
    )
    return Short(group.min_count, len(members), fit, roles=roles, **why)


def _cheapest(group: Group, members: Sequence[Member], values: Sequence[int]) -> int:
    """The least any quorum takes of something each member takes `values[i]` of: a lower bound (the cheapest
    minCount members; in a group of roles, the cheapest minimum of each role)."""
    if not group.roles:
        return sum(sorted(values)[: group.min_count])
    by_role: dict[str, list[int]] = {r.name: [] for r in group.roles}
    for member, value in zip(members, values, strict=True):
        by_role[next(r.name for r in group.roles if member.uid in r.members)].append(value)
    return sum(sum(sorted(by_role[r.name])[: r.min_count]) for r in group.roles)


def _in_every_quorum(group: Group, members: Sequence[Member], users: Collection[str]) -> bool:
    """Every quorum includes one of `users` (member uids): more of them than a quorum leaves out, in all or in a role."""
    if len(users) > len(members) - group.min_count:
        return True
    return any(sum(1 for u in users if u in r.members) > len(r.members) - r.min_count for r in group.roles)


def _selector_fields(claims: Sequence[Claim], snapshot: Snapshot, expression: str) -> str:
    """Where the user wrote a selector: the claim fields (or DeviceClass) it appears in."""
    fields = []
    for claim in claims:
        for i, request in enumerate(claim.requests):
            for exact in request.subrequests or (request,):
                if expression in exact.selectors:
                    fields.append(f"claim {claim.namespace}/{claim.name} spec.devices.requests[{i}]")
                device_class = snapshot.classes.get(exact.device_class)
                if device_class is not None and expression in device_class.selectors:
                    fields.append(f"DeviceClass {device_class.name} spec.selectors")
    return ", ".join(dict.fromkeys(fields)) or "a device selector"


def _search(planner: _Planner, members: tuple[Member, ...]) -> Fits | Short:
    group = planner.group
    best = 0
    short: Short | None = None
    probe: _State | None = None
    domains = planner.domains()
    if group.topology_key is not None and not domains:
        nowhere = f"no node has label {group.topology_key}, the group's topology key"
        return _verdict(group, members, None, nowhere=nowhere)
    for domain in domains:
        state = planner.greedy(domain, members)
        if not planner.met(state):
            best = max(best, len(state.placed))
            if short is None:
                probe = state
                short = _short(planner, members, best, probe)
            if short.shortages and group.topology_key is None:
                return _failed(planner, members, best, probe) or short  # not enough in all, however arranged: no search helps
            state = planner.search(domain, members)
            if state is None:
                continue
        planner.fill(domain, state, members)
        plans = tuple(state.claims.values())
        return Fits(tuple(state.placed), tuple(c for c in plans if not c.extended), tuple(c for c in plans if c.extended))
    return _failed(planner, members, best, probe) or _short(planner, members, best, probe)


def _failed(planner: _Planner, members: Sequence[Member], fit: int, probe: _State | None) -> Short | None:
    """No plan fits and some pod's device search failed outright: that, naming the claim field, is the verdict."""
    if not planner.failures:
        return None
    return _verdict(planner.group, members, probe, fit, unmodelled=tuple(sorted(planner.failures)))


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
    through_class = _through_class(snapshot, members, usable)
    # a resource some usable node serves through a DeviceClass is not bounded by node capacity
    by_devices = {r for r in snapshot.extended if any(n.allocatable.get(r, 0) <= 0 for n in usable)}
    for resource in {r for m in members for r in m.requests} - by_devices:
        # the cheapest quorum: a lower bound, so a shortage here means no arrangement can fit
        needed[resource] = _cheapest(group, members, [m.requests.get(resource, 0) for m in members])
    for resource, amount in sorted(needed.items()):
        free = sum(max(0, n.allocatable.get(resource, 0) - n.requested.get(resource, 0)) for n in usable)
        total = sum(n.allocatable.get(resource, 0) for n in snapshot.nodes)
        if amount > free:
            shortages.append(Shortage(resource, amount, free, total))
    shortages.extend(_device_shortages(planner, members, usable, through_class))
    return _verdict(group, members, probe, fit, shortages=tuple(shortages), blocked=tuple(sorted(reasons.items())))


def _count_requests(claim: Claim, need: Counter[str]) -> None:
    """The devices an unallocated claim takes from others, by class, as a lower bound."""
    for request in claim.requests:
        if request.admin_access or request.subrequests:
            continue  # takes no device from others / may fall back to another class: no lower bound
        need[request.device_class] += request.count if request.mode == "ExactCount" else 1


def _through_class(snapshot: Snapshot, members: Sequence[Member], usable: Sequence[Node]) -> dict[str, str]:
    """Extended resources of the members that every usable node serves through a DeviceClass (none by device
    plugin), with the class: devices bound them, not node capacity. A resource some node serves either way bounds
    nothing."""
    wanted = {r for m in members for r, v in m.requests.items() if v > 0 and r in snapshot.extended}
    return {r: snapshot.extended[r] for r in sorted(wanted) if all(n.allocatable.get(r, 0) <= 0 for n in usable)}


def _device_shortages(
    planner: _Planner, members: Sequence[Member], usable: Sequence[Node], through_class: Mapping[str, str]
) -> list[Shortage]:
    """Devices the cheapest quorum needs, by class; a claim already allocated counts as needing none, and a claim
    shared by several members (the group's, `spec.resourceClaims`) counts once, and only when every quorum includes
    one of its users. Devices for extended resources are named by the resource and its class."""
    snapshot = planner.snapshot
    group = planner.group
    users = Counter((m.namespace, c) for m in members for c in m.claims)
    user_uids: dict[ClaimKey, set[str]] = {}
    for m in members:
        for c in m.claims:
            user_uids.setdefault((m.namespace, c), set()).add(m.uid)
    common: Counter[str] = Counter()
    """What the shared claims every quorum uses need, once for the whole group."""
    for namespace, name in sorted(users):
        claim = snapshot.claims.get((namespace, name))
        shared = users[(namespace, name)] > 1
        if claim is not None and claim.allocated is None and shared and _in_every_quorum(group, members, user_uids[(namespace, name)]):
            _count_requests(claim, common)
    per_member: list[Counter[str]] = []
    names: dict[str, list[str]] = {}
    for resource, class_name in through_class.items():
        names.setdefault(class_name, []).append(resource)
    for member in members:
        need: Counter[str] = Counter()
        special = extres.claim(member, tuple(r for r in through_class if member.requests.get(r, 0) > 0), snapshot.extended)
        for request in special.requests if special is not None else ():
            need[request.device_class] += request.count
        for name in member.claims:
            claim = snapshot.claims.get((member.namespace, name))
            if claim is not None and claim.allocated is None and users[(member.namespace, name)] == 1:
                _count_requests(claim, need)
        per_member.append(need)
    wanted: Counter[str] = Counter(common)
    for class_name in {c for need in per_member for c in need}:
        wanted[class_name] += _cheapest(group, members, [need[class_name] for need in per_member])
    out = []
    for class_name, count in sorted(wanted.items()):
        if count == 0:
            continue
        device_class = snapshot.classes.get(class_name)
        if device_class is None:
            out.append(Shortage(f"{class_name} (no such DeviceClass)", count, 0, 0))
            continue
        label = f"{', '.join(names[class_name])} (extended resource, DeviceClass {class_name})" if class_name in names else class_name
        of_class = [d for d in snapshot.devices if all(planner.matcher.matches(e, d) for e in device_class.selectors)]
        reachable = {d.id for n in usable for d in planner.reachable(n)}
        if any(d.allow_multiple and d.id in reachable for d in of_class):
            continue  # a shared device serves many requests: counting devices bounds nothing
        free = sum(1 for d in of_class if d.id not in snapshot.held and d.id in reachable)
        if count > free:
            out.append(Shortage(label, count, free, len(of_class)))
    return out
