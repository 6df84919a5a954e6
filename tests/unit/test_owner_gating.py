"""PodsGated, the owners' condition: an owner's event judges it on the informer's copy of its PodGroup and writes it
only while the PodGroup is at that copy's version (`owners.controller.reconcile`); the PodGroups' watch lifts it
once it shows the gang released (`owners.gating.Lifted`)."""

from __future__ import annotations

import asyncio
import copy
import logging
from types import SimpleNamespace
from typing import Any

from phalanx.api import keys
from phalanx.jobs import objects
from phalanx.kube.client import ApiError, Conflict, custom_path
from phalanx.kube.informers import Informer
from phalanx.owners import controller, gating
from phalanx.owners import objects as made
from phalanx.scheduling import conditions


def gang_job(min_count: str = "4") -> dict[str, Any]:
    annotations = {keys.POLICY: "gang", keys.MIN_COUNT: min_count, keys.DISRUPTION_MODE: "all"}
    template = {"spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}]}}
    return {
        "metadata": {"name": "train", "namespace": "ml", "uid": "u-1", "annotations": annotations},
        "spec": {"parallelism": 4, "completions": 4, "template": template},
    }


def pod_group(*, scheduled: bool, gated_written: bool) -> dict[str, Any]:
    """The Job's PodGroup as the loop and the controller left it: scheduled (or waiting), with PodsGated as the
    controller wrote it then (`gated_written`: still True from before the release)."""
    source = objects.from_job(gang_job())
    assert source is not None
    group = made.pod_group(source, "w-1").wire()
    group["metadata"] |= {"uid": "pg-1", "generation": 1, "resourceVersion": "7"}
    written = [conditions.condition(keys.INITIALLY_SCHEDULED, scheduled, "Scheduled" if scheduled else "Pending", "-", 1)]
    group["status"] = {"conditions": written}
    before_release = {**group, "status": {}}
    gated = gating.gating_condition(True, before_release if gated_written else group)
    group["status"]["conditions"].append(gated)
    return group


def source(min_count: str = "4") -> made.GangSource:
    found = objects.from_job(gang_job(min_count))
    assert found is not None
    return found


class _Kube:
    """The API server as the owners' controller sees it: the PodGroup `fresh` answers a read, a conditional write at
    any other version than `fresh`'s is a Conflict, and every call is kept."""

    def __init__(self, fresh: dict[str, Any] | None, refuse: Exception | None = None) -> None:
        self.fresh = fresh
        self.refuse = refuse
        self.calls: list[str] = []

    async def get(self, path: str) -> dict[str, Any] | None:
        self.calls.append(f"GET {path}")
        return self.fresh if "/podgroups/" in path else None

    async def apply_status(
        self, kind: str, namespace: str, name: str, status: dict[str, Any], manager: str, *, resource_version: str | None = None
    ) -> dict[str, Any]:
        assert manager == keys.JOB_CONTROLLER
        self.calls.append(f"APPLY {kind} {namespace}/{name} {[c['reason'] for c in status['conditions']]} at {resource_version}")
        if self.refuse is not None:
            raise self.refuse
        if resource_version is not None and resource_version != (self.fresh or {}).get("metadata", {}).get("resourceVersion"):
            raise Conflict(409, "Conflict", "the object has been modified")
        return {}

    async def event(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append("EVENT")


def _reconcile(kube: _Kube, cached: dict[str, Any], min_count: str = "4") -> list[str]:
    asyncio.run(controller.reconcile(kube, source(min_count), logging.getLogger("test"), cached))  # type: ignore[arg-type]
    return kube.calls


NAME = source().pod_group_name


def test_an_owner_event_with_nothing_to_write_on_its_cached_pod_group_sends_no_request() -> None:
    """A scheduled gang's PodGroup says PodsGated False, a waiting one's says True: most of a Job's events (members
    created, started, ready, finished) read and write nothing. Nor does one whose copy shows the release with
    PodsGated still True: that lift is the PodGroups' watch's to write (`gating.Lifted`), which this would race."""
    for scheduled, gated_written in ((True, False), (False, True), (True, True)):
        group = pod_group(scheduled=scheduled, gated_written=gated_written)
        assert _reconcile(_Kube(fresh=group), group) == []


def test_pods_gated_is_written_on_the_cached_copy_conditional_on_its_version() -> None:
    """A gang torn down and admitted again: its copy says PodsGated False from its last release, and the gang waits
    again. One write, conditional on the copy's version, and no read (a PodGroup read afresh on every event of a
    waiting gang was 3 reads a gang in a 5,000-node burst)."""
    readmitted = pod_group(scheduled=False, gated_written=True)
    lifted = pod_group(scheduled=True, gated_written=False)
    readmitted["status"]["conditions"] = [
        c if c["type"] != keys.GATED else conditions.find(lifted, keys.GATED) for c in readmitted["status"]["conditions"]
    ]
    assert _reconcile(_Kube(fresh=readmitted), readmitted) == [f"APPLY PodGroup ml/{NAME} ['Gated'] at 7"]

    behind = copy.deepcopy(readmitted)
    fresh = pod_group(scheduled=False, gated_written=True)
    fresh["metadata"]["resourceVersion"] = "9"
    calls = _reconcile(_Kube(fresh=fresh), behind)
    assert calls == [f"APPLY PodGroup ml/{NAME} ['Gated'] at 7", f"GET {custom_path('podgroups', 'ml', NAME)}"], (
        "the server had it gated already: the write lost, the PodGroup was read, and nothing is left to write"
    )


def test_a_cached_copy_without_pods_gated_is_read_afresh_and_writes_nothing_stale() -> None:
    """The copy shows the gang waiting, PodsGated not yet written (most often, this controller has just written
    it and the watch has not shown it yet); the server has moved on (released, PodsGated lifted): the PodGroup is
    read, PodsGated follows that read, which has nothing to write: a stale copy never writes True over the lift."""
    behind = pod_group(scheduled=False, gated_written=True)
    behind["status"]["conditions"] = [c for c in behind["status"]["conditions"] if c["type"] != keys.GATED]
    fresh = pod_group(scheduled=True, gated_written=False)
    fresh["metadata"]["resourceVersion"] = "9"
    assert _reconcile(_Kube(fresh=fresh), behind) == [f"GET {custom_path('podgroups', 'ml', NAME)}"]


def test_a_new_min_count_takes_the_whole_path_workload_first() -> None:
    waiting = pod_group(scheduled=False, gated_written=True)
    calls = _reconcile(_Kube(fresh=waiting), waiting, min_count="3")
    assert calls[0].startswith("GET ") and "/workloads/" in calls[0], "a new minCount: the Workload first"


def _lifted() -> tuple[gating.Lifted, Informer]:
    """A `Lifted` on a real view's informers, fed watch events by hand (nothing is listed or watched)."""
    podgroups, composites = (Informer(name, None, "", None, lambda: None) for name in ("podgroups", "compositepodgroups"))  # type: ignore[arg-type]
    return gating.Lifted(SimpleNamespace(podgroups=podgroups, composites=composites)), podgroups  # type: ignore[arg-type]


async def _run(lifted: gating.Lifted, kube: _Kube, calls: int = 1) -> None:
    """The leader's `run` until it made `calls` calls and has nothing marked, or for a second."""
    task = asyncio.create_task(lifted.run(kube))  # type: ignore[arg-type]
    for _ in range(100):
        await asyncio.sleep(0.01)
        if len(kube.calls) >= calls and not lifted.marked:
            break
    task.cancel()


async def test_the_pod_groups_watch_lifts_pods_gated_once_it_shows_the_release() -> None:
    """Waiting: nothing marked. The watch shows it released with PodsGated True: marked, and the leader writes
    GatesLifted conditional on that version. Lifted: nothing marked."""
    lifted, podgroups = _lifted()
    podgroups.apply("ADDED", pod_group(scheduled=False, gated_written=True))
    assert lifted.marked == {}
    released = pod_group(scheduled=True, gated_written=True)
    podgroups.apply("MODIFIED", released)
    assert list(lifted.marked) == [("PodGroup", ("ml", NAME))]
    kube = _Kube(fresh=released)
    await _run(lifted, kube)
    assert kube.calls == [f"APPLY PodGroup ml/{NAME} ['GatesLifted'] at 7"] and lifted.marked == {}
    podgroups.apply("MODIFIED", pod_group(scheduled=True, gated_written=False))
    assert lifted.marked == {}


async def test_a_lift_that_loses_to_a_newer_version_waits_for_it_and_a_failed_one_is_tried_again() -> None:
    lifted, podgroups = _lifted()
    released = pod_group(scheduled=True, gated_written=True)
    podgroups.apply("ADDED", released)
    newer = copy.deepcopy(released)
    newer["metadata"]["resourceVersion"] = "8"
    kube = _Kube(fresh=newer)
    await _run(lifted, kube)
    assert kube.calls == [f"APPLY PodGroup ml/{NAME} ['GatesLifted'] at 7"] and lifted.marked == {}, "left to the watch"
    podgroups.apply("MODIFIED", newer)
    assert list(lifted.marked) == [("PodGroup", ("ml", NAME))], "the newer version, still due, is marked again"

    kube = _Kube(fresh=newer, refuse=ApiError(500, "InternalError", "etcd leader changed"))
    gating.RETRY_AFTER, before = 0.001, gating.RETRY_AFTER
    try:
        await _run(lifted, kube, calls=3)
    finally:
        gating.RETRY_AFTER = before
    assert len(kube.calls) > 1 and set(kube.calls) == {f"APPLY PodGroup ml/{NAME} ['GatesLifted'] at 8"}, "tried again"
