"""The pods kube-scheduler may be allocating devices for at this moment.

kube-scheduler allocates a pod's claims in memory when it reserves the pod and writes the allocation later, in
PreBind; until then nothing in the API shows it (two allocators are not coordinated upstream,
kubernetes#128980). A reservation of ours that overlaps such an allocation is only found once that write
lands, so the release waits for it, but only when such a pod exists: an ungated, unbound, pending pod with a
claim not yet allocated (or not yet created), or asking for an extended resource a DeviceClass serves.

Such a pod shows where it is in kube-scheduler: once its scheduling cycle has reserved it, the binding cycle sets
`status.nominatedNodeName` before PreBind writes anything (NominatedNodeNameForExpectation, on by default since
1.35), and PreBind can take long (a slow admission webhook on claims, API priority and fairness queueing the
scheduler's writes). Those pods are `binding`: their allocation is certain to land, so the release waits for it
on that evidence (bound, claims allocated, gone, or the nomination withdrawn) rather than for a fixed time.
A nomination kube-scheduler's own pod preemption made looks the same; waiting for it is only slower.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from phalanx.scheduling.accessors import allocated_ids, claim_names

if TYPE_CHECKING:
    from phalanx.kube.informers import Informer


UNPLACED = "inflight/unplaced"
"""The pods informer's index of the pods kube-scheduler may still place (`unplaced`)."""


def _placeable(pod: Mapping[str, Any]) -> tuple[bool, ...]:
    """(True,) for a pod kube-scheduler may still place: pending, unbound, ungated, not being deleted; else ()."""
    spec = pod["spec"]
    if spec.get("nodeName") or spec.get("schedulingGates") or pod["metadata"].get("deletionTimestamp"):
        return ()
    return (True,) if (pod.get("status") or {}).get("phase", "Pending") == "Pending" else ()


def unplaced(pods: Informer) -> list[dict[str, Any]]:
    """The pods kube-scheduler may still place, from the pods informer's index: the only ones `allocating` and
    `binding` can name, so a release looks through those, not through every pod (3,000 bound or gated ones for each
    gang of a 1,000-gang burst: 7 s of the operator's CPU at 5,000 nodes)."""
    return pods.index(UNPLACED, _placeable).get(True)


def _may_allocate(pod: Mapping[str, Any], claim: Callable[[str, str], Mapping[str, Any] | None], extended: Mapping[str, str]) -> bool:
    if not _placeable(pod):
        return False
    names = claim_names(pod)
    if names is None:
        return True  # a template's claim is being created: it may be allocated as soon as it exists
    namespace = pod["metadata"]["namespace"]
    if any(allocated_ids(claim(namespace, n) or {}) is None for n in names):
        return True
    spec = pod["spec"]
    containers = [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
    return any(
        name in extended for c in containers for part in ("requests", "limits") for name in (c.get("resources") or {}).get(part) or {}
    )


def _binding(pod: Mapping[str, Any], claim: Callable[[str, str], Mapping[str, Any] | None], extended: Mapping[str, str]) -> bool:
    return bool((pod.get("status") or {}).get("nominatedNodeName")) and _may_allocate(pod, claim, extended)


def binding(
    pods: Iterable[Mapping[str, Any]], claim: Callable[[str, str], Mapping[str, Any] | None], extended: Mapping[str, str]
) -> list[str]:
    """`namespace/name` of the pods among `allocating` that kube-scheduler is binding now: nominated to a node, its
    allocation held in memory until PreBind writes it."""
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods if _binding(p, claim, extended)]


def allocating(
    pods: Iterable[Mapping[str, Any]], claim: Callable[[str, str], Mapping[str, Any] | None], extended: Mapping[str, str]
) -> list[str]:
    """`namespace/name` of every pod kube-scheduler may hold an allocation for that the API does not show yet.

    `claim` looks a claim up by namespace and name; `extended` maps extended resource names to DeviceClasses.
    """
    return [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in pods if _may_allocate(p, claim, extended)]
