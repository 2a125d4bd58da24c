"""``toolrelay run``: one turn against a real AG-UI server, with your tools.

::

    toolrelay run http://127.0.0.1:8000/agent --tools mytools:TOOLS --message "Hi"
    toolrelay run URL --tools pkg.tools:get_weather --message "Weather in Paris?" --json
    toolrelay run URL --tools mytools:TOOLS --message "..." --header "Authorization: Bearer x"

``--tools MODULE:ATTR`` names a :class:`~toolrelay.ToolRegistry`, a
:class:`~toolrelay.ToolSpec`, a tool function, or a list of those, importable from
the current directory or the installed packages. Without ``--json`` the turn is printed
live (streamed text, "Calling: ...", "Executing: ..." with each tool's outcome, each
continuation) and summed up; with ``--json`` stdout gets the final state alone: status,
reason, the conversation as AG-UI messages.

Exit codes: 0 the turn completed; ``FAILED`` (1) it failed; ``UNREACHABLE`` (4) the
server could not be reached; ``USAGE`` (2) a bad flag or a ``--tools`` that does not
import; ``CANCELLED`` (3) the agent reported its run cancelled; ``CTRL_C`` (130)
Ctrl-C (SIGINT) cancelled the turn, whose summary (or JSON state) is printed all the
same;
``INTERRUPTED`` (6) the agent paused the turn to ask something (each interrupt is
printed with its id, the JSON state lists them under ``interrupts``).

The turn itself is :mod:`._turn`'s, printed by :mod:`._live`, and summed up by
:mod:`._summary`, all three shared with ``toolrelay demo``.
"""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any, TextIO

import anyio
import httpx

from toolrelay._core import Limits, ToolRegistry
from toolrelay._errors import RunAllocationError
from toolrelay.backends import AguiHttpBackend, RetryPolicy
from toolrelay.backends._base import AgentBackend
from toolrelay.backends.providers import PROVIDERS, ProviderBackend, provider_backend
from toolrelay.cli._args import add_max_depth, add_output, whole_number
from toolrelay.cli._exit import ExitCode
from toolrelay.cli._summary import exit_code, state_json, write_summary
from toolrelay.cli._terminal import neutralise, reported_violations
from toolrelay.cli._tools import ToolsUsageError, load_tools
from toolrelay.cli._turn import TurnOutcome, run_turn

__all__ = ("httpx_timeout", "register", "run")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def _seconds_or_none(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if value < 0 or value != value:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {text}")
    return value or None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"a header is NAME:VALUE, not {text!r}")
    return name.strip(), value.strip()


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``run`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        "run",
        help="run one turn against an AG-UI server, executing your tools",
        description=(
            "Send a message to an AG-UI agent server, execute the tools it calls, "
            "continue until it answers, and print the turn live (or its final state as "
            "JSON)."
        ),
    )
    parser.add_argument(
        "url",
        metavar="URL",
        nargs="?",
        default=None,
        help="the AG-UI agent's endpoint (runs are POSTed to it); omit with --provider",
    )
    parser.add_argument(
        "--provider",
        choices=sorted(PROVIDERS),
        default=None,
        help="drive an LLM provider's streaming API instead of an AG-UI server "
        "(the API key comes from the provider's environment variable)",
    )
    parser.add_argument("--model", default=None, metavar="NAME", help="the provider's model")
    parser.add_argument(
        "--base-url",
        default=None,
        metavar="URL",
        help="the provider's API base URL (OpenAI-compatible servers, a local Ollama...); "
        "the provider's own key variable is never sent to another host: use --api-key-env",
    )
    parser.add_argument(
        "--api-key-env",
        default=None,
        metavar="NAME",
        help="the environment variable holding the provider's API key (needed to send a "
        "key to a --base-url that is not the provider's own host)",
    )
    parser.add_argument(
        "--tools",
        metavar="MODULE:ATTR",
        default=None,
        help="a ToolRegistry, a ToolSpec, a tool function or a list of them "
        "(importable from the current directory); default: no tools",
    )
    parser.add_argument("--message", required=True, metavar="TEXT", help="the user's message")
    parser.add_argument(
        "--thread", default=None, metavar="ID", help="the thread id (default: a new one)"
    )
    add_max_depth(parser, 10)
    parser.add_argument(
        "--header",
        type=_header,
        action="append",
        default=[],
        metavar="NAME:VALUE",
        help="a header sent with every run (repeatable)",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=60.0,
        metavar="SECONDS",
        help="read timeout: the longest silence tolerated from the server (default: 60)",
    )
    parser.add_argument(
        "--run-seconds",
        type=_seconds_or_none,
        default=Limits().run_seconds,
        metavar="SECONDS",
        help="wall-clock bound on each run's stream, however lively (0: none; default: "
        "%(default)s)",
    )
    parser.add_argument(
        "--turn-seconds",
        type=_seconds_or_none,
        default=Limits().turn_seconds,
        metavar="SECONDS",
        help="wall-clock bound on the whole turn, tools included (0: none; default: %(default)s)",
    )
    parser.add_argument(
        "--retries",
        type=whole_number(0),
        default=RetryPolicy().attempts,
        metavar="N",
        help="retries of a run that could not start (HTTP 429/503, a reset before the "
        "answer), honouring Retry-After (0: none; default: %(default)s)",
    )
    add_output(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay run``; returns an :class:`~toolrelay.cli.ExitCode`."""
    try:
        tools = load_tools(args.tools) if args.tools else ToolRegistry()
    except ToolsUsageError as exc:
        stderr.write(f"toolrelay run: {exc}\n")
        return ExitCode.USAGE
    if (args.url is None) == (args.provider is None):
        stderr.write("toolrelay run: give either an AG-UI URL or --provider NAME --model NAME\n")
        return ExitCode.USAGE
    if args.provider is not None and not args.model:
        stderr.write(f"toolrelay run: --provider {args.provider} needs --model NAME\n")
        return ExitCode.USAGE
    headers = dict(args.header)
    timeout = httpx_timeout(args.timeout)
    target = args.url or f"{args.provider} ({args.base_url or 'default endpoint'})"
    limits = Limits(run_seconds=args.run_seconds, turn_seconds=args.turn_seconds)
    retry = RetryPolicy(attempts=args.retries)
    api_key: str | None = None
    if args.api_key_env is not None:
        if args.provider is None:
            stderr.write("toolrelay run: --api-key-env goes with --provider\n")
            return ExitCode.USAGE
        api_key = os.environ.get(args.api_key_env) or None
        if api_key is None:
            stderr.write(f"toolrelay run: the variable {args.api_key_env} is not set\n")
            return ExitCode.USAGE
    provider: ProviderBackend | None = None
    if args.provider is not None:
        provider = provider_backend(
            args.provider,
            args.model,
            api_key=api_key,
            base_url=args.base_url,
            headers=headers,
            timeout=timeout,
            limits=limits,
            retry=retry,
        )
        if provider.withheld_key_env is not None:
            stderr.write(
                f"toolrelay run: {provider.withheld_key_env} is not sent to {args.base_url}, "
                f"which is not {args.provider}'s own host; to send a key there, name its "
                "variable with --api-key-env NAME\n"
            )
        try:
            provider.check_api_key()
        except RunAllocationError as exc:
            stderr.write(f"toolrelay run: {exc.message}\n")
            return ExitCode.USAGE

    async def turn_on(backend: AgentBackend) -> TurnOutcome:
        return await run_turn(
            backend,
            tools,
            args.message,
            thread_id=args.thread or uuid.uuid4().hex,
            max_depth=args.max_depth,
            out=None if args.json else stdout,
            limits=limits,
            ctrl_c=True,
        )

    async def main() -> TurnOutcome:
        if provider is not None:
            try:
                return await turn_on(provider)
            finally:
                await provider.aclose()
        async with AguiHttpBackend(
            args.url, headers=headers, timeout=timeout, limits=limits, retry=retry
        ) as backend:
            return await turn_on(backend)

    with reported_violations(not args.debug):
        outcome = anyio.run(main, backend=args.backend)
    code = exit_code(outcome)
    if args.json:
        stdout.write(state_json(outcome))
    elif code != ExitCode.UNREACHABLE:
        write_summary(outcome, stdout)
    if code == ExitCode.UNREACHABLE:
        reason = outcome.turn.reason
        detail = reason.message if reason is not None else "connection failed"
        stderr.write(neutralise(f"toolrelay run: cannot reach {target}: {detail}\n"))
    return code


def httpx_timeout(read: float) -> httpx.Timeout:
    """Connect within 10 seconds; tolerate ``read`` seconds of silence."""
    return httpx.Timeout(read, connect=min(10.0, read))
