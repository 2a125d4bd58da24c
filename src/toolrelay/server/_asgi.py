"""Plain ASGI, the few pieces the server needs: the callable's types, a refusal
(:class:`HTTPError`), a request body read within its bound, a whole response.

Plain ASGI rather than a framework: no dependency, any ASGI server on asyncio or trio,
and it mounts in any framework (the argument is in ``docs/server.md``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import Any

import anyio
import msgspec

__all__ = (
    "Disconnected",
    "HTTPError",
    "Message",
    "Receive",
    "Scope",
    "Send",
    "method_not_allowed",
    "read_body",
    "respond",
    "respond_json",
    "send_more",
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class HTTPError(Exception):
    """A request refused before anything was written: status, code and sentence."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = list(headers)


class Disconnected(Exception):
    """The client went away while the request was read."""


def method_not_allowed(allowed: str) -> HTTPError:
    """405, with the methods the route takes."""
    return HTTPError(405, "method_not_allowed", f"use {allowed}", [(b"allow", allowed.encode())])


async def read_body(
    receive: Receive, headers: Mapping[str, str], limit: int, seconds: float
) -> bytes:
    """The request body, refused (413) as soon as it is known to pass ``limit``, and
    (408) when it has not all arrived ``seconds`` after the request began to
    be read: a client trickling a body holds a connection and its buffer no longer."""
    with anyio.move_on_after(seconds):
        return await _read_body(receive, headers, limit)
    raise HTTPError(
        408,
        "body_timeout",
        f"the request body did not arrive within {seconds:g} s",
        [(b"connection", b"close")],
    )


async def _read_body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise HTTPError(400, "bad_request", "Content-Length is not an integer") from None
        if length > limit:
            raise HTTPError(413, "body_too_large", f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise Disconnected
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise HTTPError(413, "body_too_large", f"the body is larger than {limit} bytes")
        chunks.append(body)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str | None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    """A whole response: ``body`` with its length."""
    out = list(headers)
    if content_type is not None:
        out.append((b"content-type", content_type.encode()))
    out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def respond_json(
    send: Send, status: int, value: Any, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    """A whole JSON response."""
    await respond(send, status, msgspec.json.encode(value), "application/json", headers)


async def send_more(send: Send, body: bytes) -> None:
    """Send a piece of the response body; more follows."""
    await send({"type": "http.response.body", "body": body, "more_body": True})
