"""Command-line arguments more than one subcommand takes, declared once."""

from __future__ import annotations

import argparse
from collections.abc import Callable

__all__ = ("add_max_depth", "add_output", "whole_number")


def whole_number(minimum: int) -> Callable[[str], int]:
    """An argparse ``type``: a whole number of at least ``minimum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, not {value}")
        return value

    return parse


def add_max_depth(parser: argparse.ArgumentParser, default: int) -> None:
    """``--max-depth N``: the circuit breaker of a turn."""
    parser.add_argument(
        "--max-depth",
        type=whole_number(0),
        default=default,
        metavar="N",
        help=f"continuations allowed before the circuit breaker trips (default: {default})",
    )


def add_output(parser: argparse.ArgumentParser) -> None:
    """``--json`` and ``--backend``: how a turn is printed and the loop it runs on."""
    parser.add_argument(
        "--json", action="store_true", help="print only the final state, as JSON, on stdout"
    )
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the async library to run on (default: asyncio)",
    )
