"""The readiness endpoint: a replica is ready when its webhook server completes a TLS handshake and its informers have synced.

Leadership is not part of it: every replica serves the webhooks, so a
standby is as ready as the leader and stays behind the Service.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import urllib.parse
from collections.abc import Callable

from aiohttp import web

logger = logging.getLogger(__name__)


async def webhook_serves(host: str, port: int, timeout: float = 2.0) -> bool:
    """A TLS handshake with our own webhook server (the certificate is ours: not verified here)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    connect_to = "127.0.0.1" if host in ("0.0.0.0", "") else ("::1" if host == "::" else host)
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(connect_to, port, ssl=context), timeout)
    except (OSError, TimeoutError, ssl.SSLError):
        return False
    writer.close()
    with contextlib.suppress(OSError, ssl.SSLError):
        await writer.wait_closed()
    return True


class Readiness:
    def __init__(self, url: str, webhook: tuple[str, int], synced: Callable[[], bool]) -> None:
        self.url = urllib.parse.urlsplit(url)
        self.webhook = webhook
        self.synced = synced
        self._runner: web.AppRunner | None = None

    async def ready(self) -> tuple[bool, str]:
        if not self.synced():
            return False, "informers not synced"
        if not await webhook_serves(*self.webhook):
            return False, "webhook server not serving TLS"
        return True, "ok"

    async def _handle(self, _: web.Request) -> web.Response:
        ok, why = await self.ready()
        return web.Response(status=200 if ok else 503, text=why + "\n")

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.get(self.url.path or "/readyz", self._handle)])
        self._runner = web.AppRunner(app, handle_signals=False, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, self.url.hostname, self.url.port or 8081).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
