"""The ready deadline's pure parts: who is not Ready and why, in the kubelet's words, and the back-off after."""

from __future__ import annotations

import pytest

from phalanx.api import keys
from phalanx.api.intent import GangSpecError, ready_deadline, unknown_keys
from phalanx.scheduling import podsready


def _pod(name: str, *, node: str | None = "worker-1", ready: bool = False, containers=None, phase: str = "Running") -> dict:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {"name": name},
        "spec": {"nodeName": node},
        "status": {"phase": phase, "conditions": conditions, "containerStatuses": containers},
    }


def test_the_member_not_ready_is_named_with_its_container_state() -> None:
    waiting = [{"name": "rank", "ready": False, "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "image not present"}}}]
    looping = [{"name": "rank", "ready": False, "restartCount": 4, "state": {"waiting": {"reason": "CrashLoopBackOff"}}}]
    pods = [_pod("b", containers=looping), _pod("a", ready=True), _pod("c", containers=waiting)]
    assert podsready.first_not_ready(pods) == ("b", "container rank waiting CrashLoopBackOff (restarted 4 times)")
    assert podsready.why_not(pods[2]) == "container rank waiting ErrImageNeverPull: image not present"
    assert podsready.why_not(_pod("d", containers=None, phase="Pending")) == (
        "phase Pending on worker-1: no container started (the node has not run it)"
    )
    probe = [{"name": "rank", "ready": False, "state": {"running": {}}}]
    assert podsready.why_not(_pod("e", containers=probe)) == "container rank running, not ready (its readiness probe)"
    assert podsready.why_not(_pod("f", node=None)) == "not bound to a node"


def test_succeeded_counts_as_ready_and_all_ready_names_nobody() -> None:
    assert podsready.first_not_ready([_pod("a", ready=True), _pod("b", phase="Succeeded")]) is None


def test_the_backoff_doubles_from_the_base_to_the_cap() -> None:
    assert [podsready.backoff(n, 60, 3600) for n in range(9)] == [0, 60, 120, 240, 480, 960, 1920, 3600, 3600]
    assert podsready.backoff(10_000, 1, 8) == 8


@pytest.mark.parametrize(("raw", "seconds"), [("300", 300.0), ("90s", 90.0), ("5m", 300.0), ("1h", 3600.0), ("0", 0.0)])
def test_the_annotation_reads_seconds_or_a_unit(raw: str, seconds: float) -> None:
    assert ready_deadline({keys.READY_DEADLINE: raw}) == seconds


def test_a_bad_deadline_is_refused_naming_the_annotation_and_the_key_is_known() -> None:
    with pytest.raises(GangSpecError, match=r"metadata.annotations\[scheduling.phalanx.dev/ready-deadline\]: Invalid value: \"soon\""):
        ready_deadline({keys.READY_DEADLINE: "soon"})
    assert ready_deadline({}) is None
    assert unknown_keys({keys.READY_DEADLINE: "5m"}) == []
    (typo,) = unknown_keys({"scheduling.phalanx.dev/readydeadline": "5m"})
    assert "did you mean scheduling.phalanx.dev/ready-deadline?" in str(typo)
