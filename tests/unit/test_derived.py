"""What a snapshot reuses from the builds before it: served again only for the same version of the same object in the
same place, so a reused build equals a fresh one through every kind of change (the nodes' and pods' own: in
test_occupancy)."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from phalanx.scheduling import accessors, deviceinputs, inputs, snapshots
from phalanx.scheduling.cache import ClaimsTally, Pins
from phalanx.scheduling.derived import Derived

JSON = dict[str, Any]


def _pod(name: str, version: str, *, node: str | None = "n1", cpu: str = "1", uid: str | None = None) -> JSON:
    spec: JSON = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    if node:
        spec["nodeName"] = node
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": uid or f"{name}-uid", "resourceVersion": version, "labels": {"app": name}},
        "spec": spec,
        "status": {"phase": "Running"},
    }


def _node(name: str, version: str = "1", cpu: str = "32") -> JSON:
    return {
        "metadata": {"name": name, "uid": f"{name}-uid", "resourceVersion": version},
        "status": {"allocatable": {"cpu": cpu, "memory": "256Gi", "pods": "110"}},
    }


def _slice(node: str, version: str = "1", devices: int = 2) -> JSON:
    return {
        "metadata": {"name": f"{node}-gpu", "uid": f"{node}-slice-uid", "resourceVersion": version},
        "spec": {
            "driver": "gpu.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(devices)],
        },
    }


def _both(reuse: deviceinputs.Reuse, nodes: list[JSON], pods: list[JSON], slices: list[JSON], pinned: dict[str, str] | None = None) -> Any:
    """The reused build, checked against a fresh one of the same objects (deep copies: nothing shared with the cache)."""
    reused = snapshots.build(nodes, pods, slices, [], [], pinned=pinned, reuse=reuse)
    fresh = snapshots.build(copy.deepcopy(nodes), copy.deepcopy(pods), copy.deepcopy(slices), [], [], pinned=pinned)
    assert reused == fresh
    return reused


def test_a_view_is_served_only_for_the_same_uid_version_and_context() -> None:
    views: Derived[str] = Derived()
    pod = _pod("a", "7")
    assert views.get(pod, "n1", lambda: "first") == "first"
    views.sweep()
    assert views.get(pod, "n1", lambda: "again") == "first", "same uid, version and node: served"
    assert views.get(pod, "n2", lambda: "moved") == "moved", "another node: derived again"
    assert views.get(_pod("a", "8"), "n2", lambda: "newer") == "newer", "another version: derived again"
    assert views.get(_pod("a", "8", uid="other-uid"), "n2", lambda: "recreated") == "recreated", "same name, new uid"
    unversioned = _pod("a", "7")
    del unversioned["metadata"]["resourceVersion"]
    assert views.get(unversioned, "n1", lambda: "by hand") == "by hand", "an object made by hand is never served from the cache"
    assert views.derived == 5


def test_a_waiting_members_view_follows_its_version_and_its_claims() -> None:
    group_obj = {"metadata": {"namespace": "ml", "name": "g"}, "spec": {}}
    members: Derived[Any] = Derived()
    pod = _pod("a", "1", node=None)
    first = inputs.group(group_obj, [pod], 1, members)
    assert inputs.group(group_obj, [copy.deepcopy(pod)], 1, members).members[0] is first.members[0]
    claimed = _pod("a", "2", node=None, cpu="2")
    claimed["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "a-gpu"}]
    again = inputs.group(group_obj, [claimed], 1, members)
    assert again.members[0].claims == ("a-gpu",) and again.members[0].requests["cpu"] == 2000
    assert again == inputs.group(group_obj, [copy.deepcopy(claimed)], 1), "the same as derived afresh"


def test_objects_made_by_hand_sharing_a_uid_and_version_are_told_apart_by_name() -> None:
    views: Derived[str] = Derived()
    assert views.get(_pod("a", "1", uid="same"), None, lambda: "a") == "a"
    assert views.get(_pod("b", "1", uid="same"), None, lambda: "b") == "b"


def _rule(version: str) -> JSON:
    spec = {"deviceSelector": {"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}, "taint": {"key": "k", "effect": "NoSchedule"}}
    return {"metadata": {"name": "maintenance", "uid": "rule-uid", "resourceVersion": version}, "spec": spec}


def test_what_the_slices_publish_is_served_whole_until_a_slice_or_a_taint_rule_changes() -> None:
    reuse = deviceinputs.Reuse()
    nodes, pods = [_node("n1"), _node("n2")], [_pod("a", "1")]
    slices = [_slice("n1"), _slice("n2")]
    first = _both(reuse, nodes, pods, slices)
    derived = reuse.slices.derived
    again = _both(reuse, nodes, [_pod("a", "2", cpu="2")], slices)
    assert again.devices is first.devices and reuse.slices.derived == derived, "no slice changed: served whole"
    grown = _both(reuse, nodes, pods, [_slice("n1", "2", devices=3), slices[1]])
    assert len(grown.devices) == 5 and reuse.slices.derived == derived + 1, "one slice changed: only its devices derived again"
    assert _both(reuse, nodes, pods, [slices[1]]).devices == tuple(d for d in first.devices if d.pool == "n2"), "a slice gone"

    ruled = snapshots.build(nodes, pods, slices, [], [], [_rule("1")], reuse=reuse)
    assert [d.taints for d in ruled.devices if d.name == "gpu-0" and d.pool == "n1"] != [()], "a rule taints its device"
    assert snapshots.build(nodes, pods, slices, [], [], [_rule("1")], reuse=reuse).devices is ruled.devices
    assert snapshots.build(nodes, pods, slices, [], [], reuse=reuse).devices == first.devices, "the rule gone: untainted again"

    by_hand = _slice("n1")
    del by_hand["metadata"]["resourceVersion"]
    assert (
        snapshots.build(nodes, pods, [by_hand], [], [], reuse=reuse).devices
        is not snapshots.build(nodes, pods, [by_hand], [], [], reuse=reuse).devices
    )


def _claim(name: str, version: str, device: str | None) -> JSON:
    status: JSON = {}
    if device:
        status["allocation"] = {"devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": device}]}}
    return {
        "metadata": {"name": name, "namespace": "ml", "uid": f"{name}-uid", "resourceVersion": version},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu", "count": 1}}]}},
        "status": status,
    }


def test_claims_are_modelled_again_only_once_written_and_a_build_on_the_tally_equals_a_fresh_one() -> None:
    """The loop's claims tally (`cache.ClaimsTally`) is told of every write by the claims informer; a build takes the
    claims from it (3,000 waiting gangs' claims took a third of every build when each build modelled them all)."""
    tally = ClaimsTally()
    nodes, slices = [_node("n1")], [_slice("n1")]
    store = {("ml", "a"): _claim("a", "1", "gpu-0"), ("ml", "b"): _claim("b", "1", None)}
    tally.rebuild(store)
    first = snapshots.build(nodes, [], slices, [], [], claims_modelled=tally.modelled())
    assert first == snapshots.build(nodes, [], slices, list(store.values()), [])
    assert tally.modelled() is tally.modelled() and tally.remodelled == 2, "nothing written: nothing modelled again"

    before, store[("ml", "b")] = store[("ml", "b")], _claim("b", "2", "gpu-1")  # b allocated
    tally.put(before, store[("ml", "b")])
    written = snapshots.build(nodes, [], slices, [], [], claims_modelled=tally.modelled())
    assert written == snapshots.build(copy.deepcopy(nodes), [], copy.deepcopy(slices), copy.deepcopy(list(store.values())), [])
    assert tally.remodelled == 3, "a's model kept, b's made anew"
    assert {d[2] for d in written.held} == {"gpu-0", "gpu-1"} and {d[2] for d in first.held} == {"gpu-0"}

    tally.put(store.pop(("ml", "a")), None)
    assert {d[2] for d in snapshots.build(nodes, [], slices, [], [], claims_modelled=tally.modelled()).held} == {"gpu-1"}


_DEVICES = ("gpu-0", "gpu-1", "gpu-2")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(("write", "delete", "relist")), st.sampled_from("abcd"), st.sampled_from((None, *_DEVICES))),
        max_size=30,
    )
)
def test_the_claims_tally_always_counts_as_a_model_of_the_whole_store_would(events: list[tuple[str, str, str | None]]) -> None:
    """Any sequence of writes, deletes and relists (a relist replaces the store whole, as after a 410): what the tally
    counts is what modelling every claim of the store afresh counts, a device two claims hold (a double allocation)
    included, held until both let it go."""
    tally, store = ClaimsTally(), {}
    for version, (kind, name, device) in enumerate(events, start=1):
        key = ("ml", name)
        if kind == "write":
            before, store[key] = store.get(key), _claim(name, str(version), device)
            tally.put(before, store[key])
        elif kind == "delete" and key in store:
            tally.put(store.pop(key), None)
        elif kind == "relist":
            store = {k: _claim(k[1], str(version), d) for k, d in ((k, _held(v)) for k, v in store.items())}
            tally.rebuild(store)
        if version % 3 == 0:
            assert tally.modelled() == deviceinputs.modelled(deviceinputs.claim_view(c) for c in store.values())
    assert tally.modelled() == deviceinputs.modelled(deviceinputs.claim_view(c) for c in store.values())


def _held(claim: JSON) -> str | None:
    results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    return results[0]["device"] if results else None


def _group(name: str, version: int, placements: list[tuple[str, str]]) -> JSON:
    reservation = {"state": "Released", "placements": [{"name": uid, "uid": uid, "node": node} for uid, node in placements]}
    return {"metadata": {"name": name, "namespace": "ml", "resourceVersion": str(version)}, "status": {"reservation": reservation}}


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(("write", "delete", "relist")),
            st.sampled_from("abc"),
            st.lists(st.tuples(st.sampled_from(("u1", "u2", "u3", "u4")), st.sampled_from(("n1", "n2"))), max_size=3),
        ),
        max_size=30,
    )
)
def test_the_pins_kept_as_groups_are_written_are_those_the_whole_store_records(
    events: list[tuple[str, str, list[tuple[str, str]]]],
) -> None:
    """Any sequence of writes, deletes and relists of groups' reservations: the pins kept one write at a time
    (`cache.Pins`) are every pin the store records (`accessors.pins`); a pod two groups name is pinned while either
    does, on a node one of them names, and exactly as the store says when only one does."""
    pins, store = Pins(), {}
    for version, (kind, name, placements) in enumerate(events, start=1):
        key = ("ml", name)
        if kind == "write":
            before, store[key] = store.get(key), _group(name, version, placements)
            pins.put(before, store[key])
        elif kind == "delete" and key in store:
            pins.put(store.pop(key), None)
        elif kind == "relist":
            pins.rebuild(store)
        named: dict[str, set[str]] = {}
        for group in store.values():
            for uid, node in accessors.recorded_pins(group).items():
                named.setdefault(uid, set()).add(node)
        assert pins.pins.keys() == named.keys()
        assert all(pins.pins[uid] in nodes for uid, nodes in named.items())
        if all(sum(uid in accessors.recorded_pins(g) for g in store.values()) == 1 for uid in named):
            assert pins.pins == accessors.pins(store.values())
