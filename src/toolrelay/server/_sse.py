"""A thread's events on an SSE stream: frames, their ``id``, and the live text a
stream sent before its record.

Every event carries the sequence number of the record it comes from as its ``id``
(:func:`event_ids`): the last event of record ``N`` carries ``N``, an event that
completes a unit (a message, a call, a result) inside it ``N:i``, an event inside an
open unit the id of the last completed one. :class:`LiveText` keeps one stream's text
deltas, sent before their message is written, consistent with the records after them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from toolrelay.protocol import (
    Event,
    ReasoningEndEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    encode_event,
)

__all__ = (
    "LiveText",
    "boundaries",
    "event_ids",
    "first_run_start",
    "frame",
    "shown_ids",
)

#: Events that open a unit a client reads whole (a message, a call, a reasoning phase)
#: and those that close it.
_OPENS = (
    TextMessageStartEvent,
    ToolCallStartEvent,
    ReasoningStartEvent,
    ReasoningMessageStartEvent,
)
_CLOSES = (TextMessageEndEvent, ToolCallEndEvent, ReasoningEndEvent, ReasoningMessageEndEvent)


def boundaries(events: Sequence[Event]) -> list[bool]:
    """For each event, whether a unit is complete after it (nothing left open)."""
    depth = 0
    out = []
    for event in events:
        if isinstance(event, _OPENS):
            depth += 1
        elif isinstance(event, _CLOSES):
            depth = max(depth - 1, 0)
        out.append(depth == 0)
    return out


def event_ids(seq: int, events: Sequence[Event], before: str) -> list[str]:
    """The SSE ``id`` of each event record ``seq`` made (``before``: the id a client
    resumes from when it has none of them).

    The last event carries the plain sequence number (the record is fully sent); an
    event that completes a unit (a message, a call, a result...) inside the record
    carries ``<seq>:<position>``; an event inside an open unit carries the id of the
    last completed one, so a client cut inside a message gets the message again whole,
    and every resumed stream is a valid AG-UI stream on its own.
    """
    ids = []
    current = before
    last = len(events) - 1
    for position, complete in enumerate(boundaries(events)):
        if position == last:
            ids.append(str(seq))
        elif complete:
            current = f"{seq}:{position}"
            ids.append(current)
        else:
            ids.append(current)
    return ids


def shown_ids(seq: int, events: list[Event], shown: list[Event], before: str) -> list[str]:
    """The SSE ids of ``shown``, what a stream sends of record ``seq``'s ``events``
    (:meth:`LiveText.committed`): theirs when it is ``events``; when live text
    reshaped them, the record's start but for the last, which completes the record;
    none when the stream had sent all of them live already (a message's start and
    text, say, whose end comes with the next record)."""
    if shown is events:
        return event_ids(seq, events, before)
    if not shown:
        return []
    return [before] * (len(shown) - 1) + [str(seq)]


def frame(event_id: str, event: Event) -> bytes:
    return b"id: %s\ndata: %s\n\n" % (event_id.encode(), encode_event(event))


def first_run_start(events: Sequence[Event]) -> Event:
    return next(event for event in events if isinstance(event, RunStartedEvent))


@dataclass(slots=True)
class LiveText:
    """What one stream sent of text messages before their record (live deltas).

    A message whose ``TEXT_MESSAGE_START`` went out live gets, when its record comes,
    only the text not sent yet and its ``TEXT_MESSAGE_END``; a message whose record
    came first gets no delta afterwards. A stream that joins mid-message sends that
    message whole, from its record.
    """

    open: dict[str, str] = field(default_factory=dict)  # message id -> text sent
    done: set[str] = field(default_factory=set)  # message ids sent from their record

    def admit(self, deltas: Sequence[Event]) -> list[Event]:
        """The live events to send of ``deltas``."""
        out: list[Event] = []
        for event in deltas:
            if isinstance(event, TextMessageStartEvent):
                if event.message_id in self.done or event.message_id in self.open:
                    continue
                self.open[event.message_id] = ""
                out.append(TextMessageStartEvent(message_id=event.message_id, role="assistant"))
            elif isinstance(event, TextMessageContentEvent):
                sent = self.open.get(event.message_id)
                if sent is None or not event.delta:
                    continue
                self.open[event.message_id] = sent + event.delta
                out.append(TextMessageContentEvent(message_id=event.message_id, delta=event.delta))
        return out

    def committed(self, events: list[Event]) -> list[Event]:
        """``events`` of a record as this stream sends them (the same list when
        nothing of it went out live)."""
        if not self.open:
            for event in events:
                if isinstance(event, TextMessageStartEvent):
                    self.done.add(event.message_id)
            return events
        out: list[Event] = []
        for event in events:
            if isinstance(event, TextMessageStartEvent):
                self.done.add(event.message_id)
                if event.message_id not in self.open:
                    out.append(event)
            elif isinstance(event, TextMessageContentEvent) and event.message_id in self.open:
                sent = self.open[event.message_id]
                if event.delta.startswith(sent) and len(event.delta) > len(sent):
                    out.append(
                        TextMessageContentEvent(
                            message_id=event.message_id, delta=event.delta[len(sent) :]
                        )
                    )
            elif isinstance(event, TextMessageEndEvent):
                self.open.pop(event.message_id, None)
                out.append(event)
            elif isinstance(event, (RunFinishedEvent, RunErrorEvent, RunStartedEvent)):
                for message_id in self.open:  # never written: close what went out live
                    out.append(TextMessageEndEvent(message_id=message_id))
                    self.done.add(message_id)
                self.open.clear()
                out.append(event)
            else:
                out.append(event)
        return out
