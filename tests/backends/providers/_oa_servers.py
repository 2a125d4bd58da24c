"""A scripted LLM provider on real loopback HTTP, for the OpenAI and Anthropic adapters.

:class:`ScriptedProvider` is a small ASGI app: every POST it receives is recorded (path,
headers, JSON body) and answered with the next scripted Server-Sent Events body, sent in
several pieces the way a provider streams. :class:`LoopbackServer` serves it with uvicorn
on 127.0.0.1 and an ephemeral port, in a thread with its own asyncio loop, so that tests
on asyncio and on trio share one server (uvicorn is asyncio-only); the demo server of
``toolrelay.demo`` does the same.
"""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from collections.abc import Awaitable, Callable, Generator, Iterable, MutableMapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import httpx
import msgspec
import uvicorn

from toolrelay import ThreadKey
from toolrelay.backends.providers import ProviderBackend
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    Event,
    Message as AguiMessage,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    Tool,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    UnknownEvent,
    UserMessage,
)

__all__ = (
    "KEY",
    "LoopbackServer",
    "Outcome",
    "RecordedRequest",
    "ScriptedProvider",
    "collect",
    "refuse",
    "run_input",
    "sse",
    "summarize",
)

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_START_TIMEOUT = 10.0
_STOP_TIMEOUT = 5.0


def sse(chunks: Iterable[dict[str, Any]], *, named: bool = False, done: bool = False) -> bytes:
    """Chunks as an SSE body: ``event: <type>`` lines when ``named`` (the Responses API,
    Anthropic), and a final ``data: [DONE]`` when ``done`` (Chat Completions)."""
    out = bytearray()
    for chunk in chunks:
        if named:
            out += b"event: " + str(chunk["type"]).encode() + b"\n"
        out += b"data: " + msgspec.json.encode(chunk) + b"\n\n"
    if done:
        out += b"data: [DONE]\n\n"
    return bytes(out)


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request the provider received."""

    path: str
    headers: dict[str, str]
    body: Any


class ScriptedProvider:
    """Answers each POST with the next scripted SSE body and records the request.

    A request beyond the script gets a 500 with an OpenAI/Anthropic-shaped error body.
    """

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._replies: deque[bytes] = deque()
        self._lock = threading.Lock()

    def script(self, *replies: bytes) -> None:
        """Forget earlier requests and answer the next ones with ``replies``, in order."""
        with self._lock:
            self.requests = []
            self._replies = deque(replies)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # pragma: no cover - lifespan is off
            return
        body = bytearray()
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        with self._lock:
            self.requests.append(
                RecordedRequest(
                    path=scope["path"],
                    headers=headers,
                    body=msgspec.json.decode(bytes(body)) if body else None,
                )
            )
            reply = self._replies.popleft() if self._replies else None
        if reply is None:
            error = b'{"type":"error","error":{"type":"api_error","message":"no more replies"}}'
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send({"type": "http.response.body", "body": error})
            return
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                ],
            }
        )
        # One piece per SSE event, as a provider flushes them.
        pieces = [p + b"\n\n" for p in reply.split(b"\n\n") if p]
        for piece in pieces:
            await send({"type": "http.response.body", "body": piece, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


class _Server(uvicorn.Server):
    """Leaves signal handling to the test runner and says when it listens."""

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
    """``app`` served by uvicorn on 127.0.0.1 in a thread with its own event loop.

    Attributes:
        app: The provider being served.
        url: ``http://127.0.0.1:<port>``, once started.
    """

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
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def _run(self) -> None:
        try:
            self._server.run()
        except BaseException as exc:  # SystemExit from a failed bind, among others
            self._error = exc
        finally:
            self._listening.set()

    def __enter__(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="oa-provider", daemon=True)
        self._thread.start()
        if not self._listening.wait(_START_TIMEOUT) or not self._server.started:
            self.__exit__(None, None, None)
            raise RuntimeError(f"the loopback provider did not start: {self._error!r}")
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
        if self._thread is not None:
            self._thread.join(_STOP_TIMEOUT)


# --- reading what a translator or a backend produced -----------------------------------------


@dataclass
class Outcome:
    """What a stream of AG-UI events amounts to, checked for well-formedness on the way.

    Attributes:
        texts: The text of each text message, in the order they started.
        calls: ``(id, name, raw arguments)`` of each tool call, in the order they started.
        ended: The ids of the calls that got TOOL_CALL_END, in that order.
        reasoning: The text of each reasoning message.
        finish: ``RUN_FINISHED.result``, or ``None``.
        error: ``(message, code)`` of RUN_ERROR, or ``None``.
    """

    texts: list[str]
    calls: list[tuple[str, str, str]]
    ended: list[str]
    reasoning: list[str]
    finish: Any = None
    error: tuple[str, str | None] | None = None


def summarize(events: Iterable[object]) -> Outcome:
    """Fold AG-UI events into an :class:`Outcome`, asserting the AG-UI ordering rules:
    ARGS and END only for a started, open call; content only for an open message; at
    most one terminal event, and nothing after it."""
    texts: dict[str, list[str]] = {}
    open_texts: set[str] = set()
    reasoning: dict[str, list[str]] = {}
    open_reasoning: set[str] = set()
    calls: dict[str, tuple[str, list[str]]] = {}
    open_calls: set[str] = set()
    outcome = Outcome(texts=[], calls=[], ended=[], reasoning=[])
    terminal = False
    for event in events:
        assert not terminal, f"{event!r} after the end of the run"
        match event:
            case RunStartedEvent():
                pass
            case TextMessageStartEvent(message_id=mid):
                assert mid not in open_texts, f"text {mid!r} started twice"
                texts[mid] = []
                open_texts.add(mid)
            case TextMessageContentEvent(message_id=mid, delta=delta):
                assert mid in open_texts, f"content for text {mid!r}, which is not open"
                assert delta, "an empty TEXT_MESSAGE_CONTENT delta"
                texts[mid].append(delta)
            case TextMessageEndEvent(message_id=mid):
                assert mid in open_texts, f"end of text {mid!r}, which is not open"
                open_texts.discard(mid)
            case ReasoningMessageStartEvent(message_id=mid):
                reasoning[mid] = []
                open_reasoning.add(mid)
            case ReasoningMessageContentEvent(message_id=mid, delta=delta):
                assert mid in open_reasoning
                reasoning[mid].append(delta)
            case ReasoningMessageEndEvent(message_id=mid):
                assert mid in open_reasoning
                open_reasoning.discard(mid)
            case ToolCallStartEvent(tool_call_id=cid, tool_call_name=name):
                assert cid not in calls, f"tool call {cid!r} started twice"
                calls[cid] = (name, [])
                open_calls.add(cid)
            case ToolCallArgsEvent(tool_call_id=cid, delta=delta):
                assert cid in open_calls, f"arguments for tool call {cid!r}, which is not open"
                assert delta, "an empty TOOL_CALL_ARGS delta"
                calls[cid][1].append(delta)
            case ToolCallEndEvent(tool_call_id=cid):
                assert cid in open_calls, f"end of tool call {cid!r}, which is not open"
                open_calls.discard(cid)
                outcome.ended.append(cid)
            case RunFinishedEvent(result=result):
                terminal = True
                assert not open_texts, f"text {open_texts} still open at RUN_FINISHED"
                outcome.finish = result
            case RunErrorEvent(message=message, code=code):
                terminal = True
                outcome.error = (message, code)
            case _:
                pass
    outcome.texts = ["".join(parts) for parts in texts.values()]
    outcome.reasoning = ["".join(parts) for parts in reasoning.values()]
    outcome.calls = [(cid, name, "".join(parts)) for cid, (name, parts) in calls.items()]
    return outcome


# --- shared by the OpenAI and Anthropic tests ---------------------------------------------

KEY = ThreadKey("t1")


def refuse(request: httpx.Request) -> httpx.Response:
    """A MockTransport handler for a test that must send nothing."""
    raise AssertionError(f"no request may be sent, got {request.method} {request.url}")


def run_input(
    messages: list[AguiMessage] | None = None, tools: list[Tool] | None = None
) -> RunAgentInput:
    """A run with one user message and the demo tools unless told otherwise."""
    return RunAgentInput(
        thread_id="t1",
        run_id="r1",
        messages=messages if messages is not None else [UserMessage(id="u1", content="hi")],
        tools=tools if tools is not None else list(DEMO_TOOLS.definitions()),
    )


async def collect(
    backend: ProviderBackend, given: RunAgentInput | None = None
) -> list[Event | UnknownEvent]:
    """Every event of one run of ``backend``, which is closed after."""
    try:
        async with backend.run(KEY, given or run_input()) as events:
            return [event async for event in events]
    finally:
        await backend.aclose()
