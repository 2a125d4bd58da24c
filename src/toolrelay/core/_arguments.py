"""Accumulating streamed text: tool-call arguments and message text (promise 8).

Strategy: a delta is appended to a list of chunks, which is O(1) and never touches
what came before. The full string is joined once, when someone asks for it, and the
join is cached until the next delta. A stream of n deltas therefore costs O(n) in
total, whether it has 10 deltas or 100,000, instead of the O(n^2) of ``s += delta``
on a string that something else also holds a reference to.

The byte count (for the argument-size limit) is kept as deltas arrive; an ASCII
delta is counted by its length, anything else by its UTF-8 encoding.
"""

from __future__ import annotations

__all__ = ("TextAccumulator",)


def _utf8_len(text: str) -> int:
    # "surrogatepass": a lone surrogate (which stdlib json decodes from "\\ud800") is
    # counted as its 3 bytes rather than raising UnicodeEncodeError mid-stream.
    return len(text.encode("utf-8", "surrogatepass"))


class TextAccumulator:
    """An append-only string built from deltas, with O(1) appends and a cached join."""

    __slots__ = ("_cache", "_chunks", "byte_count")

    def __init__(self, initial: str = "") -> None:
        self._chunks: list[str] = [initial] if initial else []
        self._cache: str | None = initial
        #: UTF-8 bytes received so far.
        self.byte_count = _utf8_len(initial)

    def append(self, delta: str) -> int:
        """Append ``delta`` and return the new total byte count."""
        if delta:
            self._chunks.append(delta)
            self._cache = None
            self.byte_count += len(delta) if delta.isascii() else _utf8_len(delta)
        return self.byte_count

    @property
    def text(self) -> str:
        """Everything received so far, joined (cached until the next append)."""
        cache = self._cache
        if cache is None:
            cache = "".join(self._chunks)
            # Collapse to one chunk so the next join only copies new deltas once.
            self._chunks = [cache] if cache else []
            self._cache = cache
        return cache

    @property
    def chunk_count(self) -> int:
        """How many chunks are held (1 after a join); for tests and statistics."""
        return len(self._chunks)

    def __bool__(self) -> bool:
        return self.byte_count > 0

    def __repr__(self) -> str:
        return f"TextAccumulator({self.text!r})"
