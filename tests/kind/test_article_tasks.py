"""The article's tasks on Kind, run as a user runs them after `BACKEND=kind ./task up`: `BACKEND=kind ./task X`,
through the operator the cluster runs (two replicas, Service-backed webhooks) and the chart's kubelet plugins.

`./task test:kind` brings the cluster up (e2e/kind/e2e.sh, which runs the e2e suite on it first), runs these, and
takes it down with nothing left. The scenarios' outcomes are asserted in detail by the e2e suite; these check that
each task, the BACKEND switch and the Kind backend under it print the article's figures, and that a rank holds the
device the chart's kubelet plugin prepared for it. Without a Kind cluster each test fails (the task says the
cluster is not up), never skips.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from jobs import gpu_gang
from phalanx_dev.kind.cluster import KindCluster
from phalanx_dev.localcluster import demo

REPO = Path(__file__).resolve().parents[2]
WORKLOADS = REPO / "e2e" / "workloads"


def task(*args: str) -> str:
    """`BACKEND=kind ./task ARGS`; its output, or the test fails with what it printed."""
    out = subprocess.run(
        [str(REPO / "task"), *args], cwd=REPO, env={**os.environ, "BACKEND": "kind"}, text=True, capture_output=True, timeout=900
    )
    assert out.returncode == 0, f"./task {' '.join(args)} exited {out.returncode}:\n{out.stdout[-4000:]}\n{out.stderr[-4000:]}"
    return out.stdout


def figures(pattern: str, text: str) -> tuple[int, ...]:
    match = re.search(pattern, text)
    assert match is not None, f"no line like {pattern!r} in:\n{text[-4000:]}"
    return tuple(int(g) for g in match.groups())


def test_deadlock_holds_every_gpu_with_ranks_pending_for_good() -> None:
    running, pending, training, held, total = figures(
        r"no gang policy: (\d+) ranks running, (\d+) Pending for good; (\d+) of 2 Jobs training; (\d+)/(\d+) GPUs held",
        task("deadlock"),
    )
    # kube-scheduler splits the 6 GPUs 4 + 2 or 3 + 3 from run to run: both are the deadlock
    assert (running, pending, held, total) == (6, 2, 6, 6)
    assert training in (0, 1)


def test_gang_runs_one_job_whole_and_holds_the_other_whole() -> None:
    assert figures(
        r"gang\.minCount 4: (\d+) ranks running, (\d+) held whole by Phalanx's gate; (\d+)/(\d+) GPUs held, (\d+) free", task("gang")
    ) == (4, 4, 4, 6, 2)


def test_dra_preempt_gives_the_urgent_gang_the_research_gangs_gpus() -> None:
    assert figures(r"train-urgent has (\d+) of 4 ranks running; (\d+) of train-a's (\d+) ranks preempted", task("dra-preempt")) == (4, 4, 4)


@pytest.mark.parametrize(("name", "mode", "taken"), [("preempt", "single", 2), ("preempt:all", "all", 4)])
def test_preempt_takes_what_the_disruption_mode_says(name: str, mode: str, taken: int) -> None:
    assert figures(
        rf"disruptionMode {mode}: (\d+) of research's (\d+) ranks preempted, train-urgent has (\d+) of 4 running", task(name)
    ) == (taken, 4, 4)


def test_metrics_shows_each_replicas_block() -> None:
    out = task("metrics")
    blocks = re.findall(r"^# (phalanx-\S+)$", out, re.MULTILINE)
    # a replica whose pod proxy gave nothing is headed "# POD: why", and is not counted
    assert len(blocks) == 2, f"one block per replica of the Deployment's two:\n{out}"
    released = [float(v) for v in re.findall(r"^phalanx_released_pods_total (\S+)$", out, re.MULTILINE)]
    assert len(released) == 2 and sum(released) > 0, f"the leader released the scenarios' gangs:\n{out}"


def test_each_rank_holds_the_device_the_charts_plugin_prepared_for_it() -> None:
    """dra-example-driver's kubelet plugin runs as the chart's DaemonSet, one pod Ready on each worker, and a rank of
    a gang the operator released is given the device Phalanx allocated to its claim: the kubelet called the plugin's
    NodePrepareResources and the plugin's CDI spec set GPU_DEVICE_<n> to that device's name, which the rank logs."""
    kubectl = KindCluster.of(REPO).kubectl
    sets = json.loads(kubectl("-n", "dra-example-driver", "get", "daemonsets", "-o", "json").stdout)["items"]
    plugins = [d for d in sets if "kubeletplugin" in d["metadata"]["name"]]
    assert len(plugins) == 1, [d["metadata"]["name"] for d in sets]
    assert plugins[0]["status"].get("numberReady") == plugins[0]["status"].get("desiredNumberScheduled") == 3, plugins[0]["status"]

    namespace = demo.NAMESPACE
    demo.clean(kubectl, namespace)  # the scenarios' Jobs give their devices back first
    demo.apply(kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    job = gpu_gang("device", 2)
    rank = job["spec"]["template"]["spec"]["containers"][0]
    given = "$(env | sed -n 's/^GPU_DEVICE_[0-9]*=//p')"
    rank["command"] = ["sh", "-c", f'echo "holding {given} on $NODE"; exec sleep 3600']
    rank["env"] = [{"name": "NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}}]
    kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))
    try:
        logs = _until(lambda: _logs(kubectl, namespace, "device", 2), "both ranks running and logging")
        for pod, log in logs:
            claim = next(s["resourceClaimName"] for s in pod["status"]["resourceClaimStatuses"] if s["name"] == "gpu")
            got = json.loads(kubectl("-n", namespace, "get", "resourceclaim", claim, "-o", "json").stdout)
            [result] = got["status"]["allocation"]["devices"]["results"]
            assert result["pool"] == pod["spec"]["nodeName"], "the device is on the rank's own node"
            assert log == f"holding {result['device']} on {result['pool']}", log
        assert len({log for _, log in logs}) == 2, f"two ranks, two devices: {logs}"
    finally:
        demo.clean(kubectl, namespace)


def _logs(kubectl: demo.Kubectl, namespace: str, job: str, size: int) -> list[tuple[dict[str, Any], str]] | None:
    """Each running rank of `job` with its log, once all `size` have logged."""
    pods = json.loads(kubectl("-n", namespace, "get", "pods", "-l", f"job-name={job}", "-o", "json").stdout)["items"]
    running = [p for p in pods if p["status"].get("phase") == "Running"]
    if len(running) < size:
        return None
    logs = [(p, kubectl("-n", namespace, "logs", p["metadata"]["name"], check=False).stdout.strip()) for p in running]
    return logs if all(log for _, log in logs) else None


def _until(probe: Any, what: str, timeout: float = 180) -> Any:
    deadline = time.monotonic() + timeout
    while (got := probe()) is None:
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f}s"
        time.sleep(2)
    return got
