"""OpenAI as an agent backend: Chat Completions and the Responses API, streamed.

Theory of operation
-------------------
Two APIs, each a pure translator plus a thin :class:`ProviderBackend`.

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
                                              every open call, then RUN_FINISHED
                                              {"stopReason": finish_reason}
    {"error": {...}}                       -> RUN_ERROR (message, code)

Chat Completions says that a tool call is complete only when the whole message is, so
TOOL_CALL_END waits for ``finish_reason``: arguments that happen to parse mid-stream are
never run. ``"tool_calls"`` is the usual reason with calls, but some servers say
``"stop"``; the processor runs tools whenever calls are pending, so both work. A stream
that closes without a ``finish_reason`` ends its open calls and messages but not the
run: the processor fails the turn (the stream ended early) and runs nothing.

**Responses API** (``POST /responses``, ``stream: true``). Each SSE event names its
``type``. :class:`OpenAIResponsesTranslator` maps::

    response.output_item.added (function_call)     -> TOOL_CALL_START (its call_id, name)
    response.function_call_arguments.delta          -> TOOL_CALL_ARGS
    response.function_call_arguments.done,
    response.output_item.done (function_call)      -> TOOL_CALL_END (the arguments of
                                                      ``done`` if no delta carried them)
    response.output_text.delta, .refusal.delta     -> TEXT_MESSAGE_START / CONTENT
    response.output_item.done (message)            -> TEXT_MESSAGE_END
    response.reasoning_summary_text.delta,
    response.reasoning_text.delta                  -> REASONING_MESSAGE_START / CONTENT
    response.completed                             -> RUN_FINISHED {"stopReason": "tool_calls"
                                                      or "stop"}
    response.incomplete                            -> RUN_FINISHED {"stopReason":
                                                      incomplete_details.reason}; a call
                                                      cut off before its ``done`` stays
                                                      open and is never run
    response.failed, error                         -> RUN_ERROR (message, code)

Requests. Both backends validate the conversation before any network call: every
``toolCalls`` entry of an assistant message needs a ``tool`` message right after it
(the results of a batch follow their calls), and every ``tool`` message answers a call
of the assistant message just before it; otherwise :class:`ConversationError`. Empty
arguments are sent as ``"{}"``; a failed tool result is sent as the ``tool`` message's
content, which already is ``{"error": ...}``, so the model sees the error and can
recover. ``reasoning`` and ``activity`` messages are not sent (neither API takes them
back in this form).
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import msgspec

from toolrelay.backends.providers._base import (
    Capabilities,
    ProviderBackend,
    hold_piece,
    tool_results_after,
)
from toolrelay.core import Limits
from toolrelay.errors import ConversationError
from toolrelay.protocol import (
    ActivityMessage,
    AssistantMessage,
    AudioPart,
    ContentPart,
    DataSource,
    DeveloperMessage,
    Event,
    FileSource,
    ImagePart,
    Message,
    ReasoningMessage,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    SystemMessage,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    Tool,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)

__all__ = (
    "OpenAIChatBackend",
    "OpenAIChatTranslator",
    "OpenAIResponsesBackend",
    "OpenAIResponsesTranslator",
)

_JSON_ENCODER = msgspec.json.Encoder()

#: Numbers the ids ``call_<n>`` of calls a server sent without one; shared by every
#: backend of the process, so that two runs of a conversation never share an id.
_CALL_NUMBERS = itertools.count()


def _finished(stop_reason: Any) -> RunFinishedEvent:
    # The backend stamps the run's ids (the translator does not know them).
    return RunFinishedEvent(thread_id="", run_id="", result={"stopReason": stop_reason})


def _error_event(error: Any, default: str) -> RunErrorEvent:
    """RUN_ERROR from an error object (``{"message", "code", "type"}``) or a string."""
    if isinstance(error, dict):
        message = error.get("message")
        code = error.get("code")
        if code is None:
            code = error.get("type")
        return RunErrorEvent(
            message=message if isinstance(message, str) and message else default,
            code=None if code is None else str(code),
        )
    if isinstance(error, str) and error:
        return RunErrorEvent(message=error)
    return RunErrorEvent(message=default)


def _str(value: Any) -> str | None:
    """``value`` if it is a non-empty string."""
    return value if isinstance(value, str) and value else None


def _arguments_piece(value: Any) -> str:
    """An arguments piece as text: servers that send an object get it JSON-encoded."""
    if isinstance(value, str):
        return value
    if value is None:
        return ""
    return _JSON_ENCODER.encode(value).decode()


# --- Chat Completions: the translator ------------------------------------------------------


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
        self._ended = False

    @property
    def message_id(self) -> str:
        """The id of this response's assistant message (text and calls alike)."""
        if self._message_id is None:
            return self._fallback_message_id
        return self._message_id

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        if self._ended or not isinstance(chunk, dict):
            return []
        if "error" in chunk and chunk["error"] is not None:
            return self._fail(chunk["error"])
        if event_name == "error":
            return self._fail(chunk)
        if self._message_id is None:
            self._message_id = _str(chunk.get("id")) or self._fallback_message_id
        out: list[Event] = []
        choice = _first_choice(chunk.get("choices"))
        if choice is None:
            return out  # a usage-only chunk, a keep-alive
        delta = choice.get("delta")
        if isinstance(delta, dict):
            reasoning = _str(delta.get("reasoning_content")) or _str(delta.get("reasoning"))
            if reasoning is not None:
                self._reasoning(reasoning, out)
            for key in ("content", "refusal"):
                text = _str(delta.get(key))
                if text is not None:
                    self._text(text, out)
            tool_calls = delta.get("tool_calls")
            if isinstance(tool_calls, list):
                for piece in tool_calls:
                    if isinstance(piece, dict):
                        self._tool_call_piece(piece, out)
        finish_reason = choice.get("finish_reason")
        if finish_reason is not None:
            self._close(out)
            out.append(_finished(finish_reason))
            self._ended = True
        return out

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        out: list[Event] = []
        self._close(out)
        self._ended = True
        return out

    # -- pieces -------------------------------------------------------------------------------

    def _fail(self, error: Any) -> list[Event]:
        self._ended = True
        return [_error_event(error, "the provider reported an error")]

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
        call_id = _str(piece.get("id"))
        if call_id is not None:
            return ("id", call_id)
        function = piece.get("function")
        if isinstance(function, dict) and _str(function.get("name")) is not None:
            return ("new", len(self._calls))
        return self._last_key

    def _tool_call_piece(self, piece: dict[str, Any], out: list[Event]) -> None:
        key = self._key(piece)
        if key is None:
            return
        function = piece.get("function")
        function = function if isinstance(function, dict) else {}
        name = _str(function.get("name"))
        call_id = _str(piece.get("id"))
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
        arguments = _arguments_piece(function.get("arguments"))
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

    def _close(self, out: list[Event]) -> None:
        """End what is open: reasoning, text, then every started call (in order)."""
        self._end_reasoning(out)
        if self._text_open:
            self._text_open = False
            out.append(TextMessageEndEvent(message_id=self.message_id))
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


# --- the Responses API: the translator ------------------------------------------------------


@dataclass(slots=True)
class _ResponsesCall:
    id: str
    streamed: bool = False
    ended: bool = False


class OpenAIResponsesTranslator:
    """Responses API stream events -> AG-UI events. Pure: no I/O, no clock.

    Args:
        fallback_message_id: The parent message id of calls when the stream names no
            response (``response.created``) and no text came first.
    """

    def __init__(self, *, fallback_message_id: str = "message") -> None:
        self._fallback_message_id = fallback_message_id
        self._response_id: str | None = None
        self._last_text_id: str | None = None
        # Insertion-ordered sets: what is open, closed in the order it was opened.
        self._open_texts: dict[str, None] = {}
        self._open_reasoning: dict[str, None] = {}
        self._calls: dict[str, _ResponsesCall] = {}  # by item id
        self._items_by_index: dict[int, str] = {}  # output_index -> item id
        self._ended = False

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        if self._ended or not isinstance(chunk, dict):
            return []
        kind = chunk.get("type")
        if not isinstance(kind, str):
            kind = event_name
        out: list[Event] = []
        match kind:
            case "response.created" | "response.in_progress":
                response = chunk.get("response")
                if isinstance(response, dict) and self._response_id is None:
                    self._response_id = _str(response.get("id"))
            case "response.output_item.added":
                self._item_added(chunk, out)
            case "response.output_item.done":
                self._item_done(chunk, out)
            case "response.output_text.delta" | "response.refusal.delta":
                delta = _str(chunk.get("delta"))
                item_id = self._item_id(chunk)
                if delta is not None and item_id is not None:
                    self._text(item_id, delta, out)
            case "response.function_call_arguments.delta":
                call = self._call(chunk)
                delta = _arguments_piece(chunk.get("delta"))
                if call is not None and not call.ended and delta:
                    call.streamed = True
                    out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=delta))
            case "response.function_call_arguments.done":
                call = self._call(chunk)
                if call is not None:
                    self._end_call(call, chunk.get("arguments"), out)
            case "response.reasoning_summary_text.delta" | "response.reasoning_text.delta":
                delta = _str(chunk.get("delta"))
                item_id = self._item_id(chunk)
                if delta is not None and item_id is not None:
                    self._reasoning(item_id, delta, out)
            case "response.completed":
                self._close_messages(out)
                for call in self._calls.values():
                    # "completed": every item is complete, whether or not its done came.
                    self._end_call(call, None, out)
                out.append(_finished("tool_calls" if self._calls else "stop"))
                self._ended = True
            case "response.incomplete":
                self._close_messages(out)
                response = chunk.get("response")
                details = response.get("incomplete_details") if isinstance(response, dict) else None
                reason = details.get("reason") if isinstance(details, dict) else None
                out.append(_finished(reason or "incomplete"))
                self._ended = True
            case "response.failed":
                response = chunk.get("response")
                error = response.get("error") if isinstance(response, dict) else None
                self._ended = True
                out.append(_error_event(error, "the response failed"))
            case "error":
                error = chunk.get("error")
                self._ended = True
                out.append(
                    _error_event(error if isinstance(error, dict) else chunk, "provider error")
                )
            case _:
                pass  # created/in_progress parts, annotations, usage, and what comes next
        return out

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        out: list[Event] = []
        self._close_messages(out)  # calls without their done stay open: never run
        self._ended = True
        return out

    # -- pieces -------------------------------------------------------------------------------

    def _item_id(self, chunk: dict[str, Any]) -> str | None:
        item_id = _str(chunk.get("item_id"))
        if item_id is None:
            index = chunk.get("output_index")
            if isinstance(index, int):
                item_id = self._items_by_index.get(index)
        return item_id

    def _call(self, chunk: dict[str, Any]) -> _ResponsesCall | None:
        item_id = self._item_id(chunk)
        return None if item_id is None else self._calls.get(item_id)

    def _parent_id(self) -> str:
        return self._last_text_id or self._response_id or self._fallback_message_id

    def _start_call(self, item: dict[str, Any], index: Any, out: list[Event]) -> _ResponsesCall:
        item_id = _str(item.get("id")) or _str(item.get("call_id")) or f"item-{len(self._calls)}"
        call_id = _str(item.get("call_id")) or item_id
        call = _ResponsesCall(id=call_id)
        self._calls[item_id] = call
        if isinstance(index, int):
            self._items_by_index[index] = item_id
        out.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=_str(item.get("name")) or "",
                parent_message_id=self._parent_id(),
            )
        )
        arguments = _arguments_piece(item.get("arguments"))
        if arguments:
            call.streamed = True
            out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments))
        return call

    def _item_added(self, chunk: dict[str, Any], out: list[Event]) -> None:
        item = chunk.get("item")
        if not isinstance(item, dict):
            return
        index = chunk.get("output_index")
        item_id = _str(item.get("id"))
        if isinstance(index, int) and item_id is not None:
            self._items_by_index[index] = item_id
        if item.get("type") == "function_call":
            self._start_call(item, index, out)

    def _item_done(self, chunk: dict[str, Any], out: list[Event]) -> None:
        item = chunk.get("item")
        if not isinstance(item, dict):
            return
        item_id = _str(item.get("id"))
        match item.get("type"):
            case "function_call":
                call = self._calls.get(item_id or _str(item.get("call_id")) or "")
                if call is None:  # no output_item.added came: the whole call at once
                    call = self._start_call(item, chunk.get("output_index"), out)
                self._end_call(call, item.get("arguments"), out)
            case "message" if item_id in self._open_texts:
                del self._open_texts[item_id]
                out.append(TextMessageEndEvent(message_id=item_id))
            case "reasoning" if item_id in self._open_reasoning:
                del self._open_reasoning[item_id]
                out.append(ReasoningMessageEndEvent(message_id=item_id))
            case _:
                pass

    def _end_call(self, call: _ResponsesCall, arguments: Any, out: list[Event]) -> None:
        if call.ended:
            return
        call.ended = True
        if not call.streamed:
            # Servers that skip the deltas send the whole arguments with done.
            whole = _arguments_piece(arguments)
            if whole:
                call.streamed = True
                out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=whole))
        out.append(ToolCallEndEvent(tool_call_id=call.id))

    def _text(self, item_id: str, delta: str, out: list[Event]) -> None:
        if item_id not in self._open_texts:
            self._open_texts[item_id] = None
            self._last_text_id = item_id
            out.append(TextMessageStartEvent(message_id=item_id, role="assistant"))
        out.append(TextMessageContentEvent(message_id=item_id, delta=delta))

    def _reasoning(self, item_id: str, delta: str, out: list[Event]) -> None:
        if item_id not in self._open_reasoning:
            self._open_reasoning[item_id] = None
            out.append(ReasoningMessageStartEvent(message_id=item_id))
        out.append(ReasoningMessageContentEvent(message_id=item_id, delta=delta))

    def _close_messages(self, out: list[Event]) -> None:
        out.extend(ReasoningMessageEndEvent(message_id=i) for i in self._open_reasoning)
        self._open_reasoning.clear()
        out.extend(TextMessageEndEvent(message_id=i) for i in self._open_texts)
        self._open_texts.clear()


# --- requests: shared -----------------------------------------------------------------------


_UNSENT = (ActivityMessage, ReasoningMessage)


def sendable_messages(messages: Sequence[Message]) -> list[Message]:
    """The messages a provider is sent: not ``activity`` (UI only) nor ``reasoning``."""
    return [m for m in messages if not isinstance(m, _UNSENT)]


def check_tool_results(messages: Sequence[Message], provider: str) -> None:
    """Refuse a conversation whose tool calls and results do not pair up.

    Every tool call of an assistant message needs a ``tool`` message among those right
    after it, and every ``tool`` message must answer a call of the assistant message
    just before it (once). Providers reject anything else, after a round trip.

    Raises:
        ConversationError: A call without its result, or a result without its call.
    """
    expected: set[str] = set()
    answered: set[str] = set()
    for index, message in enumerate(messages):
        if isinstance(message, ToolMessage):
            call_id = message.tool_call_id
            if call_id not in expected:
                raise ConversationError(
                    f"{provider}: tool message {message.id!r} answers tool call {call_id!r}, "
                    "which the assistant message just before it did not ask for; a tool "
                    "result must follow the assistant message that made its call"
                )
            if call_id in answered:
                raise ConversationError(
                    f"{provider}: tool call {call_id!r} has two results "
                    f"(the second is tool message {message.id!r})"
                )
            answered.add(call_id)
            continue
        expected, answered = set(), set()
        if isinstance(message, AssistantMessage) and message.tool_calls:
            ids = [call.id for call in message.tool_calls]
            if len(set(ids)) != len(ids):
                raise ConversationError(
                    f"{provider}: assistant message {message.id!r} has two tool calls with "
                    "the same id"
                )
            results = {result.tool_call_id for result in tool_results_after(messages, index)}
            missing = [call_id for call_id in ids if call_id not in results]
            if missing:
                raise ConversationError(
                    f"{provider}: assistant message {message.id!r} asks for tool call(s) "
                    f"{', '.join(map(repr, missing))} with no tool message right after it; "
                    "every tool call needs its result before the conversation goes on"
                )
            expected = set(ids)


def tool_arguments(call: ToolCall) -> str:
    """The raw argument string of a call, ``"{}"`` when it is empty."""
    arguments = call.function.arguments
    return arguments if arguments.strip() else "{}"


def _data_url(source: DataSource) -> str:
    return f"data:{source.mime_type};base64,{source.value}"


def _unsupported(provider: str, part: ContentPart, where: str) -> ConversationError:
    kind = type(part).__struct_config__.tag
    source = getattr(part, "source", None)
    detail = f" from a {type(source).__struct_config__.tag} source" if source is not None else ""
    return ConversationError(f"{provider} cannot take a {kind} part{detail} in {where}")


def text_of(content: str | list[ContentPart], provider: str, where: str) -> str:
    """The text of a message's content; only text parts can be sent as text."""
    if isinstance(content, str):
        return content
    texts: list[str] = []
    for part in content:
        if not isinstance(part, TextPart):
            raise _unsupported(provider, part, where)
        texts.append(part.text)
    return "".join(texts)


def _function_tools(tools: Sequence[Tool]) -> list[dict[str, Any]]:
    return [
        {
            "type": "function",
            "function": {
                "name": tool.name,
                "description": tool.description,
                "parameters": tool.parameters,
            },
        }
        for tool in tools
    ]


class _OpenAIBase(ProviderBackend):
    """What the two OpenAI APIs share.

    Args:
        model: The model name.
        developer_role: The role AG-UI ``developer`` messages are sent with:
            ``"developer"`` (OpenAI's own API) or ``"system"``, for OpenAI-compatible
            servers that predate the developer role and refuse it.
        **kwargs: The other arguments of
            :class:`~toolrelay.backends.providers._base.ProviderBackend`.
    """

    api_key_env: ClassVar[tuple[str, ...]] = ("OPENAI_API_KEY",)
    default_base_url: ClassVar[str] = "https://api.openai.com/v1"
    capabilities: ClassVar[Capabilities] = Capabilities(
        streaming=True, tools=True, tool_ids=True, parallel_calls=True
    )

    def __init__(
        self,
        model: str,
        *,
        developer_role: Literal["developer", "system"] = "developer",
        **kwargs: Any,
    ) -> None:
        if developer_role not in ("developer", "system"):
            raise ValueError(
                f"developer_role must be 'developer' or 'system', not {developer_role!r}"
            )
        self.developer_role = developer_role
        super().__init__(model, **kwargs)

    def auth_headers(self) -> dict[str, str]:
        if not self._api_key:
            return {}  # OpenAI-compatible servers on a private network often need none
        return {"Authorization": f"Bearer {self._api_key}"}


# --- Chat Completions: the backend ------------------------------------------------------------


class OpenAIChatBackend(_OpenAIBase):
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
        if run_input.tools:
            body["tools"] = _function_tools(run_input.tools)
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
                    parts.append({"type": "image_url", "image_url": {"url": _data_url(source)}})
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
                    raise _unsupported(self.name, part, "a user message")
        return parts


_AUDIO_FORMATS = {"audio/wav": "wav", "audio/x-wav": "wav", "audio/mpeg": "mp3", "audio/mp3": "mp3"}


# --- the Responses API: the backend -----------------------------------------------------------


class OpenAIResponsesBackend(_OpenAIBase):
    """The OpenAI Responses API, streamed, stateless (the whole conversation every run).

    Function tools are declared with ``strict: false`` (the Responses API makes them
    strict by default, which needs schemas toolrelay does not promise). Function call
    items are sent back by ``call_id`` only, without item ids, so no reasoning item has
    to go with them. See :class:`~toolrelay.backends.providers._base.ProviderBackend`
    for the arguments.
    """

    name: ClassVar[str] = "openai-responses"

    def endpoint(self) -> str:
        return f"{self.base_url}/responses"

    def new_translator(self) -> OpenAIResponsesTranslator:
        return OpenAIResponsesTranslator(fallback_message_id=f"msg_{uuid.uuid4().hex}")

    def build_request(self, run_input: RunAgentInput) -> dict[str, Any]:
        """The ``/responses`` body: model, options, input items, tools, ``stream``.

        Raises:
            ConversationError: Tool calls and results do not pair up, or a message has a
                content part the Responses API cannot take.
        """
        messages = sendable_messages(run_input.messages)
        check_tool_results(messages, self.name)
        body: dict[str, Any] = {"model": self.model, **self.options}
        items: list[dict[str, Any]] = []
        for message in messages:
            items.extend(self._items(message))
        body["input"] = items
        body["stream"] = True
        if run_input.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "strict": False,
                }
                for tool in run_input.tools
            ]
        return body

    def _items(self, message: Message) -> list[dict[str, Any]]:
        match message:
            case SystemMessage(content=content):
                return [{"type": "message", "role": "system", "content": content}]
            case DeveloperMessage(content=content):
                return [{"type": "message", "role": self.developer_role, "content": content}]
            case UserMessage(content=content):
                return [{"type": "message", "role": "user", "content": self._user_content(content)}]
            case AssistantMessage(content=content, tool_calls=tool_calls):
                items: list[dict[str, Any]] = []
                if content:
                    items.append({"type": "message", "role": "assistant", "content": content})
                items.extend(
                    {
                        "type": "function_call",
                        "call_id": call.id,
                        "name": call.function.name,
                        "arguments": tool_arguments(call),
                    }
                    for call in tool_calls or ()
                )
                return items
            case ToolMessage(content=content, tool_call_id=tool_call_id):
                return [
                    {
                        "type": "function_call_output",
                        "call_id": tool_call_id,
                        "output": text_of(content, self.name, "a tool message"),
                    }
                ]
            case _:  # pragma: no cover - sendable_messages left the others out
                raise ConversationError(f"{self.name} cannot take a {type(message).__name__}")

    def _user_content(self, content: str | list[ContentPart]) -> str | list[dict[str, Any]]:
        if isinstance(content, str):
            return content
        parts: list[dict[str, Any]] = []
        for part in content:
            match part:
                case TextPart(text=text):
                    parts.append({"type": "input_text", "text": text})
                case ImagePart(source=UrlSource(value=url)):
                    parts.append({"type": "input_image", "image_url": url})
                case ImagePart(source=DataSource() as source):
                    parts.append({"type": "input_image", "image_url": _data_url(source)})
                case ImagePart(source=FileSource(value=file_id)):
                    parts.append({"type": "input_image", "file_id": file_id})
                case _:
                    raise _unsupported(self.name, part, "a user message")
        return parts
