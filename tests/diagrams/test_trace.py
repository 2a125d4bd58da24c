"""toolrelay.diagrams: a turn drawn as a trace (its calls, outcomes and end), and text
from the wire escaped in it."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

from toolrelay import (
    Conversation,
    Engine,
    RunStatus,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
    ToolCallStatus,
    ToolError,
    ToolRegistry,
    ToolResult,
)
from toolrelay._machines import ToolCallEvent
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.diagrams import (
    escape_mermaid,
    trace_diagram,
    trace_diagram_for_turn,
)
from toolrelay.protocol import Interrupt, ResumeEntry, UserMessage
from toolrelay.testing import ScriptedAgent, run_interrupted, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))

# --- trace diagrams ----------------------------------------------------------------------

SECRETS = {"alice": 42, "bob": 7}


async def get_secret_number(name: str) -> int:
    """Look up a person's secret number."""
    if name not in SECRETS:
        raise ToolError(f"nobody called {name}")
    return SECRETS[name]


@pytest.mark.anyio
async def test_trace_of_a_finished_turn_shows_calls_outcomes_continuation_and_end() -> None:
    agent = ScriptedAgent(
        [
            text("Let me look them up."),
            tool_call("get_secret_number", {"name": "alice"}),
            tool_call("get_secret_number", {"name": "zed"}),
        ],
        [text("Alice's number is 42; nobody is called zed.")],
    )
    tools = ToolRegistry().register(get_secret_number)
    async with Engine(agent, tools=tools) as engine:
        turn = await engine.run_turn("t1", "What are the secret numbers?")
    assert turn.status is RunStatus.completed
    lines = trace_diagram_for_turn(turn).splitlines()
    assert lines == [
        "sequenceDiagram",
        "    participant User",
        "    participant Agent",
        "    participant Tools as Tools (toolrelay)",
        "    User->>Agent: What are the secret numbers?",
        "    Note over Agent: run 1",
        "    Agent-->>User: Let me look them up.",
        "    Agent->>Tools: get_secret_number({#34;name#34;:#34;alice#34;})",
        "    Agent->>Tools: get_secret_number({#34;name#34;:#34;zed#34;})",
        "    Tools-->>Agent: get_secret_number: completed: 42",
        "    Tools-->>Agent: get_secret_number: failed: nobody called zed",
        "    Note over Agent,Tools: continuation: run 2 with the tool results",
        "    Agent-->>User: Alice's number is 42#59; nobody is called zed.",
        "    Note over User,Tools: turn completed (completed: the agent answered)",
    ]
    assert trace_diagram_for_turn(turn) == trace_diagram_for_turn(turn)


@pytest.mark.anyio
async def test_trace_of_a_turn_that_hit_the_depth_bound_shows_the_abandoned_call() -> None:
    agent = ScriptedAgent(respond=lambda key, run_input: [tool_call("get_secret_number", "{}")])
    tools = ToolRegistry().register(get_secret_number)
    async with Engine(agent, tools=tools, max_depth=1) as engine:
        turn = await engine.run_turn("t1", "loop forever")
    assert turn.status is RunStatus.failed
    lines = trace_diagram_for_turn(turn).splitlines()
    # The wording of the argument error is the tool registry's; only its outcome matters.
    assert lines[7].startswith("    Tools-->>Agent: get_secret_number: failed: ")
    assert lines[7].endswith("…")  # long: cut at 80 characters
    del lines[7]
    assert lines[4:] == [
        "    User->>Agent: loop forever",
        "    Note over Agent: run 1",
        "    Agent->>Tools: get_secret_number({})",
        "    Note over Agent,Tools: continuation: run 2 with the tool results",
        "    Agent-xTools: get_secret_number({}) abandoned, never run",
        "    Note over User,Tools: turn failed (max_depth: max tool continuation depth "
        "exceeded (1): the agent kept asking for tools)",
    ]


@pytest.mark.anyio
async def test_traces_of_an_interrupted_turn_and_of_the_turn_that_answers_it() -> None:
    asked = Interrupt(id="i1", reason="approval", message="Delete it; really?")
    agent = ScriptedAgent(
        [text("Before I delete:"), tool_call("delete", {}), run_interrupted("t1", "r", asked)],
        [text("Deleted.")],
    )
    async with Engine(agent) as engine:
        first = await engine.run_turn("t1", "Clean up")
        yes = ResumeEntry(interrupt_id="i1", status="resolved", payload=True)
        second = await engine.run_turn("t1", resume=[yes])
    assert trace_diagram_for_turn(first).splitlines()[4:] == [
        "    User->>Agent: Clean up",
        "    Note over Agent: run 1",
        "    Agent-->>User: Before I delete:",
        "    Agent-xTools: delete({}) abandoned, never run",
        "    Agent-->>User: asks: Delete it#59; really?",
        "    Note over User,Tools: turn interrupted (interrupted: the agent waits for an "
        "answer: Delete it#59; really?)",
    ]
    # The answering turn has no message of its own: it starts at its answer.
    assert trace_diagram_for_turn(second).splitlines()[4:] == [
        "    User->>Agent: answer: resolved: True",
        "    Note over Agent: run 1",
        "    Agent-->>User: Deleted.",
        "    Note over User,Tools: turn completed (completed: the agent answered)",
    ]


def _finished_call(name: str, arguments: str, result: ToolResult) -> ToolCallInfo:
    call = ToolCallInfo("id-" + name, name, arguments=arguments)
    call.send(ToolCallEvent.finish_args)
    call.send(ToolCallEvent.execute)
    call.result = result
    call.send(ToolCallEvent.succeed if result.ok else ToolCallEvent.fail)
    return call


def _conversation(*extra: Any) -> Conversation:
    return Conversation(
        "t",
        [
            UserMessage(id="u0", content="an earlier question"),
            TextMessage("m0", text="an earlier answer"),
            UserMessage(id="u1", content="the question"),
            *extra,
        ],
    )


def test_trace_counts_earlier_messages_and_draws_only_the_last_turn() -> None:
    answer = TextMessage("m1", text="the answer")
    lines = trace_diagram(
        _conversation(answer),
        status=RunStatus.completed,
        reason=TerminalReason(kind=ReasonKind.COMPLETED, message="the agent answered"),
    ).splitlines()
    assert "    Note over User,Agent: 2 earlier messages not shown" in lines
    assert "    User->>Agent: the question" in lines
    assert "earlier" not in "\n".join(lines[5:])


def test_trace_uses_the_run_count_to_tell_whether_a_continuation_started() -> None:
    call = _finished_call("lookup", '{"q": 1}', ToolResult.success("found"))
    message = ToolCallBatch(id="b1", calls=(call,), result_message_ids=("r1",))
    cancelled = TerminalReason(kind=ReasonKind.CANCELLED, message="cancelled by the user")
    one_run = trace_diagram(
        _conversation(message), status=RunStatus.cancelled, reason=cancelled, runs=1
    )
    assert "continuation" not in one_run
    two_runs = trace_diagram(
        _conversation(message), status=RunStatus.cancelled, reason=cancelled, runs=2
    )
    assert "continuation: run 2" in two_runs
    assert two_runs.endswith(
        "    Note over User,Tools: turn cancelled (cancelled: cancelled by the user)\n"
    )


def test_trace_of_a_turn_still_running_says_so() -> None:
    diagram = trace_diagram(_conversation(), status=RunStatus.executing_tools, reason=None)
    assert diagram.endswith("    Note over User,Tools: still executing_tools\n")


@pytest.mark.parametrize("status", list(RunStatus), ids=str)
def test_trace_spells_the_turn_state_as_its_id(status: RunStatus) -> None:
    ending = trace_diagram(_conversation(), status=status, reason=None).splitlines()[-1]
    word = "turn" if status.is_final else "still"
    assert ending == f"    Note over User,Tools: {word} {status.value}"


#: The events that move a new tool call (no result attached) to each state.
PATHS: dict[ToolCallStatus, tuple[ToolCallEvent, ...]] = {
    ToolCallStatus.streaming: (),
    ToolCallStatus.pending: (ToolCallEvent.finish_args,),
    ToolCallStatus.awaiting_approval: (ToolCallEvent.finish_args, ToolCallEvent.request_approval),
    ToolCallStatus.executing: (ToolCallEvent.finish_args, ToolCallEvent.execute),
    ToolCallStatus.completed: (ToolCallEvent.receive_result,),
    ToolCallStatus.failed: (ToolCallEvent.abandon,),
}


@pytest.mark.parametrize("status", list(ToolCallStatus), ids=str)
def test_trace_spells_a_tool_call_state_as_its_id(status: ToolCallStatus) -> None:
    call = ToolCallInfo("id-x", "lookup", arguments="{}")
    for event in PATHS[status]:
        call.send(event)
    assert call.status is status
    message = ToolCallBatch(id="b1", calls=(call,), result_message_ids=("r1",))
    diagram = trace_diagram(_conversation(message), status=RunStatus.completed, reason=None)
    (line,) = [line for line in diagram.splitlines() if line.startswith("    Tools-->>Agent")]
    assert line.removeprefix("    Tools-->>Agent: lookup: ").rstrip(":") == status.value


def test_trace_of_a_turn_that_never_started_a_run() -> None:
    failed = TerminalReason(kind=ReasonKind.BACKEND_ERROR, message="no run", code="503")
    diagram = trace_diagram(_conversation(), status=RunStatus.failed, reason=failed, runs=0)
    assert "    Note over Agent: no run started" in diagram
    assert "turn failed (backend_error: no run [503])" in diagram


def test_trace_marks_interrupted_text() -> None:
    cut = TextMessage("m1", text="half an ans")
    cut.interrupted = True
    diagram = trace_diagram(
        _conversation(cut),
        status=RunStatus.failed,
        reason=TerminalReason(kind=ReasonKind.TRANSPORT_ERROR, message="dropped"),
    )
    assert "    Agent-->>User: half an ans (interrupted)" in diagram


# --- escaping ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain text", "plain text"),
        ("a;b", "a#59;b"),
        ("#1 #35;", "#35;1 #35;35#59;"),
        ('say "hi"', "say #34;hi#34;"),
        ("<b>&</b>", "#60;b#62;#38;#60;/b#62;"),
        ("100%%", "100#37;#37;"),
        ("line one\nline two\r\n\tend", "line one line two end"),
        ("  \n ", "(empty)"),
        ("bell\x07ring", "bell ring"),
    ],
)
def test_escape_mermaid(raw: str, escaped: str) -> None:
    assert escape_mermaid(raw) == escaped


def test_escape_mermaid_truncates_long_text_before_escaping() -> None:
    assert escape_mermaid("x" * 100, 10) == "x" * 9 + "…"
    assert escape_mermaid("abcdefgh;;;;;;", 10) == "abcdefgh#59;…"
    assert escape_mermaid("short", 10) == "short"
    with pytest.raises(ValueError):
        escape_mermaid("x", 0)


def test_text_from_the_wire_cannot_change_the_diagram_structure() -> None:
    hostile = 'hi";\nNote over User: injected\nend\n%% comment #x; <script>'
    call = _finished_call("evil;tool", hostile, ToolResult.failure(hostile))
    message = ToolCallBatch(id="b1", calls=(call,), result_message_ids=("r1",))
    conversation = Conversation(
        "t", [UserMessage(id="u", content=hostile), message, TextMessage("m", text=hostile)]
    )
    diagram = trace_diagram(
        conversation,
        status=RunStatus.failed,
        reason=TerminalReason(kind=ReasonKind.AGENT_ERROR, message=hostile),
        runs=2,
        max_text=500,
    )
    lines = diagram.splitlines()
    assert len(lines) == 11  # header 4, user, run, call, result, continuation, text, end
    body = lines[4:]
    for line in body:
        assert line.startswith("    ")
        bare = re.sub(r"#\d+;", "", line.split(": ", 1)[1])  # only entity codes may remain
        assert not set(bare) & set(';"<>%#&'), line
    assert "injected" in lines[4]  # still there, as text on the user's line
    assert all(not line.strip().startswith(("end", "Note over User: injected")) for line in lines)


def test_long_text_is_truncated_in_traces() -> None:
    long = "word " * 100
    diagram = trace_diagram(
        _conversation(TextMessage("m1", text=long)),
        status=RunStatus.completed,
        reason=None,
        max_text=30,
    )
    line = next(line for line in diagram.splitlines() if line.startswith("    Agent-->>User"))
    assert line == "    Agent-->>User: " + ("word " * 6).strip()[:29].rstrip() + "…"
    with pytest.raises(ValueError):
        trace_diagram(_conversation(), status=RunStatus.completed, reason=None, max_text=0)


def test_trace_accepts_messages_and_not_only_a_conversation() -> None:
    conversation = _conversation(TextMessage("m1", text="the answer"))
    assert trace_diagram(
        conversation.messages, status=RunStatus.completed, reason=None
    ) == trace_diagram(conversation, status=RunStatus.completed, reason=None)


def test_tool_call_status_is_final_in_traces() -> None:
    call = _finished_call("lookup", "", ToolResult.success("ok"))
    assert call.status is ToolCallStatus.completed
    message = ToolCallBatch(id="b1", calls=(call,), result_message_ids=("r1",))
    diagram = trace_diagram(_conversation(message), status=RunStatus.completed, reason=None)
    assert "    Agent->>Tools: lookup({})" in diagram
    assert "    Tools-->>Agent: lookup: completed: ok" in diagram
    assert "continuation: run 2" in diagram
