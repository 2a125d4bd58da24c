from __future__ import annotations

import pytest

from toolrelay import Engine, RunStatus, ToolRegistry
from toolrelay.testing import ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio

SECRETS = {"alice": 42, "bob": 7}


async def get_secret_number(name: str) -> int:
    """Look up a person's secret number."""
    return SECRETS[name]


def blocking_secret(name: str) -> int:
    """Look up a person's secret number (blocking)."""
    return SECRETS[name]


@pytest.mark.parametrize("fn", [get_secret_number, blocking_secret])
async def test_secret_number_happy_path(fn: object) -> None:
    agent = ScriptedAgent(
        [
            tool_call(fn.__name__, {"name": "alice"}),  # type: ignore[attr-defined]
            tool_call(fn.__name__, {"name": "bob"}),  # type: ignore[attr-defined]
        ],
        [text("Alice's number is 42, Bob's is 7")],
    )
    async with Engine(agent, tools=ToolRegistry().register(fn)) as engine:  # type: ignore[arg-type]
        turn = await engine.run_turn("t1", "What are the secret numbers?")
    assert turn.status is RunStatus.completed
    contents = [m.content for m in agent.inputs[1].messages if type(m).__name__ == "ToolMessage"]
    assert contents == ["42", "7"]
