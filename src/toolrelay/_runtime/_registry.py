"""The run registry: which run currently owns each thread.

A :class:`RunHandle` is one run of the agent on one thread; the :class:`RunRegistry`
maps each :class:`ThreadKey` to the handle that owns it now. Its three changes
(:meth:`~RunRegistry.register_run`, :meth:`~RunRegistry.replace_run`, a
compare-and-swap, and :meth:`~RunRegistry.complete_run`) are synchronous, hence atomic
between tasks; subscribers hear of them as :class:`RegistryChange` through memory
object streams. Why a compare-and-swap, why register before dispose, and why a closed
registry reads as empty: docs/concepts.md, "One owner per thread".
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay._errors import ClosedError
from toolrelay._runtime._fanout import Fanout
from toolrelay.backends._base import ThreadKey

__all__ = (
    "RegistryChange",
    "RunHandle",
    "RunRegistered",
    "RunRegistry",
    "RunReplaced",
    "RunUnregistered",
)

logger = logging.getLogger("toolrelay.runtime")


@dataclass(frozen=True, slots=True)
class RunRegistered:
    """The registry's notification that a user's turn registered its first run on
    ``key`` (:meth:`RunRegistry.register_run`)."""

    key: ThreadKey
    run_id: str


@dataclass(frozen=True, slots=True)
class RunReplaced:
    """The registry's notification that a continuation run replaced the previous run
    of ``key`` (tool results sent; :meth:`RunRegistry.replace_run`)."""

    key: ThreadKey
    run_id: str
    previous_run_id: str


@dataclass(frozen=True, slots=True)
class RunUnregistered:
    """The registry's notification that the run registered on ``key`` left it: its
    turn reached a final state, ``status`` (:meth:`RunRegistry.complete_run`)."""

    key: ThreadKey
    run_id: str
    status: str


#: What :meth:`RunRegistry.subscribe` streams: one change of a thread's run.
RegistryChange = RunRegistered | RunReplaced | RunUnregistered


@dataclass(eq=False, slots=True)
class RunHandle:
    """One run of the agent on one thread: its id and what to release when it is done.

    Handles compare by identity: two handles for the same run id are still distinct.

    Attributes:
        key: The thread.
        run_id: The run id (the server's or the client's).
        depth: The continuation depth this run was started at.
    """

    key: ThreadKey
    run_id: str
    depth: int = 0
    # The first callback in a slot (a run has one: its stream's), the others in a list
    # made for them: no list per handle for the collector to walk.
    _callback: Callable[[], object] | None = None
    _more: list[Callable[[], object]] | None = None
    _disposed: bool = False

    @property
    def disposed(self) -> bool:
        """Whether :meth:`dispose` ran."""
        return self._disposed

    def on_dispose(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` (synchronously) when the handle is disposed."""
        if self._disposed:
            callback()
        elif self._callback is None:
            self._callback = callback
        elif self._more is None:
            self._more = [callback]
        else:
            self._more.append(callback)

    def dispose(self) -> None:
        """Release the run (cancel its stream). Idempotent.

        Every callback runs even when one raises; the first error is re-raised after.
        """
        if self._disposed:
            return
        self._disposed = True
        callbacks = [] if self._callback is None else [self._callback, *(self._more or ())]
        self._callback = self._more = None
        error: BaseException | None = None
        for callback in callbacks:
            try:
                callback()
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error


class RunRegistry:
    """Which run owns each thread; see the module docstring for the contract.

    Once :meth:`close` ran, the registry holds nothing: :meth:`get_handle` returns
    ``None``, :meth:`is_registered` ``False``, ``len()`` 0 and iteration yields no
    handle (each of them, including from a dispose callback that :meth:`close` runs).
    :meth:`register_run`, :meth:`replace_run`, :meth:`complete_run` and
    :meth:`subscribe` raise :class:`~toolrelay.ClosedError`. :meth:`close`
    itself is idempotent.

    Args:
        subscriber_buffer: How many changes a subscriber may fall behind
            before further changes to it are dropped (and counted in
            :attr:`dropped_events`); unbounded by default.
    """

    def __init__(self, *, subscriber_buffer: float = math.inf) -> None:
        self._runs: dict[ThreadKey, RunHandle] = {}
        self._fanout: Fanout[RegistryChange] = Fanout()
        self._buffer = subscriber_buffer
        self._closed = False

    # -- queries ------------------------------------------------------------------

    # A closed registry holds nothing: close() empties ``_runs`` before it disposes a
    # handle, and every change refuses to run once closed, so the queries below need no
    # check of their own to answer "nothing" (they never raise).

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran."""
        return self._closed

    @property
    def dropped_events(self) -> int:
        """Changes a slow subscriber did not get."""
        return self._fanout.dropped

    def get_handle(self, key: ThreadKey) -> RunHandle | None:
        """The handle that owns ``key`` now, or ``None`` (always ``None`` once closed)."""
        return self._runs.get(key)

    def is_registered(self, handle: RunHandle) -> bool:
        """Whether ``handle`` (this very object) owns its thread now (never once closed)."""
        return self._runs.get(handle.key) is handle

    def __len__(self) -> int:
        """How many threads have a registered run (0 once closed)."""
        return len(self._runs)

    def __iter__(self) -> Iterator[RunHandle]:
        """The registered handles, as of the call (none once closed)."""
        return iter(list(self._runs.values()))

    # -- changes --------------------------------------------------------------------

    def register_run(self, handle: RunHandle) -> None:
        """Register a user's new run on its thread; the previous handle is disposed.

        Raises:
            ClosedError: The registry is closed.
        """
        self._check_open()
        previous = self._runs.get(handle.key)
        self._runs[handle.key] = handle
        self._fanout.publish(RunRegistered(handle.key, handle.run_id))
        if previous is not None and previous is not handle:
            self._dispose(previous)

    def replace_run(self, old: RunHandle, new: RunHandle) -> bool:
        """Compare-and-swap ``old`` for ``new`` (a continuation run).

        Returns:
            ``False``, changing nothing, when ``old`` is no longer the registered handle
            of its thread; ``True`` once ``new`` is registered and ``old`` disposed.

        Raises:
            ClosedError: The registry is closed.
            ValueError: ``new`` is ``old`` (a swap with itself would dispose the handle
                it leaves registered), or ``old`` and ``new`` belong to different
                threads. Nothing changes: no event, no handle disposed.
        """
        self._check_open()
        if new is old:
            raise ValueError(
                f"cannot replace run {old.run_id} on {old.key} with itself: "
                "a continuation needs a new handle"
            )
        if old.key != new.key:
            raise ValueError(f"cannot replace a run of {old.key} with one of {new.key}")
        if self._runs.get(old.key) is not old:
            return False
        self._runs[new.key] = new
        self._fanout.publish(RunReplaced(new.key, new.run_id, old.run_id))
        self._dispose(old)
        return True

    def complete_run(self, handle: RunHandle, status: str = "completed") -> bool:
        """Unregister ``handle`` if it still owns its thread, dispose it, emit
        :class:`RunUnregistered`.

        Returns:
            Whether ``handle`` was registered.

        Raises:
            ClosedError: The registry is closed.
        """
        self._check_open()
        if self._runs.get(handle.key) is not handle:
            return False
        del self._runs[handle.key]
        self._fanout.publish(RunUnregistered(handle.key, handle.run_id, status))
        self._dispose(handle)
        return True

    def subscribe(self) -> MemoryObjectReceiveStream[RegistryChange]:
        """A new stream of every change from now on; close it to unsubscribe.

        Raises:
            ClosedError: The registry is closed.
        """
        self._check_open()
        return self._fanout.subscribe(max_buffer=self._buffer)

    def close(self) -> None:
        """Dispose every handle and end every subscription; from then on the registry
        holds nothing and refuses changes (see the class docstring). Idempotent.

        Dispose errors are logged, not raised, as for every other dispose.
        """
        if self._closed:
            return
        self._closed = True
        # Emptied before any handle is disposed: a dispose callback already sees the
        # closed, empty registry.
        handles, self._runs = list(self._runs.values()), {}
        for handle in handles:
            self._dispose(handle)
        self._fanout.close()

    # -- internals ---------------------------------------------------------------------

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError("the run registry is closed")

    def _dispose(self, handle: RunHandle) -> None:
        try:
            handle.dispose()
        except Exception:
            # The swap is committed; messy cleanup must not fail it (promise 5).
            logger.warning("error disposing run %s on %s", handle.run_id, handle.key, exc_info=True)
