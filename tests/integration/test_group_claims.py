"""Group-shared claims (KEP-5729, `spec.scheduling.resourceClaims`) on the real API server.

Slices: published here through the API for a driver of our own
(`groupclaims.example.com`): a network-attached pool of 2 fabric channels
(allNodes) and one node-local IMEX domain on worker-2.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Cluster, Operator, wait_for

from jobs import IGNORE_DISRUPTIONS, as_json, bound_pods, job_pods
from phalanx.api import keys, naming

DRIVER = "groupclaims.example.com"


def _slice(name: str, devices: list[str], kind: str, **where: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": DRIVER,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": d, "attributes": {"kind": {"string": kind}}} for d in devices],
            **where,
        },
    }


CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "groupclaims"},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
}
WORLD = [
    CLASS,
    _slice("gc-fabric", ["channel-0", "channel-1"], "channel", allNodes=True),
    _slice("gc-imex", ["domain-0"], "imex", nodeName="worker-2"),
]


@pytest.fixture(scope="module")
def world(cluster: Cluster) -> Iterator[None]:
    items = {"apiVersion": "v1", "kind": "List", "items": WORLD}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(items))
    try:
        yield
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=json.dumps(items), check=False)


def _template(name: str, kind: str, count: int = 1) -> dict[str, Any]:
    selector = {"cel": {"expression": f"device.attributes['{DRIVER}'].kind == '{kind}'"}}
    request = {"name": kind, "exactly": {"deviceClassName": "groupclaims", "selectors": [selector], "count": count}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def _job(name: str, size: int, template: str, *, group: list[dict] | None = None) -> dict[str, Any]:
    """A gang of `size` ranks that all use the claim `shared`, made from `template` once for the whole group."""
    entry = {"name": "shared", "resourceClaimTemplateName": template}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "backoffLimit": 3,
            "podFailurePolicy": IGNORE_DISRUPTIONS,
            "scheduling": {
                "schedulingPolicy": {"gang": {"minCount": size}},
                "resourceClaims": group if group is not None else [dict(entry)],
            },
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "terminationGracePeriodSeconds": 1,
                    "resourceClaims": [entry],
                    "containers": [
                        {
                            "name": "rank",
                            "image": "busybox:1.36",
                            "command": ["sleep", "3600"],
                            "resources": {"requests": {"cpu": "50m"}, "claims": [{"name": "shared"}]},
                        }
                    ],
                }
            },
        },
    }


def _apply(cluster: Cluster, namespace: str, *objects: dict[str, Any], check: bool = True):
    return cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=as_json({"apiVersion": "v1", "kind": "List", "items": list(objects)}), check=check
    )


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    def probe() -> dict | None:
        items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
        return items[0] if items else None

    return wait_for(probe, f"the PodGroup of {job}")


def _claims(cluster: Cluster, namespace: str) -> dict[str, dict[str, Any]]:
    return {c["metadata"]["name"]: c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}


def _devices(claim: dict[str, Any]) -> list[str]:
    return sorted(r["device"] for r in ((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or [])


def test_a_gang_shares_one_channel_through_one_group_claim(cluster: Cluster, operator: Operator, world: None, namespace: str) -> None:
    proc = _apply(cluster, namespace, _template("one-channel", "channel"), _job("train", 4, "one-channel"))
    assert "its resourceClaims (shared) become one ResourceClaim per PodGroup, made and reserved by Phalanx" in proc.stderr, proc.stderr
    pods = bound_pods(cluster, namespace, "train", 4)
    group = _pod_group(cluster, namespace, "train")
    name = naming.group_claim_name(group["metadata"]["name"], "shared")
    assert group["spec"]["resourceClaims"] == [{"name": "shared", "resourceClaimTemplateName": "one-channel"}]
    assert group["status"]["resourceClaimStatuses"] == [{"name": "shared", "resourceClaimName": name}]
    claims = _claims(cluster, namespace)
    assert list(claims) == [name], "one claim for the whole group, none per pod"
    claim = claims[name]
    assert [(o["kind"], o["uid"]) for o in claim["metadata"]["ownerReferences"] if o.get("controller")] == [
        ("PodGroup", group["metadata"]["uid"])
    ]
    assert claim["metadata"]["annotations"][keys.POD_CLAIM_NAME] == "shared"
    assert len(_devices(claim)) == 1, "one channel of two"
    assert sorted(r["uid"] for r in claim["status"]["reservedFor"]) == sorted(p["metadata"]["uid"] for p in pods)
    for pod in pods:
        assert pod["spec"]["resourceClaims"] == [{"name": "shared", "resourceClaimName": name}]
        assert not pod["status"].get("resourceClaimStatuses"), "the stock resourceclaim controller made nothing for the pod"


def test_of_two_gangs_that_each_need_both_channels_one_runs_and_the_other_holds_nothing(
    cluster: Cluster, operator: Operator, world: None, namespace: str
) -> None:
    _apply(cluster, namespace, _template("two-channels", "channel", count=2), _job("first", 3, "two-channels"))
    bound_pods(cluster, namespace, "first", 3)
    _apply(cluster, namespace, _job("second", 3, "two-channels"))

    def short() -> str | None:
        cond = next(
            (
                c
                for c in (_pod_group(cluster, namespace, "second").get("status") or {}).get("conditions") or []
                if c["type"] == keys.INITIALLY_SCHEDULED
            ),
            {},
        )
        return cond.get("message") if "fit" in cond.get("message", "") else None

    message = wait_for(short, "the second gang reported as not fitting", timeout=90)
    assert "0 of 3 members fit" in message, message
    second = naming.group_claim_name(_pod_group(cluster, namespace, "second")["metadata"]["name"], "shared")
    claims = _claims(cluster, namespace)
    assert len(claims) == 2 and _devices(claims[second]) == [], "the waiting gang's claim holds nothing"
    assert [d for c in claims.values() for d in _devices(c)] == ["channel-0", "channel-1"]
    assert not [p for p in job_pods(cluster, namespace, "second") if p["spec"].get("nodeName")]


def test_a_node_local_group_claim_puts_every_member_where_the_device_is(
    cluster: Cluster, operator: Operator, world: None, namespace: str
) -> None:
    _apply(cluster, namespace, _template("one-domain", "imex"), _job("imex", 3, "one-domain"))
    pods = bound_pods(cluster, namespace, "imex", 3)
    assert {p["spec"]["nodeName"] for p in pods} == {"worker-2"}
    [claim] = _claims(cluster, namespace).values()
    assert _devices(claim) == ["domain-0"]


def test_the_group_claim_is_freed_once_the_job_is_deleted(cluster: Cluster, operator: Operator, world: None, namespace: str) -> None:
    _apply(cluster, namespace, _template("two-channels", "channel", count=2), _job("train", 2, "two-channels"))
    bound_pods(cluster, namespace, "train", 2)
    [name] = _claims(cluster, namespace)
    cluster.kubectl("delete", "job", "train", "-n", namespace, "--wait=false")
    wait_for(lambda: name not in _claims(cluster, namespace), "the group claim deleted with its PodGroup", timeout=120)
    _apply(cluster, namespace, _job("next", 2, "two-channels"))
    bound_pods(cluster, namespace, "next", 2)


RC = "spec.scheduling.resourceClaims"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda j: j["spec"]["scheduling"].update(
                resourceClaims=[{"name": f"c{i}", "resourceClaimTemplateName": "t"} for i in range(5)]
            ),
            f'{RC}: Invalid value: ["c0", "c1", "c2", "c3", "c4"]: must have at most 4 items',
        ),
        (
            lambda j: j["spec"]["template"]["spec"]["resourceClaims"][0].update(resourceClaimTemplateName="other"),
            'spec.template.spec.resourceClaims[0]: Invalid value: {"name": "shared", "resourceClaimTemplateName": "other"}: '
            f"has the name of the group's claim {RC}[0] but another source",
        ),
    ],
    ids=["five", "mismatched-source"],
)
def test_bad_group_claims_are_refused_naming_the_field(
    cluster: Cluster, operator: Operator, module_namespace: str, change: Any, message: str
) -> None:
    job = _job("bad", 2, "one-channel")
    change(job)
    proc = _apply(cluster, module_namespace, job, check=False)
    assert proc.returncode != 0
    assert message in proc.stderr, proc.stderr


def test_group_claims_cannot_change_after_creation(cluster: Cluster, operator: Operator, namespace: str) -> None:
    job = _job("fixed", 2, "one-channel")
    _apply(cluster, namespace, job)
    job["spec"]["scheduling"]["resourceClaims"][0]["resourceClaimTemplateName"] = "two-channels"
    proc = _apply(cluster, namespace, job, check=False)
    assert proc.returncode != 0
    assert (
        f'{RC}: Invalid value: [{{"name": "shared", "resourceClaimTemplateName": "two-channels"}}... (65 characters): field is immutable'
        in proc.stderr
    ), proc.stderr


def _bare_pod_group(name: str, claims: list[dict]) -> dict:
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
    proc = cluster.kubectl("create", "-n", module_namespace, "-f", "-", stdin=json.dumps(_bare_pod_group("bad", claims)), check=False)
    assert proc.returncode != 0, "the PodGroup must not be created"
    assert message in proc.stderr, proc.stderr


def test_a_pod_group_s_claims_are_immutable(cluster: Cluster, module_namespace: str) -> None:
    cluster.kubectl("create", "-n", module_namespace, "-f", "-", stdin=json.dumps(_bare_pod_group("fixed", [FABRIC])))
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
