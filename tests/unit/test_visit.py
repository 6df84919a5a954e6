"""One group's visit (`scheduling.visit`), without a cluster: what every visit writes first, and that the action of
its phase gets the PodGroup as that write left it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import apiobjects as api
from phalanx.kinds import KINDS
from phalanx.kube.informers import Informer
from phalanx.scheduling import hints, memory, phase, status
from phalanx.scheduling.cycle import Cycle
from phalanx.scheduling.membership import Membership
from phalanx.scheduling.visit import Visit, Visits


class _Kube:
    """The API server's answers to the status writes: the object as written, at a new resourceVersion."""

    def __init__(self) -> None:
        self.patched: list[tuple[str, dict[str, Any]]] = []

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patched.append((path, patch))
        written = api.pod_group("train")
        written["metadata"]["resourceVersion"] = "2"
        written["status"].update(patch["status"])
        return written

    async def event(self, *args: Any, **kwargs: Any) -> None:
        pass


def _visits(kube: _Kube) -> tuple[Visits, list[Visit]]:
    stores = {
        s: Informer(s, None, f"/{s}", None, lambda: None, keep=lambda obj: obj)
        for s in ("podgroups", "composites", "pods", "claims", "priorities", "nodes")
    }  # type: ignore[arg-type]
    view = SimpleNamespace(**stores, finished=set())
    remembered = memory.Memory()
    members = Membership(stores["pods"], KINDS)
    visits = Visits(
        kube,  # type: ignore[arg-type]
        view,  # type: ignore[arg-type]
        KINDS,
        Cycle(),
        memory=remembered,
        status=status.Status(kube, remembered, KINDS),  # type: ignore[arg-type]
        cache=None,  # type: ignore[arg-type]
        members=members,
        hints=hints.Hints(view, hints.member_keys(KINDS)),  # type: ignore[arg-type]
        deadlines=None,  # type: ignore[arg-type]
        tear_down=None,  # type: ignore[arg-type]
        attempts=None,  # type: ignore[arg-type]
        releaser=None,  # type: ignore[arg-type]
    )
    seen: list[Visit] = []

    async def action(_: Visits, visit: Visit) -> bool:
        seen.append(visit)
        return True

    visits.ACTIONS = {p: action for p in phase.Phase}  # type: ignore[misc]
    return visits, seen


async def test_the_action_gets_the_pod_group_as_the_counts_write_left_it() -> None:
    """A gang's first visit writes its counts; its release's record is conditional on the PodGroup's version, so the
    action must start from the version that write made, not the watch's copy from before it (a conflict, a read and a
    retry on every release of a burst)."""
    kube = _Kube()
    visits, seen = _visits(kube)
    group = api.pod_group("train")
    group["metadata"]["resourceVersion"] = "1"
    visits.members.refresh([group])
    pods = [api.pod(f"train-{i}", gated=True) for i in range(2)]
    assert await visits(group, pods)
    assert [patch["status"] for _, patch in kube.patched] == [{"members": 2, "bound": 0, "lateMembers": 0}]
    assert seen[0].pod_group["metadata"]["resourceVersion"] == "2", "the action starts from the written version"

    assert await visits(seen[0].pod_group, pods)
    assert len(kube.patched) == 1 and seen[1].pod_group is seen[0].pod_group, "counts unchanged: nothing written, the group as read"
