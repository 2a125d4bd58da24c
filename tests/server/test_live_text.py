"""LiveText: live deltas and the records that follow them make one valid message per
stream, whatever the interleaving (Hypothesis)."""

from __future__ import annotations

from hypothesis import given, strategies as st

from toolrelay.protocol import (
    Event,
    RunErrorEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)
from toolrelay.server._sse import LiveText, shown_ids


def record(message_id: str, text: str) -> list[Event]:
    """The events the log makes of a finished text message."""
    events: list[Event] = [TextMessageStartEvent(message_id=message_id, role="assistant")]
    if text:
        events.append(TextMessageContentEvent(message_id=message_id, delta=text))
    events.append(TextMessageEndEvent(message_id=message_id))
    return events


def check(events: list[Event], message_id: str, text: str) -> None:
    kinds = [type(e).__name__ for e in events]
    assert kinds.count("TextMessageStartEvent") == 1, kinds
    assert kinds.count("TextMessageEndEvent") == 1, kinds
    assert kinds[0] == "TextMessageStartEvent" and kinds[-1] == "TextMessageEndEvent"
    said = "".join(e.delta for e in events if isinstance(e, TextMessageContentEvent))
    assert said == text
    assert all(getattr(e, "message_id", message_id) == message_id for e in events)


@given(
    pieces=st.lists(st.text(min_size=1, max_size=5), max_size=8),
    joined_at=st.integers(min_value=0, max_value=9),
    committed_at=st.integers(min_value=0, max_value=9),
    late=st.booleans(),
)
def test_deltas_and_the_record_make_one_message(
    pieces: list[str], joined_at: int, committed_at: int, late: bool
) -> None:
    """A stream that joined after ``joined_at`` deltas, whose record came after
    ``committed_at`` deltas (the rest arriving late, or never), sends one message."""
    text = "".join(pieces)
    deltas: list[Event] = [TextMessageStartEvent(message_id="m", role="assistant")]
    deltas += [TextMessageContentEvent(message_id="m", delta=p) for p in pieces]
    committed_at = min(committed_at, len(deltas))
    joined_at = min(joined_at, committed_at)
    live = LiveText()
    out: list[Event] = []
    out += live.admit(deltas[joined_at:committed_at])  # what it saw live
    out += live.committed(record("m", text))  # the record
    if late:  # deltas the stream had not drained yet when the record came
        out += live.admit(deltas[committed_at:])
    check(out, "m", text)


@given(pieces=st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=6))
def test_a_message_that_is_never_written_is_closed_before_the_run_ends(pieces: list[str]) -> None:
    live = LiveText()
    out = live.admit(
        [TextMessageStartEvent(message_id="m", role="assistant")]
        + [TextMessageContentEvent(message_id="m", delta=p) for p in pieces]
    )
    out += live.committed([RunErrorEvent(message="cancelled", code="cancelled")])
    assert isinstance(out[-1], RunErrorEvent)
    check(out[:-1], "m", "".join(pieces))


def test_a_record_whose_events_all_went_out_live_sends_nothing_and_breaks_nothing() -> None:
    """A record holding a message's start and text (its end comes with the next one),
    all of which a stream already sent live, leaves that stream nothing to send: no
    event, no id (a load on PostgreSQL met this: the ids and the events disagreed)."""
    live = LiveText()
    sent = live.admit(
        [
            TextMessageStartEvent(message_id="m", role="assistant"),
            TextMessageContentEvent(message_id="m", delta="Hello"),
        ]
    )
    assert len(sent) == 2
    events: list[Event] = [
        TextMessageStartEvent(message_id="m", role="assistant"),
        TextMessageContentEvent(message_id="m", delta="Hello"),
    ]
    shown = live.committed(events)
    assert shown == []
    assert shown_ids(2, events, shown, "1") == []
    end: list[Event] = [TextMessageEndEvent(message_id="m")]
    shown = live.committed(end)
    assert shown == end and shown_ids(3, end, shown, "2") == ["3"]
    fresh = record("n", "Hi")  # nothing of it live: the record's own ids
    assert shown_ids(4, fresh, LiveText().committed(fresh), "3") == ["3", "3", "4"]
