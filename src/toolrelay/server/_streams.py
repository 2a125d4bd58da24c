"""SSE responses: a thread's log read as AG-UI events, following new commits.

A stream sends the events of every record after its feed's position, each with its
``id`` (:mod:`toolrelay.server._sse`), and waits for the next commit (a heartbeat
comment when none comes); a ``POST``'s stream ends with its AG-UI run, a catch-up
when no run is open. With ``live_text``, the model's text deltas (from the engine's
notifications) go out between records, before their message is written.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from toolrelay._core import ThreadKey
from toolrelay._runtime import EventReceived, Notification
from toolrelay.protocol import (
    Event,
    RunErrorEvent,
    RunFinishedEvent,
    TextMessageContentEvent,
    TextMessageStartEvent,
)
from toolrelay.server._asgi import HTTPError, Receive, Scope, Send, send_more
from toolrelay.server._base import ServerBase
from toolrelay.server._feed import LogFeed
from toolrelay.server._sse import LiveText, first_run_start, frame, shown_ids
from toolrelay.store import TurnStarted

__all__ = ("Streams",)

logger = logging.getLogger("toolrelay.server")

_LIVE_BUFFER = 4096  # live deltas a stream may fall behind by before it stops getting them
_RUN_ENDS = (RunFinishedEvent, RunErrorEvent)  # where a POST's stream ends


class Streams(ServerBase):
    """The server's SSE responses and the live text deltas they carry."""

    def _check_streams(self) -> None:
        """429 when ``max_streams`` SSE responses are open (checked before anything
        is started or written)."""
        if self.max_streams is not None and self._streams >= self.max_streams:
            raise HTTPError(
                429,
                "too_many_streams",
                f"the server has {self._streams} streams open, its bound (max_streams)",
                [(b"retry-after", b"1")],
            )

    async def _route_deltas(self, notifications: MemoryObjectReceiveStream[Notification]) -> None:
        """Hand each text delta of a live turn to the streams following its thread."""
        async with notifications:
            async for notification in notifications:
                if not isinstance(notification, EventReceived):
                    continue
                event = notification.event
                if not isinstance(event, (TextMessageStartEvent, TextMessageContentEvent)):
                    continue
                followers = self._followers.get(notification.key)
                if not followers:
                    continue
                for queue in list(followers):
                    try:
                        queue.send_nowait(event)
                    except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
                        # Too far behind (or gone): it gets whole messages from the log.
                        followers.discard(queue)
                        queue.close()
                self.store.poke(notification.key)

    def _follow(self, key: ThreadKey) -> _Follower | None:
        """Start receiving the thread's live text deltas (``None``: ``live_text`` off)."""
        if not self.live_text:
            return None
        send, receive = anyio.create_memory_object_stream[Event](_LIVE_BUFFER)
        self._followers.setdefault(key, set()).add(send)
        return _Follower(send, receive)

    def _unfollow(self, key: ThreadKey, follower: _Follower | None) -> None:
        if follower is None:
            return
        follower.send.close()
        follower.receive.close()
        followers = self._followers.get(key)
        if followers is not None:
            followers.discard(follower.send)
            if not followers:
                self._followers.pop(key, None)

    async def _stream(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        key: ThreadKey,
        feed: LogFeed,
        head: Sequence[tuple[str, Event]],
        *,
        post: bool,
        skip_until: str | None = None,
    ) -> None:
        self._streams += 1  # bounded where requests come in (_check_streams)
        try:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"text/event-stream; charset=utf-8"),
                        (b"cache-control", b"no-cache"),
                        (b"x-accel-buffering", b"no"),
                        # A POST sent again with Last-Event-ID resumes (AguiHttpBackend
                        # reconnects only to a server that says so).
                        (b"toolrelay-resume", b"last-event-id"),
                    ],
                }
            )
            async with anyio.create_task_group() as group:

                async def watch_disconnect() -> None:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    group.cancel_scope.cancel()  # the client left: the turn goes on

                group.start_soon(watch_disconnect)
                try:
                    try:
                        await self._pump(send, key, feed, head, post=post, skip_until=skip_until)
                    except HTTPError as exc:
                        # The store failed mid-stream: the response has started, so it
                        # ends here; the client catches up from its last id once the
                        # store is back.
                        logger.warning("stream of %s ended: %s", key, exc.message)
                except OSError:
                    pass  # the connection broke under the write
                else:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                group.cancel_scope.cancel()
        finally:
            self._streams -= 1

    async def _pump(
        self,
        send: Send,
        key: ThreadKey,
        feed: LogFeed,
        head: Sequence[tuple[str, Event]],
        *,
        post: bool,
        skip_until: str | None,
    ) -> None:
        """Send ``head`` (events with their ids), then the events of every record after
        the feed's position, following new commits (a POST: until its AG-UI run ends,
        in ``head`` too; a catch-up: until no run is open), with the live text deltas
        in between. With ``skip_until``, records are folded but not sent until that
        turn's start."""
        follower = self._follow(key)
        live = LiveText()
        last_id = str(feed.position)
        self.store.attach(key)
        try:
            chunk = bytearray()
            for event_id, event in head:
                chunk += frame(event_id, event)
                if post and isinstance(event, _RUN_ENDS):
                    # A reconnection whose rest of the record ends the run.
                    await send_more(send, bytes(chunk))
                    return
            if chunk:
                await send_more(send, bytes(chunk))
            while True:
                changed = self.store.changed(key)
                entries = await self._read(key, feed.position)
                chunk = bytearray()
                for entry in entries:
                    events = feed.feed(entry)
                    if skip_until is not None:
                        record = entry.record
                        if not (isinstance(record, TurnStarted) and record.turn_id == skip_until):
                            continue
                        skip_until = None
                        events = events[events.index(first_run_start(events)) :]
                    shown = live.committed(events)
                    ids = shown_ids(entry.seq, events, shown, last_id)
                    for event_id, event in zip(ids, shown, strict=True):
                        chunk += frame(event_id, event)
                        if post and isinstance(event, _RUN_ENDS):
                            await send_more(send, bytes(chunk))
                            return
                    last_id = str(entry.seq)
                    if len(chunk) > 65536:
                        await send_more(send, bytes(chunk))
                        chunk.clear()
                if follower is not None:
                    deltas = _drain(follower.receive)
                    if deltas and skip_until is None and feed.run_open:
                        for event in live.admit(deltas):
                            chunk += frame(last_id, event)
                if chunk:
                    await send_more(send, bytes(chunk))
                if entries:
                    continue  # a page ends at READ_BYTES too: read on until nothing is left
                if not post and not feed.run_open:
                    info = await self._thread_info(key)
                    if info is None or info.live_turn is None or feed.pending_client_calls():
                        return
                if self._drained.is_set():
                    return  # every turn has ended (or lives in another process)
                with anyio.move_on_after(self.heartbeat) as timer:
                    await changed.wait()
                if timer.cancelled_caught:
                    await send_more(send, b": keep-alive\n\n")
        finally:
            self.store.detach(key)
            self._unfollow(key, follower)


@dataclass(slots=True)
class _Follower:
    """One stream's queue of the live text deltas of its thread."""

    send: MemoryObjectSendStream[Event]
    receive: MemoryObjectReceiveStream[Event]


def _drain(queue: MemoryObjectReceiveStream[Event]) -> list[Event]:
    """What the queue holds now, without waiting."""
    out: list[Event] = []
    while True:
        try:
            out.append(queue.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream, anyio.ClosedResourceError):
            return out
