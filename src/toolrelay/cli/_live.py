"""A turn printed as it happens: streamed text, tool calls, tool outcomes, runs."""

from __future__ import annotations

from typing import TextIO

from toolrelay._core import Activity, ActivityKind, ToolResult
from toolrelay._runtime import EventReceived, RunRetrying, StateChanged, ToolCallFinished
from toolrelay.cli._terminal import Colour, Palette, neutralise
from toolrelay.protocol import (
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallStartEvent,
)

__all__ = ("NAMES_SHOWN", "LivePrinter")

_RESULT_CHARS = 120  # of a tool's result, printed live
NAMES_SHOWN = 8  # tool names listed on one line, the rest counted


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
    if total <= NAMES_SHOWN:
        return ", ".join(names)
    shown = ", ".join(names[:NAMES_SHOWN])
    return f"{total} calls ({shown}, and {total - NAMES_SHOWN} more)"


def _outcome(result: ToolResult) -> str:
    return "ok  " if result.ok else "FAIL"


def _shorten(result: ToolResult) -> str:
    return _one_line(result.content if result.ok else f"error: {result.error}")


def _one_line(text: str) -> str:
    """``text`` on one line, at most :data:`_RESULT_CHARS` characters."""
    text = " ".join(text[: _RESULT_CHARS * 4].split())
    return text if len(text) <= _RESULT_CHARS else text[: _RESULT_CHARS - 3] + "..."
