"""Random small DRA worlds as API objects: nodes, ResourceSlices, DeviceClasses, claims already allocated, and pods with claims.

The same dicts feed upstream's allocator (tests/oracle/upstream.py) and
Phalanx (through `phalanx.scheduling.inputs`, as the operator reads them),
so the comparison covers the translation too. What a world may contain is
chosen by feature names: a feature not asked for never appears, and every
world records the features it actually uses, so a disagreement can be
traced to a field the planner does not model yet.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hypothesis import strategies as st

FEATURES = frozenset(
    {
        "exact",  # ExactCount requests, count 1-2
        "all",  # allocationMode All
        "cel",  # CEL selectors on attributes and capacity (guarded with has())
        "cel_errors",  # unguarded selectors: a device lacking the attribute fails evaluation
        "match_attribute",  # constraints[].matchAttribute, over all requests or some
        "network",  # network-attached pools: nodeSelector or allNodes
        "held",  # devices already allocated to other claims
        "multi_claim",  # a pod with two claims
        "first_available",  # requests with firstAvailable subrequests
        "admin_access",  # adminAccess requests (take devices others hold, and hold nothing)
        "counters",  # sharedCounters slices and devices' consumesCounters
        "taints",  # device taints and request tolerations
        "capacity",  # consumable capacity: allowMultipleAllocations, capacity requests
        "binding_conditions",  # devices with bindingConditions
    }
)

PLANNER_FEATURES = FEATURES
"""What the planner honours: every feature generated, so the default run compares them all."""

NS = "ml"
DOMAIN = "example.com"
GPU = "gpu.example.com"
NIC = "nic.example.com"
ZONES = ("z1", "z2")

SELECTORS = {
    "model-a": f'has(device.attributes["{DOMAIN}"].model) && device.attributes["{DOMAIN}"].model == "a"',
    "numa-0": f'has(device.attributes["{DOMAIN}"].numa) && device.attributes["{DOMAIN}"].numa == 0',
    "mem-2Gi": f'has(device.capacity["{DOMAIN}"].memory) && device.capacity["{DOMAIN}"].memory.compareTo(quantity("2Gi")) >= 0',
}
UNGUARDED = {
    "model-b!": f'device.attributes["{DOMAIN}"].model == "b"',
}


@dataclass
class World:
    nodes: list[dict[str, Any]]
    slices: list[dict[str, Any]]
    classes: list[dict[str, Any]]
    held: list[dict[str, Any]]
    """Claims allocated before: what they hold is taken."""
    pods: list[tuple[dict[str, Any], list[dict[str, Any]]]]
    """Each pod with its (unallocated) claims."""
    used: set[str] = field(default_factory=set)
    """The features this world actually uses."""

    def upstream(self, held: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        return {"nodes": self.nodes, "slices": self.slices, "classes": self.classes, "allocated": self.held + (held or [])}


def _meta(name: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "uid": f"uid-{name}", **extra}


def _node(name: str, zone: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": _meta(name, labels={"kubernetes.io/hostname": name, "zone": zone}),
        "status": {"allocatable": {"cpu": "8", "memory": "64Gi", "pods": "110"}},
    }


def _class(name: str, driver: str | None) -> dict[str, Any]:
    spec = {"selectors": [{"cel": {"expression": f'device.driver == "{driver}"'}}]} if driver else {}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": _meta(name), "spec": spec}


CLASSES = [_class("gpu", GPU), _class("nic", NIC), _class("any", None)]


@st.composite
def _device(draw: st.DrawFn, name: str, features: frozenset[str], counter_sets: list[str]) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if draw(st.booleans()):
        attributes[f"{DOMAIN}/model"] = {"string": draw(st.sampled_from("ab"))}
    if draw(st.integers(0, 3)):
        attributes[f"{DOMAIN}/numa"] = {"int": draw(st.integers(0, 1))}
    device: dict[str, Any] = {"name": name, "attributes": attributes}
    if draw(st.booleans()):
        device["capacity"] = {f"{DOMAIN}/memory": {"value": f"{draw(st.integers(1, 4))}Gi"}}
    if "counters" in features and counter_sets and draw(st.booleans()):
        device["consumesCounters"] = [{"counterSet": counter_sets[0], "counters": {"memory": {"value": f"{draw(st.integers(1, 3))}Gi"}}}]
    if "taints" in features and draw(st.integers(0, 3)) == 0:
        device["taints"] = [{"key": "broken", "value": draw(st.sampled_from(["yes", "maybe"])), "effect": "NoSchedule"}]
    if "capacity" in features and draw(st.integers(0, 2)) == 0:
        device["allowMultipleAllocations"] = True
        device["capacity"] = {
            f"{DOMAIN}/memory": {
                "value": f"{draw(st.integers(2, 4))}Gi",
                "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi", "step": "1Gi"}},
            }
        }
    if "binding_conditions" in features and draw(st.integers(0, 3)) == 0:
        device["bindingConditions"] = ["ready"]
        device["bindingFailureConditions"] = ["failed"]
    return device


@st.composite
def _pool(draw: st.DrawFn, driver: str, pool: str, where: dict[str, Any], features: frozenset[str]) -> list[dict[str, Any]]:
    """The slices of one pool: its devices, and a slice of shared counters when the pool has some."""
    counters = ["mem"] if "counters" in features and draw(st.booleans()) else []
    count = draw(st.integers(1, 3))
    devices = [draw(_device(f"{pool}-d{i}", features, counters)) for i in range(count)]
    slices = [{"driver": driver, "pool": {"name": pool}, **where, "devices": devices}]
    if counters:
        shared = [{"name": "mem", "counters": {"memory": {"value": f"{draw(st.integers(2, 4))}Gi"}}}]
        slices.append({"driver": driver, "pool": {"name": pool}, **where, "sharedCounters": shared})
    out = []
    for i, spec in enumerate(slices):
        spec["pool"].update(generation=1, resourceSliceCount=len(slices))
        out.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": _meta(f"{pool}-s{i}"), "spec": spec})
    return out


@st.composite
def _request(draw: st.DrawFn, name: str, features: frozenset[str], subrequest: bool = False) -> dict[str, Any]:
    modes = ["ExactCount"] + (["All"] if "all" in features else [])
    body: dict[str, Any] = {"deviceClassName": draw(st.sampled_from(["gpu", "gpu", "any"] + (["nic"] if "network" in features else [])))}
    if draw(st.sampled_from(modes)) == "All":
        body["allocationMode"] = "All"
    else:
        body["allocationMode"] = "ExactCount"
        body["count"] = draw(st.integers(1, 2))
    choices = ({**SELECTORS} if "cel" in features else {}) | (UNGUARDED if "cel_errors" in features else {})
    if choices and draw(st.booleans()):
        body["selectors"] = [{"cel": {"expression": choices[draw(st.sampled_from(sorted(choices)))]}}]
    if "taints" in features and draw(st.booleans()):
        body["tolerations"] = [{"key": "broken", "operator": "Equal", "value": "maybe", "effect": "NoSchedule"}]
    if "capacity" in features and draw(st.integers(0, 2)) == 0:
        body["capacity"] = {"requests": {f"{DOMAIN}/memory": f"{draw(st.integers(1, 2))}Gi"}}
    if "admin_access" in features and not subrequest and draw(st.integers(0, 4)) == 0:
        body["adminAccess"] = True
    if subrequest:
        return {"name": name, **body}
    if "first_available" in features and draw(st.integers(0, 2)) == 0:
        subs = [draw(_request(f"s{i}", features, subrequest=True)) for i in range(draw(st.integers(1, 2)))]
        return {"name": name, "firstAvailable": subs}
    return {"name": name, "exactly": body}


@st.composite
def _claim(draw: st.DrawFn, name: str, features: frozenset[str]) -> dict[str, Any]:
    requests = [draw(_request(f"r{i}", features)) for i in range(draw(st.integers(1, 2)))]
    devices: dict[str, Any] = {"requests": requests}
    if "match_attribute" in features and draw(st.booleans()):
        names = [r["name"] for r in requests]
        subset = draw(st.sampled_from([[], names, names[:1]]))
        constraint: dict[str, Any] = {"matchAttribute": f"{DOMAIN}/{draw(st.sampled_from(['numa', 'model']))}"}
        if subset:
            constraint["requests"] = subset
        devices["constraints"] = [constraint]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": _meta(name, namespace=NS),
        "spec": {"devices": devices},
    }


def _pod(name: str, claims: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(name, namespace=NS),
        "spec": {
            "containers": [{"name": "c", "image": "x"}],
            "resourceClaims": [{"name": c, "resourceClaimName": c} for c in claims],
        },
    }


def uses(world: World) -> set[str]:
    """The features a world's objects use, read back from the objects."""
    used = set()
    for s in world.slices:
        spec = s["spec"]
        used |= {"network"} if spec.get("nodeSelector") or spec.get("allNodes") else set()
        used |= {"counters"} if spec.get("sharedCounters") else set()
        for d in spec.get("devices") or []:
            used |= {"counters"} if d.get("consumesCounters") else set()
            used |= {"taints"} if d.get("taints") else set()
            used |= {"capacity"} if d.get("allowMultipleAllocations") else set()
            used |= {"binding_conditions"} if d.get("bindingConditions") else set()
    used |= {"held"} if world.held else set()
    for _, claims in world.pods:
        used |= {"multi_claim"} if len(claims) > 1 else set()
        for c in claims:
            devices = c["spec"]["devices"]
            used |= {"match_attribute"} if devices.get("constraints") else set()
            for r in devices["requests"]:
                if "firstAvailable" in r:
                    used.add("first_available")
                for body in [r.get("exactly")] if "exactly" in r else r["firstAvailable"]:
                    used.add("all" if body.get("allocationMode") == "All" else "exact")
                    for sel in body.get("selectors") or []:
                        used.add("cel_errors" if sel["cel"]["expression"] in UNGUARDED.values() else "cel")
                    used |= {"taints"} if body.get("tolerations") else set()
                    used |= {"capacity"} if body.get("capacity") else set()
                    used |= {"admin_access"} if body.get("adminAccess") else set()
    return used


@st.composite
def worlds(draw: st.DrawFn, features: frozenset[str] = PLANNER_FEATURES, max_pods: int = 1) -> World:
    """A world of 1-3 nodes, each with a local GPU pool, maybe network pools, maybe held devices, and 1..max_pods pods."""
    unknown = set(features) - FEATURES
    assert not unknown, f"unknown features {sorted(unknown)}; known: {sorted(FEATURES)}"
    nodes = [_node(f"n{i}", ZONES[i % 2]) for i in range(draw(st.integers(1, 3)))]
    slices: list[dict[str, Any]] = []
    for n in nodes:
        if draw(st.integers(0, 4)):
            slices += draw(_pool(GPU, f"{n['metadata']['name']}-gpu", {"nodeName": n["metadata"]["name"]}, features))
    if "network" in features:
        for i in range(draw(st.integers(0, 2))):
            zone = draw(st.sampled_from([*ZONES, None]))
            where: dict[str, Any] = (
                {"allNodes": True}
                if zone is None
                else {"nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]}}
            )
            slices += draw(_pool(NIC, f"fabric{i}", where, features))
    held: list[dict[str, Any]] = []
    if "held" in features:
        devices = [(s["spec"]["driver"], s["spec"]["pool"]["name"], d["name"]) for s in slices for d in s["spec"].get("devices") or []]
        taken = draw(st.lists(st.sampled_from(devices), unique=True, max_size=2)) if devices else []
        for i, (driver, pool, device) in enumerate(taken):
            claim = {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": _meta(f"held{i}", namespace=NS),
                "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "any"}}]}},
                "status": {"allocation": {"devices": {"results": [{"request": "r", "driver": driver, "pool": pool, "device": device}]}}},
            }
            held.append(claim)
    pods = []
    for p in range(draw(st.integers(1, max_pods))):
        claims = [draw(_claim(f"p{p}-c{i}", features)) for i in range(draw(st.integers(1, 2 if "multi_claim" in features else 1)))]
        pods.append((_pod(f"p{p}", [c["metadata"]["name"] for c in claims]), claims))
    world = World(nodes, slices, CLASSES, held, pods)
    world.used = uses(world)
    return world
