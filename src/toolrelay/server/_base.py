"""The server's state, what the engine tells it, and the reads its routes share.

:class:`ServerBase` holds what an :class:`~toolrelay.server.AguiServer` is made of (its
options, the engine and the store it writes through, the maps of streams, claims and
client calls). The server's jobs are classes on top of it, each in its own module and
importing only those before it: ``_inbox`` (client results and cancels, handed to the
process holding the thread), ``_shared`` (claims, shared with other processes),
``_streams`` (SSE responses), ``_catch_up`` (resuming at a position), ``_runs``
(``POST /``: starting turns, client tools) and ``_app`` (the lifecycle and the routes).
"""

from __future__ import annotations

import logging
import os
import socket
from collections import OrderedDict
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import TaskGroup
from anyio.streams.memory import MemoryObjectSendStream

from toolrelay._core import ThreadKey, ToolRegistry, ToolResult
from toolrelay._errors import StoreError
from toolrelay._runtime import Engine
from toolrelay.backends._base import AgentBackend
from toolrelay.protocol import Event
from toolrelay.server._asgi import HTTPError
from toolrelay.server._auth import Anonymous, Authenticator, BearerTokens
from toolrelay.server._feed import LogFeed
from toolrelay.server._metrics import Metrics
from toolrelay.server._rounds import max_tool_rounds_from_env
from toolrelay.server._watch import WatchedStore
from toolrelay.store import (
    ClaimingStore,
    Entry,
    FencedStore,
    InboxStore,
    Letter,
    MemoryStore,
    NotifyingStore,
    Store,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
)

__all__ = ("READ_BYTES", "READ_PAGE", "Holder", "Looking", "ServerBase", "Slot", "Ticket")

logger = logging.getLogger("toolrelay.server")

READ_PAGE = 256  # records read per store read while streaming
#: Stored bytes one store read holds at most (but its first record, whatever its size):
#: what a stream holds is bounded by what it reads at once, not by its thread's log.
READ_BYTES = 256 * 1024
_CHECKPOINTS = 10_000  # threads whose folded feed is kept in memory


@dataclass(slots=True)
class Holder:
    """This worker's hold on a thread (shared mode): kept while a turn of it is live
    here; ``ready`` is set once the turn the hold was taken for has started (or
    failed to)."""

    ready: anyio.Event = field(default_factory=anyio.Event)
    #: Set once the claim was released (or lost).
    released: anyio.Event = field(default_factory=anyio.Event)


@dataclass(slots=True)
class Slot:
    """Where a client tool's result meets the call waiting for it."""

    event: anyio.Event = field(default_factory=anyio.Event)
    result: ToolResult | None = None


@dataclass(slots=True)
class Ticket:
    """A letter this process posted to another's inbox, waiting for its answer."""

    answered: anyio.Event = field(default_factory=anyio.Event)
    verdict: str | None = None


@dataclass(slots=True)
class Looking:
    """A task reading a thread's inbox: ``again`` when a letter came meanwhile;
    ``letters``: taken already, to act on first."""

    letters: list[Letter] = field(default_factory=list)
    again: bool = False


class ServerBase:
    """The server's state; see :class:`~toolrelay.server.AguiServer`."""

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
        body_timeout: float = 30.0,
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
        if max_body_bytes < 1 or client_tool_timeout <= 0 or heartbeat <= 0 or body_timeout <= 0:
            raise ValueError(
                "max_body_bytes, body_timeout, client_tool_timeout and heartbeat must be > 0"
            )
        self.backend = backend
        self.tools = tools if tools is not None else ToolRegistry()
        self.max_tool_rounds = rounds
        self.continuation = continuation
        self.tool_timeout = tool_timeout
        self.client_tool_timeout = client_tool_timeout
        self.max_body_bytes = max_body_bytes
        self.body_timeout = body_timeout
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
        #: Where requests for a thread held by another process go (shared mode, on a
        #: store that has an inbox); ``None``: they are refused 409 ``turn_elsewhere``.
        self._inbox = inner if shared and isinstance(inner, InboxStore) else None
        self._tickets: dict[str, Ticket] = {}  # letters posted, waiting for an answer
        self._looking: dict[ThreadKey, Looking] = {}  # inboxes being read, per thread
        self._holders: dict[ThreadKey, Holder] = {}
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
        # Per thread, the client calls of its batch handed over, by call id: a slot is
        # kept (answered or not) until the next batch or the turn's end is committed.
        self._slots: dict[ThreadKey, dict[str, Slot]] = {}
        self._client_waits: dict[ThreadKey, set[str]] = {}  # calls waiting, per thread
        #: Set when the server stops taking runs (the drain has begun).
        self._stopping = anyio.Event()
        #: Set once the drain is over: every turn has ended and its end is in the log;
        #: a stream sends what it has not sent yet, then ends.
        self._drained = anyio.Event()
        #: The drain under way: the scope a second :meth:`drain` call cancels (the
        #: running turns' time is over), and the event set when the drain ends.
        self._draining: tuple[anyio.CancelScope, anyio.Event] | None = None
        self._entered = False
        self._closed = False

    @property
    def engine(self) -> Engine:
        """The engine running the turns (once the server is entered)."""
        if self._engine is None:
            raise RuntimeError("the server is not running: use 'async with server:'")
        return self._engine

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
            self._slots.pop(key, None)  # no call of the turn waits any more
        elif isinstance(record, ToolsStarted):
            # The batch before it is over. A slot of this batch's calls stays: the
            # client may have answered already (its stream can read this record, and
            # end, before the write that made it returns here).
            slots = self._slots.get(key)
            if slots:
                batch = {call.id for call in record.calls}
                for call_id in [call_id for call_id in slots if call_id not in batch]:
                    del slots[call_id]
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

    # -- reading the log ------------------------------------------------------------------

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

    async def _read(self, key: ThreadKey, after: int, limit: int = READ_PAGE) -> list[Entry]:
        """Records after ``after``: at most ``limit``, and :data:`READ_BYTES` of them
        (fewer than ``limit`` does not mean the log ends there)."""
        try:
            return await self.store.read(key, after=after, limit=limit, max_bytes=READ_BYTES)
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
            entries = await self._read(key, feed.position, min(READ_PAGE * 4, upto - feed.position))
            if not entries:
                break
            for entry in entries:
                feed.feed(entry)
        return feed

    async def _store_call(self, work: Awaitable[Any]) -> Any:
        try:
            return await work
        except StoreError as exc:
            raise HTTPError(503, "store_unavailable", str(exc)) from exc
