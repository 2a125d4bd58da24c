"""``toolrelay run``: one turn against a real AG-UI server, with your tools.

::

    toolrelay run http://127.0.0.1:8000/agent --tools mytools:TOOLS --message "Hi"
    toolrelay run URL --tools pkg.tools:get_weather --message "Weather in Paris?" --json
    toolrelay run URL --tools mytools:TOOLS --message "..." --header "Authorization: Bearer x"

``--tools MODULE:ATTR`` names a :class:`~toolrelay.core.ToolRegistry`, a
:class:`~toolrelay.core.ToolSpec`, a tool function, or a list of those, importable from
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

This module also holds what ``toolrelay demo`` shares with ``run``: the live printer,
the summary, the JSON state and the exit code of a finished turn.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

import anyio
import anyio.abc
import httpx
import msgspec

from toolrelay._reasons import ReasonKind
from toolrelay.backends import AguiHttpBackend, RetryPolicy
from toolrelay.backends._base import AgentBackend
from toolrelay.backends.providers import PROVIDERS, ProviderBackend, provider_backend
from toolrelay.cli._terminal import (
    Colour,
    Palette,
    SafeOut,
    neutralise,
    reported_violations,
    summarise_counts,
)
from toolrelay.core import (
    Activity,
    ActivityKind,
    Limits,
    TextMessage,
    ThreadKey,
    ToolRegistry,
    ToolResult,
    ToolSpec,
    to_agui_messages,
)
from toolrelay.errors import RunAllocationError, ToolDefinitionError
from toolrelay.machines import RunStatus, ToolCallStatus
from toolrelay.protocol import (
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallStartEvent,
    encode,
)
from toolrelay.runtime import EventReceived, RunRetrying, StateChanged, ToolCallFinished, Turn

__all__ = (
    "LivePrinter",
    "ToolsUsageError",
    "TurnOutcome",
    "call_counts",
    "exit_code",
    "httpx_timeout",
    "load_tools",
    "register",
    "run",
    "run_turn",
    "state_json",
    "write_summary",
)

_RESULT_CHARS = 120  # of a tool's result, printed live
_NAMES_SHOWN = 8  # tool names listed on one line, the rest counted
_VIOLATIONS_SHOWN = 5  # violations printed one by one in a summary, the rest counted


class ToolsUsageError(Exception):
    """``--tools`` cannot be turned into a registry; the message says why."""


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be at least 0, not {value}")
    return value


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
    parser.add_argument(
        "--max-depth",
        type=_positive_int,
        default=10,
        metavar="N",
        help="continuations allowed before the circuit breaker trips (default: 10)",
    )
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
        type=_positive_int,
        default=RetryPolicy().attempts,
        metavar="N",
        help="retries of a run that could not start (HTTP 429/503, a reset before the "
        "answer), honouring Retry-After (0: none; default: %(default)s)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print only the final state, as JSON, on stdout"
    )
    parser.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default="asyncio",
        help="the async library to run on (default: asyncio)",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay run``; returns an :class:`~toolrelay.cli.ExitCode`."""
    from toolrelay.cli import ExitCode

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


# --- loading tools ---------------------------------------------------------------------


def load_tools(spec: str) -> ToolRegistry:
    """The registry named by ``MODULE:ATTR`` (``ATTR`` may be dotted).

    The module is imported with the current directory first on ``sys.path``. The
    attribute may be a :class:`ToolRegistry`, a :class:`ToolSpec`, a tool function, or a
    list or tuple of specs and functions.

    Raises:
        ToolsUsageError: The spec is malformed, the module does not import, the
            attribute is missing, or it is not (made of) tools.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name.strip() or not attr.strip():
        raise ToolsUsageError(
            f"--tools takes MODULE:ATTR (for example mytools:TOOLS), not {spec!r}"
        )
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        module = importlib.import_module(module_name.strip())
    except ImportError as exc:
        raise ToolsUsageError(f"cannot import {module_name!r}: {exc}") from exc
    except Exception as exc:
        raise ToolsUsageError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    obj: object = module
    for part in attr.strip().split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise ToolsUsageError(f"{module_name!r} has no attribute {attr!r}") from None
    try:
        return _as_registry(obj)
    except ToolDefinitionError as exc:
        raise ToolsUsageError(f"{spec} cannot be used as tools: {exc}") from exc


def _as_registry(obj: object) -> ToolRegistry:
    if isinstance(obj, ToolRegistry):
        return obj
    if isinstance(obj, ToolSpec):
        return ToolRegistry.of(obj)
    if isinstance(obj, (list, tuple)):
        for item in obj:
            if not callable(item):
                raise ToolsUsageError(f"{item!r} in the list is not a tool or a function")
        return ToolRegistry.of(*obj)
    if callable(obj):
        return ToolRegistry.of(obj)
    raise ToolsUsageError(
        f"expected a ToolRegistry, a ToolSpec, a function or a list of them, "
        f"got {type(obj).__name__}"
    )


# --- running and printing one turn ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    """A finished turn, how long it took, and whether Ctrl-C (SIGINT) cancelled it."""

    turn: Turn
    seconds: float
    ctrl_c: bool = False


class LivePrinter:
    """Prints a turn as it happens: streamed text, tool calls, tool outcomes, runs.

    Fed the engine's notifications (subscribe with ``events=True``), in order.
    """

    def __init__(self, out: TextIO, palette: Palette | None = None) -> None:
        self._out = out
        self._palette = palette if palette is not None else Palette.for_stream(out)
        self._at_line_start = True
        self._open_text: str | None = None
        self._activity = Activity(ActivityKind.IDLE)
        self._runs = 0
        self._arguments: dict[str, list[str]] = {}

    def handle(self, notification: object) -> None:
        match notification:
            case EventReceived(event=event):
                self._event(event)
            case StateChanged(snapshot=snapshot):
                if snapshot.run_count > self._runs:
                    self._runs = snapshot.run_count
                    if snapshot.depth > 0:
                        self._line(
                            f"Continuing: run {snapshot.run_count} (depth {snapshot.depth})", "dim"
                        )
                if snapshot.activity != self._activity:
                    self._activity_changed(snapshot.activity)
            case ToolCallFinished(name=name, result=result, call_id=call_id):
                arguments = _one_line("".join(self._arguments.pop(call_id, ())))
                self._line(
                    f"  {_outcome(result)}",
                    "green" if result.ok else "red",
                    f" {name}({arguments}) -> {_shorten(result)}",
                )
            case RunRetrying(attempt=attempt, delay=delay, reason=reason):
                self._line(
                    f"Retrying in {delay:.1f} s (attempt {attempt} failed: {reason})", "yellow"
                )

    def _activity_changed(self, activity: Activity) -> None:
        """Print each batch once as it starts executing (each call's name is printed as
        it starts, from its TOOL_CALL_START: a thousand calls print a thousand names)."""
        self._activity = activity
        names = activity.tool_names
        if activity.kind is ActivityKind.EXECUTING_TOOLS:
            self._line("Executing:", "cyan", " " + _names(names, activity.more))

    def _event(self, event: object) -> None:
        match event:
            case TextMessageStartEvent():
                self._end_line()
                self._open_text = None  # "Agent: " waits for the first text (some
                # servers open empty messages as the parent of tool calls)
            case TextMessageContentEvent(message_id=message_id, delta=delta):
                self._text(message_id, delta)
            case TextMessageChunkEvent(message_id=message_id, delta=delta):
                self._text(message_id or self._open_text or "", delta or "")
            case TextMessageEndEvent():
                self._open_text = None
                self._end_line()
            case ToolCallStartEvent(tool_call_id=call_id, tool_call_name=name):
                self._arguments[call_id] = []
                # Each call once, as it starts (the activity names only the first few).
                self._line("Calling:", "cyan", " " + name)
            case ToolCallArgsEvent(tool_call_id=call_id, delta=delta):
                self._arguments.setdefault(call_id, []).append(delta)

    def _text(self, message_id: str, delta: str) -> None:
        if not delta:
            return
        if self._open_text != message_id:
            self._end_line()
            self._open_text = message_id
            self._write("Agent: ", "bold")
        self._write(delta)

    def _write(self, text: str, colour: Colour | None = None) -> None:
        if text:
            text = neutralise(text)  # text from the wire reaches no terminal as controls
            if not text:
                return
            self._out.write(self._palette.paint(text, colour))
            self._out.flush()
            self._at_line_start = text.endswith("\n")

    def _end_line(self) -> None:
        if not self._at_line_start:
            self._write("\n")

    def _line(self, text: str, colour: Colour | None = None, rest: str = "") -> None:
        """One line: ``text`` (painted ``colour``), then ``rest`` (plain)."""
        self._end_line()
        self._open_text = None
        self._write(text + ("" if rest else "\n"), colour)
        if rest:
            self._write(rest + "\n")

    def finish(self) -> None:
        self._end_line()


def _names(names: tuple[str, ...], more: int = 0) -> str:
    """Tool names for one line: all of a few, the first few and a count of many
    (``more``: how many there are beyond ``names``)."""
    total = len(names) + more
    if total <= _NAMES_SHOWN:
        return ", ".join(names)
    shown = ", ".join(names[:_NAMES_SHOWN])
    return f"{total} calls ({shown}, and {total - _NAMES_SHOWN} more)"


def _outcome(result: ToolResult) -> str:
    return "ok  " if result.ok else "FAIL"


def _shorten(result: ToolResult) -> str:
    return _one_line(result.content if result.ok else f"error: {result.error}")


def _one_line(text: str) -> str:
    """``text`` on one line, at most :data:`_RESULT_CHARS` characters."""
    text = " ".join(text[: _RESULT_CHARS * 4].split())
    return text if len(text) <= _RESULT_CHARS else text[: _RESULT_CHARS - 3] + "..."


#: What the model is told when the CLI denies a call that needs approval.
_CLI_DENIAL = (
    "This tool needs a person's approval, and the toolrelay command line cannot ask "
    "for it: the call was denied."
)


async def run_turn(
    backend: AgentBackend,
    tools: ToolRegistry,
    message: str,
    *,
    thread_id: str,
    max_depth: int,
    out: TextIO | None,
    forwarded_props: Mapping[str, Any] | None = None,
    limits: Limits | None = None,
    ctrl_c: bool = False,
) -> TurnOutcome:
    """Run one turn with an :class:`~toolrelay.runtime.Engine`; print it live to ``out``.

    With ``ctrl_c`` (the main thread only), the first SIGINT cancels the turn, which
    ends ``cancelled`` and is returned (``TurnOutcome.ctrl_c``) for its summary; a
    second one interrupts as Python does (the handler is restored after the first).
    """
    from toolrelay.runtime import Engine

    key = ThreadKey(thread_id)
    printer = LivePrinter(out) if out is not None else None
    started = time.perf_counter()
    async with Engine(
        backend,
        tools=tools,
        max_depth=max_depth,
        forwarded_props=dict(forwarded_props or {}),
        limits=limits,
    ) as engine:
        notifications = engine.subscribe(key=key, events=printer is not None)
        turn = engine.start_turn(key, message)
        async with notifications, _cancelled_by_ctrl_c(turn, ctrl_c) as pressed:
            async for notification in notifications:
                if printer is not None:
                    printer.handle(notification)
                if isinstance(notification, StateChanged) and notification.snapshot.status.is_final:
                    break
                for asked in turn.approvals:
                    # No one to ask in a command-line run: a tool that needs approval is
                    # denied (the model is told why), never left waiting.
                    turn.deny(asked.id, _CLI_DENIAL)
        await turn.wait_finished()
    if printer is not None:
        printer.finish()
    return TurnOutcome(turn, time.perf_counter() - started, bool(pressed))


@contextlib.asynccontextmanager
async def _cancelled_by_ctrl_c(turn: Turn, enabled: bool) -> AsyncIterator[list[bool]]:
    """Within it (when ``enabled``), the first SIGINT cancels ``turn``; yields a list
    that holds ``True`` once it did. An error of the body comes out as itself, not in
    an exception group."""
    pressed: list[bool] = []
    if not enabled or sys.platform == "win32":  # no signal receiver there: Ctrl-C
        yield pressed  # raises KeyboardInterrupt, and the command exits 130 all the same
        return

    async def watch(*, task_status: anyio.abc.TaskStatus[None]) -> None:
        with anyio.open_signal_receiver(signal.SIGINT) as signals:
            task_status.started()
            async for _ in signals:
                if turn.cancel("cancelled by Ctrl-C (SIGINT)"):
                    pressed.append(True)
                return  # the default handler is back: a second Ctrl-C interrupts

    try:
        async with anyio.create_task_group() as watchers:
            await watchers.start(watch)
            yield pressed
            watchers.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


def _final_answer(turn: Turn) -> str | None:
    for message in reversed(turn.conversation.messages):
        if isinstance(message, TextMessage) and message.role == "assistant" and message.text:
            return message.text
    return None


def write_summary(outcome: TurnOutcome, out: TextIO) -> None:
    """The end of a turn, for people: how it ended, the answer, and counts.

    Text from the wire is neutralised (:func:`~toolrelay.cli._terminal.neutralise`);
    past a few, violations are counted by code rather than printed one by one.
    """
    safe = SafeOut(out)
    turn = outcome.turn
    reason = turn.reason
    stats = turn.statistics()
    if turn.status is RunStatus.completed:
        answer = _final_answer(turn)
        safe.write("\nCompleted: the agent answered.\n", "green")
        if answer is not None:
            safe.write(f"Final answer: {answer}\n")
    elif reason is not None:
        code = f" [{reason.code}]" if reason.code else ""
        safe.write(
            f"\n{turn.status.value.capitalize()} ({reason.kind.value}): {reason.message}{code}\n",
            "red" if turn.status is RunStatus.failed else "yellow",
        )
        kept = len(turn.conversation.messages)
        safe.write(f"Kept: the {kept} message(s) of the conversation so far, nothing lost.\n")
        for interrupt in turn.interrupts:
            asks = interrupt.message or "(no message)"
            call = f" (tool call {interrupt.tool_call_id})" if interrupt.tool_call_id else ""
            safe.write(f"The agent asks [{interrupt.id}, {interrupt.reason}]{call}: {asks}\n")
        if turn.abandoned_calls:
            abandoned_calls = turn.abandoned_calls
            names = ", ".join(f"{call.name} [{call.id}]" for call in abandoned_calls[:_NAMES_SHOWN])
            if len(abandoned_calls) > _NAMES_SHOWN:
                names += f", and {len(abandoned_calls) - _NAMES_SHOWN} more"
            safe.write(f"Abandoned, never executed: {names}\n")
    violations = turn.violations
    for v in violations[:_VIOLATIONS_SHOWN]:
        safe.write(f"Protocol violation ({v.code}) in {v.event_type}: {v.message}\n", "yellow")
    if len(violations) > _VIOLATIONS_SHOWN:
        rest = Counter(v.code for v in violations[_VIOLATIONS_SHOWN:])
        safe.write(
            f"... and {len(violations) - _VIOLATIONS_SHOWN} more protocol violation(s) "
            f"({summarise_counts(rest)})\n",
            "yellow",
        )
    calls = call_counts(turn)
    safe.write(
        f"Runs: {stats.runs} | tool calls: {calls['executed']} executed "
        f"({calls['completed']} completed, {calls['failed']} failed)"
        + (f", {calls['abandoned']} abandoned" if calls["abandoned"] else "")
        + f" | depth: {stats.depth} | time: {outcome.seconds:.2f} s\n"
    )


def call_counts(turn: Turn) -> dict[str, int]:
    """The turn's tool calls, counted once for the summary and the JSON state alike:
    ``executed`` (``completed`` + ``failed``, denied calls among the failed) and
    ``abandoned`` (never executed: the turn ended while they streamed or waited)."""
    statuses = Counter(call.status for call in turn.conversation.tool_calls())
    completed, failed = statuses[ToolCallStatus.completed], statuses[ToolCallStatus.failed]
    return {
        "executed": completed + failed,
        "completed": completed,
        "failed": failed,
        "abandoned": len(turn.abandoned_calls),
    }


def state_json(outcome: TurnOutcome) -> str:
    """The final state of a turn as pretty JSON (camelCase), with a trailing newline."""
    turn = outcome.turn
    stats = turn.statistics()
    reason = turn.reason
    document = {
        "status": turn.status.value,
        "reason": None
        if reason is None
        else {"kind": reason.kind.value, "message": reason.message, "code": reason.code},
        "threadId": turn.key.thread_id,
        "runs": stats.runs,
        "depth": stats.depth,
        "seconds": round(outcome.seconds, 3),
        "toolCalls": call_counts(turn),
        "abandonedCalls": [
            {"id": call.id, "name": call.name, "arguments": call.arguments}
            for call in turn.abandoned_calls
        ],
        "violations": [
            {"code": v.code, "eventType": v.event_type, "message": v.message}
            for v in turn.violations
        ],
        "interrupts": list(turn.interrupts),
        "messages": to_agui_messages(turn.conversation.messages),
    }
    return msgspec.json.format(encode(document), indent=2).decode() + "\n"


def exit_code(outcome: TurnOutcome) -> int:
    """The :class:`~toolrelay.cli.ExitCode` of a finished turn."""
    from toolrelay.cli import ExitCode

    turn = outcome.turn
    if outcome.ctrl_c:
        return ExitCode.CTRL_C
    if turn.status is RunStatus.completed:
        return ExitCode.OK
    if turn.status is RunStatus.interrupted:
        return ExitCode.INTERRUPTED
    if turn.status in (RunStatus.cancelled, RunStatus.superseded):
        return ExitCode.CANCELLED
    reason = turn.reason
    if (
        reason is not None
        and reason.kind is ReasonKind.TRANSPORT_ERROR
        and reason.code == "connect_error"
    ):
        return ExitCode.UNREACHABLE
    return ExitCode.FAILED
