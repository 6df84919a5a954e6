"""JobSet's own controller runs beside the local control plane, as a cluster with JobSet installed has it.

The release is built from the Go module proxy; these tests prove that it is
the real controller (it makes the JobSet's Jobs and they run) and that its
webhooks see JobSets and JobSet pods only.
"""

from __future__ import annotations

import os

import pytest
from conftest import Cluster, wait_for

from phalanx.localcluster import jobset

pytestmark = pytest.mark.skipif(bool(os.environ.get("PHALANX_E2E_KUBECONFIG")), reason="JobSet's controller runs in the local cluster only")


def jobset_manifest(name: str, workers: int) -> str:
    def replicated(role: str, pods: int) -> str:
        return f"""
  - name: {role}
    replicas: 1
    template:
      spec:
        parallelism: {pods}
        completions: {pods}
        template:
          spec:
            restartPolicy: Never
            containers:
            - name: main
              image: busybox:1.36
              command: ["sleep", "3600"]"""

    return f"""apiVersion: jobset.x-k8s.io/v1alpha2
kind: JobSet
metadata:
  name: {name}
spec:
  replicatedJobs:{replicated("leader", 1)}{replicated("workers", workers)}
"""


def _pods(cluster: Cluster, namespace: str, selector: str) -> list[dict]:
    return cluster.get("-n", namespace, "pods", "-l", selector)["items"]


def test_the_controller_makes_a_jobsets_jobs_and_they_run(cluster: Cluster, namespace: str) -> None:
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=jobset_manifest("train", workers=2))
    label = f"{jobset.JOBSET_NAME_LABEL}=train"
    jobs = wait_for(lambda: len(items := cluster.get("-n", namespace, "jobs", "-l", label)["items"]) == 2 and items, "the two Jobs")
    assert sorted(j["metadata"]["name"] for j in jobs) == ["train-leader-0", "train-workers-0"]
    assert all(j["metadata"]["ownerReferences"][0]["kind"] == "JobSet" for j in jobs)
    running = wait_for(
        lambda: len(ps := [p for p in _pods(cluster, namespace, label) if p["status"].get("phase") == "Running"]) == 3 and ps,
        "3 JobSet pods Running",
    )
    assert all(p["metadata"]["labels"]["jobset.sigs.k8s.io/replicatedjob-name"] in {"leader", "workers"} for p in running)


def test_its_webhooks_see_jobsets_and_their_pods_only(cluster: Cluster, namespace: str) -> None:
    """With the controller stopped, its webhooks fail closed: a JobSet is refused, but any other pod is still created."""
    local = cluster.local
    assert local is not None
    jobset.stop(local.kubeconfig)
    try:
        assert jobset.running(local.kubeconfig) == []
        refused = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=jobset_manifest("refused", workers=1), check=False)
        assert refused.returncode != 0
        assert "mjobset.kb.io" in refused.stderr, refused.stderr
        cluster.kubectl("-n", namespace, "run", "plain", "--image=busybox:1.36", "--restart=Never", "--", "sleep", "3600")
        assert cluster.get("-n", namespace, "pod", "plain")["metadata"]["name"] == "plain"
    finally:
        local.start_jobset()
    assert len(jobset.running(local.kubeconfig)) == 1
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=jobset_manifest("accepted", workers=1))
