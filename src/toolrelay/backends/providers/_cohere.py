"""Cohere's v2 chat API (``POST /v2/chat`` with ``stream: true``) as an agent backend.

Theory of operation
-------------------
Cohere streams typed events over SSE (the ``type`` in the JSON, also the SSE event
name). :class:`CohereTranslator` maps them:

=====================================  ===============================================
Cohere event                           AG-UI
=====================================  ===============================================
content-start / -delta / -end (text)   TEXT_MESSAGE_START / CONTENT / END
content-* (``thinking``)               REASONING_* (start, content, end)
tool-plan-delta                        TEXT_MESSAGE_* (the plan the model states before
                                       its calls; sent back as ``tool_plan``)
tool-call-start (id, name)             TOOL_CALL_START
tool-call-delta (argument pieces)      buffered per call ``index``
tool-call-end                          TOOL_CALL_ARGS (the whole arguments) and
                                       TOOL_CALL_END
message-end ``finish_reason``          RUN_FINISHED ``stopReason``: TOOL_CALL ->
                                       ``tool_use``, COMPLETE -> ``end_turn``,
                                       MAX_TOKENS -> ``max_tokens``, STOP_SEQUENCE ->
                                       ``stop_sequence``, ERROR_TOXIC ->
                                       ``content_filter``; ERROR, ERROR_LIMIT, TIMEOUT
                                       -> RUN_ERROR (message ``error``; code
                                       ``error_type`` as Cohere spells it, such as
                                       INVALID_TOOL_GENERATION, else the reason in
                                       lower case)
=====================================  ===============================================

Arguments are held until ``tool-call-end`` because Cohere may send ``"null"`` (or
nothing) for a tool without parameters, which must become ``{}``; pieces of several
calls may arrive interleaved, so they are kept per call ``index``. A call that never
sees its ``tool-call-end`` is never ended: the run's end abandons it. Arguments that
decode to the *string* of a JSON object (a double encoding) are passed on as that
object's JSON; anything else is passed on raw, for the tool registry to judge.

Requests (:class:`CohereBackend`): ``messages`` with roles ``system`` (also for
developer messages), ``user``, ``assistant`` (text as ``content``, or, with calls, as
``tool_plan`` next to ``tool_calls``) and ``tool`` (``tool_call_id`` and the result as
a ``document``). Cohere rejects a conversation where a result does not follow the
assistant message that asked for it, or where a call gets no result; this is checked
before any network call (:class:`ConversationError`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from toolrelay._core import Limits
from toolrelay._errors import ConversationError, InvalidEventError
from toolrelay.backends.providers._base import Capabilities, ProviderBackend
from toolrelay.backends.providers._messages import function_tools
from toolrelay.backends.providers._translator import (
    MessageStreams,
    StreamTranslator,
    convert_chunk,
    counter,
    hold_piece,
    uuid_id,
)
from toolrelay.protocol import (
    AssistantMessage,
    ContentPart,
    DataSource,
    DeveloperMessage,
    Event,
    ImagePart,
    Message,
    RunAgentInput,
    SystemMessage,
    TextPart,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)

__all__ = ("CohereBackend", "CohereTranslator")

_JSON_DECODER = msgspec.json.Decoder()

#: finish_reason -> stopReason, for the reasons that complete the run.
_STOP_REASONS: Mapping[str, str] = {
    "COMPLETE": "end_turn",
    "TOOL_CALL": "tool_use",
    "MAX_TOKENS": "max_tokens",
    "STOP_SEQUENCE": "stop_sequence",
    "ERROR_TOXIC": "content_filter",
}

#: finish_reasons that fail the run.
_ERROR_REASONS = frozenset({"ERROR", "ERROR_LIMIT", "TIMEOUT"})


# --- the stream's shapes (unknown fields are skipped) ----------------------------------


class _Envelope(msgspec.Struct, frozen=True):
    type: str | None = None
    index: int = 0
    id: str | None = None
    delta: Any = None
    message: str | None = None  # an error object sent instead of an event


class _Function(msgspec.Struct, frozen=True):
    name: str | None = None
    arguments: str | None = None


class _ToolCall(msgspec.Struct, frozen=True):
    id: str | None = None
    function: _Function | None = None


class _Content(msgspec.Struct, frozen=True):
    type: str | None = None
    text: str | None = None
    thinking: str | None = None


class _DeltaMessage(msgspec.Struct, frozen=True):
    content: _Content | None = None
    tool_plan: str | None = None
    # One call per event; tolerated as a one-element list too.
    tool_calls: _ToolCall | list[_ToolCall] | None = None

    @property
    def tool_call(self) -> _ToolCall | None:
        calls = self.tool_calls
        if isinstance(calls, list):
            return calls[0] if calls else None
        return calls


class _Delta(msgspec.Struct, frozen=True):
    message: _DeltaMessage | None = None


class _Tokens(msgspec.Struct, frozen=True):
    input_tokens: float | None = None
    output_tokens: float | None = None


class _Usage(msgspec.Struct, frozen=True):
    tokens: _Tokens | None = None
    billed_units: _Tokens | None = None


class _EndDelta(msgspec.Struct, frozen=True):
    finish_reason: str | None = None
    error: str | None = None
    # What kind of error, when ``error`` is set (``INVALID_TOOL_GENERATION``...): the
    # finish reason alone (``ERROR``) does not say.
    error_type: str | None = None
    usage: _Usage | None = None


@dataclass(slots=True)
class _OpenCall:
    id: str
    name: str
    pieces: list[str] = field(default_factory=list)
    held: int = 0  # UTF-8 bytes in pieces


class CohereTranslator(MessageStreams):
    """Cohere v2 stream events in, AG-UI events out (a :class:`StreamTranslator`).

    Pure: no I/O, no clock. One translator per response; a stream that closes before
    ``message-end`` leaves the run open (and its unfinished calls with it).

    Args:
        message_ids: Makes the ids of text and reasoning messages.
        call_ids: Makes ids for calls that come without one (Cohere gives ids).
    """

    def __init__(
        self,
        *,
        message_ids: Callable[[], str] = uuid_id,
        call_ids: Callable[[], str] | None = None,
        max_argument_bytes: int = Limits().max_argument_bytes,
    ) -> None:
        #: The most argument bytes held for a call until its ``tool-call-end`` (the
        #: backend sets the run's ``Limits.max_argument_bytes``).
        self.max_argument_bytes = max_argument_bytes
        self._init_streams(message_ids, call_ids)
        self._open_calls: dict[int, _OpenCall] = {}

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        """One stream event (its JSON, and the SSE event name) -> AG-UI events.

        Raises:
            MalformedEventError: The event is not a JSON object.
            InvalidEventError: A known event does not have Cohere's shape.
        """
        if self._ended:
            return []
        envelope = convert_chunk(
            chunk, _Envelope, event_name or "event", sent="Cohere sent an event"
        )
        kind = envelope.type or event_name
        match kind:
            case "content-start" | "content-delta":
                return self._content(_message(envelope, kind).content)
            case "content-end":
                return self._close_messages()
            case "tool-plan-delta":
                plan = _message(envelope, kind).tool_plan
                return self._text(plan) if plan else []
            case "tool-call-start":
                return self._start_call(envelope.index, _message(envelope, kind).tool_call)
            case "tool-call-delta":
                return self._call_delta(envelope.index, _message(envelope, kind).tool_call)
            case "tool-call-end":
                return self._end_call(envelope.index)
            case "message-end":
                return self._message_end(convert_chunk(envelope.delta or {}, _EndDelta, kind))
            case None if envelope.message:
                return self._fail(envelope.message, "cohere_error")
            case _:
                return []  # message-start, citations, debug and future events

    # -- content -------------------------------------------------------------------------

    def _content(self, content: _Content | None) -> list[Event]:
        if content is None:
            return []
        if content.thinking or content.type == "thinking":
            return self._reasoning(content.thinking) if content.thinking else []
        return self._text(content.text) if content.text else []

    # -- tool calls ----------------------------------------------------------------------

    def _start_call(self, index: int, call: _ToolCall | None) -> list[Event]:
        function = call.function if call is not None else None
        name = function.name if function is not None else None
        if not name:
            raise InvalidEventError("tool-call-start", "$.delta.message.tool_calls", "no name")
        events = self._close_messages()
        call_id = (call.id if call is not None else None) or self._call_ids()
        opened = _OpenCall(call_id, name)
        if function is not None and function.arguments:
            opened.held = hold_piece(
                opened.pieces, opened.held, function.arguments, self.max_argument_bytes
            )
        self._open_calls[index] = opened
        events.append(
            ToolCallStartEvent(
                tool_call_id=call_id, tool_call_name=name, parent_message_id=self._last_text_id
            )
        )
        return events

    def _call_delta(self, index: int, call: _ToolCall | None) -> list[Event]:
        opened = self._open_calls.get(index)
        piece = call.function.arguments if call is not None and call.function else None
        if opened is None:
            raise InvalidEventError("tool-call-delta", "$.index", f"no open tool call {index}")
        if piece:
            opened.held = hold_piece(opened.pieces, opened.held, piece, self.max_argument_bytes)
        return []

    def _end_call(self, index: int) -> list[Event]:
        opened = self._open_calls.pop(index, None)
        if opened is None:
            raise InvalidEventError("tool-call-end", "$.index", f"no open tool call {index}")
        return [
            ToolCallArgsEvent(
                tool_call_id=opened.id, delta=_arguments_json("".join(opened.pieces))
            ),
            ToolCallEndEvent(tool_call_id=opened.id),
        ]

    # -- ends ----------------------------------------------------------------------------

    def _message_end(self, delta: _EndDelta) -> list[Event]:
        reason = delta.finish_reason or "COMPLETE"
        if reason in _ERROR_REASONS or delta.error:
            message = delta.error or f"Cohere stopped: {reason}"
            return self._fail(message, delta.error_type or reason.lower())
        return self._end_run(_STOP_REASONS.get(reason, "other"), reason, _token_usage(delta.usage))


def _message(envelope: _Envelope, kind: str) -> _DeltaMessage:
    delta = convert_chunk(envelope.delta or {}, _Delta, kind)
    return delta.message or _DeltaMessage()


def _arguments_json(raw: str) -> str:
    """A finished call's arguments: ``{}`` for nothing or ``null`` (Cohere's way of
    saying "no parameters"), a double-encoded object unwrapped, else ``raw``."""
    if not raw.strip():
        return "{}"
    try:
        value = _JSON_DECODER.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return raw
    if value is None or value == "null" or value == "":
        return "{}"
    if isinstance(value, str):
        try:
            inner = _JSON_DECODER.decode(value)
        except (msgspec.DecodeError, RecursionError):
            return raw
        return value if isinstance(inner, dict) else raw
    return raw


def _token_usage(usage: _Usage | None) -> list[TokenUsage] | None:
    tokens = (usage.tokens or usage.billed_units) if usage is not None else None
    if tokens is None:
        return None
    input_tokens = int(tokens.input_tokens) if tokens.input_tokens is not None else None
    output_tokens = int(tokens.output_tokens) if tokens.output_tokens is not None else None
    total = (input_tokens or 0) + (output_tokens or 0)
    return [
        TokenUsage(
            provider="cohere",
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=total,
        )
    ]


# --- requests -------------------------------------------------------------------------


class CohereBackend(ProviderBackend):
    """Cohere's v2 chat API as an agent backend.

    The key comes from ``api_key``, else ``CO_API_KEY``, else ``COHERE_API_KEY``, and
    travels as a Bearer token. ``options`` are merged into the request body
    (``temperature``, ``max_tokens``, ``thinking``, ``safety_mode``...).
    """

    name: ClassVar[str] = "cohere"
    api_key_env: ClassVar[tuple[str, ...]] = ("CO_API_KEY", "COHERE_API_KEY")
    default_base_url: ClassVar[str] = "https://api.cohere.com"
    capabilities: ClassVar[Capabilities] = Capabilities(
        streaming=True, tools=True, tool_ids=True, parallel_calls=True
    )
    stream_format: ClassVar[str] = "sse"

    def _init_state(self) -> None:
        self._next_call = counter("call_")

    def endpoint(self) -> str:
        return f"{self.base_url}/v2/chat"

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_translator(self) -> StreamTranslator:
        return CohereTranslator(call_ids=self._next_call)

    def build_request(self, run_input: RunAgentInput) -> dict[str, Any]:
        """The ``/v2/chat`` request body for a run.

        Raises:
            ConversationError: A tool result does not follow the assistant message
                that asked for it, a call gets no result, or a message holds media
                Cohere cannot take.
        """
        messages: list[dict[str, Any]] = []
        for message in run_input.messages:
            entry = _message_entry(message)
            if entry is None:
                continue
            previous = messages[-1] if messages else None
            if (
                entry["role"] == "assistant"
                and previous is not None
                and previous["role"] == "assistant"
                and "tool_calls" not in previous
            ):
                messages[-1] = _merge_assistant(previous, entry)
            else:
                messages.append(entry)
        _check_results(messages)
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if run_input.tools:
            body["tools"] = function_tools(run_input.tools)
        body.update(self.options)
        return body


def _message_entry(message: Message) -> dict[str, Any] | None:
    match message:
        case SystemMessage(content=content) | DeveloperMessage(content=content):
            return {"role": "system", "content": content}
        case UserMessage(content=content):
            return {"role": "user", "content": _user_content(content)}
        case AssistantMessage(content=content, tool_calls=tool_calls):
            if tool_calls:
                entry: dict[str, Any] = {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments.strip() or "{}",
                            },
                        }
                        for call in tool_calls
                    ],
                }
                if content:
                    entry["tool_plan"] = content
                return entry
            return {"role": "assistant", "content": content} if content else None
        case ToolMessage(content=content, tool_call_id=tool_call_id):
            text = (
                content
                if isinstance(content, str)
                else "".join(part.text for part in content if isinstance(part, TextPart))
            )
            return {
                "role": "tool",
                "tool_call_id": tool_call_id,
                "content": [{"type": "document", "document": {"data": text}}],
            }
        case _:
            return None  # reasoning and activity records stay local


def _merge_assistant(text: dict[str, Any], following: dict[str, Any]) -> dict[str, Any]:
    """One assistant message from a text-only one and the one after it (Cohere wants
    the text before calls as their ``tool_plan``)."""
    if "tool_calls" in following:
        plan = "\n\n".join(p for p in (text["content"], following.get("tool_plan")) if p)
        return {**following, "tool_plan": plan}
    return {"role": "assistant", "content": f"{text['content']}\n\n{following['content']}"}


def _check_results(messages: list[dict[str, Any]]) -> None:
    """Each ``tool`` message answers a call of the assistant message just before the
    results, and every call gets exactly one result.

    Raises:
        ConversationError: A result without its call, a duplicate result, or a call
            left without a result.
    """
    waiting: dict[str, str] = {}  # call id -> name, of the last assistant's calls
    for message in [*messages, {"role": "end"}]:
        if message["role"] == "tool":
            call_id = message["tool_call_id"]
            if call_id not in waiting:
                raise ConversationError(
                    f"cohere: the tool result for call {call_id!r} does not follow the "
                    "assistant message that asked for it (or answers it twice)"
                )
            del waiting[call_id]
            continue
        if waiting:
            names = ", ".join(f"{name} ({call_id})" for call_id, name in waiting.items())
            raise ConversationError(
                f"cohere: the call(s) {names} got no tool result before the next message; "
                "Cohere needs one result per call"
            )
        if message["role"] == "assistant":
            waiting = {c["id"]: c["function"]["name"] for c in message.get("tool_calls", ())}


def _user_content(content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart) and isinstance(part.source, DataSource | UrlSource):
            source = part.source
            url = (
                f"data:{source.mime_type};base64,{source.value}"
                if isinstance(source, DataSource)
                else source.value
            )
            parts.append({"type": "image_url", "image_url": {"url": url}})
        else:
            raise ConversationError(
                "cohere: a user message can hold text and images (inline or by URL) only, "
                f"not this {type(part).__name__}"
            )
    return parts
