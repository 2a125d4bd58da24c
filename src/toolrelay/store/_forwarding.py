"""A store wrapper's reads: one place that hands them to the wrapped store.

Wrappers (the server's :class:`~toolrelay.server._watch.WatchedStore`, the fenced
store of a multi-worker server, the crashable store of the durable tests) change how
a store writes; what they read, and opening and closing, is the wrapped store's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

from toolrelay._core import ThreadKey
from toolrelay.store._contract import Entry, Store, ThreadInfo
from toolrelay.store._records import Record

__all__ = ("ForwardingStore", "read_and_append")

_S = TypeVar("_S", bound=Store)


class ForwardingStore(Generic[_S]):
    """Open, close, read and delete through ``self.store``; a subclass writes.

    Args:
        store: The wrapped store.
    """

    def __init__(self, store: _S) -> None:
        self.store = store

    async def open(self) -> None:
        await self.store.open()

    async def aclose(self) -> None:
        await self.store.aclose()

    async def read(
        self,
        key: ThreadKey,
        *,
        after: int = 0,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> list[Entry]:
        return await self.store.read(key, after=after, limit=limit, max_bytes=max_bytes)

    async def thread(self, key: ThreadKey) -> ThreadInfo | None:
        return await self.store.thread(key)

    async def threads(
        self, *, owner: str | None = None, live: bool | None = None
    ) -> list[ThreadInfo]:
        return await self.store.threads(owner=owner, live=live)

    async def delete_thread(self, key: ThreadKey) -> bool:
        return await self.store.delete_thread(key)


async def read_and_append(
    store: Store, key: ThreadKey, records: Sequence[Record], **options: Any
) -> tuple[list[Entry], int]:
    """``store``'s :meth:`~toolrelay.store.ReadAppendStore.read_and_append` where it
    has one (one round trip), else a read, then an append (what the engine does with
    such a store); ``options`` go to the append (``owner``, a claim)."""
    together = getattr(store, "read_and_append", None)
    if together is not None:
        written: tuple[list[Entry], int] = await together(key, records, **options)
        return written
    before = await store.read(key)
    last: int = await store.append(key, records, **options)
    return before, last
