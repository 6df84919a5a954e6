"""Kopf's webhook server, closing each connection after its one review.

With keep-alive, the API server sends the next review on a connection it
opened earlier; behind a Service, that connection stays with the replica it
first reached, so when that replica dies the next review goes down with it
(EOF: `failurePolicy: Fail` refuses the Job). One connection per review
costs a TLS handshake and leaves only the reviews a dying replica is
processing at that instant exposed; every other one reaches a live replica.
"""

from __future__ import annotations

from typing import Any

import aiohttp.web
import kopf


class WebhookServer(kopf.WebhookServer):
    @staticmethod
    async def _serve(fn: Any, request: aiohttp.web.Request) -> aiohttp.web.Response:
        response = await kopf.WebhookServer._serve(fn, request)
        response.force_close()
        return response
