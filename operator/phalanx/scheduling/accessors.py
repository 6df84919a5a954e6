"""What an API object says, read one way everywhere: a pod's state and claims, a claim's allocation, a PodGroup's records.

Plain reads of the view's dicts (no planner types beyond device ids); the
translation into the planner's model is `inputs`. The loop and `phalanx
explain` read through the same functions, so what explain says is what the
loop decides.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from phalanx.api import keys, schema
from phalanx.kube.client import custom_path
from phalanx.planner import quantity
from phalanx.planner.model import DeviceId

if TYPE_CHECKING:
    from phalanx.owners.seam import OwnerKind  # the seam reads phase, which reads this module


def name(obj: Mapping[str, Any]) -> str:
    return obj["metadata"]["name"]


def namespace(obj: Mapping[str, Any]) -> str:
    return obj["metadata"]["namespace"]


def terminal(pod: Mapping[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def live(pod: Mapping[str, Any]) -> bool:
    """Neither terminal nor terminating: a member that counts."""
    return not terminal(pod) and not pod["metadata"].get("deletionTimestamp")


def gated(pod: Mapping[str, Any]) -> bool:
    return any(g.get("name") == keys.SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or [])


def bound(pod: Mapping[str, Any]) -> bool:
    """Bound to a node by kube-scheduler (`spec.nodeName`): pinned and released is not yet bound."""
    return bool(pod["spec"].get("nodeName"))


def started(pod: Mapping[str, Any] | None) -> bool:
    """Bound, or past the gate (pinned and released, or never gated): a pod on its node or about to be, which a
    snapshot counts there and a rollback never touches again."""
    return pod is not None and (bound(pod) or not gated(pod))


def may_run(pod: Mapping[str, Any] | None) -> bool:
    """Whether a pod's containers may be running or may yet start, so its devices must stay with it.

    Upstream's resourceclaim controller frees a claim only once its pod is done (`isPodDone`: a terminal phase,
    or deleted before it was bound); a bound pod being deleted runs out its grace period first. A pod still
    behind Phalanx's gate cannot start either: only Phalanx lifts it."""
    if pod is None or terminal(pod):
        return False
    if bound(pod):
        return True
    return not pod["metadata"].get("deletionTimestamp") and not gated(pod)


def pins(pod_groups: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """Pod uid -> node, for every pod Phalanx pinned: the placements its reservations record.

    The `scheduling.phalanx.dev/node` annotation alone proves nothing (anyone who
    may patch a pod can write it), so only a recorded pin counts."""
    return {uid: node for g in pod_groups for uid, node in recorded_pins(g).items()}


def recorded_pins(pod_group: Mapping[str, Any]) -> dict[str, str]:
    """Pod uid -> node of the placements one group's reservation records."""
    placements = ((pod_group.get("status") or {}).get("reservation") or {}).get("placements") or []
    return {p["uid"]: p["node"] for p in placements if p.get("uid") and p.get("node")}


def placed_on(pod: Mapping[str, Any], pinned: Mapping[str, str] | None = None) -> str | None:
    """The node a pod occupies: bound, or pinned by Phalanx (`pinned`, from `pins`) and released."""
    node = pod["spec"].get("nodeName")
    if node:
        return node
    if not gated(pod):
        return (pinned or {}).get(pod["metadata"]["uid"])
    return None


def extended_claim_name(pod: Mapping[str, Any]) -> str | None:
    """The claim kube-scheduler created for the pod's extended resources a DeviceClass serves, once it did."""
    return ((pod.get("status") or {}).get("extendedResourceClaimStatus") or {}).get("resourceClaimName")


def holding_claim_names(pod: Mapping[str, Any]) -> tuple[str, ...]:
    """Every claim that may hold devices for the pod: its own (those created so far), and kube-scheduler's for its
    extended resources."""
    special = extended_claim_name(pod)
    return (*(claim_names(pod) or ()), *((special,) if special else ()))


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


def _results(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return ((((obj.get("status") or {}).get("allocation") or {}).get("devices")) or {}).get("results") or []


def dedicated_ids(obj: Mapping[str, Any]) -> tuple[DeviceId, ...]:
    """Devices an allocation takes whole: neither admin access nor a share (a result with a shareID)."""
    return tuple((r["driver"], r["pool"], r["device"]) for r in _results(obj) if not r.get("adminAccess") and not r.get("shareID"))


def shares(obj: Mapping[str, Any]) -> list[tuple[DeviceId, dict[str, Decimal]]]:
    """The shares an allocation holds (results with a shareID, not admin access): device and capacity consumed."""
    return [
        ((r["driver"], r["pool"], r["device"]), {n: quantity.parse(v) for n, v in (r.get("consumedCapacity") or {}).items()})
        for r in _results(obj)
        if r.get("shareID") and not r.get("adminAccess")
    ]


def allocated_ids(obj: Mapping[str, Any]) -> tuple[DeviceId, ...] | None:
    allocation = (obj.get("status") or {}).get("allocation")
    if not allocation:
        return None
    return tuple((r["driver"], r["pool"], r["device"]) for r in (allocation.get("devices") or {}).get("results") or [])


def pinned_node(allocation: Mapping[str, Any] | None) -> str | None:
    for term in ((allocation or {}).get("nodeSelector") or {}).get("nodeSelectorTerms") or []:
        for field in term.get("matchFields") or []:
            if field.get("key") == "metadata.name" and field.get("operator") == "In" and len(field.get("values") or []) == 1:
                return field["values"][0]
    return None


def claim_names(pod: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The ResourceClaims a pod uses, or None while the resourceclaim controller has not created them all."""
    names = []
    for ref in pod["spec"].get("resourceClaims") or []:
        name = claim_name(pod, ref)
        if name is None and ref.get("resourceClaimTemplateName"):
            return None
        if name is not None:
            names.append(name)
    return tuple(names)


def claim_name(pod: Mapping[str, Any], ref: Mapping[str, Any]) -> str | None:
    """The ResourceClaim one `spec.resourceClaims` entry names: its own, or the one made from its template, as the
    pod's `status.resourceClaimStatuses` records (None until it is made)."""
    if ref.get("resourceClaimName"):
        return ref["resourceClaimName"]
    if not ref.get("resourceClaimTemplateName"):
        return None
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses") or []
    return next((s.get("resourceClaimName") for s in statuses if s["name"] == ref["name"]), None) or None


_SPECS: dict[tuple[str, str, Any], schema.PodGroupSpec] = {}
"""(uid, resourceVersion) -> the spec's model (frozen): a cycle reads every waiting group's policy several times."""
SPECS_KEPT = 20_000


def spec(pod_group: Mapping[str, Any]) -> schema.PodGroupSpec:
    """The PodGroup's spec as its model (pydantic, the CRD's own rules): the one reading of its policy and modes.
    Read once per version of the group (one made by hand, without a version, every time)."""
    meta = pod_group["metadata"]
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not uid or not version:
        return schema.PodGroupSpec.model_validate(pod_group["spec"])
    key = (uid, version, pod_group.get(keys.ROLES))  # a composite's spec moves with its children too
    found = _SPECS.get(key)
    if found is None:
        if len(_SPECS) >= SPECS_KEPT:
            _SPECS.clear()
        found = _SPECS[key] = schema.PodGroupSpec.model_validate(pod_group["spec"])
    return found


def kind(group: Mapping[str, Any]) -> str:
    """PodGroup, or CompositePodGroup for a composite as the loop's group (`scheduling.composites`)."""
    return keys.COMPOSITE_KIND if group.get("kind") == keys.COMPOSITE_KIND else "PodGroup"


def path(group: Mapping[str, Any], *, status: bool = False) -> str:
    """Where the group is read and written: a composite's writes go to the composite itself."""
    return custom_path(kind(group).lower() + "s", group["metadata"]["namespace"], group["metadata"]["name"], status=status)


def gang(pod_group: Mapping[str, Any]) -> bool:
    return spec(pod_group).scheduling_policy.gang is not None


def min_count(pod_group: Mapping[str, Any]) -> int:
    gang_policy = spec(pod_group).scheduling_policy.gang
    return gang_policy.min_count if gang_policy is not None else 1


def topology_key(pod_group: Mapping[str, Any]) -> str | None:
    """The group's topology key (`spec.schedulingConstraints.topology[0].key`): every member in one domain of it."""
    topology = (pod_group["spec"].get("schedulingConstraints") or {}).get("topology") or []
    return str(topology[0]["key"]) if topology else None


def disrupts_all(pod_group: Mapping[str, Any]) -> bool:
    """disruptionMode all: one member lost takes the whole group down (the PodGroup always says; a gang's default)."""
    return spec(pod_group).disruption_mode.all is not None


def priority(pod_group: Mapping[str, Any], priority_class: Callable[[str], Mapping[str, Any] | None]) -> int:
    """The group's priority: its own, else its PriorityClass's value (looked up by name), else 0."""
    name = pod_group["spec"].get("priorityClassName")
    value = pod_group["spec"].get("priority")
    if value is None and name:
        value = (priority_class(name) or {}).get("value", 0)
    return int(value or 0)


def nomination(pod_group: Mapping[str, Any]) -> schema.Nomination | None:
    raw = (pod_group.get("status") or {}).get("nomination")
    return schema.Nomination.model_validate(raw) if raw else None


def reservation(pod_group: Mapping[str, Any]) -> schema.Reservation | None:
    raw = (pod_group.get("status") or {}).get("reservation")
    return schema.Reservation.model_validate(raw) if raw else None


def nominated_devices(record: schema.Nomination) -> list[DeviceId]:
    return [tuple(d.split("/", 2)) for d in record.devices]  # type: ignore[misc]


def pods_by_group(
    podgroups: Iterable[Mapping[str, Any]], pods: Iterable[Mapping[str, Any]], kind: OwnerKind
) -> dict[str, list[dict[str, Any]]]:
    """PodGroup uid -> every pod of its owner, terminal and terminating ones included (losses are found among them).

    A pod and a group are together when, as the workload kind finds them (`owners.seam`), the group's owner is
    one of the pod's, in one namespace (a JobSet's pod has its Job and its JobSet)."""
    every: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for pod in pods:
        for uid in kind.member_uids(pod):
            every[(pod["metadata"]["namespace"], uid)].append(pod)  # type: ignore[arg-type]
    return {g["metadata"]["uid"]: every.get((g["metadata"]["namespace"], kind.owner_uid(g) or ""), []) for g in podgroups}


def claims_ready(pod: Mapping[str, Any], claim: Callable[[str, str], Mapping[str, Any] | None]) -> bool:
    """Every claim of the pod exists (`claim` looks one up by namespace and name)."""
    names = claim_names(pod)
    return names is not None and all(claim(pod["metadata"]["namespace"], n) for n in names)
