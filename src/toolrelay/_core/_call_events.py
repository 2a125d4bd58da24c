"""Tool calls: START, ARGS, END, the CHUNK form and RESULT, with the argument
bounds and the late and misrouted arguments real servers send."""

from __future__ import annotations

from collections.abc import Sequence

from toolrelay._core._arguments import utf8_len
from toolrelay._core._conversation import (
    ToolCallInfo,
)
from toolrelay._core._effects import (
    NO_EFFECTS,
    Effect,
)
from toolrelay._core._processor_base import ProcessorBase
from toolrelay._core._processor_state import _CALLING, _PENDING, _STREAMING, added, keyed
from toolrelay._errors import LimitExceededError
from toolrelay._machines import (
    ToolCallEvent,
)
from toolrelay.protocol import (
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
)

__all__ = ("CallEvents",)


class CallEvents(ProcessorBase):
    __slots__ = ()

    def _start_call(
        self, call_id: str, name: str, parent_message_id: str | None
    ) -> Sequence[Effect]:
        limits = self._limits
        if self._run_call_count >= limits.max_tool_calls_per_run:
            raise LimitExceededError(
                "max_tool_calls_per_run", limits.max_tool_calls_per_run, "calls of the run"
            )
        if len(self._turn_calls) >= limits.max_tool_calls_per_turn:
            raise LimitExceededError(
                "max_tool_calls_per_turn", limits.max_tool_calls_per_turn, "calls of the turn"
            )
        self._run_call_count += 1
        call = ToolCallInfo(call_id, name, parent_message_id=parent_message_id, run_id=self.run_id)
        self._calls = keyed(self._calls, call_id, call)
        self._call_at = keyed(self._call_at, call_id, len(self.conversation.messages))
        self._turn_calls = added(self._turn_calls, call)
        self._calling_started(call)
        return self._calling_activity()

    def _on_tool_start(self, event: ToolCallStartEvent) -> Sequence[Effect]:
        if event.tool_call_id in self._calls:
            return self._violation(
                "duplicate_tool_call_start",
                "TOOL_CALL_START",
                f"tool call {event.tool_call_id!r} already started; dropped",
            )
        return self._start_call(event.tool_call_id, event.tool_call_name, event.parent_message_id)

    def _append_args(self, call: ToolCallInfo, delta: str) -> None:
        if not delta:
            return
        call.argument_adder(delta)
        self._arg_chars += len(delta)
        if self._arg_chars <= self._arg_char_safe:
            return
        # Near a bound: count this call's bytes, and the turn's, exactly from now on
        # (once in full, then delta by delta), so the check stays O(1) per event.
        size = utf8_len(delta)
        exact = self._exact_arg_bytes.get(call.id)
        exact = call.argument_bytes if exact is None else exact + size
        self._exact_arg_bytes = keyed(self._exact_arg_bytes, call.id, exact)
        if exact > self._limits.max_argument_bytes:
            raise LimitExceededError(
                "max_argument_bytes",
                self._limits.max_argument_bytes,
                f"arguments of tool call {call.id!r} ({call.name})",
            )
        total = self._arg_exact
        if total is None:
            total = sum(c.argument_bytes for c in self._turn_calls)
        else:
            total += size
        self._arg_exact = total
        if total > self._limits.max_turn_argument_bytes:
            raise LimitExceededError(
                "max_turn_argument_bytes",
                self._limits.max_turn_argument_bytes,
                "arguments of the turn's tool calls",
            )

    def _on_tool_args(self, event: ToolCallArgsEvent) -> Sequence[Effect]:
        call = self._calls.get(event.tool_call_id)
        if call is None:
            return self._violation(
                "args_for_unknown_call",
                "TOOL_CALL_ARGS",
                f"no tool call {event.tool_call_id!r} in this run; dropped",
            )
        if call.status is not _STREAMING:
            if call.status is not _PENDING or call.id in self._from_snapshot:
                if call.status is _PENDING:
                    return self._violation(
                        "args_after_snapshot",
                        "TOOL_CALL_ARGS",
                        f"tool call {event.tool_call_id!r} has the arguments the server's "
                        "snapshot records; dropped",
                    )
                return self._violation(
                    "args_after_result",
                    "TOOL_CALL_ARGS",
                    f"tool call {event.tool_call_id!r} already has its result; dropped",
                )
            # Tools run when the run ends, not at TOOL_CALL_END: arguments that come
            # after END and before the end of the run still belong to the call
            # (pydantic-ai's adapter ends the first of two interleaved calls early).
            self._append_args(call, event.delta)
            if call.id in self._late_args:
                return NO_EFFECTS
            self._late_args = keyed(self._late_args, call.id, True)
            return self._violation(
                "args_after_end",
                "TOOL_CALL_ARGS",
                f"tool call {event.tool_call_id!r} already ended; arguments kept, "
                "the call runs when the run ends",
            )
        self._append_args(call, event.delta)
        return NO_EFFECTS

    def _on_tool_end(self, event: ToolCallEndEvent) -> Sequence[Effect]:
        call = self._calls.get(event.tool_call_id)
        if call is None:
            return self._violation(
                "end_for_unknown_call",
                "TOOL_CALL_END",
                f"no tool call {event.tool_call_id!r} in this run; dropped",
            )
        if call.status is not _STREAMING:
            return self._violation(
                "duplicate_tool_call_end",
                "TOOL_CALL_END",
                f"tool call {event.tool_call_id!r} already ended; dropped",
            )
        self._send_call(call, ToolCallEvent.finish_args)
        return NO_EFFECTS

    def _on_tool_chunk(self, event: ToolCallChunkEvent) -> Sequence[Effect]:
        current = self._chunk_call
        call_id = event.tool_call_id
        effects: Sequence[Effect] = NO_EFFECTS
        if current is None or (call_id is not None and call_id != current.id):
            self._close_tool_chunk()
            if call_id is None or event.tool_call_name is None:
                return self._violation(
                    "chunk_without_call_id",
                    "TOOL_CALL_CHUNK",
                    "first TOOL_CALL_CHUNK of a call needs toolCallId and toolCallName; dropped",
                )
            if call_id in self._calls:
                return self._violation(
                    "duplicate_tool_call_start",
                    "TOOL_CALL_CHUNK",
                    f"tool call {call_id!r} already started; dropped",
                )
            effects = self._start_call(call_id, event.tool_call_name, event.parent_message_id)
            current = self._calls[call_id]
            self._chunk_call = current
        if event.delta:
            self._append_args(current, event.delta)
        return effects

    def _on_tool_result(self, event: ToolCallResultEvent) -> Sequence[Effect]:
        call = self._calls.get(event.tool_call_id)
        if call is None:
            if self.conversation.holds_tool_call(event.tool_call_id):
                return NO_EFFECTS
            return self._violation(
                "result_for_unknown_call",
                "TOOL_CALL_RESULT",
                f"no tool call {event.tool_call_id!r} in this run; dropped",
            )
        if call.status not in _CALLING:
            return self._violation(
                "duplicate_tool_call_result",
                "TOOL_CALL_RESULT",
                f"tool call {event.tool_call_id!r} already has a result; dropped",
            )
        return self._agent_result(call, event.content, event.message_id, "TOOL_CALL_RESULT")
