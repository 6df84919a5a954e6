"""Small builders for planner inputs: clusters and gangs described as data."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from phalanx.planner.model import (
    Claim,
    Device,
    DeviceClass,
    DeviceRequest,
    Group,
    HostPort,
    Member,
    Node,
    Pod,
    PodTerm,
    Requirement,
    Snapshot,
    Taint,
    Victim,
    VictimPod,
    frozen_map,
)

GPU = "gpu.example.com"
GPU_CLASS = DeviceClass(GPU, selectors=(f"device.driver == '{GPU}'",))
HOSTNAME = "kubernetes.io/hostname"


def node(name: str, *, cpu: int = 32000, pods: int = 110, labels: dict | None = None, taints=(), used_cpu: int = 0) -> Node:
    return Node(
        name=name,
        labels=frozen_map({"kubernetes.io/hostname": name, **(labels or {})}),
        taints=tuple(taints),
        allocatable=frozen_map({"cpu": cpu, "memory": 256 * 2**30, "pods": pods}),
        requested=frozen_map({"cpu": used_cpu}),
    )


def gpus(node_name: str, count: int, **attributes) -> list[Device]:
    return [
        Device(
            GPU,
            node_name,
            f"gpu-{i}",
            node_name=node_name,
            attributes=frozen_map({"index": i, "model": "LATEST-GPU-MODEL", **attributes}),
            capacity=frozen_map({"memory": 80 * 2**30}),
        )
        for i in range(count)
    ]


def cluster(workers: int = 3, gpus_per_worker: int = 2, *, control_plane: bool = True, held=(), claims=()) -> Snapshot:
    nodes = [node(f"worker-{i}") for i in range(1, workers + 1)]
    if control_plane:
        nodes.insert(0, node("control-plane", taints=[Taint("node-role.kubernetes.io/control-plane")]))
    devices = [d for n in nodes if n.name.startswith("worker") for d in gpus(n.name, gpus_per_worker)]
    return Snapshot(
        nodes=tuple(nodes),
        devices=tuple(devices),
        classes=frozen_map({GPU: GPU_CLASS}),
        claims=frozen_map({c.key: c for c in claims}),
        held=frozenset(held),
    )


def one_gpu_claim(namespace: str, name: str, *, count: int = 1, selectors=(), mode: str = "ExactCount") -> Claim:
    return Claim(namespace, name, f"uid-{name}", (DeviceRequest("gpu", GPU, mode, count, tuple(selectors)),))


def gang(name: str, size: int, *, min_count: int | None = None, cpu: int = 50, namespace: str = "ml", topology_key=None):
    """A Job-like gang: `size` ranks, each with its own one-GPU claim. Returns (group, claims)."""
    members, claims = [], []
    for rank in range(size):
        claim = one_gpu_claim(namespace, f"{name}-{rank}-gpu")
        claims.append(claim)
        members.append(Member(namespace, f"{name}-{rank}", f"uid-{name}-{rank}", requests=frozen_map({"cpu": cpu}), claims=(claim.name,)))
    group = Group(namespace, name, min_count if min_count is not None else size, tuple(members), topology_key)
    return group, claims


def with_claims(snapshot: Snapshot, claims) -> Snapshot:
    merged = dict(snapshot.claims)
    merged.update({c.key: c for c in claims})
    return replace(snapshot, claims=frozen_map(merged))


def selector(**labels: str) -> tuple[Requirement, ...]:
    """A label selector as matchLabels would give it."""
    return tuple(Requirement(k, "In", (v,)) for k, v in sorted(labels.items()))


def term(topology_key: str = HOSTNAME, *, namespace: str = "ml", **labels: str) -> PodTerm:
    """A required pod (anti-)affinity term for pods with `labels` in `namespace`, one domain per value of the key."""
    return PodTerm(topology_key, selector(**labels), frozenset({namespace}))


def with_rules(group: Group, **fields) -> Group:
    """The group with the same fields (labels, pod_affinity, spread, host_ports, ...) set on every member."""
    fields = {k: frozen_map(v) if isinstance(v, dict) else v for k, v in fields.items()}
    return replace(group, members=tuple(replace(m, **fields) for m in group.members))


def running(name: str, node_name: str, *, namespace: str = "ml", labels=None, anti=(), ports=(), terminating=False) -> Pod:
    """A pod already on a node, as the snapshot records it."""
    return Pod(namespace, name, node_name, frozen_map(labels), tuple(anti), tuple(ports), terminating)


def with_pods(snapshot: Snapshot, pods) -> Snapshot:
    return replace(snapshot, pods=tuple(pods))


def port(number: int, protocol: str = "TCP", ip: str = "0.0.0.0") -> HostPort:
    return HostPort(number, protocol, ip)


CREATED = "2025-01-01T00:00:00Z"


def ranks(name: str, where, *, namespace: str = "ml", cpu: int = 50, **extra: int) -> tuple[VictimPod, ...]:
    """Running pods `name-0`, `name-1`, ...: one per (node, gpu index) in `where`; a None index holds no GPU."""
    return tuple(
        VictimPod(
            namespace,
            f"{name}-{rank}",
            f"uid-{name}-{rank}",
            node_name,
            frozen_map({"cpu": cpu, **extra}),
            () if index is None else ((GPU, node_name, f"gpu-{index}"),),
        )
        for rank, (node_name, index) in enumerate(where)
    )


GUARD = "ml/guard"
"""A PodDisruptionBudget that allows no disruption unless a test says otherwise."""


def group_victim(name: str, priority: int, pods, *, namespace: str = "ml", created: str = CREATED, budget: bool | str = False) -> Victim:
    """A group in disruptionMode all: one victim, all its pods; `budget`: a PodDisruptionBudget selects them all
    (True: GUARD)."""
    pods = tuple(pods)
    return Victim(f"group {namespace}/{name}", priority, created, True, pods, _budgets(budget, len(pods)))


def pod_victims(priority: int, pods, *, created: str = CREATED, budget: bool | str = False) -> list[Victim]:
    """Pods of a `single` group (or of no group): one victim each."""
    return [Victim(f"pod {p.namespace}/{p.name}", priority, created, False, (p,), _budgets(budget, 1)) for p in pods]


def _budgets(budget: bool | str, pods: int) -> tuple[tuple[str, int], ...]:
    if not budget:
        return ()
    return ((GUARD if budget is True else budget, pods),)


def occupied(snapshot: Snapshot, victims) -> Snapshot:
    """The snapshot with the victims running: their requests and one pod each on their nodes, devices held, pods listed."""
    adds: dict[str, Counter] = {}
    for p in (p for v in victims for p in v.pods):
        adds.setdefault(p.node, Counter()).update({**p.requests, "pods": 1})
    nodes = tuple(replace(n, requested=frozen_map(Counter(n.requested) + adds[n.name])) if n.name in adds else n for n in snapshot.nodes)
    held = snapshot.held | {d for v in victims for p in v.pods for d in p.devices}
    pods = snapshot.pods + tuple(Pod(p.namespace, p.name, p.node) for v in victims for p in v.pods)
    return replace(snapshot, nodes=nodes, held=frozenset(held), pods=pods)
