"""JobSet's own controller beside the local control plane, for gangs of JobSets (`sidecontroller`: how it runs)."""

from __future__ import annotations

from phalanx_dev.localcluster.sidecontroller import Exited, SideController

VERSION = "v0.12.0"
BINARY = "jobset-controller"
API_GROUP = "jobset.x-k8s.io"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"

CONTROLLER = SideController("jobset", BINARY, "config.jobset.x-k8s.io/v1alpha1", JOBSET_NAME_LABEL)
start, wait_ready, running, stop = CONTROLLER.start, CONTROLLER.wait_ready, CONTROLLER.running, CONTROLLER.stop
__all__ = ["API_GROUP", "BINARY", "CONTROLLER", "JOBSET_NAME_LABEL", "VERSION", "Exited", "running", "start", "stop", "wait_ready"]
