"""Several server processes on one store (shared mode): claims, takeover, commits.

The engine writes through a :class:`~toolrelay.store.FencedStore`, so every record
carries this process's claim of its thread. A run claims its thread before its turn
starts (409 ``thread_busy`` when another process holds it) and a task of the server's
group (``_keep``) renews the claim while a turn of the thread is live here, then
releases it. Another task (``_take_over``) claims, every third of the lease, the live
turns whose claim expired (their process died) and resumes them with
``engine.recover([key])``; a third (``_listen``) follows the store's commit
notifications and wakes the streams of each thread named, so a stream here follows a
turn that runs elsewhere; on a store with an inbox it also hears the letters posted
and answered (``_inbox``). A claim lost while this process was frozen cancels the
local turn (its writes are refused anyway) and the engine forgets the thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager

import anyio
from anyio.abc import TaskStatus

from toolrelay._core import ThreadKey
from toolrelay._errors import ClosedError, StaleClaimError, StoreError
from toolrelay.server._asgi import HTTPError
from toolrelay.server._base import Holder
from toolrelay.server._inbox import Inbox
from toolrelay.store import Answered, Claim, FencedStore, Letter, Notice, NotifyingStore, Posted

__all__ = ("SharedMode",)

logger = logging.getLogger("toolrelay.server")


class SharedMode(Inbox):
    """Claims of threads shared with other processes (see the module docstring)."""

    async def _hold_thread(self, key: ThreadKey) -> Holder:
        """This worker's hold on ``key``, claimed now unless it has it already.

        Raises:
            HTTPError: 409 ``thread_busy``: another worker holds the thread (a turn of
                it runs there); 503: the store failed.
        """
        fenced = self._fenced
        assert fenced is not None and self._group is not None
        while True:
            # This worker's own hold being released, or being taken by another
            # request of it: wait, then look again.
            pending = self._leaving.get(key) or self._claiming.get(key)
            if pending is None:
                break
            await pending.wait()
        holder = self._holders.get(key)
        if holder is not None:
            return holder
        claiming = self._claiming[key] = anyio.Event()
        try:
            return await self._claim_thread(fenced, key)
        finally:
            del self._claiming[key]
            claiming.set()

    async def _claim_thread(self, fenced: FencedStore, key: ThreadKey) -> Holder:
        assert self._group is not None
        started = time.perf_counter()
        try:
            claim = await fenced.claim(key)
        except StoreError as exc:
            self.metrics.claim(time.perf_counter() - started, "error")
            raise HTTPError(503, "store_unavailable", str(exc)) from exc
        self.metrics.claim(time.perf_counter() - started, "busy" if claim is None else "claimed")
        if claim is None:
            retry = str(max(1, round(self.lease / 3)))
            raise HTTPError(
                409,
                "thread_busy",
                f"a turn of thread {key.thread_id!r} runs on another server process; "
                "cancel it there or retry once it ended",
                [(b"retry-after", retry.encode())],
            )
        # What this engine remembers of the thread may be older than the log (another
        # worker may have run turns on it since): read it afresh.
        self.engine.forget(key)
        kept: Holder = await self._group.start(self._keep, claim, False)
        return kept

    async def _keep(
        self,
        claim: Claim,
        recover: bool,
        *,
        task_status: TaskStatus[Holder] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Hold ``claim`` (renewed) while a turn of its thread is live in this engine,
        then release it. ``recover``: the thread's turn was taken over from a worker
        that died: resume it from the log first.

        When the claim is lost (this process was frozen past its lease and another
        took the thread), the local turn is stopped: its writes are refused anyway."""
        fenced = self._fenced
        assert fenced is not None
        key = claim.key
        holder = Holder()
        leaving = anyio.Event()
        try:
            async with fenced.holding(claim):
                self._holders[key] = holder
                try:
                    later: list[Letter] = []
                    if recover:
                        self.engine.forget(key)
                        if self._inbox is not None:
                            # Results the client posted for the dead worker's turn.
                            later = await self._inbox_before_recovery(key)
                        turns = await self.engine.recover([key])
                        logger.warning(  # worth an operator's eye: a worker died
                            "%s took over thread %s (%d turn(s) resumed)",
                            self.worker,
                            key,
                            len(turns),
                        )
                        holder.ready.set()
                    task_status.started(holder)
                    await holder.ready.wait()
                    # What was posted for the thread before this worker held it.
                    self._look_in_inbox(key, later)
                    while True:
                        turn = self.engine.turn(key)
                        if turn is None or turn.finished:
                            break
                        await turn.wait_finished()
                finally:
                    if self._holders.get(key) is holder:
                        del self._holders[key]
                        self._leaving[key] = leaving
        except StaleClaimError as exc:
            logger.warning("%s lost thread %s to another worker: %s", self.worker, key, exc)
            turn = self.engine.turn(key)
            if turn is not None and not turn.finished:
                turn.cancel("another server process took the thread over")
        except (StoreError, ClosedError) as exc:
            logger.error("%s could not work on thread %s: %s", self.worker, key, exc)
        finally:
            if self._leaving.get(key) is leaving:
                del self._leaving[key]
            leaving.set()
            holder.released.set()

    async def _take_over(self, fenced: FencedStore) -> None:
        """Claim, every ``takeover_interval`` seconds, the live turns no worker holds
        (their worker died and its lease ran out) and resume them here."""
        assert self._group is not None
        while not self._stopping.is_set():
            claims: list[Claim] = []
            try:
                room = self._room_for_turns()
                if room > 0:
                    claims = await fenced.claim_next(limit=min(room, 16))
            except StoreError as exc:
                logger.warning("%s cannot look for orphaned turns: %s", self.worker, exc)
            for claim in claims:
                if self._stopping.is_set() or claim.key in self._holders:
                    with anyio.CancelScope(shield=True):
                        try:
                            await fenced.release(claim)
                        except StoreError:
                            pass  # the lease ends it
                    continue
                self._group.start_soon(self._keep, claim, True, name=f"takeover {claim.key}")
            if len(claims) < 16:
                await anyio.sleep(self.takeover_interval)

    def _room_for_turns(self) -> int:
        """How many more turns this worker may run (``max_live_turns``)."""
        if self.max_live_turns is None:
            return 16
        counts = self.engine.statistics().turns
        live = sum(count for status, count in counts.items() if not status.is_final)
        return self.max_live_turns - live

    async def _listen(self, store: NotifyingStore) -> None:
        """Wake the streams of each thread another process (or this one) commits to;
        with an inbox, act on the letters posted for threads held here, and pass the
        answers to the requests of this process that posted letters."""
        while not self._stopping.is_set():
            feed: AbstractAsyncContextManager[AsyncIterator[Notice]] = (
                self._inbox.notices() if self._inbox is not None else store.commits()
            )
            try:
                async with feed as notices:
                    self._missed()  # what came before listening
                    async for notice in notices:
                        match notice:
                            case None:
                                self._missed()
                            case Posted(key=key):
                                self._look_in_inbox(key)
                            case Answered(ticket=ticket, verdict=verdict):
                                self._answered(ticket, verdict)
                            case (key, _):
                                self.store.poke(key)
            except StoreError as exc:
                logger.warning("%s: the store's commit feed failed: %s", self.worker, exc)
                self._missed()
                await anyio.sleep(1.0)

    def _missed(self) -> None:
        """Notifications may have been lost: every stream reads its thread again, and
        the inboxes of the threads held here are read."""
        self.store.wake_all()
        for key in list(self._holders):
            self._look_in_inbox(key)

    def _held_elsewhere(self, key: ThreadKey) -> HTTPError:
        return HTTPError(
            409,
            "turn_elsewhere",
            f"the live turn of thread {key.thread_id!r} runs on another server process: "
            "send this request there (route requests by thread id)",
        )
