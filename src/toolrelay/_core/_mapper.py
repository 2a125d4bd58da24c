"""Conversation -> AG-UI messages for the next run's ``RunAgentInput.messages``.

Strict in what we send (AG-UI "Conventions of the wire"):

- A :class:`ToolCallBatch` becomes one ``assistant`` message carrying ``toolCalls``
  followed by one ``tool`` message per call, in the order the agent streamed them.
  Completed and failed calls alike get a ``tool`` message (a failed call's content
  is the error text, so the model sees it; promise 2).
- A call the agent ran itself, in an assistant message of its own, goes back where
  the stream had it (``ToolCallBatch.before``): that message with its result after
  it, before the run's text that followed. The calls toolrelay ran stay last, their
  results the trailing messages, as the official client sends them; every
  ``toolCalls`` message is followed by its results, as providers require.
- Empty arguments are sent as ``"{}"`` (a zero-argument tool streams no ARGS).
- When the calls name, as ``parentMessageId``, the assistant text message just
  before them, the text and the calls are sent as ONE assistant message (content
  and ``toolCalls``), as OpenAI-shaped servers expect.
- Two messages never share an id. A record toolrelay built whose id is already taken
  (a ``parentMessageId`` naming an earlier message, an agent reusing a ``messageId``)
  is sent under the first free id of ``<id>-2``, ``<id>-3``...; messages the
  embedding code supplied keep theirs.
- Streamed text becomes a message of its role. Reasoning is kept locally and not
  sent back unless asked (servers on AG-UI < 1.0 reject the ``reasoning`` role).
- Messages the embedding code supplied as AG-UI messages pass through unchanged.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import msgspec

from toolrelay._core._conversation import (
    ChatMessage,
    Conversation,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
)
from toolrelay._core._shared import NO_ITEMS, NO_KEYS, keyed
from toolrelay._machines import TOOL_CALL_MACHINE
from toolrelay.protocol import (
    AssistantMessage,
    DeveloperMessage,
    FunctionCall,
    Message,
    ReasoningMessage,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)

__all__ = (
    "ConversationMapper",
    "conversation_to_agui",
    "to_agui_messages",
    "tool_call_to_agui",
)


def tool_call_to_agui(call: ToolCallInfo) -> ToolCall:
    """The wire ``ToolCall`` of ``call``, with empty arguments sent as ``"{}"``."""
    arguments = call.arguments
    if not arguments.strip():
        arguments = "{}"
    function = FunctionCall(name=call.name, arguments=arguments)
    if call.encrypted_value is not None:
        return ToolCall(id=call.id, function=function, encrypted_value=call.encrypted_value)
    return ToolCall(id=call.id, function=function)


def _text_to_agui(message: TextMessage, id: str) -> Message:
    text = message.text
    match message.role:
        case "user":
            return UserMessage(id=id, content=text)
        case "system":
            return SystemMessage(id=id, content=text)
        case "developer":
            return DeveloperMessage(id=id, content=text)
        case _:
            return AssistantMessage(id=id, content=text)


def to_agui_messages(
    messages: Iterable[ChatMessage], *, include_reasoning: bool = False
) -> list[Message]:
    """Map a conversation to the AG-UI messages a continuation run sends.

    Args:
        messages: The conversation's messages, oldest first.
        include_reasoning: Send reasoning records as ``reasoning`` messages.

    Returns:
        A new list; the conversation is not changed.
    """
    messages = list(messages)
    # Ids of the messages passed through: those are never renamed, so reserve them.
    ids = _Ids(m.id for m in messages if not isinstance(m, _BUILT))
    out: list[Message] = []
    placing = any(isinstance(m, ToolCallBatch) and m.before for m in messages)
    _map_into(out, messages, ids, None, include_reasoning=include_reasoning, placing=placing)
    return out


def _map_into(
    out: list[Message],
    messages: Sequence[ChatMessage],
    ids: _Ids,
    last_id: str | None,
    *,
    include_reasoning: bool,
    placing: bool,
) -> str | None:
    """Append the mapping of ``messages`` to ``out``; returns the new ``last_id``.

    ``last_id`` is the id the agent gave the last message sent, before any renaming:
    what a batch's ``parentMessageId`` names when the text and the calls are one
    message. Every id a passed-through message of the whole conversation uses must
    already be reserved in ``ids``. ``placing``: a batch of ``messages`` places some
    of its calls (``ToolCallBatch.before``); most place none, and skip the look.
    """
    placed = _placements(messages)[0] if placing else NO_KEYS
    for position, message in enumerate(messages):
        if placed and position in placed:
            for group, fallback in placed[position]:
                _append_calls(out, group, ids, last_id, fallback)
                last_id = None
        if isinstance(message, TextMessage):
            out.append(_text_to_agui(message, ids.claim(message.id)))
            last_id = message.id
        elif isinstance(message, ToolCallBatch):
            if _append_tool_batch(out, message, ids, last_id):
                last_id = None
        elif isinstance(message, ReasoningRecord):
            if include_reasoning:
                out.append(
                    ReasoningMessage(
                        id=ids.claim(message.id),
                        content=message.text,
                        encrypted_value=message.encrypted_value,
                    )
                )
                last_id = None
        else:
            out.append(message)
            last_id = message.id
    return last_id


def conversation_to_agui(
    conversation: Conversation, *, include_reasoning: bool = False
) -> list[Message]:
    """``to_agui_messages(conversation.messages)``, through the conversation's own
    :class:`ConversationMapper`, so that each run maps only what is new.

    The mapper lives in a slot of the conversation that this module alone fills: the
    conversation empties it when its history is edited, and never needs to know what
    it holds, so the import runs one way. One mapper, not one per
    ``include_reasoning`` (a thread's runs all map it the same way): asked the other
    way, the slot gets a mapper for that way, which maps the thread afresh.
    """
    mapper = conversation._mapping
    if not isinstance(mapper, ConversationMapper) or mapper.include_reasoning != include_reasoning:
        mapper = conversation._mapping = ConversationMapper(include_reasoning=include_reasoning)
    return mapper.map(conversation.messages)


class _Ids:
    """The message ids of one mapping: reserved (passed-through) and claimed (built)."""

    __slots__ = ("_last_suffix", "_taken")

    def __init__(self, reserved: Iterable[str] = ()) -> None:
        # Every id taken, reserved (True) or claimed (False): a dict of strings, not
        # tracked by the cycle collector.
        self._taken: dict[str, bool] = dict.fromkeys(reserved, True)
        # The last suffix given to each id, so that an agent reusing one id for every
        # message does not make the mapping quadratic (made at the first clash).
        self._last_suffix: dict[str, int] = NO_KEYS

    def reserve(self, supplied: list[str]) -> bool:
        """Reserve more passed-through ids; False (nothing reserved) if one was claimed."""
        taken = self._taken
        if False in map(taken.get, supplied):  # the values are True, False or None
            return False
        taken.update(dict.fromkeys(supplied, True))
        return True

    def claim(self, wanted: str) -> str:
        """``wanted`` if it is free, else the first free ``wanted-2``, ``wanted-3``..."""
        taken = self._taken
        candidate = wanted
        if candidate in taken:
            n = self._last_suffix.get(wanted, 1)
            while True:
                n += 1
                candidate = f"{wanted}-{n}"
                if candidate not in taken:
                    break
            self._last_suffix = keyed(self._last_suffix, wanted, n)
        taken[candidate] = False
        return candidate


class ConversationMapper(_Ids):
    """Maps one growing conversation, each settled message once (promise 8).

    A continuation sends the whole conversation again, so mapping it from scratch
    for every run makes a long thread's runs ever slower to start. This mapper keeps
    what it produced and, when asked again, maps only the messages appended since:
    its result is always equal to :func:`to_agui_messages` of the same messages (a
    property test holds it to that), at the cost of a list copy and an identity
    check of the prefix instead of a full mapping.

    It falls back to a full mapping when the result could differ:

    - the list was not only appended to (a message replaced or removed): start over;
    - a new passed-through message takes an id a built message of the prefix was
      sent under (the full mapping would have renamed that one): start over;
    - a new message is still streaming (a text or reasoning record not complete):
      that call is mapped in full and nothing is kept from it.

    The ids of its mapping are its own (it is their :class:`_Ids`), and what it
    produced is kept as a tuple: AG-UI messages are not tracked by the cycle
    collector, so neither is the tuple, where a list is, and is walked by every
    collection for as long as the thread lives.

    Attributes:
        include_reasoning: Whether reasoning records are sent (``reasoning`` messages).
    """

    __slots__ = ("_last_id", "_out", "_sources", "include_reasoning")

    def __init__(self, *, include_reasoning: bool = False) -> None:
        self.include_reasoning = include_reasoning
        self._restart()

    def _restart(self) -> None:
        super().__init__()
        self._sources: list[ChatMessage] = NO_ITEMS
        self._out: tuple[Message, ...] = ()
        self._last_id: str | None = None

    def map(self, messages: Sequence[ChatMessage]) -> list[Message]:
        """The AG-UI messages of ``messages``, as :func:`to_agui_messages` gives them.

        Returns:
            A new list, which the caller may keep or change.
        """
        if type(messages) is not list:
            messages = list(messages)
        known = len(self._sources)
        # list != list compares item by item with an identity shortcut: the C loop is
        # the only per-message cost of a run that appended nothing new.
        if len(messages) < known or messages[:known] != self._sources:
            self._restart()
            known = 0
        new = messages[known:]
        supplied: list[str] = []
        placing = False
        for message in new:
            if isinstance(message, _STREAMED):
                if not message.complete:
                    return to_agui_messages(messages, include_reasoning=self.include_reasoning)
            elif not isinstance(message, ToolCallBatch):
                supplied.append(message.id)
            elif message.before:
                placing = True
        if placing and known and isinstance(self._sources[-1], _STREAMED) and _placements(new)[1]:
            # A call may go back before a message already mapped (the conversation was
            # mapped while its run's tools ran): map it all again.
            self._restart()
            return self.map(messages)
        if supplied and not self.reserve(supplied):
            self._restart()
            return self.map(messages)
        out = list(self._out)
        self._last_id = _map_into(
            out,
            new,
            self,
            self._last_id,
            include_reasoning=self.include_reasoning,
            placing=placing,
        )
        self._out = tuple(out)
        if known:
            self._sources.extend(new)
        else:
            self._sources = new  # a slice: the mapper's own list
        return out


_BUILT = (TextMessage, ToolCallBatch, ReasoningRecord)
_STREAMED = (TextMessage, ReasoningRecord)
_FINAL = TOOL_CALL_MACHINE.finals


#: Groups of a batch's calls, each sent as one assistant message then its results,
#: with the id its message takes when the calls name none: by the position in the
#: mapped messages they go before.
_Placed = dict[int, list[tuple[list[tuple[ToolCallInfo, str]], str]]]


def _placements(messages: Sequence[ChatMessage]) -> tuple[_Placed, bool]:
    """Where the calls the agent ran go back, for the batches of ``messages`` that
    place some (``ToolCallBatch.before``), and whether one looked for its place among
    messages that reach the start of ``messages`` (the run's messages may go on before
    it: the incremental mapper then maps the whole conversation).

    A call goes before the earliest message of its id among the streamed messages
    just before its batch (the run's text and reasoning); consecutive calls going to
    the same place in the same message make one group, and a call that names no
    message is a group of its own. O(``messages``): each streamed message is looked at
    for one batch at most."""
    placed: _Placed = {}
    open_start = False
    for index, message in enumerate(messages):
        if not isinstance(message, ToolCallBatch) or not message.before:
            continue
        run: dict[str, int] = {}
        first = index
        while first > 0 and isinstance(messages[first - 1], _STREAMED):
            first -= 1
            run[messages[first].id] = first  # walking back: the earliest wins
        previous: tuple[str, str | None] | None = None
        for call, result_id, before in zip(
            message.calls, message.result_message_ids, message.before, strict=True
        ):
            if before is None or call.status not in _FINAL or call.result is None:
                previous = None
                continue
            if before != message.id and first == 0:
                open_start = True
            # Its own id: at the batch's place, even if a message of the run has it too.
            position = index if before == message.id else run.get(before, index)
            parent = call.parent_message_id
            groups = placed.setdefault(position, [])
            # A call that names no message is a message of its own (as the official
            # client makes it), under an id of the batch's: the call's id, which the
            # official client takes, is what some agents name its result by.
            place = None if parent is None else (before, parent)
            if place is not None and place == previous:
                groups[-1][0].append((call, result_id))
            else:
                groups.append(([(call, result_id)], message.id))
            previous = place
    return placed, open_start


def _append_tool_batch(
    out: list[Message], batch: ToolCallBatch, ids: _Ids, last_id: str | None
) -> bool:
    """Append the batch's assistant message and tool messages (its calls that go back
    with it); False if none was sent."""
    before = batch.before
    sent = [
        (call, result_id)
        for i, (call, result_id) in enumerate(
            zip(batch.calls, batch.result_message_ids, strict=True)
        )
        if call.status in _FINAL and call.result is not None and (not before or before[i] is None)
    ]
    if not sent:
        return False
    _append_calls(out, sent, ids, last_id, batch.id)
    return True


def _append_calls(
    out: list[Message],
    sent: list[tuple[ToolCallInfo, str]],
    ids: _Ids,
    last_id: str | None,
    fallback: str,
) -> None:
    """Append one assistant message with the ``sent`` calls (its id their parent's, or
    ``fallback``), then each call's ``tool`` message under its result id."""
    tool_calls = [tool_call_to_agui(call) for call, _ in sent]
    parent = sent[0][0].parent_message_id
    previous = out[-1] if out else None
    if (
        parent is not None
        and parent == last_id
        and isinstance(previous, AssistantMessage)
        and not previous.tool_calls
    ):
        # One assistant message with the text and the calls; its other fields are kept.
        out[-1] = msgspec.structs.replace(previous, tool_calls=tool_calls)
    else:
        out.append(AssistantMessage(id=ids.claim(parent or fallback), tool_calls=tool_calls))
    for call, result_id in sent:
        result = call.result
        assert result is not None
        out.append(
            ToolMessage(
                id=ids.claim(result_id),
                tool_call_id=call.id,
                content=result.content,
                error=result.error,
            )
        )
