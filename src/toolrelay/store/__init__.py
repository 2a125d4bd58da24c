"""Durable threads: one contract, an in-memory store and the embedded SQLite default.

A store keeps each thread's conversation as an append-only log of records, one per
block the moment it exists, numbered by a per-thread sequence that never goes back
(reference 004). The engine writes to it as turns happen (``Engine(backend,
store=SQLiteStore("toolrelay.db"))``), loads a thread it does not hold from it, and
resumes the turns a crash left live. Write your own store against :class:`Store`
and check it with :class:`toolrelay.testing.StoreContract`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from toolrelay.store._claims import (
    Claim as Claim,
    ClaimingStore as ClaimingStore,
    FencedStore as FencedStore,
    Held as Held,
    NotifyingStore as NotifyingStore,
    TailingStore as TailingStore,
    hold as hold,
)
from toolrelay.store._contract import (
    Entry as Entry,
    ReadAppendStore as ReadAppendStore,
    Store as Store,
    ThreadInfo as ThreadInfo,
)
from toolrelay.store._history import (
    EndedTurn as EndedTurn,
    LiveTurn as LiveTurn,
    ThreadHistory as ThreadHistory,
    replay as replay,
)
from toolrelay.store._inbox import (
    Answered as Answered,
    InboxStore as InboxStore,
    Letter as Letter,
    LetterKind as LetterKind,
    Notice as Notice,
    Posted as Posted,
)
from toolrelay.store._memory import MemoryStore as MemoryStore
from toolrelay.store._records import (
    MessageSaved as MessageSaved,
    Record as Record,
    StateSaved as StateSaved,
    StoredAgentResult as StoredAgentResult,
    StoredCall as StoredCall,
    StoredMessage as StoredMessage,
    ToolFinished as ToolFinished,
    ToolsStarted as ToolsStarted,
    TurnEnded as TurnEnded,
    TurnStarted as TurnStarted,
    call_from_record as call_from_record,
    call_to_record as call_to_record,
    decode_record as decode_record,
    encode_record as encode_record,
    message_from_record as message_from_record,
    message_to_record as message_to_record,
)
from toolrelay.store._sqlite import SCHEMA_VERSION as SCHEMA_VERSION, SQLiteStore as SQLiteStore

if TYPE_CHECKING:
    from toolrelay.store._postgres import PostgresStore as PostgresStore

__all__ = (
    "SCHEMA_VERSION",
    "Answered",
    "Claim",
    "ClaimingStore",
    "EndedTurn",
    "Entry",
    "FencedStore",
    "Held",
    "InboxStore",
    "Letter",
    "LetterKind",
    "LiveTurn",
    "MemoryStore",
    "MessageSaved",
    "Notice",
    "NotifyingStore",
    "PostgresStore",
    "Posted",
    "ReadAppendStore",
    "Record",
    "SQLiteStore",
    "StateSaved",
    "Store",
    "StoredAgentResult",
    "StoredCall",
    "StoredMessage",
    "TailingStore",
    "ThreadHistory",
    "ThreadInfo",
    "ToolFinished",
    "ToolsStarted",
    "TurnEnded",
    "TurnStarted",
    "call_from_record",
    "call_to_record",
    "decode_record",
    "encode_record",
    "hold",
    "message_from_record",
    "message_to_record",
    "replay",
)


def __getattr__(name: str) -> Any:
    # PostgresStore needs psycopg (the ``postgres`` extra): imported on first use only.
    if name == "PostgresStore":
        try:
            from toolrelay.store._postgres import PostgresStore
        except ImportError as exc:
            raise ImportError(
                f"PostgresStore needs psycopg ({exc}): pip install 'toolrelay[postgres]'"
            ) from exc
        return PostgresStore
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
