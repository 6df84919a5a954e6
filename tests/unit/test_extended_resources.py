"""DRAExtendedResource: a pod's extended resource a DeviceClass serves gets devices of that class, planned as
kube-scheduler's own claim would ask for them (dynamicresources/extendeddynamicresources.go, 1.37.2)."""

from __future__ import annotations

from dataclasses import replace

from builders import GPU, GPU_CLASS, gpus, node
from phalanx.planner import Fits, Short, plan
from phalanx.planner import extended as extres
from phalanx.planner.model import Claim, Container, DeviceRequest, Group, Member, Snapshot, frozen_map
from phalanx.scheduling import deviceinputs, inputs, snapshots
from phalanx.scheduling.record import planned_devices, reservation_of

RESOURCE = "example.com/gpu"
MAPPED = {RESOURCE: GPU, f"deviceclass.resource.kubernetes.io/{GPU}": GPU}


def cluster(*nodes, devices=(), held=(), claims=()) -> Snapshot:
    return Snapshot(
        nodes=tuple(nodes),
        devices=tuple(devices),
        classes=frozen_map({GPU: GPU_CLASS}),
        claims=frozen_map({c.key: c for c in claims}),
        held=frozenset(held),
        extended=frozen_map(MAPPED),
    )


def plugin_node(name: str, count: int):
    """A node whose device plugin advertises `count` of the resource in its allocatable."""
    n = node(name)
    return replace(n, allocatable=frozen_map({**n.allocatable, RESOURCE: count}))


def rank(i: int, count: int = 1, claims: tuple[str, ...] = ()) -> Member:
    return Member("ml", f"p{i}", f"uid-p{i}", frozen_map({"cpu": 1000, RESOURCE: count}), claims=claims)


def gang(*members: Member, min_count: int | None = None) -> Group:
    return Group("ml", "g", len(members) if min_count is None else min_count, members)


def devices_of(fits: Fits) -> dict[str, tuple[str, list[str]]]:
    """Pod -> (node, planned devices)."""
    return {c.name.removesuffix(extres.SUFFIX): (c.node, [r.device for r in c.results]) for c in fits.planned}


def test_a_node_without_the_resource_serves_it_through_the_class() -> None:
    snap = cluster(node("n1"), node("n2"), devices=gpus("n1", 2) + gpus("n2", 2))
    result = plan(snap, gang(rank(0, 2), rank(1, 2)))
    assert isinstance(result, Fits), getattr(result, "message", result)
    assert result.claims == (), "nothing is written: kube-scheduler creates and allocates the claim"
    planned = devices_of(result)
    assert sorted(planned.values()) == [("n1", ["gpu-0", "gpu-1"]), ("n2", ["gpu-0", "gpu-1"])]
    assert {m.name: n for m, n in result.placements} == {p: n for p, (n, _) in planned.items()}, "devices on the pod's node"
    [special] = [c for c in result.planned if c.name == "p0" + extres.SUFFIX]
    assert [r.request for r in special.results] == ["container-0-request-1"] * 2, "one request of count 2, named as upstream"


def test_a_node_whose_device_plugin_has_the_resource_serves_it_as_any_extended_resource() -> None:
    snap = cluster(plugin_node("n1", 1), node("n2"), devices=gpus("n1", 4) + gpus("n2", 2))
    result = plan(snap, gang(rank(0, 2)))
    assert isinstance(result, Fits) and [n for _, n in result.placements] == ["n2"], "n1 has 1 by device plugin, not 2"
    assert devices_of(result) == {"p0": ("n2", ["gpu-0", "gpu-1"])}
    by_plugin = plan(cluster(plugin_node("n1", 4), devices=gpus("n1", 4)), gang(rank(0, 2)))
    assert isinstance(by_plugin, Fits) and by_plugin.planned == (), "allocatable above 0: no devices, node capacity counts"


def test_devices_held_by_other_claims_are_not_planned() -> None:
    n1 = gpus("n1", 3)
    result = plan(cluster(node("n1"), devices=n1, held={n1[0].id}), gang(rank(0, 2)))
    assert isinstance(result, Fits) and devices_of(result) == {"p0": ("n1", ["gpu-1", "gpu-2"])}


def test_a_pods_own_claim_and_its_extended_resource_take_different_devices() -> None:
    own = Claim("ml", "c0", "uid-c0", (DeviceRequest("r", GPU),))
    snap = cluster(node("n1"), devices=gpus("n1", 2), claims=(own,))
    result = plan(snap, gang(rank(0, 1, claims=("c0",))))
    assert isinstance(result, Fits)
    [written] = result.claims
    assert [r.device for r in written.results] == ["gpu-0"] and devices_of(result) == {"p0": ("n1", ["gpu-1"])}
    short = plan(cluster(node("n1"), devices=gpus("n1", 1), claims=(own,)), gang(rank(0, 1, claims=("c0",))))
    assert isinstance(short, Short), "one device cannot serve both the claim and the extended resource"


def test_members_sharing_a_node_are_planned_disjoint_devices() -> None:
    result = plan(cluster(node("n1"), devices=gpus("n1", 4)), gang(rank(0, 2), rank(1, 2)))
    assert isinstance(result, Fits)
    taken = [d for _, devices in devices_of(result).values() for d in devices]
    assert sorted(taken) == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]


def test_a_short_gang_is_named_by_resource_and_class() -> None:
    result = plan(cluster(node("n1"), node("n2"), devices=gpus("n1", 2) + gpus("n2", 1)), gang(rank(0, 2), rank(1, 2)))
    assert isinstance(result, Short) and not result.unmodelled
    assert f"can never fit: needs 4 x {RESOURCE} (extended resource, DeviceClass {GPU}), the cluster has 3" in result.message
    assert "x example.com/gpu (0 free" not in result.message, "node capacity does not bound a resource served by devices"


def test_the_count_is_the_quantity_per_container_and_init_containers_reuse_later_ones() -> None:
    containers = (
        Container(frozen_map({RESOURCE: 3}), init=True),  # reuses the 1 of containers 2 and 3: asks 1 more
        Container(frozen_map({RESOURCE: 1}), init=True),  # covered by container 3
        Container(frozen_map({RESOURCE: 1}), init=True, sidecar=True),  # long-lived: its own
        Container(frozen_map({"cpu": 100, RESOURCE: 1, "memory": 5})),  # its resource is second of three by name
    )
    member = replace(rank(0, 4), containers=containers)
    special = extres.claim(member, (RESOURCE,), MAPPED)
    assert special is not None
    assert [(r.name, r.device_class, r.count) for r in special.requests] == [
        ("container-0-request-0", GPU, 1),
        ("container-2-request-0", GPU, 1),
        ("container-3-request-1", GPU, 1),
    ]
    assert extres.claim(replace(rank(0, 0), containers=(Container(frozen_map({"cpu": 1})),)), (RESOURCE,), MAPPED) is None


def test_of_two_classes_naming_one_resource_the_newest_serves_it_and_a_tie_goes_by_name() -> None:
    def cls(name: str, created: str) -> dict:
        return {"metadata": {"name": name, "creationTimestamp": created}, "spec": {"extendedResourceName": RESOURCE}}

    older, newer = cls("b", "2026-01-01T00:00:00Z"), cls("c", "2026-01-02T00:00:00Z")
    assert deviceinputs.extended_resources([newer, older])[RESOURCE] == "c"
    assert deviceinputs.extended_resources([older, newer])[RESOURCE] == "c"
    assert deviceinputs.extended_resources([cls("z", "2026-01-02T00:00:00Z"), newer])[RESOURCE] == "c"
    mapped = deviceinputs.extended_resources([older, newer])
    assert mapped["deviceclass.resource.kubernetes.io/b"] == "b", "every class keeps its implicit name"


def test_containers_are_read_from_the_pod() -> None:
    pod = {
        "metadata": {"namespace": "ml", "name": "p", "uid": "u"},
        "spec": {
            "initContainers": [
                {"name": "i", "resources": {"requests": {RESOURCE: "2"}}},
                {"name": "s", "restartPolicy": "Always", "resources": {"requests": {RESOURCE: "1"}}},
            ],
            "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m", RESOURCE: "1"}}}],
        },
    }
    member = inputs.member(pod, ())
    assert member.containers == (
        Container(frozen_map({RESOURCE: 2}), init=True),
        Container(frozen_map({RESOURCE: 1}), init=True, sidecar=True),
        Container(frozen_map({"cpu": 100, RESOURCE: 1})),
    )
    special = extres.claim(member, (RESOURCE,), MAPPED)
    assert special is not None and [(r.name, r.count) for r in special.requests] == [
        ("container-1-request-0", 1),
        ("container-2-request-1", 1),
    ], "the init container's 2 is covered by the sidecar's and the container's 1 each"
    result = plan(cluster(node("n1"), devices=gpus("n1", 2)), gang(member))
    assert isinstance(result, Fits) and len(devices_of(result)["p"][1]) == 2, "one each for the sidecar and the container"


def test_the_reservation_records_planned_devices_apart_from_reserved_ones() -> None:
    own = Claim("ml", "c0", "uid-c0", (DeviceRequest("r", GPU),))
    result = plan(cluster(node("n1"), devices=gpus("n1", 3), claims=(own,)), gang(rank(0, 2, claims=("c0",))))
    assert isinstance(result, Fits)
    record = reservation_of(result)
    assert [c.name for c in record.claims] == ["c0"], "only the pod's own claim is written"
    assert [(p.pod, p.uid, p.node, p.devices) for p in record.planned or ()] == [
        ("p0", "uid-p0", "n1", [f"{GPU}/n1/gpu-1", f"{GPU}/n1/gpu-2"])
    ]
    assert planned_devices(record) == 2
    assert (
        "planned"
        not in reservation_of(
            plan(
                cluster(node("n1"), devices=gpus("n1", 1), claims=(own,)),
                gang(Member("ml", "p0", "uid-p0", frozen_map({"cpu": 1}), claims=("c0",))),
            )
        ).wire()
    ), "a gang without extended resources records as before"


def test_planned_devices_count_as_held_until_kube_scheduler_allocates_the_pods_claim() -> None:
    pod = {"metadata": {"namespace": "ml", "name": "p0", "uid": "uid-p0"}, "spec": {}}
    group = {
        "status": {
            "reservation": {"state": "Released", "planned": [{"pod": "p0", "uid": "uid-p0", "node": "n1", "devices": [f"{GPU}/n1/gpu-0"]}]}
        }
    }
    assert snapshots.awaiting_kube_scheduler([group], [pod], []) == {(GPU, "n1", "gpu-0")}
    special = {
        "metadata": {
            "name": "p0-extended-resources-x",
            "namespace": "ml",
            "uid": "uid-x",
            "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
            "ownerReferences": [{"kind": "Pod", "name": "p0", "uid": "uid-p0", "controller": True}],
        },
        "status": {
            "allocation": {"devices": {"results": [{"request": "container-0-request-0", "driver": GPU, "pool": "n1", "device": "gpu-1"}]}}
        },
    }
    assert snapshots.awaiting_kube_scheduler([group], [pod], [special]) == frozenset(), "its own claim is counted from now on"
    assert snapshots.awaiting_kube_scheduler([group], [], []) == frozenset(), "a pod gone holds nothing"
    snap = snapshots.build([], [pod], [], [special], [], awaiting=frozenset({(GPU, "n1", "gpu-0")}))
    assert snap.held == {(GPU, "n1", "gpu-0"), (GPU, "n1", "gpu-1")}


def test_a_victims_extended_resource_claim_frees_its_devices() -> None:
    from phalanx.scheduling import victims

    pod = {
        "metadata": {"namespace": "ml", "name": "v", "uid": "uid-v"},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "resources": {"requests": {RESOURCE: "1"}}}]},
        "status": {"extendedResourceClaimStatus": {"resourceClaimName": "v-extended-resources-x", "requestMappings": []}},
    }
    claim = {
        "metadata": {"namespace": "ml", "name": "v-extended-resources-x", "uid": "uid-x"},
        "status": {
            "allocation": {"devices": {"results": [{"request": "container-0-request-0", "driver": GPU, "pool": "n1", "device": "gpu-0"}]}},
            "reservedFor": [{"resource": "pods", "name": "v", "uid": "uid-v"}],
        },
    }
    victim = victims._victim_pod(pod, {("ml", claim["metadata"]["name"]): claim}, {"uid-v"}, None)
    assert victim.devices == ((GPU, "n1", "gpu-0"),)


def test_more_devices_than_one_claim_holds_is_named() -> None:
    result = plan(cluster(node("n1"), devices=gpus("n1", 40)), gang(rank(0, 33)))
    assert isinstance(result, Short) and f"resources.requests[{RESOURCE}] (DeviceClass {GPU}) ask for 33 devices" in result.message


def test_node_capacity_bounds_nothing_where_another_node_serves_the_resource_through_the_class() -> None:
    """n1's device plugin has 1, n2 has devices: no shortage of the resource may cut the search short."""
    snap = cluster(plugin_node("n1", 1), replace(node("n2"), allocatable=frozen_map({"cpu": 1000, "pods": 110})), devices=gpus("n2", 4))
    result = plan(snap, gang(rank(0, 2), rank(1, 2)))
    assert isinstance(result, Short) and f"x {RESOURCE} (" not in result.message, result.message
    assert "1 of 2 members fit; no combination of nodes fits the group" in result.message, "n2 has cpu for one rank only"
