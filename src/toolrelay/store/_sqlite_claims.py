"""Claims and fencing on SQLite: the statements, run on the store's connection in its
worker thread, inside a transaction the store holds. Claims live in their own table,
timed by the machine's clock; fencing tokens come from one counter row
(docs/concepts.md, "Claims and fencing").
"""

from __future__ import annotations

import sqlite3

from toolrelay._core import ThreadKey
from toolrelay._errors import StaleClaimError
from toolrelay.store._claims import Claim

__all__ = (
    "check_lease",
    "claim_valid",
    "drop_claim",
    "extend_claim",
    "stale",
    "take_claim",
    "take_next_claims",
)

_CLAIM_KEY = "server = ? AND room = ? AND thread = ?"


def check_lease(lease: float) -> float:
    if not 0 < lease < 1e9:
        raise ValueError(f"lease must be a positive number of seconds, not {lease!r}")
    return float(lease)


def stale(claim: Claim, outcome: str) -> StaleClaimError:
    return StaleClaimError(
        f"{claim.key}: claim {claim.token} of {claim.worker!r} expired or was taken over; {outcome}"
    )


def take_claim(
    connection: sqlite3.Connection, key: ThreadKey, worker: str, expires: float, now: float
) -> Claim | None:
    """A claim on ``key`` unless another one still holds it."""
    row = connection.execute(
        f"SELECT expires_at FROM claims WHERE {_CLAIM_KEY}",
        (key.server, key.room_id, key.thread_id),
    ).fetchone()
    if row is not None and row[0] > now:
        return None
    return _grant(connection, key, worker, expires)


def take_next_claims(
    connection: sqlite3.Connection, worker: str, expires: float, now: float, limit: int
) -> list[Claim]:
    """Claims on up to ``limit`` threads with a live turn and no holder, the longest
    waiting first."""
    rows = connection.execute(
        "SELECT t.server, t.room, t.thread FROM threads t "
        "WHERE t.live_turn IS NOT NULL AND NOT EXISTS ("
        "SELECT 1 FROM claims c WHERE c.server = t.server AND c.room = t.room "
        "AND c.thread = t.thread AND c.expires_at > ?) "
        "ORDER BY t.updated_at, t.id LIMIT ?",
        (now, limit),
    ).fetchall()
    return [
        _grant(connection, ThreadKey(thread, room, server), worker, expires)
        for server, room, thread in rows
    ]


def extend_claim(connection: sqlite3.Connection, claim: Claim, expires: float, now: float) -> bool:
    """Whether ``claim`` still held and now lasts until ``expires``."""
    key = claim.key
    cursor = connection.execute(
        f"UPDATE claims SET expires_at = ? WHERE {_CLAIM_KEY} AND token = ? AND expires_at > ?",
        (expires, key.server, key.room_id, key.thread_id, claim.token, now),
    )
    return cursor.rowcount > 0


def drop_claim(connection: sqlite3.Connection, claim: Claim) -> bool:
    """Whether ``claim`` still held (and now does not)."""
    key = claim.key
    cursor = connection.execute(
        f"DELETE FROM claims WHERE {_CLAIM_KEY} AND token = ?",
        (key.server, key.room_id, key.thread_id, claim.token),
    )
    return cursor.rowcount > 0


def claim_valid(connection: sqlite3.Connection, claim: Claim, now: float) -> bool:
    key = claim.key
    row = connection.execute(
        f"SELECT 1 FROM claims WHERE {_CLAIM_KEY} AND token = ? AND expires_at > ?",
        (key.server, key.room_id, key.thread_id, claim.token, now),
    ).fetchone()
    return row is not None


def _grant(connection: sqlite3.Connection, key: ThreadKey, worker: str, expires: float) -> Claim:
    """A new claim on ``key`` with the next fencing token (in the caller's transaction)."""
    (token,) = connection.execute(
        "UPDATE claim_tokens SET last = last + 1 WHERE id = 1 RETURNING last"
    ).fetchone()
    connection.execute(
        "INSERT OR REPLACE INTO claims (server, room, thread, worker, token, expires_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (key.server, key.room_id, key.thread_id, worker, token, expires),
    )
    return Claim(key=key, worker=worker, token=int(token), expires_at=expires)
