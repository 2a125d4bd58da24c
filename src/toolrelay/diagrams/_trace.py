"""Trace diagrams: one finished turn drawn as a Mermaid ``sequenceDiagram``.

Where the machine diagrams show every path a turn *may* take, a trace shows the path
one turn *took*: the user's message, each run of the agent and what it said, each
tool call with its outcome, each continuation, and the terminal state with its
reason. It is drawn from the conversation the turn left behind (plus its status and
reason), so it can be drawn for a live :class:`~toolrelay.Turn` or for a
conversation restored from anywhere.

States are drawn as they are spelled in the machines (``turn completed``, ``still
executing_tools``, ``lookup: failed: ...``): the ``RunStatus`` and ``ToolCallStatus``
values, the labels of the machine diagrams too.

Strategy
--------

The turn is the conversation from its last user message on (earlier messages are
counted in a note, not drawn). The core appends one :class:`ToolCallBatch` per run
that ended with tool calls, once every call has its result; so a run boundary is
exactly a ``ToolCallBatch``, and a continuation follows it when a later run was
started (``runs``, or, without it, when anything follows it or the turn completed).
A turn that answers interrupts draws its resume entries after the user's message (it
may have none); an interrupted turn draws what the agent asks before its ending.

Every piece of text from the wire is reduced to one line (whitespace collapsed),
truncated to ``max_text`` characters, and escaped with Mermaid's entity codes
(``#59;`` for ``;``, which would end the statement; ``#35;`` for ``#``, which starts
an entity; ``#34;``, ``#60;``, ``#62;``, ``#38;``, ``#37;`` for quotes, angle brackets,
ampersands and percent signs), so no agent output can change the diagram's
structure. Ids are never drawn: the same turn draws the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Final

from toolrelay._core import (
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._machines import RunStatus, ToolCallStatus
from toolrelay._reasons import TerminalReason
from toolrelay.protocol import AssistantMessage, Interrupt, ResumeEntry, TextPart, UserMessage

if TYPE_CHECKING:
    from toolrelay._core import ChatMessage
    from toolrelay._runtime import Turn

__all__ = ("DEFAULT_MAX_TEXT", "escape_mermaid", "trace_diagram", "trace_diagram_for_turn")

#: How many characters of a piece of text a trace shows by default.
DEFAULT_MAX_TEXT: Final = 80

_ELLIPSIS: Final = "…"

_ENTITIES: Final = str.maketrans(
    {
        "#": "#35;",
        ";": "#59;",
        '"': "#34;",
        "<": "#60;",
        ">": "#62;",
        "&": "#38;",
        "%": "#37;",
    }
)


def escape_mermaid(text: str, max_text: int = DEFAULT_MAX_TEXT) -> str:
    """``text`` as one safe line of a Mermaid message or note.

    Whitespace runs (newlines included) become one space; text longer than
    ``max_text`` characters is cut and ends with ``…``; characters Mermaid would
    read as syntax become entity codes. An empty result reads ``(empty)``.

    Raises:
        ValueError: ``max_text`` is less than 1.
    """
    if max_text < 1:
        raise ValueError("max_text must be >= 1")
    line = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    if len(line) > max_text:
        line = line[: max_text - 1].rstrip() + _ELLIPSIS
    return line.translate(_ENTITIES) if line else "(empty)"


def _user_text(message: UserMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    parts = [
        part.text if isinstance(part, TextPart) else f"[{type(part).__name__}]"
        for part in message.content
    ]
    return " ".join(parts)


def _outcome(call: ToolCallInfo) -> str:
    """The call's state, spelled as its ``ToolCallStatus`` value, and its result if any."""
    status, result = call.status.value, call.result
    if call.status is ToolCallStatus.completed:
        return f"{status}: {result.content if result is not None else ''}"
    if call.status is ToolCallStatus.failed and result is not None:
        return f"{status}: {result.error if result.error is not None else result.content}"
    return status  # failed without a result, or not final: drawn as it stands


class _Trace:
    def __init__(self, max_text: int) -> None:
        self.max_text = max_text
        self.lines = [
            "sequenceDiagram",
            "    participant User",
            "    participant Agent",
            "    participant Tools as Tools (toolrelay)",
        ]

    def text(self, text: str) -> str:
        return escape_mermaid(text, self.max_text)

    def add(self, line: str) -> None:
        self.lines.append(f"    {line}")

    def call(self, call: ToolCallInfo, arrow: str = "->>", suffix: str = "") -> None:
        arguments = call.arguments or "{}"
        self.add(f"Agent{arrow}Tools: {self.text(f'{call.name}({arguments}){suffix}')}")

    def run(self, number: int, continuation: bool) -> None:
        if continuation:
            self.add(f"Note over Agent,Tools: continuation: run {number} with the tool results")
        else:
            self.add(f"Note over Agent: run {number}")


def _turn_start(messages: Sequence[ChatMessage]) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], UserMessage):
            return index
    return 0


def _continued(rest: Sequence[ChatMessage], status: RunStatus, run: int, runs: int | None) -> bool:
    """Whether a continuation run followed the tool batch that ended run ``run``."""
    if runs is not None:
        return run < runs
    return bool(rest) or status in (RunStatus.completed, RunStatus.interrupted)


def trace_diagram(
    conversation: Conversation | Iterable[ChatMessage],
    *,
    status: RunStatus,
    reason: TerminalReason | None,
    runs: int | None = None,
    abandoned: Sequence[ToolCallInfo] = (),
    interrupts: Sequence[Interrupt] = (),
    resume: Sequence[ResumeEntry] = (),
    max_text: int = DEFAULT_MAX_TEXT,
) -> str:
    """Draw the last turn of ``conversation`` as a Mermaid ``sequenceDiagram``.

    Participants are ``User``, ``Agent`` and ``Tools`` (toolrelay, which runs them).
    The diagram shows the user's message, each run of the agent with its text
    (excerpts) and reasoning, each tool call with its outcome (``completed`` or
    ``failed`` and a short result), each continuation run, the calls the turn
    abandoned, and the terminal state with its reason.

    Args:
        conversation: The thread's conversation (or its messages); the turn is
            everything from its last user message on.
        status: The turn's state in the run lifecycle (final for a finished turn;
            another state is drawn as "still <state>").
        reason: Why the turn ended (``None`` while it runs).
        runs: How many runs the turn started (``TurnSnapshot.run_count``); without
            it, continuations are inferred from the conversation.
        abandoned: Calls the turn abandoned, never executed (``Turn.abandoned_calls``).
        interrupts: What the agent asked, for an interrupted turn (``Turn.interrupts``).
        resume: The answers to earlier interrupts the turn sent (``Turn.resume``).
        max_text: Characters shown of each piece of text before it is cut.

    Returns:
        The diagram, ending with a newline; the same turn always draws the same text.

    Raises:
        ValueError: ``max_text`` is less than 1.
    """
    if max_text < 1:
        raise ValueError("max_text must be >= 1")
    messages: Sequence[ChatMessage] = (
        conversation.messages if isinstance(conversation, Conversation) else list(conversation)
    )
    trace = _Trace(max_text)
    start = _turn_start(messages)
    if start:
        trace.add(f"Note over User,Agent: {start} earlier messages not shown")
    turn = messages[start:]
    if turn and isinstance(turn[0], UserMessage):
        trace.add(f"User->>Agent: {trace.text(_user_text(turn[0]))}")
        turn = turn[1:]
    for entry in resume:
        answer = entry.status if entry.payload is None else f"{entry.status}: {entry.payload}"
        trace.add(f"User->>Agent: {trace.text(f'answer: {answer}')}")
    run = 1
    if runs is None or runs >= 1:
        trace.run(run, continuation=False)
    else:
        trace.add("Note over Agent: no run started")
    for index, message in enumerate(turn):
        if isinstance(message, TextMessage):
            cut = " (interrupted)" if message.interrupted else ""
            trace.add(f"Agent-->>User: {trace.text(message.text)}{cut}")
        elif isinstance(message, ReasoningRecord):
            trace.add(f"Note over Agent: thinking: {trace.text(message.text)}")
        elif isinstance(message, ToolCallBatch):
            for call in message.calls:
                trace.call(call)
            for call in message.calls:
                trace.add(f"Tools-->>Agent: {trace.text(f'{call.name}: {_outcome(call)}')}")
            if _continued(turn[index + 1 :], status, run, runs):
                run += 1
                trace.run(run, continuation=True)
        elif isinstance(message, AssistantMessage):
            if message.content:
                trace.add(f"Agent-->>User: {trace.text(message.content)}")
            for tool_call in message.tool_calls or ():
                name = tool_call.function.name
                trace.add(f"Agent->>Tools: {trace.text(f'{name}({tool_call.function.arguments})')}")
        else:
            role = message.__struct_config__.tag or type(message).__name__
            content = getattr(message, "content", "")
            trace.add(f"Note over Agent: {trace.text(f'{role}: {content}')}")
    for call in abandoned:
        trace.call(call, arrow="-x", suffix=" abandoned, never run")
    for interrupt in interrupts:
        trace.add(f"Agent-->>User: {trace.text(f'asks: {interrupt.message or interrupt.reason}')}")
    if status.is_final:
        ending = f"turn {status.value}"
        if reason is not None:
            ending = f"{ending} ({reason})"
        # The reason is what a reader looks for: it gets twice the room.
        trace.add(f"Note over User,Tools: {escape_mermaid(ending, 2 * max_text)}")
    else:
        trace.add(f"Note over User,Tools: {trace.text(f'still {status.value}')}")
    return "\n".join(trace.lines) + "\n"


def trace_diagram_for_turn(turn: Turn, *, max_text: int = DEFAULT_MAX_TEXT) -> str:
    """:func:`trace_diagram` of a :class:`~toolrelay.Turn`, read as it stands.

    Draws its messages (:attr:`~toolrelay.Turn.messages`, so a turn that only
    answers interrupts starts at its answers), status, reason, run count, abandoned
    calls, interrupts and resume entries.
    """
    snapshot = turn.snapshot()
    return trace_diagram(
        turn.messages,
        status=snapshot.status,
        reason=snapshot.reason,
        runs=snapshot.run_count,
        abandoned=turn.abandoned_calls,
        interrupts=snapshot.interrupts,
        resume=turn.resume,
        max_text=max_text,
    )
