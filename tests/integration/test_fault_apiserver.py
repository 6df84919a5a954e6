"""The API server killed and restarted mid-run, its etcd history compacted meanwhile: every watch the operator
resumes is answered 410 Gone for real, and the relisted view holds no phantom capacity and allocates nothing twice.

Gang `a` holds 4 of the 6 GPUs; `b` (2) and `c` (4) are submitted and the API server is restarted at once, while
`b` is being planned or reserved. Once it is back, `a` is deleted: `c` only runs if the operator's view dropped
`a`'s claims (no phantom), and `b` and `c` together must hold 6 distinct devices (no double allocation).

The same again with the API server kept down longer than the leader's renew deadline: every Lease renewal is
refused a connection, the leader stops leading (cancelling whatever release it was in), and once the server
answers it must lead again and finish or undo `b`'s reservation; an operator that stopped campaigning would
leave `b`'s claims allocated and its pods gated for good.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import WORKLOADS, Cluster, started_operator, wait_for

import faultcheck
from jobs import gpu_gang
from phalanx.kube.lease import Timing
from phalanx_dev.localcluster import demo, operatorproc

ROOT = Path(__file__).parents[2]


@pytest.fixture
def operator_process(cluster: Cluster) -> Iterator[operatorproc.OperatorProcess]:
    if cluster.local is None:
        pytest.skip("restarts the local control plane's API server")
    yield from started_operator(cluster.local)


def expired_relists(metrics_port: int) -> float:
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics").read().decode()
    return sum(
        float(line.split()[-1])
        for line in text.splitlines()
        if line.startswith("phalanx_watch_relists_total{") and 'reason="expired"' in line
    )


def test_an_api_server_restart_with_expired_watches_leaves_no_phantom_and_no_double_allocation(
    cluster: Cluster, operator_process: operatorproc.OperatorProcess, namespace: str
) -> None:
    restarted_while_b_is_placed(cluster, operator_process, namespace, down=0.0)


def test_an_outage_longer_than_the_lease_renewal_leaves_no_gang_half_done(
    cluster: Cluster, operator_process: operatorproc.OperatorProcess, namespace: str
) -> None:
    restarted_while_b_is_placed(cluster, operator_process, namespace, down=Timing().renew_deadline + 2)
    logs = operator_process.logs()
    assert "leader election: no answer from the API server" in logs, "a Lease renewal met the outage"
    assert "stopped leading" in logs and "term 2)" in logs, "the leader stopped leading in the outage and led again after it"


def restarted_while_b_is_placed(cluster: Cluster, operator_process: operatorproc.OperatorProcess, namespace: str, *, down: float) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("a", 4, mode="all")))
    wait_for(lambda: faultcheck.bound(faultcheck.take(cluster.kubectl, namespace), "a") == 4, "gang a running", timeout=120)
    assert expired_relists(operator_process.metrics_port) == 0, "no watch expired before the restart"
    for job in (gpu_gang("b", 2, mode="all"), gpu_gang("c", 4, mode="all")):
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(job))

    revision = cluster.local.restart_apiserver(compact=True, down=down)

    assert revision > 0
    continuous = faultcheck.Continuous()

    def relisted() -> bool:
        wrong = continuous.check(faultcheck.take(cluster.kubectl, namespace))
        assert not wrong, f"after the restart: {wrong}"
        return expired_relists(operator_process.metrics_port) > 0

    wait_for(relisted, "a resumed watch answered 410 Gone", timeout=120)
    assert "410 Gone" in operator_process.logs(), "the operator logged the expired watch"
    cluster.kubectl("delete", "job", "a", "-n", namespace, "--wait=false")
    snapshot = faultcheck.settle(cluster, namespace, {"a": 0, "b": 2, "c": 4}, continuous=continuous)
    assert operator_process.process.poll() is None, "the operator lived through the restart"
    print(f"claims seen reserved for no one under a bound pod, then reserved again: {continuous.unreserved or 'none'}")
    problems = faultcheck.violations(snapshot)
    assert not problems, f"after the API server restart: {problems}\n{faultcheck.summary(snapshot)}"
    held = [d for c in snapshot.claims for d in faultcheck.held(c)]
    assert len(held) == len(set(held)) == 6, f"b and c hold all six devices, none twice: {held}"
