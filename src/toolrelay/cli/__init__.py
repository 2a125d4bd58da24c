"""The ``toolrelay`` command: ``demo | run | replay | inspect | diagrams | verify | serve``.

:func:`main` takes its I/O as arguments (``argv``, ``stdout``, ``stderr``), so the
tests drive it in-process, as Automat's ``tool(_argv=..., _print=...)`` does.

Exit codes (:class:`ExitCode`): 0 the turn completed (or the command succeeded); the
others say what went wrong, so scripts can tell them apart.

Each subcommand is a module with ``register`` and ``run``; this package builds the
command line from them, one way: they import nothing from it (the exit codes live in
``_exit``).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import TextIO

from toolrelay._version import __version__
from toolrelay.cli import _demo, _diagrams, _inspect, _replay, _run, _serve, _verify
from toolrelay.cli._exit import ExitCode as ExitCode
from toolrelay.cli._terminal import neutralise

__all__ = ("ExitCode", "main")

_COMMANDS = (_demo, _run, _replay, _inspect, _diagrams, _verify, _serve)


class _Parser(argparse.ArgumentParser):
    def __init__(self, *args: object, stderr: TextIO, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self._stderr = stderr

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(self._stderr)
        self._stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(ExitCode.USAGE)


def build_parser(stderr: TextIO) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="toolrelay",
        description="Run, replay, draw and verify LLM tool-calling lifecycles.",
        stderr=stderr,
    )
    parser.add_argument("--version", action="version", version=f"toolrelay {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks and debug logs")

    class _SubParser(_Parser):
        # Subcommand usage errors go to the injected stderr too.
        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, stderr=stderr, **kwargs)

    sub = parser.add_subparsers(dest="command", required=True, parser_class=_SubParser)
    for command in _COMMANDS:
        command.register(sub)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    """Run the ``toolrelay`` command; returns its exit code (see :class:`ExitCode`)."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    parser = build_parser(err)
    try:
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:
        return int(exc.code) if isinstance(exc.code, int) else ExitCode.USAGE
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        stream=err,
        format="%(levelname)s %(name)s: %(message)s",
    )
    try:
        return int(args.func(args, out, err))
    except KeyboardInterrupt:
        err.write("toolrelay: interrupted\n")
        return ExitCode.CTRL_C
    except Exception as exc:
        if _only_broken_pipes(exc):
            _silence(out)
            return ExitCode.BROKEN_PIPE
        if args.debug:
            raise
        for leaf in _leaves(exc):  # what went wrong, not the task group that carried it
            err.write(neutralise(f"toolrelay: error: {type(leaf).__name__}: {leaf}\n"))
        return ExitCode.FAILED


def _leaves(exc: BaseException) -> list[BaseException]:
    """``exc``, or the exceptions an exception group (a task group's) carries, at any depth."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for inner in exc.exceptions for leaf in _leaves(inner)]
    return [exc]


def _only_broken_pipes(exc: BaseException) -> bool:
    """Whether ``exc`` is a closed pipe, alone or as every leaf of an exception group."""
    return all(isinstance(leaf, BrokenPipeError) for leaf in _leaves(exc))


def _silence(out: TextIO) -> None:
    """Point the process's stdout at /dev/null when ``out`` is it, so the interpreter's
    last flush at exit does not fail on the closed pipe once more."""
    if out is not sys.stdout:
        return
    try:
        descriptor = out.fileno()
    except (OSError, ValueError):
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)
