"""OpenTelemetry spans of turns (the GenAI semantic conventions), read back from the
SDK's in-memory exporter: the span tree of a multi-round turn, failed and cancelled
tools, a cancelled turn, a breaker trip, context flowing into tools (async, and sync in
worker threads), provider runs with their model and token usage, and tracing that is
off (no provider set, or no package) doing nothing."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from opentelemetry.semconv.attributes import error_attributes, server_attributes
from opentelemetry.trace import SpanKind, StatusCode

from toolrelay import Engine, EventReceived, RunStatus, StateChanged, ThreadKey, ToolRegistry, tool
from toolrelay._runtime import _tracing
from toolrelay.backends.providers import GoogleBackend
from toolrelay.protocol import (
    RunAgentInput,
    RunFinishedEvent,
    TextMessageEndEvent,
    TokenUsage,
    ToolMessage,
)
from toolrelay.testing import Gate, ScriptedAgent, text, tool_call
from toolrelay.testing._scripted import Script

pytestmark = pytest.mark.anyio


@pytest.fixture
def exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def provider(exporter: InMemorySpanExporter) -> Iterator[TracerProvider]:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider
    provider.shutdown()


async def lookup(name: str) -> str:
    """Look a name up.

    Args:
        name: Who.
    """
    return f"{name} is 42"


def explode(name: str) -> str:
    """Always fails.

    Args:
        name: Who.
    """
    raise ValueError(f"no {name}")


TOOLS = ToolRegistry.of(lookup, explode)


def tree(spans: tuple[ReadableSpan, ...]) -> dict[str, Any]:
    """The spans as ``{name: [children...]}``-ish rows: (name, parent name), in end order."""
    by_id = {span.context.span_id: span for span in spans}
    return {
        "rows": [
            (span.name, by_id[span.parent.span_id].name if span.parent else None) for span in spans
        ],
        "traces": {span.context.trace_id for span in spans},
    }


def only(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    [span] = [s for s in spans if s.name == name]
    return span


def named(spans: tuple[ReadableSpan, ...], name: str) -> list[ReadableSpan]:
    return sorted((s for s in spans if s.name == name), key=lambda s: s.start_time or 0)


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


async def test_a_multi_round_turn_is_one_invoke_agent_span_with_runs_and_tools_beneath(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = ScriptedAgent(
        [
            tool_call("lookup", {"name": "alice"}, id="c1"),
            tool_call("lookup", {"name": "bob"}, id="c2"),
        ],
        [tool_call("lookup", {"name": "carol"}, id="c3")],
        [text("Done.")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS, tracer_provider=provider) as engine:
            turn = await engine.run_turn("t1", "Look them up")
    assert turn.status is RunStatus.completed
    spans = exporter.get_finished_spans()
    shape = tree(spans)
    assert len(shape["traces"]) == 1
    assert sorted(shape["rows"], key=str) == sorted(
        [
            ("invoke_agent", None),
            *[("invoke_agent", "invoke_agent")] * 3,
            *[("execute_tool lookup", "invoke_agent")] * 3,
        ],
        key=str,
    )
    [root] = [s for s in spans if s.parent is None]
    assert root.kind is SpanKind.INTERNAL
    assert attrs(root) == {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.provider.name": "ag_ui",
        "gen_ai.conversation.id": "t1",
        "toolrelay.turn.id": turn.turn_id,
        "toolrelay.turn.status": "completed",
        "toolrelay.turn.reason": "completed",
        "toolrelay.turn.runs": 3,
        "toolrelay.turn.depth": 2,
    }
    assert root.status.status_code is StatusCode.UNSET
    runs = [s for s in spans if s.parent is not None and s.name == "invoke_agent"]
    runs.sort(key=lambda s: attrs(s)["toolrelay.run.depth"])
    assert all(s.parent is not None and s.parent.span_id == root.context.span_id for s in runs)
    assert [s.kind for s in runs] == [SpanKind.CLIENT] * 3
    assert [(attrs(s)["toolrelay.run.depth"], attrs(s)["toolrelay.run.outcome"]) for s in runs] == [
        (0, "tool_calls"),
        (1, "tool_calls"),
        (2, "completed"),
    ]
    assert [attrs(s)["toolrelay.run.id"] for s in runs] == [i.run_id for i in agent.inputs]
    assert {attrs(s)["gen_ai.conversation.id"] for s in runs} == {"t1"}
    # Continuation runs and tools nest under the one turn span, in order.
    tools = named(spans, "execute_tool lookup")
    assert [attrs(s)["gen_ai.tool.call.id"] for s in tools] in (
        ["c1", "c2", "c3"],
        ["c2", "c1", "c3"],
    )
    for span in tools:
        assert span.kind is SpanKind.INTERNAL
        assert attrs(span)["gen_ai.operation.name"] == "execute_tool"
        assert attrs(span)["gen_ai.tool.name"] == "lookup"
        assert attrs(span)["gen_ai.tool.type"] == "function"
        assert attrs(span)["gen_ai.tool.description"] == "Look a name up."
        assert attrs(span)["toolrelay.tool_call.status"] == "completed"
        assert "error.type" not in attrs(span)
    # Each batch runs after its run ended and before the continuation started.
    assert (runs[0].end_time or 0) <= (tools[0].start_time or 0)
    assert (tools[2].end_time or 0) <= (runs[2].start_time or 0)


async def test_a_failed_tool_has_error_type_and_the_turn_goes_on(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = ScriptedAgent(
        [tool_call("explode", {"name": "x"}, id="c1"), tool_call("nope", {}, id="c2")],
        [text("It failed.")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS, tracer_provider=provider) as engine:
            turn = await engine.run_turn("t1", "Try it")
    assert turn.status is RunStatus.completed
    spans = exporter.get_finished_spans()
    raised = only(spans, "execute_tool explode")
    assert attrs(raised)["error.type"] == "ValueError"
    assert attrs(raised)["toolrelay.tool_call.status"] == "failed"
    assert raised.status.status_code is StatusCode.ERROR
    assert raised.status.description is not None and "no x" in raised.status.description
    unknown = only(spans, "execute_tool nope")
    assert attrs(unknown)["error.type"] == "tool_error"
    assert attrs(unknown)["gen_ai.tool.call.id"] == "c2"
    assert "gen_ai.tool.description" not in attrs(unknown)
    [root] = [s for s in spans if s.parent is None]
    assert attrs(root)["toolrelay.turn.status"] == "completed"
    assert "error.type" not in attrs(root)


async def test_a_cancelled_turn_ends_every_span_and_says_so(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    started = anyio.Event()

    async def wait_forever() -> str:
        """Never returns."""
        started.set()
        await anyio.sleep_forever()
        raise AssertionError("unreachable")

    agent = ScriptedAgent([tool_call("wait_forever", {}, id="c1")])
    with anyio.fail_after(5):
        async with Engine(
            agent, tools=ToolRegistry.of(wait_forever), tracer_provider=provider
        ) as engine:
            turn = engine.start_turn("t1", "Wait")
            await started.wait()
            assert turn.cancel("stop it")
            await turn.wait_finished()
    assert turn.status is RunStatus.cancelled
    spans = exporter.get_finished_spans()
    assert len(spans) == 3  # the turn, its run, its tool: all ended
    [root] = [s for s in spans if s.parent is None]
    assert attrs(root)["toolrelay.turn.status"] == "cancelled"
    assert attrs(root)["toolrelay.turn.reason"] == "cancelled"
    assert root.status.status_code is StatusCode.UNSET
    waiting = only(spans, "execute_tool wait_forever")
    assert attrs(waiting)["toolrelay.tool_call.status"] == "failed"
    assert attrs(waiting)["error.type"] == "cancelled"
    [run] = [s for s in spans if s.name == "invoke_agent" and s.parent is not None]
    assert attrs(run)["toolrelay.run.outcome"] == "tool_calls"


async def test_a_turn_cancelled_while_streaming_ends_its_run_span_cancelled(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    gate = anyio.Event()
    agent = ScriptedAgent([text("partial"), Gate(gate)])
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS, tracer_provider=provider) as engine:
            with engine.subscribe(events=True) as notes:
                turn = engine.start_turn("t1", "Talk")
                async for note in notes:  # until the text is in: the run streams on
                    if isinstance(note, EventReceived) and isinstance(
                        note.event, TextMessageEndEvent
                    ):
                        break
            turn.cancel()
            await turn.wait_finished()
    spans = exporter.get_finished_spans()
    [run] = [s for s in spans if s.name == "invoke_agent" and s.parent is not None]
    assert attrs(run)["toolrelay.run.outcome"] == "cancelled"
    assert run.status.status_code is StatusCode.UNSET


async def test_an_approved_call_runs_in_its_span_under_the_turn_and_a_denied_one_has_none(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    @tool(needs_approval=True)
    async def remove(path: str) -> str:
        """Remove a file (a person approves each call)."""
        return f"removed {path}"

    agent = ScriptedAgent(
        [
            tool_call("remove", {"path": "/a"}, id="yes"),
            tool_call("remove", {"path": "/b"}, id="no"),
        ],
        [text("done")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(remove), tracer_provider=provider) as engine:
            with engine.subscribe(key="t1") as notes:
                turn = engine.start_turn("t1", "clean up")
                async for note in notes:
                    if isinstance(note, StateChanged) and len(turn.approvals) == 2:
                        break
            turn.approve("yes")
            turn.deny("no")
            await turn.wait_finished()
    assert turn.status is RunStatus.completed
    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.parent is None]
    [call] = named(spans, "execute_tool remove")  # the denied call never ran
    assert call.parent is not None and call.parent.span_id == root.context.span_id
    assert attrs(call)["gen_ai.tool.call.id"] == "yes"
    assert attrs(call)["toolrelay.tool_call.status"] == "completed"


async def test_a_breaker_trip_fails_the_turn_span_with_max_depth(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    def again(key: ThreadKey, run_input: RunAgentInput) -> Script:
        return [tool_call("lookup", {"name": f"n{len(run_input.messages)}"})]

    agent = ScriptedAgent(respond=again)
    with anyio.fail_after(5):
        async with Engine(
            agent, tools=TOOLS, max_depth=2, max_repeated_calls=None, tracer_provider=provider
        ) as engine:
            turn = await engine.run_turn("t1", "Loop")
    assert turn.status is RunStatus.failed
    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.parent is None]
    assert attrs(root)["toolrelay.turn.status"] == "failed"
    assert attrs(root)["toolrelay.turn.reason"] == "max_depth"
    assert attrs(root)["error.type"] == "max_depth"
    assert root.status.status_code is StatusCode.ERROR
    runs = [s for s in spans if s.name == "invoke_agent" and s.parent is not None]
    assert len(runs) == 3
    last = max(runs, key=lambda s: attrs(s)["toolrelay.run.depth"])
    assert attrs(last)["toolrelay.run.outcome"] == "max_depth"
    assert attrs(last)["error.type"] == "max_depth"
    assert len(named(spans, "execute_tool lookup")) == 2  # the third batch never ran


async def test_spans_a_tool_opens_nest_under_its_execute_tool_span_async_and_in_threads(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    tracer = provider.get_tracer("the tool's own code")
    threads: list[str] = []

    async def fetch(url: str) -> str:
        """Fetch a URL.

        Args:
            url: Where.
        """
        with tracer.start_as_current_span("GET"):
            await anyio.lowlevel.checkpoint()
        return "ok"

    def crunch(n: int) -> int:
        """Crunch a number (blocking: runs in a worker thread).

        Args:
            n: The number.
        """
        threads.append(threading.current_thread().name)
        with tracer.start_as_current_span("crunching"):
            return n * 2

    tools = ToolRegistry.of(fetch, tool(crunch))
    agent = ScriptedAgent(
        [tool_call("fetch", {"url": "x"}, id="c1"), tool_call("crunch", {"n": 2}, id="c2")],
        [text("Done.")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools, tracer_provider=provider) as engine:
            turn = await engine.run_turn("t1", "Go")
    assert turn.status is RunStatus.completed
    assert threads and threads[0] != threading.current_thread().name  # a worker thread
    spans = exporter.get_finished_spans()
    rows = tree(spans)["rows"]
    assert ("GET", "execute_tool fetch") in rows
    assert ("crunching", "execute_tool crunch") in rows
    assert len(tree(spans)["traces"]) == 1


async def test_a_provider_run_is_a_chat_span_with_its_model_and_token_usage(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    sys.path.insert(0, str(Path(__file__).parents[1] / "backends" / "providers"))
    from _gc_servers import SSE, LoopbackServer, ScriptedProvider, gemini_sse

    model = "gemini-2.5-flash"
    usage = {"promptTokenCount": 12, "candidatesTokenCount": 7, "totalTokenCount": 19}

    def chunk(part: dict[str, Any]) -> dict[str, Any]:
        candidate = {"content": {"parts": [part], "role": "model"}, "finishReason": "STOP"}
        return {"candidates": [candidate], "modelVersion": model, "usageMetadata": usage}

    script = [
        [chunk({"functionCall": {"name": "lookup", "args": {"name": "alice"}}})],
        [chunk({"text": "Alice is 42."})],
    ]
    with LoopbackServer(ScriptedProvider(gemini_sse, SSE, script)) as server:
        backend = GoogleBackend(model, api_key="loopback-key", base_url=f"{server.url}/v1beta")
        try:
            with anyio.fail_after(10):
                async with Engine(backend, tools=TOOLS, tracer_provider=provider) as engine:
                    turn = await engine.run_turn("t-g", "Who is Alice?")
        finally:
            await backend.aclose()
    assert turn.status is RunStatus.completed, turn.reason
    spans = exporter.get_finished_spans()
    chats = named(spans, f"chat {model}")
    assert len(chats) == 2
    host, port = server.url.removeprefix("http://").split(":")
    for chat in chats:
        assert chat.kind is SpanKind.CLIENT
        found = attrs(chat)
        assert found["gen_ai.operation.name"] == "chat"
        assert found["gen_ai.provider.name"] == "gcp.gemini"
        assert found["gen_ai.request.model"] == model
        assert found["gen_ai.response.model"] == model
        assert (found["gen_ai.usage.input_tokens"], found["gen_ai.usage.output_tokens"]) == (12, 7)
        assert (found["server.address"], found["server.port"]) == (host, int(port))
    root = only(spans, "invoke_agent")
    assert attrs(root)["gen_ai.request.model"] == model
    assert attrs(root)["gen_ai.provider.name"] == "gcp.gemini"
    totals = attrs(root)["gen_ai.usage.input_tokens"], attrs(root)["gen_ai.usage.output_tokens"]
    assert totals == (24, 14)


async def test_usage_from_run_finished_is_summed_per_run_and_per_turn(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    def respond(key: ThreadKey, run_input: RunAgentInput) -> Script:
        usage = [
            TokenUsage(model="m-1", input_tokens=10, output_tokens=3, cached_input_tokens=4),
            TokenUsage(model="m-2", input_tokens=1, output_tokens=1, reasoning_tokens=2),
        ]
        return [
            text("hi"),
            RunFinishedEvent(thread_id=key.thread_id, run_id=run_input.run_id, usage=usage),
        ]

    agent = ScriptedAgent(respond=respond)
    with anyio.fail_after(5):
        async with Engine(agent, tracer_provider=provider) as engine:
            await engine.run_turn(ThreadKey("t1", server="alpha"), "Hi")
    spans = exporter.get_finished_spans()
    [root] = [s for s in spans if s.parent is None]
    [run] = [s for s in spans if s.parent is not None]
    assert root.name == run.name == "invoke_agent alpha"
    assert attrs(root)["gen_ai.agent.name"] == attrs(run)["gen_ai.agent.name"] == "alpha"
    for span in (root, run):
        found = attrs(span)
        assert found["gen_ai.usage.input_tokens"] == 11
        assert found["gen_ai.usage.output_tokens"] == 4
        assert found["gen_ai.usage.cache_read.input_tokens"] == 4
        assert found["gen_ai.usage.reasoning.output_tokens"] == 2
    assert attrs(run)["gen_ai.response.model"] == "m-1"


class Broken(SpanProcessor):
    """A span processor of the embedding code that raises (on starting the spans named
    ``starting``, on ending every span)."""

    def __init__(self, starting: str) -> None:
        self.starting = starting

    def on_start(self, span: Any, parent_context: Any = None) -> None:
        if span.name.startswith(self.starting):
            raise RuntimeError("broken processor (start)")

    def on_end(self, span: ReadableSpan) -> None:
        raise RuntimeError("broken processor (end)")


@pytest.mark.parametrize("starting", ["invoke_agent", "execute_tool", "nothing"])
async def test_a_tracer_that_raises_never_fails_or_hangs_a_turn(
    starting: str, caplog: pytest.LogCaptureFixture
) -> None:
    provider = TracerProvider()
    provider.add_span_processor(Broken(starting))
    agent = ScriptedAgent([tool_call("lookup", {"name": "a"}, id="c1")], [text("ok")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=TOOLS, tracer_provider=provider) as engine:
            turn = await engine.run_turn("t1", "Go")
    provider.shutdown()
    assert turn.status is RunStatus.completed, turn.reason
    assert [m.content for m in agent.inputs[1].messages if isinstance(m, ToolMessage)] == [
        "a is 42"
    ]
    assert any("tracing failed" in r.getMessage() for r in caplog.records)


async def test_what_the_agent_names_goes_on_spans_bounded(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    long = "x" * 100_000

    def respond(key: ThreadKey, run_input: RunAgentInput) -> Script:
        if len(agent.inputs) == 1:
            return [tool_call(long, {}, id="i" * 100_000)]
        usage = [TokenUsage(model="m" * 100_000, input_tokens=1)]
        return [
            text("ok"),
            RunFinishedEvent(thread_id=key.thread_id, run_id=run_input.run_id, usage=usage),
        ]

    agent = ScriptedAgent(respond=respond)
    async with Engine(agent, tools=TOOLS, tracer_provider=provider) as engine:
        turn = await engine.run_turn("t" * 100_000, "Go")
    assert turn.status is RunStatus.completed
    spans = exporter.get_finished_spans()
    for span in spans:
        assert len(span.name) <= len("execute_tool ") + _tracing.MAX_TEXT
        for value in attrs(span).values():
            assert not isinstance(value, str) or len(value) <= _tracing.MAX_TEXT
        assert len(span.status.description or "") <= _tracing.MAX_TEXT
    [call] = [s for s in spans if s.name.startswith("execute_tool")]
    assert attrs(call)["gen_ai.tool.name"] == "x" * _tracing.MAX_TEXT
    assert attrs(call)["error.type"] == "tool_error"  # no such tool


# -- the names are the conventions' ----------------------------------------------------------


def _convention_names() -> set[str]:
    names: set[str] = set()
    for module in (gen_ai_attributes, error_attributes, server_attributes):
        names.update(
            value
            for key, value in vars(module).items()
            if key.isupper() and isinstance(value, str) and "." in value
        )
    return names


async def test_every_attribute_name_is_the_conventions_or_toolrelays_own(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    agent = ScriptedAgent(
        [tool_call("lookup", {"name": "a"}, id="c1"), tool_call("explode", {"name": "b"})],
        [text("ok")],
    )
    async with Engine(agent, tools=TOOLS, tracer_provider=provider) as engine:
        await engine.run_turn(ThreadKey("t1", server="alpha"), "Go")
    spans = exporter.get_finished_spans()
    conventions = _convention_names()
    used = {name for span in spans for name in attrs(span)}
    ours = {name for name in used if name.startswith("toolrelay.")}
    assert used - ours <= conventions, sorted(used - ours - conventions)
    assert {
        gen_ai_attributes.GEN_AI_OPERATION_NAME,
        gen_ai_attributes.GEN_AI_PROVIDER_NAME,
        gen_ai_attributes.GEN_AI_CONVERSATION_ID,
        gen_ai_attributes.GEN_AI_AGENT_NAME,
        gen_ai_attributes.GEN_AI_TOOL_NAME,
        gen_ai_attributes.GEN_AI_TOOL_CALL_ID,
        gen_ai_attributes.GEN_AI_TOOL_TYPE,
        error_attributes.ERROR_TYPE,
    } <= used
    operations = {attrs(span)["gen_ai.operation.name"] for span in spans}
    known = {value.value for value in gen_ai_attributes.GenAiOperationNameValues}
    assert operations == {"invoke_agent", "execute_tool"} and operations <= known
    assert {attrs(s)["gen_ai.tool.type"] for s in spans if "gen_ai.tool.type" in attrs(s)} <= {
        "function",
        "extension",
        "datastore",
    }


def test_provider_names_are_the_conventions_well_known_values_where_one_exists() -> None:
    known = {value.value for value in gen_ai_attributes.GenAiProviderNameValues}
    custom = {"ollama"}  # no well-known value: the conventions allow a custom one
    assert set(_tracing.PROVIDER_NAMES.values()) - custom <= known
    assert _tracing.AG_UI_PROVIDER not in known


# -- off --------------------------------------------------------------------------------------


async def test_with_no_tracer_provider_set_a_turn_is_not_traced() -> None:
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    agent = ScriptedAgent([text("hi")])
    async with Engine(agent) as engine:
        turn = engine.start_turn("t1", "Hi")
        driver = turn._driver  # let go by the turn once its task is done
        await turn.wait_finished()
    assert driver is not None and driver.trace is None
    assert _tracing.tracer_for(None) is None
    assert _tracing.tracer_for(trace.NoOpTracerProvider()) is None


async def test_a_no_op_provider_given_to_the_engine_traces_nothing() -> None:
    agent = ScriptedAgent([tool_call("lookup", {"name": "a"})], [text("hi")])
    async with Engine(agent, tools=TOOLS, tracer_provider=trace.NoOpTracerProvider()) as engine:
        turn = engine.start_turn("t1", "Hi")
        driver = turn._driver  # let go by the turn once its task is done
        await turn.wait_finished()
    assert driver is not None and driver.trace is None
    assert turn.status is RunStatus.completed


def test_without_the_opentelemetry_package_turns_run_untraced() -> None:
    script = textwrap.dedent(
        """
        import sys
        sys.modules["opentelemetry"] = None  # the package is not installed
        import anyio
        from toolrelay.backends import _propagation
        from toolrelay import Engine, EventReceived, StateChanged
        from toolrelay._runtime import _tracing
        from toolrelay import ToolRegistry
        from toolrelay.testing import ScriptedAgent, text, tool_call

        def lookup(name: str) -> str:
            '''Look up.

            Args:
                name: Who.
            '''
            return name

        async def main() -> None:
            agent = ScriptedAgent([tool_call("lookup", {"name": "a"})], [text("ok")])
            async with Engine(agent, tools=ToolRegistry.of(lookup)) as engine:
                turn = engine.start_turn("t1", "Hi")
                driver = turn._driver
                await turn.wait_finished()
            assert turn.status.value == "completed", turn.reason
            assert driver is not None and driver.trace is None
            headers = {}
            _propagation.inject_trace_context(headers)
            parent = "00-" + "1" * 32 + "-" + "2" * 16 + "-01"
            with _propagation.continued_trace({"traceparent": parent}):
                pass
            assert headers == {}
            print(_tracing.AVAILABLE, _propagation.AVAILABLE)

        anyio.run(main)
        """
    )
    src = Path(__file__).resolve().parents[2] / "src"
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env={"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]


def test_runs_are_named_for_the_backend_behind_routing_and_wrappers(
    provider: TracerProvider, exporter: InMemorySpanExporter
) -> None:
    from toolrelay.backends import AguiHttpBackend, RoutingBackend
    from toolrelay.server._rounds import RoundLimit

    gemini = GoogleBackend("gemini-2.5-flash", api_key="k", base_url="https://g.example/v1beta")
    agui = AguiHttpBackend("http://agents.example:8123/agent")
    routes = RoutingBackend({"g": gemini, "a": agui})
    routing = RoundLimit(routes, max_tool_rounds=3, continuation=True, on_stop=lambda *_: None)
    anyio.run(routes.aclose)  # only names and URLs are read: no request is made
    for server, turn_id in (("g", "turn-g"), ("a", "turn-a"), ("missing", "turn-m")):
        trace_ = _tracing.start_turn(provider, routing, ThreadKey("t", server=server), turn_id)
        assert trace_ is not None
        with trace_.run(f"run-{server}", 0, lambda: None, lambda: None):
            pass
        trace_.end(RunStatus.completed, None, 1, 0)
    runs = {attrs(s)["toolrelay.run.id"]: s for s in exporter.get_finished_spans() if s.parent}
    assert runs["run-g"].name == "chat gemini-2.5-flash"
    assert attrs(runs["run-g"])["gen_ai.provider.name"] == "gcp.gemini"
    assert attrs(runs["run-g"])["server.address"] == "g.example"
    assert attrs(runs["run-g"])["server.port"] == 443
    assert runs["run-a"].name == "invoke_agent a"
    assert attrs(runs["run-a"])["gen_ai.provider.name"] == "ag_ui"
    assert (attrs(runs["run-a"])["server.address"], attrs(runs["run-a"])["server.port"]) == (
        "agents.example",
        8123,
    )
    # No route: the turn fails before any run; it is still traced, as an AG-UI agent.
    assert attrs(runs["run-missing"])["gen_ai.provider.name"] == "ag_ui"
    assert "server.address" not in attrs(runs["run-missing"])
