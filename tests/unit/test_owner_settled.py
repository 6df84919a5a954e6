"""When a gang owner's event needs no read: its PodGroup, as the informer has it, is scheduled whole and says all
a reconcile would write (`owners.controller.settled`); and when it needs only one, of its PodGroup."""

from __future__ import annotations

import asyncio
import copy
import logging
from typing import Any

from phalanx.api import keys
from phalanx.jobs import objects
from phalanx.kube.client import custom_path
from phalanx.owners import controller
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
    group["metadata"] |= {"uid": "pg-1", "generation": 1}
    written = [conditions.condition(keys.INITIALLY_SCHEDULED, scheduled, "Scheduled" if scheduled else "Pending", "-", 1)]
    group["status"] = {"conditions": written}
    before_release = {**group, "status": {}}
    gating = controller.gating_condition(True, before_release if gated_written else group)
    group["status"]["conditions"].append(gating)
    return group


def source(min_count: str = "4") -> made.GangSource:
    found = objects.from_job(gang_job(min_count))
    assert found is not None
    return found


def test_a_scheduled_gang_whose_pod_group_says_it_all_is_settled() -> None:
    assert controller.settled(source(), pod_group(scheduled=True, gated_written=False))


def test_anything_left_to_write_or_unknown_is_not_settled() -> None:
    assert not controller.settled(source(), None), "not in the cache: its objects may have to be made"
    assert not controller.settled(source(), pod_group(scheduled=False, gated_written=True)), "a waiting gang's PodGroup is read fresh"
    assert not controller.settled(source(), pod_group(scheduled=True, gated_written=True)), "PodsGated is still to be lifted"
    assert not controller.settled(source("3"), pod_group(scheduled=True, gated_written=False)), "a new minCount is to be written"
    going = pod_group(scheduled=True, gated_written=False)
    going["metadata"]["deletionTimestamp"] = "2026-12-07T00:00:00Z"
    assert not controller.settled(source(), going)


class _Kube:
    """The API server as the owners' controller sees it: the PodGroup `fresh` answers a read, every call is kept."""

    def __init__(self, fresh: dict[str, Any] | None) -> None:
        self.fresh = fresh
        self.calls: list[str] = []

    async def get(self, path: str) -> dict[str, Any] | None:
        self.calls.append(f"GET {path}")
        return self.fresh if "/podgroups/" in path else None

    async def apply_status(self, kind: str, namespace: str, name: str, status: dict[str, Any], manager: str) -> dict[str, Any]:
        self.calls.append(f"APPLY {kind} {namespace}/{name} {[c['reason'] for c in status['conditions']]}")
        return {}

    async def event(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append("EVENT")


def test_a_waiting_gang_s_event_reads_its_pod_group_afresh_and_not_its_workload() -> None:
    """Its PodGroup, as the informer has it, at the owner's minCount: the Workload is too (brought to it first), so
    only the PodGroup is read, afresh, and PodsGated follows that read (a release the cache has not seen yet)."""
    waiting = pod_group(scheduled=False, gated_written=True)
    released = copy.deepcopy(waiting)
    released["status"]["conditions"][0] |= {"reason": keys.RELEASED}
    kube = _Kube(fresh=released)
    asyncio.run(controller.reconcile(kube, source(), logging.getLogger("test"), waiting))  # type: ignore[arg-type]
    name = source().pod_group_name
    assert kube.calls == [f"GET {custom_path('podgroups', 'ml', name)}", f"APPLY PodGroup ml/{name} ['GatesLifted']"]

    kube = _Kube(fresh=waiting)
    asyncio.run(controller.reconcile(kube, source("3"), logging.getLogger("test"), waiting))  # type: ignore[arg-type]
    assert kube.calls[0].startswith("GET ") and "/workloads/" in kube.calls[0], "a new minCount: the Workload first"
