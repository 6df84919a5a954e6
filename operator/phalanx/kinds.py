"""The workload kinds Phalanx gangs: batch/v1 Jobs, JobSets and LeaderWorkerSets where they are installed (each
replica of an LWS a gang), and PodGroups of users' own (pods of any controller, labelled; last: a group made for an
owner of another kind answers to that kind). Each is an adapter of the framework in `owners/`: its owner behind the
loop's seam, and the admission webhooks it asks for."""

from __future__ import annotations

from phalanx.jobs import webhook_rules as job_rules
from phalanx.jobs.owner import JOBS
from phalanx.jobsets import webhook_rules as jobset_rules
from phalanx.jobsets.owner import JOBSETS
from phalanx.leaderworkersets import webhook_rules as lws_rules
from phalanx.leaderworkersets.owner import LEADERWORKERSETS
from phalanx.owners import webhook_config
from phalanx.owners.seam import Kinds
from phalanx.podgroups import webhook_rules as pod_group_rules
from phalanx.podgroups.owner import PODGROUPS

KINDS = Kinds(JOBS, JOBSETS, LEADERWORKERSETS, PODGROUPS)

HOOKS = (*job_rules.HOOKS, *jobset_rules.HOOKS, *lws_rules.HOOKS, *pod_group_rules.HOOKS)
"""Every kind's admission webhooks, in the order the configurations list them."""


def manifest() -> str:
    """`manifests/webhooks.yaml` (`./task webhooks`)."""
    return webhook_config.manifest(HOOKS)


if __name__ == "__main__":
    print(manifest(), end="")
