"""What every part of the processor stands on: its state (one slotted object), the
turn's lifecycle, the hot path, the accounting of limits, and the helpers the event
handlers share. :class:`~toolrelay.core.EventProcessor` adds the handlers."""

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
    TurnEnded,
    ViolationRaised,
)
from toolrelay.core._limits import Limits
from toolrelay.core._mapper import conversation_to_agui
from toolrelay.core._patch import BoundedState
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
    Context,
    Event,
    Interrupt,
    ReasoningMessageChunkEvent,
    ResumeEntry,
    RunAgentInput,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    Tool,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    UnknownEvent,
)

__all__ = ("ProcessorBase",)

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


_ID_PREFIX = uuid.uuid4().hex[:16]
_ID_COUNTER = itertools.count(1)


def _new_id() -> str:
    # Unique per process by the counter and across processes by the random prefix,
    # at a fraction of a uuid4's cost (one is made for every message and tool result).
    return f"{_ID_PREFIX}-{next(_ID_COUNTER)}"


class ProcessorBase:
    """The processor's state and lifecycle; see :class:`~toolrelay.core.EventProcessor`."""

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
        # Made when a call has to wait (past MAX_ACTIVITY_NAMES calling at once).
        self._calling_waiting: deque[ToolCallInfo] | None = None
        # Calls of the batch still executing (record_result commits at 0).
        self._executing_left = 0
        # Reasoning records of the run by id (open or closed), for signatures.
        self._run_reasoning: dict[str, ReasoningRecord] = {}
        self._run_texts = False
        # Call ids, as dicts (id -> True) rather than sets: a dict of strings is not
        # tracked by the cycle collector and an empty one is a quarter of an empty set.
        self._late_args: dict[str, bool] = {}
        self._snapshot_checked: dict[str, bool] = {}
        self._from_snapshot: dict[str, bool] = {}
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
        self._calling_waiting = None
        self._executing_left = 0
        self._run_reasoning = {}
        self._run_texts = False
        self._late_args = {}
        self._snapshot_checked = {}
        self._from_snapshot = {}
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
        elif self._calling_waiting is None:
            self._calling_waiting = deque((call,))
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


_Handler = Callable[[Any, Any], Sequence[Effect]]

#: The handler of each event type (filled where the handlers are assembled).
_HANDLERS: dict[type[Any], _Handler] = {}
