"""The shared store: PostgreSQL through psycopg 3, for several workers on several machines.

Theory of operation
-------------------
Connections are synchronous psycopg connections driven from anyio worker threads,
so the store serves asyncio and trio alike; a capacity limiter (``pool_size``) bounds
how many threads use one at a time, so the pool (``_postgres_pool``) never holds more
than ``pool_size`` connections and no thread ever waits for one inside it. A read that
meets a broken connection is tried once more on a fresh one; a write is not (whether
it committed is unknown), it raises :class:`~toolrelay.StoreUnavailableError`.
``open`` creates and migrates the schema (``_postgres_schema``).

An append without a claim is one statement (one round trip): it creates or moves
the thread's row forward (``INSERT ... ON CONFLICT DO UPDATE``, which locks it, so
concurrent appends to a thread queue on that row), inserts the records, and sends
``pg_notify`` with the thread's row id and last sequence number (delivered at commit
only). With a claim, one transaction locks the thread's row, checks the claim
(``_postgres_claims``), then runs the same statement. Tails and the commit feed wait
on those notifications (``_postgres_listener``). The inbox (``_postgres_inbox``) hands
a request to the worker that holds its thread; the server's one listener hears its
notices with the commits (:meth:`PostgresStore.notices`).
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import psycopg
from psycopg import conninfo

from toolrelay._core import ThreadKey
from toolrelay._errors import StoreCorruptError, StoreUnavailableError
from toolrelay.store._claims import Claim, check_append
from toolrelay.store._contract import Entry, ThreadInfo, live_turn_after
from toolrelay.store._inbox import Answered, Letter, LetterKind, Notice, Posted
from toolrelay.store._postgres_claims import (
    check_fence,
    check_lease,
    release_claim,
    renew_claim,
    take_claim,
    take_next_claims,
)
from toolrelay.store._postgres_inbox import collect_letters, post_letter
from toolrelay.store._postgres_listener import Listener
from toolrelay.store._postgres_pool import Pool, store_error
from toolrelay.store._postgres_schema import (
    KEY,
    NOW,
    POSTGRES_SCHEMA_VERSION as POSTGRES_SCHEMA_VERSION,
    THREAD_COLUMNS,
    key_parameters,
    migrate,
)
from toolrelay.store._records import Record, TurnEnded, TurnStarted, decode_record, encode_record

__all__ = ("POSTGRES_SCHEMA_VERSION", "PostgresStore")

T = TypeVar("T")

_APPEND = f"""
WITH th AS (
    INSERT INTO threads AS t ({THREAD_COLUMNS})
    VALUES (%(server)s, %(room)s, %(thread)s, %(owner)s, %(n)s, %(fresh_live)s, {NOW}, {NOW})
    ON CONFLICT (server, room, thread) DO UPDATE SET
        last_seq = t.last_seq + %(n)s,
        live_turn = CASE
            WHEN %(decided)s THEN %(fresh_live)s
            WHEN t.live_turn = ANY(%(ended)s::text[]) THEN NULL
            ELSE t.live_turn END,
        updated_at = {NOW}
    RETURNING t.id, t.last_seq
), written AS (
    INSERT INTO records (thread, seq, body)
    SELECT th.id, th.last_seq - %(n)s + b.ord, b.body
    FROM th, unnest(%(bodies)s::bytea[]) WITH ORDINALITY AS b (body, ord)
)
SELECT th.last_seq, pg_notify(%(channel)s, th.id || ' ' || th.last_seq) FROM th
"""

_SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,39}")


class PostgresStore:
    """A :class:`~toolrelay.store.Store` on PostgreSQL that several workers share.

    It also offers claims (:class:`~toolrelay.store.ClaimingStore`), a live tail
    across processes (:class:`~toolrelay.store.TailingStore`), one feed of every
    process's commits (:class:`~toolrelay.store.NotifyingStore`) and an inbox per
    thread for the worker holding it (:class:`~toolrelay.store.InboxStore`). Needs the
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
        self.inbox_channel = f"toolrelay_{schema}_inbox"
        where = params.get("host", "") or "localhost"
        self._label = f"{where}:{params.get('port', 5432)}/{params.get('dbname', '')}"
        self._lock_id = int.from_bytes(
            hashlib.blake2b(f"toolrelay:{schema}".encode(), digest_size=8).digest(),
            "big",
            signed=True,
        )
        self._pool: Pool | None = None
        self._limiter = anyio.CapacityLimiter(pool_size)
        self._opening = threading.Lock()
        #: How many times :meth:`aclose` was called (see :meth:`_open`).
        self._closes = 0

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
            raise store_error(exc, f"cannot connect to {self._label}") from exc
        try:
            timeout_ms = max(1, round(self.idle_in_transaction_timeout * 1000))
            connection.execute(
                f"SET search_path TO {self.schema}; "
                f"SET idle_in_transaction_session_timeout = {timeout_ms}"
            )
        except psycopg.Error as exc:
            connection.close()
            raise store_error(exc, f"cannot prepare a connection to {self._label}") from exc
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
                    pool.give_after_failure(connection)
                    if broken and tries_left:
                        continue
                    raise store_error(exc, doing) from exc
                except BaseException:
                    pool.give_after_failure(connection)
                    raise
                pool.give(connection)
                return result
            raise AssertionError("unreachable")  # pragma: no cover

        return await anyio.to_thread.run_sync(attempt, limiter=self._limiter)

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
            await anyio.to_thread.run_sync(self._open, self._closes, limiter=self._limiter)

    def _open(self, closes: int) -> None:
        """Connect and migrate (in a worker thread); ``closes`` is how many times the
        store was closed when the open began: if it was closed since, the store stays
        closed."""
        with self._opening:
            if self._pool is not None:
                return
            connection = self._connect()
            try:
                migrate(connection, schema=self.schema, lock_id=self._lock_id, label=self._label)
            except psycopg.Error as exc:
                raise store_error(exc, f"cannot open the store on {self._label}") from exc
            finally:
                connection.close()
            if closes == self._closes:
                self._pool = Pool(self._connect)

    async def aclose(self) -> None:
        """Close the pool's connections; idempotent (the store can be opened again)."""
        # Counted before anything is awaited: an open under way sees it (see _open).
        self._closes += 1
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
            **key_parameters(key),
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
        check_append(key, records, claim)
        parameters = self._append_parameters(key, records, owner)
        doing = f"cannot write to {self._label}"
        if claim is None:

            def write(connection: psycopg.Connection[Any]) -> int:
                row = connection.execute(_APPEND, parameters).fetchone()
                assert row is not None
                return int(row[0])

            return await self._run(write, doing)

        def write_claimed(connection: psycopg.Connection[Any]) -> int:
            check_fence(connection, key, claim)
            row = connection.execute(_APPEND, parameters).fetchone()
            assert row is not None
            return int(row[0])

        return await self._run(write_claimed, doing, transaction=True)

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
        :meth:`append` is: the append first (it locks the thread's row), then, in the
        same transaction, the records numbered before it, which every writer before it
        committed."""
        check_append(key, records, claim)
        parameters = self._append_parameters(key, records, owner)
        count = len(records)
        label = self._label

        def write(connection: psycopg.Connection[Any]) -> tuple[list[Entry], int]:
            if claim is not None:
                check_fence(connection, key, claim)
            row = connection.execute(_APPEND, parameters).fetchone()
            assert row is not None
            last = int(row[0])
            if last == count:
                return [], last  # (its append made the thread)
            rows = connection.execute(
                "SELECT r.seq, r.body FROM records r JOIN threads t ON r.thread = t.id "
                "WHERE t.server = %(server)s AND t.room = %(room)s "
                "AND t.thread = %(thread)s AND r.seq <= %(before)s ORDER BY r.seq",
                {**key_parameters(key), "before": last - count},
            ).fetchall()
            try:
                return [Entry(int(seq), decode_record(bytes(body))) for seq, body in rows], last
            except ValueError as exc:  # rolled back: nothing written
                raise StoreCorruptError(
                    f"{label}: a record of {key} cannot be read ({exc})"
                ) from exc

        return await self._run(write, f"cannot write to {label}", transaction=True)

    async def read(
        self,
        key: ThreadKey,
        *,
        after: int = 0,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> list[Entry]:
        def read(connection: psycopg.Connection[Any]) -> list[tuple[int, bytes]]:
            if max_bytes is None:
                return connection.execute(
                    "SELECT r.seq, r.body FROM records r JOIN threads t ON r.thread = t.id "
                    "WHERE t.server = %(server)s AND t.room = %(room)s "
                    "AND t.thread = %(thread)s AND r.seq > %(after)s "
                    "ORDER BY r.seq LIMIT %(limit)s",
                    {**key_parameters(key), "after": after, "limit": limit},
                ).fetchall()
            # The server sums the bodies' sizes (octet_length reads a stored value's
            # size, not the value), so the rows past the budget never leave it; the
            # sum runs over the page's rows alone (the limit is taken first), never
            # over the rest of the thread's log.
            return connection.execute(
                "SELECT seq, body FROM ("
                "SELECT seq, body, sum(octet_length(body)) OVER (ORDER BY seq) "
                "- octet_length(body) AS before FROM ("
                "SELECT r.seq, r.body FROM records r JOIN threads t ON r.thread = t.id "
                "WHERE t.server = %(server)s AND t.room = %(room)s "
                "AND t.thread = %(thread)s AND r.seq > %(after)s "
                "ORDER BY r.seq LIMIT %(limit)s) rows) page "
                "WHERE before = 0 OR before + octet_length(body) <= %(max_bytes)s "
                "ORDER BY seq",
                {**key_parameters(key), "after": after, "limit": limit, "max_bytes": max_bytes},
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
                f"SELECT {THREAD_COLUMNS} FROM threads WHERE {KEY}", key_parameters(key)
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
                f"SELECT {THREAD_COLUMNS} FROM threads{clause} ORDER BY id",
                {"owner": owner},
            ).fetchall()

        return [_info(row) for row in await self._run(read, f"cannot read {self._label}")]

    async def delete_thread(self, key: ThreadKey) -> bool:
        def delete(connection: psycopg.Connection[Any]) -> bool:
            cursor = connection.execute(f"DELETE FROM threads WHERE {KEY}", key_parameters(key))
            return cursor.rowcount > 0

        return await self._run(delete, f"cannot delete from {self._label}")

    # -- claims (toolrelay.store.ClaimingStore) ------------------------------------------

    async def claim(self, key: ThreadKey, *, worker: str, lease: float) -> Claim | None:
        parameters = {**key_parameters(key), "worker": worker, "lease": check_lease(lease)}
        take = functools.partial(take_claim, parameters=parameters)
        return await self._run(take, f"cannot claim on {self._label}", transaction=True)

    async def claim_next(self, *, worker: str, lease: float, limit: int = 1) -> list[Claim]:
        if limit < 1:
            raise ValueError("limit must be at least 1")
        parameters = {"worker": worker, "lease": check_lease(lease), "limit": limit}
        take = functools.partial(take_next_claims, parameters=parameters)
        return await self._run(take, f"cannot claim on {self._label}")

    async def renew(self, claim: Claim, *, lease: float) -> Claim:
        extend = functools.partial(renew_claim, claim=claim, lease=check_lease(lease))
        return await self._run(extend, f"cannot renew a claim on {self._label}")

    async def release(self, claim: Claim) -> bool:
        drop = functools.partial(release_claim, claim=claim)
        return await self._run(drop, f"cannot release a claim on {self._label}")

    # -- the inbox (toolrelay.store.InboxStore) ------------------------------------------

    async def post(
        self, key: ThreadKey, kind: LetterKind, body: bytes, *, limit: int, max_age: float
    ) -> bool:
        if limit < 1 or not 0 < max_age < 1e9:
            raise ValueError("limit and max_age must be positive")
        parameters = {
            **key_parameters(key),
            "kind": kind,
            "body": body,
            "limit": limit,
            "max_age": float(max_age),
            "channel": self.inbox_channel,
        }
        send = functools.partial(post_letter, parameters=parameters)
        return await self._run(send, f"cannot post to {self._label}", transaction=True)

    async def collect(self, claim: Claim, *, max_age: float) -> list[Letter]:
        take = functools.partial(collect_letters, claim=claim, max_age=float(max_age))
        return await self._run(take, f"cannot collect from {self._label}", transaction=True)

    async def answer(self, ticket: str, verdict: str) -> None:
        if " " in verdict or " " in ticket:
            raise ValueError("a ticket and a verdict are single words")

        def notify(connection: psycopg.Connection[Any]) -> None:
            connection.execute(
                "SELECT pg_notify(%s, %s)", (self.inbox_channel, f"answer {ticket} {verdict}")
            )

        await self._run(notify, f"cannot answer on {self._label}")

    # -- the live tail (toolrelay.store.TailingStore) ------------------------------------

    def _listener(self, *, inbox: bool = False) -> Listener:
        return Listener(
            self._connect,
            channels=(self.channel, self.inbox_channel) if inbox else (self.channel,),
            connect_timeout=self.connect_timeout,
            label=repr(self),
        )

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
        listener = self._listener()
        await listener.connect()
        entries = self._follow(key, after, poll, batch, listener)
        try:
            yield entries
        finally:
            with anyio.CancelScope(shield=True):
                await entries.aclose()  # never left to the garbage collector
                await listener.close()

    async def _follow(
        self, key: ThreadKey, after: int, poll: float, batch: int, listener: Listener
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
            reconnected = await listener.wait(thread_id, last, poll)
            if reconnected:
                thread_id = None

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
        return self._commits_only()

    def notices(self) -> AbstractAsyncContextManager[AsyncIterator[Notice]]:
        """:meth:`commits`, and on the same connection the inbox's notices: a letter
        posted to a thread (:class:`~toolrelay.store.Posted`) and a letter answered
        (:class:`~toolrelay.store.Answered`). ``None`` when some may have been missed:
        read every thread again, and look in the inboxes of the threads held.

        Raises:
            StoreUnavailableError: As :meth:`commits`.
        """
        return self._commits(inbox=True)

    @asynccontextmanager
    async def _commits_only(
        self,
    ) -> AsyncIterator[AsyncIterator[tuple[ThreadKey, int] | None]]:
        async with self._commits(inbox=False) as notices:
            commits = _only_commits(notices)
            try:
                yield commits
            finally:
                with anyio.CancelScope(shield=True):
                    await commits.aclose()

    @asynccontextmanager
    async def _commits(self, *, inbox: bool) -> AsyncIterator[AsyncIterator[Notice]]:
        listener = self._listener(inbox=inbox)
        await listener.connect()
        notices = self._notified(listener)
        try:
            yield notices
        finally:
            with anyio.CancelScope(shield=True):
                await notices.aclose()
                await listener.close()

    async def _notified(self, listener: Listener) -> AsyncGenerator[Notice, None]:
        keys: dict[int, ThreadKey] = {}
        while True:
            payloads = await listener.receive()
            if payloads is None:
                yield None  # the connection was made again: commits may have been missed
                continue
            # (thread row id, sequence number: 0 for a letter posted), or an answer.
            notices: list[tuple[int, int] | Answered] = []
            for payload in payloads:
                notice = _notice(payload)
                if notice is not None:
                    notices.append(notice)
            unknown = {n[0] for n in notices if isinstance(n, tuple) and n[0] not in keys}
            if unknown:
                if len(keys) > 100_000:  # row ids of deleted threads never come back
                    keys.clear()
                keys.update(await self._keys_of(sorted(unknown)))
            for notice in notices:
                if isinstance(notice, Answered):
                    yield notice
                    continue
                thread, seq = notice
                key = keys.get(thread)
                if key is not None:  # else deleted since
                    yield (key, seq) if seq else Posted(key)

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
            row = connection.execute(
                f"SELECT id FROM threads WHERE {KEY}", key_parameters(key)
            ).fetchone()
            return None if row is None else int(row[0])

        return await self._run(find, f"cannot read {self._label}", retry=True)


async def _only_commits(
    notices: AsyncIterator[Notice],
) -> AsyncGenerator[tuple[ThreadKey, int] | None, None]:
    """The commits of a feed listening on the commit channel alone."""
    async for notice in notices:
        if notice is None or isinstance(notice, tuple):
            yield notice


def _notice(payload: bytes) -> tuple[int, int] | Answered | None:
    """A notification's meaning: ``(thread row id, seq)`` of a commit, ``(thread row
    id, 0)`` of a letter posted, an answer; ``None`` for one that is not ours."""
    parts = payload.decode("utf-8", "replace").split(" ")
    try:
        if len(parts) == 2 and parts[0] == "post":
            return int(parts[1]), 0
        if len(parts) == 3 and parts[0] == "answer":
            return Answered(parts[1], parts[2])
        if len(parts) == 2:
            return int(parts[0]), int(parts[1])
    except ValueError:
        pass
    return None


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
