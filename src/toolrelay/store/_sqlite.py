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
thread's last and move its row forward, all or nothing (promise 9). Claims
(:class:`~toolrelay.store.ClaimingStore`, worker processes of one machine) live in
their own table, timed by the machine's clock; a fenced append checks its claim in the
transaction that writes it, and a stale one is refused alone.

The file says what it is: ``PRAGMA application_id`` marks a toolrelay store and
``PRAGMA user_version`` is its schema version. At open, a file marked otherwise (or
holding another application's tables) is refused, a newer version is refused, and
an older one is migrated in one transaction.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar, cast

import anyio
import anyio.to_thread

from toolrelay.core import ThreadKey
from toolrelay.errors import (
    StaleClaimError,
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
    StoreVersionError,
)
from toolrelay.store._claims import Claim, check_append
from toolrelay.store._contract import Entry, ThreadInfo, live_turn_after
from toolrelay.store._records import (
    Record,
    TurnEnded,
    TurnStarted,
    decode_record,
    encode_record,
)

__all__ = ("SCHEMA_VERSION", "SQLiteStore")

T = TypeVar("T")

#: ``PRAGMA application_id`` of a toolrelay store ("tlry").
APPLICATION_ID = 0x746C7279

#: The schema version this toolrelay writes.
SCHEMA_VERSION = 2

#: Schema changes, by the version they lead to; each runs in the open transaction.
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE threads (
            id INTEGER PRIMARY KEY,
            server TEXT NOT NULL,
            room TEXT NOT NULL,
            thread TEXT NOT NULL,
            owner TEXT,
            last_seq INTEGER NOT NULL,
            live_turn TEXT,
            created_at REAL NOT NULL,
            updated_at REAL NOT NULL,
            UNIQUE (server, room, thread)
        )""",
        """CREATE TABLE records (
            thread INTEGER NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            body BLOB NOT NULL,
            PRIMARY KEY (thread, seq)
        ) WITHOUT ROWID""",
        "CREATE INDEX threads_live ON threads (live_turn) WHERE live_turn IS NOT NULL",
        "CREATE INDEX threads_owner ON threads (owner)",
    ),
    2: (
        """CREATE TABLE claims (
            server TEXT NOT NULL,
            room TEXT NOT NULL,
            thread TEXT NOT NULL,
            worker TEXT NOT NULL,
            token INTEGER NOT NULL,
            expires_at REAL NOT NULL,
            PRIMARY KEY (server, room, thread)
        ) WITHOUT ROWID""",
        "CREATE TABLE claim_tokens (id INTEGER PRIMARY KEY CHECK (id = 1), last INTEGER NOT NULL)",
        "INSERT INTO claim_tokens VALUES (1, 0)",
    ),
}

_CLAIM_KEY = "server = ? AND room = ? AND thread = ?"

_THREAD_COLUMNS = "server, room, thread, owner, last_seq, live_turn, created_at, updated_at"


#: The records that may change a thread's live turn.
_TURN_BOUNDS = frozenset((TurnStarted, TurnEnded))


class _Queued:
    """Work waiting for the connection. ``settled`` once it ran; ``error`` is what
    stopped it; ``hop`` is set when the hop that holds it is over (or when it moved)."""

    __slots__ = ("error", "hop", "settled")

    def __init__(self) -> None:
        self.settled = False
        self.error: BaseException | None = None
        self.hop: anyio.Event | None = None

    def fail(self, error: BaseException) -> None:
        self.error = error
        self.settled = True


class _Append(_Queued):
    """One ``append``; ``last`` is its last sequence number once written."""

    __slots__ = ("bodies", "claim", "key", "last", "owner", "records", "turns")

    def __init__(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        bodies: list[bytes],
        owner: str | None,
        claim: Claim | None = None,
    ) -> None:
        super().__init__()
        self.key = key
        self.claim = claim
        self.records = records
        self.bodies = bodies
        self.owner = owner
        self.last = 0
        #: Whether the records may change the thread's live turn.
        self.turns = any(type(r) in _TURN_BOUNDS for r in records)

    def written(self, last: int) -> None:
        self.last = last
        self.settled = True


class _Job(_Queued):
    """Any other use of the connection (a read, a claim); ``value`` is its result."""

    __slots__ = ("doing", "value", "work")

    def __init__(self, work: Callable[[sqlite3.Connection], object], doing: str) -> None:
        super().__init__()
        self.work = work
        self.doing = doing
        self.value: object = None

    def run(self, connection: sqlite3.Connection) -> None:
        try:
            self.value = self.work(connection)
            self.settled = True
        except sqlite3.Error as exc:
            self.fail(_error(exc, self.doing))
        except Exception as exc:
            self.fail(exc)


def _error(exc: sqlite3.Error, doing: str) -> StoreError:
    """The typed error for a driver's exception (the store's one boundary)."""
    text = str(exc)
    lowered = text.lower()
    if "not a database" in lowered or "malformed" in lowered:
        return StoreCorruptError(f"{doing}: the file is not a usable SQLite database ({text})")
    return StoreUnavailableError(f"{doing}: {text}")


class SQLiteStore:
    """A :class:`~toolrelay.store.Store` in one SQLite file, created on first use.

    Args:
        path: The database file (``":memory:"`` for a private in-memory database).
        timeout: Seconds a write waits for another process's lock before it fails
            with :class:`~toolrelay.errors.StoreUnavailableError`.
        durable: ``synchronous=FULL``: every commit also survives a power cut (each
            one waits for the disk).
    """

    def __init__(
        self, path: str | os.PathLike[str], *, timeout: float = 5.0, durable: bool = False
    ):
        self.path = path if path == ":memory:" else Path(path)
        self.timeout = timeout
        self.durable = durable
        self._connection: sqlite3.Connection | None = None
        self._lock = threading.Lock()
        # Everything that uses the connection waits in one queue; one waiter leads and
        # takes all that is queued to a worker thread in one hop, appends that meet in
        # one transaction (a group commit), so many concurrent turns cost a few hops.
        self._queue: list[_Queued] = []
        self._leading = False
        #: The event of what is queued now (every queued item's ``hop``): set once it has
        #: run, or early when it moves back to the head or its leader quits.
        self._next_hop: anyio.Event | None = None

    def __repr__(self) -> str:
        return f"SQLiteStore({str(self.path)!r})"

    # -- opening -----------------------------------------------------------------------

    async def open(self) -> None:
        if self._connection is None:
            await anyio.to_thread.run_sync(self._open)

    async def aclose(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            await anyio.to_thread.run_sync(self._close, connection)

    def _close(self, connection: sqlite3.Connection) -> None:
        with self._lock:
            connection.close()

    def _open(self) -> None:
        with self._lock:
            if self._connection is not None:
                return
            try:
                connection = sqlite3.connect(
                    str(self.path),
                    timeout=self.timeout,
                    isolation_level=None,
                    check_same_thread=False,
                )
            except sqlite3.Error as exc:
                raise _error(exc, f"cannot open {self.path}") from exc
            try:
                self._prepare_patiently(connection)
            except BaseException:
                connection.close()
                raise
            self._connection = connection

    def _prepare_patiently(self, connection: sqlite3.Connection) -> None:
        """:meth:`_prepare`, tried again while another process holds the new file's
        lock. Two connections preparing a new file at once can each hold what the
        other waits for (switching to WAL, creating the schema); SQLite then answers
        "locked" at once instead of waiting, so waiting is done here, up to
        ``timeout``."""
        deadline = time.monotonic() + self.timeout
        pause = 0.005
        while True:
            try:
                self._prepare(connection)
                return
            except StoreUnavailableError as exc:
                if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                    raise
            time.sleep(pause)  # a worker thread: the event loop is not blocked
            pause = min(pause * 2, 0.1)

    def _prepare(self, connection: sqlite3.Connection) -> None:
        try:
            application, version = self._identify(connection)
        except sqlite3.Error as exc:
            raise _error(exc, f"cannot read {self.path}") from exc
        try:
            if self.path != ":memory:":
                mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
                if str(mode).lower() != "wal":
                    raise StoreUnavailableError(
                        f"{self.path}: cannot switch to WAL mode (journal mode {mode})"
                    )
            connection.execute(f"PRAGMA synchronous={'FULL' if self.durable else 'NORMAL'}")
            connection.execute("PRAGMA foreign_keys=ON")
            if version < SCHEMA_VERSION:
                self._migrate(connection)
        except sqlite3.Error as exc:
            raise _error(exc, f"cannot prepare {self.path}") from exc

    def _identify(self, connection: sqlite3.Connection) -> tuple[int, int]:
        """The file's application id and schema version, read in one transaction (so a
        process creating the schema meanwhile is seen whole or not at all); raises for
        a file that is not ours or is newer."""
        connection.execute("BEGIN")
        try:
            return self._identity(connection)
        finally:
            connection.execute("COMMIT")

    def _identity(self, connection: sqlite3.Connection) -> tuple[int, int]:
        application = connection.execute("PRAGMA application_id").fetchone()[0]
        version = connection.execute("PRAGMA user_version").fetchone()[0]
        tables = connection.execute(
            "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
        ).fetchone()[0]
        if application != APPLICATION_ID and (application != 0 or tables):
            raise StoreCorruptError(
                f"{self.path} is not a toolrelay store (another application's database)"
            )
        if version > SCHEMA_VERSION:
            raise StoreVersionError(
                f"{self.path} has schema version {version}, newer than this toolrelay's "
                f"{SCHEMA_VERSION}: upgrade toolrelay to open it"
            )
        return int(application), int(version)

    def _migrate(self, connection: sqlite3.Connection) -> None:
        connection.execute("BEGIN IMMEDIATE")
        try:
            # Another process may have created or migrated the schema while this one
            # waited for the lock: look again, under it.
            _, current = self._identity(connection)
            for target in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[target]:
                    connection.execute(statement)
            connection.execute(f"PRAGMA application_id={APPLICATION_ID}")
            connection.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise

    # -- the contract ------------------------------------------------------------------

    async def _run(self, work: Callable[[sqlite3.Connection], T], doing: str) -> T:
        """Run ``work`` on the connection in a worker thread, with whatever else is
        queued; a failure is typed."""
        job = _Job(work, doing)
        await self._queued(job)
        return cast("T", job.value)

    async def append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> int:
        check_append(key, records, claim)
        item = _Append(key, records, [encode_record(r) for r in records], owner, claim)
        await self._queued(item)
        return item.last

    async def _queued(self, item: _Queued) -> None:
        """Queue ``item`` and return once it ran; raises what stopped it. A waiter that
        finds no leader leads."""
        if self._connection is None:
            await self.open()
        if not self._queue:  # a new queue, a new event (a taken queue took its own)
            self._next_hop = anyio.Event()
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
                    await anyio.to_thread.run_sync(self._hop, batch, started)
                finally:
                    if not started:  # cancelled before the hop: back to the queue's head
                        self._queue[0:0] = batch
                        self._renew_queue_event()
                    for item in batch:
                        if started and not item.settled:  # only if the hop itself broke
                            item.fail(StoreUnavailableError(f"{self.path}: the work broke"))
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
        fresh = self._next_hop = anyio.Event()
        for item in self._queue:
            item.hop = fresh
        if stale is not None:
            stale.set()

    def _hop(self, batch: list[_Queued], started: list[bool]) -> None:
        """Run ``batch`` in its order (in a worker thread); appends next to each other
        share one transaction. ``started`` says the hop began."""
        started.append(True)
        with self._lock:
            connection = self._connection
            if connection is None:
                for item in batch:
                    item.fail(StoreUnavailableError(f"{self.path}: the store is closed"))
                return
            appends: list[_Append] = []
            for item in batch:
                if isinstance(item, _Append):
                    appends.append(item)
                    continue
                if appends:
                    self._write(connection, appends)
                    appends = []
                assert isinstance(item, _Job)
                item.run(connection)
            if appends:
                self._write(connection, appends)

    def _write(self, connection: sqlite3.Connection, batch: list[_Append]) -> None:
        """Write ``batch`` in one transaction; if it fails and holds several appends,
        each is tried alone, so one's failure is not the others'."""
        try:
            self._transaction(connection, batch)
        except sqlite3.Error as exc:
            if len(batch) == 1:
                batch[0].fail(_error(exc, f"cannot write to {self.path}"))
                return
            for item in batch:
                try:
                    self._transaction(connection, [item])
                except sqlite3.Error as alone:
                    item.fail(_error(alone, f"cannot write to {self.path}"))

    def _transaction(self, connection: sqlite3.Connection, batch: list[_Append]) -> None:
        now = time.time()
        connection.execute("BEGIN IMMEDIATE")
        try:
            lasts: list[int | BaseException] = []
            rows: list[tuple[object, int, bytes]] = []  # every append's records, one statement
            for item in batch:
                key = item.key
                if item.claim is not None and not _claim_valid(connection, item.claim, now):
                    lasts.append(_stale(item.claim, "nothing was written"))
                    continue
                count = len(item.bodies)
                # One statement moves the thread forward and says where it stood.
                row = connection.execute(
                    "UPDATE threads SET last_seq = last_seq + ?, updated_at = ? "
                    "WHERE server = ? AND room = ? AND thread = ? "
                    "RETURNING id, last_seq, live_turn",
                    (count, now, key.server, key.room_id, key.thread_id),
                ).fetchone()
                if row is None:  # a new thread: its row starts where the records leave it
                    live = live_turn_after(None, item.records) if item.turns else None
                    cursor = connection.execute(
                        f"INSERT INTO threads ({_THREAD_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                        (key.server, key.room_id, key.thread_id, item.owner, count, live, now, now),
                    )
                    thread, last = cursor.lastrowid, count
                else:
                    thread, last, live = row
                    if item.turns:
                        turn = live_turn_after(live, item.records)
                        if turn != live:
                            connection.execute(
                                "UPDATE threads SET live_turn = ? WHERE id = ?", (turn, thread)
                            )
                first = last - count
                rows.extend((thread, first + i, body) for i, body in enumerate(item.bodies, 1))
                lasts.append(int(last))
            connection.executemany("INSERT INTO records (thread, seq, body) VALUES (?, ?, ?)", rows)
            connection.execute("COMMIT")
        except BaseException:
            if connection.in_transaction:
                connection.execute("ROLLBACK")
            raise
        for item, outcome in zip(batch, lasts, strict=True):
            if isinstance(outcome, int):
                item.written(outcome)
            else:
                item.fail(outcome)

    async def read(
        self, key: ThreadKey, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        def read(connection: sqlite3.Connection) -> list[tuple[int, bytes]]:
            return connection.execute(
                "SELECT r.seq, r.body FROM records r JOIN threads t ON r.thread = t.id "
                "WHERE t.server = ? AND t.room = ? AND t.thread = ? AND r.seq > ? "
                "ORDER BY r.seq LIMIT ?",
                (key.server, key.room_id, key.thread_id, after, -1 if limit is None else limit),
            ).fetchall()

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
                f"SELECT {_THREAD_COLUMNS} FROM threads "
                "WHERE server = ? AND room = ? AND thread = ?",
                (key.server, key.room_id, key.thread_id),
            ).fetchall()

        rows = await self._run(read, f"cannot read {self.path}")
        return _info(rows[0]) if rows else None

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
                f"SELECT {_THREAD_COLUMNS} FROM threads{clause} ORDER BY id", parameters
            ).fetchall()

        return [_info(row) for row in await self._run(read, f"cannot read {self.path}")]

    async def delete_thread(self, key: ThreadKey) -> bool:
        def delete(connection: sqlite3.Connection) -> bool:
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
        lease = _check_lease(lease)

        def take(connection: sqlite3.Connection, now: float) -> Claim | None:
            row = connection.execute(
                f"SELECT expires_at FROM claims WHERE {_CLAIM_KEY}",
                (key.server, key.room_id, key.thread_id),
            ).fetchone()
            if row is not None and row[0] > now:
                return None
            return _grant(connection, key, worker, now + lease)

        return await self._claiming(take, "cannot claim")

    async def claim_next(self, *, worker: str, lease: float, limit: int = 1) -> list[Claim]:
        lease = _check_lease(lease)
        if limit < 1:
            raise ValueError("limit must be at least 1")

        def take(connection: sqlite3.Connection, now: float) -> list[Claim]:
            rows = connection.execute(
                "SELECT t.server, t.room, t.thread FROM threads t "
                "WHERE t.live_turn IS NOT NULL AND NOT EXISTS ("
                "SELECT 1 FROM claims c WHERE c.server = t.server AND c.room = t.room "
                "AND c.thread = t.thread AND c.expires_at > ?) "
                "ORDER BY t.updated_at, t.id LIMIT ?",
                (now, limit),
            ).fetchall()
            return [
                _grant(connection, ThreadKey(thread, room, server), worker, now + lease)
                for server, room, thread in rows
            ]

        return await self._claiming(take, "cannot claim")

    async def renew(self, claim: Claim, *, lease: float) -> Claim:
        lease = _check_lease(lease)
        key = claim.key

        def extend(connection: sqlite3.Connection, now: float) -> float | None:
            cursor = connection.execute(
                f"UPDATE claims SET expires_at = ? WHERE {_CLAIM_KEY} "
                "AND token = ? AND expires_at > ?",
                (now + lease, key.server, key.room_id, key.thread_id, claim.token, now),
            )
            return now + lease if cursor.rowcount else None

        expires_at = await self._claiming(extend, "cannot renew a claim")
        if expires_at is None:
            raise _stale(claim, "it cannot be renewed")
        return Claim(key=key, worker=claim.worker, token=claim.token, expires_at=expires_at)

    async def release(self, claim: Claim) -> bool:
        key = claim.key

        def drop(connection: sqlite3.Connection) -> bool:
            cursor = connection.execute(
                f"DELETE FROM claims WHERE {_CLAIM_KEY} AND token = ?",
                (key.server, key.room_id, key.thread_id, claim.token),
            )
            return cursor.rowcount > 0

        return await self._run(drop, f"cannot release a claim in {self.path}")


def _check_lease(lease: float) -> float:
    if not 0 < lease < 1e9:
        raise ValueError(f"lease must be a positive number of seconds, not {lease!r}")
    return float(lease)


def _stale(claim: Claim, outcome: str) -> StaleClaimError:
    return StaleClaimError(
        f"{claim.key}: claim {claim.token} of {claim.worker!r} expired or was taken over; {outcome}"
    )


def _claim_valid(connection: sqlite3.Connection, claim: Claim, now: float) -> bool:
    key = claim.key
    row = connection.execute(
        f"SELECT 1 FROM claims WHERE {_CLAIM_KEY} AND token = ? AND expires_at > ?",
        (key.server, key.room_id, key.thread_id, claim.token, now),
    ).fetchone()
    return row is not None


def _grant(connection: sqlite3.Connection, key: ThreadKey, worker: str, expires: float) -> Claim:
    """A new claim on ``key`` with the next fencing token (in the caller's transaction)."""
    (token,) = connection.execute(
        "UPDATE claim_tokens SET last = last + 1 WHERE id = 1 RETURNING last"
    ).fetchone()
    connection.execute(
        "INSERT OR REPLACE INTO claims (server, room, thread, worker, token, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (key.server, key.room_id, key.thread_id, worker, token, expires),
    )
    return Claim(key=key, worker=worker, token=int(token), expires_at=expires)


def _info(row: tuple[object, ...]) -> ThreadInfo:
    server, room, thread, owner, last_seq, live_turn, created_at, updated_at = row
    return ThreadInfo(
        key=ThreadKey(str(thread), str(room), str(server)),
        owner=None if owner is None else str(owner),
        last_seq=int(str(last_seq)),
        live_turn=None if live_turn is None else str(live_turn),
        created_at=float(str(created_at)),
        updated_at=float(str(updated_at)),
    )
