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
a :class:`~toolrelay.errors.LimitExceededError` that ends the turn ``failed``
(``protocol_error``, the limit's name as its code). Violations past
``max_violations`` are counted in :attr:`EventProcessor.violations_dropped`, not
kept. A RecursionError while processing is the agent's nesting, not a bug here: it
ends the turn the same way (``max_json_depth``).

Cost (promise 8): no event walks the run's calls or the conversation's messages. The
activity names at most ``MAX_ACTIVITY_NAMES`` calls and counts the rest (the shown
ones are kept incrementally); signatures find their reasoning record by id; a batch
counts the results still due; snapshots ask the conversation's index; STATE_DELTA
patches the state in place under an undo log (:mod:`toolrelay.core._patch`), copying
it once per run at most (the run's input holds the previous one).

Errors: a limit passed, or RUN_ERROR, ends the turn failed and returns
:class:`TurnEnded`. Any other exception while processing first moves the turn to
``failed`` (``internal_error``) and abandons its calls, then propagates: after an
error, the state says so (h11's rule). However a turn ends, a call that was still
open is abandoned (``failed``, listed in :attr:`EventProcessor.abandoned`), and a
call that already had its outcome is committed to the conversation.
"""

from __future__ import annotations

import itertools
import logging
import uuid
from collections import deque
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import Any

import msgspec
from msgspec import UNSET

from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.core._arguments import utf8_len
from toolrelay.core._conversation import (
    ChatMessage,
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallInfo,
    ToolCallMessage,
)
from toolrelay.core._effects import (
    MAX_ACTIVITY_NAMES,
    NO_EFFECTS,
    Activity,
    ActivityChanged,
    ActivityKind,
    Effect,
    MessagesSettled,
    ProtocolViolation,
    ToolsReady,
    TurnCompleted,
    TurnEnded,
    TurnInterrupted,
    ViolationRaised,
)
from toolrelay.core._mapper import conversation_to_agui
from toolrelay.core._patch import BoundedState, JsonPatchError, StateBoundError, StateBounds
from toolrelay.core._tools import ToolResult
from toolrelay.errors import IllegalTransition, LimitExceededError, RemoteProtocolError
from toolrelay.machines import (
    RUN_MACHINE,
    RunEvent,
    RunStatus,
    ToolCallEvent,
    ToolCallStatus,
)
from toolrelay.protocol import (
    AssistantMessage,
    Context,
    Event,
    Interrupt,
    Message,
    MessagesSnapshotEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    ResumeEntry,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
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
    Tool,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UnknownEvent,
)

__all__ = ("EventProcessor", "Limits")

logger = logging.getLogger("toolrelay.core")

_COMPLETED = TerminalReason(kind=ReasonKind.COMPLETED, message="the agent answered")
_AGENT_CANCELLED = TerminalReason(
    kind=ReasonKind.AGENT_CANCELLED, message="the agent reported its run cancelled"
)
_OPEN_CALL = frozenset(
    (
        ToolCallStatus.streaming,
        ToolCallStatus.pending,
        ToolCallStatus.awaiting_approval,
        ToolCallStatus.executing,
    )
)
_AWAITING_APPROVAL = ToolCallStatus.awaiting_approval
_EXECUTING = ToolCallStatus.executing
_CALLING = frozenset((ToolCallStatus.streaming, ToolCallStatus.pending))

# Members read at every run boundary, bound once: on Python 3.11 reading an enum
# member from its class costs a metaclass lookup each time.
_STREAMING = ToolCallStatus.streaming
_PENDING = ToolCallStatus.pending
_FAILED = ToolCallStatus.failed
_EXECUTING_TOOLS = RunStatus.executing_tools

# The activities without tool names, built once (they are immutable).
_IDLE = Activity(ActivityKind.IDLE)
_AWAITING = Activity(ActivityKind.AWAITING)
_STREAMING_TEXT = Activity(ActivityKind.STREAMING_TEXT)
_REASONING = Activity(ActivityKind.REASONING)
_DONE = Activity(ActivityKind.DONE)

# The hot path's sink while no message or call is hot: never appended to (the id it
# goes with is None, which no delta's id equals).
_NO_SINK: list[str] = []


class Limits(msgspec.Struct, frozen=True, kw_only=True):
    """Bounds on what one agent may send; passing one is a typed error, not memory growth.

    The defaults are far above what a real agent sends; with them, no sequence of
    events, each legal on its own, makes a turn hold memory without bound. Passing a
    bound ends the turn ``failed`` with reason ``protocol_error`` and the limit's name
    as its code (:class:`~toolrelay.errors.LimitExceededError`); what was received
    before is kept. ``max_violations`` alone is not an error: past it, violations
    are counted, not kept.

    Attributes:
        max_event_bytes: Size of one encoded event (checked by the transports, on
            decoded bytes: an SSE event, an NDJSON line).
        max_argument_bytes: UTF-8 size of one tool call's arguments (the processor;
            the provider backends for the pieces they buffer).
        max_events_per_run: Events in one run's stream.
        max_turn_argument_bytes: UTF-8 size of the arguments of every call of a turn.
        max_text_bytes: UTF-8 size of the text a turn streams (messages, and tool
            results the agent reports itself).
        max_reasoning_bytes: UTF-8 size of a turn's reasoning (and its signatures).
        max_messages_per_turn: Text and reasoning messages a turn opens.
        max_tool_calls_per_run: Tool calls one run starts.
        max_tool_calls_per_turn: Tool calls a turn starts, over all its runs.
        max_state_bytes: Estimated encoded size of the agent's state.
        max_json_depth: Nesting of the JSON the processor holds or walks (the state,
            a tool result the agent reports, a snapshot's arguments).
        max_violations: Protocol violations kept (and reported) per turn.
        run_seconds: Wall-clock bound on one run's stream, however lively (a server
            trickling a byte a second passes every read timeout): the HTTP backends
            end the run with reason ``deadline`` (``code="run_seconds"``). ``None``:
            no bound.
        turn_seconds: Wall-clock bound on a whole turn, tools and continuations
            included: the engine ends it ``failed``, reason ``deadline``
            (``code="turn_seconds"``). ``None``: no bound.

    docs/limits.md lists every bound, its default and what hitting it looks like.
    """

    max_event_bytes: int = 8 * 1024 * 1024
    max_argument_bytes: int = 4 * 1024 * 1024
    max_events_per_run: int = 1_000_000
    max_turn_argument_bytes: int = 64 * 1024 * 1024
    max_text_bytes: int = 64 * 1024 * 1024
    max_reasoning_bytes: int = 64 * 1024 * 1024
    max_messages_per_turn: int = 100_000
    max_tool_calls_per_run: int = 1_000
    max_tool_calls_per_turn: int = 10_000
    max_state_bytes: int = 64 * 1024 * 1024
    max_json_depth: int = 128
    max_violations: int = 1_000
    run_seconds: float | None = 30 * 60.0
    turn_seconds: float | None = 2 * 60 * 60.0


_ID_PREFIX = uuid.uuid4().hex[:16]
_ID_COUNTER = itertools.count(1)


def _new_id() -> str:
    # Unique per process by the counter and across processes by the random prefix,
    # at a fraction of a uuid4's cost (one is made for every message and tool result).
    return f"{_ID_PREFIX}-{next(_ID_COUNTER)}"


class EventProcessor:
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
            sends them as given; :func:`~toolrelay.core.check_resume` checks them
            against the interrupts (the engine does, before it builds a processor).
    """

    __slots__ = (
        "_activity",
        "_arg_char_safe",
        "_arg_chars",
        "_arg_exact",
        "_arg_sinks",
        "_calling_count",
        "_calling_shown",
        "_calling_waiting",
        "_executing_left",
        "_late_args",
        "_message_count",
        "_reasoning_bytes",
        "_run_call_count",
        "_run_reasoning",
        "_run_texts",
        "_from_snapshot",
        "_snapshot_checked",
        "_state",
        "_text_exact",
        "_text_full_bytes",
        "_text_hot_budget",
        "_text_hot_chars",
        "_text_results",
        "_turn_calls",
        "_turn_texts",
        "violations_dropped",
        "_exact_arg_bytes",
        "_hot_call_id",
        "_hot_call_sink",
        "_hot_text_id",
        "_hot_text_sink",
        "_text_sinks",
        "_calls",
        "_chunk_call",
        "_chunk_reasoning",
        "_chunk_text",
        "_context",
        "_ended",
        "_left",
        "_forwarded_props",
        "_id_factory",
        "_include_reasoning",
        "_limits",
        "_open_reasoning",
        "_open_texts",
        "_result_ids",
        "_resume",
        "_run_first_message",
        "_run",
        "_run_started_seen",
        "_settled",
        "_thinking",
        "_tools",
        "_wire_ended",
        "abandoned",
        "conversation",
        "interrupts",
        "max_depth",
        "max_repeats",
        "_approval_tools",
        "_requested",
        "reason",
        "run_count",
        "run_id",
        "server_run_id",
        "violations",
    )

    def __init__(
        self,
        conversation: Conversation,
        *,
        tools: Sequence[Tool] = (),
        max_depth: int = 10,
        limits: Limits | None = None,
        context: Sequence[Context] = (),
        forwarded_props: Any = None,
        id_factory: Callable[[], str] = _new_id,
        include_reasoning: bool = False,
        resume: Sequence[ResumeEntry] = (),
        max_repeats: int | None = None,
        approval_tools: Collection[str] = (),
    ) -> None:
        if max_depth < 0:
            raise ValueError("max_depth must be >= 0")
        if max_repeats is not None and max_repeats < 1:
            raise ValueError("max_repeats must be >= 1 (None turns loop detection off)")
        self.conversation = conversation
        self.max_depth = max_depth
        self.max_repeats = max_repeats
        self._approval_tools = frozenset(approval_tools)
        # Per (tool name, canonical arguments), how many times this turn asked for it.
        self._requested: dict[tuple[str, str], int] = {}
        self._tools = list(tools)
        self._limits = limits if limits is not None else Limits()
        self._context = list(context)
        self._forwarded_props: Any = {} if forwarded_props is None else forwarded_props
        self._id_factory = id_factory
        self._include_reasoning = include_reasoning
        self._resume = tuple(resume)
        self._run = RUN_MACHINE.cursor()
        #: Why the turn ended (``None`` while it runs).
        self.reason: TerminalReason | None = None
        #: The run id the client chose for the current run.
        self.run_id: str | None = None
        #: The run id the server reported in RUN_STARTED (some servers choose their own).
        self.server_run_id: str | None = None
        #: How many runs were started (1 + continuations).
        self.run_count = 0
        #: Every protocol violation tolerated during the turn, in order.
        self.violations: list[ProtocolViolation] = []
        #: Tool calls that were open when the turn was aborted (cleared from the run).
        self.abandoned: list[ToolCallInfo] = []
        #: What the agent asks, once the turn ended ``interrupted`` (the AG-UI
        #: ``interrupt`` outcome, one id each); empty otherwise.
        self.interrupts: tuple[Interrupt, ...] = ()
        self._activity = _IDLE
        # Where the current run's own messages start in the conversation.
        self._run_first_message = len(conversation.messages)
        self._calls: dict[str, ToolCallInfo] = {}
        self._open_texts: dict[str, TextMessage] = {}
        self._open_reasoning: dict[str, ReasoningRecord] = {}
        self._result_ids: dict[str, str] = {}
        self._chunk_call: ToolCallInfo | None = None
        self._chunk_text: TextMessage | None = None
        self._chunk_reasoning: ReasoningRecord | None = None
        self._thinking: ReasoningRecord | None = None
        # Messages that reached their final form since the last effects were returned
        # (reported once, as MessagesSettled, by _with_settled).
        self._settled: list[ChatMessage] = []
        # Events this run may still take before max_events_per_run (the hot path and
        # the full path count down the same number).
        self._left = self._limits.max_events_per_run
        self._ended = False
        self._wire_ended = False
        self._run_started_seen = False
        # The hot path (see receive): the chunk lists of the open text messages and of
        # the streaming calls, by id, and the bound it may go without a check.
        self._text_sinks: dict[str, list[str]] = {}
        self._arg_sinks: dict[str, list[str]] = {}
        # Argument characters of the whole turn. No call's UTF-8 arguments, nor the
        # turn's, can pass their byte limit while these (4 bytes at most each) stay
        # under a quarter of the smaller one; past that, bytes are counted exactly.
        self._arg_chars = 0
        self._exact_arg_bytes: dict[str, int] = {}
        self._arg_exact: int | None = None
        limits = self._limits
        self._arg_char_safe = min(limits.max_argument_bytes, limits.max_turn_argument_bytes) // 4
        self._turn_calls: list[ToolCallInfo] = []
        self._run_call_count = 0
        # The turn's text, counted the same way: the hot path counts characters
        # within a budget that keeps 4 bytes each plus the full path's exact bytes
        # under the bound; past it, the whole turn's text is counted exactly, once,
        # and then delta by delta (the hot path is closed: budget -1).
        self._turn_texts: list[TextMessage] = []
        self._text_hot_chars = 0
        self._text_full_bytes = 0
        self._text_hot_budget = limits.max_text_bytes // 4
        self._text_exact: int | None = None
        self._text_results = 0
        self._reasoning_bytes = 0
        self._message_count = 0
        # Calls still calling (streaming or pending), for the activity: the first
        # MAX_ACTIVITY_NAMES shown, the rest waiting in order (amortised O(1) each).
        self._calling_count = 0
        self._calling_shown: list[ToolCallInfo] = []
        self._calling_waiting: deque[ToolCallInfo] = deque()
        # Calls of the batch still executing (record_result commits at 0).
        self._executing_left = 0
        # Reasoning records of the run by id (open or closed), for signatures.
        self._run_reasoning: dict[str, ReasoningRecord] = {}
        self._run_texts = False
        self._late_args: set[str] = set()
        self._snapshot_checked: set[str] = set()
        self._from_snapshot: set[str] = set()
        # The agent's state, patched in place within its bounds; built at the first
        # delta of a run (a copy: the RunAgentInput sent holds the previous one).
        self._state: BoundedState | None = None
        #: Violations past ``Limits.max_violations``: counted, not kept.
        self.violations_dropped = 0
        # The hot path's message and call and their chunk lists; an id is None when
        # there is none (no delta's id compares equal); see _hot_text.
        self._hot_text_id: str | None = None
        self._hot_text_sink: list[str] = _NO_SINK
        self._hot_call_id: str | None = None
        self._hot_call_sink: list[str] = _NO_SINK

    # -- what observers read ---------------------------------------------------

    @property
    def status(self) -> RunStatus:
        """The turn's state in the run lifecycle."""
        return self._run.state

    @property
    def depth(self) -> int:
        """Continuations started so far."""
        return self._run.depth

    @property
    def activity(self) -> Activity:
        """What a UI shows for the turn now."""
        return self._activity

    @property
    def tool_calls(self) -> tuple[ToolCallInfo, ...]:
        """The tool calls of the run in flight (cleared once committed or aborted)."""
        return tuple(self._calls.values())

    @property
    def resume(self) -> tuple[ResumeEntry, ...]:
        """The answers to earlier interrupts this turn's first run carries (often none)."""
        return self._resume

    @property
    def run_ended(self) -> bool:
        """True once the current run's stream said RUN_FINISHED or RUN_ERROR, or the
        turn is over: nothing more from that stream is processed."""
        return self._ended

    # -- the turn's lifecycle ------------------------------------------------------

    def start_run(self, run_id: str) -> RunAgentInput:
        """Open a run: the first one (``idle -> running``) or a continuation
        (``executing_tools -> running``, depth + 1, tool results committed first).

        Returns:
            The ``RunAgentInput`` to send: every message including tool results, the
            tool definitions, state, context and forwarded props; for the first run
            only, the ``resume`` entries the processor was given.

        Raises:
            IllegalTransition: The turn is not idle or executing tools (for a
                continuation, every call of the batch must have its result recorded).
        """
        state = self._run.state
        resume: Sequence[ResumeEntry] = ()
        if state is _EXECUTING_TOOLS:
            if self._calls:
                call = next(iter(self._calls.values()))
                raise IllegalTransition(
                    "ToolCallLifecycle", call.status.value, f"continue_run (call {call.id!r})"
                )
            event = RunEvent.continue_run
        else:
            event = RunEvent.start
            resume = self._resume
        parent = self.server_run_id or self.run_id
        self._run.send(event)
        self._reset_run()
        self.run_id = run_id
        self.server_run_id = None
        self.run_count += 1
        self._set_activity(_AWAITING)
        return self.build_run_input(
            run_id, parent_run_id=parent if self.run_count > 1 else None, resume=resume
        )

    def build_run_input(
        self,
        run_id: str,
        *,
        parent_run_id: str | None = None,
        resume: Sequence[ResumeEntry] = (),
    ) -> RunAgentInput:
        """The ``RunAgentInput`` for a run with ``run_id`` from the conversation as it is.

        ``resume`` entries are written as ``resume``; with none the field is left out
        (servers before AG-UI 1.0 do not know it).
        """
        return RunAgentInput(
            thread_id=self.conversation.thread_id,
            run_id=run_id,
            # Left out rather than null: zod's .optional() (TypeScript servers) rejects null.
            parent_run_id=UNSET if parent_run_id is None else parent_run_id,
            messages=conversation_to_agui(
                self.conversation, include_reasoning=self._include_reasoning
            ),
            tools=self._tools,
            context=self._context,
            state=self.conversation.state,
            forwarded_props=self._forwarded_props,
            resume=list(resume) if resume else UNSET,
        )

    def receive(self, event: Event | UnknownEvent) -> Sequence[Effect]:
        """Process one decoded event of the current run's stream.

        Returns:
            The effects for the runtime; the shared empty tuple for most events.
            :class:`ToolsReady`, :class:`TurnCompleted` or :class:`TurnEnded` end the run.

        Raises:
            Exception: Only for a bug: the turn is moved to ``failed`` first.
        """
        # The hot path (promise 8 and the benchmark's 3x-the-decoder bound): a text or
        # argument delta for a message or call that is open, with every bound still
        # far away, is one id compare, one countdown and one list append. Anything
        # else, or any doubt, takes the full path below, which does the same for it.
        cls = type(event)
        if cls is TextMessageContentEvent:
            content: TextMessageContentEvent = event  # type: ignore[assignment]
            # Deltas come in long runs for one message: compare with the last id (a
            # fresh string's hash would be computed for a dict lookup). The id is None
            # while the hot path is closed.
            if content.message_id == self._hot_text_id or self._hot_text(content.message_id):
                left = self._left
                delta = content.delta
                chars = self._text_hot_chars + len(delta)
                if left > 0 and chars <= self._text_hot_budget:
                    self._left = left - 1
                    self._text_hot_chars = chars
                    if delta:
                        self._hot_text_sink.append(delta)
                    return ()  # NO_EFFECTS, as a constant
        elif cls is ToolCallArgsEvent:
            args: ToolCallArgsEvent = event  # type: ignore[assignment]
            if args.tool_call_id == self._hot_call_id or self._hot_call(args.tool_call_id):
                left = self._left
                delta = args.delta
                chars = self._arg_chars + len(delta)
                if left > 0 and chars <= self._arg_char_safe:
                    self._left = left - 1
                    self._arg_chars = chars
                    if delta:
                        self._hot_call_sink.append(delta)
                    return ()  # NO_EFFECTS, as a constant
        # The full path may close the hot message or call, end the run or open a
        # *_CHUNK stream: the next delta asks _hot_text / _hot_call again.
        self._hot_text_id = self._hot_call_id = None
        return self._receive(event)

    def _receive(self, event: Event | UnknownEvent) -> Sequence[Effect]:
        if self._ended:
            if not self._wire_ended:
                # The turn was ended here (cancel, limit, end_stream...), not by the
                # stream: what the stream still sends is not its fault.
                return NO_EFFECTS
            return self._violation(
                "event_after_run_end",
                _type_of(event),
                "event after RUN_FINISHED/RUN_ERROR dropped",
            )
        try:
            if self._left <= 0:
                raise LimitExceededError("max_events_per_run", self._limits.max_events_per_run)
            self._left -= 1
            if (
                self._chunk_call is not None
                or self._chunk_text is not None
                or self._chunk_reasoning is not None
            ):
                cls = type(event)
                if cls is not ToolCallChunkEvent:
                    self._close_tool_chunk()
                if cls is not TextMessageChunkEvent:
                    self._close_text_chunk()
                if cls is not ReasoningMessageChunkEvent:
                    self._close_reasoning_chunk()
            handler = _HANDLERS.get(type(event))
            if handler is None:
                if isinstance(event, UnknownEvent):
                    logger.debug("ignoring unknown AG-UI event type %r", event.type)
                return self._with_settled(NO_EFFECTS)
            return self._with_settled(handler(self, event))
        except RemoteProtocolError as exc:
            return self.fail(exc.reason)
        except RecursionError:
            # Nesting that some walk (ours or a library's) could not take: the agent
            # sent it, so it is malformed input, not a bug here (promise 11).
            return self.fail(
                LimitExceededError(
                    "max_json_depth",
                    self._limits.max_json_depth,
                    f"{_type_of(event)} nested too deep to process",
                ).reason
            )
        except Exception as exc:
            self.fail(
                TerminalReason(
                    kind=ReasonKind.INTERNAL_ERROR,
                    message=f"error while processing {_type_of(event)}: {exc!r}",
                )
            )
            raise

    def end_stream(self) -> Sequence[Effect]:
        """The run's stream closed. Without RUN_FINISHED or RUN_ERROR first, the turn
        fails (``protocol_error``): a stream that ends early is a broken run, and its
        pending calls are abandoned, not executed."""
        if self._ended:
            return self._with_settled(NO_EFFECTS)
        return self.fail(
            TerminalReason(
                kind=ReasonKind.PROTOCOL_ERROR,
                message="the event stream ended before RUN_FINISHED",
            )
        )

    def record_result(self, call: ToolCallInfo, result: ToolResult) -> Sequence[Effect]:
        """Hand in the outcome of an executed call (``executing -> completed | failed``).

        The runtime calls it once per call of the batch, as each finishes. The last
        one commits the batch to the conversation (one :class:`ToolCallMessage`,
        reported as :class:`MessagesSettled`), so a continuation that then fails keeps
        the results (a retry sends them again). On a turn that already ended (cancelled
        or superseded while its tools ran) the result is not taken: its call was
        abandoned.

        Returns:
            ``MessagesSettled`` with the batch once every call has its outcome; the
            shared empty tuple otherwise.

        Raises:
            IllegalTransition: ``call`` is not executing (its result was recorded
                already, or it is not part of the batch); nothing changed.
        """
        if self._run.state.is_final:
            return NO_EFFECTS
        self._send_call(call, ToolCallEvent.succeed if result.error is None else ToolCallEvent.fail)
        call.result = result
        self._executing_left -= 1
        if self._executing_left > 0:
            return NO_EFFECTS
        self._commit_batch()
        return self._with_settled(NO_EFFECTS)

    @property
    def awaiting_approval(self) -> tuple[ToolCallInfo, ...]:
        """The calls of the batch waiting for :meth:`approve` or :meth:`deny`."""
        return tuple(c for c in self._calls.values() if c.status is _AWAITING_APPROVAL)

    def approve(self, call: ToolCallInfo) -> Sequence[Effect]:
        """The embedding code approved ``call`` (``awaiting_approval -> executing``):
        the runtime runs it and hands its result to :meth:`record_result`.

        Returns:
            The activity change; nothing on a turn that already ended.

        Raises:
            IllegalTransition: ``call`` does not await approval; nothing changed.
        """
        if self._run.state.is_final:
            return NO_EFFECTS
        self._send_call(call, ToolCallEvent.approve)
        return self._tools_activity()

    def deny(self, call: ToolCallInfo, message: str) -> Sequence[Effect]:
        """The embedding code denied ``call`` (``awaiting_approval -> failed``): the
        model receives ``message`` as its error. Like :meth:`record_result`, the last
        outcome of the batch commits it.

        Returns:
            The activity change, and ``MessagesSettled`` with the batch when this was
            its last open call; nothing on a turn that already ended.

        Raises:
            IllegalTransition: ``call`` does not await approval; nothing changed.
        """
        if self._run.state.is_final:
            return NO_EFFECTS
        self._send_call(call, ToolCallEvent.deny)
        call.result = ToolResult.failure(message)
        effects = self._tools_activity()
        self._executing_left -= 1
        if self._executing_left > 0:
            return effects
        self._commit_batch()
        return self._with_settled(effects)

    def _tools_activity(self) -> Sequence[Effect]:
        """The activity while a batch runs: awaiting approval while a call does, else
        executing what still runs."""
        awaiting = [c.name for c in self._calls.values() if c.status is _AWAITING_APPROVAL]
        if awaiting:
            return self._set_activity(_named(ActivityKind.AWAITING_APPROVAL, awaiting))
        running = [c.name for c in self._calls.values() if c.status is _EXECUTING]
        if not running:
            return NO_EFFECTS
        return self._set_activity(_named(ActivityKind.EXECUTING_TOOLS, running))

    def restore(
        self,
        *,
        run_id: str,
        depth: int,
        runs: int,
        calls: Sequence[ToolCallInfo] = (),
    ) -> Sequence[Effect]:
        """Put a new processor where a turn a crash interrupted stood: executing the
        tools of run ``run_id`` at continuation depth ``depth``, after ``runs`` runs.

        ``calls`` are the run's calls as the store saved them: ``executing`` ones still
        to finish, and final ones (the agent resolved them, or their result was
        stored). With none, the batch was already committed and the next
        :meth:`start_run` is the continuation.

        Returns:
            :class:`ToolsReady` with the calls still executing, when there are any;
            the shared empty tuple otherwise.

        Raises:
            IllegalTransition: The processor has already started a run.
        """
        if self._run.state is not RunStatus.idle or self.run_count:
            raise IllegalTransition("RunLifecycle", self._run.state.value, "restore")
        self._run = RUN_MACHINE.cursor(_EXECUTING_TOOLS, depth=depth)
        self.run_id = run_id
        self.run_count = runs
        self._calls = {call.id: call for call in calls}
        self._turn_calls.extend(calls)
        executing = tuple(c for c in calls if c.status is ToolCallStatus.executing)
        # Calls still waiting for a decision wait again (Turn.approve / Turn.deny).
        awaiting = tuple(c for c in calls if c.status is _AWAITING_APPROVAL)
        if not executing and not awaiting:
            self._commit_batch()
            return self._with_settled(NO_EFFECTS)
        self._executing_left = len(executing) + len(awaiting)
        return (*self._tools_activity(), ToolsReady(executing, awaiting))

    def _with_settled(self, effects: Sequence[Effect]) -> Sequence[Effect]:
        """``effects``, with the messages settled since the last answer reported once."""
        if not self._settled:
            return effects
        settled = MessagesSettled(tuple(self._settled))
        self._settled.clear()
        return (*effects, settled)

    def _settle(self, message: ChatMessage) -> None:
        self._settled.append(message)

    def _commit_batch(self) -> None:
        """Append the run's calls, each final, to the conversation as one
        :class:`ToolCallMessage` and clear the in-flight calls. Called when the last
        result of a batch is recorded, when a run completes with calls the agent
        resolved itself, and when a turn ends (the calls that had an outcome)."""
        if not self._calls:
            return
        calls: list[ToolCallInfo] = []
        ids: list[str] = []
        for call in self._calls.values():
            if call.result is not None:
                calls.append(call)
                ids.append(self._result_ids.get(call.id) or self._id_factory())
        self._calls = {}
        if not calls:
            return
        message = ToolCallMessage(
            id=self._id_factory(), calls=tuple(calls), result_message_ids=tuple(ids)
        )
        self.conversation.append(message)
        self._settle(message)

    def fail(self, reason: TerminalReason) -> Sequence[Effect]:
        """End the turn ``failed`` with ``reason``; a no-op on a finished turn."""
        return self._terminate(RunEvent.fail, reason)

    def cancel(
        self, message: str = "cancelled", *, kind: ReasonKind = ReasonKind.CANCELLED
    ) -> Sequence[Effect]:
        """End the turn ``cancelled`` (promise 4); a no-op on a finished turn.

        Args:
            message: Why, for a person.
            kind: ``cancelled``, or ``closed`` when the engine itself was closed.
        """
        return self._terminate(RunEvent.cancel, TerminalReason(kind=kind, message=message))

    def supersede(self, message: str = "a newer turn took over the thread") -> Sequence[Effect]:
        """End the turn ``superseded`` (promise 5); a no-op on a finished turn."""
        return self._terminate(
            RunEvent.supersede, TerminalReason(kind=ReasonKind.SUPERSEDED, message=message)
        )

    # -- internals -------------------------------------------------------------

    def _reset_run(self) -> None:
        self._run_first_message = len(self.conversation.messages)
        self._calls = {}
        self._open_texts = {}
        self._open_reasoning = {}
        self._result_ids = {}
        self._chunk_call = None
        self._chunk_text = None
        self._chunk_reasoning = None
        self._thinking = None
        self._left = self._limits.max_events_per_run
        self._ended = False
        self._wire_ended = False
        self._run_started_seen = False
        self._text_sinks = {}
        self._arg_sinks = {}
        self._exact_arg_bytes = {}
        self._hot_text_id = self._hot_call_id = None
        self._run_call_count = 0
        self._calling_count = 0
        self._calling_shown = []
        self._calling_waiting = deque()
        self._executing_left = 0
        self._run_reasoning = {}
        self._run_texts = False
        self._late_args = set()
        self._snapshot_checked = set()
        self._from_snapshot = set()
        self._state = None

    def _hot_text(self, message_id: str) -> bool:
        """Make ``message_id`` the hot path's message, if it may be: the message is open,
        the run is, and no *_CHUNK stream waits to be closed by the next event.

        The hot ids are forgotten whenever any of that may change: at every event of
        the full path, and by the two methods that change it from outside receive
        (_end, which ends the turn; _reset_run, which opens a run). Outside
        receive, calls change status only there or once they have left ``streaming``
        (record_result), so their sinks are already gone.
        """
        sink = self._text_sinks.get(message_id)
        if sink is None or not self._hot_allowed():
            return False
        self._hot_text_id = message_id
        self._hot_text_sink = sink
        return True

    def _hot_call(self, call_id: str) -> bool:
        """Like :meth:`_hot_text`, for a streaming call's arguments."""
        sink = self._arg_sinks.get(call_id)
        if sink is None or not self._hot_allowed():
            return False
        self._hot_call_id = call_id
        self._hot_call_sink = sink
        return True

    def _hot_allowed(self) -> bool:
        return not self._ended and (
            self._chunk_call is None and self._chunk_text is None and self._chunk_reasoning is None
        )

    def _send_call(self, call: ToolCallInfo, event: ToolCallEvent) -> None:
        # Every transition of a call goes through here, so a call that leaves
        # `streaming` also leaves the hot path's sinks.
        self._arg_sinks.pop(call.id, None)
        call.send(event)

    def _set_activity(self, activity: Activity) -> Sequence[Effect]:
        current = self._activity
        if activity is current or activity == current:
            return NO_EFFECTS
        self._activity = activity
        return (ActivityChanged(activity),)

    def _violation(self, code: str, event_type: str, message: str) -> Sequence[Effect]:
        if len(self.violations) >= self._limits.max_violations:
            # Kept and reported up to the bound; past it, counted (and said once).
            if not self.violations_dropped:
                logger.warning(
                    "more than %d AG-UI protocol violations in one turn: "
                    "the next ones are counted, not kept",
                    self._limits.max_violations,
                )
            self.violations_dropped += 1
            return NO_EFFECTS
        violation = ProtocolViolation(code=code, event_type=event_type, message=message)
        self.violations.append(violation)
        logger.warning(
            "AG-UI protocol violation (%s) in %s: %s",
            code,
            event_type,
            message,
            extra={"protocol_violation": violation},  # lets a reporter of its own drop it
        )
        return (ViolationRaised(violation),)

    def _terminate(self, event: RunEvent, reason: TerminalReason) -> Sequence[Effect]:
        if self._run.state.is_final:
            return NO_EFFECTS
        return self._with_settled((*self._end(event, reason), TurnEnded(reason)))

    def _end(self, event: RunEvent, reason: TerminalReason) -> Sequence[Effect]:
        """End the turn by ``event``: close what is open, abandon the open calls, commit
        the settled ones, move the machine, record ``reason``. Returns the activity's
        effects; the caller adds the ending effect."""
        self._close_open_messages(interrupted=True)
        settled: dict[str, ToolCallInfo] = {}
        for key, call in self._calls.items():
            if call.status in _OPEN_CALL:
                self._send_call(call, ToolCallEvent.abandon)
                if call.result is None:
                    call.result = ToolResult.failure(f"abandoned: {reason.message}")
                self.abandoned.append(call)
            else:
                settled[key] = call
        # Calls that already have an outcome (the agent's TOOL_CALL_RESULT, a result the
        # runtime recorded) are kept in the conversation, not dropped (promise 7).
        self._calls = settled
        self._commit_batch()
        self._run.send(event)
        self.reason = reason
        self._ended = True
        self._hot_text_id = self._hot_call_id = None
        return self._set_activity(_DONE)

    def _close_open_messages(self, *, interrupted: bool) -> None:
        for text in self._open_texts.values():
            text.complete = True
            text.interrupted = interrupted
            self._settle(text)
        self._open_texts.clear()
        self._text_sinks.clear()
        self._chunk_text = None
        for record in self._open_reasoning.values():
            record.complete = True
            self._settle(record)
        self._open_reasoning.clear()
        self._chunk_reasoning = None
        if self._thinking is not None:
            self._thinking.complete = True
            self._settle(self._thinking)
            self._thinking = None

    def _close_tool_chunk(self) -> None:
        call = self._chunk_call
        if call is not None:
            self._chunk_call = None
            if call.status is _STREAMING:
                self._send_call(call, ToolCallEvent.finish_args)

    def _close_reasoning_chunk(self) -> None:
        record = self._chunk_reasoning
        if record is not None:
            self._chunk_reasoning = None
            if self._open_reasoning.pop(record.id, None) is not None:
                record.complete = True
                self._settle(record)

    def _close_text_chunk(self) -> None:
        text = self._chunk_text
        if text is not None:
            self._chunk_text = None
            self._text_sinks.pop(text.id, None)
            if self._open_texts.pop(text.id, None) is not None:
                text.complete = True
                self._settle(text)

    def _calling_activity(self) -> Sequence[Effect]:
        # O(MAX_ACTIVITY_NAMES), whatever the number of calls (promise 8).
        count = self._calling_count
        if not count:
            return self._set_activity(_AWAITING)
        shown = self._calling_shown
        current = self._activity
        if (
            current.kind is ActivityKind.CALLING_TOOLS
            and len(current.tool_names) == len(shown)
            and current.more == count - len(shown)
            and all(a == b.name for a, b in zip(current.tool_names, shown, strict=True))
        ):
            return NO_EFFECTS
        names = tuple(call.name for call in shown)
        return self._set_activity(
            Activity(ActivityKind.CALLING_TOOLS, names, more=count - len(names))
        )

    def _calling_started(self, call: ToolCallInfo) -> None:
        self._calling_count += 1
        if len(self._calling_shown) < MAX_ACTIVITY_NAMES and not self._calling_waiting:
            self._calling_shown.append(call)
        else:
            self._calling_waiting.append(call)

    def _calling_stopped(self, call: ToolCallInfo) -> None:
        """``call`` left streaming / pending within the run (the agent gave its result)."""
        self._calling_count -= 1
        shown = self._calling_shown
        if call in shown:
            shown.remove(call)
            waiting = self._calling_waiting
            while waiting and len(shown) < MAX_ACTIVITY_NAMES:
                candidate = waiting.popleft()
                if candidate.status in _CALLING:
                    shown.append(candidate)

    # -- run events -----------------------------------------------------------

    def _on_run_started(self, event: RunStartedEvent) -> Sequence[Effect]:
        if self._run_started_seen:
            return self._violation(
                "duplicate_run_started", "RUN_STARTED", "second RUN_STARTED in one run dropped"
            )
        self._run_started_seen = True
        self.server_run_id = event.run_id
        if event.thread_id != self.conversation.thread_id:
            return self._violation(
                "thread_id_mismatch",
                "RUN_STARTED",
                f"server reported threadId {event.thread_id!r}, "
                f"client sent {self.conversation.thread_id!r}",
            )
        return NO_EFFECTS

    def _on_run_finished(self, event: RunFinishedEvent) -> Sequence[Effect]:
        self._ended = True
        self._wire_ended = True
        effects: list[Effect] = []
        for text in self._open_texts.values():
            if text is not self._chunk_text:
                effects.extend(
                    self._violation(
                        "text_message_not_ended",
                        "RUN_FINISHED",
                        f"text message {text.id!r} closed by RUN_FINISHED",
                    )
                )
        self._close_open_messages(interrupted=False)
        # What is kept: pending calls and calls the agent resolved itself
        # (TOOL_CALL_RESULT); the abandoned ones (now failed) are dropped from the run.
        kept: dict[str, ToolCallInfo] = {}
        pending: list[ToolCallInfo] = []
        for key, call in self._calls.items():
            status = call.status
            if status is _STREAMING:
                self._send_call(call, ToolCallEvent.abandon)
                call.result = ToolResult.failure("abandoned: the run ended before TOOL_CALL_END")
                self.abandoned.append(call)
                effects.extend(
                    self._violation(
                        "tool_call_not_ended",
                        "RUN_FINISHED",
                        f"tool call {call.id!r} ({call.name}) had no TOOL_CALL_END; "
                        "it is abandoned, not executed",
                    )
                )
            elif status is not _FAILED:
                kept[key] = call
                if status is _PENDING:
                    pending.append(call)
        self._calls = kept
        outcome = event.outcome
        if outcome is not None and type(outcome) is not RunFinishedSuccessOutcome:
            # The agent stopped to ask, or because it was told to: what is pending is
            # abandoned, not executed, whatever the depth.
            if isinstance(outcome, RunFinishedInterruptOutcome):
                effects.extend(self._interrupt(outcome.interrupts))
            else:
                effects.extend(self._terminate(RunEvent.cancel, _AGENT_CANCELLED))
            return tuple(effects)
        if pending:
            repeated = self._repeated(pending)
            if repeated is not None:
                effects.extend(self.fail(repeated))
                return tuple(effects)
            if self._run.depth >= self.max_depth:
                effects.extend(
                    self.fail(
                        TerminalReason(
                            kind=ReasonKind.MAX_DEPTH,
                            message=(
                                f"max tool continuation depth exceeded ({self.max_depth}): "
                                "the agent kept asking for tools"
                            ),
                        )
                    )
                )
                return tuple(effects)
            self._run.send(RunEvent.execute_tools)
            ready: list[ToolCallInfo] = []
            awaiting: list[ToolCallInfo] = []
            for call in pending:
                if call.name in self._approval_tools:
                    self._send_call(call, ToolCallEvent.request_approval)
                    awaiting.append(call)
                else:
                    self._send_call(call, ToolCallEvent.execute)
                    ready.append(call)
            # Outcomes still due: a result for each call that runs, a decision (then a
            # result, or the denial) for each that awaits approval.
            self._executing_left = len(pending)
            effects.extend(self._tools_activity())
            effects.append(ToolsReady(tuple(ready), tuple(awaiting)))
            return tuple(effects)
        self._commit_batch()
        self._run.send(RunEvent.complete)
        self.reason = _COMPLETED
        effects.extend(self._set_activity(_DONE))
        effects.append(TurnCompleted(_COMPLETED))
        return tuple(effects)

    def _repeated(self, pending: Sequence[ToolCallInfo]) -> TerminalReason | None:
        """Count the batch's requests; the ``no_progress`` reason once one reaches
        :attr:`max_repeats` (``None`` while none does, or when detection is off)."""
        limit = self.max_repeats
        if limit is None:
            return None
        tripped: tuple[str, int] | None = None
        for call in pending:
            key = (call.name, _canonical_arguments(call.arguments))
            count = self._requested.get(key, 0) + 1
            self._requested[key] = count
            if count >= limit and tripped is None:
                tripped = (call.name, count)
        if tripped is None:
            return None
        name, count = tripped
        return TerminalReason(
            kind=ReasonKind.NO_PROGRESS,
            message=(
                f"no progress: the agent asked for tool {name!r} with the same arguments "
                f"{count} times in this turn (max_repeats={limit})"
            ),
        )

    def _interrupt(self, interrupts: Sequence[Interrupt]) -> list[Effect]:
        """End the turn ``interrupted`` on the agent's ``interrupts`` (ids made unique)."""
        effects: list[Effect] = []
        unique: dict[str, Interrupt] = {}
        for interrupt in interrupts:
            if interrupt.id in unique:
                effects.extend(
                    self._violation(
                        "duplicate_interrupt_id",
                        "RUN_FINISHED",
                        f"interrupt id {interrupt.id!r} used twice in one run; "
                        "the later one dropped",
                    )
                )
            else:
                unique[interrupt.id] = interrupt
        if not unique:
            effects.extend(
                self._violation(
                    "interrupt_without_interrupts",
                    "RUN_FINISHED",
                    "the interrupt outcome names no interrupt; the turn ends interrupted "
                    "with nothing to answer",
                )
            )
        asked = tuple(unique.values())
        reason = TerminalReason(kind=ReasonKind.INTERRUPTED, message=_waiting_for(asked))
        effects.extend(self._end(RunEvent.interrupt, reason))
        self.interrupts = asked
        effects.append(TurnInterrupted(reason, asked))
        return effects

    def _on_run_error(self, event: RunErrorEvent) -> Sequence[Effect]:
        self._wire_ended = True
        return self.fail(
            TerminalReason(kind=ReasonKind.AGENT_ERROR, message=event.message, code=event.code)
        )

    # -- text -------------------------------------------------------------------

    def _start_text(self, message_id: str, role: str | None) -> TextMessage:
        self._count_message()
        text = TextMessage(message_id, role or "assistant", complete=False)
        self._open_texts[message_id] = text
        self._text_sinks[message_id] = text.sink
        self._turn_texts.append(text)
        self._run_texts = True
        self.conversation.append(text)
        return text

    def _count_message(self) -> None:
        self._message_count += 1
        if self._message_count > self._limits.max_messages_per_turn:
            raise LimitExceededError(
                "max_messages_per_turn", self._limits.max_messages_per_turn, "messages opened"
            )

    def _count_text(self, delta: str, *, result: bool = False) -> None:
        """Count a text delta of the full path (already appended) against the turn;
        ``result``: a tool result the agent reported, which no text message holds."""
        if not delta:
            return
        if result:
            self._text_results += utf8_len(delta)
        limit = self._limits.max_text_bytes
        exact = self._text_exact
        if exact is None:
            full = self._text_full_bytes + utf8_len(delta)
            self._text_full_bytes = full
            if full + 4 * self._text_hot_chars <= limit:
                self._text_hot_budget = (limit - full) // 4
                return
            # Near the bound: count the turn's text exactly, once in full, then delta
            # by delta; the hot path stays closed from now on.
            exact = sum(text.byte_count for text in self._turn_texts) + self._text_results
            self._text_hot_budget = -1
        else:
            exact += utf8_len(delta)
        self._text_exact = exact
        if exact > limit:
            raise LimitExceededError("max_text_bytes", limit, "text of the turn")

    def _count_reasoning(self, delta: str) -> None:
        if delta:
            self._reasoning_bytes += utf8_len(delta)
            if self._reasoning_bytes > self._limits.max_reasoning_bytes:
                raise LimitExceededError(
                    "max_reasoning_bytes", self._limits.max_reasoning_bytes, "reasoning of the turn"
                )

    def _on_text_start(self, event: TextMessageStartEvent) -> Sequence[Effect]:
        if event.message_id in self._open_texts:
            return self._violation(
                "duplicate_text_message_start",
                "TEXT_MESSAGE_START",
                f"text message {event.message_id!r} is already open",
            )
        self._start_text(event.message_id, event.role)
        return self._set_activity(_STREAMING_TEXT)

    def _on_text_content(self, event: TextMessageContentEvent) -> Sequence[Effect]:
        text = self._open_texts.get(event.message_id)
        if text is None:
            effects = self._violation(
                "content_without_start",
                "TEXT_MESSAGE_CONTENT",
                f"text message {event.message_id!r} was not started; started implicitly",
            )
            self._start_text(event.message_id, None).append(event.delta)
            self._count_text(event.delta)
            return (*effects, *self._set_activity(_STREAMING_TEXT))
        text.append(event.delta)
        self._count_text(event.delta)
        return NO_EFFECTS

    def _on_text_end(self, event: TextMessageEndEvent) -> Sequence[Effect]:
        text = self._open_texts.pop(event.message_id, None)
        self._text_sinks.pop(event.message_id, None)
        if text is None:
            return self._violation(
                "end_for_unknown_message",
                "TEXT_MESSAGE_END",
                f"text message {event.message_id!r} is not open",
            )
        text.complete = True
        self._settle(text)
        return self._calling_activity() if self._calls else NO_EFFECTS

    def _on_text_chunk(self, event: TextMessageChunkEvent) -> Sequence[Effect]:
        current = self._chunk_text
        message_id = event.message_id
        effects: Sequence[Effect] = NO_EFFECTS
        if current is None or (message_id is not None and message_id != current.id):
            self._close_text_chunk()
            if message_id is None:
                return self._violation(
                    "chunk_without_message_id",
                    "TEXT_MESSAGE_CHUNK",
                    "first TEXT_MESSAGE_CHUNK of a message has no messageId; dropped",
                )
            current = self._open_texts.get(message_id) or self._start_text(message_id, event.role)
            self._chunk_text = current
            effects = self._set_activity(_STREAMING_TEXT)
        if event.delta:
            current.append(event.delta)
            self._count_text(event.delta)
        return effects

    # -- tool calls -------------------------------------------------------------------

    def _start_call(
        self, call_id: str, name: str, parent_message_id: str | None
    ) -> Sequence[Effect]:
        limits = self._limits
        if self._run_call_count >= limits.max_tool_calls_per_run:
            raise LimitExceededError(
                "max_tool_calls_per_run", limits.max_tool_calls_per_run, "calls of the run"
            )
        if len(self._turn_calls) >= limits.max_tool_calls_per_turn:
            raise LimitExceededError(
                "max_tool_calls_per_turn", limits.max_tool_calls_per_turn, "calls of the turn"
            )
        self._run_call_count += 1
        call = ToolCallInfo(call_id, name, parent_message_id=parent_message_id, run_id=self.run_id)
        self._calls[call_id] = call
        self._turn_calls.append(call)
        self._arg_sinks[call_id] = call.argument_sink
        self._calling_started(call)
        return self._calling_activity()

    def _on_tool_start(self, event: ToolCallStartEvent) -> Sequence[Effect]:
        if event.tool_call_id in self._calls:
            return self._violation(
                "duplicate_tool_call_start",
                "TOOL_CALL_START",
                f"tool call {event.tool_call_id!r} already started; dropped",
            )
        return self._start_call(event.tool_call_id, event.tool_call_name, event.parent_message_id)

    def _append_args(self, call: ToolCallInfo, delta: str) -> None:
        if not delta:
            return
        call.argument_sink.append(delta)
        self._arg_chars += len(delta)
        if self._arg_chars <= self._arg_char_safe:
            return
        # Near a bound: count this call's bytes, and the turn's, exactly from now on
        # (once in full, then delta by delta), so the check stays O(1) per event.
        size = utf8_len(delta)
        exact = self._exact_arg_bytes.get(call.id)
        exact = call.argument_bytes if exact is None else exact + size
        self._exact_arg_bytes[call.id] = exact
        if exact > self._limits.max_argument_bytes:
            raise LimitExceededError(
                "max_argument_bytes",
                self._limits.max_argument_bytes,
                f"arguments of tool call {call.id!r} ({call.name})",
            )
        total = self._arg_exact
        if total is None:
            total = sum(c.argument_bytes for c in self._turn_calls)
        else:
            total += size
        self._arg_exact = total
        if total > self._limits.max_turn_argument_bytes:
            raise LimitExceededError(
                "max_turn_argument_bytes",
                self._limits.max_turn_argument_bytes,
                "arguments of the turn's tool calls",
            )

    def _on_tool_args(self, event: ToolCallArgsEvent) -> Sequence[Effect]:
        call = self._calls.get(event.tool_call_id)
        if call is None:
            return self._violation(
                "args_for_unknown_call",
                "TOOL_CALL_ARGS",
                f"no tool call {event.tool_call_id!r} in this run; dropped",
            )
        if call.status is not _STREAMING:
            if call.status is not _PENDING or call.id in self._from_snapshot:
                if call.status is _PENDING:
                    return self._violation(
                        "args_after_snapshot",
                        "TOOL_CALL_ARGS",
                        f"tool call {event.tool_call_id!r} has the arguments the server's "
                        "snapshot records; dropped",
                    )
                return self._violation(
                    "args_after_result",
                    "TOOL_CALL_ARGS",
                    f"tool call {event.tool_call_id!r} already has its result; dropped",
                )
            # Tools run when the run ends, not at TOOL_CALL_END: arguments that come
            # after END and before the end of the run still belong to the call
            # (pydantic-ai's adapter ends the first of two interleaved calls early).
            self._append_args(call, event.delta)
            if call.id in self._late_args:
                return NO_EFFECTS
            self._late_args.add(call.id)
            return self._violation(
                "args_after_end",
                "TOOL_CALL_ARGS",
                f"tool call {event.tool_call_id!r} already ended; arguments kept, "
                "the call runs when the run ends",
            )
        self._append_args(call, event.delta)
        return NO_EFFECTS

    def _on_tool_end(self, event: ToolCallEndEvent) -> Sequence[Effect]:
        call = self._calls.get(event.tool_call_id)
        if call is None:
            return self._violation(
                "end_for_unknown_call",
                "TOOL_CALL_END",
                f"no tool call {event.tool_call_id!r} in this run; dropped",
            )
        if call.status is not _STREAMING:
            return self._violation(
                "duplicate_tool_call_end",
                "TOOL_CALL_END",
                f"tool call {event.tool_call_id!r} already ended; dropped",
            )
        self._send_call(call, ToolCallEvent.finish_args)
        return NO_EFFECTS

    def _on_tool_chunk(self, event: ToolCallChunkEvent) -> Sequence[Effect]:
        current = self._chunk_call
        call_id = event.tool_call_id
        effects: Sequence[Effect] = NO_EFFECTS
        if current is None or (call_id is not None and call_id != current.id):
            self._close_tool_chunk()
            if call_id is None or event.tool_call_name is None:
                return self._violation(
                    "chunk_without_call_id",
                    "TOOL_CALL_CHUNK",
                    "first TOOL_CALL_CHUNK of a call needs toolCallId and toolCallName; dropped",
                )
            if call_id in self._calls:
                return self._violation(
                    "duplicate_tool_call_start",
                    "TOOL_CALL_CHUNK",
                    f"tool call {call_id!r} already started; dropped",
                )
            effects = self._start_call(call_id, event.tool_call_name, event.parent_message_id)
            current = self._calls[call_id]
            self._chunk_call = current
        if event.delta:
            self._append_args(current, event.delta)
        return effects

    def _on_tool_result(self, event: ToolCallResultEvent) -> Sequence[Effect]:
        call = self._calls.get(event.tool_call_id)
        if call is None:
            if self.conversation.holds_tool_call(event.tool_call_id):
                return NO_EFFECTS
            return self._violation(
                "result_for_unknown_call",
                "TOOL_CALL_RESULT",
                f"no tool call {event.tool_call_id!r} in this run; dropped",
            )
        if call.status not in _CALLING:
            return self._violation(
                "duplicate_tool_call_result",
                "TOOL_CALL_RESULT",
                f"tool call {event.tool_call_id!r} already has a result; dropped",
            )
        content = event.content
        if isinstance(content, str):
            text = content
        else:
            self._check_depth(content, "TOOL_CALL_RESULT content")
            text = msgspec.json.encode(content).decode()
        self._count_text(text, result=True)
        self._send_call(call, ToolCallEvent.receive_result)
        self._calling_stopped(call)
        call.result = ToolResult.success(text)
        self._result_ids[call.id] = event.message_id
        if self._chunk_call is call:
            self._chunk_call = None
        return self._calling_activity()

    # -- reasoning ----------------------------------------------------------------------

    def _reasoning(self, message_id: str) -> ReasoningRecord:
        record = self._open_reasoning.get(message_id)
        if record is None:
            self._count_message()
            record = ReasoningRecord(message_id, complete=False)
            self._open_reasoning[message_id] = record
            self._run_reasoning[message_id] = record
            self.conversation.append(record)
        return record

    def _on_reasoning_start(
        self, event: ReasoningStartEvent | ThinkingStartEvent
    ) -> Sequence[Effect]:
        return self._set_activity(_REASONING)

    def _on_reasoning_end(self, event: ReasoningEndEvent | ThinkingEndEvent) -> Sequence[Effect]:
        return self._calling_activity() if self._calls else NO_EFFECTS

    def _on_reasoning_message_start(self, event: ReasoningMessageStartEvent) -> Sequence[Effect]:
        self._reasoning(event.message_id)
        return self._set_activity(_REASONING)

    def _on_reasoning_content(self, event: ReasoningMessageContentEvent) -> Sequence[Effect]:
        if event.delta:
            self._reasoning(event.message_id).append(event.delta)
            self._count_reasoning(event.delta)
        return NO_EFFECTS

    def _on_reasoning_chunk(self, event: ReasoningMessageChunkEvent) -> Sequence[Effect]:
        # Like TEXT_MESSAGE_CHUNK: the first chunk names the message, later ones may
        # not; any other event (or another messageId) closes it.
        current = self._chunk_reasoning
        message_id = event.message_id
        effects: Sequence[Effect] = NO_EFFECTS
        if current is None or (message_id is not None and message_id != current.id):
            self._close_reasoning_chunk()
            if message_id is None:
                return self._violation(
                    "chunk_without_message_id",
                    "REASONING_MESSAGE_CHUNK",
                    "first REASONING_MESSAGE_CHUNK of a message has no messageId; dropped",
                )
            current = self._reasoning(message_id)
            self._chunk_reasoning = current
            effects = self._set_activity(_REASONING)
        if event.delta:
            current.append(event.delta)
            self._count_reasoning(event.delta)
        return effects

    def _on_reasoning_encrypted_value(
        self, event: ReasoningEncryptedValueEvent
    ) -> Sequence[Effect]:
        # Kept on the record (subtype "message") or the call ("tool-call") it belongs to,
        # and sent back with it; an artefact for anything else is not ours to keep.
        # O(1) whatever the id: the run's records are found by id, never by a walk.
        value = event.encrypted_value
        if event.subtype == "tool-call":
            call = self._calls.get(event.entity_id)
            if call is not None:
                self._count_reasoning(value)
                call.encrypted_value = value
            return NO_EFFECTS
        record = self._run_reasoning.get(event.entity_id)
        if record is not None:
            self._count_reasoning(value)
            if event.entity_id not in self._open_reasoning:
                self.conversation.remap()  # a closed record may be mapped already
            record.encrypted_value = value
            if record.complete:
                self._settle(record)  # settled before its signature came: again
        return NO_EFFECTS

    def _on_reasoning_message_end(self, event: ReasoningMessageEndEvent) -> Sequence[Effect]:
        record = self._open_reasoning.pop(event.message_id, None)
        if record is not None:
            record.complete = True
            self._settle(record)
        return NO_EFFECTS

    def _on_thinking_text_start(self, event: ThinkingTextMessageStartEvent) -> Sequence[Effect]:
        if self._thinking is None:
            self._count_message()
            self._thinking = ReasoningRecord(self._id_factory(), complete=False)
            self.conversation.append(self._thinking)
        return self._set_activity(_REASONING)

    def _on_thinking_text_content(self, event: ThinkingTextMessageContentEvent) -> Sequence[Effect]:
        if self._thinking is None:
            self._on_thinking_text_start(ThinkingTextMessageStartEvent())
        assert self._thinking is not None
        self._thinking.append(event.delta)
        self._count_reasoning(event.delta)
        return NO_EFFECTS

    def _on_thinking_text_end(self, event: ThinkingTextMessageEndEvent) -> Sequence[Effect]:
        if self._thinking is not None:
            self._thinking.complete = True
            self._settle(self._thinking)
            self._thinking = None
        return NO_EFFECTS

    # -- state ----------------------------------------------------------------------

    def _state_bounds(self) -> StateBounds:
        return StateBounds(
            max_bytes=self._limits.max_state_bytes, max_depth=self._limits.max_json_depth
        )

    def _on_state_snapshot(self, event: StateSnapshotEvent) -> Sequence[Effect]:
        snapshot = event.snapshot
        # An old encoder left a null snapshot out (it decodes as UNSET): the state is null.
        try:
            # Our own copy (iterative, bounded): deltas patch it in place later.
            state = BoundedState(
                None if snapshot is msgspec.UNSET else snapshot, self._state_bounds()
            )
        except StateBoundError as exc:
            raise LimitExceededError(exc.limit, exc.bound, f"STATE_SNAPSHOT: {exc}") from exc
        self._state = state
        self.conversation.state = state.document
        return NO_EFFECTS

    def _on_state_delta(self, event: StateDeltaEvent) -> Sequence[Effect]:
        """Patch the state in place (linear in the patch and what it touches); the
        first delta of a run copies the state once, as the run's input holds it."""
        operations = msgspec.to_builtins(event.delta)
        if not isinstance(operations, list) or not all(isinstance(o, dict) for o in operations):
            return self._violation(
                "state_delta_failed", "STATE_DELTA", "the delta is not a list of operations"
            )
        try:
            state = self._state
            if state is None or state.document is not self.conversation.state:
                state = BoundedState(self.conversation.state, self._state_bounds())
                self._state = state
            state.apply(operations, copy_values=False)
        except JsonPatchError as exc:
            return self._violation(
                "state_delta_failed", "STATE_DELTA", f"patch not applied, state unchanged: {exc}"
            )
        except StateBoundError as exc:
            raise LimitExceededError(exc.limit, exc.bound, f"STATE_DELTA: {exc}") from exc
        finally:
            if self._state is not None:
                self.conversation.state = self._state.document
        return NO_EFFECTS

    def _check_depth(self, value: object, what: str) -> None:
        """Refuse ``value`` nested deeper than ``Limits.max_json_depth`` (iterative)."""
        limit = self._limits.max_json_depth
        stack: list[tuple[object, int]] = [(value, 0)]
        while stack:
            item, level = stack.pop()
            if isinstance(item, dict):
                children: Iterable[object] = item.values()
            elif isinstance(item, (list, tuple)):
                children = item
            else:
                continue
            if level >= limit:
                raise LimitExceededError("max_json_depth", limit, f"{what} nested too deep")
            stack.extend((child, level + 1) for child in children)

    def _on_messages_snapshot(self, event: MessagesSnapshotEvent) -> Sequence[Effect]:
        snapshot = tuple(event.messages)
        self.conversation.last_snapshot = snapshot
        # A server that keeps the thread's history merges the next request into it by
        # message id, so a tool result must go back under the id the server stored it
        # under: LangGraph's adapter names a result it sends by the call id but stores
        # it under a fresh one, and would add it a second time.
        # Everything here is O(the snapshot): the conversation is asked through its
        # index, never walked (promise 8).
        stored = {m.tool_call_id: m.id for m in snapshot if isinstance(m, ToolMessage)}
        if stored:
            result_ids = self._result_ids
            for call_id, message_id in stored.items():
                if call_id in result_ids:
                    result_ids[call_id] = message_id
            for batch in self.conversation.adopt_result_ids(stored):
                self._settle(batch)
        effects = self._adopt_snapshot_arguments(snapshot)
        return (*effects, *self._adopt_unstreamed(snapshot))

    def _adopt_snapshot_arguments(self, snapshot: tuple[Message, ...]) -> Sequence[Effect]:
        """Give a pending call the arguments the snapshot records for it, when the
        streamed ones differ: the snapshot is the server's own record.

        LangGraph's adapter routes the argument deltas of two interleaved calls to
        the wrong call id; its MESSAGES_SNAPSHOT has each call's true arguments. Only
        calls not yet executed (``pending``) are touched, each at most once a run;
        arguments that mean the same JSON (spacing, key order aside) are not a
        difference. Logged as ``arguments_from_snapshot``.
        """
        effects: list[Effect] = []
        for message in snapshot:
            if not isinstance(message, AssistantMessage) or not message.tool_calls:
                continue
            for snap in message.tool_calls:
                call = self._calls.get(snap.id)
                if call is None or call.status is not _PENDING or call.id in self._snapshot_checked:
                    continue
                self._snapshot_checked.add(call.id)
                recorded = snap.function.arguments
                streamed = call.arguments
                if recorded == streamed or _same_json(recorded, streamed):
                    continue
                if _json_or_none(recorded, self._limits.max_json_depth) is None:
                    continue  # the record is no better than what streamed
                if utf8_len(recorded) > self._limits.max_argument_bytes:
                    continue
                call.replace_arguments(recorded)
                self._from_snapshot.add(call.id)
                effects.extend(
                    self._violation(
                        "arguments_from_snapshot",
                        "MESSAGES_SNAPSHOT",
                        f"tool call {call.id!r} ({call.name}) streamed arguments "
                        f"{_excerpt(streamed)} but the snapshot records {_excerpt(recorded)}; "
                        "the snapshot's are used",
                    )
                )
        return effects

    def _adopt_unstreamed(self, snapshot: tuple[Message, ...]) -> Sequence[Effect]:
        """Keep the answer of a run that streamed nothing but a MESSAGES_SNAPSHOT.

        A server whose model does not stream (LangGraph with a non-streaming chat
        model) sends its answer only in the snapshot. When this run streamed no text
        and no call, the assistant messages the snapshot holds after the last message
        the conversation knows are appended as complete texts, with a logged violation
        (``snapshot_only_message``). Calls found there are not executed (they never
        streamed, so they have no lifecycle): ``snapshot_only_tool_calls``.
        """
        if self._calls or self._run_texts:
            return NO_EFFECTS
        known = self.conversation.known_ids()
        last_known = -1
        for i, message in enumerate(snapshot):
            if message.id in known:
                last_known = i
        effects: list[Effect] = []
        for message in snapshot[last_known + 1 :]:
            if not isinstance(message, AssistantMessage):
                continue
            if message.tool_calls:
                names = ", ".join(call.function.name for call in message.tool_calls)
                effects.extend(
                    self._violation(
                        "snapshot_only_tool_calls",
                        "MESSAGES_SNAPSHOT",
                        f"assistant message {message.id!r} asks for {names} but no call "
                        "was streamed; not executed",
                    )
                )
            if isinstance(message.content, str) and message.content:
                self._count_message()
                adopted = TextMessage(message.id, "assistant", message.content)
                self._turn_texts.append(adopted)
                self._run_texts = True
                self._count_text(message.content)
                self.conversation.append(adopted)
                self._settle(adopted)
                effects.extend(
                    self._violation(
                        "snapshot_only_message",
                        "MESSAGES_SNAPSHOT",
                        f"assistant message {message.id!r} was not streamed; kept from "
                        "the snapshot",
                    )
                )
        return tuple(effects)


def _canonical_arguments(arguments: str) -> str:
    """The arguments as canonical JSON (sorted keys, no spacing), so that the same
    value spelled differently compares equal; the stripped text when it is not JSON."""
    stripped = arguments.strip()
    if not stripped or stripped == "null":
        return "{}"
    try:
        return msgspec.json.encode(msgspec.json.decode(stripped), order="sorted").decode()
    except (msgspec.DecodeError, RecursionError, TypeError, ValueError):
        return stripped


def _json_or_none(text: str, max_depth: int) -> object | None:
    """``text`` decoded as JSON, or None when it is not JSON (or nests too deep)."""
    if not text.strip():
        return None
    depth = 0
    deepest = 0
    for char in text:  # a cheap bound on the nesting before msgspec recurses into it
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    if deepest > max_depth:
        return None
    try:
        value: object = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return value


def _same_json(a: str, b: str) -> bool:
    """Whether two argument strings hold the same JSON (spacing and key order aside;
    no arguments at all are the empty object, as they are sent)."""
    x = _json_or_none(a, 10_000) if a.strip() else {}
    y = _json_or_none(b, 10_000) if b.strip() else {}
    return x is not None and x == y


def _excerpt(text: str, size: int = 80) -> str:
    return repr(text if len(text) <= size else text[:size] + "...")


def _named(kind: ActivityKind, names: Sequence[str]) -> Activity:
    """An activity naming the first :data:`MAX_ACTIVITY_NAMES` of ``names``."""
    shown = tuple(names[:MAX_ACTIVITY_NAMES])
    return Activity(kind, shown, more=len(names) - len(shown))


def _waiting_for(interrupts: Sequence[Interrupt]) -> str:
    """The interrupted turn's reason, in words: what the agent asks."""
    if not interrupts:
        return "the agent paused the run without saying what it waits for"
    asks = "; ".join(interrupt.message or interrupt.reason for interrupt in interrupts)
    if len(interrupts) == 1:
        return f"the agent waits for an answer: {asks}"
    return f"the agent waits for {len(interrupts)} answers: {asks}"


def _type_of(event: Event | UnknownEvent) -> str:
    if isinstance(event, UnknownEvent):
        return event.type
    tag = type(event).__struct_config__.tag
    return str(tag)


_Handler = Callable[[EventProcessor, Any], Sequence[Effect]]

_HANDLERS: dict[type[Any], _Handler] = {
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
