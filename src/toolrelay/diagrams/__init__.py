"""Diagrams drawn from the declared machines, and traces of finished turns.

Machine diagrams (STYLE point 15: build outputs, never hand-drawn)::

    from toolrelay.diagrams import MACHINES, check, render, render_image, write_all
    from toolrelay._machines import RunLifecycle

    render(RunLifecycle, "mermaid")      # stateDiagram-v2 text (python-statemachine's own)
    render(RunLifecycle, "dot")          # Graphviz source; needs neither pydot nor Graphviz
    render_image(RunLifecycle, "svg")    # bytes; needs Graphviz's `dot` on PATH
    write_all("diagrams")                # run_lifecycle.mmd/.dot, tool_call.mmd/.dot
    check("diagrams")                    # the names of drifted files, [] when clean

``toolrelay diagrams`` writes them, ``toolrelay diagrams --check`` fails on drift.

Trace diagrams draw the path one turn took as a Mermaid ``sequenceDiagram``:
:func:`trace_diagram` from a conversation, :func:`trace_diagram_for_turn` from a
:class:`~toolrelay.Turn`.
"""

from __future__ import annotations

from toolrelay.diagrams._render import (
    EXTENSIONS as EXTENSIONS,
    GRAPHVIZ_INSTALL_HINT as GRAPHVIZ_INSTALL_HINT,
    MACHINES as MACHINES,
    DiagramError as DiagramError,
    Format as Format,
    GraphvizError as GraphvizError,
    GraphvizNotFoundError as GraphvizNotFoundError,
    ImageFormat as ImageFormat,
    TextFormat as TextFormat,
    check as check,
    render as render,
    render_image as render_image,
    write_all as write_all,
)
from toolrelay.diagrams._trace import (
    escape_mermaid as escape_mermaid,
    trace_diagram as trace_diagram,
    trace_diagram_for_turn as trace_diagram_for_turn,
)

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
    "escape_mermaid",
    "render",
    "render_image",
    "trace_diagram",
    "trace_diagram_for_turn",
    "write_all",
)
