"""A TCP round-robin balancer for the failover test: what a Service does in front of the webhook replicas.

`python tcpbalancer.py LISTEN_PORT BACKEND_PORT...` listens on 127.0.0.1 and
hands each connection to the next backend, passing TLS through untouched (the
API server verifies the replica's certificate against the one CA bundle). A
backend that refuses the connection is skipped, as an endpoint whose pod is
gone is; a connection already open to a replica that dies breaks, as it
would behind a Service.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import sys


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(Exception):
            writer.close()


async def main(listen: int, backends: list[int]) -> None:
    turn = itertools.cycle(range(len(backends)))

    async def handle(client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter) -> None:
        first = next(turn)
        for offset in range(len(backends)):
            port = backends[(first + offset) % len(backends)]
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError:
                continue
            await asyncio.gather(_pipe(client_reader, writer), _pipe(reader, client_writer))
            return
        client_writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), [int(p) for p in sys.argv[2:]]))
