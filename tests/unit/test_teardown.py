"""Which members of a gang torn down as a unit lose the Job's tracking finalizer, so their Job does not count them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from phalanx.api import keys
from phalanx.scheduling import teardown

MEMBER: dict[str, Any] = {
    "metadata": {"name": "train-0", "namespace": "ml", "uid": "u0", "finalizers": ["example.com/keep", keys.JOB_TRACKING]},
    "spec": {"nodeName": "worker-1"},
    "status": {"phase": "Running"},
}


def member(**changes: Any) -> dict[str, Any]:
    pod = copy.deepcopy(MEMBER)
    for path, value in changes.items():
        section, key = path.split("__")
        if value is None:
            pod[section].pop(key, None)
        else:
            pod[section][key] = value
    return pod


@pytest.mark.parametrize(
    ("pod", "at"),
    [
        pytest.param(member(), 1, id="running"),
        pytest.param(member(status__phase="Pending", spec__nodeName=None), 1, id="never-ran"),
        pytest.param(member(metadata__finalizers=[keys.JOB_TRACKING]), 0, id="only-finalizer"),
        pytest.param(member(metadata__annotations={keys.JOB_INDEX_FAILURE_COUNT: "0"}), 1, id="index-never-failed"),
        pytest.param(member(status__phase="Failed"), None, id="failed-on-its-own"),
        pytest.param(member(status__phase="Succeeded"), None, id="succeeded"),
        pytest.param(member(status__phase=None), None, id="no-phase-yet"),
        pytest.param(member(metadata__deletionTimestamp="2026-01-01T00:00:00Z"), None, id="being-deleted"),
        pytest.param(member(metadata__finalizers=["example.com/keep"]), None, id="not-tracked"),
        pytest.param(member(metadata__finalizers=None), None, id="no-finalizers"),
        pytest.param(member(metadata__annotations={keys.JOB_INDEX_FAILURE_COUNT: "2"}), None, id="index-failed-before"),
    ],
)
def test_only_a_member_that_has_not_ended_and_whose_index_never_failed_is_uncounted(pod: dict[str, Any], at: int | None) -> None:
    assert teardown.tracking_at(pod) == at


def _pod(uid: str, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": f"train-{uid}", "namespace": "ml", "uid": uid},
        "spec": {"nodeName": "worker-1", "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]},
        "status": {"phase": "Running", "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": f"train-{uid}-gpu"}], **status},
    }


def _claim(pod_uid: str, *users: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": f"train-{pod_uid}-gpu", "namespace": "ml", "uid": f"c-{pod_uid}", "resourceVersion": "7"},
        "status": {
            "allocation": {
                "devices": {"results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "worker-1", "device": "gpu-0"}]}
            },
            "reservedFor": list(users) or [{"resource": "pods", "name": f"train-{pod_uid}", "uid": pod_uid}],
        },
    }


def _freeing(members: list[dict[str, Any]], claims: dict[str, dict[str, Any]]) -> teardown.Freeing:
    freeing = teardown.Freeing(kube=None)  # type: ignore[arg-type]  # due() writes nothing
    freeing.watch(members, lambda ns, name: claims.get(name))
    return freeing


def _due(freeing: teardown.Freeing, pods: list[dict[str, Any]], claims: dict[str, dict[str, Any]]) -> list[str]:
    return [c["metadata"]["name"] for c in freeing.due({p["metadata"]["uid"]: p for p in pods}, lambda ns, name: claims.get(name))]


def test_a_torn_down_members_claim_is_freed_once_the_member_is_gone_or_ended_and_not_while_it_runs_out_its_grace() -> None:
    running, gone, failed = _pod("a"), _pod("b"), _pod("c")
    claims = {f"train-{u}-gpu": _claim(u) for u in "abc"}
    freeing = _freeing([running, gone, failed], claims)
    terminating = {**running, "metadata": {**running["metadata"], "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    ended = {**failed, "status": {**failed["status"], "phase": "Failed"}}
    assert _due(freeing, [terminating, ended], claims) == ["train-b-gpu", "train-c-gpu"]
    assert set(freeing.pending) == {"c-a", "c-b", "c-c"}  # still remembered until written


def test_a_claim_also_reserved_for_someone_else_or_reallocated_is_not_phalanxs_to_free_and_is_forgotten() -> None:
    member = _pod("a")
    stranger = {"resource": "pods", "name": "other", "uid": "x"}
    shared = _claim("a", {"resource": "pods", "name": "train-a", "uid": "a"}, stranger)
    for claims in (
        {"train-a-gpu": shared},
        {"train-a-gpu": {**_claim("a"), "status": {}}},  # deallocated by the resourceclaim controller meanwhile
        {"train-a-gpu": {**_claim("a"), "metadata": {**_claim("a")["metadata"], "uid": "another"}}},  # a new claim, same name
        {},  # gone
    ):
        freeing = _freeing([member], {"train-a-gpu": _claim("a")})
        assert _due(freeing, [], claims) == []
        assert freeing.pending == {}


def test_an_unallocated_claim_of_a_member_is_not_remembered() -> None:
    claims = {"train-a-gpu": {**_claim("a"), "status": {}}}
    assert _freeing([_pod("a")], claims).pending == {}
