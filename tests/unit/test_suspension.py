"""A Job suspended after its gang was released starts over as a gang: the rule that tells, pure."""

from __future__ import annotations

from phalanx.api import schema
from phalanx.scheduling.loop import _suspended_since

RELEASED = schema.Reservation(state="Released", released_at="2026-11-29T10:00:05Z")


def job(suspend: bool, transition: str | None = None, status: str = "False") -> dict:
    conditions = [{"type": "Suspended", "status": status, "lastTransitionTime": transition}] if transition else []
    return {"spec": {"suspend": suspend}, "status": {"conditions": conditions}}


def test_a_suspended_job_starts_over() -> None:
    assert _suspended_since(job(True, "2026-11-29T10:00:09Z", "True"), RELEASED)


def test_a_job_suspended_and_resumed_since_the_release_starts_over() -> None:
    """Resumed before the loop saw it: its members are gone and the pods it creates now are a new gang."""
    assert _suspended_since(job(False, "2026-11-29T10:00:09Z"), RELEASED)


def test_a_suspension_before_the_release_does_not_count() -> None:
    """A Job created suspended and resumed, then released: a member lost later is a loss, not a suspension."""
    assert not _suspended_since(job(False, "2026-11-29T10:00:01Z"), RELEASED)
    assert not _suspended_since(job(False), RELEASED)
