"""The informers' watch keeps each event's object as the API server sent it (`informers.RawWatch`)."""

from __future__ import annotations

import json

from kubernetes_asyncio import client

from phalanx.kube.informers import RawWatch


async def test_an_event_is_parsed_once_and_its_object_kept_as_sent() -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "rank-0", "namespace": "ml", "resourceVersion": "42"}, "spec": {}}
    stream = RawWatch()
    async with client.ApiClient() as api:
        stream.stream(client.CoreV1Api(api).list_pod_for_all_namespaces)
    assert stream.return_type is None, "no model asked for: the library does not write the object back and parse it again"
    event = stream.unmarshal_event(json.dumps({"type": "MODIFIED", "object": pod}), stream.return_type)
    assert event["raw_object"] == pod and event["object"] is event["raw_object"], "the dict as parsed, not a V1Pod"
    assert stream.resource_version == "42", "the watch resumes from the last version it saw"
