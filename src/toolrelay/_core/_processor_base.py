"""The processor's entry point for the stream: :meth:`ProcessorBase.receive`, its
hot path for text and argument deltas, and the dispatch of every other event to its
handler (``_HANDLERS``, filled where :class:`~toolrelay.sansio.EventProcessor` assembles
the handlers). The base joins the lifecycle and the accounting of limits over the
processor's state."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from operator import attrgetter
from typing import Any

import msgspec

from toolrelay._core._conversation import ToolCallInfo
from toolrelay._core._effects import (
    NO_EFFECTS,
    Effect,
)
from toolrelay._core._processor_lifecycle import TurnLifecycle
from toolrelay._core._processor_limits import LimitsAccounting
from toolrelay._core._processor_state import _STREAMING, keyed
from toolrelay._core._tool_result import ToolResult
from toolrelay._errors import LimitExceededError, RemoteProtocolError
from toolrelay._machines import ToolCallEvent
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.protocol import (
    Event,
    ReasoningMessageChunkEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    UnknownEvent,
)

__all__ = ("ProcessorBase",)

logger = logging.getLogger("toolrelay.core")


class ProcessorBase(TurnLifecycle, LimitsAccounting):
    """What every event handler stands on; see :class:`~toolrelay.sansio.EventProcessor`."""

    __slots__ = ()

    def receive(self, event: Event | UnknownEvent) -> Sequence[Effect]:
        """Process one decoded event of the current run's stream.

        Returns:
            The effects for the runtime; the shared empty tuple for most events.
            :class:`ToolsReady`, :class:`TurnCompleted` or :class:`TurnEnded` end the run.

        Raises:
            Exception: Only for a bug: the turn is moved to ``failed`` first.
        """
        # The hot path (promise 8 and the benchmark's 3x-the-decoder bound): a text or
        # argument delta for a message or call that is open, with every bound still
        # far away, is one id compare, one countdown and one list append. Anything
        # else, or any doubt, takes the full path below, which does the same for it.
        cls = type(event)
        if cls is TextMessageContentEvent:
            content: TextMessageContentEvent = event  # type: ignore[assignment]
            # Deltas come in long runs for one message: compare with the last id (a
            # fresh string's hash would be computed for a dict lookup). The id is None
            # while the hot path is closed.
            if content.message_id == self._hot_text_id or self._hot_text(content.message_id):
                left = self._left
                delta = content.delta
                chars = self._text_hot_chars + len(delta)
                if left > 0 and chars <= self._text_hot_budget:
                    self._left = left - 1
                    self._text_hot_chars = chars
                    if delta:
                        self._hot_text_add(delta)
                    return ()  # NO_EFFECTS, as a constant
        elif cls is ToolCallArgsEvent:
            args: ToolCallArgsEvent = event  # type: ignore[assignment]
            if args.tool_call_id == self._hot_call_id or self._hot_call(args.tool_call_id):
                left = self._left
                delta = args.delta
                chars = self._arg_chars + len(delta)
                if left > 0 and chars <= self._arg_char_safe:
                    self._left = left - 1
                    self._arg_chars = chars
                    if delta:
                        self._hot_call_add(delta)
                    return ()  # NO_EFFECTS, as a constant
        # The full path may close the hot message or call, end the run or open a
        # *_CHUNK stream: the next delta asks _hot_text / _hot_call again.
        self._hot_text_id = self._hot_call_id = None
        return self._receive(event)

    def receive_many(
        self, events: Sequence[Event | UnknownEvent], start: int = 0
    ) -> tuple[Sequence[Effect], int]:
        """Process ``events[start:]`` in order, up to the first event that has effects.

        Exactly what calling :meth:`receive` on each event in turn does, stopping after
        the first one whose effects are not empty; made for a backend that hands over a
        read's events at once. The consecutive text (or argument) deltas for one open
        message (or call) are taken together: no method call per delta, the bounds
        checked once for all of them (delta by delta only when one is near), and their
        text kept as one chunk. Call it again from the index it returns, after acting
        on the effects, until that index is ``len(events)``::

            position = 0
            while position < len(events):
                effects, position = processor.receive_many(events, position)
                ...  # act on the effects, as after receive

        Returns:
            The first non-empty effects (the shared empty tuple when no event had any)
            and the index after the event that produced them (``len(events)`` when
            none did).

        Raises:
            Exception: Only for a bug, as :meth:`receive`: the events before the one
                that raised were processed, and the turn is moved to ``failed`` first.
        """
        end = len(events)
        position = start
        while position < end:
            event = events[position]
            position += 1
            cls = type(event)
            # receive's hot path, for the whole run of deltas for one message (or call)
            # that starts here: its bounds checked once, its deltas joined.
            if cls is TextMessageContentEvent:
                content: TextMessageContentEvent = event  # type: ignore[assignment]
                hot = content.message_id
                if hot == self._hot_text_id or self._hot_text(hot):
                    first = position - 1
                    parts, position = _run_of_deltas(
                        events,
                        position,
                        end,
                        hot,
                        content.delta,
                        TextMessageContentEvent,
                        _MESSAGE_ID,
                    )
                    event, position, self._text_hot_chars = self._take_deltas(
                        events,
                        first,
                        position,
                        parts,
                        self._text_hot_chars,
                        self._text_hot_budget,
                        self._hot_text_add,
                    )
                    if event is None:
                        continue
            elif cls is ToolCallArgsEvent:
                args: ToolCallArgsEvent = event  # type: ignore[assignment]
                hot = args.tool_call_id
                if hot == self._hot_call_id or self._hot_call(hot):
                    first = position - 1
                    parts, position = _run_of_deltas(
                        events, position, end, hot, args.delta, ToolCallArgsEvent, _CALL_ID
                    )
                    event, position, self._arg_chars = self._take_deltas(
                        events,
                        first,
                        position,
                        parts,
                        self._arg_chars,
                        self._arg_char_safe,
                        self._hot_call_add,
                    )
                    if event is None:
                        continue
            self._hot_text_id = self._hot_call_id = None
            effects = self._receive(event)
            if effects:
                return effects, position
        return NO_EFFECTS, end

    def _take_deltas(
        self,
        events: Sequence[Event | UnknownEvent],
        first: int,
        position: int,
        parts: list[str],
        chars: int,
        budget: int,
        add: Callable[[str], None],
    ) -> tuple[Any, int, int]:
        """Take one message's (or call's) run of deltas, ``events[first:position]``
        with their ``parts``, as receive's hot path would: joined, when the events left
        to the run and the characters (``chars`` so far, at most ``budget``) allow them
        all; otherwise delta by delta up to the one that passes a bound. Returns the
        event the full path must take (``None`` when all were taken), the position
        after it and the characters taken."""
        joined = "".join(parts)
        left = self._left
        total = chars + len(joined)
        if len(parts) <= left and total <= budget:
            self._left = left - len(parts)
            if joined:
                add(joined)
            return None, position, total
        event, position, self._left, chars = _until_a_bound(events, first, left, chars, budget, add)
        return event, position, chars

    def _receive(self, event: Event | UnknownEvent) -> Sequence[Effect]:
        if self._ended:
            if not self._wire_ended:
                # The turn was ended here (cancel, limit, end_stream...), not by the
                # stream: what the stream still sends is not its fault.
                return NO_EFFECTS
            return self._violation(
                "event_after_run_end",
                _type_of(event),
                "event after RUN_FINISHED/RUN_ERROR dropped",
            )
        try:
            if self._left <= 0:
                raise LimitExceededError("max_events_per_run", self._limits.max_events_per_run)
            self._left -= 1
            if (
                self._chunk_call is not None
                or self._chunk_text is not None
                or self._chunk_reasoning is not None
            ):
                cls = type(event)
                if cls is not ToolCallChunkEvent:
                    self._close_tool_chunk()
                if cls is not TextMessageChunkEvent:
                    self._close_text_chunk()
                if cls is not ReasoningMessageChunkEvent:
                    self._close_reasoning_chunk()
            handler = _HANDLERS.get(type(event))
            if handler is None:
                if isinstance(event, UnknownEvent):
                    logger.debug("ignoring unknown AG-UI event type %r", event.type)
                effects: Sequence[Effect] = NO_EFFECTS
            else:
                effects = handler(self, event)
            # What settled is reported with the effects (_with_settled, inline: most
            # events settle nothing).
            return self._with_settled(effects) if self._settled else effects
        except RemoteProtocolError as exc:
            return self.fail(exc.reason)
        except RecursionError:
            # Nesting that some walk (ours or a library's) could not take: the agent
            # sent it, so it is malformed input, not a bug here (promise 11).
            return self.fail(
                LimitExceededError(
                    "max_json_depth",
                    self._limits.max_json_depth,
                    f"{_type_of(event)} nested too deep to process",
                ).reason
            )
        except Exception as exc:
            self.fail(
                TerminalReason(
                    kind=ReasonKind.INTERNAL_ERROR,
                    message=f"error while processing {_type_of(event)}: {exc!r}",
                )
            )
            raise

    def _hot_text(self, message_id: str) -> bool:
        """Make ``message_id`` the hot path's message, if it may be: the message is open,
        the run is, and no *_CHUNK stream waits to be closed by the next event.

        The hot ids are forgotten whenever any of that may change: at every event of
        the full path, and by the two methods that change it from outside receive
        (_end, which ends the turn; _reset_run, which opens a run). Outside
        receive, calls change status only there or once they have left ``streaming``
        (record_result, approve, deny), so none of them is the hot call. The adder is
        the message's (call's) own, asked for here rather than kept per open message
        (call): a bound method is one more object for the cycle collector to walk.
        """
        text = self._open_texts.get(message_id)
        if text is None or not self._hot_allowed():
            return False
        self._hot_text_id = message_id
        self._hot_text_add = text.adder
        return True

    def _hot_call(self, call_id: str) -> bool:
        """Like :meth:`_hot_text`, for a streaming call's arguments."""
        call = self._calls.get(call_id)
        if call is None or call.status is not _STREAMING or not self._hot_allowed():
            return False
        self._hot_call_id = call_id
        self._hot_call_add = call.argument_adder
        return True

    def _hot_allowed(self) -> bool:
        return not self._ended and (
            self._chunk_call is None and self._chunk_text is None and self._chunk_reasoning is None
        )

    def _agent_result(
        self,
        call: ToolCallInfo,
        content: object,
        message_id: str,
        where: str,
        error: str | None = None,
    ) -> Sequence[Effect]:
        """``call`` (still calling) has the result the agent gave it (``content``, sent
        back under ``message_id``): it ran on the agent's side and is not executed here.
        """
        if isinstance(content, str):
            text = content
        else:
            self._check_depth(content, f"{where} content")
            text = msgspec.json.encode(content).decode()
        self._count_text(text, result=True)
        self._send_call(call, ToolCallEvent.receive_result)
        self._calling_stopped(call)
        call.result = ToolResult.success(text) if error is None else ToolResult(text, error=error)
        self._result_ids = keyed(self._result_ids, call.id, message_id)
        return self._calling_activity()


def _until_a_bound(
    events: Sequence[Event | UnknownEvent],
    position: int,
    left: int,
    chars: int,
    budget: int,
    add: Callable[[str], None],
) -> tuple[Any, int, int, int]:
    """The deltas from ``position`` (a run of one message's text or one call's
    arguments) one by one, as receive's hot path takes them, up to the first that a
    bound refuses (the run is known to hold one). Returns that delta's event, the
    position after it, and the events left and the characters taken."""
    while True:
        event: Any = events[position]
        position += 1
        delta = event.delta
        more = chars + len(delta)
        if left <= 0 or more > budget:
            return event, position, left, chars
        left -= 1
        chars = more
        if delta:
            add(delta)


def _text_deltas(events: Sequence[Any], hot: str) -> list[str]:
    """The deltas of ``events`` that are text deltas for message ``hot``."""
    return [e.delta for e in events if type(e) is TextMessageContentEvent and e.message_id == hot]


def _args_deltas(events: Sequence[Any], hot: str) -> list[str]:
    """The deltas of ``events`` that are argument deltas for call ``hot``."""
    return [e.delta for e in events if type(e) is ToolCallArgsEvent and e.tool_call_id == hot]


_MESSAGE_ID = attrgetter("message_id")
_CALL_ID = attrgetter("tool_call_id")
_DELTAS: dict[type[Any], Callable[[Sequence[Any], str], list[str]]] = {
    TextMessageContentEvent: _text_deltas,
    ToolCallArgsEvent: _args_deltas,
}

#: How many deltas of a run receive_many takes one by one before it takes the rest at
#: once, when more than _LONG_REST events are left in the batch (a short run, and any
#: run in a small read, costs less in the plain loop than in a bisection).
_SHORT_RUN = 16
_LONG_REST = 64

#: The first stretch of a run's rest checked at once (then twice as many each time).
_FIRST_STRETCH = 32


def _run_of_deltas(
    events: Sequence[Any],
    position: int,
    end: int,
    hot: str,
    delta: str,
    kind: type[Any],
    key: Callable[[Any], str],
) -> tuple[list[str], int]:
    """A run of deltas of ``kind`` for id ``hot`` (read by ``key``) whose first,
    ``delta``, is the event before ``position``: every delta of the run and the
    position after it. The run's first deltas are taken one by one (most runs in small
    reads are short); past ``_SHORT_RUN``, the rest at once (:func:`_rest_of_run`)."""
    parts = [delta]
    add = parts.append
    short = end if end - position <= _LONG_REST else position + _SHORT_RUN
    while position < short:
        following = events[position]
        if type(following) is not kind or key(following) != hot:
            return parts, position
        add(following.delta)
        position += 1
    if position < end:
        rest, position = _rest_of_run(events, position, end, hot, kind, key)
        parts += rest
    return parts, position


def _rest_of_run(
    events: Sequence[Event | UnknownEvent],
    start: int,
    end: int,
    hot: str,
    kind: type[Any],
    key: Callable[[Any], str],
) -> tuple[list[str], int]:
    """The rest of a run of deltas of ``kind`` for id ``hot`` (read by ``key``) whose
    event before ``start`` is one of them: the deltas from ``start`` on and the
    position after the run.

    Its end is first guessed by bisection, as if the run were one block (about ten
    probes for a read), then the events up to it are checked by a comprehension that
    also takes the deltas, in stretches that double: no Python loop step per delta.
    An event of another kind or id inside a stretch (the guess was wrong: deltas for
    this id come back later) ends the run there; the stretches bound what is read past
    it to the run's own length."""
    low, high = start - 1, end
    while high - low > 1:
        middle = (low + high) >> 1
        probe = events[middle]
        if type(probe) is kind and key(probe) == hot:
            low = middle
        else:
            high = middle
    deltas = _DELTAS[kind]
    parts: list[str] = []
    size = _FIRST_STRETCH
    while start < high:
        stop = min(start + size, high)
        taken = deltas(events[start:stop], hot)
        if len(taken) != stop - start:
            at = start
            while type(probe := events[at]) is kind and key(probe) == hot:
                at += 1
            # The first deltas taken are those of the events before the intruder.
            parts += taken[: at - start]
            return parts, at
        parts += taken
        start = stop
        size *= 2
    return parts, high


def _type_of(event: Event | UnknownEvent) -> str:
    if isinstance(event, UnknownEvent):
        return event.type
    tag = type(event).__struct_config__.tag
    return str(tag)


_Handler = Callable[[Any, Any], Sequence[Effect]]

#: The handler of each event type (filled where the handlers are assembled).
_HANDLERS: dict[type[Any], _Handler] = {}
