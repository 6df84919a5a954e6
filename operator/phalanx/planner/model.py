"""The immutable cluster snapshot the planner decides on, and the group it places.

Plain frozen dataclasses, built once per cycle at the edge
(`phalanx.scheduling.inputs`): the types forbid the planner to change them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Literal

DeviceId = tuple[str, str, str]
"""(driver, pool, device): what a claim's allocation result names."""

ClaimKey = tuple[str, str]
"""(namespace, name)."""


EMPTY: Mapping[Any, Any] = MappingProxyType({})


def frozen_map(value: Mapping[Any, Any] | None = None) -> Mapping[Any, Any]:
    """Read-only; every empty one is one object (a snapshot of 100,000 pods holds hundreds of thousands)."""
    return MappingProxyType(dict(value)) if value else EMPTY


_SHARED: dict[tuple[Any, ...], Mapping[Any, Any]] = {}
SHARED_KEPT = 100_000
"""Distinct maps `shared_map` remembers; past it, it starts afresh (the maps made stay valid, only less shared)."""


def shared_map(value: Mapping[Any, Any] | None) -> Mapping[Any, Any]:
    """`frozen_map`, one object for maps equal in keys, values and the values' types: the labels, requests and device
    capacities thousands of pods and devices repeat. Maps with unhashable values are not shared."""
    if not value:
        return EMPTY
    key = tuple((k, v.__class__, v) for k, v in value.items())
    try:
        found = _SHARED.get(key)
    except TypeError:
        return MappingProxyType(dict(value))
    if found is None:
        if len(_SHARED) >= SHARED_KEPT:
            _SHARED.clear()
        found = _SHARED[key] = MappingProxyType(dict(value))
    return found


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str = ""
    operator: Literal["", "Equal", "Exists"] = "Equal"
    """As the pod says it: empty is `Equal` (`taints.tolerates`)."""
    value: str = ""
    effect: str = ""
    seconds: int | None = None
    """tolerationSeconds: only NoExecute eviction reads it; kept so a device result can carry it back."""


@dataclass(frozen=True, slots=True)
class Requirement:
    """One matchExpressions/matchFields entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """Requirements ANDed; the terms of a node selector are ORed."""

    requirements: tuple[Requirement, ...]


Selector = tuple[Requirement, ...]
"""A label selector: matchLabels as `In` requirements, then matchExpressions; () selects every pod."""


@dataclass(frozen=True, slots=True)
class PodTerm:
    """A required pod (anti-)affinity term, as kube-scheduler reads it once the API server has merged
    matchLabelKeys/mismatchLabelKeys into `selector` (a repeated merge changes nothing)."""

    topology_key: str
    selector: Selector | None = None
    """None is the API's absent labelSelector, which selects no pod."""
    namespaces: frozenset[str] = frozenset()
    """The namespaces listed, or the pod's own when neither namespaces nor a namespaceSelector is given."""
    namespace_selector: Selector | None = None
    """None: absent; (): `{}`, every namespace; otherwise it needs namespace labels, which the snapshot lacks."""


@dataclass(frozen=True, slots=True)
class Spread:
    """A topologySpreadConstraint with whenUnsatisfiable DoNotSchedule (ScheduleAnyway only scores)."""

    topology_key: str
    max_skew: int = 1
    selector: Selector | None = None
    """matchLabelKeys merged in; None (absent) and () count no pod, as upstream's empty selector."""
    min_domains: int = 1
    node_affinity_policy: Literal["Honor", "Ignore"] = "Honor"
    node_taints_policy: Literal["Honor", "Ignore"] = "Ignore"


@dataclass(frozen=True, slots=True)
class HostPort:
    port: int
    protocol: str = "TCP"
    ip: str = "0.0.0.0"
    """0.0.0.0 binds every address of the node, so it clashes with the same port on any IP."""


@dataclass(frozen=True, slots=True)
class Pod:
    """A non-terminal pod bound or pinned to a node: what pod affinity, spreading and host ports see of it."""

    namespace: str
    name: str
    node: str
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    anti_affinity: tuple[PodTerm, ...] = ()
    """Its required anti-affinity terms: they also keep matching pods away from it."""
    host_ports: tuple[HostPort, ...] = ()
    terminating: bool = False
    """Being deleted: topology spreading no longer counts it, the other rules still do."""


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Mapping[str, int] = field(default_factory=frozen_map)
    requested: Mapping[str, int] = field(default_factory=frozen_map)
    """Sum of requests of every non-terminal pod bound or pinned here, including `pods`."""


@dataclass(frozen=True, slots=True)
class CapacityPolicy:
    """A device capacity as consumable capacity reads it (DRAConsumableCapacity): exact values, with its requestPolicy."""

    value: Decimal
    default: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()
    """Sorted ascending, as the API requires."""
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None


@dataclass(frozen=True, slots=True)
class CounterUse:
    """A device's consumesCounters entry: what it takes from one shared counter set of its pool."""

    counter_set: str
    counters: Mapping[str, Decimal] = field(default_factory=frozen_map)


@dataclass(frozen=True, slots=True)
class Device:
    driver: str
    pool: str
    name: str
    node_name: str | None = None
    node_selector: tuple[SelectorTerm, ...] | None = None
    all_nodes: bool = False
    attributes: Mapping[str, Any] = field(default_factory=frozen_map)
    """Qualified name (`domain/name`) -> value; unqualified names are qualified with the driver."""
    capacity: Mapping[str, int] = field(default_factory=frozen_map)
    generation: int = 0
    """The pool generation it was published in: a new generation may change its attributes."""
    taints: tuple[Taint, ...] = ()
    """Its own taints and those DeviceTaintRules add (except Phalanx's own rules, which only speak to kube-scheduler)."""
    consumes: tuple[CounterUse, ...] = ()
    allow_multiple: bool = False
    """allowMultipleAllocations: shared between claims up to its capacity."""
    capacities: Mapping[str, CapacityPolicy] = field(default_factory=frozen_map)
    """Capacity by its name as published (not qualified): what `capacity.requests` names."""
    binding_conditions: tuple[str, ...] = ()
    binding_failure_conditions: tuple[str, ...] = ()
    binds_to_node: bool = False

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A request (`exactly`), or one with `firstAvailable` subrequests tried in order (then `device_class` is empty)."""

    name: str
    device_class: str
    mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = 1
    selectors: tuple[str, ...] = ()
    admin_access: bool = False
    tolerations: tuple[Toleration, ...] = ()
    capacity: Mapping[str, Decimal] = field(default_factory=frozen_map)
    """capacity.requests by capacity name, exact."""
    subrequests: tuple[DeviceRequest, ...] = ()


@dataclass(frozen=True, slots=True)
class MatchAttribute:
    attribute: str
    requests: tuple[str, ...] = ()
    """Empty means every request of the claim."""
    distinct: bool = False
    """distinctAttribute: every device takes a different value, instead of one shared value."""


@dataclass(frozen=True, slots=True)
class Claim:
    namespace: str
    name: str
    uid: str
    requests: tuple[DeviceRequest, ...]
    constraints: tuple[MatchAttribute, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()
    allocated: tuple[DeviceId, ...] | None = None
    allocated_node: str | None = None
    """For an allocation pinned to one node: that node (None: allocated anywhere, or not allocated)."""
    reserved_for: int = 0
    """Consumers already in `status.reservedFor`."""
    unmodelled: tuple[str, ...] = ()
    """Fields of the claim the planner cannot honour (it then makes no plan), each naming the field."""

    @property
    def key(self) -> ClaimKey:
        return (self.namespace, self.name)


@dataclass(frozen=True, slots=True)
class Container:
    """One container's requests (every resource it names, by name), as kube-scheduler turns a pod's extended
    resources into device requests: each container is one request, named by its index and the resource's."""

    requests: Mapping[str, int] = field(default_factory=frozen_map)
    init: bool = False
    sidecar: bool = False
    """An init container with restartPolicy Always: it runs beside the regular containers."""


@dataclass(frozen=True, slots=True)
class Member:
    """A pod of the group, as the scheduler would see it."""

    namespace: str
    name: str
    uid: str
    requests: Mapping[str, int] = field(default_factory=frozen_map)
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=frozen_map)
    affinity: tuple[SelectorTerm, ...] = ()
    claims: tuple[str, ...] = ()
    """Names of the ResourceClaims (in the pod's namespace) the pod uses."""
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    pod_affinity: tuple[PodTerm, ...] = ()
    pod_anti_affinity: tuple[PodTerm, ...] = ()
    spread: tuple[Spread, ...] = ()
    host_ports: tuple[HostPort, ...] = ()
    containers: tuple[Container, ...] = ()
    """Init containers, then regular ones; only extended resources a DeviceClass serves read them (empty: one
    regular container asking for `requests`)."""


@dataclass(frozen=True, slots=True)
class Role:
    """A part of a gang with a minimum of its own: upstream's child PodGroup of a CompositePodGroup (KEP-6012), e.g.
    one launcher and at least three workers. The group goes only when every role has its minimum placed together:
    a count over all members would let three workers go without their launcher."""

    name: str
    min_count: int
    members: frozenset[str]
    """Uids of the group's members in this role."""


@dataclass(frozen=True, slots=True)
class Group:
    namespace: str
    name: str
    min_count: int
    members: tuple[Member, ...]
    topology_key: str | None = None
    roles: tuple[Role, ...] = ()
    """Empty: one role, `min_count` of any members. Otherwise every member is in exactly one role, and a plan needs
    each role's minimum as well as `min_count` in all."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    nodes: tuple[Node, ...]
    devices: tuple[Device, ...] = ()
    classes: Mapping[str, DeviceClass] = field(default_factory=frozen_map)
    claims: Mapping[ClaimKey, Claim] = field(default_factory=frozen_map)
    held: frozenset[DeviceId] = frozenset()
    """Devices allocated to any claim, or reserved by an allocation Phalanx has in flight; not shares (`shared`)
    nor admin access, which take no device from others."""
    shared: Mapping[DeviceId, Mapping[str, Decimal]] = field(default_factory=frozen_map)
    """Devices allocated as shares (results with a shareID): the capacity all shares consume, by capacity name."""
    counters: Mapping[tuple[str, str], Mapping[str, Mapping[str, Decimal]]] = field(default_factory=frozen_map)
    """(driver, pool) -> counter set -> counter -> the value its sharedCounters publish."""
    extended: Mapping[str, str] = field(default_factory=frozen_map)
    """Extended resource name -> the DeviceClass that provides it (DRAExtendedResource)."""
    incomplete: tuple[Device, ...] = ()
    """Where pools being updated reach: a placeholder (no name) per slice of such a pool."""
    pods: tuple[Pod, ...] = ()
    """Every non-terminal pod bound or pinned to a node; gated members are not here."""


@dataclass(frozen=True, slots=True)
class VictimPod:
    """A running pod preemption may evict, and what its going frees."""

    namespace: str
    name: str
    uid: str
    node: str
    requests: Mapping[str, int] = field(default_factory=frozen_map)
    """Effective requests as `Node.requested` counts them, without `pods`: its going frees one `pods` as well."""
    devices: tuple[DeviceId, ...] = ()
    """Devices that become free when it goes: its claims' devices, of claims no pod other than the victims' uses.
    A claim shared by pods of two victims frees its devices only when both go: the caller makes such pods one victim."""
    shares: tuple[tuple[DeviceId, Mapping[str, Decimal]], ...] = ()
    """Shares of devices (results with a shareID) those claims hold, with the capacity each consumes."""


@dataclass(frozen=True, slots=True)
class Victim:
    """What preemption may take as one unit: a whole group (disruptionMode all), or one pod (a member of a
    `single` group, or a pod outside any group)."""

    key: str
    """Stable id for messages and tests, e.g. "group ns/name" or "pod ns/name"."""
    priority: int
    created: str
    """RFC 3339 creation time of the group or pod; later is younger."""
    is_group: bool
    pods: tuple[VictimPod, ...]
    budgets: tuple[tuple[str, int], ...] = ()
    """(PodDisruptionBudget, how many of its pods that budget selects) for each budget selecting any: what taking it
    spends of each budget's allowed disruptions, summed over every victim chosen."""
