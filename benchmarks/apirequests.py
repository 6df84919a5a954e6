"""The requests a way's API server answered, by verb and resource, read from its own `apiserver_request_total`.

CPU per gang (`components`) says which process a gap is in; for the API server, what it was asked says why: a
status written twice where once would do, an Event per member, a read the informers could answer. Counted by the
server, so the operator, kube-scheduler, the controllers and the bench's client are all in it, each request once.

    before = apirequests.count(way.cluster)
    ...
    asked = apirequests.spent(before, apirequests.count(way.cluster))   # {"PATCH podgroups/status": 8412, ...}
"""

from __future__ import annotations

import subprocess
from typing import Protocol

from prometheus_client.parser import text_string_to_metric_families

SKIPPED = frozenset({"WATCH", "CONNECT"})
"""A watch is one request for as long as it lasts; a count of them says nothing of the load."""


class Cluster(Protocol):
    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]: ...


def parse(text: str) -> dict[str, float]:
    """`"VERB resource[/subresource]"` -> requests answered, whatever their code, from the server's metrics text."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        if family.name != "apiserver_request":
            continue
        for sample in family.samples:
            labels = sample.labels
            if sample.name != "apiserver_request_total" or labels.get("verb") in SKIPPED:
                continue
            resource = labels.get("resource", "") + (f"/{labels['subresource']}" if labels.get("subresource") else "")
            key = f"{labels.get('verb')} {resource}"
            out[key] = out.get(key, 0.0) + sample.value
    return out


def count(cluster: Cluster) -> dict[str, float]:
    """The counts so far of the cluster's API server (`parse`)."""
    return parse(cluster.kubectl("get", "--raw", "/metrics").stdout)


def spent(before: dict[str, float], after: dict[str, float], top: int = 40) -> dict[str, int]:
    """The `top` counts that moved most between two readings, largest first."""
    moved = {key: int(after[key] - before.get(key, 0.0)) for key in after}
    return dict(sorted(((k, v) for k, v in moved.items() if v), key=lambda kv: -kv[1])[:top])
