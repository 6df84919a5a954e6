"""LeaderWorkerSets: LWS's own controller beside the local control plane, and each LWS replica a gang.

The controller is the release built from the Go module proxy, started on the
session cluster by this module (it stays up until the session's cluster goes).
The first test proves it is the real one (it makes a replica's leader and
workers through its StatefulSets and they run). Then LWSs that ask for gangs:
each replica (its leader and its workers) one group, placed whole or not at
all, taken down whole when a member is lost (disruptionMode all) while the
other replicas run on, and a replica added by a scale-up waiting whole.

Slices: the session cluster's, from dra-example-driver's plugin (3 workers x 2 GPUs): 6 GPUs.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator

import pytest
from conftest import WORKLOADS, Cluster, Operator, wait_for

from jobs import gpu_gang, one_gpu_pod_spec
from phalanx.api import keys
from phalanx.leaderworkersets import admission
from phalanx_dev.localcluster import demo, lws

pytestmark = pytest.mark.skipif(bool(os.environ.get("PHALANX_E2E_KUBECONFIG")), reason="LWS's controller runs in the local cluster only")


@pytest.fixture(scope="module", autouse=True)
def lws_controller(cluster: Cluster) -> Iterator[None]:
    """LWS's CRDs, controller and webhooks on the session cluster, before the module's operator starts."""
    local = cluster.local
    assert local is not None
    if not lws.running(local.kubeconfig):
        local.start_lws()
    yield


def lws_body(name: str, replicas: int, size: int, annotations: dict[str, str] | None = None) -> dict:
    """`replicas` groups of a leader and `size - 1` workers, each pod holding one GPU of its own."""
    return {
        "apiVersion": admission.API_VERSION,
        "kind": admission.KIND,
        "metadata": {"name": name, "annotations": annotations or {}},
        "spec": {
            "replicas": replicas,
            "leaderWorkerTemplate": {"size": size, "workerTemplate": {"spec": one_gpu_pod_spec("Always")}},
        },
    }


def _pods(cluster: Cluster, namespace: str, name: str) -> list[dict]:
    return cluster.get("-n", namespace, "pods", "-l", f"{admission.NAME_LABEL}={name}")["items"]


def _replica(pods: list[dict], index: int) -> list[dict]:
    return [p for p in pods if p["metadata"]["labels"].get(admission.GROUP_INDEX_LABEL) == str(index)]


def _live(pods: list[dict]) -> list[dict]:
    return [p for p in pods if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") not in ("Failed", "Succeeded")]


def _bound(pods: list[dict]) -> list[dict]:
    return [p for p in _live(pods) if p["spec"].get("nodeName")]


def _gated(pod: dict) -> bool:
    return keys.SCHEDULING_GATE in [g["name"] for g in pod["spec"].get("schedulingGates") or []]


def _pod_groups(cluster: Cluster, namespace: str, name: str) -> dict[str, dict]:
    groups = cluster.get("-n", namespace, "podgroups", "-l", f"{keys.JOB_NAME_LABEL}={name}")["items"]
    return {g["metadata"]["labels"][admission.GROUP_INDEX_LABEL]: g for g in groups}


def _allocated_claims(cluster: Cluster, namespace: str, pods: list[dict]) -> list[str]:
    """The claims of `pods` that hold a device."""
    names = {s.get("resourceClaimName") for p in pods for s in p["status"].get("resourceClaimStatuses") or []} - {None}
    claims = cluster.get("-n", namespace, "resourceclaims")["items"]
    return [c["metadata"]["name"] for c in claims if c["metadata"]["name"] in names and (c.get("status") or {}).get("allocation")]


def _evict(cluster: Cluster, namespace: str, pod: str) -> None:
    eviction = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": pod, "namespace": namespace}}
    cluster.kubectl("create", "--raw", f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "-f", "-", stdin=json.dumps(eviction))


def test_the_controller_makes_a_replicas_leader_and_workers_and_they_run(cluster: Cluster, namespace: str) -> None:
    """No gang asked: LWS's controller alone makes the leader StatefulSet, the leader pod, its worker StatefulSet
    (owned by the leader pod) and the workers, and kube-scheduler places them; nothing of Phalanx's is involved."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(lws_body("plain", 1, 3)))
    running = wait_for(
        lambda: len(r := [p for p in _pods(cluster, namespace, "plain") if p["status"].get("phase") == "Running"]) == 3 and r,
        "the replica's 3 pods running",
    )
    assert sorted(p["metadata"]["name"] for p in running) == ["plain-0", "plain-0-1", "plain-0-2"]
    owners = {p["metadata"]["name"]: p["metadata"]["ownerReferences"][0]["name"] for p in running}
    assert owners == {"plain-0": "plain", "plain-0-1": "plain-0", "plain-0-2": "plain-0"}, "the leader's set, then the workers'"
    assert not any(_gated(p) for p in running) and not _pod_groups(cluster, namespace, "plain"), "no gang asked, none made"


def test_two_replicas_on_room_for_one_one_runs_whole_the_other_waits_holding_nothing(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """3 of the 6 GPUs go to a gang Job; an LWS of 2 replicas x 3 pods fits one replica, not two. One replica runs
    whole; the other's 3 pods wait behind the gate with no member bound and no claim allocated (placed pod by pod,
    as kube-scheduler alone places them, 3 of the 6 pods would run: parts of both replicas, or one whole and none
    of the other by luck only). Once the Job is gone, the second replica runs whole too."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(gpu_gang("holder", 3)))
    wait_for(
        lambda: (
            len([p for p in _live(cluster.get("-n", namespace, "pods", "-l", "app=holder")["items"]) if p["spec"].get("nodeName")]) == 3
        ),
        "the Job's 3 ranks bound",
    )

    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(lws_body("serve", 2, 3, {keys.MIN_COUNT: "3"})))

    def one_whole() -> list[int] | None:
        pods = _pods(cluster, namespace, "serve")
        whole = [i for i in (0, 1) if len(_bound(_replica(pods, i))) == 3]
        return whole if len(_live(pods)) == 6 and len(whole) == 1 else None

    (running,) = wait_for(one_whole, "one replica bound whole, the other's 3 pods made", timeout=120)
    waiting = 1 - running
    for _ in range(10):  # it stays so: the waiting replica is not placed in part
        pods = _pods(cluster, namespace, "serve")
        assert len(_bound(_replica(pods, running))) == 3
        rest = _replica(pods, waiting)
        assert len(rest) == 3 and all(_gated(p) for p in rest), [p["metadata"]["name"] for p in rest]
        assert not _bound(rest), "no member of the waiting replica is bound"
        assert not _allocated_claims(cluster, namespace, rest), "the waiting replica holds no device"
        time.sleep(0.5)
    groups = _pod_groups(cluster, namespace, "serve")
    assert {i: g["spec"]["schedulingPolicy"]["gang"]["minCount"] for i, g in groups.items()} == {"0": 3, "1": 3}, "a gang per replica"
    assert all(g["metadata"]["ownerReferences"][0]["kind"] == "LeaderWorkerSet" for g in groups.values())
    assert len({g["spec"]["workloadRef"]["workloadName"] for g in groups.values()}) == 2, "a Workload per replica"
    pinned = _bound(_replica(_pods(cluster, namespace, "serve"), running))
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in pinned), "Phalanx placed each"
    explained = cluster.explain("serve", namespace)
    assert explained.splitlines()[0] == f"LeaderWorkerSet {namespace}/serve  PodGroup {groups[str(waiting)]['metadata']['name']}", (
        f"the replica that waits is the one explained: {explained}"
    )
    assert f"other groups: {groups[str(running)]['metadata']['name']} (Scheduled)" in explained, explained

    cluster.kubectl("-n", namespace, "delete", "job", "holder", "--wait=false")
    wait_for(lambda: len(_bound(_replica(_pods(cluster, namespace, "serve"), waiting))) == 3, "the second replica bound whole", timeout=120)


def test_a_member_lost_takes_its_replica_down_and_it_comes_back_whole_while_the_other_runs_on(
    cluster: Cluster, operator: Operator, namespace: str
) -> None:
    """disruptionMode all over a replica: one worker of replica 0 evicted, every pod of replica 0 goes (Phalanx's
    teardown, and LWS's RecreateGroupOnPodRestart beside it) and its new pods are placed whole again; replica 1's
    pods are the same pods throughout."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl(
        "-n", namespace, "apply", "-f", "-", stdin=json.dumps(lws_body("serve", 2, 3, {keys.POLICY: "gang", keys.DISRUPTION_MODE: "all"}))
    )
    first = wait_for(lambda: len(b := _bound(_pods(cluster, namespace, "serve"))) == 6 and b, "both replicas bound whole", timeout=120)
    zero, one = ({p["metadata"]["uid"] for p in _replica(first, i)} for i in (0, 1))
    victim = next(p for p in _replica(first, 0) if p["metadata"]["labels"].get(admission.WORKER_INDEX_LABEL) == "1")
    _evict(cluster, namespace, victim["metadata"]["name"])

    def back_whole() -> list[dict] | None:
        pods = _pods(cluster, namespace, "serve")
        assert {p["metadata"]["uid"] for p in _replica(pods, 1)} == one, "replica 1 ran on untouched"
        new = _bound(_replica(pods, 0))
        return new if len(new) == 3 and not zero & {p["metadata"]["uid"] for p in new} else None

    again = wait_for(back_whole, "replica 0's every pod replaced and bound whole again", timeout=180)
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in again), "placed by Phalanx"
    groups = _pod_groups(cluster, namespace, "serve")
    assert {i: g["spec"]["schedulingPolicy"]["gang"]["minCount"] for i, g in groups.items()} == {"0": 3, "1": 3}, "the replica's size"
    down = groups["0"]["metadata"]["name"]
    reasons = [
        e["reason"]
        for e in cluster.get("-n", namespace, "events", "--field-selector", f"involvedObject.kind=PodGroup,involvedObject.name={down}")[
            "items"
        ]
    ]
    assert "GangDisrupted" in reasons or "GangTornDown" in reasons, reasons
    other = groups["1"]["metadata"]["name"]
    reasons = [
        e["reason"]
        for e in cluster.get("-n", namespace, "events", "--field-selector", f"involvedObject.kind=PodGroup,involvedObject.name={other}")[
            "items"
        ]
    ]
    assert not {"GangDisrupted", "GangTornDown"} & set(reasons), reasons


def test_a_scale_up_adds_replicas_that_each_wait_whole(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """An LWS of 1 replica x 3 runs; scaled to 3 replicas with room for one more, the new replicas get a PodGroup
    each, one is placed whole and the other waits whole, holding nothing."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(lws_body("serve", 1, 3, {keys.POLICY: "gang"})))
    wait_for(lambda: len(_bound(_pods(cluster, namespace, "serve"))) == 3, "replica 0 bound whole", timeout=120)
    cluster.kubectl("-n", namespace, "patch", "lws", "serve", "--type=merge", "-p", json.dumps({"spec": {"replicas": 3}}))

    def settled() -> list[int] | None:
        pods = _pods(cluster, namespace, "serve")
        whole = [i for i in (1, 2) if len(_bound(_replica(pods, i))) == 3]
        return whole if len(_live(pods)) == 9 and len(whole) == 1 else None

    (placed,) = wait_for(settled, "one new replica bound whole, the other's pods made", timeout=120)
    rest = _replica(_pods(cluster, namespace, "serve"), 3 - placed)
    assert len(rest) == 3 and all(_gated(p) for p in rest) and not _bound(rest)
    assert not _allocated_claims(cluster, namespace, rest)
    assert sorted(_pod_groups(cluster, namespace, "serve")) == ["0", "1", "2"], "a PodGroup for each new replica"


def test_a_gang_lws_that_cannot_be_honoured_is_refused_naming_the_field(cluster: Cluster, operator: Operator, namespace: str) -> None:
    too_many = cluster.kubectl(
        "-n", namespace, "apply", "-f", "-", stdin=json.dumps(lws_body("big", 2, 3, {keys.MIN_COUNT: "4"})), check=False
    )
    assert too_many.returncode != 0
    assert f"metadata.annotations[{keys.MIN_COUNT}]" in too_many.stderr and "spec.leaderWorkerTemplate.size" in too_many.stderr, (
        too_many.stderr
    )
    body = lws_body("ready", 1, 3, {keys.POLICY: "gang"})
    body["spec"]["startupPolicy"] = "LeaderReady"
    leader_ready = cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(body), check=False)
    assert leader_ready.returncode != 0 and "spec.startupPolicy" in leader_ready.stderr, leader_ready.stderr


def test_a_rolling_update_replaces_one_replica_at_a_time_each_placed_whole(cluster: Cluster, operator: Operator, namespace: str) -> None:
    """Both replicas fill the 6 GPUs; a new template rolls them (LWS's defaults: one replica unavailable at a time,
    no surge). Each replaced replica's pods go before its replacement is placed (there is no room for both), and the
    replacement is placed whole: at no look is a member of a replica's new revision bound unless all 3 exist and
    hold their devices (Phalanx reserves the whole replica before it lifts a gate; kube-scheduler alone binds the
    first that fits), and every pod ends on the new revision, placed by Phalanx."""
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("-n", namespace, "apply", "-f", "-", stdin=json.dumps(lws_body("serve", 2, 3, {keys.POLICY: "gang"})))
    first = wait_for(lambda: len(b := _bound(_pods(cluster, namespace, "serve"))) == 6 and b, "both replicas bound whole", timeout=120)
    old = {p["metadata"]["labels"]["leaderworkerset.sigs.k8s.io/template-revision-hash"] for p in first}
    assert len(old) == 1
    patch = {"spec": {"leaderWorkerTemplate": {"workerTemplate": {"metadata": {"labels": {"revision": "2"}}}}}}
    cluster.kubectl("-n", namespace, "patch", "lws", "serve", "--type=merge", "-p", json.dumps(patch))
    deadline = time.monotonic() + 240
    looks = 0
    while True:
        pods = _pods(cluster, namespace, "serve")
        for i in (0, 1):
            new = [p for p in _live(_replica(pods, i)) if p["metadata"]["labels"].get("revision") == "2"]
            if _bound(new):  # its members bind one by one once released, but only once all of it was reserved
                held = _allocated_claims(cluster, namespace, new)
                assert len(new) == len(held) == 3, f"replica {i} placed in part: {len(_bound(new))} bound, {len(held)} of 3 claims"
        looks += 1
        done = [p for p in _bound(pods) if p["metadata"]["labels"].get("revision") == "2"]
        if len(done) == 6 and len(_live(pods)) == 6:
            break
        assert time.monotonic() < deadline, f"the rollout did not end: {len(done)} of 6 new pods bound"
        time.sleep(0.3)
    assert all(p["metadata"]["annotations"][keys.PINNED_NODE] == p["spec"]["nodeName"] for p in done), "placed by Phalanx"
    assert not {p["metadata"]["uid"] for p in first} & {p["metadata"]["uid"] for p in done}, "every pod was replaced"
    assert looks > 3, "the rollout was watched"
