"""Group-shared claims (KEP-5729, `spec.scheduling.resourceClaims`) on the real API server.

Slices: published here through the API for a driver of our own
(`groupclaims.example.com`): a network-attached pool of 2 fabric channels
(allNodes) and one node-local IMEX domain on worker-2.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, Operator, wait_for

import faultcheck
from jobs import IGNORE_DISRUPTIONS, as_json, bound_pods, job_pods, priority_classes
from phalanx.api import keys, naming
from phalanx.crashpoints import ENV
from phalanx_dev.localcluster import operatorproc

ROOT = Path(__file__).parents[2]

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


def _job(
    name: str, size: int, template: str, *, group: list[dict] | None = None, grace: int = 1, priority_class: str | None = None
) -> dict[str, Any]:
    """A gang of `size` ranks that all use the claim `shared`, made from `template` once for the whole group; once
    deleted a rank runs `grace` seconds more, as on a kubelet."""
    entry = {"name": "shared", "resourceClaimTemplateName": template}
    job = {
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
                    "terminationGracePeriodSeconds": grace,
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
    if priority_class:
        job["spec"]["template"]["spec"]["priorityClassName"] = priority_class
    return job


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


# Failure paths: a teardown, a preemption, a restart and explain, with the group's claim (issue 23 item 4).


def _members(snapshot: faultcheck.Snapshot, job: str) -> list[dict[str, Any]]:
    return [p for p in snapshot.pods if (p["metadata"].get("labels") or {}).get("batch.kubernetes.io/job-name") == job]


def _may_run(pod: dict[str, Any]) -> bool:
    """Bound and not stopped: a deleted member runs out its grace period on the group's device."""
    return bool(pod["spec"].get("nodeName")) and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


def _watch_until(cluster: Cluster, namespace: str, done: Any, what: str, judge: Any, timeout: float = 90) -> list[faultcheck.Snapshot]:
    """Snapshots until `done(snapshot)`, each judged as it is taken (faultcheck's continuous checks and `judge`)."""
    continuous, seen = faultcheck.Continuous(), []
    deadline = time.monotonic() + timeout
    while True:
        snapshot = faultcheck.take(cluster.kubectl, namespace)
        wrong = continuous.check(snapshot) + judge(snapshot)
        assert not wrong, f"after {continuous.snapshots} snapshots: {wrong}\n{faultcheck.summary(snapshot)}"
        seen.append(snapshot)
        if done(snapshot):
            return seen
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout}s: {faultcheck.summary(snapshot)}")


def _claim_of(snapshot: faultcheck.Snapshot, name: str) -> dict[str, Any] | None:
    return next((c for c in snapshot.claims if c["metadata"]["name"] == name), None)


def _group_claim(cluster: Cluster, namespace: str, job: str) -> str:
    return naming.group_claim_name(_pod_group(cluster, namespace, job)["metadata"]["name"], "shared")


def _reserved(claim: dict[str, Any]) -> list[str]:
    return sorted(r["uid"] for r in (claim.get("status") or {}).get("reservedFor") or [])


def _kept_while_running(cluster: Cluster, namespace: str, job: str, uids: set[str], held: dict[str, Any], other: str) -> Any:
    """A judge of snapshots: while any of `job`'s ranks `uids` may run, the group claim `held` keeps its devices (the
    same claim, the same devices) and the claim `other` holds none."""
    devices = _devices(held)

    def judge(snapshot: faultcheck.Snapshot) -> list[str]:
        if not any(p["metadata"]["uid"] in uids and _may_run(p) for p in _members(snapshot, job)):
            return []
        ours, theirs = _claim_of(snapshot, held["metadata"]["name"]), _claim_of(snapshot, other)
        wrong = []
        if ours is None or ours["metadata"]["uid"] != held["metadata"]["uid"] or _devices(ours) != devices:
            wrong.append(f"the group claim no longer holds {devices}: {ours and _devices(ours)}")
        if theirs is not None and _devices(theirs):
            wrong.append(f"{other} holds {_devices(theirs)}")
        # a snapshot reads the pods before the claims: a rank that stopped in between is no loss, so the ranks are
        # read again, after the claims, and only one that still runs then makes the claims wrong
        running = [p["metadata"]["name"] for p in job_pods(cluster, namespace, job) if p["metadata"]["uid"] in uids and _may_run(p)]
        return [f"{running} still run but {w}" for w in wrong] if wrong and running else []

    return judge


def _until_stopped(cluster: Cluster, namespace: str, job: str, uids: set[str], judge: Any) -> list[faultcheck.Snapshot]:
    """Snapshots, judged, until none of `job`'s ranks `uids` may run any more."""
    return _watch_until(
        cluster,
        namespace,
        lambda s: not [p for p in _members(s, job) if p["metadata"]["uid"] in uids and _may_run(p)],
        f"the old ranks of {job} stopped",
        judge,
        timeout=40,
    )


def _back_whole(cluster: Cluster, namespace: str, job: str, size: int, old: set[str]) -> list[dict[str, Any]]:
    """`size` new ranks of `job` bound (none of the `old` uids)."""
    return wait_for(
        lambda: (b := [p for p in bound_pods(cluster, namespace, job, size) if p["metadata"]["uid"] not in old]) and len(b) == size and b,
        f"{job} back whole",
        timeout=120,
    )


def test_a_disrupted_gang_keeps_its_group_claim_while_a_member_runs_and_comes_back_on_it(
    cluster: Cluster, operator: Operator, world: None, namespace: str
) -> None:
    """disruptionMode all: one rank is deleted and the others are torn down; each runs out a 6 s grace period. The
    group's claim stays allocated, on the same channel, while any of them runs, and another gang that needs both
    channels gets neither meanwhile; then the gang comes back whole on its one claim, reserved for the new ranks."""
    _apply(cluster, namespace, _template("one-channel", "channel"), _template("two-channels", "channel", count=2))
    _apply(cluster, namespace, _job("train", 3, "one-channel", grace=6))
    old = bound_pods(cluster, namespace, "train", 3)
    assert next(iter(_pod_group(cluster, namespace, "train")["spec"]["disruptionMode"])) == "all"
    name = _group_claim(cluster, namespace, "train")
    first = _claims(cluster, namespace)[name]
    channel, claim_uid = _devices(first), first["metadata"]["uid"]
    assert len(channel) == 1 and _reserved(first) == sorted(p["metadata"]["uid"] for p in old)
    _apply(cluster, namespace, _job("other", 2, "two-channels"))
    other = wait_for(lambda: _pod_group(cluster, namespace, "other"), "the other gang's PodGroup")
    theirs = naming.group_claim_name(other["metadata"]["name"], "shared")
    wait_for(lambda: theirs in _claims(cluster, namespace), "the other gang's claim made")
    old_uids = {p["metadata"]["uid"] for p in old}
    cluster.kubectl("delete", "pod", old[0]["metadata"]["name"], "-n", namespace, "--wait=false")

    judge = _kept_while_running(cluster, namespace, "train", old_uids, first, theirs)

    def old_stopping(snapshot: faultcheck.Snapshot) -> bool:
        members = [p for p in _members(snapshot, "train") if p["metadata"]["uid"] in old_uids]
        return len(members) == 3 and all(p["metadata"].get("deletionTimestamp") and _may_run(p) for p in members)

    seen = _watch_until(cluster, namespace, old_stopping, "every old rank stopping (torn down)", judge, timeout=20)
    stopping = _until_stopped(cluster, namespace, "train", old_uids, judge)
    assert len(stopping) >= 3, f"watched the grace period through: {len(seen)} + {len(stopping)} snapshots"
    cluster.kubectl("delete", "job", "other", "-n", namespace, "--wait=false")  # the room is the gang's again
    new = _back_whole(cluster, namespace, "train", 3, old_uids)
    claims = {n: c for n, c in _claims(cluster, namespace).items() if n != theirs}
    assert list(claims) == [name], f"still one claim for the group: {list(claims)}"
    assert claims[name]["metadata"]["uid"] == claim_uid and len(_devices(claims[name])) == 1, claims[name].get("status")
    assert _reserved(claims[name]) == sorted(p["metadata"]["uid"] for p in new), "reserved for the new ranks only"
    for pod in new:
        assert pod["spec"]["resourceClaims"] == [{"name": "shared", "resourceClaimName": name}]
    assert not faultcheck.double_held(faultcheck.take(cluster.kubectl, namespace))


def test_a_preempted_gang_frees_its_group_claim_only_once_every_member_stopped(
    cluster: Cluster, operator: Operator, world: None, namespace: str
) -> None:
    """A low-priority gang shares one claim of both channels; an urgent gang needs one. Every low rank is evicted
    (the claim frees nothing while one runs), each runs out a 6 s grace period, and only then does the urgent gang
    get a channel: no device is ever allocated twice."""
    with priority_classes(cluster.kubectl, namespace) as (low, urgent):
        _apply(cluster, namespace, _template("one-channel", "channel"), _template("two-channels", "channel", count=2))
        _apply(cluster, namespace, _job("low", 3, "two-channels", grace=6, priority_class=low))
        victims = {p["metadata"]["uid"] for p in bound_pods(cluster, namespace, "low", 3)}
        theirs = _group_claim(cluster, namespace, "low")
        assert _devices(_claims(cluster, namespace)[theirs]) == ["channel-0", "channel-1"]
        _apply(cluster, namespace, _job("urgent", 2, "one-channel", priority_class=urgent))
        ours = _group_claim(cluster, namespace, "urgent")

        judge = _kept_while_running(cluster, namespace, "low", victims, _claims(cluster, namespace)[theirs], ours)

        def evicted(snapshot: faultcheck.Snapshot) -> bool:
            members = [p for p in _members(snapshot, "low") if p["metadata"]["uid"] in victims]
            return len(members) == 3 and all(p["metadata"].get("deletionTimestamp") for p in members)

        def urgent_runs(snapshot: faultcheck.Snapshot) -> bool:
            return sum(1 for p in _members(snapshot, "urgent") if _may_run(p) and not p["metadata"].get("deletionTimestamp")) == 2

        _watch_until(cluster, namespace, evicted, "every low rank evicted", judge, timeout=40)
        stopping = _watch_until(cluster, namespace, urgent_runs, "the urgent gang running", judge, timeout=60)
        assert len(stopping) >= 3, "the victims were watched running out their grace period"
        snapshot = stopping[-1]
        assert not [p for p in _members(snapshot, "low") if p["metadata"]["uid"] in victims and _may_run(p)]
        granted = _claim_of(snapshot, ours)
        assert granted is not None and len(_devices(granted)) == 1, granted
        assert _reserved(granted) == sorted(p["metadata"]["uid"] for p in _members(snapshot, "urgent") if _may_run(p))
        assert not faultcheck.double_held(faultcheck.take(cluster.kubectl, namespace))


def test_explain_counts_a_waiting_gang_s_group_claim_once(cluster: Cluster, operator: Operator, world: None, namespace: str) -> None:
    """Three ranks share one claim of both channels, which another gang holds: explain says the gang needs the two
    channels of its one claim (not none, as if a shared claim needed nothing, nor two per rank), who holds them, and
    what would free them."""
    _apply(cluster, namespace, _template("two-channels", "channel", count=2), _job("first", 2, "two-channels"))
    bound_pods(cluster, namespace, "first", 2)
    _apply(cluster, namespace, _job("second", 3, "two-channels"))
    wait_for(
        lambda: (
            next(
                (
                    c
                    for c in (_pod_group(cluster, namespace, "second").get("status") or {}).get("conditions") or []
                    if c["type"] == keys.INITIALLY_SCHEDULED
                ),
                {},
            ).get("reason")
            == "Unschedulable"
        ),
        "second: Unschedulable",
        timeout=60,
    )
    out = cluster.explain("second", namespace)
    print(out)
    lines = [re.sub(r" {2,}", "  ", line) for line in out.replace(namespace, "NS").splitlines()]
    # the class counts every device of the driver (the IMEX domain too, free): the 2 channels the claim asks for, once
    assert lines[1] == "State:  Pending: minCount 3: 0 of 3 members fit; short 1 x groupclaims (1 free of 3)", lines
    assert "Held below minCount: 0 device(s)" in lines, lines
    assert "Held by:  2 of 3 groupclaims held by NS/first, priority 0" in lines, lines
    assert "  groupclaims  2  1  3  1" in lines, lines
    assert "To run:  1 more groupclaims free, or a PriorityClass above 0, the holders' (preemption would then evict 2 pod(s))" in lines
    data = json.loads(cluster.explain("second", namespace, "-o", "json"))
    assert data["plan"]["shortages"] == [{"resource": "groupclaims", "needed": 2, "free": 1, "total": 3}], data["plan"]
    assert data["holders"] == [{"resource": "groupclaims", "holder": f"{namespace}/first", "held": "2", "total": "3", "priority": 0}]


@pytest.fixture
def alone(cluster: Cluster, operator: Operator) -> Iterator[list[operatorproc.OperatorProcess]]:
    """The module's operator stopped, for a test that starts (and kills) its own; another started in its place after
    the test, which the module's fixture stops."""
    if cluster.local is None or operator.handle is None:
        pytest.skip("stops and starts the operator process")
    started: list[operatorproc.OperatorProcess] = [operator.handle]
    operator.handle.stop()
    try:
        yield started
    finally:
        for handle in started:
            handle.stop()
            if not os.environ.get("PHALANX_KEEP_LOGS"):
                handle.log.unlink(missing_ok=True)
        operator.handle = operatorproc.start(cluster.local, ROOT)


@pytest.mark.parametrize("point", ["reserve.after-claims", "reserve.mid-gates:2"])
def test_a_release_killed_with_the_group_claim_allocated_completes_after_a_restart(
    cluster: Cluster, alone: list, world: None, namespace: str, point: str
) -> None:
    """SIGKILL once the group's claim is allocated (before any gate is lifted, or after two of three): the restarted
    operator finishes the recorded release on that allocation, never a second one, and nothing is left half done."""
    armed = operatorproc.start(cluster.local, ROOT, env={ENV: point})
    alone.append(armed)
    _apply(cluster, namespace, _template("one-channel", "channel"), _job("train", 3, "one-channel"))
    wait_for(lambda: armed.process.poll() is not None, f"the operator killed at {point}", timeout=90)
    assert armed.process.returncode == -signal.SIGKILL and f"crash point {point.partition(':')[0]} hit" in armed.logs()
    name = _group_claim(cluster, namespace, "train")
    crashed = _claims(cluster, namespace)[name]
    channel = _devices(crashed)
    assert len(channel) == 1, f"the group claim was allocated before the crash: {crashed.get('status')}"
    record = _pod_group(cluster, namespace, "train")["status"]["reservation"]
    assert record["state"] == "Reserving" and [c["name"] for c in record["claims"]] == [name], record

    alone.append(operatorproc.start(cluster.local, ROOT))
    pods = _watch_until(
        cluster,
        namespace,
        lambda s: sum(1 for p in _members(s, "train") if p["spec"].get("nodeName")) == 3,
        "the release finished after the restart",
        lambda s: [],
        timeout=90,
    )[-1].pods
    claims = _claims(cluster, namespace)
    assert list(claims) == [name] and _devices(claims[name]) == channel, "the recorded allocation kept, not made again"
    assert claims[name]["metadata"]["uid"] == crashed["metadata"]["uid"]
    assert _reserved(claims[name]) == sorted(p["metadata"]["uid"] for p in pods if p["spec"].get("nodeName"))
    wait_for(lambda: _pod_group(cluster, namespace, "train")["status"]["reservation"]["state"] == "Released", "the record Released")
    problems = faultcheck.violations(faultcheck.take(cluster.kubectl, namespace))
    assert not problems, problems


def test_a_teardown_killed_after_its_evictions_leaves_the_group_claim_to_the_ranks_still_running(
    cluster: Cluster, alone: list, world: None, namespace: str
) -> None:
    """SIGKILL right after a disruptionMode all teardown evicted the ranks, which run out a 12 s grace period (the restart takes some): the
    restarted operator finishes the teardown without freeing the group's claim under them, and the gang comes back
    on that one claim."""
    armed = operatorproc.start(cluster.local, ROOT, env={ENV: "teardown.after-evictions"})
    alone.append(armed)
    _apply(cluster, namespace, _template("one-channel", "channel"), _job("train", 3, "one-channel", grace=12))
    old = bound_pods(cluster, namespace, "train", 3)
    name = _group_claim(cluster, namespace, "train")
    held = _claims(cluster, namespace)[name]
    cluster.kubectl("delete", "pod", old[0]["metadata"]["name"], "-n", namespace, "--wait=false")
    wait_for(lambda: armed.process.poll() is not None, "the operator killed after the evictions", timeout=30)
    assert armed.process.returncode == -signal.SIGKILL and "crash point teardown.after-evictions hit" in armed.logs()

    alone.append(operatorproc.start(cluster.local, ROOT))
    old_uids = {p["metadata"]["uid"] for p in old}
    judge = _kept_while_running(cluster, namespace, "train", old_uids, held, "no-other-claim")
    seen = _until_stopped(cluster, namespace, "train", old_uids, judge)
    assert len(seen) >= 3, "the restarted operator was watched while the old ranks ran out their grace period"
    new = _back_whole(cluster, namespace, "train", 3, old_uids)
    claims = _claims(cluster, namespace)
    assert list(claims) == [name] and claims[name]["metadata"]["uid"] == held["metadata"]["uid"], list(claims)
    assert len(_devices(claims[name])) == 1 and _reserved(claims[name]) == sorted(p["metadata"]["uid"] for p in new)
    problems = faultcheck.violations(faultcheck.take(cluster.kubectl, namespace))
    assert not problems, problems
