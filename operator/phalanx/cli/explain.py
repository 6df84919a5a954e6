"""`phalanx explain JOB` (and `kubectl phalanx explain JOB`): read the cluster once, then say why the gang is where it is.

The reads are one list of each kind the operator watches, made with the
user's kubeconfig (the user's own permissions, not the operator's); the
analysis is `scheduling.explanation`, pure, on the operator's own inputs and
planner.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import sys

import aiohttp
from kubernetes_asyncio import client, config
from kubernetes_asyncio.config.config_exception import ConfigException

from phalanx.api import times
from phalanx.api.keys import GROUP, VERSION
from phalanx.kinds import KINDS
from phalanx.kube.client import ApiError, Kube, NotFound
from phalanx.owners import seam
from phalanx.scheduling import composites, explain_lookup, explain_text, explain_view, explanation

PATHS = {
    "nodes": "/api/v1/nodes",
    "pods": "/api/v1/pods",
    "slices": "/apis/resource.k8s.io/v1/resourceslices",
    "claims": "/apis/resource.k8s.io/v1/resourceclaims",
    "classes": "/apis/resource.k8s.io/v1/deviceclasses",
    "priorities": "/apis/scheduling.k8s.io/v1/priorityclasses",
    "podgroups": f"/apis/{GROUP}/{VERSION}/podgroups",
    "composites": f"/apis/{GROUP}/{VERSION}/compositepodgroups",
    "budgets": "/apis/policy/v1/poddisruptionbudgets",
    "taint_rules": "/apis/resource.k8s.io/v1/devicetaintrules",
}


async def _list(kube: Kube, kind: str) -> dict:
    """DeviceTaintRules are optional (a cluster before 1.36 may not serve them): none served means none apply."""
    try:
        return await kube.request("GET", PATHS[kind])
    except NotFound:
        if kind == "taint_rules":
            return {}
        raise


async def read(kube: Kube, namespace: str) -> explain_view.Objects:
    """One list of each kind the planner reads (cluster-wide: other namespaces' pods take room too), and the namespace's
    Events and Jobs (a torn-down gang's Job says whether its back-off holds the new pods)."""
    kinds = list(PATHS)
    bodies = await asyncio.gather(*(_list(kube, k) for k in kinds))
    events = await kube.request("GET", f"/api/v1/namespaces/{namespace}/events")
    owners = await seam.list_owners(kube, KINDS, namespace)
    lists = {k: tuple(b.get("items") or ()) for k, b in zip(kinds, bodies, strict=True)}
    # the loop's groups, as the loop sees them: a gang CompositePodGroup stands for its roles (`scheduling.composites`)
    lists["podgroups"] = tuple(composites.groups(lists["podgroups"], lists.pop("composites")))
    return explain_view.Objects(**lists, events=tuple(events.get("items") or ()), owners=tuple(owners))


async def _explain(namespace: str | None, job: str, context: str | None) -> explain_view.Explanation:
    configuration = client.Configuration()
    loader = await config.load_kube_config(client_configuration=configuration, context=context, persist_config=False)
    namespace = namespace or (loader.current_context or {}).get("context", {}).get("namespace") or "default"
    async with client.ApiClient(configuration) as api:
        objects = await read(Kube(api), namespace)
    pod_group, *rest = explain_lookup.find_pod_groups(objects, namespace, job, KINDS)
    return dataclasses.replace(explanation.explain(objects, pod_group, times.now(), KINDS), others=explain_lookup.others(rest))


def add_parser(commands: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    parser = commands.add_parser("explain", help="why a gang Job is pending, what it runs on, or what it lost")
    parser.add_argument("job", metavar="JOB", help="the Job's name (or its PodGroup's)")
    parser.add_argument("-n", "--namespace", default=None, help="the Job's namespace (default: the kubeconfig context's, else default)")
    parser.add_argument("-o", "--output", choices=["text", "json"], default="text", help="text for people, json for tools")
    parser.add_argument("--context", default=None, help="kubeconfig context")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        result = asyncio.run(_explain(args.namespace, args.job, args.context))
    except explain_lookup.NotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except ApiError as exc:
        print(f"error: the API server refused a read ({exc.status} {exc.reason}): {exc}", file=sys.stderr)
        return 1
    except ConfigException as exc:
        where = os.environ.get("KUBECONFIG") or "~/.kube/config"
        print(
            f"error: no cluster to ask: the kubeconfig {where} cannot be loaded ({exc}); is the cluster up? (`./task up`)", file=sys.stderr
        )
        return 1
    except (aiohttp.ClientError, OSError) as exc:
        print(f"error: the API server does not answer ({exc}); is the cluster up? (`./task up`)", file=sys.stderr)
        return 1
    if args.output == "json":
        print(json.dumps(explain_text.as_json(result), indent=2))
    else:
        sys.stdout.write(explain_text.text(result))
    return 0
