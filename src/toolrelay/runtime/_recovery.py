"""What a crash left of a turn, and how its tool batch is put back (promises 9, 10).

The engine resumes a turn its store shows live (:meth:`Engine.recover
<toolrelay.runtime.Engine.recover>`). A turn that was streaming starts that run
again; one that was running tools gets its batch back as the log has it
(:func:`restored_calls`): a call with a stored result keeps it and never runs again.
Of the calls that were running without a result, only those of idempotent tools run
again (:func:`split_for_rerun`); the model is told the others were interrupted
(:data:`INTERRUPTED`), since running them twice could do twice what they do.
"""

from __future__ import annotations

from collections.abc import Sequence

from toolrelay.core import ToolCallInfo, ToolRegistry, ToolResult
from toolrelay.machines import ToolCallEvent, ToolCallStatus
from toolrelay.store import LiveTurn, call_from_record

__all__ = ("INTERRUPTED", "restored_calls", "split_for_rerun")

#: What the model is told of a call that was running when the process stopped, when its
#: tool is not idempotent (so it is not run a second time).
INTERRUPTED = ToolResult.failure(
    "interrupted: the process running this tool call stopped before its result was "
    "saved; the call was not run again (its tool is not declared idempotent)"
)


def restored_calls(live: LiveTurn) -> list[ToolCallInfo]:
    """The calls of ``live``'s last batch while it was still running (none once it
    was committed), each in the state its stored result, if any, says."""
    tools = live.tools
    calls: list[ToolCallInfo] = []
    if tools is None or not live.batch_open:
        return calls
    for stored in tools.calls:
        call = call_from_record(stored)
        result = live.results.get(call.id)
        if result is not None and call.status is ToolCallStatus.awaiting_approval:
            # Decided before the crash: approved and run, or denied.
            if result.ok:
                call.send(ToolCallEvent.approve)
            else:
                call.send(ToolCallEvent.deny)
                call.result = result
        if result is not None and call.status is ToolCallStatus.executing:
            call.send(ToolCallEvent.succeed if result.ok else ToolCallEvent.fail)
            call.result = result
        calls.append(call)
    return calls


def split_for_rerun(
    calls: Sequence[ToolCallInfo], tools: ToolRegistry
) -> tuple[tuple[ToolCallInfo, ...], tuple[ToolCallInfo, ...]]:
    """Of the calls a crash left running: those to run again (their tool is
    idempotent), and those that get :data:`INTERRUPTED`, each in their order."""
    again: list[ToolCallInfo] = []
    interrupted: list[ToolCallInfo] = []
    for call in calls:
        spec = tools.get(call.name)
        (again if spec is not None and spec.idempotent else interrupted).append(call)
    return tuple(again), tuple(interrupted)
