"""Times as the API writes and reads them: one parser, two stamps."""

from __future__ import annotations

import datetime

import pytest

from phalanx.api import times

MOMENT = datetime.datetime(2026, 12, 6, 0, 12, 30, 123456, tzinfo=datetime.UTC)


def test_a_time_is_whole_seconds_and_a_micro_time_keeps_microseconds() -> None:
    assert times.stamp(MOMENT) == "2026-12-06T00:12:30Z"
    assert times.micro_stamp(MOMENT) == "2026-12-06T00:12:30.123456Z"
    assert times.parse(times.micro_stamp(MOMENT)) == MOMENT


@pytest.mark.parametrize("written", ["2026-12-06T01:12:30+01:00", "2026-12-06T00:12:30Z", "2026-12-06T00:12:30"])
def test_every_form_reads_as_the_same_utc_moment_never_the_machines_zone(written: str) -> None:
    assert times.parse(written) == MOMENT.replace(microsecond=0)


def test_seconds_since_counts_to_the_moment_given_and_is_negative_ahead() -> None:
    assert times.seconds_since("2026-12-06T00:12:00Z", MOMENT.replace(microsecond=0)) == 30
    assert times.seconds_since("2026-12-06T00:13:00Z", MOMENT.replace(microsecond=0)) == -30


def test_an_unreadable_time_says_what_it_was() -> None:
    with pytest.raises(ValueError, match="not an RFC 3339 time: 'yesterday'"):
        times.parse("yesterday")
