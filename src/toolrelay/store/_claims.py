"""Optional store capabilities for several workers sharing one store: claims and a tail.

A plain :class:`~toolrelay.store.Store` serves one process. A store that several
worker processes share also offers the capabilities below; the engine and the server
look for them with ``isinstance`` and run alone without them.
:class:`~toolrelay.store.PostgresStore` offers both;
:class:`~toolrelay.store.SQLiteStore` offers claims (worker processes of one machine
sharing its file, timed by that machine's clock) but no tail;
:class:`~toolrelay.store.MemoryStore` neither.

A claim gives a thread to one worker for a lease and carries a fencing token that
every write of that worker checks, so a worker that paused past its lease cannot
write. The five rules an implementation keeps (referred to as rule 1 to 5 below and in
the stores) are in docs/concepts.md, "Claims and fencing"; why the tail reads from the
last sequence it yielded, whatever the notifications say, is in "The live tail".
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Protocol, runtime_checkable

import anyio
import msgspec

from toolrelay._core import ThreadKey
from toolrelay._errors import StaleClaimError, StoreError
from toolrelay.store._contract import Entry, Store
from toolrelay.store._forwarding import ForwardingStore, read_and_append
from toolrelay.store._records import Record

__all__ = (
    "Claim",
    "ClaimingStore",
    "FencedStore",
    "Held",
    "NotifyingStore",
    "TailingStore",
    "check_append",
    "hold",
)


class Claim(msgspec.Struct, frozen=True, kw_only=True):
    """One worker's hold on one thread.

    Attributes:
        key: The thread.
        worker: Who holds it (a name the worker chose: host and pid, say).
        token: The fencing token: larger than every token the store gave before.
        expires_at: When the lease ends unless renewed (seconds since the epoch, by
            the store's clock, which is the one that decides).
    """

    key: ThreadKey
    worker: str
    token: int
    expires_at: float


def check_append(key: ThreadKey, records: Sequence[Record], claim: Claim | None = None) -> None:
    """What every store refuses before it writes: no records, a claim for another thread.

    Raises:
        ValueError: ``records`` is empty, or ``claim`` is for another thread.
    """
    if not records:
        raise ValueError("append needs at least one record")
    if claim is not None and claim.key != key:
        raise ValueError(f"the claim is for {claim.key}, not {key}")


@runtime_checkable
class ClaimingStore(Store, Protocol):
    """A store several workers share, handing each thread to one of them at a time."""

    async def append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> int:
        """:meth:`Store.append`, refused when ``claim`` is given and no longer valid.

        Raises:
            StaleClaimError: ``claim`` expired or another worker took the thread;
                nothing was written. Stop working on the thread.
            StoreError: Nothing was written.
        """
        ...

    async def claim(self, key: ThreadKey, *, worker: str, lease: float) -> Claim | None:
        """Take the thread for ``lease`` seconds, or ``None`` if it has a valid claim
        (also one of ``worker``'s own: renew that one instead)."""
        ...

    async def claim_next(self, *, worker: str, lease: float, limit: int = 1) -> list[Claim]:
        """Take up to ``limit`` threads that have a live turn and no valid claim
        (a dead worker's, once its lease expired), oldest first; ``[]`` if none."""
        ...

    async def renew(self, claim: Claim, *, lease: float) -> Claim:
        """Extend a valid claim to ``lease`` seconds from now (the heartbeat).

        Raises:
            StaleClaimError: The claim expired or was taken over.
        """
        ...

    async def release(self, claim: Claim) -> bool:
        """Give the thread up (its turn ended, or the worker stops); ``False`` if the
        claim was no longer the thread's."""
        ...


@runtime_checkable
class TailingStore(Store, Protocol):
    """A store whose appends, by any process, reach a live reader."""

    def tail(
        self, key: ThreadKey, *, after: int = 0
    ) -> AbstractAsyncContextManager[AsyncIterator[Entry]]:
        """Every record of the thread after ``after``, then each new one as it is
        committed, in order, once each (``async with store.tail(key) as entries:``)."""
        ...


@runtime_checkable
class NotifyingStore(Store, Protocol):
    """A store that tells one listener about every commit, by any process."""

    def commits(self) -> AbstractAsyncContextManager[AsyncIterator[tuple[ThreadKey, int] | None]]:
        """``(thread, last sequence number)`` of each commit any process makes, from
        now on; ``None`` when some may have been missed (read every thread again).
        ``async with store.commits() as commits:``."""
        ...


class Held:
    """A claim kept alive by :func:`hold`: :attr:`claim` is the latest renewal."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim
        #: Set when a renewal was refused: the work was cancelled.
        self.lost: StaleClaimError | None = None


@asynccontextmanager
async def hold(
    store: ClaimingStore, claim: Claim, *, lease: float, every: float | None = None
) -> AsyncIterator[Held]:
    """Renew ``claim`` every ``every`` seconds (a third of ``lease`` by default) while
    the body works, and release it at the end.

    The body writes with ``held.claim``. When a renewal is refused (the worker was
    paused past its lease and another took the thread), the body is cancelled and
    :class:`~toolrelay.StaleClaimError` leaves the block; a write the body
    makes with the stale claim is refused the same way.

    Raises:
        StaleClaimError: The claim was lost while the body ran.
    """
    if not (lease > 0 and math.isfinite(lease)):
        raise ValueError(f"lease must be a positive number of seconds, not {lease!r}")
    interval = lease / 3 if every is None else every
    held = Held(claim)
    failure: BaseException | None = None
    async with anyio.create_task_group() as group:

        async def heartbeat() -> None:
            while True:
                await anyio.sleep(interval)
                try:
                    held.claim = await store.renew(held.claim, lease=lease)
                except StaleClaimError as exc:
                    held.lost = exc
                    group.cancel_scope.cancel()
                    return

        group.start_soon(heartbeat)
        try:
            yield held
        except BaseException as exc:
            # Raised after the task group, as itself (not in an exception group).
            failure = exc
        finally:
            group.cancel_scope.cancel()
    if held.lost is not None:
        raise held.lost  # the body was cancelled by the heartbeat: this is why
    # Let another worker take the thread at once (the lease would expire anyway).
    with anyio.CancelScope(shield=True), contextlib.suppress(StoreError):
        await store.release(held.claim)
    if failure is not None:
        raise failure


class FencedStore(ForwardingStore[ClaimingStore]):
    """A :class:`ClaimingStore` whose writes carry this worker's claims by themselves.

    Give it to code that writes without knowing about claims (the engine): the
    worker claims a thread and runs its turn inside :meth:`holding`, and every
    ``append`` to that thread carries the claim, so a write made after the claim was
    lost raises :class:`~toolrelay.StaleClaimError` and lands nowhere. An
    append to a thread this worker does not hold is refused the same way (a
    multi-worker server writes under claims only). Everything else is the wrapped
    store's.

    Args:
        store: The shared store.
        worker: This worker's name, given to its claims.
        lease: The lease of the claims it takes, in seconds (renewed every third).
    """

    def __init__(self, store: ClaimingStore, *, worker: str, lease: float = 15.0) -> None:
        if not (lease > 0 and math.isfinite(lease)):
            raise ValueError(f"lease must be a positive number of seconds, not {lease!r}")
        super().__init__(store)
        self.worker = worker
        self.lease = lease
        self._held: dict[ThreadKey, Held] = {}

    def __repr__(self) -> str:
        return f"FencedStore({self.store!r}, worker={self.worker!r}, held={len(self._held)})"

    @asynccontextmanager
    async def holding(self, claim: Claim) -> AsyncIterator[Held]:
        """Keep ``claim`` renewed while the body works, and make it the one this
        store's appends to its thread carry; released at the end.

        Raises:
            StaleClaimError: The claim was lost (the body was cancelled), or a write
                under it was refused.
            ValueError: This worker already holds that thread.
        """
        if claim.key in self._held:
            raise ValueError(f"{claim.key} is already held by this worker")
        async with hold(self.store, claim, lease=self.lease) as held:
            self._held[claim.key] = held
            try:
                yield held
            finally:
                del self._held[claim.key]

    def held(self, key: ThreadKey) -> Claim | None:
        """The claim this worker holds on ``key`` now, if any."""
        holding = self._held.get(key)
        return None if holding is None else holding.claim

    async def append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> int:
        return await self.store.append(key, records, owner=owner, claim=self._fence(key, claim))

    async def read_and_append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> tuple[list[Entry], int]:
        """:meth:`~toolrelay.store.ReadAppendStore.read_and_append` under this
        worker's claim, in one round trip where the shared store can (the SQLite and
        PostgreSQL stores take ``claim`` there too), else a read, then a fenced append."""
        claim = self._fence(key, claim)
        return await read_and_append(self.store, key, records, owner=owner, claim=claim)

    def _fence(self, key: ThreadKey, claim: Claim | None) -> Claim:
        """The claim a write to ``key`` carries: the one given, or this worker's."""
        claim = claim or self.held(key)
        if claim is None:
            raise StaleClaimError(f"{key} is not held by worker {self.worker!r}: not written")
        return claim

    async def claim(
        self, key: ThreadKey, *, worker: str | None = None, lease: float | None = None
    ) -> Claim | None:
        return await self.store.claim(key, worker=worker or self.worker, lease=lease or self.lease)

    async def claim_next(
        self, *, worker: str | None = None, lease: float | None = None, limit: int = 1
    ) -> list[Claim]:
        return await self.store.claim_next(
            worker=worker or self.worker, lease=lease or self.lease, limit=limit
        )

    async def renew(self, claim: Claim, *, lease: float | None = None) -> Claim:
        return await self.store.renew(claim, lease=lease or self.lease)

    async def release(self, claim: Claim) -> bool:
        return await self.store.release(claim)
