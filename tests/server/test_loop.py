"""The server-side loop (reference 004) over real loopback HTTP, on asyncio and trio."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from toolrelay import ThreadKey, ToolError, ToolRegistry
from toolrelay.server import STOP_EVENT, AguiServer
from toolrelay.store import (
    MemoryStore,
    MessageSaved,
    StateSaved,
    ToolFinished,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
)
from toolrelay.testing import ScriptedAgent, text, tool_call

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _serving import HTTPX_GC_ON_TRIO, Sse, read_events, run_input, serving

pytestmark = pytest.mark.anyio

SECRETS = {"alice": 42, "bob": 7}
calls: list[str] = []


async def get_secret_number(name: str) -> int:
    """Look up a person's secret number."""
    calls.append(name)
    return SECRETS[name]


async def broken(name: str) -> int:
    """A tool that fails."""
    raise ToolError(f"no record of {name}")


def tools() -> ToolRegistry:
    return ToolRegistry().register(get_secret_number).register(broken)


def types(events: list[Sse]) -> list[str]:
    return [e.type for e in events]


def finished(events: list[Sse]) -> dict[str, Any]:
    assert events[-1].type == "RUN_FINISHED", types(events)
    result = events[-1].data["result"]
    assert isinstance(result, dict)
    return result


async def test_one_tool_round_then_the_answer() -> None:
    store = MemoryStore()
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [text("Alice's number is 42.")],
    )
    server = AguiServer(agent, tools=tools(), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        events = await read_events(client, "POST", "/", json_body=run_input("t1", "secret?"))
    assert types(events)[0] == "RUN_STARTED"
    assert [t for t in types(events) if t.startswith(("TOOL", "TEXT"))] == [
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
    ]
    assert finished(events) == {"stopReason": "end_turn", "rounds": 1}
    result = next(e for e in events if e.type == "TOOL_CALL_RESULT")
    assert result.data["content"] == "42"
    # Every event carries the sequence number of a committed record, never going back.
    ids = [e.seq for e in events]
    assert ids == sorted(ids)
    log = await store.read(ThreadKey("t1"))
    assert ids[-1] == log[-1].seq
    assert isinstance(log[-1].record, TurnEnded)
    assert log[-1].record.status == "completed"
    # The model saw the tool's result in its second run.
    assert agent.run_count == 2


async def test_several_rounds_stay_one_run_and_one_turn() -> None:
    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"})],
        [tool_call("get_secret_number", {"name": "bob"})],
        [text("42 and 7")],
    )
    store = MemoryStore()
    server = AguiServer(agent, tools=tools(), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        events = await read_events(client, "POST", "/", json_body=run_input("t2", "both?"))
    assert types(events).count("RUN_STARTED") == 1
    assert types(events).count("TOOL_CALL_RESULT") == 2
    assert finished(events) == {"stopReason": "end_turn", "rounds": 2}
    # One turn in the log, live through both rounds, marked complete once, at the end.
    log = [e.record for e in await store.read(ThreadKey("t2"))]
    assert sum(isinstance(r, TurnStarted) for r in log) == 1
    ends = [r for r in log if isinstance(r, TurnEnded)]
    assert len(ends) == 1 and log[-1] is ends[0] and ends[0].status == "completed"
    assert sum(isinstance(r, ToolsStarted) for r in log) == 2


async def test_the_round_limit_completes_the_turn_with_its_stop_reason() -> None:
    agent = ScriptedAgent(respond=lambda key, ri: tool_call("get_secret_number", {"name": "bob"}))
    server = AguiServer(agent, tools=tools(), max_tool_rounds=3)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        events = await read_events(client, "POST", "/", json_body=run_input("t3", "loop"))
        turn = server.engine.turn("t3")
    assert finished(events) == {"stopReason": "max_tool_rounds", "rounds": 3}
    custom = [e for e in events if e.type == "CUSTOM"]
    assert [c.data["name"] for c in custom] == [STOP_EVENT]
    assert custom[0].data["value"]["stopReason"] == "max_tool_rounds"
    assert agent.run_count == 3  # the model is not called after the third round
    assert turn is not None and turn.status.value == "completed"


async def test_the_round_limit_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOOLRELAY_MAX_TOOL_ROUNDS", "2")
    agent = ScriptedAgent(respond=lambda key, ri: tool_call("get_secret_number", {"name": "bob"}))
    server = AguiServer(agent, tools=tools())
    assert server.max_tool_rounds == 2
    monkeypatch.setenv("TOOLRELAY_MAX_TOOL_ROUNDS", "zero")
    with pytest.raises(ValueError, match="TOOLRELAY_MAX_TOOL_ROUNDS"):
        AguiServer(agent)


async def test_continuation_off_stops_after_the_first_round() -> None:
    agent = ScriptedAgent([tool_call("get_secret_number", {"name": "alice"})], [text("never")])
    server = AguiServer(agent, tools=tools(), continuation=False)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        events = await read_events(client, "POST", "/", json_body=run_input("t4", "x"))
    assert finished(events) == {"stopReason": "tool_use", "rounds": 1}
    assert "TOOL_CALL_RESULT" in types(events)
    assert "TEXT_MESSAGE_START" not in types(events)
    assert agent.run_count == 1


async def test_a_tool_error_is_the_result_and_the_turn_completes() -> None:
    store = MemoryStore()
    agent = ScriptedAgent(
        [tool_call("broken", {"name": "carol"}, id="c9")], [text("Sorry, no record.")]
    )
    server = AguiServer(agent, tools=tools(), store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        events = await read_events(client, "POST", "/", json_body=run_input("t5", "carol?"))
    result = next(e for e in events if e.type == "TOOL_CALL_RESULT")
    assert "no record of carol" in result.data["content"]
    assert finished(events)["stopReason"] == "end_turn"
    assert agent.run_count == 2  # no retry loop: one call, one continuation
    log = await store.read(ThreadKey("t5"))
    finishes = [e.record for e in log if isinstance(e.record, ToolFinished)]
    assert len(finishes) == 1 and finishes[0].result.error == "no record of carol"


async def test_a_new_message_supersedes_the_running_turn_and_streams_its_own_run() -> None:
    import anyio

    from toolrelay.testing import Gate

    gate = anyio.Event()
    second_gate = anyio.Event()
    agent = ScriptedAgent(
        [Gate(gate), text("too late")], [Gate(second_gate), text("the new answer")]
    )
    server = AguiServer(agent, tools=tools())
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        async with anyio.create_task_group() as group:
            old: list[Sse] = []

            async def first() -> None:
                old.extend(await read_events(client, "POST", "/", json_body=run_input("s1", "a")))

            group.start_soon(first)
            with anyio.fail_after(10):
                while agent.run_count < 1:  # noqa: ASYNC110 - the agent has no event to wait on
                    await anyio.sleep(0.01)
            body = run_input("s1", "b")
            body["messages"][0]["id"] = "u-second"
            new: list[Sse] = []

            async def second() -> None:
                new.extend(await read_events(client, "POST", "/", json_body=body))

            group.start_soon(second)
            with anyio.fail_after(10):
                while agent.run_count < 2 or len(old) < 2:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            # The old turn ended after the new one started: one turn is live.
            during = (await client.get("/metrics")).text
            second_gate.set()
            gate.set()
        after = (await client.get("/metrics")).text
    assert [e.type for e in old] == ["RUN_STARTED", "RUN_ERROR"]
    assert old[-1].data["code"] == "superseded"
    assert new[0].type == "RUN_STARTED" and new[0].data["runId"] != old[0].data["runId"]
    assert new[-1].type == "RUN_FINISHED"
    assert [e.data.get("delta") for e in new if e.type == "TEXT_MESSAGE_CONTENT"] == [
        "the new answer"
    ]
    assert "toolrelay_live_turns 1.0" in during
    assert "toolrelay_live_turns 0.0" in after


@HTTPX_GC_ON_TRIO
async def test_text_streams_live_before_its_message_is_written() -> None:
    import anyio

    from toolrelay.protocol import (
        TextMessageContentEvent,
        TextMessageEndEvent,
        TextMessageStartEvent,
    )
    from toolrelay.testing import Gate

    gate = anyio.Event()
    agent = ScriptedAgent(
        [
            TextMessageStartEvent(message_id="m1", role="assistant"),
            TextMessageContentEvent(message_id="m1", delta="Hel"),
            Gate(gate),
            TextMessageContentEvent(message_id="m1", delta="lo"),
            TextMessageEndEvent(message_id="m1"),
        ]
    )
    store = MemoryStore()
    server = AguiServer(agent, store=store)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        early = await read_events(
            client, "POST", "/", json_body=run_input("live", "hi"), stop_after=3
        )
        # The first piece arrived while the message was still being written.
        assert [e.type for e in early] == [
            "RUN_STARTED",
            "TEXT_MESSAGE_START",
            "TEXT_MESSAGE_CONTENT",
        ]
        assert early[-1].data["delta"] == "Hel"
        log = await store.read(ThreadKey("live"))
        saved = [e.record.message for e in log if isinstance(e.record, MessageSaved)]
        assert not any(getattr(message, "role", None) == "assistant" for message in saved)
        gate.set()
        whole = await read_events(client, "GET", "/threads/live/events")
    assert [e.data.get("delta") for e in whole if e.type == "TEXT_MESSAGE_CONTENT"] == ["Hello"]


async def test_an_interrupt_ends_the_run_and_resume_entries_answer_it() -> None:
    from toolrelay.protocol import Interrupt
    from toolrelay.testing import run_interrupted

    def respond(key: ThreadKey, run_input: object) -> list[object]:
        from toolrelay.protocol import RunAgentInput

        assert isinstance(run_input, RunAgentInput)
        if not run_input.resume:
            ask = Interrupt(id="i1", reason="approval", message="Send the email?")
            return [
                text("I need your approval."),
                run_interrupted(run_input.thread_id, run_input.run_id, ask),
            ]
        return [text(f"Answer: {run_input.resume[0].status}.")]

    agent = ScriptedAgent(respond=respond)  # type: ignore[arg-type]
    server = AguiServer(agent)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        first = await read_events(client, "POST", "/", json_body=run_input("int", "email bob"))
        assert first[-1].type == "RUN_FINISHED"
        outcome = first[-1].data["outcome"]
        assert outcome["type"] == "interrupt" and outcome["interrupts"][0]["id"] == "i1"
        body = run_input("int", "email bob")
        body["resume"] = [{"interruptId": "i1", "status": "resolved", "payload": {"ok": True}}]
        body["messages"].append(
            {"id": "a1", "role": "assistant", "content": "I need your approval."}
        )
        second = await read_events(client, "POST", "/", json_body=body)
        wrong = dict(body, resume=[{"interruptId": "nope", "status": "resolved"}])
        refused = await client.post("/", json=wrong)
    said = [e.data["delta"] for e in second if e.type == "TEXT_MESSAGE_CONTENT"]
    assert said == ["Answer: resolved."]
    assert second[-1].data["result"]["stopReason"] == "end_turn"
    assert refused.status_code == 422 and refused.json()["error"]["code"] == "invalid_resume"


async def test_resume_entries_are_checked_against_the_log_not_the_engines_memory() -> None:
    from toolrelay.protocol import Interrupt, RunAgentInput
    from toolrelay.testing import run_interrupted

    def respond(key: ThreadKey, run_input: RunAgentInput) -> list[object]:
        if not run_input.resume:
            ask = Interrupt(id="i1", reason="approval", message="Send the email?")
            return [run_interrupted(run_input.thread_id, run_input.run_id, ask)]
        return [text(f"Answer: {run_input.resume[0].status}.")]

    def resume(thread: str, interrupt_id: str) -> dict[str, Any]:
        answer = {"interruptId": interrupt_id, "status": "resolved", "payload": {}}
        return {"threadId": thread, "runId": "r", "messages": [], "resume": [answer]}

    store = MemoryStore()
    first = ScriptedAgent(respond=respond)  # type: ignore[arg-type]
    async with serving(AguiServer(first, store=store)) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            asked = await read_events(client, "POST", "/", json_body=run_input("int", "email bob"))
            # A thread nobody wrote: no interrupt is open on it.
            new = await client.post("/", json=resume("new", "no-such-interrupt"))
    assert asked[-1].data["outcome"]["type"] == "interrupt"
    assert new.status_code == 422 and new.json()["error"]["code"] == "invalid_resume"
    assert await store.thread(ThreadKey("new")) is None  # nothing written
    before = await store.thread(ThreadKey("int"))
    assert before is not None
    # A server started again on the same log holds no thread in memory.
    agent = ScriptedAgent(respond=respond)  # type: ignore[arg-type]
    async with serving(AguiServer(agent, store=store)) as url:
        async with httpx.AsyncClient(base_url=url) as client:
            unknown = await client.post("/", json=resume("int", "no-such-interrupt"))
            after_refusal = await store.thread(ThreadKey("int"))
            answered = await read_events(client, "POST", "/", json_body=resume("int", "i1"))
    assert unknown.status_code == 422 and unknown.json()["error"]["code"] == "invalid_resume"
    assert after_refusal is not None and after_refusal.last_seq == before.last_seq
    said = [e.data["delta"] for e in answered if e.type == "TEXT_MESSAGE_CONTENT"]
    assert said == ["Answer: resolved."]
    sent = [[entry.interrupt_id for entry in run.resume or ()] for run in agent.inputs]
    assert sent == [["i1"]]  # the model ran once, for the answer


async def test_a_second_drain_ends_the_running_turns_time_at_once() -> None:
    import anyio

    from toolrelay.testing import Gate

    agent = ScriptedAgent([Gate(anyio.Event()), text("never said")])  # never opened
    server = AguiServer(agent, tools=tools(), drain_timeout=600)
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        events: list[Sse] = []
        drains: list[str] = []

        async def stream() -> None:
            events.extend(await read_events(client, "POST", "/", json_body=run_input("d1", "a")))

        async def drain(name: str) -> None:
            await server.drain()
            drains.append(name)

        async with anyio.create_task_group() as group:
            group.start_soon(stream)
            with anyio.fail_after(10):
                while agent.run_count < 1:  # noqa: ASYNC110 - the agent has no event to wait on
                    await anyio.sleep(0.01)
            group.start_soon(drain, "first")
            with anyio.fail_after(10):
                while (await client.get("/healthz")).json() != {"status": "stopping"}:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
            assert drains == []  # the turn has 600 s
            with anyio.fail_after(10):
                await drain("second")
        assert sorted(drains) == ["first", "second"]
        await server.drain()  # over: returns at once
    assert [e.type for e in events] == ["RUN_STARTED", "RUN_ERROR"]
    assert events[-1].data["code"] == "closed"
    ends = [e.record for e in await server.store.read(ThreadKey("d1"))]
    assert [(r.status, r.reason.kind) for r in ends if isinstance(r, TurnEnded)] == [
        ("cancelled", "closed")
    ]


async def test_the_requests_context_and_forwarded_props_reach_every_run_of_its_turn() -> None:
    from toolrelay.protocol import Context

    agent = ScriptedAgent(
        [tool_call("get_secret_number", {"name": "alice"}, id="c1")],
        [text("Alice's number is 42.")],
        [text("Hi.")],
    )
    own = Context(description="The server", value="a test")
    server = AguiServer(agent, tools=tools(), engine_options={"context": (own,)})
    page = {"description": "The page the user is on", "value": "/settings"}
    props = {"plan": "pro"}
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        body = run_input("f1", "secret?", context=[page], forwardedProps=props)
        first = await read_events(client, "POST", "/", json_body=body)
        plain = run_input("f1", "hello")
        plain["messages"][0]["id"] = "u-plain"
        second = await read_events(client, "POST", "/", json_body=plain)
    assert finished(first)["stopReason"] == "end_turn"
    assert finished(second)["stopReason"] == "end_turn"
    with_page = [own, Context(description=page["description"], value=page["value"])]
    asked, continued, later = agent.inputs
    assert list(asked.context) == list(continued.context) == with_page
    assert asked.forwarded_props == continued.forwarded_props == props
    assert list(later.context) == [own]  # a request with none: the server's own
    assert later.forwarded_props in (None, {})
    log = await server.store.read(ThreadKey("f1"))
    starts = [e.record for e in log if isinstance(e.record, TurnStarted)]
    assert [s.forwarded_props for s in starts] == [props, None]


async def test_a_requests_state_becomes_the_threads_and_an_empty_one_keeps_it() -> None:
    from toolrelay.protocol import StateSnapshotEvent

    agent = ScriptedAgent(
        [StateSnapshotEvent(snapshot={"items": ["a"]}), text("Listed.")],
        [text("Noted.")],
        [text("Still.")],
    )
    server = AguiServer(agent, tools=tools())
    async with serving(server) as url, httpx.AsyncClient(base_url=url) as client:
        await read_events(client, "POST", "/", json_body=run_input("s9", "list"))
        edited = run_input("s9", "I added b", state={"items": ["a", "b"]})
        edited["messages"][0]["id"] = "u-edited"
        await read_events(client, "POST", "/", json_body=edited)
        keeps = run_input("s9", "and?")  # state {}: a client that keeps none
        keeps["messages"][0]["id"] = "u-keeps"
        await read_events(client, "POST", "/", json_body=keeps)
    assert [i.state for i in agent.inputs] == [{}, {"items": ["a", "b"]}, {"items": ["a", "b"]}]
    log = await server.store.read(ThreadKey("s9"))
    saved = [e.record.state for e in log if isinstance(e.record, StateSaved)]
    assert saved == [{"items": ["a"]}, {"items": ["a", "b"]}]
