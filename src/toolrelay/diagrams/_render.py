"""The machines' diagrams: mermaid and DOT text, SVG and PNG images, and their files.

Diagrams are build outputs, never hand-drawn (STYLE point 15): every one is drawn
from the declared classes in ``toolrelay._machines``, the same classes the compiled
tables are read from. ``toolrelay diagrams`` writes them into ``diagrams/`` and
``toolrelay diagrams --check`` fails when a committed file has drifted.

Strategy
--------

* **Labels** are the library's: a state is drawn with its ``State.name``, a
  transition with its events' ``Event.name``. toolrelay's machines declare both as
  the id (``labelled_by_value`` for states, ``Event(..., name=RunEvent.continue_run)``
  for events), so every diagram reads ``executing_tools`` and ``continue_run``, the
  spelling of the enums and the run logs, never a humanized "Executing tools". As
  label and id are equal, mermaid needs no ``state "..." as id`` line.
* **Mermaid** is python-statemachine's own renderer (``format(cls, "mermaid")``),
  used as it is. It marks each final state with an arrow to ``[*]``;
  :func:`render` checks that and adds a missing arrow, so a change in the library
  cannot silently drop the marking.
* **DOT** is printed by ``_dot.py`` from the library's ``extract()`` reading of the
  class, not by the library's pydot renderer: that one needs ``pydot`` (not a
  toolrelay dependency) and puts ``id()`` values in node names, which would make
  every run a drift.
* **SVG / PNG** run Graphviz's ``dot`` program on that DOT text, through the
  library's ``run_graphviz``. They need the program on ``PATH``, never ``pydot``. A
  missing program is a :class:`GraphvizNotFoundError` whose message says how to
  install it.
* **Files** hold exactly :func:`render`'s text, as UTF-8 bytes with ``\\n`` line
  ends, so they are the same on every platform and can be pasted as they are (the
  README's diagram is the run lifecycle file); unchanged files are not rewritten.
"""

from __future__ import annotations

import shutil
import types
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, cast, get_args

from statemachine import StateChart
from statemachine.contrib.diagram.graphviz import (
    GraphvizError as _LibraryGraphvizError,
    GraphvizNotFoundError as _LibraryGraphvizNotFoundError,
    run_graphviz,
)

from toolrelay._machines import RunLifecycle, ToolCallLifecycle
from toolrelay.diagrams._dot import render_dot

__all__ = (
    "DiagramError",
    "EXTENSIONS",
    "Format",
    "GRAPHVIZ_INSTALL_HINT",
    "GraphvizError",
    "GraphvizNotFoundError",
    "ImageFormat",
    "MACHINES",
    "TextFormat",
    "check",
    "render",
    "render_image",
    "write_all",
)

TextFormat: TypeAlias = Literal["mermaid", "dot"]
"""The text formats: always available, deterministic, drift-checked."""
ImageFormat: TypeAlias = Literal["svg", "png"]
"""The image formats: drawn by Graphviz's ``dot`` program."""
Format: TypeAlias = TextFormat | ImageFormat
"""Every format ``toolrelay diagrams`` writes."""

TEXT_FORMATS: Final[tuple[TextFormat, ...]] = get_args(TextFormat)
IMAGE_FORMATS: Final[tuple[ImageFormat, ...]] = get_args(ImageFormat)

#: The machines drawn, by file stem: ``diagrams/<stem>.<extension>``.
MACHINES: Final[Mapping[str, type[StateChart[Any]]]] = types.MappingProxyType(
    {"run_lifecycle": RunLifecycle, "tool_call": ToolCallLifecycle}
)

#: The file extension of each format.
EXTENSIONS: Final[Mapping[Format, str]] = types.MappingProxyType(
    {"mermaid": "mmd", "dot": "dot", "svg": "svg", "png": "png"}
)

#: How to get Graphviz's ``dot`` program, in one line.
GRAPHVIZ_INSTALL_HINT: Final = (
    "install Graphviz (Debian/Ubuntu: apt-get install graphviz; macOS: brew install "
    "graphviz; others: https://graphviz.org/download/); mermaid and dot text need nothing"
)


class DiagramError(Exception):
    """A diagram could not be drawn."""


class GraphvizError(DiagramError):
    """Graphviz's ``dot`` program ran and failed; the message holds what it wrote."""


class GraphvizNotFoundError(GraphvizError, FileNotFoundError):
    """Graphviz's ``dot`` program is not on ``PATH``, so SVG and PNG cannot be drawn.

    Also a :class:`FileNotFoundError`, as python-statemachine's own error is. The
    message says how to install Graphviz (:data:`GRAPHVIZ_INSTALL_HINT`). Mermaid
    and DOT text never need it.
    """


def _mark_finals(machine: type[StateChart[Any]], mermaid: str) -> str:
    """Add a ``state --> [*]`` line for each final state the library did not mark."""
    lines = mermaid.rstrip("\n").split("\n")
    marked = {line.strip() for line in lines}
    missing = [
        f"    {state.id} --> [*]"
        for state in machine.states
        if state.final and f"{state.id} --> [*]" not in marked
    ]
    return "\n".join([*lines, *missing]) + "\n"


def render(machine: type[StateChart[Any]], fmt: TextFormat) -> str:
    """Draw ``machine`` (a ``StateChart`` class) as mermaid or DOT text.

    Both are deterministic byte for byte, name every state (by id) and every event,
    and mark the initial state and the final states. Nothing beyond
    python-statemachine is needed (not ``pydot``, not Graphviz).

    Args:
        machine: The class (``RunLifecycle``); it is never instantiated.
        fmt: ``"mermaid"`` (a ``stateDiagram-v2``) or ``"dot"`` (Graphviz source).

    Raises:
        ValueError: ``fmt`` is not a text format, or (DOT) the machine is not flat.
    """
    if fmt == "mermaid":
        return _mark_finals(machine, format(machine, "mermaid"))
    if fmt == "dot":
        return render_dot(machine)
    raise ValueError(
        f"unknown text format {fmt!r}: use one of {', '.join(TEXT_FORMATS)} "
        "(render_image draws svg and png)"
    )


def graphviz_path() -> str | None:
    """Where Graphviz's ``dot`` program is, or ``None`` when it is not on ``PATH``."""
    return shutil.which("dot")


def render_image(machine: type[StateChart[Any]], fmt: ImageFormat) -> bytes:
    """Draw ``machine`` as an SVG or PNG image with Graphviz's ``dot`` program.

    The image is drawn from :func:`render`'s DOT text; ``pydot`` is not needed.
    Images are not drift-checked: their bytes depend on the Graphviz version.

    Raises:
        GraphvizNotFoundError: ``dot`` is not on ``PATH``; the message says how to
            install Graphviz. Nothing was run.
        GraphvizError: ``dot`` ran and failed (its stderr is in the message).
        ValueError: ``fmt`` is not ``"svg"`` or ``"png"``.
    """
    if fmt not in IMAGE_FORMATS:
        raise ValueError(f"unknown image format {fmt!r}: use one of {', '.join(IMAGE_FORMATS)}")
    program = graphviz_path()
    if program is None:
        raise GraphvizNotFoundError(
            f"cannot draw {fmt}: Graphviz's 'dot' program is not on PATH; {GRAPHVIZ_INSTALL_HINT}"
        )
    source = render_dot(machine)
    try:
        return run_graphviz(source, fmt, prog=program)
    except _LibraryGraphvizNotFoundError as exc:
        raise GraphvizNotFoundError(
            f"cannot draw {fmt}: {program!r} could not be run; {GRAPHVIZ_INSTALL_HINT}"
        ) from exc
    except _LibraryGraphvizError as exc:
        raise GraphvizError(f"cannot draw {fmt}: {exc}") from exc


def _file_bytes(machine: type[StateChart[Any]], fmt: Format) -> bytes:
    if fmt == "mermaid" or fmt == "dot":
        return render(machine, fmt).encode("utf-8")
    return render_image(machine, fmt)


def _formats(formats: Iterable[str], allowed: Sequence[str]) -> list[Format]:
    chosen: list[Format] = []
    for fmt in formats:
        if fmt not in allowed:
            raise ValueError(f"unknown diagram format {fmt!r}: use one of {', '.join(allowed)}")
        if fmt not in chosen:
            chosen.append(cast("Format", fmt))  # checked against `allowed` above
    return chosen


def _targets(
    out_dir: Path, formats: Sequence[Format]
) -> list[tuple[Path, type[StateChart[Any]], Format]]:
    return [
        (out_dir / f"{stem}.{EXTENSIONS[fmt]}", machine, fmt)
        for stem, machine in MACHINES.items()
        for fmt in formats
    ]


def write_all(out_dir: str | Path, formats: Iterable[Format] = ("mermaid", "dot")) -> list[Path]:
    """Write every machine of :data:`MACHINES` in every format into ``out_dir``.

    Files are ``<stem>.<extension>`` (``run_lifecycle.mmd``, ``tool_call.dot``...);
    ``out_dir`` is created if needed; a file whose bytes would not change is left
    untouched.

    Returns:
        The paths of the files, written or already up to date, in order.

    Raises:
        ValueError: An unknown format (nothing was written).
        GraphvizNotFoundError: ``svg``/``png`` asked and Graphviz is missing
            (nothing was written: images are drawn before any file is).
        GraphvizError: Graphviz failed (nothing was written).
        OSError: A file could not be written (earlier files may have been).
    """
    chosen = _formats(formats, (*TEXT_FORMATS, *IMAGE_FORMATS))
    directory = Path(out_dir)
    contents = [
        (path, _file_bytes(machine, fmt)) for path, machine, fmt in _targets(directory, chosen)
    ]
    directory.mkdir(parents=True, exist_ok=True)
    for path, data in contents:
        if not path.is_file() or path.read_bytes() != data:
            path.write_bytes(data)
    return [path for path, _ in contents]


def check(out_dir: str | Path, formats: Iterable[TextFormat] = ("mermaid", "dot")) -> list[str]:
    """Compare the diagram files in ``out_dir`` with the machines as declared now.

    Returns:
        The names of the files that are missing or differ (drift), in
        :func:`write_all` order; empty when everything is up to date.

    Raises:
        ValueError: A format that is not a text format (images are not checked: their
            bytes depend on the Graphviz version).
    """
    chosen = _formats(formats, TEXT_FORMATS)
    drifted: list[str] = []
    for path, machine, fmt in _targets(Path(out_dir), chosen):
        expected = _file_bytes(machine, fmt)
        if not path.is_file() or path.read_bytes() != expected:
            drifted.append(path.name)
    return drifted
