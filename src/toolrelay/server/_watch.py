"""The server's view of the engine's store: every commit is seen as it happens.

:class:`WatchedStore` is a :class:`~toolrelay.store.Store` that the server hands to
its engine in place of the real one. Each ``append`` goes to the real store
unchanged (one transaction, the store's own sequence numbers), and once it has
committed:

- streams waiting on the thread wake up and read what was written (the live tail of
  every SSE stream is a read of the log, never a second copy of it); commits of other
  processes sharing the store wake them too, through :meth:`WatchedStore.poke` (the
  server listens to the store's notifications);
- metrics and the structured log record see each record with its sequence number.

Before the write it does two things the engine cannot know about: it gives a new
thread the owner the request that created it authenticated as, and it writes on a
completed turn's ``TurnEnded`` the stop reason the server decided (its ``code``:
``max_tool_rounds`` or ``tool_use``), so the reason is in the log, for catch-up too.

Closing it leaves the real store open: the engine closes its store when it closes,
and the streams still have the ends of the turns it closed to read. The server
closes the real store last (:meth:`WatchedStore.close_store`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

import anyio
import msgspec

from toolrelay._core import ThreadKey
from toolrelay.store import Entry, Record, Store, TurnEnded, TurnStarted
from toolrelay.store._forwarding import ForwardingStore, read_and_append

__all__ = ("WatchedStore",)

logger = logging.getLogger("toolrelay.server")

#: Called with each committed record and its sequence number, in order.
CommitHook = Callable[[ThreadKey, Entry], None]


class WatchedStore(ForwardingStore[Store]):
    """A store wrapper that tells the server about every commit (module docstring).

    Args:
        store: The real store.
        on_commit: Called with each record once its transaction committed.
        on_write: Called with the seconds each ``append`` took (committed or not)
            and whether it committed.
    """

    def __init__(
        self,
        store: Store,
        *,
        on_commit: CommitHook | None = None,
        on_write: Callable[[float, bool], None] | None = None,
    ) -> None:
        super().__init__(store)
        self._on_commit = on_commit
        self._on_write = on_write
        self._owners: dict[ThreadKey, str] = {}
        self._stops: dict[ThreadKey, tuple[str, str]] = {}
        self._waiters: dict[ThreadKey, anyio.Event] = {}
        self._watching: dict[ThreadKey, int] = {}  # streams following each thread

    def __repr__(self) -> str:
        return f"WatchedStore({self.store!r})"

    # -- what the server tells it -------------------------------------------------------

    def claim(self, key: ThreadKey, owner: str) -> None:
        """The next append that creates ``key`` records ``owner`` as its owner."""
        self._owners[key] = owner

    def stop_reason(self, key: ThreadKey, code: str, message: str) -> None:
        """The thread's live turn stops for ``code``: written on its ``TurnEnded``."""
        self._stops[key] = (code, message)

    def changed(self, key: ThreadKey) -> anyio.Event:
        """An event set at the next commit on ``key`` (take it *before* reading)."""
        event = self._waiters.get(key)
        if event is None:
            event = self._waiters[key] = anyio.Event()
        return event

    def attach(self, key: ThreadKey) -> None:
        """A stream starts following ``key`` (pair with :meth:`detach`)."""
        self._watching[key] = self._watching.get(key, 0) + 1

    def detach(self, key: ThreadKey) -> None:
        """A stream stops following ``key``; the last one takes its waiter along."""
        count = self._watching.get(key, 0) - 1
        if count > 0:
            self._watching[key] = count
        else:
            self._watching.pop(key, None)
            self._waiters.pop(key, None)

    def poke(self, key: ThreadKey) -> None:
        """Wake the streams waiting on ``key`` without a commit (a live delta came)."""
        event = self._waiters.pop(key, None)
        if event is not None:
            event.set()

    def wake_all(self) -> None:
        """Wake every waiting stream (the server is stopping, or commits of other
        processes may have gone unnotified): each reads its thread again."""
        waiters, self._waiters = self._waiters, {}
        for event in waiters.values():
            event.set()

    # -- the Store protocol ---------------------------------------------------------------

    async def aclose(self) -> None:
        """Leave the real store open: the engine closes its store as it closes, while
        the server's streams still read the ends of the turns it closed. The server
        closes the real store with :meth:`close_store` once it stops."""

    async def close_store(self) -> None:
        """Close the real store."""
        await self.store.aclose()

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        _, last = await self._write(key, records, owner, read=False)
        return last

    async def read_and_append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> tuple[list[Entry], int]:
        """The real store's :meth:`~toolrelay.store.ReadAppendStore.read_and_append`,
        told like an append; a real store without it reads, then appends (what the
        engine would do)."""
        return await self._write(key, records, owner, read=True)

    async def _write(
        self, key: ThreadKey, records: Sequence[Record], owner: str | None, *, read: bool
    ) -> tuple[list[Entry], int]:
        """Append ``records`` (after reading the thread, if ``read``), then tell."""
        records = [self._rewrite(key, record) for record in records]
        if owner is None:
            owner = self._owners.get(key)
        started = time.perf_counter()
        before: list[Entry] = []
        try:
            if read:
                before, last = await read_and_append(self.store, key, records, owner=owner)
            else:
                last = await self.store.append(key, records, owner=owner)
        except BaseException:
            if self._on_write is not None:
                self._on_write(time.perf_counter() - started, False)
            raise
        if self._on_write is not None:
            self._on_write(time.perf_counter() - started, True)
        first = last - len(records) + 1
        for offset, record in enumerate(records):
            if isinstance(record, TurnEnded):
                self._stops.pop(key, None)
            if self._on_commit is not None:
                try:
                    self._on_commit(key, Entry(first + offset, record))
                except Exception:  # an observer's bug never fails a write
                    logger.exception("commit hook failed on %s", key)
        event = self._waiters.pop(key, None)
        if event is not None:
            event.set()
        return before, last

    async def delete_thread(self, key: ThreadKey) -> bool:
        self._owners.pop(key, None)
        return await self.store.delete_thread(key)

    # -- helpers --------------------------------------------------------------------------

    def _rewrite(self, key: ThreadKey, record: Record) -> Record:
        if isinstance(record, TurnStarted):
            self._stops.pop(key, None)  # a new turn: an old decision is void
            return record
        if not isinstance(record, TurnEnded) or record.status != "completed":
            return record
        stop = self._stops.get(key)
        if stop is None:
            return record
        code, message = stop
        reason = msgspec.structs.replace(record.reason, code=code, message=message)
        return msgspec.structs.replace(record, reason=reason)
