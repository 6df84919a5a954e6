"""The workload kinds Phalanx gangs: batch/v1 Jobs and, where JobSet is installed, JobSets."""

from __future__ import annotations

from phalanx.jobs.owner import JOBS
from phalanx.jobsets.owner import JOBSETS
from phalanx.scheduling.owner import Kinds

KINDS = Kinds(JOBS, JOBSETS)
