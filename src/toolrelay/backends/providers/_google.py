"""Google Gemini (``streamGenerateContent?alt=sse``) as an agent backend.

Theory of operation
-------------------
Gemini streams ``GenerateContentResponse`` objects, one per SSE ``data:``. The first
candidate's ``content.parts`` carry text (``thought: true`` for visible reasoning) or
a *complete* ``functionCall {name, args, id}``: Gemini never streams a call in pieces.
Gemini 3 and later give each call an ``id``; earlier models give none. So
:class:`GoogleTranslator`, for each call part, says everything at once (the provider
said the call is complete)::

    functionCall{name, args, id}  ->  TOOL_CALL_START(id or call_<n>)
                                      TOOL_CALL_ARGS(json(args))  TOOL_CALL_END

The provider's id is kept; ``call_<n>`` is made only when there is none (or when the
response repeats an id it already gave), unique in the response (the backend keeps
counting across responses, so the ids of one conversation never repeat); two calls
are never merged, even with the same name and arguments. Text is closed before a
call and the call names it as its ``parentMessageId``. ``finishReason`` ends the run:

=========================================  ==========================================
finishReason                               AG-UI
=========================================  ==========================================
STOP with calls                            RUN_FINISHED ``stopReason: tool_use``
STOP                                       RUN_FINISHED ``stopReason: end_turn``
MAX_TOKENS                                 RUN_FINISHED ``stopReason: max_tokens``
SAFETY, RECITATION, BLOCKLIST,             RUN_FINISHED ``stopReason: content_filter``
PROHIBITED_CONTENT, SPII, IMAGE_SAFETY...
MALFORMED_FUNCTION_CALL,                   RUN_ERROR, ``code`` the reason in lower case
UNEXPECTED_TOOL_CALL
anything else                              RUN_FINISHED ``stopReason: other``
=========================================  ==========================================

``providerStopReason`` keeps Gemini's own word. A prompt blocked before any candidate
(``promptFeedback.blockReason``) finishes ``content_filter``; an ``error`` object in
the stream becomes RUN_ERROR with its message and status.

Requests (:class:`GoogleBackend`): AG-UI messages become ``contents`` of roles
``user`` and ``model``; system and developer messages become ``systemInstruction``.
Adjacent messages of one side form one turn (Gemini's results of parallel calls are
one user turn of ``functionResponse`` parts). Results are matched to the calls of the
model turn just before them and sent in the calls' order, under the call's function
name; a call whose id Gemini gave goes back with it as ``functionCall.id``, and its
result as ``functionResponse.id`` (the backend remembers those ids, bounded, as it
does signatures), so two parallel calls of one function pair up unambiguously; a
``response`` must be an object, so other results are wrapped as ``{"result": ...}``
and failures sent as ``{"error": ...}``. The conversation is checked before any
network call (:class:`ConversationError`): it begins with a user turn, turns
alternate, and a model turn with N calls is followed by a user turn with exactly N
responses, one per call.

Thought signatures: thinking models (Gemini 2.5, 3) put a ``thoughtSignature`` next
to a ``functionCall``; Gemini 3 refuses a continuation that does not send it back.
The backend remembers the signatures of the calls it streamed (by call id, bounded)
and puts them back on those calls in later requests.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import msgspec

from toolrelay._errors import ConversationError
from toolrelay.backends.providers._base import Capabilities, ProviderBackend
from toolrelay.backends.providers._messages import arguments_object
from toolrelay.backends.providers._translator import (
    MessageStreams,
    Recent,
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
    Message,
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

__all__ = ("GoogleBackend", "GoogleTranslator")

_JSON_DECODER = msgspec.json.Decoder()

#: finishReason -> stopReason, for the reasons that complete the run.
_STOP_REASONS: Mapping[str, str] = {
    "STOP": "end_turn",
    "MAX_TOKENS": "max_tokens",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
    "IMAGE_PROHIBITED_CONTENT": "content_filter",
    "LANGUAGE": "content_filter",
}

#: finishReasons that mean the model's call could not be used: the run fails.
_ERROR_REASONS = frozenset({"MALFORMED_FUNCTION_CALL", "UNEXPECTED_TOOL_CALL"})

#: Thought signatures and given call ids remembered per backend (the most recent calls).
_MAX_SIGNATURES = 4096

# --- the stream's shapes (unknown fields are skipped) ----------------------------------


class _FunctionCall(msgspec.Struct, frozen=True):
    name: str
    args: dict[str, Any] | None = None
    id: str | None = None


class _Part(msgspec.Struct, rename="camel", frozen=True):
    text: str | None = None
    thought: bool = False
    function_call: _FunctionCall | None = None
    thought_signature: str | None = None


class _Content(msgspec.Struct, frozen=True):
    parts: list[_Part] = msgspec.field(default_factory=list)


class _Candidate(msgspec.Struct, rename="camel", frozen=True):
    content: _Content | None = None
    finish_reason: str | None = None
    finish_message: str | None = None
    index: int = 0


class _Usage(msgspec.Struct, rename="camel", frozen=True):
    prompt_token_count: int | None = None
    candidates_token_count: int | None = None
    total_token_count: int | None = None
    thoughts_token_count: int | None = None
    cached_content_token_count: int | None = None


class _PromptFeedback(msgspec.Struct, rename="camel", frozen=True):
    block_reason: str | None = None


class _Error(msgspec.Struct, frozen=True):
    code: int | None = None
    message: str = ""
    status: str | None = None


class _Chunk(msgspec.Struct, rename="camel", frozen=True):
    candidates: list[_Candidate] = msgspec.field(default_factory=list)
    usage_metadata: _Usage | None = None
    prompt_feedback: _PromptFeedback | None = None
    model_version: str | None = None
    error: _Error | None = None


class GoogleTranslator(MessageStreams):
    """Gemini stream chunks in, AG-UI events out (a :class:`StreamTranslator`).

    Pure: no I/O, no clock. One translator per response; a stream that closes before
    a ``finishReason`` leaves the run open.

    Args:
        message_ids: Makes the ids of text and reasoning messages.
        call_ids: Makes tool call ids (default ``call_1``, ``call_2``... per
            translator).
        thought_signatures: Where to record ``call id -> (name, thoughtSignature)``
            for the calls that carry one (the backend passes its memory).
        given_ids: Where to record the call ids Gemini gave (``call id -> name``), so
            the request sends them back (the backend passes its memory).
    """

    def __init__(
        self,
        *,
        message_ids: Callable[[], str] = uuid_id,
        call_ids: Callable[[], str] | None = None,
        thought_signatures: MutableMapping[str, tuple[str, str]] | None = None,
        given_ids: MutableMapping[str, str] | None = None,
    ) -> None:
        self._init_streams(message_ids, call_ids)
        self._signatures = thought_signatures
        self._given = given_ids
        self._seen: set[str] = set()
        self._calls = 0
        self._usage: _Usage | None = None
        self._model: str | None = None

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        """One ``GenerateContentResponse`` -> AG-UI events.

        Raises:
            MalformedEventError: The chunk is not a JSON object.
            InvalidEventError: The chunk does not have Gemini's shape.
        """
        if self._ended:
            return []
        data = convert_chunk(chunk, _Chunk, "GenerateContentResponse", sent="Gemini sent a chunk")
        if data.model_version:
            self._model = data.model_version
        if data.usage_metadata is not None:
            self._usage = data.usage_metadata
        if data.error is not None:
            code = data.error.status or (str(data.error.code) if data.error.code else None)
            return self._fail(data.error.message or "Gemini reported an error", code or "error")
        events: list[Event] = []
        candidate = next((c for c in data.candidates if c.index == 0), None)
        if candidate is None:
            feedback = data.prompt_feedback
            if feedback is not None and feedback.block_reason:
                events.extend(self._finish("content_filter", feedback.block_reason))
            return events
        if candidate.content is not None:
            for part in candidate.content.parts:
                events.extend(self._part(part))
        reason = candidate.finish_reason
        if reason:
            if reason in _ERROR_REASONS:
                message = candidate.finish_message or f"Gemini stopped: {reason}"
                events.extend(self._fail(message, reason.lower()))
            else:
                events.extend(self._finish(_STOP_REASONS.get(reason, "other"), reason))
        return events

    # -- parts -------------------------------------------------------------------------

    def _part(self, part: _Part) -> list[Event]:
        call = part.function_call
        if call is not None:
            return self._call(call, part.thought_signature)
        if not part.text:
            return []
        if part.thought:
            return self._reasoning(part.text)
        return self._text(part.text)

    def _call(self, call: _FunctionCall, signature: str | None) -> list[Event]:
        events = self._close_messages()
        given = call.id
        if given and given not in self._seen:
            call_id = given
            if self._given is not None:
                self._given[call_id] = call.name
        else:
            call_id = self._call_ids()
        self._seen.add(call_id)
        self._calls += 1
        if signature and self._signatures is not None:
            self._signatures[call_id] = (call.name, signature)
        arguments = msgspec.json.encode(call.args).decode() if call.args else "{}"
        events.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=call.name,
                parent_message_id=self._last_text_id,
            )
        )
        events.append(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments))
        events.append(ToolCallEndEvent(tool_call_id=call_id))
        return events

    # -- ends ----------------------------------------------------------------------------

    def _finish(self, stop_reason: str, provider_reason: str) -> list[Event]:
        if stop_reason == "end_turn" and self._calls:
            stop_reason = "tool_use"
        return self._end_run(stop_reason, provider_reason, self._token_usage())

    def _token_usage(self) -> list[TokenUsage] | None:
        usage = self._usage
        if usage is None:
            return None
        return [
            TokenUsage(
                provider="google",
                model=self._model,
                input_tokens=usage.prompt_token_count,
                output_tokens=usage.candidates_token_count,
                total_tokens=usage.total_token_count,
                reasoning_tokens=usage.thoughts_token_count,
                cached_input_tokens=usage.cached_content_token_count,
            )
        ]


# --- requests -------------------------------------------------------------------------


@dataclass(slots=True)
class _Turn:
    """One Gemini ``Content`` being built, with what the checks need."""

    role: str  # "user" | "model"
    parts: list[dict[str, Any]] = field(default_factory=list)
    #: The model turn's calls: (AG-UI call id, function name).
    calls: list[tuple[str, str]] = field(default_factory=list)
    #: The user turn's function responses: (AG-UI call id, part).
    responses: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    #: Other parts of a user turn (text, media), after the responses.
    extra: list[dict[str, Any]] = field(default_factory=list)


class GoogleBackend(ProviderBackend):
    """Gemini's ``streamGenerateContent`` (Google AI Studio API) as an agent backend.

    The key comes from ``api_key``, else ``GEMINI_API_KEY``, else ``GOOGLE_API_KEY``,
    and travels in the ``x-goog-api-key`` header. ``options`` are merged into the
    request body (``generationConfig``, ``toolConfig``, ``safetySettings``...).
    """

    name: ClassVar[str] = "google"
    api_key_env: ClassVar[tuple[str, ...]] = ("GEMINI_API_KEY", "GOOGLE_API_KEY")
    default_base_url: ClassVar[str] = "https://generativelanguage.googleapis.com/v1beta"
    capabilities: ClassVar[Capabilities] = Capabilities(
        streaming=True, tools=True, tool_ids=True, parallel_calls=True
    )
    stream_format: ClassVar[str] = "sse"

    def _init_state(self) -> None:
        self._next_call = counter("call_")
        self._signatures: Recent[tuple[str, str]] = Recent(_MAX_SIGNATURES)
        self._given_ids: Recent[str] = Recent(_MAX_SIGNATURES)

    def endpoint(self) -> str:
        model = self.model.removeprefix("models/")
        return f"{self.base_url}/models/{model}:streamGenerateContent?alt=sse"

    def auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key} if self._api_key else {}

    def new_translator(self) -> StreamTranslator:
        return GoogleTranslator(
            call_ids=self._next_call,
            thought_signatures=self._signatures,
            given_ids=self._given_ids,
        )

    def build_request(self, run_input: RunAgentInput) -> dict[str, Any]:
        """The ``GenerateContentRequest`` for a run.

        Raises:
            ConversationError: The conversation breaks one of Gemini's rules (see the
                module docstring), or holds something Gemini cannot be sent.
        """
        system: list[str] = []
        turns: list[_Turn] = []
        for message in run_input.messages:
            if isinstance(message, SystemMessage | DeveloperMessage):
                if message.content:
                    system.append(message.content)
                continue
            turn = self._turn_for(message, turns)
            if turn is None:
                continue
            if turns and turns[-1].role == turn.role:
                _merge(turns[-1], turn)
            else:
                turns.append(turn)
        _check_turns(turns)
        _order_responses(turns)
        body: dict[str, Any] = {"contents": [_content(turn) for turn in turns]}
        if system:
            body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
        if run_input.tools:
            body["tools"] = [
                {
                    "functionDeclarations": [
                        {
                            "name": tool.name,
                            "description": tool.description,
                            "parametersJsonSchema": tool.parameters,
                        }
                        for tool in run_input.tools
                    ]
                }
            ]
        body.update(self.options)
        return body

    def _turn_for(self, message: Message, turns: Sequence[_Turn]) -> _Turn | None:
        match message:
            case UserMessage(content=content):
                return _Turn("user", extra=_user_parts(content))
            case AssistantMessage(content=content, tool_calls=tool_calls):
                turn = _Turn("model")
                if content:
                    turn.parts.append({"text": content})
                for call in tool_calls or ():
                    function: dict[str, Any] = {
                        "name": call.function.name,
                        "args": arguments_object(
                            call.function.arguments, call.function.name, self.name
                        ),
                    }
                    if self._given_ids.get(call.id) == call.function.name:
                        function["id"] = call.id
                    part: dict[str, Any] = {"functionCall": function}
                    remembered = self._signatures.get(call.id)
                    if remembered is not None and remembered[0] == call.function.name:
                        part["thoughtSignature"] = remembered[1]
                    turn.parts.append(part)
                    turn.calls.append((call.id, call.function.name))
                return turn if turn.parts else None
            case ToolMessage():
                name = _called_name(message, turns)
                response: dict[str, Any] = {"name": name, "response": _response_object(message)}
                if self._given_ids.get(message.tool_call_id) == name:
                    response["id"] = message.tool_call_id
                part = {"functionResponse": response}
                return _Turn("user", responses=[(message.tool_call_id, part)])
            case _:
                return None  # reasoning and activity records stay local


def _merge(into: _Turn, turn: _Turn) -> None:
    into.parts.extend(turn.parts)
    into.calls.extend(turn.calls)
    into.responses.extend(turn.responses)
    into.extra.extend(turn.extra)


def _content(turn: _Turn) -> dict[str, Any]:
    if turn.role == "model":
        return {"role": "model", "parts": turn.parts}
    return {"role": "user", "parts": [part for _, part in turn.responses] + turn.extra}


def _called_name(message: ToolMessage, turns: Sequence[_Turn]) -> str:
    """The function name of the call ``message`` answers: a call of the model turn
    just before the results (Gemini matches results to calls by position and name)."""
    previous = turns[-1] if turns else None
    if previous is not None and previous.role == "user" and previous.responses:
        previous = turns[-2] if len(turns) > 1 else None
    if previous is not None and previous.role == "model":
        for call_id, name in previous.calls:
            if call_id == message.tool_call_id:
                return name
    raise ConversationError(
        f"google: the tool result {message.id!r} answers call {message.tool_call_id!r}, "
        "which is not a call of the model turn just before it; Gemini needs each result "
        "right after the turn that asked for it"
    )


def _check_turns(turns: Sequence[_Turn]) -> None:
    """Gemini's conversation rules, checked before anything is sent.

    Raises:
        ConversationError: No turn; the first turn is the model's; two turns of one
            role in a row; a model turn's calls not answered one by one by the next
            user turn; function responses after a turn without calls.
    """
    if not turns:
        raise ConversationError("google: the conversation has nothing to send")
    if turns[0].role != "user":
        raise ConversationError(
            "google: a Gemini conversation must begin with a user turn, this one begins "
            "with a model turn"
        )
    for index, turn in enumerate(turns):
        previous = turns[index - 1] if index else None
        if previous is not None and previous.role == turn.role:
            raise ConversationError(
                f"google: turns must alternate user/model; turns {index - 1} and {index} "
                f"are both {turn.role!r}"
            )
        if turn.role == "user" and turn.responses:
            if previous is None or not previous.calls:
                raise ConversationError(
                    f"google: turn {index} sends function responses but the turn before it "
                    "asked for no function call"
                )
        if turn.role != "model" or not turn.calls:
            continue
        following = turns[index + 1] if index + 1 < len(turns) else None
        answered = [call_id for call_id, _ in following.responses] if following else []
        asked = [call_id for call_id, _ in turn.calls]
        if sorted(answered) != sorted(asked):
            names = ", ".join(name for _, name in turn.calls)
            raise ConversationError(
                f"google: the model turn {index} asked for {len(asked)} function call(s) "
                f"({names}) and the next user turn answers {len(answered)}; Gemini needs "
                "exactly one functionResponse per functionCall"
            )


def _order_responses(turns: Sequence[_Turn]) -> None:
    """Put each user turn's function responses in the order of the calls before it:
    Gemini matches them by position."""
    for previous, turn in itertools.pairwise(turns):
        if turn.responses:
            order = {call_id: position for position, (call_id, _) in enumerate(previous.calls)}
            turn.responses.sort(key=lambda response: order[response[0]])


def _user_parts(content: str | list[ContentPart]) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"text": content}]
    return [_media_part(part) for part in content]


def _media_part(part: ContentPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    source = part.source
    if isinstance(source, DataSource):
        return {"inlineData": {"mimeType": source.mime_type, "data": source.value}}
    file_data: dict[str, Any] = {"fileUri": source.value}
    if source.mime_type:
        file_data["mimeType"] = source.mime_type
    return {"fileData": file_data}


def _response_object(message: ToolMessage) -> dict[str, Any]:
    """``functionResponse.response``: an object (Gemini requires one)."""
    if message.error is not None:
        return {"error": message.error}
    content = message.content
    text = (
        content
        if isinstance(content, str)
        else "".join(part.text for part in content if isinstance(part, TextPart))
    )
    try:
        value = _JSON_DECODER.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return {"result": text}
    return value if isinstance(value, dict) else {"result": value}
