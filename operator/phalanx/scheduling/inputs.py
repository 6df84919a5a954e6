"""From API objects (the view's dicts) to the planner's immutable snapshot.

This is the edge where Kubernetes' shapes meet the core's dataclasses; the
translation follows what kube-scheduler counts: requests of every
non-terminal pod bound to a node (plus those Phalanx pinned, as its
reservations record, and released but the scheduler has not bound yet), only the newest complete generation of a
ResourceSlice pool, and every device some claim holds. The same pods are what
pod affinity, topology spreading and host ports are judged against.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.api import keys
from phalanx.planner import quantity
from phalanx.planner.model import (
    Claim,
    Device,
    DeviceClass,
    DeviceId,
    DeviceRequest,
    HostPort,
    MatchAttribute,
    Member,
    Node,
    Pod,
    PodTerm,
    Requirement,
    Selector,
    SelectorTerm,
    Snapshot,
    Spread,
    Taint,
    Toleration,
    frozen_map,
)


def terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == keys.SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or [])


def pins(pod_groups: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pod uid -> node, for every pod Phalanx pinned: the placements its reservations record.

    The `scheduling.phalanx.dev/node` annotation alone proves nothing (anyone who
    may patch a pod can write it), so only a recorded pin counts."""
    return {
        p["uid"]: p["node"]
        for g in pod_groups
        for p in (((g.get("status") or {}).get("reservation") or {}).get("placements") or [])
        if p.get("uid") and p.get("node")
    }


def placed_on(pod: Mapping[str, Any], pinned: Mapping[str, str] | None = None) -> str | None:
    """The node a pod occupies: bound, or pinned by Phalanx (`pinned`, from `pins`) and released."""
    node = pod["spec"].get("nodeName")
    if node:
        return node
    if not gated(pod):
        return (pinned or {}).get(pod["metadata"]["uid"])
    return None


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


def _requirements(term: Mapping[str, Any]) -> SelectorTerm:
    reqs = [Requirement(e["key"], e["operator"], tuple(e.get("values") or ())) for e in term.get("matchExpressions") or []]
    reqs += [Requirement(e["key"], e["operator"], tuple(e.get("values") or ()), field=True) for e in term.get("matchFields") or []]
    return SelectorTerm(tuple(reqs))


def node_selector_terms(selector: Mapping[str, Any] | None) -> tuple[SelectorTerm, ...]:
    return tuple(_requirements(t) for t in (selector or {}).get("nodeSelectorTerms") or [])


def node(obj: Mapping[str, Any], requested: Mapping[str, int]) -> Node:
    spec = obj.get("spec") or {}
    allocatable = (obj.get("status") or {}).get("allocatable") or {}
    return Node(
        name=obj["metadata"]["name"],
        labels=frozen_map(obj["metadata"].get("labels")),
        taints=tuple(Taint(t["key"], t.get("value", ""), t.get("effect", "")) for t in spec.get("taints") or []),
        unschedulable=bool(spec.get("unschedulable")),
        allocatable=frozen_map({k: quantity.amount(k, v) for k, v in allocatable.items()}),
        requested=frozen_map(requested),
    )


def _attribute(value: Mapping[str, Any]) -> Any:
    for kind in ("int", "bool", "string", "version"):
        if kind in value:
            return value[kind]
    return None


def devices(slices: Iterable[Mapping[str, Any]]) -> list[Device]:
    """Devices of the newest generation of each pool, and only of pools whose slices are all published."""
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for s in slices:
        spec = s["spec"]
        pools.setdefault((spec["driver"], spec["pool"]["name"]), []).append(spec)
    out: list[Device] = []
    for (driver, pool), specs in pools.items():
        newest = max(s["pool"].get("generation", 0) for s in specs)
        current = [s for s in specs if s["pool"].get("generation", 0) == newest]
        if len(current) < max(s["pool"].get("resourceSliceCount", 1) for s in current):
            continue
        for spec in current:
            selector = node_selector_terms(spec.get("nodeSelector")) if spec.get("nodeSelector") else None
            for d in spec.get("devices") or []:
                attributes = {(k if "/" in k else f"{driver}/{k}"): _attribute(v) for k, v in (d.get("attributes") or {}).items()}
                capacity = {
                    (k if "/" in k else f"{driver}/{k}"): quantity.amount("", v["value"]) for k, v in (d.get("capacity") or {}).items()
                }
                out.append(
                    Device(
                        driver=driver,
                        pool=pool,
                        name=d["name"],
                        node_name=spec.get("nodeName"),
                        node_selector=selector,
                        all_nodes=bool(spec.get("allNodes")),
                        attributes=frozen_map(attributes),
                        capacity=frozen_map(capacity),
                        generation=newest,
                    )
                )
    return out


def device_class(obj: Mapping[str, Any]) -> DeviceClass:
    spec = obj.get("spec") or {}
    return DeviceClass(
        name=obj["metadata"]["name"],
        selectors=tuple(s["cel"]["expression"] for s in spec.get("selectors") or [] if "cel" in s),
        config=tuple(frozen_map(c) for c in spec.get("config") or []),
    )


def consuming_ids(obj: Mapping[str, Any]) -> tuple[DeviceId, ...] | None:
    """The devices an allocation takes from others; None when unallocated.

    A result with `adminAccess` (monitoring, DRAAdminAccess GA) consumes
    nothing: the device stays free for everyone else, as the scheduler counts.
    """
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        return None
    results = (allocation.get("devices") or {}).get("results") or []
    return tuple((r["driver"], r["pool"], r["device"]) for r in results if not r.get("adminAccess"))


def allocated_ids(obj: Mapping[str, Any]) -> tuple[DeviceId, ...] | None:
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        return None
    return tuple((r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or [])


def _pinned_node(allocation: Mapping[str, Any] | None) -> str | None:
    for term in ((allocation or {}).get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(field.get("values") or []) == 1:
                return field["values"][0]
    return None


def claim(obj: Mapping[str, Any]) -> Claim:
    devices_spec = (obj.get("spec") or {}).get("devices") or {}
    requests = []
    for r in devices_spec.get("requests") or []:
        exactly = r.get("exactly") or {}
        requests.append(
            DeviceRequest(
                name=r["name"],
                device_class=exactly.get("deviceClassName", ""),
                mode=exactly.get("allocationMode", "ExactCount"),
                count=int(exactly.get("count", 1)),
                selectors=tuple(s["cel"]["expression"] for s in exactly.get("selectors") or [] if "cel" in s),
            )
        )
    constraints = tuple(
        MatchAttribute(c["matchAttribute"], tuple(c.get("requests") or ()))
        for c in devices_spec.get("constraints") or []
        if c.get("matchAttribute")
    )
    allocation = (obj.get("status") or {}).get("allocation")
    return Claim(
        namespace=obj["metadata"]["namespace"],
        name=obj["metadata"]["name"],
        uid=obj["metadata"]["uid"],
        requests=tuple(requests),
        constraints=constraints,
        config=tuple(frozen_map(c) for c in devices_spec.get("config") or []),
        allocated=allocated_ids(obj),
        allocated_node=_pinned_node(allocation),
    )


def claim_names(pod: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The ResourceClaims a pod uses, or None while the resourceclaim controller has not created them all."""
    statuses = {s["name"]: s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []}
    names = []
    for ref in pod["spec"].get("resourceClaims") or []:
        if ref.get("resourceClaimName"):
            names.append(ref["resourceClaimName"])
        elif ref.get("resourceClaimTemplateName"):
            generated = statuses.get(ref["name"])
            if not generated:
                return None
            names.append(generated)
    return tuple(names)


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
        labels=frozen_map(meta.get("labels")),
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
        tolerations=tuple(
            Toleration(t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""))
            for t in spec.get("tolerations") or []
        ),
        node_selector=frozen_map(spec.get("nodeSelector")),
        affinity=node_selector_terms(affinity),
        claims=claims,
        labels=frozen_map(pod["metadata"].get("labels")),
        pod_affinity=pod_terms(pod, "podAffinity"),
        pod_anti_affinity=pod_terms(pod, "podAntiAffinity"),
        spread=spread(pod),
        host_ports=host_ports(pod),
    )


def build(
    nodes: Iterable[Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
    slices: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    classes: Iterable[Mapping[str, Any]],
    pinned: Mapping[str, str] | None = None,
) -> Snapshot:
    requested: dict[str, Counter[str]] = {}
    placed: list[Pod] = []
    for pod in pods:
        where = placed_on(pod, pinned)
        if where is None or terminal(pod):
            continue
        placed.append(existing(pod, where))
        counter = requested.setdefault(where, Counter())
        counter.update(pod_requests(pod))
        counter["pods"] += 1
    claims = list(claims)
    claim_objs = [claim(c) for c in claims]
    held = {d for c in claims for d in consuming_ids(c) or ()}
    return Snapshot(
        nodes=tuple(node(n, requested.get(n["metadata"]["name"], Counter())) for n in nodes),
        devices=tuple(devices(slices)),
        classes=frozen_map({c["metadata"]["name"]: device_class(c) for c in classes}),
        claims=frozen_map({c.key: c for c in claim_objs}),
        held=frozenset(held),
        pods=tuple(placed),
    )
