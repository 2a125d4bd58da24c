"""Shared by the runtime tests: what a memory object stream already holds."""

from __future__ import annotations

from typing import TypeVar

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream

__all__ = ("drain",)

T = TypeVar("T")


def drain(stream: MemoryObjectReceiveStream[T]) -> list[T]:
    """Every item already delivered to ``stream``, without waiting: the engine and the
    registry publish synchronously, so nothing is in flight."""
    items: list[T] = []
    while True:
        try:
            items.append(stream.receive_nowait())
        except (anyio.WouldBlock, anyio.EndOfStream):
            return items
