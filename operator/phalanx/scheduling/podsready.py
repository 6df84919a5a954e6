"""The ready deadline: whether a released gang's members are all Ready, who is not and why, and the back-off after.

Kueue's `waitForPodsReady` is the reference: a released (admitted) group has
a deadline from its release to every member Ready; past it the group is torn
down as a unit and admitted again after a back-off that doubles from a base
to a cap, counted in a row until a release gets every member Ready. Once all
its members were Ready, a member that turns unready later is no business of
the deadline (a lost member is `disruption`'s). Pure: the loop passes the
pods, the record and the clock; `judge` and `backing_off` say what to do.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from phalanx.api import schema, times
from phalanx.scheduling import conditions


def ready(pod: Mapping[str, Any]) -> bool:
    """Ready (condition True), or done: a member that Succeeded has nothing left to get ready for."""
    if (pod.get("status") or {}).get("phase") == "Succeeded":
        return True
    return conditions.true(pod, "Ready")


def why_not(pod: Mapping[str, Any]) -> str:
    """A member's state in the kubelet's words: the first container not ready, its waiting or terminated reason
    (ErrImageNeverPull, CrashLoopBackOff, ...) with the message; or why no container status exists yet."""
    status = pod.get("status") or {}
    node = pod["spec"].get("nodeName")
    if not node:
        return "not bound to a node"
    init = status.get("initContainerStatuses") or []
    statuses = [*(("init container", c) for c in init), *(("container", c) for c in status.get("containerStatuses") or [])]
    for what, container in statuses:
        if container.get("ready"):
            continue
        state = container.get("state") or {}
        for kind in ("waiting", "terminated"):
            if kind in state:
                detail = state[kind] or {}
                reason = detail.get("reason") or kind
                message = f": {detail['message']}" if detail.get("message") else ""
                restarts = f" (restarted {container['restartCount']} times)" if container.get("restartCount") else ""
                return f"{what} {container.get('name')} {kind} {reason}{message}{restarts}"
        if "running" in state:
            # an init container is not ready until it exits 0 (a sidecar one: until it starts)
            return f"{what} {container.get('name')} running, " + (
                "not finished" if what == "init container" else "not ready (its readiness probe)"
            )
    if not statuses:
        return f"phase {status.get('phase') or 'Pending'} on {node}: no container started (the node has not run it)"
    return f"phase {status.get('phase')} on {node}: not Ready"


def first_not_ready(pods: Iterable[Mapping[str, Any]]) -> tuple[str, str] | None:
    """(name, why) of the first member, by name, that is not Ready; None when all are."""
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        if not ready(pod):
            return pod["metadata"]["name"], why_not(pod)
    return None


def backoff(attempts: int, base: float, cap: float) -> float:
    """Seconds before admitting again after the `attempts`-th timeout in a row: base x 2^(attempts-1), at most cap."""
    if attempts <= 0:
        return 0.0
    return min(cap, base * 2 ** min(attempts - 1, 62))


@dataclass(frozen=True)
class Deadline:
    """What the ready deadline says of a released group now, for the loop to carry out."""

    record: schema.Readiness | None = None
    """The group's readiness record to write (None: it stands)."""
    wake_in: float | None = None
    """Seconds until the deadline passes: look at the group again then."""
    counted: bool = False
    """This release's timeout is counted now (once per release)."""
    tear_down: str | None = None
    """Why the group is torn down as a unit now (None: it is not)."""


def judge(
    record: schema.Readiness,
    deadline: float,
    released_at: str | None,
    members: list[Mapping[str, Any]],
    min_count: int,
    *,
    done: int = 0,
    now: datetime.datetime,
    backoffs: tuple[float, float],
) -> Deadline | None:
    """None when the deadline has nothing to say (none set, or every member was Ready once since this release);
    `members` are the live pods the release placed, as they are now; `done` the members that finished their work
    (`disruption.finished`), which count toward minCount: a rank that exits 0 early leaves a healthy gang."""
    released = released_at or ""
    if not deadline or (record.ready_at is not None and record.ready_at >= released):
        return None
    missing = first_not_ready(members)
    if missing is None and len(members) + done >= min_count:
        return Deadline(record=record.model_copy(update={"attempts": 0, "ready_at": times.stamp(now)}))
    left = deadline - (now - times.parse(released_at)).total_seconds() if released_at else -1.0
    if left > 0:
        return Deadline(wake_in=left)
    member, why = missing if missing is not None else ("-", f"only {len(members) + done} of minCount {min_count} members exist or finished")
    counted = record.timed_out_at is None or record.timed_out_at < released
    if counted:
        attempts = record.attempts + 1
        not_before = now + datetime.timedelta(seconds=backoff(attempts, *backoffs))
        record = schema.Readiness(
            attempts=attempts, member=member, reason=why, timed_out_at=times.stamp(now), not_before=times.stamp(not_before)
        )
    delay = backoff(record.attempts, *backoffs)
    text = (
        f"member {record.member} not Ready {deadline:.0f}s after release ({record.reason}); timeout {record.attempts} in a row, "
        f"admitted again after {delay:.0f}s"
    )
    return Deadline(record=record if counted else None, counted=counted, tear_down=text)


def backing_off(record: schema.Readiness, now: datetime.datetime) -> tuple[float, str] | None:
    """(seconds left, why) while a group torn down at its ready deadline waits out its back-off; None once it may
    be admitted again (or a release since got every member Ready)."""
    if record.not_before is None or (record.ready_at is not None and record.ready_at >= (record.timed_out_at or "")):
        return None
    left = (times.parse(record.not_before) - now).total_seconds()
    if left <= 0:
        return None
    why = (
        f"back-off after {record.attempts} ready deadline timeout(s) in a row (member {record.member}: {record.reason}); "
        f"admitted again at {record.not_before}"
    )
    return left, why
