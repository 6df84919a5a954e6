"""Why a gang is where it is: pure, from one list of each kind of object, in the operator's own terms.

`explain` builds the snapshot and the group with `scheduling.inputs` and asks
the planner (`plan`, then `plan_preemption` as a dry run) exactly what the
scheduling loop would ask on the same objects, so the answer is the loop's
decision, not a second opinion. `explain_text` renders it for a person and
for tools. Reading the objects is `phalanx.cli.explain`'s job; nothing here reads
the API, writes, or looks at the clock (`now` is passed in).
"""

from __future__ import annotations

import datetime
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from phalanx.api import keys, times
from phalanx.owners.seam import OwnerKind
from phalanx.planner import DeviceMatcher, Fits, NoVictims, Preemption, plan, plan_preemption
from phalanx.planner import nodes as nodefilter
from phalanx.planner import pods as podrules
from phalanx.planner.devices import SelectorFailed
from phalanx.planner.model import Device, Group, Snapshot
from phalanx.planner.placement import Shortage
from phalanx.planner.taints import tolerates
from phalanx.scheduling import (
    accessors,
    composites,
    conditions,
    disruption,
    headhold,
    holders,
    inputs,
    phase,
    queue,
    quorum,
    snapshots,
    victims,
)

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


class NotFoundError(LookupError):
    """No PodGroup for the Job the user named."""


def find_pod_groups(objects: Objects, namespace: str, job: str, kind: OwnerKind) -> list[JSON]:
    """The groups of owner `job` of this kind (by the name the groups record; a LeaderWorkerSet has one per replica),
    or the group named `job`; of an owner made again under its name, the newest one's only. The one to explain comes
    first: the first still waiting for its placement, else the newest."""
    mine = [g for g in objects.podgroups if g["metadata"]["namespace"] == namespace]
    found = [g for g in mine if kind.name(g) == job]
    found = found or [g for g in mine if g["metadata"]["name"] == job]
    if not found:
        raise NotFoundError(
            f"no PodGroup for {kind.kind} {job!r} in namespace {namespace!r}, nor one of that name: is it a gang "
            f"(spec.scheduling or the {keys.MIN_COUNT} annotation on its owner, or a PodGroup of its own), and is the "
            "namespace right (-n)?"
        )
    newest = max(found, key=_created)
    owner = _owner_uid(newest, kind)
    found = sorted((g for g in found if _owner_uid(g, kind) == owner), key=lambda g: (_created(g), g["metadata"]["name"]))
    waiting = next((g for g in found if not conditions.true(g, keys.INITIALLY_SCHEDULED)), None)
    first = waiting if waiting is not None else newest
    return [first, *(g for g in found if g is not first)]


def find_pod_group(objects: Objects, namespace: str, job: str, kind: OwnerKind) -> JSON:
    """The group to explain for `job` (`find_pod_groups`)."""
    return find_pod_groups(objects, namespace, job, kind)[0]


def _created(group: Mapping[str, Any]) -> str:
    return group["metadata"].get("creationTimestamp", "")


def _owner_uid(group: Mapping[str, Any], kind: OwnerKind) -> str | None:
    """The uid of the object the group answers to (a LeaderWorkerSet's for each of its replicas' groups)."""
    return ((kind.ref(group) or {}).get("metadata") or {}).get("uid")


def others(groups: Sequence[JSON]) -> tuple[str, ...]:
    """The owner's other groups, each with where it stands (its PodGroupInitiallyScheduled reason), to explain by name."""
    return tuple(
        f"{g['metadata']['name']} ({(conditions.find(g, keys.INITIALLY_SCHEDULED) or {}).get('reason') or keys.PENDING})" for g in groups
    )


def _condition_order(condition: Mapping[str, Any]) -> tuple[int, str]:
    """A gang's life in order (gated, scheduled, disrupted), whoever wrote its condition first."""
    known = (keys.GATED, keys.INITIALLY_SCHEDULED, keys.DISRUPTION_TARGET)
    return (known.index(condition["type"]) if condition["type"] in known else len(known), condition["type"])


def _state(pod: Mapping[str, Any]) -> str:
    phase = (pod.get("status") or {}).get("phase") or "Pending"
    if pod["metadata"].get("deletionTimestamp"):
        return "Terminating"
    if phase in ("Succeeded", "Failed"):
        return phase
    if accessors.gated(pod):
        return "Gated"
    if accessors.bound(pod):
        return phase
    return "Released" if accessors.placed_on(pod) else phase


def _devices(pod: Mapping[str, Any], claims: Mapping[tuple[str, str], JSON]) -> tuple[str, ...]:
    out = []
    for name in accessors.holding_claim_names(pod):
        claim = claims.get((pod["metadata"]["namespace"], name))
        out += [f"{pool}/{device}" for _, pool, device in accessors.allocated_ids(claim or {}) or ()]
    return tuple(out)


def _amount(resource: str, value: int) -> str:
    if resource == "cpu":
        return f"{value}m"
    if value and value % 2**30 == 0:
        return f"{value // 2**30}Gi"
    if value and value % 2**20 == 0:
        return f"{value // 2**20}Mi"
    return str(value)


def _age(timestamp: str | None, now: datetime.datetime) -> str:
    if not timestamp:
        return "?"
    seconds = max(0, int(times.seconds_since(timestamp, now)))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= 2 * size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _classes(group: Group, snapshot: Snapshot) -> set[str]:
    """The classes the members' claims ask for, and those serving the extended resources they request."""
    return {
        r.device_class
        for m in group.members
        for c in m.claims
        if (claim := snapshot.claims.get((m.namespace, c))) is not None
        for r in claim.requests
    } | {snapshot.extended[r] for m in group.members for r, v in m.requests.items() if v > 0 and r in snapshot.extended}


def _matches(matcher: DeviceMatcher, expression: str, device: Device) -> bool:
    """For the device counts shown: a selector refused or failing counts no device (the plan's verdict says why)."""
    try:
        return matcher.matches(expression, device)
    except (SelectorFailed, ValueError):
        return False


def _nodes(snapshot: Snapshot, group: Group, matcher: DeviceMatcher) -> tuple[tuple[NodeRow, ...], int, int]:
    """Where: per node, the filter that excludes it, what is free of what the members request, and their devices."""
    first = group.members[0]
    by_name = {n.name: n for n in snapshot.nodes}
    rules = podrules.Rules(snapshot, group.members, by_name)
    selectors = [e for c in _classes(group, snapshot) if (dc := snapshot.classes.get(c)) is not None for e in dc.selectors or ("true",)]
    wanted = [d for d in snapshot.devices if selectors and any(_matches(matcher, e, d) for e in selectors)]
    requested = sorted({r for m in group.members for r, v in m.requests.items() if v > 0})
    rows = []
    for node in sorted(snapshot.nodes, key=lambda n: n.name):
        reason = nodefilter.blocking_reason(first, node)
        if reason == "node(s) had untolerated taint(s)":  # which one: said once, here, not in every message
            untolerated = [t for t in node.taints if t.effect in ("NoSchedule", "NoExecute") and not tolerates(first.tolerations, t)]
            reason = "untolerated taint " + ", ".join(f"{t.key}{'=' + t.value if t.value else ''}:{t.effect}" for t in untolerated)
        if reason is None and rules.static:
            reason = rules.fixed(first, node)
        local = [d for d in wanted if d.node_name == node.name]
        free = {r: _amount(r, node.allocatable.get(r, 0) - node.requested.get(r, 0)) for r in requested}
        rows.append(NodeRow(node.name, reason, free, sum(1 for d in local if d.id not in snapshot.held), len(local)))
    network = [d for d in wanted if d.node_name is None]
    return tuple(rows), sum(1 for d in network if d.id not in snapshot.held), len(network)


def _plan_view(snapshot: Snapshot, group: Group, matcher: DeviceMatcher) -> tuple[PlanView, Fits | None]:
    result = plan(snapshot, group, matcher)
    rows, network_free, network = _nodes(snapshot, group, matcher)
    where = {"nodes": rows, "network_devices_free": network_free, "network_devices": network}
    if isinstance(result, Fits):
        placements = tuple(sorted((m.name, node) for m, node in result.placements))
        message = f"all {len(placements)} of {len(group.members)} members fit (minCount {group.min_count}): released on the next cycle"
        return PlanView(True, len(placements), len(group.members), group.min_count, message, placements=placements, **where), result
    shortages = tuple(ShortRow(s.resource, s.needed, s.free, s.total) for s in result.shortages)
    view = PlanView(
        False,
        result.fit,
        result.members,
        result.min_count,
        result.message,
        shortages=shortages,
        blocked=result.blocked,
        unmodelled=result.unmodelled,
        nowhere=result.nowhere,
        **where,
    )
    return view, None


def _summary(view: PlanView) -> str:
    """The verdict without the node filters' counts: those are the `Excluded` line and the nodes table, said once."""
    if view.fits or not view.shortages:
        return view.message
    shorts = "; ".join(str(Shortage(s.resource, s.needed, s.free, s.total)) for s in view.shortages)
    return f"minCount {view.min_count}: {view.fit} of {view.members} members fit; {shorts}"


def _holders(
    objects: Objects, snapshot: Snapshot, group: Group, view: PlanView, matcher: DeviceMatcher, pods_of: Any, kind: OwnerKind
) -> list[holders.Holder]:
    unit = holders.unit_of(objects.podgroups, pods_of, kind.name)
    mine = {m.uid for m in group.members}
    out: list[holders.Holder] = []
    for row in view.shortages:
        shortage = Shortage(row.resource, row.needed, row.free, row.total)
        if shortage.never:
            continue  # nobody's release would make room: naming holders would suggest it could
        device_class = snapshot.classes.get(row.resource)
        if device_class is not None:
            of_class = [d for d in snapshot.devices if all(_matches(matcher, e, d) for e in device_class.selectors)]
            out += holders.of_devices(shortage, of_class, objects.claims, objects.pods, unit, mine)
        elif row.resource in {r for m in group.members for r in m.requests}:
            out += holders.of_node_resource(shortage, objects.pods, unit, mine)
    return out


def _to_run(
    view: PlanView,
    found: list[holders.Holder],
    priority: int,
    outranked: Preemption | NoVictims | None,
    policy_never: bool,
) -> tuple[str, ...]:
    """What would let the group run, from the shortages and who holds them: free enough, or outrank the holders
    (`outranked`: the preemption dry run again at a priority just above theirs; None when not tried)."""
    if view.nowhere:
        return (f"nothing while {view.nowhere}: label nodes with it, or drop the key",)
    never = [s for s in view.shortages if s.needed > s.total]
    if never:
        return tuple(
            f"nothing while it needs more than the cluster has: lower minCount, or add {s.needed - s.total} x {s.resource}" for s in never
        )
    out = [" and ".join(f"{s.needed - s.free} more {s.resource} free" for s in view.shortages)] if view.shortages else []
    top = max((h.priority for h in found), default=None)
    if policy_never:
        out.append("preemption is off for it (preemptionPolicy Never)")
    elif top is not None and top >= priority and isinstance(outranked, Preemption) and outranked.victims:
        out.append(f"a PriorityClass above {top}, the holders' (preemption would then evict {len(outranked.pods)} pod(s))")
    return tuple(out)


def _victim_rows(preemption: Preemption) -> tuple[VictimRow, ...]:
    return tuple(VictimRow(v.key, v.priority, tuple(p.name for p in v.pods)) for v in preemption.victims)


_STATES = {
    phase.Phase.RESUMING: "Releasing",
    phase.Phase.EACH: "Running",
    phase.Phase.SUSPENDED: "Releasing",
    phase.Phase.FINISHED: "Releasing",
    phase.Phase.GOING: "Running",
    phase.Phase.LOST: "Disrupted",
    phase.Phase.BELOW_MIN: "Running",
    phase.Phase.RUNNING: "Running",
    phase.Phase.AWAITING_BIND: "Releasing",
    phase.Phase.IDLE: "Waiting",
    phase.Phase.QUORUM: "Waiting",
    phase.Phase.PLANNABLE: keys.PENDING,
    phase.Phase.PREEMPTING: keys.PREEMPTING,
}
"""What explain calls each phase of the loop's (a scheduled group with a loss, or a DisruptionTarget, reads Disrupted)."""


def explain(
    objects: Objects, pod_group: JSON, now: datetime.datetime, kind: OwnerKind, matcher: DeviceMatcher | None = None
) -> Explanation:
    """`kind`: the workload kind of the group's owner (its members, its status)."""
    matcher = matcher or DeviceMatcher()
    namespace, name = pod_group["metadata"]["namespace"], pod_group["metadata"]["name"]
    job = kind.name(pod_group) or ""
    uid = pod_group["metadata"]["uid"]
    pods_of = accessors.pods_by_group(objects.podgroups, objects.pods, kind)
    every = sorted(pods_of.get(uid, []), key=kind.member_order)
    live = [p for p in every if accessors.live(p)]
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in objects.claims}
    priorities = {p["metadata"]["name"]: p for p in objects.priorities}
    bound = [p for p in live if accessors.bound(p)]
    reservation = accessors.reservation(pod_group)
    nomination = accessors.nomination(pod_group)
    scheduled = conditions.find(pod_group, keys.INITIALLY_SCHEDULED)
    disrupted = conditions.find(pod_group, keys.DISRUPTION_TARGET)
    node_names = {n["metadata"]["name"] for n in objects.nodes}
    released = reservation is not None and reservation.state == "Released"
    losses = disruption.losses(reservation, every, node_names, known=disruption.recorded(pod_group)) if released else []  # type: ignore[arg-type]
    done = disruption.finished(pod_group, every) if accessors.gang(pod_group) else 0
    if done:  # as the loop reads it (`visit`): a role's members done count toward its minimum
        pod_group = composites.less(pod_group, disruption.done(every))
    facts = phase.read(pod_group, live, lambda ns, n: claims.get((ns, n)), lost=bool(losses), done=done)
    now_in = phase.classify(facts)
    min_count = facts.min_count
    mode = "all" if facts.all_mode else "single"
    priority = accessors.priority(pod_group, priorities.get)
    held = quorum.held_devices(pod_group, every, lambda ns, n: claims.get((ns, n)))

    plan_view: PlanView | None = None
    preemption: PreemptionView | None = None
    found: list[holders.Holder] = []
    to_run: tuple[str, ...] = ()
    job_pods: str | None = None
    state = _STATES[now_in]
    if facts.scheduled and (losses or (disrupted is not None and disrupted["status"] == "True")):
        state = "Disrupted"
        summary = (disrupted or {}).get("message") or f"lost {', '.join(str(loss) for loss in losses)}"
    elif state == "Running":
        summary = f"{len(bound)} of {len(live)} members bound to {len({p['spec']['nodeName'] for p in bound})} node(s)"
    elif state == "Releasing":
        summary = (scheduled or {}).get("message") or f"reservation {reservation.state if reservation else None}"
    else:
        waiting = [p for p in live if accessors.gated(p)]
        ready = [p for p in waiting if accessors.claims_ready(p, lambda ns, n: claims.get((ns, n)))]
        torn = scheduled is not None and scheduled["reason"] in keys.TEARDOWNS
        if now_in in (phase.Phase.IDLE, phase.Phase.QUORUM):
            state = "Disrupted" if torn else "Waiting"
            finished = f", {done} finished" if done else ""
            summary = f"waiting for quorum: {len(ready)} of minCount {min_count} members created with their claims{finished}"
            owner_uid = ((kind.ref(pod_group) or {}).get("metadata") or {}).get("uid")  # a LeaderWorkerSet's, not its replica's key
            owner = next((j for j in objects.owners if j["metadata"]["uid"] == owner_uid), None)
            job_pods = kind.pods_owed(owner, pod_group, len(live), now) if torn else None
        else:
            snapshot = snapshots.snapshot(
                objects.nodes,
                objects.pods,
                objects.slices,
                objects.claims,
                objects.classes,
                objects.podgroups,
                for_group=pod_group,
                taint_rules=objects.taint_rules,
            )
            rank = functools.partial(accessors.priority, priority_class=priorities.get)
            snapshot = headhold.elsewhere(snapshot, headhold.from_status(objects.podgroups, rank), pod_group, rank)
            group = inputs.group(pod_group, ready, facts.needed)
            plan_view, fits = _plan_view(snapshot, group, matcher)
            state = "Disrupted" if torn else state
            summary = _summary(plan_view)
            if fits is None:
                found = _holders(objects, snapshot, group, plan_view, matcher, pods_of, kind)
            if nomination is not None:
                gone = {(p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"]) for p in objects.pods}
                standing = tuple(v.name for v in nomination.victims if (v.namespace, v.name, v.uid) in gone)
                preemption = PreemptionView(True, (VictimRow("nominated", 0, standing),) if standing else (), None)
            elif fits is None:
                candidates = victims.for_preemptor(
                    pod_group,
                    (m.uid for m in group.members),
                    objects.pods,
                    objects.claims,
                    objects.podgroups,
                    pods_of,
                    objects.budgets,
                    pinned=accessors.pins(objects.podgroups),
                )
                outranked: Preemption | NoVictims | None = None
                if candidates is None:
                    preemption = PreemptionView(False, reason="preemptionPolicy is Never")
                else:
                    budgets = victims.allowed(objects.budgets)
                    verdict = plan_preemption(snapshot, group, candidates, priority, matcher, budgets)
                    if isinstance(verdict, NoVictims):
                        preemption = PreemptionView(False, reason=verdict.reason)
                        top = max((h.priority for h in found), default=None)
                        if top is not None and top >= priority:  # would outranking the holders help? the same search, asked
                            outranked = plan_preemption(snapshot, group, candidates, top + 1, matcher, budgets)
                    else:
                        preemption = PreemptionView(False, victims=_victim_rows(verdict))
                if preemption.victims == () and preemption.reason is not None:
                    to_run = _to_run(plan_view, found, priority, outranked, candidates is None)

    lost_rows = tuple(LossRow(loss.name, loss.cause) for loss in losses)
    in_line = _queue(objects, pod_group, pods_of, priorities)
    if not lost_rows and (scheduled or {}).get("reason") == keys.DISRUPTED:  # torn down for a loss: the record outlives the pods
        lost_rows = tuple(LossRow(m["name"], m["cause"]) for m in (pod_group.get("status") or {}).get("lost") or [])
    members = tuple(
        MemberRow(p["metadata"]["name"], _state(p), accessors.placed_on(p), _devices(p, claims))
        for p in every
        if p in live or p["metadata"]["uid"] in {loss.uid for loss in losses}
    )
    condition_rows = tuple(
        ConditionRow(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
        for c in sorted((pod_group.get("status") or {}).get("conditions") or [], key=_condition_order)
    )
    return Explanation(
        namespace=namespace,
        job=job,
        pod_group=name,
        state=state,
        summary=summary,
        min_count=min_count,
        members=len(live),
        bound=len(bound),
        priority=priority,
        disruption_mode=mode,
        topology=accessors.topology_key(pod_group),
        devices_below_min_count=held,
        plan=plan_view,
        preemption=preemption,
        losses=lost_rows,
        holders=tuple(HolderRow(h.resource, h.unit, _amount(h.resource, h.held), _amount(h.resource, h.total), h.priority) for h in found),
        to_run=to_run,
        job_pods=job_pods,
        queue=in_line,
        member_rows=members,
        conditions=condition_rows,
        events=_events(objects.events, pod_group, every, now),
        kind=(kind.ref(pod_group) or {}).get("kind", kind.kind),
        roles=_roles(pod_group, live),
    )


def _roles(pod_group: JSON, live: Sequence[JSON]) -> tuple[RoleRow, ...]:
    of = composites.role_of
    return tuple(
        RoleRow(name, minimum, sum(1 for p in live if of(p) == name), sum(1 for p in live if of(p) == name and accessors.bound(p)))
        for name, minimum in composites.roles(pod_group)
    )


def _queue(objects: Objects, pod_group: JSON, pods_of: Mapping[str, Sequence[JSON]], priorities: Mapping[str, JSON]) -> str | None:
    """`position N of M`, as the loop orders the waiting gangs, and the one just ahead."""
    priority = {g["metadata"]["uid"]: accessors.priority(g, priorities.get) for g in objects.podgroups}
    where = queue.positions(objects.podgroups, pods_of, lambda g: priority[g["metadata"]["uid"]])
    position = where.get(pod_group["metadata"]["uid"])
    if position is None:
        return None
    text = f"position {position[0]} of {position[1]} waiting (priority, then age)"
    ahead = next(
        (g for g in objects.podgroups if g["metadata"]["uid"] in where and where[g["metadata"]["uid"]][0] == position[0] - 1), None
    )
    if ahead is not None:
        meta = ahead["metadata"]
        text += f"; next ahead: {meta['namespace']}/{meta['name']}, priority {priority[meta['uid']]}"
    held = headhold.note(pod_group, headhold.from_status(objects.podgroups, lambda g: priority[g["metadata"]["uid"]]))
    return f"{text}; {held}" if held else text


def _events(events: Sequence[JSON], pod_group: JSON, pods: Sequence[JSON], now: datetime.datetime) -> tuple[EventRow, ...]:
    """The PodGroup's events, and the Warnings on its pods (evictions, preemptions, teardowns), oldest first."""
    pod_uids = {p["metadata"]["uid"] for p in pods}
    rows = []
    for event in events:
        involved = event.get("involvedObject") or {}
        mine = involved.get("uid") == pod_group["metadata"]["uid"]
        on_pod = involved.get("uid") in pod_uids and event.get("type") == "Warning"
        if not (mine or on_pod):
            continue
        when = event.get("lastTimestamp") or event.get("eventTime") or event["metadata"].get("creationTimestamp") or ""
        what = f"{involved.get('kind', '').lower()}/{involved.get('name', '')}"
        created = int(event["metadata"].get("resourceVersion") or 0)  # etcd's order of creation, finer than the timestamps
        rows.append((when, created, event.get("type", ""), event.get("reason", ""), what, event.get("message", "")))
    return tuple(EventRow(_age(when, now), *rest) for when, _, *rest in sorted(rows))
