"""Readers of event-stream bodies: Server-Sent Events and NDJSON lines.

Both read a byte stream that :func:`~toolrelay.backends._wire.bound_body` already
decodes, bounds and checks (:mod:`toolrelay.backends._wire`), so here a read is parsed
and nothing else: :class:`SseReader` follows the WHATWG "event stream interpretation"
(httpx-sse is the reference it is tested against, differentially), :class:`LineReader`
cuts NDJSON into lines. Both are iterator classes rather than async generators, so
that leaving one early leaves nothing suspended to be garbage collected.

One shortcut, for the AG-UI backend's hot loop: while the body passes reads on as
they came (:meth:`~toolrelay.backends._wire.BoundedBody.direct_reads`), the loop may
await them itself and hand each to :meth:`SseReader.take`, which has the body check
it and parses it: per read, one coroutine in the chain instead of three. A read that
is one whole event of one ``data`` line (what a server flushing event by event sends)
goes to :meth:`SseReader.one` first, which gives its data at once, checked the cheap
way (:meth:`~toolrelay.backends._wire.BoundedBody.whole`): no event object, no parse.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final, Self

import httpx
import msgspec

from toolrelay.backends._wire import BoundedBody

__all__ = ("LineReader", "SseEvent", "SseReader")

# One byte looked for as its value: ``10 in chunk`` is a plain scan, while
# ``b"\n" in chunk`` first tries the bytes as an integer, and builds and drops a
# TypeError, on every call (CPython 3.11-3.13).
_LF: Final = ord("\n")
_CR: Final = ord("\r")


class SseEvent(msgspec.Struct, gc=False):
    """One Server-Sent Event: its ``event`` name (``"message"`` when unnamed), its
    ``data`` lines joined with newlines, as UTF-8 bytes, and the stream's last event
    id when it was dispatched (``""`` when the stream has sent none).

    A msgspec Struct: built in C, one per event, and never tracked by the cycle
    collector (it holds only strings and bytes)."""

    event: str
    data: bytes
    id: str = ""


class SseReader:
    """The events of an SSE body (the WHATWG "event stream interpretation"), read from
    a byte stream that :func:`bound_body` already bounds and checks.

    Lines end with CR, LF or CRLF (a CR at the end of one read and an LF at the start
    of the next are one line ending); comments, ``retry`` fields and
    unknown fields are skipped; one space after the colon is dropped; an event with
    no data line is not dispatched; an event cut off by the end of the body is
    discarded, as the specification says. The last ``id`` field (one without a NUL)
    is the stream's last event id, which each dispatched event carries. An iterator
    class, not an async generator: leaving it early leaves nothing suspended.
    """

    def __init__(self, stream: httpx.AsyncByteStream) -> None:
        self._chunks = stream.__aiter__()
        self._body = stream if isinstance(stream, BoundedBody) else None
        #: The raw reads to await directly and hand to :meth:`take`, when the body
        #: passes them on as they come (see :meth:`BoundedBody.direct_reads`); else
        #: ``None``: read with :meth:`batch`.
        self.direct: AsyncIterator[bytes] | None = None
        # The line being read, and the event's data: compact buffers, so that a block
        # of many tiny lines costs its bytes, not an object per line.
        self._partial = bytearray()
        self._skip_lf = False
        self._data: bytes | bytearray | None = None
        self._name = b""
        #: The stream's last event id (the "last event id buffer"): ``""`` until an
        #: ``id`` field sets it. An event taken with :meth:`one` carries it.
        self.event_id = ""
        # At an event's start: no line begun, no data or name read, no LF to skip.
        self._clean = True
        self._ready: list[SseEvent] = []
        self._next = 0

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SseEvent:
        self.direct = None
        while self._next >= len(self._ready):
            self._ready.clear()
            self._next = 0
            chunk = await self._chunks.__anext__()  # StopAsyncIteration ends us too
            self._feed(chunk)
        event = self._ready[self._next]
        self._next += 1
        return event

    async def batch(self) -> list[SseEvent]:
        """The events not yet taken, or else those of the next reads that complete any;
        empty at the end of the body. Taking a read's events at once spares a call per
        event; it mixes with ``async for`` (each takes what the other did not)."""
        while self._next >= len(self._ready):
            self._ready = []
            self._next = 0
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                return []
            self._feed(chunk)
        ready = self._ready if not self._next else self._ready[self._next :]
        self._ready = []
        self._next = 0
        if self._body is not None:
            self.direct = self._body.direct_reads()
        return ready

    def one(self, chunk: bytes) -> bytes | None:
        """The data of ``chunk``, a read taken from :attr:`direct`, when it is one whole
        event of one ``data`` line (an event flushed on its own, in one read) and the
        body passes it as it is: checked, the event's id is :attr:`event_id`. ``None``
        otherwise, with nothing done: hand it to :meth:`take`."""
        # Once per event of a stream flushed event by event, so each step is the
        # cheapest there is: a partition and a removeprefix (one argument each), not
        # endswith, startswith, find and slices.
        head, _, rest = chunk.partition(b"\n")
        if rest != b"\n" or not self._clean or _CR in head:
            return None
        data = head.removeprefix(b"data: ")  # one space after the colon is dropped
        if data is head:
            data = head.removeprefix(b"data:")
            if data is head:
                return None
        body = self._body
        assert body is not None, "direct reads come from a BoundedBody"
        return data if body.whole(chunk) else None

    def take(self, chunk: bytes) -> list[SseEvent]:
        """The events that ``chunk``, a read taken from :attr:`direct`, completes: the
        body's checks, then the parse."""
        body = self._body
        assert body is not None, "direct reads come from a BoundedBody"
        checked = body.check(chunk)
        if checked is not chunk:
            # Cut before invalid UTF-8: its error waits for the next read, the body's.
            self.direct = None
            chunk = checked
        self._feed(chunk)
        ready, self._ready = self._ready, []
        return ready

    def finished(self) -> None:
        """:attr:`direct` came to its end (the end of the body)."""
        self.direct = None
        if self._body is not None:
            self._body.finished()

    def _feed(self, chunk: bytes) -> None:
        self._parse(chunk)
        self._clean = (
            self._data is None and not self._name and not self._partial and not self._skip_lf
        )

    def _parse(self, chunk: bytes) -> None:
        if self._skip_lf:
            self._skip_lf = False
            if chunk.startswith(b"\n"):
                chunk = chunk[1:]
        if _LF not in chunk and _CR not in chunk:
            self._partial += chunk
            return
        if self._partial:
            self._partial += chunk
            chunk = bytes(self._partial)
            self._partial = bytearray()
        if _CR not in chunk:
            self._feed_lf(chunk)
            return
        lines = chunk.splitlines(keepends=True)  # bytes: at CR, LF and CRLF only
        if not lines[-1].endswith((b"\n", b"\r")):
            self._partial += lines.pop()
        elif lines[-1].endswith(b"\r"):
            self._skip_lf = True  # its LF may come with the next read
        for line in lines:
            self._line(line.rstrip(b"\r\n"))

    def _feed_lf(self, chunk: bytes) -> None:
        """:meth:`_feed` for a chunk that starts a line and has LF endings only: whole
        event blocks are cut at each blank line, and a block of one ``data`` line (what
        nearly every event is) becomes an event without being read line by line."""
        *blocks, rest = chunk.split(b"\n\n")
        if blocks:
            append = self._ready.append
            line = self._line
            last_id = self.event_id
            # The first block may continue an event begun in an earlier read.
            clean = self._data is None and not self._name
            for block in blocks:
                if clean and block.startswith(b"data: ") and _LF not in block:
                    append(SseEvent("message", block[6:], last_id))
                elif clean and block.startswith(b"data:") and _LF not in block:
                    append(SseEvent("message", block[5:], last_id))
                else:
                    for piece in block.split(b"\n"):
                        line(piece)
                    line(b"")  # the blank line that ended the block
                    clean = True
                    last_id = self.event_id
        if rest:
            *lines, partial = rest.split(b"\n")
            for piece in lines:
                self._line(piece)
            self._partial += partial

    def _line(self, line: bytes) -> None:
        if not line:
            data = self._data
            if data is not None:
                name = self._name.decode(errors="replace") if self._name else "message"
                self._ready.append(
                    SseEvent(name, data if type(data) is bytes else bytes(data), self.event_id)
                )
                self._data = None
            self._name = b""
            return
        if line.startswith(b":"):
            return  # a comment (keep-alive)
        field, colon, value = line.partition(b":")
        if colon and value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data = self._data
            if data is None:
                self._data = value  # one line: kept as it is
            else:
                if type(data) is bytes:
                    data = self._data = bytearray(data)
                data += b"\n"
                data += value
        elif field == b"event":
            self._name = value
        elif field == b"id" and 0 not in value:
            self.event_id = value.decode(errors="replace")
        # retry and unknown fields: ignored


class LineReader:
    """The non-blank lines of an NDJSON body (LF or CRLF endings), as bytes, read from
    a byte stream that :func:`bound_body` already bounds and checks. An iterator
    class, like :class:`SseReader`."""

    def __init__(self, stream: httpx.AsyncByteStream) -> None:
        self._chunks = stream.__aiter__()
        self._partial = bytearray()
        self._ready: list[bytes] = []
        self._next = 0
        self._done = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> bytes:
        while self._next >= len(self._ready):
            self._ready.clear()
            self._next = 0
            if self._done:
                raise StopAsyncIteration
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._done = True  # a last line without a newline still counts
                chunk = b"\n"
            self._feed(chunk)
        line = self._ready[self._next]
        self._next += 1
        return line

    def _feed(self, chunk: bytes) -> None:
        if _LF not in chunk:
            self._partial += chunk
            return
        if self._partial:
            self._partial += chunk
            chunk = bytes(self._partial)
            self._partial = bytearray()
        *lines, rest = chunk.split(b"\n")
        self._partial += rest
        self._ready.extend(line for line in lines if line.strip())
