"""From API objects (the view's dicts) to the planner's model: nodes, pods and members, one object at a time
(`deviceinputs` is the same edge for devices and claims; `snapshots` puts a snapshot together, `occupancy` keeps
each node's).

What one object says (a pod's claims, its affinity) is read with `accessors`; here those reads become the planner's
dataclasses: a pod's effective requests as the scheduler computes them, its inter-pod terms, spread and host ports,
and a group's members and roles.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from phalanx.planner import quantity
from phalanx.planner.model import (
    Container,
    Group,
    HostPort,
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
from phalanx.scheduling.accessors import claim_names, topology_key
from phalanx.scheduling.derived import Derived

Requests = tuple[tuple[str, int], ...]


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


def toleration(t: Mapping[str, Any]) -> Toleration:
    seconds = t.get("tolerationSeconds")
    return Toleration(
        t.get("key", ""), t.get("operator", "Equal"), t.get("value", ""), t.get("effect", ""), None if seconds is None else int(seconds)
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
        tolerations=tuple(toleration(t) for t in spec.get("tolerations") or []),
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
