"""What a crash left of a turn, and how its tool batch is put back (promises 9, 10).

The engine resumes the turns its store shows live (:meth:`Engine.recover
<toolrelay.Engine.recover>`, by :func:`recover_turns`): each thread is held
as the store has it, then its turn resumes. A turn that was streaming starts that run
again; one that was running tools gets its batch back as the log has it
(:func:`restored_calls`): a call with a stored result keeps it and never runs again,
and the calls the agent ran itself go back where its stream had them
(:func:`restored_agent_results`), as they would have without the crash.
Of the calls that were running without a result, only those of idempotent tools run
again (:func:`split_for_rerun`); the model is told the others were interrupted
(:data:`INTERRUPTED`), since running them twice could do twice what they do.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from toolrelay._core import (
    AgentResult,
    Conversation,
    ThreadKey,
    ToolCallInfo,
    ToolRegistry,
    ToolResult,
)
from toolrelay._machines import ToolCallEvent, ToolCallStatus
from toolrelay._runtime._durable import ThreadLog
from toolrelay._runtime._threads import ThreadTable, TurnT
from toolrelay.store import LiveTurn, Store, call_from_record, replay

__all__ = (
    "INTERRUPTED",
    "recover_turns",
    "restored_agent_results",
    "restored_calls",
    "split_for_rerun",
)

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


def restored_agent_results(live: LiveTurn) -> tuple[AgentResult, ...]:
    """Where the calls the agent ran itself in ``live``'s running batch go back, and
    their results' ids, as the log kept them (none from a version that did not)."""
    tools = live.tools
    if tools is None or not live.batch_open:
        return ()
    return tuple(AgentResult(r.call_id, r.message_id, r.after) for r in tools.agent_results)


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


async def recover_turns(
    store: Store,
    threads: ThreadTable[TurnT],
    wanted: set[ThreadKey] | None,
    resume: Callable[[ThreadKey, Conversation, ThreadLog, LiveTurn], TurnT],
) -> tuple[TurnT, ...]:
    """Resume the turns ``store`` shows live, on the ``wanted`` threads (``None``:
    all) whose turn is not live here: each thread is held as stored, then ``resume``
    starts its turn.

    Raises:
        StoreError: The store could not be read.
    """
    resumed: list[TurnT] = []
    for info in await store.threads(live=True):
        key = info.key
        if wanted is not None and key not in wanted:
            continue
        current = threads.turns.get(key)
        if current is not None and not current.finished:
            continue
        history = replay(await store.read(key))
        live = history.live
        if live is None or (current is not None and not current.finished):
            continue
        conversation, log = threads.restore(store, key, history, info.owner)
        resumed.append(resume(key, conversation, log, live))
    return tuple(resumed)
