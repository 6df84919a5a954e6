"""Least privilege, shipped and tested against the real API server: the ClusterRole in manifests/rbac.yaml grants
exactly the operator's verbs, the ValidatingAdmissionPolicies in manifests/admission-policy.yaml let its
ServiceAccount change a pod and a claim's status only as Phalanx does and delete only its own DeviceTaintRules, the
in-cluster webhook configurations are static and the operator only sets their caBundle, and no tenant may write
PodGroup status.

No operator runs here: the ServiceAccount is impersonated (`kubectl --as`), or its own kubeconfig drives the
operator's code.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path

import pytest
from conftest import Cluster, wait_for
from kubernetes_asyncio import client, config

from phalanx.api import keys, schema
from phalanx.kinds import HOOKS
from phalanx.kube.client import Forbidden, Kube
from phalanx.owners import webhook_config
from phalanx.scheduling import deallocation, holes
from phalanx.scheduling.record import allocation
from phalanx.scheduling.reserve import Releaser
from phalanx_dev.localcluster import operatorproc

ROOT = Path(__file__).parents[2]
SA = "system:serviceaccount:phalanx-system:phalanx"
SHIPPED = "shipped-role"
"""A ServiceAccount bound to the shipped ClusterRole alone (the local mode adds a role of its own to `phalanx`)."""


@pytest.fixture(scope="module")
def installed(cluster: Cluster) -> Iterator[Cluster]:
    if cluster.local is None:
        pytest.skip("applies the manifests itself and impersonates the ServiceAccount")
    operatorproc.install(cluster.local, ROOT)
    cluster.kubectl("-n", "phalanx-system", "create", "serviceaccount", SHIPPED)
    cluster.kubectl("create", "clusterrolebinding", SHIPPED, "--clusterrole=phalanx", f"--serviceaccount=phalanx-system:{SHIPPED}")
    try:
        yield cluster
    finally:
        cluster.kubectl("delete", "clusterrolebinding", SHIPPED, check=False)
        cluster.kubectl("-n", "phalanx-system", "delete", "serviceaccount", SHIPPED, check=False)


CAN_I = [
    ("patch", "pods", [], True),
    ("patch", "pods", ["--subresource=status"], True),
    ("create", "pods", ["--subresource=eviction"], True),
    ("delete", "pods", [], False),
    ("create", "pods", [], False),
    ("update", "pods", [], False),
    ("get", "pods", [], True),
    ("get", "secrets", [], False),
    ("patch", "jobs.batch", [], False),
    ("watch", "jobsets.jobset.x-k8s.io", [], True),
    ("patch", "jobsets.jobset.x-k8s.io", [], False),
    ("watch", "leaderworkersets.leaderworkerset.x-k8s.io", [], True),
    ("get", "leaderworkersets.leaderworkerset.x-k8s.io", [], True),
    ("patch", "leaderworkersets.leaderworkerset.x-k8s.io", [], False),
    ("patch", "podgroups.scheduling.phalanx.dev", ["--subresource=status"], True),
    ("delete", "devicetaintrules.resource.k8s.io", [], True),
    ("patch", "devicetaintrules.resource.k8s.io", [], False),
    ("delete", "podgroups.scheduling.phalanx.dev", [], False),
    ("create", "mutatingwebhookconfigurations", [], False),
    ("create", "validatingwebhookconfigurations", [], False),
    ("patch", "mutatingwebhookconfigurations/jobs.scheduling.phalanx.dev", [], True),
    ("patch", "validatingwebhookconfigurations/jobs.scheduling.phalanx.dev", [], True),
    ("patch", "mutatingwebhookconfigurations/someone-else", [], False),
    ("delete", "validatingwebhookconfigurations/jobs.scheduling.phalanx.dev", [], False),
    ("patch", "validatingadmissionpolicies/phalanx-operator-pods", [], False),
    ("patch", "clusterroles/phalanx", [], False),
    ("create", "resourceclaims.resource.k8s.io", [], True),
    ("delete", "resourceclaims.resource.k8s.io", [], False),
    ("get", "resourceclaimtemplates.resource.k8s.io", [], True),
    ("list", "resourceclaimtemplates.resource.k8s.io", [], False),
]


@pytest.mark.parametrize(("verb", "resource", "flags", "allowed"), CAN_I, ids=[f"{v}-{r}{''.join(f)}" for v, r, f, _ in CAN_I])
def test_the_shipped_role_grants_exactly_the_operators_verbs(
    installed: Cluster, verb: str, resource: str, flags: list, allowed: bool
) -> None:
    proc = installed.kubectl(
        "auth", "can-i", verb, resource, *flags, "-A", f"--as=system:serviceaccount:phalanx-system:{SHIPPED}", check=False
    )
    assert (proc.returncode == 0) is allowed, f"can-i {verb} {resource} {flags}: {proc.stdout.strip()} {proc.stderr.strip()}"


@pytest.fixture
def gang_pods(installed: Cluster, namespace: str) -> Iterator[list[str]]:
    """Two gated pods of a Job holding Phalanx's gate (and another), and a test-only right for the ServiceAccount
    to read pods in this namespace (`kubectl patch` reads before it writes)."""
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "g"},
        "spec": {
            "parallelism": 2,
            "completions": 2,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "schedulingGates": [{"name": keys.SCHEDULING_GATE}, {"name": "example.com/other"}],
                    "containers": [{"name": "c", "image": "busybox:1.36", "resources": {"requests": {"cpu": "640"}}}],
                }
            },
        },
    }
    installed.kubectl("-n", namespace, "create", "role", "read-pods", "--verb=get", "--resource=pods,pods/status")
    installed.kubectl("-n", namespace, "create", "rolebinding", "read-pods", "--role=read-pods", "--serviceaccount=phalanx-system:phalanx")
    installed.kubectl("-n", namespace, "create", "-f", "-", stdin=json.dumps(job))
    pods = wait_for(
        lambda: (p := installed.get("pods", "-n", namespace)["items"]) and len(p) == 2 and sorted(x["metadata"]["name"] for x in p),
        "the Job's two pods",
    )
    yield pods


def _as_operator(cluster: Cluster, namespace: str, pod: str, patch: dict | list, *, kind: str = "merge", status: bool = False):
    extra = ["--subresource=status"] if status else []
    return cluster.kubectl("--as", SA, "-n", namespace, "patch", "pod", pod, *extra, f"--type={kind}", "-p", json.dumps(patch), check=False)


def _pin(node: str, affinity_node: str | None = None) -> dict:
    term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [affinity_node or node]}]}
    return {
        "metadata": {"annotations": {keys.PINNED_NODE: node}},
        "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}}},
    }


POLICY = "ValidatingAdmissionPolicy 'phalanx-operator-pods' with binding 'phalanx-operator-pods' denied request: "
REFUSED = [
    ({"metadata": {"labels": {"x": "y"}}}, "merge", False, "the Phalanx operator may not change a pod's labels, owners or finalizers"),
    ({"metadata": {"annotations": {"x": "y"}}}, "merge", False, "the Phalanx operator may change no pod annotation but"),
    ({"spec": {"tolerations": [{"key": "a", "operator": "Exists"}]}}, "merge", False, "may change a pod's spec only to pin it"),
    ({"spec": {"schedulingGates": [{"name": keys.SCHEDULING_GATE}]}}, "merge", False, "may remove the scheduling gate"),
    (_pin("worker-1", "worker-2"), "merge", False, "may add to a pod's required node affinity only the node named"),
    ({"status": {"podIP": "10.0.0.9", "podIPs": [{"ip": "10.0.0.9"}]}}, "merge", True, "may add to a pod's status only a Disrupt"),
    ({"status": {"conditions": [{"type": "Ready", "status": "True"}]}}, "strategic", True, "may add to a pod's status only a Disrupt"),
    ({"status": {"phase": "Succeeded"}}, "merge", True, "may set only phase Failed"),
    ({"metadata": {"annotations": {keys.PINNED_NODE: "worker-1"}}}, "merge", True, "may change no pod annotation but"),
]


def test_the_operator_may_change_a_pod_only_as_phalanx_does(installed: Cluster, namespace: str, gang_pods: list[str]) -> None:
    first, second = gang_pods
    for patch, kind, status, message in REFUSED:
        proc = _as_operator(installed, namespace, first, patch, kind=kind, status=status)
        assert proc.returncode != 0, f"{patch} must be refused"
        assert POLICY in proc.stderr and message in proc.stderr.split(POLICY, 1)[1], proc.stderr

    fence = {"metadata": {"annotations": {keys.ROLLED_BACK: "2026-12-01T00:00:00.000000Z"}}}
    assert _as_operator(installed, namespace, first, fence).returncode == 0, "a rollback's mark on a member it leaves gated"
    assert _as_operator(installed, namespace, first, _pin("worker-1")).returncode == 0, "the pin"
    lifted = {"spec": {"schedulingGates": [{"name": "example.com/other"}]}}
    assert _as_operator(installed, namespace, first, lifted).returncode == 0, "the gate lift"
    pod = installed.get("pod", first, "-n", namespace)
    assert pod["metadata"]["annotations"][keys.PINNED_NODE] == "worker-1"
    assert pod["spec"]["schedulingGates"] == [{"name": "example.com/other"}]
    proc = _as_operator(installed, namespace, first, {"metadata": {"annotations": {keys.PINNED_NODE: "worker-3"}}})
    assert proc.returncode != 0 and "may change no pod annotation but" in proc.stderr, "no pin once Phalanx's gate is gone"
    proc = _as_operator(installed, namespace, first, {"metadata": {"annotations": {keys.ROLLED_BACK: "2026-12-02T00:00:00.000000Z"}}})
    assert proc.returncode != 0 and "may change no pod annotation but" in proc.stderr, "no rollback mark once the gate is gone"

    finalizers = "may not change a pod's labels, owners or finalizers, but take batch.kubernetes.io/job-tracking"
    assert installed.get("pod", first, "-n", namespace)["metadata"]["finalizers"] == [keys.JOB_TRACKING]
    other = [{"op": "add", "path": "/metadata/finalizers/-", "value": "example.com/other"}]
    proc = _as_operator(installed, namespace, first, other, kind="json")
    assert proc.returncode != 0 and finalizers in proc.stderr, "no other finalizer"
    uncount = [{"op": "remove", "path": "/metadata/finalizers/0"}]
    assert _as_operator(installed, namespace, first, uncount, kind="json").returncode == 0, "the Job's off a member torn down"
    assert not installed.get("pod", first, "-n", namespace)["metadata"].get("finalizers")
    recount = [{"op": "add", "path": "/metadata/finalizers", "value": [keys.JOB_TRACKING]}]
    assert _as_operator(installed, namespace, first, recount, kind="json").returncode == 0, "back on, the eviction refused"
    assert installed.get("pod", first, "-n", namespace)["metadata"]["finalizers"] == [keys.JOB_TRACKING]

    disruption = {
        "status": {
            "phase": "Failed",
            "reason": "GangTornDown",
            "message": "torn down",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "GangTornDown", "message": "torn down"}],
        }
    }
    proc = _as_operator(installed, namespace, second, disruption, kind="strategic", status=True)
    assert proc.returncode == 0, proc.stderr
    assert installed.get("pod", second, "-n", namespace)["status"]["phase"] == "Failed"
    # The Job controller counts the ended pod and takes the finalizer off itself (racing a removal here, which then
    # fails as a bad patch, not on the policy); putting it back is refused by the same rule as taking it off.
    wait_for(lambda: not installed.get("pod", second, "-n", namespace)["metadata"].get("finalizers"), "the Job counted the ended pod")
    proc = _as_operator(installed, namespace, second, recount, kind="json")
    assert proc.returncode != 0 and finalizers in proc.stderr, "a pod that ended is its Job's to count"
    proc = installed.kubectl("--as", SA, "-n", namespace, "delete", "pod", second, "--wait=false", check=False)
    assert proc.returncode != 0 and "cannot delete resource" in proc.stderr, "evictions only"


def test_the_operator_pins_a_bare_pod_only_when_it_is_labelled_into_a_pod_group(installed: Cluster, namespace: str) -> None:
    """A PodGroup's member may be a pod of no controller: the policy lets Phalanx pin and release it as a Job's pod,
    and still no other bare pod (no webhook runs here, so the pods carry the gate as written)."""

    def bare(name: str, labels: dict) -> dict:
        spec = {"schedulingGates": [{"name": keys.SCHEDULING_GATE}], "containers": [{"name": "c", "image": "busybox:1.36"}]}
        return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}

    installed.kubectl("-n", namespace, "create", "role", "read-pods", "--verb=get", "--resource=pods")
    installed.kubectl("-n", namespace, "create", "rolebinding", "read-pods", "--role=read-pods", "--serviceaccount=phalanx-system:phalanx")
    pods = [bare("member", {keys.POD_GROUP_LABEL: "train"}), bare("stranger", {})]
    installed.kubectl("-n", namespace, "create", "-f", "-", stdin=json.dumps({"apiVersion": "v1", "kind": "List", "items": pods}))
    proc = _as_operator(installed, namespace, "stranger", _pin("worker-1"))
    assert proc.returncode != 0 and "may change no pod annotation but" in proc.stderr, proc.stderr
    assert _as_operator(installed, namespace, "member", _pin("worker-1")).returncode == 0, "the pin"
    assert _as_operator(installed, namespace, "member", {"spec": {"schedulingGates": None}}).returncode == 0, "the gate lift"
    assert not installed.get("pod", "member", "-n", namespace)["spec"].get("schedulingGates")


def test_a_tenant_cannot_write_pod_group_status(installed: Cluster, namespace: str) -> None:
    pod_group = {
        "apiVersion": keys.API_VERSION,
        "kind": "PodGroup",
        "metadata": {"name": "pg"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "disruptionMode": {"all": {}}},
    }
    installed.kubectl("-n", namespace, "create", "-f", "-", stdin=json.dumps(pod_group))
    installed.kubectl("-n", namespace, "create", "rolebinding", "alice-edit", "--clusterrole=edit", "--user=alice")
    assert installed.kubectl("auth", "can-i", "create", "jobs.batch", "-n", namespace, "--as=alice", check=False).returncode == 0
    for verb in ("create", "delete"):  # a PodGroup of their own (aggregated into edit), never its status
        proc = installed.kubectl("auth", "can-i", verb, "podgroups.scheduling.phalanx.dev", "-n", namespace, "--as=alice", check=False)
        assert proc.returncode == 0, f"{verb}: {proc.stdout}"
    installed.kubectl("-n", namespace, "create", "rolebinding", "bob-view", "--clusterrole=view", "--user=bob")
    seen = installed.kubectl("--as=bob", "-n", namespace, "get", "podgroups.scheduling.phalanx.dev,workloads.scheduling.phalanx.dev")
    assert "pg" in seen.stdout, seen.stdout
    can = installed.kubectl(
        "auth", "can-i", "patch", "podgroups.scheduling.phalanx.dev", "--subresource=status", "-n", namespace, "--as=alice", check=False
    )
    assert can.returncode != 0, can.stdout
    reservation = {"status": {"reservation": {"state": "Released", "placements": [{"name": "x", "uid": "forged", "node": "worker-1"}]}}}
    proc = installed.kubectl(
        "--as=alice",
        "-n",
        namespace,
        "patch",
        "podgroups.scheduling.phalanx.dev",
        "pg",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps(reservation),
        check=False,
    )
    assert proc.returncode != 0 and "forbidden" in proc.stderr.lower(), proc.stderr
    assert not (installed.get("podgroups.scheduling.phalanx.dev", "pg", "-n", namespace).get("status") or {}).get("reservation")


async def _as(kubeconfig: Path, act: Callable[[Kube], Awaitable[None]]) -> None:
    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    async with client.ApiClient(configuration) as api:
        await act(Kube(api))


def _widen(kube: Kube) -> Awaitable[None]:
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{webhook_config.CONFIGURATION_NAME}"
    return kube.json_patch(path, [{"op": "replace", "path": "/webhooks/0/rules/0/resources", "value": ["pods"]}])


def test_in_cluster_the_operator_only_sets_the_ca_bundle(installed: Cluster) -> None:
    """The configurations from manifests/webhooks.yaml, then the operator's own start-up code as the ServiceAccount
    bound to the shipped role alone (no create, no read): only each caBundle changes. The operator's `patch` right
    cannot widen them: the policy `phalanx-operator-webhooks` refuses any other change."""
    kinds = ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    for kind in kinds:
        installed.kubectl("delete", kind, webhook_config.CONFIGURATION_NAME, "--ignore-not-found")
    try:
        installed.kubectl("apply", "-f", str(ROOT / "manifests" / "webhooks.yaml"))
        before = {kind: installed.get(kind, webhook_config.CONFIGURATION_NAME)["webhooks"] for kind in kinds}
        ca = b"-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
        kubeconfig = installed.local.service_account_kubeconfig("phalanx-system", SHIPPED)
        asyncio.run(_as(kubeconfig, lambda kube: webhook_config.publish(kube, webhook_config.IN_CLUSTER, ca, "phalanx-system", HOOKS)))
        for kind in kinds:
            hooks = installed.get(kind, webhook_config.CONFIGURATION_NAME)["webhooks"]
            assert len(hooks) == len(before[kind])
            for hook, was in zip(hooks, before[kind], strict=True):
                assert base64.b64decode(hook["clientConfig"].pop("caBundle")) == ca
                assert hook == was, "nothing but the caBundle changed"
        operator = installed.local.service_account_kubeconfig("phalanx-system", "phalanx")
        with pytest.raises(Forbidden, match="may set the caBundle of its webhook configurations and change nothing else"):
            asyncio.run(_as(operator, _widen))
        rules = installed.get("mutatingwebhookconfigurations", webhook_config.CONFIGURATION_NAME)["webhooks"][0]["rules"]
        assert rules == before["mutatingwebhookconfigurations"][0]["rules"]
    finally:
        for kind in kinds:  # the next module's local operator writes its own
            installed.kubectl("delete", kind, webhook_config.CONFIGURATION_NAME, "--ignore-not-found")


def _as_sa(cluster: Cluster, *args: str, stdin: str | None = None):
    return cluster.kubectl("--as", SA, *args, stdin=stdin, check=False)


def _refused(proc, policy: str, message: str) -> None:
    denied = f"ValidatingAdmissionPolicy '{policy}' with binding '{policy}' denied request: "
    assert proc.returncode != 0, "must be refused"
    assert denied in proc.stderr and message in proc.stderr.split(denied, 1)[1], proc.stderr


DEVICE = ("gpu.example.com", "nowhere", "gpu-9")
"""A device no node has: the rules and the allocation below keep nothing from the rest of the suite."""
TAINTS = "phalanx-operator-device-taint-rules"
MAINTENANCE = "maintenance-rack-1"


@pytest.fixture
def maintenance(installed: Cluster) -> Iterator[str]:
    """An admin's own rule: NoExecute, a whole pool of a driver no node has (so it evicts nothing here); afterwards
    every rule and grant the test made is gone."""
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": MAINTENANCE},
        "spec": {
            "deviceSelector": {"driver": "maintenance.example.com", "pool": "rack-1"},
            "taint": {"key": "example.com/maintenance", "effect": "NoExecute"},
        },
    }
    installed.kubectl("create", "-f", "-", stdin=json.dumps(rule))
    try:
        yield MAINTENANCE
    finally:
        installed.kubectl("delete", "devicetaintrule", MAINTENANCE, "--ignore-not-found")
        for purpose in (holes.HELD, holes.NOMINATED):
            installed.kubectl("delete", "devicetaintrule", holes.rule_name(DEVICE, purpose), "--ignore-not-found")
        installed.kubectl("delete", "clusterrolebinding,clusterrole", "test-patch-rules", "--ignore-not-found")


def _rule(**changes: dict) -> str:
    """holes.rule(DEVICE) as Phalanx makes it, with `changes` merged into metadata and spec."""
    rule = holes.rule(DEVICE)
    for part, fields in changes.items():
        rule[part] = {**rule[part], **fields}
    return json.dumps(rule)


def test_the_operator_deletes_and_makes_only_its_own_device_taint_rules(installed: Cluster, maintenance: str) -> None:
    """Its own code (holes.Holes, both purposes) as its ServiceAccount makes and deletes its rules; an admin's rule
    cannot be deleted, and no rule but Phalanx's shape (labelled, one device, NoSchedule scheduling.phalanx.dev/held)
    can be made."""
    operator = installed.local.service_account_kubeconfig("phalanx-system", "phalanx")
    for purpose in (holes.HELD, holes.NOMINATED):
        asyncio.run(_as(operator, lambda kube, purpose=purpose: holes.Holes(kube, purpose).cover([DEVICE], "a test")))
        made = installed.get("devicetaintrule", holes.rule_name(DEVICE, purpose))
        assert made["metadata"]["labels"][keys.MANAGED_BY_LABEL] == keys.MANAGER_NAME
        asyncio.run(_as(operator, lambda kube, purpose=purpose: holes.Holes(kube, purpose).uncover([DEVICE])))
        gone = installed.kubectl("get", "devicetaintrule", holes.rule_name(DEVICE, purpose), check=False)
        assert gone.returncode != 0 and "NotFound" in gone.stderr, "its own rule is deleted"

    _refused(
        _as_sa(installed, "delete", "devicetaintrule", maintenance),
        TAINTS,
        f"may delete or change only the DeviceTaintRules it made (labelled app.kubernetes.io/managed-by: phalanx); {maintenance} is not",
    )
    assert installed.get("devicetaintrule", maintenance)["spec"]["taint"]["effect"] == "NoExecute", "the admin's rule stays"

    unlabelled = _rule(metadata={"labels": {keys.TAINT_PURPOSE_LABEL: holes.HELD}})
    _refused(_as_sa(installed, "create", "-f", "-", stdin=unlabelled), TAINTS, "makes only its own DeviceTaintRules")
    wider = "keep one named device (driver, pool and device) from kube-scheduler: a NoSchedule taint scheduling.phalanx.dev/held"
    no_execute = _rule(spec={"taint": {"key": keys.HELD_TAINT, "value": holes.HELD, "effect": "NoExecute"}})
    _refused(_as_sa(installed, "create", "-f", "-", stdin=no_execute), TAINTS, wider)
    whole_driver = _rule(spec={"deviceSelector": {"driver": DEVICE[0]}})
    _refused(_as_sa(installed, "create", "-f", "-", stdin=whole_driver), TAINTS, wider)
    other_key = _rule(spec={"taint": {"key": "example.com/maintenance", "effect": "NoSchedule"}})
    _refused(_as_sa(installed, "create", "-f", "-", stdin=other_key), TAINTS, wider)

    # RBAC grants no update or patch; should it ever, the policy holds: a test-only grant shows it
    installed.kubectl("create", "clusterrole", "test-patch-rules", "--verb=get,patch", "--resource=devicetaintrules.resource.k8s.io")
    installed.kubectl(
        "create", "clusterrolebinding", "test-patch-rules", "--clusterrole=test-patch-rules", f"--serviceaccount={SA.split(':', 2)[2]}"
    )
    patch = json.dumps({"spec": {"taint": {"effect": "None"}}})
    _refused(
        _as_sa(installed, "patch", "devicetaintrule", maintenance, "--type=merge", "-p", patch), TAINTS, f"{maintenance} is not one of them"
    )
    own = holes.rule_name(DEVICE)
    assert _as_sa(installed, "create", "-f", "-", stdin=_rule()).returncode == 0, "exactly holes.rule()"
    _refused(_as_sa(installed, "label", "devicetaintrule", own, f"{keys.MANAGED_BY_LABEL}-"), TAINTS, "makes only its own")
    escalate = json.dumps({"spec": {"taint": {"effect": "NoExecute"}}})
    _refused(_as_sa(installed, "patch", "devicetaintrule", own, "--type=merge", "-p", escalate), TAINTS, wider)
    assert _as_sa(installed, "delete", "devicetaintrule", own).returncode == 0


CLAIMS = "phalanx-operator-claims"


def test_the_operator_writes_a_claims_status_only_as_phalanx_does(installed: Cluster, namespace: str, gang_pods: list[str]) -> None:
    """Its own code (reserve.Releaser) as its ServiceAccount allocates a claim for a gang's pod and undoes it; any
    other status write is refused: reservedFor changed without the allocation, a consumer that is no pod, a change
    to status.devices (the driver's)."""
    first, second = gang_pods
    uid = {p["metadata"]["name"]: p["metadata"]["uid"] for p in installed.get("pods", "-n", namespace)["items"]}
    users = {name: {"resource": "pods", "name": name, "uid": uid[name]} for name in gang_pods}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}},
    }
    installed.kubectl("-n", namespace, "create", "-f", "-", stdin=json.dumps(claim))
    # test-only: `kubectl patch --subresource=status` reads the status first; the operator never does
    installed.kubectl("-n", namespace, "create", "role", "read-claims", "--verb=get", "--resource=resourceclaims/status")
    installed.kubectl(
        "-n", namespace, "create", "rolebinding", "read-claims", "--role=read-claims", f"--serviceaccount={SA.split(':', 2)[2]}"
    )
    created = installed.get("resourceclaim", "gpu", "-n", namespace)
    driver, pool, device = DEVICE
    reservation = schema.ClaimReservation(
        name="gpu",
        uid=created["metadata"]["uid"],
        node="worker-1",
        results=[schema.DeviceResult(request="gpu", driver=driver, pool=pool, device=device)],
    )

    def status(body: dict):
        return _as_sa(
            installed, "-n", namespace, "patch", "resourceclaim", "gpu", "--subresource=status", "--type=merge", "-p", json.dumps(body)
        )

    widget = {"apiGroup": "example.com", "resource": "widgets", "name": "w", "uid": "w-1"}
    _refused(status({"status": {"allocation": allocation(reservation), "reservedFor": [widget]}}), CLAIMS, "reserves a claim only for pods")

    operator = installed.local.service_account_kubeconfig("phalanx-system", "phalanx")

    def releaser(kube: Kube) -> Releaser:
        return Releaser(kube, None, None)  # type: ignore[arg-type]  # the two claim writes use only its Kube

    asyncio.run(_as(operator, lambda kube: releaser(kube)._write_claim(namespace, reservation, [users[first]], created)))
    written = installed.get("resourceclaim", "gpu", "-n", namespace)
    assert [(r["driver"], r["pool"], r["device"]) for r in written["status"]["allocation"]["devices"]["results"]] == [DEVICE]
    assert written["status"]["allocation"]["allocationTimestamp"]
    assert written["status"]["reservedFor"] == [users[first]]
    assert keys.DELETE_PROTECTION in written["metadata"]["finalizers"]

    alone = "may write a claim's reservedFor only together with its allocation"
    _refused(status({"status": {"reservedFor": [users[first], users[second]]}}), CLAIMS, alone)
    _refused(status({"status": {"reservedFor": None}}), CLAIMS, alone)

    # the driver's status of its device (admin stands in for the driver); the API server refuses any change to it
    # without `resourceclaims/driver` rights (DRAResourceClaimGranularStatusAuthorization), a test-only grant shows
    # that the policy refuses it too
    driver_status = {"driver": driver, "pool": pool, "device": device, "data": {"healthy": True}}
    installed.kubectl(
        "-n",
        namespace,
        "patch",
        "resourceclaim",
        "gpu",
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": {"devices": [driver_status]}}),
    )
    grant = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "test-claim-driver"},
        "rules": [
            {
                "apiGroups": ["resource.k8s.io"],
                "resources": ["resourceclaims/driver"],
                "resourceNames": [driver],
                "verbs": ["arbitrary-node:patch"],
            }
        ],
    }
    installed.kubectl("apply", "-f", "-", stdin=json.dumps(grant))
    try:
        installed.kubectl(
            "create",
            "clusterrolebinding",
            "test-claim-driver",
            "--clusterrole=test-claim-driver",
            f"--serviceaccount={SA.split(':', 2)[2]}",
        )
        forged = {**driver_status, "data": {"healthy": False}}
        _refused(status({"status": {"devices": [forged]}}), CLAIMS, "may not change a claim's status.devices")
    finally:
        installed.kubectl("delete", "clusterrolebinding,clusterrole", "test-claim-driver", "--ignore-not-found")

    asyncio.run(_as(operator, lambda kube: deallocation.undo(kube, namespace, [reservation])))
    undone = installed.get("resourceclaim", "gpu", "-n", namespace).get("status") or {}
    assert not undone.get("allocation") and not undone.get("reservedFor"), undone
    assert not undone.get("devices"), "the API server drops the status of deallocated devices itself"
