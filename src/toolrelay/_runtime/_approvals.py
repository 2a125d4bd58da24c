"""Tool calls that wait for the embedding code's decision (tools declared
``needs_approval``).

The processor holds which calls await a decision; the turn shows them as client-side
interrupts (:func:`approval_interrupts`) and takes each decision by call id
(:func:`find_awaiting`). While its batch has such calls, the turn's task runs the
batch with an :class:`ApprovalQueue`: each call approved is put in it and runs at
once; once every call is decided the queue ends, and the batch ends when the approved
calls finish.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import anyio
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

from toolrelay._core import ToolCallInfo
from toolrelay._errors import ApprovalError
from toolrelay.protocol import Interrupt

__all__ = ("ApprovalQueue", "approval_interrupts", "find_awaiting")


def approval_interrupts(awaiting: Iterable[ToolCallInfo]) -> tuple[Interrupt, ...]:
    """The calls ``awaiting`` approval as client-side interrupts (see
    :attr:`Turn.approvals <toolrelay.Turn.approvals>`)."""
    return tuple(
        Interrupt(
            id=call.id,
            reason="tool_approval",
            tool_call_id=call.id,
            message=f"approve the call of tool {call.name!r}?",
            metadata={"tool": call.name, "arguments": call.arguments},
        )
        for call in awaiting
    )


def find_awaiting(awaiting: Sequence[ToolCallInfo], call_id: str) -> ToolCallInfo:
    """The call of ``awaiting`` whose id is ``call_id``.

    Raises:
        ApprovalError: None has that id (decided already, or the turn ended).
    """
    for call in awaiting:
        if call.id == call_id:
            return call
    raise ApprovalError(
        f"no call of this turn awaits approval with id {call_id!r} (awaiting: "
        f"{', '.join(repr(c.id) for c in awaiting) or 'none'})"
    )


class ApprovalQueue:
    """Where approved calls go to run while their batch waits for decisions.

    Its stream is made by the first of :meth:`put` and :meth:`receive` to need it,
    and made afresh after :meth:`close`.
    """

    __slots__ = ("_streams",)

    def __init__(self) -> None:
        self._streams: (
            tuple[MemoryObjectSendStream[ToolCallInfo], MemoryObjectReceiveStream[ToolCallInfo]]
            | None
        ) = None

    def _pair(
        self,
    ) -> tuple[MemoryObjectSendStream[ToolCallInfo], MemoryObjectReceiveStream[ToolCallInfo]]:
        if self._streams is None:
            self._streams = anyio.create_memory_object_stream[ToolCallInfo](math.inf)
        return self._streams

    def put(self, call: ToolCallInfo) -> None:
        """``call`` was approved: it runs (never waits)."""
        self._pair()[0].send_nowait(call)

    def receive(self) -> MemoryObjectReceiveStream[ToolCallInfo]:
        """What the batch reads the approved calls from."""
        return self._pair()[1]

    def all_decided(self) -> None:
        """No call awaits a decision any more: the batch ends once approved calls finish."""
        self._pair()[0].close()

    def close(self) -> None:
        """The batch ended (or the turn did): the stream is closed at both ends."""
        if self._streams is not None:
            send, receive = self._streams
            self._streams = None
            send.close()
            receive.close()
