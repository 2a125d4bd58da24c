"""PostgresStore against a real PostgreSQL server: what the contract suites do not say.

Opening (migrations once, under a lock; typed refusals), the pool (bounded, and it
survives ``pg_ctl restart``), claims across real processes (a frozen worker, a killed
one) and the live tail across processes.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import psycopg
import pytest
from _pg_cluster import PostgresServer
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream

import toolrelay
from toolrelay import (
    Engine,
    RunStatus,
    StaleClaimError,
    StoreCorruptError,
    StoreUnavailableError,
    StoreVersionError,
    ThreadKey,
    ToolRegistry,
)
from toolrelay.store import (
    Answered,
    ClaimingStore,
    Entry,
    FencedStore,
    InboxStore,
    MemoryStore,
    NotifyingStore,
    Posted,
    PostgresStore,
    SQLiteStore,
    StateSaved,
    TailingStore,
    ToolFinished,
    TurnEnded,
    TurnStarted,
)
from toolrelay.store._postgres import POSTGRES_SCHEMA_VERSION
from toolrelay.testing import ScriptedAgent, text, tool_call
from toolrelay.testing.store_contract import sample_records

pytestmark = pytest.mark.anyio

T = TypeVar("T")

WORKER = Path(__file__).with_name("_pg_worker.py")


def _state(n: int, by: str = "test") -> StateSaved:
    return StateSaved(turn_id="turn", state={"by": by, "n": n})


def _admin(dsn: str) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(dsn, autocommit=True)


@pytest.fixture
async def store(postgres_dsn: str) -> AsyncIterator[PostgresStore]:
    store = PostgresStore(postgres_dsn)
    await store.open()
    try:
        yield store
    finally:
        await store.aclose()


# -- the optional capabilities ------------------------------------------------------------


def test_the_postgres_store_offers_claims_and_a_tail() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none")
    assert isinstance(store, ClaimingStore) and isinstance(store, TailingStore)
    assert isinstance(FencedStore(store, worker="w"), ClaimingStore)


def test_bad_arguments_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match="schema"):
        PostgresStore("postgresql://127.0.0.1/x", schema="Robert'); DROP")
    with pytest.raises(ValueError, match="pool_size"):
        PostgresStore("postgresql://127.0.0.1/x", pool_size=0)
    with pytest.raises(ValueError, match="connection string"):
        PostgresStore("host=127.0.0.1 =broken")
    store = PostgresStore("postgresql://127.0.0.1/x")
    with pytest.raises(ValueError, match="poll"):
        store.tail(ThreadKey("t"), poll=0)
    with pytest.raises(ValueError, match="batch"):
        store.tail(ThreadKey("t"), batch=0)


def test_importing_the_store_package_does_not_need_psycopg() -> None:
    code = (
        "import sys; sys.modules['psycopg'] = None\n"
        "import toolrelay.store as s\n"
        "assert s.SQLiteStore and s.MemoryStore\n"
        "try:\n"
        "    s.PostgresStore\n"
        "except ImportError as exc:\n"
        "    print(exc)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(toolrelay.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert "pip install 'toolrelay[postgres]'" in done.stdout


def test_the_password_is_not_shown() -> None:
    store = PostgresStore("postgresql://user:s3cret@db.example:6543/app")
    assert "s3cret" not in repr(store)
    assert "db.example:6543/app" in repr(store)


# -- opening ------------------------------------------------------------------------------


async def test_workers_opening_a_fresh_database_together_migrate_it_once(
    postgres_dsn: str,
) -> None:
    stores = [PostgresStore(postgres_dsn) for _ in range(6)]
    async with anyio.create_task_group() as group:
        for store in stores:
            group.start_soon(store.open)
    try:
        with _admin(postgres_dsn) as admin:
            versions = admin.execute("SELECT version FROM toolrelay.schema_version").fetchall()
        # One row per migration, each applied once.
        assert versions == [(version,) for version in range(1, POSTGRES_SCHEMA_VERSION + 1)]
        key = ThreadKey("t")
        for i, store in enumerate(stores, 1):
            assert await store.append(key, [_state(i)]) == i
    finally:
        for store in stores:
            await store.aclose()


async def test_a_schema_from_a_newer_toolrelay_is_refused_and_left_alone(
    store: PostgresStore, postgres_dsn: str
) -> None:
    await store.append(ThreadKey("t"), [_state(1)])
    with _admin(postgres_dsn) as admin:
        admin.execute("INSERT INTO toolrelay.schema_version (version) VALUES (99)")
    newer = PostgresStore(postgres_dsn)
    with pytest.raises(StoreVersionError, match="99"):
        await newer.open()
    with _admin(postgres_dsn) as admin:
        assert admin.execute("SELECT count(*) FROM toolrelay.records").fetchone() == (1,)


async def test_tables_of_another_application_are_refused(postgres_dsn: str) -> None:
    with _admin(postgres_dsn) as admin:
        admin.execute("CREATE SCHEMA app; CREATE TABLE app.threads (id int)")
    with pytest.raises(StoreCorruptError, match="not a toolrelay store"):
        await PostgresStore(postgres_dsn, schema="app").open()
    # Another application's tables beside ours in one schema are its business.
    with _admin(postgres_dsn) as admin:
        admin.execute("CREATE SCHEMA shared; CREATE TABLE shared.invoices (id int)")
    shared = PostgresStore(postgres_dsn, schema="shared")
    await shared.open()
    assert await shared.append(ThreadKey("t"), [_state(1)]) == 1
    await shared.aclose()


async def test_a_server_that_cannot_be_reached_is_a_typed_error() -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = PostgresStore(f"postgresql://postgres@127.0.0.1:{port}/x", connect_timeout=2)
    with pytest.raises(StoreUnavailableError, match="cannot connect"):
        await store.open()
    with pytest.raises(StoreUnavailableError):
        await store.read(ThreadKey("t"))


async def test_a_damaged_record_or_a_missing_table_is_a_typed_error(
    store: PostgresStore, postgres_dsn: str
) -> None:
    key = ThreadKey("t")
    await store.append(key, sample_records())
    with _admin(postgres_dsn) as admin:
        admin.execute("UPDATE toolrelay.records SET body = 'not json' WHERE seq = 2")
    with pytest.raises(StoreCorruptError, match="cannot be read"):
        await store.read(key)
    with pytest.raises(StoreCorruptError, match="cannot be read"):
        await store.read_and_append(key, [_state(2)])  # rolled back
    assert [e.seq for e in await store.read(key, after=2)] == [3, 4, 5, 6]
    with _admin(postgres_dsn) as admin:
        admin.execute("DROP TABLE toolrelay.records")
    with pytest.raises(StoreCorruptError, match="schema is damaged"):
        await store.read(key)


async def test_a_closed_store_reopens_on_first_use(store: PostgresStore) -> None:
    await store.aclose()
    assert await store.append(ThreadKey("t"), [_state(1)]) == 1


async def test_closing_while_the_store_opens_leaves_it_closed(
    postgres_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresStore(postgres_dsn)
    connecting, proceed = threading.Event(), threading.Event()
    connect = store._connect

    def slow_connect() -> psycopg.Connection[Any]:
        connecting.set()
        proceed.wait(10)
        return connect()

    monkeypatch.setattr(store, "_connect", slow_connect)
    async with anyio.create_task_group() as group:
        group.start_soon(store.open)
        await anyio.to_thread.run_sync(connecting.wait, 10)
        group.start_soon(store.aclose)  # while the open connects and migrates
        await anyio.sleep(0.05)
        proceed.set()
    assert store._pool is None
    assert await store.append(ThreadKey("t"), [_state(1)]) == 1  # opened again
    await store.aclose()


# -- the pool -----------------------------------------------------------------------------


async def test_the_pool_never_holds_more_than_pool_size_connections(postgres_dsn: str) -> None:
    store = PostgresStore(postgres_dsn, pool_size=2)
    await store.open()
    seen: list[int] = []

    def count() -> int:
        with _admin(postgres_dsn) as admin:
            row = admin.execute(
                "SELECT count(*) FROM pg_stat_activity "
                "WHERE datname = current_database() AND application_name = 'toolrelay'"
            ).fetchone()
        assert row is not None
        return int(str(row[0]))

    async def write(i: int) -> None:
        for j in range(5):
            await store.append(ThreadKey(f"t{i}"), [_state(j)])

    async def watch() -> None:
        while True:
            seen.append(await anyio.to_thread.run_sync(count))
            await anyio.sleep(0.01)

    async def gone() -> None:
        # A closed connection's server process leaves pg_stat_activity a moment after
        # the client hangs up (the server ends it on its own time), so wait for it.
        with anyio.fail_after(10):
            while True:
                if await anyio.to_thread.run_sync(count) == 0:
                    break
                await anyio.sleep(0.02)

    try:
        # open() migrated on a connection of its own, closed since: not the pool's.
        await gone()
        async with anyio.create_task_group() as group:
            group.start_soon(watch)
            async with anyio.create_task_group() as writers:
                for i in range(30):
                    writers.start_soon(write, i)
            group.cancel_scope.cancel()
        assert max(seen) <= 2
        assert [len(await store.read(ThreadKey(f"t{i}"))) for i in range(30)] == [5] * 30
    finally:
        await store.aclose()
    await gone()  # every connection is closed


@pytest.mark.slow
async def test_after_a_server_restart_the_next_operations_succeed(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    store = PostgresStore(postgres_dsn, pool_size=4)
    await store.open()
    key = ThreadKey("t")
    try:
        # Fill the pool with idle connections, which the restart then ends.
        async with anyio.create_task_group() as group:
            for i in range(4):
                group.start_soon(store.append, ThreadKey(f"u{i}"), [_state(i)])
        assert await store.append(key, sample_records()) == 6
        await anyio.to_thread.run_sync(postgres_server.restart)
        assert await store.append(key, [_state(7)]) == 7
        assert [e.record for e in await store.read(key)] == [*sample_records(), _state(7)]
        async with anyio.create_task_group() as group:
            for i in range(4):
                group.start_soon(store.append, ThreadKey(f"u{i}"), [_state(i)])
        assert [(await store.thread(ThreadKey(f"u{i}"))) is not None for i in range(4)] == [
            True
        ] * 4
    finally:
        await store.aclose()


@pytest.mark.slow
async def test_a_restart_mid_use_loses_nothing_that_was_committed(
    postgres_server: PostgresServer, postgres_dsn: str
) -> None:
    store = PostgresStore(postgres_dsn, pool_size=4)
    await store.open()
    acknowledged: dict[int, list[tuple[int, int]]] = {w: [] for w in range(4)}
    refused = 0
    stop = anyio.Event()

    async def writer(w: int) -> None:
        nonlocal refused
        n = 0
        while not stop.is_set():
            n += 1
            try:
                seq = await store.append(ThreadKey(f"w{w}"), [_state(n)])
            except StoreUnavailableError:
                refused += 1  # in flight when the server went down: not acknowledged
                await anyio.sleep(0.05)
                continue
            acknowledged[w].append((seq, n))

    try:
        async with anyio.create_task_group() as group:
            for w in range(4):
                group.start_soon(writer, w)
            await anyio.sleep(0.3)
            await anyio.to_thread.run_sync(postgres_server.restart)
            before = sum(len(a) for a in acknowledged.values())
            await anyio.sleep(0.5)
            stop.set()
        assert sum(len(a) for a in acknowledged.values()) > before  # writing went on
        for w, acks in acknowledged.items():
            entries = await store.read(ThreadKey(f"w{w}"))
            assert [e.seq for e in entries] == list(range(1, len(entries) + 1))  # gapless
            by_seq = {e.seq: e.record for e in entries}
            for seq, n in acks:
                assert by_seq[seq] == _state(n)
    finally:
        await store.aclose()


# -- claims across processes ----------------------------------------------------------------


async def _spawn(role: str, dsn: str, backend: str, argument: str) -> Process:
    env = {**os.environ, "PYTHONPATH": str(Path(toolrelay.__file__).parents[1])}
    return await anyio.open_process(
        [sys.executable, str(WORKER), role, dsn, backend, argument], env=env
    )


async def _line(lines: BufferedByteReceiveStream) -> str:
    with anyio.fail_after(60):
        return (await lines.receive_until(b"\n", 4096)).decode()


async def _eventually(check: Callable[[], Awaitable[T]], seconds: float = 30) -> T:
    """``check()``'s first truthy answer (polled: the database has no event to wait on)."""
    with anyio.fail_after(seconds):
        for _ in itertools.count():
            if answer := await check():
                return answer
            await anyio.sleep(0.05)
    raise AssertionError("unreachable")


async def _at_least(store: PostgresStore, key: ThreadKey, count: int) -> bool:
    return len(await store.read(key)) >= count


@pytest.mark.slow
async def test_a_worker_frozen_past_its_lease_has_its_late_writes_refused(
    store: PostgresStore, postgres_dsn: str, anyio_backend: str
) -> None:
    key = ThreadKey("t")
    lease = 1.0
    process = await _spawn("hold", postgres_dsn, anyio_backend, str(lease))
    try:
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        child_token = int((await _line(lines)).split()[1])
        await _eventually(lambda: _at_least(store, key, 5))  # it works, heartbeat and all
        os.kill(process.pid, signal.SIGSTOP)
        await anyio.sleep(lease + 0.3)
        claims = await _eventually(lambda: store.claim_next(worker="parent", lease=30))
        assert [c.key for c in claims] == [key] and claims[0].token > child_token
        mine = await store.append(key, [_state(0, by="parent")], claim=claims[0])
        os.kill(process.pid, signal.SIGCONT)
        assert await _line(lines) == "stale"
        with anyio.fail_after(30):
            assert await process.wait() == 3
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
        await process.aclose()
    entries = await store.read(key)
    assert entries[-1] == Entry(mine, _state(0, by="parent"))  # nothing after the takeover
    assert all(e.record.state["by"] == "child" for e in entries[1:-1])  # type: ignore[union-attr]


@pytest.mark.slow
async def test_a_killed_workers_thread_is_taken_once_its_lease_expires(
    store: PostgresStore, postgres_dsn: str, anyio_backend: str
) -> None:
    key = ThreadKey("t")
    lease = 1.5
    process = await _spawn("claim", postgres_dsn, anyio_backend, str(lease))
    try:
        assert process.stdout is not None
        _, token, expires_at = (await _line(BufferedByteReceiveStream(process.stdout))).split()
        process.kill()
        await process.wait()
    finally:
        await process.aclose()
    assert await store.claim_next(worker="parent", lease=30) == []  # its lease holds
    claims = await _eventually(lambda: store.claim_next(worker="parent", lease=30))
    assert [c.key for c in claims] == [key] and claims[0].token > int(token)
    # Taken by the database's clock, after the dead worker's lease ended.
    assert claims[0].expires_at - 30 >= float(expires_at)
    info = await store.thread(key)
    assert info is not None and info.live_turn == "turn"  # the turn to resume
    await store.append(
        key, [TurnEnded(turn_id="turn", status="completed", reason=_done())], claim=claims[0]
    )
    assert await store.threads(live=True) == []


def _done() -> toolrelay.TerminalReason:
    from toolrelay._reasons import ReasonKind, TerminalReason

    return TerminalReason(kind=ReasonKind.COMPLETED, message="done")


async def test_a_stale_claim_write_waits_for_nothing_and_changes_nothing(
    store: PostgresStore, postgres_dsn: str
) -> None:
    key = ThreadKey("t")
    other = PostgresStore(postgres_dsn)
    await other.open()
    try:
        first = await store.claim(key, worker="a", lease=0.2)
        assert first is not None
        await store.append(key, [TurnStarted(turn_id="turn")], claim=first)
        await anyio.sleep(0.4)
        second = await other.claim(key, worker="b", lease=30)
        assert second is not None
        before = await store.thread(key)
        with pytest.raises(StaleClaimError, match="nothing was written"):
            await store.append(key, [_state(1)], claim=first)
        assert await store.thread(key) == before
    finally:
        await other.aclose()


# -- the live tail ----------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_reader_in_this_process_sees_every_entry_a_writer_process_appends(
    store: PostgresStore, postgres_dsn: str, anyio_backend: str
) -> None:
    key = ThreadKey("tail")
    count = 300
    seen: list[Entry] = []
    async with store.tail(key) as entries:
        process = await _spawn("write", postgres_dsn, anyio_backend, str(count))
        try:
            with anyio.fail_after(60):
                async for entry in entries:
                    seen.append(entry)
                    if entry.seq == count:
                        break
            assert process.stdout is not None
            assert await _line(BufferedByteReceiveStream(process.stdout)) == f"done {count}"
            assert await process.wait() == 0
        finally:
            await process.aclose()
    assert [e.seq for e in seen] == list(range(1, count + 1))  # in order, no duplicate
    assert [e.record for e in seen] == [
        StateSaved(turn_id="w", state={"n": n}) for n in range(1, count + 1)
    ]


async def test_one_commit_feed_names_every_thread_a_writer_process_commits_to(
    store: PostgresStore, postgres_dsn: str, anyio_backend: str
) -> None:
    assert isinstance(store, NotifyingStore)
    count = 40
    async with store.commits() as commits:
        await store.append(ThreadKey("mine", "room", "srv"), [_state(1)])
        with anyio.fail_after(10):
            assert await anext(commits) == (ThreadKey("mine", "room", "srv"), 1)
        process = await _spawn("write", postgres_dsn, anyio_backend, str(count))
        try:
            seqs: list[int] = []
            with anyio.fail_after(60):
                async for commit in commits:
                    assert commit is not None
                    key, seq = commit
                    assert key == ThreadKey("tail")
                    seqs.append(seq)
                    if seq == count:
                        break
            assert await process.wait() == 0
        finally:
            await process.aclose()
    assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # one per commit, in order


async def test_the_commit_feed_says_none_when_it_may_have_missed_commits(
    postgres_server: PostgresServer, store: PostgresStore
) -> None:
    key = ThreadKey("t")
    async with store.commits() as commits:
        await anyio.to_thread.run_sync(postgres_server.restart)
        with anyio.fail_after(30):
            assert await anext(commits) is None  # reconnected: read everything again
        await store.append(key, [_state(1)])
        with anyio.fail_after(10):
            assert await anext(commits) == (key, 1)


async def test_a_tail_starts_after_what_the_reader_has(store: PostgresStore) -> None:
    key = ThreadKey("t")
    await store.append(key, sample_records())
    async with store.tail(key, after=4) as entries:
        got = [await anext(entries), await anext(entries)]
        assert [e.seq for e in got] == [5, 6]
        await store.append(key, [_state(7)])
        with anyio.fail_after(10):
            assert await anext(entries) == Entry(7, _state(7))


async def test_a_tail_fills_the_gap_when_notifications_were_lost(
    store: PostgresStore, postgres_dsn: str
) -> None:
    key = ThreadKey("t")
    writer = PostgresStore(postgres_dsn)
    await writer.open()
    try:
        async with store.tail(key, poll=30) as entries:
            await writer.append(key, [_state(1)])
            with anyio.fail_after(10):
                assert (await anext(entries)).seq == 1
            # End the tail's LISTEN session; what is written meanwhile is never notified
            # to it. A foreign payload on the channel does not confuse it either.
            with _admin(postgres_dsn) as admin:
                ended = admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND query LIKE 'LISTEN%'"
                ).fetchall()
                assert ended == [(True,)]
                await writer.append(key, [_state(2), _state(3)])
                admin.execute("SELECT pg_notify('toolrelay_toolrelay', 'garbage')")
                await writer.append(key, [_state(4)])
            with anyio.fail_after(10):
                assert [(await anext(entries)).seq for _ in range(3)] == [2, 3, 4]
    finally:
        await writer.aclose()


@pytest.mark.slow
async def test_a_tail_goes_on_across_a_server_restart(
    postgres_server: PostgresServer, store: PostgresStore
) -> None:
    key = ThreadKey("t")
    async with store.tail(key, poll=30) as entries:
        await store.append(key, [_state(1)])
        with anyio.fail_after(10):
            assert (await anext(entries)).seq == 1
        await anyio.to_thread.run_sync(postgres_server.restart)
        await store.append(key, [_state(2)])
        with anyio.fail_after(20):
            assert await anext(entries) == Entry(2, _state(2))


async def test_a_tail_reads_a_long_log_in_bounded_batches(store: PostgresStore) -> None:
    key = ThreadKey("t")
    await store.append(key, [_state(n) for n in range(1, 1201)])
    async with store.tail(key) as entries:
        seqs = [(await anext(entries)).seq for _ in range(1200)]
    assert seqs == list(range(1, 1201))


# -- the docs' examples, run against the real server -------------------------------------------


async def test_the_docs_worker_and_tail_examples_work_on_a_real_server(
    store: PostgresStore, postgres_dsn: str
) -> None:
    import re

    page = Path(toolrelay.__file__).parents[2] / "docs" / "postgresql.md"
    namespace: dict[str, Any] = {}
    for block in re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S):
        exec(compile(block, page.name, "exec"), namespace)
    orphan, busy = ThreadKey("orphan"), ThreadKey("busy")
    await store.append(orphan, [TurnStarted(turn_id="turn")])  # its worker died
    held = await store.claim(busy, worker="alive", lease=30)
    assert held is not None
    await store.append(busy, [TurnStarted(turn_id="turn")], claim=held)

    other = PostgresStore(postgres_dsn)
    await other.open()
    try:
        async with anyio.create_task_group() as group:
            followed: list[int] = []

            async def follow() -> None:
                followed.extend(await namespace["follow"](other, orphan, 0))

            group.start_soon(follow)
            assert await namespace["resume_orphaned_turns"](store, "w2") == 1
        assert followed == [1, 2, 3]
    finally:
        await other.aclose()
    assert [i.key for i in await store.threads(live=True)] == [busy]
    assert await store.claim(orphan, worker="w3", lease=30) is not None  # released


# -- the engine on a fenced store: a worker's turn moves to another ---------------------------


async def test_the_engine_writes_under_the_workers_claim_and_only_then(
    store: PostgresStore,
) -> None:
    key = ThreadKey("t")
    fenced = FencedStore(store, worker="w1", lease=30)
    agent = ScriptedAgent([text("hello")], [text("again")])
    async with Engine(agent, store=fenced, recover=False) as engine:
        unclaimed = await engine.run_turn(key, "hi")
        assert unclaimed.status is RunStatus.failed
        assert unclaimed.reason is not None and "not held" in unclaimed.reason.message
        assert await store.read(key) == []  # nothing landed without a claim
        claim = await fenced.claim(key)
        assert claim is not None
        async with fenced.holding(claim):
            assert fenced.held(key) == claim
            other = ThreadKey("u")
            claim_u = await fenced.claim(other)
            assert claim_u is not None
            async with fenced.holding(claim_u):
                turn = await engine.run_turn(other, "hi")
            assert turn.status is RunStatus.completed
        assert fenced.held(key) is None
    kinds = [type(e.record).__name__ for e in await store.read(ThreadKey("u"))]
    assert kinds[0] == "TurnStarted" and kinds[-1] == "TurnEnded"
    assert await store.claim(ThreadKey("u"), worker="w2", lease=30) is not None  # released


async def test_a_turn_whose_worker_lost_its_lease_is_finished_by_the_worker_that_took_it(
    store: PostgresStore, postgres_dsn: str
) -> None:
    key = ThreadKey("t")
    calls: list[str] = []
    entered, gate = anyio.Event(), anyio.Event()

    async def slow(n: int) -> int:
        """Takes its time."""
        calls.append(f"slow {n}")
        entered.set()
        await gate.wait()
        return n * 2

    tools = ToolRegistry.of(slow)
    first = FencedStore(store, worker="w1", lease=30)
    second_store = PostgresStore(postgres_dsn)
    await second_store.open()
    second = FencedStore(second_store, worker="w2", lease=30)
    try:
        agent = ScriptedAgent([tool_call("slow", {"n": 1}, id="c1")], [text("never")])
        claim = await first.claim(key)
        assert claim is not None
        async with Engine(agent, tools=tools, store=first, recover=False) as engine:
            async with first.holding(claim), anyio.create_task_group() as group:
                done: list[RunStatus] = []

                async def run() -> None:
                    done.append((await engine.run_turn(key, "go")).status)

                group.start_soon(run)
                with anyio.fail_after(30):
                    await entered.wait()
                # The worker stalls past its lease (forced here) and w2 takes over.
                with _admin(postgres_dsn) as admin:
                    admin.execute("UPDATE toolrelay.claims SET expires_at = 0")
                taken = await second.claim_next()
                assert [c.key for c in taken] == [key]
                written = len(await store.read(key))
                gate.set()  # w1's tool returns: its result is refused, and all after it
            assert done == [RunStatus.failed]
        assert len(await store.read(key)) == written

        recovering = ScriptedAgent([text("finished by w2")])
        async with (
            Engine(recovering, tools=tools, store=second, recover=False) as engine,
            second.holding(taken[0]),
        ):
            (turn,) = await engine.recover()
            with anyio.fail_after(30):
                await turn.wait_finished()
            assert turn.status is RunStatus.completed
    finally:
        await second_store.aclose()
    assert calls == ["slow 1"]  # not run again: its result never committed, not idempotent
    entries = await store.read(key)
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    finished = [e.record for e in entries if isinstance(e.record, ToolFinished)]
    assert len(finished) == 1 and not finished[0].result.ok  # "interrupted"
    assert "not run again" in (finished[0].result.error or "")
    ends = [e.record for e in entries if isinstance(e.record, TurnEnded)]
    assert [r.status for r in ends] == ["completed"]


# -- the inbox ------------------------------------------------------------------------------


def test_the_postgres_store_has_an_inbox_and_the_embedded_stores_do_not(
    tmp_path: Path,
) -> None:
    assert isinstance(PostgresStore("postgresql://nobody@127.0.0.1:1/none"), InboxStore)
    assert not isinstance(MemoryStore(), InboxStore)
    assert not isinstance(SQLiteStore(tmp_path / "one.db"), InboxStore)


async def test_letters_reach_the_holder_of_the_thread_once_in_order_and_notified(
    store: PostgresStore, postgres_dsn: str
) -> None:
    key = ThreadKey("t", "room", "srv")
    await store.append(key, [_state(1)])
    other = PostgresStore(postgres_dsn)  # another process's view of the same store
    try:
        async with store.notices() as notices:
            assert await other.post(key, "results", b"first", limit=4, max_age=60)
            assert await other.post(key, "cancel", b"second", limit=4, max_age=60)
            with anyio.fail_after(10):
                assert await anext(notices) == Posted(key)
                assert await anext(notices) == Posted(key)
            claim = await store.claim(key, worker="holder", lease=30)
            assert claim is not None
            letters = await store.collect(claim, max_age=60)
            assert [(x.kind, x.body) for x in letters] == [
                ("results", b"first"),
                ("cancel", b"second"),
            ]
            assert await store.collect(claim, max_age=60) == []  # taken once
            await other.answer("ticket-1", "taken")
            with anyio.fail_after(10):
                assert await anext(notices) == Answered("ticket-1", "taken")
            await store.append(key, [_state(2)], claim=claim)
            with anyio.fail_after(10):
                assert await anext(notices) == (key, 2)  # commits come on the same feed
    finally:
        await other.aclose()


async def test_an_inbox_is_bounded_and_old_letters_are_dropped_unread(
    store: PostgresStore, postgres_dsn: str
) -> None:
    key = ThreadKey("t")
    await store.append(key, [_state(1)])
    assert [await store.post(key, "results", b"x", limit=2, max_age=60) for _ in range(3)] == [
        True,
        True,
        False,
    ]
    assert not await store.post(ThreadKey("nowhere"), "cancel", b"x", limit=2, max_age=60)
    with _admin(postgres_dsn) as admin:
        admin.execute("UPDATE toolrelay.inbox SET posted_at = posted_at - 120")
    claim = await store.claim(key, worker="w", lease=30)
    assert claim is not None
    assert await store.collect(claim, max_age=60) == []  # two minutes old: dropped
    with _admin(postgres_dsn) as admin:
        assert admin.execute("SELECT count(*) FROM toolrelay.inbox").fetchone() == (0,)


async def test_a_worker_whose_claim_was_taken_collects_nothing(store: PostgresStore) -> None:
    key = ThreadKey("t")
    await store.append(key, [_state(1)])
    claim = await store.claim(key, worker="late", lease=0.05)
    assert claim is not None
    await anyio.sleep(0.2)
    taker = await store.claim(key, worker="taker", lease=30)
    assert taker is not None
    assert await store.post(key, "cancel", b"stop", limit=4, max_age=60)
    with pytest.raises(StaleClaimError):
        await store.collect(claim, max_age=60)
    assert [x.body for x in await store.collect(taker, max_age=60)] == [b"stop"]


async def test_a_store_of_schema_version_1_gets_its_inbox_when_opened(
    postgres_dsn: str,
) -> None:
    store = PostgresStore(postgres_dsn)
    await store.open()
    await store.append(ThreadKey("t"), [_state(1)])
    await store.aclose()
    with _admin(postgres_dsn) as admin:  # as version 1 left it
        admin.execute("DROP TABLE toolrelay.inbox")
        admin.execute("DELETE FROM toolrelay.schema_version WHERE version > 1")
    store = PostgresStore(postgres_dsn)
    try:
        assert await store.post(ThreadKey("t"), "cancel", b"x", limit=4, max_age=60)
        assert [e.seq for e in await store.read(ThreadKey("t"))] == [1]
    finally:
        await store.aclose()
    with _admin(postgres_dsn) as admin:
        versions = admin.execute("SELECT version FROM toolrelay.schema_version").fetchall()
    assert versions == [(1,), (2,)]
