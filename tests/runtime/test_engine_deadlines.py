"""The turn's deadline (``Limits.turn_seconds``) and the engine's limits handed to
its backend for each run (``RunSettings``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import anyio.lowlevel
import pytest

from toolrelay import Engine, Limits, ReasonKind, RunStatus, ThreadKey, ToolCallStatus, ToolRegistry
from toolrelay._runtime._deadlines import Deadlines
from toolrelay.backends import (
    EventStream,
    RunSettings,
    current_run_settings,
    effective_limits,
    using_run_settings,
)
from toolrelay.protocol import RunAgentInput
from toolrelay.testing import Hang, ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio


async def test_a_turn_past_turn_seconds_fails_deadline_and_leaves_no_call_executing() -> None:
    async def slow() -> str:
        """Takes far longer than the turn may."""
        await anyio.sleep(30)
        return "never"

    async def quick() -> str:
        """Answers at once."""
        return "fast"

    agent = ScriptedAgent([tool_call("slow", {}), tool_call("quick", {})], [text("done")])
    tools = ToolRegistry().register(slow).register(quick)
    started = time.monotonic()
    async with Engine(
        agent, tools=tools, tool_timeout=None, limits=Limits(turn_seconds=0.3)
    ) as engine:
        turn = await engine.run_turn("t", "go")
        other = await engine.run_turn("other", "go")  # the engine goes on
    assert time.monotonic() - started < 5
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.kind, turn.reason.code) == (ReasonKind.DEADLINE, "turn_seconds")
    assert turn.statistics().tool_calls[ToolCallStatus.executing] == 0
    assert other.status is RunStatus.completed  # the script's next run: the engine goes on


class Recording:
    """A backend that records the settings each run sees, and answers at once."""

    def __init__(self) -> None:
        self.seen: list[RunSettings | None] = []
        self.limits = Limits(max_event_bytes=123)

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return None

    @asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        self.seen.append(current_run_settings())
        agent = ScriptedAgent([text("hi")])
        async with agent.run(key, run_input) as events:
            yield events


async def test_each_run_sees_its_engines_limits_and_an_engine_without_adopts_the_backends() -> None:
    backend = Recording()
    mine = Limits(max_event_bytes=4096)
    async with Engine(backend, limits=mine) as engine:
        await engine.run_turn("t", "hi")
    async with Engine(backend) as engine:
        await engine.run_turn("t", "hi")
        assert engine.limits is backend.limits
    first, second = backend.seen
    assert first is not None and first.limits is mine
    assert second is not None and second.limits is backend.limits
    assert current_run_settings() is None  # only inside a run's task
    assert effective_limits(backend.limits) is backend.limits
    with using_run_settings(RunSettings(limits=mine)):
        assert effective_limits(backend.limits) is mine


# -- the engine's deadline keeper (runtime/_deadlines.py) -----------------------------


async def test_many_parked_turns_each_fail_at_their_deadline_and_none_is_kept_after() -> None:
    agent = ScriptedAgent(respond=lambda key, run_input: [Hang()])
    async with Engine(agent, limits=Limits(turn_seconds=0.2)) as engine:
        turns = [engine.start_turn(f"t{i}", "go") for i in range(20)]
        with anyio.fail_after(5):
            for turn in turns:
                await turn.wait_finished()
        assert len(engine._tasks.deadlines) == 0
    for turn in turns:
        assert turn.reason is not None
        assert (turn.reason.kind, turn.reason.code) == (ReasonKind.DEADLINE, "turn_seconds")
    assert agent.open_streams == 0


async def test_a_shorter_turn_seconds_set_later_is_due_first() -> None:
    agent = ScriptedAgent(respond=lambda key, run_input: [Hang()])
    async with Engine(agent, limits=Limits(turn_seconds=30)) as engine:
        long = engine.start_turn("long", "go")
        with anyio.fail_after(5):
            while agent.open_streams < 1:
                await anyio.lowlevel.checkpoint()
        engine.limits = Limits(turn_seconds=0.2)
        started = anyio.current_time()
        short = engine.start_turn("short", "go")
        with anyio.fail_after(5):
            await short.wait_finished()
        assert anyio.current_time() - started < 2  # not after the long turn's 30 s
        assert short.reason is not None and short.reason.kind is ReasonKind.DEADLINE
        assert not long.finished  # its own deadline is not due
        assert len(engine._tasks.deadlines) == 1
        long.cancel()
        with anyio.fail_after(5):
            await long.wait_finished()
        assert len(engine._tasks.deadlines) == 0


async def test_a_turn_that_ended_before_its_deadline_is_left_alone() -> None:
    agent = ScriptedAgent([text("quick")], [Hang()])
    async with Engine(agent, limits=Limits(turn_seconds=0.2)) as engine:
        quick = await engine.run_turn("quick", "go")
        assert len(engine._tasks.deadlines) == 0
        # A later turn's deadline comes after the one the keeper last slept for.
        later = engine.start_turn("later", "go")
        with anyio.fail_after(5):
            await later.wait_finished()
    assert quick.status is RunStatus.completed
    assert later.reason is not None and later.reason.kind is ReasonKind.DEADLINE


async def test_the_keeper_stopped_before_its_task_began_returns_at_once() -> None:
    deadlines = Deadlines()
    deadlines.stop()
    with anyio.fail_after(1):
        await deadlines.keep()


async def test_an_error_in_the_keeper_comes_out_of_the_engines_exit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(self: Deadlines) -> float:
        raise RuntimeError("the keeper broke")

    monkeypatch.setattr(Deadlines, "_expire_due", broken)
    agent = ScriptedAgent([Hang()])
    with pytest.raises(BaseExceptionGroup) as raised:
        async with Engine(agent) as engine:
            engine.start_turn("t", "go")  # (on trio the failing keeper cancels the body)
            await anyio.sleep(0.05)
    leaves: list[BaseException] = [raised.value]
    while any(isinstance(leaf, BaseExceptionGroup) for leaf in leaves):
        leaves = [
            inner
            for leaf in leaves
            for inner in (leaf.exceptions if isinstance(leaf, BaseExceptionGroup) else (leaf,))
        ]
    assert [str(error) for error in leaves] == ["the keeper broke"]
    assert agent.open_streams == 0  # the engine was left cleanly: its turn ended
