"""The store contract, run unchanged against every store toolrelay ships."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from pathlib import Path

import pytest
from _pg_cluster import PostgresServer

from toolrelay import StaleClaimError, ThreadKey
from toolrelay.store import (
    Claim,
    ClaimingStore,
    Entry,
    FencedStore,
    MemoryStore,
    Record,
    SQLiteStore,
    Store,
    TurnStarted,
)
from toolrelay.testing.store_contract import (
    ClaimingStoreContract,
    DurableStoreContract,
    OrderedCancellationContract,
    ReadAppendContract,
    StoreContract,
)


class _FencedReadAppend:
    """A shared store's ``read_and_append`` is fenced by a claim as its ``append`` is,
    and a :class:`FencedStore` over it reads and writes under the worker's claim."""

    def make_store(self, path: Path) -> Store:
        raise NotImplementedError

    @pytest.mark.anyio
    @pytest.mark.parametrize("together", [True, False], ids=["one_call", "read_then_append"])
    async def test_read_and_append_is_fenced_like_append(
        self, tmp_path: Path, together: bool
    ) -> None:
        store = self.make_store(tmp_path)
        assert isinstance(store, ClaimingStore)
        await store.open()
        try:
            key = ThreadKey("t")
            await store.append(key, [TurnStarted(turn_id="a")])
            lost = await store.claim(key, worker="w1", lease=30)
            assert lost is not None
            assert await store.release(lost)
            taken = await store.claim(key, worker="w2", lease=30)
            assert taken is not None
            with pytest.raises(StaleClaimError):
                await store.read_and_append(key, [TurnStarted(turn_id="b")], claim=lost)  # type: ignore[attr-defined]
            assert [e.seq for e in await store.read(key)] == [1]  # nothing written
            shared: ClaimingStore = store if together else _Apart(store)
            w1, w2 = (FencedStore(shared, worker=w, lease=30) for w in ("w1", "w2"))
            with pytest.raises(StaleClaimError, match="not held"):
                await w1.read_and_append(key, [TurnStarted(turn_id="b")])
            async with w2.holding(taken):
                written = await w2.read_and_append(key, [TurnStarted(turn_id="c")])
            assert written == ([Entry(1, TurnStarted(turn_id="a"))], 2)
            assert [e.seq for e in await store.read(key)] == [1, 2]
        finally:
            await store.aclose()


class _Apart(FencedStore):
    """A claiming store with no ``read_and_append``: the claims and the append of the
    one it wraps (a FencedStore is one, its own claim aside)."""

    def __init__(self, store: ClaimingStore) -> None:
        super().__init__(store, worker="(apart)")
        self.read_and_append = None  # type: ignore[assignment,method-assign]

    async def append(
        self,
        key: ThreadKey,
        records: Sequence[Record],
        *,
        owner: str | None = None,
        claim: Claim | None = None,
    ) -> int:
        return await self.store.append(key, records, owner=owner, claim=claim)


class TestMemoryStore(StoreContract, OrderedCancellationContract, ReadAppendContract):
    def make_store(self, path: Path) -> Store:
        return MemoryStore()


class TestSQLiteStore(
    DurableStoreContract,
    ClaimingStoreContract,
    OrderedCancellationContract,
    ReadAppendContract,
    _FencedReadAppend,
):
    def make_store(self, path: Path) -> Store:
        return SQLiteStore(path / "toolrelay.db")


class TestPostgresStore(
    DurableStoreContract, ClaimingStoreContract, ReadAppendContract, _FencedReadAppend
):
    """One schema per test directory, on the session's real PostgreSQL server."""

    dsn = ""

    @pytest.fixture(autouse=True)
    def _server(self, postgres_server: PostgresServer) -> None:
        type(self).dsn = postgres_server.dsn()

    def make_store(self, path: Path) -> Store:
        from toolrelay.store import PostgresStore

        schema = "t_" + hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
        return PostgresStore(self.dsn, schema=schema)
