"""The AG-UI server: a plain ASGI application around an engine on a store.

Theory of operation
-------------------
The server owns one :class:`~toolrelay.runtime.Engine` whose backend is the model
(wrapped in :class:`~toolrelay.server._rounds.RoundLimit`) and whose store is the
server's log (wrapped in :class:`~toolrelay.server._watch.WatchedStore`). A ``POST``
of a ``RunAgentInput`` checks everything first (who asks, the body's size, the
input, the thread's owner, the tools), then starts a turn with
``engine.start_turn``: the turn belongs to the engine's task group, not to the
request, so a client that goes away cancels nothing. The response is the log of
that turn read as AG-UI events (:class:`~toolrelay.server._feed.LogFeed`) from the
sequence number the thread had when the request came, following new commits until
the AG-UI run ends; every event carries the sequence number of the record it comes
from as its SSE ``id``. With ``live_text``, the model's text deltas (from the
engine's notifications) go out between records, before their message is written;
:class:`_LiveText` keeps each stream's view of them consistent with the records.

Routes (under the mount point):

==========================================  ==========================================
``POST /``                                  run: a ``RunAgentInput``; answers SSE
``GET /threads/{thread}/events?after=N``    catch-up: the thread's events after N
                                            (or ``Last-Event-ID``), then the live
                                            tail until no run is open; 204 when
                                            there is nothing to send
``POST /threads/{thread}/cancel``           cancel the thread's live turn
``GET /metrics``                            Prometheus metrics
``GET /healthz``                            200 (no authentication)
``GET /``                                   what the server is (JSON)
``GET /inspect``, ``GET /threads``,         the inspector page (no authentication for
``GET /threads/{thread}/calls``             its files, which hold no data) and the
                                            JSON it reads (see ``_inspector``)
==========================================  ==========================================

Client tools: each tool of ``RunAgentInput.tools`` becomes, for that turn, a tool
whose execution is a wait for the client's result. The feed ends the AG-UI run once
the batch's server tools are done (the client calls stay pending), and a ``POST``
whose messages end with the ``tool`` messages of those calls resolves the waits: the
same turn goes on, and that request streams it.

Several processes on one store (``shared``, the default on a
:class:`~toolrelay.store.PostgresStore`): the engine writes through a
:class:`~toolrelay.store.FencedStore`, so every record carries this process's claim
of its thread. A run claims its thread before its turn starts (409 ``thread_busy``
when another process holds it) and a task of the server's group (``_keep``) renews
the claim while a turn of the thread is live here, then releases it. Another task
(``_take_over``) claims, every third of the lease, the live turns whose claim
expired (their process died) and resumes them with ``engine.recover([key])``; a
third (``_listen``) follows the store's commit notifications and wakes the streams
of each thread named, so a stream here follows a turn that runs elsewhere. A claim
lost while this process was frozen cancels the local turn (its writes are refused
anyway) and the engine forgets the thread.

Why plain ASGI rather than Starlette: the server has five routes, streams SSE, must
watch for ``http.disconnect`` while it streams and bound the request body as it
arrives; plain ASGI does each in a few lines, adds no dependency, runs under any
ASGI server on asyncio and trio alike, and mounts in Starlette, FastAPI or any
framework that mounts an ASGI app.
"""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

import anyio
import msgspec
from anyio.abc import TaskGroup, TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from toolrelay._version import __version__
from toolrelay.backends import AgentBackend
from toolrelay.backends._propagation import continued_trace
from toolrelay.core import ThreadKey, ToolRegistry, ToolResult, ToolSpec
from toolrelay.errors import (
    ClosedError,
    InvalidEventError,
    MalformedEventError,
    StaleClaimError,
    StoreError,
    ToolDefinitionError,
)
from toolrelay.protocol import (
    AssistantMessage,
    Event,
    ReasoningEndEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
    decode_run_input,
    encode_event,
)
from toolrelay.runtime import Engine, EventReceived, Notification, Turn
from toolrelay.server._auth import Anonymous, Authenticator, BearerTokens, Request
from toolrelay.server._feed import LogFeed
from toolrelay.server._inspector import call_outcomes, static_file, static_headers, thread_list
from toolrelay.server._metrics import Metrics
from toolrelay.server._rounds import RoundLimit
from toolrelay.server._watch import WatchedStore
from toolrelay.store import (
    Claim,
    ClaimingStore,
    Entry,
    FencedStore,
    MemoryStore,
    NotifyingStore,
    Store,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
)

__all__ = (
    "DEFAULT_MAX_TOOL_ROUNDS",
    "MAX_TOOL_ROUNDS_ENV",
    "AguiServer",
    "max_tool_rounds_from_env",
)

logger = logging.getLogger("toolrelay.server")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

#: The environment variable that sets ``max_tool_rounds`` when it is not given.
MAX_TOOL_ROUNDS_ENV = "TOOLRELAY_MAX_TOOL_ROUNDS"
#: The default tool-round limit (reference 004).
DEFAULT_MAX_TOOL_ROUNDS = 5
_READ_PAGE = 256  # records read per store read while streaming
_CHECKPOINTS = 10_000  # threads whose folded feed is kept in memory
_LIVE_BUFFER = 4096  # live deltas a stream may fall behind by before it stops getting them


def max_tool_rounds_from_env(environ: Mapping[str, str] | None = None) -> int:
    """``TOOLRELAY_MAX_TOOL_ROUNDS``, or the default (5).

    Raises:
        ValueError: The variable is set to something other than a positive integer.
    """
    value = (os.environ if environ is None else environ).get(MAX_TOOL_ROUNDS_ENV)
    if value is None or not value.strip():
        return DEFAULT_MAX_TOOL_ROUNDS
    try:
        rounds = int(value)
    except ValueError:
        raise ValueError(f"{MAX_TOOL_ROUNDS_ENV}={value!r}: expected a positive integer") from None
    if rounds < 1:
        raise ValueError(f"{MAX_TOOL_ROUNDS_ENV}={value!r}: expected a positive integer")
    return rounds


class HTTPError(Exception):
    """A request refused before anything was written: status, code and sentence."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        headers: Sequence[tuple[bytes, bytes]] = (),
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = list(headers)


class _Disconnected(Exception):
    """The client went away while the request was read."""


@dataclass(slots=True)
class _Holder:
    """This worker's hold on a thread (shared mode): kept while a turn of it is live
    here; ``ready`` is set once the turn the hold was taken for has started (or
    failed to)."""

    ready: anyio.Event = field(default_factory=anyio.Event)
    #: Set once the claim was released (or lost).
    released: anyio.Event = field(default_factory=anyio.Event)


@dataclass(slots=True)
class _Slot:
    """Where a client tool's result meets the call waiting for it."""

    event: anyio.Event = field(default_factory=anyio.Event)
    result: ToolResult | None = None


def _call_id_of_current_task(name: str) -> str:
    """The id of the tool call the current task runs.

    The engine runs each call of a batch in a task named ``tool <name> (<call id>)``
    (:func:`toolrelay.runtime.execute_batch`); a tool handler is not given its call
    id, so a client tool reads it there.
    """
    task = anyio.get_current_task().name or ""
    prefix = f"tool {name} ("
    if not (task.startswith(prefix) and task.endswith(")")):
        raise RuntimeError(f"client tool {name!r} was not run by the engine's executor")
    return task[len(prefix) : -1]


class AguiServer:
    """The AG-UI server as an ASGI application (see the module docstring).

    Enter it (``async with server:``) or let the ASGI server's lifespan do it; the
    engine, its store and the recovery of turns a crash left live start then.

    Args:
        backend: The model: a provider backend, ``AguiHttpBackend`` (another AG-UI
            server), a ``ScriptedAgent``...
        tools: The server's tools, executed in the server.
        store: The log (default: a :class:`~toolrelay.store.MemoryStore`).
        authenticator: Who a request comes from (default: everyone is
            ``anonymous``); see :class:`BearerTokens`.
        token: Shorthand for ``authenticator=BearerTokens.single(token)``.
        max_tool_rounds: Tool rounds a turn may make before the server ends it
            ``completed`` with stop reason ``max_tool_rounds`` (default:
            ``TOOLRELAY_MAX_TOOL_ROUNDS``, else 5).
        continuation: ``False``: never call the model again after a tool round (the
            turn completes with stop reason ``tool_use``).
        tool_timeout: Seconds a server tool may run unless its spec says otherwise.
        client_tool_timeout: Seconds the server waits for a client tool's result;
            then the model gets an error result.
        max_body_bytes: The largest request body accepted (413 beyond).
        heartbeat: Seconds between SSE comments on an idle stream.
        drain_timeout: On shutdown, seconds to let running turns finish before the
            engine closes (turns waiting for a client do not hold it).
        max_live_turns: Turns live at once, across all threads and principals; a run
            that would start one more is refused with 429 (``None``: no bound).
        max_streams: SSE responses open at once; one more is refused with 429
            (``None``: no bound).
        live_text: Stream the model's text as it comes (``TEXT_MESSAGE_START`` and
            ``TEXT_MESSAGE_CONTENT`` deltas, before the message is in the log); the
            message's ``TEXT_MESSAGE_END`` comes with its record. ``False``: every
            event comes from a committed record (text per message).
        engine_options: More keyword arguments for the :class:`Engine` (say
            ``{"max_repeated_calls": 3}`` to fail a turn whose model repeats a call,
            before ``max_tool_rounds`` completes it).
        shared: Share the store's turns with other server processes (see "Several
            processes" in ``docs/server.md``): each turn runs under a claim of its
            thread (lease, heartbeat, fencing token), a thread held elsewhere is
            refused with 409, turns whose worker died are taken over, and every
            process's commits reach this one's streams. ``None`` (default): shared
            when the store offers claims and commit notifications
            (:class:`~toolrelay.store.PostgresStore`).
        worker: This process's name in its claims (default: ``host:pid``).
        lease: Seconds a claim lasts unless renewed (renewed every third of it);
            a dead worker's turns move on this long after its last renewal.
        takeover_interval: Seconds between two looks for turns whose worker died
            (default: a third of ``lease``).

    Raises:
        ValueError: A bound is not positive, ``token`` and ``authenticator`` are
            both given, or ``shared=True`` with a store that offers no claims.
    """

    def __init__(
        self,
        backend: AgentBackend,
        *,
        tools: ToolRegistry | None = None,
        store: Store | None = None,
        authenticator: Authenticator | None = None,
        token: str | None = None,
        max_tool_rounds: int | None = None,
        continuation: bool = True,
        tool_timeout: float | None = 60.0,
        client_tool_timeout: float = 3600.0,
        max_body_bytes: int = 1_000_000,
        heartbeat: float = 15.0,
        drain_timeout: float = 30.0,
        max_live_turns: int | None = 1000,
        max_streams: int | None = 10_000,
        live_text: bool = True,
        engine_options: Mapping[str, Any] | None = None,
        shared: bool | None = None,
        worker: str | None = None,
        lease: float = 15.0,
        takeover_interval: float | None = None,
    ) -> None:
        if token is not None and authenticator is not None:
            raise ValueError("give a token or an authenticator, not both")
        rounds = max_tool_rounds if max_tool_rounds is not None else max_tool_rounds_from_env()
        if rounds < 1:
            raise ValueError("max_tool_rounds must be >= 1")
        if max_body_bytes < 1 or client_tool_timeout <= 0 or heartbeat <= 0:
            raise ValueError("max_body_bytes, client_tool_timeout and heartbeat must be > 0")
        self.backend = backend
        self.tools = tools if tools is not None else ToolRegistry()
        self.max_tool_rounds = rounds
        self.continuation = continuation
        self.tool_timeout = tool_timeout
        self.client_tool_timeout = client_tool_timeout
        self.max_body_bytes = max_body_bytes
        self.heartbeat = heartbeat
        self.drain_timeout = drain_timeout
        if max_live_turns is not None and max_live_turns < 1:
            raise ValueError("max_live_turns must be >= 1")
        self.max_live_turns = max_live_turns
        self.live_text = live_text
        if max_streams is not None and max_streams < 1:
            raise ValueError("max_streams must be >= 1")
        self.max_streams = max_streams
        self._streams = 0
        # Per thread, the live-delta queues of the streams following it.
        self._followers: dict[ThreadKey, set[MemoryObjectSendStream[Event]]] = {}
        # Per thread, a feed folded up to its last commit, so a request does not read
        # the thread's log from its start (the threads used least recently go first).
        self._checkpoints: OrderedDict[ThreadKey, LogFeed] = OrderedDict()
        self._group: TaskGroup | None = None
        if token is not None:
            authenticator = BearerTokens.single(token)
        self.authenticator: Authenticator = (
            authenticator if authenticator is not None else Anonymous()
        )
        self.metrics = Metrics()
        inner = store if store is not None else MemoryStore()
        if shared is None:
            shared = isinstance(inner, ClaimingStore) and isinstance(inner, NotifyingStore)
        if shared and not isinstance(inner, ClaimingStore):
            raise ValueError(f"shared=True needs a store that offers claims, not {inner!r}")
        if not 0 < lease < 1e9:
            raise ValueError("lease must be a positive number of seconds")
        self.shared = shared
        self.worker = worker or f"{socket.gethostname()}:{os.getpid()}"
        self.lease = lease
        self.takeover_interval = takeover_interval if takeover_interval else lease / 3
        #: The store with this worker's claims on its writes (shared mode).
        self._fenced: FencedStore | None = None
        if shared:
            assert isinstance(inner, ClaimingStore)
            self._fenced = FencedStore(inner, worker=self.worker, lease=lease)
        self._notifying = inner if shared and isinstance(inner, NotifyingStore) else None
        self._holders: dict[ThreadKey, _Holder] = {}
        self._leaving: dict[ThreadKey, anyio.Event] = {}
        self._claiming: dict[ThreadKey, anyio.Event] = {}
        self.store = WatchedStore(
            self._fenced if self._fenced is not None else inner,
            on_commit=self._committed,
            on_write=self.metrics.write,
        )
        self._engine_options = dict(engine_options or {})
        self._engine: Engine | None = None
        self._claims: dict[ThreadKey, str] = {}  # owner of threads not written yet
        self._client_tools_next: dict[ThreadKey, frozenset[str]] = {}
        self._client_tools: dict[str, frozenset[str]] = {}  # live turn id -> names
        self._slots: dict[tuple[ThreadKey, str], _Slot] = {}
        self._client_waits: dict[ThreadKey, set[str]] = {}  # calls waiting, per thread
        self._stopping = anyio.Event()
        self._entered = False

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def engine(self) -> Engine:
        """The engine running the turns (once the server is entered)."""
        if self._engine is None:
            raise RuntimeError("the server is not running: use 'async with server:'")
        return self._engine

    async def __aenter__(self) -> Self:
        if self._entered:
            raise RuntimeError("the server was already started")
        self._entered = True
        model = RoundLimit(
            self.backend,
            max_tool_rounds=self.max_tool_rounds,
            continuation=self.continuation,
            on_stop=self._stopped,
        )
        options: dict[str, Any] = {
            "tools": self.tools,
            "max_depth": self.max_tool_rounds + 1,
            "tool_timeout": self.tool_timeout,
            # Idle threads leave memory (they are read back from the store when used).
            "max_threads": 10_000,
            # The loop's bound is max_tool_rounds, which completes the turn (004); the
            # engine's no-progress breaker (which fails it) is the embedder's choice.
            "max_repeated_calls": None,
            **self._engine_options,
        }
        engine = Engine(model, store=self.store, recover=False, **options)
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group
        try:
            await engine.__aenter__()  # opens the store
        except BaseException as exc:
            group.cancel_scope.cancel()
            await group.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        self._engine = engine
        if self.live_text:
            group.start_soon(self._route_deltas, engine.subscribe(events=True))
        try:
            live = await self.store.threads(live=True)
            if self._fenced is None:
                self.metrics.live_at_start([(info.key, info.live_turn or "") for info in live])
                # The turns a crash left live resume (promise 9); calls whose result is
                # stored never run again (promise 10).
                await engine.recover()
            else:
                # Shared: a live turn is resumed by whichever worker claims it once
                # its worker's lease ran out (maybe this one, in a moment).
                if self._notifying is not None:
                    group.start_soon(self._listen, self._notifying)
                group.start_soon(self._take_over, self._fenced)
        except BaseException as exc:
            await engine.__aexit__(type(exc), exc, exc.__traceback__)
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)
            raise
        if self._fenced is None:
            logger.info("toolrelay server started (%d live turn(s) resumed)", len(live))
        else:
            logger.info(
                "toolrelay server %s started, sharing its store (%d live turn(s) in it)",
                self.worker,
                len(live),
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Stop: refuse new runs, let running turns finish (up to ``drain_timeout``),
        close the engine (turns still live end ``cancelled``, reason ``closed``), end
        every stream, close the store. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        engine = self._engine
        if engine is not None:
            with anyio.move_on_after(self.drain_timeout):
                for turn in self._running_turns(engine):
                    await turn.wait_finished()
            await engine.aclose()
            # Shared: let this worker's holds be released before the store closes
            # (a claim left behind would keep its thread from other workers until
            # its lease ran out).
            with anyio.move_on_after(5):
                for holder in list(self._holders.values()):
                    await holder.released.wait()
                for leaving in list(self._leaving.values()):
                    await leaving.wait()
            await engine.__aexit__(None, None, None)  # closes the store
        self.store.wake_all()
        group, self._group = self._group, None
        if group is not None:
            group.cancel_scope.cancel()
            await group.__aexit__(None, None, None)

    def _running_turns(self, engine: Engine) -> list[Turn]:
        """The live turns that are not only waiting for a client's results."""
        waiting = {key for key, calls in self._client_waits.items() if calls}
        turns = [engine.turn(key) for key in engine.threads if key not in waiting]
        return [turn for turn in turns if turn is not None and not turn.finished]

    async def _route_deltas(self, notifications: MemoryObjectReceiveStream[Notification]) -> None:
        """Hand each text delta of a live turn to the streams following its thread."""
        async with notifications:
            async for notification in notifications:
                if not isinstance(notification, EventReceived):
                    continue
                event = notification.event
                if not isinstance(event, (TextMessageStartEvent, TextMessageContentEvent)):
                    continue
                followers = self._followers.get(notification.key)
                if not followers:
                    continue
                for queue in list(followers):
                    try:
                        queue.send_nowait(event)
                    except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        # Too far behind (or gone): it gets whole messages from the log.
                        followers.discard(queue)
                        queue.close()
                self.store.poke(notification.key)

    def _follow(self, key: ThreadKey) -> _Follower | None:
        """Start receiving the thread's live text deltas (``None``: ``live_text`` off)."""
        if not self.live_text:
            return None
        send, receive = anyio.create_memory_object_stream[Event](_LIVE_BUFFER)
        self._followers.setdefault(key, set()).add(send)
        return _Follower(send, receive)

    def _unfollow(self, key: ThreadKey, follower: _Follower | None) -> None:
        if follower is None:
            return
        follower.send.close()
        follower.receive.close()
        followers = self._followers.get(key)
        if followers is not None:
            followers.discard(follower.send)
            if not followers:
                self._followers.pop(key, None)

    # -- several processes on one store (shared mode) ----------------------------------------

    async def _hold_thread(self, key: ThreadKey) -> _Holder:
        """This worker's hold on ``key``, claimed now unless it has it already.

        Raises:
            HTTPError: 409 ``thread_busy``: another worker holds the thread (a turn of
                it runs there); 503: the store failed.
        """
        fenced = self._fenced
        assert fenced is not None and self._group is not None
        while True:
            # This worker's own hold being released, or being taken by another
            # request of it: wait, then look again.
            pending = self._leaving.get(key) or self._claiming.get(key)
            if pending is None:
                break
            await pending.wait()
        holder = self._holders.get(key)
        if holder is not None:
            return holder
        claiming = self._claiming[key] = anyio.Event()
        try:
            return await self._claim_thread(fenced, key)
        finally:
            del self._claiming[key]
            claiming.set()

    async def _claim_thread(self, fenced: FencedStore, key: ThreadKey) -> _Holder:
        assert self._group is not None
        started = time.perf_counter()
        try:
            claim = await fenced.claim(key)
        except StoreError as exc:
            self.metrics.claim(time.perf_counter() - started, "error")
            raise HTTPError(503, "store_unavailable", str(exc)) from exc
        self.metrics.claim(time.perf_counter() - started, "busy" if claim is None else "claimed")
        if claim is None:
            retry = str(max(1, round(self.lease / 3)))
            raise HTTPError(
                409,
                "thread_busy",
                f"a turn of thread {key.thread_id!r} runs on another server process; "
                "cancel it there or retry once it ended",
                [(b"retry-after", retry.encode())],
            )
        # What this engine remembers of the thread may be older than the log (another
        # worker may have run turns on it since): read it afresh.
        self.engine.forget(key)
        kept: _Holder = await self._group.start(self._keep, claim, False)
        return kept

    async def _keep(
        self,
        claim: Claim,
        recover: bool,
        *,
        task_status: TaskStatus[_Holder] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hold ``claim`` (renewed) while a turn of its thread is live in this engine,
        then release it. ``recover``: the thread's turn was taken over from a worker
        that died: resume it from the log first.

        When the claim is lost (this process was frozen past its lease and another
        took the thread), the local turn is stopped: its writes are refused anyway."""
        fenced = self._fenced
        assert fenced is not None
        key = claim.key
        holder = _Holder()
        leaving = anyio.Event()
        try:
            async with fenced.holding(claim):
                self._holders[key] = holder
                try:
                    if recover:
                        self.engine.forget(key)
                        turns = await self.engine.recover([key])
                        logger.warning(  # worth an operator's eye: a worker died
                            "%s took over thread %s (%d turn(s) resumed)",
                            self.worker,
                            key,
                            len(turns),
                        )
                        holder.ready.set()
                    task_status.started(holder)
                    await holder.ready.wait()
                    while True:
                        turn = self.engine.turn(key)
                        if turn is None or turn.finished:
                            break
                        await turn.wait_finished()
                finally:
                    if self._holders.get(key) is holder:
                        del self._holders[key]
                        self._leaving[key] = leaving
        except StaleClaimError as exc:
            logger.warning("%s lost thread %s to another worker: %s", self.worker, key, exc)
            turn = self.engine.turn(key)
            if turn is not None and not turn.finished:
                turn.cancel("another server process took the thread over")
        except (StoreError, ClosedError) as exc:
            logger.error("%s could not work on thread %s: %s", self.worker, key, exc)
        finally:
            if self._leaving.get(key) is leaving:
                del self._leaving[key]
            leaving.set()
            holder.released.set()

    async def _take_over(self, fenced: FencedStore) -> None:
        """Claim, every ``takeover_interval`` seconds, the live turns no worker holds
        (their worker died and its lease ran out) and resume them here."""
        assert self._group is not None
        while not self._stopping.is_set():
            claims: list[Claim] = []
            try:
                room = self._room_for_turns()
                if room > 0:
                    claims = await fenced.claim_next(limit=min(room, 16))
            except StoreError as exc:
                logger.warning("%s cannot look for orphaned turns: %s", self.worker, exc)
            for claim in claims:
                if self._stopping.is_set() or claim.key in self._holders:
                    with anyio.CancelScope(shield=True):
                        try:
                            await fenced.release(claim)
                        except StoreError:
                            pass  # the lease ends it
                    continue
                self._group.start_soon(self._keep, claim, True, name=f"takeover {claim.key}")
            if len(claims) < 16:
                await anyio.sleep(self.takeover_interval)

    def _room_for_turns(self) -> int:
        """How many more turns this worker may run (``max_live_turns``)."""
        if self.max_live_turns is None:
            return 16
        counts = self.engine.statistics().turns
        live = sum(count for status, count in counts.items() if not status.is_final)
        return self.max_live_turns - live

    async def _listen(self, store: NotifyingStore) -> None:
        """Wake the streams of each thread another process (or this one) commits to."""
        while not self._stopping.is_set():
            try:
                async with store.commits() as commits:
                    self.store.wake_all()  # what was committed before listening
                    async for commit in commits:
                        if commit is None:
                            self.store.wake_all()
                        else:
                            self.store.poke(commit[0])
            except StoreError as exc:
                logger.warning("%s: the store's commit feed failed: %s", self.worker, exc)
                self.store.wake_all()
                await anyio.sleep(1.0)

    def _held_elsewhere(self, key: ThreadKey) -> HTTPError:
        return HTTPError(
            409,
            "turn_elsewhere",
            f"the live turn of thread {key.thread_id!r} runs on another server process: "
            "send this request there (route requests by thread id)",
        )

    # -- what the engine's parts tell the server --------------------------------------------

    def _stopped(self, key: ThreadKey, code: str, message: str) -> None:
        self.store.stop_reason(key, code, message)

    def _committed(self, key: ThreadKey, entry: Entry) -> None:
        self._checkpoint(key, entry)
        record = entry.record
        if isinstance(record, TurnStarted):
            self._client_tools[record.turn_id] = self._client_tools_next.pop(key, frozenset())
            self._claims.pop(key, None)
        elif isinstance(record, TurnEnded):
            self._client_tools.pop(record.turn_id, None)
        elif isinstance(record, ToolsStarted):
            logger.info(
                "tool round %d on %s: %s",
                record.depth + 1,
                key,
                ", ".join(call.name for call in record.calls),
                extra={
                    "toolrelay": {
                        "record": "ToolsStarted",
                        "thread": str(key),
                        "turn": record.turn_id,
                        "round": record.depth + 1,
                        "seq": entry.seq,
                        "next_seq": entry.seq + 1,
                    }
                },
            )
        self.metrics.commit(key, entry)

    def _checkpoint(self, key: ThreadKey, entry: Entry) -> None:
        """Fold a committed record into the thread's checkpoint (commits of a thread
        come in order; a checkpoint that missed one is dropped)."""
        feed = self._checkpoints.pop(key, None)
        if feed is None and entry.seq == 1:
            feed = LogFeed(key.thread_id, self._is_client_tool)
        if feed is None or feed.position != entry.seq - 1:
            return
        feed.feed(entry)
        self._checkpoints[key] = feed
        while len(self._checkpoints) > _CHECKPOINTS:
            self._checkpoints.popitem(last=False)

    def _is_client_tool(self, turn_id: str, name: str) -> bool:
        names = self._client_tools.get(turn_id)
        if names is not None:
            return name in names
        return name not in self.tools

    # -- ASGI --------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind == "lifespan":
            await self._lifespan(receive, send)
        elif kind == "http":
            await self._http(scope, receive, send)
        # websocket: not served (the ASGI server closes the connection)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        try:
            await self.__aenter__()
        except Exception as exc:
            logger.exception("toolrelay server failed to start")
            await send({"type": "lifespan.startup.failed", "message": str(exc)})
            return
        await send({"type": "lifespan.startup.complete"})
        try:
            while (await receive())["type"] != "lifespan.shutdown":
                pass
        finally:
            # Not under a shielded scope of its own: the engine's task group, entered
            # in this task, must be left from the scope it was entered in.
            await self.aclose()
        await send({"type": "lifespan.shutdown.complete"})

    async def _http(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope["method"]
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :]
        path = path or "/"
        headers = {
            name.decode("latin-1").lower(): value.decode("latin-1")
            for name, value in scope.get("headers", ())
        }
        client = scope.get("client")
        request = Request(method, path, headers, tuple(client) if client else None)
        try:
            if path == "/healthz" and method == "GET":
                await _json(send, 200, {"status": "stopping" if self._stopping.is_set() else "ok"})
                return
            if path == "/inspect" or path.startswith("/inspect/"):
                await self._inspect_file(method, path, send)
                return
            principal = await self._authenticate(request)
            if path == "/":
                if method == "POST":
                    await self._run(request, principal, scope, receive, send)
                elif method == "GET":
                    await _json(
                        send,
                        200,
                        {
                            "server": "toolrelay",
                            "version": __version__,
                            "protocol": "ag-ui",
                            "maxToolRounds": self.max_tool_rounds,
                            "continuation": self.continuation,
                            "tools": list(self.tools.names),
                        },
                    )
                else:
                    raise _method_not_allowed("GET, POST")
            elif path == "/metrics":
                if method != "GET":
                    raise _method_not_allowed("GET")
                if not self.metrics.enabled:  # pragma: no cover - the server extra is missing
                    raise HTTPError(501, "no_metrics", "install prometheus-client for /metrics")
                body, content_type = self.metrics.render()
                await _respond(send, 200, body, content_type)
            elif path.startswith("/threads/") and path.endswith("/events"):
                if method != "GET":
                    raise _method_not_allowed("GET")
                thread = path[len("/threads/") : -len("/events")]
                await self._catch_up(request, principal, thread, scope, receive, send)
            elif path == "/threads":
                if method != "GET":
                    raise _method_not_allowed("GET")
                await _json(send, 200, await self._store_call(thread_list(self.store, principal)))
            elif path.startswith("/threads/") and path.endswith("/calls"):
                if method != "GET":
                    raise _method_not_allowed("GET")
                await self._calls(principal, path[len("/threads/") : -len("/calls")], send)
            elif path.startswith("/threads/") and path.endswith("/cancel"):
                if method != "POST":
                    raise _method_not_allowed("POST")
                thread = path[len("/threads/") : -len("/cancel")]
                await self._cancel(principal, thread, send)
            else:
                raise HTTPError(404, "not_found", f"no route {method} {path}")
        except HTTPError as exc:
            await _json(
                send,
                exc.status,
                {"error": {"code": exc.code, "message": exc.message}},
                exc.headers,
            )
        except _Disconnected:
            return

    async def _authenticate(self, request: Request) -> str:
        principal = await self.authenticator.authenticate(request)
        if not principal:
            raise HTTPError(
                401,
                "unauthorized",
                "a valid bearer token is required (Authorization: Bearer <token>)",
                [(b"www-authenticate", b'Bearer realm="toolrelay"')],
            )
        return principal

    async def _check_owner(self, key: ThreadKey, principal: str) -> bool:
        """Whether ``key`` exists; 404 when it belongs to someone else."""
        info = await self._thread_info(key)
        owner = info.owner if info is not None else self._claims.get(key)
        exists = info is not None or key in self._claims
        if exists and owner != principal:
            # Another principal's thread is not there, as far as this one can tell.
            raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
        return exists

    async def _thread_info(self, key: ThreadKey) -> Any:
        try:
            return await self.store.thread(key)
        except StoreError as exc:
            raise HTTPError(503, "store_unavailable", str(exc)) from exc

    async def _read(
        self, key: ThreadKey, after: int, limit: int | None = _READ_PAGE
    ) -> list[Entry]:
        try:
            return await self.store.read(key, after=after, limit=limit)
        except StoreError as exc:
            raise HTTPError(503, "store_unavailable", str(exc)) from exc

    async def _warm(self, key: ThreadKey, upto: int) -> LogFeed:
        """A feed that has folded the thread's records up to ``upto``."""
        checkpoint = self._checkpoints.get(key)
        if checkpoint is not None and checkpoint.position <= upto:
            feed = checkpoint.copy()
        else:
            feed = LogFeed(key.thread_id, self._is_client_tool)
        while feed.position < upto:
            entries = await self._read(
                key, feed.position, min(_READ_PAGE * 4, upto - feed.position)
            )
            if not entries:
                break
            for entry in entries:
                feed.feed(entry)
        return feed

    # -- POST /: runs --------------------------------------------------------------------

    async def _run(
        self, request: Request, principal: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if self._stopping.is_set() or self._engine is None:
            raise HTTPError(503, "unavailable", "the server is not accepting runs")
        self._check_streams()
        body = await _read_body(receive, request.headers, self.max_body_bytes)
        try:
            run_input = decode_run_input(body)
        except (MalformedEventError, InvalidEventError) as exc:
            raise HTTPError(422, "invalid_run_input", f"not a RunAgentInput: {exc}") from exc
        if not run_input.thread_id:
            raise HTTPError(422, "invalid_run_input", "threadId must not be empty")
        key = ThreadKey(run_input.thread_id)
        exists = await self._check_owner(key, principal)
        if "last-event-id" in request.headers:
            # A client whose stream broke reconnecting (the same POST, plus the id of
            # the last event it got): the rest of that run from there, nothing started.
            if not exists:
                raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
            feed, head = await self._resume_at(key, *_position(scope, request.headers))
            if not head and not feed.run_open:
                # No run open at that position: the run it asks for had ended there.
                await _respond(send, 204, b"", None)
                return
            await self._stream(scope, receive, send, key, feed, head, post=True)
            return
        info = await self._thread_info(key) if exists else None
        last_seq = info.last_seq if info is not None else 0
        feed = await self._warm(key, last_seq)
        pending = feed.pending_client_calls()
        results = _trailing_results(run_input)
        if pending and any(call_id in results for call_id in pending):
            if self._fenced is not None and key not in self._holders:
                raise self._held_elsewhere(key)
            missing = [call_id for call_id in pending if call_id not in results]
            if missing:
                raise HTTPError(
                    422,
                    "missing_tool_results",
                    "the results of every pending client call are needed: missing "
                    + ", ".join(missing),
                )
            for call_id in pending:
                self._slot(key, call_id, results[call_id])
        else:
            if results and not isinstance(run_input.messages[-1], UserMessage):
                unknown = ", ".join(sorted(results))
                raise HTTPError(
                    409,
                    "no_pending_call",
                    f"no tool call waits for a result on thread {key.thread_id!r} ({unknown})",
                )
            holder = await self._hold_thread(key) if self._fenced is not None else None
            try:
                with continued_trace(request.headers):  # the turn's span continues the caller's
                    own = self._start_turn(key, principal, run_input, new_thread=info is None)
            finally:
                if holder is not None:
                    holder.ready.set()
            # The stream starts at this turn's own start: what the log shows before it
            # (a turn it superseded ending) is not this run's.
            await self._stream(scope, receive, send, key, feed, b"", post=True, skip_until=own)
            return
        await self._stream(scope, receive, send, key, feed, b"", post=True)

    def _start_turn(
        self, key: ThreadKey, principal: str, run_input: RunAgentInput, *, new_thread: bool
    ) -> str:
        """Start the turn ``run_input`` asks for; returns its id."""
        messages = run_input.messages
        last = messages[-1] if messages else None
        resume = tuple(run_input.resume or ())
        if isinstance(last, UserMessage):
            message: UserMessage | None = last
            history = messages[:-1]
        elif resume:
            message, history = None, messages
        else:
            raise HTTPError(
                422,
                "invalid_run_input",
                "a run needs the user's message last (or resume entries, or the results "
                "of the client calls the thread waits for)",
            )
        registry = self._turn_tools(key, run_input)
        self._check_capacity(key)
        self.store.claim(key, principal)
        if new_thread:
            self._claims[key] = principal
        self._client_tools_next[key] = frozenset(tool.name for tool in run_input.tools)
        try:
            turn = self.engine.start_turn(
                key,
                message,
                resume=resume,
                history=history if new_thread else None,
                tools=registry,
                owner=principal,
            )
        except ValueError as exc:  # ResumeError: the entries do not answer the interrupts
            self._client_tools_next.pop(key, None)
            raise HTTPError(422, "invalid_resume", str(exc)) from exc
        return turn.turn_id

    def _check_streams(self) -> None:
        """429 when ``max_streams`` SSE responses are open (checked before anything
        is started or written)."""
        if self.max_streams is not None and self._streams >= self.max_streams:
            raise HTTPError(
                429,
                "too_many_streams",
                f"the server has {self._streams} streams open, its bound (max_streams)",
                [(b"retry-after", b"1")],
            )

    def _check_capacity(self, key: ThreadKey) -> None:
        """429 when one more live turn would pass ``max_live_turns`` (a turn that
        supersedes the thread's live one adds none)."""
        bound = self.max_live_turns
        if bound is None:
            return
        current = self.engine.turn(key)
        if current is not None and not current.finished:
            return
        counts = self.engine.statistics().turns
        live = sum(count for status, count in counts.items() if not status.is_final)
        if live >= bound:
            raise HTTPError(
                429,
                "too_many_turns",
                f"the server runs {live} turns, its bound (max_live_turns); retry later",
                [(b"retry-after", b"1")],
            )

    def _turn_tools(self, key: ThreadKey, run_input: RunAgentInput) -> ToolRegistry:
        if not run_input.tools:
            return self.tools
        registry = self.tools.copy()
        seen: set[str] = set()
        for tool in run_input.tools:
            if tool.name in self.tools:
                raise HTTPError(
                    422,
                    "tool_conflict",
                    f"the client's tool {tool.name!r} has the name of a server tool",
                )
            if tool.name in seen:
                raise HTTPError(422, "tool_conflict", f"the client declares {tool.name!r} twice")
            seen.add(tool.name)
            try:
                spec = ToolSpec.from_schema(
                    tool.name,
                    tool.description,
                    tool.parameters if isinstance(tool.parameters, Mapping) else {},
                    self._client_handler(key, tool.name),
                    timeout=self.client_tool_timeout,
                    idempotent=True,  # "running" it again is waiting for the client again
                )
            except ToolDefinitionError as exc:
                raise HTTPError(422, "invalid_tool", str(exc)) from exc
            registry.register(spec)
        return registry

    def _client_handler(
        self, key: ThreadKey, name: str
    ) -> Callable[[dict[str, Any]], Awaitable[ToolResult]]:
        async def wait_for_client(arguments: dict[str, Any]) -> ToolResult:
            call_id = _call_id_of_current_task(name)
            slot = self._slots.setdefault((key, call_id), _Slot())
            waits = self._client_waits.setdefault(key, set())
            waits.add(call_id)
            try:
                await slot.event.wait()
            finally:
                waits.discard(call_id)
                if not waits:
                    self._client_waits.pop(key, None)
                self._slots.pop((key, call_id), None)
            assert slot.result is not None
            return slot.result

        wait_for_client.__name__ = f"client_tool_{name}"
        return wait_for_client

    def _slot(self, key: ThreadKey, call_id: str, message: ToolMessage) -> None:
        content = message.content
        text = content if isinstance(content, str) else msgspec.json.encode(content).decode()
        result = ToolResult.failure(message.error) if message.error else ToolResult.success(text)
        slot = self._slots.setdefault((key, call_id), _Slot())
        slot.result = result
        slot.event.set()

    # -- the inspector ------------------------------------------------------------------

    async def _inspect_file(self, method: str, path: str, send: Send) -> None:
        if method != "GET":
            raise _method_not_allowed("GET")
        if path == "/inspect":  # the page's files are relative to /inspect/
            await _respond(send, 308, b"", None, [(b"location", b"inspect/")])
            return
        name = path[len("/inspect/") :] or "index.html"
        body = static_file(name)
        if body is None:
            raise HTTPError(404, "not_found", f"no inspector file {name!r}")
        await _respond(send, 200, body, None, static_headers(name))

    async def _calls(self, principal: str, thread: str, send: Send) -> None:
        key = ThreadKey(thread)
        if not await self._check_owner(key, principal):
            raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
        info = await self._thread_info(key)
        last_seq = info.last_seq if info is not None else 0
        await _json(send, 200, await self._store_call(call_outcomes(self.store, key, last_seq)))

    async def _store_call(self, work: Awaitable[Any]) -> Any:
        try:
            return await work
        except StoreError as exc:
            raise HTTPError(503, "store_unavailable", str(exc)) from exc

    # -- POST /threads/{thread}/cancel ------------------------------------------------------

    async def _cancel(self, principal: str, thread: str, send: Send) -> None:
        key = ThreadKey(thread)  # the ASGI server decoded the path
        if not await self._check_owner(key, principal):
            raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
        cancelled = self.engine.cancel(key, "cancelled by the client")
        if not cancelled and self._fenced is not None and key not in self._holders:
            info = await self._thread_info(key)
            if info is not None and info.live_turn is not None:
                raise self._held_elsewhere(key)
        await _json(send, 200, {"threadId": key.thread_id, "cancelled": cancelled})

    # -- GET /threads/{thread}/events -------------------------------------------------------

    async def _catch_up(
        self,
        request: Request,
        principal: str,
        thread: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        key = ThreadKey(thread)  # the ASGI server decoded the path
        if not await self._check_owner(key, principal):
            raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
        self._check_streams()
        feed, head = await self._resume_at(key, *_position(scope, request.headers))
        info = await self._thread_info(key)
        idle = info is None or info.last_seq <= feed.position
        if not head and idle and not feed.run_open and (info is None or info.live_turn is None):
            await _respond(send, 204, b"", None)
            return
        await self._stream(scope, receive, send, key, feed, head, post=False)

    async def _resume_at(
        self, key: ThreadKey, seq: int, index: int | None
    ) -> tuple[LogFeed, bytes]:
        """A feed folded up to a client's position (``N`` or ``N:i``) and the events a
        stream resumed there sends first; 416 when the thread has no such position."""
        if index is None:
            feed = await self._warm(key, seq)
            if feed.position < seq:
                raise _no_position(key, f"{seq}")
            head = _frames(seq, feed.resume_events(), str(seq))
        else:
            # Inside record ``seq``'s events: what follows event ``index`` of them.
            feed = await self._warm(key, seq - 1)
            entries = await self._read(key, seq - 1, 1)
            if feed.position < seq - 1 or not entries or entries[0].seq != seq:
                raise _no_position(key, f"{seq}:{index}")
            open_run = feed.open_run_id
            group = feed.feed(entries[0])
            if index >= len(group) - 1 or not _boundaries(group)[index]:
                # Not an id this record's events carry (those end a unit, the last
                # one carries the plain sequence number).
                raise _no_position(key, f"{seq}:{index}")
            for event in group[: index + 1]:
                if isinstance(event, RunStartedEvent):
                    open_run = event.run_id
                elif isinstance(event, (RunFinishedEvent, RunErrorEvent)):
                    open_run = None
            resumed: list[Event] = []
            if open_run is not None:
                resumed.append(RunStartedEvent(thread_id=key.thread_id, run_id=open_run))
            at = f"{seq}:{index}"
            ids = _event_ids(seq, group, str(seq - 1))
            head = _frames(seq, resumed, at) + b"".join(
                _frame(ids[position], group[position]) for position in range(index + 1, len(group))
            )
        return feed, head

    # -- streaming ---------------------------------------------------------------------------

    async def _stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: ThreadKey,
        feed: LogFeed,
        head: bytes,
        *,
        post: bool,
        skip_until: str | None = None,
    ) -> None:
        self._streams += 1  # bounded where requests come in (_check_streams)
        try:
            await self._stream_open(scope, receive, send, key, feed, head, post, skip_until)
        finally:
            self._streams -= 1

    async def _stream_open(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: ThreadKey,
        feed: LogFeed,
        head: bytes,
        post: bool,
        skip_until: str | None,
    ) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", b"text/event-stream; charset=utf-8"),
                    (b"cache-control", b"no-cache"),
                    (b"x-accel-buffering", b"no"),
                    # A POST sent again with Last-Event-ID resumes (AguiHttpBackend
                    # reconnects only to a server that says so).
                    (b"toolrelay-resume", b"last-event-id"),
                ],
            }
        )
        async with anyio.create_task_group() as group:

            async def watch_disconnect() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass
                group.cancel_scope.cancel()  # the client left: the turn goes on

            group.start_soon(watch_disconnect)
            try:
                try:
                    await self._pump(send, key, feed, head, post=post, skip_until=skip_until)
                except HTTPError as exc:
                    # The store failed mid-stream: the response has started, so it ends
                    # here; the client catches up from its last id once the store is back.
                    logger.warning("stream of %s ended: %s", key, exc.message)
            except OSError:
                pass  # the connection broke under the write
            else:
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            group.cancel_scope.cancel()

    async def _pump(
        self,
        send: Send,
        key: ThreadKey,
        feed: LogFeed,
        head: bytes,
        *,
        post: bool,
        skip_until: str | None,
    ) -> None:
        """Send ``head``, then the events of every record after the feed's position,
        following new commits (a POST: until its AG-UI run ends; a catch-up: until no
        run is open), with the live text deltas in between. With ``skip_until``,
        records are folded but not sent until that turn's start."""
        follower = self._follow(key)
        live = _LiveText()
        last_id = str(feed.position)
        self.store.attach(key)
        try:
            if head:
                await _more(send, head)
            while True:
                changed = self.store.changed(key)
                entries = await self._read(key, feed.position)
                chunk = bytearray()
                for entry in entries:
                    events = feed.feed(entry)
                    if skip_until is not None:
                        record = entry.record
                        if not (isinstance(record, TurnStarted) and record.turn_id == skip_until):
                            continue
                        skip_until = None
                        events = events[events.index(_first_run_start(events)) :]
                    shown = live.committed(events)
                    ids = _shown_ids(entry.seq, events, shown, last_id)
                    for event_id, event in zip(ids, shown, strict=True):
                        chunk += _frame(event_id, event)
                        if post and isinstance(event, (RunFinishedEvent, RunErrorEvent)):
                            await send(
                                {
                                    "type": "http.response.body",
                                    "body": bytes(chunk),
                                    "more_body": True,
                                }
                            )
                            return
                    last_id = str(entry.seq)
                    if len(chunk) > 65536:
                        await _more(send, bytes(chunk))
                        chunk.clear()
                if follower is not None:
                    deltas = _drain(follower.receive)
                    if deltas and skip_until is None and feed.run_open:
                        for event in live.admit(deltas):
                            chunk += _frame(last_id, event)
                if chunk:
                    await _more(send, bytes(chunk))
                if len(entries) == _READ_PAGE:
                    continue
                if not post and not feed.run_open:
                    info = await self._thread_info(key)
                    if info is None or info.live_turn is None or feed.pending_client_calls():
                        return
                if self._stopping.is_set():
                    return
                with anyio.move_on_after(self.heartbeat) as timer:
                    await changed.wait()
                if timer.cancelled_caught:
                    await send(
                        {
                            "type": "http.response.body",
                            "body": b": keep-alive\n\n",
                            "more_body": True,
                        }
                    )
        finally:
            self.store.detach(key)
            self._unfollow(key, follower)


@dataclass(slots=True)
class _Follower:
    send: MemoryObjectSendStream[Event]
    receive: MemoryObjectReceiveStream[Event]


async def _more(send: Send, body: bytes) -> None:
    """Send a piece of the response body; more follows."""
    await send({"type": "http.response.body", "body": body, "more_body": True})


def _drain(queue: MemoryObjectReceiveStream[Event]) -> list[Event]:
    out: list[Event] = []
    while True:
        try:
            out.append(queue.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return out


@dataclass(slots=True)
class _LiveText:
    """What one stream sent of text messages before their record (live deltas).

    A message whose ``TEXT_MESSAGE_START`` went out live gets, when its record comes,
    only the text not sent yet and its ``TEXT_MESSAGE_END``; a message whose record
    came first gets no delta afterwards. A stream that joins mid-message sends that
    message whole, from its record.
    """

    open: dict[str, str] = field(default_factory=dict)  # message id -> text sent
    done: set[str] = field(default_factory=set)  # message ids sent from their record

    def admit(self, deltas: Sequence[Event]) -> list[Event]:
        """The live events to send of ``deltas``."""
        out: list[Event] = []
        for event in deltas:
            if isinstance(event, TextMessageStartEvent):
                if event.message_id in self.done or event.message_id in self.open:
                    continue
                self.open[event.message_id] = ""
                out.append(TextMessageStartEvent(message_id=event.message_id, role="assistant"))
            elif isinstance(event, TextMessageContentEvent):
                sent = self.open.get(event.message_id)
                if sent is None or not event.delta:
                    continue
                self.open[event.message_id] = sent + event.delta
                out.append(TextMessageContentEvent(message_id=event.message_id, delta=event.delta))
        return out

    def committed(self, events: list[Event]) -> list[Event]:
        """``events`` of a record as this stream sends them (the same list when
        nothing of it went out live)."""
        if not self.open:
            for event in events:
                if isinstance(event, TextMessageStartEvent):
                    self.done.add(event.message_id)
            return events
        out: list[Event] = []
        for event in events:
            if isinstance(event, TextMessageStartEvent):
                self.done.add(event.message_id)
                if event.message_id not in self.open:
                    out.append(event)
            elif isinstance(event, TextMessageContentEvent) and event.message_id in self.open:
                sent = self.open[event.message_id]
                if event.delta.startswith(sent) and len(event.delta) > len(sent):
                    out.append(
                        TextMessageContentEvent(
                            message_id=event.message_id, delta=event.delta[len(sent) :]
                        )
                    )
            elif isinstance(event, TextMessageEndEvent):
                self.open.pop(event.message_id, None)
                out.append(event)
            elif isinstance(event, (RunFinishedEvent, RunErrorEvent, RunStartedEvent)):
                for message_id in self.open:  # never written: close what went out live
                    out.append(TextMessageEndEvent(message_id=message_id))
                    self.done.add(message_id)
                self.open.clear()
                out.append(event)
            else:
                out.append(event)
        return out


# -- helpers -------------------------------------------------------------------------------


#: Events that open a unit a client reads whole (a message, a call, a reasoning phase)
#: and those that close it.
_OPENS = (
    TextMessageStartEvent,
    ToolCallStartEvent,
    ReasoningStartEvent,
    ReasoningMessageStartEvent,
)
_CLOSES = (TextMessageEndEvent, ToolCallEndEvent, ReasoningEndEvent, ReasoningMessageEndEvent)


def _boundaries(events: Sequence[Event]) -> list[bool]:
    """For each event, whether a unit is complete after it (nothing left open)."""
    depth = 0
    out = []
    for event in events:
        if isinstance(event, _OPENS):
            depth += 1
        elif isinstance(event, _CLOSES):
            depth = max(depth - 1, 0)
        out.append(depth == 0)
    return out


def _event_ids(seq: int, events: Sequence[Event], before: str) -> list[str]:
    """The SSE ``id`` of each event record ``seq`` made (``before``: the id a client
    resumes from when it has none of them).

    The last event carries the plain sequence number (the record is fully sent); an
    event that completes a unit (a message, a call, a result...) inside the record
    carries ``<seq>:<position>``; an event inside an open unit carries the id of the
    last completed one, so a client cut inside a message gets the message again whole,
    and every resumed stream is a valid AG-UI stream on its own.
    """
    ids = []
    current = before
    last = len(events) - 1
    for position, complete in enumerate(_boundaries(events)):
        if position == last:
            ids.append(str(seq))
        elif complete:
            current = f"{seq}:{position}"
            ids.append(current)
        else:
            ids.append(current)
    return ids


def _shown_ids(seq: int, events: list[Event], shown: list[Event], before: str) -> list[str]:
    """The SSE ids of ``shown``, what a stream sends of record ``seq``'s ``events``
    (:meth:`_LiveText.committed`): theirs when it is ``events``; when live text
    reshaped them, the record's start but for the last, which completes the record;
    none when the stream had sent all of them live already (a message's start and
    text, say, whose end comes with the next record)."""
    if shown is events:
        return _event_ids(seq, events, before)
    if not shown:
        return []
    return [before] * (len(shown) - 1) + [str(seq)]


def _frame(event_id: str, event: Event) -> bytes:
    return b"id: %s\ndata: %s\n\n" % (event_id.encode(), encode_event(event))


def _frames(seq: int, events: Sequence[Event], at: str) -> bytes:
    """``events`` a resumed stream repeats first, each carrying the position ``at``
    it resumes from."""
    return b"".join(_frame(at, event) for event in events)


def _first_run_start(events: Sequence[Event]) -> Event:
    return next(event for event in events if isinstance(event, RunStartedEvent))


def _no_position(key: ThreadKey, position: str) -> HTTPError:
    return HTTPError(416, "bad_position", f"thread {key.thread_id!r} has no position {position}")


def _method_not_allowed(allowed: str) -> HTTPError:
    return HTTPError(405, "method_not_allowed", f"use {allowed}", [(b"allow", allowed.encode())])


def _position(scope: Scope, headers: Mapping[str, str]) -> tuple[int, int | None]:
    """Where a catch-up starts: ``?after=`` or ``Last-Event-ID``, either a sequence
    number ``N`` (after record N) or an event id ``N:i`` (after event i of record N)."""
    query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
    raw = query.get("after", [None])[-1]
    if raw is None:
        raw = headers.get("last-event-id")
    if raw is None or raw == "":
        return 0, None
    text_seq, sep, text_index = raw.partition(":")
    try:
        seq = int(text_seq)
        index = int(text_index) if sep else None
    except ValueError:
        raise HTTPError(
            400, "bad_position", f"after / Last-Event-ID {raw!r} is not N or N:i"
        ) from None
    if seq < 0 or (index is not None and (index < 0 or seq < 1)):
        raise HTTPError(400, "bad_position", f"after / Last-Event-ID {raw!r} is out of range")
    return seq, index


def _trailing_results(run_input: RunAgentInput) -> dict[str, ToolMessage]:
    """The ``tool`` messages after the last assistant message with tool calls."""
    results: dict[str, ToolMessage] = {}
    for message in reversed(run_input.messages):
        if isinstance(message, ToolMessage):
            results.setdefault(message.tool_call_id, message)
        elif isinstance(message, AssistantMessage) and message.tool_calls:
            break
        elif isinstance(message, UserMessage):
            break
    return results


async def _read_body(receive: Receive, headers: Mapping[str, str], limit: int) -> bytes:
    declared = headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise HTTPError(400, "bad_request", "Content-Length is not an integer") from None
        if length > limit:
            raise HTTPError(413, "body_too_large", f"the body is larger than {limit} bytes")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _Disconnected
        body = message.get("body", b"")
        size += len(body)
        if size > limit:
            raise HTTPError(413, "body_too_large", f"the body is larger than {limit} bytes")
        chunks.append(body)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _respond(
    send: Send,
    status: int,
    body: bytes,
    content_type: str | None,
    headers: Sequence[tuple[bytes, bytes]] = (),
) -> None:
    out = list(headers)
    if content_type is not None:
        out.append((b"content-type", content_type.encode()))
    out.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": out})
    await send({"type": "http.response.body", "body": body, "more_body": False})


async def _json(
    send: Send, status: int, value: Any, headers: Sequence[tuple[bytes, bytes]] = ()
) -> None:
    await _respond(send, status, msgspec.json.encode(value), "application/json", headers)
