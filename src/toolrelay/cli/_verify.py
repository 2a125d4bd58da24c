"""``toolrelay verify``: check the machines and run the stateful property suite.

::

    toolrelay verify                         # 100 examples, random seed, asyncio
    toolrelay verify --examples 1000 --seed 7 --backend trio

Prints one PASS/FAIL line per check the moment it finishes (see :mod:`toolrelay.verify`),
with the detail of each failure, Hypothesis's falsifying steps and
``@reproduce_failure`` blob included. The suite's seed is in its line (one is drawn when
``--seed`` is not given), so ``--seed`` replays a failed run. Needs Hypothesis: the
``verify`` extra (the ``demo`` extra includes it).
Exit codes: 0 every check held; ``CHECK_FAILED`` (5) one did not.
"""

from __future__ import annotations

import argparse
from typing import Any, TextIO

from toolrelay.cli._args import whole_number
from toolrelay.cli._exit import ExitCode

__all__ = ("register", "run")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``verify`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        "verify",
        help="check the machines and run the stateful property suite",
        description=(
            "Check both machines (graph, every (state, event) pair, compiled table) "
            "and run the stateful property suite of the eight promises."
        ),
    )
    parser.add_argument(
        "--examples",
        type=whole_number(1),
        default=100,
        metavar="N",
        help="examples of the property suite (default: 100)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        metavar="S",
        help="the suite's seed (default: drawn at random and printed, to replay a failure)",
    )
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the anyio backend the suite runs on (default: asyncio)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay verify``; returns an :class:`~toolrelay.cli.ExitCode`."""
    from toolrelay.cli._terminal import Palette
    from toolrelay.verify import CheckResult, format_result, format_summary, verify

    palette = Palette.for_stream(stdout)

    def show(result: CheckResult) -> None:
        text = format_result(result)
        verdict, rest = text[:4], text[4:]  # PASS or FAIL, ours to paint
        stdout.write(palette.paint(verdict, "green" if result.ok else "red") + rest)
        stdout.flush()

    report = verify(examples=args.examples, seed=args.seed, backend=args.backend, on_result=show)
    stdout.write(palette.paint(format_summary(report), "green" if report.ok else "red"))
    if report.ok:
        return ExitCode.OK
    stderr.write(f"toolrelay verify: {len(report.failures)} check(s) failed (details above)\n")
    return ExitCode.CHECK_FAILED
