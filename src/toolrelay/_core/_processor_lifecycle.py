"""The turn's lifecycle, outside the stream: opening a run or a continuation,
handing in results and approvals, restoring a turn after a crash, ending the turn
(abandoning what is open, committing what settled), and the activity it shows."""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from msgspec import UNSET

from toolrelay._core._arguments import Chunks
from toolrelay._core._conversation import (
    AgentResult,
    ChatMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._core._effects import (
    MAX_ACTIVITY_NAMES,
    NO_EFFECTS,
    Activity,
    ActivityChanged,
    ActivityKind,
    Effect,
    MessagesSettled,
    RunEnding,
    ToolsReady,
    TurnEnded,
)
from toolrelay._core._mapper import conversation_to_agui
from toolrelay._core._processor_state import (
    _AWAITING,
    _AWAITING_APPROVAL,
    _CALLING,
    _DONE,
    _EXECUTING,
    _EXECUTING_TOOLS,
    _OPEN_CALL,
    _STREAMING,
    NO_ITEMS,
    NO_KEYS,
    ProcessorState,
    added,
)
from toolrelay._core._tool_result import ToolResult
from toolrelay._errors import IllegalTransition
from toolrelay._machines import (
    RunEvent,
    RunStatus,
    ToolCallEvent,
    ToolCallStatus,
)
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.protocol import (
    ResumeEntry,
    RunAgentInput,
)

__all__ = ("TurnLifecycle",)

# Read at every call's start (on Python 3.11 an enum member read from its class costs
# a metaclass lookup each time).
_CALLING_TOOLS = ActivityKind.CALLING_TOOLS


class TurnLifecycle(ProcessorState):
    """Runs, results and the turn's end; a mixin of :class:`ProcessorState`."""

    __slots__ = ()

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
        state = self._run_state
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
        self._send_run(event)
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
        one commits the batch to the conversation (one :class:`ToolCallBatch`,
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
        if self._run_state.is_final:
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
        if self._run_state.is_final:
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
        if self._run_state.is_final:
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
        agent_results: Sequence[AgentResult] = (),
    ) -> Sequence[Effect]:
        """Put a new processor where a turn a crash interrupted stood: executing the
        tools of run ``run_id`` at continuation depth ``depth``, after ``runs`` runs.

        ``calls`` are the run's calls as the store saved them: ``executing`` ones still
        to finish, and final ones (the agent resolved them, or their result was
        stored). With none, the batch was already committed and the next
        :meth:`start_run` is the continuation. ``agent_results`` are the run's
        :attr:`agent_results` as the store saved them, for a conversation as it was
        when the run ended: the batch is then committed as the run would have
        committed it (the agent's calls where the stream had them, their results
        under the agent's ids). Without them (a store that did not keep them), the
        agent's calls go back with the batch, their results under new ids.

        Returns:
            :class:`ToolsReady` with the calls still executing, when there are any;
            the shared empty tuple otherwise.

        Raises:
            IllegalTransition: The processor has already started a run.
        """
        if self._run_state is not RunStatus.idle or self.run_count:
            raise IllegalTransition("RunLifecycle", self._run_state.value, "restore")
        self._run_state = _EXECUTING_TOOLS
        self._depth = depth
        self.run_id = run_id
        self.run_count = runs
        self._calls = {call.id: call for call in calls} if calls else NO_KEYS
        self._turn_calls = list(calls)  # none before: restore comes first
        if agent_results:
            end = len(self.conversation.messages)
            self._result_ids = {r.call_id: r.message_id for r in agent_results}
            self._call_at = {r.call_id: end - r.after for r in agent_results}
        executing = tuple(c for c in calls if c.status is ToolCallStatus.executing)
        # Calls still waiting for a decision wait again (Turn.approve / Turn.deny).
        awaiting = tuple(c for c in calls if c.status is _AWAITING_APPROVAL)
        if not executing and not awaiting:
            self._commit_batch()
            return self._with_settled(NO_EFFECTS)
        self._executing_left = len(executing) + len(awaiting)
        return (*self._tools_activity(), ToolsReady(executing, awaiting))

    def _with_settled(self, effects: Sequence[Effect]) -> Sequence[Effect]:
        """``effects``, with the messages settled since the last answer reported once:
        before the run's or the turn's end when the effects end with it, since what
        settled belongs to the turn (a store writes the records in this order, and a
        turn's end is its last record)."""
        if not self._settled:
            return effects
        settled = MessagesSettled(tuple(self._settled))
        self._settled = NO_ITEMS  # its list goes: a turn between runs holds none
        if effects and isinstance(effects[-1], RunEnding):
            return (*effects[:-1], settled, effects[-1])
        return (*effects, settled)

    def _settle(self, message: ChatMessage) -> None:
        if isinstance(message, Chunks):  # a text or reasoning record, now final
            message._seal()
        self._settled = added(self._settled, message)

    def _commit_batch(self) -> None:
        """Append the run's calls, each final, to the conversation as one
        :class:`ToolCallBatch` and clear the in-flight calls. Called when the last
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
        self._calls = NO_KEYS
        if not calls:
            return
        batch_id = self._id_factory()
        message = ToolCallBatch(
            id=batch_id,
            calls=tuple(calls),
            result_message_ids=tuple(ids),
            before=self._places(calls, batch_id),
        )
        self._call_at = NO_KEYS
        self.conversation.append(message)
        self._settle(message)

    def _places(self, calls: list[ToolCallInfo], batch_id: str) -> tuple[str | None, ...]:
        """:attr:`ToolCallBatch.before` of the run's ``calls``: a call the agent ran
        itself (its result came in the stream) goes back where the stream had it, before
        the first message the run appended after it started (a run appends only the
        text and reasoning it streams; the batch's own position if none came), unless
        it shares its assistant message with a call run here, which must stay with it.
        """
        agent = self._result_ids
        started = self._call_at
        if not agent or not started:
            return ()
        # The messages of the calls run here: an agent's call in one of them stays. A
        # call that names no message is a message of its own (as the official client
        # makes it).
        shared = {call.parent_message_id for call in calls if call.id not in agent}
        shared.discard(None)
        messages = self.conversation.messages
        end = len(messages)
        places: list[str | None] = []
        for call in calls:
            start = started.get(call.id)
            if start is None or call.id not in agent or call.parent_message_id in shared:
                places.append(None)
            else:
                places.append(messages[start].id if start < end else batch_id)
        return tuple(places) if any(place is not None for place in places) else ()

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

    def _send_call(self, call: ToolCallInfo, event: ToolCallEvent) -> None:
        # Every transition of a call within a turn goes through here.
        call.send(event)

    def _set_activity(self, activity: Activity) -> Sequence[Effect]:
        current = self._activity
        if activity is current or activity == current:
            return NO_EFFECTS
        self._activity = activity
        return (ActivityChanged(activity),)

    def _terminate(self, event: RunEvent, reason: TerminalReason) -> Sequence[Effect]:
        if self._run_state.is_final:
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
                self.abandoned = added(self.abandoned, call)
            else:
                settled[key] = call
        # Calls that already have an outcome (the agent's TOOL_CALL_RESULT, a result the
        # runtime recorded) are kept in the conversation, not dropped (promise 7).
        self._calls = settled or NO_KEYS
        self._commit_batch()
        self._send_run(event)
        self.reason = reason
        self._ended = True
        self._forget_hot()
        self._let_go()
        return self._set_activity(_DONE)

    def _close_open_messages(self, *, interrupted: bool) -> None:
        for text in self._open_texts.values():
            text.complete = True
            text.interrupted = interrupted
            self._settle(text)
        self._open_texts = NO_KEYS
        self._chunk_text = None
        for record in self._open_reasoning.values():
            record.complete = True
            self._settle(record)
        self._open_reasoning = NO_KEYS
        self._chunk_reasoning = None
        if self._thinking is not None:
            self._thinking.complete = True
            self._settle(self._thinking)
            self._thinking = None

    def _close_tool_chunk(self) -> None:
        call = self._chunk_call
        if call is not None:
            self._chunk_call = None
            # Nothing moves the chunk's call before the next event closes it.
            if call.status is _STREAMING:  # pragma: no branch - always streaming here
                self._send_call(call, ToolCallEvent.finish_args)

    def _close_reasoning_chunk(self) -> None:
        record = self._chunk_reasoning
        if record is not None:
            self._chunk_reasoning = None
            # Only closing the chunk first lets an END event close its record.
            if self._open_reasoning.pop(record.id, None) is not None:  # pragma: no branch - open
                record.complete = True
                self._settle(record)

    def _close_text_chunk(self) -> None:
        text = self._chunk_text
        if text is not None:
            self._chunk_text = None
            # Only closing the chunk first lets an END event close its text.
            if self._open_texts.pop(text.id, None) is not None:  # pragma: no branch - open
                text.complete = True
                self._settle(text)

    def _calling_activity(self) -> Sequence[Effect]:
        # O(MAX_ACTIVITY_NAMES), whatever the number of calls (promise 8).
        count = self._calling_count
        if not count:
            return self._set_activity(_AWAITING)
        names = tuple([call.name for call in self._calling_shown])
        more = count - len(names)
        current = self._activity
        if current.kind is _CALLING_TOOLS and current.more == more and current.tool_names == names:
            return NO_EFFECTS
        return self._set_activity(Activity(_CALLING_TOOLS, names, more=more))

    def _calling_started(self, call: ToolCallInfo) -> None:
        self._calling_count += 1
        if len(self._calling_shown) < MAX_ACTIVITY_NAMES and not self._calling_waiting:
            self._calling_shown = added(self._calling_shown, call)
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


def _named(kind: ActivityKind, names: Sequence[str]) -> Activity:
    """An activity naming the first :data:`MAX_ACTIVITY_NAMES` of ``names``."""
    shown = tuple(names[:MAX_ACTIVITY_NAMES])
    return Activity(kind, shown, more=len(names) - len(shown))
