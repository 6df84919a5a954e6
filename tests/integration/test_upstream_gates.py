"""The local control plane can also run the in-tree gang feature, for side-by-side comparison.

Slices: none (a worker without GPUs, so no driver plugin and no stand-in slice).
"""

from __future__ import annotations

import os

import pytest
from conftest import cluster_name

from phalanx_dev.localcluster import ClusterSpec, LocalCluster


@pytest.mark.skipif(bool(os.environ.get("PHALANX_E2E_KUBECONFIG")), reason="starts a second local control plane")
def test_starts_with_upstream_gang_gates_and_serves_podgroups() -> None:
    upstream = LocalCluster(ClusterSpec(name=cluster_name("upstream"), workers=1, gpus_per_worker=0, upstream_gang=True))
    try:
        upstream.up()
        resources = upstream.kubectl("api-resources", "--api-group=scheduling.k8s.io", "-o", "name").stdout.split()
        assert "podgroups.scheduling.k8s.io" in resources
        assert "workloads.scheduling.k8s.io" in resources
        job_fields = upstream.kubectl("explain", "job.spec.scheduling", check=False)
        assert job_fields.returncode == 0, job_fields.stderr
    finally:
        upstream.down()
