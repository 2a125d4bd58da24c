"""What the engine writes to its store, per thread, and in which order.

Each thread the engine holds has one :class:`ThreadLog`: records are *added*
synchronously when their block exists (so the log's order is the order things
happened) and *flushed* in order as one store transaction, never two flushes of a
thread at once; a failed flush puts its records back, so nothing is written twice.
Turns flush before each tool batch runs: the write-ahead of promise 10
(docs/concepts.md, "The write-ahead: a thread's log").

A write the turn's cancellation interrupts must not be lost, nor made twice. With a
store that settles a cancelled append before it answers the next call
(``ordered_cancellation``: the embedded stores), the write is not shielded: a
cancelled one is *unsure*, and the next flush (the turn's last, which is shielded)
reads the thread's tail to learn whether it landed. Any other store's writes are
shielded, so that they finish whatever cancels the turn.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Sequence
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
    Entry,
    MessageSaved,
    Record,
    StateSaved,
    Store,
    StoredAgentResult,
    ToolsStarted,
    TurnEnded as TurnEndedRecord,
    call_to_record,
    encode_record,
    message_to_record,
)

__all__ = ("ThreadLog", "WaitingTurn")

#: A store's :meth:`ReadAppendStore.read_and_append
#: <toolrelay.store.ReadAppendStore.read_and_append>`.
ReadAndAppend = Callable[..., Awaitable[tuple[list[Entry], int]]]

_encode = msgspec.json.Encoder().encode

#: The effects that add records (the processor makes exactly these types).
_RECORDED = frozenset((MessagesSettled, ToolsReady, TurnCompleted, TurnEnded, TurnInterrupted))


class _Gate:
    """One thread's log's mutual exclusion: free when nobody else holds it (no
    checkpoint, no allocation), an event made only when someone has to wait. Every
    store write of every turn passes it, where ``anyio.Lock`` cost several times more."""

    __slots__ = ("_free", "held")

    def __init__(self) -> None:
        #: Whether someone holds it (taken by setting it, when it is not).
        self.held = False
        self._free: anyio.Event | None = None  # made by the first waiter

    async def acquire(self) -> None:
        while self.held:
            if self._free is None:
                self._free = anyio.Event()
            await self._free.wait()
        self.held = True

    def release(self) -> None:
        self.held = False
        free, self._free = self._free, None
        if free is not None:
            free.set()  # every waiter wakes; the first to run holds it, the rest wait again

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(self, *exc_info: object) -> None:
        self.release()


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
        "_ordered",
        "_outbox",
        "_owner",
        "_saved_state",
        "_store",
        "_unsure",
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
        #: The store settles a cancelled append before its next call answers.
        self._ordered = getattr(store, "ordered_cancellation", False) is True
        #: What a cancelled write took: written or not, the next flush finds out.
        self._unsure: Sequence[Record] = ()
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
        return bool(self._outbox or self._unsure)

    @property
    def settled(self) -> bool:
        """Whether everything added was written: nothing waits, nothing is being
        written (a flush under way may hold another turn's records)."""
        return not (self._outbox or self._unsure or self._lock.held)

    def add(self, *records: Record) -> None:
        self._outbox.extend(records)

    def prepend(self, records: Iterable[Record]) -> None:
        """Records that belong before everything added so far (supplied history)."""
        self._outbox[0:0] = records

    def saved_state(self, conversation: Conversation) -> None:
        """The store holds ``conversation``'s state as it is now."""
        self._saved_state = _encode(conversation.state)

    def add_effects(
        self,
        turn_id: str,
        processor: EventProcessor,
        effects: Sequence[Effect],
        *,
        restored: bool = False,
    ) -> None:
        """The records ``effects`` call for (the processor has just answered them).

        ``restored``: the effects of a batch put back from the log after a crash,
        whose ``ToolsStarted`` the log already holds (written again, it would show a
        second round, and calls handed to a client asked for a second time).
        """
        for effect in effects:
            if type(effect) not in _RECORDED:
                continue  # (most effects are activity changes: one lookup, not five)
            match effect:
                case MessagesSettled(messages=messages):
                    self._outbox.extend(
                        MessageSaved(turn_id=turn_id, message=message_to_record(message))
                        for message in messages
                    )
                case ToolsReady() if not restored:
                    self.add_state(turn_id, processor.conversation)
                    agent_results = processor.agent_results  # (most batches have none)
                    self._outbox.append(
                        ToolsStarted(
                            turn_id=turn_id,
                            run_id=processor.run_id or "",
                            depth=processor.depth,
                            runs=processor.run_count,
                            calls=tuple(map(call_to_record, processor.tool_calls)),
                            agent_results=tuple(
                                StoredAgentResult(
                                    call_id=r.call_id, message_id=r.message_id, after=r.after
                                )
                                for r in agent_results
                            )
                            if agent_results
                            else (),
                        )
                    )
                case TurnCompleted(reason=reason) | TurnEnded(reason=reason):
                    self.add_state(turn_id, processor.conversation)
                    self._outbox.append(
                        TurnEndedRecord(
                            turn_id=turn_id, status=processor.status.value, reason=reason
                        )
                    )
                case TurnInterrupted(reason=reason, interrupts=interrupts):
                    self.add_state(turn_id, processor.conversation)
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

    def add_state(self, turn_id: str, conversation: Conversation) -> None:
        """The record of ``conversation``'s state, unless the store holds it already
        (or the thread was never read: a turn that ended before its thread loaded ran
        nothing that changed the state, and what it holds is not the thread's)."""
        if not self.loaded:
            return
        encoded = _encode(conversation.state)
        if encoded != self._saved_state:
            self._saved_state = encoded
            self._outbox.append(StateSaved(turn_id=turn_id, state=conversation.state))

    async def flush(self) -> None:
        """Write what was added, in order, in one transaction.

        Raises:
            StoreError: Nothing was written; the records wait for the next flush.
        """
        # Taken and given back by hand, not ``async with``: that holds the gate's bound
        # ``__aexit__`` for as long as the write waits, and every write of every turn
        # waits for the store (objects alive across collections are what the cyclic
        # collector pays for).
        gate = self._lock
        if gate.held:
            await gate.acquire()
        else:
            gate.held = True  # (free: taken in place, no call)
        try:
            if self._unsure:
                await self._settle()
            if not self._outbox:
                return
            records, self._outbox = self._outbox, []
            try:
                if self._ordered:
                    await self._store.append(self._key, records, owner=self._owner)
                else:
                    # Shielded: a cancelled turn's records are written all the same (a
                    # write is short, and bounded by the store's own timeout).
                    with anyio.CancelScope(shield=True):
                        await self._store.append(self._key, records, owner=self._owner)
            except BaseException as exc:
                self._not_written(records, exc)
                raise
        finally:
            gate.release()

    async def read_to_load(self, write: bool) -> list[Entry]:
        """The thread's log as the store has it before anything this log added (what
        loading the thread puts in front of its conversation); with ``write``, what was
        added is written after it, in one round trip where the store can (a
        :class:`~toolrelay.store.ReadAppendStore`). The caller holds :attr:`lock`.

        Raises:
            StoreError: Nothing was written; the records wait for the next flush.
        """
        unsure = len(self._unsure)
        if unsure and await self._settle():
            # A write cancelled while the thread loaded (this call's, earlier) landed:
            # its records are the log's last (only this log writes its thread), and the
            # conversation holds them already.
            entries = await self._store.read(self._key)
            return entries[: len(entries) - unsure]
        # (the method looked up, not the protocol checked: isinstance walks a runtime
        # protocol's members, some ten microseconds on Python 3.11)
        together: ReadAndAppend | None = (
            getattr(self._store, "read_and_append", None) if write else None
        )
        if together is None or not self._outbox:
            return await self._store.read(self._key)
        records, self._outbox = self._outbox, []
        try:
            if self._ordered:
                before, _ = await together(self._key, records, owner=self._owner)
            else:
                with anyio.CancelScope(shield=True):
                    before, _ = await together(self._key, records, owner=self._owner)
        except BaseException as exc:
            self._not_written(records, exc)
            raise
        return before

    def _not_written(self, records: Sequence[Record], exc: BaseException) -> None:
        """A write of ``records`` raised ``exc``: where they go now."""
        if isinstance(exc, StaleClaimError):
            # Another worker owns the thread now: what this one wrote is not the
            # thread's any more (never written later under a new claim), and what it
            # holds in memory is stale.
            self.stale = True
        elif isinstance(exc, StoreError):
            self._outbox[0:0] = records
        elif self._ordered:  # cancelled mid-write: it may have landed
            self._unsure = records

    async def _settle(self) -> bool:
        """After a cancelled write: whether its records landed, read from the thread's
        tail (the store settled the write before answering); those that did not go
        back in front of the outbox. Only this log writes its thread, and no two of
        its writes are alike (each names its turn, run, call or message, and a state
        is saved only when it changed), so the tail is the write's exactly when the
        write landed."""
        unsure = self._unsure
        info = await self._store.thread(self._key)
        landed = False
        if info is not None and info.last_seq >= len(unsure):
            tail = await self._store.read(self._key, after=info.last_seq - len(unsure))
            landed = [encode_record(entry.record) for entry in tail] == [
                encode_record(record) for record in unsure
            ]
        self._unsure = ()
        if not landed:
            self._outbox[0:0] = unsure
        return landed
