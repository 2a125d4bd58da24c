"""The engine against the demo agent over real loopback HTTP: every scenario, its
conversation and its terminal state; timeouts, refused connections and cancellation on
a real socket."""

from __future__ import annotations

import socket
import time
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import httpx
import pytest

from toolrelay import (
    ActivityKind,
    Engine,
    RunStatus,
    StateChanged,
    TextMessage,
    ToolCallStatus,
    ToolRegistry,
    Turn,
)
from toolrelay._reasons import ReasonKind
from toolrelay.backends import AguiHttpBackend
from toolrelay.demo import DEMO_TOOLS, DemoAgent, DemoServer, get_weather, serve_demo
from toolrelay.protocol import AssistantMessage, RunAgentInput, ToolMessage

pytestmark = pytest.mark.anyio

HTTPX_GC_ON_TRIO = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx|httpcore)\S*' was garbage collected:ResourceWarning"
)


@pytest.fixture(scope="module")
def demo_server() -> Iterator[DemoServer]:
    """The demo agent in a thread with its own loop: shared by the asyncio and trio runs."""
    with DemoServer() as server:
        yield server


async def run_scenario(
    url: str,
    scenario: str,
    *,
    tools: ToolRegistry = DEMO_TOOLS,
    max_depth: int = 10,
    max_repeated_calls: int | None = 3,
    **backend_options: Any,
) -> Turn:
    async with AguiHttpBackend(url, **backend_options) as backend:
        async with Engine(
            backend,
            tools=tools,
            max_depth=max_depth,
            max_repeated_calls=max_repeated_calls,
            forwarded_props={"scenario": scenario},
        ) as engine:
            thread = f"thread-{scenario}-{uuid.uuid4().hex[:8]}"
            return await engine.run_turn(thread, f"please do {scenario}")


def texts(turn: Turn) -> list[str]:
    return [m.text for m in turn.conversation.messages if isinstance(m, TextMessage)]


def inputs_for(server: DemoServer, turn: Turn) -> list[RunAgentInput]:
    return [r for r in server.app.requests if r.thread_id == turn.key.thread_id]


async def test_secret_two_calls_in_one_run_then_an_answer(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "secret")
    assert turn.status is RunStatus.completed
    assert texts(turn) == [
        "Let me look up both secret numbers.",
        "Alice's secret number is 42 and Bob's secret number is 7.",
    ]
    calls = list(turn.conversation.tool_calls())
    assert [(c.name, c.arguments, c.status) for c in calls] == [
        ("get_secret_number", '{"name":"alice"}', ToolCallStatus.completed),
        ("get_secret_number", '{"name":"bob"}', ToolCallStatus.completed),
    ]
    stats = turn.statistics()
    assert (stats.runs, stats.depth) == (2, 1)
    first, second = inputs_for(demo_server, turn)
    # The continuation carries one assistant message (text + both calls) and the results.
    assistant, *results = second.messages[1:]
    assert isinstance(assistant, AssistantMessage)
    assert assistant.content == "Let me look up both secret numbers."
    assert [c.id for c in assistant.tool_calls or ()] == [c.id for c in calls]
    assert [(m.tool_call_id, m.content) for m in results if isinstance(m, ToolMessage)] == [
        (calls[0].id, "42"),
        (calls[1].id, "7"),
    ]
    assert second.parent_run_id == first.run_id
    assert [t.name for t in second.tools] == list(DEMO_TOOLS.names)


async def test_multihop_uses_the_first_result_in_the_second_call(
    demo_server: DemoServer,
) -> None:
    turn = await run_scenario(demo_server.url, "multihop")
    assert turn.status is RunStatus.completed
    calls = list(turn.conversation.tool_calls())
    assert [(c.name, c.arguments) for c in calls] == [
        ("lookup_city", '{"person":"alice"}'),
        ("get_weather", '{"city":"Paris"}'),
    ]
    assert texts(turn)[-1] == (
        "Alice lives in Paris, where the weather today is sunny, 21 degrees Celsius."
    )
    assert turn.statistics().runs == 3


async def test_zero_argument_tool_streams_no_args_and_runs(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "zero-arg")
    assert turn.status is RunStatus.completed
    (call,) = turn.conversation.tool_calls()
    assert (call.name, call.arguments) == ("list_people", "")
    assert call.result is not None and call.result.content == '["alice","bob","carol"]'
    assert texts(turn) == ["I know Alice, Bob and Carol."]
    continuation = inputs_for(demo_server, turn)[1]
    (assistant,) = [m for m in continuation.messages if isinstance(m, AssistantMessage)]
    assert (assistant.tool_calls or [])[0].function.arguments == "{}"


async def test_text_only_completes_in_one_run(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "text")
    assert turn.status is RunStatus.completed
    assert texts(turn)[0].startswith("Hello! I am toolrelay's demo agent.")
    assert turn.statistics().runs == 1
    assert list(turn.conversation.tool_calls()) == []


async def test_loop_trips_the_circuit_breaker(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "loop", max_depth=3, max_repeated_calls=None)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.MAX_DEPTH
    assert turn.statistics().runs == 4
    assert len(list(turn.conversation.tool_calls())) == 3
    assert [c.name for c in turn.abandoned_calls] == ["get_secret_number"]
    assert texts(turn)[-1] == "Let me check Alice's number again (attempt 4)."


async def test_broken_stream_fails_typed_and_keeps_the_text(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "broken")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.kind is ReasonKind.TRANSPORT_ERROR
    assert turn.reason.code == "stream_dropped"
    assert texts(turn) == ["Let me look up both secret numbers."]
    (abandoned,) = turn.abandoned_calls
    assert abandoned.status is ToolCallStatus.failed
    assert abandoned.arguments == '{"name": "al'


async def test_run_error_ends_the_turn_with_the_agents_reason(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "error")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.AGENT_ERROR, "overloaded")
    assert texts(turn) == ["Let me think about that."]


@HTTPX_GC_ON_TRIO
async def test_malformed_data_fails_typed_and_keeps_the_text(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "malformed")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.PROTOCOL_ERROR
    assert "not a JSON object" in turn.reason.message
    assert texts(turn) == ["Here comes a broken event."]


async def test_the_agent_only_calls_tools_the_client_declares(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "multihop", tools=ToolRegistry.of(get_weather))
    assert turn.status is RunStatus.completed
    assert list(turn.conversation.tool_calls()) == []
    assert texts(turn) == [
        "I would need the lookup_city tool for that, but this client does not offer it "
        "(tools offered: get_weather)."
    ]


async def test_a_multi_run_turn_reuses_one_connection(demo_server: DemoServer) -> None:
    turn = await run_scenario(demo_server.url, "multihop")
    peers = [
        peer
        for request, peer in zip(demo_server.app.requests, demo_server.app.peers, strict=True)
        if request.thread_id == turn.key.thread_id
    ]
    assert len(peers) == 3
    assert len(set(peers)) == 1, "each finished run's stream is drained, the socket reused"


@HTTPX_GC_ON_TRIO
async def test_a_silent_server_is_a_read_timeout(demo_server: DemoServer) -> None:
    started = time.monotonic()
    async with AguiHttpBackend(demo_server.url, timeout=httpx.Timeout(5.0, read=0.1)) as backend:
        async with Engine(backend, forwarded_props={"scenario": "slow", "delay": 1.0}) as engine:
            turn = await engine.run_turn("thread-timeout", "slow please")
    assert time.monotonic() - started < 2.0
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == "read_timeout"
    assert len(turn.conversation.messages) == 1  # the user's message; nothing came


async def test_connection_refused_is_unreachable() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    turn = await run_scenario(f"http://127.0.0.1:{port}/", "text")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.TRANSPORT_ERROR, "connect_error")


@HTTPX_GC_ON_TRIO
async def test_cancelling_a_turn_closes_the_http_stream_promptly() -> None:
    app = DemoAgent()
    async with serve_demo(app) as url, AguiHttpBackend(url) as backend:
        async with Engine(backend, forwarded_props={"scenario": "slow"}) as engine:
            updates = engine.subscribe()
            turn = engine.start_turn("thread-cancel", "a long story")
            with anyio.fail_after(5):
                async for update in updates:
                    if (
                        isinstance(update, StateChanged)
                        and update.snapshot.activity.kind is ActivityKind.STREAMING_TEXT
                    ):
                        break
            await anyio.sleep(0.2)  # a few words arrive
            cancelled_at = time.monotonic()
            assert turn.cancel()
            with anyio.fail_after(1):
                await turn.wait_finished()
            assert time.monotonic() - cancelled_at < 0.5
            updates.close()
        assert turn.status is RunStatus.cancelled
        assert texts(turn)[0].startswith("word1 word2")
        with anyio.fail_after(2):
            while app.disconnects < 1:  # noqa: ASYNC110 (the server may run in a thread)
                await anyio.sleep(0.01)
        assert app.disconnects == 1
        assert app.completed == 0
