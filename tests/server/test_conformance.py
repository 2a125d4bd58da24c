"""Every stream the server sends passes ag-ui-validate (the AG-UI conformance rules, each
citing the spec): turns of one and several rounds, the round limit, a client-tool
handover and its continuation, catch-up from inside a turn, cancel and supersede."""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx
import pytest
from ag_ui_validate.pytest_plugin import validate_agui

from toolrelay import ToolRegistry
from toolrelay.server import AguiServer
from toolrelay.testing import Gate, ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import Sse, read_events, run_input, serving

pytestmark = pytest.mark.anyio


async def lookup(name: str) -> str:
    """Look a name up."""
    return name.upper()


def check(events: list[Sse], *, resumed: bool = False) -> None:
    """No error or warning; a resumed stream continues a run, so its results may name
    calls announced before the point it resumes from (AGUI207), and nothing else."""
    report = validate_agui([event.data for event in events])
    problems = [
        d
        for d in report.diagnostics
        if d.severity in ("error", "warning") and not (resumed and d.rule == "AGUI207")
    ]
    assert not problems, problems
    assert events[0].type == "RUN_STARTED"
    assert events[-1].type in ("RUN_FINISHED", "RUN_ERROR")


@pytest.mark.parametrize("live_text", [True, False], ids=["live-text", "log-only"])
async def test_every_stream_the_server_sends_is_valid_ag_ui(live_text: bool) -> None:
    declared = [
        {
            "name": "confirm",
            "description": "Ask the person.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
    ]

    def respond(key: object, run_input: object) -> list[object]:
        thread = str(key)
        runs = len([r for r in model.records if str(r.key) == thread])
        if thread == "limit":
            return [text(f"Round {runs}.", chunk=3), tool_call("lookup", {"name": "x"})]
        if thread == "mixed" and runs == 1:
            return [
                text("Both.", chunk=2),
                tool_call("lookup", {"name": "a"}),
                tool_call("confirm", {"q": "ok?"}, id="cc1"),
            ]
        if thread == "rounds" and runs < 3:
            return [tool_call("lookup", {"name": str(runs)})]
        if thread == "held":
            return [Gate(gate), text("never")]
        return [text("The answer.", chunk=4)]

    gate = anyio.Event()
    model = ScriptedAgent(respond=respond)  # type: ignore[arg-type]
    server = AguiServer(
        model, tools=ToolRegistry().register(lookup), max_tool_rounds=2, live_text=live_text
    )
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        for thread in ("plain", "rounds", "limit"):
            events = await read_events(client, "POST", "/", json_body=run_input(thread, "go"))
            check(events)
            whole = await read_events(client, "GET", f"/threads/{thread}/events")
            check(whole)
            for event in whole[1:-1]:  # catch-up from inside the turn, at every event
                check(
                    await read_events(
                        client,
                        "GET",
                        f"/threads/{thread}/events",
                        headers={"Last-Event-ID": event.id},
                    ),
                    resumed=True,
                )
        # A client-tool handover, then its continuation.
        first = await read_events(
            client, "POST", "/", json_body=run_input("mixed", "go", tools=declared)
        )
        check(first)
        body = run_input("mixed", "go", tools=declared)
        body["messages"] += [
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": "cc1",
                        "type": "function",
                        "function": {"name": "confirm", "arguments": '{"q":"ok?"}'},
                    }
                ],
            },
            {"id": "r1", "role": "tool", "toolCallId": "cc1", "content": "yes"},
        ]
        check(await read_events(client, "POST", "/", json_body=body))
        # Cancelled, and superseded.
        async with anyio.create_task_group() as group:
            held: list[Sse] = []

            async def hold() -> None:
                held.extend(
                    await read_events(client, "POST", "/", json_body=run_input("held", "a"))
                )

            group.start_soon(hold)
            with anyio.fail_after(10):
                while not any(str(r.key) == "held" for r in model.records):  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            await client.post("/threads/held/cancel")
        check(held)
        assert held[-1].type == "RUN_ERROR"
