"""Who is told what: the engine's subscribers, and the thread in focus (promise 6).

Every notification of every turn (state, events, tool results, retries) goes to one
:class:`~toolrelay._runtime._fanout.Fanout`; each subscriber's filter picks what it
hears: one thread, or the focused thread only (the "current view"), with or without
every AG-UI event. The focus is a thread key only the embedding code sets
(:meth:`Engine.focus <toolrelay.Engine.focus>`): a background turn never moves
it.
"""

from __future__ import annotations

from collections.abc import Callable

from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay._core import ThreadKey
from toolrelay._runtime._fanout import Fanout
from toolrelay._runtime._views import EventReceived, Notification

__all__ = ("Observers",)


class Observers:
    """The engine's subscribers and its focus.

    Attributes:
        notifications: Where every turn's notifications go. Subscribers that asked
            for every event are marked: a turn checks the count per event before it
            builds an :class:`~toolrelay.EventReceived`.
        focused: The thread the UI shows (``None``: none).
    """

    __slots__ = ("focused", "notifications")

    def __init__(self) -> None:
        self.notifications: Fanout[Notification] = Fanout()
        self.focused: ThreadKey | None = None

    def subscribe(
        self, *, focused_only: bool, key: ThreadKey | None, events: bool, max_buffer: float
    ) -> MemoryObjectReceiveStream[Notification]:
        """A stream of the notifications the filter picks (see
        :meth:`Engine.subscribe <toolrelay.Engine.subscribe>`)."""
        return self.notifications.subscribe(
            self._wants(focused_only, key, events), max_buffer=max_buffer, marked=events
        )

    def _wants(
        self, focused_only: bool, key: ThreadKey | None, events: bool
    ) -> Callable[[Notification], bool]:
        def wants(notification: Notification) -> bool:
            if not events and isinstance(notification, EventReceived):
                return False
            if key is not None and notification.key != key:
                return False
            return not focused_only or notification.key == self.focused

        return wants

    def close(self) -> None:
        """End every subscription."""
        self.notifications.close()
