"""The lifecycle of one tool call, declared as a python-statemachine ``StateChart``.

Every transition of a tool call lives in the table below; nothing beside this table.
The core drives a compiled copy of it (``_compiled.py``, read from this class at
import), the diagrams are drawn from it, and the tests send every event in every
state to it. A transition added anywhere else is a bug.

Theory of operation
-------------------

AG-UI ``TOOL_CALL_START`` creates a call in ``streaming``. ``TOOL_CALL_ARGS`` deltas
append to its arguments but are not transitions: the state does not change while
arguments arrive, and the cost of a delta does not depend on this machine
(promise 8). ``TOOL_CALL_END`` is ``finish_args``: the arguments are complete and the
call is ``pending``, waiting for the run's stream to end. When the run ends with
calls pending, each is executed (``execute``) and ends ``completed`` (``succeed``) or
``failed`` (``fail``, the error text is still sent to the model, promise 2).

A tool declared as needing approval (a tool policy) does not run at once: its call
goes ``pending -> awaiting_approval`` (``request_approval``) and waits for the
embedding code, which ``approve``-s it (it then runs as any other) or ``deny``-es it:
``failed``, the denial is its result, sent to the model.

An agent that runs a tool itself sends ``TOOL_CALL_RESULT`` (or holds the result in the
run's ``MESSAGES_SNAPSHOT``): ``receive_result`` completes the call from ``streaming``
or ``pending`` so a client never runs it a second time. When the run breaks, is
cancelled, interrupted (the agent stopped to ask for something, so its pending calls
are not run) or superseded, every call still open is ``abandon``-ed to ``failed``: a
call never stays open (promise 1).

Strictness (``_strict.py``, shared by both machines): an event a state does not
accept raises ``IllegalTransition`` and an error in a callback propagates. Callbacks
are synchronous and the machine has no guards and no actions: it only records
where the call stands.

Promises served: 1 (every path ends final), 2 (a failure is an outcome the model
sees), 8 (argument deltas are not transitions).
"""

from __future__ import annotations

from statemachine import Event
from statemachine.states import States

from toolrelay._machines._status import ToolCallEvent, ToolCallStatus, labelled_by_value
from toolrelay._machines._strict import StrictChart

__all__ = ("ToolCallLifecycle",)


class ToolCallLifecycle(StrictChart):
    """One tool call: ``streaming -> pending -> [awaiting_approval ->] executing ->
    completed | failed``.

    The live transition table, rendered from this class:

    {statechart:md}
    """

    s = labelled_by_value(
        States.from_enum(
            ToolCallStatus,
            initial=ToolCallStatus.streaming,
            final=(ToolCallStatus.completed, ToolCallStatus.failed),
            use_enum_instance=True,
        )
    )

    #: AG-UI ``TOOL_CALL_END``: the arguments are complete.
    finish_args = Event(s.streaming.to(s.pending), name=ToolCallEvent.finish_args)
    #: The tool starts running.
    execute = Event(s.pending.to(s.executing), name=ToolCallEvent.execute)
    #: The tool's policy asks for the embedding code's approval first.
    request_approval = Event(s.pending.to(s.awaiting_approval), name=ToolCallEvent.request_approval)
    #: The embedding code approved the call: it runs.
    approve = Event(s.awaiting_approval.to(s.executing), name=ToolCallEvent.approve)
    #: The embedding code denied the call: its denial is the result the model sees.
    deny = Event(s.awaiting_approval.to(s.failed), name=ToolCallEvent.deny)
    #: The tool returned a result.
    succeed = Event(s.executing.to(s.completed), name=ToolCallEvent.succeed)
    #: The tool raised, timed out or was unknown (promise 2).
    fail = Event(s.executing.to(s.failed), name=ToolCallEvent.fail)
    #: AG-UI ``TOOL_CALL_RESULT``: the agent ran the tool itself.
    receive_result = Event(
        s.completed.from_(s.streaming, s.pending), name=ToolCallEvent.receive_result
    )
    #: The run broke, was cancelled, interrupted or superseded: from every non-final
    #: state (promise 1).
    abandon = Event(s.failed.from_.any(), name=ToolCallEvent.abandon)
