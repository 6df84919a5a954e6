"""The embedded default cluster: a real Kubernetes control plane on loopback.

No Docker engine is needed: etcd, kube-apiserver, kube-controller-manager and
kube-scheduler are built from the Go module proxy and run as plain processes
by kwokctl; kwok fakes the nodes and the pod lifecycle, and `fakegpu` stands
in for dra-example-driver by publishing its ResourceSlices.
"""

from phalanx.localcluster.cluster import ClusterSpec, LocalCluster

__all__ = ["ClusterSpec", "LocalCluster"]
