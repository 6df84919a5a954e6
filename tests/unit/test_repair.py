"""Which holder of a device held twice yields: sharing the DRA API allows is no conflict; the later allocation yields."""

from __future__ import annotations

from typing import Any

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
