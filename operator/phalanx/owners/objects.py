"""The Workload and PodGroup a gang owner of any kind gets, built as pure data from its `GangSource`.

Each kind gives its own `GangSource` (`jobs.objects.from_job`, `jobsets.objects.from_jobset`) and reuses
everything below it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from phalanx.api import keys, naming, schema
from phalanx.api.intent import GangIntent


@dataclass(frozen=True)
class GangSource:
    """What Phalanx needs to know of a Job (or any other kind of gang owner)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str
    intent: GangIntent
    parallelism: int | None
    completions: int | None
    priority_class_name: str | None
    gated: bool
    ready_deadline: str | None = None
    """The Job's ready-deadline annotation as written (admission checked it), copied onto its PodGroup."""
    hold_after: str | None = None
    """The Job's hold-after annotation as written (admission checked it), copied onto its PodGroup."""
    roles: tuple[tuple[str, int], ...] = ()
    """(role, its minimum) of an owner whose gang is made of roles (a JobSet's replicated Jobs, `jobsets.roles`):
    its group is then a CompositePodGroup named as the PodGroup would be, with a child PodGroup per role."""

    def own_labels(self) -> dict[str, str]:
        """Labels of the kind's own on the Workload and PodGroup (a LeaderWorkerSet's replica index), beside Phalanx's."""
        return {}

    def copied_annotations(self) -> dict[str, str]:
        """The Job's annotations its PodGroup carries too: the loop reads them there."""
        said = {keys.READY_DEADLINE: self.ready_deadline, keys.HOLD_AFTER: self.hold_after}
        return {k: v for k, v in said.items() if v is not None}

    @property
    def min_count(self) -> int:
        if self.roles:
            return sum(minimum for _, minimum in self.roles)
        return self.intent.min_count_for(self.parallelism, self.completions)

    @property
    def workload_name(self) -> str:
        return naming.workload_name(self.name, self.uid)

    @property
    def template_name(self) -> str:
        return naming.template_name(self.name)

    @property
    def pod_group_name(self) -> str:
        """The PodGroup's name; of an owner of roles, its CompositePodGroup's."""
        return naming.pod_group_name(self.workload_name, self.template_name)

    def role_pod_group_name(self, role: str) -> str:
        """A role's child PodGroup: named for the Workload and the role's template (the role's own name)."""
        return naming.pod_group_name(self.workload_name, role)

    def owner_reference(self) -> dict[str, Any]:
        return {"apiVersion": self.api_version, "kind": self.kind, "name": self.name, "uid": self.uid, "controller": True}

    def reference(self) -> dict[str, Any]:
        """The owner as Events name it."""
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "metadata": {"name": self.name, "namespace": self.namespace, "uid": self.uid},
        }


def scheduling_policy(source: GangSource) -> schema.PodGroupSchedulingPolicy:
    if source.intent.policy == "gang":
        return schema.PodGroupSchedulingPolicy(gang=schema.GangSchedulingPolicy(min_count=source.min_count))
    return schema.PodGroupSchedulingPolicy(basic=schema.Empty())


def _disruption_mode(source: GangSource) -> schema.DisruptionMode:
    mode = source.intent.disruption_mode or ("all" if source.intent.policy == "gang" else "single")
    return schema.DisruptionMode(**{mode: schema.Empty()})


def _constraints(source: GangSource) -> schema.PodGroupSchedulingConstraints | None:
    if source.intent.topology_key is None:
        return None
    return schema.PodGroupSchedulingConstraints(topology=[schema.TopologyConstraint(key=source.intent.topology_key)])


def group_claims(source: GangSource) -> list[schema.PodGroupResourceClaim] | None:
    """The Job's `resourceClaims`, in the PodGroup's (and the Workload template's) shape."""
    if not source.intent.resource_claims:
        return None
    return [schema.PodGroupResourceClaim.model_validate(c.wire()) for c in source.intent.resource_claims]


def _labels(source: GangSource) -> dict[str, str]:
    return {**source.own_labels(), keys.JOB_NAME_LABEL: source.name, keys.POLICY_LABEL: source.intent.policy.capitalize()}


def _role_policy(minimum: int) -> schema.PodGroupSchedulingPolicy:
    """A role's own policy: a gang of its minimum, or basic for a role of 0 (its pods go along when they fit)."""
    if minimum:
        return schema.PodGroupSchedulingPolicy(gang=schema.GangSchedulingPolicy(min_count=minimum))
    return schema.PodGroupSchedulingPolicy(basic=schema.Empty())


def _templates(source: GangSource) -> list[schema.PodGroupTemplate]:
    """One template, or one per role (named for the role, as upstream's JobSet names a replicated Job's)."""
    if not source.roles:
        return [
            schema.PodGroupTemplate(
                name=source.template_name,
                scheduling_policy=scheduling_policy(source),
                scheduling_constraints=_constraints(source),
                disruption_mode=_disruption_mode(source),
                priority_class_name=source.priority_class_name,
                resource_claims=group_claims(source),
            )
        ]
    return [
        schema.PodGroupTemplate(
            name=role,
            scheduling_policy=_role_policy(minimum),
            disruption_mode=_disruption_mode(source),
            priority_class_name=source.priority_class_name,
        )
        for role, minimum in source.roles
    ]


def workload(source: GangSource) -> schema.Workload:
    return schema.Workload(
        metadata=schema.ObjectMeta(
            name=source.workload_name,
            namespace=source.namespace,
            labels=_labels(source),
            ownerReferences=[source.owner_reference()],
        ),
        spec=schema.WorkloadSpec(
            controller_ref=schema.TypedLocalObjectReference(
                api_group=source.api_version.rpartition("/")[0], kind=source.kind, name=source.name
            ),
            pod_group_templates=_templates(source),
        ),
    )


def _metadata(source: GangSource, name: str, workload_uid: str, **labels: str) -> schema.ObjectMeta:
    """A PodGroup's (or CompositePodGroup's) metadata: owned by the owner (its controller) and its Workload."""
    workload_owner = {
        "apiVersion": schema.API_VERSION,
        "kind": "Workload",
        "name": source.workload_name,
        "uid": workload_uid,
    }
    return schema.ObjectMeta(
        name=name,
        namespace=source.namespace,
        labels={**_labels(source), **labels},
        ownerReferences=[source.owner_reference(), workload_owner],
        **({"annotations": copied} if (copied := source.copied_annotations()) else {}),
    )


def composite(source: GangSource, workload_uid: str) -> schema.CompositePodGroup:
    """The gang of an owner of roles: every role (child) placed together, or none; the gang's disruption mode,
    priority and topology are the composite's (`scheduling.composites`)."""
    return schema.CompositePodGroup(
        metadata=_metadata(source, source.pod_group_name, workload_uid),
        spec=schema.CompositePodGroupSpec(
            scheduling_policy=schema.CompositePodGroupSchedulingPolicy(
                gang=schema.CompositeGangSchedulingPolicy(min_group_count=len(source.roles))
            ),
            scheduling_constraints=_constraints(source),
            disruption_mode=_disruption_mode(source),
            priority_class_name=source.priority_class_name,
        ),
    )


def role_pod_group(source: GangSource, role: str, minimum: int, workload_uid: str) -> schema.PodGroup:
    """A role's child PodGroup: its minimum, and the role label its pods carry too (`keys.ROLE_LABEL`)."""
    return schema.PodGroup(
        metadata=_metadata(source, source.role_pod_group_name(role), workload_uid, **{keys.ROLE_LABEL: role}),
        spec=schema.PodGroupSpec(
            parent_composite_pod_group_name=source.pod_group_name,
            workload_ref=schema.WorkloadReference(workload_name=source.workload_name, template_name=role),
            scheduling_policy=_role_policy(minimum),
            disruption_mode=_disruption_mode(source),
            priority_class_name=source.priority_class_name,
        ),
    )


def pod_group(source: GangSource, workload_uid: str) -> schema.PodGroup:
    return schema.PodGroup(
        metadata=_metadata(source, source.pod_group_name, workload_uid),
        spec=schema.PodGroupSpec(
            workload_ref=schema.WorkloadReference(workload_name=source.workload_name, template_name=source.template_name),
            scheduling_policy=scheduling_policy(source),
            scheduling_constraints=_constraints(source),
            disruption_mode=_disruption_mode(source),
            priority_class_name=source.priority_class_name,
            resource_claims=group_claims(source),
        ),
    )


def role_patch(role: str, minimum: int, current: dict[str, Any]) -> dict[str, Any] | None:
    """The merge patch that carries a role's changed minimum to its child PodGroup, or None when it is right (a role
    of 0 is basic, and admission keeps a role from moving between 0 and a minimum)."""
    policy = current["spec"].get("schedulingPolicy") or {}
    if "gang" not in policy or minimum == 0 or policy["gang"].get("minCount") == minimum:
        return None
    return {"spec": {"schedulingPolicy": {"gang": {"minCount": minimum}}}}


def min_count_patch(source: GangSource, current: dict[str, Any], *, workload_kind: bool) -> dict[str, Any] | None:
    """The merge patch that carries a changed minCount, or None when it is already right."""
    if source.intent.policy != "gang":
        return None
    if workload_kind and source.roles:
        templates = current["spec"]["podGroupTemplates"]
        minimums = dict(source.roles)
        updated = [
            dict(t, schedulingPolicy={"gang": {"minCount": minimums[t["name"]]}})
            if "gang" in t["schedulingPolicy"]
            and minimums.get(t["name"])
            and t["schedulingPolicy"]["gang"]["minCount"] != minimums[t["name"]]
            else t
            for t in templates
        ]
        return {"spec": {"podGroupTemplates": updated}} if updated != templates else None
    if workload_kind:
        templates = current["spec"]["podGroupTemplates"]
        if templates[0]["schedulingPolicy"]["gang"]["minCount"] == source.min_count:
            return None
        updated = [dict(templates[0], schedulingPolicy={"gang": {"minCount": source.min_count}}), *templates[1:]]
        return {"spec": {"podGroupTemplates": updated}}
    if current["spec"]["schedulingPolicy"]["gang"]["minCount"] == source.min_count:
        return None
    return {"spec": {"schedulingPolicy": {"gang": {"minCount": source.min_count}}}}
