"""The shared store: PostgreSQL through psycopg 3, for several workers on several machines.

Theory of operation
-------------------
Connections are synchronous psycopg connections driven from anyio worker threads,
so the store serves asyncio and trio alike. A small pool keeps idle connections; a
capacity limiter (``pool_size``) bounds how many threads use one at a time, so the
pool never holds more than ``pool_size`` connections and no thread ever waits for
one inside the pool. Before an idle connection is used again it is polled: a server
that restarted (``pg_ctl restart``) or closed it left it readable, and it is
dropped instead of failing the next operation. A read that meets a broken
connection anyway is tried once more on a fresh one; a write is not (whether it
committed is unknown), it raises :class:`~toolrelay.errors.StoreUnavailableError`.

Every table lives in one schema (``toolrelay`` by default). ``schema_version`` holds
one row per applied migration. ``open`` reads it; when a migration is due it takes
an advisory lock (one per schema), reads it again and migrates in one transaction,
so workers that start together migrate once. A newer version is refused
(:class:`~toolrelay.errors.StoreVersionError`), tables of ours in a schema with no
version are another application's (:class:`~toolrelay.errors.StoreCorruptError`).

An append without a claim is one statement (one round trip): it creates or moves
the thread's row forward (``INSERT ... ON CONFLICT DO UPDATE``, which locks it, so
concurrent appends to a thread queue on that row), inserts the records, and sends
``pg_notify`` with the thread's row id and last sequence number (delivered at commit
only). With a claim, one transaction locks the thread's row, checks the claim, then
runs the same statement. Claiming locks the thread's row first too: one lock order
everywhere, so claims and writes never deadlock and a taker waits for a write in
flight (rule 5). Times come from the database's clock and fencing tokens from one
sequence. The reasons are in docs/concepts.md, "Claims and fencing".
"""

from __future__ import annotations

import hashlib
import re
import select
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import psycopg
import psycopg.errors
from psycopg import conninfo

from toolrelay.core import ThreadKey
from toolrelay.errors import (
    StaleClaimError,
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
    StoreVersionError,
)
from toolrelay.store._claims import Claim
from toolrelay.store._contract import Entry, ThreadInfo, live_turn_after
from toolrelay.store._records import Record, TurnEnded, TurnStarted, decode_record, encode_record

__all__ = ("POSTGRES_SCHEMA_VERSION", "PostgresStore")

T = TypeVar("T")

#: The schema version this toolrelay writes on PostgreSQL.
POSTGRES_SCHEMA_VERSION = 1

_NOW = "extract(epoch FROM clock_timestamp())::float8"

#: Schema changes, by the version they lead to (run in the migrating transaction,
#: with ``search_path`` on the store's schema).
_MIGRATIONS: dict[int, tuple[str, ...]] = {
    1: (
        """CREATE TABLE threads (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            server text NOT NULL,
            room text NOT NULL,
            thread text NOT NULL,
            owner text,
            last_seq bigint NOT NULL,
            live_turn text,
            created_at float8 NOT NULL,
            updated_at float8 NOT NULL,
            UNIQUE (server, room, thread)
        )""",
        """CREATE TABLE records (
            thread bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
            seq bigint NOT NULL,
            body bytea NOT NULL,
            PRIMARY KEY (thread, seq)
        )""",
        "CREATE INDEX threads_live ON threads (updated_at) WHERE live_turn IS NOT NULL",
        "CREATE INDEX threads_owner ON threads (owner)",
        """CREATE TABLE claims (
            server text NOT NULL,
            room text NOT NULL,
            thread text NOT NULL,
            worker text NOT NULL,
            token bigint NOT NULL,
            expires_at float8 NOT NULL,
            PRIMARY KEY (server, room, thread)
        )""",
        "CREATE SEQUENCE claim_tokens",
    ),
}

_OUR_TABLES = ("threads", "records", "claims")

_THREAD_COLUMNS = "server, room, thread, owner, last_seq, live_turn, created_at, updated_at"

_KEY = "server = %(server)s AND room = %(room)s AND thread = %(thread)s"

_APPEND = f"""
WITH th AS (
    INSERT INTO threads AS t ({_THREAD_COLUMNS})
    VALUES (%(server)s, %(room)s, %(thread)s, %(owner)s, %(n)s, %(fresh_live)s, {_NOW}, {_NOW})
    ON CONFLICT (server, room, thread) DO UPDATE SET
        last_seq = t.last_seq + %(n)s,
        live_turn = CASE
            WHEN %(decided)s THEN %(fresh_live)s
            WHEN t.live_turn = ANY(%(ended)s::text[]) THEN NULL
            ELSE t.live_turn END,
        updated_at = {_NOW}
    RETURNING t.id, t.last_seq
), written AS (
    INSERT INTO records (thread, seq, body)
    SELECT th.id, th.last_seq - %(n)s + b.ord, b.body
    FROM th, unnest(%(bodies)s::bytea[]) WITH ORDINALITY AS b (body, ord)
)
SELECT th.last_seq, pg_notify(%(channel)s, th.id || ' ' || th.last_seq) FROM th
"""

_CLAIM_SET = f"""
ON CONFLICT (server, room, thread) DO UPDATE SET
    worker = excluded.worker, token = excluded.token, expires_at = excluded.expires_at
WHERE c.expires_at <= {_NOW}
RETURNING c.server, c.room, c.thread, c.token, c.expires_at
"""

_CLAIM = f"""
INSERT INTO claims AS c (server, room, thread, worker, token, expires_at)
VALUES (%(server)s, %(room)s, %(thread)s, %(worker)s, nextval('claim_tokens'),
        {_NOW} + %(lease)s)
{_CLAIM_SET}
"""

_CLAIM_NEXT = f"""
WITH candidates AS (
    SELECT t.server, t.room, t.thread FROM threads t
    WHERE t.live_turn IS NOT NULL AND NOT EXISTS (
        SELECT FROM claims c
        WHERE c.server = t.server AND c.room = t.room AND c.thread = t.thread
        AND c.expires_at > {_NOW})
    ORDER BY t.updated_at
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
)
INSERT INTO claims AS c (server, room, thread, worker, token, expires_at)
SELECT server, room, thread, %(worker)s, nextval('claim_tokens'), {_NOW} + %(lease)s
FROM candidates
{_CLAIM_SET}
"""

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")


def _error(exc: psycopg.Error, doing: str) -> StoreError:
    """The typed error for a driver's exception (the store's one boundary)."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, psycopg.errors.DataCorrupted | psycopg.errors.IndexCorrupted):
        return StoreCorruptError(f"{doing}: the database is damaged ({text})")
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return StoreCorruptError(f"{doing}: the store's schema is damaged ({text})")
    return StoreUnavailableError(f"{doing}: {text}")


def _key(key: ThreadKey) -> dict[str, Any]:
    return {"server": key.server, "room": key.room_id, "thread": key.thread_id}


def _check_lease(lease: float) -> float:
    if not 0 < lease < 1e9:
        raise ValueError(f"lease must be a positive number of seconds, not {lease!r}")
    return float(lease)


def _dead(connection: psycopg.Connection[Any]) -> bool:
    """Whether an idle connection is unusable: closed, broken, or readable (an idle
    connection has nothing to read unless the server ended it)."""
    if connection.closed or connection.broken:
        return True
    try:
        fd = connection.fileno()
        if hasattr(select, "poll"):  # any descriptor number, unlike select()
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            return bool(poller.poll(0))
        readable, _, _ = select.select([fd], [], [], 0)
    except (OSError, ValueError, psycopg.Error):
        return True
    return bool(readable)


class _Pool:
    """Idle connections, handed to one thread at a time (the limiter bounds threads)."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]]) -> None:
        self._connect = connect
        self._idle: list[psycopg.Connection[Any]] = []
        self._lock = threading.Lock()
        self.closed = False

    def take(self) -> psycopg.Connection[Any]:
        while True:
            with self._lock:
                if self.closed:
                    raise StoreUnavailableError("the store is closed")
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                return self._connect()
            if not _dead(connection):
                return connection
            connection.close()

    def give(self, connection: psycopg.Connection[Any]) -> None:
        if not connection.closed and not connection.broken:
            status = connection.info.transaction_status
            if status == psycopg.pq.TransactionStatus.IDLE:
                with self._lock:
                    if not self.closed:
                        self._idle.append(connection)
                        return
        connection.close()

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


class PostgresStore:
    """A :class:`~toolrelay.store.Store` on PostgreSQL that several workers share.

    It also offers claims (:class:`~toolrelay.store.ClaimingStore`), a live tail
    across processes (:class:`~toolrelay.store.TailingStore`) and one feed of every
    process's commits (:class:`~toolrelay.store.NotifyingStore`). Needs the
    ``postgres`` extra (``pip install 'toolrelay[postgres]'``).

    Args:
        dsn: A libpq connection string or URI (``postgresql://user@host/db``).
        schema: The schema holding the store's tables, created on first open
            (lower-case letters, digits, ``_``; several stores can share a database
            with one schema each).
        pool_size: The most connections (and operations at once) the store uses,
            besides one per open tail.
        connect_timeout: Seconds to wait for a new connection.
        idle_in_transaction_timeout: Seconds after which the server ends a session
            that left a transaction open (a worker frozen mid-write releases its
            locks).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "toolrelay",
        pool_size: int = 8,
        connect_timeout: float = 5.0,
        idle_in_transaction_timeout: float = 30.0,
    ) -> None:
        if not _SCHEMA_NAME.fullmatch(schema):
            raise ValueError(f"schema must match {_SCHEMA_NAME.pattern}, not {schema!r}")
        if pool_size < 1:
            raise ValueError("pool_size must be at least 1")
        try:
            params = conninfo.conninfo_to_dict(dsn)
        except psycopg.ProgrammingError as exc:
            raise ValueError(f"not a PostgreSQL connection string: {exc}") from None
        self.dsn = dsn
        self.schema = schema
        self.pool_size = pool_size
        self.connect_timeout = connect_timeout
        self.idle_in_transaction_timeout = idle_in_transaction_timeout
        self.channel = f"toolrelay_{schema}"
        where = params.get("host", "") or "localhost"
        self._label = f"{where}:{params.get('port', 5432)}/{params.get('dbname', '')}"
        self._lock_id = int.from_bytes(
            hashlib.blake2b(f"toolrelay:{schema}".encode(), digest_size=8).digest(),
            "big",
            signed=True,
        )
        self._pool: _Pool | None = None
        self._limiter = anyio.CapacityLimiter(pool_size)
        self._opening = threading.Lock()

    def __repr__(self) -> str:
        return f"PostgresStore({self._label!r}, schema={self.schema!r})"

    # -- connections -------------------------------------------------------------------

    def _connect(self) -> psycopg.Connection[Any]:
        try:
            connection = psycopg.connect(
                self.dsn,
                autocommit=True,
                connect_timeout=max(1, round(self.connect_timeout)),
                application_name="toolrelay",
            )
        except psycopg.Error as exc:
            raise _error(exc, f"cannot connect to {self._label}") from exc
        try:
            timeout_ms = max(1, round(self.idle_in_transaction_timeout * 1000))
            connection.execute(
                f"SET search_path TO {self.schema}; "
                f"SET idle_in_transaction_session_timeout = {timeout_ms}"
            )
        except psycopg.Error as exc:
            connection.close()
            raise _error(exc, f"cannot prepare a connection to {self._label}") from exc
        return connection

    async def _run(
        self,
        work: Callable[[psycopg.Connection[Any]], T],
        doing: str,
        *,
        transaction: bool = False,
        retry: bool = False,
    ) -> T:
        """Run ``work`` on a pooled connection in a worker thread.

        ``transaction``: inside ``BEGIN``/``COMMIT`` (rolled back on any error).
        ``retry``: once more on a fresh connection if the connection broke (reads).
        """
        if self._pool is None:
            await self.open()

        def attempt() -> T:
            for tries_left in (retry, False):
                pool = self._pool
                if pool is None:
                    raise StoreUnavailableError(f"{doing}: the store is closed")
                connection = pool.take()
                try:
                    if transaction:
                        connection.execute("BEGIN")
                        result = work(connection)
                        connection.execute("COMMIT")
                    else:
                        result = work(connection)
                except psycopg.Error as exc:
                    broken = connection.broken or connection.closed
                    self._finish(pool, connection)
                    if broken and tries_left:
                        continue
                    raise _error(exc, doing) from exc
                except BaseException:
                    self._finish(pool, connection)
                    raise
                pool.give(connection)
                return result
            raise AssertionError("unreachable")  # pragma: no cover

        return await anyio.to_thread.run_sync(attempt, limiter=self._limiter)

    @staticmethod
    def _finish(pool: _Pool, connection: psycopg.Connection[Any]) -> None:
        """Return a connection after a failure: rolled back, or closed if that fails."""
        if not connection.broken and not connection.closed:
            try:
                if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    connection.execute("ROLLBACK")
            except psycopg.Error:
                connection.close()
        pool.give(connection)

    # -- opening -----------------------------------------------------------------------

    async def open(self) -> None:
        """Connect, create the schema on first use and migrate it (once, whatever
        the number of workers opening it at the same time); idempotent.

        Raises:
            StoreCorruptError: The schema holds tables of ours with no version.
            StoreVersionError: A newer toolrelay wrote it.
            StoreUnavailableError: The server cannot be reached or refused us.
        """
        if self._pool is None:
            await anyio.to_thread.run_sync(self._open, limiter=self._limiter)

    def _open(self) -> None:
        with self._opening:
            if self._pool is not None:
                return
            connection = self._connect()
            try:
                self._prepare(connection)
            except psycopg.Error as exc:
                raise _error(exc, f"cannot open the store on {self._label}") from exc
            finally:
                connection.close()
            self._pool = _Pool(self._connect)

    def _version(self, connection: psycopg.Connection[Any]) -> int | None:
        row = connection.execute(
            "SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.schema_version",)
        ).fetchone()
        if not row or not row[0]:
            return None
        found = connection.execute("SELECT max(version) FROM schema_version").fetchone()
        return int(found[0]) if found and found[0] is not None else 0

    def _prepare(self, connection: psycopg.Connection[Any]) -> None:
        version = self._version(connection)
        if version == POSTGRES_SCHEMA_VERSION:
            return
        self._check_version(version)
        # One migrator per schema at a time; the others wait, then find it done. The
        # lock is the session's, taken before the transaction: a transaction that
        # began before the wait would still see the catalog as it was then.
        connection.execute("SELECT pg_advisory_lock(%s)", (self._lock_id,))
        try:
            with connection.transaction():
                version = self._version(connection)
                self._check_version(version)
                if version is None:
                    for table in _OUR_TABLES:
                        row = connection.execute(
                            "SELECT to_regclass(%s) IS NOT NULL", (f"{self.schema}.{table}",)
                        ).fetchone()
                        if row and row[0]:
                            raise StoreCorruptError(
                                f"{self._label}: schema {self.schema!r} has a {table!r} table "
                                "but no toolrelay schema version: not a toolrelay store"
                            )
                    exists = connection.execute(
                        "SELECT 1 FROM pg_namespace WHERE nspname = %s", (self.schema,)
                    ).fetchone()
                    if not exists:
                        connection.execute(f"CREATE SCHEMA {self.schema}")
                    connection.execute(
                        """CREATE TABLE schema_version (
                            version integer PRIMARY KEY,
                            applied_at timestamptz NOT NULL DEFAULT now()
                        )"""
                    )
                    version = 0
                for target in range(version + 1, POSTGRES_SCHEMA_VERSION + 1):
                    for statement in _MIGRATIONS[target]:
                        connection.execute(statement)
                    connection.execute(
                        "INSERT INTO schema_version (version) VALUES (%s)", (target,)
                    )
        finally:
            if not connection.broken:
                connection.execute("SELECT pg_advisory_unlock(%s)", (self._lock_id,))

    def _check_version(self, version: int | None) -> None:
        if version is not None and version > POSTGRES_SCHEMA_VERSION:
            raise StoreVersionError(
                f"{self._label}: schema {self.schema!r} has version {version}, newer than "
                f"this toolrelay's {POSTGRES_SCHEMA_VERSION}: upgrade toolrelay to open it"
            )

    async def aclose(self) -> None:
        """Close the pool's connections; idempotent (the store can be opened again)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await anyio.to_thread.run_sync(pool.close)

    # -- the contract ------------------------------------------------------------------

    def _append_parameters(
        self, key: ThreadKey, records: Sequence[Record], owner: str | None
    ) -> dict[str, Any]:
        bodies = [encode_record(record) for record in records]  # before any I/O
        decided = any(isinstance(record, TurnStarted) for record in records)
        ended = [record.turn_id for record in records if isinstance(record, TurnEnded)]
        return {
            **_key(key),
            "owner": owner,
            "n": len(bodies),
            "bodies": bodies,
            "decided": decided,
            "fresh_live": live_turn_after(None, records),
            "ended": ended,
            "channel": self.channel,
        }

    async def append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> int:
        if not records:
            raise ValueError("append needs at least one record")
        parameters = self._append_parameters(key, records, owner)
        doing = f"cannot write to {self._label}"
        if claim is None:

            def write(connection: psycopg.Connection[Any]) -> int:
                row = connection.execute(_APPEND, parameters).fetchone()
                assert row is not None
                return int(row[0])

            return await self._run(write, doing)
        if claim.key != key:
            raise ValueError(f"the claim is for {claim.key}, not {key}")

        def write_claimed(connection: psycopg.Connection[Any]) -> int:
            connection.execute(f"SELECT 1 FROM threads WHERE {_KEY} FOR UPDATE", parameters)
            # FOR SHARE: a taker's claim waits for this write, then reads it (rule 5),
            # also for a thread this write creates (no thread row to lock yet).
            valid = connection.execute(
                f"SELECT 1 FROM claims WHERE {_KEY} AND token = %(token)s "
                f"AND expires_at > {_NOW} FOR SHARE",
                {**parameters, "token": claim.token},
            ).fetchone()
            if valid is None:
                raise StaleClaimError(
                    f"{key}: claim {claim.token} of {claim.worker!r} expired or was taken "
                    "over; nothing was written"
                )
            row = connection.execute(_APPEND, parameters).fetchone()
            assert row is not None
            return int(row[0])

        return await self._run(write_claimed, doing, transaction=True)

    async def read(
        self, key: ThreadKey, *, after: int = 0, limit: int | None = None
    ) -> list[Entry]:
        def read(connection: psycopg.Connection[Any]) -> list[tuple[int, bytes]]:
            return connection.execute(
                "SELECT r.seq, r.body FROM records r JOIN threads t ON r.thread = t.id "
                "WHERE t.server = %(server)s AND t.room = %(room)s AND t.thread = %(thread)s "
                "AND r.seq > %(after)s ORDER BY r.seq LIMIT %(limit)s",
                {**_key(key), "after": after, "limit": limit},
            ).fetchall()

        rows = await self._run(read, f"cannot read {self._label}", retry=True)
        try:
            return [Entry(int(seq), decode_record(bytes(body))) for seq, body in rows]
        except ValueError as exc:  # msgspec's DecodeError and ValidationError
            raise StoreCorruptError(
                f"{self._label}: a record of {key} cannot be read ({exc})"
            ) from exc

    async def thread(self, key: ThreadKey) -> ThreadInfo | None:
        def read(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(
                f"SELECT {_THREAD_COLUMNS} FROM threads WHERE {_KEY}", _key(key)
            ).fetchall()

        rows = await self._run(read, f"cannot read {self._label}", retry=True)
        return _info(rows[0]) if rows else None

    async def threads(
        self, *, owner: str | None = None, live: bool | None = None
    ) -> list[ThreadInfo]:
        where: list[str] = []
        if owner is not None:
            where.append("owner = %(owner)s")
        if live is not None:
            where.append("live_turn IS NOT NULL" if live else "live_turn IS NULL")
        clause = f" WHERE {' AND '.join(where)}" if where else ""

        def read(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(
                f"SELECT {_THREAD_COLUMNS} FROM threads{clause} ORDER BY id",
                {"owner": owner},
            ).fetchall()

        return [_info(row) for row in await self._run(read, f"cannot read {self._label}")]

    async def delete_thread(self, key: ThreadKey) -> bool:
        def delete(connection: psycopg.Connection[Any]) -> bool:
            cursor = connection.execute(f"DELETE FROM threads WHERE {_KEY}", _key(key))
            return cursor.rowcount > 0

        return await self._run(delete, f"cannot delete from {self._label}")

    # -- claims (toolrelay.store.ClaimingStore) ------------------------------------------

    async def claim(self, key: ThreadKey, *, worker: str, lease: float) -> Claim | None:
        parameters = {**_key(key), "worker": worker, "lease": _check_lease(lease)}

        def take(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            # The thread row first (when it exists): a write in flight finishes first.
            connection.execute(f"SELECT 1 FROM threads WHERE {_KEY} FOR UPDATE", parameters)
            return connection.execute(_CLAIM, parameters).fetchall()

        rows = await self._run(take, f"cannot claim on {self._label}", transaction=True)
        return _claim(rows[0], worker) if rows else None

    async def claim_next(self, *, worker: str, lease: float, limit: int = 1) -> list[Claim]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        parameters = {"worker": worker, "lease": _check_lease(lease), "limit": limit}

        def take(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(_CLAIM_NEXT, parameters).fetchall()

        rows = await self._run(take, f"cannot claim on {self._label}")
        return [_claim(row, worker) for row in rows]

    async def renew(self, claim: Claim, *, lease: float) -> Claim:
        parameters = {**_key(claim.key), "token": claim.token, "lease": _check_lease(lease)}

        def extend(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(
                f"UPDATE claims SET expires_at = {_NOW} + %(lease)s "
                f"WHERE {_KEY} AND token = %(token)s AND expires_at > {_NOW} "
                "RETURNING expires_at",
                parameters,
            ).fetchall()

        rows = await self._run(extend, f"cannot renew a claim on {self._label}")
        if not rows:
            raise StaleClaimError(
                f"{claim.key}: claim {claim.token} of {claim.worker!r} expired or was taken "
                "over; it cannot be renewed"
            )
        return Claim(
            key=claim.key, worker=claim.worker, token=claim.token, expires_at=float(rows[0][0])
        )

    async def release(self, claim: Claim) -> bool:
        parameters = {**_key(claim.key), "token": claim.token}

        def drop(connection: psycopg.Connection[Any]) -> bool:
            cursor = connection.execute(
                f"DELETE FROM claims WHERE {_KEY} AND token = %(token)s", parameters
            )
            return cursor.rowcount > 0

        return await self._run(drop, f"cannot release a claim on {self._label}")

    # -- the live tail (toolrelay.store.TailingStore) ------------------------------------

    def tail(
        self, key: ThreadKey, *, after: int = 0, poll: float = 5.0, batch: int = 500
    ) -> AbstractAsyncContextManager[AsyncIterator[Entry]]:
        """Every record of the thread after ``after``, then each one any process
        appends, in order and once each::

            async with store.tail(key, after=seen) as entries:
                async for entry in entries:
                    ...

        The tail holds a connection of its own that ``LISTEN``s for the store's
        notifications (thread and sequence number only) and reads the log from the
        last sequence it yielded whenever one names its thread, and every ``poll``
        seconds anyway: a missed notification costs delay, never a record. When the
        server restarts, the tail reconnects and catches up.

        Args:
            key: The thread (it need not exist yet).
            after: The last sequence number the caller has.
            poll: The longest wait between two reads of the log.
            batch: The most records read at once.

        Raises:
            ValueError: ``poll`` or ``batch`` is not positive (at once).
            StoreUnavailableError: The server cannot be reached (also when the
                tail's connection cannot be made again within ``connect_timeout``).
        """
        if not 0 < poll < 1e9:
            raise ValueError(f"poll must be a positive number of seconds, not {poll!r}")
        if batch < 1:
            raise ValueError("batch must be at least 1")
        return self._tail(key, after, poll, batch)

    @asynccontextmanager
    async def _tail(
        self, key: ThreadKey, after: int, poll: float, batch: int
    ) -> AsyncIterator[AsyncIterator[Entry]]:
        listener = _Listener(self)
        await listener.connect()
        entries = self._follow(key, after, poll, batch, listener)
        try:
            yield entries
        finally:
            with anyio.CancelScope(shield=True):
                await entries.aclose()  # never left to the garbage collector
                await listener.close()

    async def _follow(
        self, key: ThreadKey, after: int, poll: float, batch: int, listener: _Listener
    ) -> AsyncGenerator[Entry, None]:
        last = after
        thread_id: int | None = None
        while True:
            entries = await self.read(key, after=last, limit=batch)
            for entry in entries:
                last = entry.seq
                yield entry
            if len(entries) == batch:
                continue
            if thread_id is None:
                thread_id = await self._thread_id(key)
            # Wake on a notification naming this thread past ``last`` (or any, while
            # the thread does not exist yet), or after ``poll`` seconds.
            await listener.wait(thread_id, last, poll)
            if thread_id is None or listener.reconnected:
                thread_id = None
                listener.reconnected = False

    def commits(self) -> AbstractAsyncContextManager[AsyncIterator[tuple[ThreadKey, int] | None]]:
        """Every commit any process makes from now on, as ``(thread, last sequence
        number)``, on one ``LISTEN`` connection for the whole process::

            async with store.commits() as commits:
                async for commit in commits:
                    ...  # None: some may have been missed; read every thread again

        Notifications name threads by row id; the keys are read once and remembered.
        When the connection is lost the listener makes it again and yields ``None``
        (what was committed meanwhile was not notified).

        Raises:
            StoreUnavailableError: The server cannot be reached (also when the
                connection cannot be made again within ``connect_timeout``).
        """
        return self._commits()

    @asynccontextmanager
    async def _commits(self) -> AsyncIterator[AsyncIterator[tuple[ThreadKey, int] | None]]:
        listener = _Listener(self)
        await listener.connect()
        commits = self._notified(listener)
        try:
            yield commits
        finally:
            with anyio.CancelScope(shield=True):
                await commits.aclose()
                await listener.close()

    async def _notified(
        self, listener: _Listener
    ) -> AsyncGenerator[tuple[ThreadKey, int] | None, None]:
        keys: dict[int, ThreadKey] = {}
        while True:
            connection = listener.connection
            if connection is None:
                await listener._reconnect()
                yield None
                continue
            payloads: list[bytes] = []
            try:
                connection.pgconn.consume_input()
                while (note := connection.pgconn.notifies()) is not None:
                    payloads.append(note.extra)
            except psycopg.Error:
                await listener._reconnect()
                yield None
                continue
            if not payloads:
                await anyio.wait_readable(connection.fileno())
                continue
            commits: list[tuple[int, int]] = []
            for payload in payloads:
                try:
                    thread, seq = (int(part) for part in payload.split(b" "))
                except ValueError:
                    continue  # not ours
                commits.append((thread, seq))
            unknown = {thread for thread, _ in commits if thread not in keys}
            if unknown:
                if len(keys) > 100_000:  # row ids of deleted threads never come back
                    keys.clear()
                keys.update(await self._keys_of(sorted(unknown)))
            for thread, seq in commits:
                key = keys.get(thread)
                if key is not None:  # else deleted since
                    yield key, seq

    async def _keys_of(self, ids: list[int]) -> dict[int, ThreadKey]:
        def find(connection: psycopg.Connection[Any]) -> list[tuple[Any, ...]]:
            return connection.execute(
                "SELECT id, server, room, thread FROM threads WHERE id = ANY(%s)", (ids,)
            ).fetchall()

        rows = await self._run(find, f"cannot read {self._label}", retry=True)
        return {
            int(row_id): ThreadKey(str(thread), str(room), str(server))
            for row_id, server, room, thread in rows
        }

    async def _thread_id(self, key: ThreadKey) -> int | None:
        def find(connection: psycopg.Connection[Any]) -> int | None:
            row = connection.execute(f"SELECT id FROM threads WHERE {_KEY}", _key(key)).fetchone()
            return None if row is None else int(row[0])

        return await self._run(find, f"cannot read {self._label}", retry=True)


class _Listener:
    """One tail's ``LISTEN`` connection: waited on with anyio, reconnected when lost."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self.connection: psycopg.Connection[Any] | None = None
        #: Set when the connection was made again (notifications may have been lost).
        self.reconnected = False

    def _listen(self) -> psycopg.Connection[Any]:
        connection = self.store._connect()
        try:
            connection.execute(f'LISTEN "{self.store.channel}"')
        except psycopg.Error as exc:
            connection.close()
            raise _error(exc, "cannot listen for new records") from exc
        return connection

    async def connect(self) -> None:
        self.connection = await anyio.to_thread.run_sync(self._listen)

    async def _reconnect(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None
        with anyio.move_on_after(self.store.connect_timeout) as scope:
            while True:
                try:
                    await self.connect()
                    self.reconnected = True
                    return
                except StoreUnavailableError:
                    await anyio.sleep(0.1)
        if scope.cancelled_caught:
            raise StoreUnavailableError(
                f"{self.store!r}: the tail lost its connection and cannot make it again"
            )

    async def wait(self, thread_id: int | None, last: int, poll: float) -> None:
        with anyio.move_on_after(poll):
            while True:
                connection = self.connection
                if connection is None:
                    await self._reconnect()
                    return
                try:
                    connection.pgconn.consume_input()
                    while (note := connection.pgconn.notifies()) is not None:
                        if _names(note.extra, thread_id, last):
                            return
                except psycopg.Error:
                    await self._reconnect()
                    return  # read: what was notified meanwhile is lost
                await anyio.wait_readable(connection.fileno())

    async def close(self) -> None:
        connection, self.connection = self.connection, None
        if connection is not None:
            await anyio.to_thread.run_sync(connection.close)


def _names(payload: bytes, thread_id: int | None, last: int) -> bool:
    """Whether a notification (``"<thread row id> <seq>"``) is news for a tail."""
    try:
        thread, seq = (int(part) for part in payload.split(b" "))
    except ValueError:
        return True
    return thread_id is None or (thread == thread_id and seq > last)


def _claim(row: tuple[Any, ...], worker: str) -> Claim:
    server, room, thread, token, expires_at = row
    return Claim(
        key=ThreadKey(str(thread), str(room), str(server)),
        worker=worker,
        token=int(token),
        expires_at=float(expires_at),
    )


def _info(row: tuple[Any, ...]) -> ThreadInfo:
    server, room, thread, owner, last_seq, live_turn, created_at, updated_at = row
    return ThreadInfo(
        key=ThreadKey(str(thread), str(room), str(server)),
        owner=None if owner is None else str(owner),
        last_seq=int(last_seq),
        live_turn=None if live_turn is None else str(live_turn),
        created_at=float(created_at),
        updated_at=float(updated_at),
    )
