"""``toolrelay demo``: a whole tool-calling turn against the embedded demo agent.

::

    toolrelay demo                       # the "secret" scenario: two tool calls, one answer
    toolrelay demo --scenario multihop   # one tool, then another using its result
    toolrelay demo --scenario loop       # loop detection stops the turn (exit 1)
    toolrelay demo --scenario broken     # the connection drops mid-stream (exit 1)
    toolrelay demo --json                # the final state as JSON

Starts the demo agent (:mod:`toolrelay.demo`) on 127.0.0.1 over real HTTP, runs one
turn against it with the demo tools, and prints it live: the streamed text as it
arrives, "Calling: ..." while calls stream, "Executing: ..." and each tool's outcome,
each continuation, then the final answer and a summary. The ``loop`` and ``broken``
scenarios show the failure paths: they exit 1 and say what happened.

Exit codes: as ``toolrelay run`` (0 completed, 1 failed, 6 interrupted, 130 Ctrl-C:
the turn is cancelled and its summary printed).
"""

from __future__ import annotations

import argparse
import uuid
from pathlib import Path
from typing import Any, Final, TextIO

import anyio

from toolrelay._machines import RunStatus
from toolrelay._reasons import ReasonKind
from toolrelay.backends import AguiHttpBackend
from toolrelay.cli._args import add_max_depth, add_output
from toolrelay.cli._exit import ExitCode
from toolrelay.cli._summary import exit_code, state_json, write_summary
from toolrelay.cli._terminal import reported_violations
from toolrelay.cli._turn import TurnOutcome, run_turn
from toolrelay.demo import DEMO_TOOLS, SCENARIOS, DemoAgent, serve_demo
from toolrelay.diagrams import trace_diagram_for_turn

__all__ = ("register", "run")

#: What the user says in each scenario.
_MESSAGES: Final[dict[str, str]] = {
    "secret": "What are Alice's and Bob's secret numbers?",
    "multihop": "What is the weather where Alice lives?",
    "zero-arg": "Who do you know?",
    "text": "Hello!",
    "loop": "Keep checking Alice's secret number.",
    "broken": "What are the secret numbers?",
    "error": "Tell me something.",
    "malformed": "Send me something odd.",
    "slow": "Tell me a long story.",
}

#: The loop scenario's note when loop detection, not the breaker, stopped it.
_NO_PROGRESS_NOTE: Final[str] = (
    "The agent asked for the same tool with the same arguments after every result. "
    "toolrelay's loop detection stopped the turn with a typed reason (no_progress) "
    "before the circuit breaker (promise 3, max depth {max_depth}) had to."
)

#: What a failing scenario shows, said after its summary.
_NOTES: Final[dict[str, str]] = {
    "loop": (
        "The agent asked for a tool after every result. toolrelay's circuit breaker "
        "(promise 3) stopped the turn after {max_depth} continuation(s) with a typed "
        "reason instead of looping forever."
    ),
    "broken": (
        "The server dropped the connection in the middle of a tool call. The turn ended "
        "failed with a typed transport error, kept the text already received, and "
        "abandoned the half-streamed call instead of executing it."
    ),
    "error": "The agent reported RUN_ERROR; the turn ended failed with the agent's message.",
    "malformed": (
        "The server sent a data line that is not JSON; the turn ended failed with a typed "
        "protocol error, keeping what had arrived before it."
    ),
}


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 5:
        raise argparse.ArgumentTypeError(f"must be between 0 and 5, not {value}")
    return value


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``demo`` subcommand to ``subparsers``."""
    scenarios = "\n".join(f"  {name:<10} {text}" for name, text in SCENARIOS.items())
    parser = subparsers.add_parser(
        "demo",
        help="run a tool-calling turn against the embedded demo agent",
        description=(
            "Start the embedded demo agent on 127.0.0.1 and run one turn against it "
            "with the demo tools, printed live.\n\nscenarios:\n" + scenarios
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--scenario",
        choices=tuple(SCENARIOS),
        default="secret",
        metavar="NAME",
        help="what the agent does (default: secret; see the list above)",
    )
    add_max_depth(parser, 5)
    parser.add_argument(
        "--delay",
        type=_non_negative,
        default=0.02,
        metavar="SECONDS",
        help="pause between the agent's events, to watch it stream (default: 0.02)",
    )
    add_output(parser)
    parser.add_argument(
        "--diagram",
        type=Path,
        default=None,
        metavar="OUT",
        help="also write the finished turn as a Mermaid sequence diagram to OUT",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay demo``; returns an :class:`~toolrelay.cli.ExitCode`."""
    scenario: str = args.scenario
    message = _MESSAGES.get(scenario, scenario)
    live = None if args.json else stdout

    async def main() -> TurnOutcome:
        async with serve_demo(DemoAgent()) as url:
            if live is not None:
                live.write(f"Scenario {scenario}: {SCENARIOS[scenario]}.\n")
                live.write(f"Demo agent at {url}; tools: {', '.join(DEMO_TOOLS.names)}.\n\n")
                live.write(f"You: {message}\n")
            async with AguiHttpBackend(url) as backend:
                return await run_turn(
                    backend,
                    DEMO_TOOLS,
                    message,
                    thread_id=f"demo-{uuid.uuid4().hex[:12]}",
                    max_depth=args.max_depth,
                    out=live,
                    forwarded_props={"scenario": scenario, "delay": args.delay},
                    ctrl_c=True,
                )

    with reported_violations(not args.debug):
        outcome = anyio.run(main, backend=args.backend)
    if args.diagram is not None:
        try:
            args.diagram.write_text(trace_diagram_for_turn(outcome.turn), encoding="utf-8")
        except OSError as exc:
            stderr.write(f"toolrelay demo: cannot write {args.diagram}: {exc.strerror or exc}\n")
            return ExitCode.USAGE
    if args.json:
        stdout.write(state_json(outcome))
    else:
        write_summary(outcome, stdout)
        note = _NOTES.get(scenario)
        reason = outcome.turn.reason
        if scenario == "loop" and reason is not None and reason.kind is ReasonKind.NO_PROGRESS:
            note = _NO_PROGRESS_NOTE
        if note is not None and outcome.turn.status is RunStatus.failed:
            stdout.write(note.format(max_depth=args.max_depth) + "\n")
    return exit_code(outcome)
