"""The ready deadline's pure parts: who is not Ready and why, in the kubelet's words, and the back-off after."""

from __future__ import annotations

import datetime

import pytest

from phalanx.api import keys, schema
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
    init = _pod("g", containers=[{"name": "rank", "ready": False, "state": {"waiting": {"reason": "PodInitializing"}}}])
    init["status"]["initContainerStatuses"] = [{"name": "fetch", "ready": False, "state": {"running": {}}}]
    assert podsready.why_not(init) == "init container fetch running, not finished", "the init container it waits on, not PodInitializing"


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


NOW = datetime.datetime(2026, 12, 1, 12, 0, 0, tzinfo=datetime.UTC)
RELEASED = "2026-12-01T11:58:00Z"  # two minutes before NOW
BACKOFFS = (60.0, 3600.0)


def _judge(record: schema.Readiness, members: list[dict], deadline: float = 300.0, **kw) -> podsready.Deadline | None:
    released, min_count, done = kw.get("released", RELEASED), kw.get("min_count", 2), kw.get("done", 0)
    return podsready.judge(record, deadline, released, members, min_count, done=done, now=NOW, backoffs=BACKOFFS)


def test_the_deadline_says_nothing_when_off_or_once_every_member_was_ready_since_the_release() -> None:
    assert _judge(schema.Readiness(), [_pod("a")], deadline=0) is None
    assert _judge(schema.Readiness(ready_at="2026-12-01T11:59:00Z"), [_pod("a")]) is None


def test_all_ready_is_recorded_and_resets_the_count_and_time_left_is_a_wake() -> None:
    ready = _judge(schema.Readiness(attempts=3), [_pod("a", ready=True), _pod("b", ready=True)])
    assert ready == podsready.Deadline(record=schema.Readiness(attempts=0, ready_at="2026-12-01T12:00:00Z"))
    waiting = _judge(schema.Readiness(), [_pod("a", ready=True), _pod("b")])
    assert waiting == podsready.Deadline(wake_in=180.0)
    short = _judge(schema.Readiness(), [_pod("a", ready=True)])
    assert short == podsready.Deadline(wake_in=180.0), "fewer members than minCount are not all Ready"


def test_past_the_deadline_the_timeout_is_counted_once_per_release_and_names_the_member() -> None:
    first = _judge(schema.Readiness(attempts=1), [_pod("a", ready=True), _pod("b")], deadline=60)
    assert first is not None and first.counted and first.record is not None
    assert (first.record.attempts, first.record.member, first.record.timed_out_at) == (2, "b", "2026-12-01T12:00:00Z")
    assert first.record.not_before == "2026-12-01T12:02:00Z", "the second timeout in a row waits base x 2"
    assert first.tear_down == (
        "member b not Ready 60s after release (phase Running on worker-1: no container started (the node has not run it)); "
        "timeout 2 in a row, admitted again after 120s"
    )
    again = _judge(first.record, [_pod("a", ready=True), _pod("b")], deadline=60)
    assert again is not None and not again.counted and again.record is None, "the same release is not counted twice"
    assert again.tear_down == first.tear_down
    gone = _judge(schema.Readiness(), [_pod("a", ready=True)], deadline=60)
    assert gone is not None and gone.record is not None and gone.record.reason == "only 1 of minCount 2 members exist or finished"


def test_a_rank_that_finished_early_counts_toward_min_count_and_no_healthy_gang_times_out() -> None:
    """Four ranks, minCount 4: rank 0 exits 0 before the deadline (its pod no longer live), the other three are Ready."""
    three = [_pod(n, ready=True) for n in "bcd"]
    assert _judge(schema.Readiness(), three, deadline=60, min_count=4, done=1) == podsready.Deadline(
        record=schema.Readiness(attempts=0, ready_at="2026-12-01T12:00:00Z")
    )
    short = _judge(schema.Readiness(), three, deadline=60, min_count=4)
    assert short is not None and short.tear_down is not None, "without counting it, the same gang is torn down"


def test_the_back_off_holds_until_not_before_and_ends_with_a_ready_release() -> None:
    record = schema.Readiness(attempts=2, member="b", reason="x", timed_out_at="2026-12-01T11:59:00Z", not_before="2026-12-01T12:01:00Z")
    left, why = podsready.backing_off(record, NOW) or (None, "")
    assert left == 60.0 and "admitted again at 2026-12-01T12:01:00Z" in why and "member b: x" in why
    assert podsready.backing_off(record, NOW + datetime.timedelta(minutes=2)) is None
    assert podsready.backing_off(record.model_copy(update={"ready_at": "2026-12-01T11:59:30Z"}), NOW) is None
    assert podsready.backing_off(schema.Readiness(), NOW) is None
