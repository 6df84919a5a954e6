"""The article's preemption tasks (`./task dra-preempt`, `preempt`, `preempt:all`) with their own manifests, on Phalanx.

Upstream 1.37 leaves the urgent gang Unschedulable when the victims hold DRA devices; Phalanx preempts, and
disruptionMode decides how many of the victim's members go. Slices: dra-example-driver's (its plugin on the local
control plane, its DaemonSet on Kind); the accelerator cases use a node-local extended resource instead.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from conftest import WORKLOADS, Cluster, Operator

from phalanx_dev.localcluster import demo


@pytest.fixture
def accelerators(cluster: Cluster) -> Iterator[None]:
    yield
    demo.set_accelerators(cluster.kubectl, None)


def test_dra_preempt_gives_the_urgent_gang_the_research_gangs_gpus(cluster: Cluster, operator: Operator, namespace: str) -> None:
    outcome = demo.run_dra_preempt(cluster.kubectl, WORKLOADS, namespace)
    assert outcome.preemptor_running == 4, outcome
    assert (outcome.victims_taken, outcome.victims) == (4, 4), "train-a is in disruptionMode all: preempted as a unit"
    assert outcome.census.devices_held == 4, outcome.census


@pytest.mark.parametrize(("mode", "taken"), [("single", 2), ("all", 4)])
def test_preempt_takes_the_members_disruption_mode_says(
    cluster: Cluster, operator: Operator, namespace: str, accelerators: None, mode: str, taken: int
) -> None:
    outcome = demo.run_preempt(cluster.kubectl, WORKLOADS, mode, namespace)
    assert outcome.preemptor_running == 4, outcome
    assert outcome.victims_taken == taken, f"disruptionMode {mode}: {outcome.victims_taken} of 4 preempted"
