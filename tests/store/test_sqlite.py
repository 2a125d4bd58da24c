"""The SQLite store's own promises: its file, its schema, and its faults, typed."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolrelay import (
    StoreCorruptError,
    StoreError,
    StoreUnavailableError,
    StoreVersionError,
    ThreadKey,
)
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.store import (
    SCHEMA_VERSION,
    Entry,
    SQLiteStore,
    StateSaved,
    TurnEnded,
    TurnStarted,
    _sqlite as sqlite_module,
    encode_record,
)
from toolrelay.store._sqlite_queue import Queued
from toolrelay.store._sqlite_schema import APPLICATION_ID, connect
from toolrelay.testing.store_contract import sample_records

pytestmark = pytest.mark.anyio

KEY = ThreadKey("t")
DONE = TerminalReason(kind=ReasonKind.COMPLETED, message="done")


async def test_the_file_is_created_on_first_use_in_wal_mode_with_its_schema_version(
    tmp_path: Path,
) -> None:
    path = tmp_path / "deep" / "toolrelay.db"
    path.parent.mkdir()
    store = SQLiteStore(path)
    await store.append(KEY, [TurnStarted(turn_id="a")])  # opens on first use
    await store.aclose()
    with closing(sqlite3.connect(path)) as connection, connection:
        assert connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert connection.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


async def test_another_applications_database_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / "app.db"
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("CREATE TABLE users (name TEXT)")
    with pytest.raises(StoreCorruptError, match="not a toolrelay store"):
        await SQLiteStore(path).open()
    with closing(sqlite3.connect(path)) as connection, connection:
        names = [r[0] for r in connection.execute("SELECT name FROM sqlite_master")]
    assert names == ["users"]


async def test_a_file_that_is_not_a_database_is_a_typed_error(tmp_path: Path) -> None:
    path = tmp_path / "toolrelay.db"
    path.write_bytes(b"this is not sqlite at all, just some text " * 100)
    with pytest.raises(StoreCorruptError, match="not a usable SQLite database"):
        await SQLiteStore(path).open()


async def test_a_store_from_a_newer_version_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path)
    await store.append(KEY, sample_records())
    await store.aclose()
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(f"PRAGMA user_version={SCHEMA_VERSION + 1}")
    with pytest.raises(StoreVersionError, match="newer"):
        await SQLiteStore(path).open()


async def test_a_version_2_file_gets_its_records_in_write_order_and_keeps_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "toolrelay.db"
    other = ThreadKey("other")
    store = SQLiteStore(path)
    await store.append(KEY, sample_records())
    await store.append(other, [TurnStarted(turn_id="o")])
    await store.append(KEY, [TurnStarted(turn_id="again")])
    written = {key: await store.read(key) for key in (KEY, other)}
    await store.aclose()
    with (
        closing(sqlite3.connect(path)) as connection,
        connection,
    ):  # the records table as version 2 left it
        connection.executescript(
            "CREATE TABLE clustered (thread INTEGER NOT NULL REFERENCES threads (id) "
            "ON DELETE CASCADE, seq INTEGER NOT NULL, body BLOB NOT NULL, "
            "PRIMARY KEY (thread, seq)) WITHOUT ROWID;"
            "INSERT INTO clustered SELECT thread, seq, body FROM records;"
            "DROP TABLE records; ALTER TABLE clustered RENAME TO records;"
            "PRAGMA user_version=2;"
        )
    reopened = SQLiteStore(path)
    try:
        assert {key: await reopened.read(key) for key in (KEY, other)} == written
        last = written[KEY][-1].seq
        assert await reopened.append(KEY, [TurnStarted(turn_id="after")]) == last + 1
        assert [e.seq for e in await reopened.read(KEY, after=last - 1)] == [last, last + 1]
        assert await reopened.delete_thread(other)  # the cascade finds its records
    finally:
        await reopened.aclose()
    with closing(sqlite3.connect(path)) as connection, connection:
        assert connection.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        (table,) = connection.execute(
            "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'records'"
        ).fetchone()
        assert "WITHOUT ROWID" not in table
        assert connection.execute(
            "SELECT count(*) FROM records r WHERE r.thread NOT IN (SELECT id FROM threads)"
        ).fetchone() == (0,)
        unique = [row[1] for row in connection.execute("PRAGMA index_list(records)") if row[2]]
        assert unique == ["records_thread_seq"]
        with pytest.raises(sqlite3.IntegrityError):  # a sequence number is never reused
            connection.execute(
                "INSERT INTO records (thread, seq, body) SELECT thread, seq, body FROM records "
                "LIMIT 1"
            )


async def test_a_version_3_file_keeps_its_threads_times_and_numbers_and_goes_on_after_them(
    tmp_path: Path,
) -> None:
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path)
    await store.append(KEY, sample_records())
    before = await store.thread(KEY)
    await store.aclose()
    assert before is not None
    with closing(sqlite3.connect(path)) as connection, connection:  # as version 3 left it
        connection.executescript("ALTER TABLE records DROP COLUMN at; PRAGMA user_version=3;")
    reopened = SQLiteStore(path)
    try:
        assert await reopened.thread(KEY) == before  # the row's time, its records' number
        await anyio.sleep(0.01)
        last = await reopened.append(KEY, [StateSaved(turn_id="t", state=9)])
        assert last == before.last_seq + 1
        after = await reopened.thread(KEY)
        assert after is not None and after.last_seq == last
        assert after.updated_at > before.updated_at  # the new record's time
    finally:
        await reopened.aclose()


async def test_an_append_moves_its_threads_row_only_when_it_changes_the_live_turn(
    tmp_path: Path,
) -> None:
    # A thread's last number and time are its last record's; its row, one per thread
    # in a group commit's pages, is rewritten only at a turn's start and end.
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path)

    def row() -> tuple[object, ...]:
        with closing(sqlite3.connect(path)) as connection:
            found = connection.execute(
                "SELECT last_seq, live_turn, updated_at FROM threads"
            ).fetchone()
        assert found is not None
        return tuple(found)

    try:
        await store.append(KEY, [TurnStarted(turn_id="a")])
        started = row()
        await anyio.sleep(0.01)
        await store.append(KEY, [StateSaved(turn_id="a", state=1)] * 3)
        assert row() == started
        info = await store.thread(KEY)
        assert info is not None and info.last_seq == 4 and info.live_turn == "a"
        assert info.updated_at > float(str(started[2]))
        [listed] = await store.threads(live=True)
        assert listed == info
        await store.append(KEY, [TurnEnded(turn_id="a", status="completed", reason=DONE)])
        assert row()[:2] == (5, None)
        [ended] = await store.threads(live=False)
        assert ended.last_seq == 5 and ended.updated_at >= info.updated_at
    finally:
        await store.aclose()


async def test_a_number_the_store_remembered_wrongly_is_refused_and_the_append_written_after(
    tmp_path: Path,
) -> None:
    # What the store remembers is right unless the file changed under it unseen; the
    # unique index is the last word all the same: the append is numbered again.
    store = SQLiteStore(tmp_path / "toolrelay.db")
    try:
        await store.append(KEY, [TurnStarted(turn_id="a"), StateSaved(turn_id="a", state=1)])
        store._known[KEY].last = 1  # as if it had missed the second record
        assert await store.append(KEY, [StateSaved(turn_id="a", state=2)]) == 3
        assert [e.seq for e in await store.read(KEY)] == [1, 2, 3]
        assert await store.append(KEY, [StateSaved(turn_id="a", state=3)]) == 4
    finally:
        await store.aclose()


async def test_closing_while_the_store_opens_closes_what_the_open_makes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    connecting, proceed = threading.Event(), threading.Event()
    made: list[sqlite3.Connection] = []

    def slow_connect(path: Path, *, timeout: float, durable: bool) -> sqlite3.Connection:
        connecting.set()
        proceed.wait(10)
        connection = connect(path, timeout=timeout, durable=durable)
        made.append(connection)
        return connection

    monkeypatch.setattr(sqlite_module, "connect", slow_connect)
    store = SQLiteStore(tmp_path / "toolrelay.db")
    async with anyio.create_task_group() as group:
        group.start_soon(store.open)
        await anyio.to_thread.run_sync(connecting.wait, 10)
        group.start_soon(store.aclose)  # while the open connects
        await anyio.sleep(0.05)
        proceed.set()
    assert store._connection is None
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        made[0].execute("SELECT 1")
    assert await store.append(KEY, [TurnStarted(turn_id="a")]) == 1  # opened again
    await store.aclose()


async def test_a_record_that_cannot_be_encoded_fails_its_append_alone_in_a_group_commit(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "toolrelay.db")
    released = threading.Event()
    outcomes: dict[str, object] = {}

    async def append(name: str, state: object) -> None:
        try:
            outcomes[name] = await store.append(
                ThreadKey(name), [TurnStarted(turn_id=name), StateSaved(turn_id=name, state=state)]
            )
        except TypeError as exc:
            outcomes[name] = exc

    try:
        await store.open()
        async with anyio.create_task_group() as group:
            # A job holds the connection while the appends queue: they share the next hop.
            group.start_soon(store._run, lambda connection: released.wait(10), "wait")
            await anyio.sleep(0.05)
            for name, state in (("a", {"n": 1}), ("bad", {"n": object()}), ("b", {"n": 2})):
                group.start_soon(append, name, state)
            await anyio.sleep(0.05)
            released.set()
        assert outcomes["a"] == 2 and outcomes["b"] == 2
        assert isinstance(outcomes["bad"], TypeError)
        assert await store.thread(ThreadKey("bad")) is None  # nothing of it written
        assert [e.record for e in await store.read(ThreadKey("a"))][1] == StateSaved(
            turn_id="a", state={"n": 1}
        )
    finally:
        released.set()
        await store.aclose()


async def test_two_stores_opening_a_new_file_at_once_create_the_schema_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "toolrelay.db"
    stores = [SQLiteStore(path) for _ in range(4)]
    async with anyio.create_task_group() as group:
        for store in stores:
            group.start_soon(store.open)
    for i, store in enumerate(stores):
        await store.append(KEY, [TurnStarted(turn_id=str(i))])
    assert [e.seq for e in await stores[0].read(KEY)] == [1, 2, 3, 4]
    for store in stores:
        await store.aclose()


async def test_a_write_that_finds_the_file_locked_fails_typed_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path, timeout=0.05)
    await store.append(KEY, [TurnStarted(turn_id="a")])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailableError, match="locked"):
            await store.append(KEY, [TurnStarted(turn_id="b")])
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert await store.append(KEY, [TurnStarted(turn_id="c")]) == 2
    await store.aclose()


async def test_a_full_database_fails_typed_and_keeps_what_was_committed(tmp_path: Path) -> None:
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path)
    await store.append(KEY, [TurnStarted(turn_id="a")])
    await store.aclose()
    with closing(sqlite3.connect(path)) as connection, connection:
        pages = connection.execute("PRAGMA page_count").fetchone()[0]
    # The file may not grow past its size now: SQLite's own "database or disk is full".
    store = SQLiteStore(path)
    await store.open()
    assert store._connection is not None
    store._connection.execute(f"PRAGMA max_page_count={pages}")
    big = [TurnStarted(turn_id="x" * 4000) for _ in range(50)]
    with pytest.raises(StoreUnavailableError, match="full"):
        await store.append(KEY, big)
    assert [e.record for e in await store.read(KEY)] == [TurnStarted(turn_id="a")]
    await store.aclose()


async def test_a_damaged_record_is_a_typed_error_on_read(tmp_path: Path) -> None:
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path)
    await store.append(KEY, [TurnStarted(turn_id="a")])
    await store.aclose()
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute("UPDATE records SET body = ?", (b'{"kind": "nonsense"}',))
    store = SQLiteStore(path)
    with pytest.raises(StoreCorruptError, match="cannot be read"):
        await store.read(KEY)
    await store.aclose()


async def test_a_damaged_record_read_with_an_append_fails_it_alone_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path)
    await store.append(KEY, [TurnStarted(turn_id="a")])
    await store.append(ThreadKey("other"), [TurnStarted(turn_id="o")])
    await store.aclose()
    with closing(sqlite3.connect(path)) as connection, connection:
        connection.execute(
            "UPDATE records SET body = ? WHERE seq = 1 AND thread = "
            "(SELECT id FROM threads WHERE thread = ?)",
            (b'{"kind": "nonsense"}', KEY.thread_id),
        )
    store = SQLiteStore(path)
    await store.open()
    batches: list[int] = []
    hop = store._work._hop

    def counted(batch: list[Queued[Any]]) -> None:
        batches.append(len(batch))
        hop(batch)

    store._work._hop = counted
    results: dict[str, object] = {}

    async def write(name: str, key: ThreadKey) -> None:
        try:
            results[name] = await store.read_and_append(key, [TurnStarted(turn_id=name)])
        except StoreCorruptError as exc:
            results[name] = exc

    async with anyio.create_task_group() as group:
        # The first write holds the connection while the three queue: one group commit.
        with store._lock:
            group.start_soon(write, "z", ThreadKey("first"))
            await anyio.sleep(0.01)
            group.start_soon(write, "b", KEY)
            group.start_soon(write, "p", ThreadKey("other"))
            group.start_soon(write, "q", ThreadKey("new"))
            await anyio.sleep(0.05)
    assert batches == [1, 3]
    assert isinstance(results["b"], StoreCorruptError) and "cannot be read" in str(results["b"])
    assert results["p"] == ([Entry(1, TurnStarted(turn_id="o"))], 2)
    assert results["q"] == ([], 1)
    info = await store.thread(KEY)
    assert info is not None and info.last_seq == 1 and info.live_turn == "a"  # nothing written
    await store.aclose()


async def test_every_store_error_carries_the_store_error_reason(tmp_path: Path) -> None:
    error: StoreError = StoreUnavailableError("locked")
    assert error.reason.kind.value == "store_error"
    assert error.reason.message == "locked"


async def test_a_closed_store_reopens_on_next_use(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "toolrelay.db")
    await store.append(KEY, [TurnStarted(turn_id="a")])
    await store.aclose()
    assert len(await store.read(KEY)) == 1
    await store.aclose()


async def test_a_read_only_database_fails_typed_and_keeps_what_was_committed(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "toolrelay.db")
    await store.append(KEY, [TurnStarted(turn_id="a")])
    assert store._connection is not None
    # SQLite's own read-only state (root ignores file modes, so chmod would not do).
    store._connection.execute("PRAGMA query_only=ON")
    with pytest.raises(StoreUnavailableError, match="readonly"):
        await store.append(KEY, [TurnStarted(turn_id="b")])
    assert [e.record for e in await store.read(KEY)] == [TurnStarted(turn_id="a")]
    await store.aclose()


async def test_reads_and_appends_that_meet_each_get_their_own_answer(tmp_path: Path) -> None:
    # Launched together they share the connection's hops; each still gets its own
    # outcome: the numbers of its thread, the log of its thread, its own error.
    store = SQLiteStore(tmp_path / "toolrelay.db")
    for i in range(20):
        await store.append(ThreadKey(f"old{i}"), [TurnStarted(turn_id=f"old{i}")])
    appended: dict[int, int] = {}
    read: dict[int, list[str]] = {}
    refused: list[ValueError] = []

    async def append(i: int) -> None:
        appended[i] = await store.append(ThreadKey(f"new{i}"), sample_records()[:3])

    async def read_old(i: int) -> None:
        entries = await store.read(ThreadKey(f"old{i}"))
        read[i] = [e.record.turn_id for e in entries if isinstance(e.record, TurnStarted)]

    async def bad_claim() -> None:
        try:
            await store.claim_next(worker="w", lease=1.0, limit=0)
        except ValueError as exc:
            refused.append(exc)

    async with anyio.create_task_group() as group:
        for i in range(20):
            group.start_soon(append, i)
            group.start_soon(read_old, i)
        group.start_soon(bad_claim)
    assert appended == dict.fromkeys(range(20), 3)
    assert read == {i: [f"old{i}"] for i in range(20)}
    assert len(refused) == 1
    for i in range(20):
        assert len(await store.read(ThreadKey(f"new{i}"))) == 3
    await store.aclose()


async def test_a_cancelled_leader_hands_the_queue_on(tmp_path: Path) -> None:
    # The first waiter takes the queue to the connection; cancelled while its hop waits
    # for another process's lock, it still finishes that hop (the thread cannot be
    # abandoned halfway), and what queued behind it is written by the next waiter.
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path, timeout=5.0)
    await store.append(KEY, [TurnStarted(turn_id="a")])
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    followed: list[int] = []
    leader = anyio.CancelScope()

    async def lead() -> None:
        with leader:
            await store.append(ThreadKey("x"), [TurnStarted(turn_id="x")])

    async def follow() -> None:
        followed.append(await store.append(ThreadKey("y"), [TurnStarted(turn_id="y")]))

    async with anyio.create_task_group() as group:
        group.start_soon(lead)
        await anyio.wait_all_tasks_blocked()  # the leader waits for its hop
        group.start_soon(follow)
        await anyio.wait_all_tasks_blocked()  # the follower waits in the queue
        leader.cancel()
        await anyio.sleep(0.05)
        other.execute("ROLLBACK")
        other.close()
    assert followed == [1]
    assert [e.record for e in await store.read(ThreadKey("x"))] == [TurnStarted(turn_id="x")]
    await store.aclose()


async def test_waiters_woken_by_a_leader_cancelled_before_its_hop_are_written(
    tmp_path: Path,
) -> None:
    # The leader waits for a worker thread (none is free) and is cancelled there: its
    # hop never began, so its batch goes back to the queue's head and its waiters wake
    # before their work ran. An append that arrives before they run leads the next
    # hop, which takes their work too: each of them must wait for that hop's end and
    # not for an event nobody will set (the deadlock of an earlier version).
    store = SQLiteStore(tmp_path / "toolrelay.db")
    await store.open()
    limiter = anyio.to_thread.current_default_thread_limiter()
    tokens = limiter.total_tokens
    limiter.total_tokens = 1
    holder = object()
    await limiter.acquire_on_behalf_of(holder)  # no worker thread is free
    written: dict[str, int] = {}
    leader = anyio.CancelScope()

    async def append(name: str) -> None:
        written[name] = await store.append(ThreadKey(name), [TurnStarted(turn_id=name)])

    async def lead() -> None:
        with leader:
            await append("leader")

    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(lead)
                await anyio.wait_all_tasks_blocked()  # the leader waits for a thread
                group.start_soon(append, "b")
                group.start_soon(append, "c")
                await anyio.wait_all_tasks_blocked()  # b and c wait in the queue
                leader.cancel()  # before its hop began: b and c wake, unwritten
                group.start_soon(append, "d")  # arrives before they run, and leads
                await anyio.wait_all_tasks_blocked()
                assert written == {}
                limiter.release_on_behalf_of(holder)  # now the hop can run
                holder = None
    finally:
        if holder is not None:
            limiter.release_on_behalf_of(holder)
        limiter.total_tokens = tokens
    assert leader.cancelled_caught
    assert written == {"b": 1, "c": 1, "d": 1}
    assert await store.read(ThreadKey("leader")) == []  # cancelled before: not written
    for name in "bcd":
        assert [e.record for e in await store.read(ThreadKey(name))] == [TurnStarted(turn_id=name)]
    await store.aclose()


async def test_a_thread_another_process_wrote_meanwhile_is_numbered_after_its_records(
    tmp_path: Path,
) -> None:
    # The store numbers the appends of threads it wrote from what it remembers of them,
    # dropped when another connection committed: another process's appends to the
    # thread in between are seen.
    path = tmp_path / "toolrelay.db"
    ours, theirs = SQLiteStore(path), SQLiteStore(path)
    assert await ours.append(KEY, [TurnStarted(turn_id="a")]) == 1
    assert await theirs.append(KEY, [StateSaved(turn_id="a", state=1)]) == 2  # same live turn
    assert await ours.append(KEY, [StateSaved(turn_id="a", state=2)]) == 3
    assert await theirs.append(KEY, [TurnEnded(turn_id="a", status="completed", reason=DONE)]) == 4
    assert await theirs.append(KEY, [TurnStarted(turn_id="b")]) == 5
    assert await ours.append(KEY, [StateSaved(turn_id="b", state=3)]) == 6
    assert [e.seq for e in await theirs.read(KEY)] == [1, 2, 3, 4, 5, 6]
    info = await ours.thread(KEY)
    assert info is not None and info.last_seq == 6 and info.live_turn == "b"
    await ours.aclose()
    await theirs.aclose()


async def test_a_thread_deleted_elsewhere_is_made_again_and_never_written_into_another(
    tmp_path: Path,
) -> None:
    # Another process deletes the thread, and a new thread takes its row's id (SQLite
    # reuses the largest rowid), its sequence number and its live turn: the row is
    # the same but for its names, and the next append must not land in it.
    path = tmp_path / "toolrelay.db"
    ours, theirs = SQLiteStore(path), SQLiteStore(path)
    other = ThreadKey("other")
    await ours.append(KEY, [TurnStarted(turn_id="a")])
    assert await theirs.delete_thread(KEY)
    await theirs.append(other, [TurnStarted(turn_id="a")])
    assert await ours.append(KEY, [StateSaved(turn_id="a", state=1)]) == 1
    assert [e.record for e in await ours.read(other)] == [TurnStarted(turn_id="a")]
    assert [e.record for e in await theirs.read(KEY)] == [StateSaved(turn_id="a", state=1)]
    info = await theirs.thread(KEY)
    assert info is not None and info.live_turn is None  # a new thread's row, from its records
    await ours.aclose()
    await theirs.aclose()


async def test_appends_of_one_thread_in_one_group_commit_are_numbered_in_order(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(tmp_path / "toolrelay.db")
    await store.append(KEY, [TurnStarted(turn_id="a")])
    released = threading.Event()
    lasts: dict[int, int] = {}

    async def append(state: int) -> None:
        lasts[state] = await store.append(KEY, [StateSaved(turn_id="a", state=state)] * state)

    try:
        async with anyio.create_task_group() as group:
            # A job holds the connection while the appends queue: they share the next hop.
            group.start_soon(store._run, lambda connection: released.wait(10), "wait")
            await anyio.sleep(0.05)
            for state in (1, 2, 3):
                group.start_soon(append, state)
                await anyio.wait_all_tasks_blocked()
            released.set()
    finally:
        released.set()
    assert lasts == {1: 2, 2: 4, 3: 7}  # in the order they queued
    states = [e.record.state for e in (await store.read(KEY))[1:]]  # type: ignore[union-attr]
    assert states == [1, 2, 2, 3, 3, 3]
    await store.aclose()


async def test_a_waiter_cancelled_during_its_hop_leaves_the_others_of_the_hop_woken(
    tmp_path: Path,
) -> None:
    # Each waiter waits on a future (or event) of its own: cancelling one while its
    # hop runs wakes it alone, its records are written all the same (the hop began:
    # rule 7), and the others of the hop wake to their numbers.
    store = SQLiteStore(tmp_path / "toolrelay.db")
    first, second = threading.Event(), threading.Event()
    written: dict[str, int] = {}
    cancelled = anyio.CancelScope()

    async def append(name: str) -> None:
        written[name] = await store.append(ThreadKey(name), [TurnStarted(turn_id=name)])

    async def append_cancelled() -> None:
        with cancelled:
            await append("b")

    try:
        await store.open()
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(store._run, lambda connection: first.wait(10), "first")
                await anyio.wait_all_tasks_blocked()  # its hop holds the connection
                group.start_soon(store._run, lambda connection: second.wait(10), "second")
                await anyio.wait_all_tasks_blocked()
                group.start_soon(append, "a")
                group.start_soon(append_cancelled)
                group.start_soon(append, "c")
                await anyio.wait_all_tasks_blocked()
                first.set()  # the next hop takes the second job and the appends
                await anyio.sleep(0.05)
                cancelled.cancel()  # while that hop waits for the second job
                await anyio.sleep(0.05)
                assert written == {}
                second.set()
    finally:
        first.set()
        second.set()
    assert cancelled.cancelled_caught
    assert written == {"a": 1, "c": 1}
    for name in "abc":
        assert [e.record for e in await store.read(ThreadKey(name))] == [TurnStarted(turn_id=name)]
    await store.aclose()


async def test_the_store_remembers_a_bounded_number_of_threads_and_reads_the_others(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sqlite_module, "_KNOWN_THREADS", 4)
    store = SQLiteStore(tmp_path / "toolrelay.db")
    keys = [ThreadKey(f"t{i}") for i in range(10)]
    for key in keys:
        await store.append(key, [TurnStarted(turn_id="a")])
    assert list(store._known) == keys[-4:]  # the oldest are forgotten first
    for key in keys:  # the forgotten ones are read again, and numbered after their log
        assert await store.append(key, [StateSaved(turn_id="a", state=1)]) == 2
    assert len(store._known) == 4
    await store.aclose()
    assert not store._known


async def test_records_are_stored_as_json_blobs_readable_without_toolrelay(tmp_path: Path) -> None:
    path = tmp_path / "toolrelay.db"
    store = SQLiteStore(path)
    await store.append(KEY, sample_records())
    await store.aclose()
    with closing(sqlite3.connect(path)) as connection, connection:
        rows = connection.execute("SELECT typeof(body), body FROM records ORDER BY seq").fetchall()
    assert {kind for kind, _ in rows} == {"blob"}
    assert [body for _, body in rows] == [encode_record(record) for record in sample_records()]
