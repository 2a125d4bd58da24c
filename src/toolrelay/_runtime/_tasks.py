"""Where the engine's turns run: one task per live turn, the live turns, the count of the others.

Every turn's task is started by the engine and waited for when it closes (no
fire-and-forget task). The live turns are known, so closing ends each one
(``cancelled``, reason ``closed``: safety check 2) and waits for their tasks; a turn
that ended is counted by final state and forgotten here, so statistics cost O(live
turns), not O(turns ever started).

A turn's task is the event loop's own, not an anyio task group's: anyio's
``start_soon`` wraps every task in a handle of its own (a wrapper coroutine, a cancel
scope, an event, a task-state entry and a done closure), which a turn never reads and
which was a third of what a live turn held (docs/performance.md, "A turn's task").
The turn brings what it needs itself: its own cancel scope (``TurnDriver.run``), and a
driver that catches every error but a cancellation. What a task group gave besides is
kept here:

- on asyncio, the tasks are held (the loop keeps only weak references), closing waits
  for every one, shielded (the engine ends each live turn first, which cancels its
  work), and an error that escapes a turn's task (a ``BaseException`` no turn catches)
  ends the other live turns and is raised from the engine's exit in an exception
  group, as anyio's task group raised it;
- on trio, the tasks run in a nursery the engine opens and leaves, which does all of
  that itself.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from contextvars import Context
from types import TracebackType
from typing import TYPE_CHECKING

import anyio
import anyio.lowlevel

from toolrelay._errors import ClosedError
from toolrelay._machines import RunStatus
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay._runtime._deadlines import Deadlines
from toolrelay._runtime._turn import TaskFunction, Turn

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    import trio

__all__ = ("TurnTasks",)


def _only(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception a group (of groups) holds, or ``None`` when it holds several."""
    while len(group.exceptions) == 1:
        inner = group.exceptions[0]
        if not isinstance(inner, BaseExceptionGroup):
            return inner
        group = inner
    return None


def _on_trio() -> bool:
    """Whether the running event loop is trio's (anyio's other backend is asyncio)."""
    trio_module = sys.modules.get("trio")
    return trio_module is not None and bool(trio_module.lowlevel.in_trio_task())


#: The code of asyncio's eager task factory (Python 3.12 and later), to tell it.
_EAGER_CODE = getattr(getattr(asyncio, "eager_task_factory", None), "__code__", None)


def _eager(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether ``loop`` starts its tasks eagerly (``asyncio.eager_task_factory``)."""
    factory = loop.get_task_factory()
    if factory is None or _EAGER_CODE is None:
        return False
    return getattr(factory, "__code__", None) is _EAGER_CODE


#: Why the other live turns end when an error escapes one turn's task.
_SIBLING_FAILED = TerminalReason(
    kind=ReasonKind.CANCELLED, message="another turn's task failed unexpectedly"
)


class TurnTasks:
    """The engine's turns' tasks, and the turns whose task runs.

    Attributes:
        closed: Whether the engine was closed (no turn starts any more).
    """

    __slots__ = (
        "_errors",
        "_finished",
        "_in_nursery",
        "_keeper",
        "_live",
        "_loop",
        "_nursery",
        "_nursery_manager",
        "_scope",
        "_task_done",
        "closed",
        "deadlines",
    )

    def __init__(self) -> None:
        # The live turns, each with its task on asyncio (held here: the loop does not).
        self._live: dict[Turn, asyncio.Task[None] | None] = {}
        # Turns whose task is done, by final state: counted once as each one leaves
        # ``_live`` (O(1) per turn; no list of past turns is kept).
        self._finished: dict[RunStatus, int] = dict.fromkeys(RunStatus, 0)
        # Errors that escaped a turn's task (asyncio; trio's nursery keeps its own).
        self._errors: list[BaseException] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        # The engine's body (asyncio): cancelled when an error escapes a turn's task.
        self._scope: anyio.CancelScope | None = None
        self._nursery: trio.Nursery | None = None
        self._nursery_manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        # Turns' tasks run in the nursery (trio): set once, kept while the engine closes.
        self._in_nursery = False
        # One bound method for every task's done callback (made once, not per task).
        self._task_done = self._on_task_done
        self.closed = False
        #: The live turns' deadlines, kept by one task while the engine is open.
        self.deadlines = Deadlines()
        self._keeper: asyncio.Task[None] | None = None

    def reach_turns(self) -> bool:
        """Whether a cancellation from outside a turn can reach its task once the turn
        has left its own scope. On trio it can (the engine's nursery is cancelled with
        what encloses it). On asyncio nothing anyio cancels can: the task is the loop's
        own, under no scope but its turn's (and an anyio shield does not stop a bare
        ``Task.cancel()``, the only other way in)."""
        return self._in_nursery

    @property
    def opened(self) -> bool:
        """Whether the engine was entered (turns start once it is, until it closes)."""
        return self._loop is not None or self._nursery is not None

    async def open(self) -> None:
        """Begin taking turns (the engine is entered): on trio, enter the nursery."""
        if _on_trio():
            import trio

            manager = trio.open_nursery()
            self._nursery = await manager.__aenter__()
            self._nursery_manager = manager
            self._in_nursery = True
            self.deadlines.use_clock(trio.current_time)
            self._nursery.start_soon(self.deadlines.keep, name="toolrelay turn deadlines")
        else:
            await anyio.lowlevel.checkpoint()
            scope = anyio.CancelScope()
            scope.__enter__()
            self._scope = scope
            self._loop = asyncio.get_running_loop()
            self.deadlines.use_clock(self._loop.time)
            self._keeper = self._loop.create_task(
                self.deadlines.keep(), name="toolrelay turn deadlines"
            )

    def check_open(self) -> None:
        """Check that turns can start.

        Raises:
            ClosedError: The engine is closed or not entered.
        """
        if self.closed or not self.opened:
            raise ClosedError(
                "the engine is closed" if self.closed else "use the engine with 'async with'"
            )

    def start(self, turn: Turn, name: str) -> None:
        """``turn`` is live, and its task starts.

        Raises:
            ClosedError: The engine is closed or not entered.
        """
        self.check_open()
        self._live[turn] = None
        try:
            task = turn.drive(self._spawn, name)
        except BaseException:
            del self._live[turn]  # no task: nothing to wait for
            raise
        if task is not None:
            self._live[turn] = task

    def _spawn(
        self, function: TaskFunction, over: Callable[[], None], name: str, context: Context
    ) -> asyncio.Task[None] | None:
        """Start ``function(over)`` as a task of its own in ``context`` (asyncio: that
        context itself, shared with the task's done callback, which would otherwise
        copy one of its own; trio: a copy, as every trio task starts in)."""
        if self._nursery is not None:
            context.run(self._start_soon, self._nursery, function, over, name)
            return None
        loop = self._loop
        assert loop is not None
        coroutine = function(over)
        if _eager(loop):
            # As anyio does: an eager task would run the turn's first steps inside
            # start_turn, before it returns; the turn starts on the loop's next step.
            task = asyncio.Task(coroutine, loop=loop, name=name, context=context)
        else:
            task = loop.create_task(coroutine, name=name, context=context)
        task.add_done_callback(self._task_done, context=context)
        return task

    @staticmethod
    def _start_soon(
        nursery: trio.Nursery, function: TaskFunction, over: Callable[[], None], name: str
    ) -> None:
        nursery.start_soon(function, over, name=name)

    def _on_task_done(self, task: asyncio.Task[None]) -> None:
        """An asyncio task of a turn is done: an error that escaped it (no turn lets
        one but a cancellation out) ends the other live turns and cancels the engine's
        body, and the engine's exit raises it."""
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            return
        self._errors.append(error)
        for turn in list(self._live):
            turn.end(_SIBLING_FAILED)
        if self._scope is not None:
            self._scope.cancel()

    def ended(self, turn: Turn) -> None:
        """``turn``'s task is ending: it is counted, and no longer live."""
        self._live.pop(turn, None)
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
        """Stop taking turns (the engine is left), once their tasks are done.

        Every live turn was ended first (:meth:`end_all`), which cancelled its work, so
        the wait is shielded: a caller cancelled meanwhile still leaves no task behind.
        """
        self.deadlines.stop()
        manager, self._nursery_manager = self._nursery_manager, None
        if manager is not None:
            self._nursery = None
            try:
                return await manager.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group_error:
                # The nursery wraps the caller's own exception; the engine's tasks
                # never raise (each turn catches its own), so it is the caller's error
                # alone: raise it as itself, as httpx.AsyncClient does.
                if exc is not None and _only(group_error) is exc:
                    raise exc from None
                raise
        scope, self._scope = self._scope, None
        if scope is None:
            return None
        self._loop = None
        with anyio.CancelScope(shield=True):
            await self.wait_all()
            keeper, self._keeper = self._keeper, None
            if keeper is not None:
                try:
                    await keeper
                except Exception as error:  # (a bug: raised below, the scope left first)
                    self._errors.append(error)
            await anyio.lowlevel.checkpoint()  # the last tasks' done callbacks run
        swallowed = scope.__exit__(exc_type, exc, tb)
        if self._errors:
            errors, self._errors = self._errors, []
            if exc is not None and not swallowed:
                errors.append(exc)
            raise BaseExceptionGroup("unhandled errors in a turn's task", errors) from None
        return swallowed
