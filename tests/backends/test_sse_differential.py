"""Our SSE reader against httpx-sse, the reference: for any body (data, event, id, retry
and unknown fields, comments, multi-line data, CR, LF and CRLF endings) cut into any
chunks, both yield the same events with data, in order, with the same names, data and
last event ids; read through its iterator, and read as the AG-UI backend reads it (over
a bounded body, each read awaited directly and handed to ``take``, whose fast path
takes a read that is one whole event)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
import pytest
from httpx_sse import EventSource
from hypothesis import given, settings, strategies as st

from toolrelay import MalformedEventError
from toolrelay.backends._readers import SseReader
from toolrelay.backends._wire import bound_body

# Field values: any text but line endings (and no BOM, which the body reader drops
# before the SSE reader sees the bytes).
VALUE = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\r\n\ufeff"), max_size=12
)
LINE = st.one_of(
    st.builds(lambda v: f"data:{v}", VALUE),
    st.builds(lambda v: f"data: {v}", VALUE),
    st.just("data"),
    st.builds(lambda v: f"event: {v}", VALUE),
    st.builds(lambda v: f"id: {v}", VALUE),
    st.builds(lambda v: f"id: {v}\x00", VALUE),
    st.builds(lambda v: f"retry: {v}", st.sampled_from(["10", "x", ""])),
    st.builds(lambda v: f":{v}", VALUE),
    st.builds(lambda v: f"unknown: {v}", VALUE),
    st.just(""),
    st.just(""),
)
ENDING = st.sampled_from(["\n", "\r", "\r\n"])


@st.composite
def bodies(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    # Half the bodies end every line with LF, as nearly every server does: the reader
    # cuts those into whole event blocks, not line by line, and its chunks may then
    # begin or end anywhere in a block (a lone LF first, a blank line split in two).
    ending = ENDING if draw(st.booleans()) else st.just("\n")
    lines = draw(st.lists(st.tuples(LINE, ending), max_size=30))
    body = "".join(line + ending for line, ending in lines).encode()
    cuts = sorted(draw(st.lists(st.integers(0, len(body)), max_size=8)))
    return body, cuts


class Chunks(httpx.AsyncByteStream):
    def __init__(self, chunks: list[bytes]) -> None:
        self._chunks = chunks

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self._chunks:
            yield chunk


def split(body: bytes, cuts: list[int]) -> list[bytes]:
    edges = [0, *cuts, len(body)]
    return [body[a:b] for a, b in zip(edges, edges[1:], strict=False) if b > a]


async def ours(chunks: list[bytes]) -> list[tuple[str, str, str]]:
    return [
        (event.event, event.data.decode(), event.id)
        async for event in SseReader(Chunks(chunks))
        if event.data
    ]


async def ours_direct(chunks: list[bytes]) -> tuple[list[tuple[str, str, str]], int]:
    """The reader driven as ``RunStream.events`` drives it; also how many reads were
    taken directly."""
    response = httpx.Response(
        200, headers={"Content-Type": "text/event-stream"}, stream=Chunks(chunks)
    )
    bound_body(response, record="sse", max_record_bytes=1 << 20)
    assert isinstance(response.stream, httpx.AsyncByteStream)
    reader = SseReader(response.stream)
    events = []
    direct_reads = 0
    while True:
        if reader.direct is not None:
            try:
                chunk = await reader.direct.__anext__()
            except StopAsyncIteration:
                reader.finished()
                break
            batch = reader.take(chunk)
            direct_reads += 1
        else:
            batch = await reader.batch()
            if not batch:
                break
        events += batch
    return [(event.event, event.data.decode(), event.id) for event in events if event.data], (
        direct_reads
    )


async def reference(chunks: list[bytes]) -> list[tuple[str, str, str]]:
    response = httpx.Response(
        200, headers={"Content-Type": "text/event-stream"}, stream=Chunks(chunks)
    )
    return [
        (sse.event or "message", sse.data, sse.id)
        async for sse in EventSource(response).aiter_sse()
        if sse.data
    ]


@settings(max_examples=400, deadline=None)
@given(bodies())
def test_the_reader_yields_what_httpx_sse_yields(case: tuple[bytes, list[int]]) -> None:
    body, cuts = case
    chunks = split(body, cuts)

    async def compare() -> None:
        assert await ours(chunks) == await reference(chunks)

    anyio.run(compare)


def test_lf_blocks_continue_what_an_earlier_read_began() -> None:
    # The block reader takes a one-line "data" block as an event only at an event's
    # start: a data line, a name or an id read before it (in an earlier chunk) belongs
    # to the same event.
    body = b"data: a\n\nevent: x\ndata: b\n\nid: 9\ndata: c\ndata: d\n\n\n\ndata:e\n\n"
    cuts = [body.index(b"data: b"), body.index(b"data: d"), body.index(b"data:e") - 1]

    async def compare() -> None:
        expected = [
            ("message", "a", ""),
            ("x", "b", ""),
            ("message", "c\nd", "9"),
            ("message", "e", "9"),
        ]
        assert await reference(split(body, cuts)) == expected
        for every in ([], cuts, list(range(1, len(body)))):
            assert await ours(split(body, every)) == expected

    anyio.run(compare)


def test_the_generator_reaches_the_cases_that_matter() -> None:
    # The differential test is only as good as its bodies: a CR split from its LF by a
    # chunk edge, an id carried to later events, multi-line data.
    body = b"id: 7\r\ndata: a\r\ndata: b\r\n\r\ndata: c\r\n\r\n"
    chunks = split(body, [body.index(b"\n") - 0, body.index(b"\r\n\r\n") + 1])

    async def compare() -> None:
        expected = [("message", "a\nb", "7"), ("message", "c", "7")]
        assert await reference(chunks) == expected
        assert await ours(chunks) == expected

    anyio.run(compare)


@st.composite
def flushed_bodies(draw: st.DrawFn) -> tuple[bytes, list[int]]:
    # As a server flushing event by event sends them: a cut after most blank lines,
    # so that many reads are exactly one event, plus cuts anywhere.
    body, cuts = draw(bodies())
    ends = [i + 2 for i in range(len(body)) if body.startswith(b"\n\n", i)]
    kept = draw(st.lists(st.sampled_from(ends), unique=True)) if ends else []
    return body, sorted({*cuts, *kept})


@settings(max_examples=400, deadline=None)
@given(st.one_of(bodies(), flushed_bodies()))
def test_the_backends_direct_reads_yield_what_httpx_sse_yields(
    case: tuple[bytes, list[int]],
) -> None:
    body, cuts = case
    chunks = split(body, cuts)

    async def compare() -> None:
        events, _ = await ours_direct(chunks)
        assert events == await reference(chunks)

    anyio.run(compare)


def test_reads_of_one_event_each_are_taken_directly() -> None:
    # The fast path is really taken: after the first read (which looks for a BOM),
    # every read of a stream flushed event by event is awaited directly; an event
    # with a name, an id or two data lines still arrives whole.
    blocks = [b"data: one\n\n", b"data:two\n\n", b"event: x\ndata: 3\n\n", b"id: 4\ndata: a\n\n"]
    blocks += [b"data: b\ndata: c\n\n", b": ping\n\n", b"data: \xc3\xa9\n\n", b"data: \r\n\r\n"]

    async def compare() -> None:
        events, direct_reads = await ours_direct(blocks)
        assert events == await reference(blocks)
        assert events[:4] == [
            ("message", "one", ""),
            ("message", "two", ""),
            ("x", "3", ""),
            ("message", "a", "4"),
        ]
        assert direct_reads == len(blocks) - 1

    anyio.run(compare)


def test_invalid_utf8_in_a_read_taken_directly_ends_the_stream_after_its_valid_part() -> None:
    # The read's events before the bad byte are delivered (one whole event here, the
    # fast path's shape once cut), then the next read raises the typed error.
    chunks = [b"data: a\n\n", b"data: b\n\n", b"data: c\n\n\xff", b"data: d\n\n"]

    async def read() -> None:
        response = httpx.Response(
            200, headers={"Content-Type": "text/event-stream"}, stream=Chunks(chunks)
        )
        bound_body(response, record="sse", max_record_bytes=1 << 20)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        reader = SseReader(response.stream)
        seen = [event.data for event in await reader.batch()]
        direct = reader.direct
        assert direct is not None
        seen += [event.data for event in reader.take(await direct.__anext__())]
        seen += [event.data for event in reader.take(await direct.__anext__())]
        assert seen == [b"a", b"b", b"c"]
        assert reader.direct is None
        with pytest.raises(MalformedEventError) as caught:
            await reader.batch()
        assert caught.value.code == "invalid_utf8"

    anyio.run(read)
