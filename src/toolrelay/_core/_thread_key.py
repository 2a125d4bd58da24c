"""Which conversation a run belongs to: the key every layer above the core shares."""

from __future__ import annotations

import msgspec

__all__ = ("ThreadKey",)


class ThreadKey(msgspec.Struct, frozen=True, order=True, gc=False):
    """Which conversation a run belongs to.

    Immutable, hashable and ordered (by thread id, then room, then server). Not
    tracked by the cycle collector (``gc=False``): it holds strings only, and every
    turn, thread table entry and claim holds one.

    Attributes:
        thread_id: The AG-UI ``threadId``.
        room_id: The room (agent, tenant, channel) the thread lives in, when the
            embedding code has such a notion.
        server: Which agent server the thread talks to, for engines that multiplex
            several servers.
    """

    thread_id: str
    room_id: str = ""
    server: str = ""

    def __str__(self) -> str:
        parts = [p for p in (self.server, self.room_id) if p]
        return "/".join([*parts, self.thread_id])
