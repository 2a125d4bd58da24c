"""``toolrelay diagrams``: write the machines' diagrams, or check them for drift.

::

    toolrelay diagrams                    # diagrams/*.mmd and *.dot in the current directory
    toolrelay diagrams --out docs/img     # somewhere else
    toolrelay diagrams --format svg       # images (needs Graphviz's `dot` on PATH)
    toolrelay diagrams --check            # exit 5 and name the drifted files, 0 when clean

Exit codes: 0 written / clean; ``CHECK_FAILED`` (5) drift; ``USAGE`` (2) Graphviz
missing for svg/png, or ``--check`` asked of an image format.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, TextIO

from toolrelay.cli._exit import ExitCode
from toolrelay.diagrams import DiagramError, Format, TextFormat, check, write_all

__all__ = ("register", "run")

_FORMATS: tuple[Format, ...] = ("mermaid", "dot", "svg", "png")
_DEFAULT_FORMATS: tuple[TextFormat, ...] = ("mermaid", "dot")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``diagrams`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        "diagrams",
        help="draw the state machines (mermaid, dot, svg, png) or check them for drift",
        description=(
            "Write the diagrams of the run lifecycle and tool call machines, drawn from "
            "their declared classes. Without --format: mermaid and dot."
        ),
    )
    parser.add_argument(
        "--format",
        choices=_FORMATS,
        default=None,
        help="one format only (svg and png need Graphviz's `dot` program)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("diagrams"),
        metavar="DIR",
        help="the directory to write into or check (default: ./diagrams)",
    )
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 5 listing the files that are missing or differ",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay diagrams``; returns an :class:`~toolrelay.cli.ExitCode`."""
    out: Path = args.out
    chosen: Format | None = args.format
    if args.check:
        if chosen == "svg" or chosen == "png":
            stderr.write(
                f"toolrelay diagrams: --check compares text diagrams only (mermaid, dot), "
                f"not {chosen}: image bytes depend on the Graphviz version\n"
            )
            return ExitCode.USAGE
        formats: tuple[TextFormat, ...] = _DEFAULT_FORMATS if chosen is None else (chosen,)
        drifted = check(out, formats)
        if drifted:
            stderr.write(
                f"toolrelay diagrams: {len(drifted)} diagram file(s) in {out} are missing "
                "or out of date; run `toolrelay diagrams` to regenerate them:\n"
            )
            for name in drifted:
                stderr.write(f"  {out / name}\n")
            return ExitCode.CHECK_FAILED
        stdout.write(f"diagrams in {out} are up to date\n")
        return ExitCode.OK
    try:
        paths = write_all(out, _DEFAULT_FORMATS if chosen is None else (chosen,))
    except DiagramError as exc:
        stderr.write(f"toolrelay diagrams: {exc}\n")
        return ExitCode.USAGE
    for path in paths:
        stdout.write(f"{path}\n")
    return ExitCode.OK
