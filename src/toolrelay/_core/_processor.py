"""The sans-IO event processor: one user turn, every run of it, no I/O.

Theory of operation
-------------------
An :class:`EventProcessor` owns one turn on one thread: the user's message, the run
it starts, and every continuation run until the agent answers. The runtime is a thin
loop around it, shaped like an h11 connection::

    run_input = processor.start_run(run_id)          # idle -> running
    for event in stream:                             # decoded AG-UI events
        for effect in processor.receive(event):      # updates the conversation
            ...                                      # ToolsReady / TurnCompleted /
                                                     # TurnInterrupted / TurnEnded
    processor.end_stream()                           # the stream closed
    processor.record_result(call, result)            # once per executed tool; the last
                                                     # one commits the batch
    run_input = processor.start_run(next_run_id)     # executing_tools -> running, depth + 1

A backend that hands over a socket read's events at once feeds them to
:meth:`EventProcessor.receive_many`: what ``receive`` does event after event, up to
each event with effects, with the consecutive deltas for one message or call taken
together.

Effects say everything the runtime acts on: ``ToolsReady`` (run the batch),
``TurnCompleted`` / ``TurnInterrupted`` / ``TurnEnded`` (the turn is over),
``ActivityChanged`` and ``ViolationRaised`` (for observers), and ``MessagesSettled``
(messages that reached their final form, for a durable store).

Every transition of the turn goes through the declared ``RunLifecycle`` and every
transition of a call through ``ToolCallLifecycle`` (their compiled tables); argument
and text deltas are appended to buffers without a transition (promise 8).

The trigger for running tools is the end of the run (RUN_FINISHED), never
TOOL_CALL_END: a run may stream several calls in sequence. How the run ended is
``RUN_FINISHED.outcome`` (AG-UI 1.0):

- absent or ``success``: a normal end; calls pending are executed (``ToolsReady``),
  or, with none, the turn is ``completed`` (``TurnCompleted``). ``success`` may list
  ``pendingToolCallIds``; the processor does not need them, the pending calls are
  the ones the stream left pending.
- ``interrupt``: the agent stopped to ask for something (an approval, a choice) and
  waits for answers. The turn ends ``interrupted`` (``TurnInterrupted``, reason
  ``interrupted``) with its interrupts in :attr:`EventProcessor.interrupts`; calls
  still pending are abandoned, never executed: the agent did not hand them over.
  The answers go in the next turn's first run (``resume=`` entries, see
  :meth:`EventProcessor.start_run`), not in a continuation of this one.
- ``cancelled``: the agent stopped because it was told to. The turn ends
  ``cancelled`` (``TurnEnded``, reason ``agent_cancelled``); pending calls are
  abandoned.

Once the run has ended (RUN_FINISHED or RUN_ERROR), later events of that stream are
dropped with a warning ("late events"); once the turn was ended from this side
(``cancel``, ``supersede``, ``fail``, a limit, :meth:`EventProcessor.end_stream`),
they are dropped silently.

Tolerance (the AG-UI client SDKs' behaviour, written down): the official JS
client's verifier rejects out-of-order events by throwing; a library embedded in a
UI must not crash on a server bug, so toolrelay repairs or drops the event, logs a
warning and records a :class:`ProtocolViolation` instead, and keeps every message
already received (promise 7):

=====================================  ==============================================
event                                   what toolrelay does
=====================================  ==============================================
TOOL_CALL_ARGS / END, unknown id        dropped (``args_for_unknown_call``,
                                        ``end_for_unknown_call``)
TOOL_CALL_ARGS after END, before the    kept: the call runs when the run ends, not at
end of the run                          its END (``args_after_end``, once a call)
TOOL_CALL_ARGS after the agent's        dropped (``args_after_result``)
TOOL_CALL_RESULT
TOOL_CALL_ARGS after a snapshot gave    dropped (``args_after_snapshot``): the server's
the call its arguments                  record stands
TOOL_CALL_START, id already seen        dropped (``duplicate_tool_call_start``)
TOOL_CALL_END twice                     dropped (``duplicate_tool_call_end``)
TOOL_CALL_RESULT, unknown id            dropped (``result_for_unknown_call``), unless the
                                        id is a call the conversation already holds
                                        (servers echo results back; ignored silently)
TEXT_MESSAGE_CONTENT without START      the message is started implicitly
                                        (``content_without_start``)
TEXT_MESSAGE_START, id open             dropped (``duplicate_text_message_start``)
TEXT_MESSAGE_END, id not open           dropped (``end_for_unknown_message``)
any event after RUN_FINISHED/RUN_ERROR  dropped (``event_after_run_end``)
RUN_FINISHED with a text message open   the message is closed (``text_message_not_ended``)
RUN_FINISHED with a call streaming      the call is abandoned, never executed on
                                        arguments that may be incomplete
                                        (``tool_call_not_ended``)
RUN_STARTED twice                       dropped (``duplicate_run_started``)
RUN_FINISHED, ``interrupt`` outcome     the turn ends ``interrupted`` all the same, with
with no interrupt                       nothing to answer
                                        (``interrupt_without_interrupts``): the agent
                                        said the run did not succeed, so its pending
                                        calls are not run and the turn is not
                                        ``completed``; a plain message answers it
RUN_FINISHED, two interrupts with one   the later one is dropped
id                                      (``duplicate_interrupt_id``): a resume entry
                                        answers an interrupt by its id
first *_CHUNK without its id (or,       dropped (``chunk_without_message_id``,
for a tool call, without its name)      ``chunk_without_call_id``); a later chunk
                                        without id continues the open message or call
STATE_DELTA that does not apply         dropped, state unchanged (``state_delta_failed``)
MESSAGES_SNAPSHOT whose arguments for   the snapshot's arguments are used: it is the
a pending call differ from the          server's record (``arguments_from_snapshot``)
streamed ones
an event type toolrelay does not know   ignored (the protocol grows); logged at debug
=====================================  ==============================================

MESSAGES_SNAPSHOT: kept as ``conversation.last_snapshot``; the history is not rewritten
from it, with two exceptions. A server that keeps the thread's history merges the next
request into it by message id, so every tool result goes back under the id the
snapshot shows for its call (LangGraph's adapter announces a result it ran under the
call id and stores it under another; sent back under the first, it would be added
twice). And when a run streamed no text and no call, the assistant messages the
snapshot holds after the last message the conversation knows are its answer (a model
that does not stream): their text is kept (``snapshot_only_message``), their calls are
not executed (``snapshot_only_tool_calls``: they have no lifecycle).

Bounds (promise 11): everything a turn holds that the agent controls is bounded by
:class:`Limits`, per run (events, calls) and per turn (text, reasoning, arguments,
calls, messages, the state's size and the nesting of any JSON walked); passing one is
a :class:`~toolrelay.LimitExceededError` that ends the turn ``failed``
(``protocol_error``, the limit's name as its code). Violations past
``max_violations`` are counted in :attr:`EventProcessor.violations_dropped`, not
kept. A RecursionError while processing is the agent's nesting, not a bug here: it
ends the turn the same way (``max_json_depth``).

Cost (promise 8): no event walks the run's calls or the conversation's messages. The
activity names at most ``MAX_ACTIVITY_NAMES`` calls and counts the rest (the shown
ones are kept incrementally); signatures find their reasoning record by id; a batch
counts the results still due; snapshots ask the conversation's index; STATE_DELTA
patches the state in place under an undo log (:mod:`toolrelay._core._patch`), copying
it once per run at most (the run's input holds the previous one).

Errors: a limit passed, or RUN_ERROR, ends the turn failed and returns
:class:`TurnEnded`. Any other exception while processing first moves the turn to
``failed`` (``internal_error``) and abandons its calls, then propagates: after an
error, the state says so (h11's rule). However a turn ends, a call that was still
open is abandoned (``failed``, listed in :attr:`EventProcessor.abandoned`), and a
call that already had its outcome is committed to the conversation.
"""

from __future__ import annotations

from toolrelay._core._call_events import CallEvents
from toolrelay._core._limits import Limits
from toolrelay._core._processor_base import _HANDLERS
from toolrelay._core._reasoning_events import ReasoningEvents
from toolrelay._core._run_events import RunEvents, _canonical_arguments
from toolrelay._core._state_events import StateEvents
from toolrelay._core._text_events import TextEvents
from toolrelay.protocol import (
    MessagesSnapshotEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = ("EventProcessor", "Limits", "_HANDLERS", "_canonical_arguments")


class EventProcessor(RunEvents, TextEvents, CallEvents, ReasoningEvents, StateEvents):
    """One user turn on one thread, fed decoded AG-UI events; answers with effects.

    Args:
        conversation: The thread's conversation. The caller appends the user's message
            before the first :meth:`start_run`. The processor appends what the agent
            streams and the executed tool calls.
        tools: The tool definitions sent with every run (``RunAgentInput.tools``).
        max_depth: The continuation bound (promise 3): a run that ends with tool calls
            pending after ``max_depth`` continuations ends the turn ``failed``
            (``max_depth``) instead of running them.
        max_repeats: No-progress loop detection: when a run ends with a call to a tool
            whose name and arguments (compared as JSON values: key order and spacing
            do not matter) the turn has now requested ``max_repeats`` times, the turn
            ends ``failed`` (``no_progress``) instead of running the batch, before the
            depth bound is checked. ``None``: off.
        approval_tools: The names of the tools whose calls need the embedding code's
            approval before they run (a tool policy): when the run ends, their calls
            go ``awaiting_approval`` (in :attr:`ToolsReady.awaiting`) instead of
            ``executing``; :meth:`approve` and :meth:`deny` decide each one.
        limits: Size and count bounds.
        context: ``RunAgentInput.context`` for every run.
        forwarded_props: ``RunAgentInput.forwardedProps`` for every run.
        id_factory: Makes message ids (a seeded one gives reproducible tests).
        include_reasoning: Send reasoning back to the agent as ``reasoning`` messages.
        resume: Answers to the interrupts of the thread's previous, interrupted turn
            (``RunAgentInput.resume``), sent with the turn's first run only: a
            continuation carries tool results, not the answers again. The processor
            sends them as given; :func:`~toolrelay.sansio.check_resume` checks them
            against the interrupts (the engine does, before it builds a processor).
    """

    __slots__ = ()


_HANDLERS.update(
    {
        RunStartedEvent: EventProcessor._on_run_started,
        RunFinishedEvent: EventProcessor._on_run_finished,
        RunErrorEvent: EventProcessor._on_run_error,
        TextMessageStartEvent: EventProcessor._on_text_start,
        TextMessageContentEvent: EventProcessor._on_text_content,
        TextMessageEndEvent: EventProcessor._on_text_end,
        TextMessageChunkEvent: EventProcessor._on_text_chunk,
        ToolCallStartEvent: EventProcessor._on_tool_start,
        ToolCallArgsEvent: EventProcessor._on_tool_args,
        ToolCallEndEvent: EventProcessor._on_tool_end,
        ToolCallChunkEvent: EventProcessor._on_tool_chunk,
        ToolCallResultEvent: EventProcessor._on_tool_result,
        ReasoningStartEvent: EventProcessor._on_reasoning_start,
        ReasoningEndEvent: EventProcessor._on_reasoning_end,
        ReasoningMessageStartEvent: EventProcessor._on_reasoning_message_start,
        ReasoningMessageContentEvent: EventProcessor._on_reasoning_content,
        ReasoningMessageChunkEvent: EventProcessor._on_reasoning_chunk,
        ReasoningMessageEndEvent: EventProcessor._on_reasoning_message_end,
        ReasoningEncryptedValueEvent: EventProcessor._on_reasoning_encrypted_value,
        ThinkingStartEvent: EventProcessor._on_reasoning_start,
        ThinkingEndEvent: EventProcessor._on_reasoning_end,
        ThinkingTextMessageStartEvent: EventProcessor._on_thinking_text_start,
        ThinkingTextMessageContentEvent: EventProcessor._on_thinking_text_content,
        ThinkingTextMessageEndEvent: EventProcessor._on_thinking_text_end,
        StateSnapshotEvent: EventProcessor._on_state_snapshot,
        StateDeltaEvent: EventProcessor._on_state_delta,
        MessagesSnapshotEvent: EventProcessor._on_messages_snapshot,
    }
)
