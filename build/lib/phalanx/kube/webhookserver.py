"""Kopf's webhook server, closing each connection after its one review, and telling when it serves.

With keep-alive, the API server sends the next review on a connection it
opened earlier; behind a Service, that connection stays with the replica it
first reached, so when that replica dies the next review goes down with it
(EOF: `failurePolicy: Fail` refuses the Job). One connection per review
costs a TLS handshake and leaves only the reviews a dying replica is
processing at that instant exposed; every other one reaches a live replica.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp.web
import kopf

logger = logging.getLogger(__name__)


class WebhookServer(kopf.WebhookServer):
    """`on_serving` runs each time the server starts listening, before anything is routed to it: the local mode
    writes its webhook configurations only then, so the API server never calls a port nobody serves."""

    def __init__(self, *, on_serving: Callable[[], Awaitable[None]] | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._on_serving = on_serving

    async def __call__(self, fn: Any) -> AsyncIterator[Any]:
        async for client_config in super().__call__(fn):
            if self._on_serving is not None:
                await self._on_serving()
                logger.info("webhook server listening; webhook configurations written")
            yield client_config

    @staticmethod
    async def _serve(fn: Any, request: aiohttp.web.Request) -> aiohttp.web.Response:
        response = await kopf.WebhookServer._serve(fn, request)
        response.force_close()
        return response
