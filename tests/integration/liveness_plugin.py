"""The liveness oracle (`liveness.py`) at the end of every integration test: no gang may be left fitting and waiting.

Judged in each test's teardown before any fixture is torn down: the test's namespace still holds what it made (the
`namespace` fixture deletes it, and every device with it, in its own teardown) and the operator that ran the test
still runs (the module's `operator`, or the test's own). Judged at a module's end instead, a fixture would see the
namespaces already emptied and, being set up before the module's `operator`, the operator already stopped.

A test is judged when it passed and used the session `cluster`; the oracle itself only judges while the operator's
Lease is held and fresh, so a module with no operator, or a test that stopped its own, is judged on nothing. The usual
cost is one kubectl read (no gang fits and waits); a gang that fits is watched until it is released, or for the
bound (`PHALANX_LIVENESS_BOUND`, 15 s), then the test errors in teardown naming it. `PHALANX_LIVENESS=0` turns the
oracle off; a test whose end state keeps a gang waiting on purpose says why with `@pytest.mark.liveness_unjudged`.
The terminal summary says what it cost.
"""

from __future__ import annotations

import os
import time
from collections.abc import Generator
from pathlib import Path

import pytest

import liveness

HERE = Path(__file__).parent
_PASSED = pytest.StashKey[bool]()
_spent = {"tests": 0, "observations": 0, "watched": 0, "seconds": 0.0, "longest": 0.0}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "liveness_unjudged(reason): the test's end state keeps a gang waiting on purpose; the liveness oracle skips it"
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[_PASSED] = report.passed
    return report


def _judged(item: pytest.Item) -> bool:
    return (
        os.environ.get("PHALANX_LIVENESS", "1") != "0"
        and item.path.is_relative_to(HERE)
        and item.stash.get(_PASSED, False)
        and "cluster" in getattr(item, "funcargs", {})
        and item.get_closest_marker("liveness_unjudged") is None
    )


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    verdict: liveness.Verdict | None = None
    if _judged(item):
        cluster = item.funcargs["cluster"]  # type: ignore[attr-defined]
        started = time.monotonic()
        try:
            verdict = liveness.judge(cluster.kubectl, bound=float(os.environ.get("PHALANX_LIVENESS_BOUND", liveness.BOUND)))
        except AssertionError as exc:  # the API server not answering kubectl: nothing to judge on
            item.add_report_section("teardown", "liveness", f"not judged: {exc}")
        spent = time.monotonic() - started
        _spent["tests"] += 1
        _spent["seconds"] += spent
        _spent["longest"] = max(_spent["longest"], spent)
        _spent["observations"] += verdict.observations if verdict else 0
        _spent["watched"] += 1 if verdict and verdict.observations > 1 else 0
    result = yield  # the fixtures' teardown, whatever the verdict
    if verdict is not None and verdict.findings:
        pytest.fail(
            "liveness: a gang fits and waits with the operator running:\n" + "\n".join(f"  {f}" for f in verdict.findings), pytrace=False
        )
    return result


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if _spent["tests"]:
        terminalreporter.write_line(
            f"liveness oracle: {_spent['tests']} tests judged ({_spent['watched']} ended with a gang fitting and waiting, watched "
            f"until released), {_spent['observations']} observations, "
            f"{_spent['seconds']:.1f}s in all (longest {_spent['longest']:.1f}s)"
        )
