"""The store contract: what every durable store does, whatever it is built on.

A store keeps threads and, per thread, an append-only log of :data:`Record`s. The
rules every implementation keeps (and :class:`toolrelay.testing.StoreContract`
checks):

1. ``append`` writes its records in one transaction: all of them or none.
2. Sequence numbers are per thread, start at 1 and grow by one per record. A number
   is given when its transaction commits, so it never goes back and is never given
   to two records, also when a write fails half-way (reference 004's
   ``maxBlockSequence``): what failed was never seen.
3. ``read(key, after=N)`` returns every record after ``N``, in order; ``limit``
   and ``max_bytes`` cut that at its end (never before its first record).
4. A thread is created by its first append, with the owner given then; its owner
   does not change afterwards.
5. A thread's *live turn* is the last ``TurnStarted`` with no ``TurnEnded`` of the
   same id after it; ``threads(live=True)`` lists the threads that have one (what
   recovery resumes).
6. Failures are typed: :class:`~toolrelay.StoreError` and its subclasses,
   never a driver's exception.
7. Optional: a store whose class sets ``ordered_cancellation = True`` promises that an
   append cancelled while it waits wrote all of its records or none, and that the
   next call on the store already sees which (its work runs in order, or its append
   never waits). The engine then writes without shielding each append from the
   turn's cancellation, and after a cancelled one reads the thread's tail to learn
   whether it landed; any other store's appends are shielded, so they finish. The
   embedded stores set it; :class:`toolrelay.testing.store_contract.OrderedCancellationContract`
   checks it.
8. Optional: a :class:`ReadAppendStore` reads a thread's whole log and appends after
   it in one call (one round trip, one transaction), what the engine's first write
   to a thread it does not hold needs. The log it returns is exactly what ``read``
   would have returned just before the append: nothing more, nothing less. A store
   that also takes claims (:class:`~toolrelay.store.ClaimingStore`) takes ``claim=``
   there too, refused as its ``append`` refuses it. The embedded stores and
   PostgreSQL offer it;
   :class:`toolrelay.testing.store_contract.ReadAppendContract` checks it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

import msgspec

from toolrelay._core import ThreadKey
from toolrelay.store._records import Record, TurnEnded, TurnStarted

__all__ = ("Entry", "ReadAppendStore", "Store", "ThreadInfo", "live_turn_after")


class Entry(msgspec.Struct, frozen=True):
    """One record of a thread's log with its sequence number."""

    seq: int
    record: Record


class ThreadInfo(msgspec.Struct, frozen=True, kw_only=True):
    """What a store knows of a thread without reading its log.

    Attributes:
        key: The thread.
        owner: The principal that created it (``None``: no owner given).
        last_seq: The sequence number of its last record (0: none).
        live_turn: The id of its live turn, if it has one (rule 5).
        created_at: When its first record was written (seconds since the epoch).
        updated_at: When its last record was written.
    """

    key: ThreadKey
    owner: str | None
    last_seq: int
    live_turn: str | None
    created_at: float
    updated_at: float


@runtime_checkable
class Store(Protocol):
    """A durable home for threads and their logs (see the module's rules)."""

    async def open(self) -> None:
        """Make the store ready (create it, check and migrate its schema); idempotent.

        Raises:
            StoreCorruptError: It is not a toolrelay store, or it is damaged.
            StoreVersionError: A newer toolrelay wrote it.
            StoreUnavailableError: It cannot be opened (permissions, locks, I/O).
        """
        ...

    async def aclose(self) -> None:
        """Release the store's resources; idempotent. It can be opened again."""
        ...

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        """Write ``records`` at the end of the thread's log, in one transaction.

        Args:
            key: The thread; created by this write if it has no log yet.
            records: What to write, in order (at least one).
            owner: The principal to record if the write creates the thread.

        Returns:
            The sequence number of the last record written.

        Raises:
            StoreError: Nothing was written.
        """
        ...

    async def read(
        self,
        key: ThreadKey,
        *,
        after: int = 0,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> list[Entry]:
        """The thread's records after sequence ``after``, oldest first (at most
        ``limit``); empty for a thread the store does not have.

        With ``max_bytes``, the read also stops before a record that would take the
        stored bodies it returns past ``max_bytes``, but returns the first record
        whatever its size: what one read holds is bounded by bytes, not only by
        records (the caller reads on from the last one it got)."""
        ...

    async def thread(self, key: ThreadKey) -> ThreadInfo | None:
        """What the store knows of one thread, or ``None``."""
        ...

    async def threads(
        self, *, owner: str | None = None, live: bool | None = None
    ) -> list[ThreadInfo]:
        """The threads, oldest first, filtered by ``owner`` and by having a live turn."""
        ...

    async def delete_thread(self, key: ThreadKey) -> bool:
        """Remove a thread and its log; ``False`` if the store did not have it."""
        ...


@runtime_checkable
class ReadAppendStore(Store, Protocol):
    """A store that reads a thread and appends to it in one round trip (rule 8)."""

    async def read_and_append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> tuple[list[Entry], int]:
        """``read(key)`` and ``append(key, records, owner=owner)``, in one transaction.

        Returns:
            The thread's records before the append, oldest first (empty for a thread
            the append created), and the sequence number of the last record written.

        Raises:
            StoreError: Nothing was written (a record already stored that cannot be
                decoded is :class:`~toolrelay.StoreCorruptError`, and nothing is
                written either).
        """
        ...


def live_turn_after(current: str | None, records: Sequence[Record]) -> str | None:
    """The thread's live turn once ``records`` are appended to a log whose live turn
    is ``current`` (rule 5); the one place stores compute it."""
    for record in records:
        # (records are exactly their tagged types, no subclasses: ``type`` is the cheap
        # test, run for every record of every append)
        if type(record) is TurnStarted:
            current = record.turn_id
        elif type(record) is TurnEnded and record.turn_id == current:
            current = None
    return current
