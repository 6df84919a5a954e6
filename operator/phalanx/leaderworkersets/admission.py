"""LeaderWorkerSet admission, as pure functions: each replica (its leader and its workers) one gang.

The LWS carries the gang intent in the same annotations as a Job, and each of
its replicas gets a group of its own, sized by `spec.leaderWorkerTemplate.size`
(the leader and its workers). LWS's controller makes its pods through
StatefulSets (the leader StatefulSet, owned by the LWS; each replica's worker
StatefulSet, owned by that replica's leader pod), so the gate is put on each pod
as it is created, not on a template: the pod webhook reads the pod's LWS (named
by the label LWS's controller sets) and gates the pod when the LWS asks for a
gang. A pod of an LWS that asks for none is left alone.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import FieldError, GangIntent, GangSpecError, Mode, from_annotations
from phalanx.owners import admission as owner_admission
from phalanx.owners.admission import Mutation

JSON = dict[str, Any]
API_VERSION = "leaderworkerset.x-k8s.io/v1"
KIND = "LeaderWorkerSet"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
"""Set by LWS's controller on every pod of the LWS (its StatefulSets' templates carry it)."""
GROUP_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/group-index"
"""The replica a pod belongs to (its leader's ordinal); Phalanx sets it on each replica's PodGroup too."""
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
"""0 for the leader, 1..size-1 for its workers."""


def size(lws: JSON) -> int:
    """The pods of one replica: its leader and its workers (LWS's default is 1)."""
    return int(((lws.get("spec") or {}).get("leaderWorkerTemplate") or {}).get("size") or 1)


def replicas(lws: JSON) -> int:
    """LWS's default is 1; 0 is allowed (scaled to nothing)."""
    value = (lws.get("spec") or {}).get("replicas")
    return 1 if value is None else int(value)


def surge(lws: JSON) -> int:
    """The replicas a rolling update may add above `replicas` (`rollingUpdateConfiguration.maxSurge`: a number, or a
    percentage of the replicas rounded up; never more than the replicas, as LWS's controller caps it)."""
    config = (((lws.get("spec") or {}).get("rolloutStrategy") or {}).get("rollingUpdateConfiguration")) or {}
    value, count = config.get("maxSurge") or 0, replicas(lws)
    if isinstance(value, str) and value.endswith("%"):
        value = -(-count * int(value[:-1]) // 100)
    return min(int(value), count)


def groups(lws: JSON) -> int:
    """The replicas that may run at once, each a group of its own: `replicas`, and those a rolling update surges."""
    return replicas(lws) + surge(lws)


def _templates(lws: JSON) -> list[tuple[str, JSON]]:
    """The pod templates, each with its path: the leader's (optional: the worker's is used when absent) and the workers'."""
    lwt = (lws.get("spec") or {}).get("leaderWorkerTemplate") or {}
    found = [(f"spec.leaderWorkerTemplate.{name}", lwt[name]) for name in ("leaderTemplate", "workerTemplate") if lwt.get(name)]
    return found


def priority_class_name(lws: JSON) -> str | None:
    names = {(t.get("spec") or {}).get("priorityClassName") for _, t in _templates(lws)}
    return next(iter(names)) if len(names) == 1 else None


def mutate_lws(lws: JSON, old: JSON | None, *, gang_default_mode: Mode) -> Mutation:
    """Normalise the intent into annotations (the disruption mode defaulted on create, kept on update)."""
    intent = from_annotations((lws.get("metadata") or {}).get("annotations"))
    if intent is None:
        _refuse_unknown_keys(lws, old)
        return Mutation()
    previous = from_annotations(((old or {}).get("metadata") or {}).get("annotations"))
    if old is None:
        intent = intent.with_default_mode(gang_default_mode)
    elif previous is not None and intent.disruption_mode is None:
        intent = replace(intent, disruption_mode=previous.disruption_mode)
    _check(lws, old, previous, intent)
    return Mutation(patch={"metadata": {"annotations": intent.to_annotations()}})


def validate_lws(lws: JSON, old: JSON | None) -> None:
    """Raise GangSpecError when the LWS's gang intent breaks a rule."""
    intent = from_annotations((lws.get("metadata") or {}).get("annotations"))
    previous = from_annotations(((old or {}).get("metadata") or {}).get("annotations")) if old is not None else None
    if intent is not None or previous is not None:
        _check(lws, old, previous, intent)
    else:
        _refuse_unknown_keys(lws, old)


def gang_intent(lws: JSON | None) -> GangIntent | None:
    """The LWS's intent, None when it asks for no gang (or is gone)."""
    if lws is None or (lws.get("metadata") or {}).get("deletionTimestamp"):
        return None
    try:
        return from_annotations((lws.get("metadata") or {}).get("annotations"))
    except GangSpecError:
        return None


def mutate_pod(pod: JSON, lws: JSON | None) -> Mutation:
    """Gate a pod of a gang LWS (`lws` as the API server has it now); any other pod is left as it is."""
    if gang_intent(lws) is None:
        return Mutation()
    gates = list((pod.get("spec") or {}).get("schedulingGates") or [])
    if any(g.get("name") == keys.SCHEDULING_GATE for g in gates):
        return Mutation()
    return Mutation(patch={"spec": {"schedulingGates": [*gates, {"name": keys.SCHEDULING_GATE}]}})


def _refuse_unknown_keys(lws: JSON, old: JSON | None) -> None:
    errors = owner_admission.unknown_key_errors(lws, old)
    if errors:
        raise GangSpecError(errors)


def _check(lws: JSON, old: JSON | None, previous: GangIntent | None, intent: GangIntent | None) -> None:
    errors = owner_admission.owner_errors(lws, old, previous, intent, "LeaderWorkerSet")
    if errors is None:
        return
    for path, template in _templates(lws):
        if (two := owner_admission.two_groups({"template": template}, KIND, "template")) is not None:
            errors.append(replace(two, path=f"{path}.{two.path.removeprefix('template.')}"))
    one = owner_admission.one_priority(
        {(t.get("spec") or {}).get("priorityClassName") for _, t in _templates(lws)},
        "spec.leaderWorkerTemplate.*.spec.priorityClassName",
        "the leader's and the workers' templates",
        "give both templates the same priorityClassName",
    )
    errors += [one] if one else []
    startup = ((lws.get("spec") or {}).get("startupPolicy")) or "LeaderCreated"
    if startup == "LeaderReady" and intent.policy == "gang":
        errors.append(
            FieldError(
                "spec.startupPolicy",
                startup,
                "LWS's controller makes a replica's workers only once its leader is Ready, but a gang's leader is "
                "placed only once its workers exist: each replica would wait for ever",
                "use LeaderCreated (the default) or remove the startupPolicy",
            )
        )
    pods = size(lws)
    errors += owner_admission.sized_by_owner(
        intent,
        pods,
        f"the pods of one replica ({pods}: spec.leaderWorkerTemplate.size, the leader and its workers); each replica is a gang of its own",
        "raise spec.leaderWorkerTemplate.size",
    )
    if errors:
        raise GangSpecError(errors)
