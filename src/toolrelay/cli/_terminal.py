"""Text from the wire, made safe to print on a terminal.

Everything the CLI prints for people may hold text a server chose: the agent's answer,
tool names and arguments, error messages, reasons. A control character in it could
move the cursor, clear the screen, set the window title, write the clipboard (OSC 52)
or fake a line of toolrelay's own output. :func:`neutralise` makes every such
character visible and harmless; ``--json`` output is left exact (JSON escapes control
characters itself).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Final, TextIO

__all__ = ("neutralise", "reported_violations", "summarise_counts", "write_safe")


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
