"""What subscribers are told: each state once, and reasoning sent back when asked."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from toolrelay import Engine, EventReceived, StateChanged, ThreadKey, ToolRegistry, Turn
from toolrelay.backends import EventStream
from toolrelay.protocol import (
    Event,
    ReasoningMessage,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunAgentInput,
    RunStartedEvent,
    TextMessageContentEvent,
)
from toolrelay.testing import Gate, ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio


async def echo(value: str) -> str:
    """Echo a value."""
    return value


async def test_subscribers_never_get_the_same_snapshot_twice_in_a_row() -> None:
    agent = ScriptedAgent([tool_call("echo", {"value": "x"})], [text("done")])
    async with Engine(agent, tools=ToolRegistry().register(echo)) as engine:
        with engine.subscribe() as stream:
            turn = engine.start_turn("t", "hi")
            await turn.wait_finished()
            snapshots = []
            while True:
                try:
                    note = stream.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(note, StateChanged):
                    snapshots.append(note.snapshot)
    assert snapshots[-1].status.value == "completed"
    assert all(a != b for a, b in zip(snapshots, snapshots[1:], strict=False))


async def test_focus_repeats_the_current_state_to_focused_subscribers() -> None:
    agent = ScriptedAgent([text("done")])
    async with Engine(agent) as engine:
        turn = await engine.run_turn("t", "hi")
        with engine.subscribe(focused_only=True) as stream:
            engine.focus("t")
            engine.focus("t")
            first = stream.receive_nowait()
            second = stream.receive_nowait()
    assert isinstance(first, StateChanged) and isinstance(second, StateChanged)
    assert first.snapshot == second.snapshot == turn.snapshot()


@pytest.mark.parametrize("include", [False, True])
async def test_reasoning_goes_back_only_when_the_engine_is_asked(include: bool) -> None:
    thinking: list[Event] = [
        ReasoningMessageStartEvent(message_id="r1"),
        ReasoningMessageContentEvent(message_id="r1", delta="let me think"),
        ReasoningMessageEndEvent(message_id="r1"),
    ]
    agent = ScriptedAgent([*thinking, tool_call("echo", {"value": "x"})], [text("done")])
    engine_ = Engine(agent, tools=ToolRegistry().register(echo), include_reasoning=include)
    async with engine_ as engine:
        await engine.run_turn("t", "hi")
    sent = [m for m in agent.inputs[1].messages if isinstance(m, ReasoningMessage)]
    assert [m.content for m in sent] == (["let me think"] if include else [])


async def test_a_subscriber_that_asks_for_events_mid_run_gets_the_rest_of_them() -> None:
    gate = anyio.Event()
    agent = ScriptedAgent([text("before"), Gate(gate), text("after")])
    async with Engine(agent) as engine:
        turn = engine.start_turn("t", "hi")
        await anyio.wait_all_tasks_blocked()
        with engine.subscribe(events=True) as stream:
            gate.set()
            await turn.wait_finished()
            deltas = []
            while True:
                try:
                    note = stream.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(note, EventReceived) and isinstance(
                    note.event, TextMessageContentEvent
                ):
                    deltas.append(note.event.delta)
    assert deltas == ["after"]


class _EagerAgent(ScriptedAgent):
    """Yields its events without giving the event loop a turn in between."""

    def __init__(self, cancel_after: int) -> None:
        super().__init__(envelope=False)
        self.cancel_after = cancel_after
        self.turn: object = None

    @asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        async def events() -> AsyncGenerator[Event, None]:
            yield RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)
            for index, event in enumerate(text("a b c d", chunk=1)):
                if index == self.cancel_after:
                    assert isinstance(self.turn, Turn)
                    self.turn.cancel()
                yield event

        stream = events()
        try:
            yield stream
        finally:
            await stream.aclose()


async def test_events_the_backend_yields_after_a_cancel_are_neither_processed_nor_shown() -> None:
    agent = _EagerAgent(cancel_after=3)
    async with Engine(agent) as engine:
        with engine.subscribe(events=True) as stream:
            turn = engine.start_turn("t", "hi")
            agent.turn = turn
            await turn.wait_finished()
            shown = []
            while True:
                try:
                    note = stream.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(note, EventReceived):
                    shown.append(note.event)
    assert turn.status.value == "cancelled"
    # RUN_STARTED, TEXT_MESSAGE_START, then "a" and " ": the cancel came before "b".
    assert len(shown) == 4
    assert [m.text for m in turn.conversation.texts()] == ["a "]
