"""JobSets behind the owner seam (`owners.seam.OwnerKind`): one gang over the pods of all the JobSet's Jobs.

A JobSet controls its Jobs and each Job its pods, so a pod names its JobSet
only by the labels JobSet's controller puts on it. A pod is taken as a member
when it carries the JobSet's uid label and is controlled by a Job: anyone who
may create pods in the namespace could copy the label, as they could create
pods under any gang's name; the pod would wait behind the group's quorum like
any late member, and take nothing from another namespace.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Mapping
from typing import Any

from phalanx.api import keys
from phalanx.api.intent import GangSpecError
from phalanx.jobsets import admission
from phalanx.jobsets.objects import JOBSET_UID_LABEL
from phalanx.owners.controlling import Controlling
from phalanx.scheduling import conditions
from phalanx.scheduling.phase import OwnerState

JSON = dict[str, Any]
GLOBAL_JOB_INDEX = "jobset.sigs.k8s.io/job-global-index"
ENDING = ("Completed", "Failed")
"""JobSet's terminal conditions: its controller ends its Jobs, and their pods, itself."""


class JobSets(Controlling):
    kind = admission.KIND
    api_version = admission.API_VERSION
    plural = "jobsets"

    def member_uids(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        meta = pod["metadata"]
        uid = (meta.get("labels") or {}).get(JOBSET_UID_LABEL)
        made_by_a_job = any(r.get("kind") == "Job" and r.get("controller") for r in meta.get("ownerReferences") or [])
        return (uid,) if uid and made_by_a_job else ()

    def state(self, owner: Mapping[str, Any], released_at: str | None) -> OwnerState:
        if self.suspended(owner, released_at):
            return OwnerState.SUSPENDED
        if any(conditions.true(owner, t) for t in ENDING) or (owner.get("status") or {}).get("terminalState"):
            return OwnerState.FINISHED
        return OwnerState.ACTIVE

    def size(self, owner: Mapping[str, Any]) -> tuple[int | None, int | None]:
        size = admission.size(dict(owner))
        return size.parallelism, size.completions

    def min_count(self, owner: Mapping[str, Any]) -> int | None:
        """A JobSet of roles: the sum of its roles' minimums (its composite's minCount); else as any owner's."""
        with contextlib.suppress(GangSpecError):
            if found := admission.roles(dict(owner)):
                return sum(minimum for _, minimum in found)
        return super().min_count(owner)

    def member_order(self, pod: Mapping[str, Any]) -> tuple[int, str, str]:
        """By the Job's global index in the JobSet, then by completion index within it."""
        meta = pod["metadata"]
        job = (meta.get("labels") or {}).get(GLOBAL_JOB_INDEX, "")
        index = (meta.get("annotations") or {}).get(keys.COMPLETION_INDEX, "")
        rank = (int(job) if job.isdigit() else 1 << 15) * (1 << 15) + (int(index) if index.isdigit() else (1 << 15) - 1)
        return (rank, meta.get("creationTimestamp", ""), meta["name"])

    def pods_owed(self, owner: JSON | None, pod_group: JSON, live: int, now: datetime.datetime) -> str | None:
        """The pods the JobSet's Jobs have yet to create (their back-off is each Job's own, not estimated here)."""
        if owner is None:
            return None
        wanted = admission.size(owner).parallelism
        if live >= wanted or any(conditions.true(owner, t) for t in ENDING):
            return None
        return f"{live} of {wanted} pods exist; the JobSet's Jobs create the other {wanted - live}"


JOBSETS = JobSets()
