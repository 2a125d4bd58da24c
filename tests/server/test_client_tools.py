"""Client tools: the run ends with the client's calls pending, the client's next
RunAgentInput carries their results and the same turn goes on in the server."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from toolrelay import Engine, TextMessage, ThreadKey, ToolRegistry
from toolrelay.backends import AguiHttpBackend
from toolrelay.protocol import ToolMessage
from toolrelay.server import AguiServer
from toolrelay.store import MemoryStore, Record, ToolFinished, ToolsStarted, TurnEnded, TurnStarted
from toolrelay.testing import Gate, ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import HTTPX_GC_ON_TRIO, read_events, run_input, serving

pytestmark = pytest.mark.anyio


def server_tools(ran: list[str]) -> ToolRegistry:
    async def get_secret_number(name: str) -> int:
        """A person's secret number (runs in the server)."""
        ran.append(f"server:{name}")
        return {"alice": 42, "bob": 7}[name]

    return ToolRegistry().register(get_secret_number)


def client_tools(ran: list[str]) -> ToolRegistry:
    async def confirm(question: str) -> str:
        """Ask the person at the client (runs in the client)."""
        ran.append(f"client:{question}")
        return "yes"

    return ToolRegistry().register(confirm)


async def test_toolrelay_engine_completes_a_turn_with_a_mixed_batch() -> None:
    ran: list[str] = []
    store = MemoryStore()
    model = ScriptedAgent(
        [
            tool_call("get_secret_number", {"name": "alice"}, id="s1"),
            tool_call("confirm", {"question": "share it?"}, id="c1"),
        ],
        [text("Alice's number is 42, and you agreed to share it.")],
    )
    server = AguiServer(model, tools=server_tools(ran), store=store)
    async with serving(server) as url:
        backend = AguiHttpBackend(url + "/")
        async with Engine(backend, tools=client_tools(ran)) as engine:
            turn = await engine.run_turn("mixed", "What is Alice's number?")
        await backend.aclose()
    assert turn.status.value == "completed", turn.reason
    assert sorted(ran) == ["client:share it?", "server:alice"]  # each call ran once
    answer = [m for m in turn.messages if isinstance(m, TextMessage)]
    assert answer[-1].text.startswith("Alice's number is 42")
    # The model saw both results in its second run.
    second = model.inputs[1]
    tool_results = {
        m.tool_call_id: m.content for m in second.messages if isinstance(m, ToolMessage)
    }
    assert tool_results == {"s1": "42", "c1": "yes"}
    # One turn in the server's log, from start to end, with both results.
    log = [e.record for e in await store.read(ThreadKey("mixed"))]
    assert sum(isinstance(r, TurnStarted) for r in log) == 1
    assert {r.call_id for r in log if isinstance(r, ToolFinished)} == {"s1", "c1"}
    assert isinstance(log[-1], TurnEnded) and log[-1].status == "completed"


async def test_the_handover_run_ends_with_the_client_calls_pending() -> None:
    model = ScriptedAgent(
        [tool_call("confirm", {"question": "ok?"}, id="c1")],
        [text("Thanks.")],
    )
    declared = [
        {
            "name": "confirm",
            "description": "Ask the person.",
            "parameters": {"type": "object", "properties": {"question": {"type": "string"}}},
        }
    ]
    server = AguiServer(model)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        first = await read_events(
            client, "POST", "/", json_body=run_input("h1", "go", tools=declared)
        )
        assert [e.type for e in first][-4:] == [
            "TOOL_CALL_START",
            "TOOL_CALL_ARGS",
            "TOOL_CALL_END",
            "RUN_FINISHED",
        ]
        finished = first[-1].data
        assert finished["result"]["stopReason"] == "client_tools"
        assert finished["outcome"] == {"type": "success", "pendingToolCallIds": ["c1"]}
        turn = server.engine.turn("h1")
        assert turn is not None and not turn.finished  # the turn waits, running
        body = run_input("h1", "go", tools=declared)
        body["messages"] += [
            {
                "id": "a1",
                "role": "assistant",
                "toolCalls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "confirm", "arguments": '{"question":"ok?"}'},
                    }
                ],
            },
            {"id": "r1", "role": "tool", "toolCallId": "c1", "content": "yes"},
        ]
        second = await read_events(client, "POST", "/", json_body=body)
    types = [e.type for e in second]
    assert types[0] == "RUN_STARTED"
    assert second[0].data["runId"] != first[0].data["runId"]
    assert "TEXT_MESSAGE_CONTENT" in types
    assert second[-1].data["result"]["stopReason"] == "end_turn"
    assert second[0].seq >= first[-1].seq
    assert turn.status.value == "completed"  # final, so finished


async def test_a_result_for_a_call_nobody_waits_for_is_refused() -> None:
    model = ScriptedAgent([text("hi")])
    server = AguiServer(model)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        body = run_input("n1", "x")
        body["messages"].append({"id": "r", "role": "tool", "toolCallId": "ghost", "content": "1"})
        response = await client.post("/", json=body)
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "no_pending_call"
        assert await server.store.thread(ThreadKey("n1")) is None  # nothing written


async def test_a_client_that_never_answers_gets_its_calls_failed_after_the_timeout() -> None:
    model = ScriptedAgent(
        [tool_call("confirm", {"question": "ok?"}, id="c1")],
        [text("No answer came.")],
    )
    declared = [{"name": "confirm", "description": "Ask.", "parameters": {"type": "object"}}]
    server = AguiServer(model, client_tool_timeout=0.3)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        first = await read_events(
            client, "POST", "/", json_body=run_input("to", "go", tools=declared)
        )
        assert first[-1].data["result"]["stopReason"] == "client_tools"
        turn = server.engine.turn("to")
        assert turn is not None
        with anyio.fail_after(10):
            await turn.wait_finished()
        rest = await read_events(client, "GET", f"/threads/to/events?after={first[-1].id}")
    assert turn.status.value == "completed"
    assert rest[0].type == "RUN_STARTED" and rest[-1].data["result"]["stopReason"] == "end_turn"
    assert model.run_count == 2
    # The model was told the call timed out (a handed-over call's result is not echoed
    # on the stream: the log has it).
    told = [m for m in model.inputs[1].messages if isinstance(m, ToolMessage)]
    assert len(told) == 1 and "timed out" in str(told[0].content)


@HTTPX_GC_ON_TRIO
async def test_an_idle_stream_gets_heartbeats() -> None:
    gate = anyio.Event()
    model = ScriptedAgent([Gate(gate), text("late")])
    server = AguiServer(model, heartbeat=0.05)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        async with client.stream("POST", "/", json=run_input("hb", "go")) as response:
            comments = 0
            async for line in response.aiter_lines():
                if line.startswith(": keep-alive"):
                    comments += 1
                    if comments == 3:
                        break
        gate.set()
    assert comments == 3


DECLARED = [{"name": "confirm", "description": "Ask.", "parameters": {"type": "object"}}]


def follow_up(thread: str, *results: tuple[str, str]) -> dict[str, object]:
    """The client's next RunAgentInput: its results for the calls ``results`` names."""
    body = run_input(thread, "go", tools=DECLARED)
    calls = [
        {"id": call_id, "type": "function", "function": {"name": "confirm", "arguments": "{}"}}
        for call_id, _ in results
    ]
    body["messages"] += [{"id": "a1", "role": "assistant", "toolCalls": calls}] + [
        {"id": f"r-{call_id}", "role": "tool", "toolCallId": call_id, "content": content}
        for call_id, content in results
    ]
    return body


async def test_results_for_the_calls_of_a_cancelled_turn_are_refused() -> None:
    model = ScriptedAgent([tool_call("confirm", {}, id="c1")], [text("never")])
    server = AguiServer(model)
    async with serving(server) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        first = await read_events(
            client, "POST", "/", json_body=run_input("cx", "go", tools=DECLARED)
        )
        assert first[-1].data["result"]["stopReason"] == "client_tools"
        assert (await client.post("/threads/cx/cancel")).json()["cancelled"] is True
        turn = server.engine.turn("cx")
        assert turn is not None
        with anyio.fail_after(5):
            await turn.wait_finished()
        response = await client.post("/", json=follow_up("cx", ("c1", "yes")))
        assert response.status_code == 409
        assert response.json()["error"]["code"] == "no_pending_call"
    assert server._slots == {}  # nothing left waiting
    assert model.run_count == 1


async def test_of_two_identical_follow_ups_one_is_taken_and_the_other_refused() -> None:
    for round_ in range(5):
        thread = f"dup{round_}"
        model = ScriptedAgent(
            [tool_call("confirm", {}, id="c1"), tool_call("confirm", {}, id="c2")],
            [text("Both answered.")],
        )
        server = AguiServer(model)
        async with serving(server) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
            await read_events(
                client, "POST", "/", json_body=run_input(thread, "go", tools=DECLARED)
            )
            body = follow_up(thread, ("c1", "yes"), ("c2", "no"))
            answers: list[httpx.Response] = []

            async def post(body: object, answers: list[httpx.Response]) -> None:
                answers.append(await client.post("/", json=body))

            async with anyio.create_task_group() as group:
                group.start_soon(post, body, answers)
                group.start_soon(post, body, answers)
        statuses = sorted(r.status_code for r in answers)
        assert statuses == [200, 409], statuses
        taken = next(r for r in answers if r.status_code == 200)
        frames = [f for f in taken.text.split("\n\n") if f.startswith("id:")]
        assert '"type":"RUN_STARTED"' in frames[0]  # a valid AG-UI stream on its own
        assert '"stopReason":"end_turn"' in frames[-1]
        assert model.run_count == 2


async def test_a_follow_up_with_a_result_for_an_unknown_call_is_refused_before_anything() -> None:
    model = ScriptedAgent([tool_call("confirm", {}, id="c1")], [text("Thanks.")])
    server = AguiServer(model)
    async with serving(server) as url, httpx.AsyncClient(base_url=url, timeout=10) as client:
        await read_events(client, "POST", "/", json_body=run_input("ux", "go", tools=DECLARED))
        before = await server.store.read(ThreadKey("ux"))
        response = await client.post("/", json=follow_up("ux", ("c1", "yes"), ("ghost", "boo")))
        assert response.status_code == 409
        assert "ghost" in response.json()["error"]["message"]
        assert await server.store.read(ThreadKey("ux")) == before  # nothing written
        # The call still waits: the right results are taken.
        rest = await read_events(client, "POST", "/", json_body=follow_up("ux", ("c1", "yes")))
    assert rest[0].type == "RUN_STARTED" and rest[-1].data["result"]["stopReason"] == "end_turn"


class _BatchWriteHeld(MemoryStore):
    """A store whose write of a tool batch commits, then returns only once ``release``
    is set: a stream reads the batch (and a client answers it) before the server
    hears of the commit, as on a loaded process."""

    def __init__(self) -> None:
        super().__init__()
        self.committed = anyio.Event()
        self.release = anyio.Event()

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        seq = await super().append(key, records, owner=owner)
        if any(isinstance(r, ToolsStarted) for r in records) and not self.release.is_set():
            self.committed.set()
            await self.release.wait()
        return seq


async def test_results_that_come_before_the_server_hears_of_the_batchs_commit_are_kept() -> None:
    store = _BatchWriteHeld()
    model = ScriptedAgent([tool_call("confirm", {"question": "ok?"}, id="c1")], [text("Thanks.")])
    server = AguiServer(model, store=store, heartbeat=0.05)  # its streams re-read the log
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        with anyio.fail_after(10):
            body = run_input("early", "go", tools=DECLARED)
            handover = await read_events(client, "POST", "/", json_body=body)
            assert handover[-1].type == "RUN_FINISHED"  # the call is the client's now
            assert not store.release.is_set()  # ...and the server has not heard yet
            answered: list[Any] = []

            async def answer() -> None:
                reply = follow_up("early", ("c1", "yes"))
                answered.extend(await read_events(client, "POST", "/", json_body=reply))

            async with anyio.create_task_group() as group:
                group.start_soon(answer)
                await anyio.sleep(0.2)  # the results are taken while the write is held
                store.release.set()
    assert answered[-1].type == "RUN_FINISHED", [e.type for e in answered]
    log = [e.record for e in await store.read(ThreadKey("early"))]
    assert [r.call_id for r in log if isinstance(r, ToolFinished)] == ["c1"]
    assert isinstance(log[-1], TurnEnded) and log[-1].status == "completed"
