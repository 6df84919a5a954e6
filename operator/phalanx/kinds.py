"""The workload kinds Phalanx gangs: batch/v1 Jobs, JobSets where JobSet is installed, and PodGroups of users' own
(pods of any controller, labelled; last: a group made for a Job or JobSet answers to that kind)."""

from __future__ import annotations

from phalanx.jobs.owner import JOBS
from phalanx.jobsets.owner import JOBSETS
from phalanx.podgroups.owner import PODGROUPS
from phalanx.scheduling.owner import Kinds

KINDS = Kinds(JOBS, JOBSETS, PODGROUPS)
