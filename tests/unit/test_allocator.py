"""The DRA features kube-scheduler's structured allocator honours, row by row, on the pure planner."""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal

from builders import node
from phalanx.planner import Fits, Short, plan
from phalanx.planner.model import (
    CapacityPolicy,
    Claim,
    CounterUse,
    Device,
    DeviceClass,
    DeviceRequest,
    Group,
    MatchAttribute,
    Member,
    Snapshot,
    Taint,
    Toleration,
    frozen_map,
)
from phalanx.scheduling import accessors, deviceinputs
from phalanx.scheduling.record import allocation, reservation_of

DRIVER = "features.example.com"
CLASS = DeviceClass("features", selectors=(f"device.driver == '{DRIVER}'",))
SMALL = DeviceClass("small", selectors=(f"device.driver == '{DRIVER}'", "device.attributes['features.example.com'].size == 'small'"))


def dev(name: str, *, node_name: str | None = "n1", size: str = "big", **fields) -> Device:
    return Device(DRIVER, node_name or "net", name, node_name=node_name, attributes=frozen_map({f"{DRIVER}/size": size}), **fields)


def snapshot(devices, *, held=(), shared=None, counters=None, nodes=("n1",), extended=None) -> Snapshot:
    return Snapshot(
        nodes=tuple(node(n) for n in nodes),
        devices=tuple(devices),
        classes=frozen_map({"features": CLASS, "small": SMALL}),
        held=frozenset(held),
        shared=frozen_map(shared or {}),
        counters=frozen_map(counters or {}),
        extended=frozen_map(extended or {}),
    )


def gang(snap: Snapshot, *requests_per_member: tuple[DeviceRequest, ...], constraints=(), requests=None) -> tuple[Snapshot, Group]:
    claims, members = {}, []
    for i, reqs in enumerate(requests_per_member):
        claim = Claim("ml", f"c{i}", f"uid-c{i}", tuple(reqs), tuple(constraints))
        claims[claim.key] = claim
        members.append(Member("ml", f"p{i}", f"uid-p{i}", frozen_map(requests or {"cpu": 10}), claims=(claim.name,)))
    snap = replace(snap, claims=frozen_map(claims))
    return snap, Group("ml", "g", len(members), tuple(members))


def results(result) -> list[tuple[str, str]]:
    assert isinstance(result, Fits), getattr(result, "message", result)
    return [(r.request, r.device) for c in sorted(result.claims, key=lambda c: c.name) for r in c.results]


def one(name: str = "r", **fields) -> DeviceRequest:
    return DeviceRequest(name, fields.pop("device_class", "features"), **fields)


# --- DRAPrioritizedList: firstAvailable ---


def test_first_available_takes_the_first_subrequest_that_fits() -> None:
    snap, group = gang(
        snapshot([dev("a", size="small"), dev("b")]), (DeviceRequest("r", "", subrequests=(one("big", count=3), one("one"))),)
    )
    assert results(plan(snap, group)) == [("r/one", "a")]


def test_first_available_prefers_the_first_subrequest_when_it_fits() -> None:
    subs = (one("small", device_class="small"), one("any"))
    snap, group = gang(snapshot([dev("a"), dev("b", size="small")]), (DeviceRequest("r", "", subrequests=subs),))
    assert results(plan(snap, group)) == [("r/small", "b")]


def test_first_available_falls_back_for_the_second_member_once_the_first_took_the_preferred_device() -> None:
    subs = (one("small", device_class="small"), one("any"))
    req = (DeviceRequest("r", "", subrequests=subs),)
    snap, group = gang(snapshot([dev("a"), dev("b", size="small")]), req, req)
    assert sorted(results(plan(snap, group))) == [("r/any", "a"), ("r/small", "b")]


def test_first_available_with_no_subrequest_fitting_is_short() -> None:
    subs = (one("small", device_class="small"),)
    snap, group = gang(snapshot([dev("a")]), (DeviceRequest("r", "", subrequests=subs),))
    assert isinstance(plan(snap, group), Short)


def test_subrequest_class_config_names_the_subrequest_and_covers_all() -> None:
    configured = DeviceClass("features", CLASS.selectors, config=(frozen_map({"opaque": {"driver": DRIVER, "parameters": {}}}),))
    snap, group = gang(snapshot([dev("a")]), (DeviceRequest("r", "", subrequests=(one("x"),)),))
    snap = replace(snap, classes=frozen_map({"features": configured}))
    result = plan(snap, group)
    assert isinstance(result, Fits)
    assert result.claims[0].config == ({"source": "FromClass", "opaque": {"driver": DRIVER, "parameters": {}}},)


# --- DRAAdminAccess ---


def test_admin_access_takes_a_device_in_use_and_consumes_nothing() -> None:
    snap, group = gang(snapshot([dev("a")], held={(DRIVER, "n1", "a")}), (one(admin_access=True),))
    result = plan(snap, group)
    assert results(result) == [("r", "a")]
    assert result.claims[0].results[0].admin_access


def test_admin_access_leaves_the_device_to_the_next_member() -> None:
    snap, group = gang(snapshot([dev("a")]), (one(admin_access=True),), (one(),))
    assert sorted(results(plan(snap, group))) == [("r", "a"), ("r", "a")]


def test_admin_access_result_is_written_and_counts_as_held_by_nobody() -> None:
    obj = {
        "status": {
            "allocation": {"devices": {"results": [{"request": "r", "driver": DRIVER, "pool": "n1", "device": "a", "adminAccess": True}]}}
        }
    }
    assert accessors.dedicated_ids(obj) == ()
    snap, group = gang(snapshot([dev("a")]), (one(admin_access=True),))
    written = allocation(reservation_of(plan(snap, group)).claims[0])
    assert written["devices"]["results"] == [{"request": "r", "driver": DRIVER, "pool": "n1", "device": "a", "adminAccess": True}]


# --- DRAPartitionableDevices: shared counters ---

COUNTERS = {(DRIVER, "n1"): frozen_map({"gpu-0": frozen_map({"memory": Decimal(8)})})}


def partitions() -> list[Device]:
    whole = dev("whole", consumes=(CounterUse("gpu-0", frozen_map({"memory": Decimal(8)})),))
    half0 = dev("half-0", consumes=(CounterUse("gpu-0", frozen_map({"memory": Decimal(4)})),))
    half1 = dev("half-1", consumes=(CounterUse("gpu-0", frozen_map({"memory": Decimal(4)})),))
    return [whole, half0, half1]


def test_a_half_partition_in_use_blocks_the_whole_device() -> None:
    snap, group = gang(snapshot(partitions(), held={(DRIVER, "n1", "half-0")}, counters=COUNTERS), (one(),))
    assert results(plan(snap, group)) == [("r", "half-1")]


def test_the_whole_device_uses_every_counter_so_no_half_is_left() -> None:
    snap, group = gang(snapshot(partitions(), counters=COUNTERS), (one(),), (one(),))
    result = plan(snap, group)
    assert isinstance(result, Short), "the first member takes `whole`: both halves' counters are spent"


def test_two_halves_fit_when_asked_for_in_one_claim() -> None:
    snap, group = gang(snapshot(partitions(), counters=COUNTERS), (one(count=2),))
    assert results(plan(snap, group)) == [("r", "half-0"), ("r", "half-1")]


def test_counters_of_a_shared_device_in_use_are_not_charged_twice() -> None:
    share = dev("s", allow_multiple=True, consumes=(CounterUse("gpu-0", frozen_map({"memory": Decimal(8)})),))
    snap, group = gang(snapshot([share], shared={(DRIVER, "n1", "s"): {}}, counters=COUNTERS), (one(),))
    assert results(plan(snap, group)) == [("r", "s")]


# --- DRADeviceTaints ---


def test_a_no_schedule_taint_excludes_the_device_unless_tolerated() -> None:
    tainted = dev("a", taints=(Taint("maintenance", "yes", "NoSchedule"),))
    snap, group = gang(snapshot([tainted]), (one(),))
    assert isinstance(plan(snap, group), Short)
    snap, group = gang(snapshot([tainted]), (one(tolerations=(Toleration("maintenance", "Exists"),)),))
    result = plan(snap, group)
    assert results(result) == [("r", "a")]
    assert result.claims[0].results[0].tolerations == (Toleration("maintenance", "Exists"),)


def test_taint_effect_none_and_wrong_toleration_value() -> None:
    snap, group = gang(snapshot([dev("a", taints=(Taint("k", "v", "None"),))]), (one(),))
    assert results(plan(snap, group)) == [("r", "a")]
    snap, group = gang(snapshot([dev("a", taints=(Taint("k", "v", "NoExecute"),))]), (one(tolerations=(Toleration("k", "Equal", "w"),)),))
    assert isinstance(plan(snap, group), Short)


def test_device_taint_rules_apply_except_phalanx_own() -> None:
    slices = [
        {
            "metadata": {"name": "s"},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n1",
                "devices": [{"name": "a"}],
            },
        }
    ]
    theirs = {
        "metadata": {"name": "x"},
        "spec": {"deviceSelector": {"driver": DRIVER, "device": "a"}, "taint": {"key": "k", "effect": "NoSchedule"}},
    }
    ours = {
        "metadata": {"name": "y", "labels": {"app.kubernetes.io/managed-by": "phalanx"}},
        "spec": {"deviceSelector": {"device": "a"}, "taint": {"key": "h", "effect": "NoSchedule"}},
    }
    from phalanx.api import keys

    ours["metadata"]["labels"] = {keys.MANAGED_BY_LABEL: keys.MANAGER_NAME}
    assert deviceinputs.devices(slices, [ours])[0].taints == ()
    assert deviceinputs.devices(slices, [theirs])[0].taints == (Taint("k", "", "NoSchedule"),)


# --- DRAConsumableCapacity ---

BANDWIDTH = frozen_map({"bw": CapacityPolicy(Decimal(10), default=Decimal(1), minimum=Decimal(1), step=Decimal(2), maximum=Decimal(9))})


def test_a_shared_device_serves_claims_until_its_capacity_is_spent() -> None:
    nic = dev("nic", allow_multiple=True, capacities=BANDWIDTH)
    req = (one(capacity=frozen_map({"bw": Decimal(4)})),)  # rounded up to 5 (min 1, step 2)
    snap, group = gang(snapshot([nic]), req, req)
    result = plan(snap, group)
    assert sorted(results(result)) == [("r", "nic"), ("r", "nic")]
    assert {r.consumed["bw"] for c in result.claims for r in c.results} == {Decimal(5)}
    assert len({r.share_id for c in result.claims for r in c.results}) == 2
    snap, group = gang(snapshot([nic]), req, req, req)
    assert isinstance(plan(snap, group), Short), "three shares of 5 exceed 10"


def test_capacity_policy_default_valid_values_and_max() -> None:
    nic = dev("nic", allow_multiple=True, capacities=BANDWIDTH)
    snap, group = gang(snapshot([nic]), (one(),))
    assert plan(snap, group).claims[0].results[0].consumed["bw"] == Decimal(1), "no request: the default"
    snap, group = gang(snapshot([nic]), (one(capacity=frozen_map({"bw": Decimal(10)})),))
    assert isinstance(plan(snap, group), Short), "above the range's max"
    valued = dev(
        "v", allow_multiple=True, capacities=frozen_map({"bw": CapacityPolicy(Decimal(10), valid_values=(Decimal(2), Decimal(6)))})
    )
    snap, group = gang(snapshot([valued]), (one(capacity=frozen_map({"bw": Decimal(3)})),))
    assert plan(snap, group).claims[0].results[0].consumed["bw"] == Decimal(6)


def test_capacity_already_consumed_counts() -> None:
    nic = dev("nic", allow_multiple=True, capacities=BANDWIDTH)
    snap, group = gang(snapshot([nic], shared={(DRIVER, "n1", "nic"): {"bw": Decimal(7)}}), (one(capacity=frozen_map({"bw": Decimal(4)})),))
    assert isinstance(plan(snap, group), Short)


def test_a_request_for_capacity_the_device_lacks_does_not_fit() -> None:
    snap, group = gang(snapshot([dev("a")]), (one(capacity=frozen_map({"bw": Decimal(1)})),))
    assert isinstance(plan(snap, group), Short)


def test_share_is_written_with_share_id_and_consumed_capacity() -> None:
    nic = dev("nic", allow_multiple=True, capacities=BANDWIDTH)
    snap, group = gang(snapshot([nic]), (one(capacity=frozen_map({"bw": Decimal(4)})),))
    written = allocation(reservation_of(plan(snap, group)).claims[0])["devices"]["results"][0]
    assert written["consumedCapacity"] == {"bw": "5"} and len(written["shareID"]) == 36


# --- DRADeviceBindingConditions ---


def test_binding_conditions_are_copied_and_their_pools_come_last() -> None:
    slow = Device(
        DRIVER, "a-pool", "x", node_name="n1", binding_conditions=("Attached",), binding_failure_conditions=("Failed",), binds_to_node=True
    )
    snap, group = gang(snapshot([slow, dev("b")]), (one(),))
    assert results(plan(snap, group)) == [("r", "b")], "pools with binding conditions are tried last"
    snap, group = gang(snapshot([slow]), (one(),))
    result = plan(snap, group)
    written = allocation(reservation_of(result).claims[0])
    assert written["devices"]["results"][0]["bindingConditions"] == ["Attached"]
    assert written["devices"]["results"][0]["bindingFailureConditions"] == ["Failed"]


def test_network_device_allocation_carries_its_slice_selector_and_binds_to_node_pins() -> None:
    from phalanx.planner.model import Requirement, SelectorTerm

    rack = (SelectorTerm((Requirement("rack", "In", ("r1",)),)),)
    net = Device(DRIVER, "net", "link", node_selector=rack)
    n = node("n1", labels={"rack": "r1"})
    snap = Snapshot(nodes=(n,), devices=(net,), classes=frozen_map({"features": CLASS}))
    snap, group = gang(snap, (one(),))
    claim = reservation_of(plan(snap, group)).claims[0]
    assert allocation(claim)["nodeSelector"] == {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]
    }
    snap = Snapshot(nodes=(n,), devices=(Device(DRIVER, "net", "any", all_nodes=True),), classes=frozen_map({"features": CLASS}))
    snap, group = gang(snap, (one(),))
    assert "nodeSelector" not in allocation(reservation_of(plan(snap, group)).claims[0])


# --- constraints and limits ---


def test_distinct_attribute_takes_different_values() -> None:
    devices = [dev("a", size="x"), dev("b", size="x"), dev("c", size="y")]
    snap, group = gang(snapshot(devices), (one(count=2),), constraints=(MatchAttribute(f"{DRIVER}/size", distinct=True),))
    assert results(plan(snap, group)) == [("r", "a"), ("r", "c")]


def test_more_than_32_results_is_named() -> None:
    snap, group = gang(snapshot([dev(f"d{i}") for i in range(40)]), (one(count=33),))
    result = plan(snap, group)
    assert isinstance(result, Short) and "more than the 32" in result.message


def test_reserved_for_limit_is_named() -> None:
    snap, group = gang(snapshot([dev("a")]), (one(),))
    claim = Claim("ml", "c0", "uid-c0", (one(),), reserved_for=256)
    snap = replace(snap, claims=frozen_map({claim.key: claim}))
    result = plan(snap, group)
    assert isinstance(result, Short) and "reservedFor" in result.message


def test_unknown_request_fields_are_named() -> None:
    obj = {
        "metadata": {"namespace": "ml", "name": "c", "uid": "u"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "x", "future": 1}}]}},
    }
    assert deviceinputs.claim(obj).unmodelled == ("spec.devices.requests[0].exactly.future is not modelled",)


def test_a_pods_claims_are_searched_together_so_an_earlier_claim_backs_off() -> None:
    """Claim c0 would take the only small device first-fit; c1 needs it: upstream backtracks c0 onto the big one."""
    c0 = Claim("ml", "c0", "uid-c0", (one(),))
    c1 = Claim("ml", "c1", "uid-c1", (one(device_class="small"),))
    snap = snapshot([dev("a", size="small"), dev("b")])
    snap = replace(snap, claims=frozen_map({c0.key: c0, c1.key: c1}))
    group = Group("ml", "g", 1, (Member("ml", "p", "uid-p", frozen_map({"cpu": 10}), claims=("c0", "c1")),))
    assert results(plan(snap, group)) == [("r", "b"), ("r", "a")]


def test_a_search_too_large_is_named_instead_of_running_forever() -> None:
    """20 devices with distinct values out of 19: impossible, and only found so by trying every combination."""
    devices = [dev(f"d{i}", size=str(i % 19)) for i in range(40)]
    snap, group = gang(snapshot(devices), (one(count=20),), constraints=(MatchAttribute(f"{DRIVER}/size", distinct=True),))
    result = plan(snap, group)
    assert isinstance(result, Short) and "spec.devices.constraints (matchAttribute) need more than" in result.message


def test_all_devices_is_refused_where_a_pool_is_being_updated() -> None:
    snap, group = gang(snapshot([dev("a"), dev("b")]), (one(mode="All"),))
    assert results(plan(snap, group)) == [("r", "a"), ("r", "b")]
    updating = Device(DRIVER, "other", "", node_name="n1")
    refused = plan(replace(snap, incomplete=(updating,)), group)
    assert isinstance(refused, Short) and "asks for all devices, but a resource pool this node reaches is being updated" in refused.message
    elsewhere = Device(DRIVER, "other", "", node_name="n2")
    assert isinstance(plan(replace(snap, incomplete=(elsewhere,)), group), Fits)


def test_incomplete_pools_are_found_from_slices() -> None:
    def piece(name: str, count: int) -> dict:
        return {
            "metadata": {"name": name},
            "spec": {
                "driver": DRIVER,
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": count},
                "nodeName": "n1",
                "devices": [],
            },
        }

    assert [d.node_name for d in deviceinputs.incomplete_pools([piece("a", 2)])] == ["n1"]
    assert deviceinputs.incomplete_pools([piece("a", 2), piece("b", 2)]) == []


def test_a_victims_share_is_given_back_when_it_goes() -> None:
    from phalanx.planner.model import Victim, VictimPod
    from phalanx.planner.preemption import without

    nic = (DRIVER, "n1", "nic")
    snap = snapshot([dev("nic", allow_multiple=True, capacities=BANDWIDTH)], shared={nic: {"bw": Decimal(9)}})
    pod = VictimPod("ml", "v", "uid-v", "n1", shares=((nic, frozen_map({"bw": Decimal(9)})),))
    freed = without(snap, [Victim("pod ml/v", 0, "2025-01-01T00:00:00Z", False, (pod,))])
    assert nic not in freed.shared
    snap, group = gang(freed, (one(capacity=frozen_map({"bw": Decimal(4)})),))
    assert results(plan(snap, group)) == [("r", "nic")]


def test_a_shared_claim_on_a_network_device_is_used_only_where_its_selector_reaches() -> None:
    from phalanx.planner.model import Requirement, SelectorTerm

    rack = (SelectorTerm((Requirement("rack", "In", ("r1",)),)),)
    nodes = (node("n1", labels={"rack": "r1"}, cpu=15), node("n2", labels={"rack": "r2"}), node("n3", labels={"rack": "r1"}))
    snap = Snapshot(nodes=nodes, devices=(Device(DRIVER, "net", "link", node_selector=rack),), classes=frozen_map({"features": CLASS}))
    claim = Claim("ml", "shared", "uid-shared", (one(),))
    members = tuple(Member("ml", f"p{i}", f"uid-p{i}", frozen_map({"cpu": 10}), claims=("shared",)) for i in range(2))
    snap = replace(snap, claims=frozen_map({claim.key: claim}))
    result = plan(snap, Group("ml", "g", 2, members))
    assert isinstance(result, Fits) and result.nodes == {"n1", "n3"}, "one rank per node (cpu), never on rack r2"


def test_an_all_request_shares_no_device_with_another_request_of_its_claim() -> None:
    """Found by the upstream oracle: `one` then All of the class in one claim; upstream refuses, as All cannot have
    the device `one` took. With a device of another class in between, All still wants every matching device."""
    snap, group = gang(snapshot([dev("a"), dev("b")]), (one("one"), one("all", mode="All")))
    assert isinstance(plan(snap, group), Short)
    snap, group = gang(snapshot([dev("a", size="small"), dev("b")]), (one("one", device_class="small"), one("all", mode="All")))
    assert isinstance(plan(snap, group), Short)
    snap, group = gang(snapshot([dev("a", size="small"), dev("b")]), (one("all", mode="All", device_class="small"), one("one")))
    assert results(plan(snap, group)) == [("all", "a"), ("one", "b")]


def test_an_earlier_claim_backs_off_the_device_a_later_all_request_needs() -> None:
    """Found by the upstream oracle: c0 takes any device, c1 All small devices; first-fit c0 takes the small one,
    and only searching the pod's claims together moves c0 to the big one."""
    c0 = Claim("ml", "c0", "uid-c0", (one(),))
    c1 = Claim("ml", "c1", "uid-c1", (one(device_class="small", mode="All"),))
    snap = snapshot([dev("a", size="small"), dev("b")])
    snap = replace(snap, claims=frozen_map({c0.key: c0, c1.key: c1}))
    group = Group("ml", "g", 1, (Member("ml", "p", "uid-p", frozen_map({"cpu": 10}), claims=("c0", "c1")),))
    assert results(plan(snap, group)) == [("r", "b"), ("r", "a")]


def test_admin_access_consumes_capacity_while_its_pod_is_allocated_and_none_after() -> None:
    """Found by the upstream oracle: upstream's search charges an admin-access share's capacity (and counters) like any
    other, so one pod's two admin shares of 3 and 9 of 10 do not fit together; once written they count for nobody."""
    nic = dev("nic", allow_multiple=True, capacities=BANDWIDTH)
    big = one("big", admin_access=True, capacity=frozen_map({"bw": Decimal(9)}))
    c0 = Claim("ml", "c0", "uid-c0", (one(admin_access=True, capacity=frozen_map({"bw": Decimal(3)})),))
    c1 = Claim("ml", "c1", "uid-c1", (big,))
    snap = snapshot([nic])
    snap = replace(snap, claims=frozen_map({c0.key: c0, c1.key: c1}))
    together = Group("ml", "g", 1, (Member("ml", "p", "uid-p", frozen_map({"cpu": 10}), claims=("c0", "c1")),))
    assert isinstance(plan(snap, together), Short)
    apart = Group(
        "ml",
        "g",
        2,
        (
            Member("ml", "p0", "uid-p0", frozen_map({"cpu": 10}), claims=("c0",)),
            Member("ml", "p1", "uid-p1", frozen_map({"cpu": 10}), claims=("c1",)),
        ),
    )
    assert results(plan(snap, apart)) == [("r", "nic"), ("big", "nic")]


def test_admin_access_charges_counters_within_its_pod() -> None:
    """Upstream reserves an admin-access device's counters during the pod's search: two partitions of one counter set
    that do not fit together are refused to one pod, and given to two."""
    memory = frozen_map({"memory": Decimal(8)})
    parts = [dev(n, consumes=(CounterUse("gpu-0", memory),)) for n in ("p0", "p1")]
    counters = {(DRIVER, "n1"): {"gpu-0": {"memory": Decimal(8)}}}
    snap, group = gang(snapshot(parts, counters=counters), (one(admin_access=True), one("again", admin_access=True)))
    assert isinstance(plan(snap, group), Short)
    snap, group = gang(snapshot(parts, counters=counters), (one(admin_access=True),), (one(admin_access=True),))
    assert isinstance(plan(snap, group), Fits)


def test_an_all_request_whose_device_breaks_a_constraint_refuses_the_pod() -> None:
    """Found by the upstream oracle: upstream's allocator errs (aborting the pod) when a device an All request must take
    breaks a matchAttribute constraint, rather than falling back to the next firstAvailable subrequest."""
    unnumbered = Device(DRIVER, "n1", "a", node_name="n1")
    subs = (one("every", mode="All"), one("single"))
    snap, group = gang(
        snapshot([unnumbered, dev("b")]), (DeviceRequest("r", "", subrequests=subs),), constraints=(MatchAttribute(f"{DRIVER}/size"),)
    )
    result = plan(snap, group)
    assert isinstance(result, Short)
    assert "claim ml/c0 spec.devices.constraints[0] (matchAttribute features.example.com/size)" in result.message
    assert "features.example.com/n1/a" in result.message and "r/every" in result.message


def test_admin_access_backing_off_a_held_device_leaves_it_held() -> None:
    """Found by the upstream oracle: admin access on a held device, then All of the class; undoing the admin result
    must not free the device another claim holds, or All takes it."""
    shared = dev("s", allow_multiple=True, capacities=BANDWIDTH)
    snap, group = gang(snapshot([dev("a"), shared], held={(DRIVER, "n1", "a")}), (one("look", admin_access=True), one("every", mode="All")))
    assert isinstance(plan(snap, group), Short)


def test_every_all_request_is_worked_out_before_the_search_so_its_failing_selector_refuses_the_pod() -> None:
    """Found by the upstream oracle: upstream evaluates the selectors of every All (sub)request on every device before
    searching, so a selector failing for the second subrequest refuses the pod though the first would fit."""
    failing = one("strict", mode="All", selectors=("device.attributes['features.example.com'].missing == 1",))
    snap, group = gang(snapshot([dev("a")]), (DeviceRequest("r", "", subrequests=(one("every", mode="All"), failing)),))
    result = plan(snap, group)
    assert isinstance(result, Short) and "claim ml/c0 spec.devices.requests[r/strict]: selector fails on device" in result.message


def test_an_error_on_a_node_the_plan_does_not_choose_does_not_refuse_the_gang() -> None:
    """Found by the upstream oracle: p1 tried beside p0 on n1 falls back to a subrequest whose selector fails on the
    big device; that rules n1 out for p1 in that plan only, and p1 takes n2's small device (upstream accepts it)."""
    failing = one("strict", selectors=("device.attributes['features.example.com'].missing == 1",))
    subs = (one("small", device_class="small"), failing)
    snap, group = gang(
        snapshot([dev("a", size="small"), dev("c"), dev("b", node_name="n2", size="small"), dev("d", node_name="n2")], nodes=("n1", "n2")),
        (DeviceRequest("r", "", subrequests=subs),),
        (DeviceRequest("r", "", subrequests=subs),),
    )
    assert sorted(results(plan(snap, group))) == [("r/small", "a"), ("r/small", "b")]


def test_a_shared_device_is_no_device_shortage() -> None:
    """Found by the upstream oracle: six device requests fit on three shared devices (p0 on n2's, p1 twice over n1's
    two; greedy packing puts p0 on n1 first); the device count (6 wanted, 3 free) is no lower bound when devices are shared."""
    two = frozen_map({"bw": CapacityPolicy(Decimal(2), default=Decimal(1), minimum=Decimal(1), step=Decimal(1))})
    devices = [dev("s0", allow_multiple=True, capacities=two), dev("s1", allow_multiple=True, capacities=two)]
    devices += [
        dev("t", node_name="n2", allow_multiple=True, capacities=two),
        dev("u", node_name="n2", taints=(Taint("k", "", "NoSchedule"),)),
    ]
    snap, group = gang(snapshot(devices, nodes=("n1", "n2")), (one("x"), one("y")), (one("x", count=2), one("y", count=2)))
    assert isinstance(plan(snap, group), Fits)
