"""Catch-up: a thread's events from a client's position (``?after=`` or
``Last-Event-ID``), then its live tail.

A position is a sequence number ``N`` (after record ``N``) or an event id ``N:i``
(after event ``i`` of record ``N``). A stream resumed inside a run opens with that
run's ``RUN_STARTED`` again, so that it is a valid AG-UI stream on its own.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence

from toolrelay._core import ThreadKey
from toolrelay.protocol import Event, RunErrorEvent, RunFinishedEvent, RunStartedEvent
from toolrelay.server._asgi import HTTPError, Receive, Scope, Send, respond
from toolrelay.server._auth import Request
from toolrelay.server._feed import LogFeed
from toolrelay.server._sse import boundaries, event_ids
from toolrelay.server._streams import Streams

__all__ = ("CatchUp", "parse_position")


class CatchUp(Streams):
    """``GET /threads/{thread}/events`` and the resumption of a broken stream."""

    async def _catch_up(
        self,
        request: Request,
        principal: str,
        thread: str,
        scope: Scope,
        receive: Receive,
        send: Send,
    ) -> None:
        key = ThreadKey(thread)  # the ASGI server decoded the path
        if not await self._check_owner(key, principal):
            raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
        self._check_streams()
        feed, head = await self._resume_at(key, *parse_position(scope, request.headers))
        info = await self._thread_info(key)
        idle = info is None or info.last_seq <= feed.position
        if not head and idle and not feed.run_open and (info is None or info.live_turn is None):
            await respond(send, 204, b"", None)
            return
        await self._stream(scope, receive, send, key, feed, head, post=False)

    async def _resume_at(
        self, key: ThreadKey, seq: int, index: int | None
    ) -> tuple[LogFeed, Sequence[tuple[str, Event]]]:
        """A feed folded up to a client's position (``N`` or ``N:i``) and the events a
        stream resumed there sends first, with their ids; 416 when the thread has no
        such position."""
        if index is None:
            feed = await self._warm(key, seq)
            if feed.position < seq:
                raise _no_position(key, f"{seq}")
            return feed, [(str(seq), event) for event in feed.resume_events()]
        # Inside record ``seq``'s events: what follows event ``index`` of them.
        feed = await self._warm(key, seq - 1)
        if feed.position < seq - 1:
            # Past the thread's end (the read below asks only for a record it has: a
            # number past the store's range is never read).
            raise _no_position(key, f"{seq}:{index}")
        entries = await self._read(key, seq - 1, 1)
        if not entries or entries[0].seq != seq:
            raise _no_position(key, f"{seq}:{index}")
        open_run = feed.open_run_id
        group = feed.feed(entries[0])
        if index >= len(group) - 1 or not boundaries(group)[index]:
            # Not an id this record's events carry (those end a unit, the last
            # one carries the plain sequence number).
            raise _no_position(key, f"{seq}:{index}")
        for event in group[: index + 1]:
            if isinstance(event, RunStartedEvent):
                open_run = event.run_id
            elif isinstance(event, (RunFinishedEvent, RunErrorEvent)):
                open_run = None
        resumed: list[Event] = []
        if open_run is not None:
            resumed.append(RunStartedEvent(thread_id=key.thread_id, run_id=open_run))
        at = f"{seq}:{index}"
        ids = event_ids(seq, group, str(seq - 1))
        rest = range(index + 1, len(group))
        return feed, [(at, event) for event in resumed] + [(ids[i], group[i]) for i in rest]


def _no_position(key: ThreadKey, position: str) -> HTTPError:
    return HTTPError(416, "bad_position", f"thread {key.thread_id!r} has no position {position}")


def parse_position(scope: Scope, headers: Mapping[str, str]) -> tuple[int, int | None]:
    """Where a catch-up starts: ``?after=`` or ``Last-Event-ID``, either a sequence
    number ``N`` (after record N) or an event id ``N:i`` (after event i of record N)."""
    query = urllib.parse.parse_qs(scope.get("query_string", b"").decode("latin-1"))
    raw = query.get("after", [None])[-1]
    if raw is None:
        raw = headers.get("last-event-id")
    if raw is None or raw == "":
        return 0, None
    text_seq, sep, text_index = raw.partition(":")
    try:
        seq = int(text_seq)
        index = int(text_index) if sep else None
    except ValueError:
        raise HTTPError(
            400, "bad_position", f"after / Last-Event-ID {raw!r} is not N or N:i"
        ) from None
    if seq < 0 or (index is not None and (index < 0 or seq < 1)):
        raise HTTPError(400, "bad_position", f"after / Last-Event-ID {raw!r} is out of range")
    return seq, index
