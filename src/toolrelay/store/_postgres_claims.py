"""Claims and fencing on PostgreSQL: the statements, run on a connection the store
hands over (in its worker thread).

Claiming locks the thread's row first, as every write does: one lock order
everywhere, so claims and writes never deadlock and a taker waits for a write in
flight (rule 5). Times come from the database's clock and fencing tokens from one
sequence. The reasons are in docs/concepts.md, "Claims and fencing".
"""

from __future__ import annotations

from typing import Any

import psycopg

from toolrelay._core import ThreadKey
from toolrelay._errors import StaleClaimError
from toolrelay.store._claims import Claim
from toolrelay.store._postgres_schema import KEY, NOW, key_parameters

__all__ = (
    "check_fence",
    "check_lease",
    "release_claim",
    "renew_claim",
    "take_claim",
    "take_next_claims",
)

_CLAIM_SET = f"""
ON CONFLICT (server, room, thread) DO UPDATE SET
    worker = excluded.worker, token = excluded.token, expires_at = excluded.expires_at
WHERE c.expires_at <= {NOW}
RETURNING c.server, c.room, c.thread, c.token, c.expires_at
"""

_CLAIM = f"""
INSERT INTO claims AS c (server, room, thread, worker, token, expires_at)
VALUES (%(server)s, %(room)s, %(thread)s, %(worker)s, nextval('claim_tokens'),
        {NOW} + %(lease)s)
{_CLAIM_SET}
"""

_CLAIM_NEXT = f"""
WITH candidates AS (
    SELECT t.server, t.room, t.thread FROM threads t
    WHERE t.live_turn IS NOT NULL AND NOT EXISTS (
        SELECT FROM claims c
        WHERE c.server = t.server AND c.room = t.room AND c.thread = t.thread
        AND c.expires_at > {NOW})
    ORDER BY t.updated_at
    LIMIT %(limit)s
    FOR UPDATE OF t SKIP LOCKED
)
INSERT INTO claims AS c (server, room, thread, worker, token, expires_at)
SELECT server, room, thread, %(worker)s, nextval('claim_tokens'), {NOW} + %(lease)s
FROM candidates
{_CLAIM_SET}
"""


def check_lease(lease: float) -> float:
    """``lease`` as seconds, checked.

    Raises:
        ValueError: ``lease`` is not a positive number of seconds.
    """
    if not 0 < lease < 1e9:
        raise ValueError(f"lease must be a positive number of seconds, not {lease!r}")
    return float(lease)


def take_claim(connection: psycopg.Connection[Any], parameters: dict[str, Any]) -> Claim | None:
    """Claim the thread ``parameters`` name for ``worker`` (in a transaction), unless a
    live claim holds it."""
    # The thread row first (when it exists): a write in flight finishes first.
    connection.execute(f"SELECT 1 FROM threads WHERE {KEY} FOR UPDATE", parameters)
    rows = connection.execute(_CLAIM, parameters).fetchall()
    return _claim(rows[0], parameters["worker"]) if rows else None


def take_next_claims(
    connection: psycopg.Connection[Any], parameters: dict[str, Any]
) -> list[Claim]:
    """Claim up to ``limit`` unclaimed threads with a live turn, oldest first."""
    rows = connection.execute(_CLAIM_NEXT, parameters).fetchall()
    return [_claim(row, parameters["worker"]) for row in rows]


def renew_claim(connection: psycopg.Connection[Any], claim: Claim, lease: float) -> Claim:
    """``claim``, its lease renewed for ``lease`` seconds from now.

    Raises:
        StaleClaimError: The claim expired or was taken over.
    """
    rows = connection.execute(
        f"UPDATE claims SET expires_at = {NOW} + %(lease)s "
        f"WHERE {KEY} AND token = %(token)s AND expires_at > {NOW} "
        "RETURNING expires_at",
        {**key_parameters(claim.key), "token": claim.token, "lease": lease},
    ).fetchall()
    if not rows:
        raise StaleClaimError(
            f"{claim.key}: claim {claim.token} of {claim.worker!r} expired or was taken "
            "over; it cannot be renewed"
        )
    return Claim(
        key=claim.key, worker=claim.worker, token=claim.token, expires_at=float(rows[0][0])
    )


def release_claim(connection: psycopg.Connection[Any], claim: Claim) -> bool:
    """Release ``claim``; whether it was still held."""
    cursor = connection.execute(
        f"DELETE FROM claims WHERE {KEY} AND token = %(token)s",
        {**key_parameters(claim.key), "token": claim.token},
    )
    return cursor.rowcount > 0


def check_fence(connection: psycopg.Connection[Any], key: ThreadKey, claim: Claim) -> None:
    """In a write's transaction: lock the thread's row, then check that ``claim`` still
    holds it.

    Raises:
        StaleClaimError: The claim expired or was taken over (nothing may be written).
    """
    parameters = {**key_parameters(key), "token": claim.token}
    connection.execute(f"SELECT 1 FROM threads WHERE {KEY} FOR UPDATE", parameters)
    # FOR SHARE: a taker's claim waits for this write, then reads it (rule 5),
    # also for a thread this write creates (no thread row to lock yet).
    valid = connection.execute(
        f"SELECT 1 FROM claims WHERE {KEY} AND token = %(token)s AND expires_at > {NOW} FOR SHARE",
        parameters,
    ).fetchone()
    if valid is None:
        raise StaleClaimError(
            f"{key}: claim {claim.token} of {claim.worker!r} expired or was taken "
            "over; nothing was written"
        )


def _claim(row: tuple[Any, ...], worker: str) -> Claim:
    server, room, thread, token, expires_at = row
    return Claim(
        key=ThreadKey(str(thread), str(room), str(server)),
        worker=worker,
        token=int(token),
        expires_at=float(expires_at),
    )
