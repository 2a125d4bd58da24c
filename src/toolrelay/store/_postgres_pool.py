"""The PostgreSQL store's connections: the pool of idle ones, and the error boundary.

Connections are synchronous psycopg connections driven from anyio worker threads, so
the store serves asyncio and trio alike. :class:`Pool` keeps idle connections for one
thread at a time (the store's capacity limiter bounds the threads). Before an idle
connection is used again it is polled: a server that restarted (``pg_ctl restart``)
or closed it left it readable, and it is dropped instead of failing the next
operation.
"""

from __future__ import annotations

import select
import threading
from collections.abc import Callable
from typing import Any

import psycopg
import psycopg.errors

from toolrelay._errors import StoreCorruptError, StoreError, StoreUnavailableError

__all__ = ("Pool", "store_error")


def store_error(exc: psycopg.Error, doing: str) -> StoreError:
    """The typed error for a driver's exception (the store's one boundary)."""
    text = str(exc).strip() or type(exc).__name__
    if isinstance(exc, psycopg.errors.DataCorrupted | psycopg.errors.IndexCorrupted):
        return StoreCorruptError(f"{doing}: the database is damaged ({text})")
    if isinstance(exc, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedColumn):
        return StoreCorruptError(f"{doing}: the store's schema is damaged ({text})")
    return StoreUnavailableError(f"{doing}: {text}")


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


class Pool:
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

    def give_after_failure(self, connection: psycopg.Connection[Any]) -> None:
        """Return a connection after a failure: rolled back, or closed if that fails."""
        if not connection.broken and not connection.closed:
            try:
                if connection.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    connection.execute("ROLLBACK")
            except psycopg.Error:
                connection.close()
        self.give(connection)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()
