"""The benchmarks' in-process workloads at their smallest size: each runs, and each answers as its published run must.

They are run for their figures only now and then (`./task bench`, `./task bench:planner`, `./task bench:preemption`);
here they run on every `./task test`, so a change to the planner or the schema that breaks one (a PodGroup built
without the `disruptionMode` the schema came to require crashed `./task bench -- --quick` unnoticed) fails here
first. No figure is asserted: speed lives in the benchmarks' own runs, as ratios.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parents[2] / "benchmarks"))

import apirequests
import components
import planner_bench
import preemption_bench
import queue_cost
import snapshot_bench


def test_the_planner_benchmark_answers_every_case_as_expected(capsys: pytest.CaptureFixture[str]) -> None:
    nodes = max(planner_bench.MEMBERS, planner_bench.LARGE // planner_bench.DEVICES_PER_NODE)  # "apart" puts one rank per node
    assert planner_bench.main(["--runs", "1", "--nodes", str(nodes)]) == 0, capsys.readouterr().err
    assert "as expected" in capsys.readouterr().out


def test_the_preemption_benchmark_chooses_the_victims_each_case_expects(capsys: pytest.CaptureFixture[str]) -> None:
    assert preemption_bench.main(["--runs", "1"]) == 0, capsys.readouterr().err


def test_the_queue_cost_benchmark_runs_each_part_of_a_cycle_and_prints_its_table() -> None:
    """12 gangs on 2 nodes, every device held: each known short, the head's hold planned on the emptied cluster."""
    result = queue_cost.measure(runs=2, gangs=12, nodes=2)
    parts = ("order", "line", "held back", "hold", "positions", "cycle", "first cycle, every group planned")
    assert all(result[k] >= 0 for k in parts), result
    assert len(queue_cost.table(result)) == 5


def test_the_snapshot_benchmark_keeps_a_snapshot_equal_to_one_from_scratch(capsys: pytest.CaptureFixture[str]) -> None:
    assert snapshot_bench.main(["--nodes", "40", "--running", "20", "--gangs", "5"]) == 0, capsys.readouterr().out
    assert "as expected" in capsys.readouterr().out


def test_the_component_reading_finds_each_cluster_binary_by_its_role(tmp_path: Path) -> None:
    """A process started from a cluster's `clusters/NAME/bin/` is read under "NAME/ROLE"; one that is not a cluster
    component is left out; this process is "bench"; what each spent is the difference, largest first."""
    binary = tmp_path / "clusters" / "bench-x" / "bin" / "kube-scheduler"
    binary.parent.mkdir(parents=True)
    binary.symlink_to("/bin/sleep")
    stranger = tmp_path / "clusters" / "bench-x" / "bin" / "not-a-component"
    stranger.symlink_to("/bin/sleep")
    running = [subprocess.Popen([str(binary), "30"]), subprocess.Popen([str(stranger), "30"])]
    try:
        read = components.cpu()
    finally:
        for process in running:
            process.kill()
            process.wait()
    assert "bench-x/scheduler" in read, read
    assert not any(key.startswith("bench-x/") and key != "bench-x/scheduler" for key in read), read
    assert read["bench"] > 0
    assert components.spent({"a": 1.0, "b": 1.0}, {"a": 1.5, "b": 3.0, "c": 0.2}) == {"b": 2.0, "a": 0.5, "c": 0.2}


def test_the_api_server_s_requests_are_counted_by_verb_and_resource_whatever_their_code() -> None:
    """Codes and other labels are summed; a subresource is named after its resource; watches are left out; what
    moved is the difference, largest first, with what did not move left out."""
    text = "\n".join(
        [
            "# HELP apiserver_request_total Counter of apiserver requests.",
            "# TYPE apiserver_request_total counter",
            'apiserver_request_total{code="200",resource="podgroups",subresource="status",verb="PATCH"} 5',
            'apiserver_request_total{code="409",resource="podgroups",subresource="status",verb="PATCH"} 2',
            'apiserver_request_total{code="201",resource="events",subresource="",verb="POST"} 3',
            'apiserver_request_total{code="200",resource="pods",subresource="",verb="WATCH"} 9',
            "# HELP apiserver_request_duration_seconds Latency.",
            "# TYPE apiserver_request_duration_seconds histogram",
            'apiserver_request_duration_seconds_count{resource="pods",verb="GET"} 4',
        ]
    )
    counted = apirequests.parse(text + "\n")
    assert counted == {"PATCH podgroups/status": 7.0, "POST events": 3.0}
    assert apirequests.spent(counted, {**counted, "POST events": 10.0, "GET pods": 1.0}) == {"POST events": 7, "GET pods": 1}


def test_the_scale_tier_runs_every_thread_of_a_cluster_s_fake_nodes_at_its_nice(tmp_path: Path) -> None:
    """`scale.prioritise_nodes`: every thread of the process the cluster's kwok pid file names, not only its first."""
    import os
    import threading
    from types import SimpleNamespace

    import scale

    code = (
        "import threading, time; [threading.Thread(target=time.sleep, args=(30,), daemon=True).start() for _ in range(3)]; time.sleep(30)"
    )
    kwok = subprocess.Popen([sys.executable, "-c", code])
    try:
        (tmp_path / "pids").mkdir()
        (tmp_path / "pids" / "kwok-controller.pid").write_text(f"{kwok.pid}\n")
        tasks = Path(f"/proc/{kwok.pid}/task")
        for _ in range(100):
            if len(list(tasks.iterdir())) == 4:
                break
            threading.Event().wait(0.05)
        assert scale.prioritise_nodes(SimpleNamespace(cluster_dir=tmp_path)) == 4  # type: ignore[arg-type]
        assert {os.getpriority(os.PRIO_PROCESS, int(t.name)) for t in tasks.iterdir()} == {scale.NODES_NICE}
    finally:
        kwok.kill()
        kwok.wait()


class Watch:
    """A way's pod watch, as `scale.alone` restarts it."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def stop(self) -> None:
        self.calls.append("stop")

    async def start(self) -> None:
        self.calls.append("start")


def test_the_scale_tier_measures_each_way_with_the_other_cluster_and_its_operator_stopped(tmp_path: Path) -> None:
    """`scale.alone`: inside, every process of the other cluster (its pid files) and its operator is stopped and the
    measured cluster's runs; after, each is continued, and the block ends once the other answers again, its operator
    leads, and its pods are listed and watched afresh."""
    import datetime
    import subprocess as sp
    import threading
    from types import SimpleNamespace

    import scale

    def state(pid: int) -> str:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]

    def states(want: list[str]) -> list[str]:
        for _ in range(100):  # a signal is delivered, and a process started, in its own time
            if (now := [state(p.pid) for p in started]) == want:
                break
            threading.Event().wait(0.05)
        return now

    started = [sp.Popen([sys.executable, "-c", "import time; time.sleep(60)"]) for _ in range(4)]
    try:
        assert states(["S"] * 4) == ["S"] * 4, "each started and sleeping"
        ways = []
        for name, procs, operator in (("phalanx", started[:2], started[2]), ("intree", started[3:], None)):
            (tmp_path / name / "pids").mkdir(parents=True)
            for i, proc in enumerate(procs):
                (tmp_path / name / "pids" / f"{i}.pid").write_text(f"{proc.pid}\n")
            asked: list[tuple[str, ...]] = []

            def kubectl(*args: str, asked: list[tuple[str, ...]] = asked, **_: Any) -> SimpleNamespace:
                asked.append(args)
                renewed = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=10 if len(asked) < 4 else 1)
                return SimpleNamespace(returncode=0, stderr="", stdout=renewed.isoformat())

            cluster = SimpleNamespace(cluster_dir=tmp_path / name, spec=SimpleNamespace(name=name), kubectl=kubectl, asked=asked)
            runs = SimpleNamespace(process=operator, ready=lambda: True) if operator else None
            ways.append(SimpleNamespace(cluster=cluster, operator=runs, pods=Watch()))
        phalanx, intree = ways
        vanilla = SimpleNamespace(cluster=intree.cluster, operator=None, pods=intree.pods)  # shares the in-tree cluster
        inside: list[str] = []

        async def measured() -> None:
            async with scale.alone(vanilla, [phalanx, vanilla, intree]):  # type: ignore[arg-type]
                inside.extend(states(["T", "T", "T", "S"]))

        asyncio.run(measured())
        assert inside == ["T", "T", "T", "S"], "phalanx's cluster and operator stopped, not vanilla's"
        assert states(["S"] * 4) == ["S"] * 4, "every process continued"
        lease = ("get", "lease", "-n", "phalanx-system", "phalanx-leader", "-o", "jsonpath={.spec.renewTime}")
        assert phalanx.cluster.asked == [("get", "--raw", "/readyz"), lease] * 2, "asked until its operator's Lease is renewed"
        assert intree.cluster.asked == [], "the cluster measured is asked nothing"
        assert phalanx.pods.calls == ["stop", "start"] and intree.pods.calls == [], "the continued cluster's pods watched afresh"
    finally:
        for proc in started:
            proc.kill()
            proc.wait()
