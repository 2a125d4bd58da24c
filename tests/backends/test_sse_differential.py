"""Our SSE reader against httpx-sse, the reference: for any body (data, event, id, retry
and unknown fields, comments, multi-line data, CR, LF and CRLF endings) cut into any
chunks, both yield the same events with data, in order, with the same names, data and
last event ids."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import httpx
from httpx_sse import EventSource
from hypothesis import given, settings, strategies as st

from toolrelay.backends._readers import SseReader

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
