"""A worker process for the PostgreSQL store tests: ``python _pg_worker.py ROLE DSN BACKEND ...``.

Roles (each prints one line per step, flushed, for the test to read):

``hold LEASE``
    Claims thread ``t``, writes its turn's start, then writes a record every 20 ms
    under :func:`toolrelay.store.hold`; prints ``claimed <token>`` first and
    ``stale`` when a write or a renewal is refused, then exits with status 3.
``claim LEASE``
    Claims thread ``t``, writes its turn's start, prints ``claimed <token>
    <expires_at>`` and sleeps (the test kills it).
``write COUNT``
    Appends ``COUNT`` records to thread ``tail`` in batches of 1 to 4, then prints
    ``done <last seq>``.
"""

from __future__ import annotations

import sys

import anyio

from toolrelay import StaleClaimError, StoreUnavailableError, ThreadKey
from toolrelay.store import PostgresStore, StateSaved, TurnStarted, hold


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def hold_and_write(store: PostgresStore, lease: float) -> int:
    key = ThreadKey("t")
    claim = await store.claim(key, worker="child", lease=lease)
    assert claim is not None
    await store.append(key, [TurnStarted(turn_id="turn")], claim=claim)
    say(f"claimed {claim.token}")
    try:
        async with hold(store, claim, lease=lease, every=lease / 4) as held:
            n = 0
            while True:
                n += 1
                try:
                    await store.append(
                        key,
                        [StateSaved(turn_id="turn", state={"by": "child", "n": n})],
                        claim=held.claim,
                    )
                except StoreUnavailableError:
                    pass  # the server ended a session frozen mid-write: try again
                await anyio.sleep(0.02)
    except StaleClaimError:
        say("stale")
        return 3


async def claim_and_wait(store: PostgresStore, lease: float) -> int:
    key = ThreadKey("t")
    claim = await store.claim(key, worker="child", lease=lease)
    assert claim is not None
    await store.append(key, [TurnStarted(turn_id="turn")], claim=claim)
    say(f"claimed {claim.token} {claim.expires_at!r}")
    await anyio.sleep(3600)
    return 0


async def write(store: PostgresStore, count: int) -> int:
    key = ThreadKey("tail")
    n, last = 0, 0
    while n < count:
        size = min(1 + n % 4, count - n)
        batch = [StateSaved(turn_id="w", state={"n": n + i + 1}) for i in range(size)]
        last = await store.append(key, batch)
        n += size
    say(f"done {last}")
    return 0


async def main(role: str, dsn: str, argument: str) -> int:
    store = PostgresStore(dsn, idle_in_transaction_timeout=0.5)
    await store.open()
    try:
        if role == "hold":
            return await hold_and_write(store, float(argument))
        if role == "claim":
            return await claim_and_wait(store, float(argument))
        return await write(store, int(argument))
    finally:
        await store.aclose()


if __name__ == "__main__":
    role, dsn, backend, argument = sys.argv[1:5]
    sys.exit(anyio.run(main, role, dsn, argument, backend=backend))
