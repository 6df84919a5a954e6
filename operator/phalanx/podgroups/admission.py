"""Admission of a pod labelled into a PodGroup, and of a user's PodGroup, as pure functions: what to refuse, and
the gate to add.

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

from phalanx.api import intent, keys, naming
from phalanx.api.intent import FieldError, GangSpecError, GroupClaim, group_claims
from phalanx.owners import podclaims
from phalanx.owners.admission import Mutation
from phalanx.scheduling import composites, conditions

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


def mutate_pod(pod: JSON, pod_group: JSON | None, composite: JSON | None = None) -> Mutation:
    """Gate the pod; `pod_group` is the group its label names, as the API server has it now (None: there is none),
    and `composite` the CompositePodGroup that group is a role of, if it names one (None: there is none)."""
    name = group_name(pod)
    namespace = (pod.get("metadata") or {}).get("namespace") or "the pod's namespace"
    if pod_group is None:
        raise GangSpecError([_missing(name, namespace)])
    problem = _unusable(pod_group, name, namespace)
    if problem is not None:
        raise GangSpecError([problem])
    label = _composite_label(pod, pod_group, composite, name, namespace)
    gates = list((pod.get("spec") or {}).get("schedulingGates") or [])
    warnings: tuple[str, ...] = ()
    in_composite = composite is not None and composites.parent(pod_group) is not None and composites.gang(composite)
    if _placed(composite if in_composite else pod_group):  # type: ignore[arg-type]
        warnings = (
            f"PodGroup {namespace}/{name} was placed already: this pod joins it as a late member, released alone once "
            "it fits (status.lateMembers counts the late members still waiting)",
        )
    patch: JSON = {}
    if not any(g.get("name") == keys.SCHEDULING_GATE for g in gates):
        patch["schedulingGates"] = [*gates, {"name": keys.SCHEDULING_GATE}]
    shared = _group_claims(pod_group)
    _refuse_other_sources(pod, shared, name)
    claims = podclaims.resolve(pod, shared, name)
    if claims is not None:
        patch["resourceClaims"] = claims
    whole: JSON = {"spec": patch} if patch else {}
    if label is not None:
        whole["metadata"] = {"labels": label}
    return Mutation(patch=whole, warnings=warnings)


def _composite_label(pod: JSON, pod_group: JSON, composite: JSON | None, name: str, namespace: str) -> JSON | None:
    """The change to the pod's composite label, if any: the gang CompositePodGroup's name when its PodGroup is one's
    role (its member key, `podgroups.owner`), else no label (one the pod was created with is taken off: which gang a
    pod is in is its group's to say). Refuses a role of a composite that does not exist."""
    parent = composites.parent(pod_group)
    have = ((pod.get("metadata") or {}).get("labels") or {}).get(keys.COMPOSITE_LABEL)
    want = None
    if parent is not None:
        if composite is None or composite["metadata"].get("deletionTimestamp"):
            raise GangSpecError(
                [
                    FieldError(
                        PATH,
                        name,
                        f"PodGroup {namespace}/{name} is a role of CompositePodGroup {parent}, which does not exist in namespace "
                        f"{namespace}: the pod would wait behind {keys.SCHEDULING_GATE} for a gang that never comes",
                        f"create CompositePodGroup {parent} first (before its PodGroups' pods)",
                    )
                ]
            )
        want = parent if composites.gang(composite) else None
    return None if want == have else {keys.COMPOSITE_LABEL: want}


def _refuse_other_sources(pod: JSON, shared: tuple[GroupClaim, ...], group: str) -> None:
    """An entry named as a group claim but with another source would get a claim of its own without a word (as
    upstream does), and the member would not share the group's device."""
    by_name = {c.name: c for c in shared}
    errors = []
    for i, entry in enumerate((pod.get("spec") or {}).get("resourceClaims") or []):
        claim = by_name.get(entry.get("name"))
        source = {k: v for k, v in entry.items() if k != "name"}
        if claim is None or source in (claim.source(), {"resourceClaimName": naming.group_claim_name(group, claim.name)}):
            continue
        errors.append(
            FieldError(
                f"spec.resourceClaims[{i}]",
                source,
                f"PodGroup {group} shares the claim {claim.name} as {claim.source()}; this entry of that name has another source",
                f"write the entry as {claim.wire()} to share the group's claim, or rename it to keep a claim of the pod's own",
            )
        )
    if errors:
        raise GangSpecError(errors)


def _group_claims(pod_group: JSON) -> tuple[GroupClaim, ...]:
    """The claims the group shares (`spec.resourceClaims`, checked by the CRD's schema): a member's entry of the same
    name and template is pointed at the group's claim, as a gang Job's is (`jobs.podclaims`)."""
    errors: list[FieldError] = []
    return group_claims(pod_group["spec"].get("resourceClaims") or [], "spec.resourceClaims", errors) or ()


def _missing(name: str, namespace: str) -> FieldError:
    return FieldError(
        PATH,
        name,
        f"no PodGroup {name} in namespace {namespace}: the pod would wait behind {keys.SCHEDULING_GATE} for a group that never comes",
        "create the PodGroup first (before its pods), or correct the label",
    )


def _unusable(pod_group: JSON, name: str, namespace: str) -> FieldError | None:
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


SPEC_OF = {
    keys.POLICY: "spec.schedulingPolicy",
    keys.MIN_COUNT: "spec.schedulingPolicy.gang.minCount",
    keys.DISRUPTION_MODE: "spec.disruptionMode",
    keys.TOPOLOGY_KEY: "spec.schedulingConstraints.topology[0].key",
    keys.RESOURCE_CLAIMS: "spec.resourceClaims",
}
"""A Job's gang annotation, and where a PodGroup says the same."""


def validate_group(pod_group: JSON, old: JSON | None) -> None:
    """A user's PodGroup may carry only the annotations the loop reads on it (`keys.POD_GROUP_ANNOTATIONS`), with
    values it can read: a typo, a Job's gang annotation or a bad duration would be ignored without a word, and the
    deadline or hold it meant would never apply. Only what the request sets or changes counts, so a group admitted
    before can still be updated. Raises GangSpecError."""
    annotations = (pod_group.get("metadata") or {}).get("annotations") or {}
    previous = ((old or {}).get("metadata") or {}).get("annotations") or {}
    changed = {k: v for k, v in annotations.items() if k.startswith(keys.ANNOTATION_PREFIX) and previous.get(k) != v}
    errors = [
        FieldError(
            intent.annotation_path(key),
            value,
            "a Job's gang annotation, which a PodGroup does not read: its spec says the gang",
            f"set {SPEC_OF[key]} instead, and remove the annotation",
        )
        for key, value in sorted(changed.items())
        if key in SPEC_OF
    ]
    errors += intent.unknown_keys({k: v for k, v in changed.items() if k not in SPEC_OF}, known=keys.POD_GROUP_ANNOTATIONS)
    for read in (intent.ready_deadline, intent.hold_after):
        try:
            read(changed)
        except GangSpecError as exc:
            errors += exc.errors
    if errors:
        raise GangSpecError(errors)
