"""The embedded default cluster: a real Kubernetes control plane on loopback.

No Docker engine is needed: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler are built from the Go module proxy and run as plain processes
by kwokctl; kwok fakes the nodes and the pod lifecycle. dra-example-driver's
own kubelet plugin publishes the ResourceSlices (`dradriver`), one process
per worker, or, for clusters too large for that, the `fakegpu` stand-in.
"""

from phalanx_dev.localcluster.cluster import ClusterSpec, LocalCluster

__all__ = ["ClusterSpec", "LocalCluster"]
