"""The orchestration engine: streams runs, executes tools, continues, until the agent answers.

Theory of operation
-------------------
Each user turn is a :class:`Turn` driven by one task in the engine's task group. The
task is a thin loop around the turn's sans-IO :class:`~toolrelay.core.EventProcessor`
(which owns every state transition, through the declared machines)::

    allocate run id -> register_run -> start_run -> stream events into the processor
      -> ToolsReady?  execute the batch (concurrently, isolated, each with a timeout)
                      commit the results to the conversation
                      safety checks -> allocate -> replace_run (compare-and-swap)
                      -> start_run (depth + 1) -> stream ... (multi-hop)
      -> otherwise the turn is final (completed / interrupted / cancelled / failed)

The safety checks of the reference design, and where they live:

== ================================= ==================================================
0  depth >= max_depth                 the processor, when a run ends with calls pending:
                                      the turn fails ``max_depth`` (promise 3)
1  per-tool isolation                 :func:`execute_batch`: every call gets a result
2  engine closed while awaiting       :meth:`Engine.aclose` ends every live turn
                                      (``cancelled``, reason ``closed``) and cancels its
                                      task; nothing changes and no backend call happens
                                      after it returns
3  cancelled at an await              :meth:`Turn.cancel` ends the turn ``cancelled`` at
                                      once and cancels its task scope (promise 4)
4  stale handle after the tools       ``registry.is_registered(handle)`` false ->
   or after allocation                ``superseded``
5  compare-and-swap fails             ``replace_run`` false -> the new handle is disposed,
                                      the turn ends ``superseded`` (promise 5)
6  focus guard                        focus is a thread key the embedding code sets; a
                                      background continuation never changes it
                                      (promise 6)
7  catch-all                          any unexpected exception ends the turn ``failed``
                                      (``internal_error``) and is logged
== ================================= ==================================================

Interrupts (AG-UI 1.0): a run that ends with the ``interrupt`` outcome ends its turn
``interrupted`` (:attr:`Turn.interrupts` says what the agent asks). Nothing waits
inside the engine: the answer is a new turn on the thread,
``start_turn(key, resume=[ResumeEntry(...)])``, whose first run carries the entries
(its continuations do not repeat them). The engine remembers, per thread, which
interrupts are open (:meth:`Engine.open_interrupts`): those of the last turn that
ended ``interrupted``, until a later turn ends ``completed`` or ``interrupted``; a
turn that fails, is cancelled or superseded leaves them open, so the answer can be
sent again. ``start_turn`` checks resume entries against them
(:func:`~toolrelay.core.check_resume`) before it changes anything.

Every abort clears the in-flight tool calls (the processor abandons them). Between
Run N and Run N+1 the turn is ``executing_tools`` then ``running``: observers never
see idle or completed in between (no flash). Once a run's stream said RUN_FINISHED
or RUN_ERROR the engine stops reading it and closes it; late events are not
processed.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.backends._base import AgentBackend, ThreadKey
from toolrelay.core import (
    Activity,
    ChatMessage,
    Conversation,
    EventProcessor,
    Limits,
    ProtocolViolation,
    ToolCallInfo,
    ToolCallMessage,
    ToolRegistry,
    ToolResult,
    check_resume,
)
from toolrelay.errors import ClosedError, RemoteProtocolError
from toolrelay.machines import RunStatus, ToolCallStatus
from toolrelay.protocol import (
    Context,
    Event,
    Interrupt,
    ResumeEntry,
    RunAgentInput,
    UnknownEvent,
    UserMessage,
)
from toolrelay.runtime._executor import execute_batch
from toolrelay.runtime._registry import RunHandle, RunRegistry

__all__ = (
    "Engine",
    "EngineStatistics",
    "EventReceived",
    "Notification",
    "StateChanged",
    "ToolCallFinished",
    "Turn",
    "TurnSnapshot",
    "TurnStatistics",
)

logger = logging.getLogger("toolrelay.runtime")


def _new_id() -> str:
    return uuid.uuid4().hex


def _describe(exc: BaseException) -> str:
    """``"Type: message"`` of ``exc``, looking through groups that wrap one exception
    (a task group's), so the reason names the real error."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return f"{type(exc).__name__}: {exc}"


@dataclass(frozen=True, slots=True)
class TurnSnapshot:
    """What a UI shows of a turn at one moment (cheap: no conversation copy).

    Attributes:
        key: The thread.
        status: The run lifecycle state.
        activity: "Calling: a, b", "Executing: a, b", streaming text, ...
        depth: Continuations started so far.
        run_id: The current run's id.
        run_count: Runs started so far.
        reason: Why the turn ended, once final.
        interrupts: What the agent asks, once the turn ended ``interrupted`` (answer
            with ``Engine.start_turn(key, resume=...)``); empty otherwise.
    """

    key: ThreadKey
    status: RunStatus
    activity: Activity
    depth: int
    run_id: str | None
    run_count: int
    reason: TerminalReason | None
    interrupts: tuple[Interrupt, ...] = ()

    @property
    def is_running(self) -> bool:
        return self.status.is_running


@dataclass(frozen=True, slots=True)
class TurnStatistics:
    """Counts over a turn: runs, depth, tool calls by state, violations."""

    runs: int
    depth: int
    tool_calls: dict[ToolCallStatus, int]
    violations: int
    status: RunStatus


@dataclass(frozen=True, slots=True)
class EngineStatistics:
    """Counts over the engine: turns by state, registered runs, threads.

    Attributes:
        turns: Every turn started on the engine over its lifetime, by state: a live
            turn by its current state, a finished one by its final state (earlier
            turns of a thread are counted too, not only its latest). Every
            :class:`~toolrelay.machines.RunStatus` is a key; the values add up to the
            number of turns started.
        registered_runs: Runs in the registry now (0 once it is closed).
        threads: Threads the engine holds a conversation for.
    """

    turns: dict[RunStatus, int]
    registered_runs: int
    threads: int


@dataclass(frozen=True, slots=True)
class StateChanged:
    """A turn's status or activity changed."""

    snapshot: TurnSnapshot

    @property
    def key(self) -> ThreadKey:
        return self.snapshot.key


@dataclass(frozen=True, slots=True)
class EventReceived:
    """An event of a turn's run arrived (only to subscribers that asked for events)."""

    key: ThreadKey
    event: Event | UnknownEvent


@dataclass(frozen=True, slots=True)
class ToolCallFinished:
    """A tool of a batch finished (completed or failed)."""

    key: ThreadKey
    call_id: str
    name: str
    result: ToolResult


Notification = StateChanged | EventReceived | ToolCallFinished


@dataclass(eq=False, slots=True)
class _Subscriber:
    send: MemoryObjectSendStream[Notification]
    focused_only: bool
    events: bool
    key: ThreadKey | None


class Turn:
    """One user turn on one thread: the user's message (or answers to the agent's
    interrupts) and every run until the answer.

    Created by :meth:`Engine.start_turn`; read it at any time, :meth:`cancel` it, and
    ``await`` :meth:`wait_finished`.
    """

    __slots__ = (
        "_done",
        "_end",
        "_engine",
        "_handle",
        "_last_published",
        "_processor",
        "_scope",
        "_start",
        "key",
    )

    def __init__(
        self, engine: Engine, key: ThreadKey, processor: EventProcessor, start: int
    ) -> None:
        self._engine = engine
        self.key = key
        self._processor = processor
        self._scope = anyio.CancelScope()
        self._done = anyio.Event()
        self._handle: RunHandle | None = None
        self._last_published: TurnSnapshot | None = None
        # This turn's slice of the thread's conversation (from its user message, if it
        # has one; the next turn on the thread closes the slice).
        self._start = start
        self._end: int | None = None

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
        return self._processor.conversation.messages[self._start : self._end]

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
            if isinstance(message, ToolCallMessage):
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
        return self._engine._end_turn(
            self, TerminalReason(kind=ReasonKind.CANCELLED, message=message)
        )

    async def wait_finished(self) -> TerminalReason:
        """Wait until the turn's task is done; returns why the turn ended."""
        await self._done.wait()
        reason = self._processor.reason
        assert reason is not None
        return reason

    def __repr__(self) -> str:
        return f"Turn(key={self.key}, status={self.status.value}, depth={self.depth})"


class Engine:
    """Runs tool-calling turns on any number of threads, concurrently.

    Use it as an async context manager; leaving it closes it (safety check 2)::

        async with Engine(backend, tools=registry) as engine:
            turn = engine.start_turn("thread-1", "What are the secret numbers?")
            reason = await turn.wait_finished()

    Args:
        backend: Where runs come from (AG-UI over HTTP, a provider, a ScriptedAgent).
        tools: The client tools offered to the agent and executed here.
        max_depth: The circuit breaker: continuations allowed per turn (promise 3).
        tool_timeout: Seconds a tool may run unless its spec says otherwise (``None``:
            no bound).
        limits: Size and count bounds on what the agent sends.
        registry: The run registry to use (one is created otherwise).
        max_concurrent_tools: Bound on tools running at once across all turns.
        context: ``RunAgentInput.context`` for every run.
        forwarded_props: ``RunAgentInput.forwardedProps`` for every run.
        run_id_factory: Makes client-side run ids when the backend does not allocate.
        id_factory: Makes message ids.
        include_reasoning: Send the agent's reasoning back in continuation runs (as
            ``reasoning`` messages, with their encrypted values). Unset: what the
            backend asks for with a ``takes_reasoning`` attribute (the Anthropic
            backend does), otherwise not, since AG-UI servers before 1.0 reject the
            ``reasoning`` role.
    """

    def __init__(
        self,
        backend: AgentBackend,
        *,
        tools: ToolRegistry | None = None,
        max_depth: int = 10,
        tool_timeout: float | None = 60.0,
        limits: Limits | None = None,
        registry: RunRegistry | None = None,
        max_concurrent_tools: int | None = None,
        context: Sequence[Context] = (),
        forwarded_props: Any = None,
        run_id_factory: Callable[[], str] = _new_id,
        id_factory: Callable[[], str] = _new_id,
        include_reasoning: bool | None = None,
    ) -> None:
        self.backend = backend
        self.tools = tools if tools is not None else ToolRegistry()
        self.max_depth = max_depth
        self.tool_timeout = tool_timeout
        self.limits = limits
        self.registry = registry if registry is not None else RunRegistry()
        self._limiter = (
            anyio.CapacityLimiter(max_concurrent_tools) if max_concurrent_tools else None
        )
        self._context = tuple(context)
        self._forwarded_props = forwarded_props
        self._run_id_factory = run_id_factory
        self._id_factory = id_factory
        if include_reasoning is None:
            include_reasoning = getattr(backend, "takes_reasoning", False) is True
        self._include_reasoning = include_reasoning
        self._conversations: dict[ThreadKey, Conversation] = {}
        self._turns: dict[ThreadKey, Turn] = {}
        # Per thread, the interrupts open before its latest turn started (absent: not
        # known); see open_interrupts.
        self._interrupts: dict[ThreadKey, tuple[Interrupt, ...]] = {}
        self._live: set[Turn] = set()
        # Turns whose task is done, by final state: counted once as each one leaves
        # ``_live`` (O(1) per turn; no list of past turns is kept).
        self._finished: dict[RunStatus, int] = dict.fromkeys(RunStatus, 0)
        self._subscribers: list[_Subscriber] = []
        # How many subscribers asked for every event (checked per event, so kept counted).
        self._event_subscribers = 0
        self._focused: ThreadKey | None = None
        self._group: TaskGroup | None = None
        self._closed = False

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._closed:
            raise ClosedError("the engine is closed")
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._close_now()
        group, self._group = self._group, None
        try:
            if group is not None:
                return await group.__aexit__(exc_type, exc, tb)
            return None
        finally:
            self._close_streams()

    async def aclose(self) -> None:
        """Close the engine: every live turn ends ``cancelled`` (reason ``closed``), its
        work is cancelled, subscriptions end. After it returns nothing changes state and
        no backend call is made. Idempotent."""
        self._close_now()
        for turn in list(self._live):
            await turn._done.wait()
        self._close_streams()

    @property
    def closed(self) -> bool:
        return self._closed

    def _close_now(self) -> None:
        if self._closed:
            return
        self._closed = True
        reason = TerminalReason(kind=ReasonKind.CLOSED, message="the engine was closed")
        for turn in list(self._live):
            self._end_turn(turn, reason)

    def _close_streams(self) -> None:
        if not self.registry.closed:
            self.registry.close()
        for subscriber in self._subscribers:
            subscriber.send.close()
        self._subscribers.clear()
        self._event_subscribers = 0

    def _check_open(self) -> TaskGroup:
        if self._closed or self._group is None:
            raise ClosedError(
                "the engine is closed" if self._closed else "use the engine with 'async with'"
            )
        return self._group

    # -- turns -------------------------------------------------------------------------

    def start_turn(
        self,
        key: ThreadKey | str,
        message: str | UserMessage | None = None,
        *,
        resume: Sequence[ResumeEntry] = (),
        history: Sequence[ChatMessage] | None = None,
        tools: ToolRegistry | None = None,
    ) -> Turn:
        """Start a user's turn on a thread; a turn still running there is superseded.

        A turn that answers the agent's interrupts passes ``resume``: one
        ``ResumeEntry(interrupt_id=..., status="resolved" | "cancelled", payload=...)``
        per interrupt of the thread's last interrupted turn (:meth:`open_interrupts`).
        The entries go with the turn's first run (``RunAgentInput.resume``), not with
        its continuations. Such a turn may have no message of its own.

        On every error below nothing has changed: no turn was started or superseded.

        Args:
            key: The thread (a string is a thread id).
            message: The user's message; ``None`` for a turn that only answers
                interrupts.
            resume: Answers to the thread's open interrupts.
            history: The thread's earlier messages, used the first time the engine sees
                the thread (later turns continue the engine's own conversation).
            tools: Tools for this turn instead of the engine's.

        Raises:
            ClosedError: The engine is closed or not entered.
            ValueError: Neither a message nor resume entries were given.
            ResumeError: A ``ValueError`` too: the entries do not answer the thread's
                open interrupts (an unknown id, one answered twice, one left
                unanswered). Checked only when the engine knows them (see
                :meth:`open_interrupts`); duplicates are refused in any case.
        """
        group = self._check_open()
        key = key if isinstance(key, ThreadKey) else ThreadKey(key)
        entries = tuple(resume)
        if message is None and not entries:
            raise ValueError("a turn needs a message, resume entries, or both")
        previous = self._turns.get(key)
        open_interrupts = self._open_interrupts(key, previous)
        if entries:
            check_resume(open_interrupts, entries)
        if open_interrupts is not None:
            self._interrupts[key] = open_interrupts
        if previous is not None:
            self._end_turn(
                previous,
                TerminalReason(
                    kind=ReasonKind.SUPERSEDED, message="a newer turn on the thread took over"
                ),
            )
        conversation = self._conversations.get(key)
        if conversation is None:
            conversation = Conversation(key.thread_id, history or ())
            self._conversations[key] = conversation
        start = len(conversation.messages)
        if previous is not None:
            previous._end = start
        if isinstance(message, str):
            message = UserMessage(id=self._id_factory(), content=message)
        if message is not None:
            conversation.append(message)
        registry = tools if tools is not None else self.tools
        processor = EventProcessor(
            conversation,
            tools=registry.definitions(),
            max_depth=self.max_depth,
            limits=self.limits,
            context=self._context,
            forwarded_props=self._forwarded_props,
            id_factory=self._id_factory,
            include_reasoning=self._include_reasoning,
            resume=entries,
        )
        turn = Turn(self, key, processor, start)
        self._turns[key] = turn
        self._live.add(turn)
        self._publish_state(turn)
        group.start_soon(self._drive, turn, registry, name=f"toolrelay turn {key}")
        return turn

    async def run_turn(
        self,
        key: ThreadKey | str,
        message: str | UserMessage | None = None,
        *,
        resume: Sequence[ResumeEntry] = (),
        history: Sequence[ChatMessage] | None = None,
        tools: ToolRegistry | None = None,
    ) -> Turn:
        """:meth:`start_turn` and wait until it is finished."""
        turn = self.start_turn(key, message, resume=resume, history=history, tools=tools)
        await turn.wait_finished()
        return turn

    def open_interrupts(self, key: ThreadKey | str) -> tuple[Interrupt, ...] | None:
        """The interrupts a thread waits to have answered, as far as the engine knows.

        They are those of the thread's last turn that ended ``interrupted``, until a
        later turn ends ``completed`` or ``interrupted`` (with new ones). A turn that
        failed, was cancelled or superseded changes nothing: whether its answers
        reached the agent is not known, so they may be sent again.

        Returns:
            The open interrupts (``()``: none); ``None`` when the engine does not know
            (no turn on the thread has ended ``completed`` or ``interrupted`` here,
            say because its history comes from elsewhere): then
            :meth:`start_turn` sends resume entries unchecked, but for duplicates.
        """
        thread = key if isinstance(key, ThreadKey) else ThreadKey(key)
        return self._open_interrupts(thread, self._turns.get(thread))

    def _open_interrupts(self, key: ThreadKey, latest: Turn | None) -> tuple[Interrupt, ...] | None:
        if latest is not None:
            status = latest.status
            if status is RunStatus.interrupted:
                return latest.interrupts
            if status is RunStatus.completed:
                return ()
        return self._interrupts.get(key)

    def cancel(self, key: ThreadKey | str, message: str = "cancelled by the user") -> bool:
        """Cancel the live turn of a thread; ``False`` if there is none."""
        turn = self.turn(key)
        return turn.cancel(message) if turn is not None else False

    def turn(self, key: ThreadKey | str) -> Turn | None:
        """The latest turn of a thread (live or finished), or ``None``."""
        return self._turns.get(key if isinstance(key, ThreadKey) else ThreadKey(key))

    def state(self, key: ThreadKey | str) -> TurnSnapshot | None:
        """A snapshot of the thread's latest turn, or ``None``."""
        turn = self.turn(key)
        return turn.snapshot() if turn is not None else None

    def conversation(self, key: ThreadKey | str) -> Conversation | None:
        return self._conversations.get(key if isinstance(key, ThreadKey) else ThreadKey(key))

    @property
    def threads(self) -> tuple[ThreadKey, ...]:
        return tuple(self._conversations)

    # -- focus and observers ------------------------------------------------------------

    @property
    def focused(self) -> ThreadKey | None:
        """The thread the UI shows (set only by :meth:`focus`; promise 6)."""
        return self._focused

    def focus(self, key: ThreadKey | str | None) -> TurnSnapshot | None:
        """Show a thread: focused subscribers get its current state at once.

        Returns:
            The thread's current snapshot (``None`` if it has no turn yet).
        """
        self._focused = key if key is None or isinstance(key, ThreadKey) else ThreadKey(key)
        if self._focused is None:
            return None
        turn = self._turns.get(self._focused)
        if turn is None:
            return None
        self._publish_state(turn, force=True)
        return turn.snapshot()

    def subscribe(
        self,
        *,
        focused_only: bool = False,
        key: ThreadKey | str | None = None,
        events: bool = False,
        max_buffer: float = math.inf,
    ) -> MemoryObjectReceiveStream[Notification]:
        """A stream of notifications; close it to unsubscribe.

        Args:
            focused_only: Only the focused thread's notifications (the "current view").
            key: Only this thread's notifications.
            events: Also every AG-UI event as it arrives (:class:`EventReceived`), for
                live text.
            max_buffer: How far the subscriber may fall behind; beyond it notifications
                to it are dropped (its latest state stays readable with :meth:`state`).
        """
        send, receive = anyio.create_memory_object_stream[Notification](max_buffer)
        if self._closed:
            send.close()
            return receive
        thread = key if key is None or isinstance(key, ThreadKey) else ThreadKey(key)
        self._subscribers.append(_Subscriber(send, focused_only, events, thread))
        self._event_subscribers += events
        return receive

    def statistics(self) -> EngineStatistics:
        """Counts over the engine's lifetime (see :class:`EngineStatistics`); costs
        O(live turns), not O(turns ever started)."""
        counts = dict(self._finished)
        for turn in self._live:
            counts[turn.status] += 1
        return EngineStatistics(
            turns=counts,
            registered_runs=len(self.registry),
            threads=len(self._conversations),
        )

    def _publish(self, key: ThreadKey, notification: Notification, *, event: bool) -> None:
        if not self._subscribers:
            return
        dead: list[_Subscriber] = []
        for subscriber in self._subscribers:
            if event and not subscriber.events:
                continue
            if subscriber.key is not None and subscriber.key != key:
                continue
            if subscriber.focused_only and key != self._focused:
                continue
            try:
                subscriber.send.send_nowait(notification)
            except anyio.WouldBlock:
                pass
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                # The subscriber closed its end: close ours too, or it leaks (and warns).
                subscriber.send.close()
                dead.append(subscriber)
        if dead:
            self._subscribers = [s for s in self._subscribers if s not in dead]
            self._event_subscribers = sum(s.events for s in self._subscribers)

    def _publish_state(self, turn: Turn, *, force: bool = False) -> None:
        """Tell subscribers the turn's state, unless it is the one they were last told
        (``force``: a newly focused view wants it again)."""
        if not self._subscribers:
            return
        snapshot = turn.snapshot()
        if not force and snapshot == turn._last_published:
            return
        turn._last_published = snapshot
        self._publish(turn.key, StateChanged(snapshot), event=False)

    # -- ending a turn from outside its task ---------------------------------------------

    def _end_turn(self, turn: Turn, reason: TerminalReason) -> bool:
        processor = turn._processor
        if processor.status.is_final:
            return False
        if reason.kind is ReasonKind.SUPERSEDED:
            processor.supersede(reason.message)
        else:
            processor.cancel(reason.message, kind=reason.kind)
        turn._scope.cancel()
        self._publish_state(turn)
        return True

    # -- the driver ---------------------------------------------------------------------

    async def _drive(self, turn: Turn, tools: ToolRegistry) -> None:
        processor = turn._processor
        try:
            with turn._scope:
                await self._drive_runs(turn, tools)
        except Exception as exc:
            self._internal_error(turn, exc)
        finally:
            if not processor.status.is_final:
                # Only a cancellation from outside toolrelay's own calls gets here.
                processor.cancel("the turn's task was cancelled")
            handle = turn._handle
            if handle is not None and not self.registry.closed:
                self.registry.complete_run(handle, processor.status.value)
            self._live.discard(turn)
            self._finished[processor.status] += 1
            if self._turns.get(turn.key) is turn:
                # A superseded turn published its end when it was superseded; published
                # again now, after the newer turn's, it would flash over it (promise 5).
                self._publish_state(turn)
            turn._done.set()

    def _internal_error(self, turn: Turn, exc: Exception) -> None:
        """Safety check 7: log an unexpected exception and fail the turn ``internal_error``
        (unless it already ended: the processor fails itself before raising)."""
        logger.error("turn on %s failed unexpectedly", turn.key, exc_info=exc)
        processor = turn._processor
        if not processor.status.is_final:
            self._apply(
                turn,
                processor.fail(
                    TerminalReason(kind=ReasonKind.INTERNAL_ERROR, message=_describe(exc))
                ),
            )

    async def _allocate(self, turn: Turn) -> str | None:
        processor = turn._processor
        try:
            run_id = await self.backend.allocate_run(turn.key)
        except RemoteProtocolError as exc:
            self._apply(turn, processor.fail(exc.reason))
            return None
        except Exception as exc:
            self._apply(
                turn,
                processor.fail(
                    TerminalReason(
                        kind=ReasonKind.BACKEND_ERROR,
                        message=f"run allocation failed: {type(exc).__name__}: {exc}",
                    )
                ),
            )
            return None
        if processor.status.is_final:
            return None
        return run_id or self._run_id_factory()

    def _stale(self, turn: Turn, handle: RunHandle) -> bool:
        """Safety check 4: is ``handle`` still the thread's registered run?"""
        if self.registry.is_registered(handle):
            return False
        self._apply(turn, turn._processor.supersede("the run was replaced on its thread"))
        return True

    async def _drive_runs(self, turn: Turn, tools: ToolRegistry) -> None:
        processor = turn._processor
        run_id = await self._allocate(turn)
        if run_id is None:
            return
        handle = RunHandle(turn.key, run_id)
        self.registry.register_run(handle)
        turn._handle = handle
        run_input = processor.start_run(run_id)
        self._publish_state(turn)
        while True:
            await self._stream(turn, handle, run_input)
            if processor.status is not RunStatus.executing_tools:
                return
            batch = tuple(c for c in processor.tool_calls if c.status is ToolCallStatus.executing)

            def on_result(call: ToolCallInfo, result: ToolResult) -> None:
                if processor.status is RunStatus.executing_tools:
                    processor.record_result(call, result)
                    self._publish(
                        turn.key,
                        ToolCallFinished(turn.key, call.id, call.name, result),
                        event=False,
                    )

            await execute_batch(
                tools,
                batch,
                default_timeout=self.tool_timeout,
                on_result=on_result,
                limiter=self._limiter,
            )
            processor.commit_tool_results()
            if self._stale(turn, handle):
                return
            next_run_id = await self._allocate(turn)
            if next_run_id is None or self._stale(turn, handle):
                return
            next_handle = RunHandle(turn.key, next_run_id, depth=processor.depth + 1)
            if not self.registry.replace_run(handle, next_handle):
                next_handle.dispose()
                self._apply(turn, processor.supersede("the run was replaced on its thread"))
                return
            handle = next_handle
            turn._handle = handle
            run_input = processor.start_run(next_run_id)
            self._publish_state(turn)

    async def _stream(self, turn: Turn, handle: RunHandle, run_input: RunAgentInput) -> None:
        processor = turn._processor
        with anyio.CancelScope() as scope:
            handle.on_dispose(scope.cancel)
            try:
                async with self.backend.run(turn.key, run_input) as events:
                    async for event in events:
                        if turn.finished:
                            # Ended from outside (cancelled, superseded) while the
                            # backend already had this event: not processed, not shown.
                            break
                        # An exception here is ours (processor, observers), not the
                        # backend's: safety check 7, then stop reading the stream.
                        try:
                            effects = processor.receive(event)
                            if self._event_subscribers:
                                self._publish(turn.key, EventReceived(turn.key, event), event=True)
                            if effects:
                                self._apply(turn, effects)
                        except Exception as exc:
                            self._internal_error(turn, exc)
                            break
                        if processor.run_ended:
                            break
                if not processor.run_ended:
                    try:
                        effects = processor.end_stream()
                    except Exception as exc:
                        self._internal_error(turn, exc)
                    else:
                        self._apply(turn, effects)
            except RemoteProtocolError as exc:
                self._apply(turn, processor.fail(exc.reason))
            except Exception as exc:
                if processor.status.is_final:
                    raise  # the turn had already ended (say, closing failed): the catch-all logs it
                self._apply(
                    turn,
                    processor.fail(
                        TerminalReason(
                            kind=ReasonKind.BACKEND_ERROR,
                            message=f"the backend failed: {type(exc).__name__}: {exc}",
                        )
                    ),
                )
        if scope.cancelled_caught and not processor.status.is_final:
            # The handle was disposed by someone else: the run no longer owns the thread.
            self._apply(turn, processor.supersede("the run was replaced on its thread"))

    def _apply(self, turn: Turn, effects: Sequence[object]) -> None:
        if effects:
            self._publish_state(turn)
