"""Where preemption victims are found: running pods as the units gang preemption may take, from API objects.

A group of Phalanx's in disruptionMode `all` is one victim (taking one member
would take them all); a member of a `single` group and a pod outside any
group are victims of their own. What a victim frees: its requests on its node
and the devices of claims that only its own pods use. Each victim names
the PodDisruptionBudgets selecting its pods and how many each selects; what
each budget allows (`allowed`) is summed over the victims chosen.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from phalanx.planner.model import Victim, VictimPod, frozen_map
from phalanx.planner.pods import selects
from phalanx.scheduling import accessors, inputs


def _priority(pod: Mapping[str, Any]) -> int:
    return int(pod["spec"].get("priority") or 0)


def victims(
    pods: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    group_of: Mapping[str, Mapping[str, Any]],
    budgets: Iterable[Mapping[str, Any]],
    *,
    skip: frozenset[str] = frozenset(),
    pinned: Mapping[str, str] | None = None,
) -> list[Victim]:
    """Every unit of running pods preemption may take; pods of the groups in `skip` (uids) are never victims.

    `group_of` maps a pod uid to its PodGroup, for pods of Phalanx's groups.
    """
    claims_by_key = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in claims}
    units: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    meta: dict[str, tuple[bool, str]] = {}
    for pod in pods:
        if accessors.terminal(pod) or pod["metadata"].get("deletionTimestamp") or accessors.placed_on(pod, pinned) is None:
            continue
        group = group_of.get(pod["metadata"]["uid"])
        if group is not None and group["metadata"]["uid"] in skip:
            continue
        if group is not None and accessors.disrupts_all(group):
            key = f"group {group['metadata']['namespace']}/{group['metadata']['name']}"
            meta[key] = (True, group["metadata"].get("creationTimestamp", ""))
        else:
            key = f"pod {pod['metadata']['namespace']}/{pod['metadata']['name']}"
            meta[key] = (False, pod["metadata"].get("creationTimestamp", ""))
        units[key].append(pod)
    budget_list = list(budgets)
    out = []
    for key, members in units.items():
        uids = {p["metadata"]["uid"] for p in members}
        is_group, created = meta[key]
        out.append(
            Victim(
                key=key,
                priority=max(_priority(p) for p in members),
                created=created,
                is_group=is_group,
                pods=tuple(_victim_pod(p, claims_by_key, uids, pinned) for p in members),
                budgets=_budgets(members, budget_list),
            )
        )
    return out


def for_preemptor(
    pod_group: Mapping[str, Any],
    member_uids: Iterable[str],
    pods: Iterable[Mapping[str, Any]],
    claims: Iterable[Mapping[str, Any]],
    podgroups: Iterable[Mapping[str, Any]],
    pods_of: Mapping[str, Iterable[Mapping[str, Any]]],
    budgets: Iterable[Mapping[str, Any]],
    pinned: Mapping[str, str] | None = None,
) -> list[Victim] | None:
    """The victims `pod_group` may take, or None when it, or one of its members, has preemptionPolicy Never."""
    pods = list(pods)
    uids = set(member_uids)
    if pod_group["spec"].get("preemptionPolicy") == "Never" or any(
        p["spec"].get("preemptionPolicy") == "Never" for p in pods if p["metadata"]["uid"] in uids
    ):
        return None
    group_of = {p["metadata"]["uid"]: g for g in podgroups for p in pods_of.get(g["metadata"]["uid"], [])}
    return victims(pods, claims, group_of, budgets, skip=frozenset({pod_group["metadata"]["uid"]}), pinned=pinned)


def _victim_pod(
    pod: Mapping[str, Any], claims: Mapping[tuple[str, str], Mapping[str, Any]], unit: set[str], pinned: Mapping[str, str] | None
) -> VictimPod:
    namespace = pod["metadata"]["namespace"]
    devices = []
    shares = []
    for name in accessors.holding_claim_names(pod):
        claim = claims.get((namespace, name))
        if claim is None:
            continue
        users = {r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"}
        if users <= unit:
            devices.extend(accessors.consuming_ids(claim) or ())
            shares.extend((device, frozen_map(consumed)) for device, consumed in accessors.shares(claim))
    return VictimPod(
        namespace=namespace,
        name=pod["metadata"]["name"],
        uid=pod["metadata"]["uid"],
        node=accessors.placed_on(pod, pinned) or "",
        requests=frozen_map(inputs.pod_requests(pod)),
        devices=tuple(devices),
        shares=tuple(shares),
    )


def _key(budget: Mapping[str, Any]) -> str:
    return f"{budget['metadata']['namespace']}/{budget['metadata']['name']}"


def _budgets(members: list[Mapping[str, Any]], budgets: list[Mapping[str, Any]]) -> tuple[tuple[str, int], ...]:
    out = []
    for budget in budgets:
        namespace = budget["metadata"]["namespace"]
        selector = inputs.label_selector((budget.get("spec") or {}).get("selector"))
        hit = [p for p in members if p["metadata"]["namespace"] == namespace and selects(selector, p["metadata"].get("labels") or {})]
        if hit:
            out.append((_key(budget), len(hit)))
    return tuple(sorted(out))


def allowed(budgets: Iterable[Mapping[str, Any]]) -> dict[str, int]:
    """Each PodDisruptionBudget's allowed disruptions now, as its controller last wrote them."""
    return {_key(b): int((b.get("status") or {}).get("disruptionsAllowed") or 0) for b in budgets}
