"""Which PodGroup `phalanx explain <name>` is about: an owner's groups (one per LeaderWorkerSet replica), or the
group of that name, and which of them to explain first."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from phalanx.api import keys
from phalanx.owners.seam import OwnerKind
from phalanx.scheduling import conditions
from phalanx.scheduling.explain_view import JSON, Objects


class NotFoundError(LookupError):
    """No PodGroup for the Job the user named."""


def find_pod_groups(objects: Objects, namespace: str, job: str, kind: OwnerKind) -> list[JSON]:
    """The groups of owner `job` of this kind (by the name the groups record; a LeaderWorkerSet has one per replica),
    or the group named `job`; of an owner made again under its name, the newest one's only. The one to explain comes
    first: the first still waiting for its placement, else the newest."""
    mine = [g for g in objects.podgroups if g["metadata"]["namespace"] == namespace]
    found = [g for g in mine if kind.name(g) == job]
    found = found or [g for g in mine if g["metadata"]["name"] == job]
    if not found:
        raise NotFoundError(
            f"no PodGroup for {kind.kind} {job!r} in namespace {namespace!r}, nor one of that name: is it a gang "
            f"(spec.scheduling or the {keys.MIN_COUNT} annotation on its owner, or a PodGroup of its own), and is the "
            "namespace right (-n)?"
        )
    newest = max(found, key=_created)
    owner = _owner_uid(newest, kind)
    found = sorted((g for g in found if _owner_uid(g, kind) == owner), key=lambda g: (_created(g), g["metadata"]["name"]))
    waiting = next((g for g in found if not conditions.true(g, keys.INITIALLY_SCHEDULED)), None)
    first = waiting if waiting is not None else newest
    return [first, *(g for g in found if g is not first)]


def find_pod_group(objects: Objects, namespace: str, job: str, kind: OwnerKind) -> JSON:
    """The group to explain for `job` (`find_pod_groups`)."""
    return find_pod_groups(objects, namespace, job, kind)[0]


def _created(group: Mapping[str, Any]) -> str:
    return group["metadata"].get("creationTimestamp", "")


def _owner_uid(group: Mapping[str, Any], kind: OwnerKind) -> str | None:
    """The uid of the object the group answers to (a LeaderWorkerSet's for each of its replicas' groups)."""
    return ((kind.ref(group) or {}).get("metadata") or {}).get("uid")


def others(groups: Sequence[JSON]) -> tuple[str, ...]:
    """The owner's other groups, each with where it stands (its PodGroupInitiallyScheduled reason), to explain by name."""
    return tuple(
        f"{g['metadata']['name']} ({(conditions.find(g, keys.INITIALLY_SCHEDULED) or {}).get('reason') or keys.PENDING})" for g in groups
    )
