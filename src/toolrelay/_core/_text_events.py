"""Text messages: START, CONTENT, END and the CHUNK form."""

from __future__ import annotations

from collections.abc import Sequence

from toolrelay._core._conversation import (
    TextMessage,
)
from toolrelay._core._effects import (
    NO_EFFECTS,
    Effect,
)
from toolrelay._core._processor_base import ProcessorBase
from toolrelay._core._processor_state import _STREAMING_TEXT, added, keyed
from toolrelay.protocol import (
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
)

__all__ = ("TextEvents",)


class TextEvents(ProcessorBase):
    __slots__ = ()

    def _start_text(self, message_id: str, role: str | None, *, opened: bool = True) -> TextMessage:
        """Open a text message; ``opened``: the agent opened it (not a content delta
        for a message it never started)."""
        self._count_message()
        text = TextMessage(message_id, role or "assistant", complete=False)
        self._open_texts = keyed(self._open_texts, message_id, text)
        self._turn_texts = added(self._turn_texts, text)
        self._run_texts = True
        self.conversation.append(text)
        if opened:
            self._opened_to = len(self.conversation.messages)
        return text

    def _on_text_start(self, event: TextMessageStartEvent) -> Sequence[Effect]:
        if event.message_id in self._open_texts:
            return self._violation(
                "duplicate_text_message_start",
                "TEXT_MESSAGE_START",
                f"text message {event.message_id!r} is already open",
            )
        self._start_text(event.message_id, event.role)
        return self._set_activity(_STREAMING_TEXT)

    def _on_text_content(self, event: TextMessageContentEvent) -> Sequence[Effect]:
        text = self._open_texts.get(event.message_id)
        if text is None:
            effects = self._violation(
                "content_without_start",
                "TEXT_MESSAGE_CONTENT",
                f"text message {event.message_id!r} was not started; started implicitly",
            )
            self._start_text(event.message_id, None, opened=False).append(event.delta)
            self._count_text(event.delta)
            return (*effects, *self._set_activity(_STREAMING_TEXT))
        text.append(event.delta)
        self._count_text(event.delta)
        return NO_EFFECTS

    def _on_text_end(self, event: TextMessageEndEvent) -> Sequence[Effect]:
        text = self._open_texts.pop(event.message_id, None)
        if text is None:
            return self._violation(
                "end_for_unknown_message",
                "TEXT_MESSAGE_END",
                f"text message {event.message_id!r} is not open",
            )
        text.complete = True
        self._settle(text)
        return self._calling_activity() if self._calls else NO_EFFECTS

    def _on_text_chunk(self, event: TextMessageChunkEvent) -> Sequence[Effect]:
        current = self._chunk_text
        message_id = event.message_id
        effects: Sequence[Effect] = NO_EFFECTS
        if current is None or (message_id is not None and message_id != current.id):
            self._close_text_chunk()
            if message_id is None:
                return self._violation(
                    "chunk_without_message_id",
                    "TEXT_MESSAGE_CHUNK",
                    "first TEXT_MESSAGE_CHUNK of a message has no messageId; dropped",
                )
            current = self._open_texts.get(message_id) or self._start_text(message_id, event.role)
            self._chunk_text = current
            effects = self._set_activity(_STREAMING_TEXT)
        if event.delta:
            current.append(event.delta)
            self._count_text(event.delta)
        return effects
