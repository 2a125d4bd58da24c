"""Properties of the EventProcessor, checked with Hypothesis.

1. Any split of a tool call's JSON arguments into deltas gives the same arguments.
2. Any stream, well-formed or not (interleaved calls, unknown ids, duplicates, events
   after RUN_FINISHED, chunks, random wire events), never makes the processor raise,
   and every call only ever moves along its declared machine; once the run or the
   turn is over, no call is left open (promises 1 and 7).
3. The cost of an event does not depend on the history (promise 8), asserted
   structurally: a delta neither maps, copies nor walks the conversation, and
   arguments are not joined while they stream. No timing is measured.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator, Sequence
from typing import Any, SupportsIndex, overload

import pytest
from hypothesis import given, settings, strategies as st

from toolrelay import ReasonKind, RunStatus, TerminalReason, ToolCallStatus, ToolResult
from toolrelay._core import _processor_lifecycle
from toolrelay._core._conversation import (
    ChatMessage,
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._core._effects import (
    NO_EFFECTS,
    ToolsReady,
    TurnCompleted,
    TurnEnded,
    TurnInterrupted,
)
from toolrelay._core._processor import EventProcessor, Limits
from toolrelay._machines import RUN_MACHINE, TOOL_CALL_MACHINE
from toolrelay.protocol import (
    AddOperation,
    Event,
    Interrupt,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    RemoveOperation,
    ReplaceOperation,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepStartedEvent,
    TestOperation,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UnknownEvent,
    UserMessage,
)
from toolrelay.testing import run_cancelled, run_interrupted
from toolrelay.testing.strategies import events as wire_events, json_values

THREAD = "thread-1"
USER = UserMessage(id="user-1", content="go")

AnyEvent = Event | UnknownEvent


def _reachable(machine: Any, states: Any) -> dict[Any, frozenset[Any]]:
    """For every state, the states reachable from it in zero or more transitions."""
    out: dict[Any, frozenset[Any]] = {}
    for start in states:
        seen, todo = {start}, [start]
        while todo:
            state = todo.pop()
            for event in machine.allowed(state):
                target = machine.step(state, event)
                if target not in seen:
                    seen.add(target)
                    todo.append(target)
        out[start] = frozenset(seen)
    return out


CALL_REACH = _reachable(TOOL_CALL_MACHINE, ToolCallStatus)
RUN_REACH = _reachable(RUN_MACHINE, RunStatus)


def new_processor(**kwargs: Any) -> EventProcessor:
    counter = itertools.count(1)
    return EventProcessor(
        Conversation(THREAD, [USER]), id_factory=lambda: f"gen-{next(counter)}", **kwargs
    )


def committed(processor: EventProcessor) -> list[ToolCallInfo]:
    return [
        call
        for message in processor.conversation.messages
        if isinstance(message, ToolCallBatch)
        for call in message.calls
    ]


class Watcher:
    """Follows every call and the turn, and checks each step against the machines."""

    def __init__(self, processor: EventProcessor) -> None:
        self.processor = processor
        self.calls: dict[int, tuple[ToolCallInfo, ToolCallStatus]] = {}
        self.run_status = processor.status

    def all_calls(self) -> list[ToolCallInfo]:
        p = self.processor
        return [*p.tool_calls, *p.abandoned, *committed(p)]

    def check(self) -> None:
        p = self.processor
        assert p.status in RUN_REACH[self.run_status], (self.run_status, p.status)
        self.run_status = p.status
        for call in self.all_calls():
            status = call.status
            assert isinstance(status, ToolCallStatus)
            previous = self.calls.get(id(call), (call, TOOL_CALL_MACHINE.initial))[1]
            assert status in CALL_REACH[previous], (call, previous, status)
            self.calls[id(call)] = (call, status)
        # A call that left the run is final: abandoned calls failed, committed ones settled.
        assert all(c.status is ToolCallStatus.failed for c in p.abandoned)
        assert all(c.status.is_final and c.result is not None for c in committed(p))
        if p.run_ended:
            # After RUN_FINISHED / RUN_ERROR / end_stream / an ending: nothing streams or
            # waits, and every text of the run was closed.
            assert not [
                c
                for c in p.tool_calls
                if c.status in (ToolCallStatus.streaming, ToolCallStatus.pending)
            ]
            assert all(
                m.complete
                for m in p.conversation.messages
                if isinstance(m, (TextMessage, ReasoningRecord))
            )
        if p.status.is_final:
            assert p.tool_calls == ()
            assert p.reason is not None
        # Interrupts exist exactly on an interrupted turn, one per id.
        if p.status is not RunStatus.interrupted:
            assert p.interrupts == ()
        assert len({i.id for i in p.interrupts}) == len(p.interrupts)
        # Every call the processor ever showed is still somewhere: in flight, abandoned
        # or committed. Nothing is lost (promise 7).
        accounted = {id(c) for c in self.all_calls()}
        lost = [call for key, (call, _) in self.calls.items() if key not in accounted]
        assert not lost, f"calls lost: {lost}"

    def receive(self, event: AnyEvent) -> None:
        effects = self.processor.receive(event)  # must never raise
        for effect in effects:
            if isinstance(effect, ToolsReady):
                assert self.processor.status is RunStatus.executing_tools
                assert all(c.status is ToolCallStatus.executing for c in effect.calls)
            elif isinstance(effect, TurnCompleted):
                assert self.processor.status is RunStatus.completed
            elif isinstance(effect, TurnInterrupted):
                assert self.processor.status is RunStatus.interrupted
                assert effect.interrupts == self.processor.interrupts
                # The agent stopped to ask: nothing of the run is left to execute.
                assert not [c for c in self.processor.tool_calls if not c.status.is_final]
            elif isinstance(effect, TurnEnded):
                assert self.processor.status.is_final
                assert self.processor.status is not RunStatus.interrupted
        self.check()


# --- 1. any split of the arguments -----------------------------------------------------------


def _split(raw: str, cuts: list[int]) -> list[str]:
    points = sorted({min(max(c, 0), len(raw)) for c in cuts})
    bounds = [0, *points, len(raw)]
    return [raw[i:j] for i, j in itertools.pairwise(bounds)]


@given(json_values(), st.lists(st.integers(0, 200), max_size=25), st.booleans())
def test_any_split_of_json_arguments_into_args_deltas_gives_the_same_arguments(
    value: Any, cuts: list[int], ascii_only: bool
) -> None:
    raw = json.dumps({"v": value}, ensure_ascii=ascii_only)
    pieces = _split(raw, cuts)
    processor = new_processor()
    processor.start_run("run-1")
    processor.receive(ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"))
    for piece in pieces:
        assert processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta=piece)) == ()
    processor.receive(ToolCallEndEvent(tool_call_id="c1"))
    effects = processor.receive(RunFinishedEvent(thread_id=THREAD, run_id="r"))
    [ready] = [e for e in effects if isinstance(e, ToolsReady)]
    [call] = ready.calls
    assert call.arguments == raw
    assert call.argument_bytes == len(raw.encode())
    assert json.loads(call.arguments) == {"v": value}


@given(
    st.lists(json_values(), min_size=1, max_size=3),
    st.data(),
)
def test_interleaved_splits_of_several_calls_each_give_their_own_arguments(
    values: list[Any], data: st.DataObject
) -> None:
    raws = [json.dumps(v, ensure_ascii=False) for v in values]
    queues: list[list[AnyEvent]] = []
    for i, raw in enumerate(raws):
        pieces = _split(raw, data.draw(st.lists(st.integers(0, len(raw)), max_size=6)))
        queues.append(
            [
                ToolCallStartEvent(tool_call_id=f"c{i}", tool_call_name="f"),
                *(ToolCallArgsEvent(tool_call_id=f"c{i}", delta=p) for p in pieces),
                ToolCallEndEvent(tool_call_id=f"c{i}"),
            ]
        )
    processor = new_processor()
    processor.start_run("run-1")
    while any(queues):
        i = data.draw(st.sampled_from([i for i, q in enumerate(queues) if q]))
        processor.receive(queues[i].pop(0))
    assert processor.violations == []
    by_id = {c.id: c for c in processor.tool_calls}
    for i, value in enumerate(values):
        assert json.loads(by_id[f"c{i}"].arguments) == value


@given(json_values(), st.lists(st.integers(0, 200), max_size=25))
def test_any_split_into_tool_call_chunks_gives_the_same_arguments(
    value: Any, cuts: list[int]
) -> None:
    raw = json.dumps(value, ensure_ascii=False)
    first, *rest = _split(raw, cuts)
    processor = new_processor()
    processor.start_run("run-1")
    processor.receive(ToolCallChunkEvent(tool_call_id="c1", tool_call_name="f", delta=first))
    for piece in rest:
        processor.receive(ToolCallChunkEvent(delta=piece))
    effects = processor.receive(RunFinishedEvent(thread_id=THREAD, run_id="r"))
    [ready] = [e for e in effects if isinstance(e, ToolsReady)]
    assert json.loads(ready.calls[0].arguments) == value


# --- 2. any stream never breaks the processor or the machines ------------------------------

_CALL_IDS = st.sampled_from(["a", "b", "c"])
_MESSAGE_IDS = st.sampled_from(["m1", "m2"])
_SMALL = st.text(max_size=4)
_POINTERS = st.sampled_from(["", "/x", "/x/0", "/x/-", "/y", "/~1"])
_STATES = st.one_of(
    st.none(),
    st.integers(0, 3),
    st.lists(st.integers(0, 3), max_size=2),
    st.dictionaries(st.sampled_from(["x", "y", "/"]), st.lists(st.integers(0, 3), max_size=2)),
)


def _asks(*ids: str) -> tuple[Interrupt, ...]:
    return tuple(Interrupt(id=i, reason="approval", message=f"May I ({i})?") for i in ids)


#: RUN_FINISHED in each of its outcomes: absent, interrupt (one, two, a repeated id,
#: none at all) and cancelled.
_RUN_ENDS: st.SearchStrategy[AnyEvent] = st.sampled_from(
    [
        RunFinishedEvent(thread_id=THREAD, run_id="srv"),
        run_interrupted(THREAD, "srv", *_asks("i1")),
        run_interrupted(THREAD, "srv", *_asks("i1", "i2")),
        run_interrupted(THREAD, "srv", *_asks("i1", "i1")),
        run_interrupted(THREAD, "srv"),
        run_cancelled(THREAD, "srv"),
    ]
)


def _noise() -> st.SearchStrategy[AnyEvent]:
    """Events aimed at the processor's weak spots (any wire event at all: see
    test_any_sequence_of_wire_events_never_raises, whose events are slower to draw)."""
    patch_ops = st.one_of(
        st.builds(AddOperation, path=_POINTERS, value=_STATES),
        st.builds(RemoveOperation, path=_POINTERS),
        st.builds(ReplaceOperation, path=_POINTERS, value=_STATES),
        st.builds(TestOperation, path=_POINTERS, value=_STATES),
    )
    return st.one_of(
        st.builds(
            ToolCallStartEvent,
            tool_call_id=_CALL_IDS,
            tool_call_name=st.sampled_from(["f", "g"]),
            parent_message_id=st.none() | _MESSAGE_IDS,
        ),
        st.builds(ToolCallArgsEvent, tool_call_id=_CALL_IDS, delta=_SMALL),
        st.builds(ToolCallEndEvent, tool_call_id=_CALL_IDS),
        st.builds(
            ToolCallResultEvent, message_id=_MESSAGE_IDS, tool_call_id=_CALL_IDS, content=_SMALL
        ),
        st.builds(
            ToolCallChunkEvent,
            tool_call_id=st.none() | _CALL_IDS,
            tool_call_name=st.none() | st.just("f"),
            delta=st.none() | _SMALL,
        ),
        st.builds(TextMessageStartEvent, message_id=_MESSAGE_IDS),
        st.builds(TextMessageContentEvent, message_id=_MESSAGE_IDS, delta=_SMALL),
        st.builds(TextMessageEndEvent, message_id=_MESSAGE_IDS),
        st.builds(
            TextMessageChunkEvent, message_id=st.none() | _MESSAGE_IDS, delta=st.none() | _SMALL
        ),
        st.builds(
            ReasoningMessageChunkEvent,
            message_id=st.none() | _MESSAGE_IDS,
            delta=st.none() | _SMALL,
        ),
        st.builds(ReasoningMessageContentEvent, message_id=_MESSAGE_IDS, delta=_SMALL),
        st.builds(RunStartedEvent, thread_id=st.sampled_from([THREAD, "other"]), run_id=_SMALL),
        _RUN_ENDS,
        st.builds(RunErrorEvent, message=_SMALL, code=st.none() | _SMALL),
        st.builds(StateSnapshotEvent, snapshot=_STATES),
        st.builds(StateDeltaEvent, delta=st.lists(patch_ops, max_size=3)),
        st.builds(UnknownEvent, type=st.sampled_from(["FUTURE_EVENT", "X"]), raw=st.just(b"{}")),
    )


NOISE = _noise()


@st.composite
def runs(draw: st.DrawFn) -> list[AnyEvent]:
    """One run's stream: well-formed calls and texts interleaved, with noise inserted,
    usually ending with RUN_FINISHED (and sometimes going on after it)."""
    queues: list[list[AnyEvent]] = []
    for i in range(draw(st.integers(0, 3))):
        call_id = f"ok{i}"
        deltas = draw(st.lists(_SMALL, max_size=3))
        queues.append(
            [
                ToolCallStartEvent(tool_call_id=call_id, tool_call_name=f"tool{i}"),
                *(ToolCallArgsEvent(tool_call_id=call_id, delta=d) for d in deltas),
                ToolCallEndEvent(tool_call_id=call_id),
            ]
        )
    if draw(st.booleans()):
        queues.append(
            [
                TextMessageStartEvent(message_id="t1", role="assistant"),
                TextMessageContentEvent(message_id="t1", delta="hello"),
                TextMessageEndEvent(message_id="t1"),
            ]
        )
    stream: list[AnyEvent] = [RunStartedEvent(thread_id=THREAD, run_id="srv")]
    while any(queues):
        i = draw(st.sampled_from([i for i, q in enumerate(queues) if q]))
        stream.append(queues[i].pop(0))
    for position, event in draw(st.lists(st.tuples(st.integers(0, 30), NOISE), max_size=6)):
        stream.insert(min(position, len(stream)), event)
    if draw(st.integers(0, 9)) > 0:
        plain = draw(st.integers(0, 3)) > 0  # mostly a plain end, so that runs continue
        stream.append(
            RunFinishedEvent(thread_id=THREAD, run_id="srv") if plain else draw(_RUN_ENDS)
        )
        stream.extend(draw(st.lists(NOISE, max_size=3)))
    return stream


ENDINGS = ["none", "end_stream", "cancel", "supersede", "fail"]


@settings(max_examples=200)
@given(
    st.lists(runs(), min_size=1, max_size=3),
    st.data(),
    st.integers(0, 2),
    st.sampled_from(
        [
            Limits(),
            Limits(max_argument_bytes=6, max_events_per_run=12),
            Limits(
                max_text_bytes=10,
                max_turn_argument_bytes=12,
                max_reasoning_bytes=8,
                max_tool_calls_per_run=3,
                max_messages_per_turn=3,
                max_violations=2,
            ),
        ]
    ),
)
def test_any_stream_never_raises_and_every_call_follows_its_machine(
    streams: list[list[AnyEvent]], data: st.DataObject, max_depth: int, limits: Limits
) -> None:
    processor = new_processor(max_depth=max_depth, limits=limits)
    watcher = Watcher(processor)
    processor.start_run("run-1")
    watcher.check()
    for n, stream in enumerate(streams, start=1):
        for event in stream:
            watcher.receive(event)
        if not processor.run_ended:
            if data.draw(st.booleans()):
                processor.end_stream()  # the stream closed without RUN_FINISHED
                watcher.check()
                assert processor.status is RunStatus.failed
            break
        if processor.status is not RunStatus.executing_tools:
            break
        for call in processor.tool_calls:
            if call.status is ToolCallStatus.executing:
                ok = data.draw(st.booleans())
                result = ToolResult.success("ok") if ok else ToolResult.failure("broke")
                processor.record_result(call, result)
                watcher.check()
        if n < len(streams):
            processor.start_run(f"run-{n + 1}")
            watcher.check()
            assert processor.depth == n
    ending = data.draw(st.sampled_from(ENDINGS))
    if ending == "end_stream":
        processor.end_stream()
    elif ending == "cancel":
        processor.cancel()
    elif ending == "supersede":
        processor.supersede()
    elif ending == "fail":
        processor.fail(TerminalReason(kind=ReasonKind.BACKEND_ERROR, message="gone"))
    watcher.check()
    if ending in ("cancel", "supersede", "fail"):
        # Promise 1: the turn is over and no call is open anywhere.
        assert processor.status.is_final
        assert all(not c.status.is_open for c in watcher.all_calls())
    if ending == "end_stream" or processor.run_ended:
        assert not [
            c
            for c in watcher.all_calls()
            if c.status in (ToolCallStatus.streaming, ToolCallStatus.pending)
        ]


@settings(max_examples=100)
@given(st.lists(wire_events(), max_size=25))
def test_any_sequence_of_wire_events_never_raises(stream: list[Event]) -> None:
    processor = new_processor()
    watcher = Watcher(processor)
    processor.start_run("run-1")
    for event in stream:
        watcher.receive(event)
    processor.end_stream()
    watcher.check()
    assert processor.status in (
        RunStatus.failed,
        RunStatus.completed,
        RunStatus.executing_tools,
        RunStatus.interrupted,
        RunStatus.cancelled,
    )


# --- 3. the cost of an event does not depend on the history -------------------------------


class CountingList(list[ChatMessage]):
    """A list that counts every way of walking or copying it."""

    walks = 0
    reads = 0

    def __iter__(self) -> Iterator[ChatMessage]:
        type(self).walks += 1
        return super().__iter__()

    def __reversed__(self) -> Iterator[ChatMessage]:
        type(self).walks += 1
        return super().__reversed__()

    @overload
    def __getitem__(self, index: SupportsIndex) -> ChatMessage: ...
    @overload
    def __getitem__(self, index: slice) -> list[ChatMessage]: ...
    def __getitem__(self, index: SupportsIndex | slice) -> ChatMessage | list[ChatMessage]:
        if isinstance(index, slice):
            type(self).walks += 1
        else:
            type(self).reads += 1
        return super().__getitem__(index)

    def copy(self) -> list[ChatMessage]:
        type(self).walks += 1
        return super().copy()

    def __contains__(self, item: object) -> bool:
        type(self).walks += 1
        return super().__contains__(item)


LONG = 10_000


@pytest.fixture
def long_processor(monkeypatch: pytest.MonkeyPatch) -> Iterator[EventProcessor]:
    """A processor on a 10,000-message conversation, its first run started, with the
    message list replaced by a CountingList and the mapper spied on."""
    history: list[ChatMessage] = []
    for i in range(LONG // 2):
        history.append(UserMessage(id=f"u{i}", content="q"))
        history.append(TextMessage(f"a{i}", "assistant", "a"))
    processor = new_processor()
    processor.conversation.messages = CountingList(history)
    processor.start_run("run-1")  # maps the conversation once: that is per run
    processor.receive(RunStartedEvent(thread_id=THREAD, run_id="srv"))

    def no_mapping(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the mapper was called while events streamed")

    monkeypatch.setattr(_processor_lifecycle, "conversation_to_agui", no_mapping)
    CountingList.walks = CountingList.reads = 0
    yield processor


def test_deltas_on_a_long_conversation_neither_map_copy_nor_walk_it(
    long_processor: EventProcessor,
) -> None:
    processor = long_processor
    messages = processor.conversation.messages
    processor.receive(TextMessageStartEvent(message_id="m-new"))
    processor.receive(ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"))
    processor.receive(ToolCallChunkEvent(tool_call_id="c2", tool_call_name="g"))
    length = len(processor.conversation.messages)
    assert length == LONG + 1  # the text's record was appended once, at its START
    CountingList.walks = CountingList.reads = 0
    for i in range(200):
        assert processor.receive(ToolCallChunkEvent(delta=str(i))) is NO_EFFECTS
    processor.receive(ToolCallEndEvent(tool_call_id="c2"))
    for i in range(200):
        assert (
            processor.receive(TextMessageContentEvent(message_id="m-new", delta="x")) is NO_EFFECTS
        )
        assert processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta=str(i))) is NO_EFFECTS
    assert CountingList.walks == 0
    assert CountingList.reads == 0
    assert len(processor.conversation.messages) == length
    assert processor.conversation.messages is messages  # never replaced by a copy


def test_streamed_arguments_and_text_are_not_joined_per_event(
    long_processor: EventProcessor,
) -> None:
    processor = long_processor
    processor.receive(ToolCallStartEvent(tool_call_id="c1", tool_call_name="f"))
    processor.receive(TextMessageStartEvent(message_id="m-new"))
    for i in range(1, 301):
        processor.receive(ToolCallArgsEvent(tool_call_id="c1", delta="7"))
        processor.receive(TextMessageContentEvent(message_id="m-new", delta="y"))
        # One chunk more per delta: nothing re-joined (an O(n) join per event would
        # collapse the list to one chunk).
        [call] = processor.tool_calls
        assert len(call._chunks) == i
    [text] = [t for t in processor.conversation.texts() if t.id == "m-new"]
    assert len(text._chunks) == 300
    assert text.text == "y" * 300
    assert len(text._chunks) == 1  # the join collapsed it


def test_an_echoed_result_walks_the_history_at_most_once(long_processor: EventProcessor) -> None:
    processor = long_processor
    echo = ToolCallResultEvent(message_id="r", tool_call_id="from-an-earlier-turn", content="x")
    processor.receive(echo)
    first = CountingList.reads + CountingList.walks
    assert first > 0  # the history was indexed once...
    CountingList.walks = CountingList.reads = 0
    for _ in range(50):
        processor.receive(echo)
    # ...and never again: no walk, and per question one read, of the message where
    # the index ends (the list may have been cut and grown back), whatever the length.
    assert CountingList.walks == 0
    assert CountingList.reads <= 2 * 50 < first


@given(st.lists(st.text(max_size=5), min_size=1, max_size=60))
def test_the_accumulator_chunk_list_is_collapsed_on_join(deltas: list[str]) -> None:
    call = ToolCallInfo("c", "f")
    appended = 0
    for delta in deltas:
        call.append_arguments(delta)
        appended += bool(delta)
        assert len(call._chunks) == appended
    assert call.arguments == "".join(deltas)
    assert len(call._chunks) == (1 if appended else 0)
    call.append_arguments("z")
    assert len(call._chunks) == (2 if appended else 1)


# -- the hot path changes nothing but the cost ------------------------------------------


def _outcome(processor: EventProcessor, effects: list[object]) -> object:
    messages = [
        (type(m).__name__, getattr(m, "id", None), getattr(m, "text", None))
        for m in processor.conversation.messages
    ]
    calls = [
        (c.id, c.name, c.arguments, c.status, c.result)
        for c in (*committed(processor), *processor.tool_calls, *processor.abandoned)
    ]
    return (
        processor.status,
        processor.reason,
        messages,
        calls,
        list(processor.violations),
        processor.interrupts,
        [repr(effect) for effect in effects],  # calls compare by identity; reprs by content
    )


class _FullPathOnly(EventProcessor):
    """The processor with its hot path switched off: every event takes the full path."""

    __slots__ = ()

    def _hot_text(self, message_id: str) -> bool:
        return False

    def _hot_call(self, call_id: str) -> bool:
        return False


#: What the embedding code may do between two events of a stream.
_ACTIONS = ("cancel", "fail", "supersede", "end_stream", "record_results")


def _play(
    stream: Sequence[AnyEvent | str],
    limits: Limits,
    *,
    hot_path: bool,
    batches: Sequence[int] | None = None,
) -> object:
    """Feed ``stream`` to a processor: each event to ``receive``, or, with ``batches``,
    the events between two actions to ``receive_many`` in batches of those sizes (in
    turn), each batch from its first index on until the index it returns is its end."""
    counter = itertools.count(1)
    cls = EventProcessor if hot_path else _FullPathOnly
    processor = cls(
        Conversation(THREAD, [USER]), id_factory=lambda: f"gen-{next(counter)}", limits=limits
    )
    processor.start_run("run-1")
    effects: list[object] = []
    if batches is not None:
        sizes = itertools.cycle(batches)
        waiting: list[AnyEvent] = []

        def flush() -> None:
            while waiting:
                batch = waiting[: next(sizes)]
                del waiting[: len(batch)]
                position = 0
                while position < len(batch):
                    out, after = processor.receive_many(batch, position)
                    assert position < after <= len(batch)
                    assert out or after == len(batch)  # it stops at effects only
                    effects.extend(out)
                    position = after

    for item in stream:
        if batches is not None:
            if not isinstance(item, str):
                waiting.append(item)
                continue
            flush()
        if item == "cancel":
            effects.extend(processor.cancel())
        elif item == "fail":
            effects.extend(
                processor.fail(TerminalReason(kind=ReasonKind.BACKEND_ERROR, message="x"))
            )
        elif item == "supersede":
            effects.extend(processor.supersede())
        elif item == "end_stream":
            effects.extend(processor.end_stream())
        elif item == "record_results":
            for call in processor.tool_calls:
                if call.status is ToolCallStatus.executing:
                    processor.record_result(call, ToolResult.success("ok"))
        else:
            assert not isinstance(item, str)
            effects.extend(processor.receive(item))
    if batches is not None:
        flush()
    effects.extend(processor.end_stream())
    return _outcome(processor, effects)


def _deltas_heavy() -> st.SearchStrategy[list[AnyEvent | str]]:
    """Streams that keep the hot path busy and then try to fool it: many deltas for a
    few ids, interleaved with what closes a message or a call (END, a second START,
    *_CHUNK streams, RUN_FINISHED, RUN_ERROR) and with what the embedding code does
    between two events (cancel, fail, supersede, end_stream, recording results)."""
    # Two ids each, one of them drawn most of the time, so that ids meet again.
    text_id = st.sampled_from(["m1", "m1", "m1", "m2"])
    call_id = st.sampled_from(["a", "a", "a", "b"])
    content = st.builds(TextMessageContentEvent, message_id=text_id, delta=_SMALL)
    args = st.builds(ToolCallArgsEvent, tool_call_id=call_id, delta=_SMALL)
    lifecycle: st.SearchStrategy[AnyEvent | str] = st.one_of(
        st.builds(TextMessageStartEvent, message_id=text_id),
        st.builds(TextMessageEndEvent, message_id=text_id),
        st.builds(ToolCallStartEvent, tool_call_id=call_id, tool_call_name=st.just("f")),
        st.builds(ToolCallEndEvent, tool_call_id=call_id),
    )
    chunks: st.SearchStrategy[AnyEvent | str] = st.one_of(
        st.builds(TextMessageChunkEvent, message_id=st.none() | text_id, delta=_SMALL),
        st.builds(
            ToolCallChunkEvent,
            tool_call_id=st.none() | call_id,
            tool_call_name=st.just("f"),
            delta=_SMALL,
        ),
        st.builds(ReasoningMessageChunkEvent, message_id=st.just("r1"), delta=_SMALL),
        st.builds(
            ToolCallResultEvent, message_id=st.just("res"), tool_call_id=call_id, content=_SMALL
        ),
    )
    endings: st.SearchStrategy[AnyEvent | str] = st.one_of(
        _RUN_ENDS,
        st.sampled_from([RunErrorEvent(message="boom"), *_ACTIONS]),
    )
    item: st.SearchStrategy[AnyEvent | str] = st.one_of(
        content, args, lifecycle, content, args, lifecycle, chunks
    )
    # A body, deltas (so that the hot path holds a message or a call), perhaps an
    # ending, then what a stream (or a stale backend) still sends.
    return st.tuples(
        st.lists(item, max_size=30),
        st.lists(st.one_of(content, args), max_size=3),
        st.lists(endings, max_size=2),
        st.lists(st.one_of(content, args, lifecycle), max_size=8),
    ).map(
        lambda parts: [
            RunStartedEvent(thread_id=THREAD, run_id="srv"),
            *parts[0],
            *parts[1],
            *parts[2],
            *parts[3],
        ]
    )


@settings(max_examples=300)
@given(
    runs(),
    st.sampled_from(
        [
            Limits(),
            Limits(max_argument_bytes=6, max_events_per_run=12),
            Limits(max_argument_bytes=9, max_events_per_run=1000),
            Limits(
                max_text_bytes=10,
                max_turn_argument_bytes=12,
                max_reasoning_bytes=8,
                max_tool_calls_per_run=3,
                max_messages_per_turn=3,
                max_violations=2,
            ),
        ]
    ),
)
def test_the_hot_path_gives_exactly_what_the_full_path_gives(
    stream: list[AnyEvent], limits: Limits
) -> None:
    assert _play(stream, limits, hot_path=True) == _play(stream, limits, hot_path=False)


@settings(max_examples=500)
@given(
    _deltas_heavy(),
    st.sampled_from(
        [
            Limits(),
            Limits(max_argument_bytes=6, max_events_per_run=12),
            Limits(max_argument_bytes=40, max_events_per_run=25),
            Limits(
                max_text_bytes=10,
                max_turn_argument_bytes=12,
                max_reasoning_bytes=8,
                max_tool_calls_per_run=3,
                max_messages_per_turn=3,
                max_violations=2,
            ),
        ]
    ),
)
def test_the_hot_path_gives_exactly_what_the_full_path_gives_under_a_stream_of_deltas(
    stream: list[AnyEvent | str], limits: Limits
) -> None:
    assert _play(stream, limits, hot_path=True) == _play(stream, limits, hot_path=False)


def _status(processor: EventProcessor) -> RunStatus:
    return processor.status  # read afresh (mypy would keep an earlier narrowing)


@pytest.mark.parametrize("char", ["a", "é", "€", "😀"])
def test_the_argument_limit_holds_on_the_hot_path_for_every_utf8_width(char: str) -> None:
    width = len(char.encode())
    processor = new_processor(limits=Limits(max_argument_bytes=8 * width))
    processor.start_run("run-1")
    processor.receive(RunStartedEvent(thread_id=THREAD, run_id="srv"))
    processor.receive(ToolCallStartEvent(tool_call_id="c", tool_call_name="f"))
    for _ in range(8):
        assert processor.receive(ToolCallArgsEvent(tool_call_id="c", delta=char)) == ()
    assert processor.status is RunStatus.running
    effects = processor.receive(ToolCallArgsEvent(tool_call_id="c", delta=char))
    assert _status(processor) is RunStatus.failed
    assert processor.reason is not None and processor.reason.code == "max_argument_bytes"
    assert effects


@pytest.mark.parametrize("char", ["a", "é", "€", "😀"])
def test_the_text_limit_holds_on_the_hot_path_for_every_utf8_width(char: str) -> None:
    width = len(char.encode())
    processor = new_processor(limits=Limits(max_text_bytes=8 * width))
    processor.start_run("run-1")
    processor.receive(RunStartedEvent(thread_id=THREAD, run_id="srv"))
    processor.receive(TextMessageStartEvent(message_id="m", role="assistant"))
    for _ in range(8):
        processor.receive(TextMessageContentEvent(message_id="m", delta=char))
    assert processor.status is RunStatus.running
    processor.receive(TextMessageContentEvent(message_id="m", delta=char))
    assert _status(processor) is RunStatus.failed
    assert processor.reason is not None and processor.reason.code == "max_text_bytes"


def test_the_event_limit_holds_on_the_hot_path() -> None:
    processor = new_processor(limits=Limits(max_events_per_run=5))
    processor.start_run("run-1")
    processor.receive(TextMessageStartEvent(message_id="m", role="assistant"))
    for _ in range(4):
        processor.receive(TextMessageContentEvent(message_id="m", delta="x"))
    assert processor.status is RunStatus.running
    processor.receive(TextMessageContentEvent(message_id="m", delta="x"))
    assert _status(processor) is RunStatus.failed
    assert processor.reason is not None and processor.reason.code == "max_events_per_run"
    assert [m.text for m in processor.conversation.texts()] == ["xxxx"]


# -- receive_many is receive, event after event ------------------------------------------

_BATCH_SIZES = st.lists(st.integers(1, 40), min_size=1, max_size=6)
_TIGHT_LIMITS = st.sampled_from(
    [
        Limits(),
        Limits(max_events_per_run=9),
        Limits(max_text_bytes=24, max_argument_bytes=20),
        Limits(max_argument_bytes=6, max_events_per_run=12),
        Limits(max_argument_bytes=40, max_events_per_run=25),
        Limits(
            max_text_bytes=10,
            max_turn_argument_bytes=12,
            max_reasoning_bytes=8,
            max_tool_calls_per_run=3,
            max_messages_per_turn=3,
            max_violations=2,
        ),
    ]
)


def _delta_runs() -> st.SearchStrategy[list[AnyEvent | str]]:
    """Streams of long runs of deltas for one message or call (what receive_many takes
    in one loop), broken by what ends a run of deltas: a delta for another id, an END or
    a second START, *_CHUNK streams, run endings, the embedding code's actions."""
    text_id = st.sampled_from(["m1", "m1", "m2"])
    call_id = st.sampled_from(["a", "a", "b"])
    texts = st.builds(
        lambda message_id, deltas: [
            TextMessageContentEvent(message_id=message_id, delta=delta) for delta in deltas
        ],
        text_id,
        st.lists(_SMALL, min_size=1, max_size=15),
    )
    args = st.builds(
        lambda call, deltas: [
            ToolCallArgsEvent(tool_call_id=call, delta=delta) for delta in deltas
        ],
        call_id,
        st.lists(_SMALL, min_size=1, max_size=15),
    )
    single: st.SearchStrategy[AnyEvent | str] = st.one_of(
        st.builds(TextMessageStartEvent, message_id=text_id),
        st.builds(TextMessageEndEvent, message_id=text_id),
        st.builds(ToolCallStartEvent, tool_call_id=call_id, tool_call_name=st.just("f")),
        st.builds(ToolCallEndEvent, tool_call_id=call_id),
        st.builds(TextMessageChunkEvent, message_id=st.none() | text_id, delta=_SMALL),
        st.builds(
            ToolCallChunkEvent,
            tool_call_id=st.none() | call_id,
            tool_call_name=st.just("f"),
            delta=_SMALL,
        ),
        _RUN_ENDS,
        st.sampled_from([RunErrorEvent(message="boom"), *_ACTIONS]),
    )
    segment: st.SearchStrategy[list[AnyEvent | str]] = st.one_of(
        texts, args, texts, args, single.map(lambda item: [item])
    )
    return st.lists(segment, min_size=2, max_size=12).map(
        lambda segments: [
            RunStartedEvent(thread_id=THREAD, run_id="srv"),
            TextMessageStartEvent(message_id="m1"),
            ToolCallStartEvent(tool_call_id="a", tool_call_name="f"),
            *(item for part in segments for item in part),
        ]
    )


@settings(max_examples=300)
@given(
    st.one_of(runs(), _deltas_heavy(), _delta_runs(), _delta_runs()),
    _TIGHT_LIMITS,
    _BATCH_SIZES,
    st.booleans(),
)
def test_receive_many_over_any_split_gives_what_receive_gives_event_by_event(
    stream: list[AnyEvent | str], limits: Limits, sizes: list[int], hot_path: bool
) -> None:
    # The same effects, in the same order, state, conversation, calls and violations;
    # with the hot path off, receive_many's own loop is compared with the full path.
    one_by_one = _play(stream, limits, hot_path=True)
    assert _play(stream, limits, hot_path=hot_path, batches=sizes) == one_by_one


@st.composite
def _long_runs_with_intruders(draw: st.DrawFn) -> list[AnyEvent | str]:
    """Long runs of deltas for one message or call (up to a few hundred: several of
    receive_many's doubling stretches) with a few intruders at any place: a delta for
    the other id, an event of another kind (an END, a STEP, an unknown type), an
    action; deltas for the same id come back after each, which the bisection that
    guesses a run's end must not be fooled by."""
    stream: list[AnyEvent | str] = [
        RunStartedEvent(thread_id=THREAD, run_id="srv"),
        TextMessageStartEvent(message_id="m1"),
        TextMessageStartEvent(message_id="m2"),
        ToolCallStartEvent(tool_call_id="a", tool_call_name="f"),
        ToolCallStartEvent(tool_call_id="b", tool_call_name="f"),
    ]
    intruders: st.SearchStrategy[AnyEvent | str] = st.sampled_from(
        [
            TextMessageContentEvent(message_id="m2", delta="~"),
            ToolCallArgsEvent(tool_call_id="b", delta="~"),
            TextMessageContentEvent(message_id="m1", delta="~"),
            ToolCallArgsEvent(tool_call_id="a", delta="~"),
            TextMessageEndEvent(message_id="m2"),
            ToolCallEndEvent(tool_call_id="b"),
            StepStartedEvent(step_name="s"),
            UnknownEvent(type="VENDOR_THING", raw=b"{}"),
            "record_results",
        ]
    )
    for _ in range(draw(st.integers(1, 3))):
        text = draw(st.booleans())
        size = draw(st.integers(1, 300))
        deltas: list[AnyEvent | str] = [
            TextMessageContentEvent(message_id="m1", delta=str(i % 10))
            if text
            else ToolCallArgsEvent(tool_call_id="a", delta=str(i % 10))
            for i in range(size)
        ]
        for _ in range(draw(st.integers(0, 3))):
            deltas.insert(draw(st.integers(0, len(deltas))), draw(intruders))
        stream += deltas
    if draw(st.booleans()):
        stream.append(RunFinishedEvent(thread_id=THREAD, run_id="srv"))
    return stream


@settings(max_examples=150)
@given(
    _long_runs_with_intruders(),
    st.sampled_from([Limits(), Limits(max_events_per_run=200), Limits(max_text_bytes=150)]),
    st.lists(st.integers(1, 700), min_size=1, max_size=3),
)
def test_receive_many_over_long_runs_with_intruders_gives_what_receive_gives(
    stream: list[AnyEvent | str], limits: Limits, sizes: list[int]
) -> None:
    one_by_one = _play(stream, limits, hot_path=True)
    assert _play(stream, limits, hot_path=True, batches=sizes) == one_by_one


@settings(max_examples=100)
@given(st.lists(wire_events(), max_size=25), _BATCH_SIZES)
def test_receive_many_over_any_wire_events_gives_what_receive_gives(
    stream: list[AnyEvent], sizes: list[int]
) -> None:
    limits = Limits(max_events_per_run=15, max_text_bytes=30, max_argument_bytes=20)
    one_by_one = _play(stream, limits, hot_path=True)
    assert _play(stream, limits, hot_path=True, batches=sizes) == one_by_one
