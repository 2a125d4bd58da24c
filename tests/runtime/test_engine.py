"""The engine end to end against the mock LLM (ScriptedAgent).

Covers the reference designs' orchestration test table (rows 1-20), the safety
invariant table (every exit path ends in a terminal state) and Slice 2's scenarios.
"""

from __future__ import annotations

import json
import logging
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay import (
    ActivityKind,
    ClosedError,
    Engine,
    EventReceived,
    Limits,
    Notification,
    RegistryChange,
    RunAllocationError,
    RunHandle,
    RunRegistered,
    RunRegistry,
    RunReplaced,
    RunStatus,
    RunUnregistered,
    StateChanged,
    StreamDroppedError,
    TextMessage,
    ToolCallBatch,
    ToolCallFinished,
    ToolCallStatus,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    Turn,
    TurnSnapshot,
    tool,
)
from toolrelay._core import ChatMessage, _processor
from toolrelay._reasons import ReasonKind
from toolrelay.backends._base import EventStream, ThreadKey
from toolrelay.protocol import (
    AssistantMessage,
    RunAgentInput,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    ToolCallArgsEvent,
    ToolMessage,
    UserMessage,
)
from toolrelay.sansio import EventProcessor
from toolrelay.testing import (
    Gate,
    Hang,
    Raise,
    ScriptedAgent,
    run_error,
    run_started,
    server_tool_call,
    text,
    tool_call,
)
from toolrelay.testing._scripted import Script

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _streams import drain

pytestmark = pytest.mark.anyio

T1 = ThreadKey("t1")
SECRETS = {"alice": 42, "bob": 7}


async def get_secret_number(name: str) -> int:
    """Look up a person's secret number.

    Args:
        name: Whose number.
    """
    return SECRETS[name]


SECRET_TOOLS = ToolRegistry.of(get_secret_number)


# -- helpers ----------------------------------------------------------------------------


def snapshots(notes: list[Notification], key: ThreadKey | None = None) -> list[TurnSnapshot]:
    return [
        n.snapshot
        for n in notes
        if isinstance(n, StateChanged) and (key is None or n.snapshot.key == key)
    ]


def status_of(turn: Turn) -> RunStatus:
    """``turn.status``, read through a call so that type checkers do not narrow it."""
    return turn.status


def tool_messages(run_input: RunAgentInput) -> list[ToolMessage]:
    return [m for m in run_input.messages if isinstance(m, ToolMessage)]


def assistant_calls(run_input: RunAgentInput) -> list[AssistantMessage]:
    return [m for m in run_input.messages if isinstance(m, AssistantMessage) and m.tool_calls]


def batches(turn: Turn) -> list[ToolCallBatch]:
    return [m for m in turn.conversation.messages if isinstance(m, ToolCallBatch)]


def has_tool_results(run_input: RunAgentInput) -> bool:
    return any(isinstance(m, ToolMessage) for m in run_input.messages)


@pytest.fixture
def subscriptions() -> Iterator[list[MemoryObjectReceiveStream[Notification]]]:
    """Receive streams a test opens; closed at teardown (no ResourceWarning)."""
    streams: list[MemoryObjectReceiveStream[Notification]] = []
    yield streams
    for stream in streams:
        stream.close()


def subscribe(
    engine: Engine,
    streams: list[MemoryObjectReceiveStream[Notification]],
    *,
    focused_only: bool = False,
    events: bool = False,
) -> MemoryObjectReceiveStream[Notification]:
    stream = engine.subscribe(focused_only=focused_only, events=events)
    streams.append(stream)
    return stream


@pytest.fixture
def lifecycle() -> Iterator[Callable[[RunRegistry], MemoryObjectReceiveStream[RegistryChange]]]:
    streams: list[MemoryObjectReceiveStream[RegistryChange]] = []

    def _subscribe(registry: RunRegistry) -> MemoryObjectReceiveStream[RegistryChange]:
        stream = registry.subscribe()
        streams.append(stream)
        return stream

    yield _subscribe
    for stream in streams:
        stream.close()


# -- happy paths (table rows 1-4) ----------------------------------------------------------


async def test_single_tool_call_continues_and_completes() -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [text("Alice's number is 42")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "What is Alice's number?")
    assert turn.status is RunStatus.completed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.COMPLETED
    kinds = [type(m).__name__ for m in turn.conversation.messages]
    assert kinds == ["UserMessage", "ToolCallBatch", "TextMessage"]
    [batch] = batches(turn)
    [call] = batch.calls
    assert call.status is ToolCallStatus.completed
    assert call.result == ToolResult.success("42")
    assert agent.run_count == 2
    assert turn.tool_calls == ()


async def test_the_default_turn_and_run_ids_are_random_uuid4s() -> None:
    agent = ScriptedAgent(*[[tool_call("get_secret_number", {"name": "alice"})], [text("42")]] * 3)
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turns = [await engine.run_turn(f"t{i}", "What is Alice's number?") for i in range(3)]
    ids = [turn.turn_id for turn in turns] + [run.run_id for run in agent.inputs]
    assert len(ids) == len(set(ids)) == 3 + 6
    for value in ids:
        parsed = uuid.UUID(hex=value)
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122
        assert parsed.hex == value


async def test_secret_numbers_happy_path() -> None:
    agent = ScriptedAgent(
        [
            tool_call("get_secret_number", {"name": "alice"}, id="call-alice"),
            tool_call("get_secret_number", {"name": "bob"}, id="call-bob"),
        ],
        [text("Alice's number is 42, Bob's is 7", id="answer")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "What are the secret numbers?")
            conversation = engine.conversation("t1")

    assert turn.status is RunStatus.completed
    assert conversation is turn.conversation
    user, batch, answer = conversation.messages
    assert isinstance(user, UserMessage)
    assert user.content == "What are the secret numbers?"
    assert isinstance(batch, ToolCallBatch)
    assert [(c.id, c.name, c.status, c.result) for c in batch.calls] == [
        ("call-alice", "get_secret_number", ToolCallStatus.completed, ToolResult.success("42")),
        ("call-bob", "get_secret_number", ToolCallStatus.completed, ToolResult.success("7")),
    ]
    assert isinstance(answer, TextMessage)
    assert answer.complete and not answer.interrupted
    assert "42" in answer.text and "7" in answer.text

    # What the model received in the continuation run.
    assert agent.run_count == 2
    first, second = agent.inputs
    assert second.thread_id == "t1"
    assert second.run_id != first.run_id
    assert second.parent_run_id == first.run_id
    assert list(second.tools) == list(SECRET_TOOLS.definitions())
    assert [t.name for t in second.tools] == ["get_secret_number"]
    user_msg, assistant, alice, bob = second.messages
    assert user_msg == UserMessage(id=user.id, content="What are the secret numbers?")
    assert isinstance(assistant, AssistantMessage)
    assert assistant.tool_calls is not None
    assert [
        (c.id, c.function.name, json.loads(c.function.arguments)) for c in assistant.tool_calls
    ] == [
        ("call-alice", "get_secret_number", {"name": "alice"}),
        ("call-bob", "get_secret_number", {"name": "bob"}),
    ]
    assert isinstance(alice, ToolMessage) and isinstance(bob, ToolMessage)
    assert (alice.tool_call_id, alice.content, alice.error) == ("call-alice", "42", None)
    assert (bob.tool_call_id, bob.content, bob.error) == ("call-bob", "7", None)
    assert alice.id != bob.id

    # ... and on the wire (camelCase, as AG-UI servers read it).
    wire = json.loads(msgspec.json.encode(second))
    assert wire["parentRunId"] == first.run_id
    assert [c["id"] for c in wire["messages"][1]["toolCalls"]] == ["call-alice", "call-bob"]
    assert [m["toolCallId"] for m in wire["messages"][2:]] == ["call-alice", "call-bob"]
    assert wire["tools"][0]["name"] == "get_secret_number"
    assert wire["tools"][0]["parameters"]["required"] == ["name"]


async def test_multi_hop_increments_depth_per_hop() -> None:
    calls: list[str] = []

    async def step_a() -> str:
        calls.append("a")
        return "A done"

    async def step_b() -> str:
        calls.append("b")
        return "B done"

    agent = ScriptedAgent(
        [tool_call("step_a", id="ca")],
        [tool_call("step_b", id="cb")],
        [text("all done")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(step_a, step_b)) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    assert agent.run_count == 3
    assert turn.depth == 2
    assert turn.snapshot().run_count == 3
    assert calls == ["a", "b"]
    # Run 3 carries both hops' results, in order; each continuation names its parent.
    first, second, third = agent.inputs
    assert [m.tool_call_id for m in tool_messages(second)] == ["ca"]
    assert [m.tool_call_id for m in tool_messages(third)] == ["ca", "cb"]
    assert second.parent_run_id == first.run_id
    assert third.parent_run_id == second.run_id


async def test_text_and_tool_calls_in_the_same_run_are_both_kept() -> None:
    agent = ScriptedAgent(
        [
            text("Let me look that up.", id="m1"),
            tool_call("get_secret_number", {"name": "bob"}, id="c1", parent_message_id="m1"),
        ],
        [text("Bob's number is 7", id="m2")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "Bob?")
    assert turn.status is RunStatus.completed
    kinds = [type(m).__name__ for m in turn.conversation.messages]
    assert kinds == ["UserMessage", "TextMessage", "ToolCallBatch", "TextMessage"]
    assert [t.text for t in turn.conversation.texts()] == [
        "Let me look that up.",
        "Bob's number is 7",
    ]
    # The text and the calls it announces go back as ONE assistant message.
    _, assistant, result = agent.inputs[1].messages
    assert isinstance(assistant, AssistantMessage)
    assert assistant.id == "m1"
    assert assistant.content == "Let me look that up."
    assert assistant.tool_calls is not None
    assert [c.id for c in assistant.tool_calls] == ["c1"]
    assert isinstance(result, ToolMessage) and result.content == "7"


async def test_text_and_unparented_tool_calls_go_back_as_two_messages() -> None:
    agent = ScriptedAgent(
        [text("Checking.", id="m1"), tool_call("get_secret_number", {"name": "bob"}, id="c1")],
        [text("7")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            await engine.run_turn("t1", "Bob?")
    _, said, calls, result = agent.inputs[1].messages
    assert said == AssistantMessage(id="m1", content="Checking.")
    assert isinstance(calls, AssistantMessage) and calls.id != "m1"
    assert calls.tool_calls is not None and [c.id for c in calls.tool_calls] == ["c1"]
    assert isinstance(result, ToolMessage) and result.tool_call_id == "c1"


async def test_a_zero_argument_tool_is_sent_back_with_empty_object_arguments() -> None:
    pinged: list[bool] = []

    async def ping() -> str:
        pinged.append(True)
        return "pong"

    agent = ScriptedAgent([tool_call("ping", None, id="c1")], [text("ok")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(ping)) as engine:
            turn = await engine.run_turn("t1", "ping?")
    assert turn.status is RunStatus.completed
    assert pinged == [True]
    [call] = batches(turn)[0].calls
    assert call.arguments == ""  # no TOOL_CALL_ARGS arrived
    [assistant] = assistant_calls(agent.inputs[1])
    assert assistant.tool_calls is not None
    assert assistant.tool_calls[0].function.arguments == "{}"
    wire = json.loads(msgspec.json.encode(agent.inputs[1]))
    assert wire["messages"][1]["toolCalls"][0]["function"]["arguments"] == "{}"
    assert tool_messages(agent.inputs[1])[0].content == "pong"


async def test_a_server_side_tool_is_not_executed_and_its_result_is_sent_back() -> None:
    executed: list[str] = []

    async def web_search(q: str) -> str:
        executed.append(q)
        return "client result"

    agent = ScriptedAgent(
        [
            server_tool_call("web_search", {"q": "weather"}, "sunny", id="srv", message_id="m-srv"),
            tool_call("get_secret_number", {"name": "alice"}, id="c1"),
        ],
        [text("It is sunny and Alice has 42")],
    )
    tools = ToolRegistry.of(web_search, get_secret_number)
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools) as engine:
            turn = await engine.run_turn("t1", "weather and alice?")
    assert turn.status is RunStatus.completed
    assert executed == []  # the agent ran it; the client must not run it again
    [batch] = batches(turn)
    assert [(c.id, c.status, c.result) for c in batch.calls] == [
        ("srv", ToolCallStatus.completed, ToolResult.success("sunny")),
        ("c1", ToolCallStatus.completed, ToolResult.success("42")),
    ]
    results = tool_messages(agent.inputs[1])
    assert [(m.id, m.tool_call_id, m.content) for m in results] == [
        ("m-srv", "srv", "sunny"),
        (results[1].id, "c1", "42"),
    ]


async def test_a_run_with_only_a_server_side_tool_completes_without_continuation() -> None:
    agent = ScriptedAgent([server_tool_call("web_search", {"q": "x"}, "found", id="srv")])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = await engine.run_turn("t1", "search")
    assert turn.status is RunStatus.completed
    assert agent.run_count == 1
    [batch] = batches(turn)
    assert batch.calls[0].result == ToolResult.success("found")


# -- tool failures (rows 5, 6; promise 2) --------------------------------------------------


async def test_a_failing_tool_does_not_stop_the_others_and_the_model_sees_the_error() -> None:
    async def explode() -> str:
        raise RuntimeError("the database is on fire")

    agent = ScriptedAgent(
        [
            tool_call("explode", id="bad"),
            tool_call("get_secret_number", {"name": "alice"}, id="good"),
        ],
        [text("One tool failed; Alice has 42")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(explode, get_secret_number)) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    assert agent.run_count == 2  # Run 2 still starts
    [batch] = batches(turn)
    bad, good = batch.calls
    assert bad.status is ToolCallStatus.failed
    assert bad.result is not None and bad.result.error == "RuntimeError: the database is on fire"
    assert good.status is ToolCallStatus.completed and good.result == ToolResult.success("42")
    sent = {m.tool_call_id: m for m in tool_messages(agent.inputs[1])}
    assert "the database is on fire" in str(sent["bad"].content)
    assert sent["bad"].error == "RuntimeError: the database is on fire"
    assert sent["good"].content == "42" and sent["good"].error is None


async def test_all_tools_failing_still_starts_the_continuation() -> None:
    async def broken(n: int) -> str:
        raise ValueError(f"broken {n}")

    agent = ScriptedAgent(
        [tool_call("broken", {"n": 1}, id="c1"), tool_call("broken", {"n": 2}, id="c2")],
        [text("Sorry, both lookups failed.")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(broken)) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    assert agent.run_count == 2
    assert all(c.status is ToolCallStatus.failed for c in batches(turn)[0].calls)
    assert [m.error for m in tool_messages(agent.inputs[1])] == [
        "ValueError: broken 1",
        "ValueError: broken 2",
    ]


async def test_an_unknown_tool_fails_and_the_model_is_told_which_tools_exist() -> None:
    agent = ScriptedAgent([tool_call("launch_rockets", {}, id="c1")], [text("I cannot.")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    [message] = tool_messages(agent.inputs[1])
    assert message.error is not None
    assert "Unknown tool 'launch_rockets'" in message.error
    assert "get_secret_number" in message.error


async def test_invalid_arguments_fail_the_call_and_the_model_sees_why() -> None:
    agent = ScriptedAgent(
        [
            tool_call("get_secret_number", {"name": 5}, id="typed"),
            tool_call("get_secret_number", '{"name": "al', id="cut"),
        ],
        [text("Bad arguments.")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    typed, cut = tool_messages(agent.inputs[1])
    assert typed.error is not None and "Invalid arguments" in typed.error
    assert "$.name" in typed.error
    assert cut.error is not None and "not valid JSON" in cut.error


async def test_a_tool_that_times_out_fails_and_the_turn_continues() -> None:
    never = anyio.Event()

    async def stuck() -> str:
        await never.wait()
        return "never"

    agent = ScriptedAgent(
        [tool_call("stuck", id="slow"), tool_call("get_secret_number", {"name": "bob"}, id="ok")],
        [text("The first tool timed out.")],
    )
    tools = ToolRegistry.of(stuck, get_secret_number)
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools, tool_timeout=0.05) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    slow, ok = batches(turn)[0].calls
    assert slow.status is ToolCallStatus.failed
    assert slow.result is not None and slow.result.error == "tool 'stuck' timed out after 0.05 s"
    assert ok.result == ToolResult.success("7")
    assert [m.error for m in tool_messages(agent.inputs[1])] == [
        "tool 'stuck' timed out after 0.05 s",
        None,
    ]


async def test_a_tool_spec_timeout_overrides_the_engine_default() -> None:
    never = anyio.Event()

    async def stuck() -> str:
        await never.wait()
        return "never"

    agent = ScriptedAgent([tool_call("stuck", id="c1")], [text("timed out")])
    with anyio.fail_after(5):
        async with Engine(
            agent, tools=ToolRegistry.of(tool(stuck, timeout=0.05)), tool_timeout=None
        ) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    assert tool_messages(agent.inputs[1])[0].error == "tool 'stuck' timed out after 0.05 s"


# -- broken runs (rows 7, 8, 8b; promise 7) ------------------------------------------------


async def test_allocation_failure_on_the_continuation_fails_and_keeps_the_results(
    lifecycle: Callable[[RunRegistry], MemoryObjectReceiveStream[RegistryChange]],
) -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [text("never streamed")],
        fail_allocation=lambda n: RunAllocationError("no capacity", code="503") if n == 2 else None,
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            events = lifecycle(engine.registry)
            turn = await engine.run_turn("t1", "go")
            assert engine.registry.get_handle(T1) is None  # nothing left registered
            completed = [e for e in drain(events) if isinstance(e, RunUnregistered)]
    assert turn.status is RunStatus.failed  # not stuck in executing_tools
    assert turn.reason is not None
    assert turn.reason.kind is ReasonKind.BACKEND_ERROR
    assert turn.reason.message == "no capacity"
    assert turn.reason.code == "503"
    assert agent.run_count == 1
    assert turn.tool_calls == ()  # no stranded in-flight calls
    [batch] = batches(turn)  # the executed results stay in the conversation
    assert batch.calls[0].result == ToolResult.success("42")
    assert [e.status for e in completed] == ["failed"]


async def test_an_unexpected_allocation_error_is_a_backend_error() -> None:
    agent = ScriptedAgent(fail_allocation=lambda n: OSError("socket closed"))
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.BACKEND_ERROR
    assert "OSError: socket closed" in turn.reason.message
    assert agent.run_count == 0


async def test_a_failed_continuation_keeps_results_so_the_next_turn_sends_them_again() -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [text("Alice has 42")],
        fail_allocation=lambda n: RunAllocationError("flaky") if n == 2 else None,
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            first = await engine.run_turn("t1", "Alice?")
            second = await engine.run_turn("t1", "Try again")
    assert first.status is RunStatus.failed
    assert second.status is RunStatus.completed
    retry = agent.inputs[1]
    assert [type(m).__name__ for m in retry.messages] == [
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
        "UserMessage",
    ]
    assert tool_messages(retry)[0].tool_call_id == "c1"
    assert tool_messages(retry)[0].content == "42"


async def test_a_stream_error_with_calls_pending_fails_and_abandons_them() -> None:
    executed: list[str] = []

    async def record(name: str) -> str:
        executed.append(name)
        return name

    agent = ScriptedAgent(
        [
            text("partial answer", id="m1"),
            tool_call("record", {"name": "x"}, id="c1"),
            Raise(StreamDroppedError("connection reset")),
        ]
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(record)) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.kind is ReasonKind.TRANSPORT_ERROR
    assert turn.reason.message == "connection reset"
    assert executed == []  # a broken run's calls are never executed
    assert agent.run_count == 1
    assert turn.tool_calls == ()
    [abandoned] = turn.abandoned_calls
    assert (abandoned.id, abandoned.status) == ("c1", ToolCallStatus.failed)
    assert batches(turn) == []
    # What had arrived is kept (promise 7).
    [partial] = turn.conversation.texts()
    assert partial.text == "partial answer"
    assert agent.open_streams == 0


async def test_an_unexpected_stream_exception_is_a_backend_error() -> None:
    agent = ScriptedAgent([tool_call("f", id="c1"), Raise(RuntimeError("driver bug"))])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.BACKEND_ERROR
    assert "RuntimeError: driver bug" in turn.reason.message
    assert turn.tool_calls == ()
    assert [c.id for c in turn.abandoned_calls] == ["c1"]


async def test_a_stream_that_ends_without_run_finished_is_a_protocol_error() -> None:
    agent = ScriptedAgent(
        [run_started("t1", "r1"), *tool_call("get_secret_number", {"name": "bob"}, id="c1")],
        envelope=False,
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.PROTOCOL_ERROR
    assert agent.run_count == 1
    assert turn.tool_calls == ()
    assert [c.id for c in turn.abandoned_calls] == ["c1"]


async def test_run_error_fails_the_turn_with_the_agents_message_and_code() -> None:
    agent = ScriptedAgent(
        [
            text("Thinking", id="m1"),
            tool_call("get_secret_number", {"name": "bob"}, id="c1"),
            run_error("model overloaded", "overloaded"),
        ]
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.kind is ReasonKind.AGENT_ERROR
    assert (turn.reason.message, turn.reason.code) == ("model overloaded", "overloaded")
    assert agent.run_count == 1
    assert turn.tool_calls == ()
    assert [t.text for t in turn.conversation.texts()] == ["Thinking"]


async def test_late_events_after_run_finished_are_not_processed() -> None:
    # After RUN_FINISHED the engine stops reading: the late text is never seen, and
    # the Hang after it would time the test out if the stream were read further.
    agent = ScriptedAgent(
        [
            text("the answer", id="m1"),
            RunFinishedEvent(thread_id="t1", run_id="whatever"),
            text("late", id="late"),
            *tool_call("get_secret_number", {"name": "bob"}, id="late-call"),
            Hang(),
        ]
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    assert [t.text for t in turn.conversation.texts()] == ["the answer"]
    assert turn.violations == ()
    assert batches(turn) == []
    assert agent.run_count == 1
    assert agent.open_streams == 0


async def test_statistics_count_the_violations_past_max_violations_too() -> None:
    # Arguments for five calls that never started: five violations, two kept.
    strays = [ToolCallArgsEvent(tool_call_id=f"nowhere-{i}", delta="x") for i in range(5)]
    agent = ScriptedAgent([*strays, *text("the answer", id="m1")])
    with anyio.fail_after(5):
        async with Engine(agent, limits=Limits(max_violations=2)) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    assert len(turn.violations) == 2
    assert turn.statistics().violations == 5


# -- cancellation (rows 9, 10; promise 4) ------------------------------------------------


async def test_cancel_during_streaming_ends_the_turn_and_closes_the_stream() -> None:
    unfinished = text("partial", id="m1")[:-1]  # no TEXT_MESSAGE_END
    agent = ScriptedAgent([unfinished, Hang()])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = engine.start_turn("t1", "go")
            await anyio.wait_all_tasks_blocked()
            assert turn.status is RunStatus.running
            assert agent.open_streams == 1

            assert turn.cancel("stop") is True
            assert status_of(turn) is RunStatus.cancelled  # at once, before any await
            with anyio.fail_after(1):
                reason = await turn.wait_finished()
            assert reason.kind is ReasonKind.CANCELLED and reason.message == "stop"
            assert agent.open_streams == 0
            assert engine.registry.get_handle(T1) is None
    [partial] = turn.conversation.texts()
    assert (partial.text, partial.interrupted) == ("partial", True)
    assert turn.cancel() is False  # already ended: nothing changes
    assert turn.reason is not None and turn.reason.message == "stop"


async def test_cancel_during_tool_execution_cancels_the_tools() -> None:
    started = anyio.Event()
    never = anyio.Event()
    cleaned_up: list[bool] = []

    async def stuck() -> str:
        started.set()
        try:
            await never.wait()
        finally:
            cleaned_up.append(True)
        return "never"

    agent = ScriptedAgent([tool_call("stuck", id="c1")], [text("never")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(stuck)) as engine:
            turn = engine.start_turn("t1", "go")
            await started.wait()
            assert turn.status is RunStatus.executing_tools
            assert engine.cancel("t1") is True
            with anyio.fail_after(1):
                reason = await turn.wait_finished()
    assert reason.kind is ReasonKind.CANCELLED
    assert status_of(turn) is RunStatus.cancelled
    assert cleaned_up == [True]
    assert agent.run_count == 1  # no continuation
    assert agent.open_streams == 0
    assert turn.tool_calls == ()
    [abandoned] = turn.abandoned_calls
    assert (abandoned.id, abandoned.status) == ("c1", ToolCallStatus.failed)


async def test_cancel_between_execution_and_the_continuation_request() -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")], [text("never")]
    )
    hold = anyio.Event()

    async def hold_next_allocation(name: str) -> int:
        agent.allocation_gate = hold  # the continuation's allocation will wait
        return SECRETS[name]

    tools = ToolRegistry.of(tool(hold_next_allocation, name="get_secret_number"))
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools) as engine:
            turn = engine.start_turn("t1", "go")
            await anyio.wait_all_tasks_blocked()
            assert agent.allocation_count == 2  # waiting for the continuation's run
            assert turn.status is RunStatus.executing_tools
            assert turn.cancel() is True
            with anyio.fail_after(1):
                await turn.wait_finished()
            hold.set()
            await anyio.wait_all_tasks_blocked()
            assert agent.run_count == 1  # the continuation never started
    assert status_of(turn) is RunStatus.cancelled
    assert agent.open_streams == 0
    assert turn.tool_calls == ()
    [batch] = batches(turn)  # the executed results were kept
    assert batch.calls[0].result == ToolResult.success("42")


async def test_cancel_before_the_turn_started_makes_no_backend_call() -> None:
    agent = ScriptedAgent([text("never")])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = engine.start_turn("t1", "go")
            assert turn.status is RunStatus.idle
            assert turn.cancel() is True
            await turn.wait_finished()
    assert status_of(turn) is RunStatus.cancelled
    assert agent.run_count == 0


async def test_engine_cancel_of_an_unknown_thread_is_false() -> None:
    async with Engine(ScriptedAgent()) as engine:
        assert engine.cancel("nobody") is False


# -- stale work never wins (rows 11, 17-20 at engine level; promise 5) ----------------------


async def test_user_resend_during_tool_execution_supersedes_the_old_turn(
    lifecycle: Callable[[RunRegistry], MemoryObjectReceiveStream[RegistryChange]],
) -> None:
    started = anyio.Event()
    never = anyio.Event()
    cancelled: list[bool] = []

    async def stuck() -> str:
        started.set()
        try:
            await never.wait()
        except BaseException:
            cancelled.append(True)
            raise
        return "never"

    agent = ScriptedAgent([tool_call("stuck", id="c1")], [text("fresh answer")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(stuck)) as engine:
            events = lifecycle(engine.registry)
            old = engine.start_turn("t1", "first question")
            await started.wait()
            new = engine.start_turn("t1", "second question")
            assert status_of(old) is RunStatus.superseded  # at once
            assert engine.turn("t1") is new
            await new.wait_finished()
            await old.wait_finished()
            lifecycle_events = drain(events)
    assert old.reason is not None and old.reason.kind is ReasonKind.SUPERSEDED
    assert new.status is RunStatus.completed
    assert cancelled == [True]  # the stale tool work was stopped
    assert old.tool_calls == ()
    assert agent.run_count == 2
    # The new run carries both user messages, never the stale call.
    sent = agent.inputs[1].messages
    assert [m.content for m in sent if isinstance(m, UserMessage)] == [
        "first question",
        "second question",
    ]
    assert not has_tool_results(agent.inputs[1])
    assert not any(isinstance(e, RunReplaced) for e in lifecycle_events)
    assert sum(isinstance(e, RunRegistered) for e in lifecycle_events) == 2


async def test_a_run_replaced_in_the_registry_during_tool_execution_is_superseded() -> None:
    started = anyio.Event()
    release = anyio.Event()

    async def slow(name: str) -> int:
        started.set()
        await release.wait()
        return SECRETS[name]

    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")], [text("never")]
    )
    tools = ToolRegistry.of(tool(slow, name="get_secret_number"))
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools) as engine:
            turn = engine.start_turn("t1", "go")
            await started.wait()
            intruder = RunHandle(T1, "someone-else")
            engine.registry.register_run(intruder)
            release.set()
            await turn.wait_finished()
            assert engine.registry.get_handle(T1) is intruder  # the newer run keeps it
            assert not intruder.disposed
    assert turn.status is RunStatus.superseded
    assert agent.run_count == 1  # the stale continuation never started
    assert agent.allocation_count == 1
    assert turn.tool_calls == ()


async def test_a_run_replaced_in_the_registry_while_streaming_is_superseded() -> None:
    agent = ScriptedAgent([text("partial", id="m1"), Hang()])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = engine.start_turn("t1", "go")
            await anyio.wait_all_tasks_blocked()
            assert agent.open_streams == 1
            engine.registry.register_run(RunHandle(T1, "someone-else"))
            await turn.wait_finished()
            assert agent.open_streams == 0
    assert turn.status is RunStatus.superseded


async def test_a_failed_compare_and_swap_disposes_the_new_handle_and_supersedes() -> None:
    replaced: list[RunHandle] = []

    class RacingRegistry(RunRegistry):
        """A user re-sends exactly between the engine's checks and its swap."""

        def replace_run(self, old: RunHandle, new: RunHandle) -> bool:
            replaced.append(new)
            self.register_run(RunHandle(old.key, "user-resend"))
            return super().replace_run(old, new)

    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "bob"}, id="c1")], [text("never")]
    )
    registry = RacingRegistry()
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS, registry=registry) as engine:
            turn = await engine.run_turn("t1", "go")
            current = registry.get_handle(T1)
            assert current is not None and current.run_id == "user-resend"
    assert turn.status is RunStatus.superseded
    [new] = replaced
    assert new.disposed
    assert agent.run_count == 1
    assert turn.tool_calls == ()


async def test_continuations_emit_run_continued_not_run_started(
    lifecycle: Callable[[RunRegistry], MemoryObjectReceiveStream[RegistryChange]],
) -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [tool_call("get_secret_number", {"name": "bob"}, id="c2")],
        [text("42 and 7")],
        [text("a second turn, no tools")],
        allocate=True,
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            events = lifecycle(engine.registry)
            await engine.run_turn("t1", "go")
            await engine.run_turn("t1", "again")
            got = drain(events)
    assert got == [
        RunRegistered(T1, "srv-run-1"),
        RunReplaced(T1, "srv-run-2", previous_run_id="srv-run-1"),
        RunReplaced(T1, "srv-run-3", previous_run_id="srv-run-2"),
        RunUnregistered(T1, "srv-run-3", "completed"),
        RunRegistered(T1, "srv-run-4"),
        RunUnregistered(T1, "srv-run-4", "completed"),
    ]
    assert [i.run_id for i in agent.inputs] == [f"srv-run-{n}" for n in range(1, 5)]


# -- threads and focus (rows 12, 13; promise 6) ---------------------------------------------


async def test_concurrent_threads_with_tools_complete_independently() -> None:
    arrived = {"a": anyio.Event(), "b": anyio.Event()}

    async def rendezvous(side: str) -> str:
        # Each thread's tool waits for the other thread's: only concurrent turns finish.
        arrived[side].set()
        await arrived["b" if side == "a" else "a"].wait()
        return f"result {side}"

    def respond(key: ThreadKey, request: RunAgentInput) -> Script:
        if has_tool_results(request):
            return [text(f"done {key.thread_id}")]
        return [tool_call("rendezvous", {"side": key.thread_id}, id=f"call-{key.thread_id}")]

    agent = ScriptedAgent(respond=respond)
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(rendezvous)) as engine:
            turn_a = engine.start_turn("a", "go a")
            turn_b = engine.start_turn("b", "go b")
            await turn_a.wait_finished()
            await turn_b.wait_finished()
    assert turn_a.status is RunStatus.completed
    assert turn_b.status is RunStatus.completed
    for side in ("a", "b"):
        runs = agent.inputs_for(side)
        assert len(runs) == 2
        assert [(m.tool_call_id, m.content) for m in tool_messages(runs[1])] == [
            (f"call-{side}", f"result {side}")
        ]
    assert turn_a.conversation is not turn_b.conversation
    assert [t.text for t in turn_a.conversation.texts()] == ["done a"]
    assert [t.text for t in turn_b.conversation.texts()] == ["done b"]


async def test_a_background_thread_never_steals_focus(
    subscriptions: list[MemoryObjectReceiveStream[Notification]],
) -> None:
    b_second_tool = anyio.Event()
    release_b = anyio.Event()

    async def first() -> str:
        return "one"

    async def second() -> str:
        b_second_tool.set()
        await release_b.wait()
        return "two"

    agent = ScriptedAgent(
        [text("A answers", id="a1")],  # thread A's only run
        [tool_call("first", id="b1")],  # thread B: run 1
        [tool_call("second", id="b2")],  # thread B: run 2 (a background continuation)
        [text("B answers", id="b3")],  # thread B: run 3
    )
    a, b = ThreadKey("A"), ThreadKey("B")
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(first, second)) as engine:
            engine.focus(a)
            focused = subscribe(engine, subscriptions, focused_only=True)
            everything = subscribe(engine, subscriptions)
            turn_a = await engine.run_turn(a, "hello A")
            turn_b = engine.start_turn(b, "hello B")
            await b_second_tool.wait()

            assert engine.focused == a
            assert turn_b.depth == 1  # B continued in the background
            seen = drain(focused)
            assert seen and all(n.key == a for n in seen if not isinstance(n, EventReceived))
            assert snapshots(seen)[-1].status is RunStatus.completed
            assert {s.key for s in snapshots(drain(everything))} == {a, b}

            # Focusing B shows B's current state at once.
            shown = engine.focus(b)
            assert shown is not None
            assert shown.status is RunStatus.executing_tools
            assert str(shown.activity) == "Executing: second"
            [now] = drain(focused)
            assert isinstance(now, StateChanged) and now.snapshot == shown

            release_b.set()
            await turn_b.wait_finished()
            later = snapshots(drain(focused))
            assert {s.key for s in later} == {b}
            assert later[-1].status is RunStatus.completed
            assert engine.focused == b
    assert turn_a.status is RunStatus.completed


# -- the circuit breaker (rows 14, 15; promise 3) -------------------------------------------


def always_a_tool(key: ThreadKey, request: RunAgentInput) -> Script:
    return [tool_call("again", id=f"call-{request.run_id}")]


async def test_the_circuit_breaker_stops_a_turn_after_ten_continuations(
    lifecycle: Callable[[RunRegistry], MemoryObjectReceiveStream[RegistryChange]],
) -> None:
    executions = 0

    async def again() -> str:
        nonlocal executions
        executions += 1
        return "and again"

    agent = ScriptedAgent(respond=always_a_tool)
    with anyio.fail_after(10):
        # The same call every time: loop detection off, to reach the breaker.
        engine = Engine(agent, tools=ToolRegistry.of(again), max_repeated_calls=None)
        async with engine:
            events = lifecycle(engine.registry)
            turn = await engine.run_turn("t1", "loop forever")
            got = drain(events)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.kind is ReasonKind.MAX_DEPTH
    assert "max tool continuation depth exceeded (10)" in turn.reason.message
    assert agent.run_count == 11
    assert turn.depth == 10
    assert executions == 10  # the 11th run's call was never executed
    assert sum(isinstance(e, RunReplaced) for e in got) == 10
    assert sum(isinstance(e, RunRegistered) for e in got) == 1
    assert turn.tool_calls == ()
    assert [c.id for c in turn.abandoned_calls] == [f"call-{agent.inputs[-1].run_id}"]


@pytest.mark.parametrize("max_depth", [0, 2])
async def test_the_circuit_breaker_is_configurable(max_depth: int) -> None:
    async def again() -> str:
        return "and again"

    agent = ScriptedAgent(respond=always_a_tool)
    with anyio.fail_after(5):
        async with Engine(
            agent, tools=ToolRegistry.of(again), max_depth=max_depth, max_repeated_calls=None
        ) as engine:
            turn = await engine.run_turn("t1", "loop")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.MAX_DEPTH
    assert agent.run_count == max_depth + 1
    assert turn.depth == max_depth


async def test_a_turn_within_the_depth_bound_completes() -> None:
    async def again() -> str:
        return "ok"

    def two_hops(key: ThreadKey, request: RunAgentInput) -> Script:
        hops = len(tool_messages(request))
        return [text("done")] if hops == 2 else [tool_call("again", id=f"c{hops}")]

    agent = ScriptedAgent(respond=two_hops)
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(again), max_depth=2) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.completed
    assert agent.run_count == 3
    assert turn.depth == 2


# -- what observers see (row 16; no flash) --------------------------------------------------


def test_executing_tools_is_a_running_state() -> None:
    assert RunStatus.executing_tools.is_running
    assert RunStatus.running.is_running
    assert not RunStatus.idle.is_running
    assert not any(s.is_running for s in RunStatus if s.is_final)


async def test_no_flash_of_idle_or_completed_between_runs(
    subscriptions: list[MemoryObjectReceiveStream[Notification]],
) -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [text("Let me also check Bob", id="m2"), tool_call("get_secret_number", {"name": "bob"})],
        [text("42 and 7", id="m3")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            recorder = subscribe(engine, subscriptions)
            turn = await engine.run_turn("t1", "go")
            states = snapshots(drain(recorder))
    assert turn.status is RunStatus.completed
    statuses = [s.status for s in states]
    first_running = statuses.index(RunStatus.running)
    first_final = next(i for i, s in enumerate(statuses) if s.is_final)
    assert set(statuses[:first_running]) == {RunStatus.idle}
    between = statuses[first_running:first_final]
    # From the first "running" to the end, observers only ever see a running state:
    # never idle, never completed between Run N and Run N+1.
    assert all(s.is_running for s in between), " ".join(statuses)
    assert set(statuses[first_final:]) == {RunStatus.completed}, " ".join(statuses)
    assert between.count(RunStatus.executing_tools) == 2  # both hops were seen
    kinds = [s.activity.kind for s in states]
    assert ActivityKind.CALLING_TOOLS in kinds
    assert ActivityKind.EXECUTING_TOOLS in kinds
    assert kinds[-1] is ActivityKind.DONE
    # The snapshots count the runs as they start.
    assert max(s.run_count for s in states) == 3


async def test_calling_then_executing_activity_is_visible_while_the_turn_runs() -> None:
    gate = anyio.Event()
    started = anyio.Event()
    release = anyio.Event()

    async def slow(name: str) -> int:
        started.set()
        await release.wait()
        return SECRETS[name]

    agent = ScriptedAgent(
        [
            tool_call("get_secret_number", {"name": "alice"}),
            tool_call("get_secret_number", {"name": "bob"}),
            Gate(gate),
        ],
        [text("done")],
    )
    tools = ToolRegistry.of(tool(slow, name="get_secret_number"))
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools) as engine:
            turn = engine.start_turn("t1", "go")
            await anyio.wait_all_tasks_blocked()
            streaming = engine.state("t1")
            assert streaming is not None
            assert streaming.status is RunStatus.running
            assert str(streaming.activity) == "Calling: get_secret_number, get_secret_number"
            assert [c.status for c in turn.tool_calls] == [ToolCallStatus.pending] * 2
            gate.set()
            await started.wait()
            executing = engine.state("t1")
            assert executing is not None
            assert executing.status is RunStatus.executing_tools and executing.is_running
            assert str(executing.activity) == "Executing: get_secret_number, get_secret_number"
            assert [c.status for c in turn.tool_calls] == [ToolCallStatus.executing] * 2
            stats = engine.statistics()
            assert stats.turns[RunStatus.executing_tools] == 1
            assert stats.registered_runs == 1
            release.set()
            await turn.wait_finished()
    assert turn.status is RunStatus.completed


async def test_engine_statistics_count_every_turn_not_only_each_threads_latest() -> None:
    agent = ScriptedAgent([text("one")], [Hang()], [text("three")], [text("other")])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            await engine.run_turn("t1", "first")
            hung = engine.start_turn("t1", "second")
            await anyio.wait_all_tasks_blocked()
            live = engine.statistics()
            assert live.turns[RunStatus.completed] == 1  # the thread's earlier turn
            assert live.turns[RunStatus.running] == 1
            assert live.registered_runs == 1

            await engine.run_turn("t1", "third")  # supersedes "second"
            await hung.wait_finished()
            await engine.run_turn("t2", "other")
            stats = engine.statistics()
    assert stats.turns[RunStatus.completed] == 3
    assert stats.turns[RunStatus.superseded] == 1
    assert sum(stats.turns.values()) == 4  # every turn started, each counted once
    assert set(stats.turns) == set(RunStatus)
    assert stats.registered_runs == 0
    assert stats.threads == 2
    # Still readable once the engine (and its registry) closed, and unchanged.
    assert engine.registry.closed
    assert engine.statistics() == stats


async def test_subscribers_get_events_and_tool_results_when_they_ask(
    subscriptions: list[MemoryObjectReceiveStream[Notification]],
) -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "bob"}, id="c1")], [text("7", id="m")]
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            plain = subscribe(engine, subscriptions)
            verbose = subscribe(engine, subscriptions, events=True)
            await engine.run_turn("t1", "go")
            quiet = drain(plain)
            loud = drain(verbose)
    assert not any(isinstance(n, EventReceived) for n in quiet)
    contents = [
        n.event.delta
        for n in loud
        if isinstance(n, EventReceived) and isinstance(n.event, TextMessageContentEvent)
    ]
    assert contents == ["7"]
    finished = [n for n in quiet if isinstance(n, ToolCallFinished)]
    assert [(n.call_id, n.name, n.result) for n in finished] == [
        ("c1", "get_secret_number", ToolResult.success("7"))
    ]


# -- closing the engine (safety check 2: disposal mid-await) ----------------------------------


async def test_closing_the_engine_mid_await_stops_everything(
    subscriptions: list[MemoryObjectReceiveStream[Notification]],
) -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")], [text("never")]
    )
    hold = anyio.Event()

    async def hold_next_allocation(name: str) -> int:
        agent.allocation_gate = hold
        return SECRETS[name]

    tools = ToolRegistry.of(tool(hold_next_allocation, name="get_secret_number"))
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools) as engine:
            recorder = subscribe(engine, subscriptions)
            turn = engine.start_turn("t1", "go")
            await anyio.wait_all_tasks_blocked()
            assert agent.allocation_count == 2  # blocked creating the continuation

            await engine.aclose()

            assert engine.closed
            assert turn.status is RunStatus.cancelled
            assert turn.reason is not None and turn.reason.kind is ReasonKind.CLOSED
            before = turn.snapshot()
            seen = drain(recorder)
            assert snapshots(seen)[-1].status is RunStatus.cancelled

            hold.set()  # the backend answers after the engine was closed
            await anyio.wait_all_tasks_blocked()

            assert agent.run_count == 1  # no further backend call
            assert turn.snapshot() == before  # no further state change
            assert drain(recorder) == []
            with pytest.raises(ClosedError):
                engine.start_turn("t1", "too late")
            await engine.aclose()  # idempotent
    assert turn.tool_calls == ()


async def test_leaving_the_engine_ends_live_turns_as_closed() -> None:
    agent = ScriptedAgent([Hang()])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = engine.start_turn("t1", "go")
            await anyio.wait_all_tasks_blocked()
    assert turn.status is RunStatus.cancelled
    assert turn.reason is not None and turn.reason.kind is ReasonKind.CLOSED
    assert agent.open_streams == 0
    assert engine.registry.closed


async def test_an_engine_not_entered_refuses_turns() -> None:
    engine = Engine(ScriptedAgent())
    with pytest.raises(ClosedError, match="async with"):
        engine.start_turn("t1", "go")


# -- the catch-all (safety check 7) --------------------------------------------------------


class ExplodingBackend:
    """A backend whose ``run()`` raises before any stream exists."""

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return None

    def run(
        self, key: ThreadKey, run_input: RunAgentInput
    ) -> AbstractAsyncContextManager[EventStream]:
        raise ZeroDivisionError("backend bug")


async def test_a_backend_that_raises_unexpectedly_fails_the_turn_as_backend_error() -> None:
    with anyio.fail_after(5):
        async with Engine(ExplodingBackend()) as engine:
            turn = await engine.run_turn("t1", "go")
            assert engine.registry.get_handle(T1) is None
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.BACKEND_ERROR
    assert "ZeroDivisionError: backend bug" in turn.reason.message


async def test_a_bug_in_event_handling_fails_the_turn_as_internal_error_and_is_logged(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_handler(processor: EventProcessor, event: object) -> tuple[()]:
        raise KeyError("handler bug")

    # TEXT_MESSAGE_END goes through its handler (deltas take the processor's hot path).
    event_type: type[Any] = TextMessageEndEvent
    monkeypatch.setitem(_processor._HANDLERS, event_type, broken_handler)
    agent = ScriptedAgent([text("hello"), Hang()])
    with caplog.at_level(logging.ERROR, logger="toolrelay"), anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.INTERNAL_ERROR
    assert "handler bug" in turn.reason.message
    assert agent.open_streams == 0
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged and logged[0].exc_info is not None


async def test_an_exception_from_the_processor_is_an_internal_error_not_a_backend_error(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def broken_receive(self: EventProcessor, event: object) -> tuple[()]:
        raise AttributeError("processor bug")

    monkeypatch.setattr(EventProcessor, "receive", broken_receive)
    agent = ScriptedAgent([text("hello"), Hang()])
    with caplog.at_level(logging.ERROR, logger="toolrelay"), anyio.fail_after(5):
        async with Engine(agent) as engine:
            turn = await engine.run_turn("t1", "go")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.INTERNAL_ERROR
    assert "AttributeError: processor bug" in turn.reason.message
    assert agent.open_streams == 0
    logged = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(logged) == 1
    assert logged[0].exc_info is not None
    assert isinstance(logged[0].exc_info[1], AttributeError)


async def test_a_bug_in_a_tool_registry_is_an_internal_error() -> None:
    class BrokenRegistry(ToolRegistry):
        def get(self, name: str) -> ToolSpec[..., Any] | None:
            raise LookupError("registry bug")

    agent = ScriptedAgent([tool_call("anything", id="c1")], [text("never")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=BrokenRegistry()) as engine:
            turn = await engine.run_turn("t1", "go")
            assert engine.registry.get_handle(T1) is None
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.INTERNAL_ERROR
    assert "registry bug" in turn.reason.message
    assert turn.tool_calls == ()
    assert agent.run_count == 1


# -- statistics --------------------------------------------------------------------------------


async def test_statistics_count_runs_calls_and_turns() -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],  # A: run 1
        [
            tool_call("get_secret_number", {"name": "bob"}, id="c2"),
            tool_call("get_secret_number", {"name": "nobody"}, id="c3"),
        ],  # A: run 2
        [text("done")],  # A: run 3
        [run_error("nope")],  # B: run 1
        [tool_call("get_secret_number", {"name": "bob"}, id="c4")],  # A, second turn
        [text("again")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            first = await engine.run_turn("A", "go")
            failed = await engine.run_turn("B", "go")
            stats = engine.statistics()
            second = await engine.run_turn("A", "once more")
            later = engine.statistics()

    one = first.statistics()
    assert (one.runs, one.depth, one.violations, one.status) == (3, 2, 0, RunStatus.completed)
    assert one.tool_calls[ToolCallStatus.completed] == 2
    assert one.tool_calls[ToolCallStatus.failed] == 1  # KeyError: 'nobody'
    assert sum(one.tool_calls.values()) == 3

    assert failed.statistics().status is RunStatus.failed
    assert sum(failed.statistics().tool_calls.values()) == 0

    assert stats.turns[RunStatus.completed] == 1
    assert stats.turns[RunStatus.failed] == 1
    assert stats.registered_runs == 0
    assert stats.threads == 2

    # A turn counts its own calls, not the whole thread's.
    two = second.statistics()
    assert (two.runs, two.depth) == (2, 1)
    assert two.tool_calls[ToolCallStatus.completed] == 1
    assert sum(two.tool_calls.values()) == 1
    # Every turn started is counted, the thread's earlier one too (not only its latest).
    assert later.turns[RunStatus.completed] == 2
    assert later.turns[RunStatus.failed] == 1
    assert sum(later.turns.values()) == 3
    assert later.threads == 2


async def test_history_seeds_a_new_thread_and_per_turn_tools_override_the_engines() -> None:
    async def special() -> str:
        return "special"

    agent = ScriptedAgent([tool_call("special", id="c1")], [text("ok")])
    history: list[ChatMessage] = [
        UserMessage(id="old", content="earlier"),
        AssistantMessage(id="a", content="hi"),
    ]
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            turn = await engine.run_turn(
                "t1", "go", history=history, tools=ToolRegistry.of(special)
            )
    assert turn.status is RunStatus.completed
    first = agent.inputs[0]
    assert first.messages[:2] == history
    assert [t.name for t in first.tools] == ["special"]
    assert tool_messages(agent.inputs[1])[0].content == "special"


# -- observers ----------------------------------------------------------------------------------


async def test_a_subscriber_that_goes_away_does_not_disturb_the_turn(
    subscriptions: list[MemoryObjectReceiveStream[Notification]],
) -> None:
    agent = ScriptedAgent([tool_call("get_secret_number", {"name": "bob"}, id="c1")], [text("7")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            gone = engine.subscribe(events=True)
            kept = subscribe(engine, subscriptions)
            gone.close()
            turn = await engine.run_turn("t1", "go")
            assert snapshots(drain(kept))[-1].status is RunStatus.completed
    assert turn.status is RunStatus.completed


async def test_a_slow_subscriber_loses_notifications_but_not_the_state(
    subscriptions: list[MemoryObjectReceiveStream[Notification]],
) -> None:
    agent = ScriptedAgent([tool_call("get_secret_number", {"name": "bob"}, id="c1")], [text("7")])
    with anyio.fail_after(5):
        async with Engine(agent, tools=SECRET_TOOLS) as engine:
            stream = engine.subscribe(max_buffer=1)
            subscriptions.append(stream)
            turn = await engine.run_turn("t1", "go")
            assert len(drain(stream)) == 1
            state = engine.state("t1")
    assert turn.status is RunStatus.completed
    assert state is not None and state.status is RunStatus.completed


async def test_a_thread_subscriber_sees_only_its_thread(
    subscriptions: list[MemoryObjectReceiveStream[Notification]],
) -> None:
    agent = ScriptedAgent([text("for a")], [text("for b")])
    with anyio.fail_after(5):
        async with Engine(agent) as engine:
            only_b = engine.subscribe(key="b")
            subscriptions.append(only_b)
            await engine.run_turn("a", "go")
            await engine.run_turn("b", "go")
            seen = drain(only_b)
    assert seen
    assert {n.key for n in seen} == {ThreadKey("b")}


async def test_a_closed_engine_cannot_be_entered_again_and_ends_subscriptions() -> None:
    engine = Engine(ScriptedAgent())
    async with engine:
        stream = engine.subscribe()
    with stream:
        with pytest.raises(anyio.EndOfStream):
            stream.receive_nowait()
    with pytest.raises(ClosedError):
        async with engine:
            pass  # pragma: no cover
    late = engine.subscribe()  # subscribing to a closed engine gives an ended stream
    with late, pytest.raises(anyio.EndOfStream):
        late.receive_nowait()
