"""A thread's log read as AG-UI events: the one translation every stream uses.

Every SSE event the server sends is derived from a committed record and carries its
sequence number as its ``id`` (``event_ids`` in ``_sse``), so catch-up is the same fold
over the same records, started later (docs/concepts.md, "The stream is the log").

:class:`LogFeed` folds records in order and answers each with the events it means:

==================  =============================================================
record              events
==================  =============================================================
``TurnStarted``     ``RUN_STARTED`` (``runId``: the turn id)
``MessageSaved``    an assistant text: ``TEXT_MESSAGE_START/CONTENT/END``;
                    reasoning: ``REASONING_*``; a committed tool batch: the calls
                    and results not shown yet. The user's own messages: nothing
                    (the client sent them)
``ToolsStarted``    ``TOOL_CALL_START/ARGS/END`` for every call of the batch (and
                    ``TOOL_CALL_RESULT`` for those the model resolved itself)
``ToolFinished``    ``TOOL_CALL_RESULT`` (not for a call handed over to the
                    client: it has the result it sent; but for the "interrupted"
                    result recovery gives such a call, which the client did not)
``StateSaved``      ``STATE_SNAPSHOT``
``TurnEnded``       completed: ``RUN_FINISHED`` whose ``result`` is
                    ``{"stopReason": ...}``, preceded by the ``toolrelay.stop``
                    ``CUSTOM`` event when the server stopped the loop
                    (``max_tool_rounds``, ``tool_use``); interrupted:
                    ``RUN_FINISHED`` with the ``interrupt`` outcome; otherwise
                    ``RUN_ERROR`` (``code``: the reason's kind)
==================  =============================================================

Client tools: once every server call of a batch has its result and calls of the
client's tools are still open, the AG-UI run ends there (``RUN_FINISHED``, outcome
``success`` with ``pendingToolCallIds``, ``stopReason`` ``client_tools``): the
client runs them and posts the results, and the next record of the turn opens a new
AG-UI run (``runId``: ``<turn id>.<n>``). A batch hands over once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from toolrelay._reasons import ReasonKind
from toolrelay._runtime import INTERRUPTED
from toolrelay.protocol import (
    CustomEvent,
    Event,
    Interrupt,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)
from toolrelay.store import (
    Entry,
    MessageSaved,
    StateSaved,
    StoredCall,
    ToolFinished,
    ToolsStarted,
    TurnEnded,
    TurnStarted,
)
from toolrelay.store._records import StoredBatch, StoredReasoning, StoredText

__all__ = ("STOP_EVENT", "LogFeed", "StopReason", "result_message_id")

#: The ``CUSTOM`` event's name that says the server stopped the tool loop.
STOP_EVENT = "toolrelay.stop"


class StopReason:
    """Why a completed turn stopped (``RUN_FINISHED.result.stopReason``)."""

    #: The model answered: its last run asked for no tool.
    END_TURN = "end_turn"
    #: ``max_tool_rounds`` tool rounds ran; the model was not called again.
    MAX_TOOL_ROUNDS = "max_tool_rounds"
    #: Continuation is switched off: the turn stopped after its first tool round.
    TOOL_USE = "tool_use"
    #: The AG-UI run ended with calls of the client's tools pending (the turn goes
    #: on when the client posts their results).
    CLIENT_TOOLS = "client_tools"


#: Stop reasons the server decides (the ones a ``CUSTOM`` event announces).
SERVER_STOPS = frozenset({StopReason.MAX_TOOL_ROUNDS, StopReason.TOOL_USE})


def result_message_id(call_id: str) -> str:
    """The ``messageId`` of the ``TOOL_CALL_RESULT`` for ``call_id`` (stable)."""
    return f"result-{call_id}"


@dataclass(slots=True)
class _Batch:
    calls: dict[str, StoredCall]
    open_server: set[str]
    open_client: set[str]
    handed_over: bool = False

    def copy(self) -> _Batch:
        return _Batch(
            dict(self.calls), set(self.open_server), set(self.open_client), self.handed_over
        )


@dataclass(slots=True)
class _TurnView:
    turn_id: str
    runs: int = 0  # AG-UI runs opened for the turn
    rounds: int = 0  # tool batches started
    announced: set[str] = field(default_factory=set)
    resulted: set[str] = field(default_factory=set)
    shown: set[str] = field(default_factory=set)  # message ids shown
    handed: set[str] = field(default_factory=set)  # calls handed over to the client
    batch: _Batch | None = None

    def copy(self) -> _TurnView:
        return _TurnView(
            self.turn_id,
            runs=self.runs,
            rounds=self.rounds,
            announced=set(self.announced),
            resulted=set(self.resulted),
            shown=set(self.shown),
            handed=set(self.handed),
            batch=None if self.batch is None else self.batch.copy(),
        )


class LogFeed:
    """Folds one thread's log into AG-UI events (see the module docstring).

    Args:
        thread_id: The AG-UI ``threadId`` the events carry.
        is_client_tool: Whether a call of ``name`` in turn ``turn_id`` is one of the
            client's tools (called as ``is_client_tool(turn_id, name)``).
    """

    __slots__ = ("_is_client_tool", "_run_id", "_turn", "interrupts", "position", "thread_id")

    def __init__(
        self,
        thread_id: str,
        is_client_tool: Callable[[str, str], bool],
        *,
        _standing: tuple[int, str | None, _TurnView | None, tuple[Interrupt, ...]] = (
            0,
            None,
            None,
            (),
        ),
    ) -> None:
        # ``_standing`` (position, open run, turn, interrupts) is for :meth:`copy` alone.
        position, run_id, turn, interrupts = _standing
        self.thread_id = thread_id
        self._is_client_tool = is_client_tool
        self._turn = turn
        self._run_id = run_id  # the open AG-UI run, if any
        #: The sequence number of the last record folded.
        self.position = position
        #: The interrupts the thread waits to have answered at :attr:`position`: those
        #: of its last turn that ended ``interrupted``, until a later one ends
        #: ``completed`` or ``interrupted`` (the engine's rule, read from the log:
        #: ``()`` for a thread the log does not have).
        self.interrupts = interrupts

    @property
    def run_open(self) -> bool:
        """Whether an AG-UI run is open (started, not finished) at :attr:`position`."""
        return self._run_id is not None

    @property
    def open_run_id(self) -> str | None:
        """The ``runId`` of the AG-UI run open at :attr:`position`, if one is."""
        return self._run_id

    @property
    def turn_id(self) -> str | None:
        """The turn the last record belonged to."""
        return self._turn.turn_id if self._turn is not None else None

    def copy(self) -> LogFeed:
        """An independent feed standing where this one stands (O(the current turn))."""
        turn = None if self._turn is None else self._turn.copy()
        return LogFeed(
            self.thread_id,
            self._is_client_tool,
            _standing=(self.position, self._run_id, turn, self.interrupts),
        )

    def pending_client_calls(self) -> list[str]:
        """The client's calls the thread waits for: those of a batch handed over to the
        client (its AG-UI run ended) that have no result yet while its turn is live, in
        the batch's order."""
        batch = self._handed_batch()
        if batch is None:
            return []
        return [call_id for call_id in batch.calls if call_id in batch.open_client]

    def handed_calls(self) -> list[str]:
        """Every call of the batch handed over to the client (its server calls too), in
        the batch's order, while the thread waits for the client; empty otherwise."""
        batch = self._handed_batch()
        return [] if batch is None else list(batch.calls)

    def _handed_batch(self) -> _Batch | None:
        """The current turn's batch, if it was handed over to the client."""
        turn = self._turn
        batch = turn.batch if turn is not None else None
        return batch if batch is not None and batch.handed_over else None

    def resume_events(self) -> list[Event]:
        """What a stream that starts at :attr:`position` sends first: ``RUN_STARTED``
        of the open run, when a run is open there (nothing otherwise)."""
        if self._run_id is None:
            return []
        return [RunStartedEvent(thread_id=self.thread_id, run_id=self._run_id)]

    def feed(self, entry: Entry) -> list[Event]:
        """The events ``entry`` means, given every entry before it."""
        self.position = entry.seq
        record = entry.record
        out: list[Event] = []
        if not record.turn_id:
            # History the client supplied with the thread's first turn: the client's own.
            return out
        match record:
            case TurnStarted(turn_id=turn_id):
                if self._run_id is not None:
                    # A turn left without an end (superseded before it was written).
                    out.append(RunErrorEvent(message="a newer turn took over", code="superseded"))
                    self._run_id = None
                self._turn = _TurnView(turn_id)
                self._open(out)
            case MessageSaved(turn_id=turn_id, message=message):
                turn = self._turn_for(turn_id)
                if isinstance(message, StoredText):
                    if message.role == "assistant" and message.id not in turn.shown:
                        self._open(out)
                        turn.shown.add(message.id)
                        out.extend(_text(message))
                elif isinstance(message, StoredReasoning):
                    if message.id not in turn.shown:
                        self._open(out)
                        turn.shown.add(message.id)
                        out.extend(_reasoning(message))
                elif isinstance(message, StoredBatch):
                    calls = [c for c in message.calls if c.id not in turn.resulted]
                    if calls:
                        self._open(out)
                        for call in calls:
                            self._announce(turn, call, out)
                            if call.result is not None:
                                self._result(turn, call.id, call.result.content, out)
                    turn.batch = None
            case ToolsStarted(turn_id=turn_id, calls=calls):
                turn = self._turn_for(turn_id)
                turn.rounds += 1
                self._open(out)
                batch = _Batch({c.id: c for c in calls}, set(), set())
                for call in calls:
                    self._announce(turn, call, out)
                    if call.result is not None:
                        self._result(turn, call.id, call.result.content, out)
                    elif self._is_client_tool(turn_id, call.name):
                        batch.open_client.add(call.id)
                    else:
                        batch.open_server.add(call.id)
                turn.batch = batch
                self._maybe_hand_over(turn, out)
            case ToolFinished(turn_id=turn_id, call_id=call_id, result=result):
                turn = self._turn_for(turn_id)
                self._open(out)
                if call_id in turn.handed and result != INTERRUPTED:
                    # The client's own result: it has it (and the call belongs to the
                    # AG-UI run that handed it over). Recovery's "interrupted" result
                    # is not the client's: the client learns from it that the call no
                    # longer waits for it.
                    turn.resulted.add(call_id)
                else:
                    self._result(turn, call_id, result.content, out)
                current = turn.batch
                if current is not None:
                    current.open_server.discard(call_id)
                    current.open_client.discard(call_id)
                    self._maybe_hand_over(turn, out)
            case StateSaved(turn_id=turn_id, state=state):
                self._turn_for(turn_id)
                self._open(out)
                out.append(StateSnapshotEvent(snapshot=state))
            case TurnEnded():
                turn = self._turn_for(record.turn_id)
                self._open(out)
                out.extend(self._end(record))
                self._run_id = None
                turn.batch = None  # nothing waits for the client any more
                if record.status == "interrupted":
                    self.interrupts = record.interrupts
                elif record.status == "completed":
                    self.interrupts = ()
        return out

    # -- helpers --------------------------------------------------------------------

    def _turn_for(self, turn_id: str) -> _TurnView:
        turn = self._turn
        if turn is None or turn.turn_id != turn_id:
            # A log read from the middle of a turn (or a record of a turn whose start
            # the feed did not see): start a view of it.
            turn = self._turn = _TurnView(turn_id)
        return turn

    def _open(self, out: list[Event]) -> None:
        """Open an AG-UI run for the current turn unless one is open."""
        if self._run_id is not None:
            return
        turn = self._turn
        assert turn is not None
        run_id = turn.turn_id if turn.runs == 0 else f"{turn.turn_id}.{turn.runs}"
        turn.runs += 1
        self._run_id = run_id
        out.append(RunStartedEvent(thread_id=self.thread_id, run_id=run_id))

    def _announce(self, turn: _TurnView, call: StoredCall, out: list[Event]) -> None:
        if call.id in turn.announced:
            return
        turn.announced.add(call.id)
        out.append(
            ToolCallStartEvent(
                tool_call_id=call.id,
                tool_call_name=call.name,
                parent_message_id=call.parent_message_id,
            )
        )
        out.append(ToolCallArgsEvent(tool_call_id=call.id, delta=call.arguments or "{}"))
        out.append(ToolCallEndEvent(tool_call_id=call.id))

    def _result(self, turn: _TurnView, call_id: str, content: str, out: list[Event]) -> None:
        if call_id in turn.resulted:
            return
        turn.resulted.add(call_id)
        out.append(
            ToolCallResultEvent(
                message_id=result_message_id(call_id),
                tool_call_id=call_id,
                content=content,
                role="tool",
            )
        )

    def _maybe_hand_over(self, turn: _TurnView, out: list[Event]) -> None:
        batch = turn.batch
        if batch is None or batch.handed_over or batch.open_server or not batch.open_client:
            return
        batch.handed_over = True
        pending = [call_id for call_id in batch.calls if call_id in batch.open_client]
        turn.handed.update(pending)
        assert self._run_id is not None
        out.append(
            RunFinishedEvent(
                thread_id=self.thread_id,
                run_id=self._run_id,
                result={"stopReason": StopReason.CLIENT_TOOLS, "pendingToolCallIds": pending},
                outcome=RunFinishedSuccessOutcome(pending_tool_call_ids=pending),
            )
        )
        self._run_id = None

    def _end(self, record: TurnEnded) -> list[Event]:
        run_id = self._run_id
        assert run_id is not None
        reason = record.reason
        if record.status == "completed":
            stop = reason.code if reason.code in SERVER_STOPS else StopReason.END_TURN
            turn = self._turn
            rounds = turn.rounds if turn is not None else 0
            events: list[Event] = []
            result: dict[str, Any] = {"stopReason": stop, "rounds": rounds}
            if stop in SERVER_STOPS:
                events.append(
                    CustomEvent(
                        name=STOP_EVENT,
                        value={"stopReason": stop, "rounds": rounds, "message": reason.message},
                    )
                )
            events.append(RunFinishedEvent(thread_id=self.thread_id, run_id=run_id, result=result))
            return events
        if record.status == "interrupted" and record.interrupts:
            return [
                RunFinishedEvent(
                    thread_id=self.thread_id,
                    run_id=run_id,
                    outcome=RunFinishedInterruptOutcome(interrupts=list(record.interrupts)),
                )
            ]
        kind = reason.kind.value if isinstance(reason.kind, ReasonKind) else str(reason.kind)
        return [RunErrorEvent(message=reason.message, code=kind)]


def _text(message: StoredText) -> list[Event]:
    events: list[Event] = [TextMessageStartEvent(message_id=message.id, role="assistant")]
    if message.text:
        events.append(TextMessageContentEvent(message_id=message.id, delta=message.text))
    events.append(TextMessageEndEvent(message_id=message.id))
    return events


def _reasoning(message: StoredReasoning) -> list[Event]:
    events: list[Event] = [
        ReasoningStartEvent(message_id=message.id),
        ReasoningMessageStartEvent(message_id=message.id),
    ]
    if message.text:
        events.append(ReasoningMessageContentEvent(message_id=message.id, delta=message.text))
    events.append(ReasoningMessageEndEvent(message_id=message.id))
    if message.encrypted_value:
        events.append(
            ReasoningEncryptedValueEvent(
                subtype="message", entity_id=message.id, encrypted_value=message.encrypted_value
            )
        )
    events.append(ReasoningEndEvent(message_id=message.id))
    return events
