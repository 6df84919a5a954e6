"""From ResourceSlices, ResourceClaims, DeviceClasses and DeviceTaintRules to the planner's model: the devices
published (only the newest complete generation of each pool), the shared counters, each claim's requests with the
fields it cannot model named, and the extended resources a DeviceClass serves.

The pods' side of the same edge is `inputs`; `snapshots` puts a snapshot together from both.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from phalanx.api import keys
from phalanx.planner import quantity
from phalanx.planner.model import (
    CapacityPolicy,
    Claim,
    ClaimKey,
    CounterUse,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    MatchAttribute,
    Taint,
    frozen_map,
    shared_map,
)
from phalanx.planner.nodes import selector_terms
from phalanx.scheduling.accessors import allocated_ids, dedicated_ids, pinned_node, shares
from phalanx.scheduling.derived import Derived
from phalanx.scheduling.inputs import toleration


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
        tolerations=tuple(toleration(t) for t in body.get("tolerations") or ()),
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
