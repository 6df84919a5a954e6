"""The planner on clusters described as data: whole-group plans, or exact reasons."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from builders import (
    GPU,
    GPU_CLASS,
    HOSTNAME,
    cluster,
    gang,
    gpus,
    node,
    one_gpu_claim,
    port,
    running,
    selector,
    term,
    with_claims,
    with_pods,
    with_rules,
)
from phalanx.planner import Fits, Short, plan, pods
from phalanx.planner.devices import DeviceMatcher
from phalanx.planner.model import (
    Claim,
    Device,
    DeviceClass,
    DeviceRequest,
    Group,
    MatchAttribute,
    Member,
    Requirement,
    SelectorTerm,
    Snapshot,
    Spread,
    Toleration,
    frozen_map,
)


def _devices(result: Fits) -> list:
    return [r.device_id for c in result.claims for r in c.results]


def test_the_articles_example_2_first_gang_fits_on_two_nodes() -> None:
    group, claims = gang("train-a", 4)
    result = plan(with_claims(cluster(), claims), group)
    assert isinstance(result, Fits)
    assert len(result.placements) == 4 and len(result.nodes) == 2, "packed onto the fewest nodes"
    assert "control-plane" not in result.nodes
    assert len(set(_devices(result))) == 4
    for claim in result.claims:
        (placed_node,) = [n for m, n in result.placements if m.claims == (claim.name,)]
        assert claim.node == placed_node and claim.results[0].pool == placed_node


def test_the_articles_example_2_second_gang_is_short_with_exact_counters() -> None:
    held = [(GPU, f"worker-{w}", f"gpu-{i}") for w in (1, 2) for i in (0, 1)]
    group, claims = gang("train-b", 4)
    result = plan(with_claims(cluster(held=held), claims), group)
    assert isinstance(result, Short)
    assert result.message == ("minCount 4: 2 of 4 members fit; short 2 x gpu.example.com (2 free of 6); 1 node(s) had untolerated taint(s)")


def test_more_members_than_min_count_go_together_when_quorum_fits() -> None:
    group, claims = gang("elastic", 8, min_count=4)
    result = plan(with_claims(cluster(), claims), group)
    assert isinstance(result, Fits)
    assert len(result.placements) == 6, "every member that fits goes with the group"


def test_too_few_members_is_short_before_any_search() -> None:
    group, claims = gang("train", 2)
    group = Group(group.namespace, group.name, 4, group.members)
    assert plan(with_claims(cluster(), claims), group).message == "minCount 4: only 2 members exist"


def test_cpu_shortage_is_named_with_the_amounts() -> None:
    group, claims = gang("huge", 4, cpu=40000)
    result = plan(with_claims(cluster(control_plane=False), claims), group)
    assert isinstance(result, Short)
    assert result.message == "minCount 4: 0 of 4 members fit; can never fit: needs 160000 x cpu, the cluster has 96000"


def test_fragmented_capacity_is_not_called_a_shortage() -> None:
    group, claims = gang("wide", 4, cpu=20000)
    result = plan(with_claims(cluster(control_plane=False), claims), group)
    assert isinstance(result, Short)
    assert result.message == "minCount 4: 3 of 4 members fit; no combination of nodes fits the group"


def test_topology_key_keeps_every_member_in_one_domain() -> None:
    nodes = [node("a1", labels={"zone": "a"}), node("a2", labels={"zone": "a"}), node("b1", labels={"zone": "b"})]
    devices = [d for n in nodes for d in gpus(n.name, 2)]
    group, claims = gang("zonal", 4, topology_key="zone")
    snapshot = Snapshot(tuple(nodes), tuple(devices), frozen_map({GPU: GPU_CLASS}), frozen_map({c.key: c for c in claims}))
    result = plan(snapshot, group)
    assert isinstance(result, Fits) and result.nodes == {"a1", "a2"}
    group, claims = gang("zonal", 5, topology_key="zone")
    assert isinstance(plan(with_claims(snapshot, claims), group), Short), "5 GPUs exist, but not in one zone"


def test_a_topology_key_no_node_carries_can_never_fit_and_says_so() -> None:
    """The README's example once named topology.kubernetes.io/zone, which no local node has: the verdict named an
    untolerated taint instead. No domain at all is a verdict of its own."""
    group, claims = gang("zonal", 2, topology_key="topology.kubernetes.io/zone")
    result = plan(with_claims(cluster(), claims), group)
    assert isinstance(result, Short) and result.nowhere is not None
    assert result.message == (
        "minCount 2: 0 of 2 members fit; can never fit: no node has label topology.kubernetes.io/zone, the group's topology key"
    )


def test_node_affinity_and_tolerations_are_honoured() -> None:
    group, claims = gang("pinned", 2)
    only_three = SelectorTerm((Requirement("metadata.name", "In", ("worker-3",), field=True),))
    members = tuple(Member(m.namespace, m.name, m.uid, m.requests, affinity=(only_three,), claims=m.claims) for m in group.members)
    result = plan(with_claims(cluster(), claims), Group("ml", "pinned", 2, members))
    assert isinstance(result, Fits) and result.nodes == {"worker-3"}
    tolerant = tuple(
        Member(m.namespace, m.name, m.uid, m.requests, tolerations=(Toleration(operator="Exists"),), claims=()) for m in group.members
    )
    result = plan(cluster(workers=0), Group("ml", "cp", 2, tolerant))
    assert isinstance(result, Fits) and result.nodes == {"control-plane"}


def test_cel_request_selectors_and_capacity_quantities() -> None:
    devices = [
        *gpus("worker-1", 1, model="OLD"),
        Device(
            GPU,
            "worker-1",
            "gpu-big",
            node_name="worker-1",
            attributes=frozen_map({"model": "NEW"}),
            capacity=frozen_map({"memory": 160 * 2**30}),
        ),
    ]
    claim = one_gpu_claim(
        "ml",
        "c",
        selectors=(f"device.attributes['{GPU}'].model == 'NEW'", f"device.capacity['{GPU}'].memory.compareTo(quantity('100Gi')) >= 0"),
    )
    snapshot = Snapshot((node("worker-1"),), tuple(devices), frozen_map({GPU: GPU_CLASS}), frozen_map({claim.key: claim}))
    member = Member("ml", "p", "uid-p", claims=("c",))
    result = plan(snapshot, Group("ml", "g", 1, (member,)))
    assert isinstance(result, Fits) and _devices(result) == [(GPU, "worker-1", "gpu-big")]


def test_all_mode_takes_every_matching_device_or_none() -> None:
    claim = one_gpu_claim("ml", "all", mode="All")
    snapshot = with_claims(cluster(workers=1, gpus_per_worker=4, control_plane=False), [claim])
    member = Member("ml", "p", "uid-p", claims=("all",))
    result = plan(snapshot, Group("ml", "g", 1, (member,)))
    assert isinstance(result, Fits) and len(_devices(result)) == 4
    busy = Snapshot(snapshot.nodes, snapshot.devices, snapshot.classes, snapshot.claims, frozenset({(GPU, "worker-1", "gpu-2")}))
    assert isinstance(plan(busy, Group("ml", "g", 1, (member,))), Short)


def test_match_attribute_keeps_a_claims_devices_alike() -> None:
    devices = [Device(GPU, "worker-1", f"gpu-{i}", node_name="worker-1", attributes=frozen_map({"numa": i % 2})) for i in range(3)]
    requests = (DeviceRequest("a", GPU, count=1), DeviceRequest("b", GPU, count=1))
    claim = Claim("ml", "pair", "uid-pair", requests, constraints=(MatchAttribute(f"{GPU}/numa"),))
    devices = [
        Device(d.driver, d.pool, d.name, node_name=d.node_name, attributes=frozen_map({f"{GPU}/numa": d.attributes["numa"]}))
        for d in devices
    ]
    snapshot = Snapshot((node("worker-1"),), tuple(devices), frozen_map({GPU: GPU_CLASS}), frozen_map({claim.key: claim}))
    result = plan(snapshot, Group("ml", "g", 1, (Member("ml", "p", "uid-p", claims=("pair",)),)))
    assert isinstance(result, Fits)
    assert sorted(d for _, _, d in _devices(result)) == ["gpu-0", "gpu-2"], "both on numa 0"


def test_network_attached_pool_serves_every_node() -> None:
    fabric = [Device("fabric.example.com", "fabric", f"link-{i}", all_nodes=True) for i in range(2)]
    classes = frozen_map({"link": DeviceClass("link", ("device.driver == 'fabric.example.com'",))})
    claims = [Claim("ml", f"c{i}", f"u{i}", (DeviceRequest("r", "link"),)) for i in range(3)]
    snapshot = Snapshot((node("n1"), node("n2")), tuple(fabric), classes, frozen_map({c.key: c for c in claims}))
    members = tuple(Member("ml", f"p{i}", f"up{i}", claims=(f"c{i}",)) for i in range(3))
    result = plan(snapshot, Group("ml", "g", 3, members))
    assert isinstance(result, Short)
    assert "can never fit: needs 3 x link, the cluster has 2" in result.message
    assert isinstance(plan(snapshot, Group("ml", "g", 2, members[:2])), Fits)


def test_a_claim_shared_by_members_is_allocated_once_and_keeps_them_together() -> None:
    shared = one_gpu_claim("ml", "shared")
    members = tuple(Member("ml", f"p{i}", f"u{i}", claims=("shared",)) for i in range(3))
    result = plan(with_claims(cluster(control_plane=False), [shared]), Group("ml", "g", 3, members))
    assert isinstance(result, Fits)
    assert len(result.claims) == 1 and len(result.nodes) == 1


def test_a_preallocated_claim_pins_its_pod() -> None:
    claim = Claim("ml", "done", "u", (DeviceRequest("gpu", GPU),), allocated=((GPU, "worker-2", "gpu-0"),), allocated_node="worker-2")
    member = Member("ml", "p", "up", claims=("done",))
    result = plan(with_claims(cluster(held=[(GPU, "worker-2", "gpu-0")]), [claim]), Group("ml", "g", 1, (member,)))
    assert isinstance(result, Fits) and result.nodes == {"worker-2"} and result.claims == ()


def test_a_failing_selector_refuses_the_claim_naming_it() -> None:
    """Upstream's allocator aborts the pod on a CEL runtime error; the planner refuses it too and says where."""
    matcher = DeviceMatcher()
    claim = one_gpu_claim("ml", "c", selectors=("device.attributes['nope'].missing == 1",))
    result = plan(with_claims(cluster(), [claim]), Group("ml", "g", 1, (Member("ml", "p", "u", claims=("c",)),)), matcher)
    assert isinstance(result, Short)
    assert "claim ml/c spec.devices.requests[" in result.message and "selector fails on device" in result.message


def test_a_domain_the_device_lacks_is_an_empty_map_so_has_is_false() -> None:
    """Found by the upstream oracle: in Kubernetes' CEL `device.attributes["d"]` of a domain the device has no
    attribute in is an empty map, so a has() guard is false there and the selector does not fail."""
    guarded = 'has(device.attributes["other.example.com"].numa) && device.attributes["other.example.com"].numa == 0'
    claim = one_gpu_claim("ml", "c", selectors=(guarded,))
    result = plan(with_claims(cluster(), [claim]), Group("ml", "g", 1, (Member("ml", "p", "u", claims=("c",)),)))
    assert isinstance(result, Short) and not result.unmodelled and "selector fails" not in result.message
    claim = one_gpu_claim("ml", "c", selectors=(f'has(device.attributes["other.example.com"].numa) || device.driver == "{GPU}"',))
    assert isinstance(plan(with_claims(cluster(), [claim]), Group("ml", "g", 1, (Member("ml", "p", "u", claims=("c",)),))), Fits)


def test_search_finds_plans_greedy_packing_misses() -> None:
    """Big-then-small: greedy packing could strand capacity; the search must still find the plan."""
    nodes = (node("n1", cpu=3000), node("n2", cpu=2000))
    members = (
        Member("ml", "a", "ua", requests=frozen_map({"cpu": 2000})),
        Member("ml", "b", "ub", requests=frozen_map({"cpu": 3000})),
    )
    result = plan(Snapshot(nodes), Group("ml", "g", 2, members))
    assert isinstance(result, Fits)
    assert dict((m.name, n) for m, n in result.placements) == {"a": "n2", "b": "n1"}


TRAIN = {"app": "train"}


def _zones(*names: str) -> Snapshot:
    """Nodes named <zone><n> (a1, b2, ...) labelled with their zone, two GPUs each."""
    nodes = [node(n, labels={"zone": n[0]}) for n in names]
    return Snapshot(tuple(nodes), tuple(d for n in nodes for d in gpus(n.name, 2)), frozen_map({GPU: GPU_CLASS}))


def test_required_anti_affinity_on_hostname_puts_one_rank_per_node() -> None:
    group, claims = gang("train", 3)
    assert len(plan(with_claims(cluster(), claims), group).nodes) == 2, "without the rule the gang packs"
    apart = with_rules(group, labels=TRAIN, pod_anti_affinity=(term(app="train"),))
    result = plan(with_claims(cluster(workers=3), claims), apart)
    assert isinstance(result, Fits) and result.nodes == {"worker-1", "worker-2", "worker-3"}
    result = plan(with_claims(cluster(workers=2), claims), apart)
    assert isinstance(result, Short)
    assert result.message == (
        "minCount 3: 2 of 3 members fit; no combination of nodes fits the group; "
        "2 node(s) didn't match pod anti-affinity rules; 1 node(s) had untolerated taint(s)"
    )


def test_self_affinity_by_zone_keeps_the_gang_in_the_one_zone_with_room() -> None:
    group, claims = gang("train", 3)
    snapshot = with_claims(_zones("a1", "b1", "b2"), claims)
    assert {n[0] for n in plan(snapshot, group).nodes} == {"a", "b"}, "without the rule greedy packing spans zones"
    together = with_rules(group, labels=TRAIN, pod_affinity=(term("zone", app="train"),))
    result = plan(snapshot, together)
    assert isinstance(result, Fits) and result.nodes == {"b1", "b2"}
    result = plan(with_pods(snapshot, [running("ps", "a1", labels=TRAIN)]), together)
    assert isinstance(result, Short), "a pod already matching in zone a draws the gang there, and zone a has 2 GPUs"
    assert result.message.endswith("no combination of nodes fits the group; 2 node(s) didn't match pod affinity rules")


def test_affinity_to_another_role_places_that_role_first() -> None:
    """Workers need a parameter server in their zone; the server is named after them, yet is placed first."""
    snapshot = _zones("a1", "b1")
    server = Member("ml", "zz-ps", "u-ps", labels=frozen_map({"role": "ps"}))
    workers = tuple(Member("ml", f"w{i}", f"u-w{i}", pod_affinity=(term("zone", role="ps"),)) for i in range(2))
    result = plan(snapshot, Group("ml", "g", 3, (*workers, server)))
    assert isinstance(result, Fits)
    zone = {m.name: n[0] for m, n in result.placements}
    assert zone["w0"] == zone["w1"] == zone["zz-ps"]


def test_a_member_joining_a_lone_self_affine_member_must_share_its_domain() -> None:
    """b matches a's zone term but is drawn to zone b by its own rule: the scheduler could bind b first and then
    refuse a forever (a is no longer the first of its set), so a and b must not be split."""
    snapshot = with_pods(_zones("a1", "b1"), [running("cache", "b1", labels={"role": "cache"})])
    a = Member("ml", "a", "u-a", labels=frozen_map(TRAIN), pod_affinity=(term("zone", app="train"),))
    b = Member("ml", "b", "u-b", labels=frozen_map(TRAIN), pod_affinity=(term("zone", role="cache"),))
    result = plan(snapshot, Group("ml", "g", 2, (a, b)))
    assert isinstance(result, Fits) and result.nodes == {"b1"}


def test_an_existing_pods_anti_affinity_keeps_matching_members_off_its_node() -> None:
    group, claims = gang("train", 2)
    group = with_rules(group, labels=TRAIN)
    assert plan(with_claims(cluster(), claims), group).nodes == {"worker-1"}, "without the guard it packs on worker-1"
    guard = running("guard", "worker-1", anti=[term(app="train")])
    result = plan(with_pods(with_claims(cluster(), claims), [guard]), group)
    assert isinstance(result, Fits) and "worker-1" not in result.nodes
    result = plan(with_pods(with_claims(cluster(workers=1), claims), [guard]), group)
    assert result.message == (
        "minCount 2: 0 of 2 members fit; no combination of nodes fits the group; "
        "1 node(s) didn't satisfy existing pods anti-affinity rules; 1 node(s) had untolerated taint(s)"
    )
    elsewhere = running("guard", "worker-1", namespace="other", anti=[term(app="train", namespace="other")])
    assert plan(with_pods(with_claims(cluster(), claims), [elsewhere]), group).nodes == {"worker-1"}, "its term looks in its own namespace"


def test_spread_max_skew_one_puts_one_member_per_node() -> None:
    group, claims = gang("train", 3)
    spread = with_rules(group, labels=TRAIN, spread=(Spread(HOSTNAME, 1, selector(app="train")),))
    result = plan(with_claims(cluster(control_plane=False), claims), spread)
    assert isinstance(result, Fits) and result.nodes == {"worker-1", "worker-2", "worker-3"}
    two = replace(spread, members=spread.members[:2], min_count=2)
    result = plan(with_pods(with_claims(cluster(control_plane=False), claims), [running("old", "worker-1", labels=TRAIN)]), two)
    assert isinstance(result, Fits) and result.nodes == {"worker-2", "worker-3"}, "an existing matching pod counts"
    gone = running("old", "worker-1", labels=TRAIN, terminating=True)
    assert plan(with_pods(with_claims(cluster(control_plane=False), claims), [gone]), two).nodes == {"worker-1", "worker-2"}


@pytest.mark.parametrize(
    ("taints_policy", "min_domains", "expected"),
    [
        ("Ignore", 1, None),  # the control plane is a domain that never gets a pod: the minimum stays 0
        ("Honor", 1, [2, 1, 1]),
        ("Honor", 4, None),  # 3 domains < minDomains 4: the minimum counts as 0 again
        ("Honor", 3, [2, 1, 1]),
    ],
)
def test_spread_domains_follow_the_node_policies_and_min_domains(taints_policy: str, min_domains: int, expected) -> None:
    group, claims = gang("train", 4, cpu=50)
    spread = Spread(
        HOSTNAME, 1, selector(app="train"), min_domains=min_domains, node_affinity_policy="Ignore", node_taints_policy=taints_policy
    )
    result = plan(with_claims(cluster(gpus_per_worker=4), claims), with_rules(group, labels=TRAIN, spread=(spread,)))
    if expected is None:
        assert isinstance(result, Short) and "node(s) didn't match pod topology spread constraints" in result.message
    else:
        assert isinstance(result, Fits)
        assert sorted(Counter(n for _, n in result.placements).values(), reverse=True) == expected


def test_spread_with_min_domains_caps_the_pinned_node_at_max_skew() -> None:
    """Phalanx's pin is required node affinity: under nodeAffinityPolicy Honor the pinned pod's only domain is its
    node, so with minDomains above 1 kube-scheduler allows at most maxSkew matching pods on it."""
    group, claims = gang("train", 4)
    spread = Spread("zone", 1, selector(app="train"), min_domains=2)
    result = plan(with_claims(_zones("a1", "a2", "b1", "b2"), claims), with_rules(group, labels=TRAIN, spread=(spread,)))
    assert isinstance(result, Fits) and result.nodes == {"a1", "a2", "b1", "b2"}, "zones 2 and 2, and one per node"


@pytest.mark.parametrize(
    ("wanted", "used", "clash"),
    [
        (port(8080), port(8080), True),
        (port(8080), port(8080, ip="10.0.0.1"), True),  # 0.0.0.0 binds every address
        (port(8080, ip="10.0.0.1"), port(8080), True),
        (port(8080, ip="10.0.0.1"), port(8080, ip="10.0.0.2"), False),
        (port(8080, "UDP"), port(8080), False),
        (port(8081), port(8080), False),
    ],
)
def test_host_ports_clash_as_the_scheduler_sees_it(wanted, used, clash: bool) -> None:
    snapshot = with_pods(cluster(workers=1), [running("exporter", "worker-1", ports=[used])])
    result = plan(snapshot, Group("ml", "g", 1, (Member("ml", "p", "u", host_ports=(wanted,)),)))
    assert isinstance(result, Short) == clash
    if clash:
        assert "1 node(s) didn't have free ports for the requested pod ports" in result.message


def test_host_ports_clash_with_existing_pods_and_between_members() -> None:
    group, claims = gang("train", 2)
    group = with_rules(group, host_ports=(port(8080),))
    result = plan(with_pods(with_claims(cluster(), claims), [running("exporter", "worker-1", ports=[port(8080)])]), group)
    assert isinstance(result, Fits) and result.nodes == {"worker-2", "worker-3"}


def test_a_namespace_selector_is_named_not_guessed() -> None:
    group, claims = gang("train", 2)
    group = with_rules(group, labels=TRAIN)
    snapshot = with_claims(cluster(), claims)
    by_team = replace(term(app="train"), namespaces=frozenset(), namespace_selector=selector(team="ml"))
    members = (replace(group.members[0], pod_affinity=(by_team,)), group.members[1])
    result = plan(snapshot, replace(group, members=members))
    assert isinstance(result, Short)
    assert result.message == "minCount 2: not planned; member train-0: podAffinity namespaceSelector is not modelled by Phalanx"
    guard = running("guard", "worker-1", namespace="other", anti=[by_team])
    assert plan(with_pods(snapshot, [guard]), group).message == (
        "minCount 2: not planned; member train-0 (and 1 more): podAntiAffinity namespaceSelector of existing pod other/guard "
        "is not modelled by Phalanx"
    )
    everywhere = running("guard", "worker-1", namespace="other", anti=[replace(by_team, namespace_selector=())])
    result = plan(with_pods(snapshot, [everywhere]), group)
    assert isinstance(result, Fits) and "worker-1" not in result.nodes, "`{}` is every namespace: modelled"


def _exactly(tally: pods.Tally) -> tuple:
    """The tally as plain dicts: Counter equality ignores zero entries, the checks test key presence."""
    skews = {k: (dict(v.added), dict(v.levels), v.low) for k, v in tally.skews.items()}
    return dict(tally.pairs), dict(tally.sizes), skews, dict(tally.ports), dict(tally.bound), dict(tally.anchors)


def test_removing_members_restores_the_tally_exactly() -> None:
    """The search backtracks: every undo must leave the tally as it found it, or later checks see ghosts."""
    snapshot = with_pods(_zones("a1", "a2", "b1"), [running("old", "a1", labels=TRAIN)])
    member = Member(
        "ml",
        "m",
        "u",
        labels=frozen_map(TRAIN),
        pod_affinity=(term("zone", app="train"),),
        pod_anti_affinity=(term(app="train"),),
        spread=(Spread("zone", 1, selector(app="train"), min_domains=2), Spread(HOSTNAME, 1, selector(app="train"))),
        host_ports=(port(8080),),
    )
    members = [replace(member, name=f"m{i}", uid=f"u{i}") for i in range(3)]
    by_name = {n.name: n for n in snapshot.nodes}
    rules = pods.Rules(snapshot, members, by_name)
    tally = rules.tally()
    fresh = _exactly(tally)
    steps = list(zip(members, ["a2", "b1", "a1"], strict=True))
    for m, where in steps:
        rules.add(tally, m, by_name[where])
    assert _exactly(tally) != fresh
    for m, where in reversed(steps):
        rules.remove(tally, m, by_name[where])
    assert _exactly(tally) == fresh


_PLAN_IN_CHILD = """
import sys
sys.path.insert(0, sys.argv[1])
from builders import cluster, gang, with_claims
from phalanx.planner import plan
group, claims = gang("train", 6, min_count=4)
print(repr(plan(with_claims(cluster(workers=4, gpus_per_worker=2), claims), group)))
"""


def test_results_do_not_depend_on_the_hash_seed() -> None:
    """Two operator processes (a restart, a second replica) must reach the same plan from the same cluster."""
    answers = {
        subprocess.run(
            [sys.executable, "-c", _PLAN_IN_CHILD, str(Path(__file__).parent)],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("0", "1", "4242")
    }
    assert len(answers) == 1, answers


def test_members_whose_claims_ask_differently_are_not_interchangeable() -> None:
    """Found by the upstream oracle: p0 wants one GPU, p1 All GPUs of its node. n1's other GPU is held, so p1 fits only on
    n0 and p0 must take n1; symmetry breaking that counted both members alike never tried p1 on an earlier node."""
    nodes = (node("n0"), node("n1"))
    devices = gpus("n0", 1) + gpus("n1", 2)
    claims = (one_gpu_claim("ml", "one"), one_gpu_claim("ml", "all", mode="All"))
    snapshot = Snapshot(
        nodes=nodes,
        devices=tuple(devices),
        classes=frozen_map({GPU: GPU_CLASS}),
        claims=frozen_map({c.key: c for c in claims}),
        held=frozenset({(GPU, "n1", "gpu-0")}),
    )
    members = (Member("ml", "p0", "u0", claims=("one",)), Member("ml", "p1", "u1", claims=("all",)))
    result = plan(snapshot, Group("ml", "g", 2, members))
    assert isinstance(result, Fits)
    assert {m.name: n for m, n in result.placements} == {"p0": "n1", "p1": "n0"}


def _sharing(name: str, size: int, shared: Claim, *, users: int, min_count: int | None = None) -> tuple[Group, list[Claim]]:
    """A gang of one-GPU ranks whose first `users` ranks also use `shared` (the group's claim, when all of them)."""
    group, claims = gang(name, size, min_count=min_count)
    members = tuple(replace(m, claims=(*m.claims, shared.name)) if i < users else m for i, m in enumerate(group.members))
    return replace(group, members=members), [*claims, shared]


def test_a_claim_the_whole_group_shares_is_counted_once_in_the_shortage() -> None:
    """Three ranks of one GPU each, and one group claim of two GPUs they all use: any quorum needs 3 + 2, not 3 (as if
    a shared claim needed nothing) nor 3 + 3 x 2 (once per rank)."""
    held = [(GPU, "worker-1", "gpu-0"), (GPU, "worker-1", "gpu-1")]
    group, claims = _sharing("train", 3, one_gpu_claim("ml", "train-shared", count=2), users=3)
    result = plan(with_claims(cluster(held=held), claims), group)
    assert isinstance(result, Short)
    assert "short 1 x gpu.example.com (4 free of 6)" in result.message, result.message


def test_a_claim_a_quorum_can_leave_out_counts_nothing() -> None:
    """minCount 2 of 4, and two ranks share a claim of two GPUs: a quorum of the other two needs none of it."""
    held = [(GPU, f"worker-{w}", f"gpu-{i}") for w in (1, 2, 3) for i in (0, 1)][:5]
    group, claims = _sharing("train", 4, one_gpu_claim("ml", "train-shared", count=2), users=2, min_count=2)
    result = plan(with_claims(cluster(held=held), claims), group)
    assert isinstance(result, Short)
    assert "short 1 x gpu.example.com (1 free of 6)" in result.message, result.message
