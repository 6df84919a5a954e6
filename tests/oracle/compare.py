"""Phalanx's planner beside upstream's allocator on one world, like with like, and every disagreement classified.

Two comparisons:
- one pod, one node at a time: upstream's Allocate on that node, and the
  planner for a one-member group on a snapshot of that node alone;
- a whole group: the planner across all nodes at once, and upstream as the
  scheduler runs it, pod after pod, each taking the first allocation its
  node gives (every order of node choices is tried, never other devices on
  the same node).
Every plan the planner makes is handed to upstream's validation (its
allocator, narrowed to exactly the devices the plan names).

Classes: `agree: fits` and `agree: short`; `upstream-greedy-per-pod` (the planner fits a group that
upstream's one-pod-at-a-time allocation cannot, and upstream accepts the
planner's allocation: upstream's own limit); `upstream-aborts-pod` (upstream's
allocator errs on some node, which fails the pod's whole attempt: a selector
failing on a device, or a device an All request must take breaking a
constraint, on a node the planner's plan does not use for that pod; the
planner's allocation passes upstream's validation, and since Phalanx writes
it in the scheduler's place, kube-scheduler never runs the search that errs);
`unmodelled:<features>` (the world uses a field the planner does not model
yet); anything else is `unexplained` and fails the test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from upstream import Upstream
from worlds import World

from phalanx.planner import Fits, Short, plan
from phalanx.planner.model import Group
from phalanx.scheduling import accessors, inputs, record, snapshots

EXPLAINED = frozenset({"agree: fits", "agree: short", "upstream-greedy-per-pod", "upstream-aborts-pod"})


@dataclass(frozen=True)
class Verdict:
    kind: str
    """"pod-on-node" or "group"."""
    cls: str
    detail: str = ""

    @property
    def explained(self) -> bool:
        return self.cls in EXPLAINED or self.cls.startswith("unmodelled:")


def phalanx_plan(world: World, pods: list[int], nodes: list[dict[str, Any]]) -> Fits | Short:
    claims = list(world.held) + [c for _, cs in world.pods for c in cs]
    snapshot = snapshots.build(nodes, [], world.slices, claims, world.classes)
    members = tuple(inputs.member(world.pods[i][0], accessors.claim_names(world.pods[i][0]) or ()) for i in pods)
    return plan(snapshot, Group("ml", "g", len(members), members))


def wire(fits: Fits) -> dict[str, dict[str, Any]]:
    """claim name -> status.allocation exactly as the operator writes it."""
    return {c.name: record.allocation(c) for c in record.reservation_of(fits).claims}


def _results(allocation: dict[str, Any]) -> set[tuple[str, str, str, str]]:
    return {(r["request"], r["driver"], r["pool"], r["device"]) for r in allocation["devices"]["results"]}


def _allocated(claim: dict[str, Any], allocation: dict[str, Any]) -> dict[str, Any]:
    return {**claim, "status": {"allocation": allocation}}


def _aborts(answer: dict[str, Any]) -> bool:
    """An error that aborts the pod's scheduling attempt, not a node that does not fit."""
    return bool(answer.get("fatal"))


class Comparer:
    def __init__(self, upstream: Upstream, honoured: frozenset[str]) -> None:
        self.upstream = upstream
        self.honoured = honoured

    def _unmodelled(self, world: World) -> str | None:
        missing = sorted(world.used - self.honoured)
        return f"unmodelled:{','.join(missing)}" if missing else None

    def check_solution(self, world: World, fits: Fits) -> str | None:
        """Why upstream refuses the plan (each pod in placement order, on its node, after the pods before it); None if it accepts."""
        allocations = wire(fits)
        before: list[dict[str, Any]] = []
        by_name = {p["metadata"]["name"]: (p, cs) for p, cs in world.pods}
        for member, node in fits.placements:
            _, claims = by_name[member.name]
            results = [allocations[c["metadata"]["name"]] for c in claims]
            answer = self.upstream.validate(world.upstream(before), claims, node, results)
            if not answer["ok"]:
                return f"upstream refuses {member.name} on {node}: {answer.get('error')}; plan {results}"
            theirs = set().union(*(_results(a) for a in answer["allocations"]))
            ours = set().union(*(_results(a) for a in results))
            if theirs != ours:
                return f"{member.name} on {node}: upstream allocates {sorted(theirs)}, the plan {sorted(ours)}"
            before += [_allocated(c, a) for c, a in zip(claims, results, strict=True)]
        return None

    def pod_on_node(self, world: World, pod: int = 0) -> list[Verdict]:
        claims = world.pods[pod][1]
        answers = self.upstream.allocate(world.upstream(), claims)
        out = []
        for node in world.nodes:
            name = node["metadata"]["name"]
            theirs = answers[name]
            ours = phalanx_plan(world, [pod], [node])
            out.append(self._judge("pod-on-node", world, theirs["ok"], ours, aborted=_aborts(theirs), why=theirs.get("error", "")))
        return out

    def group(self, world: World) -> Verdict:
        pods = list(range(len(world.pods)))
        ours = phalanx_plan(world, pods, world.nodes)
        feasible, aborted = self._upstream_sequence(world, pods, [])
        return self._judge("group", world, feasible, ours, aborted=aborted, greedy=True)

    def _upstream_sequence(self, world: World, pods: list[int], before: list[dict[str, Any]]) -> tuple[bool, bool]:
        """Whether some choice of node per pod, in order, lets upstream allocate every pod; and whether an error aborted
        one (kube-scheduler filters every node of a small cluster, and an error on any node fails the pod's attempt)."""
        if not pods:
            return True, False
        claims = world.pods[pods[0]][1]
        answers = self.upstream.allocate(world.upstream(before), claims)
        if any(_aborts(answer) for answer in answers.values()):
            return False, True
        aborted = False
        for answer in answers.values():
            if answer["ok"]:
                placed = [_allocated(c, a) for c, a in zip(claims, answer["allocations"], strict=True)]
                feasible, deeper = self._upstream_sequence(world, pods[1:], before + placed)
                aborted |= deeper
                if feasible:
                    return True, aborted
        return False, aborted

    def _judge(
        self, kind: str, world: World, upstream_ok: bool, ours: Fits | Short, *, aborted: bool, greedy: bool = False, why: str = ""
    ) -> Verdict:
        fits = isinstance(ours, Fits)
        unmodelled = self._unmodelled(world)
        refused = self.check_solution(world, ours) if fits else None
        if refused is not None:
            return Verdict(kind, unmodelled or "invalid-solution", refused)
        if fits == upstream_ok:
            return Verdict(kind, "agree: fits" if fits else "agree: short")
        if unmodelled:
            return Verdict(kind, unmodelled, f"upstream {'fits' if upstream_ok else 'refuses'}; planner {_said(ours)}")
        if fits and aborted:
            return Verdict(kind, "upstream-aborts-pod", why)
        if fits and greedy:
            return Verdict(kind, "upstream-greedy-per-pod")
        return Verdict(kind, "unexplained", f"upstream {'fits' if upstream_ok else 'refuses: ' + why}; planner {_said(ours)}")


def _said(result: Fits | Short) -> str:
    return "fits" if isinstance(result, Fits) else f"short ({result.message})"
