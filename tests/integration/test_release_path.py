"""The release path strands nothing, on the local control plane: lost writes, refused gate lifts, members
lost before binding, pod anti-affinity, and devices shared through admin access.

The operator here runs with a short bind deadline (8 s), so a released group
that cannot reach minCount bound is torn down within a test's patience.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, started_operator, wait_for
from kubernetes_asyncio import client, config

import flakyapi
from jobs import gpu_gang, one_gpu_pod_spec
from phalanx.api import keys
from phalanx.kube.client import Conflict, Kube, claim_path, custom_path
from phalanx.kube.informers import ClusterView
from phalanx.planner import Fits, plan
from phalanx.planner.model import Group
from phalanx.scheduling import accessors, deallocation, inputs, snapshots, teardown
from phalanx.scheduling.holes import Holes
from phalanx.scheduling.outcome import NotLeading, ReleaseAborted
from phalanx.scheduling.reserve import Releaser
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]
DEADLINE = 8


@pytest.fixture(scope="module")
def fast_operator(cluster: Cluster) -> Iterator[operatorproc.OperatorProcess | None]:
    if cluster.local is None:
        yield None
        return
    yield from started_operator(cluster.local, extra_args=("--bind-deadline", str(DEADLINE)))


def _pods(cluster: Cluster, namespace: str, job: str) -> list[dict]:
    pods = cluster.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _pod_group(cluster: Cluster, namespace: str, job: str) -> dict:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    return items[0] if items else {}


def _condition(pg: dict) -> dict:
    for cond in (pg.get("status") or {}).get("conditions") or []:
        if cond["type"] == keys.INITIALLY_SCHEDULED:
            return cond
    return {}


def _bound(pods: list[dict]) -> list[dict]:
    return [p for p in pods if p["spec"].get("nodeName")]


def _held(cluster: Cluster) -> list[tuple[str, str, str]]:
    return [
        (r["driver"], r["pool"], r["device"])
        for c in cluster.get("resourceclaims", "-A")["items"]
        if (c.get("status") or {}).get("allocation")
        for r in c["status"]["allocation"]["devices"]["results"]
        if not r.get("adminAccess")
    ]


def _gated_pods_holding_devices(cluster: Cluster, namespace: str) -> list[str]:
    claims = {c["metadata"]["name"]: c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}
    out = []
    for pod in cluster.get("pods", "-n", namespace)["items"]:
        if not any(g["name"] == keys.SCHEDULING_GATE for g in pod["spec"].get("schedulingGates") or []):
            continue
        for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
            if (claims.get(status.get("resourceClaimName")) or {}).get("status", {}).get("allocation"):
                out.append(pod["metadata"]["name"])
    return out


@pytest.fixture
def admission_policy(cluster: Cluster) -> Iterator[Any]:
    """Cluster-scoped ValidatingAdmissionPolicies made by a test, removed afterwards."""
    made: list[str] = []

    def make(name: str, namespace: str, resources: list[str], expression: str, message: str, api_group: str = "") -> None:
        policy = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {"apiGroups": [api_group], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"], "resources": resources}
                    ],
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                },
                "validations": [{"expression": expression, "message": message}],
            },
        }
        binding = {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [policy, binding]}))
        made.append(name)
        time.sleep(2)  # the API server's policy informer must have it before the test relies on it

    yield make
    for name in made:
        cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found", check=False)


def evict(cluster: Cluster, namespace: str, pod: str) -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-", stdin=json.dumps(eviction))


def remove_policy(cluster: Cluster, name: str) -> None:
    cluster.kubectl("delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", name, "--ignore-not-found")
    time.sleep(2)


def test_a_refused_gate_lift_strands_no_device_and_says_why(
    cluster: Cluster, fast_operator: Any, namespace: str, admission_policy: Any
) -> None:
    """Rank 0's gate lift is refused by policy while the others' go through: the group is torn down at once."""
    name = f"no-lift-{namespace}"
    admission_policy(
        name,
        namespace,
        ["pods"],
        "!(object.metadata.name.startsWith('refused-0-') && has(oldObject.spec.schedulingGates) "
        f"&& oldObject.spec.schedulingGates.exists(g, g.name == '{keys.SCHEDULING_GATE}') "
        f"&& !(has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == '{keys.SCHEDULING_GATE}')))",
        "test policy: rank 0 stays gated",
    )
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("refused", 4, backoff_limit=0)))

    def torn_down() -> dict | None:
        cond = _condition(_pod_group(cluster, namespace, "refused"))
        return cond if cond.get("reason") in ("GangTornDown", "TearingDown") else None

    cond = wait_for(torn_down, "the half-released gang torn down", timeout=60)
    assert "refused" in cond["message"] and "test policy: rank 0 stays gated" in cond["message"], cond
    events = cluster.get("events", "-n", namespace, "--field-selector", "reason=GangTornDown")["items"]
    assert any(e["involvedObject"]["kind"] == "Pod" for e in events), "each evicted member has an Event"
    # The refusal repeats on every admission of the gang: a gated pod holds a device only for the moment
    # between reserve and lift, never as long as the bind deadline.
    first_seen: dict[str, float] = {}
    watch_until = time.monotonic() + 2 * DEADLINE
    while time.monotonic() < watch_until:
        now = time.monotonic()
        holding = set(_gated_pods_holding_devices(cluster, namespace))
        first_seen = {pod: first_seen.get(pod, now) for pod in holding}
        stranded = {pod: round(now - since, 1) for pod, since in first_seen.items() if now - since > DEADLINE}
        assert not stranded, f"gated pods holding devices for longer than the deadline: {stranded}"
        time.sleep(0.5)
    remove_policy(cluster, name)
    wait_for(lambda: len(_bound(_pods(cluster, namespace, "refused"))) == 4, "all 4 bound once the policy is gone", timeout=90)
    job = cluster.get("job", "refused", "-n", namespace)
    assert not [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed"], "podFailurePolicy kept the Job alive"


def test_a_member_lost_before_binding_gets_the_group_torn_down_and_readmitted_whole(
    cluster: Cluster, fast_operator: Any, namespace: str, admission_policy: Any
) -> None:
    name = f"no-bind-{namespace}"
    admission_policy(name, namespace, ["pods/binding"], "!object.metadata.name.startsWith('lost-0-')", "test policy: rank 0 cannot bind")
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("lost", 4, backoff_limit=0)))
    wait_for(lambda: len(_bound(_pods(cluster, namespace, "lost"))) == 3, "3 of 4 members bound, rank 0 refused")
    first = {p["metadata"]["uid"] for p in _pods(cluster, namespace, "lost")}
    rank0 = next(p for p in _pods(cluster, namespace, "lost") if not p["spec"].get("nodeName"))
    evict(cluster, namespace, rank0["metadata"]["name"])  # lost as a drain or a descheduler would take it
    lost_at = time.monotonic()

    events = wait_for(
        lambda: cluster.get("events", "-n", namespace, "--field-selector", "reason=GangDisrupted,involvedObject.kind=PodGroup")["items"],
        "the group torn down for its lost member",
        timeout=DEADLINE + 30,
    )
    torn_down_after = time.monotonic() - lost_at
    message = events[0]["message"]
    assert f"member {rank0['metadata']['name']}" in message and "disruptionMode all takes the whole group down" in message, message
    deadline = cluster.get("events", "-n", namespace, "--field-selector", "reason=GangTornDown,involvedObject.kind=PodGroup")["items"]
    assert not deadline, "torn down for the loss, not left to the bind deadline"
    remove_policy(cluster, name)

    def whole_again() -> list[dict] | None:
        pods = _pods(cluster, namespace, "lost")
        return pods if len(_bound(pods)) == 4 and not {p["metadata"]["uid"] for p in pods} & first else None

    wait_for(whole_again, "the gang admitted again whole, every member new", timeout=180)  # the Job's back-off doubles per failure
    job = cluster.get("job", "lost", "-n", namespace)
    assert not [c for c in job["status"].get("conditions") or [] if c["type"] == "Failed"], "podFailurePolicy kept the Job alive"
    held = _held(cluster)
    assert len(held) == len(set(held)) == 4, held
    print(f"member lost -> group torn down in {torn_down_after:.1f}s (the bind deadline, {DEADLINE}s, not waited for)")


def test_a_member_beyond_min_count_kube_scheduler_never_binds_is_taken_down_and_frees_its_device(
    cluster: Cluster, fast_operator: Any, namespace: str, admission_policy: Any
) -> None:
    """Three ranks, minCount 2, disruptionMode all: rank 2's binding is refused by policy, so the gang is Scheduled
    with ranks 0 and 1 and rank 2, created once they run, stays released (pinned, gate lifted, its device reserved)
    and unbound. At the bind deadline rank 2 leaves the record and is taken down, its device freed; the running ranks
    are left alone (its going is no loss of the gang's), and its Job creates it again, placed afresh once binding is
    allowed."""
    name = f"no-bind-{namespace}"
    admission_policy(name, namespace, ["pods/binding"], "!object.metadata.name.startsWith('beyond-2-')", "test policy: rank 2 cannot bind")
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    job = gpu_gang("beyond", 3, mode="all")
    job["metadata"]["annotations"][keys.MIN_COUNT] = "2"
    # ranks 0 and 1 first, rank 2 once they are Scheduled: the Job controller creates ranks 1 and 2 in one batch, in
    # either order, and a quorum of ranks 0 and 2 is another story (a gang that never has minCount bound, torn down
    # at each bind deadline; seen in CI, each Job's recreation putting rank 2 first again)
    job["spec"]["parallelism"] = 2
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    wait_for(lambda: _condition(_pod_group(cluster, namespace, "beyond")).get("status") == "True", "Scheduled with ranks 0 and 1 bound")
    running = {p["metadata"]["uid"] for p in _bound(_pods(cluster, namespace, "beyond"))}
    assert len(running) == 2, running
    cluster.kubectl("patch", "job", "beyond", "-n", namespace, "--type=merge", "-p", json.dumps({"spec": {"parallelism": 3}}))

    def released_unbound() -> dict[str, Any] | None:
        left = [p for p in _pods(cluster, namespace, "beyond") if not p["spec"].get("nodeName")]
        return left[0] if len(left) == 1 and not accessors.gated(left[0]) else None

    stuck = wait_for(released_unbound, "rank 2 released beside the running ranks")
    assert keys.PINNED_NODE in stuck["metadata"]["annotations"], "rank 2 was released, pinned"
    claim = cluster.get("resourceclaims", "-n", namespace)["items"]
    (held,) = [c for c in claim if any(o["uid"] == stuck["metadata"]["uid"] for o in c["metadata"].get("ownerReferences") or [])]
    assert (held.get("status") or {}).get("allocation"), "its device reserved while kube-scheduler cannot bind it"

    events = wait_for(
        lambda: cluster.get("events", "-n", namespace, "--field-selector", "reason=MemberNotBound,involvedObject.kind=PodGroup")["items"],
        "rank 2 taken down at its bind deadline",
        timeout=DEADLINE + 30,
    )
    assert stuck["metadata"]["name"] in events[0]["message"] and "not bound by kube-scheduler" in events[0]["message"], events[0]

    def freed() -> bool:
        now = {(c["metadata"]["uid"]): c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}
        gone = now.get(held["metadata"]["uid"])
        return gone is None or not (gone.get("status") or {}).get("allocation")

    wait_for(freed, "rank 2's device freed", timeout=30)
    remove_policy(cluster, name)
    again = wait_for(
        lambda: len(b := _bound(_pods(cluster, namespace, "beyond"))) == 3 and b, "rank 2 created again, placed and bound", timeout=60
    )
    assert running <= {p["metadata"]["uid"] for p in again}, "ranks 0 and 1 ran on, untouched"
    assert stuck["metadata"]["uid"] not in {p["metadata"]["uid"] for p in again}
    disrupted = cluster.get("events", "-n", namespace, "--field-selector", "reason=GangDisrupted,involvedObject.kind=PodGroup")["items"]
    assert not disrupted, "rank 2's going was no loss of the gang's"
    assert len(_held(cluster)) == len(set(_held(cluster))), "no device held twice"


RACE = "example.com/race-gpu"
RACE_DRIVER = "race.example.com"


@pytest.fixture
def race_gpus(cluster: Cluster) -> Iterator[None]:
    """One device of class race-gpus (serving example.com/race-gpu) on worker-1 and worker-2 each."""
    objects: list[dict[str, Any]] = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": "race-gpus"},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{RACE_DRIVER}'"}}], "extendedResourceName": RACE},
        }
    ]
    objects += [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"race-{node}"},
            "spec": {
                "driver": RACE_DRIVER,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "nodeName": node,
                "devices": [{"name": "gpu-0"}],
            },
        }
        for node in ("worker-1", "worker-2")
    ]
    listed = json.dumps({"apiVersion": "v1", "kind": "List", "items": objects})
    cluster.kubectl("apply", "-f", "-", stdin=listed)
    try:
        yield
    finally:
        cluster.kubectl("delete", "-f", "-", "--wait=false", stdin=listed, check=False)


def test_extended_resource_devices_kube_scheduler_cannot_allocate_end_in_a_teardown_at_the_bind_deadline(
    cluster: Cluster, fast_operator: Any, namespace: str, admission_policy: Any, race_gpus: None
) -> None:
    """The devices for an extended resource are only planned: if kube-scheduler cannot allocate them on the pinned
    node after the gate lift (here a policy refuses its claim, as a pod taking them first would), the bind deadline
    tears the gang down, nothing stays held, and the gang runs whole once it can."""
    name = f"no-special-claim-{namespace}"
    admission_policy(
        name,
        namespace,
        ["resourceclaims"],
        "!(has(object.metadata.annotations) && 'resource.kubernetes.io/extended-resource-claim' in object.metadata.annotations)",
        "test policy: no extended-resource claim",
        api_group="resource.k8s.io",
    )
    job = gpu_gang("race", 2, backoff_limit=0)
    spec = job["spec"]["template"]["spec"]
    del spec["resourceClaims"]
    spec["containers"][0]["resources"] = {"requests": {"cpu": "50m", RACE: "1"}, "limits": {RACE: "1"}}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    first = wait_for(lambda: (p := _pods(cluster, namespace, "race")) and len(p) == 2 and p, "2 ranks created")
    events = wait_for(
        lambda: cluster.get("events", "-n", namespace, "--field-selector", "reason=GangTornDown,involvedObject.kind=PodGroup")["items"],
        "the group torn down at the bind deadline",
        timeout=DEADLINE + 60,
    )
    assert "only 0 of minCount 2 members bound" in events[0]["message"], events[0]["message"]
    released = cluster.get("events", "-n", namespace, "--field-selector", "reason=Released,involvedObject.kind=PodGroup")["items"]
    assert any("2 device(s) for extended resources left to kube-scheduler on the pinned node(s)" in e["message"] for e in released)
    assert not [c for c in cluster.get("resourceclaims", "-n", namespace)["items"] if (c.get("status") or {}).get("allocation")]
    remove_policy(cluster, name)

    def whole_again() -> list[dict] | None:
        pods = _pods(cluster, namespace, "race")
        old = {p["metadata"]["uid"] for p in first}
        return pods if len(_bound(pods)) == 2 and not {p["metadata"]["uid"] for p in pods} & old else None

    pods = wait_for(whole_again, "the gang admitted again whole, every member new", timeout=180)
    assert sorted(p["spec"]["nodeName"] for p in pods) == ["worker-1", "worker-2"]
    claims = {c["metadata"]["name"]: c for c in cluster.get("resourceclaims", "-n", namespace)["items"]}
    for pod in pods:
        claim = claims[pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]]
        [result] = claim["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["pool"]) == (RACE_DRIVER, pod["spec"]["nodeName"])


def test_required_anti_affinity_spreads_a_gang_one_rank_per_node(cluster: Cluster, fast_operator: Any, namespace: str) -> None:
    anti = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
            ]
        }
    }
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("spread", 3, backoff_limit=0, affinity=anti)))
    pods = wait_for(lambda: (b := _bound(_pods(cluster, namespace, "spread"))) and len(b) == 3 and b, "3 ranks bound despite anti-affinity")
    assert len({p["spec"]["nodeName"] for p in pods}) == 3, [p["spec"]["nodeName"] for p in pods]


def test_a_bound_member_kube_scheduler_unreserved_is_reserved_again_by_the_resourceclaim_controller(
    cluster: Cluster, fast_operator: Any, namespace: str
) -> None:
    """kube-scheduler's Unreserve after a binding that went through though it saw it fail (an API server killed under
    it) takes a bound member out of its claim's reservedFor and leaves the allocation. The fault checker counts that
    as no loss on the word of kube-controller-manager's resourceclaim controller, which reserves an allocated claim
    for its bound pod again; this holds it to that (admin sends Unreserve's very patch), and the operator keeps out."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("unres", 2, backoff_limit=0)))
    member = wait_for(lambda: (b := _bound(_pods(cluster, namespace, "unres"))) and len(b) == 2 and b[0], "the gang bound")
    uid = member["metadata"]["uid"]
    name = member["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    before = cluster.get("resourceclaim", name, "-n", namespace, "--show-managed-fields")
    assert uid in {r["uid"] for r in before["status"]["reservedFor"]}
    unreserve = {"metadata": {"uid": before["metadata"]["uid"]}, "status": {"reservedFor": [{"$patch": "delete", "uid": uid}]}}
    patch = ["-n", namespace, "patch", "resourceclaim", name, "--subresource=status", "--type=strategic", "-p", json.dumps(unreserve)]
    stripped = json.loads(cluster.kubectl(*patch, "-o", "json").stdout)
    assert not stripped["status"].get("reservedFor") and stripped["status"]["allocation"], "the strip happened, the devices stay held"

    def reserved_again() -> dict | None:
        claim = cluster.get("resourceclaim", name, "-n", namespace, "--show-managed-fields")
        return claim if uid in {r["uid"] for r in claim["status"].get("reservedFor") or []} else None

    claim = wait_for(reserved_again, f"{member['metadata']['name']} reserved again on {name}", timeout=30)
    assert claim["status"]["allocation"] == before["status"]["allocation"], "the same devices, not a new allocation"
    assert "kube-controller-manager" not in _reservers(before) and "kube-controller-manager" in _reservers(claim), [
        claim["metadata"]["managedFields"]
    ]


def _reservers(claim: dict) -> set[str]:
    """The field managers that own part of the claim's reservedFor."""
    return {
        m["manager"]
        for m in claim["metadata"].get("managedFields") or []
        if m.get("subresource") == "status" and "f:reservedFor" in ((m.get("fieldsV1") or {}).get("f:status") or {})
    }


class HeldClaimWrites:
    """Holds Phalanx's first allocation write to each claim of the pods whose name starts with `prefix` until let go
    (or `hold` seconds), and notes, by time, what it held and each gate lift it saw: the order the API server saw them in."""

    def __init__(self, prefix: str, hold: float = 20.0) -> None:
        self.prefix = prefix
        self.hold = hold
        self.go = threading.Event()
        self.seen: list[tuple[float, str, str]] = []
        """(time, what: "held", "let go" or "lift", object name)."""
        self.lock = threading.Lock()

    def review(self, request: dict[str, Any]) -> dict[str, Any]:
        obj, old = request.get("object") or {}, request.get("oldObject") or {}
        name = obj.get("metadata", {}).get("name", "")
        if request.get("resource", {}).get("resource") == "pods":
            gated = [_gate_of(old), _gate_of(obj)]
            if gated == [True, False]:
                with self.lock:
                    self.seen.append((time.monotonic(), "lift", name))
            return {"uid": request["uid"], "allowed": True}
        owners = [o.get("name", "") for o in obj.get("metadata", {}).get("ownerReferences") or [] if o.get("kind") == "Pod"]
        allocating = not (old.get("status") or {}).get("allocation") and (obj.get("status") or {}).get("allocation")
        if allocating and any(o.startswith(self.prefix) for o in owners):
            with self.lock:
                self.seen.append((time.monotonic(), "held", name))
            self.go.wait(self.hold)
            with self.lock:
                self.seen.append((time.monotonic(), "let go", name))
        return {"uid": request["uid"], "allowed": True}


def _gate_of(pod: dict[str, Any]) -> bool:
    return any(g.get("name") == keys.SCHEDULING_GATE for g in (pod.get("spec") or {}).get("schedulingGates") or [])


def _metric(handle: operatorproc.OperatorProcess, name: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{handle.metrics_port}/metrics", timeout=5) as answer:
        for line in answer.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def test_gangs_released_at_once_count_the_releases_under_way_and_never_share_a_device(
    cluster: Cluster, fast_operator: Any, namespace: str
) -> None:
    """Two gangs of 2 wait for the same GPUs (a maintainer's DeviceTaintRule taints every one); the rule goes, and
    one cycle plans both. The first's allocation writes are held by a webhook; the second is planned with the first
    counted as done, so it takes other devices, and is released while the first is held (the webhook saw its gate
    lifts in between: the scenario happened). Planned on the cluster alone, the second would take the first's GPUs
    (the planner packs) and one release would be rolled back. None is."""
    assert fast_operator is not None, "needs the local control plane (`./task test` starts it): a webhook on loopback"
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    maintenance = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": f"maintenance-{namespace}"},
        "spec": {"deviceSelector": {"driver": "gpu.example.com"}, "taint": {"key": "test.phalanx.dev/maintenance", "effect": "NoSchedule"}},
    }
    cluster.kubectl("apply", "-f", "-", stdin=json.dumps(maintenance))
    held = HeldClaimWrites("first-")
    rules = [
        {"apiGroups": ["resource.k8s.io"], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["resourceclaims/status"]},
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["pods"]},
    ]
    try:
        with flakyapi.validating_webhook(cluster, namespace, held.review, rules, name="held-release", timeout=30):
            before = {m: _metric(fast_operator, m) for m in ("phalanx_releases_overlapped_total", "phalanx_reservation_rollbacks_total")}
            for name in ("first", "second"):  # ahead in the line: older, or of the same second and first by name
                cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang(name, 2, backoff_limit=0)))
            for name in ("first", "second"):
                wait_for(
                    lambda name=name: _condition(_pod_group(cluster, namespace, name)).get("reason") == "Unschedulable", f"{name} waits"
                )
            cluster.kubectl("delete", "devicetaintrule", maintenance["metadata"]["name"])
            second = wait_for(
                lambda: (b := _bound(_pods(cluster, namespace, "second"))) and len(b) == 2 and b, "the second bound", timeout=30
            )
            assert not _bound(_pods(cluster, namespace, "first")), "the first is still held"
            held.go.set()
            first = wait_for(lambda: (b := _bound(_pods(cluster, namespace, "first"))) and len(b) == 2 and b, "the first bound", timeout=30)
    finally:
        held.go.set()
        cluster.kubectl("delete", "devicetaintrule", maintenance["metadata"]["name"], "--ignore-not-found")
    seen = list(held.seen)
    held_at = min(t for t, what, _ in seen if what == "held")
    let_go = max(t for t, what, _ in seen if what == "let go")
    lifts = {name: t for t, what, name in seen if what == "lift"}
    assert all(held_at < lifts[p["metadata"]["name"]] < let_go for p in second), seen
    assert all(lifts[p["metadata"]["name"]] > let_go for p in first), seen
    devices = {
        job: {
            tuple(r[k] for k in ("driver", "pool", "device"))
            for c in cluster.get("resourceclaims", "-n", namespace)["items"]
            if any(o["name"].startswith(job + "-") for o in c["metadata"].get("ownerReferences") or [])
            for r in c["status"]["allocation"]["devices"]["results"]
        }
        for job in ("first", "second")
    }
    assert len(devices["first"]) == len(devices["second"]) == 2 and not devices["first"] & devices["second"], devices
    after = {m: _metric(fast_operator, m) for m in before}
    assert after["phalanx_releases_overlapped_total"] > before["phalanx_releases_overlapped_total"], after
    assert after["phalanx_reservation_rollbacks_total"] == before["phalanx_reservation_rollbacks_total"], "nothing was rolled back"
    assert not cluster.get("events", "-n", namespace, "--field-selector", "reason=ReservationRolledBack")["items"]


def test_an_admin_access_monitor_shares_devices_with_everyone(cluster: Cluster, fast_operator: Any, namespace: str) -> None:
    cluster.kubectl("label", "namespace", namespace, "resource.kubernetes.io/admin-access=true")
    monitor_claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "monitor"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "all", "exactly": {"deviceClassName": "gpu.example.com", "allocationMode": "All", "adminAccess": True}}
                ]
            }
        },
    }
    monitor = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "monitor"},
        "spec": {
            **one_gpu_pod_spec(),
            "nodeSelector": {"kubernetes.io/hostname": "worker-1"},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "monitor"}],
        },
    }
    bare = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bare"},
        "spec": {**one_gpu_pod_spec(), "nodeSelector": {"kubernetes.io/hostname": "worker-1"}},
    }
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [monitor_claim, monitor]})
    )
    wait_for(lambda: cluster.get("pod", "monitor", "-n", namespace)["spec"].get("nodeName"), "the monitor bound with admin access")
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(bare))
    wait_for(lambda: cluster.get("pod", "bare", "-n", namespace)["spec"].get("nodeName"), "a bare GPU pod bound beside the monitor")
    survivors = {n: cluster.get("pod", n, "-n", namespace)["metadata"]["uid"] for n in ("monitor", "bare")}
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("beside", 5, backoff_limit=0)))
    pods = wait_for(lambda: (b := _bound(_pods(cluster, namespace, "beside"))) and len(b) == 5 and b, "a 5-rank gang on the 5 free GPUs")
    assert "worker-1" in {p["spec"]["nodeName"] for p in pods}, "the gang used the monitored node's free GPU"
    time.sleep(3)  # a repair would act within a cycle
    for name, uid in survivors.items():
        pod = cluster.get("pod", name, "-n", namespace)
        assert pod["metadata"]["uid"] == uid and not pod["metadata"].get("deletionTimestamp"), f"{name} was disturbed"
    evictions = cluster.get("events", "-n", namespace, "--field-selector", "reason=DeviceDoubleAllocated")["items"]
    assert not evictions, [e["message"] for e in evictions]


class _LosingKube(Kube):
    """Lets a second writer change a claim between our read and our conditional allocation write: a real lost race.

    Twice on the same claim: the first write goes from the watch's copy, and a Conflict there is tried once more on
    a fresh read, which the rival beats as well."""

    def __init__(self, api: client.ApiClient, rival: Kube) -> None:
        super().__init__(api)
        self.rival = rival
        self.provoked: list[str] = []
        self.conflicts = 0

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        first = not self.provoked or (path == self.provoked[0] and len(self.provoked) < 2)
        if path.endswith("/status") and "/resourceclaims/" in path and first and (patch.get("status") or {}).get("allocation"):
            self.provoked.append(path)
            labels = {"rival": f"wrote-first-{len(self.provoked)}"}  # a new value each time: a no-op patch changes no version
            await self.rival.merge_patch(path.removesuffix("/status"), {"metadata": {"labels": labels}})
        try:
            return await super().merge_patch(path, patch)
        except Conflict:
            self.conflicts += 1
            raise


async def _api(cluster: Cluster) -> client.ApiClient:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(cluster.kubeconfig), client_configuration=configuration)
    return client.ApiClient(configuration)


def _hand_made_gang(cluster: Cluster, namespace: str, *, grace: int = 1) -> list[dict[str, Any]]:
    """Two gated one-GPU pods and their PodGroup, made by hand: no Job, and no operator acts on it. The job-name label
    without a controlling Job makes it nobody's group (without it, it would be a user's own, and the module's running
    operator would resume or undo the release the test is making)."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    pod_group = {
        "apiVersion": keys.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "by-hand", "labels": {keys.JOB_NAME_LABEL: "none"}},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}},
    }
    pods = [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"by-hand-{i}"},
            "spec": {**one_gpu_pod_spec(grace=grace), "schedulingGates": [{"name": keys.SCHEDULING_GATE}]},
        }
        for i in range(2)
    ]
    cluster.kubectl(
        "apply", "-n", namespace, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": [pod_group, *pods]})
    )
    return pods


async def _plan_by_hand(view: ClusterView, namespace: str, pods: list[dict[str, Any]]) -> Fits:
    """The gang's plan on the view, once its members and their claims show there."""

    def members() -> list[dict] | None:
        found = [view.pods.get(namespace, p["metadata"]["name"]) for p in pods]
        if not all(m and accessors.claim_names(m) and all(view.claims.get(namespace, c) for c in accessors.claim_names(m)) for m in found):
            return None
        return found

    for _ in range(150):
        if members():
            break
        await asyncio.sleep(0.2)
    group = Group(namespace, "by-hand", 2, tuple(inputs.member(m, accessors.claim_names(m)) for m in members() or []))
    snapshot = snapshots.build(view.nodes.items(), view.pods.items(), view.slices.items(), view.claims.items(), view.classes.items())
    result = plan(snapshot, group)
    assert isinstance(result, Fits), result
    return result


@contextlib.asynccontextmanager
async def _by_hand(
    cluster: Cluster, namespace: str, *, grace: int = 1
) -> AsyncIterator[tuple[list[dict[str, Any]], Kube, ClusterView, Fits]]:
    """The hand-made gang, a client and a started view of the cluster, and the gang's plan on it."""
    pods = _hand_made_gang(cluster, namespace, grace=grace)
    async with await _api(cluster) as api:
        kube = Kube(api)
        view = ClusterView(kube)
        await view.start()
        try:
            yield pods, kube, view, await _plan_by_hand(view, namespace, pods)
        finally:
            await view.stop()


async def test_a_conditional_allocation_write_that_loses_is_seen_as_lost(cluster: Cluster, namespace: str) -> None:
    """No Job and no operator: two gated pods and a PodGroup made by hand, released by a Releaser in this process."""
    pods = _hand_made_gang(cluster, namespace)
    async with await _api(cluster) as api, await _api(cluster) as rival_api:
        kube = _LosingKube(api, Kube(rival_api))
        view = ClusterView(kube)
        await view.start()
        try:
            group_obj = await kube.get(custom_path("podgroups", namespace, "by-hand"))
            releaser = Releaser(kube, view, Holes(kube), settle=0)

            async def fits() -> Fits:
                return await _plan_by_hand(view, namespace, pods)

            with pytest.raises(ReleaseAborted, match="resourceVersion conflict"):
                await releaser.release(group_obj, await fits())
            assert len(kube.provoked) == kube.conflicts == 2, "the race happened: a rival wrote first and the server refused our writes"
            for p in pods:
                name = accessors.claim_names(view.pods.get(namespace, p["metadata"]["name"]))[0]
                claim = await kube.get(claim_path(namespace, name))
                assert not (claim.get("status") or {}).get("allocation"), f"{name}: nothing stays allocated after the lost race"
            group_obj = await kube.get(custom_path("podgroups", namespace, "by-hand"))
            assert not (group_obj.get("status") or {}).get("reservation"), "the reservation record is cleared"

            await releaser.release(group_obj, await fits())  # planned again: now nothing races
            await asyncio.to_thread(
                wait_for, lambda: len(_bound(cluster.get("pods", "-n", namespace)["items"])) == 2, "both members bound after the retry"
            )
            held = _held(cluster)
            assert len(held) == len(set(held)), f"nothing held twice: {held}"
        finally:
            await view.stop()


async def test_a_release_stops_at_the_first_step_after_its_lease_may_be_lost(cluster: Cluster, namespace: str) -> None:
    """The Lease may be lost between two steps of a release (a renewal starved, the API server slow): the release
    writes nothing more, not even a rollback, so nothing of it can land after the next leader's own writes. What
    was written stays recorded (Reserving) for the next leader to finish or undo."""
    async with _by_hand(cluster, namespace) as (pods, kube, view, fits):
        group_obj = await kube.get(custom_path("podgroups", namespace, "by-hand"))
        claims = [c.name for c in fits.claims]

        def leading() -> bool:
            """Held through the record and the claims' writes, lost once the watch shows them (before the gate lifts)."""
            return not all(accessors.allocated_ids(view.claims.get(namespace, name) or {}) for name in claims)

        releaser = Releaser(kube, view, Holes(kube), settle=0, leading=leading)
        with pytest.raises(NotLeading):
            await releaser.release(group_obj, fits)
        record = (await kube.get(custom_path("podgroups", namespace, "by-hand")))["status"]["reservation"]
        assert record["state"] == "Reserving", "the record stays for the next leader"
        for name in claims:
            claim = await kube.get(claim_path(namespace, name))
            assert (claim.get("status") or {}).get("allocation"), f"{name}: written before the Lease was lost, not rolled back"
        for p in pods:
            pod = await kube.get(f"/api/v1/namespaces/{namespace}/pods/{p['metadata']['name']}")
            assert accessors.gated(pod), f"{p['metadata']['name']}: no gate lifted after the Lease may be lost"


async def test_no_claim_is_freed_under_a_running_pod_whatever_the_watch_shows(cluster: Cluster, namespace: str) -> None:
    """The rollback, the teardown and the freeing of a torn-down gang's claims decide from the watch which claims are
    idle; after an API server restart the watch can show a member still gated that kube-scheduler has bound. Here
    both callers are handed that stale belief for two bound members: each claim must stay allocated and reserved,
    because the last word is a fresh read of its users. A member deleted keeps its claim through its grace period
    (8 s, running), and only once it is gone is the claim freed."""
    async with _by_hand(cluster, namespace, grace=8) as (pods, kube, view, fits):
        stale = {p["metadata"]["uid"]: p for p in (view.pods.get(namespace, p["metadata"]["name"]) for p in pods) if p}
        assert len(stale) == 2 and all(accessors.gated(p) for p in stale.values()), "the belief handed over: both gated"
        releaser = Releaser(kube, view, Holes(kube), settle=0)
        reservation = await releaser.release(await kube.get(custom_path("podgroups", namespace, "by-hand")), fits)
        await asyncio.to_thread(wait_for, lambda: len(_bound(cluster.get("pods", "-n", namespace)["items"])) == 2, "both members bound")

        def claims() -> list[dict[str, Any]]:
            return [cluster.get("resourceclaim", c.name, "-n", namespace) for c in reservation.claims]

        before = claims()
        assert all(accessors.allocated_ids(c) and c["status"].get("reservedFor") for c in before), before
        await deallocation.undo(kube, namespace, reservation.claims)

        def as_read(_: str, name: str) -> dict[str, Any]:
            return next(c for c in before if c["metadata"]["name"] == name)

        freeing = teardown.Freeing(kube)
        # the teardown remembers the members' claims; the sweep is handed the members as gated, never bound
        freeing.watch(stale.values(), as_read)
        assert len(freeing.due(stale, as_read)) == 2, "both claims look idle to the sweep"
        assert await freeing.sweep(stale, as_read) == 0

        for claim, was in zip(claims(), before, strict=True):
            assert claim["status"].get("allocation") == was["status"]["allocation"], f"{claim['metadata']['name']} kept its devices"
            assert claim["status"].get("reservedFor") == was["status"]["reservedFor"], f"{claim['metadata']['name']} kept its users"
        assert len(freeing.pending) == 2, "still remembered: freed once their pods stop"

        # one member deleted runs out its grace period on its device: kept while it runs, freed once it is gone
        member = pods[0]["metadata"]["name"]
        ours = next(c for c in reservation.claims if any(r["name"] == member for r in as_read("", c.name)["status"]["reservedFor"]))
        cluster.kubectl("delete", "pod", member, "-n", namespace, "--wait=false")
        stopping = cluster.get("pod", member, "-n", namespace)
        assert stopping["metadata"].get("deletionTimestamp") and stopping["spec"].get("nodeName"), "running out its grace"
        await deallocation.undo(kube, namespace, [ours])
        assert accessors.allocated_ids(cluster.get("resourceclaim", ours.name, "-n", namespace)), "kept while its pod stops"
        assert cluster.get("pod", member, "-n", namespace)["metadata"]["uid"] == stopping["metadata"]["uid"], "still stopping then"

        loop = asyncio.get_running_loop()

        def freed() -> bool:
            if cluster.kubectl("get", "pod", member, "-n", namespace, check=False).returncode == 0:
                return False
            asyncio.run_coroutine_threadsafe(deallocation.undo(kube, namespace, [ours]), loop).result()
            got = cluster.kubectl("get", "resourceclaim", ours.name, "-n", namespace, "-o", "json", check=False)
            return got.returncode != 0 or not accessors.allocated_ids(json.loads(got.stdout))  # freed, or collected with its pod

        await asyncio.to_thread(wait_for, freed, "the claim freed once its pod is gone", 60)


class _CountingKube(Kube):
    """Counts the fresh reads of PodGroups: what a release's records cost beyond their writes."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(api)
        self.group_reads = 0

    async def get(self, path: str) -> dict[str, Any] | None:
        self.group_reads += "/podgroups/" in path
        return await super().get(path)


async def test_a_record_is_judged_on_the_copy_at_hand_and_read_afresh_only_when_that_copy_is_behind(
    cluster: Cluster, namespace: str
) -> None:
    """Each record of a release is conditional on the PodGroup's resourceVersion. Judged on the copy the release
    already has (the watch's, then its own last write's answer), a release reads no PodGroup at all; a copy that
    moved on (its version, or a record it does not show yet) is read afresh, and only a fresh read that shows
    another record stops the writer (NotLeading)."""
    async with _by_hand(cluster, namespace) as (_, plain, view, fits):
        kube = _CountingKube(plain.api)
        path = custom_path("podgroups", namespace, "by-hand")
        first = await kube.get(path)
        releaser = Releaser(kube, view, Holes(kube), settle=0)
        kube.group_reads = 0
        released = await releaser.release(first, fits)
        assert released.state == "Released" and kube.group_reads == 0, f"{kube.group_reads} PodGroup read(s) for a release"

        copy = await kube.get(path)
        cluster.kubectl("label", "podgroups.scheduling.phalanx.dev", "by-hand", "-n", namespace, "moved=on")
        kube.group_reads = 0
        written = await releaser.record(copy, released, expected=released)
        assert kube.group_reads == 1, "a copy whose version moved on: its write refused (Conflict), then one fresh read"
        assert written["metadata"]["labels"]["moved"] == "on"

        kube.group_reads = 0
        cleared = await releaser.record(first, None, expected=released)
        assert kube.group_reads == 1 and not (cleared.get("status") or {}).get("reservation"), "a copy without the record: read afresh"
        with pytest.raises(NotLeading):
            await releaser.record(first, released, expected=released)
