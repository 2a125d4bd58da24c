"""The demo agent: a deterministic AG-UI server, as a plain ASGI application.

:class:`DemoAgent` answers ``POST`` requests carrying a ``RunAgentInput`` with an AG-UI
event stream (``text/event-stream``), the way a real agent server does, but with no
model behind it: what it says follows from the request alone (``_scenarios``), so tests
and captures are reproducible. It is stateless.

``forwardedProps.delay`` (seconds) paces the events. A comment line opens every stream
(clients must skip SSE comments).

The application records what it saw, for tests: :attr:`DemoAgent.requests`,
:attr:`DemoAgent.disconnects` (clients that went away mid-stream) and
:attr:`DemoAgent.completed` (streams sent to the end).
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, TypeAlias

import anyio
import msgspec

from toolrelay._errors import InvalidEventError, MalformedEventError
from toolrelay.demo._scenarios import SCENARIOS, choose_scenario, plan, reply_delay
from toolrelay.protocol import Event, RunAgentInput, decode_run_input, encode_event

__all__ = ("DemoAgent",)

_MAX_BODY_BYTES: Final = 4 * 1024 * 1024

# ASGI, the little of it this module needs.
_Scope: TypeAlias = MutableMapping[str, Any]
_Message: TypeAlias = MutableMapping[str, Any]
_Receive: TypeAlias = Callable[[], Awaitable[_Message]]
_Send: TypeAlias = Callable[[_Message], Awaitable[None]]


def _frame(item: Event | bytes) -> bytes:
    payload = item if isinstance(item, bytes) else encode_event(item)
    return b"data: " + payload + b"\n\n"


# --- the ASGI application ----------------------------------------------------------------


class DemoAgent:
    """The demo agent as an ASGI application (see the module docstring).

    Args:
        path: The endpoint; ``POST`` runs the agent, ``GET`` describes it.

    Attributes:
        requests: The last 100 ``RunAgentInput`` received, oldest first.
        peers: The client address (host, port) of each of those requests: a client that
            reuses its connection shows the same port.
        headers: The headers of each of those requests (names in lower case).
        disconnects: Streams whose client went away before the end.
        completed: Streams sent to the end.
        drops: Streams the ``broken`` scenario cut on purpose.
    """

    def __init__(self, *, path: str = "/") -> None:
        self.path = "/" + path.strip("/")
        self.requests: collections.deque[RunAgentInput] = collections.deque(maxlen=100)
        self.peers: collections.deque[tuple[str, int] | None] = collections.deque(maxlen=100)
        self.headers: collections.deque[dict[str, str]] = collections.deque(maxlen=100)
        self.disconnects = 0
        self.completed = 0
        self.drops = 0

    async def __call__(self, scope: _Scope, receive: _Receive, send: _Send) -> None:
        if scope["type"] == "lifespan":
            await _lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        if "/" + str(scope.get("path", "")).strip("/") != self.path:
            await _respond(send, 404, {"error": f"not found; the agent is at {self.path}"})
            return
        method = scope.get("method", "GET")
        if method == "GET":
            await _respond(send, 200, {"agent": "toolrelay demo", "scenarios": SCENARIOS})
            return
        if method != "POST":
            await _respond(send, 405, {"error": "use POST"}, allow="GET, POST")
            return
        body = await _read_body(receive)
        if body is None:
            await _respond(send, 413, {"error": "request body too large"})
            return
        try:
            run_input = decode_run_input(body)
        except (MalformedEventError, InvalidEventError) as exc:
            await _respond(send, 422, {"error": f"not a RunAgentInput: {exc}"})
            return
        self.requests.append(run_input)
        client = scope.get("client")
        self.peers.append((str(client[0]), int(client[1])) if client else None)
        self.headers.append(
            {
                bytes(name).decode("latin-1").lower(): bytes(value).decode("latin-1")
                for name, value in scope.get("headers", ())
            }
        )
        scenario = choose_scenario(run_input)
        await self._stream(
            receive, send, plan(run_input, scenario), reply_delay(run_input, scenario)
        )

    async def _stream(
        self, receive: _Receive, send: _Send, items: list[Event | bytes | None], delay: float
    ) -> None:
        ended = False
        async with anyio.create_task_group() as group:

            async def watch_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                if not ended:
                    self.disconnects += 1
                group.cancel_scope.cancel()

            group.start_soon(watch_disconnect)
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                    ],
                }
            )
            await _body(send, b": toolrelay demo agent\n\n")
            for index, item in enumerate(items):
                if delay and index:
                    await anyio.sleep(delay)
                if item is None:
                    # Return without ending the body: the server closes the connection.
                    ended = True
                    self.drops += 1
                    group.cancel_scope.cancel()
                    return
                await _body(send, _frame(item))
            ended = True
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            self.completed += 1
            group.cancel_scope.cancel()


async def _body(send: _Send, data: bytes) -> None:
    await send({"type": "http.response.body", "body": data, "more_body": True})


async def _respond(send: _Send, status: int, payload: object, *, allow: str = "") -> None:
    body = msgspec.json.encode(payload)
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    if allow:
        headers.append((b"allow", allow.encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _read_body(receive: _Receive) -> bytes | None:
    """The request body, or ``None`` if it passes the size bound."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b""  # the client went away; an empty body fails to decode
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > _MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _lifespan(receive: _Receive, send: _Send) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return
