"""The article's table, printed from a census."""

from __future__ import annotations

from phalanx.localcluster.demo import Census, format_table


def test_census_row_counts_free_devices() -> None:
    census = Census(devices_total=6, devices_held=4, jobs=2, jobs_training=1, pods_running=4, pods_pending=4)
    assert census.row("gang.minCount: 4") == ("gang.minCount: 4", "4/6", "1", "2")


def test_table_aligns_columns() -> None:
    table = format_table([("no gang policy", "6/6", "0", "0")]).splitlines()
    assert table[0] == "|                | GPUs held | Jobs training | GPUs free |"
    assert table[1] == "|----------------|-----------|---------------|-----------|"
    assert table[2] == "| no gang policy | 6/6       | 0             | 0         |"
