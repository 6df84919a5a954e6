"""One group's visit (`scheduling.visit`), without a cluster: its counts go with the condition its action writes, or
after the action when it writes none; and which visits' writes go beside the walk."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

import apiobjects as api
from phalanx.api import keys
from phalanx.kinds import KINDS
from phalanx.kube.informers import Informer
from phalanx.scheduling import hints, memory, phase, status
from phalanx.scheduling.background import Background
from phalanx.scheduling.cycle import Cycle
from phalanx.scheduling.membership import Membership
from phalanx.scheduling.visit import Visit, Visits


class _Kube:
    """The API server's answers to the status writes: the object as written, at a new resourceVersion."""

    def __init__(self) -> None:
        self.patched: list[tuple[str, dict[str, Any]]] = []
        self.answer = asyncio.Event()
        """Set: the API server answers; clear: each write waits for it (a saturated API server)."""
        self.answer.set()

    async def apply_status(self, kind: str, namespace: str, name: str, status: dict[str, Any], manager: str) -> dict[str, Any]:
        self.patched.append((f"{kind} {namespace}/{name} {manager}", {"status": status}))
        await self.answer.wait()
        written = api.pod_group("train")
        written["metadata"]["resourceVersion"] = "2"
        written["status"].update(status)
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
        background=Background(lambda: True),
    )
    seen: list[Visit] = []

    async def action(_: Visits, visit: Visit) -> bool:
        seen.append(visit)
        return True

    visits.ACTIONS = {p: action for p in phase.Phase}  # type: ignore[misc]
    return visits, seen


async def test_a_visit_s_counts_are_written_after_its_action_when_it_wrote_no_condition() -> None:
    """A gang's first visit once the loop may write (`status.QUIET_FOR` after it met the group) writes its counts after
    its action, in the one apply of the loop's status; the action got the group as read (no write before it, so a
    release's conditional record starts from the watch's version); a second visit with the same counts writes
    nothing."""
    kube = _Kube()
    visits, seen = _visits(kube)
    group = api.pod_group("train")
    group["metadata"]["resourceVersion"] = "1"
    visits.members.refresh([group])
    pods = [api.pod(f"train-{i}", gated=True, claims=()) for i in range(2)]
    assert await visits(group, pods)
    assert seen[0].stands is phase.Phase.PLANNABLE and seen[0].pod_group is group
    remembered = visits.memory.of(group["metadata"]["uid"])
    assert kube.patched == [] and remembered.counts_due, "a group met just now: its counts wait for the quiet time, due"
    remembered.met_at -= status.QUIET_FOR
    assert await visits(group, pods)
    assert kube.patched == [
        ("PodGroup ml/train phalanx-release-loop", {"status": {"conditions": [], "members": 2, "bound": 0, "lateMembers": 0}})
    ]
    assert await visits(group, pods)
    assert len(kube.patched) == 1, "counts unchanged (the watch not showing them yet): nothing written"


async def test_a_visit_s_counts_go_with_the_condition_its_action_writes() -> None:
    """A release's visit writes its Released condition: its counts go in that apply, not in a write of their own (a
    burst of 1,000 gangs wrote each PodGroup's status 8 times); and that apply starts the interval before counts are
    written on their own (a gang binding reports its bound members in its Scheduled, not in a write per bind)."""
    kube = _Kube()
    visits, _ = _visits(kube)

    async def released(v: Visits, visit: Visit) -> bool:
        await v.status.scheduled(visit.pod_group, False, keys.RELEASED, "all 2 members placed")
        return True

    visits.ACTIONS = {**visits.ACTIONS, phase.Phase.PLANNABLE: released}  # type: ignore[misc]
    group = api.pod_group("train")
    visits.members.refresh([group])
    assert await visits(group, [api.pod(f"train-{i}", gated=True, claims=()) for i in range(2)])
    ((_, written),) = kube.patched
    assert [(c["type"], c["reason"]) for c in written["status"]["conditions"]] == [(keys.INITIALLY_SCHEDULED, keys.RELEASED)]
    assert {k: v for k, v in written["status"].items() if k != "conditions"} == {"members": 2, "bound": 0, "lateMembers": 0}
    remembered = visits.memory.of(group["metadata"]["uid"])
    binding = [api.pod("train-0", gated=True, claims=()), api.pod("train-1", node="n1", claims=())]
    remembered.met_at -= status.QUIET_FOR
    assert await visits(group, binding)
    await visits.background.drain()
    assert len(kube.patched) == 1 and remembered.counts_due, "a member bound just after: its count waits COUNTS_EVERY, due"
    remembered.counts_at -= status.COUNTS_EVERY
    assert await visits(group, binding)
    await visits.background.drain()
    assert kube.patched[-1][1]["status"]["bound"] == 1, "then written on its own"


async def test_a_gang_waiting_for_its_members_is_written_beside_the_walk_once() -> None:
    """A visit of a gang still waiting for its members decides nothing, so it does not hold the walk while its writes
    wait on a saturated API server (a burst of 1,000 gangs made the walk take minutes); a second visit while they are
    under way writes nothing again; and the visit that goes on to a decision waits for them first."""
    kube = _Kube()
    kube.answer.clear()
    visits, seen = _visits(kube)
    group = api.pod_group("train")
    group["metadata"]["resourceVersion"] = "1"
    visits.members.refresh([group])
    arriving = [api.pod("train-0", gated=True, claims=()), api.pod("train-1", gated=True)]  # the second's claim not made yet
    visits.memory.of(group["metadata"]["uid"]).met_at -= status.QUIET_FOR  # met long enough ago to be written
    assert await asyncio.wait_for(visits(group, arriving), 5), "the visit returns while its writes wait for an answer"
    await asyncio.sleep(0)
    assert len(kube.patched) == 1, "the counts write (after its action) started"
    assert visits.background.busy(group["metadata"]["uid"]), "and is still waiting for its answer: the visit did not wait"
    assert await visits(group, arriving)
    await asyncio.sleep(0)
    assert len(kube.patched) == 1, "a second visit while the first one's writes are under way writes nothing"

    ready = [api.pod(f"train-{i}", gated=True, claims=()) for i in range(2)]
    deciding = asyncio.create_task(visits(group, ready))
    await asyncio.sleep(0.01)
    assert not deciding.done() and [v.stands for v in seen] == [phase.Phase.QUORUM], "the deciding visit waits for the writes under way"
    kube.answer.set()
    assert await deciding
    assert [v.stands for v in seen] == [phase.Phase.QUORUM, phase.Phase.PLANNABLE], "the waiting visit's action ran first"
    await visits.background.drain()


async def test_a_gang_waits_for_quorum_unsaid_for_the_quiet_time_and_the_loop_wakes_to_say_it() -> None:
    """Met just now and short of its quorum, a gang gets its claims protected and no write (a burst's gangs have
    their members within seconds, and their first write is their release); the loop is due back at the end of the
    quiet time, and a visit then says it waits, with its counts, in one apply."""
    kube = _Kube()
    visits, _ = _visits(kube)
    protected: list[list[str]] = []

    async def protect(ready: list[dict[str, Any]]) -> None:
        protected.append([p["metadata"]["name"] for p in ready])

    visits.releaser = SimpleNamespace(protect=protect)  # type: ignore[assignment]
    visits.deadlines = SimpleNamespace(backing_off=lambda _: asyncio.sleep(0, False))  # type: ignore[assignment]
    visits.attempts = SimpleNamespace(claims_ready=lambda pod: True)  # type: ignore[assignment]
    visits.ACTIONS = {**visits.ACTIONS, phase.Phase.QUORUM: Visits.ACTIONS[phase.Phase.QUORUM]}  # type: ignore[misc]
    group = api.pod_group("train")
    visits.members.refresh([group])
    arriving = [api.pod("train-0", gated=True, claims=())]  # one of minCount 2
    remembered = visits.memory.of(group["metadata"]["uid"])
    assert await visits(group, arriving)
    await visits.background.drain()
    assert kube.patched == [] and protected == [["train-0"]], "its claims protected, nothing written"
    assert remembered.due == remembered.met_at + status.QUIET_FOR, "the loop is due back once it may say so"
    remembered.met_at -= status.QUIET_FOR
    remembered.due = None  # as the cycle clears a deadline passed
    assert await visits(group, arriving)
    await visits.background.drain()
    ((_, written),) = kube.patched
    (waiting,) = written["status"]["conditions"]
    assert (waiting["type"], waiting["status"], waiting["reason"]) == (keys.INITIALLY_SCHEDULED, "False", keys.PENDING)
    assert waiting["message"].startswith("waiting for quorum: minCount 2") and written["status"]["members"] == 1


async def test_a_released_gang_bound_whole_is_marked_scheduled_beside_the_walk() -> None:
    """The visit of a released gang whose quorum kube-scheduler has just bound only reports it (its counts, then
    Scheduled): the walk does not wait for those writes; a gang released but not yet bound is visited in the walk."""
    kube = _Kube()
    kube.answer.clear()
    visits, seen = _visits(kube)
    visits.cache = SimpleNamespace(node_names=lambda: {"n1"})  # type: ignore[assignment]

    async def reported(_: Visits, visit: Visit) -> bool:
        await kube.answer.wait()  # its Scheduled condition, written on an API server that answers when told
        seen.append(visit)
        return True

    visits.ACTIONS = {**visits.ACTIONS, phase.Phase.AWAITING_BIND: reported}  # type: ignore[misc]
    placements = [{"name": f"train-{i}", "uid": f"train-{i}-uid", "node": "n1"} for i in range(2)]
    group = api.pod_group("train", reservation="Released", placements=placements)
    group["metadata"]["resourceVersion"] = "1"
    released = [api.pod(f"train-{i}", claims=()) for i in range(2)]  # gates lifted, not bound yet
    for pod in released:
        visits.view.pods.apply("ADDED", pod)
    visits.members.refresh([group])
    walked = asyncio.create_task(visits(group, released))
    await asyncio.sleep(0.01)
    assert not walked.done() and not visits.background.busy(group["metadata"]["uid"]), "not bound yet: visited in the walk"
    kube.answer.set()
    assert await walked
    assert [v.stands for v in seen] == [phase.Phase.AWAITING_BIND]

    kube.answer.clear()
    bound = [api.pod(f"train-{i}", node="n1", claims=()) for i in range(2)]
    for pod in bound:
        visits.view.pods.apply("MODIFIED", pod)
    visits.members.refresh([group])
    assert await asyncio.wait_for(visits(group, bound), 5), "the visit returns while its writes wait for an answer"
    await asyncio.sleep(0)
    assert visits.background.busy(group["metadata"]["uid"]), "its writes are under way beside the walk"
    assert len(seen) == 1, "its Scheduled write waits for an answer"
    kube.answer.set()
    await visits.background.drain()
    assert [v.stands for v in seen] == [phase.Phase.AWAITING_BIND, phase.Phase.AWAITING_BIND]
    assert len(seen[1].bound) == 2
