"""The engine hands a read's events to the processor at once when the backend can give
them (``AguiHttpBackend``'s stream offers ``batches()``), and the turn is the same as
when it takes them one by one: any split of the bytes into reads, with or without the
batches, gives the same status, conversation, violations and tool results. Observers
of events still get every event, one by one, and a cancel between two reads stops the
rest of the stream."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given, settings, strategies as st

from toolrelay import Engine, EventReceived, Limits, ThreadKey, ToolRegistry, Turn
from toolrelay.backends import AguiHttpBackend, EventStream
from toolrelay.backends._base import EventBatches
from toolrelay.protocol import (
    Event,
    RunAgentInput,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    UnknownEvent,
    encode_event,
)
from toolrelay.sansio import EventProcessor
from toolrelay.store import MemoryStore, Record
from toolrelay.testing import run_finished, run_started, text, tool_call

pytestmark = pytest.mark.anyio

URL = "http://agent.test/run"


async def lookup(q: str) -> str:
    """Look something up."""
    return f"found {q}"


registry = ToolRegistry().register(lookup)


class _Reads(httpx.AsyncByteStream):
    """A body in the given reads (an iterator class: see HTTPX_GC_ON_TRIO in the tests
    of the HTTP backend); ``before_read`` runs before each read is handed over."""

    def __init__(self, reads: list[bytes], before_read: Callable[[int], None]) -> None:
        self.reads = reads
        self.index = 0
        self.before_read = before_read

    def __aiter__(self) -> _Reads:
        return self

    async def __anext__(self) -> bytes:
        if self.index == len(self.reads):
            raise StopAsyncIteration
        self.before_read(self.index)
        self.index += 1
        return self.reads[self.index - 1]


def _body(events: Sequence[Event | UnknownEvent]) -> bytes:
    return b"".join(b"data: " + encode_event(event) + b"\n\n" for event in events)


def _cut(body: bytes, cuts: Sequence[int]) -> list[bytes]:
    points = sorted({c % len(body) for c in cuts} - {0})
    return [body[a:b] for a, b in zip([0, *points], [*points, len(body)], strict=True)]


def _frames(body: bytes) -> list[bytes]:
    """``body`` as one read per SSE event (a server that flushes event by event)."""
    return [frame + b"\n\n" for frame in body.split(b"\n\n") if frame]


def _backend(
    bodies: list[bytes],
    cuts: Sequence[int] | None,
    before_read: Callable[[int], None] = lambda _: None,
) -> AguiHttpBackend:
    """Serves ``bodies`` in turn, each cut at ``cuts`` (``None``: a read per event)."""
    runs = iter(bodies)

    def respond(request: httpx.Request) -> httpx.Response:
        body = next(runs)
        reads = _Reads(_frames(body) if cuts is None else _cut(body, cuts), before_read)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=reads)

    return AguiHttpBackend(URL, transport=httpx.MockTransport(respond))


class _OneByOne:
    """The same backend, its stream given event by event (no ``batches``)."""

    def __init__(self, backend: AguiHttpBackend) -> None:
        self.backend = backend

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return None

    @asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        async with self.backend.run(key, run_input) as events:

            async def one_by_one() -> AsyncGenerator[Event | UnknownEvent, None]:
                async for event in events:
                    yield event

            stream = one_by_one()
            try:
                yield stream
            finally:
                await stream.aclose()


def _runs(
    first: Sequence[Event | UnknownEvent], second: Sequence[Event | UnknownEvent]
) -> list[bytes]:
    return [
        _body([run_started("t", "r1"), *first, run_finished("t", "r1")]),
        _body([run_started("t", "r2"), *second, run_finished("t", "r2")]),
    ]


def _outcome(turn: Turn) -> object:
    return (
        turn.status,
        turn.reason,
        [
            (type(m).__name__, getattr(m, "text", None), getattr(m, "content", None))
            for m in turn.messages
        ],
        [(v.code, v.event_type) for v in turn.violations],
    )


async def _play(backend: Any, limits: Limits) -> object:
    async with Engine(backend, tools=registry, limits=limits) as engine:
        turn = await engine.run_turn("t", "go")
    return _outcome(turn)


_DELTAS = st.lists(st.text(min_size=1, max_size=6), min_size=1, max_size=30)
_NOISE = st.sampled_from(
    [
        ToolCallArgsEvent(tool_call_id="ghost", delta="{}"),  # no such call: dropped
        TextMessageContentEvent(message_id="lone", delta="implicit"),  # no START
        UnknownEvent(type="CUSTOM_THING", raw=b'{"type":"CUSTOM_THING","x":1}'),
    ]
)


@pytest.mark.parametrize("backend_name", ["asyncio", "trio"])
@settings(max_examples=40, deadline=None)
@given(
    answer=_DELTAS,
    arguments=_DELTAS,
    noise=st.lists(_NOISE, max_size=3),
    cuts=st.lists(st.integers(1, 10_000), max_size=30),
    limits=st.sampled_from(
        [Limits(), Limits(max_events_per_run=25), Limits(max_text_bytes=30, max_argument_bytes=40)]
    ),
)
def test_any_split_into_reads_gives_the_same_turn_with_and_without_batches(
    backend_name: str,
    answer: list[str],
    arguments: list[str],
    noise: list[Event | UnknownEvent],
    cuts: list[int],
    limits: Limits,
) -> None:
    raw = json.dumps({"q": "".join(arguments)})
    first: list[Event | UnknownEvent] = [
        *noise,
        *text("".join(answer[:3]), id="m1", chunk=2),
        *tool_call("lookup", raw, id="c1", chunk=3),
    ]
    second: list[Event | UnknownEvent] = [
        *text("", id="m2")[:1],
        *(TextMessageContentEvent(message_id="m2", delta=d) for d in answer),
        *text("", id="m2")[1:],
    ]
    bodies = _runs(first, second)

    async def compare() -> None:
        async with _backend(bodies, cuts).run(ThreadKey("t"), _input()) as events:
            assert isinstance(events, EventBatches)  # the path under test is taken
        plain = _OneByOne(_backend(bodies, []))
        assert await _play(_backend(bodies, cuts), limits) == await _play(plain, limits)

    anyio.run(compare, backend=backend_name)


def _input() -> RunAgentInput:
    return RunAgentInput(
        thread_id="t", run_id="r", state={}, messages=[], tools=[], context=[], forwarded_props={}
    )


@pytest.mark.parametrize("cuts", [[], None], ids=["one read", "a read per event"])
async def test_an_observer_of_events_gets_every_event_of_a_read_one_by_one(
    cuts: list[int] | None,
) -> None:
    events = [*text("one two three", id="m1", chunk=2), *text("four", id="m2", chunk=1)]
    bodies = [_body([run_started("t", "r1"), *events, run_finished("t", "r1")])]
    async with Engine(_backend(bodies, cuts)) as engine:
        with engine.subscribe(events=True) as stream:
            turn = await engine.run_turn("t", "go")
            shown = []
            while True:
                try:
                    note = stream.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(note, EventReceived):
                    shown.append(note.event)
    assert turn.status.value == "completed"
    assert shown == [run_started("t", "r1"), *events, run_finished("t", "r1")]
    assert [m.text for m in turn.conversation.texts()] == ["one two three", "four"]


async def test_a_cancel_between_two_reads_stops_the_rest_of_the_stream() -> None:
    events = [run_started("t", "r1"), *text("a b c d", id="m1", chunk=1)]
    reads = [_body(events[:3]), _body(events[3:5]), _body(events[5:])]
    holder: list[Turn] = []

    def before_read(index: int) -> None:
        if index == 2:
            holder[0].cancel()

    def respond(request: httpx.Request) -> httpx.Response:
        body = _Reads(list(reads), before_read)
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=body)

    backend = AguiHttpBackend(URL, transport=httpx.MockTransport(respond))
    async with Engine(backend) as engine:
        turn = engine.start_turn("t", "go")
        holder.append(turn)
        await turn.wait_finished()
    assert turn.status.value == "cancelled"
    # RUN_STARTED, START, "a" (first read), " ", "b" (second): the third read not shown.
    assert [m.text for m in turn.conversation.texts()] == ["a b"]


@pytest.mark.parametrize("cuts", [[], None], ids=["one read", "a read per event"])
async def test_a_bug_while_processing_a_read_is_an_internal_error(
    monkeypatch: pytest.MonkeyPatch, cuts: list[int] | None
) -> None:
    def broken(self: EventProcessor, events: object, start: int = 0) -> tuple[()]:
        raise AttributeError("processor bug")

    monkeypatch.setattr(EventProcessor, "receive_many", broken)
    monkeypatch.setattr(EventProcessor, "receive", broken)
    bodies = [_body([run_started("t", "r1"), *text("hello", id="m1"), run_finished("t", "r1")])]
    async with Engine(_backend(bodies, cuts)) as engine:
        turn = await engine.run_turn("t", "go")
    assert turn.status.value == "failed"
    assert turn.reason is not None and turn.reason.kind.value == "internal_error"
    assert "AttributeError: processor bug" in turn.reason.message


@pytest.mark.parametrize("cuts", [[], None], ids=["one read", "a read per event"])
async def test_what_a_batched_read_settles_reaches_the_store(cuts: list[int] | None) -> None:
    # The first turn's two runs, each in one read, then a second turn on a forgotten
    # thread: it is loaded from the store with everything the reads settled.
    first = [*text("looking", id="m1", chunk=2), *tool_call("lookup", '{"q":"x"}', id="c1")]
    bodies = [
        *_runs(first, text("found it", id="m2", chunk=3)),
        _body([run_started("t", "r3"), *text("again", id="m3"), run_finished("t", "r3")]),
    ]
    async with Engine(_backend(bodies, cuts), tools=registry, store=MemoryStore()) as engine:
        turn = await engine.run_turn("t", "go")
        before = [(type(m).__name__, m.id) for m in turn.conversation.messages]
        assert engine.forget("t")
        again = await engine.run_turn("t", "more")
    assert turn.status.value == "completed" and again.status.value == "completed"
    after = [(type(m).__name__, m.id) for m in again.conversation.messages]
    assert after[: len(before)] == before
    assert [m.text for m in again.conversation.texts()] == ["looking", "found it", "again"]


class _CountingStore(MemoryStore):
    """The in-memory store, keeping what each append wrote."""

    def __init__(self) -> None:
        super().__init__()
        self.appends: list[list[str]] = []

    async def append(
        self, key: ThreadKey, records: Sequence[Record], *, owner: str | None = None
    ) -> int:
        self.appends.append([type(record).__name__ for record in records])
        return await super().append(key, records, owner=owner)


@pytest.mark.parametrize("cuts", [[], None], ids=["one read", "a read per event"])
async def test_what_one_read_settles_is_written_at_once(cuts: list[int] | None) -> None:
    # The answer's end and the run's end in one read are one write (nothing is awaited
    # from the network between them); read by read, each is written as it settles.
    body = _body([run_started("t", "r1"), *text("done", id="m1"), run_finished("t", "r1")])
    store = _CountingStore()
    async with Engine(_backend([body], cuts), store=store) as engine:
        turn = await engine.run_turn("t", "go")
    assert turn.status.value == "completed"
    written = [names for names in store.appends if "TurnStarted" not in names]
    if cuts is None:
        assert written == [["MessageSaved"], ["TurnEnded"]]
    else:
        assert written == [["MessageSaved", "TurnEnded"]]
