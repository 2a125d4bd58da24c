"""Claims on the SQLite store: worker processes of one machine sharing one file."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import anyio
import pytest

from toolrelay import StaleClaimError, ThreadKey
from toolrelay.store import (
    SCHEMA_VERSION,
    ClaimingStore,
    MemoryStore,
    SQLiteStore,
    StateSaved,
    TailingStore,
    TurnStarted,
)

pytestmark = pytest.mark.anyio


def _state(n: int) -> StateSaved:
    return StateSaved(turn_id="turn", state={"n": n})


def test_sqlite_offers_claims_but_no_tail_and_memory_neither() -> None:
    assert isinstance(SQLiteStore(":memory:"), ClaimingStore)
    assert not isinstance(SQLiteStore(":memory:"), TailingStore)
    assert not isinstance(MemoryStore(), ClaimingStore)


async def test_a_version_1_file_gains_the_claims_tables_and_keeps_its_threads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    store = SQLiteStore(path)
    await store.append(ThreadKey("t"), [TurnStarted(turn_id="turn"), _state(1)])
    await store.aclose()
    with closing(sqlite3.connect(path)) as old, old:  # what toolrelay's first schema left
        old.execute("DROP TABLE claims")
        old.execute("DROP TABLE claim_tokens")
        old.execute("PRAGMA user_version=1")
    reopened = SQLiteStore(path)
    try:
        assert len(await reopened.read(ThreadKey("t"))) == 2
        (claim,) = await reopened.claim_next(worker="w", lease=30)
        assert claim.key == ThreadKey("t") and claim.token == 1
        assert await reopened.append(ThreadKey("t"), [_state(2)], claim=claim) == 3
    finally:
        await reopened.aclose()
    with closing(sqlite3.connect(path)) as migrated, migrated:
        assert migrated.execute("PRAGMA user_version").fetchone() == (SCHEMA_VERSION,)


async def test_a_stale_claim_in_a_group_commit_is_refused_alone(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    other = SQLiteStore(tmp_path / "t.db")
    try:
        stale_key = ThreadKey("stale")
        old = await store.claim(stale_key, worker="a", lease=0.2)
        assert old is not None
        await anyio.sleep(0.4)
        assert await other.claim(stale_key, worker="b", lease=30) is not None
        outcomes: dict[str, object] = {}

        async def write(name: str, claimed: bool) -> None:
            key = stale_key if claimed else ThreadKey(name)
            try:
                outcomes[name] = await store.append(
                    key, [_state(1)], claim=old if claimed else None
                )
            except StaleClaimError as exc:
                outcomes[name] = exc

        async with anyio.create_task_group() as group:  # they meet in one batch
            for i in range(10):
                group.start_soon(write, f"t{i}", i == 5)
        assert isinstance(outcomes.pop("t5"), StaleClaimError)
        assert set(outcomes.values()) == {1}
        assert await store.read(stale_key) == []
    finally:
        await store.aclose()
        await other.aclose()
