"""The ready deadline: whether a released gang's members are all Ready, who is not and why, and the back-off after.

Kueue's `waitForPodsReady` is the reference: a released (admitted) group has
a deadline from its release to every member Ready; past it the group is torn
down as a unit and admitted again after a back-off that doubles from a base
to a cap, counted in a row until a release gets every member Ready. Once all
its members were Ready, a member that turns unready later is no business of
the deadline (a lost member is `disruption`'s). Pure: the loop passes the
pods and the clock.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

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
    statuses = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    for container in statuses:
        if container.get("ready"):
            continue
        state = container.get("state") or {}
        for kind in ("waiting", "terminated"):
            if kind in state:
                detail = state[kind] or {}
                reason = detail.get("reason") or kind
                message = f": {detail['message']}" if detail.get("message") else ""
                restarts = f" (restarted {container['restartCount']} times)" if container.get("restartCount") else ""
                return f"container {container.get('name')} {kind} {reason}{message}{restarts}"
        if "running" in state:
            return f"container {container.get('name')} running, not ready (its readiness probe)"
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
