"""Provider streams as agent backends: the shared shape of every adapter.

Theory of operation
-------------------
Many users have no AG-UI server: they call an LLM provider directly. Each provider
adapter is two pieces, so that everything downstream (processor, machines, engine,
diagrams, guarantees) is shared:

- a pure :class:`StreamTranslator`: fed the provider's decoded stream chunks (one
  JSON object per SSE ``data:`` or NDJSON line, with the SSE ``event:`` name when the
  provider uses one), it answers with AG-UI events (TEXT_MESSAGE_*, TOOL_CALL_*,
  REASONING_*, RUN_FINISHED, RUN_ERROR). It never emits TOOL_CALL_END before the
  provider said the call is complete, so no tool runs on arguments that merely happen
  to parse mid-stream.
- a thin :class:`ProviderBackend` that maps the ``RunAgentInput`` the engine built
  (AG-UI messages, tool results included) to the provider's request, checks it
  against the provider's :class:`Capabilities` before any network call, POSTs it with
  httpx, and plays the response through the translator.

The backend wraps the translated events in RUN_STARTED (with the run's ids) and stamps
the run's ids on the translator's RUN_FINISHED (a translator does not know them and may
leave them empty). When the translator did not end the run itself, nothing more is
added: the processor fails the run the way AG-UI does for a stream that ends early.
Before it hands over the event that ends the run, the backend reads what is left of the
response (``[DONE]``, trailing usage chunks), boundedly, so that the connection goes
back to the pool and no generator of httpx's is left suspended; every generator it
opens is closed explicitly. Stop reasons travel in ``RUN_FINISHED.result`` as
``{"stopReason": ...}``; a provider error becomes RUN_ERROR with the provider's
message and status, or :class:`~toolrelay.errors.AgentRunError` for a non-2xx answer.

API keys come from a parameter or the provider's environment variable; they are sent
only in the request headers and never logged (``repr`` hides them).
"""

from __future__ import annotations

import itertools
import os
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol, cast

import anyio
import httpx
import msgspec
from httpx_sse import EventSource

from toolrelay.backends._agui_http import map_transport_errors
from toolrelay.backends._base import EventStream, ThreadKey
from toolrelay.errors import (
    AgentRunError,
    ConversationError,
    MalformedEventError,
    RemoteProtocolError,
)
from toolrelay.protocol import (
    AssistantMessage,
    Event,
    Message,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolMessage,
)

__all__ = (
    "Capabilities",
    "MessageStreams",
    "ProviderBackend",
    "StreamTranslator",
    "counter",
    "error_excerpt",
    "tool_results_after",
    "uuid_id",
)

_JSON = msgspec.json.Decoder()
_DRAIN_SECONDS = 0.25  # to read the rest of a response once the run has ended


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a provider can serve; a request it cannot is refused before any network call.

    Attributes:
        streaming: Streams responses.
        tools: Accepts tool definitions and asks for tool calls.
        tool_ids: Gives each tool call an id (when it does not, the adapter assigns one).
        parallel_calls: May ask for several tool calls in one response.
    """

    streaming: bool
    tools: bool
    tool_ids: bool
    parallel_calls: bool


class StreamTranslator(Protocol):
    """Provider stream chunks in, AG-UI events out. Pure: no I/O, no clock."""

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        """One decoded chunk (and its SSE event name, if any) -> AG-UI events."""
        ...

    def finish(self) -> list[Event]:
        """The provider's stream closed -> the events that close what is open.

        RUN_FINISHED only if the provider said the response is complete; otherwise the
        run is left unended (the processor fails it: the stream ended early).
        """
        ...


def error_excerpt(body: bytes, limit: int = 500) -> str:
    """The provider's error message from an error body (``error.message`` and the
    usual variants), or the start of the body."""
    try:
        data = _JSON.decode(body)
    except msgspec.DecodeError:
        return body[:limit].decode("utf-8", "replace").strip()
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, dict):
            message = error.get("message") or error.get("msg") or error.get("detail")
            if isinstance(message, str):
                return message[:limit]
        if isinstance(error, str):
            return error[:limit]
        message = data.get("message") or data.get("detail")
        if isinstance(message, str):
            return message[:limit]
    return body[:limit].decode("utf-8", "replace").strip()


class ProviderBackend(ABC):
    """An agent backend that talks to an LLM provider's streaming HTTP API.

    Args:
        model: The provider's model name.
        api_key: The key; defaults to the provider's environment variable.
        base_url: Where the API lives (OpenAI-compatible servers: vLLM, llama.cpp,
            Ollama's ``/v1``, OpenRouter, Groq, Together, Fireworks...).
        client: An ``httpx.AsyncClient`` to use (one pooled client is created
            otherwise and closed by :meth:`aclose`).
        transport: An httpx transport for the created client (tests).
        timeout: httpx timeout for the created client.
        headers: Extra headers on every request.
        options: Extra top-level request fields (``temperature``, ``max_tokens``...).
    """

    #: The provider's name as ``toolrelay run --provider`` spells it.
    name: ClassVar[str]
    #: The environment variables that may hold the API key, tried in order (empty: no
    #: key needed).
    api_key_env: ClassVar[tuple[str, ...]]
    #: The default base URL.
    default_base_url: ClassVar[str]
    capabilities: ClassVar[Capabilities]
    #: Whether the provider needs the agent's reasoning back in continuation runs: an
    #: :class:`~toolrelay.Engine` whose ``include_reasoning`` is left unset sends it
    #: then (Anthropic's signed thinking blocks must accompany tool results).
    takes_reasoning: ClassVar[bool] = False

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout: httpx.Timeout | float | None = None,
        headers: Mapping[str, str] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        self.model = model
        if api_key is None:
            api_key = next(
                (os.environ[name] for name in self.api_key_env if os.environ.get(name)), None
            )
        self._api_key = api_key
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(
            transport=transport,
            timeout=timeout if timeout is not None else httpx.Timeout(30.0, read=300.0),
        )
        self._headers = dict(headers or {})
        self.options: dict[str, Any] = dict(options or {})
        self._init_state()

    def _init_state(self) -> None:  # noqa: B027 - a hook, empty by design
        """Set up per-backend state a provider keeps across runs (none by default)."""

    def __repr__(self) -> str:
        key = "set" if self._api_key else "unset"
        return (
            f"{type(self).__name__}(model={self.model!r}, base_url={self.base_url!r}, "
            f"api_key={key})"
        )

    async def aclose(self) -> None:
        """Close the pooled client if this backend created it."""
        if self._own_client:
            await self._client.aclose()

    # -- what each provider supplies ------------------------------------------------

    @abstractmethod
    def endpoint(self) -> str:
        """The URL to POST to."""

    @abstractmethod
    def auth_headers(self) -> dict[str, str]:
        """The headers that carry the API key."""

    @abstractmethod
    def build_request(self, run_input: RunAgentInput) -> dict[str, Any]:
        """The provider's request body for a run (raises ConversationError when the
        conversation breaks a rule the provider enforces)."""

    @abstractmethod
    def new_translator(self) -> StreamTranslator:
        """A fresh translator for one response."""

    #: ``"sse"`` or ``"ndjson"``.
    stream_format: ClassVar[str] = "sse"

    # -- shared ----------------------------------------------------------------------

    def check_capabilities(self, run_input: RunAgentInput) -> None:
        """Refuse, before any network call, a request the provider cannot serve."""
        caps = self.capabilities
        if not caps.streaming:
            raise ConversationError(f"{self.name} cannot stream responses")
        if run_input.tools and not caps.tools:
            raise ConversationError(f"{self.name} does not support tools")
        if not caps.parallel_calls:
            for message in run_input.messages:
                if isinstance(message, AssistantMessage) and len(message.tool_calls or ()) > 1:
                    raise ConversationError(
                        f"{self.name} does not support several tool calls in one message"
                    )

    async def allocate_run(self, key: ThreadKey) -> str | None:
        return None

    @asynccontextmanager
    async def run(self, key: ThreadKey, run_input: RunAgentInput) -> AsyncIterator[EventStream]:
        self.check_capabilities(run_input)
        body = self.build_request(run_input)
        headers = {**self.auth_headers(), **self._headers}
        if self.stream_format == "sse":
            headers.setdefault("Accept", "text/event-stream")
        with map_transport_errors():
            async with self._client.stream(
                "POST", self.endpoint(), json=body, headers=headers
            ) as response:
                if response.status_code >= 400:
                    raw = await response.aread()
                    raise AgentRunError(
                        f"{self.name} error {response.status_code}: {error_excerpt(raw)}",
                        code=str(response.status_code),
                    )
                events = self._events(response, run_input)
                try:
                    yield events
                finally:
                    await events.aclose()

    async def _events(
        self, response: httpx.Response, run_input: RunAgentInput
    ) -> AsyncGenerator[Event, None]:
        yield RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)
        translator = self.new_translator()
        chunks = self._chunks(response)
        try:
            async for chunk, name in chunks:
                events = translator.feed(chunk, name)
                ended = any(isinstance(e, (RunFinishedEvent, RunErrorEvent)) for e in events)
                if ended:
                    # The consumer stops reading at the end of the run: read the rest now.
                    await _drain(chunks)
                for event in events:
                    yield _stamped(event, run_input)
                if ended:
                    return
            for event in translator.finish():
                yield _stamped(event, run_input)
        finally:
            await chunks.aclose()

    async def _chunks(
        self, response: httpx.Response
    ) -> AsyncGenerator[tuple[Any, str | None], None]:
        with map_transport_errors():
            if self.stream_format == "ndjson":
                lines = cast("AsyncGenerator[str, None]", response.aiter_lines())
                try:
                    async for line in lines:
                        if line.strip():
                            yield _decode_chunk(line), None
                finally:
                    await lines.aclose()
            else:
                sse_events = EventSource(response).aiter_sse()
                try:
                    async for sse in sse_events:
                        data = sse.data
                        if not data or data == "[DONE]":
                            continue
                        yield _decode_chunk(data), (sse.event if sse.event != "message" else None)
                finally:
                    await sse_events.aclose()


def _stamped(event: Event, run_input: RunAgentInput) -> Event:
    """``event``, with the run's ids if it is a RUN_FINISHED (translators do not know them)."""
    if isinstance(event, RunFinishedEvent) and (event.thread_id, event.run_id) != (
        run_input.thread_id,
        run_input.run_id,
    ):
        return msgspec.structs.replace(
            event, thread_id=run_input.thread_id, run_id=run_input.run_id
        )
    return event


async def _drain(chunks: AsyncIterator[object]) -> None:
    """Read and discard what is left of a response whose run has ended, for at most
    :data:`_DRAIN_SECONDS`; anything that goes wrong here is ignored (the run is over)."""
    with anyio.move_on_after(_DRAIN_SECONDS):
        try:
            async for _ in chunks:
                pass
        except RemoteProtocolError:
            pass


def _decode_chunk(data: str) -> Any:
    try:
        return _JSON.decode(data)
    except msgspec.DecodeError as exc:
        raise MalformedEventError(
            f"provider sent a chunk that is not JSON: {data[:120]!r}"
        ) from exc


def tool_results_after(messages: Sequence[Message], index: int) -> list[ToolMessage]:
    """The consecutive ``tool`` messages that follow ``messages[index]``."""
    out: list[ToolMessage] = []
    for message in messages[index + 1 :]:
        if not isinstance(message, ToolMessage):
            break
        out.append(message)
    return out


def counter(prefix: str) -> Callable[[], str]:
    """Ids ``<prefix>1``, ``<prefix>2``... (for providers that give calls no id)."""
    numbers = itertools.count(1)
    return lambda: f"{prefix}{next(numbers)}"


def uuid_id() -> str:
    """A random message id."""
    return uuid.uuid4().hex


class MessageStreams:
    """The open text and reasoning message of a translated stream, as AG-UI events.

    Shared by the translators of providers that stream text and reasoning as plain
    deltas (Google, Ollama, Cohere): a text delta closes open reasoning and opens a text
    message if none is open, and the other way round; a failure closes both and ends
    the run with RUN_ERROR. Subclasses set ``_message_ids`` and call
    :meth:`_init_streams`.
    """

    _message_ids: Callable[[], str]

    def _init_streams(self) -> None:
        self._text_id: str | None = None
        self._last_text_id: str | None = None
        self._reasoning_id: str | None = None
        self._ended = False

    def _text(self, delta: str) -> list[Event]:
        events = self._close_reasoning()
        if self._text_id is None:
            self._text_id = self._last_text_id = self._message_ids()
            events.append(TextMessageStartEvent(message_id=self._text_id, role="assistant"))
        events.append(TextMessageContentEvent(message_id=self._text_id, delta=delta))
        return events

    def _close_text(self) -> list[Event]:
        if self._text_id is None:
            return []
        message_id, self._text_id = self._text_id, None
        return [TextMessageEndEvent(message_id=message_id)]

    def _reasoning(self, delta: str) -> list[Event]:
        events = self._close_text()
        if self._reasoning_id is None:
            self._reasoning_id = self._message_ids()
            events.append(ReasoningStartEvent(message_id=self._reasoning_id))
            events.append(ReasoningMessageStartEvent(message_id=self._reasoning_id))
        events.append(ReasoningMessageContentEvent(message_id=self._reasoning_id, delta=delta))
        return events

    def _close_reasoning(self) -> list[Event]:
        if self._reasoning_id is None:
            return []
        message_id, self._reasoning_id = self._reasoning_id, None
        return [
            ReasoningMessageEndEvent(message_id=message_id),
            ReasoningEndEvent(message_id=message_id),
        ]

    def _close_messages(self) -> list[Event]:
        return [*self._close_reasoning(), *self._close_text()]

    def _fail(self, message: str, code: str) -> list[Event]:
        events = self._close_messages()
        self._ended = True
        events.append(RunErrorEvent(message=message, code=code))
        return events
