"""No-progress loop detection: the same tool with the same arguments, asked again and
again in one turn, ends the turn ``failed`` (``no_progress``) before the breaker."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import pytest

from toolrelay import Engine, RunStatus, ToolCallStatus, ToolRegistry
from toolrelay._reasons import ReasonKind
from toolrelay.backends._base import ThreadKey
from toolrelay.protocol import RunAgentInput
from toolrelay.sansio import EventProcessor
from toolrelay.testing import ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio

executions: list[str] = []


async def lookup(city: str, days: int = 1) -> str:
    """Look a city up."""
    executions.append(city)
    return f"{city}: sunny"


def spelled_differently(key: ThreadKey, run_input: RunAgentInput) -> Any:
    """The same arguments each run, spelled with other key orders and spacing."""
    spellings = [
        '{"city": "Oslo", "days": 2}',
        '{"days":2,"city":"Oslo"}',
        '{ "city":"Oslo","days": 2 }',
    ]
    index = len(agent_inputs(run_input)) % len(spellings)
    return [tool_call("lookup", spellings[index], id=f"call-{run_input.run_id}")]


def agent_inputs(run_input: RunAgentInput) -> list[object]:
    return [m for m in run_input.messages if getattr(m, "role", None) == "tool"]


async def test_the_same_call_asked_three_times_ends_the_turn_no_progress() -> None:
    executions.clear()
    agent = ScriptedAgent(respond=spelled_differently)
    with anyio.fail_after(5):
        # max_depth 2: the breaker would trip at the same run; loop detection comes first.
        async with Engine(agent, tools=ToolRegistry.of(lookup), max_depth=2) as engine:
            turn = await engine.run_turn("t1", "weather?")
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.NO_PROGRESS
    assert "'lookup' with the same arguments 3 times" in turn.reason.message
    assert executions == ["Oslo", "Oslo"]  # the third request never ran
    assert agent.run_count == 3 and turn.depth == 2
    [abandoned] = turn.abandoned_calls
    assert abandoned.status is ToolCallStatus.failed


async def test_the_bound_is_configurable() -> None:
    executions.clear()
    agent = ScriptedAgent(respond=spelled_differently)
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(lookup), max_repeated_calls=5) as engine:
            turn = await engine.run_turn("t1", "weather?")
    assert turn.reason is not None and turn.reason.kind is ReasonKind.NO_PROGRESS
    assert len(executions) == 4 and agent.run_count == 5


async def test_off_the_breaker_stops_the_loop() -> None:
    executions.clear()
    agent = ScriptedAgent(respond=spelled_differently)
    with anyio.fail_after(5):
        async with Engine(
            agent, tools=ToolRegistry.of(lookup), max_depth=4, max_repeated_calls=None
        ) as engine:
            turn = await engine.run_turn("t1", "weather?")
    assert turn.reason is not None and turn.reason.kind is ReasonKind.MAX_DEPTH
    assert len(executions) == 4


async def test_different_arguments_are_progress() -> None:
    executions.clear()
    counter = itertools.count()

    def new_city_each_time(key: ThreadKey, run_input: RunAgentInput) -> Any:
        n = next(counter)
        if n == 5:
            return [text("done")]
        return [tool_call("lookup", {"city": f"city-{n}"}, id=f"c{n}")]

    agent = ScriptedAgent(respond=new_city_each_time)
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(lookup)) as engine:
            turn = await engine.run_turn("t1", "weather?")
    assert turn.status is RunStatus.completed
    assert len(executions) == 5


async def test_identical_calls_in_one_batch_count_too() -> None:
    executions.clear()
    agent = ScriptedAgent(
        [tool_call("lookup", {"city": "Rome"}, id=f"c{i}") for i in range(3)], [text("never")]
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(lookup)) as engine:
            turn = await engine.run_turn("t1", "weather?")
    assert turn.reason is not None and turn.reason.kind is ReasonKind.NO_PROGRESS
    assert executions == []


async def test_counting_starts_afresh_with_each_turn() -> None:
    executions.clear()
    agent = ScriptedAgent(
        [tool_call("lookup", {"city": "Rome"}, id="a")],
        [text("one")],
        [tool_call("lookup", {"city": "Rome"}, id="b")],
        [text("two")],
        [tool_call("lookup", {"city": "Rome"}, id="c")],
        [text("three")],
    )
    with anyio.fail_after(5):
        async with Engine(agent, tools=ToolRegistry.of(lookup)) as engine:
            turns = [await engine.run_turn("t1", f"weather {i}?") for i in range(3)]
    assert [t.status for t in turns] == [RunStatus.completed] * 3


def test_the_bound_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_repeated_calls"):
        Engine(ScriptedAgent(), max_repeated_calls=0)
    from toolrelay import Conversation

    with pytest.raises(ValueError, match="max_repeats"):
        EventProcessor(Conversation("t"), max_repeats=0)
