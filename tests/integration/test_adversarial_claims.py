"""A tenant cannot stall the operator: adversarial claims are refused with the field named, while admission keeps answering.

Three gangs each bring one adversarial claim: eight requests tied by seven
matchAttribute constraints that never settle (over 16 devices of an extra
ResourceSlice on worker-1), a selector with `quantity("1e999999")`, and a
300 x 300 comprehension. Meanwhile a loop sends dry-run creates of gang Jobs
through the operator's admission webhook and times each, and an ordinary gang
must still be released. The latencies are printed, never asserted (this
machine's timing is noisy); what is asserted is that every request was
answered, the operator lives, and each adversarial PodGroup says why.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import threading
import time
from typing import Any

import pytest
from conftest import WORKLOADS, Cluster, Operator, wait_for
from kubernetes_asyncio import client, config

from jobs import MIN4, gang_job, gpu_gang
from phalanx.api import keys
from phalanx.localcluster import demo

TANGLE = "tangle.example.com"
SQUARE = "[" + ",".join(str(i) for i in range(300)) + "]"
TIMEOUT = 10.0


def _template(name: str, devices: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def _selector(expression: str) -> dict[str, Any]:
    request = {"deviceClassName": "gpu.example.com", "selectors": [{"cel": {"expression": expression}}]}
    return {"requests": [{"name": "gpu", "exactly": request}]}


TEMPLATES = {
    "tangled": {
        "requests": [{"name": f"r{i}", "exactly": {"deviceClassName": TANGLE}} for i in range(8)],
        "constraints": [
            {"requests": ["r0", "r7"], "matchAttribute": f"{TANGLE}/id"},
            *({"requests": [f"r{i}", "r7"], "matchAttribute": f"{TANGLE}/same"} for i in range(1, 7)),
        ],
    },
    "huge": _selector('device.capacity["gpu.example.com"].memory.compareTo(quantity("1e999999")) < 0'),
    "square": _selector(f"{SQUARE}.all(x, {SQUARE}.all(y, x + y >= 0 && x * y >= 0))"),
}
WHY = {
    "tangled": "spec.devices.constraints (matchAttribute) need more than",
    "huge": 'spec.devices.requests[0].exactly.selectors[0].cel.expression: quantity("1e999999")',
    "square": "spec.devices.requests[0].exactly.selectors[0].cel.expression: estimated cost",
}


def _tangle_slice() -> dict[str, Any]:
    devices = [{"name": f"t{i}", "attributes": {f"{TANGLE}/id": {"int": i}, f"{TANGLE}/same": {"int": 1}}} for i in range(16)]
    spec = {"driver": TANGLE, "pool": {"name": "tangle-worker-1", "generation": 1, "resourceSliceCount": 1}, "nodeName": "worker-1"}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "tangle-worker-1"},
        "spec": {**spec, "devices": devices},
    }


def _tangle_class() -> dict[str, Any]:
    selector = {"cel": {"expression": f'device.driver == "{TANGLE}"'}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": TANGLE}, "spec": {"selectors": [selector]}}


def _adversarial_gang(name: str) -> dict[str, Any]:
    job = gpu_gang(name, 2)
    job["spec"]["template"]["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": name}]
    return job


class AdmissionProbe(threading.Thread):
    """Dry-run creates of gang Jobs through the webhook, one after another, each timed; runs until stopped."""

    def __init__(self, cluster: Cluster, namespace: str) -> None:
        super().__init__(daemon=True)
        self.cluster, self.namespace = cluster, namespace
        self.latencies: list[float] = []
        self.failures: list[str] = []
        self.stop = threading.Event()

    def run(self) -> None:
        asyncio.run(self._probe())

    async def _probe(self) -> None:
        configuration = client.Configuration()
        await config.load_kube_config(config_file=str(self.cluster.kubeconfig), client_configuration=configuration)
        async with client.ApiClient(configuration) as api:
            jobs = client.BatchV1Api(api)
            i = 0
            while not self.stop.is_set():
                i += 1
                body = gang_job(f"probe-{i}", annotations=MIN4)
                started = time.monotonic()
                try:
                    await asyncio.wait_for(jobs.create_namespaced_job(self.namespace, body, dry_run="All"), TIMEOUT)
                    self.latencies.append(time.monotonic() - started)
                except Exception as exc:  # a timeout or a refusal: both mean admission did not answer as it should
                    self.failures.append(f"probe-{i}: {type(exc).__name__}: {exc}")


def _condition(cluster: Cluster, namespace: str, job: str) -> dict[str, Any]:
    items = cluster.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"{keys.JOB_NAME_LABEL}={job}")["items"]
    conds = ((items[0].get("status") or {}).get("conditions") or []) if items else []
    return next((c for c in conds if c["type"] == keys.INITIALLY_SCHEDULED), {})


@pytest.fixture
def tangle(cluster: Cluster):
    """Sixteen devices of a driver nobody runs, on worker-1, and their class: room for the tangled claim to search."""
    for obj in (_tangle_slice(), _tangle_class()):
        cluster.kubectl("apply", "-f", "-", stdin=json.dumps(obj))
    yield
    cluster.kubectl("delete", "resourceslice", "tangle-worker-1", "--ignore-not-found")
    cluster.kubectl("delete", "deviceclass", TANGLE, "--ignore-not-found")


def test_adversarial_claims_are_refused_while_admission_answers(cluster: Cluster, operator: Operator, namespace: str, tangle: None) -> None:
    demo.apply(cluster.kubectl, WORKLOADS, ["one-gpu.yaml"], namespace)
    for name, devices in TEMPLATES.items():
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(_template(name, devices)))
    probe = AdmissionProbe(cluster, namespace)
    probe.start()
    try:
        wait_for(lambda: len(probe.latencies) >= 5, "admission answering before the adversarial gangs arrive")
        for name in TEMPLATES:
            cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(_adversarial_gang(name)))
        cluster.kubectl("apply", "-n", namespace, "-f", "-", stdin=json.dumps(gpu_gang("ordinary", 2)))
        said = {
            name: wait_for(lambda name=name: (c := _condition(cluster, namespace, name)).get("reason") == "Unschedulable" and c, name, 120)
            for name in TEMPLATES
        }

        def ordinary_running() -> bool:
            pods = cluster.get("pods", "-n", namespace, "-l", "batch.kubernetes.io/job-name=ordinary")["items"]
            return len([p for p in pods if p["status"].get("phase") == "Running"]) == 2

        wait_for(ordinary_running, "the ordinary gang released and running beside the adversarial ones", 120)
        sent_before = len(probe.latencies) + len(probe.failures)
        wait_for(lambda: len(probe.latencies) + len(probe.failures) >= sent_before + 20, "20 more admission requests", 120)
    finally:
        probe.stop.set()
        probe.join(timeout=TIMEOUT + 5)
    for name, condition in said.items():
        assert WHY[name] in condition["message"], (name, condition["message"])
    assert operator.handle is None or operator.handle.process.poll() is None, "the operator died"
    assert not probe.failures, probe.failures[:3]
    latencies = sorted(probe.latencies)
    p99 = latencies[min(len(latencies) - 1, int(0.99 * len(latencies)))]
    print(
        f"\nadmission during adversarial planning: {len(latencies)} dry-run gang Job creates, all answered; "
        f"p50 {statistics.median(latencies) * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
