"""The liveness oracle: no gang waits while the cluster has room for it.

Phalanx promises that a gang waiting for its first placement is released as soon as it fits, unless a group ahead of
it in the queue (priority, then age) could use the same room. The loop keeps memos to keep that cheap (groups passed
over while nothing they read changed, shortfalls, settled groups); a memo that hides a change leaves a gang waiting
for ever on a cluster with room for it, and no other test notices: nothing fails, nothing is logged. This oracle plans
every waiting group from scratch, on a snapshot built from plain API objects with the product's own pure functions
(`scheduling.inputs`, `scheduling.headhold`, `planner.plan`, `planner.queue.takes_room`: what `explain` uses, never
the loop's memos), and names a gang that fits, with no group ahead that could use the room, for longer than a bound.

A gang waits when it is a gang PodGroup never placed (no reservation recorded, PodGroupInitiallyScheduled not True)
with live members behind the gate, at least minCount of them with their claims (less the members that finished, which
count toward it: `disruption.finished`), not preempting (a nomination), not backing off after a ready-deadline
timeout (`status.readiness.notBefore` ahead) and not being deleted. It is the loop's own ladder: `phase.classify`
says Plannable.

What the loop would rightly hold it back for is held back here too, so a finding is a bug, not a race:
- devices other groups hold or will hold: allocated claims (a terminating pod's until its claim is deallocated), the
  devices a preemption freed for its preemptor (`snapshots.nominated_elsewhere`), the head of the line's hold
  (`status.hold`, `headhold.elsewhere`), devices under a DeviceTaintRule of Phalanx's that is not for this group (a rule
  outlives its record by a write), and those a reservation under way names (state Reserving);
- a group ahead in queue order that could use the same room (`takes_room`): a gang waiting or preempting (with its
  victims' devices counted free, as the loop counts them), and the late members of a placed group or the members of a
  basic one, as the loop puts them in its line (judged with a quorum of one, the most they could ask);
- a loop that cannot act: the operator's Lease (`phalanx-system/phalanx-leader`) must be held and fresh at every
  observation, by the same holder (a failover takes a lease duration); a group whose last release was undone backs off
  up to a minute (its condition says "reservation undone"), so it is given that much longer.
And each finding must persist: the same group found fitting and waiting at every observation over `bound` seconds
(the loop's period is 5 s; a release takes a cycle and a few writes). One observation where it does not fit, is
held back or is released starts it over.

`Liveness.observe` is pure (objects and a clock in, findings out); `take` reads the objects with kubectl, cluster-wide;
`judge` observes a live cluster until no gang fits and waits, or one did for the bound.
"""

from __future__ import annotations

import datetime
import functools
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from phalanx.api import keys, schema, times
from phalanx.kinds import KINDS
from phalanx.planner import DeviceMatcher, Fits, plan
from phalanx.planner.model import DeviceId, Group, Snapshot
from phalanx.planner.queue import takes_room
from phalanx.scheduling import accessors, disruption, explain_view, explanation, headhold, inputs, phase, podsready, queue, snapshots

JSON = dict[str, Any]

LEASE_NAMESPACE = "phalanx-system"
LEASE_NAME = "phalanx-leader"
BOUND = 15.0
"""Seconds a gang may fit and wait: three of the loop's 5 s periods, each ample for a cycle and a release's writes."""
UNDONE_BACKOFF = 60.0
"""The loop's back-off cap after a release undone (`Loop._back_off`): such a group is given this much longer."""
UNDONE = "reservation undone"
"""How the PodGroup's condition begins after a release undone (`Loop._release`)."""


@dataclass(frozen=True)
class Objects:
    """One list of each kind the planner reads, cluster-wide, and the Leases."""

    nodes: Sequence[JSON] = ()
    pods: Sequence[JSON] = ()
    slices: Sequence[JSON] = ()
    claims: Sequence[JSON] = ()
    classes: Sequence[JSON] = ()
    podgroups: Sequence[JSON] = ()
    priorities: Sequence[JSON] = ()
    taint_rules: Sequence[JSON] = ()
    leases: Sequence[JSON] | None = None
    """None: not read, and an operator is taken to lead (a world made by hand, or a test of the oracle itself)."""


@dataclass(frozen=True)
class Waiter:
    """A gang that fits now and waits, with no group ahead of it that could use the room."""

    uid: str
    namespace: str
    name: str
    priority: int
    min_count: int
    members: int
    placements: tuple[tuple[str, str], ...]
    """(member, node) of the plan that fits."""
    condition: str
    """Its PodGroupInitiallyScheduled as written: reason, message."""
    grace: float = 0.0
    """Seconds beyond the bound it is given (a back-off the objects show)."""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class Finding:
    waiter: Waiter
    waited: float
    """Seconds from the first observation that found it fitting and waiting to the last."""
    observations: int
    leader: str
    explained: str = ""
    """What `explain` says of it on the last observation (its State line)."""

    def __str__(self) -> str:
        w = self.waiter
        where = ", ".join(f"{m}->{n}" for m, n in w.placements)
        said = f"; explain: {self.explained}" if self.explained else ""
        return (
            f"PodGroup {w.key} (priority {w.priority}, minCount {w.min_count}, {w.members} members waiting) fit and waited "
            f"{self.waited:.0f}s over {self.observations} observations while {self.leader} led, no group ahead of it able "
            f"to use the room: plan {where}; its condition: {w.condition}{said}"
        )


@dataclass(frozen=True)
class _Entry:
    """A group the loop would put in its line this cycle (or release), in queue order."""

    pod_group: Mapping[str, Any]
    group: Group
    priority: int
    freed: frozenset[DeviceId]
    """A preempting gang's nominated devices: its room once its victims go."""
    first: bool
    """A gang waiting for its first placement, not preempting: the only kind judged."""
    grace: float


def leader(leases: Iterable[Mapping[str, Any]], now: datetime.datetime) -> str | None:
    """The holder of the operator's Lease while it is fresh (renewed within its duration), else None."""
    for lease in leases:
        meta, spec = lease["metadata"], lease.get("spec") or {}
        if (meta.get("namespace"), meta.get("name")) != (LEASE_NAMESPACE, LEASE_NAME):
            continue
        holder, renewed = spec.get("holderIdentity"), spec.get("renewTime")
        if not holder or not renewed:
            return None
        age = times.seconds_since(renewed, now)
        return str(holder) if age <= float(spec.get("leaseDurationSeconds") or 10) else None
    return None


def _condition(pod_group: Mapping[str, Any]) -> Mapping[str, Any]:
    for cond in (pod_group.get("status") or {}).get("conditions") or []:
        if cond["type"] == keys.INITIALLY_SCHEDULED:
            return cond
    return {}


def _backing_off(pod_group: Mapping[str, Any], now: datetime.datetime) -> bool:
    raw = (pod_group.get("status") or {}).get("readiness")
    return bool(raw) and podsready.backing_off(schema.Readiness.model_validate(raw), now) is not None


def _entries(objects: Objects, now: datetime.datetime, rank: Callable[[Mapping[str, Any]], int]) -> list[_Entry]:
    """Every group with members behind the gate the loop could place this cycle, in queue order."""
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in objects.claims}

    def claim(namespace: str, name: str) -> Mapping[str, Any] | None:
        return claims.get((namespace, name))

    pods_of = accessors.pods_by_group(objects.podgroups, objects.pods, KINDS)
    out = []
    for pod_group in sorted(objects.podgroups, key=lambda g: queue.order(g, rank(g))):
        if pod_group["metadata"].get("deletionTimestamp"):
            continue
        every = pods_of.get(pod_group["metadata"]["uid"], [])
        live = [p for p in every if accessors.live(p)]
        gang = accessors.gang(pod_group)
        done = disruption.finished(pod_group, every) if gang else 0
        facts = phase.read(pod_group, live, claim, done=done)
        now_in = phase.classify(facts)
        ready = [p for p in live if accessors.gated(p) and accessors.claims_ready(p, claim)]
        nomination = accessors.nomination(pod_group)
        if now_in in (phase.Phase.PLANNABLE, phase.Phase.PREEMPTING):
            if _backing_off(pod_group, now):
                continue  # not in the loop's line either: it holds no one back
            freed = frozenset(accessors.nominated_devices(nomination)) if nomination is not None else frozenset()
            undone = str(_condition(pod_group).get("message") or "").startswith(UNDONE)
            group = inputs.group(pod_group, ready, facts.needed)
            out.append(_Entry(pod_group, group, rank(pod_group), freed, nomination is None, UNDONE_BACKOFF if undone else 0.0))
        elif now_in in (phase.Phase.EACH, phase.Phase.RUNNING, phase.Phase.BELOW_MIN) and ready:
            # late members, or a basic group's: released as they fit, each able to hold back those behind
            out.append(_Entry(pod_group, inputs.group(pod_group, ready, 1), rank(pod_group), frozenset(), False, 0.0))
    return out


def _ruled(taint_rules: Iterable[Mapping[str, Any]]) -> dict[str, set[DeviceId]]:
    """Purpose -> devices under a DeviceTaintRule of Phalanx's."""
    out: dict[str, set[DeviceId]] = {}
    for rule in taint_rules:
        labels = rule["metadata"].get("labels") or {}
        if labels.get(keys.MANAGED_BY_LABEL) != keys.MANAGER_NAME:
            continue
        device = tuple(((rule["metadata"].get("annotations") or {}).get(keys.HELD_DEVICE_ANNOTATION) or "").split("/", 2))
        if len(device) == 3:
            out.setdefault(labels.get(keys.TAINT_PURPOSE_LABEL, ""), set()).add(device)  # type: ignore[arg-type]
    return out


def _reserving(podgroups: Iterable[Mapping[str, Any]]) -> dict[str, frozenset[DeviceId]]:
    """PodGroup uid -> the devices its reservation under way (state Reserving) names: being written, maybe not yet."""
    out = {}
    for g in podgroups:
        record = accessors.reservation(g)
        if record is not None and record.state == "Reserving":
            out[g["metadata"]["uid"]] = frozenset((r.driver, r.pool, r.device) for c in record.claims for r in c.results)
    return out


def fitting(objects: Objects, now: datetime.datetime, matcher: DeviceMatcher | None = None) -> list[Waiter]:
    """The gangs waiting for their first placement that fit now, with no group ahead of them able to use the room:
    one observation's verdict, from the objects alone."""
    matcher = matcher or DeviceMatcher()
    priorities = {p["metadata"]["name"]: p for p in objects.priorities}
    rank = functools.partial(accessors.priority, priority_class=priorities.get)
    line = _entries(objects, now, rank)
    if not any(e.first for e in line):
        return []
    hold = headhold.from_status(objects.podgroups, rank)
    ruled = _ruled(objects.taint_rules)
    reserving = _reserving(objects.podgroups)
    built: dict[str, Snapshot] = {}

    def room(entry: _Entry) -> Snapshot:
        """The cluster as the loop plans `entry` on: as `explain` builds it, plus what is held for others in ways the
        loop learns from its own memory (rules, releases under way); a preempting gang's victims' devices free."""
        uid = entry.pod_group["metadata"]["uid"]
        if uid not in built:
            base = snapshots.snapshot(
                objects.nodes,
                objects.pods,
                objects.slices,
                objects.claims,
                objects.classes,
                objects.podgroups,
                for_group=entry.pod_group,
                taint_rules=objects.taint_rules,
            )
            base = headhold.elsewhere(base, hold, entry.pod_group, rank)
            mine = hold is not None and (hold.uid == uid or entry.priority > hold.priority)
            others: set[DeviceId] = set()
            for purpose, devices in ruled.items():
                if purpose == headhold.HEAD and mine:
                    continue
                others |= devices
            others |= {d for g, devices in reserving.items() if g != uid for d in devices}
            built[uid] = replace(base, held=base.held | others) if others - base.held else base
        ahead = queue.Ahead(entry.pod_group, entry.group, entry.priority, entry.freed)
        return queue.Line.room(built[uid], ahead)

    out = []
    for i, entry in enumerate(line):
        if not entry.first:
            continue
        result = plan(room(entry), entry.group, matcher)
        if not isinstance(result, Fits):
            continue
        if any(takes_room(room(ahead), ahead.group, result, matcher) for ahead in line[:i]):
            continue
        meta = entry.pod_group["metadata"]
        cond = _condition(entry.pod_group)
        out.append(
            Waiter(
                uid=meta["uid"],
                namespace=meta["namespace"],
                name=meta["name"],
                priority=entry.priority,
                min_count=accessors.min_count(entry.pod_group),
                members=len(entry.group.members),
                placements=tuple(sorted((m.name, node) for m, node in result.placements)),
                condition=f"{cond.get('reason', '-')}: {cond.get('message', '')}" if cond else "(none)",
                grace=entry.grace,
            )
        )
    return out


def explained(objects: Objects, uid: str, now: datetime.datetime) -> str:
    """`explain`'s State line for the group, for the report (empty if it cannot say)."""
    pod_group = next((g for g in objects.podgroups if g["metadata"]["uid"] == uid), None)
    if pod_group is None:
        return ""
    lists = explain_view.Objects(
        nodes=objects.nodes,
        pods=objects.pods,
        slices=objects.slices,
        claims=objects.claims,
        classes=objects.classes,
        priorities=objects.priorities,
        podgroups=objects.podgroups,
        taint_rules=objects.taint_rules,
    )
    try:
        said = explanation.explain(lists, pod_group, now, KINDS)
    except Exception as exc:  # the report must not hide the finding
        return f"(explain failed: {exc!r})"
    return f"{said.state}: {said.summary}"


@dataclass
class _Streak:
    since: datetime.datetime
    observations: int


@dataclass
class Liveness:
    """Observations of one cluster over time: a gang is reported once it fit and waited, with nothing ahead of it
    able to use the room, at every observation over `bound` seconds (plus the grace its back-off asks for), while one
    operator led throughout."""

    bound: float = BOUND
    matcher: DeviceMatcher = field(default_factory=DeviceMatcher)
    observations: int = 0
    sightings: int = 0
    """Gangs found fitting and waiting, summed over the observations (most are released within the bound)."""
    _streaks: dict[str, _Streak] = field(default_factory=dict)
    _leader: str | None = None

    def observe(self, objects: Objects, now: datetime.datetime) -> list[Finding]:
        """Judge one observation; the findings are the gangs whose wait has outlasted the bound."""
        self.observations += 1
        led = "an operator" if objects.leases is None else leader(objects.leases, now)
        if led is None or led != self._leader:
            self._streaks = {}  # nothing is released while no one leads, and a new leader starts from its own reads
        self._leader = led
        if led is None:
            return []
        found = fitting(objects, now, self.matcher)
        self.sightings += len(found)
        streaks = {}
        for waiter in found:
            streak = self._streaks.get(waiter.uid)
            streaks[waiter.uid] = _Streak(streak.since, streak.observations + 1) if streak is not None else _Streak(now, 1)
        self._streaks = streaks
        out = []
        for waiter in found:
            streak = streaks[waiter.uid]
            waited = (now - streak.since).total_seconds()
            if waited >= self.bound + waiter.grace:
                out.append(Finding(waiter, waited, streak.observations, led, explained(objects, waiter.uid, now)))
        return out

    @property
    def pending(self) -> int:
        """Gangs found fitting and waiting at the last observation, not yet for the bound."""
        return len(self._streaks)


def _items(kubectl: Callable[..., Any], resources: str) -> list[JSON]:
    return list(json.loads(kubectl("get", resources, "-A", "-o", "json").stdout).get("items") or [])


_READ = {
    "nodes": "nodes",
    "pods": "pods",
    "slices": "resourceslices.resource.k8s.io",
    "claims": "resourceclaims.resource.k8s.io",
    "classes": "deviceclasses.resource.k8s.io",
    "podgroups": f"podgroups.{keys.GROUP}",
    "priorities": "priorityclasses.scheduling.k8s.io",
    "taint_rules": "devicetaintrules.resource.k8s.io",
    "leases": "leases.coordination.k8s.io",
}
_KIND = {
    "Node": "nodes",
    "Pod": "pods",
    "ResourceSlice": "slices",
    "ResourceClaim": "claims",
    "DeviceClass": "classes",
    "PodGroup": "podgroups",
    "PriorityClass": "priorities",
    "DeviceTaintRule": "taint_rules",
    "Lease": "leases",
}


def take(kubectl: Callable[..., Any]) -> Objects:
    """Every object the oracle reads, cluster-wide (other namespaces' pods take room too), in one kubectl call: the
    lists are read one after another, as the loop's informers see them, not at one resourceVersion."""
    wanted = dict(_READ)
    try:
        items = _items(kubectl, ",".join(wanted.values()))
    except AssertionError:
        del wanted["taint_rules"]  # a server that does not serve DeviceTaintRules: none apply
        items = _items(kubectl, ",".join(wanted.values()))
    lists: dict[str, list[JSON]] = {k: [] for k in wanted}
    for item in items:
        kind = _KIND.get(item.get("kind", ""))
        if kind is not None and kind in lists:
            lists[kind].append(item)
    return Objects(**lists)


@dataclass(frozen=True)
class Verdict:
    findings: list[Finding]
    observations: int
    seconds: float


def judge(kubectl: Callable[..., Any], bound: float = BOUND, interval: float = 1.0, reads: Callable[[], Objects] | None = None) -> Verdict:
    """Observe a live cluster until no gang fits and waits (at once, in the common case: one read), or one has for
    the bound (its findings). Bounded: a gang that keeps coming and going is watched for at most three bounds and
    the back-off grace."""
    tracker = Liveness(bound)
    started = time.monotonic()
    read = reads or (lambda: take(kubectl))
    while True:
        findings = tracker.observe(read(), datetime.datetime.now(datetime.UTC))
        spent = time.monotonic() - started
        if findings or not tracker.pending or spent > 3 * bound + UNDONE_BACKOFF:
            return Verdict(findings, tracker.observations, spent)
        time.sleep(interval)


@dataclass
class Watch:
    """Liveness observed along a running test (the load tests), at most once per `interval` seconds of its steps."""

    kubectl: Callable[..., Any]
    bound: float = BOUND
    interval: float = 2.0
    tracker: Liveness = field(init=False)
    _last: float = field(default=float("-inf"), init=False)

    def __post_init__(self) -> None:
        self.tracker = Liveness(self.bound)

    def check(self) -> list[Finding]:
        if time.monotonic() - self._last < self.interval:
            return []
        self._last = time.monotonic()
        return self.tracker.observe(take(self.kubectl), datetime.datetime.now(datetime.UTC))
