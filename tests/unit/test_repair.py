"""Which holder of a device held twice yields: sharing the DRA API allows is no conflict; the later allocation yields."""

from __future__ import annotations

from typing import Any

from phalanx.kube.informers import AllocationOrder
from phalanx.scheduling.repair import allocated_at, double_allocations, reserved_claims, shareable_capacity

GPU0 = ("gpu.example.com", "worker-1", "gpu-0")


def claim(name: str, *, at: str, device: tuple[str, str, str] = GPU0, admin: bool = False, consumed: dict | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"request": "gpu", "driver": device[0], "pool": device[1], "device": device[2]}
    if admin:
        result["adminAccess"] = True
    if consumed is not None:
        result["consumedCapacity"] = consumed
    return {
        "metadata": {
            "namespace": "ml",
            "name": name,
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "managedFields": [
                {"manager": "kube-controller-manager", "operation": "Update", "time": "2026-11-29T10:00:00Z", "fieldsV1": {"f:spec": {}}},
                {
                    "manager": "writer",
                    "operation": "Update",
                    "subresource": "status",
                    "time": at,
                    "fieldsV1": {"f:status": {"f:allocation": {}, "f:reservedFor": {}}},
                },
            ],
        },
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_the_later_allocation_yields_whatever_the_creation_order() -> None:
    first, second = claim("b-created-later", at="2026-11-29T10:00:05Z"), claim("a-allocated-later", at="2026-11-29T10:00:09Z")
    (conflict,) = double_allocations([second, first], {})
    assert conflict.keep is first
    assert conflict.later == (second,)


def test_admin_access_holders_are_not_conflicts() -> None:
    monitor = claim("monitor", at="2026-11-29T10:00:01Z", admin=True)
    worker = claim("worker", at="2026-11-29T10:00:02Z")
    assert double_allocations([monitor, worker], {}) == []


def test_a_shareable_device_conflicts_only_past_its_capacity() -> None:
    slices = [
        {
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "worker-1"},
                "devices": [{"name": "gpu-0", "allowMultipleAllocations": True, "capacity": {"memory": {"value": "80Gi"}}}],
            }
        }
    ]
    shareable = shareable_capacity(slices)
    a = claim("a", at="2026-11-29T10:00:01Z", consumed={"memory": "40Gi"})
    b = claim("b", at="2026-11-29T10:00:02Z", consumed={"memory": "40Gi"})
    assert double_allocations([a, b], shareable) == []
    c = claim("c", at="2026-11-29T10:00:03Z", consumed={"memory": "10Gi"})
    (conflict,) = double_allocations([c, b, a], shareable)
    assert conflict.later == (c,)
    assert double_allocations([a, b, c], {})[0].later == (b, c), "without allowMultipleAllocations, any second holder conflicts"


def test_allocation_time_is_the_status_write_that_set_the_allocation() -> None:
    assert allocated_at(claim("x", at="2026-11-29T11:22:33Z")) == "2026-11-29T11:22:33Z"
    bare = claim("y", at="ignored")
    bare["metadata"]["managedFields"] = []
    assert allocated_at(bare) == "2026-11-29T10:00:00Z", "no status write recorded: the creation time"


def test_reserved_claims_map_to_their_pod_group() -> None:
    group = {"metadata": {"namespace": "ml", "name": "pg"}, "status": {"reservation": {"state": "Released", "claims": [{"name": "c1"}]}}}
    assert reserved_claims([group, {"metadata": {"namespace": "ml", "name": "idle"}}]) == {("ml", "c1"): group}


def test_the_allocating_writes_order_decides_not_their_timestamps() -> None:
    """A wrote its allocation first, B second, within one second; then A's writer wrote A's status again (another
    reservedFor entry), which moved A's managedFields time past B's: B yields all the same."""
    a, b = claim("a", at="2026-11-29T10:00:07Z"), claim("b", at="2026-11-29T10:00:05Z")
    order = AllocationOrder()
    unallocated = {**a, "status": {}}
    order.note(unallocated, {**a, "metadata": {**a["metadata"], "resourceVersion": "100"}})
    order.note({**b, "status": {}}, {**b, "metadata": {**b["metadata"], "resourceVersion": "120"}})
    order.note(a, {**a, "metadata": {**a["metadata"], "resourceVersion": "130"}})  # a later write, no allocation
    assert order.get("uid-a") == 100 and order.get("uid-b") == 120
    (conflict,) = double_allocations([b, a], {}, order.get)
    assert conflict.keep is a and conflict.later == (b,)
    (by_time,) = double_allocations([b, a], {})
    assert by_time.keep is b, "by managedFields time alone, the first holder would have been the one evicted"


def test_a_claim_allocated_before_the_operator_started_came_first() -> None:
    old, seen = claim("old", at="2026-11-29T10:00:09Z"), claim("seen", at="2026-11-29T10:00:01Z")
    order = AllocationOrder()
    order.note({**seen, "status": {}}, {**seen, "metadata": {**seen["metadata"], "resourceVersion": "7"}})
    (conflict,) = double_allocations([seen, old], {}, order.get)
    assert conflict.keep is old


def test_allocation_timestamp_decides_where_set() -> None:
    x = claim("x", at="2026-11-29T10:00:09Z")
    x["status"]["allocation"]["allocationTimestamp"] = "2026-11-29T10:00:01Z"
    assert allocated_at(x) == "2026-11-29T10:00:01Z"
