"""The planner and Kubernetes v1.37.2's own DRA allocator agree on random worlds (see compare.py for what is compared).

Needs Go (to build the oracle once) and no cluster. A few hundred cases by
default; `PHALANX_ORACLE_CASES=5000` (`./task test:oracle`) for the long form,
every DRA field the planner models by default (`PHALANX_ORACLE_FEATURES=exact,all,...` narrows it, to find which
field a disagreement needs).
At the end the counts per class are printed; only unexplained disagreements fail.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator

import pytest
from compare import Comparer, Verdict
from hypothesis import HealthCheck, given, settings
from upstream import Upstream
from worlds import CLASSES, FEATURES, PLANNER_FEATURES, worlds

CASES = int(os.environ.get("PHALANX_ORACLE_CASES", "300"))
REQUESTED = os.environ.get("PHALANX_ORACLE_FEATURES", "")
GENERATED = FEATURES if REQUESTED == "all" else frozenset(REQUESTED.split(",")) if REQUESTED else PLANNER_FEATURES
SETTINGS = settings(
    max_examples=CASES, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large], database=None
)


@pytest.fixture(scope="module")
def comparer() -> Iterator[Comparer]:
    upstream = Upstream()
    yield Comparer(upstream, PLANNER_FEATURES)
    upstream.close()


def _report(capsys: pytest.CaptureFixture[str], title: str, verdicts: list[Verdict]) -> None:
    tally = Counter((v.kind, v.cls) for v in verdicts)
    with capsys.disabled():
        print(f"\n{title}: {len(verdicts)} comparisons, features {sorted(GENERATED)}")
        for (kind, cls), count in sorted(tally.items()):
            print(f"  {kind:12} {cls:40} {count}")
    unexplained = [v for v in verdicts if not v.explained]
    assert not unexplained, f"{len(unexplained)} unexplained disagreements, first: {unexplained[0]}"


def test_one_pod_on_each_node_agrees(comparer: Comparer, capsys: pytest.CaptureFixture[str]) -> None:
    verdicts: list[Verdict] = []

    @SETTINGS
    @given(worlds(GENERATED))
    def check(world) -> None:
        found = comparer.pod_on_node(world)
        verdicts.extend(found)
        bad = [v for v in found if not v.explained]
        assert not bad, bad[0]

    check()
    _report(capsys, "pod on node", verdicts)
    assert {"agree: fits", "agree: short"} <= {v.cls for v in verdicts}, "the worlds never exercised both verdicts"


def test_whole_group_agrees(comparer: Comparer, capsys: pytest.CaptureFixture[str]) -> None:
    verdicts: list[Verdict] = []

    @SETTINGS
    @given(worlds(GENERATED, max_pods=3))
    def check(world) -> None:
        verdict = comparer.group(world)
        verdicts.append(verdict)
        assert verdict.explained, verdict

    check()
    _report(capsys, "whole group", verdicts)


def test_upstream_validation_refuses_what_it_should(comparer: Comparer) -> None:
    """The oracle can say no: a held device, a device outside the selector, too few devices, a wrong node."""
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n0", "labels": {"zone": "z1"}}}
    devices = [{"name": f"d{i}", "attributes": {"example.com/model": {"string": "ab"[i]}}} for i in range(2)]
    slices = [
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": "s"},
            "spec": {
                "driver": "gpu.example.com",
                "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                "nodeName": "n0",
                "devices": devices,
            },
        }
    ]
    request = {
        "deviceClassName": "gpu",
        "allocationMode": "ExactCount",
        "count": 1,
        "selectors": [{"cel": {"expression": 'device.attributes["example.com"].model == "a"'}}],
    }
    claim = {
        "metadata": {"name": "c", "namespace": "ml", "uid": "u"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": request}]}},
    }
    world = {"nodes": [node, {**node, "metadata": {"name": "n1"}}], "slices": slices, "classes": CLASSES, "allocated": []}

    def result(*names: str) -> dict:
        return {"devices": {"results": [{"request": "r", "driver": "gpu.example.com", "pool": "p", "device": n} for n in names]}}

    ask = comparer.upstream.validate
    accepted = ask(world, [claim], "n0", [result("d0")])
    assert accepted["ok"], accepted
    assert not ask(world, [claim], "n0", [result("d1")])["ok"], "d1 is model b"
    assert not ask(world, [claim], "n0", [result()])["ok"], "count 1"
    assert not ask(world, [claim], "n1", [result("d0")])["ok"], "d0 is on n0"
    held = {**claim, "metadata": {"name": "h", "namespace": "ml", "uid": "h"}, "status": {"allocation": result("d0")}}
    assert not ask({**world, "allocated": [held]}, [claim], "n0", [result("d0")])["ok"], "d0 is held"
