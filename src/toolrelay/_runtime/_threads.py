"""What the engine holds of each thread, and how the store fills it in.

Per thread the engine keeps its conversation (in least-recently-used order: the
oldest first, which is what :meth:`ThreadTable.evict` forgets), its latest turn, the
interrupts open before that turn started (absent: not known) and, with a store, its
:class:`~toolrelay._runtime._durable.ThreadLog`. A thread the engine does not hold is
read from the store on its next turn (:meth:`ThreadTable.load`) or, when a crash
left its turn live, by :meth:`ThreadTable.restore` before the turn is resumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from toolrelay._core import ChatMessage, Conversation, ThreadKey
from toolrelay._machines import RunStatus
from toolrelay._runtime._durable import ThreadLog
from toolrelay.protocol import Context, Interrupt
from toolrelay.store import MessageSaved, Store, ThreadHistory, message_to_record, replay

__all__ = ("FailedTurn", "HeldTurn", "ThreadTable", "TurnT")


class HeldTurn(Protocol):
    """What the table reads of a thread's latest turn (a :class:`Turn
    <toolrelay.Turn>`; the table holds turns, it does not drive them)."""

    @property
    def key(self) -> ThreadKey: ...
    @property
    def turn_id(self) -> str: ...
    @property
    def status(self) -> RunStatus: ...
    @property
    def interrupts(self) -> tuple[Interrupt, ...]: ...
    @property
    def finished(self) -> bool: ...
    @property
    def context(self) -> Sequence[Context]: ...
    @property
    def forwarded_props(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class FailedTurn:
    """A thread's last turn, which failed: its id, and the context and forwarded props
    its runs carried (``None``: the engine's), which a retry sends again."""

    turn_id: str | None
    context: tuple[Context, ...] | None
    forwarded_props: Any


#: The turns a table holds.
TurnT = TypeVar("TurnT", bound=HeldTurn)


class ThreadTable(Generic[TurnT]):
    """The engine's memory of its threads (see the module docstring).

    Attributes:
        conversations: Each thread's conversation, least recently used first.
        turns: Each thread's latest turn (live or finished).
        interrupts: The interrupts open before each thread's latest turn started,
            where known (see :meth:`open_interrupts`).
        logs: Each thread's log (with a store only).
    """

    __slots__ = ("conversations", "interrupts", "logs", "store", "turns")

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self.conversations: dict[ThreadKey, Conversation] = {}
        self.turns: dict[ThreadKey, TurnT] = {}
        self.interrupts: dict[ThreadKey, tuple[Interrupt, ...]] = {}
        self.logs: dict[ThreadKey, ThreadLog] = {}

    def open_interrupts(self, key: ThreadKey) -> tuple[Interrupt, ...] | None:
        """The interrupts ``key`` waits to have answered (see
        :meth:`Engine.open_interrupts <toolrelay.Engine.open_interrupts>`)."""
        latest = self.turns.get(key)
        if latest is not None:
            status = latest.status
            if status is RunStatus.interrupted:
                return latest.interrupts
            if status is RunStatus.completed:
                return ()
        return self.interrupts.get(key)

    def use(
        self, key: ThreadKey, history: Sequence[ChatMessage] | None, owner: str | None
    ) -> tuple[Conversation, ThreadLog | None]:
        """The conversation (made the most recently used) and log of ``key`` for a new
        turn; a thread the engine does not hold starts from ``history`` (and, with a
        store, a log that reads the store before the turn goes on)."""
        conversation = self.conversations.pop(key, None)
        log = self.logs.get(key)
        if conversation is None:
            conversation = Conversation(key.thread_id, history or ())
            if self.store is not None:
                log = self.logs[key] = ThreadLog(self.store, key, owner)
                log.supplied = len(conversation.messages)
        self.conversations[key] = conversation  # the most recently used, last
        return conversation, log

    async def load(self, key: ThreadKey, log: ThreadLog, write: bool = False) -> None:
        """Put what the store has of ``key`` in front of its conversation, once.

        History the embedding code supplied for the thread is replaced by the store's
        when the store has the thread, and written to it when it does not.

        ``write``: what the log holds does not depend on what is read (the caller adds
        nothing after the load that belongs with it), so it is written with the read,
        in one round trip where the store can, unless history was supplied (which is
        written only if the store does not have the thread).
        """
        if not log.loaded:  # a held thread's next turn passes without the lock
            async with log.lock:
                await self._fill(key, log, write)

    async def _fill(self, key: ThreadKey, log: ThreadLog, write: bool) -> None:
        """:meth:`load`'s work, with the log's lock held: another turn may have done it
        while this one waited."""
        if log.loaded:
            return
        supplied = log.supplied
        history = replay(await log.read_to_load(write and not supplied))
        conversation = self.conversations.get(key)
        if conversation is None:  # forgotten meanwhile: nothing to fill
            log.loaded = True
            return
        if history.last_seq:
            conversation.replace_head(supplied, history.messages)
            if history.state is not None:
                conversation.state = history.state
            ended = history.last_ended
            if ended is not None and key not in self.interrupts:
                if ended.status == RunStatus.interrupted.value:
                    self.interrupts[key] = ended.interrupts
                elif ended.status == RunStatus.completed.value:
                    self.interrupts[key] = ()
            shift = len(history.messages) - supplied
            for turn in log.waiting:
                turn.shift_slice(shift)
        else:
            log.prepend(
                MessageSaved(turn_id="", message=message_to_record(m))
                for m in conversation.messages[:supplied]
            )
        log.saved_state(conversation)
        log.waiting.clear()
        log.loaded = True

    def restore(
        self, store: Store, key: ThreadKey, history: ThreadHistory, owner: str | None
    ) -> tuple[Conversation, ThreadLog]:
        """Hold ``key`` as the store has it (its ``history``), for a turn a crash left
        live: the conversation and log that turn resumes with."""
        conversation = Conversation(key.thread_id, history.messages, state=history.state)
        self.conversations.pop(key, None)
        self.conversations[key] = conversation
        log = self.logs[key] = ThreadLog(store, key, owner)
        log.loaded = True
        log.saved_state(conversation)
        ended = history.last_ended
        if ended is not None and ended.status == RunStatus.interrupted.value:
            self.interrupts[key] = ended.interrupts
        return conversation, log

    async def failed_turn(self, key: ThreadKey) -> FailedTurn:
        """``key``'s last turn if it ended ``failed`` (read from the store when the
        engine holds no turn of the thread).

        Raises:
            ValueError: The last turn did not fail (or none is known), or a newer turn
                started while the store was read.
            StoreError: The store could not be read.
        """
        latest = self.turns.get(key)
        if latest is not None:
            failed = latest.status is RunStatus.failed
            found = FailedTurn(latest.turn_id, tuple(latest.context), latest.forwarded_props)
        elif self.store is not None:
            ended = replay(await self.store.read(key)).last_ended
            failed = ended is not None and ended.status == RunStatus.failed.value
            found = (
                FailedTurn(None, None, None)
                if ended is None
                else FailedTurn(ended.turn_id, ended.context, ended.forwarded_props)
            )
            if self.turns.get(key) is not None:  # a turn started while it read
                raise ValueError(f"a newer turn started on {key} meanwhile")
        else:
            failed = False
        if not failed:
            raise ValueError(f"the last turn on {key} did not fail: there is nothing to retry")
        return found

    def forget(self, key: ThreadKey) -> bool:
        """Drop ``key`` (see :meth:`Engine.forget <toolrelay.Engine.forget>`)."""
        turn = self.turns.get(key)
        if turn is not None and not turn.finished:
            return False
        log = self.logs.get(key)
        if log is not None and log.pending:
            return False  # records the store refused wait for a later write
        held = key in self.conversations or turn is not None
        self.conversations.pop(key, None)
        self.turns.pop(key, None)
        self.interrupts.pop(key, None)
        self.logs.pop(key, None)
        return held

    def evict(self, bound: int | None, keep: ThreadKey | None) -> None:
        """Forget the least recently used idle threads past ``bound``, but ``keep``."""
        if bound is None or len(self.conversations) <= bound:
            return
        for thread in list(self.conversations):
            if len(self.conversations) <= bound:
                return
            if thread != keep:
                self.forget(thread)

    def drop_if_stale(self, turn: TurnT) -> None:
        """``turn`` ended: if another worker took its thread over meanwhile, what the
        engine holds of the thread is stale, and its next turn here reads it afresh."""
        log = self.logs.get(turn.key)
        if log is not None and log.stale and self.turns.get(turn.key) is turn:
            self.conversations.pop(turn.key, None)
            self.logs.pop(turn.key, None)
