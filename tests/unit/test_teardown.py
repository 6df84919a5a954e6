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
