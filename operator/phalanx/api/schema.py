"""Workload, PodGroup and CompositePodGroup in `scheduling.phalanx.dev/v1beta1`: the single source of the CRDs.

The shape mirrors upstream `scheduling.k8s.io/v1beta1` (KEP-4671) field for
field, so moving to the in-tree feature later is a change of apiVersion. Rules
the API server must enforce (one-of unions, immutability) travel with the
models as `x-kubernetes-validations` CEL rules; `phalanx.api.crdgen` turns
these models into the YAML under `crds/`.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from phalanx.api.keys import API_VERSION

IMMUTABLE = {"rule": "self == oldSelf", "message": "field is immutable"}


def _rules(*rules: dict[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": list(rules)}


def _one_of(*members: str) -> dict[str, str]:
    count = " + ".join(f"(has(self.{m}) ? 1 : 0)" for m in members)
    names = ", ".join(f"`{m}`" for m in members)
    return {"rule": f"{count} == 1", "message": f"must specify exactly one of: {names}"}


class Model(BaseModel):
    """camelCase on the wire, unknown fields rejected: a typo is an error, never a silent drop."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)

    def wire(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


class Empty(Model):
    """A union member that carries no settings, as `basic: {}` or `all: {}` upstream."""


class GangSchedulingPolicy(Model):
    min_count: int = Field(ge=1, le=2**31 - 1, description="Pods that must be placed together, or none is.")


class PodGroupSchedulingPolicy(Model):
    model_config = ConfigDict(
        json_schema_extra=_rules(
            _one_of("basic", "gang"),
            {
                "rule": "has(self.gang) == has(oldSelf.gang)",
                "message": "the basic/gang policy variant is immutable; only gang.minCount may be updated",
            },
        )
    )

    basic: Empty | None = Field(default=None, description="Pod-by-pod scheduling, as without Phalanx.")
    gang: GangSchedulingPolicy | None = Field(default=None, description="All-or-nothing placement.")


class DisruptionMode(Model):
    model_config = ConfigDict(json_schema_extra=_rules(_one_of("single", "all")))

    single: Empty | None = Field(default=None, description="A disrupted member is replaced alone.")
    all: Empty | None = Field(default=None, description="A disrupted member takes the whole group down with it.")


class TopologyConstraint(Model):
    key: str = Field(min_length=1, max_length=317, description="Node label key; all members share one value of it.")


class PodGroupSchedulingConstraints(Model):
    topology: list[TopologyConstraint] = Field(default_factory=list, max_length=1)


DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"


class PodGroupResourceClaim(Model):
    """A claim the whole group shares (KEP-5729), consumed by members whose own entry has this name and source."""

    model_config = ConfigDict(json_schema_extra=_rules(_one_of("resourceClaimName", "resourceClaimTemplateName")))

    name: str = Field(min_length=1, max_length=63, pattern=DNS_LABEL, description="The entry's name in the members' spec.resourceClaims.")
    resource_claim_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_SUBDOMAIN, description="An existing ResourceClaim, reserved for the group's members."
    )
    resource_claim_template_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="A ResourceClaimTemplate: one ResourceClaim is made from it for the group, owned by the PodGroup.",
    )


_GROUP_CLAIMS = {
    "x-kubernetes-list-type": "map",
    "x-kubernetes-list-map-keys": ["name"],
    **_rules(IMMUTABLE),
}
_GROUP_CLAIMS_FIXED = {"rule": "has(self.resourceClaims) == has(oldSelf.resourceClaims)", "message": "resourceClaims is immutable"}


class TypedLocalObjectReference(Model):
    api_group: str | None = None
    kind: str = Field(min_length=1)
    name: str = Field(min_length=1)


class PodGroupTemplate(Model):
    name: str = Field(min_length=1, max_length=63)
    scheduling_policy: PodGroupSchedulingPolicy
    scheduling_constraints: PodGroupSchedulingConstraints | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    disruption_mode: DisruptionMode | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    priority_class_name: str | None = Field(default=None, max_length=253, json_schema_extra=_rules(IMMUTABLE))
    priority: int | None = Field(default=None, le=1_000_000_000, json_schema_extra=_rules(IMMUTABLE))
    resource_claims: list[PodGroupResourceClaim] | None = Field(default=None, max_length=4, json_schema_extra=_GROUP_CLAIMS)


class WorkloadSpec(Model):
    controller_ref: TypedLocalObjectReference | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    pod_group_templates: list[PodGroupTemplate] = Field(
        min_length=1,
        max_length=8,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class ObjectMeta(Model):
    """Only what Phalanx sets; the API server owns the rest of metadata."""

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    namespace: str | None = None


class Workload(Model):
    """The template of a gang, created per Job; no status, as upstream."""

    api_version: Literal["scheduling.phalanx.dev/v1beta1"] = API_VERSION
    kind: Literal["Workload"] = "Workload"
    metadata: ObjectMeta = ObjectMeta()
    spec: WorkloadSpec


class WorkloadReference(Model):
    workload_name: str = Field(min_length=1, max_length=253)
    template_name: str = Field(min_length=1, max_length=63)


_ALL_NEEDS_GANG = {
    "rule": "!(has(self.schedulingPolicy.basic) && has(self.disruptionMode.all))",
    "message": "disruptionMode all needs schedulingPolicy gang: a basic group's members are placed one by one",
}
"""Upstream's rule; a Job's admission refuses it too, this is for a PodGroup a user writes."""


_PARENT_FIXED = {
    "rule": "has(self.parentCompositePodGroupName) == has(oldSelf.parentCompositePodGroupName)",
    "message": "parentCompositePodGroupName is immutable",
}


_NO_ROLE_CLAIMS = {
    "rule": "!(has(self.parentCompositePodGroupName) && has(self.resourceClaims))",
    "message": "resourceClaims of a CompositePodGroup's role are not supported: give each member its own claims, or make "
    "the group one PodGroup of its own",
}


class PodGroupSpec(Model):
    model_config = ConfigDict(json_schema_extra=_rules(_GROUP_CLAIMS_FIXED, _ALL_NEEDS_GANG, _PARENT_FIXED, _NO_ROLE_CLAIMS))

    parent_composite_pod_group_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=DNS_SUBDOMAIN,
        description="The CompositePodGroup of the namespace this group is a role of (upstream's KEP-6012): the composite "
        "is placed whole, every role with its minCount, and this group's own disruptionMode and priority give way to it.",
        json_schema_extra=_rules(IMMUTABLE),
    )
    workload_ref: WorkloadReference | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    scheduling_policy: PodGroupSchedulingPolicy
    scheduling_constraints: PodGroupSchedulingConstraints | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    disruption_mode: DisruptionMode = Field(json_schema_extra=_rules(IMMUTABLE))
    priority_class_name: str | None = Field(default=None, max_length=253, json_schema_extra=_rules(IMMUTABLE))
    priority: int | None = Field(default=None, le=1_000_000_000, json_schema_extra=_rules(IMMUTABLE))
    preemption_policy: Literal["PreemptLowerPriority", "Never"] | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    resource_claims: list[PodGroupResourceClaim] | None = Field(default=None, max_length=4, json_schema_extra=_GROUP_CLAIMS)


class Condition(Model):
    type: str = Field(min_length=1, max_length=316)
    status: Literal["True", "False", "Unknown"]
    reason: str = Field(min_length=1, max_length=1024)
    message: str = Field(default="", max_length=32768)
    last_transition_time: str
    observed_generation: int | None = Field(default=None, ge=0)


class DeviceResult(Model):
    """One `status.allocation.devices.results` entry, exactly as kube-scheduler would write it."""

    request: str
    driver: str
    pool: str
    device: str
    admin_access: bool | None = None
    tolerations: list[dict[str, Any]] | None = Field(
        default=None, json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    )
    share_id: str | None = Field(default=None, alias="shareID")
    consumed_capacity: dict[str, str] | None = None
    binding_conditions: list[str] | None = None
    binding_failure_conditions: list[str] | None = None


class ClaimReservation(Model):
    name: str
    uid: str
    node: str
    results: list[DeviceResult] = Field(default_factory=list)
    config: list[dict[str, Any]] = Field(
        default_factory=list,
        description="status.allocation.devices.config as written (DeviceClass and claim config), so a resumed write is whole.",
        json_schema_extra={"items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
    )
    pinned: bool = Field(default=True, description="status.allocation.nodeSelector names `node` alone.")
    node_selector: dict[str, Any] | None = Field(
        default=None,
        description="Otherwise the nodeSelector written (network-attached devices); absent: the devices reach every node.",
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
    )


class PodPlacement(Model):
    name: str
    uid: str
    node: str


class PlannedDevices(Model):
    """Devices the plan counted for one member's extended resources that a DeviceClass serves (DRAExtendedResource)."""

    pod: str
    uid: str
    node: str
    devices: list[str] = Field(default_factory=list, description="driver/pool/device, as planned.")


class Reservation(Model):
    """Phalanx's intent, recorded before its first write, so a restarted operator finishes or undoes it."""

    state: Literal["Reserving", "Released"]
    released_at: str | None = Field(default=None, description="When the gates were lifted (RFC 3339): the bind deadline counts from here.")
    placements: list[PodPlacement] = Field(default_factory=list)
    claims: list[ClaimReservation] = Field(default_factory=list)
    planned: list[PlannedDevices] | None = Field(
        default=None,
        description="Only planned, not reserved: kube-scheduler refuses a pod whose extended-resource claim already has "
        "requests, so it creates and allocates that claim itself on the pinned node; the bind deadline covers a race for them.",
    )


class PodRef(Model):
    namespace: str
    name: str
    uid: str


class Nomination(Model):
    """A preemption in progress, recorded before its first eviction, so a restart neither evicts more nor loses it."""

    victims: list[PodRef] = Field(default_factory=list, description="Every pod this preemption evicts, and no other.")
    devices: list[str] = Field(default_factory=list, description="Devices freed for this group (driver/pool/device), kept from others.")
    nodes: list[str] = Field(default_factory=list, description="Nodes the group's plan used when the victims were chosen.")
    nominated_at: str = Field(description="When the victims were chosen (RFC 3339).")


class PodGroupResourceClaimStatus(Model):
    name: str = Field(description="The spec.resourceClaims entry.")
    resource_claim_name: str | None = Field(default=None, description="The ResourceClaim made for the group from the entry's template.")


class LostMember(Model):
    name: str
    uid: str
    cause: str = Field(description="Why, as first seen: a preemption names its preemptor, even once the pod is gone.")


class Readiness(Model):
    """The ready deadline's record: how many releases timed out before every member was Ready, and why the last did."""

    attempts: int = Field(default=0, ge=0, description="Releases torn down because a member was not Ready by the deadline, in a row.")
    member: str | None = Field(default=None, description="The member that was not Ready at the last timeout.")
    reason: str | None = Field(
        default=None, description="Its state then: a container's waiting or terminated reason, or why it never started."
    )
    timed_out_at: str | None = None
    not_before: str | None = Field(default=None, description="The group is not admitted again before this time (the back-off).")
    ready_at: str | None = Field(default=None, description="When every member of the current release was first seen Ready.")


class Hold(Model):
    """Devices held for this gang at the head of the line once it waited past its hold-after: kube-scheduler is kept
    from them by DeviceTaintRules (purpose `head`) and Phalanx plans no other group onto them, so as they free they
    stay free for it; anything using other devices still runs (backfill)."""

    devices: list[str] = Field(
        default_factory=list, max_length=8192, description="The devices its plan needs (driver/pool/device), held as they free."
    )
    held_at: str = Field(description="When the hold began (RFC 3339).")
    waiting_since: str = Field(description="When the gang began waiting, from which its hold-after counts.")


class PodGroupStatus(Model):
    conditions: list[Condition] = Field(
        default_factory=list, json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]}
    )
    reservation: Reservation | None = None
    nomination: Nomination | None = None
    hold: Hold | None = None
    lost: list[LostMember] | None = Field(
        default=None,
        max_length=256,
        description="Members lost in the latest disruption, kept after a teardown so `explain` can say what went and why.",
    )
    readiness: Readiness | None = None
    finished: list[str] | None = Field(
        default=None,
        max_length=10_000,
        description="The uids of members that finished their work (Succeeded), at most minCount of them, kept across a "
        "teardown: they count toward minCount after their pods are removed (PodGC), so a lone replacement is not left "
        "waiting for a quorum that can never exist again.",
    )
    members: int | None = Field(default=None, ge=0, description="Pods of the group that exist and are not terminal.")
    bound: int | None = Field(default=None, ge=0, description="Members bound to a node.")
    late_members: int | None = Field(
        default=None,
        ge=0,
        description="Members behind the gate of a group already placed (a replacement, a pod created after the release), "
        "each released as it fits.",
    )
    resource_claim_statuses: list[PodGroupResourceClaimStatus] | None = Field(
        default=None,
        max_length=4,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )


class CompositeGangSchedulingPolicy(Model):
    min_group_count: int = Field(ge=1, le=2**31 - 1, description="Child PodGroups that must be placed together, or none is.")


class CompositePodGroupSchedulingPolicy(Model):
    model_config = ConfigDict(
        json_schema_extra=_rules(
            _one_of("basic", "gang"),
            {"rule": "has(self.gang) == has(oldSelf.gang)", "message": "the basic/gang policy variant is immutable"},
        )
    )

    basic: Empty | None = Field(default=None, description="The child groups are placed independently.")
    gang: CompositeGangSchedulingPolicy | None = Field(default=None, description="All-or-nothing placement of the child groups.")


class CompositePodGroupSpec(Model):
    """Upstream's `scheduling.k8s.io/v1alpha3` CompositePodGroupSpec (KEP-6012), field for field; only a root (no
    parent) is placed by Phalanx, and a gang composite places every child group it has (see `scheduling.composites`)."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            {
                "rule": "!has(self.parentCompositePodGroupName)",
                "message": "Phalanx places a root CompositePodGroup only (one level of roles): remove "
                "parentCompositePodGroupName and give this composite's PodGroups the root as their parent",
            }
        )
    )

    parent_composite_pod_group_name: str | None = Field(
        default=None, max_length=253, pattern=DNS_SUBDOMAIN, description="Upstream's nesting; Phalanx refuses it (one level of roles)."
    )
    workload_ref: WorkloadReference | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    scheduling_policy: CompositePodGroupSchedulingPolicy = Field(json_schema_extra=_rules(IMMUTABLE))
    scheduling_constraints: PodGroupSchedulingConstraints | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))
    disruption_mode: DisruptionMode | None = Field(
        default=None,
        description="single or all; Phalanx's default for a gang is all (--gang-disruption-mode).",
        json_schema_extra=_rules(IMMUTABLE),
    )
    priority_class_name: str | None = Field(default=None, max_length=253, json_schema_extra=_rules(IMMUTABLE))
    priority: int | None = Field(default=None, le=1_000_000_000, json_schema_extra=_rules(IMMUTABLE))
    preemption_policy: Literal["PreemptLowerPriority", "Never"] | None = Field(default=None, json_schema_extra=_rules(IMMUTABLE))


class CompositePodGroup(Model):
    """A group of PodGroups (its roles) placed as one gang; its status is a PodGroup's, written by the same loop."""

    api_version: Literal["scheduling.phalanx.dev/v1beta1"] = API_VERSION
    kind: Literal["CompositePodGroup"] = "CompositePodGroup"
    metadata: ObjectMeta = ObjectMeta()
    spec: CompositePodGroupSpec
    status: PodGroupStatus | None = None


class PodGroup(Model):
    """The runtime instance Phalanx admits or rejects as a unit."""

    api_version: Literal["scheduling.phalanx.dev/v1beta1"] = API_VERSION
    kind: Literal["PodGroup"] = "PodGroup"
    metadata: ObjectMeta = ObjectMeta()
    spec: PodGroupSpec
    status: PodGroupStatus | None = None
