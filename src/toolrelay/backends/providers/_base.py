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
message and status, or :class:`~toolrelay.AgentRunError` for a non-2xx answer.

The run's ``context`` (what the client hands the agent: AG-UI ``Context`` entries)
has no field in any provider's API: it goes to the model as one system message after
the conversation's leading system and developer messages, written by
:func:`context_prompt` (or the backend's own ``context_prompt``; ``None`` leaves it
out).

API keys come from a parameter or the provider's environment variable; they are sent
only in the request headers and never logged (``repr`` hides them). The translator's
protocol and the pieces translators share are ``_translator``'s; the messages' are
``_messages``'s.
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import anyio
import httpx
import msgspec

from toolrelay._core import Limits
from toolrelay._errors import (
    AgentRunError,
    ContentTypeError,
    ConversationError,
    DeadlineError,
    LimitExceededError,
    MalformedEventError,
    RemoteProtocolError,
    RunAllocationError,
)
from toolrelay.backends._base import EventStream, ThreadKey, effective_limits
from toolrelay.backends._readers import LineReader, SseReader
from toolrelay.backends._retry import RetryPolicy, parse_retry_after, start_with_retries
from toolrelay.backends._transport import map_transport_errors
from toolrelay.backends._wire import ACCEPT_ENCODING, body_excerpt, bound_body, run_deadline
from toolrelay.backends.providers._translator import (
    BuffersArguments,
    StreamTranslator,
    TrailingUsage,
)
from toolrelay.protocol import (
    AssistantMessage,
    Context,
    DeveloperMessage,
    Event,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    SystemMessage,
    TokenUsage,
)
from toolrelay.protocol._codec import repair_surrogates

__all__ = (
    "CONTEXT_MESSAGE_ID",
    "CUT_OFF",
    "Capabilities",
    "ProviderBackend",
    "context_prompt",
    "error_excerpt",
    "with_context",
)

_JSON = msgspec.json.Decoder()
_DRAIN_SECONDS = 0.25  # to read the rest of a response once the run has ended
_ERROR_BODY_BYTES = 16 * 1024  # of an error body, kept to find the provider's message
_AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
_NOT_A_STREAM = frozenset({"text/html", "application/xhtml+xml"})

_T = TypeVar("_T")

#: The id of the system message that carries a run's context to the model.
CONTEXT_MESSAGE_ID = "toolrelay-context"


def context_prompt(context: Sequence[Context]) -> str:
    """The text that tells the model a run's ``context``: a line saying what follows,
    then each entry's description and value, in order, a blank line apart."""
    entries = (f"{entry.description}:\n{entry.value}" for entry in context)
    return "\n\n".join(("Context from the application:", *entries))


def with_context(
    run_input: RunAgentInput, prompt: Callable[[Sequence[Context]], str] | None
) -> RunAgentInput:
    """``run_input`` with its ``context`` as a system message (made by ``prompt``) after
    the conversation's leading system and developer messages; unchanged when there is
    no context, no ``prompt``, or ``prompt`` gives no text."""
    if not run_input.context or prompt is None:
        return run_input
    text = prompt(run_input.context)
    if not text:
        return run_input
    messages = run_input.messages
    at = 0
    while at < len(messages) and isinstance(messages[at], (SystemMessage, DeveloperMessage)):
        at += 1
    note = SystemMessage(id=CONTEXT_MESSAGE_ID, content=text)
    return msgspec.structs.replace(run_input, messages=[*messages[:at], note, *messages[at:]])


#: The stop reasons, in the words every provider backend uses (``RUN_FINISHED``'s
#: ``stopReason``), of a response cut off where the model did not mean to stop: its
#: output budget (``max_tokens``) or the context window
#: (``model_context_window_exceeded``) ran out, or a filter or a streaming safety
#: classifier stopped it (``content_filter``, ``refusal``). What it was saying last, a
#: call's arguments among them, may stop mid-way, and its batch may lack calls the
#: model meant to make, so a translator completes none of its calls.
CUT_OFF = frozenset(("max_tokens", "model_context_window_exceeded", "content_filter", "refusal"))


def _host(url: str) -> str:
    return (httpx.URL(url).host or "").lower()


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


def error_excerpt(body: bytes, limit: int = 500) -> str:
    """The provider's error message from an error body (``error.message`` and the
    usual variants), or the start of the body."""
    try:
        data = _JSON.decode(body)
    except (msgspec.DecodeError, ValueError, RecursionError):  # not JSON, not UTF-8, deep
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
        model: The provider's model name (checked when the backend is made: a string,
            not blank).
        api_key: The key; defaults to the provider's environment variable.
        base_url: Where the API lives (OpenAI-compatible servers: vLLM, llama.cpp,
            Ollama's ``/v1``, OpenRouter, Groq, Together, Fireworks...).
        client: An ``httpx.AsyncClient`` to use (one pooled client is created
            otherwise and closed by :meth:`aclose`).
        transport: An httpx transport for the created client (tests).
        timeout: httpx timeout for the created client.
        headers: Extra headers on every request.
        options: Extra top-level request fields (``temperature``, ``max_tokens``...).
        limits: The bounds used when no engine drives the run (an engine hands the
            backend its own, see :class:`~toolrelay.backends.RunSettings`):
            ``max_event_bytes`` per SSE event or NDJSON line, counted on decoded bytes;
            ``max_argument_bytes`` for argument pieces a translator buffers;
            ``run_seconds`` per run.
        retry: How a run that could not start (HTTP 429 or 503, a reset before the
            answer) is retried; :data:`~toolrelay.backends.NO_RETRY` turns it off.
        context_prompt: What makes the system message that gives the model a run's
            ``context`` (:func:`context_prompt` by default); ``None`` sends none.

    The key from the environment is sent only to the provider's own host: with a
    ``base_url`` on another host, give ``api_key`` explicitly (the environment's key
    is withheld, and :attr:`withheld_key_env` names its variable).
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
        limits: Limits | None = None,
        retry: RetryPolicy | None = None,
        context_prompt: Callable[[Sequence[Context]], str] | None = context_prompt,
    ) -> None:
        # Checked here, not at the first run: every request names the model (Gemini's
        # URL is made of it), and a missing one would fail there as an AttributeError.
        if not isinstance(model, str):
            raise TypeError(f"model must be a string, not {type(model).__name__}")
        if not model.strip():
            raise ValueError("model must name a model")
        self.model = model
        self.base_url = (base_url or self.default_base_url).rstrip("/")
        self._custom_host = _host(self.base_url) != _host(self.default_base_url)
        #: The environment variable whose key was not used because ``base_url`` is
        #: another host than the provider's (``None``: nothing withheld).
        self.withheld_key_env: str | None = None
        if api_key is None:
            found = next((name for name in self.api_key_env if os.environ.get(name)), None)
            if found is not None and self._custom_host:
                self.withheld_key_env = found  # never sent to a host that is not theirs
            elif found is not None:
                api_key = os.environ[found]
        self._api_key = api_key
        self.limits = limits if limits is not None else Limits()
        self.retry = retry if retry is not None else RetryPolicy()
        self._own_client = client is None
        self._client = client or httpx.AsyncClient(
            transport=transport,
            timeout=timeout if timeout is not None else httpx.Timeout(30.0, read=300.0),
        )
        self._headers = dict(headers or {})
        self.options: dict[str, Any] = dict(options or {})
        self.context_prompt = context_prompt
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
        """Start a run: check and build the request, POST it, translate the stream.

        Raises:
            ConversationError: The provider cannot serve the conversation (before any
                network call).
            RunAllocationError: No API key for the provider's own host (before any
                network call; the message names the environment variable).
            AgentRunError: The provider answered with an error status (after the
                retries of :attr:`retry` for 429 and 503).
            TransportError: The connection failed.

        While streaming, the errors of the wire: :class:`LimitExceededError` (an
        event, line or buffered arguments past the limits, counted on decoded bytes),
        :class:`MalformedEventError`, :class:`DeadlineError` (``run_seconds``).
        """
        run_input = with_context(run_input, self.context_prompt)
        self.check_capabilities(run_input)
        body = self.build_request(run_input)
        self.check_api_key()
        limits = effective_limits(self.limits)
        headers = {"Accept-Encoding": ACCEPT_ENCODING, **self.auth_headers(), **self._headers}
        if self.stream_format == "sse":
            headers.setdefault("Accept", "text/event-stream")

        async def start(stack: AsyncExitStack) -> httpx.Response:
            async with AsyncExitStack() as attempt:
                with map_transport_errors():
                    request = self._client.stream(
                        "POST", self.endpoint(), json=body, headers=headers
                    )
                    response = await attempt.enter_async_context(request)
                    if response.status_code >= 400:
                        retry_after = parse_retry_after(response.headers.get("retry-after"))
                        raw, _ = await body_excerpt(response, keep=_ERROR_BODY_BYTES)
                        raise AgentRunError(
                            f"{self.name} error {response.status_code}: {error_excerpt(raw)}",
                            code=str(response.status_code),
                            retry_after=retry_after,
                        )
                    await self._check_media_type(response)
                    bound_body(
                        response,
                        record=self.stream_format,
                        max_record_bytes=limits.max_event_bytes,
                    )
                stack.push_async_exit(attempt.pop_all())
                return response

        deadline = run_deadline(limits.run_seconds)
        async with AsyncExitStack() as stack:
            with anyio.CancelScope(deadline=deadline) as timer:
                response = await start_with_retries(self.retry, lambda: start(stack))
                events = self._events(response, run_input, limits)
                try:
                    yield events
                finally:
                    await events.aclose()
            if timer.cancelled_caught:
                assert limits.run_seconds is not None
                raise DeadlineError(limits.run_seconds)

    async def _check_media_type(self, response: httpx.Response) -> None:
        """Refuse a web page where a stream was expected (a login page, a proxy's error
        page, a wrong base URL), saying so; other media types are tolerated, since
        compatible servers label their streams loosely."""
        media_type = response.headers.get("content-type", "").partition(";")[0].strip()
        if media_type.lower() in _NOT_A_STREAM:
            _, excerpt = await body_excerpt(response)
            suffix = f"; its body begins: {excerpt}" if excerpt else ""
            raise ContentTypeError(
                f"{self.name}: the server answered with {media_type}, not a stream: is "
                f"{self.base_url!r} the API's base URL?{suffix}",
                code="content_type",
            )

    def check_api_key(self) -> None:
        """Refuse, before any network call, a run to the provider's own host with no
        key (a custom ``base_url``, say a local server, may need none). :meth:`run`
        calls it; call it earlier to fail fast.

        Raises:
            RunAllocationError: No key (``code="missing_api_key"``); the message names
                the environment variable to set.
        """
        if self._api_key or not self.api_key_env or self._custom_host:
            return
        if any(name.lower() in _AUTH_HEADERS for name in self._headers):
            return  # the caller authenticates with headers of their own
        names = " or ".join(self.api_key_env)
        raise RunAllocationError(
            f"{self.name}: no API key: set {names} in the environment, or pass api_key=",
            code="missing_api_key",
        )

    async def _events(
        self, response: httpx.Response, run_input: RunAgentInput, limits: Limits
    ) -> AsyncGenerator[Event, None]:
        yield RunStartedEvent(thread_id=run_input.thread_id, run_id=run_input.run_id)
        translator = self.new_translator()
        if isinstance(translator, BuffersArguments):
            translator.max_argument_bytes = limits.max_argument_bytes
        chunks = self._chunks(response, limits.max_event_bytes)
        try:
            async for chunk, name in chunks:
                try:
                    events = translator.feed(chunk, name)
                except RecursionError:
                    raise _too_deep() from None
                ended = any(isinstance(e, (RunFinishedEvent, RunErrorEvent)) for e in events)
                if ended:
                    # The consumer stops reading at the end of the run: read the rest now
                    # (a provider's usage may come after the end: the translator reads it).
                    reader = translator if isinstance(translator, TrailingUsage) else None
                    await _drain(chunks, reader)
                    if reader is not None:
                        events = _with_usage(events, reader.trailing_usage)
                for event in events:
                    yield _stamped(event, run_input)
                if ended:
                    return
            for event in translator.finish():
                yield _stamped(event, run_input)
        finally:
            await chunks.aclose()

    async def _chunks(
        self, response: httpx.Response, max_bytes: int
    ) -> AsyncGenerator[tuple[Any, str | None], None]:
        stream = response.stream
        assert isinstance(stream, httpx.AsyncByteStream)
        with map_transport_errors():
            if self.stream_format == "ndjson":
                async for line in LineReader(stream):
                    yield _decode_chunk(_sized(line, max_bytes, "an NDJSON line")), None
            else:
                async for sse in SseReader(stream):
                    data = sse.data
                    if not data or data == b"[DONE]":
                        continue
                    chunk = _decode_chunk(_sized(data, max_bytes, "an SSE event"))
                    yield chunk, (sse.event if sse.event != "message" else None)


def _sized(data: bytes, max_bytes: int, what: str) -> bytes:
    if len(data) > max_bytes:
        raise LimitExceededError("max_event_bytes", max_bytes, f"{what} of {len(data)} bytes")
    return data


def _too_deep() -> MalformedEventError:
    return MalformedEventError(
        "provider sent JSON nested too deeply to decode", code="nesting_too_deep"
    )


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


async def _drain(
    chunks: AsyncIterator[tuple[Any, str | None]], translator: StreamTranslator | None
) -> None:
    """Read what is left of a response whose run has ended, for at most
    :data:`_DRAIN_SECONDS`, feeding it to ``translator`` (which emits nothing more; it
    may read the response's usage) or discarding it; anything that goes wrong here is
    ignored (the run is over)."""
    with anyio.move_on_after(_DRAIN_SECONDS):
        try:
            async for chunk, name in chunks:
                if translator is not None:
                    translator.feed(chunk, name)
        except RemoteProtocolError:
            pass


def _with_usage(events: list[Event], usage: list[TokenUsage] | None) -> list[Event]:
    """``events``, their RUN_FINISHED carrying ``usage`` if it carries none."""
    if usage is None:
        return events
    return [
        msgspec.structs.replace(event, usage=usage)
        if isinstance(event, RunFinishedEvent) and event.usage is None
        else event
        for event in events
    ]


def _decode_chunk(data: bytes) -> Any:
    try:
        return _JSON.decode(data)
    except RecursionError:
        raise _too_deep() from None
    except (msgspec.DecodeError, UnicodeDecodeError) as exc:
        # A lone surrogate escape (a string cut inside an emoji) spoils one character.
        repaired = repair_surrogates(data) if isinstance(exc, msgspec.DecodeError) else None
        if repaired is not None:
            return _decode_chunk(repaired)
        raise MalformedEventError(
            f"provider sent a chunk that is not JSON: {data[:120]!r}"
        ) from exc
