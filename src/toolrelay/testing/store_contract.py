"""The store contract as a pytest suite: subclass it to check a store of your own.

Every store toolrelay ships passes it unchanged; a store you write passes it too::

    from toolrelay.testing.store_contract import DurableStoreContract

    class TestMyStore(DurableStoreContract):  # StoreContract for a store in memory
        def make_store(self, path):
            return MyStore(path / "data")

A store several workers share (:class:`toolrelay.store.ClaimingStore`) also passes
:class:`ClaimingStoreContract`, mixed in beside the others; a store that sets
``ordered_cancellation`` (rule 7 of :mod:`toolrelay.store`) passes
:class:`OrderedCancellationContract`; a :class:`toolrelay.store.ReadAppendStore`
(rule 8) passes :class:`ReadAppendContract`.

The tests are ``anyio`` tests: they run on every backend your ``anyio_backend``
fixture names (asyncio by default). ``make_store`` gets a fresh directory per test;
:class:`DurableStoreContract` calls it again with the same one to reopen the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import pytest

from toolrelay._core import ThreadKey, ToolResult
from toolrelay._errors import StaleClaimError
from toolrelay._machines import ToolCallStatus
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.protocol import Interrupt, ResumeEntry, UserMessage
from toolrelay.store import (
    Claim,
    ClaimingStore,
    Entry,
    MessageSaved,
    ReadAppendStore,
    Record,
    StateSaved,
    Store,
    StoredAgentResult,
    StoredCall,
    ToolFinished,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
    hold,
    message_to_record,
)

__all__ = (
    "ClaimingStoreContract",
    "DurableStoreContract",
    "OrderedCancellationContract",
    "ReadAppendContract",
    "StoreContract",
    "sample_records",
)


def sample_records(turn_id: str = "turn-1") -> list[Record]:
    """One record of every kind, as a turn with a tool round writes them."""
    call = StoredCall(
        id="call-1",
        name="lookup",
        arguments='{"name": "alice"}',
        status=ToolCallStatus.executing,
        run_id="run-1",
        encrypted_value="sig",
    )
    ran = StoredCall(  # one the agent ran itself, with its result
        id="call-0",
        name="roll_die",
        arguments="{}",
        status=ToolCallStatus.completed,
        run_id="run-1",
        parent_message_id="p-0",
        result=ToolResult.success("4"),
    )
    return [
        TurnStarted(
            turn_id=turn_id,
            resume=(ResumeEntry(interrupt_id="i-0", status="resolved", payload={"ok": True}),),
        ),
        MessageSaved(
            turn_id=turn_id, message=message_to_record(UserMessage(id="u-1", content="hi ✓"))
        ),
        ToolsStarted(
            turn_id=turn_id,
            run_id="run-1",
            depth=0,
            runs=1,
            calls=(ran, call),
            agent_results=(StoredAgentResult(call_id="call-0", message_id="r-0", after=1),),
        ),
        ToolFinished(turn_id=turn_id, call_id="call-1", result=ToolResult.success("42")),
        StateSaved(turn_id=turn_id, state={"count": 1, "nested": [1, {"a": None}]}),
        TurnEnded(
            turn_id=turn_id,
            status="interrupted",
            reason=TerminalReason(kind=ReasonKind.INTERRUPTED, message="asks"),
            interrupts=(Interrupt(id="i-1", reason="approval"),),
        ),
    ]


def _started(turn: str) -> TurnStarted:
    return TurnStarted(turn_id=turn)


def _ended(turn: str) -> TurnEnded:
    return TurnEnded(
        turn_id=turn,
        status="completed",
        reason=TerminalReason(kind=ReasonKind.COMPLETED, message="done"),
    )


async def _claimed(store: ClaimingStore, *, lease: float) -> Claim:
    """Worker ``a``'s claim of the free thread ``t``."""
    claim = await store.claim(ThreadKey("t"), worker="a", lease=lease)
    assert claim is not None
    return claim


@pytest.mark.anyio
class StoreContract:
    """The rules of :class:`toolrelay.store.Store`, one test each."""

    def make_store(self, path: Path) -> Store:
        """A store whose data lives under ``path`` (called again to reopen it)."""
        raise NotImplementedError

    @pytest.fixture
    async def store(self, tmp_path: Path) -> Any:
        store = self.make_store(tmp_path)
        await store.open()
        yield store
        await store.aclose()

    async def test_sequence_numbers_start_at_one_and_grow_by_one_per_record(
        self, store: Store
    ) -> None:
        key = ThreadKey("t")
        records = sample_records()
        assert await store.append(key, records[:2]) == 2
        assert await store.append(key, records[2:3]) == 3
        assert await store.append(key, records[3:]) == len(records)
        entries = await store.read(key)
        assert entries == [Entry(i, record) for i, record in enumerate(records, 1)]

    async def test_read_after_returns_what_follows_in_order_and_limit_bounds_it(
        self, store: Store
    ) -> None:
        key = ThreadKey("t")
        records = sample_records()
        await store.append(key, records)
        assert [e.seq for e in await store.read(key, after=4)] == list(range(5, len(records) + 1))
        assert [e.seq for e in await store.read(key, after=1, limit=2)] == [2, 3]
        assert await store.read(key, after=len(records)) == []
        assert await store.read(ThreadKey("unknown")) == []

    async def test_max_bytes_bounds_a_read_by_its_bodies_but_returns_the_first_record(
        self, store: Store
    ) -> None:
        key = ThreadKey("t")
        text = "x" * 10_000
        big = [
            MessageSaved(
                turn_id="a", message=message_to_record(UserMessage(id=f"u{i}", content=text))
            )
            for i in range(6)
        ]
        await store.append(key, big)
        # One record is over 10 000 bytes stored: a budget of 25 000 holds two of them.
        assert [e.seq for e in await store.read(key, max_bytes=25_000)] == [1, 2]
        assert [e.seq for e in await store.read(key, after=2, max_bytes=25_000)] == [3, 4]
        assert [e.seq for e in await store.read(key, after=1, max_bytes=1)] == [2]
        assert [e.seq for e in await store.read(key, limit=1, max_bytes=10**9)] == [1]
        assert [e.seq for e in await store.read(key, after=4, max_bytes=10**9)] == [5, 6]
        assert await store.read(key, after=6, max_bytes=1) == []

    async def test_every_record_kind_reads_back_equal(self, store: Store) -> None:
        key = ThreadKey("t")
        records = sample_records()
        await store.append(key, records)
        assert [entry.record for entry in await store.read(key)] == records

    async def test_threads_are_independent_by_every_part_of_their_key(self, store: Store) -> None:
        keys = [ThreadKey("t"), ThreadKey("t", "room"), ThreadKey("t", "", "server")]
        for i, key in enumerate(keys):
            for _ in range(i + 1):
                await store.append(key, [_started(f"turn-{i}")])
        for i, key in enumerate(keys):
            assert [e.seq for e in await store.read(key)] == list(range(1, i + 2))
            info = await store.thread(key)
            assert info is not None and info.key == key and info.last_seq == i + 1

    async def test_an_empty_append_is_refused(self, store: Store) -> None:
        with pytest.raises(ValueError):
            await store.append(ThreadKey("t"), [])
        assert await store.thread(ThreadKey("t")) is None

    async def test_a_failed_append_writes_nothing_and_uses_no_sequence_number(
        self, store: Store
    ) -> None:
        key = ThreadKey("t")
        await store.append(key, [_started("a")])
        unencodable = StateSaved(turn_id="a", state={"x": object()})
        with pytest.raises(TypeError):
            await store.append(key, [_ended("a"), unencodable])
        assert await store.append(key, [_ended("a")]) == 2
        assert [e.record for e in await store.read(key)] == [_started("a"), _ended("a")]

    async def test_concurrent_appends_to_one_thread_get_distinct_gapless_numbers(
        self, store: Store
    ) -> None:
        key = ThreadKey("t")
        last: list[int] = []

        async def write(i: int) -> None:
            last.append(await store.append(key, [_started(f"a{i}"), _ended(f"a{i}")]))

        async with anyio.create_task_group() as group:
            for i in range(20):
                group.start_soon(write, i)
        assert sorted(last) == list(range(2, 41, 2))
        entries = await store.read(key)
        assert [e.seq for e in entries] == list(range(1, 41))
        # Each append's records stay together, in order.
        for first, second in zip(entries[::2], entries[1::2], strict=True):
            assert isinstance(first.record, TurnStarted) and isinstance(second.record, TurnEnded)
            assert first.record.turn_id == second.record.turn_id

    async def test_the_owner_is_recorded_by_the_first_write_and_never_changes(
        self, store: Store
    ) -> None:
        key = ThreadKey("t")
        await store.append(key, [_started("a")], owner="alice")
        await store.append(key, [_ended("a")], owner="mallory")
        info = await store.thread(key)
        assert info is not None and info.owner == "alice"
        await store.append(ThreadKey("u"), [_started("b")])
        assert [i.key for i in await store.threads(owner="alice")] == [key]
        other = await store.thread(ThreadKey("u"))
        assert other is not None and other.owner is None

    async def test_the_live_turn_is_the_last_started_and_not_ended(self, store: Store) -> None:
        key = ThreadKey("t")
        await store.append(key, [_started("a")])
        assert (info := await store.thread(key)) is not None and info.live_turn == "a"
        await store.append(key, [_started("b")])  # a newer turn took over
        await store.append(key, [_ended("a")])  # the older one's end comes late
        assert (info := await store.thread(key)) is not None and info.live_turn == "b"
        assert [i.key for i in await store.threads(live=True)] == [key]
        await store.append(key, [_ended("b")])
        assert (info := await store.thread(key)) is not None and info.live_turn is None
        assert await store.threads(live=True) == []
        assert [i.key for i in await store.threads(live=False)] == [key]

    async def test_threads_are_listed_oldest_first_with_their_times(self, store: Store) -> None:
        keys = [ThreadKey(f"t{i}") for i in range(5)]
        for key in keys:
            await store.append(key, [_started("a")])
        listed = await store.threads()
        assert [i.key for i in listed] == keys
        for info in listed:
            assert info.created_at <= info.updated_at

    async def test_a_deleted_thread_is_gone_and_starts_afresh(self, store: Store) -> None:
        key = ThreadKey("t")
        await store.append(key, sample_records())
        assert await store.delete_thread(key) is True
        assert await store.delete_thread(key) is False
        assert await store.read(key) == [] and await store.thread(key) is None
        assert await store.append(key, [_started("b")]) == 1

    async def test_open_and_close_are_idempotent(self, store: Store) -> None:
        await store.open()
        await store.append(ThreadKey("t"), [_started("a")])
        await store.aclose()
        await store.aclose()
        await store.open()
        assert len(await store.read(ThreadKey("t"))) == 1


class DurableStoreContract(StoreContract):
    """:class:`StoreContract`, and what a store that outlives its process keeps."""

    async def test_what_was_committed_is_read_back_after_a_reopen(self, tmp_path: Path) -> None:
        key = ThreadKey("t", "room", "server")
        records = sample_records()
        first = self.make_store(tmp_path)
        await first.open()
        await first.append(key, records, owner="alice")
        await first.aclose()
        second = self.make_store(tmp_path)
        await second.open()
        try:
            assert [e.record for e in await second.read(key)] == records
            info = await second.thread(key)
            assert info is not None and info.owner == "alice"
            assert info.live_turn is None and info.last_seq == len(records)
            assert await second.append(key, [_started("b")]) == len(records) + 1
        finally:
            await second.aclose()


#: Concurrent appends in the cancellation test: enough for a queue to batch them.
_WRITERS = 8


@pytest.mark.anyio
class OrderedCancellationContract:
    """Rule 7, for a store whose class sets ``ordered_cancellation = True``: an append
    cancelled while it waits wrote all of its records or none, and the next call on the
    store already sees which. Mixed in beside :class:`StoreContract`."""

    def make_store(self, path: Path) -> Store:
        """A store whose data lives under ``path``."""
        raise NotImplementedError

    async def test_the_store_says_it_settles_cancelled_appends(self, tmp_path: Path) -> None:
        assert getattr(type(self.make_store(tmp_path)), "ordered_cancellation", None) is True

    @pytest.mark.parametrize("checkpoints", [0, 1, 2, 3, 5, 8, 13])
    async def test_a_cancelled_append_wrote_all_or_nothing_and_the_next_call_sees_which(
        self, tmp_path: Path, checkpoints: int
    ) -> None:
        store = self.make_store(tmp_path)
        await store.open()
        try:
            records = sample_records()
            keys = [ThreadKey(f"t{i}") for i in range(_WRITERS)]
            with anyio.CancelScope() as scope:
                async with anyio.create_task_group() as group:
                    for key in keys:
                        group.start_soon(store.append, key, records)
                    for _ in range(checkpoints):  # the appends get that far, then stop
                        await anyio.lowlevel.checkpoint()
                    scope.cancel()
            seen = {key: len(await store.read(key)) for key in keys}
            assert set(seen.values()) <= {0, len(records)}
            await anyio.sleep(0.05)  # what was under way anywhere has finished by now
            assert {key: len(await store.read(key)) for key in keys} == seen
            for key in keys:  # numbering goes on from what was written
                assert await store.append(key, [_started("next")]) == seen[key] + 1
        finally:
            await store.aclose()


@pytest.mark.anyio
class ReadAppendContract:
    """Rule 8, for a :class:`toolrelay.store.ReadAppendStore`: ``read_and_append`` is
    ``read`` then ``append`` with nothing between them. Mixed in beside
    :class:`StoreContract`."""

    def make_store(self, path: Path) -> Store:
        """A store whose data lives under ``path``."""
        raise NotImplementedError

    @pytest.fixture
    async def together(self, tmp_path: Path) -> Any:
        store = self.make_store(tmp_path)
        assert isinstance(store, ReadAppendStore)
        await store.open()
        yield store
        await store.aclose()

    async def test_a_new_thread_reads_nothing_and_is_created_by_the_append(
        self, together: ReadAppendStore
    ) -> None:
        key = ThreadKey("t", room_id="r")
        records = sample_records()
        assert await together.read_and_append(key, records, owner="alice") == ([], len(records))
        assert await together.read(key) == [Entry(i, r) for i, r in enumerate(records, 1)]
        info = await together.thread(key)
        assert info is not None and info.owner == "alice" and info.last_seq == len(records)

    async def test_a_thread_reads_what_it_had_and_its_numbers_go_on(
        self, together: ReadAppendStore
    ) -> None:
        key = ThreadKey("t")
        await together.append(key, [_started("a"), _ended("a")], owner="alice")
        await together.append(ThreadKey("other"), [_started("x")])
        before = await together.read(key)
        records = sample_records("b")
        assert await together.read_and_append(key, records, owner="bob") == (
            before,
            2 + len(records),
        )
        assert await together.read(key) == before + [Entry(i, r) for i, r in enumerate(records, 3)]
        info = await together.thread(key)
        assert info is not None and info.owner == "alice"  # (rule 4)

    async def test_what_it_reads_is_exactly_what_came_before_its_records(
        self, together: ReadAppendStore
    ) -> None:
        """Concurrent with appends to the same thread and to others (new and old):
        each call reads every record numbered before its own, and no other."""
        keys = [ThreadKey(f"t{i}") for i in range(4)]
        for key in keys[:2]:
            await together.append(key, [_started("old")])
        results: list[tuple[ThreadKey, str, list[Entry], int]] = []

        async def read_and_append(key: ThreadKey, turn: str) -> None:
            before, last = await together.read_and_append(key, [_started(turn), _ended(turn)])
            results.append((key, turn, before, last))

        async with anyio.create_task_group() as group:
            for i in range(12):
                key = keys[i % len(keys)]
                group.start_soon(read_and_append, key, f"r{i}")
                group.start_soon(together.append, key, [_started(f"a{i}")])
        assert len(results) == 12
        for key, turn, before, last in results:
            log = await together.read(key)
            assert [e.seq for e in log] == list(range(1, len(log) + 1))
            assert before == log[: last - 2]
            assert [e.record for e in log[last - 2 : last]] == [_started(turn), _ended(turn)]

    async def test_a_failed_call_writes_nothing_and_uses_no_sequence_number(
        self, together: ReadAppendStore
    ) -> None:
        key = ThreadKey("t")
        await together.append(key, [_started("a")])
        unencodable = StateSaved(turn_id="a", state={"x": object()})
        with pytest.raises(TypeError):
            await together.read_and_append(key, [_ended("a"), unencodable])
        with pytest.raises(ValueError):
            await together.read_and_append(key, [])
        assert await together.read_and_append(key, [_ended("a")]) == (
            [Entry(1, _started("a"))],
            2,
        )


@pytest.mark.anyio
class ClaimingStoreContract:
    """The rules of :class:`toolrelay.store.ClaimingStore`, for a store that shares
    threads between workers; mix it in beside :class:`DurableStoreContract`.

    ``make_store`` is called twice with the same directory: two instances, as two
    worker processes would have. Leases are short (tenths of a second) where a test
    needs one to expire, and long where it needs one to hold.
    """

    def make_store(self, path: Path) -> Store:
        """A store whose data lives under ``path`` (called again for a second worker)."""
        raise NotImplementedError

    @pytest.fixture
    async def workers(self, tmp_path: Path) -> Any:
        first, second = self.make_store(tmp_path), self.make_store(tmp_path)
        assert isinstance(first, ClaimingStore) and isinstance(second, ClaimingStore)
        await first.open()
        await second.open()
        yield first, second
        await first.aclose()
        await second.aclose()

    async def test_a_claimed_thread_is_refused_to_others_until_its_lease_expires(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        key = ThreadKey("t")
        held = await a.claim(key, worker="a", lease=30)
        assert held is not None and held.key == key and held.worker == "a"
        assert await b.claim(key, worker="b", lease=30) is None
        assert await a.claim(key, worker="a", lease=30) is None  # renew instead
        short = await a.claim(ThreadKey("u"), worker="a", lease=0.2)
        assert short is not None
        await anyio.sleep(0.4)
        taken = await b.claim(ThreadKey("u"), worker="b", lease=30)
        assert taken is not None and taken.worker == "b"
        assert taken.token > short.token > held.token  # tokens only grow

    async def test_claim_next_takes_live_unclaimed_threads_oldest_first(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        keys = [ThreadKey(f"t{i}") for i in range(4)]
        for key in keys:
            await a.append(key, [_started("a")])
        await a.append(keys[1], [_ended("a")])  # no live turn: no work
        assert await a.claim(keys[2], worker="a", lease=30) is not None
        claims = await b.claim_next(worker="b", lease=30, limit=10)
        assert [c.key for c in claims] == [keys[0], keys[3]]
        assert all(c.worker == "b" for c in claims)
        assert await a.claim_next(worker="a", lease=30, limit=10) == []

    async def test_two_workers_claiming_at_once_never_share_a_thread(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        keys = [ThreadKey(f"t{i}") for i in range(24)]
        for key in keys:
            await workers[0].append(key, [_started("a")])
        got: dict[str, list[ThreadKey]] = {"a": [], "b": []}

        async def work(store: ClaimingStore, name: str) -> None:
            while claims := await store.claim_next(worker=name, lease=30, limit=3):
                got[name] += [c.key for c in claims]

        async with anyio.create_task_group() as group:
            group.start_soon(work, workers[0], "a")
            group.start_soon(work, workers[1], "b")
        assert not set(got["a"]) & set(got["b"])
        assert sorted(got["a"] + got["b"], key=str) == sorted(keys, key=str)

    async def test_a_write_under_a_stale_claim_is_refused_and_writes_nothing(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        claim = await _claimed(a, lease=0.3)
        key = claim.key
        assert await a.append(key, [_started("a")], claim=claim) == 1
        await anyio.sleep(0.5)
        # Expired, though no one took it yet: a paused worker must not write on.
        with pytest.raises(StaleClaimError):
            await a.append(key, [_ended("a")], claim=claim)
        taken = await b.claim(key, worker="b", lease=30)
        assert taken is not None
        with pytest.raises(StaleClaimError):
            await a.append(key, [_ended("a")], claim=claim)
        assert await b.append(key, [_ended("a")], claim=taken) == 2
        assert [e.record for e in await b.read(key)] == [_started("a"), _ended("a")]
        with pytest.raises(ValueError):
            await b.append(ThreadKey("other"), [_started("x")], claim=taken)

    async def test_renew_extends_a_valid_claim_and_refuses_a_lost_one(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        claim = await _claimed(a, lease=0.5)
        key = claim.key
        renewed = await a.renew(claim, lease=30)
        assert renewed.token == claim.token and renewed.expires_at > claim.expires_at
        await anyio.sleep(0.7)  # past the first lease, within the renewed one
        assert await b.claim(key, worker="b", lease=30) is None
        assert await a.append(key, [_started("a")], claim=renewed) == 1
        short = await a.renew(renewed, lease=0.2)
        await anyio.sleep(0.4)
        with pytest.raises(StaleClaimError):
            await a.renew(short, lease=30)

    async def test_release_lets_another_take_the_thread_at_once(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        claim = await _claimed(a, lease=30)
        key = claim.key
        assert await a.release(claim) is True
        assert await a.release(claim) is False
        taken = await b.claim(key, worker="b", lease=30)
        assert taken is not None and taken.token > claim.token
        with pytest.raises(StaleClaimError):
            await a.append(key, [_started("a")], claim=claim)

    async def test_hold_renews_while_the_body_works_and_releases_at_the_end(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        claim = await _claimed(a, lease=1.0)
        key = claim.key
        async with hold(a, claim, lease=1.0, every=0.1) as held:
            await anyio.sleep(1.5)  # longer than the lease: the heartbeat kept it
            assert await b.claim(key, worker="b", lease=30) is None
            await a.append(key, [_started("a")], claim=held.claim)
        assert held.lost is None
        assert await b.claim(key, worker="b", lease=30) is not None

    async def test_hold_cancels_the_body_when_the_claim_is_lost(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        claim = await _claimed(a, lease=0.2)
        key = claim.key
        reached_the_end = False
        with anyio.fail_after(10), pytest.raises(StaleClaimError):
            # The heartbeat comes too late: the lease expired, another took it.
            async with hold(a, claim, lease=0.2, every=0.6):
                await anyio.sleep(0.4)
                assert await b.claim(key, worker="b", lease=30) is not None
                await anyio.sleep(30)
                reached_the_end = True
        assert not reached_the_end

    async def test_a_refused_write_in_hold_leaves_as_stale_claim_error_itself(
        self, workers: tuple[ClaimingStore, ClaimingStore]
    ) -> None:
        a, b = workers
        claim = await _claimed(a, lease=0.2)
        key = claim.key
        with pytest.raises(StaleClaimError):
            async with hold(a, claim, lease=0.2, every=30) as held:
                await anyio.sleep(0.4)
                assert await b.claim(key, worker="b", lease=30) is not None
                await a.append(key, [_started("a")], claim=held.claim)
        assert await a.read(key) == []
