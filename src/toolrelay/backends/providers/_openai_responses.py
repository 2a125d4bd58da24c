"""The OpenAI Responses API as an agent backend, streamed.

Theory of operation
-------------------
A pure translator, :class:`OpenAIResponsesTranslator`, plus a thin
:class:`OpenAIResponsesBackend`.

**Responses API** (``POST /responses``, ``stream: true``). Each SSE event names its
``type``. :class:`OpenAIResponsesTranslator` maps::

    response.output_item.added (function_call)     -> TOOL_CALL_START (its call_id, name)
    response.function_call_arguments.delta          -> TOOL_CALL_ARGS
    response.function_call_arguments.done,
    response.output_item.done (function_call)      -> TOOL_CALL_ARGS with the arguments
                                                      of ``done`` if no delta carried
                                                      them; TOOL_CALL_END waits for the
                                                      response's outcome
    response.output_text.delta, .refusal.delta     -> TEXT_MESSAGE_START / CONTENT
    response.output_item.done (message)            -> TEXT_MESSAGE_END
    response.reasoning_summary_text.delta,
    response.reasoning_text.delta                  -> REASONING_MESSAGE_START / CONTENT
                                                      (one message per reasoning item;
                                                      "\n\n" between its parts)
    response.completed                             -> TOOL_CALL_END for every call, in
                                                      the order their ``done`` came (then
                                                      any without one), then
                                                      RUN_FINISHED {"stopReason":
                                                      "tool_use" or "end_turn",
                                                      "providerStopReason": "completed"}
                                                      with the response's usage
    response.incomplete                            -> RUN_FINISHED {"stopReason":
                                                      max_tokens, content_filter or other,
                                                      "providerStopReason":
                                                      incomplete_details.reason}, with the
                                                      response's usage; no
                                                      TOOL_CALL_END: the calls of a
                                                      cut-off response stay open and are
                                                      never run
    response.failed, error                         -> TOOL_CALL_END for every call that
                                                      got its ``done``, then RUN_ERROR
                                                      (message, code)

A call's ``done`` says its arguments are whole, not that the response is: a response
cut off by ``max_output_tokens`` or ``content_filter`` may have finished the first
calls of a batch and stopped in the middle of the next, or before calls the model
meant to make, then says so with ``response.incomplete``. So TOOL_CALL_END waits for
the response's outcome, and a response incomplete completes none of its calls: the
processor abandons them all at RUN_FINISHED (``tool_call_not_ended``) and runs none,
as for Chat Completions' ``length`` and Anthropic's ``max_tokens``; the run keeps its
stop reason and the turn ends with it. ``response.completed`` ends them as they ended
before, in order. A response that fails (``response.failed``, ``error``), or a stream
that closes with no outcome, ends the calls that got their ``done`` as before (nothing
says the response was cut off) and leaves the others open; the turn fails all the
same (RUN_ERROR, or no RUN_FINISHED) and nothing runs.

A reasoning item's summary comes in parts (``summary_index`` 0, 1, ...), each a
paragraph of its own that often opens with a bold title; its raw reasoning likewise
in content parts (``content_index``). The item stays one reasoning message, and a
blank line goes between its parts, so the message reads as the parts joined with
``"\n\n"``, not glued into one paragraph. The separator comes with the first delta of
the next part, so an empty part adds none.

Phases: gpt-5 models and later label each message item ``commentary`` (what they say
on the way, before calls) or ``final_answer``, and want the label back on every
assistant message of later requests. The backend remembers the phase of the message
items it streamed (by item id, which is the AG-UI message's, bounded) and sends it
with those messages; a message it did not stream (or no longer remembers) goes without
one, as every message did before the field existed.

Requests: see ``_messages.py`` (what every provider is sent of a conversation).
"""

from __future__ import annotations

import uuid
from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, ClassVar

from toolrelay._errors import ConversationError
from toolrelay.backends.providers._messages import (
    check_tool_results,
    data_url,
    sendable_messages,
    text_of,
    tool_arguments,
    unsupported_part,
)
from toolrelay.backends.providers._openai_base import (
    OpenAIBase,
    arguments_piece,
    error_event,
    finished,
    token_usage,
)
from toolrelay.backends.providers._translator import Recent, nonempty
from toolrelay.protocol import (
    AssistantMessage,
    ContentPart,
    DataSource,
    DeveloperMessage,
    Event,
    FileSource,
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

__all__ = ("OpenAIResponsesBackend", "OpenAIResponsesTranslator")


# --- the translator ------------------------------------------------------------------------------

#: A reasoning item's part: ``("summary", summary_index)`` or ``("content",
#: content_index)``; the index is ``None`` when the server names none.
_Part = tuple[str, int | None]

#: Message phases remembered per backend (the most recent messages).
_MAX_PHASES = 4096

#: What goes between two parts of one reasoning item: they are paragraphs.
_PART_BREAK = "\n\n"


@dataclass(slots=True)
class _ResponsesCall:
    id: str
    streamed: bool = False
    #: Its ``done`` came: the arguments are whole, later deltas are dropped.
    done: bool = False


class OpenAIResponsesTranslator:
    """Responses API stream events -> AG-UI events. Pure: no I/O, no clock.

    Args:
        fallback_message_id: The parent message id of calls when the stream names no
            response (``response.created``) and no text came first.
        phases: Where to record ``message item id -> phase`` (``commentary``,
            ``final_answer``) for the messages that say theirs (the backend sends it
            back with them); ``None`` records nothing.
    """

    def __init__(
        self,
        *,
        fallback_message_id: str = "message",
        phases: MutableMapping[str, str] | None = None,
    ) -> None:
        self._fallback_message_id = fallback_message_id
        self._phases = phases
        self._response_id: str | None = None
        self._last_text_id: str | None = None
        # What is open, closed in the order it was opened (dicts keep insertion order).
        self._open_texts: dict[str, None] = {}
        # Each open reasoning item -> the part its last delta belonged to.
        self._open_reasoning: dict[str, _Part] = {}
        self._calls: dict[str, _ResponsesCall] = {}  # by item id
        # Calls whose done came: their TOOL_CALL_END waits for the response's outcome
        # (see the module's docstring), in the order their done came.
        self._held_calls: list[_ResponsesCall] = []
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
                    self._response_id = nonempty(response.get("id"))
            case "response.output_item.added":
                self._item_added(chunk, out)
            case "response.output_item.done":
                self._item_done(chunk, out)
            case "response.output_text.delta" | "response.refusal.delta":
                delta = nonempty(chunk.get("delta"))
                item_id = self._item_id(chunk)
                if delta is not None and item_id is not None:
                    self._text(item_id, delta, out)
            case "response.function_call_arguments.delta":
                call = self._call(chunk)
                delta = arguments_piece(chunk.get("delta"))
                if call is not None and not call.done and delta:
                    call.streamed = True
                    out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=delta))
            case "response.function_call_arguments.done":
                call = self._call(chunk)
                if call is not None:
                    self._call_done(call, chunk.get("arguments"), out)
            case "response.reasoning_summary_text.delta":
                self._reasoning(chunk, ("summary", chunk.get("summary_index")), out)
            case "response.reasoning_text.delta":
                self._reasoning(chunk, ("content", chunk.get("content_index")), out)
            case "response.completed":
                self._close_messages(out)
                self._end_held_calls(out)
                # "completed": every item is complete, whether or not its done came.
                out.extend(
                    ToolCallEndEvent(tool_call_id=call.id)
                    for call in self._calls.values()
                    if not call.done
                )
                # The API gives no reason beyond its status: the run stopped for its
                # calls if it made any, else it answered.
                out.append(
                    finished(
                        "completed",
                        stop_reason="tool_use" if self._calls else "end_turn",
                        usage=_usage(chunk),
                    )
                )
                self._ended = True
            case "response.incomplete":
                self._close_messages(out)
                response = chunk.get("response")
                details = response.get("incomplete_details") if isinstance(response, dict) else None
                reason = details.get("reason") if isinstance(details, dict) else None
                # A response cut off completes none of its calls: they stay open, and
                # the processor abandons them at RUN_FINISHED.
                self._held_calls.clear()
                out.append(finished(reason or "incomplete", usage=_usage(chunk)))
                self._ended = True
            case "response.failed":
                response = chunk.get("response")
                error = response.get("error") if isinstance(response, dict) else None
                self._ended = True
                self._end_held_calls(out)
                out.append(error_event(error, "the response failed"))
            case "error":
                error = chunk.get("error")
                self._ended = True
                self._end_held_calls(out)
                out.append(
                    error_event(error if isinstance(error, dict) else chunk, "provider error")
                )
            case _:
                pass  # created/in_progress parts, annotations, usage, and what comes next
        return out

    def finish(self) -> list[Event]:
        if self._ended:
            return []
        # No outcome came: the calls that got their done end as they did at it, and the
        # turn fails all the same (no RUN_FINISHED); those without it stay open.
        out: list[Event] = []
        self._end_held_calls(out)
        self._close_messages(out)
        self._ended = True
        return out

    # -- pieces -------------------------------------------------------------------------------

    def _item_id(self, chunk: dict[str, Any]) -> str | None:
        item_id = nonempty(chunk.get("item_id"))
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
        item_id = (
            nonempty(item.get("id")) or nonempty(item.get("call_id")) or f"item-{len(self._calls)}"
        )
        call_id = nonempty(item.get("call_id")) or item_id
        call = _ResponsesCall(id=call_id)
        self._calls[item_id] = call
        if isinstance(index, int):
            self._items_by_index[index] = item_id
        out.append(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=nonempty(item.get("name")) or "",
                parent_message_id=self._parent_id(),
            )
        )
        arguments = arguments_piece(item.get("arguments"))
        if arguments:
            call.streamed = True
            out.append(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments))
        return call

    def _item_added(self, chunk: dict[str, Any], out: list[Event]) -> None:
        item = chunk.get("item")
        if not isinstance(item, dict):
            return
        index = chunk.get("output_index")
        item_id = nonempty(item.get("id"))
        if isinstance(index, int) and item_id is not None:
            self._items_by_index[index] = item_id
        match item.get("type"):
            case "function_call":
                self._start_call(item, index, out)
            case "message":
                self._phase(item_id, item)
            case _:
                pass

    def _item_done(self, chunk: dict[str, Any], out: list[Event]) -> None:
        item = chunk.get("item")
        if not isinstance(item, dict):
            return
        item_id = nonempty(item.get("id"))
        match item.get("type"):
            case "function_call":
                call = self._calls.get(item_id or nonempty(item.get("call_id")) or "")
                if call is None:  # no output_item.added came: the whole call at once
                    call = self._start_call(item, chunk.get("output_index"), out)
                self._call_done(call, item.get("arguments"), out)
            case "message":
                self._phase(item_id, item)
                if item_id in self._open_texts:
                    del self._open_texts[item_id]
                    out.append(TextMessageEndEvent(message_id=item_id))
            case "reasoning" if item_id in self._open_reasoning:
                del self._open_reasoning[item_id]
                out.append(ReasoningMessageEndEvent(message_id=item_id))
            case _:
                pass

    def _phase(self, item_id: str | None, item: dict[str, Any]) -> None:
        """Record a message item's ``phase`` (gpt-5 models and later label their
        messages, and want the label back on every one of them)."""
        phase = nonempty(item.get("phase"))
        if phase is not None and item_id is not None and self._phases is not None:
            self._phases[item_id] = phase

    def _call_done(self, call: _ResponsesCall, arguments: Any, out: list[Event]) -> None:
        if call.done:
            return
        call.done = True
        if not call.streamed:
            # Servers that skip the deltas send the whole arguments with done.
            whole = arguments_piece(arguments)
            if whole:
                call.streamed = True
                out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=whole))
        # The call is whole, but the response may yet say it was cut off.
        self._held_calls.append(call)

    def _end_held_calls(self, out: list[Event]) -> None:
        out.extend(ToolCallEndEvent(tool_call_id=call.id) for call in self._held_calls)
        self._held_calls.clear()

    def _text(self, item_id: str, delta: str, out: list[Event]) -> None:
        if item_id not in self._open_texts:
            self._open_texts[item_id] = None
            self._last_text_id = item_id
            out.append(TextMessageStartEvent(message_id=item_id, role="assistant"))
        out.append(TextMessageContentEvent(message_id=item_id, delta=delta))

    def _reasoning(self, chunk: dict[str, Any], part: tuple[str, Any], out: list[Event]) -> None:
        delta = nonempty(chunk.get("delta"))
        item_id = self._item_id(chunk)
        if delta is None or item_id is None:
            return
        kind, index = part
        last = self._open_reasoning.get(item_id)
        if last is None:
            out.append(ReasoningMessageStartEvent(message_id=item_id))
        elif not isinstance(index, int):
            kind, index = last  # a delta that names no part continues the last one
        elif (kind, index) != last:
            # A new part of the same item: a paragraph of its own (see the header).
            out.append(ReasoningMessageContentEvent(message_id=item_id, delta=_PART_BREAK))
        self._open_reasoning[item_id] = (kind, index)
        out.append(ReasoningMessageContentEvent(message_id=item_id, delta=delta))

    def _close_messages(self, out: list[Event]) -> None:
        out.extend(ReasoningMessageEndEvent(message_id=i) for i in self._open_reasoning)
        self._open_reasoning.clear()
        out.extend(TextMessageEndEvent(message_id=i) for i in self._open_texts)
        self._open_texts.clear()


def _usage(chunk: dict[str, Any]) -> list[TokenUsage] | None:
    """The tokens the response that ``chunk`` ends used (its ``usage``), if it says."""
    response = chunk.get("response")
    if not isinstance(response, dict):
        return None
    return token_usage(response.get("usage"), response.get("model"))


# --- the backend ---------------------------------------------------------------------------------


class OpenAIResponsesBackend(OpenAIBase):
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

    def _init_state(self) -> None:
        self._phases: Recent[str] = Recent(_MAX_PHASES)

    def new_translator(self) -> OpenAIResponsesTranslator:
        return OpenAIResponsesTranslator(
            fallback_message_id=f"msg_{uuid.uuid4().hex}", phases=self._phases
        )

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
            case AssistantMessage(id=message_id, content=content, tool_calls=tool_calls):
                items: list[dict[str, Any]] = []
                if content:
                    item = {"type": "message", "role": "assistant", "content": content}
                    phase = self._phases.get(message_id)
                    if phase is not None:  # the label the API gave it, back as it was
                        item["phase"] = phase
                    items.append(item)
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
                    parts.append({"type": "input_image", "image_url": data_url(source)})
                case ImagePart(source=FileSource(value=file_id)):
                    parts.append({"type": "input_image", "file_id": file_id})
                case _:
                    raise unsupported_part(self.name, part, "a user message")
        return parts
