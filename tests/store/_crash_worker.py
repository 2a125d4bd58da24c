"""A process that runs turns on a SQLite store, to be killed with SIGKILL by the tests.

``python _crash_worker.py DB WORKDIR PHASE``: with PHASE ``stream``, ``tool`` or
``between`` it starts one turn on thread ``t`` whose agent (or tools) hang at that
point, and waits to be killed. With PHASE ``recover`` it opens an engine on the same
store (which resumes what the log shows live), waits until no turn is live, and
prints each thread's status as JSON.

Every tool appends its call id to WORKDIR/executions (flushed and synced before it
does anything else), so the tests can count how often each call really ran.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import anyio

from toolrelay import Engine, ThreadKey, ToolRegistry, tool
from toolrelay.protocol import RunAgentInput, ToolMessage
from toolrelay.store import SQLiteStore
from toolrelay.testing import Hang, ScriptedAgent, text, tool_call

DB, WORKDIR, PHASE = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
RECOVERING = PHASE == "recover"


def _ran(name: str) -> None:
    with open(WORKDIR / "executions", "a", encoding="utf-8") as f:
        f.write(name + "\n")
        f.flush()
        os.fsync(f.fileno())


async def _hang_unless_recovering() -> None:
    if not RECOVERING:
        await anyio.sleep_forever()


@tool
async def fast(n: int) -> int:
    """Answers at once."""
    _ran("fast")
    return n + 1


@tool
async def slow(n: int) -> int:
    """Hangs in the first process (not idempotent)."""
    _ran("slow")
    await _hang_unless_recovering()
    return n + 2


@tool(idempotent=True)
async def again(n: int) -> int:
    """Hangs in the first process (idempotent: may run twice)."""
    _ran("again")
    await _hang_unless_recovering()
    return n + 3


def respond(key: ThreadKey, run_input: RunAgentInput) -> list[object]:
    last = run_input.messages[-1]
    if isinstance(last, ToolMessage):
        if PHASE == "between":
            return [Hang()]
        return [text("all done")]
    if PHASE == "stream":
        return [text("a first thought"), Hang()]
    if PHASE == "tool":
        return [
            tool_call("fast", {"n": 1}),
            tool_call("slow", {"n": 1}),
            tool_call("again", {"n": 1}),
        ]
    return [tool_call("fast", {"n": 1})]


async def main() -> None:
    tools = ToolRegistry().register(fast).register(slow).register(again)
    agent = ScriptedAgent(respond=respond)  # type: ignore[arg-type]
    async with Engine(agent, tools=tools, store=SQLiteStore(DB)) as engine:
        if not RECOVERING:
            engine.start_turn("t", "go")
            await anyio.sleep_forever()
        for turn in [engine.turn(k) for k in engine.threads]:
            if turn is not None:
                await turn.wait_finished()
        out = {}
        for key in engine.threads:
            turn = engine.turn(key)
            assert turn is not None
            out[key.thread_id] = {"status": turn.status.value, "reason": str(turn.reason)}
        print(json.dumps(out), flush=True)


anyio.run(main)
