"""OpenAI Chat Completions as an agent backend, streamed.

Theory of operation
-------------------
A pure translator, :class:`OpenAIChatTranslator`, plus a thin
:class:`OpenAIChatBackend`.

**Chat Completions** (``POST /chat/completions``, ``stream: true``; also what vLLM,
llama.cpp, Ollama's ``/v1``, OpenRouter, Groq, Together and Fireworks speak). Each SSE
``data:`` is a ``chat.completion.chunk`` whose ``choices[0].delta`` carries a piece of
the answer; ``data: [DONE]`` ends the body. :class:`OpenAIChatTranslator` maps::

    delta.reasoning_content / .reasoning   -> REASONING_MESSAGE_START / CONTENT
    delta.content / .refusal               -> TEXT_MESSAGE_START / CONTENT
    delta.tool_calls[i] (keyed by index):
        a new index                        -> TOOL_CALL_START (id and name of its first piece;
                                              ``call_<n>`` when the server sends no id)
        function.arguments pieces          -> TOOL_CALL_ARGS, one per non-empty piece
    finish_reason (any)                    -> REASONING/TEXT_MESSAGE_END, TOOL_CALL_END for
                                              every open call (none on "length" or
                                              "content_filter": the calls of a cut-off
                                              response stay open and are never run),
                                              then RUN_FINISHED
                                              {"stopReason": end_turn, tool_use,
                                              max_tokens, content_filter or other,
                                              "providerStopReason": finish_reason};
                                              tool_use for "stop" after calls
    usage (with the finish reason, in a    -> RUN_FINISHED.usage (input, output, total,
    chunk of its own after it, or under       cached input and reasoning tokens)
    x_groq)
    {"error": {...}}                       -> RUN_ERROR (message, code)

Chat Completions says that a tool call is complete only when the whole message is, so
TOOL_CALL_END waits for ``finish_reason``: arguments that happen to parse mid-stream are
never run. ``"tool_calls"`` is the usual reason with calls, but OpenAI itself says ``"stop"``
when ``tool_choice`` forced the call, and so do some servers; the processor runs tools
whenever calls are pending, so both work, and both report ``stopReason: tool_use``
(the response stopped for its tools). ``"length"`` and ``"content_filter"`` keep their
own ``stopReason`` even after calls: the response was cut off, and its calls with it.
The last one's arguments may stop mid-way (and still parse), and the batch may lack
calls the model meant to make, so no call of such a response is ended: the processor
abandons them all at RUN_FINISHED (``tool_call_not_ended``) and runs none, as for a
Responses API ``response.incomplete``; the turn ends with the run. A stream
that closes without a ``finish_reason`` ends its open calls and messages but not the
run: the processor fails the turn (the stream ended early) and runs nothing.

OpenAI sends a response's token usage only when the request asks for it
(``stream_options.include_usage``), in a chunk of its own after the one with the finish
reason: the request to OpenAI's own API asks for it (a compatible server is sent the field
only through ``options``, as some refuse it), and the backend reads that chunk while it
reads the rest of the response, before it hands over RUN_FINISHED.

Requests: see ``_messages.py`` (what every provider is sent of a conversation).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

from toolrelay._core import Limits
from toolrelay._errors import ConversationError
from toolrelay.backends.providers._messages import (
    check_tool_results,
    data_url,
    function_tools,
    sendable_messages,
    text_of,
    tool_arguments,
    unsupported_part,
)
from toolrelay.backends.providers._openai_base import (
    OpenAIBase,
    arguments_piece,
    cut_off,
    error_event,
    finished,
    token_usage,
)
from toolrelay.backends.providers._translator import hold_piece, nonempty
from toolrelay.protocol import (
    AssistantMessage,
    AudioPart,
    ContentPart,
    DataSource,
    DeveloperMessage,
    Event,
    ImagePart,
    Message,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunAgentInput,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)

__all__ = ("OpenAIChatBackend", "OpenAIChatTranslator")

#: Numbers the ids ``call_<n>`` of calls a server sent without one; shared by every
#: backend of the process, so that two runs of a conversation never share an id.
_CALL_NUMBERS = itertools.count()


# --- the translator ------------------------------------------------------------------------------


@dataclass(slots=True)
class _ChatCall:
    id: str
    name: str | None
    started: bool = False
    ended: bool = False
    #: Argument pieces received before the name (and so before TOOL_CALL_START).
    pending: list[str] | None = None
    #: Their UTF-8 size.
    pending_bytes: int = 0


class OpenAIChatTranslator:
    """Chat Completions stream chunks -> AG-UI events. Pure: no I/O, no clock.

    Only the first choice (``index`` 0) is read: toolrelay asks for one.

    Args:
        call_numbers: Numbers for the ids ``call_<n>`` of calls the server sent without
            an id (a fresh count from 0 by default).
        fallback_message_id: The message id when the chunks carry no ``id``.
        max_argument_bytes: The most argument bytes held for a call whose name has
            not come yet (a :class:`~toolrelay.backends.providers.BuffersArguments`;
            the backend sets the run's ``Limits.max_argument_bytes``).
    """

    def __init__(
        self,
        *,
        call_numbers: Iterator[int] | None = None,
        fallback_message_id: str = "message",
        max_argument_bytes: int = Limits().max_argument_bytes,
    ) -> None:
        self.max_argument_bytes = max_argument_bytes
        self._call_numbers = call_numbers if call_numbers is not None else itertools.count()
        self._fallback_message_id = fallback_message_id
        self._message_id: str | None = None
        self._text_open = False
        self._reasoning_open = False
        self._calls: dict[tuple[str, object], _ChatCall] = {}
        self._last_key: tuple[str, object] | None = None
        self._model: str | None = None
        self._usage: list[TokenUsage] | None = None
        self._ended = False

    @property
    def message_id(self) -> str:
        """The id of this response's assistant message (text and calls alike)."""
        if self._message_id is None:
            return self._fallback_message_id
        return self._message_id

    @property
    def trailing_usage(self) -> list[TokenUsage] | None:
        """The tokens the response used, as its last usage said, which may come after
        the run's end (a :class:`~toolrelay.backends.providers.TrailingUsage`)."""
        return self._usage

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        if not isinstance(chunk, dict):
            return []
        if self._ended:
            self._read_usage(chunk)  # OpenAI's usage chunk comes after the finish reason
            return []
        if "error" in chunk and chunk["error"] is not None:
            return self._fail(chunk["error"])
        if event_name == "error":
            return self._fail(chunk)
        if self._message_id is None:
            self._message_id = nonempty(chunk.get("id")) or self._fallback_message_id
        out: list[Event] = []
        choice = _first_choice(chunk.get("choices"))
        if choice is None:
            self._read_usage(chunk)
            return out  # a usage-only chunk, a keep-alive
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = nonempty(delta.get("reasoning_content")) or nonempty(delta.get("reasoning"))
            if reasoning is not None:
                self._reasoning(reasoning, out)
            for key in ("content", "refusal"):
                text = nonempty(delta.get(key))
                if text is not None:
                    self._text(text, out)
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                for piece in tool_calls:
                    if isinstance(piece, dict):
                        self._tool_call_piece(piece, out)
        finish_reason = choice.get("finish_reason")
        if finish_reason is not None:
            self._read_usage(chunk)
            self._close_messages(out)
            # A response cut off or filtered says none of its calls is complete: the
            # last may have stopped mid-arguments, and the batch is not what the model
            # meant to ask for. They stay open, so the processor runs none of them.
            if not cut_off(finish_reason):
                self._end_calls(out)
            made_calls = any(call.started for call in self._calls.values())
            out.append(finished(finish_reason, made_calls=made_calls, usage=self._usage))
            self._ended = True
        return out

    def _read_usage(self, chunk: dict[str, Any]) -> None:
        """Keep the usage a chunk carries, and the model it names: OpenAI sends usage in
        a chunk of its own after the finish reason (asked for with ``stream_options``),
        some servers with the finish reason, Groq's older API under ``x_groq``. Read only
        from chunks without choices and the one with the finish reason: a server that
        counts on every chunk gives its last count there, and a delta is not slowed."""
        self._model = nonempty(chunk.get("model")) or self._model
        usage = chunk.get("usage")
        if usage is None:
            extra = chunk.get("x_groq")
            usage = extra.get("usage") if isinstance(extra, dict) else None
        if usage is not None:
            self._usage = token_usage(usage, self._model) or self._usage

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        out: list[Event] = []
        self._close_messages(out)
        self._end_calls(out)
        self._ended = True
        return out

    # -- pieces -------------------------------------------------------------------------------

    def _fail(self, error: Any) -> list[Event]:
        self._ended = True
        return [error_event(error, "the provider reported an error")]

    def _end_reasoning(self, out: list[Event]) -> None:
        if self._reasoning_open:
            self._reasoning_open = False
            out.append(ReasoningMessageEndEvent(message_id=f"{self.message_id}-reasoning"))

    def _reasoning(self, delta: str, out: list[Event]) -> None:
        reasoning_id = f"{self.message_id}-reasoning"
        if not self._reasoning_open:
            self._reasoning_open = True
            out.append(ReasoningMessageStartEvent(message_id=reasoning_id))
        out.append(ReasoningMessageContentEvent(message_id=reasoning_id, delta=delta))

    def _text(self, delta: str, out: list[Event]) -> None:
        self._end_reasoning(out)
        if not self._text_open:
            self._text_open = True
            out.append(TextMessageStartEvent(message_id=self.message_id, role="assistant"))
        out.append(TextMessageContentEvent(message_id=self.message_id, delta=delta))

    def _key(self, piece: dict[str, Any]) -> tuple[str, object] | None:
        index = piece.get("index")
        if isinstance(index, int):
            return ("index", index)
        # Servers that leave out the index: by id, else a new call when a name comes,
        # else more arguments of the last call.
        call_id = nonempty(piece.get("id"))
        if call_id is not None:
            return ("id", call_id)
        function = piece.get("function")
        if isinstance(function, dict) and nonempty(function.get("name")) is not None:
            return ("new", len(self._calls))
        return self._last_key

    def _tool_call_piece(self, piece: dict[str, Any], out: list[Event]) -> None:
        key = self._key(piece)
        if key is None:
            return
        function = piece.get("function")
        function = function if isinstance(function, dict) else {}
        name = nonempty(function.get("name"))
        call_id = nonempty(piece.get("id"))
        call = self._calls.get(key)
        if call is None:
            call = _ChatCall(
                id=call_id or f"call_{next(self._call_numbers)}",
                name=name,
                pending=None,
            )
            self._calls[key] = call
        elif not call.started:
            call.name = call.name or name
            if call_id is not None:
                call.id = call_id
        self._last_key = key
        if call.ended:
            return
        arguments = arguments_piece(function.get("arguments"))
        if not call.started:
            if call.name is None:
                if arguments:
                    if call.pending is None:
                        call.pending = []
                    call.pending_bytes = hold_piece(
                        call.pending, call.pending_bytes, arguments, self.max_argument_bytes
                    )
                return
            self._end_reasoning(out)
            call.started = True
            out.append(
                ToolCallStartEvent(
                    tool_call_id=call.id,
                    tool_call_name=call.name,
                    parent_message_id=self.message_id,
                )
            )
            out.extend(ToolCallArgsEvent(tool_call_id=call.id, delta=d) for d in call.pending or ())
            call.pending = None
            call.pending_bytes = 0
        if arguments:
            out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=arguments))

    def _close_messages(self, out: list[Event]) -> None:
        """End the open reasoning, then the open text."""
        self._end_reasoning(out)
        if self._text_open:
            self._text_open = False
            out.append(TextMessageEndEvent(message_id=self.message_id))

    def _end_calls(self, out: list[Event]) -> None:
        """End every started call, in order."""
        for call in self._calls.values():
            # A call whose name never came cannot be run, nor sent back: it is dropped.
            if call.started and not call.ended:
                call.ended = True
                out.append(ToolCallEndEvent(tool_call_id=call.id))


def _first_choice(choices: Any) -> dict[str, Any] | None:
    if not isinstance(choices, list):
        return None
    for choice in choices:
        if isinstance(choice, dict) and choice.get("index", 0) == 0:
            return choice
    return None


# --- the backend ---------------------------------------------------------------------------------


class OpenAIChatBackend(OpenAIBase):
    """OpenAI Chat Completions, streamed (and every server that speaks it).

    Tool calls the server sends without an id get ``call_<n>``, unique in the process.
    See :class:`~toolrelay.backends.providers._base.ProviderBackend` for the arguments.
    """

    name: ClassVar[str] = "openai"

    def endpoint(self) -> str:
        return f"{self.base_url}/chat/completions"

    def new_translator(self) -> OpenAIChatTranslator:
        return OpenAIChatTranslator(
            call_numbers=_CALL_NUMBERS, fallback_message_id=f"msg_{uuid.uuid4().hex}"
        )

    def build_request(self, run_input: RunAgentInput) -> dict[str, Any]:
        """The ``/chat/completions`` body: model, options, messages, tools, ``stream``.

        Raises:
            ConversationError: Tool calls and results do not pair up, or a message has a
                content part Chat Completions cannot take.
        """
        messages = sendable_messages(run_input.messages)
        check_tool_results(messages, self.name)
        body: dict[str, Any] = {"model": self.model, **self.options}
        body["messages"] = [self._message(m) for m in messages]
        body["stream"] = True
        if not self._custom_host and "stream_options" not in body:
            # OpenAI streams the response's usage only when asked; servers that speak
            # its API may refuse the field, so they are sent it only through options.
            body["stream_options"] = {"include_usage": True}
        if run_input.tools:
            body["tools"] = function_tools(run_input.tools)
        return body

    def _message(self, message: Message) -> dict[str, Any]:
        match message:
            case SystemMessage(content=content):
                return {"role": "system", "content": content}
            case DeveloperMessage(content=content):
                return {"role": self.developer_role, "content": content}
            case UserMessage(content=content):
                return {"role": "user", "content": self._user_content(content)}
            case AssistantMessage(content=content, tool_calls=tool_calls):
                out: dict[str, Any] = {"role": "assistant", "content": content}
                if tool_calls:
                    out["tool_calls"] = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": tool_arguments(call),
                            },
                        }
                        for call in tool_calls
                    ]
                elif content is None:
                    out["content"] = ""
                return out
            case ToolMessage(content=content, tool_call_id=tool_call_id):
                return {
                    "role": "tool",
                    "tool_call_id": tool_call_id,
                    "content": text_of(content, self.name, "a tool message"),
                }
            case _:  # pragma: no cover - sendable_messages left the others out
                raise ConversationError(f"{self.name} cannot take a {type(message).__name__}")

    def _user_content(self, content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
        if isinstance(content, str):
            return content
        parts: list[dict[str, Any]] = []
        for part in content:
            match part:
                case TextPart(text=text):
                    parts.append({"type": "text", "text": text})
                case ImagePart(source=UrlSource(value=url)):
                    parts.append({"type": "image_url", "image_url": {"url": url}})
                case ImagePart(source=DataSource() as source):
                    parts.append({"type": "image_url", "image_url": {"url": data_url(source)}})
                case AudioPart(source=DataSource(value=data, mime_type=mime)) if (
                    mime in _AUDIO_FORMATS
                ):
                    parts.append(
                        {
                            "type": "input_audio",
                            "input_audio": {"data": data, "format": _AUDIO_FORMATS[mime]},
                        }
                    )
                case _:
                    raise unsupported_part(self.name, part, "a user message")
        return parts


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}
