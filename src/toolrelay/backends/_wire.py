"""What every HTTP backend does to a response body before it parses it: bounded.

Theory of operation
-------------------
httpx decodes a compressed body chunk by chunk, and one chunk of a gzip bomb (64 KiB
on the wire) can inflate to 64 MiB at once; it also replaces invalid UTF-8 silently
and keeps a byte order mark. So the HTTP backends (AG-UI and the providers) take the
decoding over: :func:`bound_body` replaces the response's byte stream with a
:class:`BoundedBody` and removes ``Content-Encoding``, so that httpx reads our
decoded bytes as they are::

    wire bytes -> inflate (gzip, deflate; at most 64 KiB out per step)
               -> strip a leading BOM, check UTF-8 (event streams)
               -> count the bytes since the last record boundary (a blank line for
                  SSE, a newline for NDJSON): past the bound, LimitExceededError
               -> the readers of :mod:`toolrelay.backends._readers` (SSE, NDJSON)

Every bound is counted on *decoded* bytes, and memory stays near the bound whatever
the compression ratio. Brotli is decoded too when the ``brotli`` package (1.2 or
later, whose decompressor bounds its output) is installed: the ``toolrelay[brotli]``
extra. Other encodings are not asked for (``Accept-Encoding`` says what is:
:data:`ACCEPT_ENCODING`); a server that sends one anyway gets a typed error
(``code="content_encoding"``) instead of being read as garbage.

:func:`body_excerpt` reads at most a bounded number of decoded bytes of an error
body, never the whole of it.
"""

from __future__ import annotations

import codecs
import importlib
import math
import zlib
from collections.abc import AsyncIterator, Iterator
from typing import Any, Final, Protocol, Self

import anyio
import httpx

from toolrelay._errors import LimitExceededError, MalformedEventError, RemoteProtocolError

__all__ = (
    "ACCEPT_ENCODING",
    "DECODE_STEP_BYTES",
    "body_excerpt",
    "bound_body",
    "run_deadline",
)


def _bounded_brotli() -> Any:
    """The ``brotli`` module if it can bound its output (1.2 or later), else ``None``."""
    try:
        brotli = importlib.import_module("brotli")
    except ImportError:
        return None
    if not hasattr(brotli, "Decompressor") or not hasattr(
        brotli.Decompressor(), "can_accept_more_data"
    ):
        return None
    return brotli


_BROTLI: Final = _bounded_brotli()

#: The ``Accept-Encoding`` HTTP backends send: what :class:`BoundedBody` decodes
#: (``br`` only with the ``brotli`` package installed).
ACCEPT_ENCODING: Final = "gzip, deflate, br" if _BROTLI is not None else "gzip, deflate"
#: The most decoded bytes one step of inflating produces.
DECODE_STEP_BYTES: Final = 64 * 1024
_BLOCK_SLACK_BYTES: Final = 64 * 1024
_BOM: Final = b"\xef\xbb\xbf"
_EXCERPT_CHARS: Final = 300


class _Inflater(Protocol):
    def feed(self, data: bytes) -> Iterator[bytes]: ...
    def flush(self) -> Iterator[bytes]: ...


class _ZlibInflater:
    """gzip (several members allowed) or deflate (zlib-wrapped or raw), in bounded steps."""

    def __init__(self, encoding: str) -> None:
        self._encoding = encoding
        self._gzip = encoding == "gzip"
        self._raw_fallback = not self._gzip  # deflate: zlib-wrapped first, raw if not
        self._obj = self._new(zlib.MAX_WBITS | 16 if self._gzip else zlib.MAX_WBITS)

    @staticmethod
    def _new(wbits: int) -> zlib._Decompress:
        return zlib.decompressobj(wbits)

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            try:
                out = self._obj.decompress(data, DECODE_STEP_BYTES)
            except zlib.error as exc:
                if self._raw_fallback:
                    self._raw_fallback = False
                    self._obj = self._new(-zlib.MAX_WBITS)
                    continue
                raise MalformedEventError(
                    f"the {self._encoding} body cannot be decoded: {exc}", code="content_encoding"
                ) from exc
            self._raw_fallback = False
            if out:
                yield out
            data = self._obj.unconsumed_tail
            if self._obj.eof:
                rest = self._obj.unused_data
                if self._gzip and rest.strip(b"\x00"):
                    self._obj = self._new(zlib.MAX_WBITS | 16)  # the next gzip member
                    data = rest
                    continue
                return
            if not data and len(out) < DECODE_STEP_BYTES:
                return

    def flush(self) -> Iterator[bytes]:
        yield from self.feed(b"")


class _BrotliInflater:
    """Brotli, in bounded steps (``output_buffer_limit``, then drained with no input)."""

    def __init__(self) -> None:
        self._obj = _BROTLI.Decompressor()

    def feed(self, data: bytes) -> Iterator[bytes]:
        while True:
            try:
                out: bytes = self._obj.process(data, output_buffer_limit=DECODE_STEP_BYTES)
            except _BROTLI.error as exc:
                raise MalformedEventError(
                    f"the br body cannot be decoded: {exc}", code="content_encoding"
                ) from exc
            data = b""
            if out:
                yield out
            if self._obj.is_finished():
                return
            # A full step may leave output to come from input already taken.
            if len(out) < DECODE_STEP_BYTES and self._obj.can_accept_more_data():
                return

    def flush(self) -> Iterator[bytes]:
        if not self._obj.is_finished():
            yield from self.feed(b"")


def _inflaters(response: httpx.Response) -> list[_Inflater]:
    """The decoders of the response's ``Content-Encoding``, outermost first."""
    values = [
        value.strip().lower()
        for value in response.headers.get_list("content-encoding", split_commas=True)
    ]
    inflaters: list[_Inflater] = []
    for value in reversed(values):  # the last encoding applied is undone first
        if value in ("", "identity"):
            continue
        if value in ("gzip", "x-gzip"):
            inflaters.append(_ZlibInflater("gzip"))
        elif value == "deflate":
            inflaters.append(_ZlibInflater("deflate"))
        elif value == "br" and _BROTLI is not None:
            inflaters.append(_BrotliInflater())
        else:
            raise MalformedEventError(
                f"the server sent a body encoded as {value!r}, which toolrelay does not "
                f"decode (it asks for {ACCEPT_ENCODING})",
                code="content_encoding",
            )
    return inflaters


def _through(inflaters: list[_Inflater], data: bytes, *, final: bool) -> Iterator[bytes]:
    """``data`` through every inflater in turn, each step bounded."""
    if not inflaters:
        if data:
            yield data
        return
    first, rest = inflaters[0], inflaters[1:]
    pieces = first.flush() if final else first.feed(data)
    for piece in pieces:
        yield from _through(rest, piece, final=False)
    if final and rest:
        yield from _through(rest, b"", final=True)


class BoundedBody(httpx.AsyncByteStream):
    """A response body decoded by us, in bounded steps, with its records bounded.

    See the module docstring. An iterator class rather than an async generator, so
    that leaving it early leaves nothing suspended to be garbage collected.

    Args:
        stream: The response's raw stream.
        inflaters: The decoders of its ``Content-Encoding`` (empty: identity).
        error: Raised on the first read instead (an encoding we cannot decode).
        record: ``"sse"`` (records end with a blank line), ``"ndjson"`` (a newline),
            or ``None`` (no record bound, no UTF-8 check: an error body).
        max_record_bytes: The limit a record is checked against (``max_event_bytes``).
    """

    _SSE_BOUNDARIES = (b"\n\n", b"\r\r", b"\n\r\n", b"\r\n\r")

    def __init__(
        self,
        stream: httpx.AsyncByteStream,
        inflaters: list[_Inflater],
        error: RemoteProtocolError | None,
        record: str | None,
        max_record_bytes: int,
    ) -> None:
        self._stream = stream
        self._inflaters = inflaters
        self._error = error
        self._record = record
        self._max_record_bytes = max_record_bytes
        self._bound = (2 if record == "sse" else 1) * max_record_bytes + _BLOCK_SLACK_BYTES
        # What ends a record: a blank line (SSE), a newline (NDJSON).
        self._record_end = (b"\n\n" if record == "sse" else b"\n") if record else None
        # An SSE body whose reads :meth:`whole` may check (until invalid UTF-8).
        self._plain_sse = record == "sse"
        self._since_boundary = 0
        self._tail = b""
        self._utf8 = codecs.getincrementaldecoder("utf-8")() if record else None
        self._held = False  # the UTF-8 decoder holds the start of a character
        self._at_start = record is not None  # a BOM may still come
        # Reads are handed on as they come (checked): no decoder, and no BOM may come.
        self._identity = not inflaters and not self._at_start
        self._head = b""
        self._chunks: AsyncIterator[bytes] | None = None
        self._pending: Iterator[bytes] = iter(())
        self._done = False

    def __aiter__(self) -> Self:
        self._chunks = _reads(self._stream).__aiter__()
        return self

    async def __anext__(self) -> bytes:
        if self._error is not None:
            raise self._error
        if self._identity and not self._done:  # no decoder, no BOM to look for
            assert self._chunks is not None, "iterate with async for"
            while True:
                try:
                    chunk = await self._chunks.__anext__()
                except StopAsyncIteration:
                    self._done = True
                    raise
                if chunk:
                    return self.check(chunk)
        while True:
            for piece in self._pending:
                piece = self._strip_bom(piece)
                if piece:
                    return self.check(piece)
            if self._done:
                # A body cut inside a character was cut inside an event too (an
                # unfinished line), which the parser discards: not a UTF-8 error.
                raise StopAsyncIteration
            assert self._chunks is not None, "iterate with async for"
            try:
                chunk = await self._chunks.__anext__()
            except StopAsyncIteration:
                self._done = True
                self._pending = _through(self._inflaters, b"", final=True)
                continue
            self._pending = _through(self._inflaters, chunk, final=False)

    def _strip_bom(self, piece: bytes) -> bytes:
        if not self._at_start:
            return piece
        head = self._head + piece
        if len(head) < len(_BOM) and _BOM.startswith(head):
            self._head = head  # wait for more
            return b""
        self._at_start = False
        self._identity = not self._inflaters
        self._head = b""
        return head.removeprefix(_BOM)  # the SSE spec: one leading BOM is ignored

    def direct_reads(self) -> AsyncIterator[bytes] | None:
        """The raw stream's reads, while this body would hand them on as they come (no
        decoder, no BOM still to look for, no error waiting, not at the end), else
        ``None``. A reader may then await them itself and pass each to :meth:`check`:
        one coroutine fewer per read. It calls :meth:`finished` when they end."""
        if self._identity and not self._done and self._error is None:
            return self._chunks
        return None

    def finished(self) -> None:
        """The reads taken through :meth:`direct_reads` came to their end."""
        self._done = True

    def whole(self, chunk: bytes) -> bool:
        """Check ``chunk``, a decoded read of an SSE body that ends with a blank line
        (``\\n\\n``) and has no other line ending, the cheap way: ``True`` when it is
        ASCII and no UTF-8 sequence is left open (so valid as it is), and then the record
        bound starts over after it, as :meth:`check` would; ``False``, with nothing done,
        otherwise (then :meth:`check` it)."""
        if self._held or not self._plain_sse or not chunk.isascii():
            return False
        self._since_boundary = 0
        self._tail = b"\n\n"
        return True

    def check(self, chunk: bytes) -> bytes:
        """A decoded read, checked: ``chunk`` itself, or raises past the record bound.
        At invalid UTF-8 the valid part before it is returned first (a shorter object:
        its error is raised by the body's next read), or, when there is none, the error
        is raised at once."""
        # ASCII with no multi-byte sequence begun earlier is valid UTF-8 as it is.
        if self._utf8 is not None and (self._held or not chunk.isascii()):
            held = len(self._utf8.getstate()[0])  # bytes of a sequence begun earlier
            try:
                self._utf8.decode(chunk)
                self._held = bool(self._utf8.getstate()[0])
            except UnicodeDecodeError as exc:
                # What precedes the bad byte is handed on first (its events are not
                # lost); the error is raised at the next read.
                valid = max(0, exc.start - held)
                self._error = _invalid_utf8(exc)
                self._utf8 = None
                self._plain_sse = False
                if not valid:
                    raise self._error from exc
                chunk = chunk[:valid]
        record_end = self._record_end
        if record_end is None:
            return chunk
        if len(chunk) > 2 and chunk.endswith(record_end):
            # A read that ends with a record: nothing is counted past it, and no
            # boundary that the next read completes can begin before its last bytes,
            # the record's end itself (every boundary is at most 3 bytes long).
            self._since_boundary = 0
            self._tail = record_end
            return chunk
        window = self._tail + chunk
        if self._record == "sse":
            # "\n\n" ends nearly every event on the wire; the other three line-ending
            # combinations are only possible where a "\r" is.
            end = _end_of(window, b"\n\n")
            if b"\r" in window:
                for boundary in self._SSE_BOUNDARIES[1:]:
                    end = max(end, _end_of(window, boundary))
        else:
            end = _end_of(window, b"\n")
        if end >= 0:
            self._since_boundary = len(window) - end
        else:
            self._since_boundary += len(chunk)
        if self._since_boundary > self._bound:
            what = "an SSE event block" if self._record == "sse" else "a line"
            raise LimitExceededError(
                "max_event_bytes",
                self._max_record_bytes,
                f"{what} passed {self._bound} decoded bytes before it ended",
            )
        self._tail = window[-3:]
        return chunk

    async def aclose(self) -> None:
        chunks, self._chunks = self._chunks, None
        close = getattr(chunks, "aclose", None)
        try:
            if close is not None:
                await close()  # httpx's stream iterates with an async generator
        finally:
            await self._stream.aclose()


def _pass_through_type() -> type | None:
    """httpx's ``BoundAsyncStream`` (a private class), when it is there and still the
    pass-through it is in httpx 0.28: a stream that holds the transport's as
    ``_stream`` and iterates it unchanged. ``None`` otherwise."""
    bound = getattr(getattr(httpx, "_client", None), "BoundAsyncStream", None)
    if not isinstance(bound, type) or not issubclass(bound, httpx.AsyncByteStream):
        return None
    return bound


_PASS_THROUGH: Final = _pass_through_type()


def _reads(stream: httpx.AsyncByteStream) -> httpx.AsyncByteStream:
    """What to iterate to read ``stream``: the transport's own stream when ``stream`` is
    httpx's pass-through wrapper, so that each read crosses one async generator fewer.
    The wrapper is still the one closed (it records the response's ``elapsed``). Any
    other stream, or a wrapper without the transport's stream where it is expected
    (another httpx), is read as it is."""
    if _PASS_THROUGH is not None and type(stream) is _PASS_THROUGH:
        inner = getattr(stream, "_stream", None)
        if isinstance(inner, httpx.AsyncByteStream):
            return inner
    return stream


def _invalid_utf8(exc: UnicodeDecodeError) -> MalformedEventError:
    return MalformedEventError(
        f"the event stream is not valid UTF-8 ({exc.reason}, byte 0x{exc.object[exc.start]:02x})",
        code="invalid_utf8",
    )


def _end_of(window: bytes, boundary: bytes) -> int:
    index = window.rfind(boundary)
    return index + len(boundary) if index >= 0 else -1


def bound_body(
    response: httpx.Response, *, record: str | None = None, max_record_bytes: int = 0
) -> None:
    """Make ``response``'s body decode in bounded steps, with its records bounded.

    Call it before anything reads the body. Afterwards httpx sees an unencoded body
    (``Content-Encoding`` is removed) and, for an event stream, UTF-8 (SSE's only
    encoding, whatever ``charset`` says).

    Args:
        response: A streaming response whose body was not read yet.
        record: ``"sse"`` or ``"ndjson"`` for an event stream (records bounded by
            ``max_record_bytes``, UTF-8 checked, a leading BOM dropped); ``None`` for
            a body read only for an excerpt.
        max_record_bytes: The ``max_event_bytes`` records are checked against.

    Reading the body then raises, besides httpx's errors:
        LimitExceededError: A record passed its bound (``max_event_bytes``).
        MalformedEventError: The body cannot be decoded (``content_encoding``), or an
            event stream is not UTF-8 (``invalid_utf8``).
    """
    stream = response.stream
    if not isinstance(stream, httpx.AsyncByteStream) or isinstance(stream, BoundedBody):
        return
    error: RemoteProtocolError | None = None
    try:
        inflaters = _inflaters(response)
    except RemoteProtocolError as exc:
        inflaters, error = [], exc
    response.stream = BoundedBody(stream, inflaters, error, record, max_record_bytes)
    if "content-encoding" in response.headers:
        del response.headers["content-encoding"]
    if record is not None:
        response.encoding = "utf-8"


async def body_excerpt(
    response: httpx.Response, *, keep: int = 1024, read: int = 64 * 1024
) -> tuple[bytes, str]:
    """The start of a (non-event) body: ``keep`` decoded bytes of it, read boundedly.

    The rest is read and dropped up to ``read`` decoded bytes (a typical error body
    is read to its end, so the connection can be reused), never more.

    Returns:
        The bytes kept, and the same as one line of text (at most 300 characters),
        or a note when the body could not be read.
    """
    bound_body(response)
    kept = bytearray()
    size = 0
    note = ""
    stream = response.stream
    assert isinstance(stream, httpx.AsyncByteStream)
    try:
        # Our decoded stream itself, not httpx's aiter_bytes: leaving that early
        # would leave its inner async generator to the garbage collector.
        async for chunk in stream:
            if len(kept) < keep:
                kept += chunk[: keep - len(kept)]
            size += len(chunk)
            if size >= read:
                break
    except httpx.HTTPError:
        pass  # the status says enough; a body that fails to arrive is not the news
    except RemoteProtocolError as exc:
        note = f"(body not shown: {exc.message})"
    text = " ".join(bytes(kept).decode(response.encoding or "utf-8", errors="replace").split())
    if len(text) > _EXCERPT_CHARS:
        text = text[:_EXCERPT_CHARS] + "..."
    return bytes(kept), text or note


def run_deadline(seconds: float | None) -> float:
    """The absolute deadline (anyio's clock) of a run that may last ``seconds`` from
    now; ``math.inf`` for ``None``."""
    return math.inf if seconds is None else anyio.current_time() + seconds
