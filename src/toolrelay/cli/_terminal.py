"""Text from the wire, made safe to print on a terminal.

Everything the CLI prints for people may hold text a server chose: the agent's answer,
tool names and arguments, error messages, reasons. A control character in it could
move the cursor, clear the screen, set the window title, write the clipboard (OSC 52)
or fake a line of toolrelay's own output. :func:`neutralise` makes every such
character visible and harmless; ``--json`` output is left exact (JSON escapes control
characters itself).

:class:`Palette` colours toolrelay's own words (statuses, PASS/FAIL) on a terminal only:
never when the stream is not a TTY, never with ``NO_COLOR`` set (https://no-color.org),
never on ``TERM=dumb``; ``FORCE_COLOR`` turns it on anyway. The colour codes are added
after the text is neutralised, so a server's text cannot smuggle any.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, Literal, TextIO

__all__ = (
    "Palette",
    "SafeOut",
    "colour_wanted",
    "neutralise",
    "reported_violations",
    "summarise_counts",
    "write_safe",
)

Colour = Literal["red", "green", "yellow", "cyan", "bold", "dim"]

_SGR: Final[dict[str, str]] = {
    "red": "31",
    "green": "32",
    "yellow": "33",
    "cyan": "36",
    "bold": "1",
    "dim": "2",
}


def _table() -> dict[int, str | None]:
    table: dict[int, str | None] = {}
    for code in range(0x20):
        table[code] = chr(0x2400 + code)  # the control pictures: ESC shows as "␛"
    del table[ord("\n")], table[ord("\t")]  # kept: lines and tabs are ours to print
    table[ord("\r")] = None  # dropped: a carriage return would overwrite the line
    table[0x7F] = "\u2421"  # DEL
    for code in range(0x80, 0xA0):  # C1 controls (CSI, OSC... as single characters)
        table[code] = "\ufffd"
    # Line separators and bidirectional overrides, which can reorder or fake lines.
    for code in (0x2028, 0x2029, *range(0x202A, 0x202F), *range(0x2066, 0x206A)):
        table[code] = "\ufffd"
    return table


_TABLE: Final = _table()


def neutralise(text: str) -> str:
    """``text`` with every terminal control character replaced by a visible one.

    Newlines and tabs are kept, carriage returns dropped, C0 controls shown as their
    control pictures (ESC as ``␛``), C1 controls, line separators and bidirectional
    overrides as U+FFFD. Linear in ``text``.
    """
    return text.translate(_TABLE)


def write_safe(out: TextIO, text: str) -> None:
    """Write ``text`` to ``out``, neutralised."""
    out.write(text.translate(_TABLE))


def summarise_counts(counts: Mapping[str, int] | Iterable[tuple[str, int]]) -> str:
    """``"a: 3, b: 1"``, the largest counts first."""
    items = counts.items() if isinstance(counts, Mapping) else counts
    ranked = sorted(items, key=lambda item: (-item[1], item[0]))
    return ", ".join(f"{name}: {count}" for name, count in ranked)


def _not_a_violation(record: logging.LogRecord) -> bool:
    return not hasattr(record, "protocol_violation")


@contextlib.contextmanager
def reported_violations(enabled: bool = True) -> Iterator[None]:
    """Within it, protocol violations are not logged: the command reports each one
    itself (its summary, its JSON), so it is printed once. ``enabled=False`` (``--debug``)
    keeps the log."""
    core = logging.getLogger("toolrelay.core")
    if enabled:
        core.addFilter(_not_a_violation)
    try:
        yield
    finally:
        core.removeFilter(_not_a_violation)


def colour_wanted(stream: TextIO, environ: Mapping[str, str] | None = None) -> bool:
    """Whether to colour what is written to ``stream``: ``FORCE_COLOR`` (non-empty) says
    yes; else ``NO_COLOR`` (non-empty) or ``TERM=dumb`` say no; else only a TTY."""
    env = os.environ if environ is None else environ
    if env.get("FORCE_COLOR"):
        return True
    if env.get("NO_COLOR") or env.get("TERM") == "dumb":
        return False
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty()) if isatty is not None else False
    except (OSError, ValueError):  # a closed or detached stream
        return False


class Palette:
    """Paints toolrelay's own words, or leaves them plain (see :func:`colour_wanted`)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled

    @classmethod
    def for_stream(cls, stream: TextIO) -> Palette:
        return cls(colour_wanted(stream))

    def paint(self, text: str, colour: Colour | None) -> str:
        """``text`` in ``colour`` (when enabled); newlines around it stay outside."""
        body = text.strip("\n")
        if not self.enabled or colour is None or not body:
            return text
        start = text.index(body)
        return f"{text[:start]}\x1b[{_SGR[colour]}m{body}\x1b[0m{text[start + len(body) :]}"


class SafeOut:
    """A text stream's ``write`` with every string neutralised, then painted (colour
    codes are ours, added after: see :class:`Palette`)."""

    def __init__(self, out: TextIO, palette: Palette | None = None) -> None:
        self._out = out
        self.palette = palette if palette is not None else Palette.for_stream(out)

    def write(self, text: str, colour: Colour | None = None) -> int:
        return self._out.write(self.palette.paint(neutralise(text), colour))
