"""The stateful property suite of toolrelay's eight promises, shipped for users.

:class:`PromisesMachine` is a Hypothesis ``RuleBasedStateMachine`` that drives a real
:class:`~toolrelay.Engine` with a :class:`~toolrelay.testing.ScriptedAgent`
(whose ``respond`` callback plays the behaviour drawn for each run). Its rules are what
users do; its invariants are the promises of ``ARCHITECTURE.md``, checked once the
engine is quiet after every step.

Rules (user actions):

- ``first_turns`` (once, first): a turn on ``t0`` and one on ``t1``.
- ``send``: start a turn on one of three threads; the agent's behaviour for every run
  of the turn is drawn as a :class:`TurnPlan`. ``resend`` sends on a thread whose
  turn is live: the newer turn supersedes it (promise 5).
- ``answer``: answer the interrupts of a thread whose turn ended ``interrupted``: a
  new turn whose first run carries one resume entry per interrupt (with or without a
  message of its own), or a wrong answer (an unknown id, one answered twice, one left
  out), which must be refused with :class:`~toolrelay.ResumeError` and change
  nothing.
- ``cancel``: cancel a thread's turn, live or not (``cancel`` says which).
- ``focus``: show a thread, or none; optionally through a view subscribed just before.
- ``release_one`` / ``release_all``: open gates that a stream or a slow tool waits on.
- ``decide``: approve or deny one tool call that awaits approval (``probe_guarded``).
- ``close``: close the engine with its turns in flight; after it only
  ``send_after_close`` (which must raise :class:`~toolrelay.ClosedError`),
  ``cancel`` and ``focus`` run.

Agent behaviours (one :class:`RunPlan` per run, :class:`RunKind`): a text answer; one
or several tool calls, sequential or interleaved, with split argument deltas;
multi-hop (tools, then tools, then text); an endless tool loop (the circuit breaker
trips); a run that ends with the AG-UI ``interrupt`` outcome (the agent asks
something) or the ``cancelled`` outcome; malformed and out-of-order events
(:class:`Malformation`); ``RUN_ERROR``; a
stream that breaks, drops the connection or hangs, maybe mid-message; a stream held on
a gate; a run whose allocation fails; run handles whose disposal raises. Tool outcomes
(:class:`CallOutcome`): ok, raises, slow (waits for a gate), times out, unknown tool,
invalid arguments, and calls to *your* tools; and hostile tools (promise 11): one
raising ``SystemExit``, ``KeyboardInterrupt``, ``GeneratorExit`` or a cancellation
exception no scope asked for, a blocking tool that never returns (its thread stuck
until the example ends), one returning a value that cannot be sent (cyclic, or an
object JSON has no form for); and calls the agent runs itself (their result streamed
as ``TOOL_CALL_RESULT``), under the name of a tool of the client, which must not run
them.

Quiet means: every live turn is parked (its stream on a shut gate or a hang, or its
tools on shut gates) and every finished turn's task has returned. After each step the
machine polls the engine's public state until it is quiet; if nothing observable moves
meanwhile, or a user action does not return, some turn is stuck: a failure.

Invariants:

1. Every finished turn is final, with a reason, its task done and no open tool call;
   committed calls are final; abandoned calls failed; a live turn is parked, never
   stuck (promise 1). An interrupted turn is final too, and its pending calls never
   run.
2. Every continuation's ``RunAgentInput`` carries a ``tool`` message for every call of
   the run before it, with that call's outcome (result, error, timeout, unknown tool,
   invalid arguments, the hostile tools' failures, the agent's own result); the calls
   of a batch run concurrently; no call runs twice; abandoned calls, the agent's own
   calls, calls past the depth bound and late calls never run (promises 2 and 11).
3. Depth never exceeds ``max_depth``; a breaker trip is ``failed`` with reason
   ``max_depth`` at exactly ``max_depth``; an endless tool loop trips it (promise 3),
   unless loop detection stops it first: a turn whose agent asks for one of the
   user's tools with the same arguments ``max_repeated_calls`` times ends ``failed``
   with reason ``no_progress`` at exactly that run, and that run's calls never run.
4. A cancelled turn is ``cancelled`` (with the user's message) the moment ``cancel``
   returns and its task ends promptly; closing ends every live turn ``cancelled``
   with reason ``closed`` (promise 4).
5. The registry holds exactly the live turns' current runs, one per thread, at the
   turn's depth; a handle is never disposed while registered; a dispose error changes
   nothing; first runs are announced as ``RunRegistered``, continuations as
   ``RunReplaced`` naming their predecessor; a re-sent thread's older turn is
   ``superseded`` at once (promise 5).
6. Only the ``focus`` rule moves the focus; focused-only subscribers hear only the
   focused thread; focusing shows the thread's current state; per thread,
   notifications follow the turns in order (no stale notification of an older turn,
   no final state followed by a running one) (promise 6).
7. Text already received is kept whatever happens next (malformed events, errors,
   cancellation, a stream cut mid-message); malformed events are recorded as
   violations; events after ``RUN_FINISHED``/``RUN_ERROR`` are not processed
   (promise 7).

Beside those, the model: every turn ends exactly as its plan (or the user) says, and
never with ``internal_error``; an interrupted turn exposes exactly the interrupts the
agent sent (on the turn and its snapshot); the engine's open interrupts per thread
follow the turns; resume entries reach the first run of the turn that answers, and no
other run. Promise 8 (constant cost per event) is the benchmarks'.

Run it against your own tools::

    from toolrelay._core import ToolRegistry
    from toolrelay.testing.stateful import PromisesMachine

    class MyToolsPromises(PromisesMachine):
        max_depth = 4

        def tools(self) -> ToolRegistry:
            return ToolRegistry.of(search, get_weather)

    # Collected by pytest or unittest; tune it as any Hypothesis state machine test.
    TestMyToolsPromises = MyToolsPromises.TestCase
    TestMyToolsPromises.settings = settings(max_examples=200, stateful_step_count=30)

or from code, as ``toolrelay verify`` does::

    run_promises(tools=ToolRegistry.of(search, get_weather), examples=200, seed=1)

The agent calls your tools with arguments drawn from their JSON Schemas (and
sometimes with arguments that do not validate); their results are not checked, only
that the model sees one. Your tools must finish (each runs under
:attr:`PromisesMachine.tool_timeout`) and should answer the same way for the same
arguments, or Hypothesis cannot replay a failure. Their names must not start with
``probe_``: those are the machine's own tools.

Determinism: the machine never sleeps to synchronise. It waits on gates it controls,
on the turns' ``wait_finished`` and by polling the engine's public state between
event-loop iterations; the clock only bounds waiting, and times ``probe_timeout``
(20 ms). Each example runs in its own event loop, in a thread
(``anyio.from_thread.start_blocking_portal``), on asyncio or trio.
"""

from __future__ import annotations

from toolrelay.testing.stateful._machine import PromisesMachine, TestPromises, run_promises
from toolrelay.testing.stateful._plans import (
    CallOutcome,
    CallPlan,
    Malformation,
    RunKind,
    RunPlan,
    TurnPlan,
)

__all__ = (
    "CallOutcome",
    "CallPlan",
    "Malformation",
    "PromisesMachine",
    "RunKind",
    "RunPlan",
    "TestPromises",
    "TurnPlan",
    "run_promises",
)
