"""Accumulating streamed text: tool-call arguments and message text (promise 8).

Strategy: a delta is appended to a list of chunks, which is O(1) and never touches
what came before. The full string is joined once, when someone asks for it, and the
list is collapsed (in place) to that one string. A stream of n deltas therefore costs
O(n) in total, whether it has 10 deltas or 100,000, instead of the O(n^2) of
``s += delta`` on a string that something else also holds a reference to.

Two ways in, one primitive: :meth:`~TextAccumulator.append` counts the delta's bytes
as it comes (an ASCII delta by its length, anything else by its UTF-8 encoding), and
:attr:`~TextAccumulator.add` is the event processor's hot path, one C-level call per
delta (the chunk list's own ``append``), whose bytes are counted when someone asks, in
one encode of the joined text if a join came first. The chunk list stays private.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ("Chunks", "TextAccumulator")


def _utf8_len(text: str) -> int:
    # "surrogatepass": a lone surrogate (which stdlib json decodes from "\\ud800") is
    # counted as its 3 bytes rather than raising UnicodeEncodeError mid-stream.
    return len(text.encode("utf-8", "surrogatepass"))


def utf8_len(text: str) -> int:
    """UTF-8 size of ``text`` (fast for ASCII; lone surrogates count 3 bytes)."""
    return len(text) if text.isascii() else _utf8_len(text)


class Chunks:
    """The state and the primitives of an accumulated text, for the classes that hold
    one: :class:`TextAccumulator`, and the conversation's messages and tool calls,
    which hold their text this way themselves rather than in an accumulator of their
    own (one object less per message and call for the cycle collector to walk).

    Its names are private: a holder exposes its text under its own names.

    The chunks are a list only while deltas may come: a text given whole, or sealed
    once its holder is final (:meth:`_seal`), is a tuple of at most one string, which
    the cycle collector does not track (a list it walks for as long as the holder
    lives, and a thread's history holds one per message). Appending to sealed chunks
    makes them a list again.
    """

    __slots__ = ("_bytes", "_chunks", "_counted")

    def _start_chunks(self, initial: str) -> None:
        # UTF-8 size of _chunks[:_counted], or None when nothing is counted yet (a join
        # over deltas that came through the adder drops the count: one encode of the
        # joined string is cheaper than one per delta, and often nobody asks).
        self._bytes: int | None
        self._chunks: list[str] | tuple[str, ...]
        if initial:
            self._chunks = (initial,)
            self._bytes = utf8_len(initial)
            self._counted = 1
        else:
            self._chunks = ()
            self._bytes = 0
            self._counted = 0

    def _open_chunks(self) -> list[str]:
        """The chunk list to append to (a list made of the sealed chunks if need be)."""
        chunks = self._chunks
        if isinstance(chunks, tuple):
            chunks = self._chunks = list(chunks)
        return chunks

    def _seal(self) -> None:
        """No more deltas are expected: keep the text as a tuple of one string (or
        none). An adder taken before no longer reaches the text."""
        text = self._joined()
        self._chunks = (text,) if text else ()

    def _settle(self) -> int:
        """The UTF-8 size of everything received (counting what is not counted yet)."""
        chunks = self._chunks
        counted = self._bytes
        if counted is None:
            text = self._joined()
            counted = utf8_len(text)
            self._counted = len(chunks)
        elif self._counted != len(chunks):
            counted += sum(utf8_len(chunk) for chunk in chunks[self._counted :])
            self._counted = len(chunks)
        self._bytes = counted
        return counted

    def _append_counted(self, delta: str) -> int:
        """Append ``delta`` and return the new total byte count."""
        total = self._settle()
        if delta:
            self._open_chunks().append(delta)
            self._counted += 1
            total += utf8_len(delta)
            self._bytes = total
        return total

    def _joined(self) -> str:
        """Everything received so far, joined (the list collapses to the one string)."""
        chunks = self._chunks
        if len(chunks) > 1 and isinstance(chunks, list):  # sealed chunks hold one at most
            joined = "".join(chunks)
            if self._counted != len(chunks):
                self._bytes = None  # deltas came through the adder: count the whole later
            # In place: whoever holds the adder keeps appending to the same list.
            chunks[:] = (joined,)
            self._counted = 1
        return chunks[0] if chunks else ""


class TextAccumulator(Chunks):
    """An append-only string built from deltas, with O(1) appends and a lazy join."""

    __slots__ = ()

    def __init__(self, initial: str = "") -> None:
        self._start_chunks(initial)

    @property
    def add(self) -> Callable[[str], None]:
        """Appends a non-empty delta in one C-level call, its bytes counted when asked
        (the hot path's way in; :meth:`append` counts as it goes). What it returns
        stays valid for the accumulator's whole life: joins collapse the chunk list in
        place. Made when asked, not kept: a kept bound method is one more object per
        message and call for the cycle collector to walk, and the processor holds
        the adder only while the message or call streams."""
        return self._open_chunks().append

    def append(self, delta: str) -> int:
        """Append ``delta`` and return the new total byte count."""
        return self._append_counted(delta)

    @property
    def byte_count(self) -> int:
        """UTF-8 bytes received so far."""
        return self._settle()

    @property
    def text(self) -> str:
        """Everything received so far, joined (the list collapses to the one string)."""
        return self._joined()

    @property
    def chunk_count(self) -> int:
        """How many chunks are held (1 after a join); for tests and statistics."""
        return len(self._chunks)

    def __bool__(self) -> bool:
        return self.byte_count > 0

    def __repr__(self) -> str:
        return f"TextAccumulator({self.text!r})"
