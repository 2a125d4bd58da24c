"""The inbox on PostgreSQL: the statements, run on a connection the store hands over
(in its worker thread). What the inbox is for is in ``toolrelay.store._inbox``.

A letter is a row of ``inbox`` referencing its thread's row (deleting the thread
deletes its letters). Posting locks the thread's row, as claims and writes do (one
lock order everywhere), so two posts count the letters one after the other and the
bound holds exactly. Collecting checks the claim in the same transaction as it deletes
(``check_fence``): a worker whose claim was taken takes nothing. Notifications go on
the store's inbox channel, delivered at commit only: ``"post <thread row id>"`` and
``"answer <ticket> <verdict>"``.
"""

from __future__ import annotations

from typing import Any

import psycopg

from toolrelay.store._claims import Claim
from toolrelay.store._inbox import Letter, LetterKind
from toolrelay.store._postgres_claims import check_fence
from toolrelay.store._postgres_schema import KEY, NOW, key_parameters

__all__ = ("collect_letters", "post_letter")

_KINDS: tuple[LetterKind, ...] = ("results", "cancel")


def post_letter(
    connection: psycopg.Connection[Any],
    parameters: dict[str, Any],
) -> bool:
    """Post the letter ``parameters`` describe (in a transaction); whether it was."""
    # Letters nobody took in time, whatever their thread; those another transaction
    # holds are left for a later post (waiting for them could deadlock with it).
    connection.execute(
        "DELETE FROM inbox WHERE id IN (SELECT id FROM inbox "
        f"WHERE posted_at < {NOW} - %(max_age)s FOR UPDATE SKIP LOCKED)",
        parameters,
    )
    locked = connection.execute(f"SELECT id FROM threads WHERE {KEY} FOR UPDATE", parameters)
    row = locked.fetchone()
    if row is None:
        return False
    thread = int(row[0])
    waiting = connection.execute("SELECT count(*) FROM inbox WHERE thread = %s", (thread,))
    counted = waiting.fetchone()
    if counted is None or int(counted[0]) >= parameters["limit"]:
        return False
    connection.execute(
        f"INSERT INTO inbox (thread, kind, body, posted_at) "
        f"VALUES (%(thread_row)s, %(kind)s, %(body)s, {NOW})",
        {**parameters, "thread_row": thread},
    )
    connection.execute("SELECT pg_notify(%s, %s)", (parameters["channel"], f"post {thread}"))
    return True


def collect_letters(
    connection: psycopg.Connection[Any], claim: Claim, max_age: float
) -> list[Letter]:
    """Take the letters of ``claim``'s thread (in a transaction), oldest first.

    Raises:
        StaleClaimError: The claim no longer holds the thread (nothing is taken).
    """
    check_fence(connection, claim.key, claim)
    rows = connection.execute(
        f"DELETE FROM inbox WHERE thread = (SELECT id FROM threads WHERE {KEY}) "
        f"RETURNING id, kind, body, posted_at, posted_at >= {NOW} - %(max_age)s",
        {**key_parameters(claim.key), "max_age": max_age},
    ).fetchall()
    letters: list[Letter] = []
    for _, kind, body, posted_at, fresh in sorted(rows, key=lambda row: int(row[0])):
        if fresh and kind in _KINDS:
            letters.append(
                Letter(key=claim.key, kind=kind, body=bytes(body), posted_at=float(posted_at))
            )
    return letters
