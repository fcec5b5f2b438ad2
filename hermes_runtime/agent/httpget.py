"""One small HTTP GET on the event loop: the gateway's ``/health`` and a successor's ``/ready``.

Why not ``urllib``: it blocks, and the entrypoint's loop also carries every client connection
(``frontdoor.py``). Why not an HTTP client library: two GETs of a tiny JSON answer need no
pool, no redirects, no TLS. HTTP/1.0, so the server closes after its answer and the body is
everything up to EOF (never chunked).
"""

from __future__ import annotations

import asyncio
import contextlib

MAX_ANSWER = 1024 * 1024


class HttpGetError(OSError):
    """The server answered something that is not HTTP."""


async def http_get(host: str, port: int, path: str, timeout: float) -> tuple[int, bytes]:
    """``(status, body)`` of ``GET path``; ``OSError`` (``TimeoutError`` included) when the
    server cannot be reached or does not answer within ``timeout`` seconds."""
    async with asyncio.timeout(timeout):
        reader, writer = await asyncio.open_connection(host, port)
        try:
            writer.write(f"GET {path} HTTP/1.0\r\nHost: {url_host(host)}\r\n\r\n".encode())
            await writer.drain()
            answer = b""
            while len(answer) <= MAX_ANSWER and (chunk := await reader.read(64 * 1024)):
                answer += chunk
        finally:
            writer.close()
            with contextlib.suppress(OSError):
                await writer.wait_closed()
    head, _, body = answer.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].split()
    if len(status_line) < 2 or not status_line[0].startswith(b"HTTP/"):
        raise HttpGetError(f"no HTTP answer from {host}:{port}{path}")
    try:
        return int(status_line[1]), body
    except ValueError:
        raise HttpGetError(f"no HTTP status from {host}:{port}{path}") from None


def url_host(host: str) -> str:
    """``host`` as it goes into a URL or a Host header (an IPv6 pod address in brackets)."""
    return f"[{host}]" if ":" in host else host
