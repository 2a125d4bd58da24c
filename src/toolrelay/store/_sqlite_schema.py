"""The SQLite store's file: opening it, saying what it is, and its schema's versions.

The file says what it is: ``PRAGMA application_id`` marks a toolrelay store and
``PRAGMA user_version`` is its schema version. At open, a file marked otherwise (or
holding another application's tables) is refused, a newer version is refused, and
an older one is migrated in one transaction.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from toolrelay._core import ThreadKey
from toolrelay._errors import (
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
    StoreVersionError,
)
from toolrelay.store._contract import ThreadInfo

__all__ = (
    "APPLICATION_ID",
    "LAST_SEQ",
    "SCHEMA_VERSION",
    "THREAD_COLUMNS",
    "THREAD_FIELDS",
    "connect",
    "sqlite_error",
    "thread_info",
)

#: ``PRAGMA application_id`` of a toolrelay store ("tlry").
APPLICATION_ID = 0x746C7279

#: The schema version this toolrelay writes.
SCHEMA_VERSION = 4

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
    # Records in the order they were written (a rowid), each thread's found through a
    # unique index. Clustered by (thread, seq), the rows of one group commit, a record
    # or two of each of hundreds of threads, landed on as many pages, each written
    # whole to the WAL at the commit; appended in order, they share a few.
    3: (
        """CREATE TABLE records_in_order (
            id INTEGER PRIMARY KEY,
            thread INTEGER NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
            seq INTEGER NOT NULL,
            body BLOB NOT NULL
        )""",
        "INSERT INTO records_in_order (thread, seq, body) "
        "SELECT thread, seq, body FROM records ORDER BY thread, seq",
        "DROP TABLE records",
        "ALTER TABLE records_in_order RENAME TO records",
        "CREATE UNIQUE INDEX records_thread_seq ON records (thread, seq)",
    ),
    # Each record says when it was written, so a thread's last sequence number and time
    # are its last record's (found through the unique index), and an append changes the
    # thread's row only when it changes the live turn. Moved by every append, the rows
    # of a group commit's hundreds of threads were as many page rewrites sent to the WAL.
    4: ("ALTER TABLE records ADD COLUMN at REAL",),
}

#: The columns a thread's row is created with. Its ``last_seq`` and ``updated_at`` are
#: as of its last live-turn change (and, for records written before schema 4, its last
#: append): :data:`THREAD_COLUMNS` reads the current ones from its records.
THREAD_FIELDS = "server, room, thread, owner, last_seq, live_turn, created_at, updated_at"

#: A thread's last sequence number (``FROM threads``): its last record's, through the
#: ``(thread, seq)`` index (the row's own if it has no record, as before schema 4).
LAST_SEQ = "coalesce((SELECT max(r.seq) FROM records r WHERE r.thread = threads.id), last_seq)"

#: A thread as :func:`thread_info` reads it (``FROM threads``): its last sequence
#: number and time from its last record, the row's time for records older than schema 4.
THREAD_COLUMNS = (
    f"server, room, thread, owner, {LAST_SEQ}, live_turn, created_at, "
    "coalesce((SELECT r.at FROM records r WHERE r.thread = threads.id "
    "ORDER BY r.seq DESC LIMIT 1), updated_at)"
)


def sqlite_error(exc: sqlite3.Error, doing: str) -> StoreError:
    """The typed error for a driver's exception (the store's one boundary)."""
    text = str(exc)
    lowered = text.lower()
    if "not a database" in lowered or "malformed" in lowered:
        return StoreCorruptError(f"{doing}: the file is not a usable SQLite database ({text})")
    return StoreUnavailableError(f"{doing}: {text}")


def connect(path: Path | str, *, timeout: float, durable: bool) -> sqlite3.Connection:
    """A connection to ``path`` (created on first use), checked and migrated, in WAL
    mode; ``durable`` asks for ``synchronous=FULL``. Blocks: call it in a worker thread.

    Raises:
        StoreCorruptError: The file is not a toolrelay store, or not a database.
        StoreVersionError: Its schema is newer than this toolrelay's.
        StoreUnavailableError: It cannot be opened or prepared.
    """
    try:
        connection = sqlite3.connect(
            str(path), timeout=timeout, isolation_level=None, check_same_thread=False
        )
    except sqlite3.Error as exc:
        raise sqlite_error(exc, f"cannot open {path}") from exc
    try:
        _prepare_patiently(connection, path, timeout, durable)
    except BaseException:
        connection.close()
        raise
    return connection


def _prepare_patiently(
    connection: sqlite3.Connection, path: Path | str, timeout: float, durable: bool
) -> None:
    """:func:`_prepare`, tried again while another process holds the new file's lock.
    Two connections preparing a new file at once can each hold what the other waits
    for (switching to WAL, creating the schema); SQLite then answers "locked" at once
    instead of waiting, so waiting is done here, up to ``timeout``."""
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            _prepare(connection, path, durable)
            return
        except StoreUnavailableError as exc:
            if "locked" not in str(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause)  # a worker thread: the event loop is not blocked
        pause = min(pause * 2, 0.1)


def _prepare(connection: sqlite3.Connection, path: Path | str, durable: bool) -> None:
    try:
        _, version = _identify(connection, path)
    except sqlite3.Error as exc:
        raise sqlite_error(exc, f"cannot read {path}") from exc
    try:
        if path != ":memory:":
            mode = connection.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise StoreUnavailableError(
                    f"{path}: cannot switch to WAL mode (journal mode {mode})"
                )
        connection.execute(f"PRAGMA synchronous={'FULL' if durable else 'NORMAL'}")
        connection.execute("PRAGMA foreign_keys=ON")
        if version < SCHEMA_VERSION:
            _migrate(connection, path)
    except sqlite3.Error as exc:
        raise sqlite_error(exc, f"cannot prepare {path}") from exc


def _identify(connection: sqlite3.Connection, path: Path | str) -> tuple[int, int]:
    """The file's application id and schema version, read in one transaction (so a
    process creating the schema meanwhile is seen whole or not at all); raises for a
    file that is not ours or is newer."""
    connection.execute("BEGIN")
    try:
        return _identity(connection, path)
    finally:
        connection.execute("COMMIT")


def _identity(connection: sqlite3.Connection, path: Path | str) -> tuple[int, int]:
    application = connection.execute("PRAGMA application_id").fetchone()[0]
    version = connection.execute("PRAGMA user_version").fetchone()[0]
    tables = connection.execute(
        "SELECT count(*) FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'"
    ).fetchone()[0]
    if application != APPLICATION_ID and (application != 0 or tables):
        raise StoreCorruptError(f"{path} is not a toolrelay store (another application's database)")
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"{path} has schema version {version}, newer than this toolrelay's "
            f"{SCHEMA_VERSION}: upgrade toolrelay to open it"
        )
    return int(application), int(version)


def _migrate(connection: sqlite3.Connection, path: Path | str) -> None:
    connection.execute("BEGIN IMMEDIATE")
    try:
        # Another process may have created or migrated the schema while this one
        # waited for the lock: look again, under it.
        _, current = _identity(connection, path)
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


def thread_info(row: tuple[object, ...]) -> ThreadInfo:
    """A thread as :data:`THREAD_COLUMNS` reads it, as the contract says it."""
    server, room, thread, owner, last_seq, live_turn, created_at, updated_at = row
    return ThreadInfo(
        key=ThreadKey(str(thread), str(room), str(server)),
        owner=None if owner is None else str(owner),
        last_seq=int(str(last_seq)),
        live_turn=None if live_turn is None else str(live_turn),
        created_at=float(str(created_at)),
        updated_at=float(str(updated_at)),
    )
