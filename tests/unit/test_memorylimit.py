"""The memory-limit gauge reads the container's limit from its cgroup, v2 or v1, and says NaN without one."""

from __future__ import annotations

import math
from pathlib import Path

from prometheus_client import REGISTRY

from phalanx import memorylimit as memory


def _statm(tmp_path: Path, pages: int) -> Path:
    statm = tmp_path / "statm"
    statm.write_text(f"{pages * 3} {pages} 0 0 0 0 0\n")
    return statm


def test_the_ratio_is_resident_memory_over_the_cgroup_v2_limit(tmp_path: Path) -> None:
    (tmp_path / "memory.max").write_text("536870912\n")
    statm = _statm(tmp_path, 65536)
    assert memory.limit_bytes(tmp_path) == 512 * 2**20
    assert memory.used_ratio(tmp_path, statm) == 65536 * memory.os.sysconf("SC_PAGE_SIZE") / (512 * 2**20)


def test_cgroup_v1_and_no_limit(tmp_path: Path) -> None:
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("1073741824\n")
    assert memory.limit_bytes(tmp_path) == 2**30
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")  # v1's "no limit"
    assert memory.limit_bytes(tmp_path) is None
    assert math.isnan(memory.used_ratio(tmp_path, _statm(tmp_path, 10)))
    (tmp_path / "memory.max").write_text("max\n")
    assert memory.limit_bytes(tmp_path) is None
    assert memory.limit_bytes(tmp_path / "absent") is None


def test_the_gauge_is_served() -> None:
    value = REGISTRY.get_sample_value("phalanx_memory_limit_used_ratio")
    assert value is not None and (math.isnan(value) or 0 < value < 1)
