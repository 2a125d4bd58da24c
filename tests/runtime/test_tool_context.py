"""Per-turn context for tools: injected by the engine, never settable by the model."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import anyio
import pytest

from toolrelay import Engine, ToolContext, ToolRegistry, tool
from toolrelay.protocol import RunAgentInput, ToolMessage
from toolrelay.testing import ScriptedAgent, text, tool_call

pytestmark = pytest.mark.anyio


@dataclass(frozen=True)
class Session:
    """What the embedding code hands its tools: who the turn is for."""

    user: str


seen: list[ToolContext[Session]] = []


async def whoami(ctx: ToolContext[Session], greeting: str = "hi") -> str:
    """Greet the turn's user."""
    seen.append(ctx)
    return f"{greeting} {ctx.deps.user}"


def delete_files(path: str, user: str) -> str:
    """Delete files as a user (the engine binds the user)."""
    return f"{user} deleted {path}"


def sent(run_input: RunAgentInput) -> dict[str, ToolMessage]:
    return {m.tool_call_id: m for m in run_input.messages if isinstance(m, ToolMessage)}


async def test_the_engine_injects_its_tool_context_and_a_turn_may_give_its_own() -> None:
    seen.clear()
    agent = ScriptedAgent(
        [tool_call("whoami", {"greeting": "hello"}, id="c1")],
        [text("done")],
        [tool_call("whoami", id="c2")],
        [text("done")],
    )
    with anyio.fail_after(5):
        async with Engine(
            agent, tools=ToolRegistry.of(whoami), tool_context=Session("ada")
        ) as engine:
            await engine.run_turn("t1", "who am I?")
            await engine.run_turn("t2", "and now?", tool_context=Session("grace"))
    assert sent(agent.inputs[1])["c1"].content == "hello ada"
    assert sent(agent.inputs[3])["c2"].content == "hi grace"
    first, second = seen
    assert (first.thread_id, first.tool_call_id, first.tool_name) == ("t1", "c1", "whoami")
    assert first.run_id == agent.inputs[0].run_id
    assert second.thread_id == "t2" and second.deps == Session("grace")
    # The model never sees the context parameter.
    [declared] = agent.inputs[0].tools
    assert "ctx" not in declared.parameters["properties"]


async def test_the_model_cannot_set_the_context_or_a_bound_argument() -> None:
    seen.clear()
    bound = tool(functools.partial(delete_files, user="alice"), name="delete_files")
    agent = ScriptedAgent(
        [
            tool_call("whoami", {"ctx": {"deps": {"user": "root"}}}, id="forged"),
            tool_call("delete_files", {"path": "/", "user": "root"}, id="escalate"),
            tool_call("delete_files", {"path": "/tmp/x"}, id="fine"),
        ],
        [text("done")],
    )
    tools = ToolRegistry.of(whoami, bound)
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools, tool_context=Session("ada")) as engine:
            await engine.run_turn("t1", "go")
    results = sent(agent.inputs[1])
    assert results["forged"].error == (
        "Invalid arguments for tool 'whoami': 'ctx' cannot be set by the model"
    )
    assert results["escalate"].error == (
        "Invalid arguments for tool 'delete_files': 'user' cannot be set by the model"
    )
    assert results["fine"].content == "alice deleted /tmp/x"
    assert seen == []  # the forged call never ran
    declared = {t.name: t.parameters for t in agent.inputs[0].tools}
    assert list(declared["delete_files"]["properties"]) == ["path"]
