"""Pod dicts, as the watches deliver them, to the planner's pod-affinity, spreading and host-port fields."""

from __future__ import annotations

from builders import HOSTNAME
from phalanx.api import keys
from phalanx.planner.model import EMPTY, HostPort, Pod, PodTerm, Requirement, Spread, frozen_map, shared_map
from phalanx.scheduling import accessors, inputs, snapshots

LABELS = {"app": "train", "job": "j1"}

POD = {
    "metadata": {"namespace": "ml", "name": "train-0", "uid": "u0", "labels": LABELS},
    "spec": {
        "affinity": {
            "podAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "train"}}, "topologyKey": "zone", "matchLabelKeys": ["job", "absent"]},
                ],
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"labelSelector": {}, "topologyKey": "rack"}},
                ],
            },
            "podAntiAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]},
                        "topologyKey": HOSTNAME,
                        "namespaces": ["ml", "infra"],
                        "mismatchLabelKeys": ["job"],
                    },
                    {"labelSelector": {}, "topologyKey": HOSTNAME, "namespaceSelector": {}},
                    {"topologyKey": HOSTNAME, "namespaceSelector": {"matchLabels": {"team": "a"}}},
                ],
            },
        },
        "topologySpreadConstraints": [
            {
                "maxSkew": 2,
                "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "train"}},
                "matchLabelKeys": ["job"],
                "minDomains": 3,
                "nodeTaintsPolicy": "Honor",
            },
            {"maxSkew": 1, "topologyKey": HOSTNAME, "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {}},
        ],
        "initContainers": [
            {"name": "proxy", "restartPolicy": "Always", "ports": [{"containerPort": 9000, "hostPort": 9000}]},
            {"name": "setup", "ports": [{"containerPort": 1, "hostPort": 1}]},
        ],
        "containers": [
            {
                "name": "main",
                "ports": [{"containerPort": 8080, "hostPort": 8080, "protocol": "UDP", "hostIP": "10.0.0.1"}, {"containerPort": 80}],
            },
        ],
    },
}


def test_a_member_carries_its_labels_required_terms_spread_and_host_ports() -> None:
    member = inputs.member(POD, ())
    assert dict(member.labels) == LABELS
    assert member.pod_affinity == (
        PodTerm("zone", (Requirement("app", "In", ("train",)), Requirement("job", "In", ("j1",))), frozenset({"ml"})),
    ), "matchLabelKeys merged from the pod's labels, a key it lacks skipped, preferred terms left out"
    assert member.pod_anti_affinity == (
        PodTerm(HOSTNAME, (Requirement("app", "Exists"), Requirement("job", "NotIn", ("j1",))), frozenset({"ml", "infra"})),
        PodTerm(HOSTNAME, (), frozenset(), namespace_selector=()),
        PodTerm(HOSTNAME, None, frozenset(), namespace_selector=(Requirement("team", "In", ("a",)),)),
    ), "an empty selector selects every pod, an absent one none; {} namespaceSelector is every namespace"
    assert member.spread == (
        Spread("zone", 2, (Requirement("app", "In", ("train",)), Requirement("job", "In", ("j1",))), 3, "Honor", "Honor"),
    ), "ScheduleAnyway only scores"
    assert member.host_ports == (HostPort(9000), HostPort(8080, "UDP", "10.0.0.1")), "a sidecar's port counts, a plain init container's not"


def _pod(name: str, node: str | None, *, phase: str = "Running", gated: bool = False, deleting: bool = False, pinned: str | None = None):
    metadata = {"namespace": "ml", "name": name, "uid": f"u-{name}", "labels": {"app": name}}
    if deleting:
        metadata["deletionTimestamp"] = "2025-01-01T00:00:00Z"
    if pinned:
        metadata["annotations"] = {keys.PINNED_NODE: pinned}
    spec = {**POD["spec"], "containers": [{"name": "c", "ports": [{"containerPort": 53, "hostPort": 53, "protocol": "UDP"}]}]}
    if node:
        spec["nodeName"] = node
    if gated:
        spec["schedulingGates"] = [{"name": keys.SCHEDULING_GATE}]
    return {"metadata": metadata, "spec": spec, "status": {"phase": phase}}


def test_the_snapshot_records_every_placed_non_terminal_pod() -> None:
    nodes = [{"metadata": {"name": "n1", "labels": {HOSTNAME: "n1"}}, "status": {"allocatable": {"cpu": "4", "pods": "110"}}}]
    pods = [
        _pod("bound", "n1"),
        _pod("leaving", "n1", deleting=True),
        _pod("released", None, pinned="n1"),
        _pod("done", "n1", phase="Succeeded"),
        _pod("waiting", None, gated=True, pinned="n1"),
        _pod("forged", None, pinned="n1"),
    ]
    recorded = [{"status": {"reservation": {"placements": [{"name": "released", "uid": "u-released", "node": "n1"}]}}}]
    snapshot = snapshots.build(nodes, pods, [], [], [], pinned=accessors.pins(recorded))
    assert [(p.name, p.node, p.terminating) for p in snapshot.pods] == [
        ("bound", "n1", False),
        ("leaving", "n1", True),
        ("released", "n1", False),
    ], "a pin annotation counts only on a pod a reservation records: `forged` wrote its own"
    bound: Pod = snapshot.pods[0]
    assert dict(bound.labels) == {"app": "bound"}
    assert bound.host_ports == (HostPort(9000), HostPort(53, "UDP"))
    assert bound.anti_affinity[0].selector == (Requirement("app", "Exists"),), "mismatchLabelKeys: the pod has no job label"


def test_equal_small_maps_of_a_snapshot_are_one_object_and_a_value_keeps_its_type() -> None:
    """Thousands of pods and devices repeat their labels, requests and capacities: one object each, not one per
    pod; a map whose values differ in type only (true, 1) is not the same map."""
    assert shared_map({"app": "ballast"}) is shared_map({"app": "ballast"})
    assert shared_map({"x": True}) is not shared_map({"x": 1})
    assert type(shared_map({"x": 1})["x"]) is int
    unhashable = shared_map({"config": {"a": 1}})
    assert unhashable == {"config": {"a": 1}} and unhashable is not shared_map({"config": {"a": 1}})
    assert frozen_map() is EMPTY and frozen_map({}) is EMPTY and shared_map(None) is EMPTY
    pods = [inputs.existing({"metadata": {"namespace": "n", "name": f"p{i}", "labels": {"app": "a"}}, "spec": {}}, "w") for i in range(2)]
    assert pods[0].labels is pods[1].labels
