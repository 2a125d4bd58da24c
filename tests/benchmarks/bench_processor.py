"""Cases 1 and 2: the processor's throughput against its floors, and its flat cost.

Case 1 decodes and processes a realistic 100,000-event stream (``bench_streams``) the
way the engine does, one :class:`EventProcessor` per turn: ``start_run``, then
a decode (as the HTTP backend decodes: msgspec's typed decoder inline, ``decode_event``
if it raises) and ``receive`` for every payload, ``record_result`` for every call of
a ``ToolsReady``, ``start_run`` for the continuation, and so on. The floors read the
same bytes: a bare ``msgspec.json.Decoder(Event)`` (decoding only, the least any
typed client can do) and the official SDK's ``TypeAdapter(ag_ui.core.Event)
.validate_json`` (parsing only).

Case 2 checks promise 8: the cost of an event must not grow with the conversation
(10 vs 10,000 messages of history) nor with the tool call it belongs to (10 vs
100,000 argument deltas). ``start_run`` is reported beside, not counted per event: a
thread's first run maps the whole conversation into the request (linear by nature:
the request carries every message); a continuation maps only what was added since,
the rest of its cost being one identity check and one copy of the list.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
from bench_harness import Report, Sample, Target, interleaved
from bench_streams import TOOL_NAMES, TurnStream, args_payloads, mixed_run, realistic_turns

from toolrelay import Conversation, RunStatus, TextMessage, ToolResult
from toolrelay._core import ChatMessage
from toolrelay.protocol import (
    AssistantMessage,
    Event,
    FunctionCall,
    ReasoningEncryptedValueEvent,
    RunStartedEvent,
    Tool,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UnknownEvent,
    UserMessage,
    decode_event,
    encode_event,
)
from toolrelay.protocol._codec import decode_known_event
from toolrelay.sansio import EventProcessor, ToolsReady

__all__ = ("run_flat", "run_throughput")

CASE_1 = "1. processor"
CASE_2 = "2. flat cost"

#: The tool declarations sent with every run.
TOOLS = tuple(
    Tool(
        name=name,
        description=f"The {name} tool.",
        parameters={"type": "object", "properties": {"q": {"type": "string"}}},
    )
    for name in TOOL_NAMES
)
RESULT = ToolResult.success('{"ok": true, "value": 42}')
USER = UserMessage(id="msg_user", content="What is the weather in Paris, and my secret number?")


# --- Case 1 ---------------------------------------------------------------------------


#: The bytes of one socket read: the engine's HTTP backend decodes a read's SSE events
#: into one list and the turn hands it to ``EventProcessor.receive_many`` (a stream
#: written in large chunks gives reads of up to 64 KiB; ``READ_SMALL`` is shown beside).
READ_BYTES = 64 * 1024
READ_SMALL = 4 * 1024


_READS: dict[tuple[int, int], list[list[list[list[bytes]]]]] = {}


def reads(payloads: Sequence[bytes], read_bytes: int) -> list[list[bytes]]:
    """``payloads`` grouped as socket reads of ``read_bytes`` would carry them (each SSE
    frame is ``data: `` + payload + a blank line; a frame is not split between reads)."""
    grouped: list[list[bytes]] = [[]]
    size = 0
    for payload in payloads:
        frame = len(payload) + 8
        if size + frame > read_bytes and grouped[-1]:
            grouped.append([])
            size = 0
        grouped[-1].append(payload)
        size += frame
    return grouped


def drive(
    turns: Sequence[TurnStream], decode: Callable[[bytes], Any], read_bytes: int | None = READ_BYTES
) -> list[EventProcessor]:
    """Decode and process every turn as the engine does; returns the processors.

    Each payload is decoded the way :class:`AguiHttpBackend` decodes an SSE event's
    data: ``decode_known_event`` (msgspec's typed decoder) inline, and ``decode``
    (:func:`decode_event`) only when that raises. A read's events are decoded into one
    list and handed to ``receive_many`` (the engine with ``AguiHttpBackend``);
    ``read_bytes=None`` decodes and calls ``receive`` event by event (the engine with a
    backend that gives its events one by one).
    """
    if read_bytes is None:
        return _drive_one_by_one(turns, decode)
    # The split into reads is the socket's doing, not timed: made once per stream.
    key = (id(turns), read_bytes)
    if key not in _READS:
        _READS[key] = [[reads(run.payloads, read_bytes) for run in turn.runs] for turn in turns]
    split = _READS[key]
    fast = decode_known_event  # bound once, as the backend binds it
    processors: list[EventProcessor] = []
    for turn, turn_reads in zip(turns, split, strict=True):
        processor = EventProcessor(Conversation(turn.thread_id, (USER,)), tools=TOOLS)
        for run, run_reads in zip(turn.runs, turn_reads, strict=True):
            processor.start_run(run.run_id)
            receive_many = processor.receive_many
            for read in run_reads:
                events: list[Event | UnknownEvent] = []
                append = events.append
                for payload in read:
                    try:
                        append(fast(payload))
                    except msgspec.MsgspecError:
                        append(decode(payload))
                position = 0
                end = len(events)
                while position < end:
                    effects, position = receive_many(events, position)
                    for effect in effects:
                        if type(effect) is ToolsReady:
                            for call in effect.calls:
                                processor.record_result(call, RESULT)
        processors.append(processor)
    return processors


def _drive_one_by_one(
    turns: Sequence[TurnStream], decode: Callable[[bytes], Any]
) -> list[EventProcessor]:
    processors: list[EventProcessor] = []
    for turn in turns:
        processor = EventProcessor(Conversation(turn.thread_id, (USER,)), tools=TOOLS)
        for run in turn.runs:
            processor.start_run(run.run_id)
            receive = processor.receive
            for payload in run.payloads:
                try:
                    event = decode_known_event(payload)
                except msgspec.MsgspecError:
                    event = decode(payload)
                effects = receive(event)
                if effects:
                    for effect in effects:
                        if type(effect) is ToolsReady:
                            for call in effect.calls:
                                processor.record_result(call, RESULT)
        processors.append(processor)
    return processors


def check_drive(turns: Sequence[TurnStream]) -> None:
    """The streams are what the processor accepts: every turn completes, no violation,
    and reads give the same conversations as events one by one."""
    one_by_one = drive(turns, decode_event, None)
    for read_bytes in (READ_BYTES, READ_SMALL, None):
        for processor, alone in zip(
            drive(turns, decode_event, read_bytes), one_by_one, strict=True
        ):
            if processor.status is not RunStatus.completed or processor.violations:
                raise AssertionError(
                    f"benchmark stream is not clean: {processor.status}, {processor.violations[:3]}"
                )
            if _shape(processor) != _shape(alone):
                raise AssertionError("reads and events one by one gave different conversations")


def _shape(processor: EventProcessor) -> list[tuple[str, object]]:
    # Message ids are made per process (a counter): compare kinds, text and arguments.
    return [
        (type(m).__name__, getattr(m, "text", None) or repr(getattr(m, "calls", None)))
        for m in processor.conversation.messages
    ]


def run_throughput(report: Report, *, repeats: int, events: int) -> None:
    """Case 1: decode + process per event, against msgspec alone and pydantic alone."""
    import pydantic
    from ag_ui.core import Event as SdkEvent

    turns = realistic_turns(events)
    payloads = [payload for turn in turns for run in turn.runs for payload in run.payloads]
    count = len(payloads)
    check_drive(turns)

    def processor(read_bytes: int | None = READ_BYTES) -> float:
        start = time.perf_counter_ns()
        drive(turns, decode_event, read_bytes)
        return (time.perf_counter_ns() - start) / count

    bare = msgspec.json.Decoder(Event)

    def msgspec_alone() -> float:
        decode = bare.decode
        start = time.perf_counter_ns()
        for payload in payloads:
            decode(payload)
        return (time.perf_counter_ns() - start) / count

    validate = pydantic.TypeAdapter(SdkEvent).validate_json

    def pydantic_alone() -> float:
        start = time.perf_counter_ns()
        for payload in payloads:
            validate(payload)
        return (time.perf_counter_ns() - start) / count

    values = interleaved(
        (
            processor,
            msgspec_alone,
            pydantic_alone,
            functools.partial(processor, READ_SMALL),
            functools.partial(processor, None),
        ),
        repeats,
    )
    ours = report.add(
        Sample(
            CASE_1,
            f"decode + EventProcessor.receive_many, 64 KiB reads ({count:,} events, "
            f"{len(turns)} turns, {sum(len(t.runs) for t in turns)} runs)",
            "ns/event",
            values[0],
            "engine-style: start_run, a read's events to receive_many, record_result per "
            "turn; decoded as the HTTP backend does",
        )
    )
    report.add(
        Sample(
            CASE_1,
            "decode + EventProcessor.receive_many, 4 KiB reads",
            "ns/event",
            values[3],
            "for information: smaller reads",
        )
    )
    report.add(
        Sample(
            CASE_1,
            "decode + EventProcessor.receive, event by event",
            "ns/event",
            values[4],
            "for information: a backend that gives its events one by one",
        )
    )
    floor = report.add(
        Sample(
            CASE_1,
            "msgspec.json.Decoder(Event).decode alone (floor)",
            "ns/event",
            values[1],
        )
    )
    sdk = report.add(
        Sample(
            CASE_1,
            "ag-ui-protocol TypeAdapter(Event).validate_json alone",
            "ns/event",
            values[2],
        )
    )
    over_floor = report.ratio(
        "processor / msgspec decode", ours, floor, "x the floor (target <= 1.5)", paired=True
    )
    faster = report.ratio(
        "pydantic parse / processor", sdk, ours, "x faster (target >= 3)", paired=True
    )
    report.target(
        Target(
            "processor_vs_msgspec",
            "processor (decode + process) vs msgspec decode alone",
            over_floor,
            1.5,
            "x",
        )
    )
    report.target(
        Target(
            "processor_vs_pydantic",
            "processor speed-up over the ag-ui-protocol pydantic parse alone",
            faster,
            3.0,
            "x",
            upper=False,
        )
    )


# --- Case 2 ---------------------------------------------------------------------------


def history(size: int) -> list[ChatMessage]:
    """``size`` messages of an earlier conversation: questions, answers, tool rounds."""
    messages: list[ChatMessage] = []
    i = 0
    while len(messages) < size:
        kind = i % 4
        if kind == 0:
            messages.append(UserMessage(id=f"u{i}", content=f"question number {i}, please"))
        elif kind == 1:
            call = ToolCall(
                id=f"call{i}", function=FunctionCall(name="get_weather", arguments='{"q":"x"}')
            )
            messages.append(AssistantMessage(id=f"a{i}", tool_calls=[call]))
        elif kind == 2:
            messages.append(ToolMessage(id=f"t{i}", tool_call_id=f"call{i - 1}", content="sunny"))
        else:
            messages.append(TextMessage(f"m{i}", "assistant", f"the answer to question {i}"))
        i += 1
    return messages


def _timer_overhead() -> float:
    """ns one ``perf_counter_ns`` pair adds around an empty window (median of many)."""
    clock = time.perf_counter_ns
    samples = []
    for _ in range(20_001):
        start = clock()
        samples.append(clock() - start)
    samples.sort()
    return float(samples[len(samples) // 2])


def run_flat(report: Report, *, repeats: int, quick: bool) -> None:
    """Case 2: per-event cost at 10 vs 10,000 messages, per delta at 10 vs 100,000 deltas,
    per event at 10 vs 900 calls of one run."""
    _flat_conversation(report, repeats=repeats, quick=quick)
    _flat_arguments(report, repeats=repeats, quick=quick)
    _flat_calls(report, repeats=repeats, quick=quick)


def _flat_conversation(report: Report, *, repeats: int, quick: bool) -> None:
    thread_id = "thread-flat"
    run = mixed_run(thread_id, seed=7, text_deltas=2_000, arg_deltas=2_000)
    loops = 5 if quick else 20
    sizes = (10, 10_000)
    histories = {size: history(size) for size in sizes}

    def per_event(earlier: list[ChatMessage]) -> float:
        total = 0
        for _ in range(loops):
            processor = EventProcessor(Conversation(thread_id, earlier), tools=TOOLS)
            processor.start_run(run.run_id)
            receive = processor.receive
            start = time.perf_counter_ns()
            for payload in run.payloads:
                receive(decode_event(payload))
            total += time.perf_counter_ns() - start
            if processor.status is not RunStatus.executing_tools or processor.violations:
                raise AssertionError("flat-cost run did not end with its tools ready")
        return total / (loops * len(run.payloads))

    def start_run(earlier: list[ChatMessage]) -> float:
        total = 0
        for _ in range(loops):
            processor = EventProcessor(Conversation(thread_id, earlier), tools=TOOLS)
            start = time.perf_counter_ns()
            processor.start_run(run.run_id)
            total += time.perf_counter_ns() - start
        return total / loops / 1_000

    def continuation(earlier: list[ChatMessage]) -> float:
        # A thread's conversation outlives its runs (the engine keeps one per thread):
        # the first run maps it whole, a continuation maps only what the run added.
        total = 0
        for _ in range(loops):
            processor = EventProcessor(Conversation(thread_id, earlier), tools=TOOLS)
            processor.start_run(run.run_id)
            for payload in run.payloads:
                for effect in processor.receive(decode_event(payload)):
                    if type(effect) is ToolsReady:
                        for call in effect.calls:
                            processor.record_result(call, RESULT)
            start = time.perf_counter_ns()
            processor.start_run("run_continuation")
            total += time.perf_counter_ns() - start
        return total / loops / 1_000

    events = interleaved([functools.partial(per_event, histories[size]) for size in sizes], repeats)
    runs = interleaved([functools.partial(start_run, histories[size]) for size in sizes], repeats)
    continuations = interleaved(
        [functools.partial(continuation, histories[size]) for size in sizes], repeats
    )
    samples: dict[int, Sample] = {}
    for size, per_event_values, start_run_values, continuation_values in zip(
        sizes, events, runs, continuations, strict=True
    ):
        samples[size] = report.add(
            Sample(
                CASE_2,
                f"decode + receive, conversation of {size:,} messages",
                "ns/event",
                per_event_values,
                note=f"one run of {len(run.payloads):,} events; start_run not counted",
            )
        )
        report.add(
            Sample(
                CASE_2,
                f"start_run, first run (maps {size:,} messages into RunAgentInput)",
                "µs/run",
                start_run_values,
                note="a thread's first run: the whole conversation is mapped",
            )
        )
        report.add(
            Sample(
                CASE_2,
                f"start_run of a continuation after {size:,} earlier messages",
                "µs/run",
                continuation_values,
                note="maps only the run's new messages; the rest is one identity check "
                "and one list copy",
            )
        )
    ratio = report.ratio(
        "per event, 10,000 / 10 messages",
        samples[10_000],
        samples[10],
        "flat if ~1 (target <= 1.3)",
        paired=True,
    )
    report.target(
        Target("flat_conversation", "per-event cost at 10,000 messages vs at 10", ratio, 1.3, "x")
    )


def _flat_arguments(report: Report, *, repeats: int, quick: bool) -> None:
    thread_id = "thread-args"
    run_id = "run_args"
    call_id = "call_args"
    started = encode_event(RunStartedEvent(thread_id=thread_id, run_id=run_id))
    call_start = encode_event(
        ToolCallStartEvent(tool_call_id=call_id, tool_call_name="search_documents")
    )
    overhead = _timer_overhead()
    small_calls = 2_000 if quick else 10_000
    big_deltas = 20_000 if quick else 100_000
    big_calls = 2 if quick else 1
    small = list(args_payloads(call_id, 10, seed=11))
    big = list(args_payloads(call_id, big_deltas, seed=11))

    def per_delta(deltas: list[bytes], calls: int) -> float:
        total = 0.0
        for _ in range(calls):
            processor = EventProcessor(Conversation(thread_id, (USER,)), tools=TOOLS)
            processor.start_run(run_id)
            processor.receive(decode_event(started))
            processor.receive(decode_event(call_start))
            receive = processor.receive
            start = time.perf_counter_ns()
            for payload in deltas:
                receive(decode_event(payload))
            total += time.perf_counter_ns() - start - overhead
            if processor.violations or len(processor.tool_calls) != 1:
                raise AssertionError("argument run was not clean")
        return total / (calls * len(deltas))

    small_values, big_values = interleaved(
        (
            functools.partial(per_delta, small, small_calls),
            functools.partial(per_delta, big, big_calls),
        ),
        repeats,
    )
    note = f"call(s) per repeat; timer overhead ({overhead:.0f} ns) removed"
    ten = report.add(
        Sample(
            CASE_2,
            "TOOL_CALL_ARGS decode + receive, one call of 10 deltas",
            "ns/delta",
            small_values,
            note=f"{small_calls:,} {note}",
        )
    )
    many = report.add(
        Sample(
            CASE_2,
            f"TOOL_CALL_ARGS decode + receive, one call of {big_deltas:,} deltas",
            "ns/delta",
            big_values,
            note=f"{big_calls} {note}",
        )
    )
    ratio = report.ratio(
        f"per delta, {big_deltas:,} / 10 deltas",
        many,
        ten,
        "flat if ~1 (target <= 1.3)",
        paired=True,
    )
    report.target(
        Target(
            "flat_arguments", f"per-delta cost at {big_deltas:,} deltas vs at 10", ratio, 1.3, "x"
        )
    )


def _calls_payloads(thread_id: str, run_id: str, calls: int) -> list[bytes]:
    """A run of ``calls`` calls, each START, ARGS, END, then a signature for an id no
    record has (once quadratic: each one walked the run's messages)."""
    payloads = [encode_event(RunStartedEvent(thread_id=thread_id, run_id=run_id))]
    for i in range(calls):
        call_id = f"call_{i}"
        payloads.append(
            encode_event(ToolCallStartEvent(tool_call_id=call_id, tool_call_name="search"))
        )
        payloads.append(encode_event(ToolCallArgsEvent(tool_call_id=call_id, delta="{}")))
        payloads.append(encode_event(ToolCallEndEvent(tool_call_id=call_id)))
        payloads.append(
            encode_event(
                ReasoningEncryptedValueEvent(
                    subtype="message", entity_id=f"ghost_{i}", encrypted_value="sig"
                )
            )
        )
    return payloads


def _flat_calls(report: Report, *, repeats: int, quick: bool) -> None:
    thread_id = "thread-calls"
    run_id = "run_calls"
    few, many = 10, 900  # under Limits.max_tool_calls_per_run
    loops = {few: 200 if quick else 900, many: 2 if quick else 10}
    runs = {n: _calls_payloads(thread_id, run_id, n) for n in (few, many)}

    def per_event(calls: int) -> float:
        payloads = runs[calls]
        total = 0
        for _ in range(loops[calls]):
            processor = EventProcessor(Conversation(thread_id, (USER,)), tools=TOOLS)
            processor.start_run(run_id)
            receive = processor.receive
            start = time.perf_counter_ns()
            for payload in payloads:
                receive(decode_event(payload))
            total += time.perf_counter_ns() - start
            if processor.violations or len(processor.tool_calls) != calls:
                raise AssertionError("calls run was not clean")
        return total / (loops[calls] * len(payloads))

    few_values, many_values = interleaved(
        (functools.partial(per_event, few), functools.partial(per_event, many)), repeats
    )
    small = report.add(
        Sample(
            CASE_2, f"a run of {few} calls (START, ARGS, END, signature)", "ns/event", few_values
        )
    )
    large = report.add(
        Sample(
            CASE_2, f"a run of {many} calls (START, ARGS, END, signature)", "ns/event", many_values
        )
    )
    ratio = report.ratio(
        f"per event, {many} / {few} calls", large, small, "flat if ~1 (target <= 1.3)", paired=True
    )
    report.target(
        Target("flat_calls", f"per-event cost in a run of {many} calls vs {few}", ratio, 1.3, "x")
    )
