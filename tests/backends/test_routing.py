"""RoutingBackend: one engine, a backend per agent server, chosen by ``ThreadKey.server``.

Unit behaviours against a pair of ScriptedAgents; then two real demo agent servers on
loopback driven by one engine, turns on both running at once.
"""

from __future__ import annotations

import socket
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import anyio
import pytest

from toolrelay import (
    AgentBackend,
    Engine,
    EventReceived,
    Limits,
    RunAllocationError,
    RunRetrying,
    RunStatus,
    TextMessage,
    ThreadKey,
    ToolRegistry,
    Turn,
    UnknownServerError,
)
from toolrelay._reasons import ReasonKind
from toolrelay.backends import AguiHttpBackend, RoutingBackend
from toolrelay.demo import DEMO_TOOLS, DemoServer
from toolrelay.protocol import (
    Event,
    ReasoningMessage,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunAgentInput,
    TextMessageContentEvent,
)
from toolrelay.testing import Gate, ScriptedAgent, text, tool_call
from toolrelay.testing._scripted import Script

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _hostile import HostileServer, Request, event, head, normal_run

pytestmark = pytest.mark.anyio

HTTPX_GC_ON_TRIO = pytest.mark.filterwarnings(
    r"ignore:Async generator '(httpx|httpcore)\S*' was garbage collected:ResourceWarning"
)


def answering(name: str) -> ScriptedAgent:
    """An agent that answers every run with its own name and the thread's id."""

    def respond(key: ThreadKey, run_input: RunAgentInput) -> Script:
        return [text(f"{name} answers {run_input.thread_id}")]

    return ScriptedAgent(respond=respond)


def texts(turn: Turn) -> list[str]:
    return [m.text for m in turn.conversation.messages if isinstance(m, TextMessage)]


async def echo(value: str) -> str:
    """Echo a value."""
    return value


class ReasoningAgent(ScriptedAgent):
    """A scripted agent that asks for its reasoning back, as the Anthropic backend does."""

    takes_reasoning: ClassVar[bool] = True


THINKING: list[Event] = [
    ReasoningMessageStartEvent(message_id="r1"),
    ReasoningMessageContentEvent(message_id="r1", delta="let me think"),
    ReasoningMessageEndEvent(message_id="r1"),
]


def thinks_then_calls(agent_type: type[ScriptedAgent]) -> ScriptedAgent:
    return agent_type([*THINKING, tool_call("echo", {"value": "x"})], [text("done")])


def reasoning_sent(agent: ScriptedAgent) -> list[str]:
    """The reasoning the agent's continuation run received."""
    return [m.content for m in agent.inputs[1].messages if isinstance(m, ReasoningMessage)]


# -- construction --------------------------------------------------------------------------


def test_the_engine_accepts_a_routing_backend() -> None:
    routing = RoutingBackend({"alpha": ScriptedAgent(), "beta": ScriptedAgent()})
    assert isinstance(routing, AgentBackend)
    assert Engine(routing).backend is routing
    assert sorted(routing.routes) == ["alpha", "beta"]


def test_bad_routes_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="at least one route"):
        RoutingBackend({})
    with pytest.raises(TypeError, match="the route 'beta' is not an AgentBackend"):
        RoutingBackend({"alpha": ScriptedAgent(), "beta": "http://127.0.0.1:1/"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="default='gamma' is not a route"):
        RoutingBackend({"alpha": ScriptedAgent()}, default="gamma")


# -- routing -------------------------------------------------------------------------------


async def test_each_thread_reaches_its_own_server_while_both_run() -> None:
    alpha_gate, beta_gate = anyio.Event(), anyio.Event()
    alpha = ScriptedAgent([text("from alpha"), Gate(alpha_gate), text("alpha done")])
    beta = ScriptedAgent([text("from beta"), Gate(beta_gate), text("beta done")])
    routing = RoutingBackend({"alpha": alpha, "beta": beta})
    a_key, b_key = ThreadKey("t-a", server="alpha"), ThreadKey("t-b", server="beta")
    with anyio.fail_after(5):
        async with Engine(routing) as engine:
            a_turn = engine.start_turn(a_key, "hi alpha")
            b_turn = engine.start_turn(b_key, "hi beta")
            await anyio.wait_all_tasks_blocked()
            # Both runs are open at once, each on its own agent.
            assert (alpha.open_streams, beta.open_streams) == (1, 1)
            beta_gate.set()
            await b_turn.wait_finished()
            assert not a_turn.status.is_final
            alpha_gate.set()
            await a_turn.wait_finished()
    assert [r.key for r in alpha.records] == [a_key]
    assert [r.key for r in beta.records] == [b_key]
    assert texts(a_turn) == ["from alpha", "alpha done"]
    assert texts(b_turn) == ["from beta", "beta done"]
    assert a_turn.status is b_turn.status is RunStatus.completed


async def test_continuations_stay_on_the_threads_server() -> None:
    alpha = ScriptedAgent([tool_call("echo", {"value": "a"})], [text("alpha answer")])
    beta = answering("beta")
    tools = ToolRegistry().register(echo)
    async with Engine(RoutingBackend({"alpha": alpha, "beta": beta}), tools=tools) as engine:
        turn = await engine.run_turn(ThreadKey("t", server="alpha"), "go")
    assert turn.status is RunStatus.completed
    assert alpha.run_count == 2 and alpha.allocation_count == 2
    assert beta.run_count == beta.allocation_count == 0


async def test_an_unknown_server_fails_the_turn_typed_before_any_call() -> None:
    alpha, beta = answering("alpha"), answering("beta")
    routing = RoutingBackend({"beta": beta, "alpha": alpha})
    async with Engine(routing) as engine:
        turn = await engine.run_turn(ThreadKey("t", server="gamma"), "hello")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.kind is ReasonKind.BACKEND_ERROR
    assert turn.reason.code == "unknown_server"
    assert "'gamma'" in turn.reason.message
    assert "'alpha', 'beta'" in turn.reason.message
    assert alpha.allocation_count == beta.allocation_count == 0
    assert alpha.run_count == beta.run_count == 0


def test_the_unknown_server_error_is_a_run_allocation_error() -> None:
    routing = RoutingBackend({"alpha": ScriptedAgent()})
    with pytest.raises(UnknownServerError) as caught:
        routing.backend_for(ThreadKey("t", server="alhpa"))
    assert isinstance(caught.value, RunAllocationError)
    assert (caught.value.server, caught.value.known) == ("alhpa", ("alpha",))
    with pytest.raises(UnknownServerError, match="names no server"):
        routing.run(ThreadKey("t"), RunAgentInput(thread_id="t", run_id="r", messages=[]))


async def test_the_default_serves_threads_naming_no_server_only() -> None:
    alpha, beta = answering("alpha"), answering("beta")
    routing = RoutingBackend({"alpha": alpha, "beta": beta}, default="beta")
    async with Engine(routing) as engine:
        plain = await engine.run_turn("plain", "hello")
        typo = await engine.run_turn(ThreadKey("typo", server="bta"), "hello")
    assert texts(plain) == ["beta answers plain"]
    assert typo.reason is not None and typo.reason.code == "unknown_server"
    assert [r.key.thread_id for r in beta.records] == ["plain"]
    assert alpha.run_count == 0


async def test_without_a_default_a_thread_naming_no_server_fails() -> None:
    alpha = answering("alpha")
    async with Engine(RoutingBackend({"alpha": alpha})) as engine:
        turn = await engine.run_turn("plain", "hello")
    assert turn.reason is not None and turn.reason.code == "unknown_server"
    assert "names no server" in turn.reason.message
    assert alpha.allocation_count == 0


async def test_the_routes_own_allocation_is_used() -> None:
    alpha = ScriptedAgent([text("hi")], allocate=True)
    async with Engine(RoutingBackend({"alpha": alpha})) as engine:
        turn = await engine.run_turn(ThreadKey("t", server="alpha"), "hello")
    assert alpha.inputs[0].run_id == "srv-run-1"
    assert turn.status is RunStatus.completed


# -- what the engine reads of a backend ---------------------------------------------------


async def test_reasoning_goes_only_to_the_routes_that_take_it() -> None:
    alpha, beta = thinks_then_calls(ReasoningAgent), thinks_then_calls(ScriptedAgent)
    routing = RoutingBackend({"alpha": alpha, "beta": beta})
    assert routing.takes_reasoning is True
    tools = ToolRegistry().register(echo)
    async with Engine(routing, tools=tools) as engine:
        async with anyio.create_task_group() as group:
            group.start_soon(engine.run_turn, ThreadKey("t", server="alpha"), "hi")
            group.start_soon(engine.run_turn, ThreadKey("t", server="beta"), "hi")
    assert reasoning_sent(alpha) == ["let me think"]
    assert reasoning_sent(beta) == []


@pytest.mark.parametrize("include", [True, False])
async def test_an_explicit_include_reasoning_holds_on_every_route(include: bool) -> None:
    alpha, beta = thinks_then_calls(ReasoningAgent), thinks_then_calls(ScriptedAgent)
    routing = RoutingBackend({"alpha": alpha, "beta": beta})
    tools = ToolRegistry().register(echo)
    async with Engine(routing, tools=tools, include_reasoning=include) as engine:
        await engine.run_turn(ThreadKey("t", server="alpha"), "hi")
        await engine.run_turn(ThreadKey("t", server="beta"), "hi")
    expected = ["let me think"] if include else []
    assert reasoning_sent(alpha) == reasoning_sent(beta) == expected


def test_no_route_taking_reasoning_means_the_engine_sends_none() -> None:
    routing = RoutingBackend({"alpha": ScriptedAgent(), "beta": ScriptedAgent()})
    assert routing.takes_reasoning is False


def test_limits_are_the_routes_when_they_agree_else_none() -> None:
    small = Limits(max_event_bytes=1024)
    agreeing = RoutingBackend(
        {"a": AguiHttpBackend("http://127.0.0.1:1/", limits=small), "b": ScriptedAgent()}
    )
    assert agreeing.limits == small
    assert Engine(agreeing).limits == small
    differing = RoutingBackend(
        {
            "a": AguiHttpBackend("http://127.0.0.1:1/", limits=small),
            "b": AguiHttpBackend("http://127.0.0.1:1/"),
        }
    )
    assert differing.limits is None
    assert Engine(differing).limits == Limits()


async def test_closing_the_router_closes_each_route_once() -> None:
    a = AguiHttpBackend("http://127.0.0.1:1/")
    b = AguiHttpBackend("http://127.0.0.1:1/")
    routing = RoutingBackend({"a": a, "a-again": a, "b": b, "scripted": ScriptedAgent()})
    async with routing:
        open_inside = (a.client.is_closed, b.client.is_closed)
    assert open_inside == (False, False)
    assert (a.client.is_closed, b.client.is_closed) == (True, True)


# -- two real servers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def two_servers() -> Iterator[tuple[DemoServer, DemoServer]]:
    """Two demo agents, each in a thread with its own loop, on their own ports."""
    with DemoServer() as alpha, DemoServer() as beta:
        yield alpha, beta


def thread_ids(server: DemoServer) -> set[str]:
    return {r.thread_id for r in server.app.requests}


@HTTPX_GC_ON_TRIO
async def test_two_real_servers_each_serve_their_threads_concurrently(
    two_servers: tuple[DemoServer, DemoServer],
) -> None:
    alpha_server, beta_server = two_servers
    assert alpha_server.url != beta_server.url
    suffix = uuid.uuid4().hex[:8]
    a_key = ThreadKey(f"secret-{suffix}", server="alpha")
    b_key = ThreadKey(f"weather-{suffix}", server="beta")
    routing = RoutingBackend(
        {"alpha": AguiHttpBackend(alpha_server.url), "beta": AguiHttpBackend(beta_server.url)}
    )
    turns: dict[str, Turn] = {}

    async def run(name: str, key: ThreadKey, message: str) -> None:
        turns[name] = await engine.run_turn(key, message)

    with anyio.fail_after(20):
        async with routing, Engine(routing, tools=DEMO_TOOLS) as engine:
            async with anyio.create_task_group() as group:
                group.start_soon(run, "alpha", a_key, "what are the secret numbers?")
                group.start_soon(run, "beta", b_key, "what is the weather in the capital?")
    assert turns["alpha"].status is turns["beta"].status is RunStatus.completed
    assert texts(turns["alpha"])[-1] == "Alice's secret number is 42 and Bob's secret number is 7."
    assert "weather" in texts(turns["beta"])[-1].lower()
    # Each server saw its thread's runs (the first and the continuation), never the other's.
    alpha_runs = [r for r in alpha_server.app.requests if r.thread_id == a_key.thread_id]
    beta_runs = [r for r in beta_server.app.requests if r.thread_id == b_key.thread_id]
    assert len(alpha_runs) == 2 and len(beta_runs) == 3
    assert b_key.thread_id not in thread_ids(alpha_server)
    assert a_key.thread_id not in thread_ids(beta_server)


@HTTPX_GC_ON_TRIO
async def test_two_real_servers_stream_at_the_same_time(
    two_servers: tuple[DemoServer, DemoServer],
) -> None:
    alpha_server, beta_server = two_servers
    suffix = uuid.uuid4().hex[:8]
    a_key = ThreadKey(f"slow-a-{suffix}", server="alpha")
    b_key = ThreadKey(f"slow-b-{suffix}", server="beta")
    routing = RoutingBackend(
        {"alpha": AguiHttpBackend(alpha_server.url), "beta": AguiHttpBackend(beta_server.url)}
    )
    with anyio.fail_after(20):
        async with routing, Engine(routing) as engine:
            with engine.subscribe(events=True) as notifications:
                a_turn = engine.start_turn(a_key, "something slow please")
                b_turn = engine.start_turn(b_key, "something slow please")
                # Wait until each server streams answer text: both are then open at once.
                streaming: set[ThreadKey] = set()
                async for notification in notifications:
                    if isinstance(notification, EventReceived) and isinstance(
                        notification.event, TextMessageContentEvent
                    ):
                        streaming.add(notification.key)
                        if streaming == {a_key, b_key}:
                            break
            assert not a_turn.status.is_final and not b_turn.status.is_final
            assert a_key.thread_id in thread_ids(alpha_server)
            assert b_key.thread_id in thread_ids(beta_server)
            a_turn.cancel()
            b_turn.cancel()
            await a_turn.wait_finished()
            await b_turn.wait_finished()
    assert a_turn.status is b_turn.status is RunStatus.cancelled
    assert b_key.thread_id not in thread_ids(alpha_server)
    assert a_key.thread_id not in thread_ids(beta_server)


@HTTPX_GC_ON_TRIO
async def test_an_unknown_server_makes_no_request_to_the_real_servers(
    two_servers: tuple[DemoServer, DemoServer],
) -> None:
    alpha_server, beta_server = two_servers
    before = (len(alpha_server.app.requests), len(beta_server.app.requests))
    routing = RoutingBackend(
        {"alpha": AguiHttpBackend(alpha_server.url), "beta": AguiHttpBackend(beta_server.url)}
    )
    async with routing, Engine(routing) as engine:
        turn = await engine.run_turn(ThreadKey("lost", server="gamma"), "hello")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.code == "unknown_server"
    assert (len(alpha_server.app.requests), len(beta_server.app.requests)) == before
    assert "lost" not in thread_ids(alpha_server) | thread_ids(beta_server)


@HTTPX_GC_ON_TRIO
async def test_a_routes_retries_reach_the_engines_observers(
    two_servers: tuple[DemoServer, DemoServer],
) -> None:
    alpha_server, _ = two_servers

    def busy_once(conn: socket.socket, request: Request, number: int) -> None:
        if number == 0:
            conn.sendall(head("503 Service Unavailable", "text/plain", ["Retry-After: 0"]))
        else:
            conn.sendall(head() + normal_run(text="busy no more"))

    with HostileServer(busy_once) as busy:
        routing = RoutingBackend(
            {"alpha": AguiHttpBackend(alpha_server.url), "busy": AguiHttpBackend(busy.url)}
        )
        b_key = ThreadKey("t", server="busy")
        async with routing, Engine(routing) as engine:
            seen = engine.subscribe()
            turn = await engine.run_turn(b_key, "hi")
        with seen:
            notes = [n async for n in seen if isinstance(n, RunRetrying)]
    assert texts(turn) == ["busy no more"]
    assert [(n.key, n.attempt, n.code) for n in notes] == [(b_key, 1, "503")]
    assert len(busy.requests) == 2


@HTTPX_GC_ON_TRIO
async def test_the_engines_limits_govern_every_route() -> None:
    big = event('{"type":"CUSTOM","name":"x","value":"' + "y" * 5000 + '"}')

    def oversized(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head() + normal_run()[:-100] + big)

    with HostileServer(oversized) as server:
        # The route keeps its default bounds (8 MiB); the engine's are what count.
        routing = RoutingBackend({"big": AguiHttpBackend(server.url)})
        async with routing, Engine(routing, limits=Limits(max_event_bytes=1000)) as engine:
            turn = await engine.run_turn(ThreadKey("t", server="big"), "hi")
    assert turn.reason is not None and turn.reason.code == "max_event_bytes"
