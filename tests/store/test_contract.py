"""The store contract, run unchanged against every store toolrelay ships."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from _pg_cluster import PostgresServer

from toolrelay.store import MemoryStore, SQLiteStore, Store
from toolrelay.testing.store_contract import (
    ClaimingStoreContract,
    DurableStoreContract,
    OrderedCancellationContract,
    ReadAppendContract,
    StoreContract,
)


class TestMemoryStore(StoreContract, OrderedCancellationContract, ReadAppendContract):
    def make_store(self, path: Path) -> Store:
        return MemoryStore()


class TestSQLiteStore(
    DurableStoreContract, ClaimingStoreContract, OrderedCancellationContract, ReadAppendContract
):
    def make_store(self, path: Path) -> Store:
        return SQLiteStore(path / "toolrelay.db")


class TestPostgresStore(DurableStoreContract, ClaimingStoreContract, ReadAppendContract):
    """One schema per test directory, on the session's real PostgreSQL server."""

    dsn = ""

    @pytest.fixture(autouse=True)
    def _server(self, postgres_server: PostgresServer) -> None:
        type(self).dsn = postgres_server.dsn()

    def make_store(self, path: Path) -> Store:
        from toolrelay.store import PostgresStore

        schema = "t_" + hashlib.blake2b(str(path).encode(), digest_size=8).hexdigest()
        return PostgresStore(self.dsn, schema=schema)
