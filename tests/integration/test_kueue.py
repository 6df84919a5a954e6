"""Real Kueue in front of Phalanx: Kueue decides when a gang Job may run (quota), Phalanx places it whole.

A cluster of its own: 2 kwok workers x 2 GPUs from dra-example-driver's plugin, and Kueue v0.17.0's controller
manager built from the Go module proxy and run beside it (`localcluster/kueue.py`), with the `batch/job`
integration, `manageJobsWithoutQueueName: false` and quota on the GPUs themselves: Kueue's own
`DynamicResourceAllocation` gate maps the DeviceClass `gpu.example.com` to the resource `example.com/gpu`, which a
ClusterQueue's quota names; each rank's claim (ResourceClaimTemplate `one-gpu`, exactly 1 device) counts 1.

Its waitForPodsReady is the setting README's "Behind Kueue" documents, with the times cut short so a test can see
it act: timeout TIMEOUT s, requeued after a back-off of BACKOFF s doubling up to 2 x BACKOFF (documented: 10 min, 60 s
up to 1 h); Phalanx's own ready deadline stays off, as documented.

Each test makes a ClusterQueue and a LocalQueue of its own, and its Jobs carry `kueue.x-k8s.io/queue-name`.
"""

from __future__ import annotations

import datetime
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import WORKLOADS, cluster_name

import docscheck
from jobs import gpu_gang
from phalanx.api import keys
from phalanx_dev.localcluster import ClusterSpec, LocalCluster, demo, kueue, operatorproc

ROOT = Path(__file__).parents[2]
TIMEOUT = 20
BACKOFF = 5
FLAVOR = "default-flavor"


class Kueued:
    """The dedicated cluster, with the helpers the tests read it through."""

    def __init__(self, local: LocalCluster) -> None:
        self.local = local

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> Any:
        proc = self.local.kubectl(*args, stdin=stdin, check=False)
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()}")
        return proc

    def get(self, *args: str) -> dict:
        return json.loads(self.kubectl("get", *args, "-o", "json").stdout)

    def apply(self, namespace: str | None, *objects: dict) -> None:
        where = ("-n", namespace) if namespace else ()
        self.kubectl("apply", *where, "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}))


@pytest.fixture(scope="module")
def kq() -> Iterator[Kueued]:
    if os.environ.get("PHALANX_E2E_KUBECONFIG"):
        pytest.skip("runs Kueue's controller manager beside a dedicated local control plane")
    pods_ready = kueue.PodsReady(timeout=TIMEOUT, backoff_base=BACKOFF, backoff_max=2 * BACKOFF)
    spec = ClusterSpec(
        name=cluster_name("kueue"), workers=2, gpus_per_worker=2, driver="dra-example-driver", kueue=True, kueue_pods_ready=pods_ready
    )
    local = LocalCluster(spec)
    try:
        local.up()
        operator = operatorproc.start(local, ROOT)
        handle = Kueued(local)
        handle.apply(None, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": FLAVOR}})
        try:
            yield handle
        finally:
            operator.stop()
            if os.environ.get("PHALANX_KEEP_LOGS"):
                print(f"kueue operator log: {operator.log}; kueue's: {local.cluster_dir / 'kueue' / 'controller.log'}")
            else:
                operator.log.unlink(missing_ok=True)
    finally:
        local.down()


def wait_for(probe: Any, what: str, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while not (result := probe()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} not reached in {timeout}s")
        time.sleep(0.3)
    return result


@pytest.fixture
def ns(kq: Kueued) -> Iterator[str]:
    name = f"t-{uuid.uuid4().hex[:8]}"
    kq.kubectl("create", "namespace", name)
    demo.apply(kq.kubectl, WORKLOADS, ["one-gpu.yaml"], name)
    try:
        yield name
    finally:
        kq.kubectl("delete", "jobs,pods", "--all", "-n", name, "--wait=false", "--grace-period=0", "--force", check=False)
        kq.kubectl("delete", "namespace", name, "--wait=false", check=False)
        wait_for(
            lambda: not kq.kubectl("get", "pods,resourceclaims", "-n", name, "-o", "name", check=False).stdout.split(), f"{name} empty", 120
        )
        kq.kubectl("delete", "clusterqueue", f"cq-{name}", "--ignore-not-found", "--wait=false", check=False)


def queues(kq: Kueued, namespace: str, gpus: int, *, preemption: bool = False, flavor: str = FLAVOR) -> str:
    """A ClusterQueue whose quota is `gpus` GPUs (and ample cpu and memory), and its LocalQueue; returns the queue's name."""
    cq = f"cq-{namespace}"
    resources = [
        {"name": "cpu", "nominalQuota": "100"},
        {"name": "memory", "nominalQuota": "100Gi"},
        {"name": kueue.GPU_RESOURCE, "nominalQuota": gpus},
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{"coveredResources": [r["name"] for r in resources], "flavors": [{"name": flavor, "resources": resources}]}],
    }
    if preemption:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    kq.apply(None, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": cq}, "spec": spec})
    kq.apply(
        namespace,
        {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": "gpus"}, "spec": {"clusterQueue": cq}},
    )
    wait_for(lambda: _condition(kq.get("clusterqueue", cq), "Active") == "True", f"ClusterQueue {cq} active", 30)
    return "gpus"


def queued_gang(name: str, size: int, queue: str, *, priority: str | None = None) -> dict:
    job = gpu_gang(name, size)
    labels = job["metadata"].setdefault("labels", {})
    labels[kueue.QUEUE_NAME_LABEL] = queue
    if priority:
        labels["kueue.x-k8s.io/priority-class"] = priority
    return job


def _condition(obj: dict, kind: str) -> str | None:
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind:
            return cond["status"]
    return None


def _stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def _since(obj: dict, kind: str) -> float | None:
    """When condition `kind` last turned True (the API's seconds), or None while it is not True."""
    for cond in (obj.get("status") or {}).get("conditions") or []:
        if cond["type"] == kind and cond["status"] == "True":
            return _stamp(cond["lastTransitionTime"])
    return None


def workload(kq: Kueued, namespace: str, job: str) -> dict:
    """The Workload Kueue made for `job` (it names it after the Job, with a hash)."""
    uid = kq.get("job", job, "-n", namespace)["metadata"]["uid"]
    items = kq.get("workloads.kueue.x-k8s.io", "-n", namespace)["items"]
    mine = [w for w in items if any(o.get("uid") == uid for o in w["metadata"].get("ownerReferences") or [])]
    return mine[0] if mine else {}


def suspended(kq: Kueued, namespace: str, job: str) -> bool:
    return bool(kq.get("job", job, "-n", namespace)["spec"].get("suspend"))


def pods(kq: Kueued, namespace: str, job: str) -> list[dict]:
    return kq.get("pods", "-n", namespace, "-l", f"batch.kubernetes.io/job-name={job}")["items"]


def live(kq: Kueued, namespace: str, job: str) -> list[dict]:
    return [p for p in pods(kq, namespace, job) if not p["metadata"].get("deletionTimestamp") and p["status"].get("phase") != "Failed"]


def bound(kq: Kueued, namespace: str, job: str) -> list[dict]:
    return [p for p in live(kq, namespace, job) if p["spec"].get("nodeName")]


def allocated(kq: Kueued, namespace: str, job: str) -> dict[str, list[tuple[str, str]]]:
    """The claims of `job`'s pods that hold a device, by claim name: [(pool, device)]."""
    out = {}
    for claim in kq.get("resourceclaims", "-n", namespace)["items"]:
        if not claim["metadata"]["name"].startswith(f"{job}-"):
            continue
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        if results:
            out[claim["metadata"]["name"]] = [(r["pool"], r["device"]) for r in results]
    return out


def pod_group(kq: Kueued, namespace: str, job: str) -> dict:
    items = kq.get("podgroups.scheduling.phalanx.dev", "-n", namespace, "-l", f"scheduling.phalanx.dev/job-name={job}")["items"]
    return items[0] if items else {}


def scheduled_reason(kq: Kueued, namespace: str, job: str) -> str | None:
    for cond in (pod_group(kq, namespace, job).get("status") or {}).get("conditions") or []:
        if cond["type"] == "PodGroupInitiallyScheduled":
            return cond["reason"]
    return None


def released(kq: Kueued, namespace: str, job: str) -> bool:
    """Phalanx released the gang: its PodGroup records a reservation."""
    return bool((pod_group(kq, namespace, job).get("status") or {}).get("reservation"))


def placed_whole(kq: Kueued, namespace: str, job: str, size: int, timeout: float = 90) -> list[dict]:
    """Wait until every rank of `job` is bound, each with its own device; return the pods. Fails if ever only some
    are bound while the rest wait gated (a gang placed in part)."""

    def probe() -> list[dict] | None:
        now = live(kq, namespace, job)
        on = [p for p in now if p["spec"].get("nodeName")]
        gated = [p for p in now if not p["spec"].get("nodeName") and p["spec"].get("schedulingGates")]
        assert not (on and gated), f"{job}: {len(on)} ranks bound while {len(gated)} wait gated"
        return on if len(on) == size else None

    on = wait_for(probe, f"{size} ranks of {job} bound", timeout)
    devices = wait_for(lambda: (a := allocated(kq, namespace, job)) and len(a) == size and a, f"{size} claims of {job} allocated", 30)
    assert len({d for held in devices.values() for d in held}) == size, f"each rank its own device: {devices}"
    return on


def holds_nothing(kq: Kueued, namespace: str, job: str) -> None:
    """Suspended by Kueue, no PodGroup released, no claim allocated, no pod bound (and none but gated ones at all)."""
    assert suspended(kq, namespace, job), f"{job} is suspended"
    assert not released(kq, namespace, job), f"{job}'s PodGroup was never released"
    assert not allocated(kq, namespace, job), f"{job} holds no device"
    for pod in live(kq, namespace, job):
        assert not pod["spec"].get("nodeName") and pod["spec"].get("schedulingGates"), f"{job}'s pod {pod['metadata']['name']} is gated"


def test_quota_for_one_of_two_gangs_admits_one_whole_and_holds_the_other_with_nothing(kq: Kueued, ns: str) -> None:
    """The cluster has room for both gangs (4 GPUs); Kueue's quota (2) covers one: the other waits suspended, holding
    nothing, for quota, not for room; once the first ends, Kueue admits the second and Phalanx places it whole."""
    queue = queues(kq, ns, gpus=2)
    kq.apply(ns, queued_gang("first", 2, queue))
    wait_for(lambda: _condition(workload(kq, ns, "first"), "Admitted") == "True", "first admitted by Kueue")
    # hold-after 1 s: were the suspended Job in Phalanx's line, devices would be held for it (DeviceTaintRules) at once
    second = queued_gang("second", 2, queue)
    second["metadata"]["annotations"][keys.HOLD_AFTER] = "1s"
    kq.apply(ns, second)
    first = placed_whole(kq, ns, "first", 2)
    assert not suspended(kq, ns, "first") and released(kq, ns, "first")
    wait_for(lambda: workload(kq, ns, "second"), "second's Workload made")
    # second is pending in Kueue for quota, for longer than a release takes; it must hold nothing all along
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        holds_nothing(kq, ns, "second")
        assert _condition(workload(kq, ns, "second"), "QuotaReserved") != "True", "second has no quota"
        held = kq.get("devicetaintrules", "-l", f"{keys.MANAGED_BY_LABEL}={keys.MANAGER_NAME}")["items"]
        assert not held, f"no device held for a suspended Job: {[r['metadata']['name'] for r in held]}"
        time.sleep(0.5)
    assert _condition(workload(kq, ns, "first"), "PodsReady") == "True", "Kueue sees the placed gang ready"

    # first finishes: its ranks exit 0 (kwok), the Job completes, Kueue gives its quota to second
    for pod in first:
        kq.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "localcluster.phalanx.dev/exit=0")
    wait_for(lambda: _condition(kq.get("job", "first", "-n", ns), "Complete") == "True", "first complete")
    wait_for(lambda: _condition(workload(kq, ns, "second"), "Admitted") == "True", "second admitted once first finished")
    placed_whole(kq, ns, "second", 2)
    assert released(kq, ns, "second")


def test_kueue_preempting_a_lower_gang_takes_it_down_whole_and_frees_its_devices(kq: Kueued, ns: str) -> None:
    """Quota and room for one gang of 4 (the whole cluster): a higher WorkloadPriorityClass's gang makes Kueue evict
    the lower one by suspending its Job; Phalanx takes it down whole, its claims are deallocated, and the higher gang
    (which can only fit on those very devices) is placed whole."""
    low, high = f"low-{ns}", f"high-{ns}"
    for name, value in ((low, 100), (high, 10000)):
        kq.apply(
            None, {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "WorkloadPriorityClass", "metadata": {"name": name}, "value": value}
        )
    try:
        queue = queues(kq, ns, gpus=4, preemption=True)
        kq.apply(ns, queued_gang("low", 4, queue, priority=low))
        low_pods = placed_whole(kq, ns, "low", 4)
        low_devices = {d for held in allocated(kq, ns, "low").values() for d in held}

        kq.apply(ns, queued_gang("high", 4, queue, priority=high))
        wait_for(lambda: suspended(kq, ns, "low"), "low suspended by Kueue's preemption")
        evicted = workload(kq, ns, "low")
        assert _condition(evicted, "Evicted") == "True" or _condition(evicted, "Preempted") == "True", evicted.get("status")
        # taken down whole: every first rank goes (none is left running while others are gone), devices given back
        first = {p["metadata"]["uid"] for p in low_pods}
        wait_for(lambda: not first & {p["metadata"]["uid"] for p in live(kq, ns, "low")}, "all of low's ranks taken down")
        wait_for(lambda: not allocated(kq, ns, "low"), "low's claims deallocated")
        # Phalanx saw its gang suspended after the release, and readmits it as a gang once Kueue resumes it
        wait_for(lambda: scheduled_reason(kq, ns, "low") == "JobSuspended", "low's PodGroup readmitted on suspension")
        high_pods = placed_whole(kq, ns, "high", 4)
        high_devices = {d for held in allocated(kq, ns, "high").values() for d in held}
        assert high_devices == low_devices, "the higher gang runs on the devices the lower one gave back"
        assert {p["metadata"]["uid"] for p in high_pods}.isdisjoint(first)
        holds_nothing(kq, ns, "low")
        assert _condition(workload(kq, ns, "low"), "QuotaReserved") != "True", "low waits requeued in Kueue"
    finally:
        kq.kubectl("delete", "workloadpriorityclass", low, high, "--ignore-not-found", check=False)


def test_a_flavors_node_labels_kueue_injects_are_where_phalanx_places_the_gang(kq: Kueued, ns: str) -> None:
    """Kueue writes the admitting flavor's nodeLabels into the Job's pod template as it unsuspends it; Phalanx plans
    the gang with them: both ranks on worker-2 (a plan that ignored them could as well pick worker-1, and
    kube-scheduler would then refuse the pin). Once Kueue suspends the Job again, it takes its nodeSelector back off."""
    flavor = f"worker-2-{ns}"
    kq.apply(
        None,
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": flavor},
            "spec": {"nodeLabels": {"kubernetes.io/hostname": "worker-2"}},
        },
    )
    try:
        queue = queues(kq, ns, gpus=2, flavor=flavor)
        kq.apply(ns, queued_gang("pinned", 2, queue))
        ranks = placed_whole(kq, ns, "pinned", 2)
        assert {p["spec"]["nodeName"] for p in ranks} == {"worker-2"}, [p["spec"]["nodeName"] for p in ranks]
        template = kq.get("job", "pinned", "-n", ns)["spec"]["template"]["spec"]
        assert template.get("nodeSelector") == {"kubernetes.io/hostname": "worker-2"}, "Kueue injected its flavor's labels"
        assert {"name": keys.SCHEDULING_GATE} in template["schedulingGates"], "and Phalanx's gate stays on the template"
        kq.kubectl(
            "patch",
            "workloads.kueue.x-k8s.io",
            workload(kq, ns, "pinned")["metadata"]["name"],
            "-n",
            ns,
            "--type=merge",
            "-p",
            '{"spec": {"active": false}}',
        )
        wait_for(lambda: suspended(kq, ns, "pinned"), "pinned suspended once its Workload is deactivated")
        wait_for(
            lambda: not kq.get("job", "pinned", "-n", ns)["spec"]["template"]["spec"].get("nodeSelector"), "the nodeSelector taken back"
        )
        wait_for(lambda: not allocated(kq, ns, "pinned"), "pinned's claims deallocated")
        wait_for(lambda: not live(kq, ns, "pinned"), "pinned's ranks gone")
        holds_nothing(kq, ns, "pinned")
    finally:
        kq.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false", check=False)
        kq.kubectl("delete", "clusterqueue", f"cq-{ns}", "--ignore-not-found", "--wait=false", check=False)
        kq.kubectl("delete", "resourceflavor", flavor, "--ignore-not-found", "--wait=false", check=False)


def test_waitforpodsready_evicts_a_gated_gang_that_holds_nothing_and_requeues_it_with_backoff(kq: Kueued, ns: str) -> None:
    """Kueue's waitForPodsReady counts from admission, so a gang Phalanx holds gated because it does not fit (here
    3 of the 4 GPUs are taken by a gang Kueue does not manage) is counted: at the timeout Kueue suspends it and
    requeues it after its back-off. They do not fight: the gated gang holds no device while it waits or when evicted
    (nothing for Phalanx to undo), Kueue readmits it only after the back-off (not in a tight loop), and once the room
    is there the readmitted gang is placed whole and stays admitted past the timeout (Kueue sees it Ready)."""
    queue = queues(kq, ns, gpus=2)
    kq.apply(ns, gpu_gang("outside", 3))  # no queue name: Kueue leaves it alone, Phalanx places it
    outside = placed_whole(kq, ns, "outside", 3)
    kq.apply(ns, queued_gang("train", 2, queue))
    admitted = wait_for(lambda: _since(workload(kq, ns, "train"), "Admitted"), "train admitted by Kueue")
    admitted_at = time.monotonic()
    wait_for(lambda: len(live(kq, ns, "train")) == 2, "train's pods made")
    # gated, holding nothing, until Kueue's timeout evicts it
    while not suspended(kq, ns, "train"):
        assert not bound(kq, ns, "train") and not allocated(kq, ns, "train") and not released(kq, ns, "train"), "train holds nothing"
        assert time.monotonic() - admitted_at < TIMEOUT + 30, "Kueue's waitForPodsReady evicts the gang that never came up"
        time.sleep(0.5)
    evicted_at = time.monotonic()
    wl = workload(kq, ns, "train")
    reasons = {c["type"]: c.get("reason") for c in wl["status"]["conditions"]}
    assert reasons.get("Evicted") == "PodsReadyTimeout", reasons
    # Kueue's own record, to the second: evicted at the timeout after its admission, requeued a back-off later
    evicted = _since(wl, "Evicted")
    requeue_at = _stamp(wl["status"]["requeueState"]["requeueAt"])
    assert evicted is not None
    assert evicted - admitted >= TIMEOUT - 1, f"evicted at the timeout, not before ({evicted - admitted:.0f}s)"
    assert requeue_at - evicted >= BACKOFF - 1, f"requeued a back-off after the eviction ({requeue_at - evicted:.0f}s)"
    print(f"train: admitted, held gated, evicted by waitForPodsReady {evicted - admitted:.0f}s after admission")
    wait_for(lambda: not live(kq, ns, "train"), "the suspended gang's pods gone")
    holds_nothing(kq, ns, "train")
    # requeued after the back-off (counted from the eviction), not at once
    wait_for(lambda: not suspended(kq, ns, "train"), "train readmitted after its back-off", 60)
    readmitted = _since(workload(kq, ns, "train"), "Admitted")
    assert readmitted is not None and readmitted >= requeue_at, "readmitted only once its back-off ran out"
    print(f"train: readmitted {readmitted - evicted:.0f}s after its eviction (seen {time.monotonic() - evicted_at:.1f}s after it)")
    assert (workload(kq, ns, "train")["status"].get("requeueState") or {}).get("count", 0) >= 1

    # the room comes: outside finishes; the readmitted (or next readmitted) gang is placed whole and stays admitted
    for pod in outside:
        kq.kubectl("annotate", "pod", pod["metadata"]["name"], "-n", ns, "localcluster.phalanx.dev/exit=0")
    room_at = time.monotonic()
    placed_whole(kq, ns, "train", 2, timeout=TIMEOUT + 4 * BACKOFF + 60)
    requeues = (workload(kq, ns, "train")["status"].get("requeueState") or {}).get("count", 0)
    print(f"train: placed whole {time.monotonic() - room_at:.1f}s after the room came, after {requeues} requeue(s)")
    wait_for(lambda: _condition(workload(kq, ns, "train"), "PodsReady") == "True", "Kueue sees train ready")
    placed = {p["metadata"]["uid"] for p in bound(kq, ns, "train")}
    time.sleep(TIMEOUT + 5)
    assert not suspended(kq, ns, "train"), "a placed, ready gang is not evicted at the timeout"
    assert {p["metadata"]["uid"] for p in bound(kq, ns, "train")} == placed, "nor taken down by anyone"


def test_the_readmes_kueue_configuration_is_the_one_tested() -> None:
    """README's "Behind Kueue" Configuration is what `kueue.controller_config` gives Kueue here, with the documented
    waitForPodsReady (the tests above run it with its times cut short)."""
    block = next(b for b in docscheck.blocks(docscheck.ROOT / "README.md") if "deviceClassMappings" in b.text)
    documented = yaml.safe_load(block.text)
    ours = kueue.controller_config(1, 2, Path("/certs"), kueue.DOCUMENTED)
    assert _within(documented, ours), f"README's {documented} is not in {ours}"


def _within(part: Any, whole: Any) -> bool:
    """Each key of `part` is in `whole` with the same value (maps compared key by key, so the local cluster's own
    additions, such as its visibility server off, may be beside the documented ones)."""
    if isinstance(part, dict):
        return isinstance(whole, dict) and all(k in whole and _within(v, whole[k]) for k, v in part.items())
    return part == whole


def test_the_readmes_example_runs_behind_kueue(kq: Kueued, ns: str) -> None:
    """README's queue and gang, applied as written (moved into the test's namespace): Kueue admits the Job within
    the 4 GPUs of the ClusterQueue, and Phalanx places its 4 ranks whole."""
    blocks = list(docscheck.examples(kueue=True))
    assert len(blocks) == 1, [b.where for b in blocks]
    objects = docscheck.objects(blocks[0])
    cluster_scoped = [o for o in objects if o["kind"] in ("ResourceFlavor", "ClusterQueue")]
    namespaced = [{**o, "metadata": {**o["metadata"], "namespace": ns}} for o in objects if o not in cluster_scoped]
    kq.apply(None, *cluster_scoped)
    try:
        kq.apply(ns, *namespaced)
        job = next(o["metadata"]["name"] for o in namespaced if o["kind"] == "Job")
        wait_for(lambda: _condition(workload(kq, ns, job), "Admitted") == "True", f"{job} admitted by Kueue")
        placed_whole(kq, ns, job, 4)
        wait_for(lambda: scheduled_reason(kq, ns, job) == "Scheduled", f"{job}'s PodGroup Scheduled")
    finally:
        kq.kubectl("delete", "jobs", "--all", "-n", ns, "--wait=false", check=False)
        names = [o["metadata"]["name"] for o in cluster_scoped if o["kind"] == "ClusterQueue"]
        kq.kubectl("delete", "clusterqueue", *names, "--ignore-not-found", "--wait=false", check=False)
