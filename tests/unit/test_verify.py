"""A release's verification (`Releaser._verify`) on the watch's claims: it reads only the claims the watch shows
taking one of the reservation's devices (an index by device), and finds there every claim a walk of all would."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_asyncio import client

from phalanx.api import schema
from phalanx.kube.informers import ClusterView
from phalanx.scheduling.holes import Holes
from phalanx.scheduling.outcome import ReleaseAborted
from phalanx.scheduling.reserve import Releaser

DRIVER = "gpu.example.com"


class _Kube:
    def __init__(self) -> None:
        self.api = client.ApiClient()


def _claim(name: str, *results: dict[str, Any], version: str = "1") -> dict[str, Any]:
    status = {"allocation": {"devices": {"results": list(results)}}} if results else {}
    return {"metadata": {"namespace": "ml", "name": name, "uid": f"{name}-uid", "resourceVersion": version}, "spec": {}, "status": status}


def _result(device: str, **more: Any) -> dict[str, Any]:
    return {"request": "gpu", "driver": DRIVER, "pool": "worker-1", "device": device, **more}


def _reservation() -> schema.Reservation:
    results = [schema.DeviceResult(request="gpu", driver=DRIVER, pool="worker-1", device=d) for d in ("gpu-0", "gpu-1")]
    return schema.Reservation(
        state="Reserving", claims=[schema.ClaimReservation(name="ours", uid="ours-uid", node="worker-1", results=results)]
    )


async def test_the_claims_read_are_those_taking_our_devices_and_they_find_what_a_walk_of_all_would() -> None:
    kube = _Kube()
    view = ClusterView(kube)  # type: ignore[arg-type]
    releaser = Releaser(kube, view, Holes(kube))  # type: ignore[arg-type]
    view.claims.apply("ADDED", _claim("ours", _result("gpu-0"), _result("gpu-1")))
    view.claims.apply("ADDED", _claim("elsewhere", _result("gpu-7")))
    view.claims.apply("ADDED", _claim("watching", _result("gpu-0", adminAccess=True)))
    view.claims.apply("ADDED", _claim("later"))
    reservation = _reservation()

    assert {c["metadata"]["name"] for c in releaser._holders(reservation)} == {"ours"}, "admin access takes nothing"
    releaser._verify("ml", reservation, releaser._holders(reservation))

    view.claims.apply("MODIFIED", _claim("later", _result("gpu-1"), version="2"))  # allocated since: it takes one of ours
    held = releaser._holders(reservation)
    assert {c["metadata"]["name"] for c in held} == {"ours", "later"}
    for claims in (held, view.claims.items()):
        with pytest.raises(ReleaseAborted, match="ml/later") as found:
            releaser._verify("ml", reservation, claims)
        assert found.value.shared == frozenset({(DRIVER, "worker-1", "gpu-1")})

    view.claims.apply("DELETED", _claim("later", _result("gpu-1"), version="3"))
    assert {c["metadata"]["name"] for c in releaser._holders(reservation)} == {"ours"}, "a claim gone leaves the index"
