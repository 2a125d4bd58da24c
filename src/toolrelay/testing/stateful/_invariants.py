"""The invariants: the promises of ``ARCHITECTURE.md``, checked after every step."""

from __future__ import annotations

import hypothesis
import msgspec
from hypothesis.stateful import (
    invariant,
)

from toolrelay._machines import RunStatus, ToolCallStatus
from toolrelay._reasons import ReasonKind
from toolrelay._runtime import (
    EventReceived,
    RunRegistered,
    RunReplaced,
    RunUnregistered,
    StateChanged,
    ToolCallFinished,
)
from toolrelay.backends._base import ThreadKey
from toolrelay.protocol import (
    Interrupt,
    RunAgentInput,
    ToolMessage,
)
from toolrelay.testing.stateful._doubles import drain
from toolrelay.testing.stateful._host import MachineBase
from toolrelay.testing.stateful._plans import (
    THREADS,
    CallOutcome,
    CallPlan,
    RunKind,
    base_exception_of,
)

__all__ = ("Invariants",)


class Invariants(MachineBase):
    """The promises, checked once the engine is quiet after every step."""

    # -- invariants -------------------------------------------------------------------

    @invariant()
    def no_machine_problems(self) -> None:
        """Problems noticed while the engine ran (dispose order, the responder)."""
        assert not self._problems, self._problems

    @invariant()
    def every_path_ends_in_a_terminal_state(self) -> None:
        """Promise 1."""

        def check() -> None:
            for model in self._models:
                turn = model.turn
                assert turn is not None
                stats = turn.statistics()
                if turn.finished:
                    assert turn.status.is_final and turn.reason is not None, model.label
                    assert model.done, f"promise 1: {model.label} is final but its task runs"
                    open_calls = {s: n for s, n in stats.tool_calls.items() if not s.is_final and n}
                    assert not open_calls, f"promise 1: {model.label} has open calls {open_calls}"
                    assert not turn.tool_calls, f"promise 1: {model.label} kept {turn.tool_calls}"
                else:
                    assert turn.status.is_running, f"{model.label} is {turn.status} once quiet"
                    assert self._parked(model), f"promise 1: {model.label} is not parked"
                    if turn.status is RunStatus.executing_tools:
                        wrong = [
                            c
                            for c in turn.tool_calls
                            if c.status in (ToolCallStatus.streaming, ToolCallStatus.pending)
                        ]
                        assert not wrong, f"promise 1: {model.label} executing with {wrong}"
                for call in turn.abandoned_calls:
                    assert call.status is ToolCallStatus.failed, f"{model.label}: {call}"
                    assert call.result is not None, f"{model.label}: {call} has no result"
            for key in THREADS:
                conversation = self._engine().conversation(key)
                if conversation is not None:
                    for call in conversation.tool_calls():
                        assert call.status.is_final, f"promise 1: {key} committed {call}"

        self._check(check)

    @invariant()
    def turns_end_as_their_plan_says(self) -> None:
        """The model: every turn ends as its plan (or the user) says; promises 3, 4, 5."""

        def check() -> None:
            for model in self._models:
                turn = model.turn
                assert turn is not None
                reason = turn.reason
                if reason is not None:
                    assert reason.kind is not ReasonKind.INTERNAL_ERROR, (
                        f"{model.label} ended with an internal error: {reason}"
                    )
                if reason is not None and not model.reported:
                    model.reported = True
                    endings.append(f"{turn.status.value} ({reason.kind.value})")
                if model.external is ReasonKind.SUPERSEDED:
                    assert turn.status is RunStatus.superseded, f"{model.label}: {turn!r}"
                elif model.external is ReasonKind.CANCELLED:
                    assert turn.status is RunStatus.cancelled, f"promise 4: {model.label}: {turn!r}"
                    assert reason is not None and reason.kind is ReasonKind.CANCELLED, reason
                elif model.external is ReasonKind.CLOSED:
                    assert turn.status is RunStatus.cancelled, f"{model.label}: {turn!r}"
                    assert reason is not None and reason.kind is ReasonKind.CLOSED, reason
                elif model.expected is None:
                    assert not turn.finished, (
                        f"{model.label} should hang until ended from outside, ended {reason}"
                    )
                elif turn.finished:
                    assert reason is not None and reason.kind is model.expected, (
                        f"{model.label} with {model.plan} ended {reason}, "
                        f"expected {model.expected.value}"
                    )
                    expected_status = {
                        ReasonKind.COMPLETED: RunStatus.completed,
                        ReasonKind.INTERRUPTED: RunStatus.interrupted,
                        ReasonKind.AGENT_CANCELLED: RunStatus.cancelled,
                    }.get(model.expected, RunStatus.failed)
                    assert turn.status is expected_status, f"{model.label}: {turn!r}"
                asked = model.runs[-1].interrupts if turn.status is RunStatus.interrupted else ()
                assert turn.interrupts == asked, f"{model.label} exposes {turn.interrupts}"
                assert turn.snapshot().interrupts == asked, f"{model.label}: {turn.snapshot()}"
            self._check_open_interrupts()

        endings: list[str] = []
        self._check(check)
        for ending in endings:  # for --hypothesis-show-statistics
            hypothesis.event("turn ended", ending)

    def _check_open_interrupts(self) -> None:
        """The engine's open interrupts per thread follow the turns: those of the last
        turn that ended ``interrupted``, until one ends ``completed`` or
        ``interrupted``; a turn that ended otherwise changes nothing."""
        engine = self._engine()
        for key in THREADS:
            expected: tuple[Interrupt, ...] | None = None
            for model in self._models:
                turn = model.turn
                if model.key != key or turn is None:
                    continue
                if turn.status is RunStatus.interrupted:
                    expected = turn.interrupts
                elif turn.status is RunStatus.completed:
                    expected = ()
            assert engine.open_interrupts(key) == expected, (
                f"{key}: open interrupts {engine.open_interrupts(key)}, expected {expected}"
            )

    @invariant()
    def continuation_depth_is_bounded(self) -> None:
        """Promise 3."""

        def check() -> None:
            for model in self._models:
                turn = model.turn
                assert turn is not None
                assert turn.depth <= self.max_depth, f"promise 3: {model.label} depth {turn.depth}"
                assert len(model.runs) <= self.max_depth + 1, (
                    f"promise 3: {model.label} streamed {len(model.runs)} runs"
                )
                reason = turn.reason
                if reason is not None and reason.kind is ReasonKind.MAX_DEPTH:
                    assert turn.status is RunStatus.failed, f"promise 3: {turn!r}"
                    assert turn.depth == self.max_depth, f"promise 3: {turn!r} tripped early"
                if reason is not None and reason.kind is ReasonKind.NO_PROGRESS:
                    assert turn.status is RunStatus.failed, f"loop detection: {turn!r}"
                    stops_at = model.plan.no_progress_at(self.max_depth, self.max_repeated_calls)
                    assert turn.depth == stops_at, f"loop detection: {turn!r} at {stops_at}"
                if model.plan.endless and turn.finished and model.external is None:
                    # The breaker stops an endless loop, or loop detection first when the
                    # agent repeats itself.
                    assert reason is not None and reason.kind in (
                        ReasonKind.MAX_DEPTH,
                        ReasonKind.NO_PROGRESS,
                    ), f"promise 3: the endless {model.label} ended {reason}"

        self._check(check)

    @invariant()
    def cancelled_turns_end_cancelled(self) -> None:
        """Promise 4 (a cancelled turn stays cancelled; its task finished)."""

        def check() -> None:
            for model in self._models:
                if model.external in (ReasonKind.CANCELLED, ReasonKind.CLOSED):
                    assert model.turn is not None
                    assert model.turn.status is RunStatus.cancelled, f"promise 4: {model.label}"
                    assert model.done, f"promise 4: {model.label}'s task did not finish promptly"

        self._check(check)

    @invariant()
    def one_registered_run_per_thread(self) -> None:
        """Promise 5: the registry holds the live turns' current runs, and only those."""

        def check() -> None:
            engine = self._engine()
            registry = engine.registry
            self._check_lifecycle_events()
            if registry.closed:
                assert self._closed, "the registry closed before the engine"
                return
            live = 0
            for key in THREADS:
                turn = engine.turn(key)
                handle = registry.get_handle(ThreadKey(key))
                if turn is None or turn.finished:
                    assert handle is None, f"promise 5: {key}'s turn ended, {handle} registered"
                    continue
                live += 1
                assert handle is not None, f"promise 5: live {turn!r} has no registered run"
                assert handle.run_id == turn.run_id, (
                    f"promise 5: {key} registers {handle.run_id}, its turn runs {turn.run_id}"
                )
                assert handle.depth == turn.depth, f"promise 5: {handle} vs {turn!r}"
                assert not handle.disposed, f"promise 5: registered {handle} is disposed"
            assert len(registry) == live, f"promise 5: {len(registry)} runs for {live} live turns"
            assert engine.statistics().registered_runs == live

        self._check(check)

    def _check_lifecycle_events(self) -> None:
        for event in drain(self._lifecycle_sub):
            record = self._records.get(event.run_id)
            assert record is not None, f"promise 5: {event} for a run that never streamed"
            label = f"{record.model.label}, run {record.index}"
            match event:
                case RunRegistered():
                    assert record.index == 0, f"promise 5: continuation {label} sent RunRegistered"
                    kind = "started"
                case RunReplaced(previous_run_id=previous):
                    assert record.index > 0, f"promise 5: first run {label} sent RunReplaced"
                    assert previous == record.parent_run_id, f"promise 5: {event} ({label})"
                    kind = "continued"
                case RunUnregistered(status=status):
                    turn = record.model.turn
                    assert turn is not None and status == turn.status.value, (
                        f"promise 5: {event} but {turn!r}"
                    )
                    kind = "completed"
            seen = self._lifecycle_seen.get(event.run_id, "")
            assert kind not in seen, f"promise 5: {event} twice"
            self._lifecycle_seen[event.run_id] = seen + kind

    @invariant()
    def background_turns_never_steal_focus(self) -> None:
        """Promise 6."""

        def check() -> None:
            engine = self._engine()
            expected = None if self._focus is None else ThreadKey(self._focus)
            assert engine.focused == expected, (
                f"promise 6: focus is {engine.focused}, only the focus rule set {expected}"
            )
            self._check_focused_notifications()
            self._check_thread_views()

        self._check(check)

    def _turn_of_run(self, run_id: str | None) -> int | None:
        record = self._records.get(run_id or "")
        return None if record is None else record.model.ordinal

    def _check_thread_views(self) -> None:
        """Per thread, what a subscriber sees follows the run lifecycle: turns in order,
        never a running state after a final one of the same turn."""
        for notification in drain(self._all_sub):
            key = notification.key.thread_id
            view = self._views.setdefault(key, [])
            if isinstance(notification, EventReceived):
                continue
            if isinstance(notification, ToolCallFinished):
                owner = next(
                    (r for r in self._records.values() if notification.call_id in r.calls), None
                )
                assert owner is not None, (
                    f"promises 1/3/7: {notification.call_id} ran, but it had to be abandoned, "
                    "or came past the depth bound or after the run's end"
                )
                current = max((o for o, _ in view if o is not None), default=0)
                assert owner.model.ordinal >= current, (
                    f"promise 5: {notification} of {owner.model.label} after a newer turn"
                )
                continue
            assert isinstance(notification, StateChanged)
            snapshot = notification.snapshot
            ordinal = self._turn_of_run(snapshot.run_id)
            if snapshot.status is RunStatus.idle:
                ordinal = next(
                    m.ordinal
                    for m in self._models
                    if m.key == key and m.ordinal > max((o or 0 for o, _ in view), default=0)
                )
            if ordinal is not None:
                newest = max((o for o, _ in view if o is not None), default=0)
                assert ordinal >= newest, (
                    f"promise 6: {key} showed turn #{ordinal} ({snapshot.status}) after "
                    f"turn #{newest}: {view}"
                )
                previous = [s for o, s in view if o == ordinal]
                if previous and previous[-1].is_final:
                    assert snapshot.status == previous[-1], (
                        f"promise 6: turn #{ordinal} on {key} flashed {previous[-1]} then "
                        f"{snapshot.status}"
                    )
            view.append((ordinal, snapshot.status))

    @invariant()
    def continuations_carry_every_result(self) -> None:
        """Promise 2."""

        def check() -> None:
            inputs = self.agent.inputs
            for run_input in inputs[self._inputs_checked :]:
                self._check_continuation(run_input)
            self._inputs_checked = len(inputs)
            expected_once: dict[str, int] = {}
            for record in self._records.values():
                for call_id in record.calls:
                    expected_once[call_id] = 1
                for call_id in record.never_run:
                    assert call_id not in self._executed, (
                        f"promise 7: {record.model.label} executed {call_id}, which it "
                        "had to abandon or never process"
                    )
            for ticket, count in self._executed.items():
                assert ticket in expected_once, f"a call nobody asked for ran: {ticket}"
                assert count == 1, f"promise 2: {ticket} ran {count} times"
            for model in self._models:
                turn = model.turn
                assert turn is not None
                if turn.status is RunStatus.executing_tools:
                    waiting = [
                        c
                        for c in turn.tool_calls
                        if not c.status.is_final
                        and c.status is not ToolCallStatus.awaiting_approval
                        and c.id not in self._tool_holds
                    ]
                    assert not waiting, f"promise 2: {model.label} runs calls one by one: {waiting}"
                for approval in turn.approvals:
                    assert approval.id not in self._executed, (
                        f"tool policy: {model.label} ran {approval.id} before its approval"
                    )
            for call_id, approved in self._decisions.items():
                if not approved:
                    assert call_id not in self._executed, f"tool policy: denied {call_id} ran"

        self._check(check)

    def _check_continuation(self, run_input: RunAgentInput) -> None:
        parent = run_input.parent_run_id
        record = self._records[run_input.run_id]
        sent = run_input.resume
        if record.index == 0:
            expected = list(record.model.resume) if record.model.resume else msgspec.UNSET
            assert sent == expected, (
                f"{record.model.label}'s first run carried resume={sent}, not {expected}"
            )
        else:
            assert sent is msgspec.UNSET, (
                f"{record.model.label}'s continuation {record.index} repeats resume={sent}"
            )
        if not isinstance(parent, str):
            assert record.index == 0, f"{record.model.label}'s run {record.index} has no parent"
            return
        before = self._records.get(parent)
        assert before is not None and before.model is record.model, (
            f"promise 5: the continuation {run_input.run_id} names {parent}"
        )
        assert before.index == record.index - 1 and before.plan.kind is RunKind.tools
        results = {m.tool_call_id: m for m in run_input.messages if isinstance(m, ToolMessage)}
        for call_id, call in before.calls.items():
            message = results.get(call_id)
            assert message is not None, (
                f"promise 2: the continuation of {record.model.label} lacks the result of "
                f"{call_id} ({call.outcome})"
            )
            content = message.content
            assert isinstance(content, str), message
            problem = _outcome_problem(
                call, call_id, content, message.error, self._decisions.get(call_id)
            )
            assert problem is None, f"promise 2: {call_id} ({call.outcome}): {problem}"

    @invariant()
    def received_text_is_kept(self) -> None:
        """Promise 7: bad input is recorded; text already received is never lost."""

        def check() -> None:
            engine = self._engine()
            texts = {
                message.id: message.text
                for key in THREADS
                if (conversation := engine.conversation(key)) is not None
                for message in conversation.texts()
            }
            for record in self._records.values():
                label = f"{record.model.label}, run {record.index}"
                for message_id, expected, mark in record.texts:
                    if mark.reached:
                        assert texts.get(message_id) == expected, (
                            f"promise 7: {label} lost text {message_id!r}: "
                            f"{texts.get(message_id)!r} != {expected!r}"
                        )
                if record.late_text_id is not None:
                    assert record.late_text_id not in texts, (
                        f"{label}: an event after the run's end was processed"
                    )
                malformed = record.malformed_mark
                if malformed is not None and malformed.reached and record.expects_violation:
                    turn = record.model.turn
                    assert turn is not None and turn.violations, (
                        f"promise 7: {label} received {record.plan.malformed}, no violation"
                    )

        self._check(check)


def _outcome_problem(
    call: CallPlan, call_id: str, content: str, error: str | None, approved: bool | None = None
) -> str | None:
    match call.outcome:
        case CallOutcome.ok:
            ok = error is None and content == f"ok {call_id}"
        case CallOutcome.slow:
            ok = error is None and content == f"slow {call_id}"
        case CallOutcome.raises:
            ok = error is not None and f"boom {call_id}" in error
        case CallOutcome.timeout:
            ok = error is not None and "timed out" in error
        case CallOutcome.unknown:
            ok = error is not None and "Unknown tool" in error
        case CallOutcome.invalid:
            ok = error is not None and "Invalid arguments" in error
        case CallOutcome.raises_base:
            ok = error is not None and error.startswith(base_exception_of(call_id))
        case CallOutcome.stuck:
            # Past ToolOptions.max_threads stuck threads, a blocking call fails at once.
            ok = error is not None and ("timed out" in error or "no worker thread" in error)
        case CallOutcome.unsendable:
            ok = error is not None and "cannot be encoded as JSON" in error
        case CallOutcome.approval:
            # A continuation only starts once every call of the batch has an outcome.
            if approved is None:
                return "a continuation started before the call was approved or denied"
            if approved:
                ok = error is None and content == f"guarded {call_id}"
            else:
                ok = error == f"denied {call_id}"
        case CallOutcome.user:
            ok = True
        case CallOutcome.agent:
            ok = error is None and content == f"agent {call_id}"
    return None if ok else f"the model saw content={content!r} error={error!r}"
