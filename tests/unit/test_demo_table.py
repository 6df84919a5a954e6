"""The article's table, printed from a census, extended with the preemption scenarios and the in-tree rows."""

from __future__ import annotations

import pytest

from phalanx_dev.cli.demo import keep_flag
from phalanx_dev.localcluster.demo import Census, Preemption, format_table

HELD_4 = Census(devices_total=6, devices_held=4, jobs=2, jobs_training=1, pods_running=4, pods_pending=4)


def test_census_row_counts_free_devices() -> None:
    assert HELD_4.row("gang.minCount: 4") == ("gang.minCount: 4", "4/6", "1", "2", "-")


def test_preemption_row_says_how_many_members_went() -> None:
    assert Preemption(HELD_4, preemptor_running=4, victims_taken=4, victims=4).row("Phalanx: DRA preemption") == (
        "Phalanx: DRA preemption",
        "4/6",
        "1",
        "2",
        "4 of 4",
    )
    single = Preemption(HELD_4, preemptor_running=4, victims_taken=2, victims=4)
    assert single.row("accel, single", devices=False) == ("accel, single", "-", "1", "-", "2 of 4")


def test_preemption_row_when_the_urgent_gang_never_runs() -> None:
    upstream = Preemption(HELD_4, preemptor_running=0, victims_taken=0, victims=4)
    assert upstream.row("1.37 in-tree: DRA preemption")[-1] == "0 of 4: urgent gang never runs"


def test_table_aligns_columns() -> None:
    table = format_table([("no gang policy", "6/6", "0", "0", "-"), ("1.37 in-tree: gang.minCount 4", "4/6", "1", "2", "-")])
    lines = table.splitlines()
    assert lines[0] == "|                               | GPUs held | Jobs training | GPUs free | preempted |"
    assert lines[1] == "|-------------------------------|-----------|---------------|-----------|-----------|"
    assert lines[2] == "| no gang policy                | 6/6       | 0             | 0         | -         |"
    assert lines[3] == "| 1.37 in-tree: gang.minCount 4 | 4/6       | 1             | 2         | -         |"


@pytest.mark.parametrize(("value", "keep"), [("", False), ("0", False), ("false", False), ("1", True), ("true", True), ("TRUE", True)])
def test_keep_accepts_only_true_or_1(value: str, keep: bool) -> None:
    assert keep_flag(value) is keep


@pytest.mark.parametrize("value", ["yes", "2", "keep"])
def test_keep_refuses_anything_else(value: str) -> None:
    with pytest.raises(SystemExit, match=r"KEEP=.* is not understood"):
        keep_flag(value)
