"""Every example a user may copy from the README or docs/ (each yaml block holding a complete object: a Job, a JobSet,
a PodGroup, a Pod) is accepted by the API server through Phalanx's webhooks, server-side dry run, as `kubectl apply`
sends it; and the README's run as written on the local control plane: their gangs reach Scheduled.

The examples name the namespace `ml-team`, which `./task up` creates with the ResourceClaimTemplate `one-gpu` and
the PriorityClasses of e2e/workloads/; here each block goes to a fresh namespace given the same template, and the
PriorityClasses are applied as `./task up` applies them. A PodGroup is created for real before the pods that name it
are tried (a pod naming no PodGroup is refused, as the docs say), so one `kubectl apply -f` of the block does the same.
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import yaml
from conftest import WORKLOADS, Cluster, Operator

import docscheck
from phalanx.api import keys

EXAMPLES = list(docscheck.examples())
README = docscheck.ROOT / "README.md"


def test_the_examples_are_found() -> None:
    kinds = {o["kind"] for block in EXAMPLES for o in docscheck.objects(block)}
    assert {"Job", "JobSet", "PodGroup", "CompositePodGroup", "Pod"} <= kinds, f"the docs' examples were not all found: {kinds}"


def _in(namespace: str, obj: dict[str, Any]) -> str:
    moved = {**obj, "metadata": {**obj["metadata"], "namespace": namespace}}
    return json.dumps(moved)


def _prerequisites(cluster: Cluster, namespace: str) -> None:
    """What `./task up` gives ml-team: the ResourceClaimTemplate one-gpu and the PriorityClasses."""
    template = yaml.safe_load((WORKLOADS / "one-gpu.yaml").read_text())
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_in(namespace, template))
    cluster.kubectl("apply", "-f", str(WORKLOADS / "priorityclasses.yaml"))


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("Warning:")]


@pytest.mark.parametrize("block", EXAMPLES, ids=[b.where for b in EXAMPLES])
def test_an_example_is_accepted_through_the_webhooks(cluster: Cluster, operator: Operator, namespace: str, block: docscheck.Block) -> None:
    _prerequisites(cluster, namespace)
    for obj in docscheck.objects(block):
        what = f"{block.where}: {obj['kind']} {obj['metadata']['name']}"
        tried = cluster.kubectl("apply", "--dry-run=server", "-n", namespace, "-f", "-", stdin=_in(namespace, obj), check=False)
        assert tried.returncode == 0, f"{what}: refused by the API server (server-side dry run): {tried.stderr.strip()}"
        # an example follows the docs' own advice: Phalanx warns of nothing in it (the disruption rule is there)
        assert not _warnings(tried.stderr), f"{what}: {_warnings(tried.stderr)}"
        if obj["kind"] in ("PodGroup", "CompositePodGroup"):
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=_in(namespace, obj))


README_EXAMPLES = [b for b in EXAMPLES if b.page == README]


def _pod_groups(cluster: Cluster, namespace: str) -> list[dict[str, Any]]:
    """The gangs: PodGroups of their own, and CompositePodGroups (whose PodGroups are their roles)."""
    own = [g for g in cluster.get(f"podgroups.{keys.GROUP}", "-n", namespace)["items"] if "parentCompositePodGroupName" not in g["spec"]]
    return own + cluster.get(f"compositepodgroups.{keys.GROUP}", "-n", namespace)["items"]


def _scheduled(pod_group: dict[str, Any]) -> bool:
    conditions = (pod_group.get("status") or {}).get("conditions") or []
    return any(c["type"] == keys.INITIALLY_SCHEDULED and c["status"] == "True" for c in conditions)


@pytest.mark.parametrize("block", README_EXAMPLES, ids=[b.where for b in README_EXAMPLES])
def test_a_readme_example_runs_as_written(cluster: Cluster, operator: Operator, namespace: str, block: docscheck.Block) -> None:
    """The README says each of its examples runs as written on the quick start's cluster: applied whole, in one
    `kubectl apply -f`, every gang it asks for is placed (PodGroupInitiallyScheduled=True)."""
    _prerequisites(cluster, namespace)
    stream = "\n---\n".join(_in(namespace, obj) for obj in docscheck.objects(block))
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=stream)
    deadline = time.monotonic() + 90
    while True:
        groups = _pod_groups(cluster, namespace)
        if groups and all(_scheduled(g) for g in groups):
            return
        if time.monotonic() > deadline:
            states = {
                g["metadata"]["name"]: [
                    (c["type"], c["status"], c.get("reason"), c.get("message")) for c in (g.get("status") or {}).get("conditions") or []
                ]
                for g in groups
            }
            raise AssertionError(f"{block.where}: not every gang Scheduled in 90 s: {states}")
        time.sleep(0.5)
