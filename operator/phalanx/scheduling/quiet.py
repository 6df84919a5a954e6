"""Waiting groups a cycle need not visit: nothing a visit reads has changed since the last one found them short.

A cycle meets every PodGroup in queue order. With a thousand gangs waiting that
no node can take, each change anywhere (a pod bound, a claim written) visited
all of them again: the phase read, the counters, the members' planner inputs,
the shortfall memo's comparison, about a third of a millisecond each, so one
change cost hundreds of milliseconds, and the cost grew with the line.

A visit to a waiting group reads its PodGroup, the pods of its owner, their
claims and its priority; with those unchanged (by resourceVersion), nothing in
the loop's memory due, and the shortfall memo still saying no capacity it could
use was freed (`shortfall.Shortfalls.still_short`, on the snapshot the cycle
observed first), the visit would end where the last one did: known short, in
the line, nothing written. So the cycle joins it to the line as it stood and
goes on. Any write to the group or its members moves a resourceVersion, so a
memo never outlives the state it describes.

A run at once. Each of those checks is cheap, but a thousand of them a cycle,
with the line's joins and the head-of-line hold's look through it, made a
change cost three times as much with a thousand gangs waiting as with one. A
walk keeps the groups it passed over one after another as runs (`Run`); the
next cycle on the same reads meets each run as one: with every verdict in it
standing (`Shortfalls.stands`: none made again or dropped, nothing freed where
one of them could use it), and nothing else a pass reads changed (their memos
change only on their own visits, which the run had none of), each group would be
passed over again, so the run joins the line whole. A group visited, or backing
off, between two runs is met on its own, as in any walk.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.scheduling import accessors
from phalanx.scheduling.queue import Ahead
from phalanx.scheduling.shortfall import GroupKey, Standing

Inputs = tuple[Any, ...]


def inputs(
    pod_group: Mapping[str, Any],
    pods: Iterable[Mapping[str, Any]],
    claim: Callable[[str, str], Mapping[str, Any] | None],
    priority: int,
) -> Inputs | None:
    """What a waiting group's visit reads, by version: the PodGroup, every pod of its owner (terminal ones too) and
    the claims they name. None when an object has no version to compare (made by hand): such a group is visited."""
    pods = list(pods)
    members = tuple((p["metadata"]["uid"], _version(p)) for p in pods)
    if any(version is None for _, version in members):
        return None
    return fingerprint(pod_group, members, claim_versions(claim_refs(pod_group, pods), claim), priority)


def claim_refs(pod_group: Mapping[str, Any], pods: Iterable[Mapping[str, Any]]) -> tuple[tuple[str, str], ...]:
    """(namespace, name) of every claim the pods name, in order."""
    return tuple((p["metadata"]["namespace"], name) for p in pods for name in _claim_names(p))


def fingerprint(pod_group: Mapping[str, Any], members: Hashable, claims: tuple[str | None, ...] | None, priority: int) -> Inputs | None:
    """`inputs`, from what stands for the members' versions (the loop's: their index version, which moves with every
    write to one of them) and the versions of the claims they name (`claim_versions`)."""
    if _version(pod_group) is None or claims is None:
        return None
    return (_version(pod_group), priority, members, claims)


def claim_versions(refs: Iterable[tuple[str, str]], claim: Callable[[str, str], Mapping[str, Any] | None]) -> tuple[str | None, ...] | None:
    """The version of each claim named (None: not there); None when one there has no version."""
    versions = []
    for namespace, name in refs:
        obj = claim(namespace, name)
        if obj is not None and _version(obj) is None:
            return None
        versions.append(None if obj is None else _version(obj))
    return tuple(versions)


_NAMES: dict[tuple[str, str], tuple[str, ...]] = {}
"""(pod uid, resourceVersion) -> the claims it names: read once per version of each waiting pod, not every cycle."""
NAMES_KEPT = 100_000


def _claim_names(pod: Mapping[str, Any]) -> tuple[str, ...]:
    meta = pod["metadata"]
    uid, version = meta.get("uid"), meta.get("resourceVersion")
    if not uid or not version:
        return accessors.claim_names(pod) or ()
    found = _NAMES.get((uid, version))
    if found is None:
        if len(_NAMES) >= NAMES_KEPT:
            _NAMES.clear()
        found = _NAMES[(uid, version)] = accessors.claim_names(pod) or ()
    return found


def _version(obj: Mapping[str, Any]) -> str | None:
    return obj["metadata"].get("resourceVersion")  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Quiet:
    """A waiting group's last visit, which found it short and wrote nothing."""

    inputs: Inputs
    key: GroupKey
    """Its shortfall key: the group as planned, for the line, and for the memo's verdict."""


def memoizable(pod_group: Mapping[str, Any]) -> bool:
    """A group with claims of its own has them made and checked on its visit (`groupclaims`): always visited."""
    return not pod_group["spec"].get("resourceClaims")


@dataclass(frozen=True)
class Run:
    """Groups a walk passed over one after another: each with its members, each's place in the line, their verdicts."""

    groups: tuple[tuple[dict[str, Any], list[dict[str, Any]]], ...]
    ahead: tuple[Ahead, ...]
    standing: Standing


Step = Run | tuple[dict[str, Any], list[dict[str, Any]]]
"""A run passed over, or one group (visited, or skipped for its back-off)."""


@dataclass(frozen=True)
class Walk:
    """A cycle's walk through the groups in queue order, as the next cycle on the same reads may retrace it."""

    reads: tuple[Any, ...]
    """The loop's reads as that cycle began (`SchedulingLoop._reads`)."""
    steps: tuple[Step, ...]
