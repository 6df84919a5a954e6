"""A Job suspended after its gang was released starts over as a gang: the rule that tells, pure."""

from __future__ import annotations

from phalanx.jobs.owner import JOBS
from phalanx.scheduling.phase import OwnerState

RELEASED_AT = "2026-11-29T10:00:05Z"


def job(suspend: bool, transition: str | None = None, status: str = "False", *done: str) -> dict:
    conditions = [{"type": "Suspended", "status": status, "lastTransitionTime": transition}] if transition else []
    conditions += [{"type": t, "status": "True"} for t in done]
    return {"spec": {"suspend": suspend}, "status": {"conditions": conditions}}


def test_a_suspended_job_starts_over() -> None:
    assert JOBS.state(job(True, "2026-11-29T10:00:09Z", "True"), RELEASED_AT) is OwnerState.SUSPENDED


def test_a_job_suspended_and_resumed_since_the_release_starts_over() -> None:
    """Resumed before the loop saw it: its members are gone and the pods it creates now are a new gang."""
    assert JOBS.state(job(False, "2026-11-29T10:00:09Z"), RELEASED_AT) is OwnerState.SUSPENDED


def test_a_suspension_before_the_release_does_not_count() -> None:
    """A Job created suspended and resumed, then released: a member lost later is a loss, not a suspension."""
    assert JOBS.state(job(False, "2026-11-29T10:00:01Z"), RELEASED_AT) is OwnerState.ACTIVE
    assert JOBS.state(job(False), RELEASED_AT) is OwnerState.ACTIVE


def test_a_job_done_or_on_its_way_has_finished() -> None:
    for ending in ("Complete", "Failed", "SuccessCriteriaMet", "FailureTarget"):
        assert JOBS.state(job(False, None, "False", ending), RELEASED_AT) is OwnerState.FINISHED
