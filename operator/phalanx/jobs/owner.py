"""batch/v1 Jobs behind the owner seam (`owners.seam.OwnerKind`): how the loop and explain see a gang's Job.

A Job's members are the pods it controls, in its own namespace: a label
(which anyone creating a pod may copy) makes no pod a member. Its PodGroup
is controlled by it too, and names it by the job-name label Phalanx sets.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys, times
from phalanx.owners.controlling import Controlling
from phalanx.scheduling import conditions
from phalanx.scheduling.phase import OwnerState

JSON = dict[str, Any]
ENDING = ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget")
"""Conditions of a Job done or on its way (its successPolicy met, its failure decided): it ends its own pods."""


class Jobs(Controlling):
    kind = "Job"
    api_version = "batch/v1"
    plural = "jobs"

    def member_uids(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        uid = self.owner_uid(pod)
        return (uid,) if uid else ()

    def state(self, owner: Mapping[str, Any], released_at: str | None) -> OwnerState:
        if self.suspended(owner, released_at):
            return OwnerState.SUSPENDED
        if any(conditions.true(owner, t) for t in ENDING):
            return OwnerState.FINISHED
        return OwnerState.ACTIVE

    def size(self, owner: Mapping[str, Any]) -> tuple[int | None, int | None]:
        return owner["spec"].get("parallelism"), owner["spec"].get("completions")

    def member_order(self, pod: Mapping[str, Any]) -> tuple[int, str, str]:
        """By completion index, then oldest first."""
        index = (pod["metadata"].get("annotations") or {}).get(keys.COMPLETION_INDEX, "")
        meta = pod["metadata"]
        return (int(index) if index.isdigit() else 1 << 30, meta.get("creationTimestamp", ""), meta["name"])

    def pods_owed(self, owner: JSON | None, pod_group: JSON, live: int, now: datetime.datetime) -> str | None:
        """After a teardown, the pods the Job owes and when its controller's back-off lets them come: 10 s x 2^(n-1),
        capped at 10 min (v1.37.2), n the pods failed since its last success, podFailurePolicy-ignored ones included: at
        least the members lost (`status.lost`) or those the Job counts as failed, not the members Phalanx took down with
        them (it takes them out of the Job's count), counted from the teardown. An estimate: the controller keeps n in
        memory, not in its status."""
        if owner is None:
            return None
        wanted = int(owner["spec"].get("parallelism") or 1)
        status = owner.get("status") or {}
        if live >= wanted or conditions.true(owner, "Complete") or conditions.true(owner, "Failed"):
            return None
        scheduled = conditions.find(pod_group, keys.INITIALLY_SCHEDULED) or {}
        owed = wanted - live
        said = f"{live} of {wanted} pods exist ({status.get('active') or 0} active, {status.get('failed') or 0} failed as the Job counts)"
        if scheduled.get("reason") not in keys.TEARDOWNS or not scheduled.get("lastTransitionTime"):
            return f"{said}; the Job controller creates the other {owed}"
        lost = len((pod_group.get("status") or {}).get("lost") or [])
        failures = lost if status.get("succeeded") else max(lost, int(status.get("failed") or 0))
        if not failures:
            return f"{said}; the Job controller creates the other {owed}"
        delay = min(600, 10 * 2 ** (failures - 1))
        left = int(delay - times.seconds_since(scheduled["lastTransitionTime"], now))
        due = f"due in about {left}s" if left > 0 else "due now"
        return (
            f"{said}; the Job controller's back-off holds the other {owed}: about {delay}s after the teardown "
            f"(10s x 2^(n-1), n >= {failures} pods failed since its last success), {due}"
        )


JOBS = Jobs()
