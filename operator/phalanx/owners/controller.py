"""The controller every kind shares: each gang owner gets its Workload and PodGroup, and keeps them in step.

Level-triggered on every owner event and idempotent, so a restart, a missed
event or a retry converges on the same objects. Kopf's persistence is not
used: nothing of Kopf's is written onto users' objects or Pods. A kind
registers its own Kopf event handler and resync (`jobs.controller`,
`jobsets.controller`) and hands them its `GangSource` maker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import kopf

from phalanx.api import keys
from phalanx.api.intent import GangSpecError
from phalanx.kube.client import ApiError, Conflict, Kube, NotFound, custom_path
from phalanx.owners import gating, objects
from phalanx.scheduling import conditions

SourceOf = Callable[[dict[str, Any]], objects.GangSource | Sequence[objects.GangSource] | None]
"""A gang owner's `GangSource` from its object, or one per gang where it has several (a LeaderWorkerSet's replicas);
None: it asks for no gang. Raises GangSpecError on bad annotations."""


def _each(sources: objects.GangSource | Sequence[objects.GangSource] | None) -> Sequence[objects.GangSource]:
    if sources is None:
        return ()
    return (sources,) if isinstance(sources, objects.GangSource) else sources


def is_gang(annotations: Any, **_: Any) -> bool:
    """Kopf's filter: the owner carries a gang annotation (any kind of owner)."""
    return any(k in (annotations or {}) for k in keys.INTENT_ANNOTATIONS)


async def on_event(type: str | None, body: Any, memo: kopf.Memo, logger: Any, source_of: SourceOf) -> None:
    """One gang owner's event, of whatever kind: bad annotations are told on the owner, good ones reconciled."""
    if not memo.elector.leading:
        return  # a standby: the leader reconciles, and resyncs every owner when this replica takes over
    if type == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        return  # ownerReferences hand the Workload and PodGroup to the garbage collector
    owner = dict(body)
    try:
        sources = _each(source_of(owner))
    except GangSpecError as exc:
        await memo.owners.event(owner, type_="Warning", reason=keys.INVALID_GANG_SPEC, message=str(exc))
        return
    podgroups = memo.view.podgroups
    for source in sources:
        cached = podgroups.get(source.namespace, source.pod_group_name) if podgroups.synced.is_set() else MISSING
        await reconcile(memo.owners, source, logger, cached)


async def resync_all(kube: Kube, path: str, source_of: SourceOf, logger: Any) -> int:
    """Reconcile every gang owner listed at `path` once, as a new leader: events that arrived while this replica
    stood by were dropped."""
    done = 0
    async for page in kube.pages(path):
        for owner in page.get("items") or []:
            meta = owner["metadata"]
            if not is_gang(meta.get("annotations")) or meta.get("deletionTimestamp"):
                continue
            try:
                sources = _each(source_of(owner))
                for source in sources:
                    await reconcile(kube, source, logger)
                done += 1 if sources else 0
            except (GangSpecError, ApiError) as exc:
                logger.warning(f"resync of {owner.get('kind', 'owner')} {meta['namespace']}/{meta['name']}: {exc}")
    return done


MISSING: Any = object()
"""No cache to read (`reconcile` from a resync, or the PodGroups' informer not synced yet): every object is read."""


def at_min_count(source: objects.GangSource, cached: dict[str, Any] | None) -> bool:
    """The owner's PodGroup, as the informer has it, is at the owner's minCount: so is its Workload, brought to it
    first, and neither needs a read. An owner of roles takes the whole path (a composite and its children are
    several objects), and so does a PodGroup being deleted."""
    if not isinstance(cached, dict) or source.roles or cached["metadata"].get("deletionTimestamp"):
        return False
    return objects.min_count_patch(source, cached, workload_kind=False) is None


async def reconcile(kube: Kube, source: objects.GangSource, logger: Any, cached: dict[str, Any] | None = MISSING) -> None:
    """Ensure the Workload, then the PodGroup (which names it as owner), or for an owner of roles the CompositePodGroup
    and its children, then their minCount and status.

    For any kind of gang owner: the Job's events call it, and so do the JobSet's. `cached`: the PodGroup as the
    informer has it; None (not there) lets a new owner's objects be created without reading them first, the
    answer to a create of one that exists being that object (`Kube.create_custom`). The Events go out beside the
    next write: the objects appear after as few round trips as can be (at a burst of 1,000 Jobs on a loaded API
    server, each round trip took seconds, and no gang can be planned before its PodGroup exists).
    """
    job_ref = source.reference()
    if at_min_count(source, cached):
        if conditions.find(cached, keys.GATED) is not None:
            # most of an owner's events (its members created, started, ready, finished) need no read: PodsGated is
            # judged on the informer's copy, and written only while the PodGroup is at that copy's version. The
            # release's lift is the PodGroups' watch's to write (`gating.Lifted`), here it would race that one
            current = _gating(source, cached)
            if current is None or current["reason"] == keys.GATES_LIFTED:
                return
            try:
                await _report_gating(kube, job_ref, source, cached, logger, conditional=True)
                return
            except (Conflict, NotFound):
                pass  # the copy was behind: read afresh
        # a copy without PodsGated is most often behind this controller's own write of it, just made: read afresh
        group = await kube.get(custom_path("podgroups", source.namespace, source.pod_group_name))
        if group is not None and group["metadata"]["uid"] == cached["metadata"]["uid"]:
            await _report_gating(kube, job_ref, source, group, logger)
            return
    fresh = cached is None and not source.roles
    made = await _ensure(kube, source, "workloads", source.workload_name, lambda: objects.workload(source).wire(), logger, fresh)
    if made is None:
        return
    workload, created = made
    told = None
    if created:
        told = kube.event(job_ref, type_="Normal", reason=keys.WORKLOAD_CREATED, message=f"Created Workload {source.workload_name}")
    elif patch := objects.min_count_patch(source, workload, workload_kind=True):
        await kube.merge_patch(custom_path("workloads", source.namespace, source.workload_name), patch)
    ensured = (_composite if source.roles else _pod_group)(kube, source, workload["metadata"]["uid"], logger, owner_checked=created)
    group = (await asyncio.gather(ensured, told))[0] if told is not None else await ensured
    if group is not None:
        await _report_gating(kube, job_ref, source, group, logger)


async def _ensure(
    kube: Kube,
    source: objects.GangSource,
    plural: str,
    name: str,
    make: Callable[[], dict[str, Any]],
    logger: Any,
    fresh: bool = False,
    owner_checked: bool = False,
) -> tuple[dict[str, Any], bool] | None:
    """One of the owner's objects as it is, or made now (the flag says so); None when the owner went before it was
    made (`_owner_live`). `fresh`: the cache says it is not there, so it is created without a read first;
    `owner_checked`: this reconcile has just read the owner live."""
    if not fresh:
        found = await kube.get(custom_path(plural, source.namespace, name))
        if found is not None:
            return found, False
    if not owner_checked and not await _owner_live(kube, source, logger):
        return None
    return await kube.create_custom(plural, source.namespace, make())


async def _pod_group(
    kube: Kube, source: objects.GangSource, workload_uid: str, logger: Any, owner_checked: bool = False
) -> dict[str, Any] | None:
    """The owner's PodGroup, made or brought to its minCount; None when the owner went before it was made. Its
    Workload made by this reconcile: the PodGroup is not there either (made after it), and the owner was just read."""
    job_ref = source.reference()
    made = await _ensure(
        kube,
        source,
        "podgroups",
        source.pod_group_name,
        lambda: objects.pod_group(source, workload_uid).wire(),
        logger,
        fresh=owner_checked,
        owner_checked=owner_checked,
    )
    if made is None:
        return None
    pod_group, created = made
    if created:
        await kube.event(
            job_ref,
            type_="Normal",
            reason=keys.POD_GROUP_CREATED,
            message=f"Created PodGroup {source.pod_group_name} ({_policy_text(source)})",
        )
    elif patch := objects.min_count_patch(source, pod_group, workload_kind=False):
        pod_group = await kube.merge_patch(custom_path("podgroups", source.namespace, source.pod_group_name), patch)
        await kube.event(
            job_ref, type_="Normal", reason=keys.MIN_COUNT_UPDATED, message=f"minCount of {source.pod_group_name} is now {source.min_count}"
        )
    return pod_group


async def _composite(
    kube: Kube, source: objects.GangSource, workload_uid: str, logger: Any, owner_checked: bool = False
) -> dict[str, Any] | None:
    """An owner of roles: a child PodGroup per role, each made or brought to its minimum, then their CompositePodGroup.
    Children first: a role Phalanx made is no group until its composite exists (`composites.groups`), and a composite
    met before its children would be judged short of roles not made yet (said in its status, for nothing)."""
    job_ref = source.reference()
    for role, minimum in source.roles:
        name = source.role_pod_group_name(role)
        child = await _ensure(
            kube, source, "podgroups", name, lambda r=role, m=minimum: objects.role_pod_group(source, r, m, workload_uid).wire(), logger
        )
        if child is None:
            return None
        if not child[1] and (patch := objects.role_patch(role, minimum, child[0])):
            await kube.merge_patch(custom_path("podgroups", source.namespace, name), patch)
            await kube.event(
                job_ref, type_="Normal", reason=keys.MIN_COUNT_UPDATED, message=f"minCount of role {role} ({name}) is now {minimum}"
            )
    made = await _ensure(
        kube, source, "compositepodgroups", source.pod_group_name, lambda: objects.composite(source, workload_uid).wire(), logger
    )
    if made is None:
        return None
    group, created = made
    if created:
        message = f"Created CompositePodGroup {source.pod_group_name} ({_policy_text(source)})"
        await kube.event(job_ref, type_="Normal", reason=keys.POD_GROUP_CREATED, message=message)
    return group


async def _owner_live(kube: Kube, source: objects.GangSource, logger: Any) -> bool:
    """Before a Workload or PodGroup is made: the owner, read fresh, is the same object (uid) and not being deleted.

    Kopf's events can be minutes old when the operator is busy (a 2,048-rank Job's status updates): one read before
    its owner was deleted, answered after, made them again for the garbage collector to take again, over and over,
    and the loop met a PodGroup of pods being deleted."""
    group = "api/v1" if "/" not in source.api_version else f"apis/{source.api_version}"
    owner = await kube.get(f"/{group}/namespaces/{source.namespace}/{source.kind.lower()}s/{source.name}")
    if owner is not None and owner["metadata"].get("uid") == source.uid and not owner["metadata"].get("deletionTimestamp"):
        return True
    logger.info(f"{source.kind} {source.namespace}/{source.name} is gone or going: no Workload or PodGroup made for it")
    return False


async def _report_gating(
    kube: Kube, job_ref: dict[str, Any], source: objects.GangSource, pod_group: dict[str, Any], logger: Any, conditional: bool = False
) -> None:
    """The PodsGated condition is this controller's; PodGroupInitiallyScheduled belongs to the release loop.
    `conditional`: written only while the PodGroup is at `pod_group`'s version (else Conflict; NotFound raised too)."""
    current = _gating(source, pod_group)
    if current is None:
        return
    kind = keys.COMPOSITE_KIND if source.roles else "PodGroup"
    try:
        version = pod_group["metadata"]["resourceVersion"] if conditional else None
        await gating.write(kube, kind, (source.namespace, source.pod_group_name), current, version)
    except NotFound:
        if conditional:
            raise
        # the owner was deleted after the event this reconcile answers: the garbage collector took the PodGroup
        # (and takes any this reconcile made again, whose owner is gone); nothing is left to report on
        logger.info(f"PodGroup {source.namespace}/{source.pod_group_name} went before its PodsGated condition was written")
        return
    if not source.gated:
        logger.warning(f"gang {source.kind} {source.namespace}/{source.name} was admitted without its scheduling gate")
        await kube.event(
            job_ref,
            type_="Warning",
            reason=keys.GANG_NOT_ENFORCED,
            message=gating.NOT_GATED_MESSAGE.format(kind=source.kind, gate=keys.SCHEDULING_GATE),
        )


def _gating(source: objects.GangSource, pod_group: dict[str, Any]) -> dict[str, Any] | None:
    return gating.update(source.gated, pod_group, source.kind)


def _policy_text(source: objects.GangSource) -> str:
    if source.roles:
        roles = ", ".join(f"{role} minCount {minimum}" for role, minimum in source.roles)
        return f"gang of roles {roles}, disruptionMode {source.intent.disruption_mode or 'all'}"
    if source.intent.policy == "gang":
        return f"gang, minCount {source.min_count}, disruptionMode {source.intent.disruption_mode or 'all'}"
    return "basic"
