"""DRA features on the local control plane: gangs get the devices kube-scheduler's allocator would give them.

Slices: published here through the API for a driver of our own
(`features.example.com`): node-local pools on the kwok workers and a
network-attached pool, carrying counters, taints, shared capacity and binding
conditions, which the session's dra-example-driver slices do not.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import Cluster, wait_for

from jobs import bound_pods, job_pods
from phalanx.api import keys

DRIVER = "features.example.com"


def _device(name: str, kind: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"kind": {"string": kind}}, **extra}


def _slice(name: str, pool: str, devices: list[dict[str, Any]], **where: Any) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {"driver": DRIVER, "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1}, "devices": devices, **where},
    }


SLICES = [
    _slice("features-fa", "fa", [_device("fa-0", "fa")], nodeName="worker-1"),
    _slice(
        "features-part",
        "part",
        [
            _device("whole", "part", consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {"value": "8"}}}]),
            _device("half-0", "part", consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {"value": "4"}}}]),
            _device("half-1", "part", consumesCounters=[{"counterSet": "gpu-0", "counters": {"memory": {"value": "4"}}}]),
        ],
        nodeName="worker-2",
    ),
    _slice(
        "features-taint",
        "taint",
        [_device("broken", "taint", taints=[{"key": "example.com/broken", "effect": "NoSchedule"}])],
        nodeName="worker-3",
    ),
    _slice(
        "features-nic",
        "nic",
        [
            _device(
                "nic",
                "nic",
                allowMultipleAllocations=True,
                capacity={"bw": {"value": "10", "requestPolicy": {"default": "1", "validRange": {"min": "1", "step": "1"}}}},
            )
        ],
        allNodes=True,
    ),
    _slice(
        "features-bind",
        "bind",
        [_device("slow", "bind", bindingConditions=["Attached"], bindingFailureConditions=["AttachFailed"], bindsToNode=True)],
        allNodes=True,
    ),
]
# a pool's counters are published in a slice of their own (1.37 allows sharedCounters or devices, not both)
COUNTERS = _slice("features-part-counters", "part", [], nodeName="worker-2")
COUNTERS["spec"]["sharedCounters"] = [{"name": "gpu-0", "counters": {"memory": {"value": "8"}}}]
del COUNTERS["spec"]["devices"]
SLICES.append(COUNTERS)
for part in (SLICES[1], COUNTERS):
    part["spec"]["pool"]["resourceSliceCount"] = 2
CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "features"},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}], "extendedResourceName": "example.com/feature"},
}


def _applied(cluster: Cluster, items: list[dict[str, Any]]) -> Iterator[None]:
    """The objects exist for the duration of a fixture, and are deleted after it."""
    objects = {"apiVersion": "v1", "kind": "List", "items": items}
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(objects))
    try:
        yield
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=json.dumps(objects), check=False)


@pytest.fixture(scope="module")
def features(cluster: Cluster) -> Iterator[None]:
    yield from _applied(cluster, [CLASS, *SLICES])


def _kind(kind: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f"device.attributes['{DRIVER}'].kind == '{kind}'"}}]


def _exactly(kind: str, **extra: Any) -> dict[str, Any]:
    return {"deviceClassName": "features", "selectors": _kind(kind), **extra}


def _gang(
    cluster: Cluster, namespace: str, name: str, size: int, requests: list[dict[str, Any]], extended: dict[str, str] | None = None
) -> None:
    """A gang of `size` ranks, each with its own claim from a template holding `requests`; with `extended`, ranks ask
    for those extended resources instead of a claim."""
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": requests}}},
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "annotations": {keys.MIN_COUNT: str(size)}},
        "spec": {
            "parallelism": size,
            "completions": size,
            "completionMode": "Indexed",
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "resourceClaims": [{"name": "dev", "resourceClaimTemplateName": name}],
                    "containers": [
                        {
                            "name": "rank",
                            "image": "busybox:1.36",
                            "command": ["sleep", "3600"],
                            "resources": {"requests": {"cpu": "50m"}, "claims": [{"name": "dev"}]},
                        }
                    ],
                }
            },
        },
    }
    if extended:
        spec = job["spec"]["template"]["spec"]
        del spec["resourceClaims"]
        spec["containers"][0]["resources"] = {"requests": {"cpu": "50m", **extended}, "limits": extended}
    items = [job] if extended else [template, job]
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))


def _results(cluster: Cluster, namespace: str, job: str) -> list[dict[str, Any]]:
    """The allocation results of the job's claims, ordered by pod name."""
    claims = {c["metadata"]["name"]: c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}
    out = []
    for pod in sorted(job_pods(cluster, namespace, job), key=lambda p: p["metadata"]["name"]):
        for status in pod["status"].get("resourceClaimStatuses") or []:
            claim = claims[status["resourceClaimName"]]
            out.extend(((claim.get("status") or {}).get("allocation") or {}).get("devices", {}).get("results") or [])
    return out


def _short(cluster: Cluster, namespace: str, job: str) -> str:
    """The PodGroup condition's message once it says the group does not fit."""

    def probe() -> str | None:
        items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
        for cond in ((items[0].get("status") or {}).get("conditions") or []) if items else []:
            if cond["type"] == keys.INITIALLY_SCHEDULED and cond["status"] == "False" and "fit" in cond.get("message", ""):
                return cond["message"]
        return None

    return wait_for(probe, f"{job} reported as not fitting", timeout=90)


def test_first_available_falls_back_to_the_second_subrequest(cluster: Cluster, operator: Any, features: None, namespace: str) -> None:
    first = [
        {
            "name": "dev",
            "firstAvailable": [
                {"name": "two", **_exactly("fa", count=2)},
                {"name": "one", **_exactly("fa")},
            ],
        }
    ]
    _gang(cluster, namespace, "fa", 1, first)
    pods = bound_pods(cluster, namespace, "fa", 1)
    assert pods[0]["spec"]["nodeName"] == "worker-1"
    assert [(r["request"], r["device"]) for r in _results(cluster, namespace, "fa")] == [("dev/one", "fa-0")]


def test_a_half_partition_in_use_blocks_the_whole_device(cluster: Cluster, operator: Any, features: None, namespace: str) -> None:
    # the search tries `whole` first and backs off: with it, no second partition fits
    _gang(cluster, namespace, "pair", 1, [{"name": "dev", "exactly": _exactly("part", count=2)}])
    bound_pods(cluster, namespace, "pair", 1)
    assert sorted(r["device"] for r in _results(cluster, namespace, "pair")) == ["half-0", "half-1"]
    _gang(cluster, namespace, "more", 1, [{"name": "dev", "exactly": _exactly("part")}])
    assert "0 of 1" in _short(cluster, namespace, "more"), "whole stays blocked while the halves are in use"


def test_a_tainted_device_needs_a_toleration(cluster: Cluster, operator: Any, features: None, namespace: str) -> None:
    _gang(cluster, namespace, "plain", 1, [{"name": "dev", "exactly": _exactly("taint")}])
    assert "0 of 1" in _short(cluster, namespace, "plain")
    cluster.kubectl("delete", "job", "plain", "-n", namespace, "--wait=true")
    toleration = {"key": "example.com/broken", "operator": "Exists", "effect": "NoSchedule"}
    _gang(cluster, namespace, "tolerant", 1, [{"name": "dev", "exactly": _exactly("taint", tolerations=[toleration])}])
    bound_pods(cluster, namespace, "tolerant", 1)
    [result] = _results(cluster, namespace, "tolerant")
    assert result["device"] == "broken" and result["tolerations"] == [toleration]


def test_consumable_capacity_shares_one_device_up_to_its_capacity(cluster: Cluster, operator: Any, features: None, namespace: str) -> None:
    share = [{"name": "dev", "exactly": _exactly("nic", capacity={"requests": {"bw": "5"}})}]
    _gang(cluster, namespace, "share", 2, share)
    bound_pods(cluster, namespace, "share", 2)
    results = _results(cluster, namespace, "share")
    assert [(r["request"], r["device"], r["consumedCapacity"]) for r in results] == [("dev", "nic", {"bw": "5"})] * 2
    assert len({r["shareID"] for r in results}) == 2
    _gang(cluster, namespace, "third", 1, share)
    assert "0 of 1" in _short(cluster, namespace, "third"), "10 of bandwidth is spent by two shares of 5"


def test_binding_conditions_are_copied_into_the_allocation(cluster: Cluster, operator: Any, features: None, namespace: str) -> None:
    _gang(cluster, namespace, "bind", 1, [{"name": "dev", "exactly": _exactly("bind")}])

    def allocated() -> list[dict[str, Any]] | None:
        return _results(cluster, namespace, "bind") or None

    [result] = wait_for(allocated, "the claim allocated", timeout=90)
    assert result["device"] == "slow"
    assert result["bindingConditions"] == ["Attached"] and result["bindingFailureConditions"] == ["AttachFailed"]
    claims = cluster.get("resourceclaims", "-n", namespace)["items"]
    assert all(c["status"]["allocation"].get("allocationTimestamp") for c in claims), "kube-scheduler's binding timeout counts from it"
    assert not [p for p in job_pods(cluster, namespace, "bind") if p["spec"].get("nodeName")], "kube-scheduler waits for Attached"
    [claim] = claims
    attached = {"type": "Attached", "status": "True", "reason": "Test", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}
    status = {"status": {"devices": [{"driver": DRIVER, "pool": "bind", "device": "slow", "conditions": [attached]}]}}
    cluster.kubectl(
        "patch",
        "resourceclaim",
        claim["metadata"]["name"],
        "-n",
        namespace,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(status),
    )
    bound_pods(cluster, namespace, "bind", 1)


def test_an_admin_access_claim_consumes_nothing(cluster: Cluster, operator: Any, features: None, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, "resource.kubernetes.io/admin-access=true")
    _gang(cluster, namespace, "user", 1, [{"name": "dev", "exactly": _exactly("fa")}])
    bound_pods(cluster, namespace, "user", 1)
    _gang(cluster, namespace, "monitor", 1, [{"name": "dev", "exactly": _exactly("fa", adminAccess=True)}])
    bound_pods(cluster, namespace, "monitor", 1)
    [used] = _results(cluster, namespace, "user")
    [watched] = _results(cluster, namespace, "monitor")
    assert (used["device"], watched["device"], watched["adminAccess"]) == ("fa-0", "fa-0", True)
    assert "adminAccess" not in used
    _gang(cluster, namespace, "second", 1, [{"name": "dev", "exactly": _exactly("fa")}])
    assert "0 of 1" in _short(cluster, namespace, "second"), "the monitor took nothing, the user still holds fa-0"


EXT = "example.com/ext-gpu"
EXT_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": "ext-gpus"},
    "spec": {
        "selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].kind == 'ext'"}}],
        "extendedResourceName": EXT,
    },
}
EXT_SLICES = [
    _slice(f"features-ext-{i}", f"ext-{i}", [_device(f"ext-{i}-{d}", "ext") for d in range(2)], nodeName=f"worker-{i}") for i in (1, 2)
]


@pytest.fixture
def ext_gpus(cluster: Cluster, features: None) -> Iterator[None]:
    """Two devices of class ext-gpus on worker-1 and worker-2 each; no node advertises example.com/ext-gpu itself."""
    yield from _applied(cluster, [EXT_CLASS, *EXT_SLICES])


def test_an_extended_resource_gets_devices_of_its_class_on_the_pinned_node(
    cluster: Cluster, operator: Any, ext_gpus: None, namespace: str
) -> None:
    """Phalanx plans the devices and pins the ranks; kube-scheduler creates and allocates each pod's own claim."""
    _gang(cluster, namespace, "ext", 2, [], extended={EXT: "2"})
    pods = bound_pods(cluster, namespace, "ext", 2)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["worker-1", "worker-2"], "2 devices each: one rank per node"
    claims = {c["metadata"]["name"]: c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}
    for pod in pods:
        node = pod["spec"]["nodeName"]
        assert pod["metadata"]["annotations"][keys.PINNED_NODE] == node
        claim = claims[pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]]
        assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
        assert [o["uid"] for o in claim["metadata"]["ownerReferences"] if o.get("controller")] == [pod["metadata"]["uid"]]
        assert [r["exactly"]["deviceClassName"] for r in claim["spec"]["devices"]["requests"]] == ["ext-gpus"]
        results = claim["status"]["allocation"]["devices"]["results"]
        pool = f"ext-{node.removeprefix('worker-')}"
        assert sorted(r["device"] for r in results) == [f"{pool}-0", f"{pool}-1"], f"both devices of {node}, where the pod runs"
    [group] = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}=ext")["items"]
    reservation = group["status"]["reservation"]
    assert reservation["claims"] == [], "no claim was written by Phalanx"
    assert sorted((p["node"], len(p["devices"])) for p in reservation["planned"]) == [("worker-1", 2), ("worker-2", 2)]
    events = cluster.get("events", "-n", namespace, "--field-selector", "involvedObject.kind=PodGroup")["items"]
    [released] = [e["message"] for e in events if e["reason"] == "Released"]
    assert "4 device(s) for extended resources left to kube-scheduler on the pinned node(s)" in released


def test_an_extended_resource_gang_that_does_not_fit_names_the_resource_and_the_class(
    cluster: Cluster, operator: Any, ext_gpus: None, namespace: str
) -> None:
    _gang(cluster, namespace, "big", 2, [], extended={EXT: "2"})
    bound_pods(cluster, namespace, "big", 2)
    _gang(cluster, namespace, "more", 1, [], extended={EXT: "1"})
    text = _short(cluster, namespace, "more")
    assert f"short 1 x {EXT} (extended resource, DeviceClass ext-gpus) (0 free of 4)" in text, text
    [pod] = job_pods(cluster, namespace, "more")
    assert not pod["spec"].get("nodeName") and any(g["name"] == keys.SCHEDULING_GATE for g in pod["spec"]["schedulingGates"])
