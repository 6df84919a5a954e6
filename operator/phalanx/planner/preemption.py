"""Gang preemption: which lower-priority victims must go so that the WHOLE group fits, counting DRA devices.

Upstream's gang preemption (KEP-5710) orders victims and asks whether the gang
fits once they are gone, but its check cannot count DRA devices; here the
question is asked of `plan()` itself, on the snapshot without the victims
(`without`), so node-local resources, node-local devices and network-attached
devices all count, and so do the inter-pod rules of the pods that stay.

A victim is a unit (`model.Victim`): a group in disruptionMode `all` is one
victim with all its pods, taken whole or not at all; the caller makes each pod
of a `single` group, and each pod outside any group, a victim of its own, so
"only the members needed" falls out of the search.

Order (upstream's): lowest priority first; at equal priority groups before
single pods; then fewer pods; then younger (later creation); then the key, so
the answer does not depend on the input order. Search (Kueue's GetTargets):
add candidates in that order until the group fits, then, in reverse order of
addition, leave out each one whose absence still lets the group fit. The last
one added is not tried: without it the earlier ones did not suffice, and fewer
of them cannot do better. The shortest prefix that fits is found by doubling
and bisection rather than one candidate at a time: the same prefix, in about
2 log2(n) plans instead of n.

Both shortcuts assume that evicting more never leaves less room. That holds
for resources, devices, anti-affinity and host ports, not always for required
pod affinity to a victim's pods or for topology spreading (evicting a matching
pod can lower the minimum a domain is measured against); there the answer
still fits, but may not be the cheapest or the smallest, and the check with
every candidate gone may call hopeless a group some fewer victims would let in.

PodDisruptionBudgets are never broken: Phalanx evicts through the Eviction
API, which would refuse the eviction, and a preemption waiting on a refusal
holds the devices it freed for nothing. The candidates are taken in order
into a pool as long as the pool as a whole stays within every budget's allowed
disruptions (summed over the pool, not judged victim by victim), and only that
pool is searched; any subset of it is within the budgets too. When only
budget-breaking victims would make room, the answer says which budget stops it.

Cost: one `plan()` for the group as it stands, one with every candidate gone
(to learn whether preemption can help at all; twice when some candidates
must stay for a budget), about 2 log2(k) to find the k candidates to add, and one per
removal tried (k - 1). `benchmarks/preemption_bench.py` measures it. Pure like
the rest of the planner: the inputs are frozen, and the same inputs give the
same answer.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from phalanx.planner.devices import DeviceMatcher
from phalanx.planner.model import DeviceId, Group, Node, Snapshot, Victim, VictimPod, frozen_map
from phalanx.planner.placement import Fits, Short, plan


@dataclass(frozen=True)
class Preemption:
    """Evict `victims` (in preemption order), then place the group as `fits` says.

    No victims: the group fits as the cluster stands, nothing needs to go."""

    victims: tuple[Victim, ...]
    fits: Fits
    """The plan for the preemptor on the cluster without the victims."""

    @property
    def pods(self) -> tuple[VictimPod, ...]:
        return tuple(p for v in self.victims for p in v.pods)


@dataclass(frozen=True)
class NoVictims:
    """No set of victims the preemptor may take makes the group fit: evict nothing."""

    reason: str


def without(snapshot: Snapshot, victims: Iterable[Victim]) -> Snapshot:
    """The snapshot as it will be once the victims are gone: their requests (and one `pods` each, as
    `Node.requested` counts it) off their nodes, their devices no longer held, their pods gone from `pods`.

    Claims are left as they are: the preemptor's own claims are what the plan looks up. A node the
    snapshot does not have (gone since) frees nothing; a count never drops below zero."""
    freed: dict[str, Counter[str]] = {}
    devices: set[DeviceId] = set()
    shared = {d: dict(c) for d, c in snapshot.shared.items()}
    gone: set[tuple[str, str]] = set()
    for victim in victims:
        for pod in victim.pods:
            amounts = freed.setdefault(pod.node, Counter())
            amounts.update(pod.requests)
            amounts["pods"] += 1
            devices.update(pod.devices)
            for device, consumed in pod.shares:
                left = shared.get(device, {})
                for name, value in consumed.items():
                    left[name] = left.get(name, 0) - value
                if device in shared and all(v <= 0 for v in left.values()):
                    del shared[device]  # its last share (by capacity) is gone
            gone.add((pod.namespace, pod.name))
    if not gone:
        return snapshot
    return replace(
        snapshot,
        nodes=tuple(_less(n, freed[n.name]) if n.name in freed else n for n in snapshot.nodes),
        held=snapshot.held - devices,
        shared=frozen_map({d: frozen_map(c) for d, c in shared.items()}),
        pods=tuple(p for p in snapshot.pods if (p.namespace, p.name) not in gone),
    )


def _less(node: Node, amounts: Mapping[str, int]) -> Node:
    requested = dict(node.requested)
    for resource, amount in amounts.items():
        requested[resource] = max(0, requested.get(resource, 0) - amount)
    return replace(node, requested=frozen_map(requested))


def order(victims: Iterable[Victim]) -> list[Victim]:
    """Upstream's preemption order: the first is the cheapest to evict."""
    return sorted(victims, key=lambda v: (v.priority, not v.is_group, len(v.pods), -_created(v.created), v.key))


def _created(created: str) -> float:
    """Seconds since the epoch; an unreadable time counts as the oldest (evicted last among equals)."""
    try:
        moment = datetime.fromisoformat(created)
    except ValueError:
        return float("-inf")
    if moment.tzinfo is None:  # RFC 3339 always has an offset; never let the machine's zone decide
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def plan_preemption(
    snapshot: Snapshot,
    group: Group,
    victims: Sequence[Victim],
    preemptor_priority: int,
    matcher: DeviceMatcher | None = None,
    allowed: Mapping[str, int] | None = None,
) -> Preemption | NoVictims:
    """The victims whose going lets the whole group fit, cheapest first and no more than needed; or why none do.

    Only victims of priority strictly below `preemptor_priority` are candidates (the caller leaves out
    everything when the preemptor's preemptionPolicy is Never). `allowed`: each PodDisruptionBudget's allowed
    disruptions (a budget a victim names and this does not allows none). A group that fits already gets a
    Preemption with no victims."""
    matcher = matcher or DeviceMatcher()
    with matcher.time_limit():  # the whole search, however many plans it asks for
        return _plan_preemption(snapshot, group, victims, preemptor_priority, matcher, allowed)


def no_candidates(victims: Sequence[Victim], preemptor_priority: int) -> NoVictims | None:
    """Why no victim can be chosen, known before any plan: none below the preemptor's priority has a pod. The loop
    asks this of a group it found short before searching, so a gang waiting on an idle pool costs one plan, not two."""
    if any(v.priority < preemptor_priority and v.pods for v in victims):
        return None
    return NoVictims(_none_below(victims, preemptor_priority))


def _plan_preemption(
    snapshot: Snapshot,
    group: Group,
    victims: Sequence[Victim],
    preemptor_priority: int,
    matcher: DeviceMatcher,
    allowed: Mapping[str, int] | None,
) -> Preemption | NoVictims:
    now = plan(snapshot, group, matcher)
    if isinstance(now, Fits):
        return Preemption((), now)
    if now.timed_out:
        return NoVictims(now.message)
    candidates = order(v for v in victims if v.priority < preemptor_priority and v.pods)
    if not candidates:
        return NoVictims(_none_below(victims, preemptor_priority))
    everyone = plan(without(snapshot, candidates), group, matcher)
    if isinstance(everyone, Short) and everyone.timed_out:
        return NoVictims(everyone.message)
    if isinstance(everyone, Short):
        pods = sum(len(v.pods) for v in candidates)
        counts = f"{_plural(len(candidates), 'victim')}, {_plural(pods, 'pod')}"
        return NoVictims(f"even evicting every lower-priority victim ({counts}) leaves: {everyone.message}")
    polite, blocked = _within_budgets(candidates, allowed or {})
    if not blocked:
        return _search(snapshot, group, candidates, everyone, matcher)
    everyone_polite = plan(without(snapshot, polite), group, matcher) if polite else None
    if isinstance(everyone_polite, Fits):
        return _search(snapshot, group, polite, everyone_polite, matcher)
    budgets = ", ".join(f"{key} (allows {n})" for key, n in sorted(blocked.items()))
    return NoVictims(f"only by breaking PodDisruptionBudget {budgets}, whose evictions the API server refuses")


def _within_budgets(candidates: Sequence[Victim], allowed: Mapping[str, int]) -> tuple[list[Victim], dict[str, int]]:
    """The candidates, in order, that can all go together without breaking any budget; and the budgets that kept
    others out, with what they allow."""
    spent: Counter[str] = Counter()
    pool, blocked = [], {}
    for victim in candidates:
        over = [key for key, n in victim.budgets if spent[key] + n > allowed.get(key, 0)]
        if over:
            blocked.update((key, allowed.get(key, 0)) for key in over)
            continue
        spent.update(dict(victim.budgets))
        pool.append(victim)
    return pool, blocked


def _search(snapshot: Snapshot, group: Group, pool: Sequence[Victim], everyone: Fits, matcher: DeviceMatcher) -> Preemption:
    """Kueue's GetTargets over `pool`, already known to make room when all of it goes (`everyone`)."""
    size, fits = _shortest_prefix(snapshot, group, pool, everyone, matcher)
    chosen = list(pool[:size])
    for i in range(len(chosen) - 2, -1, -1):
        trial = chosen[:i] + chosen[i + 1 :]
        result = plan(without(snapshot, trial), group, matcher)
        if isinstance(result, Fits):
            chosen, fits = trial, result
    return Preemption(tuple(chosen), fits)


def _shortest_prefix(snapshot: Snapshot, group: Group, pool: Sequence[Victim], everyone: Fits, matcher: DeviceMatcher) -> tuple[int, Fits]:
    """How many of `pool`, in order, must go for the group to fit, and its plan then: what adding them one at a
    time finds, in about 2 log2(n) plans instead of n. Prefixes of 1, 2, 4, ... candidates until one fits, then
    bisection between the last that did not and the first that did. The answer always fits (the whole pool
    does); it is the shortest such prefix whenever more victims never leave less room."""
    low, high, fits = 0, len(pool), everyone  # the first `low` do not suffice (0: the group as it stands), the first `high` do
    size = 1
    while size < high:
        result = plan(without(snapshot, pool[:size]), group, matcher)
        if isinstance(result, Fits):
            high, fits = size, result
            break
        low, size = size, size * 2
    while high - low > 1:
        middle = (low + high) // 2
        result = plan(without(snapshot, pool[:middle]), group, matcher)
        if isinstance(result, Fits):
            high, fits = middle, result
        else:
            low = middle
    return high, fits


def _none_below(victims: Sequence[Victim], priority: int) -> str:
    if not victims:
        return "no lower-priority victims: nothing runs that preemption may evict"
    lowest = min(v.priority for v in victims)
    if lowest < priority:
        return f"no lower-priority victims: those below priority {priority} have no pods"
    return f"no lower-priority victims: {len(victims)} running, the lowest at priority {lowest}, not below the preemptor's {priority}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"
