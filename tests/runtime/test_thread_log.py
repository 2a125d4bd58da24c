"""One thread's log: flushes of a thread never overlap, and what a flush took is
written once, in order, whatever else waits or is cancelled meanwhile: shielded for a
store that does not settle a cancelled append, settled by the next flush for one that
does (``ordered_cancellation``)."""

from __future__ import annotations

from collections.abc import Sequence

import anyio
import pytest

from toolrelay import StoreUnavailableError, ThreadKey
from toolrelay._runtime._durable import ThreadLog
from toolrelay.store import MemoryStore, Record, TurnStarted, replay

pytestmark = pytest.mark.anyio

KEY = ThreadKey("t1")


class HeldStore(MemoryStore):
    """A memory store whose appends wait at a gate the test opens, and which says
    whether two appends of one thread were ever under way at once. Not ordered: the
    log shields its writes (``landing`` makes it one that writes, then waits, as an
    ordered store's append whose work had begun)."""

    ordered_cancellation = False

    def __init__(self, *, landing: bool = False) -> None:
        super().__init__()
        self.gate = anyio.Event()
        self.entered = anyio.Event()
        self.under_way = 0
        self.overlapped = False
        self.fail_next = False
        self.landing = landing

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        self.under_way += 1
        self.overlapped |= self.under_way > 1
        self.entered.set()
        try:
            if self.landing:
                written = await super().append(key, records, owner=owner)
                with anyio.fail_after(5):
                    await self.gate.wait()
                return written
            with anyio.fail_after(5):  # a broken log fails the test instead of hanging it
                await self.gate.wait()
            if self.fail_next:
                self.fail_next = False
                raise StoreUnavailableError("the disk is gone")
            return await super().append(key, records, owner=owner)
        finally:
            self.under_way -= 1


class OrderedHeldStore(HeldStore):
    """:class:`HeldStore`, saying it settles a cancelled append (as it does: the next
    call sees whether the append wrote)."""

    ordered_cancellation = True


async def _written(store: MemoryStore) -> list[str]:
    return [
        entry.record.turn_id
        for entry in await store.read(KEY)
        if isinstance(entry.record, TurnStarted)
    ]


async def test_a_second_flush_waits_for_the_first_and_writes_only_what_is_left() -> None:
    store = HeldStore()
    log = ThreadLog(store, KEY)
    log.add(TurnStarted(turn_id="a"))
    async with anyio.create_task_group() as group:
        group.start_soon(log.flush)
        await store.entered.wait()
        log.add(TurnStarted(turn_id="b"))
        group.start_soon(log.flush)
        group.start_soon(log.flush)
        await anyio.wait_all_tasks_blocked()
        in_the_store = store.under_way  # the others wait at the log, not in the store
        store.gate.set()
    assert in_the_store == 1
    assert not store.overlapped
    assert await _written(store) == ["a", "b"]
    assert not log.pending
    assert replay(await store.read(KEY)).last_seq == 2


async def test_a_waiter_cancelled_at_the_log_leaves_it_usable() -> None:
    store = HeldStore()
    log = ThreadLog(store, KEY)
    log.add(TurnStarted(turn_id="a"))
    async with anyio.create_task_group() as group:
        group.start_soon(log.flush)
        await store.entered.wait()
        log.add(TurnStarted(turn_id="b"))
        with anyio.CancelScope() as waiting:
            waiting.cancel()
            await log.flush()  # cancelled while it waited: it took nothing
        assert waiting.cancelled_caught
        assert log.pending
        store.gate.set()
    await log.flush()
    assert await _written(store) == ["a", "b"]
    assert not store.overlapped


async def test_a_flush_the_store_refused_puts_its_records_back_in_front() -> None:
    store = HeldStore()
    store.fail_next = True
    store.gate.set()
    log = ThreadLog(store, KEY)
    log.add(TurnStarted(turn_id="a"))
    with pytest.raises(StoreUnavailableError):
        await log.flush()
    log.add(TurnStarted(turn_id="b"))
    await log.flush()
    assert await _written(store) == ["a", "b"]


async def test_a_cancelled_flush_still_writes_what_it_took() -> None:
    store = HeldStore()
    log = await _cancelled_in_flush(store, release=True)  # shielded: it finishes
    assert await _written(store) == ["a"]
    assert not log.pending


async def _cancelled_in_flush(store: HeldStore, *, release: bool = False) -> ThreadLog:
    """A log whose flush of turn ``a`` was cancelled while ``store`` held it; with
    ``release``, the store lets the write go on at once (a shielded write waits for
    it; an ordered store's stops where it was)."""
    log = ThreadLog(store, KEY)
    log.add(TurnStarted(turn_id="a"))
    with anyio.CancelScope() as scope:
        async with anyio.create_task_group() as group:
            group.start_soon(log.flush)
            await store.entered.wait()
            scope.cancel()
            if release:
                with anyio.CancelScope(shield=True):
                    store.gate.set()
                    await anyio.wait_all_tasks_blocked()
    assert release or scope.cancelled_caught  # a write let go may finish first
    return log


@pytest.mark.parametrize("landing", [False, True], ids=["not-landed", "landed"])
async def test_an_ordered_stores_cancelled_write_is_settled_by_the_next_flush(
    landing: bool,
) -> None:
    store = OrderedHeldStore(landing=landing)
    log = await _cancelled_in_flush(store)
    assert await _written(store) == (["a"] if landing else [])
    unsure = log.pending  # until the next flush looks
    assert unsure
    store.gate.set()
    log.add(TurnStarted(turn_id="b"))
    await log.flush()
    assert await _written(store) == ["a", "b"]  # once each, in order
    assert not log.pending
    assert replay(await store.read(KEY)).last_seq == 2


async def test_a_cancelled_write_stays_unsure_while_the_store_cannot_be_read() -> None:
    store = OrderedHeldStore(landing=True)
    log = await _cancelled_in_flush(store)
    store.gate.set()

    async def unreadable(key: ThreadKey) -> None:
        raise StoreUnavailableError("the disk is gone")

    store.thread = unreadable  # type: ignore[method-assign]
    with pytest.raises(StoreUnavailableError):
        await log.flush()
    assert log.pending
    del store.thread  # readable again: the next flush settles it
    await log.flush()
    assert await _written(store) == ["a"]
    assert not log.pending


async def test_a_log_is_settled_only_once_the_flush_that_took_its_records_wrote_them() -> None:
    store = HeldStore()
    log = ThreadLog(store, KEY)
    seen = [log.settled]  # nothing added
    log.add(TurnStarted(turn_id="a"))
    seen.append(log.settled)
    async with anyio.create_task_group() as group:
        group.start_soon(log.flush)
        await store.entered.wait()
        seen.append(log.settled)  # taken, not written yet
        taken = log.pending
        store.gate.set()
    seen.append(log.settled)
    assert seen == [True, False, False, True]
    assert not taken
    assert await _written(store) == ["a"]
