"""The live turns' deadlines (``Limits.turn_seconds``), kept by one task per engine.

A deadline set on each turn's cancel scope is a timer per live turn: on asyncio a
``TimerHandle``, the context it copies, its arguments and the scope's bound
``_timeout``, four objects the cyclic collector walks for every parked turn
(docs/performance.md, "A turn's task"). Here a turn's deadline is one entry in a
dict, which the collector does not walk as an object of its own, and one task
wakes when the nearest deadline is due and cancels the scopes of the turns past it.

The turns of one ``turn_seconds`` reach their deadlines in the order they started,
so each length has its own insertion-ordered dict, whose first entry is the nearest
of its length: adding, removing (a turn that ended) and finding what is due are
O(1) each (an engine whose ``limits`` change keeps a dict per length it used while
turns of that length live). The keeper sleeps until the nearest deadline; a turn
added with an earlier one (a shorter ``turn_seconds``) wakes it, and a turn that
ended before its deadline leaves at most one wake-up that finds nothing due.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Protocol

import anyio

__all__ = ("Deadlines", "Expiring")


class Expiring(Protocol):
    """What a deadline is kept for: told once when it is due."""

    def expire(self) -> None: ...


class Deadlines:
    """The deadlines of an engine's live turns, and the task that enforces them
    (:meth:`keep`, run by the engine while it is open)."""

    __slots__ = ("_by_length", "_clock", "_keeping", "_stopped", "_target", "_wake")

    def __init__(self) -> None:
        # The event loop's clock, anyio's current_time without its look-up of the
        # running backend on every call (set by the engine as it opens).
        self._clock: Callable[[], float] = anyio.current_time
        # turn_seconds -> {turn: its deadline}, each in the order the turns started.
        self._by_length: dict[float, dict[Expiring, float]] = {}
        # When the keeper wakes next (inf: nothing to wait for), and what wakes it
        # sooner.
        self._target = math.inf
        self._wake: anyio.Event | None = None
        self._keeping: anyio.CancelScope | None = None
        self._stopped = False

    def __len__(self) -> int:
        """How many deadlines are kept (turns live with one)."""
        return sum(len(queue) for queue in self._by_length.values())

    def use_clock(self, clock: Callable[[], float]) -> None:
        """Read the time from ``clock``: the running loop's own, which is what
        :func:`anyio.current_time` returns there (and what cancel scopes' deadlines
        are compared with)."""
        self._clock = clock

    def add(self, turn: Expiring, seconds: float) -> None:
        """``turn`` is due ``seconds`` from now."""
        deadline = self._clock() + seconds
        queue = self._by_length.get(seconds)
        if queue is None:
            queue = self._by_length[seconds] = {}
        queue[turn] = deadline
        if deadline < self._target and self._wake is not None:
            self._target = deadline
            self._wake.set()

    def remove(self, turn: Expiring, seconds: float) -> None:
        """``turn`` ended: its deadline no longer counts."""
        queue = self._by_length.get(seconds)
        if queue is not None:
            queue.pop(turn, None)

    def _expire_due(self) -> float:
        """Tell every turn past its deadline; returns the nearest deadline left."""
        now = self._clock()
        nearest = math.inf
        for seconds, queue in list(self._by_length.items()):
            while queue:
                turn = next(iter(queue))
                deadline = queue[turn]
                if deadline > now:
                    nearest = min(nearest, deadline)
                    break
                del queue[turn]
                turn.expire()
            if not queue:
                del self._by_length[seconds]
        return nearest

    async def keep(self) -> None:
        """The keeper's task: until :meth:`stop`, wake when the nearest deadline is due
        (or a nearer one is added) and expire what is due."""
        with anyio.CancelScope() as self._keeping:
            if self._stopped:  # stopped before its task began
                return
            while True:
                self._target = self._expire_due()
                wake = self._wake = anyio.Event()
                with anyio.CancelScope(deadline=self._target):
                    await wake.wait()

    def stop(self) -> None:
        """End :meth:`keep` (the engine closes), whether or not it began."""
        self._stopped = True
        if self._keeping is not None:
            self._keeping.cancel()
