"""The accounting of limits (promise 11): what a turn counts against its
:class:`~toolrelay.Limits` on the full path (text, reasoning, messages, JSON
nesting) and the bound on kept violations. The hot path's own budgets are kept in
:mod:`toolrelay._core._processor_base`."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import msgspec
import msgspec.structs

from toolrelay._core._arguments import utf8_len
from toolrelay._core._effects import (
    NO_EFFECTS,
    Effect,
    ProtocolViolation,
    ViolationRaised,
)
from toolrelay._core._processor_state import ProcessorState, added
from toolrelay._errors import LimitExceededError

__all__ = ("LimitsAccounting",)

logger = logging.getLogger("toolrelay.core")


class LimitsAccounting(ProcessorState):
    """Counting against the limits; a mixin of :class:`ProcessorState`."""

    __slots__ = ()

    def _violation(self, code: str, event_type: str, message: str) -> Sequence[Effect]:
        if len(self.violations) >= self._limits.max_violations:
            # Kept and reported up to the bound; past it, counted (and said once).
            if not self.violations_dropped:
                logger.warning(
                    "more than %d AG-UI protocol violations in one turn: "
                    "the next ones are counted, not kept",
                    self._limits.max_violations,
                )
            self.violations_dropped += 1
            return NO_EFFECTS
        violation = ProtocolViolation(code=code, event_type=event_type, message=message)
        self.violations = added(self.violations, violation)
        logger.warning(
            "AG-UI protocol violation (%s) in %s: %s",
            code,
            event_type,
            message,
            extra={"protocol_violation": violation},  # lets a reporter of its own drop it
        )
        return (ViolationRaised(violation),)

    def _count_message(self) -> None:
        self._message_count += 1
        if self._message_count > self._limits.max_messages_per_turn:
            raise LimitExceededError(
                "max_messages_per_turn", self._limits.max_messages_per_turn, "messages opened"
            )

    def _count_text(self, delta: str, *, result: bool = False) -> None:
        """Count a text delta of the full path (already appended) against the turn;
        ``result``: a tool result the agent reported, which no text message holds."""
        if not delta:
            return
        if result:
            self._text_results += utf8_len(delta)
        limit = self._limits.max_text_bytes
        exact = self._text_exact
        if exact is None:
            full = self._text_full_bytes + utf8_len(delta)
            self._text_full_bytes = full
            if full + 4 * self._text_hot_chars <= limit:
                self._text_hot_budget = (limit - full) // 4
                return
            # Near the bound: count the turn's text exactly, once in full, then delta
            # by delta; the hot path stays closed from now on.
            exact = sum(text.byte_count for text in self._turn_texts) + self._text_results
            self._text_hot_budget = -1
        else:
            exact += utf8_len(delta)
        self._text_exact = exact
        if exact > limit:
            raise LimitExceededError("max_text_bytes", limit, "text of the turn")

    def _count_reasoning(self, delta: str) -> None:
        if delta:
            self._reasoning_bytes += utf8_len(delta)
            if self._reasoning_bytes > self._limits.max_reasoning_bytes:
                raise LimitExceededError(
                    "max_reasoning_bytes", self._limits.max_reasoning_bytes, "reasoning of the turn"
                )

    def _check_depth(self, value: object, what: str) -> None:
        """Refuse ``value`` nested deeper than ``Limits.max_json_depth`` (iterative)."""
        limit = self._limits.max_json_depth
        stack: list[tuple[object, int]] = [(value, 0)]
        while stack:
            item, level = stack.pop()
            if isinstance(item, dict):
                children: Iterable[object] = item.values()
            elif isinstance(item, (list, tuple)):
                children = item
            elif isinstance(item, msgspec.Struct):
                # A content part is a JSON object too, and its metadata any JSON.
                children = msgspec.structs.astuple(item)
            else:
                continue
            if level >= limit:
                raise LimitExceededError("max_json_depth", limit, f"{what} nested too deep")
            stack.extend((child, level + 1) for child in children)
