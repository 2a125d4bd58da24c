"""The PostgreSQL store's schema: its tables, the SQL fragments that address them, and
the migrations that build them.

Every table lives in one schema (``toolrelay`` by default). ``schema_version`` holds
one row per applied migration. :func:`migrate` reads it; when a migration is due it
takes an advisory lock (one per schema), reads it again and migrates in one
transaction, so workers that start together migrate once. A newer version is refused
(:class:`~toolrelay.StoreVersionError`), tables of ours in a schema with no
version are another application's (:class:`~toolrelay.StoreCorruptError`).
"""

from __future__ import annotations

from typing import Any

import psycopg

from toolrelay._core import ThreadKey
from toolrelay._errors import StoreCorruptError, StoreVersionError

__all__ = (
    "KEY",
    "NOW",
    "POSTGRES_SCHEMA_VERSION",
    "THREAD_COLUMNS",
    "key_parameters",
    "migrate",
)

#: The schema version this toolrelay writes on PostgreSQL.
POSTGRES_SCHEMA_VERSION = 2

#: The database's clock, in seconds since the epoch (times never come from a worker).
NOW = "extract(epoch FROM clock_timestamp())::float8"

#: The columns of a thread's row, in the order :class:`~toolrelay.store.ThreadInfo` reads.
THREAD_COLUMNS = "server, room, thread, owner, last_seq, live_turn, created_at, updated_at"

#: A thread's key as a ``WHERE`` condition (parameters from :func:`key_parameters`).
KEY = "server = %(server)s AND room = %(room)s AND thread = %(thread)s"

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
    # The inbox: requests for the worker that holds a thread (``_postgres_inbox``).
    2: (
        """CREATE TABLE inbox (
            id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            thread bigint NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
            kind text NOT NULL,
            body bytea NOT NULL,
            posted_at float8 NOT NULL
        )""",
        "CREATE INDEX inbox_thread ON inbox (thread, id)",
        "CREATE INDEX inbox_posted ON inbox (posted_at)",
    ),
}

_OUR_TABLES = ("threads", "records", "claims", "inbox")


def key_parameters(key: ThreadKey) -> dict[str, Any]:
    """The parameters :data:`KEY` names, for ``key``."""
    return {"server": key.server, "room": key.room_id, "thread": key.thread_id}


def migrate(connection: psycopg.Connection[Any], *, schema: str, lock_id: int, label: str) -> None:
    """Bring ``schema`` to :data:`POSTGRES_SCHEMA_VERSION`, creating it on first use.

    Args:
        connection: An autocommit connection whose ``search_path`` is ``schema``.
        schema: The store's schema.
        lock_id: The advisory lock that serialises the schema's migrators.
        label: Where the store is, for error messages.

    Raises:
        StoreCorruptError: The schema holds tables of ours with no version.
        StoreVersionError: A newer toolrelay wrote it.
        psycopg.Error: The driver failed (the caller translates it).
    """
    version = _version(connection, schema)
    if version == POSTGRES_SCHEMA_VERSION:
        return
    _check_version(version, schema, label)
    # One migrator per schema at a time; the others wait, then find it done. The
    # lock is the session's, taken before the transaction: a transaction that
    # began before the wait would still see the catalog as it was then.
    connection.execute("SELECT pg_advisory_lock(%s)", (lock_id,))
    try:
        with connection.transaction():
            version = _version(connection, schema)
            _check_version(version, schema, label)
            if version is None:
                for table in _OUR_TABLES:
                    row = connection.execute(
                        "SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.{table}",)
                    ).fetchone()
                    if row and row[0]:
                        raise StoreCorruptError(
                            f"{label}: schema {schema!r} has a {table!r} table "
                            "but no toolrelay schema version: not a toolrelay store"
                        )
                exists = connection.execute(
                    "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
                ).fetchone()
                if not exists:
                    connection.execute(f"CREATE SCHEMA {schema}")
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
                connection.execute("INSERT INTO schema_version (version) VALUES (%s)", (target,))
    finally:
        if not connection.broken:
            connection.execute("SELECT pg_advisory_unlock(%s)", (lock_id,))


def _version(connection: psycopg.Connection[Any], schema: str) -> int | None:
    row = connection.execute(
        "SELECT to_regclass(%s) IS NOT NULL", (f"{schema}.schema_version",)
    ).fetchone()
    if not row or not row[0]:
        return None
    found = connection.execute("SELECT max(version) FROM schema_version").fetchone()
    return int(found[0]) if found and found[0] is not None else 0


def _check_version(version: int | None, schema: str, label: str) -> None:
    if version is not None and version > POSTGRES_SCHEMA_VERSION:
        raise StoreVersionError(
            f"{label}: schema {schema!r} has version {version}, newer than "
            f"this toolrelay's {POSTGRES_SCHEMA_VERSION}: upgrade toolrelay to open it"
        )
