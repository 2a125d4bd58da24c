"""The in-memory store: the contract with no disk, for tests and for users who want none.

Records are kept encoded, as a durable store keeps them, so what is read back is a
copy, never the object that was written.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import ClassVar

from toolrelay._core import ThreadKey
from toolrelay.store._claims import check_append
from toolrelay.store._contract import Entry, ThreadInfo, live_turn_after
from toolrelay.store._records import Record, decode_record, encode_record

__all__ = ("MemoryStore",)


class _Thread:
    __slots__ = ("created_at", "live_turn", "log", "owner", "updated_at")

    def __init__(self, owner: str | None, now: float) -> None:
        self.owner = owner
        self.live_turn: str | None = None
        self.log: list[bytes] = []
        self.created_at = now
        self.updated_at = now


class MemoryStore:
    """A :class:`~toolrelay.store.Store` in this process's memory; gone with it."""

    #: An append never waits: cancelled, it wrote nothing or it returned (rule 7).
    ordered_cancellation: ClassVar[bool] = True

    def __init__(self) -> None:
        self._threads: dict[ThreadKey, _Thread] = {}

    async def open(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        check_append(key, records)
        encoded = [encode_record(record) for record in records]  # all or nothing
        now = time.time()
        thread = self._threads.get(key)
        if thread is None:
            thread = self._threads[key] = _Thread(owner, now)
        thread.log.extend(encoded)
        thread.live_turn = live_turn_after(thread.live_turn, records)
        thread.updated_at = now
        return len(thread.log)

    async def read_and_append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> tuple[list[Entry], int]:
        """:meth:`ReadAppendStore.read_and_append
        <toolrelay.store.ReadAppendStore.read_and_append>` (nothing awaited between
        the two)."""
        check_append(key, records)
        before = await self.read(key)
        return before, await self.append(key, records, owner=owner)

    async def read(
        self,
        key: ThreadKey,
        *,
        after: int = 0,
        limit: int | None = None,
        max_bytes: int | None = None,
    ) -> list[Entry]:
        thread = self._threads.get(key)
        if thread is None:
            return []
        start = max(after, 0)
        stop = len(thread.log) if limit is None else min(len(thread.log), start + limit)
        out: list[Entry] = []
        held = 0
        for seq in range(start, stop):
            body = thread.log[seq]
            held += len(body)
            if max_bytes is not None and out and held > max_bytes:
                break
            out.append(Entry(seq + 1, decode_record(body)))
        return out

    async def thread(self, key: ThreadKey) -> ThreadInfo | None:
        thread = self._threads.get(key)
        return None if thread is None else _info(key, thread)

    async def threads(
        self, *, owner: str | None = None, live: bool | None = None
    ) -> list[ThreadInfo]:
        return [
            _info(key, thread)
            for key, thread in self._threads.items()
            if (owner is None or thread.owner == owner)
            and (live is None or (thread.live_turn is not None) == live)
        ]

    async def delete_thread(self, key: ThreadKey) -> bool:
        return self._threads.pop(key, None) is not None

    def __repr__(self) -> str:
        return f"MemoryStore(threads={len(self._threads)})"


def _info(key: ThreadKey, thread: _Thread) -> ThreadInfo:
    return ThreadInfo(
        key=key,
        owner=thread.owner,
        last_seq=len(thread.log),
        live_turn=thread.live_turn,
        created_at=thread.created_at,
        updated_at=thread.updated_at,
    )
