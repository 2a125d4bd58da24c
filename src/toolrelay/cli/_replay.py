"""``toolrelay replay``: check a recorded AG-UI response, offline.

::

    toolrelay replay capture.sse          # the conversation and every violation found
    toolrelay replay capture.sse --json

A capture is the raw body of one AG-UI response (``text/event-stream`` bytes, as
``curl -N`` or a proxy records them). It goes through the same path a live run takes,
with no network: httpx-sse's parser (fed by an :class:`httpx.Response` over the
file's bytes), :func:`~toolrelay.protocol.decode_event` and an
:class:`~toolrelay.sansio.EventProcessor`. Unlike a live run, a replay does not stop at
the first bad event: every problem is reported, with the SSE event's index and the line
it starts on:

- payloads that are not JSON, or not a valid event (the event is skipped);
- data larger than the default ``max_event_bytes``;
- an event cut off by the end of the file (SSE discards it);
- every protocol violation the processor tolerated (its ``ViolationRaised`` effects).

Each problem is printed once (the processor's own warnings about them are not logged
as well, unless ``--debug``).

Exit codes: 0 the recorded run completed, ended with tool calls ready (they are
listed: "would execute: ..."), or was interrupted (the AG-UI ``interrupt`` outcome:
the interrupts are listed), and nothing was wrong with the capture; ``CHECK_FAILED``
(5) it ended so but problems were found (``--allow-violations``: 0 all the same);
``CANCELLED`` (3) the agent reported the run cancelled; ``FAILED`` (1) it did not end
well (RUN_ERROR, a stream that ends before RUN_FINISHED...); ``USAGE`` (2) the file
cannot be read.
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import httpx
import msgspec
from httpx_sse import EventSource

from toolrelay._core import (
    Conversation,
    Effect,
    EventProcessor,
    Limits,
    ReasoningRecord,
    TextMessage,
    ToolCallBatch,
    ToolCallInfo,
    ToolsReady,
    TurnCompleted,
    TurnEnded,
    TurnInterrupted,
    ViolationRaised,
    to_agui_messages,
)
from toolrelay._errors import InvalidEventError, LimitExceededError, MalformedEventError
from toolrelay._machines import RunStatus, ToolCallStatus
from toolrelay._reasons import TerminalReason
from toolrelay.cli._exit import ExitCode
from toolrelay.cli._summary import reason_json
from toolrelay.cli._terminal import SafeOut, reported_violations, summarise_counts
from toolrelay.diagrams import trace_diagram
from toolrelay.protocol import Event, RunStartedEvent, UnknownEvent, decode_event, encode

__all__ = (
    "CaptureLines",
    "Finding",
    "ReplayReport",
    "capture_lines",
    "register",
    "replay_capture",
    "run",
)

_LINE = re.compile(rb"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$")
_READ_BYTES = 64 * 1024
_LINE_SLACK = 64 * 1024
_BOM = b"\xef\xbb\xbf"
#: Findings a replay keeps one by one; past it they are counted by code.
MAX_FINDINGS = 10_000


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
    #: Findings past :data:`MAX_FINDINGS`, counted by code rather than kept.
    omitted: dict[str, int] = field(default_factory=dict)

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


class CaptureLines(httpx.SyncByteStream):
    """The capture one line per chunk, with line endings made ``\\n`` (SSE reads CR,
    LF and CRLF alike), so that the line an SSE event starts on is known when
    httpx-sse yields it: the parser pulls the next chunk only after that.

    The capture is read in 64 KiB pieces and never held whole; a line longer than
    ``max_line`` is cut there (the rest of it is skipped, and reported), so memory
    stays bounded whatever the file. A leading BOM is dropped; a line that is not
    UTF-8 is reported (httpx-sse then reads it with replacement characters).
    """

    def __init__(
        self, source: bytes | BinaryIO, max_line: int, report: Callable[[Finding], None]
    ) -> None:
        self._source = source
        self._max_line = max_line
        self._report = report
        self.line = 0  # the line number of the chunk last yielded
        self.block_start: int | None = None  # first line of the event being read
        self.block_has_data = False

    def _pieces(self) -> Iterator[bytes]:
        if isinstance(self._source, bytes):
            yield self._source
            return
        while piece := self._source.read(_READ_BYTES):
            yield piece

    def _raw_lines(self) -> Iterator[bytes]:
        carry = b""
        skipping = False
        first = True
        for piece in self._pieces():
            if first:
                piece, first = piece.removeprefix(_BOM), False
            data = carry + piece
            carry = b""
            for match in _LINE.finditer(data):
                line = match.group()
                if match.end() == len(data) and not line.endswith(b"\n"):
                    carry = line  # more may come: the rest of the line, or the LF of a CR
                    break
                if skipping:
                    skipping = False
                    continue
                yield line
            if len(carry) > self._max_line:
                if not skipping:
                    self._report(
                        Finding(
                            None,
                            self.line + 1,  # the line the cut piece is yielded as
                            "line_too_long",
                            "?",
                            f"a line longer than {self._max_line} bytes; the rest of it is skipped",
                        )
                    )
                    yield carry[: self._max_line] + b"\n"
                carry, skipping = b"", True
        if carry and not skipping:
            yield carry

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self._raw_lines():
            text = chunk.rstrip(b"\r\n")
            if chunk.endswith(b"\r") and not chunk.endswith(b"\r\n"):
                text = chunk[:-1]
            self.line += 1
            if not text.isascii():
                try:
                    text.decode()
                except UnicodeDecodeError as exc:
                    self._report(
                        Finding(
                            None,
                            self.line,
                            "invalid_utf8",
                            "?",
                            f"the line is not UTF-8 ({exc.reason}); read with U+FFFD",
                        )
                    )
            if text and not text.startswith(b":") and self.block_start is None:
                self.block_start = self.line
            if text.startswith(b"data"):
                self.block_has_data = True
            yield text + b"\n"
            if not text:
                self.block_start = None
                self.block_has_data = False


def capture_lines(
    source: bytes | BinaryIO, limits: Limits, report: Callable[[Finding], None]
) -> CaptureLines:
    """``source``'s lines, each cut at the longest line an event within ``limits`` needs."""
    return CaptureLines(source, 2 * limits.max_event_bytes + _LINE_SLACK, report)


def replay_capture(data: bytes | BinaryIO, *, limits: Limits | None = None) -> ReplayReport:
    """Feed a recorded SSE body through the parser, the decoder and a processor.

    Every problem is reported, not only the first: undecodable events (deep nesting
    and bytes that are not UTF-8 included), oversized ones, violations. The capture is
    streamed: a file object is read in pieces and each event is processed as it is
    read, so memory stays bounded by the limits, not by the capture's size (past
    :data:`MAX_FINDINGS` findings, the rest are only counted).

    Args:
        data: The raw bytes of one AG-UI response body, or a binary file of them.
        limits: Bounds to check (``max_event_bytes``; the processor's too).

    Returns:
        The report; the processor's run is ended (``end_stream``) if the capture has no
        RUN_FINISHED or RUN_ERROR.
    """
    limits = limits if limits is not None else Limits()
    findings: list[Finding] = []
    omitted: Counter[str] = Counter()

    def report(finding: Finding) -> None:
        if len(findings) < MAX_FINDINGS:
            findings.append(finding)
        else:
            omitted[finding.code] += 1

    lines = capture_lines(data, limits, report)
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=lines)
    sse_count = 0
    events = 0
    processor: EventProcessor | None = None
    ready: tuple[ToolCallInfo, ...] = ()
    ended = False

    def perform(effects: Sequence[Effect], index: int | None, line: int | None) -> None:
        nonlocal ready, ended
        for effect in effects:
            match effect:
                case ViolationRaised(violation=v):
                    report(Finding(index, line, v.code, v.event_type, v.message))
                case ToolsReady(calls=calls):
                    ready, ended = calls, True
                case TurnCompleted() | TurnInterrupted() | TurnEnded():
                    ended = True
                case _:
                    pass

    def processor_for(first: Event | UnknownEvent | None) -> EventProcessor:
        started = first if isinstance(first, RunStartedEvent) else None
        thread_id = started.thread_id if started is not None else "replay"
        made = EventProcessor(Conversation(thread_id), limits=limits)
        made.start_run(started.run_id if started is not None else "replay")
        return made

    for sse in EventSource(response).iter_sse():
        if not sse.data:
            continue
        sse_count += 1
        line = lines.block_start
        size = len(sse.data.encode())
        if size > limits.max_event_bytes:
            error = LimitExceededError("max_event_bytes", limits.max_event_bytes, f"{size} bytes")
            report(Finding(sse_count, line, "event_too_large", "?", str(error)))
            continue
        try:
            event = decode_event(sse.data)
        except MalformedEventError as exc:
            code = "nesting_too_deep" if exc.code == "nesting_too_deep" else "malformed_event"
            report(Finding(sse_count, line, code, "?", str(exc)))
            continue
        except InvalidEventError as exc:
            report(Finding(sse_count, line, "invalid_event", exc.event_type, str(exc)))
            continue
        events += 1
        if processor is None:
            processor = processor_for(event)
        perform(processor.receive(event), sse_count, line)
    if lines.block_start is not None and lines.block_has_data:
        report(
            Finding(
                None,
                lines.block_start,
                "incomplete_sse_event",
                "?",
                "the capture ends inside an event (no blank line after it); SSE discards it",
            )
        )
    if processor is None:
        processor = processor_for(None)
    if not ended:
        perform(processor.end_stream(), None, None)
    findings.sort(key=lambda f: (f.line or 0, f.index or 0))
    return ReplayReport(sse_count, events, processor, findings, ready, dict(omitted))


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
        "--allow-violations",
        action="store_true",
        help="exit 0 for a run that ended well even if protocol violations were found "
        "(default: exit 5)",
    )
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
    path: Path = args.file
    try:
        # Streamed: a large capture is never held whole.
        with path.open("rb") as capture, reported_violations(not args.debug):
            report = replay_capture(capture)
    except OSError as exc:
        stderr.write(f"toolrelay replay: cannot read {path}: {exc.strerror or exc}\n")
        return ExitCode.USAGE
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
        _print(report, path, SafeOut(stdout))
    if report.status is RunStatus.cancelled:
        return ExitCode.CANCELLED
    if not report.ok:
        return ExitCode.FAILED
    if (report.findings or report.omitted) and not args.allow_violations:
        return ExitCode.CHECK_FAILED
    return ExitCode.OK


def _call_text(call: ToolCallInfo) -> str:
    return f"{call.name}({call.arguments or ''})"


def _print(report: ReplayReport, path: Path, out: SafeOut) -> None:
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
        total = len(report.findings) + sum(report.omitted.values())
        out.write(f"\nProtocol violations ({total}):\n", "yellow")
        for finding in report.findings:
            out.write(
                f"  {finding.where()}: [{finding.code}] {finding.event_type}: {finding.message}\n"
            )
        if report.omitted:
            out.write(f"  ... and more, counted: {summarise_counts(report.omitted)}\n")
    else:
        out.write("\nProtocol violations: none.\n", "green")
    reason = report.reason
    if report.status is RunStatus.completed:
        out.write("\nResult: the recorded run completed.\n", "green")
    elif report.status is RunStatus.interrupted:
        out.write("\nResult: the run was interrupted; the agent asks:\n", "yellow")
        for interrupt in processor.interrupts:
            asks = interrupt.message or "(no message)"
            out.write(f"  [{interrupt.id}, {interrupt.reason}]: {asks}\n")
        if not processor.interrupts:
            out.write("  (nothing: the outcome names no interrupt)\n")
    elif report.ready_calls:
        calls = ", ".join(_call_text(call) for call in report.ready_calls)
        out.write(
            f"\nResult: the run ended with tool calls ready; would execute: {calls}\n", "green"
        )
    elif reason is not None:
        code = f" [{reason.code}]" if reason.code else ""
        out.write(
            f"\nResult: {report.status.value} ({reason.kind.value}): {reason.message}{code}\n",
            "yellow" if report.status is RunStatus.cancelled else "red",
        )


def _describe(message: object) -> str:
    if isinstance(message, TextMessage):
        cut = " (interrupted)" if message.interrupted else ""
        return f"{message.role}: {message.text or '(empty)'}{cut}"
    if isinstance(message, ReasoningRecord):
        return f"reasoning: {message.text}"
    if isinstance(message, ToolCallBatch):
        return "; ".join(
            f"tool call {_call_text(call)} [{call.id}]: {call.status.value}"
            for call in message.calls
        )
    role = getattr(message, "role", type(message).__name__)
    return f"{role}: {getattr(message, 'content', '')}"


def _json(report: ReplayReport, path: Path) -> str:
    processor = report.processor
    document = {
        "file": str(path),
        "sseEvents": report.sse_events,
        "events": report.events,
        "status": report.status.value,
        "reason": reason_json(report.reason),
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
        "omittedViolations": report.omitted,
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
