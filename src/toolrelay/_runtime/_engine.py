"""The engine: turns on any number of threads, concurrently; its public face and its life.

The engine is entered and closed. It holds its threads
(:mod:`toolrelay._runtime._threads`), has its turns made
(:mod:`toolrelay._runtime._factory`), starts each one's task
(:mod:`toolrelay._runtime._tasks`; the loop itself is :mod:`toolrelay._runtime._driver`)
and lets observers subscribe (:mod:`toolrelay._runtime._observers`). A turn that answers
the agent's interrupts is a new turn on the thread, checked against the interrupts the
engine knows are open (docs/concepts.md, "A turn, its runs, and the thread").
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream
from msgspec import UNSET

from toolrelay._core import (
    ChatMessage,
    Conversation,
    Limits,
    ThreadKey,
    ToolRegistry,
    check_resume,
)
from toolrelay._errors import ClosedError
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay._runtime._durable import ThreadLog
from toolrelay._runtime._executor import ToolOptions, ToolThreads
from toolrelay._runtime._factory import TurnFactory
from toolrelay._runtime._host import TurnHost
from toolrelay._runtime._observers import Observers
from toolrelay._runtime._recovery import recover_turns
from toolrelay._runtime._registry import RunHandle, RunRegistry
from toolrelay._runtime._tasks import TurnTasks
from toolrelay._runtime._threads import ThreadTable
from toolrelay._runtime._turn import Turn
from toolrelay._runtime._views import EngineStatistics, Notification, TurnSnapshot
from toolrelay.backends._base import AgentBackend
from toolrelay.protocol import Context, Interrupt, ResumeEntry, UserMessage
from toolrelay.store import LiveTurn, Store

if TYPE_CHECKING:
    from opentelemetry.trace import TracerProvider

__all__ = ("Engine",)


def _new_id() -> str:
    """A random UUID's 32 hex digits (version 4, as ``uuid.uuid4().hex``) at a quarter
    of its cost: the ``UUID`` object is not made. Several are made per turn (its id, each
    run's)."""
    raw = bytearray(os.urandom(16))
    raw[6] = raw[6] & 0x0F | 0x40  # version 4
    raw[8] = raw[8] & 0x3F | 0x80  # the RFC 4122 variant
    return raw.hex()


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
        limits: Bounds on what the agent sends and how long it may take. They govern
            every backend the engine drives (handed over for each run, see
            :class:`~toolrelay.backends.RunSettings`), the processor and the turn's
            deadline (``turn_seconds``). Unset: the backend's own ``limits``
            attribute if it has one (so that both agree), else the defaults.
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
        max_threads: How many threads the engine keeps in memory: past it, the
            threads used least recently that have no live turn are forgotten (see
            :meth:`forget`). ``None``: no bound.
        tool_options: How tools run: result size bound, what the model sees of an
            exception, worker threads for blocking tools (see
            :class:`~toolrelay.ToolOptions`).
        tool_context: The ``deps`` of the :class:`~toolrelay.ToolContext` every
            tool that asks for one receives (a turn may give its own).
        max_repeated_calls: No-progress loop detection: a turn whose agent asks for the
            same tool with the same arguments this many times ends ``failed``
            (reason ``no_progress``) before the depth bound; ``None``: off.
        store: Where threads are kept durably (``SQLiteStore("toolrelay.db")``, see
            :mod:`toolrelay.store`). Every block of every turn is written the moment
            it exists; a thread the engine does not hold is read from the store on
            its next turn. The engine opens the store when it is entered and closes
            it when it closes. ``None``: threads live in memory only.
        recover: With a store, resume the turns a crash left live when the engine
            is entered (see :meth:`recover`).
        tracer_provider: Where the OpenTelemetry spans of turns go (needs the
            ``otel`` extra); ``None``: the global provider. With no provider set
            (the API's default), turns are not traced and cost nothing more (see
            ``docs/observability.md``).

    Raises:
        TypeError: ``backend`` is not an :class:`~toolrelay.backends.AgentBackend`.
        ValueError: A bound is negative.
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
        max_threads: int | None = None,
        tool_options: ToolOptions | None = None,
        tool_context: Any = None,
        max_repeated_calls: int | None = 3,
        store: Store | None = None,
        recover: bool = True,
        tracer_provider: TracerProvider | None = None,
    ) -> None:
        if not isinstance(backend, AgentBackend):
            raise TypeError(
                "Engine(backend): expected an AgentBackend (an object with async "
                "allocate_run(key) and run(key, run_input)), such as "
                f"AguiHttpBackend(url) or a provider backend; got {type(backend).__name__}"
                + (": wrap a URL in AguiHttpBackend(url)" if isinstance(backend, str) else "")
            )
        if max_threads is not None and max_threads < 0:
            raise ValueError("max_threads must be >= 0")
        if max_repeated_calls is not None and max_repeated_calls < 1:
            raise ValueError("max_repeated_calls must be >= 1 (None turns it off)")
        self.max_repeated_calls = max_repeated_calls
        if store is not None and not isinstance(store, Store):
            raise TypeError(
                f"Engine(store=...): expected a toolrelay.store.Store, got {type(store).__name__}"
            )
        self.store = store
        self._recover_on_enter = recover
        # What the engine holds of each thread (and, with a store, loads from it).
        self._threads: ThreadTable[Turn] = ThreadTable(store)
        self.backend = backend
        self.max_threads = max_threads
        self.tools = tools if tools is not None else ToolRegistry()
        self.max_depth = max_depth
        self.tool_timeout = tool_timeout
        if limits is None:
            own = getattr(backend, "limits", None)
            limits = own if isinstance(own, Limits) else Limits()
        self.limits: Limits = limits
        self.registry = registry if registry is not None else RunRegistry()
        tool_options = tool_options if tool_options is not None else ToolOptions()
        self._tool_threads = ToolThreads(tool_options.max_threads)
        # As given (include_reasoning_given): the backend is told (RunSettings) whether
        # the choice was left to it.
        include_reasoning_given = include_reasoning
        if include_reasoning is None:
            include_reasoning = getattr(backend, "takes_reasoning", False) is True
        self._tasks = TurnTasks()
        self._observers = Observers()
        # What every turn asks of the engine (the whole of it; see runtime/_host.py).
        self._host: TurnHost[Turn] = TurnHost(
            engine=self,
            notifications=self._observers.notifications,
            tool_limiter=(
                anyio.CapacityLimiter(max_concurrent_tools) if max_concurrent_tools else None
            ),
            tool_threads=self._tool_threads,
            tool_options=tool_options,
            tracer_provider=tracer_provider,
            include_reasoning=include_reasoning_given,
            new_run_id=run_id_factory,
            deadlines=self._tasks.deadlines,
            reach_turns=self._tasks.reach_turns,
            load=self._threads.load,
            finished=self._turn_finished,
        )
        self._factory = TurnFactory(
            self,
            self._threads,
            self._host,
            context=tuple(context),
            forwarded_props=forwarded_props,
            id_factory=id_factory,
            include_reasoning=include_reasoning,
            tool_context=tool_context,
        )

    # -- lifecycle -------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        if self._tasks.closed:
            raise ClosedError("the engine is closed")
        if self.store is not None:
            await self.store.open()
        await self._tasks.open()
        if self.store is not None and self._recover_on_enter:
            try:
                await self.recover()
            except BaseException:
                await self.__aexit__(None, None, None)
                raise
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        self._close_now()
        try:
            return await self._tasks.close(exc_type, exc, tb)
        finally:
            self._close_streams()
            await self._close_store()

    async def aclose(self) -> None:
        """Close the engine: every live turn ends ``cancelled`` (reason ``closed``), its
        work is cancelled, subscriptions end, the store is closed. After it returns
        nothing changes state and no backend call is made. Idempotent.

        A turn ended by closing is written as ended (``closed``): closing is a decision,
        not a crash, so :meth:`recover` does not resume it.
        """
        self._close_now()
        await self._tasks.wait_all()
        self._close_streams()
        await self._close_store()

    async def _close_store(self) -> None:
        if self.store is not None:
            with anyio.CancelScope(shield=True):
                await self.store.aclose()

    @property
    def closed(self) -> bool:
        return self._tasks.closed

    def _close_now(self) -> None:
        self._tasks.end_all(TerminalReason(kind=ReasonKind.CLOSED, message="the engine was closed"))

    def _close_streams(self) -> None:
        if not self.registry.closed:
            self.registry.close()
        self._observers.close()

    # -- turns -------------------------------------------------------------------------

    def start_turn(
        self,
        key: ThreadKey | str,
        message: str | UserMessage | None = None,
        *,
        resume: Sequence[ResumeEntry] = (),
        history: Sequence[ChatMessage] | None = None,
        tools: ToolRegistry | None = None,
        tool_context: Any = None,
        owner: str | None = None,
        context: Sequence[Context] | None = None,
        forwarded_props: Any = None,
        state: Any = UNSET,
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
                the thread (later turns continue the engine's own conversation). With
                a store that already has the thread, the store's history is used.
            tools: Tools for this turn instead of the engine's.
            tool_context: The ``deps`` of this turn's tool context (the user, a
                database session...); ``None``: the engine's ``tool_context``.
            owner: With a store, the principal recorded as the thread's owner when
                this turn creates it.
            context: ``RunAgentInput.context`` for every run of this turn, in place of
                the engine's ``context`` (``None``: the engine's). Kept with the turn
                in the store: a recovered or retried turn carries it too.
            forwarded_props: ``RunAgentInput.forwardedProps`` for every run of this
                turn, in place of the engine's (``None``: the engine's); kept as
                ``context`` is.
            state: The agent state the turn starts from, in place of the thread's
                (the user changed it: AG-UI's shared state); written to the store
                with the turn's start. Left out: the thread's state.

        Raises:
            ClosedError: The engine is closed or not entered.
            ValueError: Neither a message nor resume entries were given.
            ResumeError: A ``ValueError`` too: the entries do not answer the thread's
                open interrupts (an unknown id, one answered twice, one left
                unanswered). Checked only when the engine knows them (see
                :meth:`open_interrupts`); duplicates are refused in any case.
        """
        self._tasks.check_open()
        key = key if isinstance(key, ThreadKey) else ThreadKey(key)
        entries = tuple(resume)
        if message is None and not entries:
            raise ValueError("a turn needs a message, resume entries, or both")
        if entries:
            check_resume(self._threads.open_interrupts(key), entries)
        turn = self._factory.new(
            key,
            message,
            resume=entries,
            history=history,
            tools=tools,
            owner=owner,
            tool_context=tool_context,
            context=None if context is None else tuple(context),
            forwarded_props=forwarded_props,
            state=state,
        )
        return self._launch(turn, f"toolrelay turn {key}")

    def _launch(self, turn: Turn, name: str) -> Turn:
        """``turn`` becomes its thread's latest, is live, told, and its task starts.

        Raises:
            ClosedError: The engine closed meanwhile (a recovery waits on the store).
        """
        self._tasks.check_open()
        self._threads.turns[turn.key] = turn
        turn.publish_state()
        self._tasks.start(turn, name)
        return turn

    # -- the store ---------------------------------------------------------------------

    async def recover(self, keys: Iterable[ThreadKey | str] | None = None) -> tuple[Turn, ...]:
        """Resume the turns the store shows live: those a crash (or a killed process)
        left between their start and their end.

        Each is resumed where its log says (promise 9): a turn whose run was streaming
        starts that run again with the conversation as stored; a turn that was
        executing tools keeps every result the store has (those calls never run
        again), runs again the calls of idempotent tools (``@tool(idempotent=True)``)
        that had no result, and sends the model an "interrupted" error for the others
        (promise 10); then it continues. Threads whose turn is live in this engine
        are left alone. Entering an engine with a store calls it (unless
        ``recover=False``).

        Args:
            keys: Only these threads (a worker of a multi-process server recovers
                the threads it claimed); ``None``: every thread the store shows live.

        Returns:
            The resumed turns (detached, like :meth:`start_turn`'s).

        Raises:
            ClosedError: The engine is closed or not entered.
            StoreError: The store could not be read.
        """
        self._tasks.check_open()
        store = self.store
        if store is None:
            return ()
        wanted = (
            None
            if keys is None
            else {k if isinstance(k, ThreadKey) else ThreadKey(k) for k in keys}
        )

        def resume(
            key: ThreadKey, conversation: Conversation, log: ThreadLog, live: LiveTurn
        ) -> Turn:
            turn = self._factory.resumed(key, conversation, log, live)
            return self._launch(turn, f"toolrelay recovered turn {key}")

        return await recover_turns(store, self._threads, wanted, resume)

    async def retry(self, key: ThreadKey | str) -> Turn:
        """Start the thread's failed turn again: its last run's input (the user's
        message and every tool result it already had) is sent again, without adding
        the user's message a second time.

        For a turn that failed on something passing: a dropped stream, an HTTP 5xx or
        429, a store that was locked. What the failed turn received stays in the
        conversation (nothing received is lost), so the new run sees it too.

        Returns:
            The new turn (detached, like :meth:`start_turn`'s).

        Raises:
            ClosedError: The engine is closed or not entered.
            ValueError: The thread's last turn did not end ``failed`` (or the engine
                knows of no turn on it).
            StoreError: The store could not be read.
        """
        self._tasks.check_open()
        thread = key if isinstance(key, ThreadKey) else ThreadKey(key)
        failed = await self._threads.failed_turn(thread)
        turn = self._factory.new(
            thread,
            None,
            retry_of=failed.turn_id,
            context=failed.context,
            forwarded_props=failed.forwarded_props,
        )
        return self._launch(turn, f"toolrelay turn {thread}")

    async def run_turn(
        self,
        key: ThreadKey | str,
        message: str | UserMessage | None = None,
        *,
        resume: Sequence[ResumeEntry] = (),
        history: Sequence[ChatMessage] | None = None,
        tools: ToolRegistry | None = None,
        tool_context: Any = None,
        context: Sequence[Context] | None = None,
        forwarded_props: Any = None,
        state: Any = UNSET,
    ) -> Turn:
        """:meth:`start_turn` and wait until it is finished.

        The turn belongs to the caller: cancelling the scope that awaits it (a
        ``move_on_after``, a web request whose client went away) ends the turn
        ``cancelled`` at once, with every guarantee of :meth:`Turn.cancel`, before the
        cancellation goes on. A turn that should outlive its caller is started with
        :meth:`start_turn` (detached).
        """
        turn = self.start_turn(
            key,
            message,
            resume=resume,
            history=history,
            tools=tools,
            tool_context=tool_context,
            context=context,
            forwarded_props=forwarded_props,
            state=state,
        )
        try:
            await turn.wait_finished()
        except anyio.get_cancelled_exc_class():
            turn.cancel("the caller stopped waiting for the turn")
            raise
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
        return self._threads.open_interrupts(key if isinstance(key, ThreadKey) else ThreadKey(key))

    def cancel(self, key: ThreadKey | str, message: str = "cancelled by the user") -> bool:
        """Cancel the live turn of a thread; ``False`` if there is none."""
        turn = self.turn(key)
        return turn.cancel(message) if turn is not None else False

    def turn(self, key: ThreadKey | str) -> Turn | None:
        """The latest turn of a thread (live or finished), or ``None``."""
        return self._threads.turns.get(key if isinstance(key, ThreadKey) else ThreadKey(key))

    def state(self, key: ThreadKey | str) -> TurnSnapshot | None:
        """A snapshot of the thread's latest turn, or ``None``."""
        turn = self.turn(key)
        return turn.snapshot() if turn is not None else None

    def conversation(self, key: ThreadKey | str) -> Conversation | None:
        return self._threads.conversations.get(
            key if isinstance(key, ThreadKey) else ThreadKey(key)
        )

    @property
    def threads(self) -> tuple[ThreadKey, ...]:
        """The threads the engine holds in memory, least recently used first."""
        return tuple(self._threads.conversations)

    def forget(self, key: ThreadKey | str) -> bool:
        """Drop a thread from the engine's memory: its conversation, its latest turn and
        its open interrupts.

        A thread whose turn is live is kept. With a store, the thread comes back from
        it on its next turn, intact; without one, what is forgotten is gone: the
        thread's next turn starts afresh (or from the ``history`` it is given).

        Returns:
            ``True`` when the thread was dropped; ``False`` when the engine did not
            hold it, its turn is live, or records the store refused still wait to be
            written (nothing changes).
        """
        return self._threads.forget(key if isinstance(key, ThreadKey) else ThreadKey(key))

    # -- focus and observers ------------------------------------------------------------

    @property
    def focused(self) -> ThreadKey | None:
        """The thread the UI shows (set only by :meth:`focus`; promise 6)."""
        return self._observers.focused

    def focus(self, key: ThreadKey | str | None) -> TurnSnapshot | None:
        """Show a thread: focused subscribers get its current state at once.

        Returns:
            The thread's current snapshot (``None`` if it has no turn yet).
        """
        focused = key if key is None or isinstance(key, ThreadKey) else ThreadKey(key)
        self._observers.focused = focused
        if focused is None:
            return None
        turn = self._threads.turns.get(focused)
        if turn is None:
            return None
        turn.publish_state(force=True)
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
        thread = key if key is None or isinstance(key, ThreadKey) else ThreadKey(key)
        return self._observers.subscribe(
            focused_only=focused_only, key=thread, events=events, max_buffer=max_buffer
        )

    def statistics(self) -> EngineStatistics:
        """Counts over the engine's lifetime (see :class:`EngineStatistics`); costs
        O(live turns), not O(turns ever started)."""
        return EngineStatistics(
            turns=self._tasks.counts(),
            registered_runs=len(self.registry),
            threads=len(self._threads.conversations),
            stuck_tool_threads=self._tool_threads.stuck,
        )

    # -- what turns ask of the engine -----------------------------------------------------

    def _turn_finished(self, turn: Turn, handle: RunHandle | None) -> None:
        """``turn``'s task is ending: its run leaves the registry, it is counted."""
        if handle is not None and not self.registry.closed:
            self.registry.complete_run(handle, turn.status.value)
        self._tasks.ended(turn)
        self._threads.drop_if_stale(turn)
        if self._threads.turns.get(turn.key) is turn:
            # A superseded turn published its end when it was superseded; published
            # again now, after the newer turn's, it would flash over it (promise 5).
            turn.publish_state()
        # The least recently used idle threads past max_threads are forgotten; the
        # thread a person looks at stays.
        self._threads.evict(self.max_threads, keep=self._observers.focused)
