"""Recorded SSE captures of the demo agent, and their replay.

The captures under ``captures/`` are the raw response bodies the demo agent sends for
fixed requests. They are committed bytes: :func:`test_captures_match_the_demo_agent`
fails when the agent's output drifts from them. Re-record with::

    .venv/bin/python tests/backends/test_captures.py
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from toolrelay import RunStatus, ToolCallStatus
from toolrelay._core import ReasoningRecord
from toolrelay.cli._replay import replay_capture
from toolrelay.demo import DEMO_TOOLS, DemoServer
from toolrelay.protocol import (
    AssistantMessage,
    FunctionCall,
    Message,
    RunAgentInput,
    ToolCall,
    ToolMessage,
    UserMessage,
    encode,
)

CAPTURES = Path(__file__).parent / "captures"


@pytest.fixture(scope="module")
def demo_server() -> Iterator[DemoServer]:
    """The demo agent in a thread with its own loop: shared by the asyncio and trio runs."""
    with DemoServer() as server:
        yield server


def _input(scenario: str, messages: list[Message]) -> RunAgentInput:
    return RunAgentInput(
        thread_id="capture-thread",
        run_id=f"capture-{scenario}",
        messages=messages,
        tools=list(DEMO_TOOLS.definitions()),
        forwarded_props={"scenario": scenario},
    )


_ASK = UserMessage(id="user-1", content="What are Alice's and Bob's secret numbers?")
_CALLS = AssistantMessage(
    id="capture-secret-msg-1",
    content="Let me look up both secret numbers.",
    tool_calls=[
        ToolCall(
            id="capture-secret-call-2",
            function=FunctionCall(name="get_secret_number", arguments='{"name":"alice"}'),
        ),
        ToolCall(
            id="capture-secret-call-3",
            function=FunctionCall(name="get_secret_number", arguments='{"name":"bob"}'),
        ),
    ],
)

#: Each capture's file name and the request that produces it.
RECORDINGS: dict[str, RunAgentInput] = {
    "demo-secret-tools-ready.sse": _input("secret", [_ASK]),
    "demo-secret-answer.sse": RunAgentInput(
        thread_id="capture-thread",
        run_id="capture-secret-answer",
        parent_run_id="capture-secret",
        messages=[
            _ASK,
            _CALLS,
            ToolMessage(id="tool-1", tool_call_id="capture-secret-call-2", content="42"),
            ToolMessage(id="tool-2", tool_call_id="capture-secret-call-3", content="7"),
        ],
        tools=list(DEMO_TOOLS.definitions()),
        forwarded_props={"scenario": "secret"},
    ),
    "demo-broken.sse": _input("broken", [_ASK]),
}


def record(url: str, run_input: RunAgentInput) -> bytes:
    """The raw body the agent at ``url`` answers ``run_input`` with, as received (a body
    cut by a dropped connection is kept up to the drop)."""
    body = bytearray()
    with httpx.Client(timeout=10) as client:
        with client.stream(
            "POST",
            url,
            content=encode(run_input),
            headers={"accept": "text/event-stream", "content-type": "application/json"},
        ) as response:
            try:
                for chunk in response.iter_raw():
                    body += chunk
            except httpx.RemoteProtocolError:
                pass  # the broken scenario drops the connection on purpose
    return bytes(body)


@pytest.mark.parametrize("name", sorted(RECORDINGS))
def test_captures_match_the_demo_agent(demo_server: DemoServer, name: str) -> None:
    recorded = (CAPTURES / name).read_bytes()
    fresh = record(demo_server.url, RECORDINGS[name])
    assert fresh == recorded, (
        f"the demo agent's answer drifted from {name}; if that is intended, re-record with "
        "`.venv/bin/python tests/backends/test_captures.py`"
    )


def test_replay_of_a_run_that_ends_with_tool_calls_ready() -> None:
    report = replay_capture((CAPTURES / "demo-secret-tools-ready.sse").read_bytes())
    assert report.ok
    assert report.status is RunStatus.executing_tools
    assert [(c.name, c.arguments) for c in report.ready_calls] == [
        ("get_secret_number", '{"name":"alice"}'),
        ("get_secret_number", '{"name":"bob"}'),
    ]
    assert report.findings == []
    assert report.processor.conversation.thread_id == "capture-thread"
    assert report.processor.run_id == "capture-secret"


def test_replay_of_a_completed_run() -> None:
    report = replay_capture((CAPTURES / "demo-secret-answer.sse").read_bytes())
    assert report.ok
    assert report.status is RunStatus.completed
    assert report.findings == []
    (answer,) = report.processor.conversation.texts()
    assert answer.text == "Alice's secret number is 42 and Bob's secret number is 7."


def test_replay_of_a_broken_run_fails_and_abandons_the_half_streamed_call() -> None:
    report = replay_capture((CAPTURES / "demo-broken.sse").read_bytes())
    assert not report.ok
    assert report.status is RunStatus.failed
    assert report.reason is not None
    assert report.reason.message == "the event stream ended before RUN_FINISHED"
    assert [c.arguments for c in report.processor.abandoned] == ['{"name": "al']


# --- captures of a real third-party server ------------------------------------------------------
#
# Recorded once (not re-recorded: ids and timestamps differ on every run) from pydantic-ai's
# AG-UI adapter (pydantic-ai-slim 2.68.0, ag-ui-protocol 1.0.0) serving the scripted
# FunctionModel of tests/interop/test_pydantic_ai_interop.py, with the demo tools declared
# as client tools. See docs/quirks.md for what they show.


def test_replay_of_pydantic_ai_client_tool_calls() -> None:
    report = replay_capture((CAPTURES / "pydantic-ai-client-tools.sse").read_bytes())
    assert report.findings == []
    assert [(c.id[:7], c.arguments) for c in report.ready_calls] == [
        ("a", '{"name": "alice"}'),
        ("pyd_ai_", '{"name": "bob"}'),
    ]
    # The calls' parent: an assistant text message that was opened and closed empty.
    (parent,) = report.processor.conversation.texts()
    assert parent.text == ""
    assert {c.parent_message_id for c in report.ready_calls} == {parent.id}


def test_replay_of_pydantic_ai_legacy_thinking_events() -> None:
    report = replay_capture((CAPTURES / "pydantic-ai-legacy-thinking.sse").read_bytes())
    assert report.findings == []
    (reasoning,) = [
        m for m in report.processor.conversation.messages if isinstance(m, ReasoningRecord)
    ]
    assert reasoning.text == "The user wants a number."
    assert [c.name for c in report.ready_calls] == ["get_secret_number"]


def test_replay_of_pydantic_ai_server_tool_result_is_not_ready_again() -> None:
    report = replay_capture((CAPTURES / "pydantic-ai-server-tool.sse").read_bytes())
    assert report.findings == []
    assert [c.name for c in report.ready_calls] == ["get_secret_number"]
    resolved = [c for c in report.processor.tool_calls if c.status is ToolCallStatus.completed]
    assert [(c.name, c.result.content if c.result else None) for c in resolved] == [
        ("roll_die", "4")
    ]


# Recorded once, the same way, from LangGraph's AG-UI adapter (ag-ui-langgraph 0.0.47,
# langgraph 1.2.22, ag-ui-protocol 1.0.0; its `/lean` endpoint, without RAW events) serving
# the graph of tests/interop/test_langgraph_interop.py, with the demo tools declared as
# client tools.


def test_replay_of_langgraph_client_tool_calls() -> None:
    report = replay_capture((CAPTURES / "langgraph-client-tools.sse").read_bytes())
    assert report.findings == []
    assert report.status is RunStatus.executing_tools
    assert [(c.id, c.arguments) for c in report.ready_calls] == [
        ("call-a", '{"name": "alice"}'),
        ("call-b", '{"name": "bob"}'),
    ]
    # The calls' parent is the model's message id, never opened as a text message.
    conversation = report.processor.conversation
    assert list(conversation.texts()) == []
    (parent,) = {c.parent_message_id for c in report.ready_calls}
    assert parent is not None and parent.startswith("lc_run--")
    # The graph's state (kept, and sent with the next run) and its messages.
    assert isinstance(conversation.state, dict)
    assert sorted(conversation.state) == ["messages", "tools"]
    assert conversation.last_snapshot is not None
    assert [m.id for m in conversation.last_snapshot] == ["user-1", parent]


if __name__ == "__main__":
    CAPTURES.mkdir(exist_ok=True)
    with DemoServer() as server:
        for file_name, request in RECORDINGS.items():
            (CAPTURES / file_name).write_bytes(record(server.url, request))
            sys.stdout.write(f"recorded {CAPTURES / file_name}\n")
