"""The SQLite store's one queue: everything that uses the connection waits in it, and
the first waiter takes it whole to a worker thread in one hop (a group commit: many
concurrent turns share few hops and transactions; docs/concepts.md, "Group commit").
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, ClassVar, Generic, TypeVar

import anyio
import anyio.lowlevel
import anyio.to_thread

from toolrelay._core import ThreadKey
from toolrelay._errors import StoreUnavailableError
from toolrelay.store._claims import Claim
from toolrelay.store._contract import Entry
from toolrelay.store._records import Record
from toolrelay.store._sqlite_schema import sqlite_error

__all__ = ("Append", "Job", "Queued", "ReadAppend", "WorkQueue")

T = TypeVar("T")

_Future = asyncio.Future


class HopEnd:
    """The end of one hop, as the work it holds waits for it.

    On asyncio each waiter awaits a future of its own, directly: anyio's event puts two
    coroutines between a waiter and its future (its ``wait`` and asyncio's), and every
    write of every turn waits here, holding them. Elsewhere (trio), an anyio event.
    """

    __slots__ = ("_event", "_futures", "_loop", "_set")

    def __init__(self) -> None:
        self._set = False
        self._futures: list[asyncio.Future[None]] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._event: anyio.Event | None = None
        try:
            self._loop = asyncio.get_running_loop()
        except RuntimeError:  # no asyncio loop: another backend (trio)
            self._event = anyio.Event()

    def wait(self) -> Awaitable[None]:
        """Wait until :meth:`set` (a cancelled waiter leaves its future behind: done,
        it is skipped)."""
        if self._set:
            return anyio.lowlevel.checkpoint()
        if self._loop is not None:
            # (the future made directly: the loop's create_future is one Python call more)
            future: asyncio.Future[None] = _Future(loop=self._loop)
            self._futures.append(future)
            return future
        assert self._event is not None
        return self._event.wait()

    def set(self) -> None:
        self._set = True
        if self._event is not None:
            self._event.set()
        futures, self._futures = self._futures, []
        for future in futures:
            if not future.done():
                future.set_result(None)


class Queued(Generic[T]):
    """Work waiting for the connection. ``settled`` once it ran, with its ``value``;
    ``error`` is what stopped it; ``hop`` is set when the hop that holds it is over (or
    when it moved)."""

    __slots__ = ("error", "hop", "settled", "value")

    value: T

    def __init__(self) -> None:
        self.settled = False
        self.error: BaseException | None = None
        self.hop: HopEnd | None = None

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.settled = True


class Append(Queued[int]):
    """One ``append``; ``last`` is its last sequence number as it is written (its value
    once committed). Its records are encoded in the hop, in the worker thread (none of
    it on the event loop)."""

    __slots__ = ("claim", "key", "last", "owner", "records")

    #: Whether the thread's log before the append is read too (see :class:`ReadAppend`).
    reads: ClassVar[bool] = False

    def __init__(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        owner: str | None,
        claim: Claim | None = None,
    ) -> None:
        Queued.__init__(self)  # (named, not super(): every write of every turn makes one)
        self.key = key
        self.claim = claim
        self.records = records
        self.owner = owner
        self.last = 0


class ReadAppend(Append):
    """An append that also reads, in its transaction, the thread's log before it
    (``before``, decoded in the hop; set empty by its maker)."""

    __slots__ = ("before",)

    reads: ClassVar[bool] = True

    before: list[Entry]


class Job(Queued[T]):
    """Any other use of the connection (a read, a claim); its ``value`` is what
    ``work`` returned."""

    __slots__ = ("doing", "work")

    def __init__(self, work: Callable[[sqlite3.Connection], T], doing: str) -> None:
        super().__init__()
        self.work = work
        self.doing = doing

    def run(self, connection: sqlite3.Connection) -> None:
        try:
            self.value = self.work(connection)
            self.settled = True
        except sqlite3.Error as exc:
            self.fail(sqlite_error(exc, self.doing))
        except Exception as exc:
            self.fail(exc)


class WorkQueue:
    """Work for one connection, run in order, hop after hop, by whichever waiter finds
    nobody leading. ``hop`` runs a batch in a worker thread and settles every item it
    can; ``label`` names the store in errors."""

    def __init__(self, hop: Callable[[list[Queued[Any]]], None], label: str) -> None:
        self._hop = hop
        self._label = label
        self._queue: list[Queued[Any]] = []
        self._leading = False
        #: The event of what is queued now (every queued item's ``hop``): set once it has
        #: run, or early when it moves back to the head or its leader quits.
        self._next_hop: HopEnd | None = None

    async def run(self, item: Queued[T]) -> T:
        """Queue ``item`` and return its value once it ran; raises what stopped it. A
        waiter that finds no leader leads."""
        if not self._queue:  # a new queue, a new event (a taken queue took its own)
            self._next_hop = HopEnd()
        item.hop = self._next_hop
        self._queue.append(item)
        try:
            while not item.settled:
                if self._leading:
                    assert item.hop is not None
                    await item.hop.wait()  # its hop ran, or it moved, or its leader quit
                else:
                    await self._lead()
        finally:
            if not item.settled and item in self._queue:  # cancelled while queued
                self._queue.remove(item)
        if item.error is not None:
            raise item.error
        return item.value

    async def _lead(self) -> None:
        """Take what is queued to the connection, hop after hop, until the queue is
        empty; wake the waiters of each hop.

        Every queued item's ``hop`` is the queue's event, every taken item's its batch's:
        a waiter woken before its work ran finds the event it must wait on next there.
        """
        self._leading = True
        try:
            while self._queue:
                batch, self._queue = self._queue, []
                hop, self._next_hop = self._next_hop, None
                started: list[bool] = []
                try:
                    await anyio.to_thread.run_sync(self._run_hop, batch, started)
                finally:
                    if not started:  # cancelled before the hop: back to the queue's head
                        self._queue[0:0] = batch
                        self._renew_queue_event()
                    for item in batch:
                        if started and not item.settled:  # only if the hop itself broke
                            item.fail(StoreUnavailableError(f"{self._label}: the work broke"))
                    if hop is not None:
                        hop.set()
        finally:
            self._leading = False
            if self._queue:  # cancelled: wake the queue, one of its waiters leads
                self._renew_queue_event()

    def _renew_queue_event(self) -> None:
        """Give what is queued now a new event and set the old one: its waiters wake
        before their work ran, and wait on (or lead) what is queued from here."""
        stale = self._next_hop
        fresh = self._next_hop = HopEnd()
        for item in self._queue:
            item.hop = fresh
        if stale is not None:
            stale.set()

    def _run_hop(self, batch: list[Queued[Any]], started: list[bool]) -> None:
        """The hop itself, in a worker thread; ``started`` says it began."""
        started.append(True)
        self._hop(batch)
