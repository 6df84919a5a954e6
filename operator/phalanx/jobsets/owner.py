"""JobSets behind the owner seam (`scheduling.owner.OwnerKind`): one gang over the pods of all the JobSet's Jobs.

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

from phalanx.api import intent, keys
from phalanx.jobs.owner import COMPLETION_INDEX
from phalanx.jobsets import admission
from phalanx.jobsets.objects import JOBSET_UID_LABEL
from phalanx.kube.client import Kube
from phalanx.scheduling import conditions
from phalanx.scheduling.phase import OwnerState

JSON = dict[str, Any]
GLOBAL_JOB_INDEX = "jobset.sigs.k8s.io/job-global-index"
ENDING = ("Completed", "Failed")
"""JobSet's terminal conditions: its controller ends its Jobs, and their pods, itself."""


class JobSets:
    kind = admission.KIND

    def owner_uid(self, obj: Mapping[str, Any]) -> str | None:
        for ref in obj["metadata"].get("ownerReferences") or []:
            if ref.get("kind") == self.kind and ref.get("controller"):
                return ref["uid"]
        return None

    def member_uids(self, pod: Mapping[str, Any]) -> tuple[str, ...]:
        meta = pod["metadata"]
        uid = (meta.get("labels") or {}).get(JOBSET_UID_LABEL)
        made_by_a_job = any(r.get("kind") == "Job" and r.get("controller") for r in meta.get("ownerReferences") or [])
        return (uid,) if uid and made_by_a_job else ()

    def name(self, pod_group: Mapping[str, Any]) -> str | None:
        """The owner's name is in the label every PodGroup gets (`jobs.objects`), whatever its kind."""
        return (pod_group["metadata"].get("labels") or {}).get(keys.JOB_NAME_LABEL)

    def list_path(self, namespace: str) -> str:
        return f"/apis/{admission.API_VERSION}/namespaces/{namespace}/jobsets"

    async def read(self, kube: Kube, pod_group: Mapping[str, Any]) -> JSON | None:
        name = self.name(pod_group)
        jobset = await kube.get(f"{self.list_path(pod_group['metadata']['namespace'])}/{name}") if name else None
        if jobset is None or jobset["metadata"].get("deletionTimestamp") or jobset["metadata"]["uid"] != self.owner_uid(pod_group):
            return None
        return jobset

    def state(self, owner: Mapping[str, Any], released_at: str | None) -> OwnerState:
        """As a Job's: suspended after the release means its Jobs were suspended and their pods deleted."""
        suspended = conditions.find(owner, "Suspended")
        if (owner.get("spec") or {}).get("suspend") or (
            suspended and suspended.get("status") == "True" and released_at and (suspended.get("lastTransitionTime") or "") > released_at
        ):
            return OwnerState.SUSPENDED
        if any(conditions.true(owner, t) for t in ENDING) or (owner.get("status") or {}).get("terminalState"):
            return OwnerState.FINISHED
        return OwnerState.ACTIVE

    def min_count(self, owner: Mapping[str, Any]) -> int | None:
        with contextlib.suppress(intent.GangSpecError):
            said = intent.from_annotations(owner["metadata"].get("annotations"))
            if said is not None and said.policy == "gang":
                size = admission.size(dict(owner))
                return said.min_count_for(size.parallelism, size.completions)
        return None

    def ref(self, pod_group: Mapping[str, Any]) -> JSON | None:
        name, uid = self.name(pod_group), self.owner_uid(pod_group)
        if not (name and uid):
            return None
        return {
            "apiVersion": admission.API_VERSION,
            "kind": self.kind,
            "metadata": {"name": name, "namespace": pod_group["metadata"]["namespace"], "uid": uid},
        }

    def member_order(self, pod: Mapping[str, Any]) -> tuple[int, str, str]:
        """By the Job's global index in the JobSet, then by completion index within it."""
        meta = pod["metadata"]
        job = (meta.get("labels") or {}).get(GLOBAL_JOB_INDEX, "")
        index = (meta.get("annotations") or {}).get(COMPLETION_INDEX, "")
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
