"""ScriptedAgent, the mock LLM every runtime test stands on: it must do what it says."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from toolrelay import RunAllocationError, StreamDroppedError
from toolrelay.backends._base import AgentBackend, ThreadKey
from toolrelay.protocol import (
    Event,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UnknownEvent,
    UserMessage,
)
from toolrelay.testing import (
    Gate,
    Hang,
    Raise,
    ScriptedAgent,
    Sleep,
    run_error,
    run_finished,
    run_started,
    server_tool_call,
    split_deltas,
    text,
    tool_call,
)
from toolrelay.testing._scripted import Script

pytestmark = pytest.mark.anyio

KEY = ThreadKey("t1")


def run_input(run_id: str = "run-1", thread_id: str = "t1") -> RunAgentInput:
    return RunAgentInput(
        thread_id=thread_id,
        run_id=run_id,
        messages=[UserMessage(id="u1", content="hi")],
    )


async def play(
    agent: ScriptedAgent, request: RunAgentInput | None = None, key: ThreadKey = KEY
) -> list[Event | UnknownEvent]:
    """Every event of one run of ``agent``."""
    with anyio.fail_after(5):
        async with agent.run(key, request or run_input()) as stream:
            return [event async for event in stream]


def types(events: Sequence[Event | UnknownEvent]) -> list[str]:
    return [type(e).__name__ for e in events]


def test_tool_call_streams_start_args_end_with_one_id() -> None:
    start, args, end = tool_call("lookup", {"name": "alice"}, id="c1")
    assert start == ToolCallStartEvent(tool_call_id="c1", tool_call_name="lookup")
    assert args == ToolCallArgsEvent(tool_call_id="c1", delta='{"name":"alice"}')
    assert end == ToolCallEndEvent(tool_call_id="c1")


def test_tool_call_without_arguments_sends_no_args_event() -> None:
    assert types(list(tool_call("ping"))) == ["ToolCallStartEvent", "ToolCallEndEvent"]


def test_tool_call_chunks_arguments() -> None:
    events = tool_call("f", '{"a": 1}', chunk=3)
    deltas = [e.delta for e in events if isinstance(e, ToolCallArgsEvent)]
    assert deltas == ['{"a', '": ', "1}"]
    assert "".join(deltas) == '{"a": 1}'


def test_default_ids_are_distinct() -> None:
    first = tool_call("f")[0]
    second = tool_call("f")[0]
    assert isinstance(first, ToolCallStartEvent)
    assert isinstance(second, ToolCallStartEvent)
    assert first.tool_call_id != second.tool_call_id


def test_server_tool_call_ends_with_its_result() -> None:
    events = server_tool_call("search", {"q": "x"}, "found", id="c9", message_id="m9")
    assert events[-1] == ToolCallResultEvent(message_id="m9", tool_call_id="c9", content="found")


def test_text_streams_start_content_end() -> None:
    events = text("hello world", id="m1", chunk=5)
    assert types(events) == [
        "TextMessageStartEvent",
        "TextMessageContentEvent",
        "TextMessageContentEvent",
        "TextMessageContentEvent",
        "TextMessageEndEvent",
    ]
    deltas = [e.delta for e in events if isinstance(e, TextMessageContentEvent)]
    assert "".join(deltas) == "hello world"


def test_split_deltas() -> None:
    assert split_deltas("abcde", 2) == ["ab", "cd", "e"]
    assert split_deltas("", 3) == [""]
    with pytest.raises(ValueError):
        split_deltas("x", 0)


def test_run_event_builders() -> None:
    assert run_started("t", "r") == RunStartedEvent(thread_id="t", run_id="r")
    assert run_finished("t", "r") == RunFinishedEvent(thread_id="t", run_id="r")
    assert run_error("boom", "E1") == RunErrorEvent(message="boom", code="E1")


class TestScriptedAgent:
    def test_is_an_agent_backend(self) -> None:
        assert isinstance(ScriptedAgent(), AgentBackend)

    async def test_envelope_carries_the_real_thread_and_run_ids(self) -> None:
        agent = ScriptedAgent([text("hi", id="m1")])
        events = await play(agent, run_input("run-42", "thread-7"), ThreadKey("thread-7"))
        assert events[0] == RunStartedEvent(thread_id="thread-7", run_id="run-42")
        assert events[-1] == RunFinishedEvent(thread_id="thread-7", run_id="run-42")
        assert events[1:-1] == text("hi", id="m1")

    async def test_an_empty_script_is_a_bare_run(self) -> None:
        events = await play(ScriptedAgent([]))
        assert types(events) == ["RunStartedEvent", "RunFinishedEvent"]

    async def test_no_envelope_when_the_script_has_its_own_run_started(self) -> None:
        own = run_started("t1", "server-chosen")
        events = await play(ScriptedAgent([own, text("x")]))
        assert events[0] is own
        assert types(events).count("RunStartedEvent") == 1
        assert isinstance(events[-1], RunFinishedEvent)

    async def test_no_run_finished_after_run_error(self) -> None:
        events = await play(ScriptedAgent([text("x"), run_error("boom")]))
        assert isinstance(events[-1], RunErrorEvent)
        assert "RunFinishedEvent" not in types(events)

    async def test_envelope_false_plays_the_script_as_is(self) -> None:
        script = text("x")
        events = await play(ScriptedAgent(script, envelope=False))
        assert events == script

    async def test_scripts_answer_runs_in_order_and_inputs_are_recorded(self) -> None:
        agent = ScriptedAgent([text("first", id="a")], [text("second", id="b")])
        one = await play(agent, run_input("r1"))
        two = await play(agent, run_input("r2"), ThreadKey("other"))
        assert one[1:-1] == text("first", id="a")
        assert two[1:-1] == text("second", id="b")
        assert agent.run_count == 2
        assert [i.run_id for i in agent.inputs] == ["r1", "r2"]
        assert [i.run_id for i in agent.inputs_for("t1")] == ["r1"]
        assert [i.run_id for i in agent.inputs_for(ThreadKey("other"))] == ["r2"]

    async def test_respond_answers_from_what_the_run_received(self) -> None:
        seen: list[tuple[ThreadKey, str]] = []

        def respond(key: ThreadKey, request: RunAgentInput) -> Script:
            seen.append((key, request.run_id))
            return [text(f"echo {request.run_id}", id="m")]

        agent = ScriptedAgent([text("scripted", id="s")], respond=respond)
        first = await play(agent, run_input("r1"))
        second = await play(agent, run_input("r2"))
        assert first[1:-1] == text("scripted", id="s")  # scripts first
        assert second[1:-1] == text("echo r2", id="m")  # then the responder
        assert seen == [(KEY, "r2")]

    async def test_an_unscripted_run_is_a_run_allocation_error(self) -> None:
        agent = ScriptedAgent([text("only one")])
        await play(agent)
        with pytest.raises(RunAllocationError, match="run 2 was not scripted"):
            await play(agent)
        assert agent.open_streams == 0

    async def test_raise_fails_mid_stream_and_the_stream_is_closed(self) -> None:
        agent = ScriptedAgent([*tool_call("f", id="c1"), Raise(StreamDroppedError("gone"))])
        received: list[Event | UnknownEvent] = []
        with pytest.raises(StreamDroppedError, match="gone"):
            async with agent.run(KEY, run_input()) as stream:
                async for event in stream:
                    received.append(event)  # noqa: PERF401 - keep what came before the failure
        # No RUN_FINISHED is added after a failure; what came before did arrive.
        assert types(received) == ["RunStartedEvent", "ToolCallStartEvent", "ToolCallEndEvent"]
        assert agent.open_streams == 0
        assert agent.closed_streams == 1

    async def test_hang_waits_until_cancelled_and_the_stream_is_closed(self) -> None:
        agent = ScriptedAgent([text("before", id="m"), Hang()])
        received: list[Event | UnknownEvent] = []
        with anyio.move_on_after(0.05) as scope:
            async with agent.run(KEY, run_input()) as stream:
                async for event in stream:
                    received.append(event)  # noqa: PERF401 - keep what came before the hang
        assert scope.cancelled_caught
        assert types(received) == ["RunStartedEvent", *types(text("before"))]
        assert agent.open_streams == 0

    async def test_gate_holds_the_stream_until_the_event_is_set(self) -> None:
        gate = anyio.Event()
        agent = ScriptedAgent([text("a", id="a"), Gate(gate), text("b", id="b")])
        received: list[Event | UnknownEvent] = []
        after_a = anyio.Event()

        async def consume() -> None:
            async with agent.run(KEY, run_input()) as stream:
                async for event in stream:
                    received.append(event)
                    if len(received) == 4:  # RUN_STARTED + text("a")
                        after_a.set()

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(consume)
                await after_a.wait()
                await anyio.wait_all_tasks_blocked()
                assert len(received) == 4  # held at the gate
                assert agent.open_streams == 1
                gate.set()
        assert types(received[4:]) == [*types(text("b")), "RunFinishedEvent"]
        assert agent.open_streams == 0

    async def test_sleep_waits_then_continues(self) -> None:
        events = await play(ScriptedAgent([Sleep(0.01), text("x")]))
        assert types(events)[-1] == "RunFinishedEvent"

    async def test_leaving_the_stream_early_closes_it(self) -> None:
        agent = ScriptedAgent([text("a"), text("b")])
        async with agent.run(KEY, run_input()) as stream:
            async for _event in stream:
                break
            assert agent.open_streams == 1
        assert agent.open_streams == 0
        assert agent.closed_streams == 1

    async def test_allocation_lets_the_client_choose_by_default(self) -> None:
        agent = ScriptedAgent()
        assert await agent.allocate_run(KEY) is None
        assert agent.allocation_count == 1

    async def test_allocation_gives_server_ids_when_asked(self) -> None:
        agent = ScriptedAgent(allocate=True)
        assert [await agent.allocate_run(KEY) for _ in range(3)] == [
            "srv-run-1",
            "srv-run-2",
            "srv-run-3",
        ]

    async def test_fail_allocation_fails_the_chosen_allocation(self) -> None:
        def fail_second(number: int) -> BaseException | None:
            return RunAllocationError("no capacity") if number == 2 else None

        agent = ScriptedAgent(allocate=True, fail_allocation=fail_second)
        assert await agent.allocate_run(KEY) == "srv-run-1"
        with pytest.raises(RunAllocationError, match="no capacity"):
            await agent.allocate_run(KEY)
        assert await agent.allocate_run(KEY) == "srv-run-3"
        assert agent.allocation_count == 3

    async def test_allocation_gate_holds_allocation(self) -> None:
        gate = anyio.Event()
        agent = ScriptedAgent(allocate=True, allocation_gate=gate)
        got: list[str | None] = []

        async def allocate() -> None:
            got.append(await agent.allocate_run(KEY))

        with anyio.fail_after(5):
            async with anyio.create_task_group() as group:
                group.start_soon(allocate)
                await anyio.wait_all_tasks_blocked()
                assert agent.allocation_count == 1
                assert got == []
                gate.set()
        assert got == ["srv-run-1"]

    async def test_unknown_events_pass_through(self) -> None:
        unknown = UnknownEvent(type="FUTURE_THING", raw=b'{"type":"FUTURE_THING"}')
        events = await play(ScriptedAgent([unknown]))
        assert events[1] is unknown
