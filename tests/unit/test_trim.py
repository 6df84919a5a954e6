"""What the informers keep of an object is enough: every reading of a trimmed object equals the untrimmed one's."""

from __future__ import annotations

import copy

from phalanx.api import keys
from phalanx.kube import trim
from phalanx.scheduling import accessors, disruption, inputs, repair
from test_inputs import POD

FULL_POD = copy.deepcopy(POD)
FULL_POD["metadata"].update(
    {
        "annotations": {keys.PINNED_NODE: "worker-1", trim.LAST_APPLIED: "{" + "x" * 5000 + "}"},
        "managedFields": [{"manager": "kubectl", "fieldsV1": {"f:spec": {}}}] * 5,
        "ownerReferences": [{"kind": "Job", "uid": "j", "controller": True, "name": "train", "apiVersion": "batch/v1"}],
    }
)
FULL_POD["spec"].update(
    {
        "nodeName": "worker-1",
        "volumes": [{"name": "token", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
        "overhead": {"cpu": "100m"},
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "nodeSelector": {"zone": "a"},
    }
)
for container in FULL_POD["spec"]["containers"] + FULL_POD["spec"]["initContainers"]:
    container.update(
        {"image": "busybox", "env": [{"name": "E", "value": "v" * 500}], "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}
    )
FULL_POD["status"] = {
    "phase": "Failed",
    "conditions": [{"type": keys.DISRUPTION_TARGET, "status": "False"}],
    "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-0-gpu-x"}],
    "containerStatuses": [{"name": "main", "image": "busybox", "imageID": "sha", "state": {"terminated": {"exitCode": 3}}}],
    "podIPs": [{"ip": "10.0.0.1"}],
}


def test_a_trimmed_pod_reads_the_same_and_loses_the_bulk() -> None:
    trimmed = trim.pod(copy.deepcopy(FULL_POD))
    for read in (inputs.pod_requests, accessors.claim_names, accessors.placed_on, accessors.gated, accessors.terminal, inputs.host_ports):
        assert read(trimmed) == read(FULL_POD), read.__name__
    assert inputs.member(trimmed, ("c",)) == inputs.member(FULL_POD, ("c",))
    assert inputs.existing(trimmed, "worker-1") == inputs.existing(FULL_POD, "worker-1")
    assert disruption.cause(trimmed, {"worker-1"}) == disruption.cause(FULL_POD, {"worker-1"}) == "failed: container main exited 3"
    assert "managedFields" not in trimmed["metadata"] and trim.LAST_APPLIED not in trimmed["metadata"]["annotations"]
    assert "volumes" not in trimmed["spec"] and "env" not in trimmed["spec"]["containers"][0]
    assert len(repr(trimmed)) < len(repr(FULL_POD)) / 3


def test_a_trimmed_claim_keeps_when_its_allocation_was_written() -> None:
    claim = {
        "metadata": {
            "name": "c",
            "namespace": "ml",
            "uid": "u",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "managedFields": [
                {"manager": "kube-controller-manager", "time": "2026-11-29T10:00:00Z", "fieldsV1": {"f:spec": {}}},
                {
                    "manager": "phalanx",
                    "subresource": "status",
                    "time": "2026-11-29T10:00:05Z",
                    "fieldsV1": {"f:status": {"f:allocation": {".": {}}, "f:reservedFor": {}}},
                },
                {
                    "manager": "kubelet",
                    "subresource": "status",
                    "time": "2026-11-29T10:00:09Z",
                    "fieldsV1": {"f:status": {"f:devices": {}}},
                },
            ],
        },
        "status": {"allocation": {"devices": {"results": [{"driver": "d", "pool": "p", "device": "g", "request": "gpu"}]}}},
    }
    trimmed = trim.claim(copy.deepcopy(claim))
    assert repair.allocated_at(trimmed) == repair.allocated_at(claim) == "2026-11-29T10:00:05Z"
    assert len(trimmed["metadata"]["managedFields"]) == 1
