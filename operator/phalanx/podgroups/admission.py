"""Admission of a pod labelled into a PodGroup, as pure functions: what to refuse, and the gate to add.

The pod webhook sees only pods that carry the label (its objectSelector), so
no other pod ever waits for Phalanx. It gates the pod at creation (a gate
can only be set then) and refuses what would leave the pod waiting for a
group that cannot take it: a value that names no PodGroup of the pod's
namespace, a group Phalanx made for a Job or JobSet, a pod already in a gang
through its own controller. Refusing beats a condition here: a pod admitted
with a typo would wait behind the gate with no group to lift it, and a
controller refused retries, so the order "PodGroup, then pods" (what
`kubectl apply -f` of one file does) is all it asks.
"""

from __future__ import annotations

import re
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import FieldError, GangSpecError
from phalanx.jobs.admission import Mutation
from phalanx.scheduling import conditions

JSON = dict[str, Any]
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
"""A PodGroup's name: a DNS subdomain (label values are at most 63 characters, so no longer check is needed)."""
PATH = f"metadata.labels[{keys.POD_GROUP_LABEL}]"


def group_name(pod: JSON) -> str:
    """The PodGroup the pod's label names, checked before it is looked up; raises GangSpecError."""
    meta = pod.get("metadata") or {}
    value = (meta.get("labels") or {}).get(keys.POD_GROUP_LABEL, "")
    namespace = meta.get("namespace") or "the pod's namespace"
    errors: list[FieldError] = []
    if "/" in value:
        errors.append(
            FieldError(
                PATH,
                value,
                "a pod joins a PodGroup of its own namespace only; the label names a group, not a namespace",
                f"create the PodGroup in namespace {namespace} and put its name alone in the label",
            )
        )
    elif not NAME.match(value):
        errors.append(
            FieldError(
                PATH,
                value,
                "not a PodGroup name (lowercase letters, digits, '-' and '.', starting and ending with a letter or digit)",
                f"set it to the name of a PodGroup in namespace {namespace}",
            )
        )
    errors += _two_groups(pod)
    if errors:
        raise GangSpecError(errors)
    return value


def mutate_pod(pod: JSON, pod_group: JSON | None) -> Mutation:
    """Gate the pod; `pod_group` is the group its label names, as the API server has it now (None: there is none)."""
    name = group_name(pod)
    namespace = (pod.get("metadata") or {}).get("namespace") or "the pod's namespace"
    problem = _unusable(pod_group, name, namespace)
    if problem is not None:
        raise GangSpecError([problem])
    gates = list((pod.get("spec") or {}).get("schedulingGates") or [])
    warnings: tuple[str, ...] = ()
    if _placed(pod_group):  # type: ignore[arg-type]
        warnings = (
            f"PodGroup {namespace}/{name} was placed already: this pod joins it as a late member, released alone once "
            "it fits (status.lateMembers counts the late members still waiting)",
        )
    if any(g.get("name") == keys.SCHEDULING_GATE for g in gates):
        return Mutation(warnings=warnings)
    return Mutation(patch={"spec": {"schedulingGates": [*gates, {"name": keys.SCHEDULING_GATE}]}}, warnings=warnings)


def _unusable(pod_group: JSON | None, name: str, namespace: str) -> FieldError | None:
    if pod_group is None:
        return FieldError(
            PATH,
            name,
            f"no PodGroup {name} in namespace {namespace}: the pod would wait behind {keys.SCHEDULING_GATE} for a group that never comes",
            "create the PodGroup first (before its pods), or correct the label",
        )
    meta = pod_group["metadata"]
    if meta.get("deletionTimestamp"):
        return FieldError(PATH, name, f"PodGroup {namespace}/{name} is being deleted", "create the pod once the group is made again")
    owner = (meta.get("labels") or {}).get(keys.JOB_NAME_LABEL)
    if owner is not None:
        return FieldError(
            PATH,
            name,
            f"PodGroup {namespace}/{name} is the one Phalanx made for {owner}, whose own pods are its members",
            "create a PodGroup of your own for these pods and name it in the label",
        )
    return None


def _placed(pod_group: JSON) -> bool:
    """The group was released (or scheduled): a pod that comes now is a late member."""
    reservation = (pod_group.get("status") or {}).get("reservation") or {}
    return reservation.get("state") == "Released" or conditions.true(pod_group, keys.INITIALLY_SCHEDULED)


def _two_groups(pod: JSON) -> list[FieldError]:
    """A pod whose controller's admission gated it for a gang of its own (a gang Job's or JobSet's template: the
    gate and, when named, the template label) would be a member of two groups."""
    meta = pod.get("metadata") or {}
    controller = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
    gated = any(g.get("name") == keys.SCHEDULING_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])
    if keys.TEMPLATE_LABEL not in (meta.get("labels") or {}) and not (controller and gated):
        return []
    who = f"its {controller['kind']} {controller['name']}" if controller else "its controller"
    return [
        FieldError(
            PATH,
            (meta.get("labels") or {}).get(keys.POD_GROUP_LABEL),
            f"the pod asks for two gangs: this label, and {who}'s own (its template carries {keys.SCHEDULING_GATE})",
            f"take the gang annotations ({keys.ANNOTATION_PREFIX}*) off the owner, or this label off its pod template",
        )
    ]
