"""The store contract, run unchanged against every store toolrelay ships."""

from __future__ import annotations

from pathlib import Path

from toolrelay.store import MemoryStore, SQLiteStore, Store
from toolrelay.testing.store_contract import DurableStoreContract, StoreContract


class TestMemoryStore(StoreContract):
    def make_store(self, path: Path) -> Store:
        return MemoryStore()


class TestSQLiteStore(DurableStoreContract):
    def make_store(self, path: Path) -> Store:
        return SQLiteStore(path / "toolrelay.db")
