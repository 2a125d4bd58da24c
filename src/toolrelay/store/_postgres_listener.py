"""A ``LISTEN`` connection of the PostgreSQL store, waited on with anyio.

Every append sends ``pg_notify`` with ``"<thread row id> <last seq>"`` (delivered at
commit only); the inbox has a channel of its own (``_postgres_inbox``). A tail and the
commit feed each hold one :class:`Listener`, on the channels they need; when its
connection is lost it makes it again, and says so, since what was notified meanwhile
is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import anyio
import anyio.to_thread
import psycopg

from toolrelay._errors import StoreUnavailableError
from toolrelay.store._postgres_pool import store_error

__all__ = ("Listener",)


class Listener:
    """One ``LISTEN`` connection: waited on with anyio, reconnected when lost.

    Args:
        connect: Makes a new connection to the store's schema.
        channels: The channels to listen on (notifications of every one of them
            come in the order they were sent).
        connect_timeout: Seconds to keep trying to make a lost connection again.
        label: The store, for error messages.
    """

    def __init__(
        self,
        connect: Callable[[], psycopg.Connection[Any]],
        *,
        channels: Sequence[str],
        connect_timeout: float,
        label: str,
    ) -> None:
        self._connect = connect
        self._channels = tuple(channels)
        self._connect_timeout = connect_timeout
        self._label = label
        self._connection: psycopg.Connection[Any] | None = None

    def _listen(self) -> psycopg.Connection[Any]:
        connection = self._connect()
        try:
            for channel in self._channels:
                connection.execute(f'LISTEN "{channel}"')
        except psycopg.Error as exc:
            connection.close()
            raise store_error(exc, "cannot listen for new records") from exc
        return connection

    async def connect(self) -> None:
        """Make the connection and ``LISTEN``.

        Raises:
            StoreUnavailableError: The server cannot be reached.
        """
        self._connection = await anyio.to_thread.run_sync(self._listen)

    async def _reconnect(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None
        with anyio.move_on_after(self._connect_timeout) as scope:
            while True:
                try:
                    await self.connect()
                    return
                except StoreUnavailableError:
                    await anyio.sleep(0.1)
        if scope.cancelled_caught:
            raise StoreUnavailableError(
                f"{self._label}: the tail lost its connection and cannot make it again"
            )

    async def wait(self, thread_id: int | None, last: int, poll: float) -> bool:
        """Wait for a notification naming thread ``thread_id`` past ``last`` (any, when
        ``thread_id`` is None), for the connection to be made again, or ``poll`` seconds.

        Returns:
            Whether the connection was lost and made again (notifications may be lost).

        Raises:
            StoreUnavailableError: The connection was lost and cannot be made again
                within ``connect_timeout``.
        """
        with anyio.move_on_after(poll):
            while True:
                payloads = await self.receive()
                if payloads is None:
                    return True
                if any(_names(payload, thread_id, last) for payload in payloads):
                    return False
        return False

    async def receive(self) -> list[bytes] | None:
        """The payloads of the next notifications, waiting for at least one.

        Returns:
            The payloads, in the order sent; None when the connection was lost and made
            again (what was notified meanwhile is lost).

        Raises:
            StoreUnavailableError: The connection was lost and cannot be made again
                within ``connect_timeout``.
        """
        while True:
            connection = self._connection
            if connection is None:
                await self._reconnect()
                return None
            payloads: list[bytes] = []
            try:
                connection.pgconn.consume_input()
                while (note := connection.pgconn.notifies()) is not None:
                    payloads.append(note.extra)
            except psycopg.Error:
                await self._reconnect()
                return None
            if payloads:
                return payloads
            await anyio.wait_readable(connection.fileno())

    async def close(self) -> None:
        """Close the connection; idempotent."""
        connection, self._connection = self._connection, None
        if connection is not None:
            await anyio.to_thread.run_sync(connection.close)


def _names(payload: bytes, thread_id: int | None, last: int) -> bool:
    """Whether a notification (``"<thread row id> <seq>"``) is news for a tail."""
    try:
        thread, seq = (int(part) for part in payload.split(b" "))
    except ValueError:
        return True
    return thread_id is None or (thread == thread_id and seq > last)
