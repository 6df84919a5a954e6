"""LeaderWorkerSet's own controller beside the local control plane, for gangs of LWS replicas (`sidecontroller`: how
it runs, as JobSet's does).

v0.9.0 is the newest release whose source the Go module proxy serves. Its
controller also runs DisaggregatedSets, so their CRD is installed beside
LeaderWorkerSet's (`build-kube.sh` puts both in crd.yaml): its watch of them
fails without it.
"""

from __future__ import annotations

from phalanx_dev.localcluster.sidecontroller import Exited, SideController

VERSION = "v0.9.0"
BINARY = "lws-controller"
API_GROUP = "leaderworkerset.x-k8s.io"
NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"

CONTROLLER = SideController("lws", BINARY, "config.lws.x-k8s.io/v1alpha1", NAME_LABEL)
start, wait_ready, running, stop = CONTROLLER.start, CONTROLLER.wait_ready, CONTROLLER.running, CONTROLLER.stop
__all__ = ["API_GROUP", "BINARY", "CONTROLLER", "NAME_LABEL", "VERSION", "Exited", "running", "start", "stop", "wait_ready"]
