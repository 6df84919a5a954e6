"""Where every replica's webhook certificate comes from, and how it stays fresh without a restart.

Two sources:
* `SecretSource`: one Secret in the operator's namespace holds the CA and the
  serving pair. The first replica to start creates it (a create that loses
  the race reads the winner's); any replica that finds it due renews it with
  a resourceVersion-conditional update, so two replicas renewing at once
  agree on one result. Every replica serves what the Secret holds, so the
  one CA bundle in the webhook configurations trusts them all.
* `DirectorySource`: files the user mounts (`--tls-dir`, e.g. a
  cert-manager Secret), re-read when they change.

`Keeper` polls its source and loads a changed pair into the live
`ssl.SSLContext` in place: connections already open keep their session, new
ones get the new certificate, and the port never closes. A new CA bundle is
written into the webhook configurations before any replica serves a
certificate signed by the new CA.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import hashlib
import logging
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, Protocol

from phalanx.kube import tls
from phalanx.kube.client import UNANSWERED, ApiError, Conflict, Kube

logger = logging.getLogger(__name__)

Publish = Callable[[bytes], Awaitable[None]]
"""Writes a CA bundle into the webhook configurations."""


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class Source(Protocol):
    async def current(self) -> tls.ServingCert: ...


class DirectorySource:
    def __init__(self, directory: Path) -> None:
        self.directory = directory

    async def current(self) -> tls.ServingCert:
        return tls.load(self.directory)


def _decode(secret: dict[str, Any]) -> tls.Material | None:
    data = secret.get("data") or {}
    try:
        return tls.Material(*(base64.b64decode(data[k]) for k in ("ca.crt", "ca.key", "tls.crt", "tls.key")))
    except KeyError:
        return None


def _encode(material: tls.Material) -> dict[str, str]:
    fields = {"ca.crt": material.ca_bundle, "ca.key": material.ca_key, "tls.crt": material.cert, "tls.key": material.key}
    return {k: base64.b64encode(v).decode() for k, v in fields.items()}


class SecretSource:
    def __init__(self, kube: Kube, namespace: str, name: str, hosts: list[str], directory: Path, publish: Publish) -> None:
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.hosts = hosts
        self.directory = directory
        self.publish = publish

    @property
    def path(self) -> str:
        return f"/api/v1/namespaces/{self.namespace}/secrets/{self.name}"

    async def current(self) -> tls.ServingCert:
        """The Secret's pair, created or renewed first when needed; written to files for the TLS server."""
        for _ in range(5):
            secret = await self.kube.get(self.path)
            if secret is None:
                material = tls.fresh(self.hosts, _now())
                try:
                    await self.kube.create(f"/api/v1/namespaces/{self.namespace}/secrets", self._secret(material, None))
                    logger.info("webhook certificate: created Secret %s/%s", self.namespace, self.name)
                except Conflict:
                    continue  # another replica created it first: serve theirs
                return tls.write(self.directory, material)
            held = _decode(secret)
            material = tls.fresh(self.hosts, _now()) if held is None else tls.renewed(held, self.hosts, _now())
            if material is None:
                assert held is not None
                return tls.write(self.directory, held)
            if held is None or material.ca_bundle != held.ca_bundle:
                await self.publish(material.ca_bundle)  # trusted before anyone serves what the new CA signs
            try:
                await self.kube.replace(self.path, self._secret(material, secret))
                logger.info("webhook certificate: renewed in Secret %s/%s", self.namespace, self.name)
            except Conflict:
                continue  # another replica renewed first: read theirs
            return tls.write(self.directory, material)
        raise RuntimeError(f"Secret {self.namespace}/{self.name} kept changing while the webhook certificate was read")

    def _secret(self, material: tls.Material, current: dict[str, Any] | None) -> dict[str, Any]:
        metadata: dict[str, Any] = {"name": self.name, "namespace": self.namespace, "labels": {"app.kubernetes.io/name": "phalanx"}}
        if current is not None:
            metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
        return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls", "metadata": metadata, "data": _encode(material)}


def _digest(cert: tls.ServingCert) -> str:
    hasher = hashlib.sha256()
    for path in (cert.cert_file, cert.key_file):
        hasher.update(path.read_bytes())
    hasher.update(cert.ca_pem)
    return hasher.hexdigest()


class Keeper:
    """The live SSL context of the webhook server, kept in step with its source."""

    def __init__(self, source: Source, publish: Publish, interval: float = 60.0) -> None:
        self.source = source
        self.publish = publish
        self.interval = interval
        self.context = ssl.create_default_context(purpose=ssl.Purpose.CLIENT_AUTH)
        self.cert: tls.ServingCert | None = None
        self._digest = ""
        self.reloads = 0

    async def load(self) -> tls.ServingCert:
        """Read the source; load a changed pair into the context and publish a changed bundle. Returns what is served."""
        cert = await self.source.current()
        digest = _digest(cert)
        if digest != self._digest:
            self.context.load_cert_chain(str(cert.cert_file), str(cert.key_file))
            if self.cert is None or self.cert.ca_pem != cert.ca_pem:
                await self.publish(cert.ca_pem)
            if self.cert is not None:
                self.reloads += 1
                logger.info("webhook certificate reloaded")
            self.cert, self._digest = cert, digest
        return cert

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.load()
            except asyncio.CancelledError:
                raise
            except (ApiError, *UNANSWERED, ValueError, ssl.SSLError) as exc:
                logger.warning("webhook certificate not refreshed (%s); serving the current one", exc)
