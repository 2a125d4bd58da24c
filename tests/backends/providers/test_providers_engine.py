"""What every provider backend owes the engine, checked once over a table of providers.

Each row of :data:`PROVIDERS` (a :class:`~_provider_table.Provider`, built in the
provider's ``_wire_<provider>.py``) says how to build the backend and how a server
speaks its wire format: a three-hop tool conversation (text and two calls, then a batch
in which one call fails, then the answer), an error in the middle of a stream, a non-2xx
answer with the provider's error body, and the published streams its translator is
tested on. The tests below run every row through a real uvicorn server on 127.0.0.1 or
through httpx.MockTransport (the real httpx and httpx-sse code runs), on asyncio and
trio, and check the same behaviour for each; the row's ``wire`` checks the bodies sent
back to the provider, which are its own. What is truly one provider's (its translator's
quirks, its request mapping) stays in its ``test_<provider>.py``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from hypothesis import given, settings, strategies as st

from toolrelay import AgentRunError, Engine, RunStatus, TextMessage, ToolCallBatch, Turn
from toolrelay.backends.providers import ProviderBackend, context_prompt
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import Context, Event, RunFinishedEvent, RunStartedEvent

# The shared helpers and the providers' wire modules sit next to this file (importlib
# mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
import _wire_anthropic as anthropic
import _wire_cohere as cohere
import _wire_google as google
import _wire_ollama as ollama
import _wire_openai as openai
from _gc_servers import (
    SSE,
    LoopbackServer,
    ScriptedProvider,
    collect,
    cut,
    mock_backend_transport,
    run_input,
    summarize as calls_of,
)
from _oa_servers import Outcome, collect as collect_closed, summarize
from _provider_table import QUESTION, Provider

PROVIDERS = [openai.CHAT, openai.RESPONSES, anthropic.ROW, google.ROW, cohere.ROW, ollama.ROW]
BY_ID = {p.id: p for p in PROVIDERS}

each_provider = pytest.mark.parametrize("provider", PROVIDERS, ids=[p.id for p in PROVIDERS])


@pytest.fixture
def server(provider: Provider) -> Iterator[LoopbackServer]:
    with LoopbackServer(ScriptedProvider(provider.frame, provider.media_type, [])) as running:
        yield running


def has_headers(sent: Any, expected: dict[str, str]) -> bool:
    """Whether the request's headers (any case) carry every expected one."""
    return all(sent.get(name.lower()) == value for name, value in expected.items())


def loopback_backend(provider: Provider, server: LoopbackServer, key: str) -> ProviderBackend:
    return provider.cls(provider.model, api_key=key, base_url=server.url + provider.base_path)


async def run_turn(
    provider: Provider, server: LoopbackServer, *, key: str = "loop-key", **options: Any
) -> Turn:
    backend = loopback_backend(provider, server, key)
    try:
        async with Engine(backend, tools=DEMO_TOOLS, **options) as engine:
            return await engine.run_turn("thread-1", QUESTION, history=provider.history)
    finally:
        await backend.aclose()


# --- the engine, end to end ----------------------------------------------------------------


@pytest.mark.anyio
@each_provider
async def test_engine_runs_a_multi_hop_conversation_over_loopback_http(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = list(provider.hops)
    turn = await run_turn(provider, server)

    assert turn.status is RunStatus.completed, turn.reason
    assert turn.statistics().runs == 3
    assert [
        m.text
        for m in turn.conversation.messages
        if isinstance(m, TextMessage) and m.role == "assistant"
    ] == provider.texts
    batches = [m for m in turn.conversation.messages if isinstance(m, ToolCallBatch)]
    got = [[(c.id, c.name, c.arguments, c.status) for c in b.calls] for b in batches]
    # An id the provider did not give is made up here: only its uniqueness is checked.
    assert [
        [(call_id if want[0] else None, *rest) for (call_id, *rest), want in zip(b, w, strict=True)]
        for b, w in zip(got, provider.calls, strict=True)
    ] == provider.calls
    calls = list(turn.conversation.tool_calls())
    assert len({c.id for c in calls}) == len(calls), "ids never repeat across the conversation"

    first, second, third = server.app.requests
    for request in (first, second, third):
        assert request.path == provider.path
        assert has_headers(request.headers, provider.auth("loop-key"))
        assert provider.tool_names(request.body) == list(DEMO_TOOLS.names)
    key, opening = provider.opening
    assert first.body[key] == opening
    provider.wire(first, second, third, turn)


#: What an application hands the agent with every run (AG-UI ``context``).
CONTEXT = [
    Context(description="The user's time zone", value="Europe/Paris"),
    Context(description="The open document", value="Q3 report\nDraft 2"),
]


@pytest.mark.anyio
@each_provider
async def test_the_runs_context_reaches_the_model_on_every_run(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = list(provider.hops)
    turn = await run_turn(provider, server, context=CONTEXT)

    assert turn.status is RunStatus.completed, turn.reason
    assert len(server.app.requests) == 3  # the first run and both continuations
    for request in server.app.requests:
        sent = json.dumps(request.body)
        assert sent.count(json.dumps(context_prompt(CONTEXT))[1:-1]) == 1, sent


@pytest.mark.anyio
@each_provider
async def test_a_backend_told_to_leave_the_context_out_sends_none_of_it(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = list(provider.hops)
    backend = provider.cls(
        provider.model,
        api_key="loop-key",
        base_url=server.url + provider.base_path,
        context_prompt=None,
    )
    try:
        async with Engine(backend, tools=DEMO_TOOLS, context=CONTEXT) as engine:
            turn = await engine.run_turn("thread-1", QUESTION, history=provider.history)
    finally:
        await backend.aclose()
    assert turn.status is RunStatus.completed, turn.reason
    for request in server.app.requests:
        assert "Europe/Paris" not in json.dumps(request.body)


@pytest.mark.anyio
@each_provider
async def test_engine_fails_the_turn_with_the_providers_error_mid_stream(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = [provider.error_stream]
    turn = await run_turn(provider, server)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert (turn.reason.message, turn.reason.code) == provider.error_reason
    (request,) = server.app.requests
    assert request.path == provider.path


@pytest.mark.anyio
@each_provider
async def test_engine_fails_the_turn_on_a_non_2xx_answer(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = [provider.failure]
    turn = await run_turn(provider, server)
    assert turn.status is RunStatus.failed
    assert turn.reason is not None
    assert turn.reason.code == str(provider.failure.status)
    assert turn.reason.message == provider.failure_message
    assert len(server.app.requests) == 1, "an answer that is not worth retrying is not retried"


@pytest.mark.anyio
@each_provider
async def test_a_non_2xx_answer_is_an_agent_run_error_with_the_providers_message(
    provider: Provider, server: LoopbackServer
) -> None:
    server.app.script = [provider.failure]
    backend = loopback_backend(provider, server, "sk-bad")
    try:
        with pytest.raises(AgentRunError) as caught:
            await collect(backend, run_input())
    finally:
        await backend.aclose()
    assert caught.value.code == str(provider.failure.status)
    assert caught.value.message == provider.failure_message


# --- where the request goes, with which key ---------------------------------------------------


@pytest.mark.anyio
@each_provider
async def test_the_request_goes_to_the_providers_endpoint_with_the_key_header(
    provider: Provider,
) -> None:
    requests: list[httpx.Request] = []
    backend = mock_backend(provider, [body_of(provider, provider.hops[-1])], requests)
    try:
        await collect(backend, run_input())
    finally:
        await backend.aclose()
    (request,) = requests
    assert str(request.url) == provider.default_url
    assert has_headers(request.headers, provider.auth("test-key"))
    if provider.media_type == SSE:
        assert request.headers["accept"] == "text/event-stream"
    if not provider.env:  # a provider that needs no key sends none unless given one
        keyless = mock_backend(provider, [body_of(provider, provider.hops[-1])], requests, key=None)
        try:
            await collect(keyless, run_input())
        finally:
            await keyless.aclose()
        assert "authorization" not in requests[-1].headers


@each_provider
def test_the_api_key_comes_from_the_environment_in_order_and_is_never_shown(
    provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    cls = provider.cls
    assert (cls.name, cls.api_key_env) == (provider.name, provider.env)
    for variable in cls.api_key_env:
        monkeypatch.delenv(variable, raising=False)
    assert cls("m").auth_headers() == provider.auth(None)
    # The variables are tried in order: set from the last to the first, each one wins.
    for variable in reversed(cls.api_key_env):
        monkeypatch.setenv(variable, f"key-from-{variable}")
        backend = cls("m")
        assert backend.auth_headers() == provider.auth(f"key-from-{variable}")
        assert f"key-from-{variable}" not in repr(backend)
    assert cls("m", api_key="explicit").auth_headers() == provider.auth("explicit")


@pytest.mark.anyio
async def test_unsigned_reasoning_is_not_sent_and_an_engine_may_refuse_reasoning() -> None:
    # Anthropic's own (it takes reasoning back): include_reasoning=False overrides the
    # backend's takes_reasoning, so the third request carries no thinking block.
    provider = BY_ID["anthropic"]
    with LoopbackServer(ScriptedProvider(provider.frame, provider.media_type, [])) as server:
        server.app.script = list(provider.hops)
        turn = await run_turn(provider, server, include_reasoning=False)
        third = server.app.requests[2]
    assert turn.status is RunStatus.completed, turn.reason
    blocks = [b["type"] for m in third.body["messages"] for b in m["content"]]
    assert "thinking" not in blocks


# --- the stream through the backend, however the bytes are cut -------------------------------


def mock_backend(
    provider: Provider,
    pieces: list[bytes],
    requests: list[httpx.Request] | None = None,
    *,
    key: str | None = "test-key",
) -> ProviderBackend:
    """The provider's backend at its default URL, answered by ``pieces`` over
    httpx.MockTransport (the real httpx and httpx-sse code runs)."""
    transport = mock_backend_transport(pieces, provider.media_type, requests)
    return provider.cls(provider.model, api_key=key, transport=transport)


def body_of(provider: Provider, chunks: list[Any]) -> bytes:
    return b"".join(provider.frame(chunk) for chunk in chunks)


Played = tuple[Outcome, tuple[Any, ...]]


def outcome(events: Sequence[Any]) -> Played:
    """The events' :class:`Outcome` (checked for AG-UI order on the way), and their calls
    with whether each names a parent message."""
    return summarize(events), calls_of(events).shape()


def translated(provider: Provider, backend: ProviderBackend, chunks: list[Any]) -> Played:
    """What a translator of ``backend`` (a fresh one: a backend numbers the calls it makes
    ids for across its runs) makes of ``chunks``, fed one by one."""
    translator = backend.new_translator()
    events: list[Event] = []
    for chunk in chunks:
        if chunk != openai.DONE:  # the end of a Chat Completions stream is the backend's
            events.extend(translator.feed(chunk, chunk.get("type") if provider.named else None))
    events.extend(translator.finish())
    return outcome(events)


def played(provider: Provider, pieces: list[bytes], backend_name: str) -> Played:
    async def main() -> Played:
        return outcome(await collect_closed(mock_backend(provider, pieces)))

    return anyio.run(main, backend=backend_name)


STREAMS = [
    pytest.param(provider, name, id=f"{provider.id}-{name}")
    for provider in PROVIDERS
    for name in provider.streams
]


@pytest.mark.anyio
@pytest.mark.parametrize(("provider", "name"), STREAMS)
async def test_the_backend_plays_each_published_stream_as_its_translator_does(
    provider: Provider, name: str
) -> None:
    chunks = provider.streams[name]
    fresh = mock_backend(provider, [])
    expected = translated(provider, fresh, chunks)
    await fresh.aclose()
    events = await collect_closed(mock_backend(provider, [body_of(provider, chunks)]))
    assert events[0] == RunStartedEvent(thread_id="t1", run_id="r1")
    got = outcome(events)
    assert got == expected
    if name in provider.expected:
        assert got[0] == provider.expected[name]
    finished = [e for e in events if isinstance(e, RunFinishedEvent)]
    assert all((e.thread_id, e.run_id) == ("t1", "r1") for e in finished)


@pytest.mark.parametrize("backend_name", ["asyncio", "trio"])
@each_provider
@settings(max_examples=80, deadline=None)
@given(data=st.data())
def test_any_rechunking_of_the_bytes_yields_the_same_calls_and_text(
    backend_name: str, provider: Provider, data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(provider.streams)), label="stream")
    body = body_of(provider, provider.streams[name])
    cuts = data.draw(st.lists(st.integers(1, len(body) - 1), max_size=40), label="cuts")
    whole = played(provider, [body], backend_name)
    assert played(provider, cut(body, cuts), backend_name) == whole


@each_provider
def test_one_byte_at_a_time_yields_the_same_calls_and_text(provider: Provider) -> None:
    for chunks in provider.streams.values():
        body = body_of(provider, chunks)
        bytewise = [body[i : i + 1] for i in range(len(body))]
        assert played(provider, bytewise, "trio") == played(provider, [body], "asyncio")
