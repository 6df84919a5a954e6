"""The informers' watch keeps each event's object as the API server sent it (`informers.RawWatch`)."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

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


async def test_an_error_a_bookmark_and_an_answer_without_an_event_go_the_library_s_way() -> None:
    stream = RawWatch()
    async with client.ApiClient() as api:
        stream.stream(client.CoreV1Api(api).list_pod_for_all_namespaces)
    gone = {"type": "ERROR", "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old resource version"}}
    with pytest.raises(ApiException) as raised:
        stream.unmarshal_event(json.dumps(gone), None)
    assert raised.value.status == 410, "a 410 is raised for the informer to list again"
    bookmark = {"type": "BOOKMARK", "object": {"kind": "Pod", "metadata": {"resourceVersion": "77"}}}
    assert stream.unmarshal_event(json.dumps(bookmark), None)["type"] == "BOOKMARK"
    assert stream.resource_version == "77", "a bookmark moves the version the watch resumes from"
    with pytest.raises(ApiException) as refused:
        stream.unmarshal_event(json.dumps({"kind": "Status", "code": 500, "reason": "InternalError", "message": "etcd"}), None)
    assert refused.value.status == 500
    assert stream.unmarshal_event("not json", None) == "not json", "a line that is no JSON is handed back as it came"
