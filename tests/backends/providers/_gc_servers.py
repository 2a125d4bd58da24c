"""Test helpers for the Google, Ollama and Cohere adapters.

- :class:`ScriptedProvider`: a small ASGI app that speaks a provider's wire format
  (SSE or NDJSON), answers each POST with the next scripted response, one frame per
  body chunk, and records every request (path, query, headers, JSON body).
- :class:`LoopbackServer`: uvicorn serving such an app on 127.0.0.1 (ephemeral port) in
  a thread with its own asyncio loop (uvicorn is asyncio-only), so that tests on
  asyncio and on trio talk to it over a real socket, the way ``tests/backends`` serves
  the demo agent.
- Framing functions (:func:`gemini_sse`, :func:`cohere_sse`, :func:`ndjson`), a byte
  stream cut at chosen boundaries for ``httpx.MockTransport``, and helpers that run a
  translator or a backend and summarise what came out (texts, calls).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Generator, Iterable, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import httpx
import uvicorn

from toolrelay import ThreadKey
from toolrelay.backends.providers._base import ProviderBackend
from toolrelay.backends.providers._translator import StreamTranslator
from toolrelay.protocol import (
    Event,
    Message,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageContentEvent,
    Tool,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UnknownEvent,
    UserMessage,
)

__all__ = (
    "SSE",
    "NDJSON",
    "ByteChunks",
    "Call",
    "Failure",
    "LoopbackServer",
    "Recorded",
    "ScriptedProvider",
    "Summary",
    "cohere_sse",
    "collect",
    "cut",
    "gemini_sse",
    "mock_backend_transport",
    "ndjson",
    "run_input",
    "summarize",
    "translate",
)

SSE = "text/event-stream"
NDJSON = "application/x-ndjson"

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


# --- framing -----------------------------------------------------------------------------


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def gemini_sse(chunk: Any) -> bytes:
    """One ``GenerateContentResponse`` as Gemini frames it with ``alt=sse``."""
    return b"data: " + _json(chunk) + b"\r\n\r\n"


def cohere_sse(chunk: Any) -> bytes:
    """One Cohere v2 stream event: its ``type`` as the SSE event name, then the data."""
    return f"event: {chunk['type']}\n".encode() + b"data: " + _json(chunk) + b"\n\n"


def ndjson(chunk: Any) -> bytes:
    """One Ollama ``/api/chat`` line."""
    return _json(chunk) + b"\n"


# --- the scripted provider -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Recorded:
    """One request the scripted provider received."""

    path: str
    query: str
    headers: dict[str, str]
    body: Any


@dataclass(frozen=True, slots=True)
class Failure:
    """A scripted answer that is not a stream: ``status`` with a JSON ``body``."""

    status: int
    body: bytes


@dataclass(slots=True)
class ScriptedProvider:
    """An ASGI app playing one scripted response per POST, in order.

    Args:
        frame: Turns one chunk into its bytes on the wire.
        media_type: The response's ``Content-Type``.
        script: The responses, each a list of chunks or a :class:`Failure`.
    """

    frame: Callable[[Any], bytes]
    media_type: str
    script: list[Any]  # each a list of chunks or a Failure
    requests: list[Recorded] = field(default_factory=list)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        self.requests.append(
            Recorded(
                path=scope["path"],
                query=scope["query_string"].decode(),
                headers=headers,
                body=json.loads(body) if body else None,
            )
        )
        if not self.script:
            await _respond(send, 500, "application/json", [_json({"error": "script exhausted"})])
            return
        chunks = self.script.pop(0)
        if isinstance(chunks, Failure):
            await _respond(send, chunks.status, "application/json", [chunks.body])
            return
        await _respond(send, 200, self.media_type, [self.frame(chunk) for chunk in chunks])


async def _respond(send: Send, status: int, media_type: str, frames: Sequence[bytes]) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", media_type.encode())],
        }
    )
    for frame in frames:
        await send({"type": "http.response.body", "body": frame, "more_body": True})
    await send({"type": "http.response.body", "body": b"", "more_body": False})


# --- the loopback server -------------------------------------------------------------------


class _Server(uvicorn.Server):
    """uvicorn without signal handlers, saying when it listens."""

    def __init__(self, config: uvicorn.Config, on_started: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_started = on_started

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        yield

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets=sockets)
        if self.started:
            self._on_started()


class LoopbackServer:
    """``app`` served by uvicorn on 127.0.0.1 (ephemeral port) in a thread with its own
    asyncio loop; ``url`` is set once the socket listens."""

    def __init__(self, app: ScriptedProvider) -> None:
        self.app = app
        self.url = ""
        self._listening = threading.Event()
        config = uvicorn.Config(
            app,
            host="127.0.0.1",
            port=0,
            lifespan="off",
            log_config=None,
            access_log=False,
            http="h11",
            ws="none",
            loop="asyncio",
            timeout_graceful_shutdown=1,
        )
        self._server = _Server(config, self._listening.set)
        self._thread = threading.Thread(target=self._run, name="gc-provider", daemon=True)

    def _run(self) -> None:
        try:
            self._server.run()
        finally:
            self._listening.set()

    def __enter__(self) -> Self:
        self._thread.start()
        if not self._listening.wait(10) or not self._server.started:
            self.__exit__(None, None, None)
            raise RuntimeError("the scripted provider did not start")
        host, port = self._server.servers[0].sockets[0].getsockname()[:2]
        self.url = f"http://{host}:{port}"
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._server.should_exit = True
        self._thread.join(5)


# --- MockTransport plumbing ------------------------------------------------------------------


class ByteChunks(httpx.AsyncByteStream):
    """A response body delivered in exactly these pieces."""

    def __init__(self, pieces: Iterable[bytes]) -> None:
        self._pieces = list(pieces)

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for piece in self._pieces:
            yield piece


def cut(data: bytes, boundaries: Iterable[int]) -> list[bytes]:
    """``data`` cut at the given offsets (any order, duplicates and out-of-range ignored)."""
    points = sorted({b for b in boundaries if 0 < b < len(data)})
    edges = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def mock_backend_transport(
    pieces: Sequence[bytes],
    media_type: str,
    requests: list[httpx.Request] | None = None,
    *,
    status: int = 200,
) -> httpx.MockTransport:
    """A transport answering every request with ``pieces`` as the body (recording the
    requests in ``requests``)."""

    def handle(request: httpx.Request) -> httpx.Response:
        if requests is not None:
            requests.append(request)
        return httpx.Response(
            status, headers={"content-type": media_type}, stream=ByteChunks(pieces)
        )

    return httpx.MockTransport(handle)


# --- running and summarising ---------------------------------------------------------------


def run_input(
    messages: Sequence[Message] | None = None, tools: Sequence[Tool] = ()
) -> RunAgentInput:
    """A ``RunAgentInput`` (one user question by default)."""
    return RunAgentInput(
        thread_id="thread-1",
        run_id="run-1",
        messages=list(messages or [UserMessage(id="u1", content="What are the secret numbers?")]),
        tools=list(tools),
    )


def translate(translator: StreamTranslator, chunks: Iterable[Any]) -> list[Event]:
    """Feed every chunk, then finish: the events of one response."""
    events: list[Event] = []
    for chunk in chunks:
        events.extend(translator.feed(chunk))
    events.extend(translator.finish())
    return events


async def collect(backend: ProviderBackend, request: RunAgentInput) -> list[Event | UnknownEvent]:
    """Every event of one run of ``backend``."""
    async with backend.run(ThreadKey(request.thread_id), request) as events:
        return [event async for event in events]


@dataclass(frozen=True, slots=True)
class Call:
    """A tool call as the events told it."""

    id: str
    name: str
    arguments: str
    ended: bool
    parent: str | None = None


@dataclass(frozen=True, slots=True)
class Summary:
    """What a run said: its text, its calls, how it ended."""

    text: str
    calls: tuple[Call, ...]
    finished: Any  # RUN_FINISHED's result, or None
    error: tuple[str, str | None] | None  # RUN_ERROR's (message, code)

    def shape(self) -> tuple[Any, ...]:
        """Everything but the generated message ids (a call's parent: set or not)."""
        calls = tuple(
            (c.id, c.name, c.arguments, c.ended, c.parent is not None) for c in self.calls
        )
        return (self.text, calls, self.finished, self.error)


def summarize(events: Iterable[Event | UnknownEvent]) -> Summary:
    text: list[str] = []
    order: list[str] = []
    names: dict[str, str] = {}
    parents: dict[str, str | None] = {}
    arguments: dict[str, list[str]] = {}
    ended: set[str] = set()
    finished: Any = None
    error: tuple[str, str | None] | None = None
    for event in events:
        match event:
            case TextMessageContentEvent(delta=delta):
                text.append(delta)
            case ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name):
                assert call_id not in names, f"call id {call_id!r} started twice"
                order.append(call_id)
                names[call_id] = name
                parents[call_id] = event.parent_message_id
                arguments[call_id] = []
            case ToolCallArgsEvent(tool_call_id=call_id, delta=delta):
                assert call_id not in ended, f"arguments after the end of {call_id!r}"
                arguments[call_id].append(delta)
            case ToolCallEndEvent(tool_call_id=call_id):
                ended.add(call_id)
            case RunFinishedEvent(result=result):
                finished = result
            case RunErrorEvent(message=message, code=code):
                error = (message, code)
    calls = tuple(Call(i, names[i], "".join(arguments[i]), i in ended, parents[i]) for i in order)
    return Summary("".join(text), calls, finished, error)
