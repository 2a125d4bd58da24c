"""Where the engine's turns run: one task group, the live turns, the count of the others.

Every turn's task runs in the engine's task group, entered with the engine and left
when it closes (no fire-and-forget task). The live turns are known, so closing ends
each one (``cancelled``, reason ``closed``: safety check 2) and can wait for them; a
turn that ended is counted by final state and forgotten here, so statistics cost
O(live turns), not O(turns ever started).
"""

from __future__ import annotations

from types import TracebackType

import anyio
from anyio.abc import TaskGroup

from toolrelay._errors import ClosedError
from toolrelay._machines import RunStatus
from toolrelay._reasons import TerminalReason
from toolrelay._runtime._turn import Turn

__all__ = ("TurnTasks",)


def _only(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception a group (of groups) holds, or ``None`` when it holds several."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return None


class TurnTasks:
    """The engine's task group and the turns whose task runs in it.

    Attributes:
        closed: Whether the engine was closed (no turn starts any more).
    """

    __slots__ = ("_finished", "_group", "_live", "closed")

    def __init__(self) -> None:
        self._live: set[Turn] = set()
        # Turns whose task is done, by final state: counted once as each one leaves
        # ``_live`` (O(1) per turn; no list of past turns is kept).
        self._finished: dict[RunStatus, int] = dict.fromkeys(RunStatus, 0)
        self._group: TaskGroup | None = None
        self.closed = False

    async def open(self) -> None:
        """Enter the task group (the engine is entered)."""
        group = anyio.create_task_group()
        await group.__aenter__()
        self._group = group

    def check_open(self) -> TaskGroup:
        """The task group turns start in.

        Raises:
            ClosedError: The engine is closed or not entered.
        """
        if self.closed or self._group is None:
            raise ClosedError(
                "the engine is closed" if self.closed else "use the engine with 'async with'"
            )
        return self._group

    def start(self, group: TaskGroup, turn: Turn, name: str) -> None:
        """``turn`` is live, and its task starts in ``group``."""
        self._live.add(turn)
        turn.drive(group, name)

    def ended(self, turn: Turn) -> None:
        """``turn``'s task is ending: it is counted, and no longer live."""
        self._live.discard(turn)
        self._finished[turn.status] += 1

    def counts(self) -> dict[RunStatus, int]:
        """How many turns are in each state: the live ones and those that ended."""
        counts = dict(self._finished)
        for turn in self._live:
            counts[turn.status] += 1
        return counts

    def end_all(self, reason: TerminalReason) -> None:
        """The engine closes: every live turn ends with ``reason`` (once)."""
        if self.closed:
            return
        self.closed = True
        for turn in list(self._live):
            turn.end(reason)

    async def wait_all(self) -> None:
        """Wait until the task of every turn live now is done."""
        for turn in list(self._live):
            await turn.wait_finished()

    async def close(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        """Leave the task group (the engine is left), once its tasks are done."""
        group, self._group = self._group, None
        if group is None:
            return None
        try:
            return await group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group_error:
            # The task group wraps the caller's own exception; the engine's tasks never
            # raise (each turn catches its own), so it is the caller's error alone:
            # raise it as itself, as httpx.AsyncClient does.
            if exc is not None and _only(group_error) is exc:
                raise exc from None
            raise
