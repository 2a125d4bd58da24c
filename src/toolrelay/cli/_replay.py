"""``toolrelay replay``: check a recorded AG-UI response, offline.

::

    toolrelay replay capture.sse          # the conversation and every violation found
    toolrelay replay capture.sse --json

A capture is the raw body of one AG-UI response (``text/event-stream`` bytes, as
``curl -N`` or a proxy records them). It goes through the same path a live run takes,
with no network: httpx-sse's parser (fed by an :class:`httpx.Response` over the
file's bytes), :func:`~toolrelay.protocol.decode_event` and an
:class:`~toolrelay.core.EventProcessor`. Unlike a live run, a replay does not stop at
the first bad event: every problem is reported, with the SSE event's index and the line
it starts on:

- payloads that are not JSON, or not a valid event (the event is skipped);
- data larger than the default ``max_event_bytes``;
- an event cut off by the end of the file (SSE discards it);
- every protocol violation the processor tolerated (its ``ViolationRaised`` effects).

Exit codes: 0 the recorded run completed, ended with tool calls ready (they are
listed: "would execute: ..."), or was interrupted (the AG-UI ``interrupt`` outcome:
the interrupts are listed); ``CANCELLED`` (3) the agent reported the run cancelled;
``FAILED`` (1) it did not end well (RUN_ERROR, a stream that ends before
RUN_FINISHED...); ``USAGE`` (2) the file cannot be read.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import msgspec
from httpx_sse import EventSource

from toolrelay._reasons import TerminalReason
from toolrelay.core import (
    Conversation,
    Effect,
    EventProcessor,
    Limits,
    ReasoningRecord,
    TextMessage,
    ToolCallInfo,
    ToolCallMessage,
    ToolsReady,
    TurnCompleted,
    TurnEnded,
    TurnInterrupted,
    ViolationRaised,
    to_agui_messages,
)
from toolrelay.diagrams import trace_diagram
from toolrelay.errors import InvalidEventError, LimitExceededError, MalformedEventError
from toolrelay.machines import RunStatus, ToolCallStatus
from toolrelay.protocol import Event, RunStartedEvent, UnknownEvent, decode_event, encode

__all__ = ("Finding", "ReplayReport", "register", "replay_capture", "run")

_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in a capture.

    Attributes:
        index: The SSE event's number (1-based), or ``None`` for the file as a whole.
        line: The line the event starts on (1-based), when known.
        code: A stable identifier (``malformed_event``, ``args_for_unknown_call``...).
        event_type: The AG-UI ``type`` concerned, or ``"?"``.
        message: What is wrong.
    """

    index: int | None
    line: int | None
    code: str
    event_type: str
    message: str

    def where(self) -> str:
        if self.index is None:
            return f"line {self.line}" if self.line is not None else "the capture"
        return f"event #{self.index}" + (f", line {self.line}" if self.line is not None else "")


@dataclass(slots=True)
class ReplayReport:
    """What a replay found.

    Attributes:
        sse_events: SSE events with data in the capture.
        events: Of those, the ones that decoded to AG-UI events.
        processor: The processor the events were fed to (its conversation, calls,
            status and reason).
        findings: Every problem, in the order of the capture.
    """

    sse_events: int
    events: int
    processor: EventProcessor
    findings: list[Finding] = field(default_factory=list)
    #: The calls the run handed to the client (its ``ToolsReady``): what a live run
    #: would execute.
    ready_calls: tuple[ToolCallInfo, ...] = ()

    @property
    def status(self) -> RunStatus:
        return self.processor.status

    @property
    def reason(self) -> TerminalReason | None:
        return self.processor.reason

    @property
    def ok(self) -> bool:
        """The run completed, ended with tool calls ready, or was interrupted (a run
        that asks for something ends well)."""
        return self.status in (
            RunStatus.completed,
            RunStatus.executing_tools,
            RunStatus.interrupted,
        )


class _Lines(httpx.SyncByteStream):
    """The capture one line per chunk, with line endings made ``\\n`` (SSE reads CR,
    LF and CRLF alike), so that the line an SSE event starts on is known when
    httpx-sse yields it: the parser pulls the next chunk only after that."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self.line = 0  # the line number of the chunk last yielded
        self.block_start: int | None = None  # first line of the event being read
        self.block_has_data = False

    def __iter__(self) -> Iterator[bytes]:
        for match in _LINE.finditer(self._data):
            chunk = match.group()
            text = chunk.rstrip(b"\r\n")
            self.line += 1
            if text and not text.startswith(b":") and self.block_start is None:
                self.block_start = self.line
            if text.startswith(b"data"):
                self.block_has_data = True
            yield text + b"\n"
            if not text:
                self.block_start = None
                self.block_has_data = False


def replay_capture(data: bytes, *, limits: Limits | None = None) -> ReplayReport:
    """Feed a recorded SSE body through the parser, the decoder and a processor.

    Args:
        data: The raw bytes of one AG-UI response body.
        limits: Bounds to check (``max_event_bytes``; the processor's too).

    Returns:
        The report; the processor's run is ended (``end_stream``) if the capture has no
        RUN_FINISHED or RUN_ERROR.
    """
    limits = limits if limits is not None else Limits()
    lines = _Lines(data)
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=lines)
    findings: list[Finding] = []
    decoded: list[tuple[int, int | None, Event | UnknownEvent]] = []
    sse_count = 0
    for sse in EventSource(response).iter_sse():
        if not sse.data:
            continue
        sse_count += 1
        line = lines.block_start
        size = len(sse.data.encode())
        if size > limits.max_event_bytes:
            error = LimitExceededError("max_event_bytes", limits.max_event_bytes, f"{size} bytes")
            findings.append(Finding(sse_count, line, "event_too_large", "?", str(error)))
            continue
        try:
            decoded.append((sse_count, line, decode_event(sse.data)))
        except MalformedEventError as exc:
            findings.append(Finding(sse_count, line, "malformed_event", "?", str(exc)))
        except InvalidEventError as exc:
            findings.append(Finding(sse_count, line, "invalid_event", exc.event_type, str(exc)))
    if lines.block_start is not None and lines.block_has_data:
        findings.append(
            Finding(
                None,
                lines.block_start,
                "incomplete_sse_event",
                "?",
                "the capture ends inside an event (no blank line after it); SSE discards it",
            )
        )

    started = next((e for _, _, e in decoded if isinstance(e, RunStartedEvent)), None)
    thread_id = started.thread_id if started is not None else "replay"
    run_id = started.run_id if started is not None else "replay"
    processor = EventProcessor(Conversation(thread_id), limits=limits)
    processor.start_run(run_id)
    ready: tuple[ToolCallInfo, ...] = ()
    ended = False

    def perform(effects: Sequence[Effect], index: int | None, line: int | None) -> None:
        nonlocal ready, ended
        for effect in effects:
            match effect:
                case ViolationRaised(violation=v):
                    findings.append(Finding(index, line, v.code, v.event_type, v.message))
                case ToolsReady(calls=calls):
                    ready, ended = calls, True
                case TurnCompleted() | TurnInterrupted() | TurnEnded():
                    ended = True
                case _:
                    pass

    for index, line, event in decoded:
        perform(processor.receive(event), index, line)
    if not ended:
        perform(processor.end_stream(), None, None)
    findings.sort(key=lambda f: (f.line or 0, f.index or 0))
    return ReplayReport(sse_count, len(decoded), processor, findings, ready)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``replay`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        "replay",
        help="check a recorded AG-UI SSE response offline",
        description=(
            "Feed a recorded AG-UI response (the raw text/event-stream body) through the "
            "SSE parser, the event decoder and the event processor, with no network, and "
            "print the conversation and every protocol violation found."
        ),
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="the capture (raw SSE bytes)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument(
        "--diagram",
        type=Path,
        default=None,
        metavar="OUT",
        help="also write the recorded run as a Mermaid sequence diagram to OUT",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace, stdout: TextIO, stderr: TextIO) -> int:
    """Run ``toolrelay replay``; returns an :class:`~toolrelay.cli.ExitCode`."""
    from toolrelay.cli import ExitCode

    path: Path = args.file
    try:
        data = path.read_bytes()
    except OSError as exc:
        stderr.write(f"toolrelay replay: cannot read {path}: {exc.strerror or exc}\n")
        return ExitCode.USAGE
    report = replay_capture(data)
    if args.diagram is not None:
        processor = report.processor
        diagram = trace_diagram(
            processor.conversation,
            status=processor.status,
            reason=processor.reason,
            runs=processor.run_count,
            abandoned=processor.abandoned,
        )
        try:
            args.diagram.write_text(diagram, encoding="utf-8")
        except OSError as exc:
            stderr.write(f"toolrelay replay: cannot write {args.diagram}: {exc.strerror or exc}\n")
            return ExitCode.USAGE
    if args.json:
        stdout.write(_json(report, path))
    else:
        _print(report, path, stdout)
    if report.ok:
        return ExitCode.OK
    if report.status is RunStatus.cancelled:
        return ExitCode.CANCELLED
    return ExitCode.FAILED


def _call_text(call: ToolCallInfo) -> str:
    return f"{call.name}({call.arguments or ''})"


def _print(report: ReplayReport, path: Path, out: TextIO) -> None:
    processor = report.processor
    skipped = report.sse_events - report.events
    out.write(
        f"Replayed {path}: {report.sse_events} SSE event(s), {report.events} AG-UI "
        f"event(s) decoded, {skipped} skipped.\n"
    )
    out.write(f"Thread {processor.conversation.thread_id}, run {processor.run_id}.\n\n")
    out.write("Conversation:\n")
    for message in processor.conversation.messages:
        out.write(f"  {_describe(message)}\n")
    for call in processor.tool_calls:
        # A replay executes nothing: the calls a live run would execute are "ready".
        state = "ready" if call.status is ToolCallStatus.executing else call.status.value
        out.write(f"  tool call {_call_text(call)} [{call.id}]: {state}\n")
    for call in processor.abandoned:
        out.write(f"  tool call {_call_text(call)} [{call.id}]: abandoned\n")
    if not processor.conversation.messages and not processor.tool_calls:
        out.write("  (nothing)\n")
    if report.findings:
        out.write(f"\nProtocol violations ({len(report.findings)}):\n")
        for finding in report.findings:
            out.write(
                f"  {finding.where()}: [{finding.code}] {finding.event_type}: {finding.message}\n"
            )
    else:
        out.write("\nProtocol violations: none.\n")
    reason = report.reason
    if report.status is RunStatus.completed:
        out.write("\nResult: the recorded run completed.\n")
    elif report.status is RunStatus.interrupted:
        out.write("\nResult: the run was interrupted; the agent asks:\n")
        for interrupt in processor.interrupts:
            asks = interrupt.message or "(no message)"
            out.write(f"  [{interrupt.id}, {interrupt.reason}]: {asks}\n")
        if not processor.interrupts:
            out.write("  (nothing: the outcome names no interrupt)\n")
    elif report.ready_calls:
        calls = ", ".join(_call_text(call) for call in report.ready_calls)
        out.write(f"\nResult: the run ended with tool calls ready; would execute: {calls}\n")
    elif reason is not None:
        code = f" [{reason.code}]" if reason.code else ""
        out.write(
            f"\nResult: {report.status.value} ({reason.kind.value}): {reason.message}{code}\n"
        )


def _describe(message: object) -> str:
    if isinstance(message, TextMessage):
        cut = " (interrupted)" if message.interrupted else ""
        return f"{message.role}: {message.text or '(empty)'}{cut}"
    if isinstance(message, ReasoningRecord):
        return f"reasoning: {message.text}"
    if isinstance(message, ToolCallMessage):
        return "; ".join(
            f"tool call {_call_text(call)} [{call.id}]: {call.status.value}"
            for call in message.calls
        )
    role = getattr(message, "role", type(message).__name__)
    return f"{role}: {getattr(message, 'content', '')}"


def _json(report: ReplayReport, path: Path) -> str:
    processor = report.processor
    reason = report.reason
    document = {
        "file": str(path),
        "sseEvents": report.sse_events,
        "events": report.events,
        "status": report.status.value,
        "reason": None
        if reason is None
        else {"kind": reason.kind.value, "message": reason.message, "code": reason.code},
        "threadId": processor.conversation.thread_id,
        "runId": processor.run_id,
        "messages": to_agui_messages(processor.conversation.messages),
        "wouldExecute": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in report.ready_calls
        ],
        "abandonedCalls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments} for c in processor.abandoned
        ],
        "interrupts": list(processor.interrupts),
        "violations": [
            {
                "index": f.index,
                "line": f.line,
                "code": f.code,
                "eventType": f.event_type,
                "message": f.message,
            }
            for f in report.findings
        ],
    }
    return msgspec.json.format(encode(document), indent=2).decode() + "\n"
