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
from phalanx.scheduling.explain_view import (
    JSON,
    ConditionRow,
    EventRow,
    Explanation,
    HolderRow,
    LossRow,
    MemberRow,
    NodeRow,
    Objects,
    PlanView,
    PreemptionView,
    RoleRow,
    ShortRow,
    VictimRow,
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
    uid = pod_group["metadata"]["uid"]
    pods_of = accessors.pods_by_group(objects.podgroups, objects.pods, kind)
    every = sorted(pods_of.get(uid, []), key=kind.member_order)
    live = [p for p in every if accessors.live(p)]
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in objects.claims}
    priorities = {p["metadata"]["name"]: p for p in objects.priorities}
    bound = [p for p in live if accessors.bound(p)]
    reservation = accessors.reservation(pod_group)
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
    priority = accessors.priority(pod_group, priorities.get)
    why = _Why(_STATES[now_in])
    if facts.scheduled and (losses or (disrupted is not None and disrupted["status"] == "True")):
        why.state = "Disrupted"
        why.summary = (disrupted or {}).get("message") or f"lost {', '.join(str(loss) for loss in losses)}"
    elif why.state == "Running":
        why.summary = f"{len(bound)} of {len(live)} members bound to {len({p['spec']['nodeName'] for p in bound})} node(s)"
    elif why.state == "Releasing":
        why.summary = (scheduled or {}).get("message") or f"reservation {reservation.state if reservation else None}"
    else:
        ready = [p for p in live if accessors.gated(p) and accessors.claims_ready(p, lambda ns, n: claims.get((ns, n)))]
        torn = scheduled is not None and scheduled["reason"] in keys.TEARDOWNS
        if now_in in (phase.Phase.IDLE, phase.Phase.QUORUM):
            why.state = "Disrupted" if torn else "Waiting"
            finished = f", {done} finished" if done else ""
            why.summary = f"waiting for quorum: {len(ready)} of minCount {facts.min_count} members created with their claims{finished}"
            owner_uid = ((kind.ref(pod_group) or {}).get("metadata") or {}).get("uid")  # a LeaderWorkerSet's, not its replica's key
            owner = next((j for j in objects.owners if j["metadata"]["uid"] == owner_uid), None)
            why.job_pods = kind.pods_owed(owner, pod_group, len(live), now) if torn else None
        else:
            _short(why, objects, pod_group, inputs.group(pod_group, ready, facts.needed), priority, pods_of, kind, matcher)
            why.state = "Disrupted" if torn else why.state
    lost_rows = tuple(LossRow(loss.name, loss.cause) for loss in losses)
    if not lost_rows and (scheduled or {}).get("reason") == keys.DISRUPTED:  # torn down for a loss: the record outlives the pods
        lost_rows = tuple(LossRow(m["name"], m["cause"]) for m in (pod_group.get("status") or {}).get("lost") or [])
    lost_uids = {loss.uid for loss in losses}
    return Explanation(
        namespace=pod_group["metadata"]["namespace"],
        job=kind.name(pod_group) or "",
        pod_group=pod_group["metadata"]["name"],
        state=why.state,
        summary=why.summary,
        min_count=facts.min_count,
        members=len(live),
        bound=len(bound),
        priority=priority,
        disruption_mode="all" if facts.all_mode else "single",
        topology=accessors.topology_key(pod_group),
        devices_below_min_count=quorum.held_devices(pod_group, every, lambda ns, n: claims.get((ns, n))),
        plan=why.plan,
        preemption=why.preemption,
        losses=lost_rows,
        holders=tuple(
            HolderRow(h.resource, h.unit, _amount(h.resource, h.held), _amount(h.resource, h.total), h.priority) for h in why.holders
        ),
        to_run=why.to_run,
        job_pods=why.job_pods,
        queue=_queue(objects, pod_group, pods_of, priorities),
        member_rows=tuple(
            MemberRow(p["metadata"]["name"], _state(p), accessors.placed_on(p), _devices(p, claims))
            for p in every
            if p in live or p["metadata"]["uid"] in lost_uids
        ),
        conditions=tuple(
            ConditionRow(c["type"], c["status"], c.get("reason", ""), c.get("message", ""))
            for c in sorted((pod_group.get("status") or {}).get("conditions") or [], key=_condition_order)
        ),
        events=_events(objects.events, pod_group, every, now),
        kind=(kind.ref(pod_group) or {}).get("kind", kind.kind),
        roles=_roles(pod_group, live),
    )


@dataclass
class _Why:
    """Where the group stands, filled as `explain` finds out: the verdict, and for a gang that could be planned, the
    planner's answer, who holds what it lacks, and what preemption would do."""

    state: str
    summary: str = ""
    plan: PlanView | None = None
    preemption: PreemptionView | None = None
    holders: list[holders.Holder] = field(default_factory=list)
    to_run: tuple[str, ...] = ()
    job_pods: str | None = None


def _short(
    why: _Why,
    objects: Objects,
    pod_group: JSON,
    group: Group,
    priority: int,
    pods_of: Mapping[str, Sequence[JSON]],
    kind: OwnerKind,
    matcher: DeviceMatcher,
) -> None:
    """A gang that could be planned: the plan the loop would make on the same objects, and, when it does not fit,
    who holds what it lacks and what preemption would (or could not) do."""
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
    rank = functools.partial(accessors.priority, priority_class={p["metadata"]["name"]: p for p in objects.priorities}.get)
    snapshot = headhold.elsewhere(snapshot, headhold.from_status(objects.podgroups, rank), pod_group, rank)
    why.plan, fits = _plan_view(snapshot, group, matcher)
    why.summary = _summary(why.plan)
    if fits is None:
        why.holders = _holders(objects, snapshot, group, why.plan, matcher, pods_of, kind)
    nomination = accessors.nomination(pod_group)
    if nomination is not None:
        gone = {(p["metadata"]["namespace"], p["metadata"]["name"], p["metadata"]["uid"]) for p in objects.pods}
        standing = tuple(v.name for v in nomination.victims if (v.namespace, v.name, v.uid) in gone)
        why.preemption = PreemptionView(True, (VictimRow("nominated", 0, standing),) if standing else (), None)
    elif fits is None:
        _preemption(why, objects, pod_group, group, snapshot, priority, pods_of, matcher)


def _preemption(
    why: _Why,
    objects: Objects,
    pod_group: JSON,
    group: Group,
    snapshot: Snapshot,
    priority: int,
    pods_of: Mapping[str, Sequence[JSON]],
    matcher: DeviceMatcher,
) -> None:
    """The loop's preemption search as a dry run; when it finds nothing, whether outranking the holders would."""
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
        why.preemption = PreemptionView(False, reason="preemptionPolicy is Never")
    else:
        budgets = victims.allowed(objects.budgets)
        verdict = plan_preemption(snapshot, group, candidates, priority, matcher, budgets)
        if isinstance(verdict, NoVictims):
            why.preemption = PreemptionView(False, reason=verdict.reason)
            top = max((h.priority for h in why.holders), default=None)
            if top is not None and top >= priority:  # would outranking the holders help? the same search, asked
                outranked = plan_preemption(snapshot, group, candidates, top + 1, matcher, budgets)
        else:
            why.preemption = PreemptionView(False, victims=_victim_rows(verdict))
    if why.preemption.victims == () and why.preemption.reason is not None and why.plan is not None:
        why.to_run = _to_run(why.plan, why.holders, priority, outranked, candidates is None)


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
