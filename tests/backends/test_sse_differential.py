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

from toolrelay import LimitExceededError, MalformedEventError
from toolrelay.backends._readers import SseEvent, SseReader
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


async def ours_direct(chunks: list[bytes]) -> tuple[list[tuple[str, str, str]], int, int]:
    """The reader driven as ``RunStream.batches`` drives it; also how many reads were
    taken directly, and how many of those as one whole event (``one``)."""
    response = httpx.Response(
        200, headers={"Content-Type": "text/event-stream"}, stream=Chunks(chunks)
    )
    bound_body(response, record="sse", max_record_bytes=1 << 20)
    assert isinstance(response.stream, httpx.AsyncByteStream)
    reader = SseReader(response.stream)
    events: list[SseEvent] = []
    direct_reads = whole_events = 0
    while True:
        if reader.direct is not None:
            try:
                chunk = await reader.direct.__anext__()
            except StopAsyncIteration:
                reader.finished()
                break
            direct_reads += 1
            data = reader.one(chunk)
            if data is not None:
                whole_events += 1
                batch = [SseEvent("message", data, reader.event_id)]
            else:
                batch = reader.take(chunk)
        else:
            batch = await reader.batch()
            if not batch:
                break
        events += batch
    seen = [(event.event, event.data.decode(), event.id) for event in events if event.data]
    return seen, direct_reads, whole_events


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
        events, _, _ = await ours_direct(chunks)
        assert events == await reference(chunks)

    anyio.run(compare)


def test_reads_of_one_event_each_are_taken_directly() -> None:
    # The fast path is really taken: after the first read (which looks for a BOM),
    # every read of a stream flushed event by event is awaited directly, and a read of
    # one whole ASCII event of one data line is taken whole (``one``); an event with a
    # name, an id or two data lines, a comment, non-ASCII or CR endings goes the full
    # way, and still arrives whole.
    blocks = [b"data: one\n\n", b"data:two\n\n", b"event: x\ndata: 3\n\n", b"id: 4\ndata: a\n\n"]
    blocks += [b"data: b\ndata: c\n\n", b": ping\n\n", b"data: \xc3\xa9\n\n", b"data: \r\n\r\n"]
    blocks += [b"data: x\n\n", b"data:y\n"]

    async def compare() -> None:
        events, direct_reads, whole_events = await ours_direct(blocks)
        assert events == await reference(blocks)
        assert events[:4] == [
            ("message", "one", ""),
            ("message", "two", ""),
            ("x", "3", ""),
            ("message", "a", "4"),
        ]
        assert direct_reads == len(blocks) - 1
        # "data:two", then (after the id 4, carried on) "data: x"; not the unfinished
        # "data:y" (its blank line never came), which the body's end discards.
        assert whole_events == 2
        assert events[-1] == ("message", "x", "4")

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


def test_whole_checks_a_one_event_read_the_cheap_way_or_leaves_it_to_check() -> None:
    # ``one`` hands the body a read of one whole event through ``whole``: ASCII with no
    # UTF-8 sequence left open passes (and the record bound starts over after it);
    # anything else is left, untouched, to ``check``, which raises what it must.
    from toolrelay.backends import _wire

    def body(record: str = "sse") -> _wire.BoundedBody:
        response = httpx.Response(
            200, headers={"Content-Type": "text/event-stream"}, stream=Chunks([])
        )
        bound_body(response, record=record, max_record_bytes=16)
        assert isinstance(response.stream, _wire.BoundedBody)
        return response.stream

    sse = body()
    assert sse.whole(b"data: a\n\n")
    assert not sse.whole(b"data: \xc3\xa9\n\n")  # not ASCII: check() decodes it
    assert sse.check(b"data: \xc3") == b"data: \xc3"  # a character left open ...
    assert not sse.whole(b"data: b\n\n")  # ... so even ASCII is not valid on its own
    with pytest.raises(MalformedEventError) as caught:
        sse.check(b"data: b\n\n")
    assert caught.value.code == "invalid_utf8"
    assert not sse.whole(b"data: c\n\n")  # after the error, never again
    assert not body("ndjson").whole(b"{}\n\n")

    # The record bound: a whole read ends a record, so what follows counts afresh.
    bounded = body()
    limit = 2 * 16 + 64 * 1024
    bounded.check(b"x" * (limit - 10))
    assert bounded.whole(b"data: a\n\n")
    bounded.check(b"y" * (limit - 10))  # would pass the bound without the reset
    with pytest.raises(LimitExceededError):
        bounded.check(b"z" * 20)


async def _read_events(client: httpx.AsyncClient) -> tuple[list[bytes], httpx.Response]:
    async with client.stream("GET", "http://agent.test/") as response:
        bound_body(response, record="sse", max_record_bytes=1 << 20)
        assert isinstance(response.stream, httpx.AsyncByteStream)
        reader = SseReader(response.stream)
        seen: list[bytes] = []
        while batch := await reader.batch():
            seen += [event.data for event in batch]
    return seen, response


@pytest.mark.anyio
async def test_httpx_pass_through_stream_is_skipped_when_there_and_read_when_not(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # httpx wraps the transport's stream in BoundAsyncStream (private): the body reads
    # the transport's stream under it, one async generator fewer per read, and still
    # closes the wrapper (which records the response's elapsed time). Where that class
    # is not there (another httpx), the wrapper itself is read: the same events.
    from toolrelay.backends import _wire

    body = b"".join(b"data: %d\n\n" % i for i in range(5))
    transport = httpx.MockTransport(
        lambda _: httpx.Response(
            200, headers={"Content-Type": "text/event-stream"}, stream=Chunks([body[:9], body[9:]])
        )
    )
    async with httpx.AsyncClient(transport=transport) as client:
        async with client.stream("GET", "http://agent.test/") as response:
            wrapper = response.stream
            assert _wire._PASS_THROUGH is not None and type(wrapper) is _wire._PASS_THROUGH
            assert isinstance(wrapper, httpx.AsyncByteStream)
            assert _wire._reads(wrapper) is getattr(wrapper, "_stream", None)
        seen, response = await _read_events(client)
        assert seen == [b"%d" % i for i in range(5)]
        assert response.elapsed.total_seconds() >= 0  # set when the wrapper closed

        monkeypatch.setattr(_wire, "_PASS_THROUGH", None)
        async with client.stream("GET", "http://agent.test/") as response:
            stream = response.stream
            assert isinstance(stream, httpx.AsyncByteStream)
            assert _wire._reads(stream) is stream
        assert (await _read_events(client))[0] == seen

    # The guards: a wrapper without the transport's stream is read as it is, and an
    # httpx without the class gives none.
    monkeypatch.setattr(_wire, "_PASS_THROUGH", type(wrapper))
    hollow = object.__new__(type(wrapper))
    assert _wire._reads(hollow) is hollow
    assert _wire._pass_through_type() is type(wrapper)
    monkeypatch.delattr(httpx._client, "BoundAsyncStream")
    assert _wire._pass_through_type() is None
