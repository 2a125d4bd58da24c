"""The end of a finished turn: its summary for people, its state as JSON for scripts,
and its exit code (``run`` and ``demo``)."""

from __future__ import annotations

from collections import Counter
from typing import TextIO

import msgspec

from toolrelay._core import TextMessage, to_agui_messages
from toolrelay._machines import RunStatus, ToolCallStatus
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay._runtime import Turn
from toolrelay.cli._exit import ExitCode
from toolrelay.cli._live import NAMES_SHOWN
from toolrelay.cli._terminal import SafeOut, summarise_counts
from toolrelay.cli._turn import TurnOutcome
from toolrelay.protocol import encode

__all__ = ("call_counts", "exit_code", "reason_json", "state_json", "write_summary")

_VIOLATIONS_SHOWN = 5  # violations printed one by one in a summary, the rest counted


def _final_answer(turn: Turn) -> str | None:
    for message in reversed(turn.conversation.messages):
        if isinstance(message, TextMessage) and message.role == "assistant" and message.text:
            return message.text
    return None


def write_summary(outcome: TurnOutcome, out: TextIO) -> None:
    """The end of a turn, for people: how it ended, the answer, and counts.

    Text from the wire is neutralised (:func:`~toolrelay.cli._terminal.neutralise`);
    past a few, violations are counted by code rather than printed one by one.
    """
    safe = SafeOut(out)
    turn = outcome.turn
    reason = turn.reason
    stats = turn.statistics()
    if turn.status is RunStatus.completed:
        answer = _final_answer(turn)
        safe.write("\nCompleted: the agent answered.\n", "green")
        if answer is not None:
            safe.write(f"Final answer: {answer}\n")
    elif reason is not None:
        code = f" [{reason.code}]" if reason.code else ""
        safe.write(
            f"\n{turn.status.value.capitalize()} ({reason.kind.value}): {reason.message}{code}\n",
            "red" if turn.status is RunStatus.failed else "yellow",
        )
        kept = len(turn.conversation.messages)
        safe.write(f"Kept: the {kept} message(s) of the conversation so far, nothing lost.\n")
        for interrupt in turn.interrupts:
            asks = interrupt.message or "(no message)"
            call = f" (tool call {interrupt.tool_call_id})" if interrupt.tool_call_id else ""
            safe.write(f"The agent asks [{interrupt.id}, {interrupt.reason}]{call}: {asks}\n")
        if turn.abandoned_calls:
            abandoned_calls = turn.abandoned_calls
            names = ", ".join(f"{call.name} [{call.id}]" for call in abandoned_calls[:NAMES_SHOWN])
            if len(abandoned_calls) > NAMES_SHOWN:
                names += f", and {len(abandoned_calls) - NAMES_SHOWN} more"
            safe.write(f"Abandoned, never executed: {names}\n")
    violations = turn.violations
    for v in violations[:_VIOLATIONS_SHOWN]:
        safe.write(f"Protocol violation ({v.code}) in {v.event_type}: {v.message}\n", "yellow")
    if len(violations) > _VIOLATIONS_SHOWN:
        rest = Counter(v.code for v in violations[_VIOLATIONS_SHOWN:])
        safe.write(
            f"... and {len(violations) - _VIOLATIONS_SHOWN} more protocol violation(s) "
            f"({summarise_counts(rest)})\n",
            "yellow",
        )
    calls = call_counts(turn)
    safe.write(
        f"Runs: {stats.runs} | tool calls: {calls['executed']} executed "
        f"({calls['completed']} completed, {calls['failed']} failed)"
        + (f", {calls['abandoned']} abandoned" if calls["abandoned"] else "")
        + f" | depth: {stats.depth} | time: {outcome.seconds:.2f} s\n"
    )


def call_counts(turn: Turn) -> dict[str, int]:
    """The turn's tool calls, counted once for the summary and the JSON state alike:
    ``executed`` (``completed`` + ``failed``, denied calls among the failed) and
    ``abandoned`` (never executed: the turn ended while they streamed or waited)."""
    statuses = Counter(call.status for call in turn.conversation.tool_calls())
    completed, failed = statuses[ToolCallStatus.completed], statuses[ToolCallStatus.failed]
    return {
        "executed": completed + failed,
        "completed": completed,
        "failed": failed,
        "abandoned": len(turn.abandoned_calls),
    }


def reason_json(reason: TerminalReason | None) -> dict[str, str | None] | None:
    """A terminal reason as the JSON reports print it (``None`` while none)."""
    if reason is None:
        return None
    return {"kind": reason.kind.value, "message": reason.message, "code": reason.code}


def state_json(outcome: TurnOutcome) -> str:
    """The final state of a turn as pretty JSON (camelCase), with a trailing newline."""
    turn = outcome.turn
    stats = turn.statistics()
    document = {
        "status": turn.status.value,
        "reason": reason_json(turn.reason),
        "threadId": turn.key.thread_id,
        "runs": stats.runs,
        "depth": stats.depth,
        "seconds": round(outcome.seconds, 3),
        "toolCalls": call_counts(turn),
        "abandonedCalls": [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in turn.abandoned_calls
        ],
        "violations": [
            {"code": v.code, "eventType": v.event_type, "message": v.message}
            for v in turn.violations
        ],
        "interrupts": list(turn.interrupts),
        "messages": to_agui_messages(turn.conversation.messages),
    }
    return msgspec.json.format(encode(document), indent=2).decode() + "\n"


def exit_code(outcome: TurnOutcome) -> int:
    """The :class:`~toolrelay.cli.ExitCode` of a finished turn."""
    turn = outcome.turn
    if outcome.ctrl_c:
        return ExitCode.CTRL_C
    if turn.status is RunStatus.completed:
        return ExitCode.OK
    if turn.status is RunStatus.interrupted:
        return ExitCode.INTERRUPTED
    if turn.status in (RunStatus.cancelled, RunStatus.superseded):
        return ExitCode.CANCELLED
    reason = turn.reason
    if (
        reason is not None
        and reason.kind is ReasonKind.TRANSPORT_ERROR
        and reason.code == "connect_error"
    ):
        return ExitCode.UNREACHABLE
    return ExitCode.FAILED
