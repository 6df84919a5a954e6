"""Phalanx's development harness, apart from the product so the operator image carries only what runs in a cluster.

`localcluster`: the embedded control plane (etcd, kube-apiserver, kube-scheduler, kube-controller-manager built from
the Go module proxy, kwok nodes, dra-example-driver's plugin), the image builder and the real-node harness; `cli`:
the `phalanx cluster` and `phalanx demo` commands, which the product's command line finds through the
`phalanx.commands` entry points this package declares.
"""
