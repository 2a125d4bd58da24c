"""The turn's deadline (``Limits.turn_seconds``) and the engine's limits handed to
its backend for each run (``RunSettings``)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest

from toolrelay import Engine, Limits, ReasonKind, RunStatus, ThreadKey, ToolCallStatus, ToolRegistry
from toolrelay.backends import (
    EventStream,
    RunSettings,
    current_run_settings,
    effective_limits,
    using_run_settings,
)
from toolrelay.protocol import RunAgentInput
from toolrelay.testing import ScriptedAgent, text, tool_call

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
