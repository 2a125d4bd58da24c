"""Anthropic as an agent backend: the Messages API, streamed.

Theory of operation
-------------------
``POST /v1/messages`` with ``stream: true`` answers with named SSE events. The answer
is a list of content blocks, each streamed under its ``index`` between
``content_block_start`` and ``content_block_stop``. :class:`AnthropicTranslator` maps::

    message_start                          the message id (text and calls name it),
                                              the model and the usage so far
    content_block_start  text              -> TEXT_MESSAGE_START
                         tool_use          -> TOOL_CALL_START (the block's id and name)
                         thinking          -> REASONING_MESSAGE_START
    content_block_delta  text_delta        -> TEXT_MESSAGE_CONTENT
                         input_json_delta  -> TOOL_CALL_ARGS (an empty ``partial_json``,
                                              which a tool without arguments sends, is
                                              skipped)
                         thinking_delta    -> REASONING_MESSAGE_CONTENT
                         signature_delta   -> REASONING_ENCRYPTED_VALUE
    content_block_stop                     -> TEXT_MESSAGE_END / REASONING_MESSAGE_END;
                                              a tool_use block's TOOL_CALL_END waits
                                              for the stop reason
    message_delta        usage             the message's counts so far, remembered
                         stop_reason       remembered; -> TOOL_CALL_END for every
                                              stopped tool_use block, in order (none
                                              on max_tokens, refusal or
                                              model_context_window_exceeded: the
                                              calls of a cut-off message stay open
                                              and are never run)
    message_stop                           -> RUN_FINISHED {"stopReason": stop_reason}
                                              with the usage (the input's count takes
                                              in the prompt cache's reads and writes)
    error                                  -> RUN_ERROR (error.message, code error.type)
    ping, and event types added later      ignored

``content_block_stop`` is where Anthropic says a tool call's block is complete, but not
whether the message was: it sends the stop of the block it was cut in the middle of,
then ``message_delta`` with ``stop_reason: "max_tokens"``. So a call's TOOL_CALL_END
waits for the stop reason, and a message cut off completes none of its calls: the last
one's input may stop mid-way (and still parse), and the batch may lack calls the model
meant to make. Cut off means ``max_tokens`` and ``model_context_window_exceeded`` (the
output ran out of room) and ``refusal`` (a streaming classifier stopped the answer
where it stood, calls included); ``end_turn``, ``tool_use``, ``stop_sequence`` (the
caller's own stop), ``pause_turn`` (a server-tool loop paused between blocks) and any
reason added later end the calls, in order, as before. The calls of a message cut off
stay open: the processor abandons them all at RUN_FINISHED (``tool_call_not_ended``)
and runs none, as for OpenAI's ``length``; the run keeps its stop reason and the turn
ends with it. A call whose block never stopped is never run.

A stream that closes after ``message_delta`` but before ``message_stop`` still
finishes the run (the stop reason is known); one that closes earlier, or an ``error``
event, does not, and the processor fails the turn. The calls whose blocks stopped are
ended then, as before (no stop reason says the message was cut off), but nothing runs:
the turn has failed.

Blocks of server tools (``server_tool_use``, ``web_search_tool_result``...) and
``redacted_thinking`` are not client tool calls and are not translated.

Requests. Anthropic takes the system prompt apart and wants ``user`` and ``assistant``
messages to alternate, starting with ``user``. :class:`AnthropicBackend` maps:

- ``system`` and ``developer`` messages -> the top-level ``system`` (joined with blank
  lines, wherever they stand in the conversation);
- assistant tool calls -> ``tool_use`` blocks whose ``input`` is the parsed arguments
  (``{}`` for empty or invalid JSON, or JSON that is not an object);
- the ``tool`` messages of a batch -> ONE user message of ``tool_result`` blocks
  (``tool_use_id``, ``content``, ``is_error: true`` for a failed call, whose content is
  already ``{"error": ...}``);
- consecutive messages of one role -> one message (their blocks in order).

It then checks, before any network call, that tool calls and results pair up and that
the messages start with ``user`` (:class:`~toolrelay.ConversationError`).
- a ``reasoning`` message with an encrypted value (a thinking block's signature, kept
  from REASONING_ENCRYPTED_VALUE) -> a ``thinking`` block with its ``signature``, first
  in the assistant message that follows it: extended thinking together with tool use
  requires the turn's signed thinking blocks back with the tool results. Unsigned
  reasoning is not sent (Anthropic refuses a thinking block without its signature).
  The backend says ``takes_reasoning``, so an Engine left to decide sends reasoning.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, ClassVar

import msgspec

from toolrelay._errors import ConversationError
from toolrelay.backends.providers._base import CUT_OFF, Capabilities, ProviderBackend
from toolrelay.backends.providers._messages import (
    check_tool_results,
    sendable_messages,
    text_of,
    unsupported_part,
)
from toolrelay.backends.providers._translator import nonempty, token_count
from toolrelay.protocol import (
    ActivityMessage,
    AssistantMessage,
    ContentPart,
    DataSource,
    DeveloperMessage,
    DocumentPart,
    Event,
    ImagePart,
    Message,
    ReasoningEncryptedValueEvent,
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
    TokenUsage,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)

__all__ = ("ANTHROPIC_VERSION", "AnthropicBackend", "AnthropicTranslator")

#: The ``anthropic-version`` header every request carries.
ANTHROPIC_VERSION = "2023-06-01"
_DEFAULT_MAX_TOKENS = 4096

_JSON_DECODER = msgspec.json.Decoder()
_JSON_ENCODER = msgspec.json.Encoder()


# --- the translator --------------------------------------------------------------------------


@dataclass(slots=True)
class _Block:
    kind: str  # "text", "tool_use", "thinking"
    id: str  # the AG-UI message or tool call id


class AnthropicTranslator:
    """Anthropic Messages stream events -> AG-UI events. Pure: no I/O, no clock.

    Args:
        fallback_message_id: The message id when no ``message_start`` names one.
    """

    def __init__(self, *, fallback_message_id: str = "message") -> None:
        self._message_id: str | None = None
        self._fallback_message_id = fallback_message_id
        self._blocks: dict[int, _Block] = {}  # the open blocks, by index
        # Calls whose block stopped before the stop reason came: their TOOL_CALL_END
        # waits for it (see the module's docstring), in the order the blocks stopped.
        self._held_calls: list[_Block] = []
        self._texts = 0
        self._stop_reason: str | None = None
        self._model: str | None = None
        #: The usage counts as ``message_start`` gave them, updated by each
        #: ``message_delta`` (whose counts are the message's totals so far).
        self._usage: dict[str, int] = {}
        self._ended = False

    @property
    def message_id(self) -> str:
        """The id of this response's assistant message."""
        return self._message_id or self._fallback_message_id

    def feed(self, chunk: Any, event_name: str | None = None) -> list[Event]:
        if self._ended or not isinstance(chunk, dict):
            return []
        kind = chunk.get("type")
        if not isinstance(kind, str):
            kind = event_name
        out: list[Event] = []
        match kind:
            case "message_start":
                message = chunk.get("message")
                message = message if isinstance(message, dict) else {}
                self._message_id = self._message_id or nonempty(message.get("id"))
                self._model = nonempty(message.get("model"))
                self._count_usage(message.get("usage"))
            case "content_block_start":
                self._block_start(chunk, out)
            case "content_block_delta":
                self._block_delta(chunk, out)
            case "content_block_stop":
                index = chunk.get("index")
                block = self._blocks.pop(index, None) if isinstance(index, int) else None
                if block is None:
                    pass
                elif block.kind != "tool_use":
                    out.append(_end(block))
                elif self._stop_reason is None:
                    # The block is whole, but the message may yet say it was cut off.
                    self._held_calls.append(block)
                elif not _cut_off(self._stop_reason):
                    out.append(_end(block))
            case "message_delta":
                self._count_usage(chunk.get("usage"))
                delta = chunk.get("delta")
                if isinstance(delta, dict) and delta.get("stop_reason") is not None:
                    self._stop_reason = str(delta["stop_reason"])
                    # A message cut off completes none of its calls: they stay open,
                    # and the processor abandons them at RUN_FINISHED.
                    if not _cut_off(self._stop_reason):
                        out.extend(_end(block) for block in self._held_calls)
                    self._held_calls.clear()
            case "message_stop":
                # The message is complete: every block in it is, too, unless it was
                # cut off, which leaves its calls open. Held calls remain only when no
                # message_delta named a stop reason; they end as they always did.
                out.extend(self._end_held_calls())
                cut_off = _cut_off(self._stop_reason)
                out.extend(
                    _end(block)
                    for block in self._blocks.values()
                    if not (cut_off and block.kind == "tool_use")
                )
                self._blocks.clear()
                out.append(_finished(self._stop_reason, self._token_usage()))
                self._ended = True
            case "error":
                error = chunk.get("error")
                self._ended = True
                out.extend(self._end_held_calls())
                out.append(_error_event(error if isinstance(error, dict) else chunk))
            case _:
                pass  # ping, and event types added later
        return out

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        self._ended = True
        # Held calls remain only when no stop reason came: they end as they did at
        # their content_block_stop, and the turn fails all the same (no RUN_FINISHED).
        out: list[Event] = self._end_held_calls()
        for index, block in list(self._blocks.items()):
            if block.kind != "tool_use":  # a call whose block never stopped is never run
                del self._blocks[index]
                out.append(_end(block))
        if self._stop_reason is not None:
            out.append(_finished(self._stop_reason, self._token_usage()))
        return out

    def _count_usage(self, usage: Any) -> None:
        for key in _USAGE_KEYS:
            count = token_count(usage, key)
            if count is not None:
                self._usage[key] = count

    def _token_usage(self) -> list[TokenUsage] | None:
        """The message's usage as AG-UI counts it: Anthropic's ``input_tokens`` leave
        out what was read from or written to the prompt cache, which the input's count
        takes in (as OpenAI's and Gemini's do); both are also given apart."""
        usage = self._usage
        if not usage:
            return None
        fresh = usage.get("input_tokens")
        read = usage.get("cache_read_input_tokens")
        written = usage.get("cache_creation_input_tokens")
        output = usage.get("output_tokens")
        known = [count for count in (fresh, read, written) if count is not None]
        input_tokens = sum(known) if known else None
        total = None if input_tokens is None or output is None else input_tokens + output
        return [
            TokenUsage(
                provider="anthropic",
                model=self._model,
                input_tokens=input_tokens,
                output_tokens=output,
                total_tokens=total,
                cached_input_tokens=read,
                cache_write_input_tokens=written,
            )
        ]

    def _end_held_calls(self) -> list[Event]:
        """TOOL_CALL_END for every held call, in order, for a message that ends without
        a stop reason: nothing says it was cut off."""
        out = [_end(block) for block in self._held_calls]
        self._held_calls.clear()
        return out

    def _block_start(self, chunk: dict[str, Any], out: list[Event]) -> None:
        index = chunk.get("index")
        block = chunk.get("content_block")
        if not isinstance(index, int) or not isinstance(block, dict):
            return
        match block.get("type"):
            case "text":
                self._texts += 1
                text_id = self.message_id if self._texts == 1 else f"{self.message_id}-{index}"
                self._blocks[index] = _Block("text", text_id)
                out.append(TextMessageStartEvent(message_id=text_id, role="assistant"))
                text = nonempty(block.get("text"))
                if text is not None:
                    out.append(TextMessageContentEvent(message_id=text_id, delta=text))
            case "tool_use":
                call_id = nonempty(block.get("id")) or f"{self.message_id}-call-{index}"
                self._blocks[index] = _Block("tool_use", call_id)
                out.append(
                    ToolCallStartEvent(
                        tool_call_id=call_id,
                        tool_call_name=nonempty(block.get("name")) or "",
                        parent_message_id=self.message_id,
                    )
                )
                initial = block.get("input")
                if isinstance(initial, dict) and initial:  # streamed input starts as {}
                    out.append(
                        ToolCallArgsEvent(
                            tool_call_id=call_id, delta=_JSON_ENCODER.encode(initial).decode()
                        )
                    )
            case "thinking":
                reasoning_id = f"{self.message_id}-thinking-{index}"
                self._blocks[index] = _Block("thinking", reasoning_id)
                out.append(ReasoningMessageStartEvent(message_id=reasoning_id))
                thinking = nonempty(block.get("thinking"))
                if thinking is not None:
                    out.append(
                        ReasoningMessageContentEvent(message_id=reasoning_id, delta=thinking)
                    )
            case _:
                pass  # redacted_thinking, server tools and their results

    def _block_delta(self, chunk: dict[str, Any], out: list[Event]) -> None:
        index = chunk.get("index")
        block = self._blocks.get(index) if isinstance(index, int) else None
        delta = chunk.get("delta")
        if block is None or not isinstance(delta, dict):
            return
        match (block.kind, delta.get("type")):
            case ("text", "text_delta"):
                text = nonempty(delta.get("text"))
                if text is not None:
                    out.append(TextMessageContentEvent(message_id=block.id, delta=text))
            case ("tool_use", "input_json_delta"):
                partial = nonempty(delta.get("partial_json"))
                if partial is not None:
                    out.append(ToolCallArgsEvent(tool_call_id=block.id, delta=partial))
            case ("thinking", "thinking_delta"):
                thinking = nonempty(delta.get("thinking"))
                if thinking is not None:
                    out.append(ReasoningMessageContentEvent(message_id=block.id, delta=thinking))
            case ("thinking", "signature_delta"):
                signature = nonempty(delta.get("signature"))
                if signature is not None:
                    out.append(
                        ReasoningEncryptedValueEvent(
                            subtype="message", entity_id=block.id, encrypted_value=signature
                        )
                    )
            case _:
                pass  # citations, and delta types added later


def _cut_off(stop_reason: str | None) -> bool:
    """Whether Anthropic's stop reason (in the backends' own words, which it passes as
    they are) says the message was cut off (:data:`CUT_OFF`: ``max_tokens``,
    ``model_context_window_exceeded``, ``refusal``; Anthropic documents each as output
    that stops where it stands). The others (``end_turn``, ``tool_use``,
    ``stop_sequence``, ``pause_turn``, and any added later) end the message's calls."""
    return stop_reason in CUT_OFF


def _end(block: _Block) -> Event:
    if block.kind == "tool_use":
        return ToolCallEndEvent(tool_call_id=block.id)
    if block.kind == "thinking":
        return ReasoningMessageEndEvent(message_id=block.id)
    return TextMessageEndEvent(message_id=block.id)


#: The counts of a message's ``usage`` that are read (``message_start`` gives them all,
#: ``message_delta`` the output's and, lately, the others again).
_USAGE_KEYS = (
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "output_tokens",
)


def _finished(stop_reason: str | None, usage: list[TokenUsage] | None) -> RunFinishedEvent:
    # The backend stamps the run's ids (the translator does not know them).
    return RunFinishedEvent(
        thread_id="", run_id="", result={"stopReason": stop_reason}, usage=usage
    )


def _error_event(error: dict[str, Any]) -> RunErrorEvent:
    message = nonempty(error.get("message")) or "the provider reported an error"
    code = nonempty(error.get("type"))
    return RunErrorEvent(message=message, code=code)


# --- the backend ------------------------------------------------------------------------------


class AnthropicBackend(ProviderBackend):
    """Anthropic's Messages API, streamed.

    ``max_tokens`` (which Anthropic requires) defaults to 4096; set it, like any other
    request field, through ``options``. See
    :class:`~toolrelay.backends.providers._base.ProviderBackend` for the arguments.
    """

    name: ClassVar[str] = "anthropic"
    takes_reasoning: ClassVar[bool] = True
    api_key_env: ClassVar[tuple[str, ...]] = ("ANTHROPIC_API_KEY",)
    default_base_url: ClassVar[str] = "https://api.anthropic.com"
    capabilities: ClassVar[Capabilities] = Capabilities(
        streaming=True, tools=True, tool_ids=True, parallel_calls=True
    )

    def endpoint(self) -> str:
        return f"{self.base_url}/v1/messages"

    def auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def new_translator(self) -> AnthropicTranslator:
        return AnthropicTranslator(fallback_message_id=f"msg_{uuid.uuid4().hex}")

    def build_request(self, run_input: RunAgentInput) -> dict[str, Any]:
        """The ``/v1/messages`` body: model, ``max_tokens``, options, system, messages,
        tools, ``stream``.

        Raises:
            ConversationError: Tool calls and results do not pair up, the conversation
                does not start with a user message, or a message has a content part
                Anthropic cannot take.
        """
        check_tool_results(sendable_messages(run_input.messages), self.name)
        # Signed reasoning goes back as thinking blocks; everything else of _UNSENT not.
        messages = [
            m
            for m in run_input.messages
            if not isinstance(m, (ActivityMessage, ReasoningMessage))
            or (isinstance(m, ReasoningMessage) and m.encrypted_value)
        ]
        system: list[str] = []
        turns: list[dict[str, Any]] = []
        for message in messages:
            if isinstance(message, (SystemMessage, DeveloperMessage)):
                if message.content:
                    system.append(message.content)
                continue
            role, blocks = self._turn(message)
            if not blocks:
                continue  # an empty assistant message: Anthropic refuses empty content
            if turns and turns[-1]["role"] == role:
                turns[-1]["content"].extend(blocks)
            else:
                turns.append({"role": role, "content": blocks})
        self._check_alternation(turns)
        body: dict[str, Any] = {"model": self.model, "max_tokens": _DEFAULT_MAX_TOKENS}
        body.update(self.options)
        if system:
            body["system"] = "\n\n".join(system)
        body["messages"] = turns
        body["stream"] = True
        if run_input.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in run_input.tools
            ]
        return body

    def _check_alternation(self, turns: list[dict[str, Any]]) -> None:
        if not turns:
            raise ConversationError(f"{self.name}: the conversation has no user message")
        if turns[0]["role"] != "user":
            raise ConversationError(
                f"{self.name}: the conversation must start with a user message, "
                f"not an {turns[0]['role']} message"
            )
        # Merging makes the roles alternate; checked so that a change above cannot
        # quietly send what Anthropic refuses.
        for before, after in zip(turns, turns[1:], strict=False):
            if before["role"] == after["role"]:  # pragma: no cover - merged above
                raise ConversationError(f"{self.name}: two {after['role']} messages in a row")

    def _turn(self, message: Message) -> tuple[str, list[dict[str, Any]]]:
        match message:
            case UserMessage(content=content):
                return "user", self._user_blocks(content)
            case AssistantMessage(content=content, tool_calls=tool_calls):
                blocks: list[dict[str, Any]] = []
                if content:
                    blocks.append({"type": "text", "text": content})
                blocks.extend(
                    {
                        "type": "tool_use",
                        "id": call.id,
                        "name": call.function.name,
                        "input": _parsed_input(call.function.arguments),
                    }
                    for call in tool_calls or ()
                )
                return "assistant", blocks
            case ReasoningMessage(content=content, encrypted_value=signature):
                return "assistant", [
                    {"type": "thinking", "thinking": content, "signature": signature}
                ]
            case ToolMessage(content=content, tool_call_id=tool_call_id, error=error):
                result: dict[str, Any] = {
                    "type": "tool_result",
                    "tool_use_id": tool_call_id,
                    "content": text_of(content, self.name, "a tool message"),
                }
                if error is not None:
                    result["is_error"] = True
                return "user", [result]
            case _:  # pragma: no cover - sendable_messages and the caller left the others out
                raise ConversationError(f"{self.name} cannot take a {type(message).__name__}")

    def _user_blocks(self, content: str | list[ContentPart]) -> list[dict[str, Any]]:
        if isinstance(content, str):
            return [{"type": "text", "text": content}] if content else []
        blocks: list[dict[str, Any]] = []
        for part in content:
            match part:
                case TextPart(text=text):
                    if text:
                        blocks.append({"type": "text", "text": text})
                case ImagePart(source=DataSource() | UrlSource() as source):
                    blocks.append({"type": "image", "source": _source(source)})
                case DocumentPart(source=DataSource() | UrlSource() as source):
                    blocks.append({"type": "document", "source": _source(source)})
                case _:
                    raise unsupported_part(self.name, part, "a user message")
        return blocks


def _source(source: DataSource | UrlSource) -> dict[str, str]:
    """An image's or document's ``source``: inline base64 data, or a URL."""
    if isinstance(source, UrlSource):
        return {"type": "url", "url": source.value}
    return {"type": "base64", "media_type": source.mime_type, "data": source.value}


def _parsed_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as the object ``tool_use.input`` needs (``{}`` if they are not
    a JSON object)."""
    if not arguments.strip():
        return {}
    try:
        value = _JSON_DECODER.decode(arguments)
    except (msgspec.DecodeError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}
