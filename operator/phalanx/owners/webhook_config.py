"""The webhook configurations that put Phalanx in the path of admission, assembled from the hooks each kind asks for
(`jobs.webhook_rules`, `jobsets.webhook_rules`, `podgroups.webhook_rules`; `kinds.HOOKS` lists them all).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from phalanx.api.keys import ANNOTATION_PREFIX, GROUP, POD_GROUP_LABEL
from phalanx.kube.client import Invalid, Kube, NotFound

CONFIGURATION_NAME = f"jobs.{GROUP}"


@dataclass(frozen=True)
class Hook:
    """One admission webhook a kind asks for: what it is sent, and which Kopf handler (by id) answers it."""

    name: str
    """Its entry in the configuration, before `.scheduling.phalanx.dev`."""
    handler_id: str
    """The id of the Kopf handler that serves it: the path it is reached at."""
    rule: Mapping[str, Any]
    mutating: bool
    condition: tuple[str, str] | None = None
    """A CEL matchCondition (name, expression): only what it admits is sent."""
    labelled: bool = False
    """Only objects that carry `label` (an objectSelector on the label alone)."""
    label: str = POD_GROUP_LABEL
    """The label `labelled` asks for: the pod-group label, or a kind's own (a LeaderWorkerSet's name)."""
    reinvoked: bool = False
    """Called again when a later webhook changed the object (reinvocationPolicy IfNeeded)."""


def rule(group: str, version: str, resource: str, *operations: str) -> dict[str, Any]:
    return {"apiGroups": [group], "apiVersions": [version], "resources": [resource], "operations": list(operations)}


def gang_annotations(obj: str) -> str:
    """CEL: the object's `scheduling.phalanx.dev/*` annotations as a list of key=value strings."""
    return (
        f"(has({obj}.metadata.annotations) ? {obj}.metadata.annotations.filter(k, k.startsWith('{ANNOTATION_PREFIX}'))"
        f".map(k, k + '=' + {obj}.metadata.annotations[k]) : [])"
    )


NEW, OLD = gang_annotations("object"), gang_annotations("oldObject")
ANNOTATIONS_CHANGED = f"!({NEW}.all(a, a in {OLD}) && {OLD}.all(a, a in {NEW}))"
"""CEL: an update that adds, removes or changes a `scheduling.phalanx.dev/*` annotation."""


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


def configurations(endpoint: Endpoint, ca_pem: bytes | None, operator_namespace: str, hooks: Sequence[Hook]) -> dict[str, dict[str, Any]]:
    """Kind -> configuration object, ready to create or patch (without a caBundle: the one `manifests/` ships); the
    webhooks in the order `hooks` gives them."""

    def webhook(hook: Hook) -> dict[str, Any]:
        condition = hook.condition
        scope: dict[str, Any] = {"matchConditions": [{"name": condition[0], "expression": condition[1]}]} if condition else {}
        if hook.labelled:
            scope["objectSelector"] = {"matchExpressions": [{"key": hook.label, "operator": "Exists"}]}
        return {
            "name": f"{hook.name}.{GROUP}",
            "clientConfig": endpoint.client_config(hook.handler_id, ca_pem),
            "rules": [{**copy.deepcopy(dict(hook.rule)), "scope": "Namespaced"}],
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
    return {
        "MutatingWebhookConfiguration": {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": [webhook(h) | ({"reinvocationPolicy": "IfNeeded"} if h.reinvoked else {}) for h in hooks if h.mutating],
        },
        "ValidatingWebhookConfiguration": {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingWebhookConfiguration",
            "metadata": metadata,
            "webhooks": [webhook(h) for h in hooks if not h.mutating],
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
# each kind's webhook_rules.py (`./task webhooks`; a unit test fails on drift).
"""


def manifest(hooks: Sequence[Hook]) -> str:
    """`manifests/webhooks.yaml`."""
    docs = list(configurations(IN_CLUSTER, None, IN_CLUSTER.service_namespace or "", hooks).values())
    return _MANIFEST_HEADER + yaml.safe_dump_all(docs, sort_keys=False, width=1000)


def ca_bundle_patch(configuration: dict[str, Any], ca_pem: bytes) -> list[dict[str, Any]]:
    """A JSON patch that sets each webhook's caBundle and nothing else, refused if the webhooks are not the ones expected."""
    patch: list[dict[str, Any]] = []
    for i, hook in enumerate(configuration["webhooks"]):
        patch.append({"op": "test", "path": f"/webhooks/{i}/name", "value": hook["name"]})
        patch.append({"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": base64.b64encode(ca_pem).decode()})
    return patch


async def publish(kube: Kube, endpoint: Endpoint, ca_pem: bytes, operator_namespace: str, hooks: Sequence[Hook]) -> None:
    """Put the webhooks in the path of Job admission.

    In a cluster the configurations are static (installed from `manifests/`);
    the operator only sets their caBundle, by name, so it needs no right to
    create or rewrite admission configuration. The local mode (URL webhooks on
    loopback, a port chosen per run) writes whole configurations of its own.
    """
    for kind, body in configurations(endpoint, ca_pem, operator_namespace, hooks).items():
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
