"""State and messages snapshots: STATE_SNAPSHOT, STATE_DELTA within their bounds, and
MESSAGES_SNAPSHOT (the arguments it corrects, the messages it adds)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from toolrelay._core._arguments import utf8_len
from toolrelay._core._conversation import (
    TextMessage,
)
from toolrelay._core._effects import (
    NO_EFFECTS,
    Effect,
)
from toolrelay._core._patch import BoundedState, JsonPatchError, StateBoundError, StateBounds
from toolrelay._core._processor_base import ProcessorBase
from toolrelay._core._processor_state import _CALLING, _PENDING, added, keyed
from toolrelay._errors import LimitExceededError
from toolrelay.protocol import (
    AssistantMessage,
    Message,
    MessagesSnapshotEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    ToolMessage,
)

__all__ = ("StateEvents",)


class StateEvents(ProcessorBase):
    __slots__ = ()

    def _state_bounds(self) -> StateBounds:
        return StateBounds(
            max_bytes=self._limits.max_state_bytes, max_depth=self._limits.max_json_depth
        )

    def _on_state_snapshot(self, event: StateSnapshotEvent) -> Sequence[Effect]:
        snapshot = event.snapshot
        # An old encoder left a null snapshot out (it decodes as UNSET): the state is null.
        try:
            # Our own copy (iterative, bounded): deltas patch it in place later.
            state = BoundedState(
                None if snapshot is msgspec.UNSET else snapshot, self._state_bounds()
            )
        except StateBoundError as exc:
            raise LimitExceededError(exc.limit, exc.bound, f"STATE_SNAPSHOT: {exc}") from exc
        self._state = state
        self.conversation.state = state.document
        return NO_EFFECTS

    def _on_state_delta(self, event: StateDeltaEvent) -> Sequence[Effect]:
        """Patch the state in place (linear in the patch and what it touches); the
        first delta of a run copies the state once, as the run's input holds it."""
        operations = msgspec.to_builtins(event.delta)
        if not isinstance(operations, list) or not all(isinstance(o, dict) for o in operations):
            return self._violation(
                "state_delta_failed", "STATE_DELTA", "the delta is not a list of operations"
            )
        try:
            state = self._state
            if state is None or state.document is not self.conversation.state:
                state = BoundedState(self.conversation.state, self._state_bounds())
                self._state = state
            state.apply(operations, copy_values=False)
        except JsonPatchError as exc:
            return self._violation(
                "state_delta_failed", "STATE_DELTA", f"patch not applied, state unchanged: {exc}"
            )
        except StateBoundError as exc:
            raise LimitExceededError(exc.limit, exc.bound, f"STATE_DELTA: {exc}") from exc
        finally:
            if self._state is not None:  # pragma: no branch - None only when the copy raised
                self.conversation.state = self._state.document
        return NO_EFFECTS

    def _on_messages_snapshot(self, event: MessagesSnapshotEvent) -> Sequence[Effect]:
        snapshot = tuple(event.messages)
        self.conversation.last_snapshot = snapshot
        # A call of this run that the snapshot holds a result for ran on the agent's
        # side: LlamaIndex's adapter sends a server tool's result only here, never as
        # TOOL_CALL_RESULT. It completes as if that had come (and is not run here).
        ran = self._results_in(snapshot)
        # A server that keeps the thread's history merges the next request into it by
        # message id, so a tool result must go back under the id the server stored it
        # under: LangGraph's adapter names a result it sends by the call id but stores
        # it under a fresh one, and would add it a second time.
        # Everything here is O(the snapshot): the conversation is asked through its
        # index, never walked (promise 8).
        stored = {m.tool_call_id: m.id for m in snapshot if isinstance(m, ToolMessage)}
        if stored:
            result_ids = self._result_ids
            for call_id, message_id in stored.items():
                if call_id in result_ids:
                    result_ids[call_id] = message_id
            for batch in self.conversation.adopt_result_ids(stored):
                self._settle(batch)
        effects = self._adopt_snapshot_arguments(snapshot)
        return (*ran, *effects, *self._adopt_unstreamed(snapshot))

    def _results_in(self, snapshot: tuple[Message, ...]) -> Sequence[Effect]:
        """Complete each call of this run still calling whose result the snapshot
        holds, with that result, under the snapshot's message id."""
        effects: list[Effect] = []
        for message in snapshot:
            if not isinstance(message, ToolMessage):
                continue
            call = self._calls.get(message.tool_call_id)
            if call is not None and call.status in _CALLING:
                effects.extend(
                    self._agent_result(
                        call, message.content, message.id, "MESSAGES_SNAPSHOT", message.error
                    )
                )
        return effects

    def _adopt_snapshot_arguments(self, snapshot: tuple[Message, ...]) -> Sequence[Effect]:
        """Give a pending call the arguments the snapshot records for it, when the
        streamed ones differ: the snapshot is the server's own record.

        LangGraph's adapter routes the argument deltas of two interleaved calls to
        the wrong call id; its MESSAGES_SNAPSHOT has each call's true arguments. Only
        calls not yet executed (``pending``) are touched, each at most once a run;
        arguments that mean the same JSON (spacing, key order aside) are not a
        difference. Logged as ``arguments_from_snapshot``.
        """
        effects: list[Effect] = []
        for message in snapshot:
            if not isinstance(message, AssistantMessage) or not message.tool_calls:
                continue
            for snap in message.tool_calls:
                call = self._calls.get(snap.id)
                if call is None or call.status is not _PENDING or call.id in self._snapshot_checked:
                    continue
                self._snapshot_checked = keyed(self._snapshot_checked, call.id, True)
                recorded = snap.function.arguments
                streamed = call.arguments
                if recorded == streamed or _same_json(recorded, streamed):
                    continue
                if _json_or_none(recorded, self._limits.max_json_depth) is None:
                    continue  # the record is no better than what streamed
                if utf8_len(recorded) > self._limits.max_argument_bytes:
                    continue
                call.replace_arguments(recorded)
                self._from_snapshot = keyed(self._from_snapshot, call.id, True)
                effects.extend(
                    self._violation(
                        "arguments_from_snapshot",
                        "MESSAGES_SNAPSHOT",
                        f"tool call {call.id!r} ({call.name}) streamed arguments "
                        f"{_excerpt(streamed)} but the snapshot records {_excerpt(recorded)}; "
                        "the snapshot's are used",
                    )
                )
        return effects

    def _adopt_unstreamed(self, snapshot: tuple[Message, ...]) -> Sequence[Effect]:
        """Keep the answer of a run that streamed nothing but a MESSAGES_SNAPSHOT.

        A server whose model does not stream (LangGraph with a non-streaming chat
        model) sends its answer only in the snapshot. When this run streamed no text
        and no call, the assistant messages the snapshot holds after the last message
        the conversation knows are appended as complete texts, with a logged violation
        (``snapshot_only_message``). Calls found there are not executed (they never
        streamed, so they have no lifecycle): ``snapshot_only_tool_calls``.
        """
        if self._calls or self._run_texts:
            return NO_EFFECTS
        known = self.conversation.known_ids()
        last_known = -1
        for i, message in enumerate(snapshot):
            if message.id in known:
                last_known = i
        effects: list[Effect] = []
        for message in snapshot[last_known + 1 :]:
            if not isinstance(message, AssistantMessage):
                continue
            if message.tool_calls:
                names = ", ".join(call.function.name for call in message.tool_calls)
                effects.extend(
                    self._violation(
                        "snapshot_only_tool_calls",
                        "MESSAGES_SNAPSHOT",
                        f"assistant message {message.id!r} asks for {names} but no call "
                        "was streamed; not executed",
                    )
                )
            if isinstance(message.content, str) and message.content:
                self._count_message()
                adopted = TextMessage(message.id, "assistant", message.content)
                self._turn_texts = added(self._turn_texts, adopted)
                self._run_texts = True
                self._count_text(message.content)
                self.conversation.append(adopted)
                self._settle(adopted)
                effects.extend(
                    self._violation(
                        "snapshot_only_message",
                        "MESSAGES_SNAPSHOT",
                        f"assistant message {message.id!r} was not streamed; kept from "
                        "the snapshot",
                    )
                )
        return tuple(effects)


def _json_or_none(text: str, max_depth: int) -> object | None:
    """``text`` decoded as JSON, or None when it is not JSON (or nests too deep)."""
    if not text.strip():
        return None
    depth = 0
    deepest = 0
    for char in text:  # a cheap bound on the nesting before msgspec recurses into it
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    if deepest > max_depth:
        return None
    try:
        value: object = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError):
        return None
    return value


def _same_json(a: str, b: str) -> bool:
    """Whether two argument strings hold the same JSON (spacing and key order aside;
    no arguments at all are the empty object, as they are sent)."""
    x = _json_or_none(a, 10_000) if a.strip() else {}
    y = _json_or_none(b, 10_000) if b.strip() else {}
    return x is not None and x == y


def _excerpt(text: str, size: int = 80) -> str:
    return repr(text if len(text) <= size else text[:size] + "...")
