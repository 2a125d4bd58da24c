"""Reasoning, in both dialects (REASONING_* and the older THINKING_*), with encrypted
values."""

from __future__ import annotations

from collections.abc import Sequence

from toolrelay._core._conversation import (
    ReasoningRecord,
)
from toolrelay._core._effects import (
    NO_EFFECTS,
    Effect,
)
from toolrelay._core._processor_base import ProcessorBase
from toolrelay._core._processor_state import _REASONING, keyed
from toolrelay.protocol import (
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
)

__all__ = ("ReasoningEvents",)


class ReasoningEvents(ProcessorBase):
    __slots__ = ()

    def _reasoning(self, message_id: str) -> ReasoningRecord:
        record = self._open_reasoning.get(message_id)
        if record is None:
            self._count_message()
            record = ReasoningRecord(message_id, complete=False)
            self._open_reasoning = keyed(self._open_reasoning, message_id, record)
            self._run_reasoning = keyed(self._run_reasoning, message_id, record)
            self.conversation.append(record)
            self._opened_to = len(self.conversation.messages)
        return record

    def _on_reasoning_start(
        self, event: ReasoningStartEvent | ThinkingStartEvent
    ) -> Sequence[Effect]:
        return self._set_activity(_REASONING)

    def _on_reasoning_end(self, event: ReasoningEndEvent | ThinkingEndEvent) -> Sequence[Effect]:
        return self._calling_activity() if self._calls else NO_EFFECTS

    def _on_reasoning_message_start(self, event: ReasoningMessageStartEvent) -> Sequence[Effect]:
        self._reasoning(event.message_id)
        return self._set_activity(_REASONING)

    def _on_reasoning_content(self, event: ReasoningMessageContentEvent) -> Sequence[Effect]:
        if event.delta:
            self._reasoning(event.message_id).append(event.delta)
            self._count_reasoning(event.delta)
        return NO_EFFECTS

    def _on_reasoning_chunk(self, event: ReasoningMessageChunkEvent) -> Sequence[Effect]:
        # Like TEXT_MESSAGE_CHUNK: the first chunk names the message, later ones may
        # not; any other event (or another messageId) closes it.
        current = self._chunk_reasoning
        message_id = event.message_id
        effects: Sequence[Effect] = NO_EFFECTS
        if current is None or (message_id is not None and message_id != current.id):
            self._close_reasoning_chunk()
            if message_id is None:
                return self._violation(
                    "chunk_without_message_id",
                    "REASONING_MESSAGE_CHUNK",
                    "first REASONING_MESSAGE_CHUNK of a message has no messageId; dropped",
                )
            current = self._reasoning(message_id)
            self._chunk_reasoning = current
            effects = self._set_activity(_REASONING)
        if event.delta:
            current.append(event.delta)
            self._count_reasoning(event.delta)
        return effects

    def _on_reasoning_encrypted_value(
        self, event: ReasoningEncryptedValueEvent
    ) -> Sequence[Effect]:
        # Kept on the record (subtype "message") or the call ("tool-call") it belongs to,
        # and sent back with it; an artefact for anything else is not ours to keep.
        # O(1) whatever the id: the run's records are found by id, never by a walk.
        value = event.encrypted_value
        if event.subtype == "tool-call":
            call = self._calls.get(event.entity_id)
            if call is not None:
                self._count_reasoning(value)
                call.encrypted_value = value
            return NO_EFFECTS
        record = self._run_reasoning.get(event.entity_id)
        if record is not None:
            self._count_reasoning(value)
            if event.entity_id not in self._open_reasoning:
                self.conversation.remap()  # a closed record may be mapped already
            record.encrypted_value = value
            if record.complete:
                self._settle(record)  # settled before its signature came: again
        return NO_EFFECTS

    def _on_reasoning_message_end(self, event: ReasoningMessageEndEvent) -> Sequence[Effect]:
        record = self._open_reasoning.pop(event.message_id, None)
        if record is not None:
            record.complete = True
            self._settle(record)
        return NO_EFFECTS

    def _on_thinking_text_start(self, event: ThinkingTextMessageStartEvent) -> Sequence[Effect]:
        if self._thinking is None:
            self._count_message()
            self._thinking = ReasoningRecord(self._id_factory(), complete=False)
            self.conversation.append(self._thinking)
            self._opened_to = len(self.conversation.messages)
        return self._set_activity(_REASONING)

    def _on_thinking_text_content(self, event: ThinkingTextMessageContentEvent) -> Sequence[Effect]:
        if self._thinking is None:
            self._on_thinking_text_start(ThinkingTextMessageStartEvent())
        assert self._thinking is not None
        self._thinking.append(event.delta)
        self._count_reasoning(event.delta)
        return NO_EFFECTS

    def _on_thinking_text_end(self, event: ThinkingTextMessageEndEvent) -> Sequence[Effect]:
        if self._thinking is not None:
            self._thinking.complete = True
            self._settle(self._thinking)
            self._thinking = None
        return NO_EFFECTS
