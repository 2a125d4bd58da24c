"""One way to tell many subscribers: each gets its own anyio memory object stream.

Both the engine's notifications (published by its turns) and the run registry's
changes go out through a :class:`Fanout`, by :meth:`Fanout.publish` itself: this is
the one fan-out mechanism of the runtime. Sending never waits (a publisher is inside a turn's hot
loop): a subscriber that fell behind past its buffer misses the item, counted in
:attr:`Fanout.dropped`; one that closed its end is dropped and our end closed too
(an open end leaks and warns).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ("Fanout",)

T = TypeVar("T")


def _everything(item: object) -> bool:
    return True


@dataclass(eq=False, slots=True)
class _Subscription(Generic[T]):
    send: MemoryObjectSendStream[T]
    wants: Callable[[T], bool]
    marked: bool


class Fanout(Generic[T]):
    """Subscribers, each with a filter, and a non-blocking :meth:`publish`."""

    __slots__ = ("_marked", "_subscriptions", "closed", "dropped")

    def __init__(self) -> None:
        self._subscriptions: list[_Subscription[T]] = []
        self._marked = 0
        #: Items a subscriber did not get because it was too far behind.
        self.dropped = 0
        self.closed = False

    def subscribe(
        self,
        wants: Callable[[T], bool] = _everything,
        *,
        max_buffer: float = math.inf,
        marked: bool = False,
    ) -> MemoryObjectReceiveStream[T]:
        """A new stream of the items ``wants`` accepts, from now on; close it to leave.

        Args:
            wants: Which items this subscriber gets (called for each item published).
            max_buffer: How far it may fall behind before items to it are dropped.
            marked: Counted in :attr:`marked`, so a publisher can skip building items
                that only marked subscribers want when there are none.

        A closed fanout returns a stream that is already at its end.
        """
        send, receive = anyio.create_memory_object_stream[T](max_buffer)
        if self.closed:
            send.close()
        else:
            self._subscriptions.append(_Subscription(send, wants, marked))
            self._marked += marked
        return receive

    @property
    def marked(self) -> int:
        """How many subscribers asked to be counted (see :meth:`subscribe`)."""
        return self._marked

    def __bool__(self) -> bool:
        return bool(self._subscriptions)

    def publish(self, item: T) -> None:
        """Send ``item`` to every subscriber that wants it, without waiting."""
        gone: list[_Subscription[T]] = []
        for subscription in self._subscriptions:
            if not subscription.wants(item):
                continue
            try:
                subscription.send.send_nowait(item)
            except anyio.WouldBlock:
                self.dropped += 1
            except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                subscription.send.close()
                gone.append(subscription)
        if gone:
            self._subscriptions = [s for s in self._subscriptions if s not in gone]
            self._marked = sum(s.marked for s in self._subscriptions)

    def close(self) -> None:
        """End every subscription; later subscriptions end at once. Idempotent."""
        self.closed = True
        for subscription in self._subscriptions:
            subscription.send.close()
        self._subscriptions.clear()
        self._marked = 0
