"""Realistic AG-UI event streams for the benchmarks, built once and encoded to bytes.

A stream is a list of turns (one thread each), a turn a list of runs, a run the JSON
payloads of its events in order, exactly as an SSE ``data:`` line carries them. What
an agent streams is mostly deltas: text deltas and tool-argument deltas of 1 to 20
characters (a few with non-ASCII text), with starts and ends around them. A turn
has up to two tool hops: runs that end with tool calls pending, then a continuation
that answers. Every id is realistic in length and every event is one the processor
accepts without a protocol violation (checked by the cases, not assumed).

Everything is seeded: two runs of the suite measure the same bytes.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

from toolrelay.protocol import (
    Event,
    RunFinishedEvent,
    RunStartedEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    encode_event,
)

__all__ = (
    "RunStream",
    "TOOL_NAMES",
    "TurnStream",
    "args_payloads",
    "mixed_run",
    "realistic_turns",
)

#: The tools the streams call (the cases declare them to the processor).
TOOL_NAMES = ("get_weather", "search_documents", "get_secret_number")

_TEXT = "abcdefghijklmnopqrstuvwxyz     ,.ETAOIN'"
_ARGS = 'abcdefghijklmnopqrstuvwxyz0123456789_ ":,{}[]'
_NON_ASCII = ("é", "ü", "—", "’", "…", "日本", "🙂")


@dataclass(frozen=True, slots=True)
class RunStream:
    """One run: its id and the encoded events of its stream, RUN_STARTED to RUN_FINISHED."""

    run_id: str
    payloads: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class TurnStream:
    """One user turn on one thread: its runs in order (the last one answers)."""

    thread_id: str
    runs: tuple[RunStream, ...]

    @property
    def event_count(self) -> int:
        return sum(len(run.payloads) for run in self.runs)


class _Ids:
    """Realistic ids: ``msg_`` / ``call_`` / ``run_`` and 24 random characters."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def __call__(self, prefix: str) -> str:
        return prefix + "".join(self._rng.choices("0123456789abcdefghjkmnpqrstvwxyz", k=24))


def _delta(rng: random.Random, alphabet: str, non_ascii: float) -> str:
    size = rng.randint(1, 20)
    text = "".join(rng.choices(alphabet, k=size))
    if rng.random() < non_ascii:
        at = rng.randrange(size)
        text = (text[:at] + rng.choice(_NON_ASCII) + text[at + 1 :])[:20]
    return text


def _text(rng: random.Random, ids: _Ids, deltas: int) -> tuple[str, list[Event]]:
    message_id = ids("msg_")
    events: list[Event] = [TextMessageStartEvent(message_id=message_id, role="assistant")]
    events += [
        TextMessageContentEvent(message_id=message_id, delta=_delta(rng, _TEXT, 0.03))
        for _ in range(deltas)
    ]
    events.append(TextMessageEndEvent(message_id=message_id))
    return message_id, events


def _tool_call(rng: random.Random, ids: _Ids, parent: str | None, deltas: int) -> list[Event]:
    call_id = ids("call_")
    events: list[Event] = [
        ToolCallStartEvent(
            tool_call_id=call_id, tool_call_name=rng.choice(TOOL_NAMES), parent_message_id=parent
        )
    ]
    events += [
        ToolCallArgsEvent(tool_call_id=call_id, delta=_delta(rng, _ARGS, 0.01))
        for _ in range(deltas)
    ]
    events.append(ToolCallEndEvent(tool_call_id=call_id))
    return events


def _run(
    rng: random.Random,
    ids: _Ids,
    thread_id: str,
    *,
    text_deltas: int,
    calls: int,
    arg_deltas: tuple[int, int],
    step: bool | None = None,
) -> RunStream:
    run_id = ids("run_")
    events: list[Event] = [RunStartedEvent(thread_id=thread_id, run_id=run_id)]
    if step is None:
        step = rng.random() < 0.5
    if step:
        events.append(StepStartedEvent(step_name="model_request"))
    parent: str | None = None
    if text_deltas:
        parent, text = _text(rng, ids, text_deltas)
        events += text
    for _ in range(calls):
        events += _tool_call(rng, ids, parent, rng.randint(*arg_deltas))
    if step:
        events.append(StepFinishedEvent(step_name="model_request"))
    events.append(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
    return RunStream(run_id, tuple(encode_event(event) for event in events))


def _turn(rng: random.Random, ids: _Ids, index: int) -> TurnStream:
    thread_id = f"thread-{index:06d}"
    hops = rng.choice((0, 1, 2, 2, 2))
    runs = [
        _run(
            rng,
            ids,
            thread_id,
            text_deltas=rng.randint(0, 120),
            calls=rng.randint(1, 3),
            arg_deltas=(10, 300),
        )
        for _ in range(hops)
    ]
    runs.append(
        _run(rng, ids, thread_id, text_deltas=rng.randint(100, 1_500), calls=0, arg_deltas=(0, 0))
    )
    return TurnStream(thread_id, tuple(runs))


def realistic_turns(total_events: int = 100_000, *, seed: int = 20_240_601) -> list[TurnStream]:
    """Turns holding exactly ``total_events`` events in all (the last turn is cut to fit).

    Args:
        total_events: How many events, at least 5.
        seed: The random seed; the same seed gives the same bytes.
    """
    if total_events < 5:
        raise ValueError("total_events must be >= 5")
    rng = random.Random(seed)
    ids = _Ids(rng)
    turns: list[TurnStream] = []
    count = 0
    while count < total_events:
        turn = _turn(rng, ids, len(turns))
        left = total_events - count
        if left - 5 < turn.event_count != left:
            # The last turn, cut to fit: one run of text without STEP events (4 fixed
            # events around the deltas; ``left`` is at least 5 here).
            thread_id = f"thread-{len(turns):06d}"
            run = _run(
                rng, ids, thread_id, text_deltas=left - 4, calls=0, arg_deltas=(0, 0), step=False
            )
            turn = TurnStream(thread_id, (run,))
        turns.append(turn)
        count += turn.event_count
    return turns


def mixed_run(thread_id: str, *, seed: int, text_deltas: int, arg_deltas: int) -> RunStream:
    """One run: text, then two tool calls sharing ``arg_deltas`` argument deltas."""
    rng = random.Random(seed)
    ids = _Ids(rng)
    half = arg_deltas // 2
    return _run(
        rng,
        ids,
        thread_id,
        text_deltas=text_deltas,
        calls=2,
        arg_deltas=(half, half),
    )


def args_payloads(call_id: str, deltas: int, *, seed: int) -> Iterator[bytes]:
    """``deltas`` encoded TOOL_CALL_ARGS events of one call."""
    rng = random.Random(seed)
    for _ in range(deltas):
        yield encode_event(ToolCallArgsEvent(tool_call_id=call_id, delta=_delta(rng, _ARGS, 0.01)))
