"""What the informers keep of an object is enough: every reading of a trimmed object equals the untrimmed one's."""

from __future__ import annotations

import copy
import json
from typing import Any

from phalanx.api import keys
from phalanx.jobsets.objects import JOBSET_UID_LABEL
from phalanx.kinds import KINDS
from phalanx.kube import trim
from phalanx.kube.informers import unread_change
from phalanx.leaderworkersets import admission as lws_admission
from phalanx.scheduling import accessors, disruption, inputs, podsready, repair, snapshots, victims
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


KWOK_RUNNING = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": "web-1",
        "namespace": "apps",
        "uid": "w1",
        "resourceVersion": "41",
        "creationTimestamp": "2026-12-01T16:45:26Z",
        "labels": {"app": "web"},
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d4", "uid": "rs", "controller": True}],
    },
    "spec": {
        "nodeName": "worker-2",
        "priority": 100,
        "preemptionPolicy": "PreemptLowerPriority",
        "containers": [{"name": "c", "image": "nginx", "env": [{"name": "A", "value": "b"}], "resources": {"requests": {"cpu": "250m"}}}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}],
        "nodeSelector": {"zone": "a"},
        "affinity": {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": []}]}},
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [{"labelSelector": {}, "topologyKey": "kubernetes.io/hostname"}]
            },
        },
        "dnsPolicy": "ClusterFirst",
        "serviceAccountName": "default",
        "schedulerName": "default-scheduler",
        "securityContext": {},
        "terminationGracePeriodSeconds": 30,
    },
    "status": {
        "phase": "Running",
        "conditions": [
            {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": "2026-12-01T16:45:27Z"}
            for t in ("Initialized", "Ready", "ContainersReady", "PodScheduled")
        ],
        "hostIP": "10.0.0.2",
        "podIP": "10.1.0.7",
        "containerStatuses": [
            {"name": "c", "ready": True, "restartCount": 0, "state": {"running": {"startedAt": "2026-12-01T16:45:27Z"}}, "image": "nginx"}
        ],
    },
}
NOT_READY = copy.deepcopy(KWOK_RUNNING)
NOT_READY["metadata"].update(name="web-2", uid="w2")
NOT_READY["spec"]["containers"].append({"name": "sidecar"})
NOT_READY["status"]["conditions"][1]["status"] = "False"
NOT_READY["status"]["containerStatuses"].append(
    {"name": "sidecar", "ready": False, "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
)
NODE = {
    "metadata": {"name": "worker-2", "labels": {"kubernetes.io/hostname": "worker-2", "zone": "a"}},
    "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
    "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"}, "images": [{"names": ["nginx"], "sizeBytes": 1}]},
}
MEMBER = copy.deepcopy(FULL_POD)
MEMBER["status"] = {"phase": "Pending", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "train-0-gpu-x"}]}
MEMBER["spec"].pop("nodeName")
MEMBER["spec"].update(schedulingGates=[{"name": keys.SCHEDULING_GATE}], dnsPolicy="ClusterFirst", preemptionPolicy="Never")


def test_trimmed_objects_make_the_same_planner_snapshot_and_members() -> None:
    """Every field the trim drops from a pod of no Job (tolerations, node selector and affinity, the defaults, most of
    its status) is one the planner and the loop never read: snapshot, members, victims, readiness all agree."""
    pods = [KWOK_RUNNING, NOT_READY, MEMBER]
    trimmed = [trim.pod(copy.deepcopy(p)) for p in pods]
    nodes, trimmed_nodes = [NODE], [trim.node(copy.deepcopy(NODE))]
    assert snapshots.build(trimmed_nodes, trimmed, [], [], []) == snapshots.build(nodes, pods, [], [], [])
    assert inputs.group({"metadata": {"namespace": "ml", "name": "g"}, "spec": {}}, trimmed[2:], 1) == inputs.group(
        {"metadata": {"namespace": "ml", "name": "g"}, "spec": {}}, pods[2:], 1
    )
    assert victims.victims(trimmed, [], {}, []) == victims.victims(pods, [], {}, [])
    assert victims.for_preemptor(MEMBER_GROUP, {"u0"}, trimmed, [], [], {}, []) is None  # the member's preemptionPolicy Never
    assert victims.for_preemptor(MEMBER_GROUP, {"u0"}, pods, [], [], {}, []) is None
    for full, kept in zip(pods, trimmed, strict=True):
        assert podsready.ready(kept) == podsready.ready(full)
        assert disruption.cause(kept, {"worker-2"}) == disruption.cause(full, {"worker-2"})
    assert "tolerations" not in trimmed[0]["spec"] and trimmed[0]["spec"]["affinity"].keys() == {"podAntiAffinity"}
    assert "tolerations" in trimmed[2]["spec"]  # a Job's pod may be a gang member: kept whole
    assert [c["type"] for c in trimmed[0]["status"]["conditions"]] == ["Ready"]


MEMBER_GROUP = {"metadata": {"namespace": "ml", "name": "g", "uid": "g"}, "spec": {}}


def test_a_trimmed_pod_names_the_container_that_is_not_ready() -> None:
    """The ready-deadline message reads each container's `ready` and `restartCount`: a trim that dropped them named
    the first container, ready or not, and never the restarts."""
    member = copy.deepcopy(NOT_READY)
    member["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-uid", "controller": True}]
    kept = trim.pod(copy.deepcopy(member))
    assert podsready.why_not(kept) == podsready.why_not(member) == "container sidecar waiting CrashLoopBackOff (restarted 4 times)"
    assert "containerStatuses" not in trim.pod(copy.deepcopy(NOT_READY))["status"], "read of gang members only"


def _stuck_in_init(name: str) -> dict[str, Any]:
    """A gang member on its node whose second init container crash-loops: its main container waits PodInitializing."""
    member = copy.deepcopy(KWOK_RUNNING)
    member["metadata"].update(name=name, uid=name)
    member["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-uid", "controller": True}]
    member["spec"]["initContainers"] = [{"name": "unpack", "image": "busybox"}, {"name": "fetch-weights", "image": "busybox"}]
    member["status"]["phase"] = "Pending"
    member["status"]["conditions"][1]["status"] = "False"
    member["status"]["initContainerStatuses"] = [
        {
            "name": "unpack",
            "image": "busybox",
            "imageID": "sha",
            "containerID": f"containerd://{name}-unpack-" + "0" * 48,
            "ready": True,
            "restartCount": 0,
            "started": False,
            "state": {
                "terminated": {
                    "exitCode": 0,
                    "reason": "Completed",
                    "startedAt": "2026-12-01T16:45:27Z",
                    "finishedAt": "2026-12-01T16:45:29Z",
                    "containerID": f"containerd://{name}-unpack-" + "0" * 48,
                }
            },
        },
        {
            "name": "fetch-weights",
            "image": "busybox",
            "imageID": "sha",
            "ready": False,
            "restartCount": 3,
            "started": False,
            "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s restarting failed container=fetch-weights"}},
            "lastState": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": "2026-12-01T16:46:00Z"}},
        },
    ]
    member["status"]["containerStatuses"] = [
        {"name": "c", "image": "nginx", "ready": False, "restartCount": 0, "state": {"waiting": {"reason": "PodInitializing"}}}
    ]
    return member


def test_a_trimmed_member_stuck_in_an_init_container_names_it_and_why() -> None:
    """The ready-deadline message reads the init containers' statuses first: a trim that dropped them said the main
    container waits PodInitializing, never which init container holds the member back, nor why."""
    member = _stuck_in_init("train-0")
    kept = trim.pod(copy.deepcopy(member))
    assert podsready.why_not(kept) == podsready.why_not(member)
    assert podsready.why_not(kept) == (
        "init container fetch-weights waiting CrashLoopBackOff: back-off 40s restarting failed container=fetch-weights (restarted 3 times)"
    )
    assert "initContainerStatuses" not in trim.pod(copy.deepcopy({**member, "metadata": NOT_READY["metadata"]}))["status"], (
        "read of gang members only"
    )
    # an init container done (ready) is never read past its `ready`: its state goes, and what is left is shared
    other = trim.pod(_stuck_in_init("train-1"))
    assert kept["status"]["initContainerStatuses"][0] == {"name": "unpack", "ready": True, "restartCount": 0}
    assert kept["status"]["initContainerStatuses"][0] is other["status"]["initContainerStatuses"][0]


def test_trimmed_pods_share_their_keys_and_short_strings() -> None:
    """Each watch event is decoded on its own, so two pods hold two copies of every key and value; kept, they share
    one (the informers' memory is most of the operator's at 100,000 pods)."""
    a, b = (trim.pod(json.loads(json.dumps(KWOK_RUNNING))) for _ in range(2))
    assert a["spec"]["nodeName"] is b["spec"]["nodeName"]
    assert next(iter(a["metadata"])) is next(iter(b["metadata"]))
    assert a["status"]["phase"] is b["status"]["phase"]
    assert a == trim.pod(copy.deepcopy(KWOK_RUNNING))


def test_small_parts_made_of_scalars_and_shared_parts_are_one_object_across_objects() -> None:
    """Pods of one template on one node hold one copy of their spec; what holds a unique part is not shared (the
    table would keep it alive after its object went)."""
    a, b = (trim.pod(json.loads(json.dumps(KWOK_RUNNING))) for _ in range(2))
    assert a["spec"]["containers"] is b["spec"]["containers"]
    assert a["status"]["conditions"] is b["status"]["conditions"]
    assert a["metadata"] is not b["metadata"]  # its name and uid are its own, and it has more than SHARE_UP_TO keys
    elsewhere = json.loads(json.dumps(KWOK_RUNNING))
    elsewhere["spec"]["nodeName"] = "worker-other"
    assert trim.pod(elsewhere)["spec"]["containers"] is a["spec"]["containers"]
    assert trim.pod(elsewhere)["spec"] == {**a["spec"], "nodeName": "worker-other"}
    # a value's type is part of it: true is not 1, nor 1.0
    flags = [trim.compact({"x": v}) for v in (True, 1, 1.0)]
    assert [type(f["x"]) for f in flags] == [bool, int, float]
    # a small part holding a part that is not shared is not shared either
    big = {f"k{i}": i for i in range(trim.SHARE_UP_TO + 1)}
    one, two = trim.compact({"big": dict(big)}), trim.compact({"big": dict(big)})
    assert one == two and one is not two


def test_every_workload_kind_whose_pods_may_be_members_keeps_them_whole() -> None:
    """A member of each workload kind keeps its tolerations: a new adapter whose members another kind controls must
    be named in trim's MEMBER_CONTROLLERS, or its members would be planned without them."""
    member = copy.deepcopy(KWOK_RUNNING)  # a JobSet's member: a pod its Job controls, with the JobSet's uid label
    member["metadata"]["labels"][JOBSET_UID_LABEL] = "js-uid"
    member["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "j-uid", "controller": True}]
    bare = copy.deepcopy(KWOK_RUNNING)  # a PodGroup's member: a pod of no controller, released, with the label
    bare["metadata"]["labels"][keys.POD_GROUP_LABEL] = "train"
    bare["metadata"].pop("ownerReferences", None)
    lws = copy.deepcopy(KWOK_RUNNING)  # a LeaderWorkerSet's member: a pod a StatefulSet controls, with LWS's labels
    lws["metadata"]["labels"].update({lws_admission.NAME_LABEL: "serve", lws_admission.GROUP_INDEX_LABEL: "0"})
    lws["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "s", "uid": "s-uid", "controller": True}]
    members = {"Job": member, "JobSet": member, "LeaderWorkerSet": lws, "PodGroup": bare}
    assert {k.kind for k in KINDS.kinds} == set(members), "a new kind: give this test a member of it"
    for adapter in KINDS.kinds:
        pod = members[adapter.kind]
        assert adapter.member_uids(pod), adapter.kind
        assert trim.pod(copy.deepcopy(pod))["spec"]["tolerations"] == KWOK_RUNNING["spec"]["tolerations"], adapter.kind
    gated = copy.deepcopy(KWOK_RUNNING)
    gated["spec"]["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    assert trim.pod(gated)["spec"]["tolerations"] == KWOK_RUNNING["spec"]["tolerations"]
    # a StatefulSet's pod is a member only with LWS's name label: any other StatefulSet's is trimmed, as before LWS
    assert trim.MEMBER_CONTROLLERS["StatefulSet"] == lws_admission.NAME_LABEL
    other = copy.deepcopy(lws)
    del other["metadata"]["labels"][lws_admission.NAME_LABEL]
    assert "tolerations" not in trim.pod(other)["spec"]


def test_a_heartbeat_changes_nothing_kept_of_a_node() -> None:
    """A node's heartbeat rewrites its conditions' times and its resourceVersion, nothing the planner reads: kept,
    the two versions differ only in their resourceVersion, so the informer takes it as an unread change."""
    before = copy.deepcopy(NODE)
    before["metadata"]["resourceVersion"] = "10"
    before["status"]["conditions"] = [{"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-12-01T00:00:00Z"}]
    after = copy.deepcopy(before)
    after["metadata"]["resourceVersion"] = "11"
    after["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-01T00:00:20Z"
    assert unread_change(trim.node(copy.deepcopy(before)), trim.node(copy.deepcopy(after)))
    assert not unread_change(before, after), "untrimmed, the conditions differ"
    tainted = copy.deepcopy(after)
    tainted["spec"]["taints"].append({"key": "gpu-broken", "effect": "NoSchedule"})
    assert not unread_change(trim.node(copy.deepcopy(before)), trim.node(tainted))
    relabelled = copy.deepcopy(after)
    relabelled["metadata"]["labels"]["zone"] = "b"
    assert not unread_change(trim.node(copy.deepcopy(before)), trim.node(relabelled))
    assert trim.node(copy.deepcopy(before))["status"] == {"allocatable": NODE["status"]["allocatable"]}
    listed = trim.node(copy.deepcopy(before))
    watched = trim.node({"kind": "Node", "apiVersion": "v1", **copy.deepcopy(after)})
    assert unread_change(listed, watched), "a list's items come without kind and apiVersion, a watch event's with them"
