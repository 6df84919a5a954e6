"""What other pods allow: kube-scheduler's InterPodAffinity (required terms), PodTopologySpread
(DoNotSchedule) and NodePorts filters, against the pods already on nodes and the members the plan
placed before.

Phalanx pins a member to a node and kube-scheduler only binds it, so a node these filters refuse
leaves the member, and the devices reserved for its gang, stuck. What existing pods contribute is
counted once per plan (`Rules`); what the tentative plan adds lives in a `Tally` that the search
updates and undoes, so a check costs a few dictionary lookups.

kube-scheduler binds released members in its own order and retries a refused one when another binds.
Anti-affinity and host ports are pairwise, so every order passes. Affinity is kept true of the plan
as a whole: a self-affine member placed first and alone (upstream's first-pod exemption) must stay
the only match or be joined in its domain, or the scheduler, taking a later member first, would
refuse it for good. Spreading is checked in plan order, one order the scheduler can take, and also
as the pinned pod itself will be checked: the pin is required node affinity, so under
nodeAffinityPolicy Honor the pod's only eligible node is its own, and with minDomains above 1 that
node may hold at most maxSkew matching pods.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Container, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from phalanx.planner import nodes as nodefilter
from phalanx.planner.model import HostPort, Member, Node, Pod, PodTerm, Selector, Snapshot, Spread

AFFINITY = "node(s) didn't match pod affinity rules"
ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"
SPREAD = "node(s) didn't match pod topology spread constraints"
SPREAD_LABEL = f"{SPREAD} (missing required label)"
PORTS = "node(s) didn't have free ports for the requested pod ports"
ANY_IP = "0.0.0.0"

Feed = tuple[int, str | None]
"""(counter, topology key): a pod placed on a node adds one at the node's value of the key (None: the node's name)."""


def selects(selector: Selector | None, labels: Mapping[str, str]) -> bool:
    """A label selector; None (absent) selects nothing, () everything."""
    return selector is not None and all(nodefilter.holds(labels.get(r.key), r) for r in selector)


def matches(term: PodTerm, namespace: str, labels: Mapping[str, str]) -> bool | None:
    """Whether a pod in `namespace` with `labels` matches `term`; None when only namespace labels could tell."""
    if namespace in term.namespaces or term.namespace_selector == ():
        return selects(term.selector, labels)
    if term.namespace_selector is None or not selects(term.selector, labels):
        return False
    return None


def clash(port: HostPort, node: str, ports: Container[tuple[str, str, int]], bound: Container[tuple[str, str, str, int]]) -> bool:
    """Upstream's HostPortInfo.CheckConflict: 0.0.0.0 clashes with the port on any address, an address with itself and 0.0.0.0.

    `ports` holds (node, protocol, port) in use, `bound` (node, address, protocol, port).
    """
    if port.ip == ANY_IP:
        return (node, port.protocol, port.port) in ports
    return (node, ANY_IP, port.protocol, port.port) in bound or (node, port.ip, port.protocol, port.port) in bound


def _bump(counter: Counter, key: Hashable, by: int) -> None:
    """Add `by`, dropping the key at zero, so that a tally restored by undo equals the one before."""
    value = counter[key] + by
    if value:
        counter[key] = value
    else:
        del counter[key]


@dataclass(frozen=True)
class _Spreading:
    """One spread constraint of one kind of member, over the existing pods."""

    constraint: Spread
    eligible: frozenset[str]
    """Nodes whose pods count and whose domains exist: all the kind's topology keys, the policies' filters."""
    base: Mapping[str, int]
    """Matching existing pods per domain, 0 for every domain."""
    levels: Mapping[int, int]
    """Domains per count of matching pods."""
    low: int
    self_match: int
    match: int = -1
    """When the pinned pod's own check caps its node: the counter of matching pods per node, else -1."""
    host: int = -1
    """When capped: the counter of the kind's members per node."""


@dataclass
class _Skew:
    """Matching pods per domain of one spread constraint. The minimum stays exact under steps of one by
    counting domains per level (upstream's DomainsAtCount), so a check costs O(1) however many domains."""

    base: Mapping[str, int]
    levels: Counter[int]
    low: int
    added: Counter[str] = field(default_factory=Counter)

    def count(self, domain: str) -> int:
        return self.base.get(domain, 0) + self.added[domain]

    def step(self, domain: str, by: int) -> None:
        old = self.count(domain)
        _bump(self.levels, old, -1)
        _bump(self.levels, old + by, 1)
        _bump(self.added, domain, by)
        if by > 0 and old == self.low and old not in self.levels:
            self.low = old + 1
        elif by < 0:
            self.low = min(self.low, old - 1)


@dataclass
class Tally:
    """What the members placed so far add to the existing pods; `Rules.add` and `Rules.remove` are exact inverses."""

    pairs: Counter[tuple[int, str]] = field(default_factory=Counter)
    """(counter, topology value or node name) -> members placed there that feed the counter."""
    sizes: Counter[int] = field(default_factory=Counter)
    skews: dict[tuple[int, int], _Skew] = field(default_factory=dict)
    ports: Counter[tuple[str, str, int]] = field(default_factory=Counter)
    bound: Counter[tuple[str, str, str, int]] = field(default_factory=Counter)
    anchors: Counter[tuple[int, tuple[str, ...]]] = field(default_factory=Counter)
    """Self-affine members placed, as (kind, domain per term): each must stay alone or be joined."""


def _kind_key(m: Member) -> tuple:
    return (
        m.namespace,
        tuple(sorted(m.labels.items())),
        m.pod_affinity,
        m.pod_anti_affinity,
        m.spread,
        m.host_ports,
        tuple(sorted(m.node_selector.items())),
        m.affinity,
        m.tolerations,
    )


class Rules:
    """The inter-pod facts of one plan, computed once. Members fall into a few kinds (same namespace,
    labels and rules), and each pair of kinds, and each existing pod against each kind, is matched once."""

    def __init__(self, snapshot: Snapshot, members: Sequence[Member], nodes: Mapping[str, Node]) -> None:
        self.kinds, self.kind_of = _kinds(members)
        kinds = self.kinds
        anti_pods = [p for p in snapshot.pods if p.anti_affinity and p.node in nodes]
        self.unmodelled = _unmodelled(members, kinds, self.kind_of, anti_pods)
        self.active = any(m.pod_affinity or m.pod_anti_affinity or m.spread or m.host_ports for m in kinds)
        """Members' rules involve each other: the search keeps a Tally."""
        self.ordered = any(m.pod_affinity or m.spread for m in kinds)
        """A check depends on the order members are placed: identical members are not interchangeable,
        and a node refused now may be allowed once more members are placed."""
        self._cids = itertools.count()
        self._aff = [[next(self._cids) for _ in m.pod_affinity] for m in kinds]
        self._anti = [[next(self._cids) for _ in m.pod_anti_affinity] for m in kinds]
        self._existing: list[dict[str, int]] = [{} for _ in kinds]
        """Per kind: topology key -> the counter of pods whose anti-affinity terms on that key match the kind."""
        self._joins = [self._joining(m) for m in kinds]
        self._self_affine = [k in joins for k, joins in enumerate(self._joins)]
        eligible = [[_eligible(m, c, nodes.values()) for c in m.spread] for m in kinds]
        capped = [[self._cap(c) for c in m.spread] for m in kinds]
        self._feeds: list[list[Feed]] = []
        self._spread_feeds: list[list[tuple[int, int]]] = []
        for k, m in enumerate(kinds):
            feeds, targets = self._feeds_of(m.namespace, m.labels, m.pod_anti_affinity, capped, counted=True)
            self._feeds.append(feeds + [(pair[1], None) for pair in capped[k] if pair is not None])
            self._spread_feeds.append(targets)
        self._capped_feeds = [[(k, i) for k, i in targets if capped[k][i] is not None] for targets in self._spread_feeds]
        self._base: Counter[tuple[int, str]] = Counter()
        """(counter, topology value or node name) -> existing pods there that feed the counter."""
        counts = [
            [{nodes[n].labels[c.topology_key]: 0 for n in e} for c, e in zip(m.spread, eligible[k], strict=True)]
            for k, m in enumerate(kinds)
        ]
        if not self.unmodelled:
            # without member affinity, anti-affinity or spreading, only the anti-affinity of existing pods counts
            every = any(m.pod_affinity or m.pod_anti_affinity or m.spread for m in kinds)
            self._count([p for p in snapshot.pods if p.node in nodes] if every else anti_pods, nodes, eligible, capped, counts, every=every)
        self._seen = frozenset(cid for cid, _ in self._base)
        with_ports = [p for p in snapshot.pods if p.host_ports and p.node in nodes] if any(m.host_ports for m in kinds) else []
        self._ports = {(p.node, port.protocol, port.port) for p in with_ports for port in p.host_ports}
        self._bound = {(p.node, port.ip, port.protocol, port.port) for p in with_ports for port in p.host_ports}
        self._spread = [
            [
                _Spreading(
                    constraint=c,
                    eligible=eligible[k][i],
                    base=counts[k][i],
                    levels=Counter(counts[k][i].values()),
                    low=min(counts[k][i].values(), default=0),
                    self_match=int(selects(c.selector, m.labels)),
                    match=capped[k][i][0] if capped[k][i] else -1,
                    host=capped[k][i][1] if capped[k][i] else -1,
                )
                for i, c in enumerate(m.spread)
            ]
            for k, m in enumerate(kinds)
        ]
        self.static = self.active or bool(self._base)
        """Existing pods alone can refuse some member a node."""

    def _count(
        self,
        pods: Sequence[Pod],
        nodes: Mapping[str, Node],
        eligible: list[list[frozenset[str]]],
        capped: list[list[tuple[int, int] | None]],
        counts: list[list[dict[str, int]]],
        *,
        every: bool,
    ) -> None:
        """Existing pods into the counters (`_base`) and spread domains (`counts`). Pods alike are matched once:
        same namespace, labels (in the same order, as a template's replicas have them) and anti-affinity; when no
        member has rules of its own (not `every`), only the pod's anti-affinity terms matter."""
        seen: dict[tuple, tuple[list[Feed], list[tuple[int, int]]]] = {}
        for p in pods:
            signature = (p.namespace, p.terminating, tuple(p.labels.items()), p.anti_affinity) if every else p.anti_affinity
            if signature not in seen:
                seen[signature] = self._feeds_of(p.namespace, p.labels, p.anti_affinity, capped, counted=not p.terminating)
            feeds, targets = seen[signature]
            node = nodes[p.node]
            for cid, key in feeds:
                value = node.name if key is None else node.labels.get(key)
                if value is not None:
                    self._base[(cid, value)] += 1
            for k, i in targets:
                if p.node in eligible[k][i]:
                    counts[k][i][node.labels[self.kinds[k].spread[i].topology_key]] += 1

    def _joining(self, m: Member) -> frozenset[int]:
        """The kinds whose affinity terms a member of this kind matches, every one of them."""
        return frozenset(
            k for k, km in enumerate(self.kinds) if km.pod_affinity and all(matches(t, m.namespace, m.labels) for t in km.pod_affinity)
        )

    def _cap(self, c: Spread) -> tuple[int, int] | None:
        """Counters for the pinned pod's own check, when it bites: Honor makes its node the only eligible one,
        so with minDomains above 1 the global minimum is 0 and the node may hold at most maxSkew matching pods.
        (With minDomains 1 the check always passes; an empty selector counts no pod.)"""
        if c.node_affinity_policy == "Honor" and c.min_domains > 1 and c.selector:
            return next(self._cids), next(self._cids)
        return None

    def _feeds_of(
        self,
        namespace: str,
        labels: Mapping[str, str],
        anti: tuple[PodTerm, ...],
        capped: list[list[tuple[int, int] | None]],
        *,
        counted: bool,
    ) -> tuple[list[Feed], list[tuple[int, int]]]:
        """The counters a pod feeds for each kind of member: the kind's affinity (if the pod matches every
        term), its anti-affinity (each term it matches), the pod's own anti-affinity terms that match the
        kind, and the kind's spread constraints that select it (only a `counted`, not terminating, pod)."""
        feeds: list[Feed] = []
        targets: list[tuple[int, int]] = []
        for k, m in enumerate(self.kinds):
            if m.pod_affinity and all(matches(t, namespace, labels) for t in m.pod_affinity):
                feeds += [(cid, t.topology_key) for cid, t in zip(self._aff[k], m.pod_affinity, strict=True)]
            feeds += [
                (cid, t.topology_key) for cid, t in zip(self._anti[k], m.pod_anti_affinity, strict=True) if matches(t, namespace, labels)
            ]
            for t in anti:
                if matches(t, m.namespace, m.labels):
                    if t.topology_key not in self._existing[k]:
                        self._existing[k][t.topology_key] = next(self._cids)
                    feeds.append((self._existing[k][t.topology_key], t.topology_key))
            if counted and namespace == m.namespace:
                for i, c in enumerate(m.spread):
                    if c.selector and selects(c.selector, labels):
                        targets.append((k, i))
                        if capped[k][i] is not None:
                            feeds.append((capped[k][i][0], None))
        return feeds, targets

    def tally(self) -> Tally:
        """A fresh tally for a search: nothing placed yet."""
        t = Tally()
        for k, facts in enumerate(self._spread):
            for i, f in enumerate(facts):
                t.skews[(k, i)] = _Skew(f.base, Counter(f.levels), f.low)
        return t

    def fixed(self, member: Member, node: Node) -> str | None:
        """What the existing pods alone rule out; the caller caches it per kind of member and node."""
        k = self.kind_of[member.uid]
        m = self.kinds[k]
        labels, base = node.labels, self._base
        if not (m.host_ports or m.spread or m.pod_affinity or m.pod_anti_affinity):
            return EXISTING_ANTI_AFFINITY if any((cid, labels.get(key)) in base for key, cid in self._existing[k].items()) else None
        if any(clash(p, node.name, self._ports, self._bound) for p in m.host_ports):
            return PORTS
        if any(c.topology_key not in labels for c in m.spread):
            return SPREAD_LABEL
        if any(f.match >= 0 and base[(f.match, node.name)] + f.self_match > f.constraint.max_skew for f in self._spread[k]):
            return SPREAD
        if any(t.topology_key not in labels for t in m.pod_affinity):
            return AFFINITY
        if any((cid, labels.get(t.topology_key)) in base for cid, t in zip(self._anti[k], m.pod_anti_affinity, strict=True)):
            return ANTI_AFFINITY
        if any((cid, labels.get(key)) in base for key, cid in self._existing[k].items()):
            return EXISTING_ANTI_AFFINITY
        return None

    def refused(self, tally: Tally, member: Member, node: Node) -> str | None:
        """What the members placed so far rule out, on a node `fixed` allows. The scheduler's filter order."""
        k = self.kind_of[member.uid]
        m = self.kinds[k]
        name, labels, pairs = node.name, node.labels, tally.pairs
        if any(clash(p, name, tally.ports, tally.bound) for p in m.host_ports):
            return PORTS
        for i, f in enumerate(self._spread[k]):
            c, skew = f.constraint, tally.skews[(k, i)]
            low = skew.low if len(f.base) >= c.min_domains else 0
            if skew.count(labels[c.topology_key]) + f.self_match - low > c.max_skew:
                return SPREAD
            if f.match >= 0 and self._base[(f.match, name)] + pairs[(f.match, name)] + f.self_match > c.max_skew:
                return SPREAD
        for target, i in self._capped_feeds[k]:
            f = self._spread[target][i]
            if (f.host, name) in pairs and self._base[(f.match, name)] + pairs[(f.match, name)] + 1 > f.constraint.max_skew:
                return SPREAD
        if m.pod_affinity and not self._affine(tally, k, labels):
            return AFFINITY
        if tally.anchors and not self._keeps_alone(tally, k, labels):
            return AFFINITY
        if any((cid, labels.get(t.topology_key)) in pairs for cid, t in zip(self._anti[k], m.pod_anti_affinity, strict=True)):
            return ANTI_AFFINITY
        if any((cid, labels.get(key)) in pairs for key, cid in self._existing[k].items()):
            return EXISTING_ANTI_AFFINITY
        return None

    def _affine(self, tally: Tally, k: int, labels: Mapping[str, str]) -> bool:
        """Upstream's satisfyPodAffinity: for every term a pod matching all terms in the node's domain; or no
        such pod anywhere and the member matches its own terms (the first of a self-affine set)."""
        cids, terms = self._aff[k], self.kinds[k].pod_affinity
        pairs, base = tally.pairs, self._base
        if all(base[(cid, labels[t.topology_key])] + pairs[(cid, labels[t.topology_key])] > 0 for cid, t in zip(cids, terms, strict=True)):
            return True
        return self._self_affine[k] and not any(cid in self._seen or tally.sizes[cid] for cid in cids)

    def _keeps_alone(self, tally: Tally, k: int, labels: Mapping[str, str]) -> bool:
        """A member matching every affinity term of a placed self-affine member, on a node with one of its
        topology keys, ends that member's first-pod exemption: it then needs another match in its domain
        for every term (itself counts once, so two)."""
        for a, domains in tally.anchors:
            if a not in self._joins[k]:
                continue
            terms = self.kinds[a].pod_affinity
            if all(t.topology_key not in labels for t in terms):
                continue
            for cid, t, domain in zip(self._aff[a], terms, domains, strict=True):
                if self._base[(cid, domain)] + tally.pairs[(cid, domain)] + (labels.get(t.topology_key) == domain) < 2:
                    return False
        return True

    def add(self, tally: Tally, member: Member, node: Node) -> None:
        self._step(tally, member, node, 1)

    def remove(self, tally: Tally, member: Member, node: Node) -> None:
        self._step(tally, member, node, -1)

    def _step(self, tally: Tally, member: Member, node: Node, by: int) -> None:
        k = self.kind_of[member.uid]
        m = self.kinds[k]
        for cid, key in self._feeds[k]:
            value = node.name if key is None else node.labels.get(key)
            if value is not None:
                _bump(tally.pairs, (cid, value), by)
                _bump(tally.sizes, cid, by)
        for target, i in self._spread_feeds[k]:
            f = self._spread[target][i]
            if node.name in f.eligible:
                tally.skews[(target, i)].step(node.labels[f.constraint.topology_key], by)
        for p in m.host_ports:
            _bump(tally.ports, (node.name, p.protocol, p.port), by)
            _bump(tally.bound, (node.name, p.ip, p.protocol, p.port), by)
        if self._self_affine[k]:
            _bump(tally.anchors, (k, tuple(node.labels[t.topology_key] for t in m.pod_affinity)), by)


def _kinds(members: Sequence[Member]) -> tuple[list[Member], dict[str, int]]:
    """One member per kind, and each member's kind."""
    index: dict[tuple, int] = {}
    kinds: list[Member] = []
    kind_of: dict[str, int] = {}
    for m in members:
        k = index.setdefault(_kind_key(m), len(index))
        if k == len(kinds):
            kinds.append(m)
        kind_of[m.uid] = k
    return kinds, kind_of


def _eligible(member: Member, c: Spread, nodes: Iterable[Node]) -> frozenset[str]:
    """Nodes a spread constraint counts: every topology key of the member's constraints, then the policies."""
    keys = [s.topology_key for s in member.spread]
    return frozenset(
        n.name
        for n in nodes
        if all(key in n.labels for key in keys)
        and (c.node_affinity_policy != "Honor" or nodefilter.selected(member, n))
        and (c.node_taints_policy != "Honor" or nodefilter.tolerated(member, n))
    )


def _unmodelled(
    members: Sequence[Member], kinds: Sequence[Member], kind_of: Mapping[str, int], anti_pods: Sequence[Pod]
) -> tuple[str, ...]:
    """What the planner cannot judge, by member: a namespaceSelector other than `{}` needs namespace labels."""
    found: list[list[str]] = []
    for m in kinds:
        what = [
            f"{name} namespaceSelector"
            for name, terms in (("podAffinity", m.pod_affinity), ("podAntiAffinity", m.pod_anti_affinity))
            if any(t.namespace_selector for t in terms)
        ]
        unknown: dict[tuple[PodTerm, ...], bool] = {}
        for p in anti_pods:
            if p.anti_affinity not in unknown:
                unknown[p.anti_affinity] = any(matches(t, m.namespace, m.labels) is None for t in p.anti_affinity)
            if unknown[p.anti_affinity]:
                what.append(f"podAntiAffinity namespaceSelector of existing pod {p.namespace}/{p.name}")
        found.append(what)
    names: dict[str, list[str]] = {}
    for member in members:
        for what in found[kind_of[member.uid]]:
            names.setdefault(what, []).append(member.name)
    return tuple(
        f"member {n[0]}{f' (and {len(n) - 1} more)' if len(n) > 1 else ''}: {what} is not modelled by Phalanx" for what, n in names.items()
    )
