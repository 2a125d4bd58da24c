"""What the engine writes to its store, per thread, and in which order.

Each thread the engine holds has one :class:`ThreadLog`: records are *added*
synchronously when their block exists (so the log's order is the order things
happened) and *flushed* in order as one store transaction, never two flushes of a
thread at once; a failed flush puts its records back, so nothing is written twice.
Turns flush before each tool batch runs: the write-ahead of promise 10
(docs/concepts.md, "The write-ahead: a thread's log").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

import anyio
import msgspec

from toolrelay._core import (
    Conversation,
    Effect,
    EventProcessor,
    MessagesSettled,
    ThreadKey,
    ToolsReady,
    TurnCompleted,
    TurnEnded,
    TurnInterrupted,
)
from toolrelay._errors import StaleClaimError, StoreError
from toolrelay.store import (
    MessageSaved,
    Record,
    StateSaved,
    Store,
    ToolsStarted,
    TurnEnded as TurnEndedRecord,
    call_to_record,
    message_to_record,
)

__all__ = ("ThreadLog", "WaitingTurn")

_encode = msgspec.json.Encoder().encode


class _Gate:
    """One thread's log's mutual exclusion: free when nobody else holds it (no
    checkpoint, no allocation), an event made only when someone has to wait. Every
    store write of every turn passes it, where ``anyio.Lock`` cost several times more."""

    __slots__ = ("_free", "_held")

    def __init__(self) -> None:
        self._held = False
        self._free: anyio.Event | None = None  # made by the first waiter

    async def __aenter__(self) -> None:
        while self._held:
            if self._free is None:
                self._free = anyio.Event()
            await self._free.wait()
        self._held = True

    async def __aexit__(self, *exc_info: object) -> None:
        self._held = False
        free, self._free = self._free, None
        if free is not None:
            free.set()  # every waiter wakes; the first to run holds it, the rest wait again


class WaitingTurn(Protocol):
    """A turn started before its thread's store was read (a :class:`Turn
    <toolrelay.Turn>`): its slice of the conversation moves when the stored
    history is put in front."""

    def shift_slice(self, by: int) -> None: ...


class ThreadLog:
    """The records one thread's turns add, and their writing to the store.

    Attributes:
        loaded: Whether the thread's conversation in memory holds what the store had.
        supplied: How many messages at the head of the conversation the embedding
            code supplied (``history``) before the store was read.
        waiting: The turns started before the store was read (their slice of the
            conversation moves when the stored history is put in front).
    """

    __slots__ = (
        "_key",
        "_lock",
        "_outbox",
        "_owner",
        "_saved_state",
        "_store",
        "loaded",
        "stale",
        "supplied",
        "waiting",
    )

    def __init__(self, store: Store, key: ThreadKey, owner: str | None = None) -> None:
        self._store = store
        self._key = key
        self._owner = owner
        self._outbox: list[Record] = []
        self._lock = _Gate()
        self._saved_state: bytes | None = None
        self.loaded = False
        #: A write was refused because another worker took the thread over (see
        #: :class:`~toolrelay.StaleClaimError`): the engine forgets the thread.
        self.stale = False
        self.supplied = 0
        self.waiting: list[WaitingTurn] = []

    @property
    def lock(self) -> _Gate:
        """Held while the thread is written or loaded."""
        return self._lock

    @property
    def pending(self) -> bool:
        """Whether records wait to be written."""
        return bool(self._outbox)

    def add(self, *records: Record) -> None:
        self._outbox.extend(records)

    def prepend(self, records: Iterable[Record]) -> None:
        """Records that belong before everything added so far (supplied history)."""
        self._outbox[0:0] = records

    def saved_state(self, conversation: Conversation) -> None:
        """The store holds ``conversation``'s state as it is now."""
        self._saved_state = _encode(conversation.state)

    def add_effects(
        self, turn_id: str, processor: EventProcessor, effects: Sequence[Effect]
    ) -> None:
        """The records ``effects`` call for (the processor has just answered them)."""
        for effect in effects:
            match effect:
                case MessagesSettled(messages=messages):
                    self._outbox.extend(
                        MessageSaved(turn_id=turn_id, message=message_to_record(message))
                        for message in messages
                    )
                case ToolsReady():
                    self._state(turn_id, processor.conversation)
                    self._outbox.append(
                        ToolsStarted(
                            turn_id=turn_id,
                            run_id=processor.run_id or "",
                            depth=processor.depth,
                            runs=processor.run_count,
                            calls=tuple(call_to_record(c) for c in processor.tool_calls),
                        )
                    )
                case TurnCompleted(reason=reason) | TurnEnded(reason=reason):
                    self._state(turn_id, processor.conversation)
                    self._outbox.append(
                        TurnEndedRecord(
                            turn_id=turn_id, status=processor.status.value, reason=reason
                        )
                    )
                case TurnInterrupted(reason=reason, interrupts=interrupts):
                    self._state(turn_id, processor.conversation)
                    self._outbox.append(
                        TurnEndedRecord(
                            turn_id=turn_id,
                            status=processor.status.value,
                            reason=reason,
                            interrupts=interrupts,
                        )
                    )
                case _:
                    pass

    def _state(self, turn_id: str, conversation: Conversation) -> None:
        encoded = _encode(conversation.state)
        if encoded != self._saved_state:
            self._saved_state = encoded
            self._outbox.append(StateSaved(turn_id=turn_id, state=conversation.state))

    async def flush(self) -> None:
        """Write what was added, in order, in one transaction.

        Raises:
            StoreError: Nothing was written; the records wait for the next flush.
        """
        async with self._lock:
            await self._flush_locked()

    async def _flush_locked(self) -> None:
        if not self._outbox:
            return
        records, self._outbox = self._outbox, []
        try:
            # Shielded: a cancelled turn's records are written all the same (a write
            # is short, and bounded by the store's own timeout).
            with anyio.CancelScope(shield=True):
                await self._store.append(self._key, records, owner=self._owner)
        except StaleClaimError:
            # Another worker owns the thread now: what this one wrote is not the
            # thread's any more (never written later under a new claim), and what it
            # holds in memory is stale.
            self.stale = True
            raise
        except StoreError:
            self._outbox[0:0] = records
            raise
