"""The webhook configurations that put Phalanx in the path of Job admission.

Kopf serves the webhooks, but its managed configurations only know `url`
client configs and cannot scope by namespace or by content. Phalanx builds its
own (shipped static in `manifests/webhooks.yaml` for a cluster, written by the
operator in the local mode), so that the blast radius is as small as the API allows:

* only `batch/v1` Jobs and `jobset.x-k8s.io/v1alpha2` JobSets, CREATE and
  UPDATE (never status), the CREATE of a
  gang member that uses a group claim (gated, with Phalanx's resource-claims
  annotation), and the CREATE of a pod labelled into a PodGroup (an
  objectSelector on that label alone): no other pod waits for Phalanx;
  and a user's PodGroup whose `scheduling.phalanx.dev/*` annotations are
  set or changed (never one Phalanx made);
* a CEL `matchCondition` sends only gang Jobs being created and updates that
  change gang settings (annotations, `spec.scheduling`, a gang's parallelism);
  any other request, including deleting a gang Job, never waits for Phalanx,
  even when Phalanx is down;
* `kube-system` and the operator's own namespace are excluded, so the
  operator can always be repaired;
* `failurePolicy: Fail` for the Jobs that remain: a gang Job admitted without
  its gate would run pod by pod, which is the failure Phalanx exists to prevent.

Who writes them is a seam: in cluster (a Service) the operator writes them at
start-up and they stay; run outside the cluster (a URL, the local control
plane) `SelfManaged` writes them only once the server serves and deletes them
on a clean shutdown (see its docstring for the trade-off).
"""

from __future__ import annotations

import base64
import contextlib
import copy
from dataclasses import dataclass
from typing import Any

import yaml

from phalanx.api.keys import ANNOTATION_PREFIX, GROUP, JOB_NAME_LABEL, POD_GROUP_LABEL, RESOURCE_CLAIMS, SCHEDULING_GATE, VERSION
from phalanx.kube.client import Invalid, Kube, NotFound

MUTATE_ID = "job-gang-mutate"
VALIDATE_ID = "job-gang-validate"
POD_MUTATE_ID = "pod-group-claims"
POD_GROUP_MUTATE_ID = "pod-group-member"
JOBSET_MUTATE_ID = "jobset-gang-mutate"
JOBSET_VALIDATE_ID = "jobset-gang-validate"
POD_GROUP_VALIDATE_ID = "podgroup-validate"
CONFIGURATION_NAME = f"jobs.{GROUP}"


def _gang_annotations(obj: str) -> str:
    """CEL: the object's `scheduling.phalanx.dev/*` annotations as a list of key=value strings."""
    return (
        f"(has({obj}.metadata.annotations) ? {obj}.metadata.annotations.filter(k, k.startsWith('{ANNOTATION_PREFIX}'))"
        f".map(k, k + '=' + {obj}.metadata.annotations[k]) : [])"
    )


def _parallelism(obj: str) -> str:
    return f"(has({obj}.spec.parallelism) ? {obj}.spec.parallelism : 1)"


def _completions(obj: str) -> str:
    return f"(has({obj}.spec.completions) ? {obj}.spec.completions : -1)"


def _gated(obj: str) -> str:
    return (
        f"(has({obj}.spec.template.spec.schedulingGates) && "
        f"{obj}.spec.template.spec.schedulingGates.exists(g, g.name == '{SCHEDULING_GATE}'))"
    )


_NEW, _OLD = _gang_annotations("object"), _gang_annotations("oldObject")
MATCH_CONDITION = (
    "request.operation == 'CREATE' ? "
    f"(size({_NEW}) > 0 || has(object.spec.scheduling)) : "
    "(!has(object.metadata.deletionTimestamp) && ("
    f"!({_NEW}.all(a, a in {_OLD}) && {_OLD}.all(a, a in {_NEW})) || "
    f"(size({_OLD}) > 0 && ({_parallelism('object')} != {_parallelism('oldObject')} || "
    f"{_completions('object')} != {_completions('oldObject')} || {_gated('object')} != {_gated('oldObject')})) || "
    "has(object.spec.scheduling) != has(oldObject.spec.scheduling) || "
    "(has(object.spec.scheduling) && object.spec.scheduling != oldObject.spec.scheduling)))"
)
"""Only gang Jobs being created, and updates that touch gang settings, the size of a gang
Job or its template's gate, reach the webhooks. Anything else, including the garbage
collector removing finalizers from a Job being deleted, never waits for Phalanx."""

POD_MATCH_CONDITION = (
    f"has(object.metadata.annotations) && '{RESOURCE_CLAIMS}' in object.metadata.annotations && "
    f"has(object.spec.schedulingGates) && object.spec.schedulingGates.exists(g, g.name == '{SCHEDULING_GATE}')"
)
"""Only a gated pod made from a gang Job's template that shares group claims reaches the pod webhook."""


def _jobset_gated(obj: str) -> str:
    return (
        f"(has({obj}.spec.replicatedJobs) && {obj}.spec.replicatedJobs.all(r, has(r.template.spec.template.spec.schedulingGates) && "
        f"r.template.spec.template.spec.schedulingGates.exists(g, g.name == '{SCHEDULING_GATE}')))"
    )


JOBSET_MATCH_CONDITION = (
    f"request.operation == 'CREATE' ? size({_NEW}) > 0 : "
    "(!has(object.metadata.deletionTimestamp) && ("
    f"!({_NEW}.all(a, a in {_OLD}) && {_OLD}.all(a, a in {_NEW})) || "
    f"(size({_OLD}) > 0 && {_jobset_gated('object')} != {_jobset_gated('oldObject')})))"
)
"""Gang JobSets being created, and updates that touch their gang settings or their templates' gate."""


POD_GROUP_MATCH_CONDITION = (
    f"!(has(object.metadata.labels) && '{JOB_NAME_LABEL}' in object.metadata.labels) && "
    f"(request.operation == 'CREATE' ? size({_NEW}) > 0 : !({_NEW}.all(a, a in {_OLD}) && {_OLD}.all(a, a in {_NEW})))"
)
"""A user's PodGroup created with `scheduling.phalanx.dev/*` annotations, or updated to change them; the groups
Phalanx makes for Jobs and JobSets (their annotations copied from an owner already checked) never wait for it."""

_JOBS = {"apiGroups": ["batch"], "apiVersions": ["v1"], "resources": ["jobs"], "operations": ["CREATE", "UPDATE"]}
_JOBSETS = {"apiGroups": ["jobset.x-k8s.io"], "apiVersions": ["v1alpha2"], "resources": ["jobsets"], "operations": ["CREATE", "UPDATE"]}
_POD_CREATE = {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["pods"], "operations": ["CREATE"]}
_POD_GROUPS = {"apiGroups": [GROUP], "apiVersions": [VERSION], "resources": ["podgroups"], "operations": ["CREATE", "UPDATE"]}


@dataclass(frozen=True)
class Endpoint:
    """Where the API server reaches the webhook server: a URL (local) or a Service (in cluster)."""

    url: str | None = None
    service_namespace: str | None = None
    service_name: str | None = None
    service_port: int = 443

    @property
    def local(self) -> bool:
        return self.url is not None

    def client_config(self, handler_id: str, ca_pem: bytes | None) -> dict[str, Any]:
        config: dict[str, Any] = {"caBundle": base64.b64encode(ca_pem).decode()} if ca_pem is not None else {}
        if self.url is not None:
            config["url"] = f"{self.url.rstrip('/')}/{handler_id}"
        else:
            config["service"] = {
                "namespace": self.service_namespace,
                "name": self.service_name,
                "port": self.service_port,
                "path": f"/{handler_id}",
            }
        return config


def configurations(endpoint: Endpoint, ca_pem: bytes | None, operator_namespace: str) -> dict[str, dict[str, Any]]:
    """Kind -> configuration object, ready to create or patch (without a caBundle: the one `manifests/` ships)."""

    def webhook(
        name: str, handler_id: str, rule: dict[str, Any], condition: tuple[str, str] | None, labelled: bool = False
    ) -> dict[str, Any]:
        scope: dict[str, Any] = {"matchConditions": [{"name": condition[0], "expression": condition[1]}]} if condition else {}
        if labelled:
            scope["objectSelector"] = {"matchExpressions": [{"key": POD_GROUP_LABEL, "operator": "Exists"}]}
        return {
            "name": f"{name}.{GROUP}",
            "clientConfig": endpoint.client_config(handler_id, ca_pem),
            "rules": [{**copy.deepcopy(rule), "scope": "Namespaced"}],
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "NotIn",
                        "values": sorted({"kube-system", operator_namespace}),
                    }
                ]
            },
            **scope,
            "failurePolicy": "Fail",
            "sideEffects": "None",
            "timeoutSeconds": 10,
            "admissionReviewVersions": ["v1"],
        }

    metadata = {"name": CONFIGURATION_NAME, "labels": {"app.kubernetes.io/name": "phalanx"}}
    gang_jobs = ("gang-settings", MATCH_CONDITION)
    gang_jobsets = ("gang-settings", JOBSET_MATCH_CONDITION)
    mutating = webhook("jobs-mutate", MUTATE_ID, _JOBS, gang_jobs)
    mutating["reinvocationPolicy"] = "IfNeeded"
    jobsets = webhook("jobsets-mutate", JOBSET_MUTATE_ID, _JOBSETS, gang_jobsets)
    jobsets["reinvocationPolicy"] = "IfNeeded"
    return {
        "MutatingWebhookConfiguration": {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": [
                mutating,
                webhook("pods-group-claims", POD_MUTATE_ID, _POD_CREATE, ("group-claims", POD_MATCH_CONDITION)),
                jobsets,
                webhook("pods-group-member", POD_GROUP_MUTATE_ID, _POD_CREATE, None, labelled=True),
            ],
        },
        "ValidatingWebhookConfiguration": {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": [
                webhook("jobs-validate", VALIDATE_ID, _JOBS, gang_jobs),
                webhook("jobsets-validate", JOBSET_VALIDATE_ID, _JOBSETS, gang_jobsets),
                webhook("podgroups-validate", POD_GROUP_VALIDATE_ID, _POD_GROUPS, ("phalanx-annotations", POD_GROUP_MATCH_CONDITION)),
            ],
        },
    }


class SelfManaged:
    """Local (URL) mode: the operator owns its configurations' whole lifetime.

    It writes them only once its webhook server serves, and deletes them on a
    clean shutdown, so a stopped operator never leaves the API server calling a
    dead port ("connection refused") for every gang Job. The trade-off against
    `failurePolicy: Fail`: while no operator runs, gang Jobs are admitted
    without their gate (they run pod by pod, as on a cluster without Phalanx,
    and get a GangNotEnforced event once an operator is back) instead of being
    refused. A crashed operator (SIGKILL) removes nothing: its configurations
    keep refusing gang Jobs until it is started again or they are deleted.
    In-cluster mode (a Service) keeps `Fail` semantics and never withdraws.
    """

    def __init__(self, kube: Kube) -> None:
        self.kube = kube
        self.bodies: dict[str, dict[str, Any]] = {}
        self.published = False

    async def update(self, bodies: dict[str, dict[str, Any]]) -> None:
        """New configurations (a new CA bundle): written at once if already published, else once serving."""
        self.bodies = bodies
        if self.published:
            await self.publish()

    async def publish(self) -> None:
        for kind, body in self.bodies.items():
            await self.kube.apply_webhook_configuration(kind, body)
        self.published = True

    async def withdraw(self) -> None:
        for kind, body in self.bodies.items():
            with contextlib.suppress(NotFound):
                await self.kube.delete(f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{body['metadata']['name']}")
        self.published = False


IN_CLUSTER = Endpoint(service_namespace="phalanx-system", service_name="phalanx-webhook")
"""The Service `manifests/` deploys."""

_MANIFEST_HEADER = """\
# The webhook configurations for the in-cluster deployment: static, so the
# operator needs no right to create or rewrite admission configuration; it
# only sets each webhook's caBundle at start-up. Generated from
# operator/phalanx/jobs/webhook_config.py (`./task webhooks`; a unit test fails on drift).
"""


def manifest() -> str:
    """`manifests/webhooks.yaml`."""
    docs = list(configurations(IN_CLUSTER, None, IN_CLUSTER.service_namespace or "").values())
    return _MANIFEST_HEADER + yaml.safe_dump_all(docs, sort_keys=False, width=1000)


def ca_bundle_patch(configuration: dict[str, Any], ca_pem: bytes) -> list[dict[str, Any]]:
    """A JSON patch that sets each webhook's caBundle and nothing else, refused if the webhooks are not the ones expected."""
    patch: list[dict[str, Any]] = []
    for i, hook in enumerate(configuration["webhooks"]):
        patch.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
        patch.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": base64.b64encode(ca_pem).decode()})
    return patch


async def publish(kube: Kube, endpoint: Endpoint, ca_pem: bytes, operator_namespace: str) -> None:
    """Put the webhooks in the path of Job admission.

    In a cluster the configurations are static (installed from `manifests/`);
    the operator only sets their caBundle, by name, so it needs no right to
    create or rewrite admission configuration. The local mode (URL webhooks on
    loopback, a port chosen per run) writes whole configurations of its own.
    """
    for kind, body in configurations(endpoint, ca_pem, operator_namespace).items():
        if endpoint.local:
            await kube.apply_webhook_configuration(kind, body)
        else:
            name = body["metadata"]["name"]
            try:
                await kube.json_patch(f"/apis/admissionregistration.k8s.io/v1/{kind.lower()}s/{name}", ca_bundle_patch(body, ca_pem))
            except NotFound:
                raise RuntimeError(f"{kind} {name} is not installed: apply manifests/ (kubectl apply -k manifests/)") from None
            except Invalid as exc:
                raise RuntimeError(
                    f"{kind} {name} does not hold the webhooks this operator serves ({exc}): apply manifests/webhooks.yaml of this version"
                ) from None


if __name__ == "__main__":
    print(manifest(), end="")
