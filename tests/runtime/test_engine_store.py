"""The engine on a durable store: written as it happens, loaded back, recovered, retried."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.lowlevel
import msgspec
import pytest
from msgspec import UNSET

from toolrelay import (
    Engine,
    EventReceived,
    RunStatus,
    StoreUnavailableError,
    StreamDroppedError,
    TextMessage,
    ThreadKey,
    ToolCallBatch,
    ToolRegistry,
    Turn,
    tool,
)
from toolrelay._reasons import ReasonKind
from toolrelay.protocol import (
    AssistantMessage,
    Event,
    Interrupt,
    Message,
    ResumeEntry,
    RunAgentInput,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageStartEvent,
    ToolMessage,
    UnknownEvent,
    UserMessage,
)
from toolrelay.store import (
    Entry,
    FencedStore,
    MemoryStore,
    MessageSaved,
    Record,
    SQLiteStore,
    Store,
    ToolFinished,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
    decode_record,
    encode_record,
    message_to_record,
    replay,
)
from toolrelay.store._forwarding import ForwardingStore
from toolrelay.testing import (
    Hang,
    Raise,
    ScriptedAgent,
    Step,
    run_interrupted,
    server_tool_call,
    text,
    tool_call,
)

pytestmark = pytest.mark.anyio

KEY = ThreadKey("t1")


def _secret_agent() -> ScriptedAgent:
    return ScriptedAgent(
        [
            tool_call("lookup", {"name": "alice"}, id="c1"),
            tool_call("lookup", {"name": "bob"}, id="c2"),
        ],
        [text("Alice 42, Bob 7.")],
        [text("second answer")],
        [text("third answer")],
    )


async def lookup(name: str) -> int:
    """Look up a person's number."""
    return {"alice": 42, "bob": 7}[name]


TOOLS = ToolRegistry.of(lookup)


@pytest.fixture(params=["memory", "sqlite"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Store]:
    store = MemoryStore() if request.param == "memory" else SQLiteStore(tmp_path / "t.db")
    yield store
    await store.aclose()  # a test may read it after the engine closed it


def _roles(messages: Sequence[Message]) -> list[str]:
    return [str(type(m).__struct_config__.tag) for m in messages]


def _kinds(records: Sequence[object]) -> list[str]:
    return [type(r).__name__ for r in records]


@pytest.mark.parametrize("end", ["cancel", "supersede", "close"])
async def test_a_turn_ended_mid_text_writes_the_text_before_its_end(store: Store, end: str) -> None:
    # The text that was streaming when the turn ended is kept (interrupted), and written
    # before the turn's end: a turn's end is its last record (catch-up stops there).
    streaming: list[Step] = [
        TextMessageStartEvent(message_id="m1", role="assistant"),
        TextMessageContentEvent(message_id="m1", delta="half an ans"),
        Hang(),
    ]
    agent = ScriptedAgent(streaming, [text("the newer answer")])
    async with Engine(agent, store=store) as engine:
        with engine.subscribe(key=KEY, events=True) as notifications:
            turn = engine.start_turn(KEY, "Answer slowly.")
            async for notification in notifications:
                if isinstance(notification, EventReceived) and isinstance(
                    notification.event, TextMessageContentEvent
                ):
                    break
        assert [m.text for m in turn.messages if isinstance(m, TextMessage)] == ["half an ans"]
        if end == "cancel":
            turn.cancel()
        elif end == "supersede":
            await engine.run_turn(KEY, "Never mind.")
        else:
            await engine.aclose()
        await turn.wait_finished()
        entries = await store.read(KEY)
    own = [e.record for e in entries if getattr(e.record, "turn_id", None) == turn.turn_id]
    assert _kinds(own) == ["TurnStarted", "MessageSaved", "MessageSaved", "TurnEnded"]
    saved = own[2]
    assert isinstance(saved, MessageSaved)
    assert saved.message == message_to_record(turn.messages[-1])
    assert isinstance(turn.messages[-1], TextMessage) and turn.messages[-1].interrupted


async def test_every_block_of_a_turn_is_written_in_order(store: Store) -> None:
    async with Engine(_secret_agent(), tools=TOOLS, store=store) as engine:
        turn = await engine.run_turn(KEY, "What are the numbers?")
        assert turn.status is RunStatus.completed
        entries = await store.read(KEY)
    assert [e.seq for e in entries] == list(range(1, len(entries) + 1))
    records = [e.record for e in entries]
    assert _kinds(records) == [
        "TurnStarted",
        "MessageSaved",  # the user's message
        "ToolsStarted",  # the batch, before it runs
        "ToolFinished",
        "ToolFinished",
        "MessageSaved",  # the committed batch
        "MessageSaved",  # the answer
        "TurnEnded",
    ]
    started = records[2]
    assert isinstance(started, ToolsStarted)
    assert [(c.id, c.arguments, c.status.value) for c in started.calls] == [
        ("c1", '{"name":"alice"}', "executing"),
        ("c2", '{"name":"bob"}', "executing"),
    ]
    assert sorted(r.result.content for r in records if isinstance(r, ToolFinished)) == ["42", "7"]
    ended = records[-1]
    assert isinstance(ended, TurnEnded) and ended.status == "completed"
    assert all(getattr(r, "turn_id", None) == turn.turn_id for r in records)


async def test_a_forgotten_thread_comes_back_from_the_store_intact(store: Store) -> None:
    async with Engine(_secret_agent(), tools=TOOLS, store=store) as engine:
        first = await engine.run_turn(KEY, "What are the numbers?")
        before = [(type(m).__name__, m.id) for m in first.conversation.messages]
        assert engine.forget(KEY)
        assert engine.threads == ()
        second = await engine.run_turn(KEY, "And again?")
        after = [(type(m).__name__, m.id) for m in second.conversation.messages]
    assert after[: len(before)] == before
    assert after[len(before)][0] == "UserMessage" and len(after) == len(before) + 2
    assert [m.id for m in second.messages] == [m for _, m in after[len(before) :]]
    batch = second.conversation.messages[1]
    assert isinstance(batch, ToolCallBatch)
    assert [c.result.content for c in batch.calls if c.result] == ["42", "7"]
    assert second.status is RunStatus.completed


async def test_a_new_engine_on_the_same_file_continues_the_thread(tmp_path: Path) -> None:
    path = tmp_path / "t.db"
    async with Engine(_secret_agent(), tools=TOOLS, store=SQLiteStore(path)) as engine:
        await engine.run_turn(KEY, "What are the numbers?")
    agent = ScriptedAgent([text("I remember")])
    async with Engine(agent, tools=TOOLS, store=SQLiteStore(path)) as engine:
        turn = await engine.run_turn(KEY, "Do you remember?")
        assert turn.status is RunStatus.completed
    sent = agent.inputs[0].messages
    assert _roles(sent) == ["user", "assistant", "tool", "tool", "assistant", "user"]


async def test_the_open_interrupts_of_a_stored_thread_are_known_after_loading(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    ask = Interrupt(id="i1", reason="approval")
    first = ScriptedAgent(
        respond=lambda key, run: [run_interrupted(key.thread_id, run.run_id, ask)]
    )
    async with Engine(first, store=SQLiteStore(path)) as engine:
        turn = await engine.run_turn(KEY, "delete it")
        assert turn.status is RunStatus.interrupted
    second = ScriptedAgent([text("deleted")])
    async with Engine(second, store=SQLiteStore(path)) as engine:
        answer = ResumeEntry(interrupt_id="i1", status="resolved")
        turn = await engine.run_turn(KEY, None, resume=[answer])
        assert turn.status is RunStatus.completed
        assert engine.open_interrupts(KEY) == ()
    assert second.inputs[0].resume == [answer]


async def test_history_supplied_for_a_new_thread_is_written_once(store: Store) -> None:
    history: list[Message] = [
        SystemMessage(id="s1", content="be brief"),
        UserMessage(id="u0", content="hi"),
    ]
    agent = ScriptedAgent([text("hello")], [text("again")])
    async with Engine(agent, store=store) as engine:
        await engine.run_turn(KEY, "first", history=history)
        engine.forget(KEY)
        turn = await engine.run_turn(KEY, "second", history=history)  # the store's wins
        ids = [m.id for m in turn.conversation.messages]
    assert ids[:2] == ["s1", "u0"] and ids.count("s1") == 1 and len(ids) == 6
    saved = [e.record for e in await store.read(KEY) if isinstance(e.record, MessageSaved)]
    assert [r.message.message.id for r in saved[:2]] == ["s1", "u0"]  # type: ignore[union-attr]


class _Calls(MemoryStore):
    """The in-memory store, keeping the calls the engine makes (name, records)."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, list[str]]] = []

    async def read(self, key: ThreadKey, **options: Any) -> list[Entry]:
        self.calls.append(("read", []))
        return await super().read(key, **options)

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        self.calls.append(("append", _kinds(records)))
        return await super().append(key, records, owner=owner)

    async def read_and_append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> tuple[list[Entry], int]:
        self.calls.append(("read_and_append", _kinds(records)))
        before = await MemoryStore.read(self, key)
        return before, await MemoryStore.append(self, key, records, owner=owner)


class _Plain(ForwardingStore[MemoryStore]):
    """A store with the contract's methods only (no ``read_and_append``)."""

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        return await self.store.append(key, records, owner=owner)


_START = ["TurnStarted", "MessageSaved"]


async def test_a_threads_first_turn_reads_it_and_writes_its_start_in_one_call() -> None:
    store = _Calls()
    agent = ScriptedAgent([text("one")], [text("two")])
    async with Engine(agent, store=store) as engine:
        await engine.run_turn(KEY, "first")  # a new thread
        assert store.calls[0] == ("read_and_append", _START)
        assert "read" not in [name for name, _ in store.calls]
        assert engine.forget(KEY)
        store.calls.clear()
        turn = await engine.run_turn(KEY, "second")  # a thread the store has
    assert store.calls[0] == ("read_and_append", _START)
    assert "read" not in [name for name, _ in store.calls]
    assert _roles(agent.inputs[1].messages) == ["user", "assistant", "user"]
    assert [m.id for m in turn.conversation.messages] == [
        m.id for m in agent.inputs[1].messages
    ] + [turn.messages[-1].id]
    log = await store.read(KEY)
    assert [e.seq for e in log] == list(range(1, len(log) + 1))
    assert _kinds([e.record for e in log]) == [*_START, "MessageSaved", "TurnEnded"] * 2


async def test_a_given_state_or_supplied_history_is_written_with_the_start_after_the_read() -> None:
    store = _Calls()
    agent = ScriptedAgent([text("one")], [text("two")])
    async with Engine(agent, store=store) as engine:
        await engine.run_turn(KEY, "first", history=[SystemMessage(id="s1", content="brief")])
        assert store.calls[:2] == [("read", []), ("append", ["MessageSaved", *_START])]
        engine.forget(KEY)
        store.calls.clear()
        await engine.run_turn(KEY, "second", state={"step": 2})
    # One transaction for the turn's start and its state, once the stored state is known.
    assert store.calls[:2] == [("read", []), ("append", [*_START, "StateSaved"])]
    assert replay(await store.read(KEY)).state == {"step": 2}


async def test_a_store_without_read_and_append_reads_then_writes_the_same_log() -> None:
    logs: list[list[Record]] = []
    for store in (_Plain(MemoryStore()), MemoryStore()):
        async with Engine(_secret_agent(), tools=TOOLS, store=store) as engine:
            await engine.run_turn(KEY, "What are the numbers?")
            engine.forget(KEY)
            await engine.run_turn(KEY, "And again?")
        logs.append([e.record for e in await store.read(KEY)])
    plain, together = (
        [(type(r).__name__, getattr(r, "status", None)) for r in log] for log in logs
    )
    assert plain == together and len(plain) > 10


class _FailsOnce(MemoryStore):
    """The in-memory store, refusing once the first append ``refuse`` picks (by the
    kinds of its records)."""

    def __init__(self, refuse: Callable[[list[str]], bool]) -> None:
        super().__init__()
        self.refuse = refuse
        self.refused: list[str] | None = None

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        if self.refused is None and self.refuse(_kinds(records)):
            self.refused = _kinds(records)
            raise StoreUnavailableError("the disk is full")
        return await super().append(key, records, owner=owner)


#: Which write a store refuses, by the kinds of its records.
_WRITES: dict[str, Callable[[list[str]], bool]] = {
    "calls": lambda kinds: kinds[0] == "ToolsStarted",
    "result": lambda kinds: kinds[0] == "ToolFinished",
    "answer": lambda kinds: kinds[0] == "MessageSaved",
    "end": lambda kinds: "TurnEnded" in kinds,
}


class _Reads:
    """A ScriptedAgent whose runs come as reads of ``size`` events (the
    ``EventBatches`` an HTTP backend gives), so the engine takes them a read at once."""

    def __init__(self, agent: ScriptedAgent, size: int) -> None:
        self.agent = agent
        self.size = size

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return await self.agent.allocate_run(key)

    @asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[_Batched]:
        async with self.agent.run(key, run_input) as events:
            batched = _Batched(events, self.size)
            try:
                yield batched
            finally:
                await batched.reads.aclose()  # (as an HTTP backend's stream closes)


class _Batched:
    def __init__(self, events: AsyncIterator[Event | UnknownEvent], size: int) -> None:
        self.events = events
        self.reads = self._reads(size)

    def __aiter__(self) -> _Batched:
        return self

    async def __anext__(self) -> Event | UnknownEvent:
        return await self.events.__anext__()

    def batches(self) -> AsyncGenerator[list[Event | UnknownEvent], None]:
        return self.reads

    async def _reads(self, size: int) -> AsyncGenerator[list[Event | UnknownEvent], None]:
        read: list[Event | UnknownEvent] = []
        async for event in self.events:
            read.append(event)
            if len(read) == size:
                yield read
                read = []
        if read:
            yield read


@pytest.mark.parametrize(
    "reads", [None, 1, 2, 3, 100], ids=["events", "reads-of-1", "of-2", "of-3", "one-read"]
)
@pytest.mark.parametrize("write", list(_WRITES))
async def test_a_write_refused_mid_turn_fails_it_and_the_last_write_keeps_everything(
    reads: int | None, write: str
) -> None:
    """Wherever the turn writes (a run's calls, a tool's result, an answer), a refused
    write ends the turn ``failed`` with the store's reason, and its last write puts
    everything down once, in order."""
    store = _FailsOnce(_WRITES[write])
    agent = _secret_agent()
    backend = agent if reads is None else _Reads(agent, reads)
    async with Engine(backend, tools=TOOLS, store=store) as engine:
        turn = await engine.run_turn(KEY, "What are the numbers?")
    assert store.refused is not None
    if "TurnEnded" in store.refused:  # (refused with the turn's end: it had completed)
        assert turn.status is RunStatus.completed
    else:
        assert turn.status is RunStatus.failed
        assert turn.reason is not None and turn.reason.kind is ReasonKind.STORE_ERROR
    log = [e.record for e in await store.read(KEY)]
    assert _kinds(log)[:2] == _START and _kinds(log)[-1] == "TurnEnded"
    assert len(log) == len({encode_record(r) for r in log})  # nothing twice
    ended = log[-1]
    assert isinstance(ended, TurnEnded) and ended.status == turn.status.value


async def test_threads_evicted_past_max_threads_come_back_from_the_store(store: Store) -> None:
    agent = ScriptedAgent(respond=lambda key, run: [text(f"answer {len(run.messages)}")])
    async with Engine(agent, store=store, max_threads=2) as engine:
        for i in range(5):
            await engine.run_turn(f"t{i}", "hello")
        assert len(engine.threads) == 2
        turn = await engine.run_turn("t0", "again")
        texts = [m.text for m in turn.conversation.messages if isinstance(m, TextMessage)]
    assert texts == ["answer 1", "answer 3"]
    assert engine.statistics().threads <= 2


async def test_a_locked_store_fails_the_turn_typed_and_loses_nothing_committed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    def lock_the_store() -> str:
        locker.execute("BEGIN EXCLUSIVE")
        return "locked"

    agent = ScriptedAgent([tool_call("lock_the_store", id="c1")], [text("never")], [text("ok")])
    store = SQLiteStore(path, timeout=0.05)
    async with Engine(agent, tools=ToolRegistry.of(lock_the_store), store=store) as engine:
        turn = await engine.run_turn(KEY, "go")
        assert turn.status is RunStatus.failed
        assert turn.reason is not None and turn.reason.kind is ReasonKind.STORE_ERROR
        locker.execute("ROLLBACK")
        committed = [e.record for e in await store.read(KEY)]
        assert _kinds(committed) == ["TurnStarted", "MessageSaved", "ToolsStarted"]
        # The next turn on the thread writes what waited, first, then its own.
        retried = await engine.retry(KEY)
        await retried.wait_finished()
        assert retried.status is RunStatus.completed
    locker.close()
    reopened = SQLiteStore(path)
    records = [e.record for e in await reopened.read(KEY)]
    await reopened.aclose()
    assert _kinds(records)[:6] == [
        "TurnStarted",
        "MessageSaved",
        "ToolsStarted",
        "ToolFinished",
        "MessageSaved",  # the batch, committed after all
        "TurnEnded",
    ]
    ended = records[5]
    assert isinstance(ended, TurnEnded) and ended.reason.kind is ReasonKind.STORE_ERROR
    retry = records[6]
    assert isinstance(retry, TurnStarted) and retry.retry_of == turn.turn_id


async def test_retry_sends_the_failed_runs_input_again_without_a_second_user_message(
    store: Store,
) -> None:
    agent = ScriptedAgent(
        [tool_call("lookup", {"name": "alice"}, id="c1")],
        [text("half an answ"), Raise(StreamDroppedError("connection reset"))],
        [text("Alice is 42.")],
    )
    async with Engine(agent, tools=TOOLS, store=store) as engine:
        failed = await engine.run_turn(KEY, "Alice?")
        assert failed.reason is not None and failed.reason.kind is ReasonKind.TRANSPORT_ERROR
        turn = await engine.retry(KEY)
        await turn.wait_finished()
        assert turn.status is RunStatus.completed
        with pytest.raises(ValueError, match="did not fail"):
            await engine.retry(KEY)
    resent = agent.inputs[2].messages
    assert _roles(resent).count("user") == 1
    assert _roles(resent)[:3] == ["user", "assistant", "tool"]  # the result kept
    history = replay(await store.read(KEY))
    assert history.last_ended is not None and history.last_ended.status == "completed"


async def test_retry_without_a_store_works_on_the_thread_in_memory() -> None:
    agent = ScriptedAgent([Raise(StreamDroppedError("reset"))], [text("fine")])
    async with Engine(agent) as engine:
        await engine.run_turn(KEY, "hello")
        turn = await engine.retry(KEY)
        await turn.wait_finished()
        assert turn.status is RunStatus.completed
        with pytest.raises(ValueError):
            await engine.retry("unknown")
    assert _roles(agent.inputs[1].messages) == ["user"]


class _EndHeld(MemoryStore):
    """An in-memory store (ordered: its writes are not shielded by the thread log)
    whose write of a turn's end waits until ``release`` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.ending = anyio.Event()
        self.release = anyio.Event()

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        if any(isinstance(record, TurnEnded) for record in records):
            self.ending.set()
            await self.release.wait()
        return await super().append(key, records, owner=owner)


async def test_a_turns_last_write_finishes_when_what_holds_the_engine_is_cancelled() -> None:
    # The turn has left its own scope and waits for its end to be written when the
    # scope around the engine is cancelled. On trio that cancellation reaches the
    # turn's task (the engine's nursery) and the write is shielded; on asyncio the task
    # is the loop's own and nothing reaches it. Either way the end is written.
    store = _EndHeld()
    outer = anyio.CancelScope()
    turns: list[Turn] = []

    async def hold_the_engine() -> None:
        with outer:
            async with Engine(ScriptedAgent([text("hi")]), store=store) as engine:
                turns.append(engine.start_turn(KEY, "go"))
                await anyio.sleep_forever()

    async with anyio.create_task_group() as group:
        group.start_soon(hold_the_engine)
        with anyio.fail_after(10):
            await store.ending.wait()
        outer.cancel()
        await anyio.sleep(0.05)  # the cancellation is delivered while the write waits
        store.release.set()
    (turn,) = turns
    assert turn.status is RunStatus.completed
    ended = replay(await store.read(KEY)).last_ended
    assert ended is not None and ended.status == "completed"


async def test_a_cancelled_or_closed_turn_is_written_ended_and_not_recovered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    async with Engine(ScriptedAgent([Hang()], [Hang()]), store=SQLiteStore(path)) as engine:
        cancelled = engine.start_turn("a", "go")
        closed = engine.start_turn("b", "go")
        await anyio.sleep(0.05)
        cancelled.cancel()
    assert closed.reason is not None and closed.reason.kind is ReasonKind.CLOSED
    agent = ScriptedAgent()
    async with Engine(agent, store=SQLiteStore(path)) as engine:
        assert await engine.recover() == ()
        assert agent.inputs == []
    store = SQLiteStore(path)
    assert await store.threads(live=True) == []
    for key, kind in ((ThreadKey("a"), "cancelled"), (ThreadKey("b"), "closed")):
        ended = replay(await store.read(key)).last_ended
        assert ended is not None and ended.reason_kind == kind
    await store.aclose()


class _Gated(MemoryStore):
    """The in-memory store whose reads (and reads with an append) wait for ``gate``
    while one is set."""

    def __init__(self) -> None:
        super().__init__()
        self.gate: anyio.Event | None = None

    async def read(self, key: ThreadKey, **options: Any) -> list[Entry]:
        if self.gate is not None:
            await self.gate.wait()
        return await super().read(key, **options)

    async def read_and_append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> tuple[list[Entry], int]:
        if self.gate is not None:
            await self.gate.wait()
        return await super().read_and_append(key, records, owner=owner)


class _LandsThenWaits(_Gated):
    """Its reads with an append write, then wait for ``gate``: cancelled there, the
    append landed (all of it, as rule 7 allows)."""

    async def read_and_append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> tuple[list[Entry], int]:
        before = await MemoryStore.read(self, key)  # (not the gated read)
        written = before, await MemoryStore.append(self, key, records, owner=owner)
        if self.gate is not None:
            await self.gate.wait()
        return written


@pytest.mark.parametrize("store_kind", ["read_and_append", "read_then_append", "landed"])
async def test_a_turn_ended_while_its_thread_loads_is_written_once_and_sent_once(
    store_kind: str,
) -> None:
    """A turn cancelled while the engine reads its thread (nothing written yet, or its
    start written with the read): what it wrote (its message, its end) is in the store
    once, the next turn sends it once, and the thread's stored state is not replaced by
    the state of a conversation that was never read."""
    gated = _LandsThenWaits() if store_kind == "landed" else _Gated()
    store: Store = _Plain(gated) if store_kind == "read_then_append" else gated
    async with Engine(ScriptedAgent([text("one")]), store=store) as engine:
        await engine.run_turn(KEY, "first", state={"step": 1})
    agent = ScriptedAgent([text("three")])
    async with Engine(agent, store=store) as engine:
        gated.gate = anyio.Event()
        second = engine.start_turn(KEY, "second")
        await anyio.wait_all_tasks_blocked()  # (the turn waits on the store's read)
        assert second.cancel()
        gated.gate.set()
        gated.gate = None
        await second.wait_finished()
        third = await engine.run_turn(KEY, "third")
    assert second.status is RunStatus.cancelled and third.status is RunStatus.completed
    sent = [m.content for m in agent.inputs[0].messages if isinstance(m, UserMessage)]
    assert sent == ["first", "second", "third"]
    ids = [m.id for m in third.conversation.messages]
    assert len(ids) == len(set(ids)) == len(agent.inputs[0].messages) + 1
    log = [e.record for e in await gated.read(KEY)]
    saved = [r for r in log if isinstance(r, MessageSaved)]
    assert len(saved) == 5  # first, one, second, third, three: each once
    assert replay(await gated.read(KEY)).state == {"step": 1}


async def test_recover_resumes_a_turn_the_log_shows_live(store: Store) -> None:
    # What a crash leaves: a turn started, its batch about to run, no end.
    async with Engine(_secret_agent(), tools=TOOLS, store=store, recover=False) as engine:
        await engine.run_turn(KEY, "What are the numbers?")
    records = [e.record for e in await store.read(KEY)]
    await store.delete_thread(KEY)
    await store.append(KEY, records[:3])  # up to ToolsStarted
    agent = ScriptedAgent([text("Alice 42, Bob 7.")])
    async with Engine(agent, tools=TOOLS, store=store) as engine:  # recovers on enter
        (turn,) = [engine.turn(k) for k in engine.threads]
        assert turn is not None
        await turn.wait_finished()
        assert turn.status is RunStatus.completed
        assert await engine.recover() == ()  # nothing live any more
    roles = _roles(agent.inputs[0].messages)
    assert roles == ["user", "assistant", "tool", "tool"]
    assert agent.inputs[0].resume is UNSET  # a continuation: no answers to send again
    assert agent.inputs[0].parent_run_id is not UNSET
    # The log held the batch's ToolsStarted (the write-ahead): recovery writes the
    # results and what follows, not the batch a second time (no round twice).
    kinds = _kinds([e.record for e in await store.read(KEY)])
    assert kinds.count("ToolsStarted") == 1, kinds
    assert kinds.count("ToolFinished") == 2 and kinds[-1] == "TurnEnded"


# The agent ran roll_die itself (its result came in the stream), said something, then
# asked for the client's lookup: what the model is told it did, in this order.
_MIXED_RUN: list[Step] = [
    *server_tool_call("roll_die", "{}", "4", id="s1", message_id="r-s1", parent_message_id="P1"),
    *text("You rolled 4. Now Alice.", id="T"),
    *tool_call("lookup", {"name": "alice"}, id="c1", parent_message_id="P2"),
]


# What a ToolsStarted says that older versions did not write.
_NEWER_FIELDS = ("agent_results",)


def _shape(messages: Sequence[Message]) -> list[tuple[str, str, object]]:
    """Each message as (its role, its id, what it holds): an assistant message's call
    ids or text, a result's call id and content. The id toolrelay made for the result
    of the call it ran is left out (each process makes its own)."""
    out: list[tuple[str, str, object]] = []
    for m in messages:
        if isinstance(m, AssistantMessage):
            calls = [c.id for c in m.tool_calls or ()]
            out.append(("assistant", m.id, calls or m.content))
        elif isinstance(m, ToolMessage):
            made_here = m.tool_call_id == "c1"
            out.append(("tool", "made here" if made_here else m.id, (m.tool_call_id, m.content)))
        else:
            out.append((_roles([m])[0], m.id, None))
    return out


async def _mixed_turn_crashing_in_its_tool(path: Path) -> tuple[list[Record], list[Message]]:
    """Run :data:`_MIXED_RUN` and its continuation on a SQLite store at ``path``. Returns
    what the log held while the client's tool ran (what a crash then leaves), and the
    continuation's messages as sent without a crash."""
    running = anyio.Event()
    release = anyio.Event()

    @tool(idempotent=True)  # run again on recovery, with the same result
    async def lookup(name: str) -> int:
        """Look up a person's number."""
        running.set()
        await release.wait()
        return {"alice": 42}[name]

    agent = ScriptedAgent(_MIXED_RUN, [text("Alice's number is 42.")])
    async with Engine(agent, tools=ToolRegistry.of(lookup), store=SQLiteStore(path)) as engine:
        turn = engine.start_turn(KEY, "Roll a die, then tell me Alice's number.")
        with anyio.fail_after(5):
            await running.wait()
        store = SQLiteStore(path)
        crashed = [e.record for e in await store.read(KEY)]
        await store.aclose()
        release.set()
        await turn.wait_finished()
        assert turn.status is RunStatus.completed
    return crashed, agent.inputs[1].messages


async def _recover_from(path: Path, records: Sequence[Record]) -> list[Message]:
    """Leave ``records`` as the thread's log, reopen an engine on the store, let it
    recover the turn; the continuation's messages."""
    store = SQLiteStore(path)
    await store.delete_thread(KEY)
    await store.append(KEY, records)
    await store.aclose()
    agent = ScriptedAgent([text("Alice's number is 42.")])
    tools = ToolRegistry.of(tool(idempotent=True)(lookup))
    with anyio.fail_after(5):
        async with Engine(agent, tools=tools, store=SQLiteStore(path)) as engine:
            turn = engine.turn(KEY)  # recovered on enter
            assert turn is not None
            await turn.wait_finished()
            assert turn.status is RunStatus.completed
    (continuation,) = agent.inputs
    return continuation.messages


async def test_a_batch_recovered_mid_tool_goes_back_as_the_stream_had_it(tmp_path: Path) -> None:
    # The crash comes while the client's tool runs. The continuation after recovery is
    # the one sent without the crash: the agent's call in its own message before the
    # text, its result right after it under the agent's message id, the client's last.
    path = tmp_path / "t.db"
    crashed, uncrashed = await _mixed_turn_crashing_in_its_tool(path)
    assert _kinds(crashed)[-1] == "ToolsStarted"
    expected = [
        ("user", uncrashed[0].id, None),
        ("assistant", "P1", ["s1"]),
        ("tool", "r-s1", ("s1", "4")),
        ("assistant", "T", "You rolled 4. Now Alice."),
        ("assistant", "P2", ["c1"]),
        ("tool", "made here", ("c1", "42")),
    ]
    assert _shape(uncrashed) == expected
    assert _shape(await _recover_from(path, crashed)) == expected


async def test_a_batch_an_older_version_wrote_is_recovered_in_its_old_layout(
    tmp_path: Path,
) -> None:
    # A ToolsStarted written before it said where the agent's calls go (and under which
    # result ids): it decodes, and the batch is recovered as it was then, the agent's
    # call with the client's, after the text.
    path = tmp_path / "t.db"
    crashed, _ = await _mixed_turn_crashing_in_its_tool(path)
    *head, started = crashed
    assert isinstance(started, ToolsStarted)
    old = msgspec.json.decode(encode_record(started))
    assert set(_NEWER_FIELDS) <= old.keys()
    for field in _NEWER_FIELDS:
        del old[field]
    older = decode_record(msgspec.json.encode(old))
    assert isinstance(older, ToolsStarted) and older.calls == started.calls
    sent = _shape(await _recover_from(path, [*head, older]))
    assert [(role, content) for role, _, content in sent] == [
        ("user", None),
        ("assistant", "You rolled 4. Now Alice."),
        ("assistant", ["s1", "c1"]),
        ("tool", ("s1", "4")),
        ("tool", ("c1", "42")),
    ]


def test_engine_refuses_a_store_that_is_not_one() -> None:
    with pytest.raises(TypeError, match="toolrelay.store.Store"):
        Engine(ScriptedAgent(), store="toolrelay.db")  # type: ignore[arg-type]


async def test_a_store_failure_mid_batch_stops_the_other_tools_of_the_turn(
    tmp_path: Path,
) -> None:
    path = tmp_path / "t.db"
    locker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    stopped = anyio.Event()

    def lock_the_store() -> str:
        locker.execute("BEGIN EXCLUSIVE")
        return "locked"

    async def hang() -> str:
        try:
            await anyio.sleep_forever()
        finally:
            stopped.set()
        return "never"

    agent = ScriptedAgent([tool_call("lock_the_store", id="c1"), tool_call("hang", id="c2")])
    store = SQLiteStore(path, timeout=0.05)
    tools = ToolRegistry.of(lock_the_store, hang)
    async with Engine(agent, tools=tools, store=store, tool_timeout=None) as engine:
        with anyio.fail_after(10):
            turn = await engine.run_turn(KEY, "go")
        assert turn.reason is not None and turn.reason.kind is ReasonKind.STORE_ERROR
        assert stopped.is_set()  # the hanging sibling was cancelled with the turn
    locker.execute("ROLLBACK")
    locker.close()


async def test_recover_resumes_only_the_threads_it_is_given(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db")
    for thread in ("t1", "t2"):  # two turns a crash left live
        await store.append(ThreadKey(thread), [TurnStarted(turn_id=f"turn-{thread}")])
        await store.append(
            ThreadKey(thread),
            [
                MessageSaved(
                    turn_id=f"turn-{thread}",
                    message=message_to_record(UserMessage(id=f"u-{thread}", content="hello")),
                )
            ],
        )
    agent = ScriptedAgent(respond=lambda key, run: [text("back")])
    async with Engine(agent, store=store, recover=False) as engine:
        (turn,) = await engine.recover(["t1"])
        assert turn.key == ThreadKey("t1")
        await turn.wait_finished()
        assert turn.status is RunStatus.completed
        assert engine.turn("t2") is None
    reopened = SQLiteStore(tmp_path / "t.db")
    assert [i.key for i in await reopened.threads(live=True)] == [ThreadKey("t2")]
    await reopened.aclose()


async def test_a_write_refused_under_a_stale_claim_is_dropped_and_the_thread_forgotten(
    tmp_path: Path,
) -> None:
    shared = SQLiteStore(tmp_path / "t.db")
    fenced = FencedStore(shared, worker="a", lease=5)
    agent = ScriptedAgent([text("never written")], [text("written")])
    async with Engine(agent, store=fenced) as engine:
        # This worker does not hold the thread: its writes are refused, typed, and
        # nothing of the turn lands or is written later under another claim.
        turn = await engine.run_turn(KEY, "hello")
        assert turn.reason is not None and turn.reason.kind is ReasonKind.STORE_ERROR
        assert engine.conversation(KEY) is None  # forgotten: another worker's thread
        assert await shared.read(KEY) == []
        claim = await fenced.claim(KEY)
        assert claim is not None
        async with fenced.holding(claim):
            turn = await engine.run_turn(KEY, "hello again")
            assert turn.status is RunStatus.completed
    records = [e.record for e in await shared.read(KEY)]
    await shared.aclose()
    assert _kinds(records) == ["TurnStarted", "MessageSaved", "MessageSaved", "TurnEnded"]
    user = records[1]
    assert isinstance(user, MessageSaved) and user.message.message.content == "hello again"  # type: ignore[union-attr]


async def _add_one(n: int) -> int:
    """Add one."""
    return n + 1


def _two_rounds(key: ThreadKey, run_input: RunAgentInput) -> list[object]:
    rounds = sum(isinstance(m, ToolMessage) for m in run_input.messages)
    return [tool_call("_add_one", {"n": rounds})] if rounds < 2 else [text("done")]


@pytest.mark.parametrize("checkpoints", [0, 1, 2, 3, 5, 8, 13, 21, 34, 55])
async def test_turns_cancelled_anywhere_are_written_once_in_order_and_end_terminal(
    tmp_path: Path, checkpoints: int
) -> None:
    # SQLiteStore settles a cancelled append itself, so the thread log's writes are not
    # shielded: turns cancelled at every stage (loading, each write, a tool, a stream)
    # must still leave each record once, numbered without a gap, and a written end.
    path = tmp_path / "t.db"
    agent = ScriptedAgent(respond=_two_rounds)  # type: ignore[arg-type]
    tools = ToolRegistry.of(_add_one)
    async with Engine(agent, tools=tools, store=SQLiteStore(path)) as engine:
        turns = [engine.start_turn(f"t{i}", "go") for i in range(12)]
        for _ in range(checkpoints):
            await anyio.lowlevel.checkpoint()
        for turn in turns:
            turn.cancel()
        for turn in turns:
            await turn.wait_finished()
        conversations = [engine.conversation(f"t{i}") for i in range(len(turns))]
    store = SQLiteStore(path)
    await store.open()
    try:
        for i, (turn, conversation) in enumerate(zip(turns, conversations, strict=True)):
            entries = await store.read(ThreadKey(f"t{i}"))
            bodies = [encode_record(entry.record) for entry in entries]
            assert len(set(bodies)) == len(bodies), f"t{i}: a record written twice"
            assert [entry.seq for entry in entries] == list(range(1, len(entries) + 1))
            history = replay(entries)
            assert turn.reason is not None and history.last_ended is not None
            assert history.last_ended.reason_kind == turn.reason.kind.value
            assert history.live is None
            assert conversation is not None
            assert [m.id for m in history.messages] == [m.id for m in conversation.messages]
    finally:
        await store.aclose()
