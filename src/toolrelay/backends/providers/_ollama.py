"""Ollama's native chat API (``POST /api/chat``, NDJSON stream) as an agent backend.

Theory of operation
-------------------
Ollama streams one JSON object per line. ``message.content`` is a text delta,
``message.thinking`` a reasoning delta (thinking models with ``think: true``), and
``message.tool_calls`` a list of *complete* calls: ``function.name`` and
``function.arguments`` already parsed into an object. The calls often have no id, and
``function.index`` may be the same for every call of a response, so neither is used to
tell calls apart: :class:`OllamaTranslator` treats every entry as a new call and says
everything at once (the provider said the call is complete)::

    tool_calls[i]  ->  TOOL_CALL_START(id or call_<n>)  TOOL_CALL_ARGS(json(arguments))
                       TOOL_CALL_END

Arguments keep the JSON Ollama parsed (``{}`` when empty; a string is passed on as
the raw JSON it is). The last line has ``done: true``:

==================================  ==============================================
done_reason                         AG-UI
==================================  ==============================================
``stop`` after tool calls           RUN_FINISHED ``stopReason: tool_use``
``stop`` (and ``load``...)          RUN_FINISHED ``stopReason: end_turn``
``length``                          RUN_FINISHED ``stopReason: max_tokens``
==================================  ==============================================

A line ``{"error": "..."}`` (Ollama's way of failing mid-stream) becomes RUN_ERROR
with code ``ollama_error``.

Requests (:class:`OllamaBackend`): ``messages`` with roles ``system`` (also for
developer messages), ``user`` (text; inline images as base64 ``images``),
``assistant`` (``tool_calls`` with their arguments as objects) and ``tool`` (the
result as ``content``, the called function as ``tool_name``: Ollama has no call ids,
so a result names its function). Ollama enforces no turn order; a result must answer
a call of the conversation so that its function is known.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import msgspec

from toolrelay._errors import ConversationError
from toolrelay.backends.providers._base import Capabilities, ProviderBackend
from toolrelay.backends.providers._messages import (
    arguments_object,
    function_tools,
    text_of,
)
from toolrelay.backends.providers._translator import (
    MessageStreams,
    StreamTranslator,
    convert_chunk,
    counter,
    uuid_id,
)
from toolrelay.protocol import (
    AssistantMessage,
    ContentPart,
    DataSource,
    DeveloperMessage,
    Event,
    ImagePart,
    RunAgentInput,
    SystemMessage,
    TextPart,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)

__all__ = ("OllamaBackend", "OllamaTranslator")

_JSON_DECODER = msgspec.json.Decoder()

#: done_reason -> stopReason.
_STOP_REASONS: Mapping[str, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "load": "end_turn",
    "unload": "end_turn",
}


# --- the stream's shapes (unknown fields are skipped) ----------------------------------


class _Function(msgspec.Struct, frozen=True):
    name: str
    arguments: Any = None


class _ToolCall(msgspec.Struct, frozen=True):
    function: _Function
    id: str | None = None


class _Message(msgspec.Struct, frozen=True):
    content: str | None = None
    thinking: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Line(msgspec.Struct, frozen=True):
    model: str | None = None
    message: _Message | None = None
    done: bool = False
    done_reason: str | None = None
    error: str | None = None
    prompt_eval_count: int | None = None
    eval_count: int | None = None


class OllamaTranslator(MessageStreams):
    """Ollama ``/api/chat`` lines in, AG-UI events out (a :class:`StreamTranslator`).

    Pure: no I/O, no clock. One translator per response; a stream that closes before
    ``done`` leaves the run open.

    Args:
        message_ids: Makes the ids of text and reasoning messages.
        call_ids: Makes ids for calls without one (default ``call_1``, ``call_2``...).
    """

    def __init__(
        self,
        *,
        message_ids: Callable[[], str] = uuid_id,
        call_ids: Callable[[], str] | None = None,
    ) -> None:
        self._init_streams(message_ids, call_ids)
        self._used_ids: set[str] = set()

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        """One NDJSON line (decoded) -> AG-UI events.

        Raises:
            MalformedEventError: The line is not a JSON object.
            InvalidEventError: The line does not have Ollama's shape.
        """
        if self._ended:
            return []
        line = convert_chunk(chunk, _Line, "ChatResponse", sent="Ollama sent a line")
        if line.error is not None:
            return self._fail(line.error or "Ollama reported an error", "ollama_error")
        events: list[Event] = []
        message = line.message
        if message is not None:
            if message.thinking:
                events.extend(self._reasoning(message.thinking))
            if message.content:
                events.extend(self._text(message.content))
            for call in message.tool_calls or ():
                events.extend(self._call(call))
        if line.done:
            events.extend(self._finish(line))
        return events

    # -- content -------------------------------------------------------------------------

    def _call(self, call: _ToolCall) -> list[Event]:
        events = self._close_messages()
        call_id = call.id if call.id and call.id not in self._used_ids else self._call_ids()
        self._used_ids.add(call_id)
        events.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=call.function.name,
                parent_message_id=self._last_text_id,
            )
        )
        events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=_arguments_json(call)))
        events.append(ToolCallEndEvent(tool_call_id=call_id))
        return events

    # -- ends ----------------------------------------------------------------------------

    def _finish(self, line: _Line) -> list[Event]:
        provider_reason = line.done_reason or "stop"
        stop_reason = _STOP_REASONS.get(provider_reason, "other")
        if stop_reason == "end_turn" and self._used_ids:
            stop_reason = "tool_use"
        usage = None
        if line.prompt_eval_count is not None or line.eval_count is not None:
            total = (line.prompt_eval_count or 0) + (line.eval_count or 0)
            usage = [
                TokenUsage(
                    provider="ollama",
                    model=line.model,
                    input_tokens=line.prompt_eval_count,
                    output_tokens=line.eval_count,
                    total_tokens=total,
                )
            ]
        return self._end_run(stop_reason, provider_reason, usage)


def _arguments_json(call: _ToolCall) -> str:
    """The call's arguments as JSON text: the parsed object re-encoded, a string passed
    on as the raw JSON it is, ``{}`` when there is nothing."""
    arguments = call.function.arguments
    if isinstance(arguments, str):
        return arguments if arguments.strip() and arguments.strip() != "null" else "{}"
    if not arguments:
        return "{}"
    return msgspec.json.encode(arguments).decode()


# --- requests -------------------------------------------------------------------------


class OllamaBackend(ProviderBackend):
    """A model served by Ollama, through its native ``/api/chat``.

    No key is needed (``api_key`` is sent as a Bearer token when given, for Ollama
    behind an authenticating proxy). ``options`` are merged into the request body:
    Ollama's own ``options`` (``temperature``, ``num_ctx``...), ``keep_alive``,
    ``think``, ``format``.
    """

    name: ClassVar[str] = "ollama"
    api_key_env: ClassVar[tuple[str, ...]] = ()
    default_base_url: ClassVar[str] = "http://localhost:11434"
    capabilities: ClassVar[Capabilities] = Capabilities(
        streaming=True, tools=True, tool_ids=False, parallel_calls=True
    )
    stream_format: ClassVar[str] = "ndjson"

    #: Ids for calls without one, counted across this backend's responses so that the
    #: calls of one conversation never share an id.
    _next_call: Callable[[], str] | None = None

    def endpoint(self) -> str:
        return f"{self.base_url}/api/chat"

    def auth_headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def new_translator(self) -> StreamTranslator:
        if self._next_call is None:
            self._next_call = counter("call_")
        return OllamaTranslator(call_ids=self._next_call)

    def build_request(self, run_input: RunAgentInput) -> dict[str, Any]:
        """The ``/api/chat`` request body for a run.

        Raises:
            ConversationError: A tool result answers no call of the conversation, a
                call's arguments are not a JSON object, or a message holds media
                Ollama cannot take.
        """
        names: dict[str, str] = {}
        messages: list[dict[str, Any]] = []
        for message in run_input.messages:
            match message:
                case SystemMessage(content=content) | DeveloperMessage(content=content):
                    messages.append({"role": "system", "content": content})
                case UserMessage(content=content):
                    messages.append({"role": "user", **_user_content(content)})
                case AssistantMessage(content=content, tool_calls=tool_calls):
                    if not content and not tool_calls:
                        continue
                    entry: dict[str, Any] = {"role": "assistant", "content": content or ""}
                    if tool_calls:
                        entry["tool_calls"] = [
                            {
                                "type": "function",
                                "function": {
                                    "index": index,
                                    "name": call.function.name,
                                    "arguments": arguments_object(
                                        call.function.arguments, call.function.name, self.name
                                    ),
                                },
                            }
                            for index, call in enumerate(tool_calls)
                        ]
                        names.update((call.id, call.function.name) for call in tool_calls)
                    messages.append(entry)
                case ToolMessage():
                    name = names.get(message.tool_call_id)
                    if name is None:
                        raise ConversationError(
                            f"ollama: the tool result {message.id!r} answers call "
                            f"{message.tool_call_id!r}, which no assistant message asked for; "
                            "Ollama needs the function's name"
                        )
                    content = text_of(message.content, self.name, "a tool message")
                    messages.append({"role": "tool", "tool_name": name, "content": content})
                case _:
                    continue  # reasoning and activity records stay local
        body: dict[str, Any] = {"model": self.model, "messages": messages, "stream": True}
        if run_input.tools:
            body["tools"] = function_tools(run_input.tools)
        body.update(self.options)
        return body


def _user_content(content: str | list[ContentPart]) -> dict[str, Any]:
    if isinstance(content, str):
        return {"content": content}
    texts: list[str] = []
    images: list[str] = []
    for part in content:
        if isinstance(part, TextPart):
            texts.append(part.text)
        elif isinstance(part, ImagePart) and isinstance(part.source, DataSource):
            images.append(part.source.value)
        else:
            raise ConversationError(
                "ollama: a user message can hold text and inline (base64) images only, "
                f"not this {type(part).__name__}"
            )
    out: dict[str, Any] = {"content": "\n".join(texts)}
    if images:
        out["images"] = images
    return out
