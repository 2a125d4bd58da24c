"""W3C trace context over real loopback HTTP: the engine's AG-UI backend sends each run's
``traceparent``, and ``toolrelay.server`` continues the trace it receives (its turn's
span is a child of the client's run span), on asyncio and trio."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from toolrelay import Engine, ToolRegistry
from toolrelay.backends import AguiHttpBackend
from toolrelay.server import AguiServer
from toolrelay.testing import ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import read_events, run_input, serving

pytestmark = pytest.mark.anyio


class Tracing:
    """A tracer provider whose finished spans are kept in memory."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    @property
    def spans(self) -> tuple[ReadableSpan, ...]:
        return self.exporter.get_finished_spans()


@pytest.fixture
def client() -> Iterator[Tracing]:
    tracing = Tracing()
    yield tracing
    tracing.provider.shutdown()


@pytest.fixture
def server_side() -> Iterator[Tracing]:
    tracing = Tracing()
    yield tracing
    tracing.provider.shutdown()


class Recording:
    """An ASGI app around another, keeping the ``traceparent`` of every POST."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.traceparents: list[str | None] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            headers = dict(scope["headers"])
            value = headers.get(b"traceparent")
            self.traceparents.append(value.decode() if value is not None else None)
        await self.app(scope, receive, send)


def server_tools() -> ToolRegistry:
    async def get_secret_number(name: str) -> int:
        """A person's secret number (runs in the server)."""
        return {"alice": 42}[name]

    return ToolRegistry.of(get_secret_number)


def client_tools() -> ToolRegistry:
    async def confirm(question: str) -> str:
        """Ask the person at the client (runs in the client)."""
        return "yes"

    return ToolRegistry.of(confirm)


def model() -> ScriptedAgent:
    return ScriptedAgent(
        [
            tool_call("get_secret_number", {"name": "alice"}, id="s1"),
            tool_call("confirm", {"question": "share it?"}, id="c1"),
        ],
        [text("Alice's number is 42.")],
    )


def traceparent(span: ReadableSpan) -> str:
    context = span.context
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


async def test_each_run_sends_its_span_as_traceparent_and_the_server_continues_the_trace(
    client: Tracing, server_side: Tracing
) -> None:
    server = AguiServer(
        model(),
        tools=server_tools(),
        engine_options={"tracer_provider": server_side.provider},
    )
    app = Recording(server)
    async with serving(app) as url:
        backend = AguiHttpBackend(url + "/")
        async with Engine(backend, tools=client_tools(), tracer_provider=client.provider) as engine:
            turn = await engine.run_turn("traced", "What is Alice's number?")
        await backend.aclose()
    assert turn.status.value == "completed", turn.reason

    client_turn = next(s for s in client.spans if s.parent is None)
    runs = sorted(
        (s for s in client.spans if s.kind is SpanKind.CLIENT), key=lambda s: s.start_time or 0
    )
    assert len(runs) == 2  # the run that handed the client call over, and its continuation
    host, port = url.removeprefix("http://").split(":")
    for run in runs:
        assert run.parent is not None and run.parent.span_id == client_turn.context.span_id
        assert run.attributes is not None
        assert run.attributes["server.address"] == host
        assert run.attributes["server.port"] == int(port)
    # On the wire: each POST named its own run span.
    assert app.traceparents == [traceparent(run) for run in runs]

    # The server's turn continues the client's trace, under the first run's span.
    server_turn = next(
        s for s in server_side.spans if s.name == "invoke_agent" and s.kind is SpanKind.INTERNAL
    )
    assert server_turn.parent is not None and server_turn.parent.is_remote
    assert server_turn.parent.span_id == runs[0].context.span_id
    trace_ids = {s.context.trace_id for s in (*client.spans, *server_side.spans)}
    assert trace_ids == {client_turn.context.trace_id}
    # Its turn, its two model runs, its tool, and the client's call (a wait, in the
    # server, for the client's result).
    names = sorted(s.name for s in server_side.spans)
    assert names == [
        "execute_tool confirm",
        "execute_tool get_secret_number",
        "invoke_agent",
        "invoke_agent",
        "invoke_agent",
    ]


async def test_an_untraced_client_sends_no_traceparent_and_the_server_starts_a_trace(
    server_side: Tracing,
) -> None:
    server = AguiServer(
        ScriptedAgent([text("Hello.")]),
        engine_options={"tracer_provider": server_side.provider},
    )
    app = Recording(server)
    async with serving(app) as url:
        backend = AguiHttpBackend(url + "/")
        async with Engine(backend) as engine:
            turn = await engine.run_turn("untraced", "Hi")
        await backend.aclose()
    assert turn.status.value == "completed", turn.reason
    assert app.traceparents == [None]
    server_turn = next(s for s in server_side.spans if s.kind is SpanKind.INTERNAL)
    assert server_turn.parent is None


@pytest.mark.parametrize(
    "headers",
    [
        {"traceparent": "not a trace context"},
        {"traceparent": "ff-" + "1" * 32 + "-" + "2" * 16 + "-01"},  # version ff is invalid
        {"traceparent": "00-" + "0" * 32 + "-" + "2" * 16 + "-01"},  # all-zero trace id
        {"traceparent": "00-" + "a" * 4000 + "-" + "2" * 16 + "-01"},
        {
            "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",
            "tracestate": ",".join(f"k{i}=v" for i in range(2000)),  # past its 32 members
        },
    ],
    ids=["garbage", "bad-version", "zero-trace", "oversized", "huge-tracestate"],
)
async def test_a_hostile_trace_context_is_ignored_or_bounded_and_the_run_goes_on(
    server_side: Tracing, headers: dict[str, str]
) -> None:
    server = AguiServer(
        ScriptedAgent([text("Hello.")]),
        engine_options={"tracer_provider": server_side.provider},
    )
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as http:
        events = await read_events(
            http, "POST", "/", json_body=run_input("hostile", "Hi"), headers=headers
        )
    assert [e.type for e in events][-1] == "RUN_FINISHED"
    [turn] = [s for s in server_side.spans if s.kind is SpanKind.INTERNAL]
    if headers.get("tracestate"):
        # A valid traceparent is continued; the trace state is dropped as invalid.
        assert turn.parent is not None and turn.parent.trace_id == int("1" * 32, 16)
        assert len(str(turn.context.trace_state)) <= 512
    else:
        assert turn.parent is None  # not continued: a new trace
