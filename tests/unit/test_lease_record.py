"""The Lease a candidate writes: who holds it, since when, how many hands it passed through; and timings that make sense."""

from __future__ import annotations

import pytest

from phalanx.kube.lease import Elector, Timing


def _elector(identity: str) -> Elector:
    async def connect() -> None:
        raise AssertionError("a record is built without the API server")

    return Elector(connect, "phalanx-system", "phalanx-leader", identity)  # type: ignore[arg-type]


def test_taking_a_lease_counts_a_transition_and_renewing_it_keeps_the_acquire_time() -> None:
    created = _elector("a")._lease(None)
    assert created["spec"]["holderIdentity"] == "a" and created["spec"]["leaseTransitions"] == 0
    assert "resourceVersion" not in created["metadata"]
    held = {**created, "metadata": {**created["metadata"], "resourceVersion": "7"}}
    renewed = _elector("a")._lease(held)
    assert renewed["spec"]["acquireTime"] == created["spec"]["acquireTime"] and renewed["spec"]["leaseTransitions"] == 0
    assert renewed["metadata"]["resourceVersion"] == "7", "the update is conditional on what was read"
    taken = _elector("b")._lease(held)
    assert taken["spec"]["holderIdentity"] == "b" and taken["spec"]["leaseTransitions"] == 1
    assert taken["spec"]["leaseDurationSeconds"] == 10


def test_a_renew_deadline_not_below_the_lease_duration_is_refused_naming_the_flags() -> None:
    with pytest.raises(ValueError, match="--leader-renew-deadline"):
        Timing(lease_duration=5, renew_deadline=5, retry_period=1)
    assert not _elector("a").leading, "nobody leads before a first renewal"
