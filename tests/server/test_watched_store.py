"""The server's store wrapper: every committed record told once, in order, whichever
call wrote it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from toolrelay import ThreadKey
from toolrelay.server._watch import WatchedStore
from toolrelay.store import Entry, MemoryStore, Record, Store, TurnStarted
from toolrelay.store._forwarding import ForwardingStore

pytestmark = pytest.mark.anyio

KEY = ThreadKey("t")


class _Plain(ForwardingStore[MemoryStore]):
    """A store with the contract's methods only (no ``read_and_append``)."""

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        return await self.store.append(key, records, owner=owner)


@pytest.mark.parametrize("plain", [False, True], ids=["read_and_append", "read_then_append"])
async def test_read_and_append_gives_what_came_before_and_tells_what_it_wrote(
    plain: bool,
) -> None:
    memory = MemoryStore()
    inner: Store = _Plain(memory) if plain else memory
    await inner.append(KEY, [TurnStarted(turn_id="a")])
    told: list[tuple[ThreadKey, Entry]] = []
    store = WatchedStore(inner, on_commit=lambda key, entry: told.append((key, entry)))
    store.claim(ThreadKey("new"), "alice")
    changed = store.changed(KEY)
    records = [TurnStarted(turn_id="b"), TurnStarted(turn_id="c")]
    assert await store.read_and_append(KEY, records) == ([Entry(1, TurnStarted(turn_id="a"))], 3)
    assert told == [(KEY, Entry(2, records[0])), (KEY, Entry(3, records[1]))]
    assert changed.is_set()
    assert await store.read_and_append(ThreadKey("new"), records[:1]) == ([], 1)
    info = await memory.thread(ThreadKey("new"))
    assert info is not None and info.owner == "alice"
    assert [e.seq for e in await memory.read(KEY)] == [1, 2, 3]
