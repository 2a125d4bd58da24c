"""An optional capability of a shared store: requests handed to the worker holding a thread.

Several server processes share one store; a thread's live turn runs in the one that
claimed it. Two requests must reach that turn: a client's tool results and a cancel.
A process that takes one of them for a thread it does not hold *posts* it to the
thread's inbox (a row in the store, with a notification every process hears); the
holder *collects* the thread's letters under its claim and acts on them as on a local
request, then *answers* each by its ticket, so that the process that posted it can
tell its client what became of it. A process that claims a thread collects its
letters too (a holder that died after a letter came leaves it there).

Letters are bounded: a thread holds at most ``limit`` of them, and a letter older than
``max_age`` is dropped unread (no process held its thread in time). Stores that one
process uses alone (:class:`~toolrelay.store.MemoryStore`,
:class:`~toolrelay.store.SQLiteStore`) have no inbox: every request reaches the one
process there is. :class:`~toolrelay.store.PostgresStore` has one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import Literal, Protocol, TypeAlias, runtime_checkable

import msgspec

from toolrelay._core import ThreadKey
from toolrelay.store._claims import Claim, ClaimingStore, NotifyingStore

__all__ = ("Answered", "InboxStore", "Letter", "LetterKind", "Notice", "Posted")

#: What a letter asks of the turn: take the client's tool results, or end the turn.
LetterKind: TypeAlias = Literal["results", "cancel"]


class Letter(msgspec.Struct, frozen=True, kw_only=True):
    """A request posted for the worker holding a thread.

    Attributes:
        key: The thread.
        kind: What it asks (:data:`LetterKind`).
        body: What the poster wrote (the store does not read it).
        posted_at: When it was posted (seconds since the epoch, by the store's clock).
    """

    key: ThreadKey
    kind: LetterKind
    body: bytes
    posted_at: float


class Posted(msgspec.Struct, frozen=True):
    """A notice: a letter was posted to ``key``'s inbox."""

    key: ThreadKey


class Answered(msgspec.Struct, frozen=True):
    """A notice: the letter with ``ticket`` was acted on; ``verdict`` says how."""

    ticket: str
    verdict: str


#: What a store's notices carry: a commit ``(thread, last sequence number)``, a letter
#: posted, a letter answered; ``None`` when some may have been missed.
Notice: TypeAlias = tuple[ThreadKey, int] | Posted | Answered | None


@runtime_checkable
class InboxStore(ClaimingStore, NotifyingStore, Protocol):
    """A shared store through which a request reaches the worker holding its thread."""

    async def post(
        self, key: ThreadKey, kind: LetterKind, body: bytes, *, limit: int, max_age: float
    ) -> bool:
        """Leave a letter in ``key``'s inbox and notify every process.

        Args:
            key: The thread (it must exist).
            kind: What the letter asks.
            body: What the holder reads.
            limit: The most letters the thread may hold unread.
            max_age: Seconds after which an unread letter is dropped (any thread's
                older letters go now).

        Returns:
            ``False`` when the inbox already holds ``limit`` letters or the thread
            does not exist (nothing was posted).

        Raises:
            StoreError: Nothing was posted.
        """
        ...

    async def collect(self, claim: Claim, *, max_age: float) -> list[Letter]:
        """Take (and remove) every letter of ``claim``'s thread, oldest first; those
        older than ``max_age`` seconds are removed unread.

        Raises:
            StaleClaimError: ``claim`` no longer holds the thread (nothing is taken).
            StoreError: Nothing was taken.
        """
        ...

    async def answer(self, ticket: str, verdict: str) -> None:
        """Tell every process that the letter with ``ticket`` was acted on
        (``verdict``: a short word, no spaces)."""
        ...

    def notices(self) -> AbstractAsyncContextManager[AsyncIterator[Notice]]:
        """:meth:`NotifyingStore.commits`, with the letters posted and answered."""
        ...
