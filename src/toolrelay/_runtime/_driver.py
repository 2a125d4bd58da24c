"""The task that drives one turn: feed each run's events to the processor, act on its effects.

A :class:`TurnDriver` is a :class:`~toolrelay.Turn`'s working half: a thin
loop that streams each run into the turn's sans-IO
:class:`~toolrelay.sansio.EventProcessor` (the one the turn reads) and dispatches on the
effects it answers with, so the run's end is known in one place. It runs the tool
batches, writes the turn's records (with a store) and tells observers.
docs/concepts.md, "The core answers with effects", draws the loop and lists the safety
checks (0 to 7) that the comments below refer to by number.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import nullcontext
from contextvars import Token
from typing import Any, cast

import anyio
from msgspec import UNSET

from toolrelay._core import (
    ActivityChanged,
    Effect,
    EventProcessor,
    MessagesSettled,
    RunEnding,
    ThreadKey,
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
from toolrelay._errors import RemoteProtocolError, StoreError
from toolrelay._machines import RunStatus
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay._runtime._approvals import ApprovalQueue
from toolrelay._runtime._durable import ThreadLog
from toolrelay._runtime._executor import execute_batch, execute_batch_with_approvals
from toolrelay._runtime._host import TurnHost
from toolrelay._runtime._recovery import (
    INTERRUPTED,
    restored_agent_results,
    restored_calls,
    split_for_rerun,
)
from toolrelay._runtime._registry import RunHandle
from toolrelay._runtime._tracing import TurnTrace, start_turn
from toolrelay._runtime._views import EventReceived, StateChanged, ToolCallFinished, TurnSnapshot
from toolrelay.backends._base import EventBatches
from toolrelay.protocol import Event, RunAgentInput, UnknownEvent
from toolrelay.store import LiveTurn, ToolFinished

__all__ = ("RunEnding", "TurnDriver", "snapshot_of")

logger = logging.getLogger("toolrelay.runtime")


def _describe(exc: BaseException) -> str:
    """``"Type: message"`` of ``exc``, looking through groups that wrap one exception
    (a task group's), so the reason names the real error."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


def snapshot_of(key: ThreadKey, processor: EventProcessor) -> TurnSnapshot:
    """The state of the turn on ``key`` that ``processor`` drives, as observers see it."""
    return TurnSnapshot(
        key=key,
        status=processor.status,
        activity=processor.activity,
        depth=processor.depth,
        run_id=processor.run_id,
        run_count=processor.run_count,
        reason=processor.reason,
        interrupts=processor.interrupts,
    )


#: The last write's scope where nothing from outside the turn can cancel it (reusable).
_UNSHIELDED = nullcontext()

#: Why a turn ends whose run someone else disposed while it streamed.
_REPLACED = TerminalReason(kind=ReasonKind.SUPERSEDED, message="the run was replaced on its thread")


class TurnDriver:
    """What one turn's task does, and the state it does it with (see the module
    docstring). Its :class:`~toolrelay.Turn` reads the processor, and asks
    the driver to act: :meth:`run` (the task), :meth:`end`, :meth:`approve`,
    :meth:`deny`, :meth:`publish_state`.

    Attributes:
        handle: The turn's run in the registry (``None`` before its first run).
        trace: The turn's spans (``None``: not traced, decided once when the task
            starts).
    """

    __slots__ = (
        "_approved",
        "_ending",
        "_given_state",
        "_host",
        "_last_published",
        "_log",
        "_processor",
        "_recovered",
        "_scope",
        "_streaming",
        "_tool_context",
        "_tools",
        "handle",
        "key",
        "trace",
        "turn_id",
    )

    def __init__(
        self,
        host: TurnHost[Any],  # the driver never calls host.finished: its turn does
        key: ThreadKey,
        processor: EventProcessor,
        tools: ToolRegistry,
        *,
        turn_id: str,
        log: ThreadLog | None,
        recovered: LiveTurn | None,
        tool_context: object,
        state: Any = UNSET,
    ) -> None:
        self._host = host
        self._tool_context = tool_context
        # The agent state the turn was given (UNSET: the thread's), set once the
        # thread is loaded (a load puts the store's state in place).
        self._given_state = state
        # While calls await approval: where approved calls go to run (made the first
        # time it is needed: most turns never have a call to approve).
        self._approved: ApprovalQueue | None = None
        self.key = key
        self.turn_id = turn_id
        # Where the turn's records go (None: the engine has no store), and, for a turn
        # a crash left live, what the log says of it.
        self._log = log
        self._recovered = recovered
        self._processor = processor
        self._tools = tools
        self._scope = anyio.CancelScope()
        self.handle: RunHandle | None = None
        self._last_published: TurnSnapshot | None = None
        # How the current run ended (None while it streams).
        self._ending: RunEnding | None = None
        # The handle whose stream is open (None between runs).
        self._streaming: RunHandle | None = None
        self.trace: TurnTrace | None = None

    # -- what the turn asks of its driver ------------------------------------------

    def snapshot(self) -> TurnSnapshot:
        return snapshot_of(self.key, self._processor)

    def publish_state(self, *, force: bool = False) -> None:
        """Tell subscribers the turn's state, unless it is the one they were last told
        (``force``: a newly focused view wants it again)."""
        host = self._host
        if not host.notifications:
            return
        snapshot = self.snapshot()
        if not force and snapshot == self._last_published:
            return
        self._last_published = snapshot
        host.notifications.publish(StateChanged(snapshot))

    def end(self, reason: TerminalReason) -> bool:
        """End the turn from outside its task (cancel, supersede, the engine closing),
        with ``reason``.

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

    def expire(self) -> None:
        """The turn's deadline (``turn_seconds``) is due: its work stops, and its task
        ends it ``failed`` (``deadline``) unless something ended it first."""
        self._scope.cancel()

    def approve(self, call: ToolCallInfo) -> None:
        """``call``, awaiting approval, is approved: it runs."""
        self._perform(self._processor.approve(call))
        self._approvals().put(call)
        self._decided()

    def deny(self, call: ToolCallInfo, message: str) -> None:
        """``call``, awaiting approval, is denied: it ends ``failed`` with ``message``."""
        effects = self._processor.deny(call, message)
        if call.result is not None:
            if self._log is not None:  # written when the batch ends (TurnDriver._execute)
                self._log.add(
                    ToolFinished(turn_id=self.turn_id, call_id=call.id, result=call.result)
                )
            self._host.notifications.publish(
                ToolCallFinished(self.key, call.id, call.name, call.result)
            )
        self._perform(effects)
        self._decided()

    def _approvals(self) -> ApprovalQueue:
        """Where approved calls go to run."""
        if self._approved is None:
            self._approved = ApprovalQueue()
        return self._approved

    def _decided(self) -> None:
        if not self._processor.awaiting_approval:
            self._approvals().all_decided()

    # -- the task --------------------------------------------------------------------

    async def run(self, over: Callable[[], None]) -> None:
        """The turn's task; it ends with the turn in a final state, and calls ``over``
        last, whatever happened (the turn tells its engine, then its waiters)."""
        processor = self._processor
        host = self._host
        turn_seconds = host.engine.limits.turn_seconds
        trace = self.trace = start_turn(
            host.tracer_provider, host.engine.backend, self.key, self.turn_id
        )
        scope = self._scope
        if turn_seconds is not None:
            # The engine's keeper cancels the turn's own scope at the deadline (no
            # timer per turn; runtime/_deadlines.py): what else cancels it ends the
            # turn first, so a turn still on is late.
            host.deadlines.add(self, turn_seconds)
        attached: Token[Any] | None = None
        try:
            with scope:  # the run settings are set in the task's context (Turn.drive)
                if trace is not None:
                    attached = trace.attach()  # the turn's span, current in its task
                # Each run streams in this frame: no frame stays suspended between the
                # task and the stream while the turn waits on its agent.
                step = await self._first() if await self._prepare() else None
                while step is not None:
                    handle, run_input = step
                    del step  # (a tuple the collector would walk while the run streams)
                    step = await self._next(handle, await self._stream(handle, run_input))
            if scope.cancelled_caught and not processor.status.is_final:
                self._perform(processor.fail(host.deadline_reason()))
        except StoreError as exc:
            self._perform(processor.fail(exc.reason))
        except Exception as exc:
            self._internal_error(exc)
        finally:
            if attached is not None:
                assert trace is not None
                trace.detach(attached)
            if turn_seconds is not None:
                host.deadlines.remove(self, turn_seconds)
            if not processor.status.is_final:
                # Only a cancellation from outside toolrelay's own calls gets here.
                self._perform(processor.cancel("the turn's task was cancelled"))
            if trace is not None:
                trace.end(processor.status, processor.reason, processor.run_count, processor.depth)
            if self._approved is not None:
                self._approved.close()
            if self._log is not None and not self._log.settled:
                await self._last_flush(self._log)  # (a shielded scope only when needed)
            over()

    async def _prepare(self) -> bool:
        """With a store: load the thread if the engine does not hold it yet, then write
        that the turn started. The state the turn was given replaces the thread's
        (written with the turn's start). Returns whether the turn is still on."""
        log = self._log
        if log is not None:
            # The turn's start is written with the load, unless a given state must
            # join it (in the same transaction) once the stored state is known.
            await self._host.load(self.key, log, self._given_state is UNSET)
        if self._given_state is not UNSET:
            conversation = self._processor.conversation
            conversation.state, self._given_state = self._given_state, UNSET
            if log is not None:
                log.add_state(self.turn_id, conversation)
        if log is None:
            return True
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
            self._store_failed(exc)

    def _store_failed(self, exc: StoreError) -> None:
        """A write failed: the turn fails (``store_error``)."""
        logger.error("the store failed for %s: %s", self.key, exc)
        self._perform(self._processor.fail(exc.reason))
        self._scope.cancel()  # the turn is over: its tools and stream stop too

    async def _last_flush(self, log: ThreadLog) -> None:
        """The turn's last write (its end), whatever cancelled it; a store that still
        fails is reported, and what it did commit stays.

        The turn's own scope is left by now: the write is shielded only where a
        cancellation from outside the turn can still reach its task (on asyncio,
        entering and leaving an anyio shield costs about what a wait on the loop does,
        and nothing it would stop can happen there)."""
        with anyio.CancelScope(shield=True) if self._host.reach_turns() else _UNSHIELDED:
            try:
                if not log.loaded:
                    # The turn ended before its thread was read (cancelled or replaced
                    # while it loaded): read it now, before what the turn added is
                    # written, so that it never comes back as history in front of itself.
                    await self._host.load(self.key, log, True)
                await log.flush()
            except StoreError as exc:
                logger.error("the end of the turn on %s was not written: %s", self.key, exc)

    def _perform(self, effects: Sequence[Effect], *, restored: bool = False) -> None:
        """Act on the processor's effects (the one place they are read); ``restored``:
        they put back a batch the log holds (see :meth:`ThreadLog.add_effects`)."""
        if not effects:
            return
        if self._log is not None:
            self._log.add_effects(self.turn_id, self._processor, effects, restored=restored)
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
        log = self._log
        if log is not None and log.pending:
            # (_flush written out: every tool result of every turn is written here, and
            # a coroutine less waits on the store)
            try:
                await log.flush()
            except StoreError as exc:
                self._store_failed(exc)

    async def _first(self) -> tuple[RunHandle, RunAgentInput] | None:
        """The turn's first run to stream (``None``: the turn is over). A turn a crash
        left executing tools is restored instead, and goes on from its batch."""
        processor = self._processor
        registry = self._host.engine.registry
        recovered, self._recovered = self._recovered, None
        if recovered is not None and recovered.tools is not None:
            tools = recovered.tools
            handle = RunHandle(self.key, tools.run_id, depth=tools.depth)
            registry.register_run(handle)
            self.handle = handle
            return await self._next(handle, self._restore(recovered), restored=True)
        run_id = await self._allocate()
        if run_id is None:
            return None
        handle = RunHandle(self.key, run_id)
        registry.register_run(handle)
        self.handle = handle
        run_input = processor.start_run(run_id)
        self.publish_state()
        return handle, run_input

    async def _next(
        self, handle: RunHandle, ending: RunEnding | None, *, restored: bool = False
    ) -> tuple[RunHandle, RunAgentInput] | None:
        """After the run of ``handle`` ended with ``ending``: run its tools, then the
        continuation to stream (``None``: the turn is over)."""
        processor = self._processor
        match ending:
            case ToolsReady(calls=calls, awaiting=awaiting):
                await self._execute(calls, recovering=restored, awaiting=bool(awaiting))
            case None if restored and processor.status is RunStatus.executing_tools:
                pass  # restored after its batch was committed: continue
            case _:
                return None
        if self._stale(handle):
            return None
        next_run_id = await self._allocate()
        if next_run_id is None or self._stale(handle):
            return None
        next_handle = RunHandle(self.key, next_run_id, depth=processor.depth + 1)
        if not self._host.engine.registry.replace_run(handle, next_handle):
            next_handle.dispose()
            self._perform(processor.supersede("the run was replaced on its thread"))
            return None
        self.handle = next_handle
        run_input = processor.start_run(next_run_id)
        self.publish_state()
        return next_handle, run_input

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
                trace=self.trace,
            )
            return
        # With calls awaiting approval, each one approved runs too (Turn.approve).
        receive = self._approvals().receive()
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
                trace=self.trace,
            )
        finally:
            self._approvals().close()
        await self._flush()  # the denials

    def _restore(self, live: LiveTurn) -> RunEnding | None:
        """Put the processor where the log left the turn: running its last tool batch
        (the calls with a stored result keep it), or between that batch and the
        continuation."""
        tools = live.tools
        assert tools is not None
        self._ending = None
        effects = self._processor.restore(
            run_id=tools.run_id,
            depth=tools.depth,
            runs=tools.runs,
            calls=restored_calls(live),
            agent_results=restored_agent_results(live),
        )
        self._perform(effects, restored=True)
        self.publish_state()
        return self._ending

    def _run_over(self) -> bool:
        """Whether the current run ended: an ending effect was performed."""
        return self._ending is not None

    def _stream(
        self, handle: RunHandle, run_input: RunAgentInput
    ) -> Coroutine[Any, Any, RunEnding | None]:
        """What streams one run into the processor (awaited, it returns the effect
        that ended the run): :meth:`_stream_run` itself for an untraced turn, no
        frame in between (one suspended coroutine fewer per live turn), and within
        the run's span for a traced one."""
        if self.trace is None:
            return self._stream_run(handle, run_input)
        return self._traced(handle, run_input)

    async def _traced(self, handle: RunHandle, run_input: RunAgentInput) -> RunEnding | None:
        trace = self.trace
        assert trace is not None
        with trace.run(run_input.run_id, self._processor.depth, self._run_ending, self._reason):
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
        # Disposed by someone else while it streams, the run no longer owns the thread:
        # the turn ends superseded at once, its own scope stopping the stream (one
        # cancel scope per turn, none per run).
        self._streaming = handle
        handle.on_dispose(self._stream_disposed)
        try:
            try:
                async with host.engine.backend.run(self.key, run_input) as events:
                    # A read's events at once (no observer needs them one by one) from
                    # a stream that is EventBatches: the attribute is what isinstance
                    # checks on a runtime protocol, read at a hundredth of its cost
                    # (on Python 3.11 isinstance walks the protocol's classes, ~10 µs).
                    if self.trace is None and hasattr(events, "batches"):
                        await self._receive_batches(cast("EventBatches", events).batches())
                    else:
                        if self.trace is not None:
                            events = self.trace.watch(events)
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
                            # Records are added by effects only (anything else that
                            # adds some ends the run, whose end writes them).
                            if effects and log is not None and log.pending:
                                # What settled, the moment it exists (_flush written
                                # out: a coroutine less waits on the store).
                                try:
                                    await log.flush()
                                except StoreError as exc:
                                    self._store_failed(exc)
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
        finally:
            self._streaming = None
        # Before a batch runs, its calls are in the store (promise 10's write-ahead).
        if log is not None and log.pending:
            await self._flush()
        return self._ending

    def _stream_disposed(self) -> None:
        """A run handle of this turn was disposed: if its stream is open, someone else
        took the thread (safety check 4), and the turn ends ``superseded`` now."""
        streaming = self._streaming
        if streaming is not None and streaming.disposed:
            self.end(_REPLACED)

    async def _receive_batches(
        self, batches: AsyncIterator[Sequence[Event | UnknownEvent]]
    ) -> None:
        """_stream_run's loop for a backend that gives a read's events at once: the
        processor takes them in one call up to each event with effects, which are
        acted on as after that event alone. A read's last event, and every event while
        someone observes events, goes to receive, as one by one."""
        processor = self._processor
        receive = processor.receive
        receive_many = processor.receive_many
        notifications = self._host.notifications
        log = self._log
        async for events in batches:
            # Whether the run is over is the ending effect's slot, read in place: once
            # per read, not a call (_run_over) twice per event.
            if self._ending is not None:
                return  # ended from outside: the rest is not processed, not shown
            end = len(events)
            if end == 1:
                # A read of one event (a server that flushes event by event): the
                # loop of _stream_run, written out for it. The run can end only by an
                # effect or while something is awaited, so it is asked only then.
                event = events[0]
                try:
                    effects = receive(event)
                    if notifications.marked:
                        notifications.publish(EventReceived(self.key, event))
                    if effects:
                        self._perform(effects)
                except Exception as exc:
                    self._internal_error(exc)
                    return
                if not effects:
                    continue  # (records are added by effects only)
                if log is not None and log.pending:
                    try:  # (_flush written out, as in _stream_run)
                        await log.flush()
                    except StoreError as exc:
                        self._store_failed(exc)
                if self._run_over():
                    return
                continue
            position = 0
            while position < end:
                # An exception here is ours (processor, observers), not the backend's.
                try:
                    if position + 1 == end or notifications.marked:
                        # One event left (a read of one event is common), or an
                        # observer that wants each: receive, as one by one.
                        event = events[position]
                        position += 1
                        effects = receive(event)
                        if notifications.marked:
                            notifications.publish(EventReceived(self.key, event))
                    else:
                        effects, position = receive_many(events, position)
                    if effects:
                        self._perform(effects)
                except Exception as exc:
                    self._internal_error(exc)
                    return
                if self._run_over():
                    return  # what it settled is written as the run's stream ends
            if log is not None and log.pending:
                # What a read settled, in one write before the next read is awaited:
                # nothing waits on the network with a block unwritten (_flush written
                # out, as in _stream_run).
                try:
                    await log.flush()
                except StoreError as exc:
                    self._store_failed(exc)
