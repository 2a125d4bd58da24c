"""The lifecycle of one turn on a thread, declared as a python-statemachine ``StateChart``.

Every transition of a turn lives in the table below; nothing beside this table.
The runtime drives a compiled copy of it (``_compiled.py``, read from this class at
import), the diagrams are drawn from it, and the tests send every event in every
state to it. A transition added anywhere else is a bug.

Theory of operation
-------------------

A turn is one user message on a thread. It starts ``idle`` and ``start`` moves it
to ``running`` when its first run begins streaming. When the run's stream ends
(AG-UI ``RUN_FINISHED`` or the stream is done) with tool calls pending,
``execute_tools`` moves it to ``executing_tools``; the trigger is the end of the
stream, never ``TOOL_CALL_END``, because a run may emit several calls in sequence.
When the continuation run carrying the results starts, ``continue_run`` moves it
back to ``running`` and counts one more continuation in :attr:`RunLifecycle.depth`
(promise 3: the runtime compares it with its bound and fails the turn with
``ReasonKind.MAX_DEPTH``). A stream that ends with no call pending ``complete``-s
the turn.

A run may also end by *asking*: AG-UI 1.0 ends a run that needs something from
outside (an approval, a credential, a choice) with ``RUN_FINISHED`` whose outcome
is ``interrupt``, and forbids reporting it as success. ``interrupt`` moves the turn
from ``running`` to the final state ``interrupted``; calls still pending are
abandoned, not run (the agent stopped to ask, it did not hand them over). Why a
final state of its own, and not one of the alternatives:

- not ``completed``: the agent did not answer, and an observer that reads
  ``completed`` as "the agent answered" would be lied to (the spec's MUST NOT);
- not a waiting, non-final state (``awaiting_input``): the protocol has no mid-run
  channel, so the run is over when it interrupts, and the answer travels in a *new*
  run whose ``RunAgentInput.resume`` carries it. A turn left open until a person
  answers (minutes, days, never) would hold its thread's registered run, look
  like a stuck turn to every check of promise 1, and need a second way to end;
- not ``failed`` or ``cancelled``: nothing went wrong and nobody stopped it.

So an interrupted turn is over, like a completed one, and the answer is the next
turn on the thread (``Engine.start_turn(key, resume=[...])``). ``interrupt`` leaves
only ``running``: ``RUN_FINISHED`` is read only while a run streams.

From every non-final state, three events end the turn: ``fail`` (the agent, the
wire, the backend or toolrelay failed, or the depth bound was hit), ``cancel``
(promise 4, at any moment) and ``supersede`` (the user re-sent on the same thread
and the newer turn owns it, promise 5). ``executing_tools`` is a running state for
observers (``RunStatus.is_running``): no flash of idle between Run N and Run N+1.

Strictness (``_strict.py``, shared by both machines): an event a state does not
accept raises ``IllegalTransition`` and an error in a callback propagates. The one
action, ``count_continuation``, is declared at its transition with ``on=`` (not by
a naming convention), is synchronous, and only records.

Promises served: 1 (every path ends final, an interrupted one too), 3 (bounded
depth), 4 (cancel at any moment), 5 (a newer turn supersedes).
"""

from __future__ import annotations

from typing import Any

from statemachine import Event
from statemachine.states import States

from toolrelay._machines._status import RunEvent, RunStatus, labelled_by_value
from toolrelay._machines._strict import StrictChart

__all__ = ("RunLifecycle",)


class RunLifecycle(StrictChart):
    """One turn: ``idle -> running -> executing_tools -> running -> ... -> final``.

    The finals are ``completed``, ``interrupted``, ``failed``, ``cancelled`` and
    ``superseded``.
    :attr:`depth` counts the continuation runs started so far.

    The live transition table, rendered from this class:

    {statechart:md}
    """

    depth: int
    """How many continuation runs this turn has started (``continue_run`` transitions)."""

    def __init__(self, *args: Any, depth: int = 0, **kwargs: Any) -> None:
        self.depth = depth
        super().__init__(*args, **kwargs)

    def count_continuation(self) -> None:
        """The action of ``continue_run``: one more continuation run (promise 3)."""
        self.depth += 1

    s = labelled_by_value(
        States.from_enum(
            RunStatus,
            initial=RunStatus.idle,
            final=(
                RunStatus.completed,
                RunStatus.interrupted,
                RunStatus.failed,
                RunStatus.cancelled,
                RunStatus.superseded,
            ),
            use_enum_instance=True,
        )
    )

    #: The first run of the turn started.
    start = Event(s.idle.to(s.running), name=RunEvent.start)
    #: The run's stream ended with tool calls pending.
    execute_tools = Event(s.running.to(s.executing_tools), name=RunEvent.execute_tools)
    #: The continuation run started: depth + 1 (promise 3).
    continue_run = Event(
        s.executing_tools.to(s.running, on=count_continuation), name=RunEvent.continue_run
    )
    #: The run's stream ended with no tool call pending.
    complete = Event(s.running.to(s.completed), name=RunEvent.complete)
    #: The run's stream ended with the ``interrupt`` outcome: the agent waits for answers.
    interrupt = Event(s.running.to(s.interrupted), name=RunEvent.interrupt)
    #: The turn failed, from every non-final state.
    fail = Event(s.failed.from_.any(), name=RunEvent.fail)
    #: The embedding code cancelled the turn, from every non-final state (promise 4).
    cancel = Event(s.cancelled.from_.any(), name=RunEvent.cancel)
    #: A newer turn on the same thread took over, from every non-final state (promise 5).
    supersede = Event(s.superseded.from_.any(), name=RunEvent.supersede)
