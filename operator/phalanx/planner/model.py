"""The immutable cluster snapshot the planner decides on, and the group it places.

Plain frozen dataclasses, built once per cycle at the edge
(`phalanx.scheduling.inputs`): the types forbid the planner to change them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Literal

DeviceId = tuple[str, str, str]
"""(driver, pool, device): what a claim's allocation result names."""

ClaimKey = tuple[str, str]
"""(namespace, name)."""


def frozen_map(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class Taint:
    key: str
    value: str = ""
    effect: str = "NoSchedule"


@dataclass(frozen=True)
class Toleration:
    key: str = ""
    operator: Literal["Equal", "Exists"] = "Equal"
    value: str = ""
    effect: str = ""


@dataclass(frozen=True)
class Requirement:
    """One matchExpressions/matchFields entry of a node selector term."""

    key: str
    operator: str
    values: tuple[str, ...] = ()
    field: bool = False


@dataclass(frozen=True)
class SelectorTerm:
    """Requirements ANDed; the terms of a node selector are ORed."""

    requirements: tuple[Requirement, ...]


@dataclass(frozen=True)
class Node:
    name: str
    labels: Mapping[str, str] = field(default_factory=frozen_map)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    allocatable: Mapping[str, int] = field(default_factory=frozen_map)
    requested: Mapping[str, int] = field(default_factory=frozen_map)
    """Sum of requests of every non-terminal pod bound or pinned here, including `pods`."""


@dataclass(frozen=True)
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

    @property
    def id(self) -> DeviceId:
        return (self.driver, self.pool, self.name)


@dataclass(frozen=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[Mapping[str, Any], ...] = ()


@dataclass(frozen=True)
class DeviceRequest:
    name: str
    device_class: str
    mode: Literal["ExactCount", "All"] = "ExactCount"
    count: int = 1
    selectors: tuple[str, ...] = ()


@dataclass(frozen=True)
class MatchAttribute:
    attribute: str
    requests: tuple[str, ...] = ()
    """Empty means every request of the claim."""


@dataclass(frozen=True)
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

    @property
    def key(self) -> ClaimKey:
        return (self.namespace, self.name)


@dataclass(frozen=True)
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


@dataclass(frozen=True)
class Group:
    namespace: str
    name: str
    min_count: int
    members: tuple[Member, ...]
    topology_key: str | None = None


@dataclass(frozen=True)
class Snapshot:
    nodes: tuple[Node, ...]
    devices: tuple[Device, ...] = ()
    classes: Mapping[str, DeviceClass] = field(default_factory=frozen_map)
    claims: Mapping[ClaimKey, Claim] = field(default_factory=frozen_map)
    held: frozenset[DeviceId] = frozenset()
    """Devices allocated to any claim, or reserved by an allocation Phalanx has in flight."""
