"""The embedded default store: one SQLite file, through the standard library's ``sqlite3``.

Theory of operation
-------------------
One connection, opened on first use, is driven from anyio worker threads (so the
store serves asyncio and trio alike) and used by one thread at a time (a lock).
Work waits in one queue that the first waiter takes whole to a worker thread: a group
commit, so concurrent turns share hops and transactions (docs/concepts.md, "Group
commit"). The file is in WAL mode with ``synchronous=NORMAL``: a commit survives
the process being killed at any point (SIGKILL); only a power cut can lose the last
commits, and never leaves the file damaged. ``durable=True`` asks for ``synchronous=FULL``.

Appends are ``BEGIN IMMEDIATE`` transactions that number their records after the
thread's last, all or nothing (promise 9). Each record carries the time it was
written: a thread's last sequence number and time are its last record's (read through
the ``(thread, seq)`` unique index), and its row changes only when an append changes
its live turn. The store remembers the id, last number and live turn of threads it
wrote; what it remembers is dropped when another connection committed since its last
write (``PRAGMA data_version``, read inside the write's transaction), so a thread
another process wrote meanwhile (or a thread deleted, its id taken) is read again, and
the unique index refuses a number written twice whatever it remembered. Claims
(:class:`~toolrelay.store.ClaimingStore`, worker processes of one machine) live in
their own table, timed by the machine's clock; a fenced append checks its claim in the
transaction that writes it, and a stale one is refused alone.

The file, its identity and its schema's versions are ``_sqlite_schema``'s; the queue
is ``_sqlite_queue``'s; the claim statements are ``_sqlite_claims``'s.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Sequence
from itertools import repeat
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import anyio
import anyio.to_thread

from toolrelay._core import ThreadKey
from toolrelay._errors import StoreCorruptError, StoreUnavailableError
from toolrelay.store._claims import Claim, check_append
from toolrelay.store._contract import Entry, ThreadInfo, live_turn_after
from toolrelay.store._records import Record, decode_record, record_encoder
from toolrelay.store._sqlite_claims import (
    check_lease,
    claim_valid,
    drop_claim,
    extend_claim,
    stale,
    take_claim,
    take_next_claims,
)
from toolrelay.store._sqlite_queue import Append, Job, Queued, ReadAppend, WorkQueue
from toolrelay.store._sqlite_schema import (
    LAST_SEQ,
    SCHEMA_VERSION,
    THREAD_COLUMNS,
    THREAD_FIELDS,
    connect,
    sqlite_error,
    thread_info,
)

__all__ = ("SCHEMA_VERSION", "SQLiteStore")

T = TypeVar("T")

_encode_into = record_encoder.encode_into

#: How many threads the store remembers (first in, first out): an append to one of
#: them is numbered without looking the thread up first.
_KNOWN_THREADS = 1024

#: An append that changes its thread's live turn moves the thread's row, by id.
_MOVE_LIVE_TURN = "UPDATE threads SET last_seq = ?, live_turn = ?, updated_at = ? WHERE id = ?"

#: The most rows one ``INSERT`` of records carries (4 values each).
_INSERT_ROWS = 64

#: ``INSERT``s of records by how many rows they carry: 64 and every smaller power of
#: two, so a transaction's rows take a few statements that stay in the connection's
#: statement cache. One statement of many rows opens its cursors (the table, its index,
#: the parent table for the foreign key) and goes through the driver once, where
#: ``executemany`` steps and resets the statement, and releases and retakes the GIL,
#: row by row: about a quarter of the cost of a row (counted with cachegrind).
_INSERTS = {
    rows: "INSERT INTO records (thread, seq, body, at) VALUES " + ", ".join(["(?, ?, ?, ?)"] * rows)
    for rows in (1 << bit for bit in range(_INSERT_ROWS.bit_length()))
}


def _insert(
    cursor: sqlite3.Cursor,
    threads: list[int],
    seqs: list[int],
    bodies: list[bytearray],
    now: float,
) -> None:
    """Insert the records' rows given as three columns, in their order, written ``now``."""
    count = len(bodies)
    values: list[object] = [now] * (4 * count)
    values[0::4] = threads
    values[1::4] = seqs
    values[2::4] = bodies
    start = 0
    while start < count:
        rows = min(_INSERT_ROWS, 1 << ((count - start).bit_length() - 1))
        cursor.execute(_INSERTS[rows], values[4 * start : 4 * (start + rows)])
        start += rows


class _Unreadable(Exception):
    """A record ``item`` reads cannot be decoded: its transaction is rolled back, and
    the item fails with ``error`` alone."""

    def __init__(self, item: Append, error: StoreCorruptError) -> None:
        super().__init__(str(error))
        self.item = item
        self.error = error


def _read_before(cursor: sqlite3.Cursor, item: ReadAppend, thread: int, label: str) -> None:
    """``item.before``: its thread's records before the append (by the thread's row id:
    the transaction has written every record it holds, ``item``'s last)."""
    rows = cursor.execute(
        "SELECT seq, body FROM records WHERE thread = ? AND seq <= ? ORDER BY seq",
        (thread, item.last - len(item.records)),
    ).fetchall()
    try:
        item.before = [Entry(seq, decode_record(body)) for seq, body in rows]
    except ValueError as exc:  # msgspec's DecodeError and ValidationError
        raise _Unreadable(
            item, StoreCorruptError(f"{label}: a record of {item.key} cannot be read ({exc})")
        ) from exc


class _Seen:
    """A thread as the store last wrote it (its row's id, its last sequence number and
    its live turn), moved in place as the store writes the thread (an append allocates
    nothing to remember it)."""

    __slots__ = ("id", "last", "live")

    def __init__(self, id: int, last: int, live: str | None) -> None:
        self.id = id
        self.last = last
        self.live = live


def _advance(cursor: sqlite3.Cursor, item: Append, seen: _Seen, now: float) -> None:
    """Number ``item``'s records after the thread's last, ``seen`` moved with them; the
    thread's row is moved only when they change its live turn (its partial index is
    touched only then too). Only this connection has written the file since ``seen``
    was (another's commit drops what the store remembers): the unique index of the
    records refuses a number taken all the same."""
    records = item.records
    live = seen.live
    moved = seen.last + len(records)
    turn = live_turn_after(live, records)
    if turn != live:
        cursor.execute(_MOVE_LIVE_TURN, (moved, turn, now, seen.id))
        seen.live = turn
    seen.last = item.last = moved


def _take(cursor: sqlite3.Cursor, item: Append, now: float) -> _Seen:
    """Number ``item``'s records after its thread's, read first (a new thread's row is
    made, its records starting at 1); the thread as the append leaves it."""
    key, records = item.key, item.records
    row = cursor.execute(
        f"SELECT id, {LAST_SEQ}, live_turn FROM threads "
        "WHERE server = ? AND room = ? AND thread = ?",
        (key.server, key.room_id, key.thread_id),
    ).fetchone()
    if row is not None:
        seen = _Seen(*row)
        _advance(cursor, item, seen, now)
        return seen
    live = live_turn_after(None, records)
    item.last = count = len(records)
    cursor.execute(
        f"INSERT INTO threads ({THREAD_FIELDS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        (key.server, key.room_id, key.thread_id, item.owner, count, live, now, now),
    )
    assert cursor.lastrowid is not None
    return _Seen(cursor.lastrowid, count, live)


class SQLiteStore:
    """A :class:`~toolrelay.store.Store` in one SQLite file, created on first use.

    Args:
        path: The database file (``":memory:"`` for a private in-memory database).
        timeout: Seconds a write waits for another process's lock before it fails
            with :class:`~toolrelay.StoreUnavailableError`.
        durable: ``synchronous=FULL``: every commit also survives a power cut (each
            one waits for the disk).
    """

    #: An append cancelled while it waits wrote all of its records (its hop had
    #: begun) or none (it left the queue), and the next call, queued behind it, sees
    #: which (rule 7).
    ordered_cancellation: ClassVar[bool] = True

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 5.0, durable: bool = False
    ):
        self.path = path if path == ":memory:" else Path(path)
        self.timeout = timeout
        self.durable = durable
        self._connection: sqlite3.Connection | None = None
        #: How many times :meth:`aclose` was called (see :meth:`_open`).
        self._closes = 0
        self._lock = threading.Lock()
        self._work = WorkQueue(self._hop, str(self.path))
        #: The rows of threads the store wrote (bounded; used with ``_lock`` held).
        self._known: OrderedDict[ThreadKey, _Seen] = OrderedDict()
        #: ``PRAGMA data_version`` as the last write transaction read it.
        self._data_version: int | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- opening -----------------------------------------------------------------------

    async def open(self) -> None:
        if self._connection is None:
            await anyio.to_thread.run_sync(self._open, self._closes)

    async def aclose(self) -> None:
        # Counted before anything is awaited: an open under way (in a worker thread)
        # sees the count moved and closes what it made rather than keep it.
        self._closes += 1
        connection, self._connection = self._connection, None
        if connection is not None:
            await anyio.to_thread.run_sync(self._close, connection)

    def _close(self, connection: sqlite3.Connection) -> None:
        with self._lock:
            self._known.clear()
            connection.close()

    def _open(self, closes: int) -> None:
        """Connect (in a worker thread); ``closes`` is how many times the store was
        closed when the open began: if it was closed since, the connection is closed
        at once and the store stays closed."""
        with self._lock:
            if self._connection is None:
                connection = connect(self.path, timeout=self.timeout, durable=self.durable)
                if closes != self._closes:
                    connection.close()
                    return
                self._connection = connection

    # -- the queue ---------------------------------------------------------------------

    def _run(self, work: Callable[[sqlite3.Connection], T], doing: str) -> Coroutine[Any, Any, T]:
        """Run ``work`` on the connection in a worker thread, with whatever else is
        queued; a failure is typed."""
        return self._queued(Job(work, doing))

    def _queued(self, item: Queued[T]) -> Coroutine[Any, Any, T]:
        """``item`` run by the queue, the store opened first if it is not: the queue's
        own coroutine when it is open (the awaiting caller's is the only frame above
        it, for every write of every turn and every read)."""
        if self._connection is None:
            return self._opened_then(item)
        return self._work.run(item)

    async def _opened_then(self, item: Queued[T]) -> T:
        """``item`` run by the queue once the store's first use has opened it."""
        await self.open()
        return await self._work.run(item)

    def _hop(self, batch: list[Queued[Any]]) -> None:
        """Run ``batch`` in its order (in a worker thread); appends next to each other
        share one transaction."""
        with self._lock:
            connection = self._connection
            if connection is None:
                for item in batch:
                    item.fail(StoreUnavailableError(f"{self.path}: the store is closed"))
                return
            appends: list[Append] = []
            for item in batch:
                if isinstance(item, Append):
                    appends.append(item)
                    continue
                if appends:
                    self._write(connection, appends)
                    appends = []
                assert isinstance(item, Job)
                item.run(connection)
            if appends:
                self._write(connection, appends)

    # -- the contract ------------------------------------------------------------------

    def append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> Coroutine[Any, Any, int]:
        """:meth:`Store.append <toolrelay.store.Store.append>` (awaited the same; a
        plain method that gives the queue's coroutine, so a waiting write holds one
        frame fewer). Bad arguments raise when it is called."""
        check_append(key, records, claim)
        return self._queued(Append(key, records, owner, claim))

    async def read_and_append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> tuple[list[Entry], int]:
        """:meth:`ReadAppendStore.read_and_append
        <toolrelay.store.ReadAppendStore.read_and_append>`, fenced by ``claim`` as
        :meth:`append` is: the append joins the group commit like any other, and its
        thread is read in the same transaction only when the thread was there before
        it."""
        check_append(key, records, claim)
        item = ReadAppend(key, records, owner, claim)
        item.before = []  # (a thread its append makes has nothing before)
        last = await self._queued(item)
        return item.before, last

    def _write(self, connection: sqlite3.Connection, batch: list[Append]) -> None:
        """Write ``batch`` in one transaction; if it fails and holds several appends,
        each is tried alone, so one's failure is not the others'. An append alone that
        a number already taken refused is tried once more: a failed transaction drops
        what the store remembered, so the retry numbers it after what the file holds.
        An append whose read finds a record it cannot decode fails alone, the others
        written without it."""
        try:
            self._transaction(connection, batch)
        except _Unreadable as exc:
            exc.item.fail(exc.error)
            rest = [item for item in batch if item is not exc.item]
            if rest:
                self._write(connection, rest)
        except sqlite3.Error as exc:
            if len(batch) == 1 and not isinstance(exc, sqlite3.IntegrityError):
                batch[0].fail(sqlite_error(exc, f"cannot write to {self.path}"))
                return
            for item in batch:
                try:
                    self._transaction(connection, [item])
                except sqlite3.Error as alone:
                    item.fail(sqlite_error(alone, f"cannot write to {self.path}"))
                except _Unreadable as unreadable:
                    item.fail(unreadable.error)

    def _transaction(self, connection: sqlite3.Connection, batch: list[Append]) -> None:
        now = time.time()
        known = self._known
        # One cursor for the transaction's statements: ``connection.execute`` makes a
        # cursor (and a weak reference to it) per call, a statement or two per append.
        cursor = connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        try:
            # Another connection (process) committed since this one's last transaction:
            # what the store remembers of threads' rows may be stale, read them again.
            version = cursor.execute("PRAGMA data_version").fetchone()[0]
            if version != self._data_version:
                known.clear()
                self._data_version = version
            failed: list[tuple[Append, BaseException]] = []
            # The records' rows as three columns (flat lists of the whole transaction:
            # no list or tuple per append held until the commit).
            threads: list[int] = []
            seqs: list[int] = []
            bodies: list[bytearray] = []
            reading: list[tuple[ReadAppend, int]] = []
            for item in batch:
                key, records = item.key, item.records
                if item.claim is not None and not claim_valid(connection, item.claim, now):
                    failed.append((item, stale(item.claim, "nothing was written")))
                    continue
                # Each body in a bytearray: sqlite3 binds one as a blob at once, where
                # bytes first go through its adapters' registry (a lookup and two
                # attribute probes per value).
                mark = len(bodies)
                try:
                    for record in records:
                        body = bytearray()
                        _encode_into(record, body)
                        bodies.append(body)
                except (TypeError, ValueError) as exc:  # its own, not its group commit's
                    del bodies[mark:]
                    failed.append((item, exc))
                    continue
                seen = known.get(key)
                if seen is not None:
                    _advance(cursor, item, seen, now)
                else:  # not seen: read (the oldest is forgotten)
                    seen = known[key] = _take(cursor, item, now)
                    if len(known) > _KNOWN_THREADS:
                        known.popitem(last=False)
                count = len(records)
                threads.extend(repeat(seen.id, count))
                seqs.extend(range(item.last - count + 1, item.last + 1))
                if item.reads and item.last > count:  # (a thread it made has nothing)
                    assert isinstance(item, ReadAppend)
                    reading.append((item, seen.id))
            _insert(cursor, threads, seqs, bodies, now)
            for read_item, thread in reading:
                _read_before(cursor, read_item, thread, str(self.path))
            cursor.execute("COMMIT")
        except BaseException:
            # What the store remembered was moved past what was not written: read again.
            known.clear()
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        finally:
            cursor.close()
        for item, error in failed:
            item.fail(error)
        for item in batch:
            if not item.settled:  # written: its value is its last number (inline, per append)
                item.value = item.last
                item.settled = True

    async def read(
        self,
        key: ThreadKey,
        *,
        after: int = 0,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> list[Entry]:
        def read(connection: sqlite3.Connection) -> list[tuple[int, bytes]]:
            cursor = connection.execute(
                "SELECT r.seq, r.body FROM records r JOIN threads t ON r.thread = t.id "
                "WHERE t.server = ? AND t.room = ? AND t.thread = ? AND r.seq > ? "
                "ORDER BY r.seq LIMIT ?",
                (key.server, key.room_id, key.thread_id, after, -1 if limit is None else limit),
            )
            if max_bytes is None:
                return cursor.fetchall()
            # Row by row, so the bodies past the budget are never loaded.
            rows: list[tuple[int, bytes]] = []
            held = 0
            for row in cursor:
                held += len(row[1])
                if rows and held > max_bytes:
                    break
                rows.append(row)
            cursor.close()
            return rows

        rows = await self._run(read, f"cannot read {self.path}")
        try:
            return [Entry(seq, decode_record(body)) for seq, body in rows]
        except ValueError as exc:  # msgspec's DecodeError and ValidationError
            raise StoreCorruptError(
                f"{self.path}: a record of {key} cannot be read ({exc})"
            ) from exc

    async def thread(self, key: ThreadKey) -> ThreadInfo | None:
        def read(connection: sqlite3.Connection) -> list[tuple[object, ...]]:
            return connection.execute(
                f"SELECT {THREAD_COLUMNS} FROM threads "
                "WHERE server = ? AND room = ? AND thread = ?",
                (key.server, key.room_id, key.thread_id),
            ).fetchall()

        rows = await self._run(read, f"cannot read {self.path}")
        return thread_info(rows[0]) if rows else None

    async def threads(
        self, *, owner: str | None = None, live: bool | None = None
    ) -> list[ThreadInfo]:
        where: list[str] = []
        parameters: list[object] = []
        if owner is not None:
            where.append("owner = ?")
            parameters.append(owner)
        if live is not None:
            where.append("live_turn IS NOT NULL" if live else "live_turn IS NULL")
        clause = f" WHERE {' AND '.join(where)}" if where else ""

        def read(connection: sqlite3.Connection) -> list[tuple[object, ...]]:
            return connection.execute(
                f"SELECT {THREAD_COLUMNS} FROM threads{clause} ORDER BY id", parameters
            ).fetchall()

        return [thread_info(row) for row in await self._run(read, f"cannot read {self.path}")]

    async def delete_thread(self, key: ThreadKey) -> bool:
        def delete(connection: sqlite3.Connection) -> bool:
            self._known.pop(key, None)
            cursor = connection.execute(
                "DELETE FROM threads WHERE server = ? AND room = ? AND thread = ?",
                (key.server, key.room_id, key.thread_id),
            )
            return cursor.rowcount > 0

        return await self._run(delete, f"cannot delete from {self.path}")

    # -- claims (toolrelay.store.ClaimingStore) ------------------------------------------

    async def _claiming(self, work: Callable[[sqlite3.Connection, float], T], doing: str) -> T:
        """``work`` in one ``BEGIN IMMEDIATE`` transaction, with the time it runs at."""

        def transaction(connection: sqlite3.Connection) -> T:
            connection.execute("BEGIN IMMEDIATE")
            try:
                result = work(connection, time.time())
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:
                    connection.execute("ROLLBACK")
                raise
            return result

        return await self._run(transaction, f"{doing} in {self.path}")

    async def claim(self, key: ThreadKey, *, worker: str, lease: float) -> Claim | None:
        lease = check_lease(lease)
        return await self._claiming(
            lambda connection, now: take_claim(connection, key, worker, now + lease, now),
            "cannot claim",
        )

    async def claim_next(self, *, worker: str, lease: float, limit: int = 1) -> list[Claim]:
        lease = check_lease(lease)
        if limit < 1:
            raise ValueError("limit must be at least 1")
        return await self._claiming(
            lambda connection, now: take_next_claims(connection, worker, now + lease, now, limit),
            "cannot claim",
        )

    async def renew(self, claim: Claim, *, lease: float) -> Claim:
        lease = check_lease(lease)

        def extend(connection: sqlite3.Connection, now: float) -> float | None:
            return now + lease if extend_claim(connection, claim, now + lease, now) else None

        expires_at = await self._claiming(extend, "cannot renew a claim")
        if expires_at is None:
            raise stale(claim, "it cannot be renewed")
        return Claim(key=claim.key, worker=claim.worker, token=claim.token, expires_at=expires_at)

    async def release(self, claim: Claim) -> bool:
        return await self._run(
            lambda connection: drop_claim(connection, claim),
            f"cannot release a claim in {self.path}",
        )
