"""Times as the Kubernetes API writes and reads them (RFC 3339 in UTC), in one place.

A condition's `lastTransitionTime` and Phalanx's own records are `Time` (whole seconds, compared as strings where
two records meet: both must be written alike); a Lease's and the reservation's `MicroTime` keep microseconds."""

from __future__ import annotations

import datetime
import math


def now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def stamp(when: datetime.datetime | None = None) -> str:
    """`Time`: whole seconds, `Z`."""
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%SZ")


def micro_stamp(when: datetime.datetime | None = None) -> str:
    """`MicroTime`: microseconds, `Z`."""
    return (when or now()).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse(timestamp: str) -> datetime.datetime:
    """An RFC 3339 time (`Z` or an offset, with or without fractions); one without an offset is UTC, never the
    machine's zone. ValueError names what could not be read."""
    try:
        moment = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(f"not an RFC 3339 time: {timestamp!r}") from exc
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=datetime.UTC)


def seconds_since(timestamp: str, at: datetime.datetime | None = None) -> float:
    """Seconds from `timestamp` to `at` (default now); negative when it is still ahead."""
    return ((at or now()) - parse(timestamp)).total_seconds()


def waited(timestamp: str | None) -> float:
    """Seconds since `timestamp`; none at all counts as long past (infinite). A record written without one (by an
    older Phalanx) whose deadline is judged is the stuck case the deadline exists for."""
    return math.inf if not timestamp else seconds_since(timestamp)
