"""From API objects (the view's dicts) to the planner's model: nodes, pods, devices, claims and members, one object
at a time (`snapshots` puts a snapshot together from them, `occupancy` keeps each node's).

What one object says (a pod's claims, a claim's devices) is read with
`accessors`; here those reads become the planner's dataclasses. This is the
edge where Kubernetes' shapes meet the core's: a pod's effective requests as
the scheduler computes them, only the newest complete generation of a
ResourceSlice pool, each claim's requests and the fields it cannot model.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from phalanx.api import keys
from phalanx.planner import quantity
from phalanx.planner.model import (
    CapacityPolicy,
    Claim,
    ClaimKey,
    Container,
    CounterUse,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    Group,
    HostPort,
    MatchAttribute,
    Member,
    Node,
    Pod,
    PodTerm,
    Requirement,
    Role,
    Selector,
    Spread,
    Taint,
    Toleration,
    frozen_map,
    shared_map,
)
from phalanx.planner.nodes import selector_terms
from phalanx.scheduling import composites
from phalanx.scheduling.accessors import (
    allocated_ids,
    claim_names,
    dedicated_ids,
    pinned_node,
    shares,
    topology_key,
)
from phalanx.scheduling.derived import Derived

Requests = tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class Published:
    """What the ResourceSlices offer (with the DeviceTaintRules' taints): their devices, the shared counters of
    each complete pool, and a placeholder for each slice of a pool still being published."""

    devices: tuple[Device, ...]
    counters: Mapping[tuple[str, str], Mapping[str, Mapping[str, Decimal]]]
    incomplete: tuple[Device, ...]


def _versions(objs: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, str], ...] | None:
    """Every object's (uid, resourceVersion), in order; None when one lacks either (made by hand: never cached)."""
    out = []
    for obj in objs:
        meta = obj.get("metadata") or {}
        uid, version = meta.get("uid"), meta.get("resourceVersion")
        if not uid or not version:
            return None
        out.append((uid, version))
    return tuple(out)


ClaimView = tuple[Claim, tuple[DeviceId, ...], tuple[tuple[DeviceId, dict[str, Decimal]], ...]]
"""A claim as the planner models it, with the devices its allocation takes whole and the shares it holds."""


def claim_view(obj: Mapping[str, Any]) -> ClaimView:
    return claim(obj), dedicated_ids(obj), tuple(shares(obj))


@dataclass(frozen=True)
class Modelled:
    """The claims as the planner counts them: each claim's model, the devices held whole, and the shares held."""

    models: Mapping[ClaimKey, Claim]
    whole: frozenset[DeviceId]
    shares: tuple[tuple[DeviceId, Mapping[str, Decimal]], ...]


def modelled(views: Iterable[ClaimView]) -> Modelled:
    views = list(views)
    return Modelled(
        frozen_map({model.key: model for model, _, _ in views}),
        frozenset(d for _, whole, _ in views for d in whole),
        tuple(s for _, _, held_by in views for s in held_by),
    )


@dataclass
class Reuse:
    """What `published` may take from the builds before it: each slice's devices by the slice's version (`derived`),
    and what all the slices publish while none changed."""

    slices: Derived[tuple[Device, ...]] = field(default_factory=Derived)
    published: tuple[Any, Published] | None = None
    """What the slices publish, by every slice's and DeviceTaintRule's (uid, resourceVersion), in order (or the
    stores' `written`, where the caller has them): slices change rarely, and at 5,000 slices grouping them into
    pools (three walks a build) took a quarter of every build."""


def containers(pod: Mapping[str, Any]) -> tuple[Container, ...]:
    """Init containers, then regular ones, with every request they name (for extended resources a DeviceClass serves)."""
    spec = pod["spec"]

    def of(c: Mapping[str, Any], init: bool) -> Container:
        requests = ((c.get("resources") or {}).get("requests")) or {}
        return Container(
            shared_map({k: quantity.amount(k, v) for k, v in requests.items()}),
            init=init,
            sidecar=init and c.get("restartPolicy") == "Always",
        )

    return tuple(of(c, True) for c in spec.get("initContainers") or []) + tuple(of(c, False) for c in spec.get("containers") or [])


def pod_requests(pod: Mapping[str, Any]) -> Counter[str]:
    """Effective requests as the scheduler computes them: containers summed, init containers' max, overhead."""
    total: Counter[str] = Counter()
    for container in pod["spec"].get("containers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] += quantity.amount(name, value)
    for container in pod["spec"].get("initContainers") or []:
        for name, value in ((container.get("resources") or {}).get("requests") or {}).items():
            total[name] = max(total[name], quantity.amount(name, value))
    for name, value in (pod["spec"].get("overhead") or {}).items():
        total[name] += quantity.amount(name, value)
    return total


def node(obj: Mapping[str, Any], requested: Mapping[str, int]) -> Node:
    spec = obj.get("spec") or {}
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    return Node(
        name=obj["metadata"]["name"],
        labels=frozen_map(obj["metadata"].get("labels")),
        taints=tuple(Taint(t["key"], t.get("value", ""), t.get("effect", "")) for t in spec.get("taints") or []),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=shared_map({k: quantity.amount(k, v) for k, v in allocatable.items()}),
        requested=frozen_map(requested),
    )


def _attribute(value: Mapping[str, Any]) -> Any:
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return value[kind]
    return None


def _pools(slices: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """The slices of the newest generation of each pool, sorted by name as the allocator reads them; only of pools
    whose slices are all published."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in slices:
        spec = s["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(s)
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for key, objs in pools.items():
        newest = max(o["spec"]["pool"].get("generation", 0) for o in objs)
        current = [o for o in objs if o["spec"]["pool"].get("generation", 0) == newest]
        if len(current) < max(o["spec"]["pool"].get("resourceSliceCount", 1) for o in current):
            continue
        out[key] = sorted(current, key=lambda o: (o.get("metadata") or {}).get("name", ""))
    return out


def incomplete_pools(slices: Iterable[Mapping[str, Any]], complete: Iterable[tuple[str, str]] | None = None) -> list[Device]:
    """One placeholder per slice of a pool being updated (not all its slices published): where the pool reaches.
    The scheduler refuses `allocationMode: All` on a node such a pool reaches (it cannot know what "all" is).
    `complete`: the complete pools, where the caller has them (`_pools`)."""
    slices = list(slices)
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in slices:
        spec = s["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    complete = set(_pools(slices) if complete is None else complete)
    out = []
    for (driver, pool), specs in pools.items():
        if (driver, pool) in complete:
            continue
        for spec in specs:
            selector = selector_terms(spec.get("nodeSelector")) if spec.get("nodeSelector") else None
            out.append(
                Device(
                    driver,
                    pool,
                    "",
                    node_name=spec.get("nodeName"),
                    node_selector=selector,
                    all_nodes=bool(spec.get("allNodes") or spec.get("perDeviceNodeSelection")),
                )
            )
    return out


def _exact(value: Any) -> Decimal:
    return quantity.parse(value)


def _capacity(value: Mapping[str, Any]) -> CapacityPolicy:
    policy = value.get("requestPolicy") or {}
    valid_range = policy.get("validRange") or {}
    return CapacityPolicy(
        value=_exact(value["value"]),
        default=_exact(policy["default"]) if policy.get("default") is not None else None,
        valid_values=tuple(_exact(v) for v in policy.get("validValues") or ()),
        minimum=_exact(valid_range["min"]) if valid_range.get("min") is not None else None,
        maximum=_exact(valid_range["max"]) if valid_range.get("max") is not None else None,
        step=_exact(valid_range["step"]) if valid_range.get("step") is not None else None,
    )


def _taints(raw: Iterable[Mapping[str, Any]]) -> tuple[Taint, ...]:
    return tuple(Taint(t["key"], t.get("value", ""), t.get("effect", "")) for t in raw)


def rule_taints(rules: Iterable[Mapping[str, Any]]) -> list[tuple[Mapping[str, str], Taint]]:
    """DeviceTaintRules as (selector, taint), except Phalanx's own: those keep devices from kube-scheduler only,
    and the planner already counts those devices as held (or, for the group a preemption freed them for, as free)."""
    out = []
    for rule in rules:
        if (rule["metadata"].get("labels") or {}).get(keys.MANAGED_BY_LABEL) == keys.MANAGER_NAME:
            continue
        spec = rule.get("spec") or {}
        taint = spec.get("taint") or {}
        out.append((spec.get("deviceSelector") or {}, Taint(taint.get("key", ""), taint.get("value", ""), taint.get("effect", ""))))
    return out


def devices(
    slices: Iterable[Mapping[str, Any]],
    taint_rules: Iterable[Mapping[str, Any]] = (),
    reuse: Reuse | None = None,
    pools: Mapping[tuple[str, str], list[Mapping[str, Any]]] | None = None,
) -> list[Device]:
    """Devices of the newest generation of each complete pool, with the taints their slices and DeviceTaintRules give.

    A slice's devices are taken from `reuse` only while no DeviceTaintRule of another's applies (they would
    depend on the rules too). `pools`: the slices' `_pools`, where the caller has them."""
    rules = rule_taints(taint_rules)
    out: list[Device] = []
    for (driver, pool), objs in (_pools(slices) if pools is None else pools).items():
        for obj in objs:
            if rules or reuse is None:
                out.extend(_slice_devices(obj, driver, pool, rules))
            else:
                out.extend(reuse.slices.get(obj, None, lambda obj=obj, driver=driver, pool=pool: _slice_devices(obj, driver, pool, ())))
    return out


def _slice_devices(obj: Mapping[str, Any], driver: str, pool: str, rules: list[tuple[Mapping[str, str], Taint]]) -> tuple[Device, ...]:
    spec = obj["spec"]
    per_device = bool(spec.get("perDeviceNodeSelection"))
    out = []
    for d in spec.get("devices") or []:
        where = d if per_device else spec
        selector = selector_terms(where.get("nodeSelector")) if where.get("nodeSelector") else None
        attributes = {(k if "/" in k else f"{driver}/{k}"): _attribute(v) for k, v in (d.get("attributes") or {}).items()}
        capacity = {(k if "/" in k else f"{driver}/{k}"): quantity.amount("", v["value"]) for k, v in (d.get("capacity") or {}).items()}
        taints = _taints(d.get("taints") or ()) + tuple(
            t
            for sel, t in rules
            if sel.get("driver", driver) == driver and sel.get("pool", pool) == pool and sel.get("device", d["name"]) == d["name"]
        )
        out.append(
            Device(
                driver=driver,
                pool=pool,
                name=d["name"],
                node_name=where.get("nodeName"),
                node_selector=selector,
                all_nodes=bool(where.get("allNodes")),
                attributes=frozen_map(attributes),
                capacity=shared_map(capacity),
                generation=spec["pool"].get("generation", 0),
                taints=taints,
                consumes=tuple(
                    CounterUse(c["counterSet"], frozen_map({n: _exact(v["value"]) for n, v in (c.get("counters") or {}).items()}))
                    for c in d.get("consumesCounters") or ()
                ),
                allow_multiple=bool(d.get("allowMultipleAllocations")),
                capacities=shared_map({n: _capacity(v) for n, v in (d.get("capacity") or {}).items()}),
                binding_conditions=tuple(d.get("bindingConditions") or ()),
                binding_failure_conditions=tuple(d.get("bindingFailureConditions") or ()),
                binds_to_node=bool(d.get("bindsToNode")),
            )
        )
    return tuple(out)


def counters(
    slices: Iterable[Mapping[str, Any]], pools: Mapping[tuple[str, str], list[Mapping[str, Any]]] | None = None
) -> dict[tuple[str, str], Mapping[str, Mapping[str, Decimal]]]:
    """The sharedCounters each complete pool publishes: (driver, pool) -> counter set -> counter -> value."""
    out: dict[tuple[str, str], Mapping[str, Mapping[str, Decimal]]] = {}
    for key, objs in (_pools(slices) if pools is None else pools).items():
        sets = {
            c["name"]: frozen_map({n: _exact(v["value"]) for n, v in (c.get("counters") or {}).items()})
            for obj in objs
            for c in obj["spec"].get("sharedCounters") or ()
        }
        if sets:
            out[key] = frozen_map(sets)
    return out


def published(
    slices: Iterable[Mapping[str, Any]], taint_rules: Iterable[Mapping[str, Any]] = (), reuse: Reuse | None = None, written: Any = None
) -> Published:
    """What the slices offer, served whole from `reuse` while no slice and no rule changed: by `written` (the stores'
    `written`, which the loop's cache has), else by every object's version."""
    slices, taint_rules = list(slices), list(taint_rules)
    if written is not None:
        key: Any = ("written", written)
    else:
        versions, rule_versions = _versions(slices), _versions(taint_rules)
        key = None if versions is None or rule_versions is None else (versions, rule_versions)
    if reuse is not None and key is not None and reuse.published is not None and reuse.published[0] == key:
        return reuse.published[1]
    pools = _pools(slices)
    out = Published(
        devices=tuple(devices(slices, taint_rules, reuse, pools)),
        counters=frozen_map(counters(slices, pools)),
        incomplete=tuple(incomplete_pools(slices, pools)),
    )
    if reuse is not None:
        reuse.slices.sweep()
        reuse.published = None if key is None else (key, out)
    return out


def extended_resources(classes: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Extended resource name -> DeviceClass: the implicit `deviceclass.resource.kubernetes.io/<class>` every class
    answers to, and each class's extendedResourceName; of several classes naming one resource, kube-scheduler's
    cache keeps the newest (creationTimestamp), on a tie the first by name."""
    out: dict[str, str] = {}
    explicit: dict[str, tuple[str, str]] = {}
    for obj in classes:
        name = obj["metadata"]["name"]
        out[f"deviceclass.resource.kubernetes.io/{name}"] = name
        resource = (obj.get("spec") or {}).get("extendedResourceName")
        if resource:
            created = obj["metadata"].get("creationTimestamp") or ""
            known = explicit.get(resource)
            if known is None or created > known[0] or (created == known[0] and name < known[1]):
                explicit[resource] = (created, name)
    out.update({resource: name for resource, (_, name) in explicit.items()})
    return out


def device_class(obj: Mapping[str, Any]) -> DeviceClass:
    spec = obj.get("spec") or {}
    return DeviceClass(
        name=obj["metadata"]["name"],
        selectors=tuple(s["cel"]["expression"] for s in spec.get("selectors") or [] if "cel" in s),
        config=tuple(frozen_map(c) for c in spec.get("config") or []),
    )


def _toleration(t: Mapping[str, Any]) -> Toleration:
    seconds = t.get("tolerationSeconds")
    return Toleration(
        t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""), None if seconds is None else int(seconds)
    )


_KNOWN_REQUEST = {"deviceClassName", "allocationMode", "count", "selectors", "adminAccess", "tolerations", "capacity"}


def _request(name: str, body: Mapping[str, Any], where: str, unmodelled: list[str]) -> DeviceRequest:
    """One `exactly` request or `firstAvailable` subrequest; fields it cannot honour are named in `unmodelled`."""
    for key in sorted(set(body) - _KNOWN_REQUEST - {"name"}):
        unmodelled.append(f"{where}.{key} is not modelled")
    if any("cel" not in s for s in body.get("selectors") or []):
        unmodelled.append(f"{where}.selectors: only CEL selectors are modelled")
    return DeviceRequest(
        name=name,
        device_class=body.get("deviceClassName", ""),
        mode=body.get("allocationMode", "ExactCount"),
        count=int(body.get("count", 1)),
        selectors=tuple(s["cel"]["expression"] for s in body.get("selectors") or [] if "cel" in s),
        admin_access=bool(body.get("adminAccess")),
        tolerations=tuple(_toleration(t) for t in body.get("tolerations") or ()),
        capacity=frozen_map({n: _exact(v) for n, v in ((body.get("capacity") or {}).get("requests") or {}).items()}),
    )


def claim(obj: Mapping[str, Any]) -> Claim:
    devices_spec = (obj.get("spec") or {}).get("devices") or {}
    requests = []
    unmodelled: list[str] = []
    for i, r in enumerate(devices_spec.get("requests") or []):
        if r.get("firstAvailable"):
            subs = tuple(
                _request(s["name"], s, f"spec.devices.requests[{i}].firstAvailable[{j}]", unmodelled)
                for j, s in enumerate(r["firstAvailable"])
            )
            requests.append(DeviceRequest(name=r["name"], device_class="", subrequests=subs))
        else:
            requests.append(_request(r["name"], r.get("exactly") or {}, f"spec.devices.requests[{i}].exactly", unmodelled))
    constraints = []
    for i, c in enumerate(devices_spec.get("constraints") or []):
        if c.get("matchAttribute"):
            constraints.append(MatchAttribute(c["matchAttribute"], tuple(c.get("requests") or ())))
        elif c.get("distinctAttribute"):
            constraints.append(MatchAttribute(c["distinctAttribute"], tuple(c.get("requests") or ()), distinct=True))
        else:
            unmodelled.append(f"spec.devices.constraints[{i}]: only matchAttribute and distinctAttribute are modelled")
    allocation = (obj.get("status") or {}).get("allocation")
    return Claim(
        namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"],
        uid=obj["metadata"]["uid"],
        requests=tuple(requests),
        constraints=tuple(constraints),
        config=tuple(frozen_map(c) for c in devices_spec.get("config") or []),
        allocated=allocated_ids(obj),
        allocated_node=pinned_node(allocation),
        reserved_for=len((obj.get("status") or {}).get("reservedFor") or ()),
        unmodelled=tuple(unmodelled),
    )


def label_selector(selector: Mapping[str, Any] | None) -> Selector | None:
    """matchLabels as `In` requirements, then matchExpressions; an absent selector stays None (it selects nothing)."""
    if selector is None:
        return None
    requirements = [Requirement(k, "In", (v,)) for k, v in sorted((selector.get("matchLabels") or {}).items())]
    requirements += [Requirement(e["key"], e["operator"], tuple(e.get("values") or ())) for e in selector.get("matchExpressions") or []]
    return tuple(requirements)


def _merged(
    selector: Selector | None, labels: Mapping[str, str], same: Iterable[str] = (), different: Iterable[str] = ()
) -> Selector | None:
    """matchLabelKeys (and mismatchLabelKeys) merged as the API server does at pod creation: a key the pod lacks is
    skipped, an absent selector stays absent, and a second merge of the same keys selects the same pods."""
    if selector is None:
        return None
    extra = [Requirement(k, "In", (labels[k],)) for k in same if k in labels]
    extra += [Requirement(k, "NotIn", (labels[k],)) for k in different if k in labels]
    return selector + tuple(extra)


def pod_terms(pod: Mapping[str, Any], kind: str) -> tuple[PodTerm, ...]:
    """The required terms of `kind` (podAffinity or podAntiAffinity); preferred terms only score."""
    meta = pod["metadata"]
    labels = meta.get("labels") or {}
    terms = (((pod["spec"].get("affinity") or {}).get(kind) or {}).get("requiredDuringSchedulingIgnoredDuringExecution")) or []
    out = []
    for t in terms:
        namespace_selector = t.get("namespaceSelector")
        namespaces = t.get("namespaces") or ([meta["namespace"]] if namespace_selector is None else [])
        selector = _merged(label_selector(t.get("labelSelector")), labels, t.get("matchLabelKeys") or (), t.get("mismatchLabelKeys") or ())
        out.append(PodTerm(t["topologyKey"], selector, frozenset(namespaces), label_selector(namespace_selector)))
    return tuple(out)


def spread(pod: Mapping[str, Any]) -> tuple[Spread, ...]:
    """The DoNotSchedule topology spread constraints; ScheduleAnyway ones only score."""
    labels = pod["metadata"].get("labels") or {}
    return tuple(
        Spread(
            topology_key=c["topologyKey"],
            max_skew=int(c.get("maxSkew", 1)),
            selector=_merged(label_selector(c.get("labelSelector")), labels, c.get("matchLabelKeys") or ()),
            min_domains=int(c.get("minDomains") or 1),
            node_affinity_policy=c.get("nodeAffinityPolicy") or "Honor",
            node_taints_policy=c.get("nodeTaintsPolicy") or "Ignore",
        )
        for c in pod["spec"].get("topologySpreadConstraints") or []
        if c.get("whenUnsatisfiable") == "DoNotSchedule"
    )


def host_ports(pod: Mapping[str, Any]) -> tuple[HostPort, ...]:
    """Host ports of the containers and of sidecars (init containers with restartPolicy Always), as the scheduler's GetHostPorts."""
    spec = pod["spec"]
    containers = [c for c in spec.get("initContainers") or [] if c.get("restartPolicy") == "Always"] + list(spec.get("containers") or [])
    return tuple(
        HostPort(int(p["hostPort"]), p.get("protocol") or "TCP", p.get("hostIP") or "0.0.0.0")
        for c in containers
        for p in c.get("ports") or []
        if int(p.get("hostPort") or 0) > 0
    )


def existing(pod: Mapping[str, Any], node_name: str) -> Pod:
    """A pod on a node, as other pods' placement sees it."""
    meta = pod["metadata"]
    return Pod(
        namespace=meta["namespace"],
        name=meta["name"],
        node=node_name,
        labels=shared_map(meta.get("labels")),
        anti_affinity=pod_terms(pod, "podAntiAffinity"),
        host_ports=host_ports(pod),
        terminating=bool(meta.get("deletionTimestamp")),
    )


def member(pod: Mapping[str, Any], claims: tuple[str, ...]) -> Member:
    spec = pod["spec"]
    affinity = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    return Member(
        namespace=pod["metadata"]["namespace"],
        name=pod["metadata"]["name"],
        uid=pod["metadata"]["uid"],
        requests=frozen_map(pod_requests(pod)),
        tolerations=tuple(_toleration(t) for t in spec.get("tolerations") or []),
        node_selector=frozen_map(spec.get("nodeSelector")),
        affinity=selector_terms(affinity),
        claims=claims,
        labels=frozen_map(pod["metadata"].get("labels")),
        pod_affinity=pod_terms(pod, "podAffinity"),
        pod_anti_affinity=pod_terms(pod, "podAntiAffinity"),
        spread=spread(pod),
        host_ports=host_ports(pod),
        containers=containers(pod),
    )


def group(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], quorum: int, derived: Derived[Member] | None = None) -> Group:
    """The planner's group: these pods as members, `quorum` of them needed together. `derived`: each pod's member as
    derived before, by its version and claims (the loop keeps one: a waiting gang is met every cycle)."""
    topology = topology_key(pod_group)
    kept: Derived[Member] = Derived() if derived is None else derived
    found = tuple((p, claim_names(p) or ()) for p in pods)
    members = tuple(kept.get(p, claims, lambda p=p, claims=claims: member(p, claims)) for p, claims in found)
    roles = _roles(composites.roles(pod_group), [p for p, _ in found])
    return Group(pod_group["metadata"]["namespace"], pod_group["metadata"]["name"], quorum, members, topology, roles)


def _roles(minimums: Sequence[tuple[str, int]], pods: Sequence[Mapping[str, Any]]) -> tuple[Role, ...]:
    """A composite's roles (`scheduling.composites`): each child PodGroup with its minimum and the members whose
    label names it (`composites.role_of`). A member whose role is no longer a child is a role of minimum 0, so it is
    never left out of a role (it goes along if it fits)."""
    if not minimums:
        return ()
    uids: dict[str, set[str]] = {name: set() for name, _ in minimums}
    for pod in pods:
        uids.setdefault(composites.role_of(pod), set()).add(pod["metadata"]["uid"])
    wanted = dict(minimums)
    return tuple(Role(name, wanted.get(name, 0), frozenset(members)) for name, members in uids.items())
