"""One user turn on one thread, and the task that drives it.

A :class:`Turn` owns its sans-IO :class:`~toolrelay.core.EventProcessor` and is
driven by one task: a thin loop that feeds the run's events to the processor and
dispatches on the effects it answers with, so the run's end is known in one place.
docs/concepts.md, "The core answers with effects", draws the loop and lists the safety
checks (0 to 7) that the comments below refer to by number.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence

import anyio
import anyio.lowlevel

from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.backends._base import using_run_settings
from toolrelay.core import (
    Activity,
    ActivityChanged,
    ChatMessage,
    Conversation,
    Effect,
    EventProcessor,
    MessagesSettled,
    ProtocolViolation,
    ThreadKey,
    ToolCallBatch,
    ToolCallInfo,
    ToolContext,
    ToolRegistry,
    ToolResult,
    ToolsReady,
    TurnCompleted,
    TurnEnded,
    TurnInterrupted,
    ViolationRaised,
)
from toolrelay.errors import RemoteProtocolError, StoreError
from toolrelay.machines import RunStatus, ToolCallStatus
from toolrelay.protocol import Interrupt, ResumeEntry, RunAgentInput
from toolrelay.runtime._approvals import ApprovalQueue, approval_interrupts, find_awaiting
from toolrelay.runtime._durable import ThreadLog
from toolrelay.runtime._executor import execute_batch, execute_batch_with_approvals
from toolrelay.runtime._host import TurnHost
from toolrelay.runtime._recovery import INTERRUPTED, restored_calls, split_for_rerun
from toolrelay.runtime._registry import RunHandle
from toolrelay.runtime._tracing import TurnTrace, start_turn
from toolrelay.runtime._views import (
    EventReceived,
    StateChanged,
    ToolCallFinished,
    TurnSnapshot,
    TurnStatistics,
)
from toolrelay.store import LiveTurn, ToolFinished

__all__ = ("Turn",)

logger = logging.getLogger("toolrelay.runtime")

#: The effects that end a run: the turn goes on with tools, or it is over.
RunEnding = ToolsReady | TurnCompleted | TurnInterrupted | TurnEnded

#: What an untraced turn enters instead of its span's context.
_UNTRACED = contextlib.nullcontext()


def _describe(exc: BaseException) -> str:
    """``"Type: message"`` of ``exc``, looking through groups that wrap one exception
    (a task group's), so the reason names the real error."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


class Turn:
    """One user turn on one thread: the user's message (or answers to the agent's
    interrupts) and every run until the answer.

    Created by :meth:`Engine.start_turn`; read it at any time, :meth:`cancel` it, and
    ``await`` :meth:`wait_finished`. Its engine-facing methods (:meth:`drive`,
    :meth:`end`, :meth:`publish_state`, :meth:`close_slice`, :meth:`shift_slice`) are
    the engine's side of their contract (``runtime/_host.py``), not for user code.
    """

    __slots__ = (
        "_approved",
        "_done",
        "_host",
        "_ending",
        "_handle",
        "_last_published",
        "_log",
        "_processor",
        "_recovered",
        "_scope",
        "_start",
        "_stop",
        "_task_over",
        "_tool_context",
        "_tools",
        "_trace",
        "key",
        "turn_id",
    )

    def __init__(
        self,
        host: TurnHost[Turn],
        key: ThreadKey,
        processor: EventProcessor,
        tools: ToolRegistry,
        start: int,
        *,
        turn_id: str,
        log: ThreadLog | None = None,
        recovered: LiveTurn | None = None,
        tool_context: object = None,
    ) -> None:
        self._host = host
        self._tool_context = tool_context
        # While calls await approval: where approved calls go to run.
        self._approved = ApprovalQueue()
        self.key = key
        #: The turn's id in the thread's log.
        self.turn_id = turn_id
        # Where the turn's records go (None: the engine has no store), and, for a turn
        # a crash left live, what the log says of it.
        self._log = log
        self._recovered = recovered
        self._processor = processor
        self._tools = tools
        self._scope = anyio.CancelScope()
        # Whether the turn's task is done; the event is made by the first
        # wait_finished that has to wait (most turns are never waited for while live).
        self._task_over = False
        self._done: anyio.Event | None = None
        self._handle: RunHandle | None = None
        self._last_published: TurnSnapshot | None = None
        # How the current run ended (None while it streams).
        self._ending: RunEnding | None = None
        # This turn's slice of the thread's conversation (from its user message, if it
        # has one; the next turn on the thread closes the slice).
        self._start = start
        self._stop: int | None = None
        # The turn's spans (None: not traced, decided once when the task starts).
        self._trace: TurnTrace | None = None

    # -- reading -------------------------------------------------------------------

    @property
    def status(self) -> RunStatus:
        return self._processor.status

    @property
    def reason(self) -> TerminalReason | None:
        """Why the turn ended; ``None`` while it runs."""
        return self._processor.reason

    @property
    def depth(self) -> int:
        return self._processor.depth

    @property
    def activity(self) -> Activity:
        return self._processor.activity

    @property
    def run_id(self) -> str | None:
        return self._processor.run_id

    @property
    def conversation(self) -> Conversation:
        return self._processor.conversation

    @property
    def messages(self) -> list[ChatMessage]:
        """This turn's part of the thread's conversation: from its user message (or,
        for a turn that only answers interrupts, from what it added) up to where the
        next turn on the thread began. A copy."""
        return self._processor.conversation.messages[self._start : self._stop]

    @property
    def tool_calls(self) -> tuple[ToolCallInfo, ...]:
        """The calls of the run in flight (empty once committed, finished or aborted)."""
        return self._processor.tool_calls

    @property
    def abandoned_calls(self) -> tuple[ToolCallInfo, ...]:
        """Calls an abort or a broken run left unexecuted."""
        return tuple(self._processor.abandoned)

    @property
    def violations(self) -> tuple[ProtocolViolation, ...]:
        return tuple(self._processor.violations)

    @property
    def interrupts(self) -> tuple[Interrupt, ...]:
        """What the agent asks, once the turn ended ``interrupted`` (AG-UI ``interrupt``
        outcome); empty otherwise. Answer with ``Engine.start_turn(key, resume=[...])``,
        one ``ResumeEntry`` per interrupt, by ``Interrupt.id``."""
        return self._processor.interrupts

    @property
    def approvals(self) -> tuple[Interrupt, ...]:
        """The tool calls waiting for the embedding code's decision (tools declared
        with ``needs_approval``), as client-side interrupts: ``id`` and
        ``tool_call_id`` are the call's id, ``reason`` is ``"tool_approval"``,
        ``metadata`` holds the tool's name and arguments. Answer each with
        :meth:`approve` or :meth:`deny`; the turn waits (``executing_tools``, activity
        ``awaiting_approval``) until every one is answered, or it is cancelled."""
        return approval_interrupts(self._processor.awaiting_approval)

    def approve(self, call_id: str) -> None:
        """Approve a call that awaits approval: it runs, and the model sees its result.

        Raises:
            ApprovalError: No call of this turn awaits approval under that id
                (decided already, or the turn ended); nothing changed.
        """
        call = find_awaiting(self._processor.awaiting_approval, call_id)
        self._perform(self._processor.approve(call))
        self._approved.put(call)
        self._decided()

    def deny(self, call_id: str, message: str = "The user denied this tool call.") -> None:
        """Deny a call that awaits approval: it never runs, it ends ``failed`` and the
        model receives ``message`` as its error.

        Raises:
            ApprovalError: No call of this turn awaits approval under that id
                (decided already, or the turn ended); nothing changed.
        """
        call = find_awaiting(self._processor.awaiting_approval, call_id)
        effects = self._processor.deny(call, message)
        if call.result is not None:
            if self._log is not None:  # written when the batch ends (Turn._execute)
                self._log.add(
                    ToolFinished(turn_id=self.turn_id, call_id=call.id, result=call.result)
                )
            self._host.notifications.publish(
                ToolCallFinished(self.key, call.id, call.name, call.result)
            )
        self._perform(effects)
        self._decided()

    def _decided(self) -> None:
        if not self._processor.awaiting_approval:
            self._approved.all_decided()

    @property
    def resume(self) -> tuple[ResumeEntry, ...]:
        """The answers to earlier interrupts that this turn's first run carried."""
        return self._processor.resume

    @property
    def finished(self) -> bool:
        """Whether the turn reached a final state."""
        return self._processor.status.is_final

    def snapshot(self) -> TurnSnapshot:
        p = self._processor
        return TurnSnapshot(
            key=self.key,
            status=p.status,
            activity=p.activity,
            depth=p.depth,
            run_id=p.run_id,
            run_count=p.run_count,
            reason=p.reason,
            interrupts=p.interrupts,
        )

    def statistics(self) -> TurnStatistics:
        counts: dict[ToolCallStatus, int] = dict.fromkeys(ToolCallStatus, 0)
        for message in self.messages:
            if isinstance(message, ToolCallBatch):
                for call in message.calls:
                    counts[call.status] += 1
        for call in (*self._processor.tool_calls, *self._processor.abandoned):
            counts[call.status] += 1
        p = self._processor
        return TurnStatistics(
            runs=p.run_count,
            depth=p.depth,
            tool_calls=counts,
            violations=len(p.violations),
            status=p.status,
        )

    # -- acting ---------------------------------------------------------------------

    def cancel(self, message: str = "cancelled by the user") -> bool:
        """End the turn ``cancelled`` now and stop its work (promise 4).

        Returns:
            ``False`` when the turn had already ended (nothing changes).
        """
        return self.end(TerminalReason(kind=ReasonKind.CANCELLED, message=message))

    async def wait_finished(self) -> TerminalReason:
        """Wait until the turn's task is done; returns why the turn ended."""
        if self._task_over:
            await anyio.lowlevel.checkpoint()
        else:
            if self._done is None:
                self._done = anyio.Event()
            await self._done.wait()
        reason = self._processor.reason
        assert reason is not None
        return reason

    def __repr__(self) -> str:
        return f"Turn(key={self.key}, status={self.status.value}, depth={self.depth})"

    # -- what the engine asks of a turn ----------------------------------------------
    # The engine's side of the contract in runtime/_host.py: public so that the engine
    # reads no private member, but not user API (user code reads, cancels, approves and
    # waits).

    def end(self, reason: TerminalReason) -> bool:
        """Engine-facing: end the turn from outside its task (cancel, supersede, the
        engine closing), with ``reason``.

        A turn that already ended but whose task still works (a store failure ended
        it while its tools ran) has that work stopped too; ``False`` says it had ended.
        """
        processor = self._processor
        if processor.status.is_final:
            self._scope.cancel()
            return False
        if reason.kind is ReasonKind.SUPERSEDED:
            effects = processor.supersede(reason.message)
        else:
            effects = processor.cancel(reason.message, kind=reason.kind)
        self._scope.cancel()
        self._perform(effects)
        return True

    def close_slice(self, stop: int) -> None:
        """Engine-facing: the next turn on the thread begins at ``stop``, where this
        turn's messages end."""
        self._stop = stop

    def shift_slice(self, by: int) -> None:
        """Engine-facing: ``by`` messages were put before this turn's (its thread's
        history, loaded from the store)."""
        self._start += by
        if self._stop is not None:
            self._stop += by

    def publish_state(self, *, force: bool = False) -> None:
        """Engine-facing (and the turn's own): tell subscribers the turn's state,
        unless it is the one they were last told (``force``: a newly focused view
        wants it again)."""
        host = self._host
        if not host.notifications:
            return
        snapshot = self.snapshot()
        if not force and snapshot == self._last_published:
            return
        self._last_published = snapshot
        host.notifications.publish(StateChanged(snapshot))

    # -- the driver ---------------------------------------------------------------------

    async def drive(self) -> None:
        """Engine-facing: the turn's task, started once by the engine in its task
        group; it ends with the turn in a final state."""
        processor = self._processor
        host = self._host
        turn_seconds = host.engine.limits.turn_seconds
        trace = self._trace = start_turn(
            host.tracer_provider, host.engine.backend, self.key, self.turn_id
        )
        scope = self._scope
        if turn_seconds is not None:
            # The turn's deadline (Limits.turn_seconds) is its own scope's: one scope
            # fewer per live turn. What cancels the scope otherwise (end, a store
            # failure) ends the turn first, so a cancelled scope and a turn still on
            # is the deadline.
            scope.deadline = anyio.current_time() + turn_seconds
        try:
            with (
                scope,
                using_run_settings(host.run_settings(self.key)),
                trace.current() if trace is not None else _UNTRACED,
            ):
                if await self._prepare():
                    await self._run_all()
            if scope.cancelled_caught and not processor.status.is_final:
                self._perform(processor.fail(host.deadline_reason()))
        except StoreError as exc:
            self._perform(processor.fail(exc.reason))
        except Exception as exc:
            self._internal_error(exc)
        finally:
            if not processor.status.is_final:
                # Only a cancellation from outside toolrelay's own calls gets here.
                self._perform(processor.cancel("the turn's task was cancelled"))
            if trace is not None:
                trace.end(processor.status, processor.reason, processor.run_count, processor.depth)
            self._approved.close()
            if self._log is not None:
                await self._last_flush(self._log)
            host.finished(self, self._handle)
            self._task_over = True
            if self._done is not None:
                self._done.set()

    async def _prepare(self) -> bool:
        """With a store: load the thread if the engine does not hold it yet, then write
        that the turn started. Returns whether the turn is still on."""
        log = self._log
        if log is None:
            return True
        await self._host.load(self.key, log)
        await log.flush()
        return not self._processor.status.is_final

    async def _flush(self) -> None:
        """Write what the turn added to the log; a store failure fails the turn
        (``store_error``) and does not raise."""
        log = self._log
        if log is None or not log.pending:
            return
        try:
            await log.flush()
        except StoreError as exc:
            logger.error("the store failed for %s: %s", self.key, exc)
            self._perform(self._processor.fail(exc.reason))
            self._scope.cancel()  # the turn is over: its tools and stream stop too

    async def _last_flush(self, log: ThreadLog) -> None:
        """The turn's last write (its end), whatever cancelled it; a store that still
        fails is reported, and what it did commit stays."""
        with anyio.CancelScope(shield=True):
            try:
                await log.flush()
            except StoreError as exc:
                logger.error("the end of the turn on %s was not written: %s", self.key, exc)

    def _perform(self, effects: Sequence[Effect]) -> None:
        """Act on the processor's effects (the one place they are read)."""
        if not effects:
            return
        if self._log is not None:
            self._log.add_effects(self.turn_id, self._processor, effects)
        for effect in effects:
            match effect:
                case ToolsReady() | TurnCompleted() | TurnInterrupted() | TurnEnded():
                    self._ending = effect
                case ActivityChanged() | ViolationRaised() | MessagesSettled():
                    pass  # observers read the new state; the store's records are added
        self.publish_state()

    def _internal_error(self, exc: Exception) -> None:
        """Safety check 7: log an unexpected exception and fail the turn ``internal_error``
        (unless it already ended: the processor fails itself before raising)."""
        logger.error("turn on %s failed unexpectedly", self.key, exc_info=exc)
        processor = self._processor
        if not processor.status.is_final:
            self._perform(
                processor.fail(
                    TerminalReason(kind=ReasonKind.INTERNAL_ERROR, message=_describe(exc))
                )
            )

    async def _allocate(self) -> str | None:
        processor = self._processor
        try:
            run_id = await self._host.engine.backend.allocate_run(self.key)
        except RemoteProtocolError as exc:
            self._perform(processor.fail(exc.reason))
            return None
        except Exception as exc:
            self._perform(
                processor.fail(
                    TerminalReason(
                        kind=ReasonKind.BACKEND_ERROR,
                        message=f"run allocation failed: {type(exc).__name__}: {exc}",
                    )
                )
            )
            return None
        if processor.status.is_final:
            return None
        return run_id or self._host.new_run_id()

    def _stale(self, handle: RunHandle) -> bool:
        """Safety check 4: is ``handle`` still the thread's registered run?"""
        if self._host.engine.registry.is_registered(handle):
            return False
        self._perform(self._processor.supersede("the run was replaced on its thread"))
        return True

    async def _take_result(self, call: ToolCallInfo, result: ToolResult) -> None:
        """Hand one tool's result to the processor (once; the last commits the batch),
        and write it to the store before anything else happens to the turn."""
        if self._log is not None and not self._processor.status.is_final:
            self._log.add(ToolFinished(turn_id=self.turn_id, call_id=call.id, result=result))
        effects = self._processor.record_result(call, result)
        if not self._processor.status.is_final:
            self._host.notifications.publish(ToolCallFinished(self.key, call.id, call.name, result))
        self._perform(effects)
        await self._flush()

    async def _run_all(self) -> None:
        processor = self._processor
        engine = self._host.engine
        recovered, self._recovered = self._recovered, None
        restored = recovered is not None and recovered.tools is not None
        if recovered is not None and recovered.tools is not None:
            tools = recovered.tools
            handle = RunHandle(self.key, tools.run_id, depth=tools.depth)
            engine.registry.register_run(handle)
            self._handle = handle
            ending = self._restore(recovered)
        else:
            run_id = await self._allocate()
            if run_id is None:
                return
            handle = RunHandle(self.key, run_id)
            engine.registry.register_run(handle)
            self._handle = handle
            run_input = processor.start_run(run_id)
            self.publish_state()
            ending = await self._stream(handle, run_input)
        while True:
            match ending:
                case ToolsReady(calls=calls, awaiting=awaiting):
                    await self._execute(calls, recovering=restored, awaiting=bool(awaiting))
                case None if restored and processor.status is RunStatus.executing_tools:
                    pass  # restored after its batch was committed: continue
                case _:
                    return
            if self._stale(handle):
                return
            next_run_id = await self._allocate()
            if next_run_id is None or self._stale(handle):
                return
            next_handle = RunHandle(self.key, next_run_id, depth=processor.depth + 1)
            if not engine.registry.replace_run(handle, next_handle):
                next_handle.dispose()
                self._perform(processor.supersede("the run was replaced on its thread"))
                return
            handle = next_handle
            self._handle = handle
            run_input = processor.start_run(next_run_id)
            self.publish_state()
            restored = False
            ending = await self._stream(handle, run_input)

    async def _execute(
        self, calls: tuple[ToolCallInfo, ...], *, recovering: bool, awaiting: bool = False
    ) -> None:
        """Run a batch; after a crash, a call that was running is run again only if its
        tool is idempotent, the others get the "interrupted" error (promise 10). With
        calls ``awaiting`` approval, each one approved runs too, until all are decided."""
        if recovering:
            calls, interrupted = split_for_rerun(calls, self._tools)
            for call in interrupted:
                await self._take_result(call, INTERRUPTED)
            if not calls and not awaiting:
                return
        host = self._host
        timeout = host.engine.tool_timeout
        context = ToolContext(
            deps=self._tool_context, thread_id=self.key.thread_id, run_id=self._processor.run_id
        )
        if not awaiting:
            await execute_batch(
                self._tools,
                calls,
                default_timeout=timeout,
                on_result=self._take_result,
                limiter=host.tool_limiter,
                threads=host.tool_threads,
                context=context,
                options=host.tool_options,
                trace=self._trace,
            )
            return
        # With calls awaiting approval, each one approved runs too (Turn.approve).
        receive = self._approved.receive()
        try:
            await execute_batch_with_approvals(
                self._tools,
                calls,
                receive,
                default_timeout=timeout,
                on_result=self._take_result,
                limiter=host.tool_limiter,
                threads=host.tool_threads,
                context=context,
                options=host.tool_options,
                trace=self._trace,
            )
        finally:
            self._approved.close()
        await self._flush()  # the denials

    def _restore(self, live: LiveTurn) -> RunEnding | None:
        """Put the processor where the log left the turn: running its last tool batch
        (the calls with a stored result keep it), or between that batch and the
        continuation."""
        tools = live.tools
        assert tools is not None
        self._ending = None
        effects = self._processor.restore(
            run_id=tools.run_id, depth=tools.depth, runs=tools.runs, calls=restored_calls(live)
        )
        self._perform(effects)
        self.publish_state()
        return self._ending

    def _run_over(self) -> bool:
        """Whether the current run ended: an ending effect was performed."""
        return self._ending is not None

    async def _stream(self, handle: RunHandle, run_input: RunAgentInput) -> RunEnding | None:
        """Stream one run into the processor; returns the effect that ended it."""
        trace = self._trace
        if trace is None:
            return await self._stream_run(handle, run_input)
        with trace.run(run_input.run_id, self.depth, self._run_ending, self._reason):
            return await self._stream_run(handle, run_input)

    def _run_ending(self) -> RunEnding | None:
        return self._ending

    def _reason(self) -> TerminalReason | None:
        return self._processor.reason

    async def _stream_run(self, handle: RunHandle, run_input: RunAgentInput) -> RunEnding | None:
        processor = self._processor
        host = self._host
        log = self._log
        self._ending = None
        with anyio.CancelScope() as scope:
            handle.on_dispose(scope.cancel)
            try:
                async with host.engine.backend.run(self.key, run_input) as events:
                    if self._trace is not None:
                        events = self._trace.watch(events)
                    # Once per event: the lookups are bound once.
                    receive = processor.receive
                    notifications = host.notifications
                    async for event in events:
                        if self._run_over():
                            # Ended from outside (cancelled, superseded) while the
                            # backend already had this event: not processed, not shown.
                            break
                        # An exception here is ours (processor, observers), not the
                        # backend's: safety check 7, then stop reading the stream.
                        try:
                            effects = receive(event)
                            if notifications.marked:
                                notifications.publish(EventReceived(self.key, event))
                            if effects:
                                self._perform(effects)
                        except Exception as exc:
                            self._internal_error(exc)
                            break
                        if log is not None and log.pending:
                            await self._flush()  # what settled, the moment it exists
                        if self._run_over():
                            break
                if not self._run_over():
                    try:
                        effects = processor.end_stream()
                    except Exception as exc:
                        self._internal_error(exc)
                    else:
                        self._perform(effects)
            except RemoteProtocolError as exc:
                self._perform(processor.fail(exc.reason))
            except Exception as exc:
                if processor.status.is_final:
                    raise  # the turn had already ended (say, closing failed): the catch-all logs it
                self._perform(
                    processor.fail(
                        TerminalReason(
                            kind=ReasonKind.BACKEND_ERROR,
                            message=f"the backend failed: {type(exc).__name__}: {exc}",
                        )
                    )
                )
        if scope.cancelled_caught and not processor.status.is_final:
            # The handle was disposed by someone else: the run no longer owns the thread.
            self._perform(processor.supersede("the run was replaced on its thread"))
        # Before a batch runs, its calls are in the store (promise 10's write-ahead).
        await self._flush()
        return self._ending
