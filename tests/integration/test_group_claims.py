"""Group-shared claims (KEP-5729, `spec.scheduling.resourceClaims`) on the real API server.

Slices: none of this module's own yet; the CRD tests need none.
"""

from __future__ import annotations

import json

import pytest
from conftest import Cluster

from phalanx.api import keys


def _pod_group(name: str, claims: list[dict]) -> dict:
    return {
        "apiVersion": keys.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}, "resourceClaims": claims},
    }


FABRIC = {"name": "fabric", "resourceClaimTemplateName": "one-channel"}


@pytest.mark.parametrize(
    ("claims", "message"),
    [
        ([dict(FABRIC, name=f"c{i}") for i in range(5)], "spec.resourceClaims: Too many: 5: must have at most 4 items"),
        ([dict(FABRIC, resourceClaimName="mine")], "must specify exactly one of: `resourceClaimName`, `resourceClaimTemplateName`"),
        (
            [dict(FABRIC, name="Fabric")],
            'spec.resourceClaims[0].name: Invalid value: "Fabric": spec.resourceClaims[0].name in body should match',
        ),
        ([FABRIC, FABRIC], 'spec.resourceClaims[1]: Duplicate value: {"name":"fabric"}'),
    ],
    ids=["five", "two-sources", "name", "duplicate"],
)
def test_the_pod_group_crd_refuses_what_upstream_refuses(cluster: Cluster, module_namespace: str, claims: list, message: str) -> None:
    proc = cluster.kubectl("create", "-n", module_namespace, "-f", "-", stdin=json.dumps(_pod_group("bad", claims)), check=False)
    assert proc.returncode != 0, "the PodGroup must not be created"
    assert message in proc.stderr, proc.stderr


def test_a_pod_group_s_claims_are_immutable(cluster: Cluster, module_namespace: str) -> None:
    cluster.kubectl("create", "-n", module_namespace, "-f", "-", stdin=json.dumps(_pod_group("fixed", [FABRIC])))
    for patch in (
        {"spec": {"resourceClaims": [dict(FABRIC, resourceClaimTemplateName="two-channels")]}},
        {"spec": {"resourceClaims": None}},
    ):
        proc = cluster.kubectl(
            "patch",
            "podgroups.scheduling.phalanx.dev",
            "fixed",
            "-n",
            module_namespace,
            "--type=merge",
            "-p",
            json.dumps(patch),
            check=False,
        )
        assert proc.returncode != 0, f"{patch} must be refused"
        assert "immutable" in proc.stderr, proc.stderr
