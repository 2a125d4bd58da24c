"""The run's own events: RUN_STARTED, RUN_FINISHED (its outcome, the batch, the
bounds on it) and RUN_ERROR."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from toolrelay._core._conversation import (
    ToolCallInfo,
)
from toolrelay._core._effects import (
    NO_EFFECTS,
    Effect,
    ToolsReady,
    TurnCompleted,
    TurnInterrupted,
)
from toolrelay._core._processor_base import ProcessorBase
from toolrelay._core._processor_state import (
    _DONE,
    _FAILED,
    _PENDING,
    _STREAMING,
    NO_ITEMS,
    NO_KEYS,
    added,
    keyed,
)
from toolrelay._core._tool_result import ToolResult
from toolrelay._machines import (
    RunEvent,
    ToolCallEvent,
)
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.protocol import (
    Interrupt,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
)

__all__ = ("RunEvents",)

_COMPLETED = TerminalReason(kind=ReasonKind.COMPLETED, message="the agent answered")
_AGENT_CANCELLED = TerminalReason(
    kind=ReasonKind.AGENT_CANCELLED, message="the agent reported its run cancelled"
)


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


def _waiting_for(interrupts: Sequence[Interrupt]) -> str:
    """The interrupted turn's reason, in words: what the agent asks."""
    if not interrupts:
        return "the agent paused the run without saying what it waits for"
    asks = "; ".join(interrupt.message or interrupt.reason for interrupt in interrupts)
    if len(interrupts) == 1:
        return f"the agent waits for an answer: {asks}"
    return f"the agent waits for {len(interrupts)} answers: {asks}"


class RunEvents(ProcessorBase):
    __slots__ = ()

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
        outcome = event.outcome
        if isinstance(outcome, RunFinishedInterruptOutcome):
            # The turn keeps what the agent asks (and the store writes it): its schemas
            # and metadata are any JSON, bounded as a result's is.
            self._check_depth(outcome.interrupts, "RUN_FINISHED interrupts")
        self._ended = True
        self._wire_ended = True
        self._forget_hot()
        # The stream is over: no call is calling any more (the activity now follows
        # the batch), so the calls shown as calling go while the tools run.
        self._calling_count = 0
        self._calling_shown = NO_ITEMS
        self._calling_waiting = None
        effects: list[Effect] = []
        # A TEXT_MESSAGE_CHUNK stream, which has no END, was closed before this event.
        for text in self._open_texts.values():
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
            if status is _PENDING and self._agents_own(call):
                effects.extend(self._ran_without_result(call))
                kept[key] = call
            elif status is _STREAMING:
                self._send_call(call, ToolCallEvent.abandon)
                call.result = ToolResult.failure("abandoned: the run ended before TOOL_CALL_END")
                self.abandoned = added(self.abandoned, call)
                effects.extend(
                    self._violation(
                        "tool_call_not_ended",
                        "RUN_FINISHED",
                        f"tool call {call.id!r} ({call.name}) had no TOOL_CALL_END; "
                        "it is abandoned, not executed",
                    )
                )
            # A call fails within a run only here: none is failed before this loop.
            elif status is not _FAILED:  # pragma: no branch - see above
                kept[key] = call
                if status is _PENDING:
                    pending.append(call)
        self._calls = kept or NO_KEYS
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
            if self._depth >= self.max_depth:
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
            self._send_run(RunEvent.execute_tools)
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
        self._send_run(RunEvent.complete)
        self.reason = _COMPLETED
        self._let_go()
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
            self._requested = keyed(self._requested, key, count)
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

    def _agents_own(self, call: ToolCallInfo) -> bool:
        """Whether pending ``call`` ran on the agent's side though no result came: it
        names a tool this client did not declare, and the agent opened a text or
        reasoning message after it instead of stopping for its result (Mastra sends no
        result for a server tool that raised, then answers)."""
        started = self._call_at.get(call.id)
        if started is None or self._opened_to <= started:
            return False
        return all(tool.name != call.name for tool in self._tools)

    def _ran_without_result(self, call: ToolCallInfo) -> Sequence[Effect]:
        """Complete ``call`` as the agent's, with an error result saying none came: it
        is not executed here, and goes back (with that error) where it was made."""
        message = "the agent ran this call itself and sent no result"
        self._send_call(call, ToolCallEvent.receive_result)
        call.result = ToolResult.failure(message)
        self._result_ids = keyed(self._result_ids, call.id, self._id_factory())
        return self._violation(
            "agent_call_without_result",
            "RUN_FINISHED",
            f"tool call {call.id!r} ({call.name}) names no tool of this client and the "
            "agent streamed on after it: it ran on the agent's side, not executed here",
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
