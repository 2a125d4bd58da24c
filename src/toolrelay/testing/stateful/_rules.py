"""The rules: what users do to an engine."""

from __future__ import annotations

import hypothesis
from hypothesis import strategies as st
from hypothesis.stateful import (
    initialize,
    precondition,
    rule,
)

from toolrelay._errors import ClosedError, ResumeError
from toolrelay._machines import RunStatus
from toolrelay._reasons import ReasonKind
from toolrelay._runtime import (
    StateChanged,
    Turn,
)
from toolrelay.protocol import (
    Interrupt,
    ResumeEntry,
    UserMessage,
)
from toolrelay.testing.stateful._doubles import TurnModel, drain
from toolrelay.testing.stateful._host import MachineBase
from toolrelay.testing.stateful._plans import THREADS, TurnPlan

__all__ = ("Rules",)


class Rules(MachineBase):
    """The user's actions (see the package docstring, "Rules")."""

    # -- rules ----------------------------------------------------------------------------

    @initialize(data=st.data())
    def first_turns(self, data: st.DataObject) -> None:
        """Every program starts with a turn on ``t0`` and one on ``t1``."""
        self._send("t0", data.draw(self._plans, label="plan"))
        self._send("t1", data.draw(self._plans, label="plan"))

    # Rule order matters to Hypothesis (it favours rules with fewer arguments, then by
    # name): ``send`` is the one-argument rule that is always enabled before close.

    @precondition(lambda self: not self._closed)
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        """The user sends a message on a thread; a live turn there is superseded."""
        thread = data.draw(st.sampled_from(THREADS), label="thread")
        self._send(thread, data.draw(self._plans, label="plan"))

    @precondition(lambda self: not self._closed and bool(self._live))
    @rule(data=st.data())
    def resend(self, data: st.DataObject) -> None:
        """The user sends again on a thread whose turn is live (promise 5: supersede)."""
        thread = data.draw(st.sampled_from(self._live), label="thread")
        self._send(thread, data.draw(self._plans, label="plan"))

    def _send(
        self,
        thread: str,
        plan: TurnPlan,
        *,
        resume: tuple[ResumeEntry, ...] = (),
        message: bool = True,
    ) -> None:
        ordinal = len(self._models) + 1
        model = TurnModel(
            ordinal, thread, plan, plan.expected_end(self.max_depth, self.max_repeated_calls)
        )
        model.resume = resume

        async def act() -> None:
            engine = self._engine()
            previous = engine.turn(thread)
            was_live = previous is not None and not previous.finished
            self._models.append(model)
            self._latest[thread] = model
            text = UserMessage(id=f"user-{ordinal}", content=f"message {ordinal}")
            model.turn = engine.start_turn(thread, text if message else None, resume=resume)
            if was_live:
                assert previous is not None
                old = next(m for m in self._models if m.turn is previous)
                old.external = ReasonKind.SUPERSEDED
                assert previous.status is RunStatus.superseded, (
                    f"promise 5: re-sending on {thread} left {old.label} {previous.status}"
                )
            assert self._group is not None
            self._group.start_soon(self._watch, model)

        self._call(act)

    @precondition(lambda self: not self._closed and bool(self._interrupted))
    @rule(data=st.data())
    def answer(self, data: st.DataObject) -> None:
        """The user answers the interrupts of a thread whose turn ended ``interrupted``:
        one resume entry per interrupt, in a new turn (with or without a message). A
        wrong answer (an unknown id, one answered twice, one left out) is refused with
        ``ResumeError`` before anything changes."""
        thread = data.draw(st.sampled_from(self._interrupted), label="thread")
        read: list[tuple[Turn, tuple[Interrupt, ...] | None]] = []

        def read_thread() -> None:
            engine = self._engine()
            turn = engine.turn(thread)
            assert turn is not None and turn.status is RunStatus.interrupted, turn
            read.append((turn, engine.open_interrupts(thread)))

        self._check(read_thread)
        [(turn, open_interrupts)] = read
        assert open_interrupts == turn.interrupts, (open_interrupts, turn.interrupts)
        ordinal = len(self._models) + 1
        entries = [
            ResumeEntry(
                interrupt_id=interrupt.id,
                status=data.draw(st.sampled_from(["resolved", "cancelled"]), label="status"),
                payload={"turn": ordinal},
            )
            for interrupt in turn.interrupts
        ]
        mistakes = ["unknown", "twice"] + (["left_out"] if len(entries) > 1 else [])
        mistake = data.draw(st.none() | st.sampled_from(mistakes), label="mistake")
        hypothesis.event("answer", mistake or "resumed")  # for --hypothesis-show-statistics
        if mistake is None:
            self._send(
                thread,
                data.draw(self._plans, label="plan"),
                resume=tuple(entries),
                message=data.draw(st.booleans(), label="with a message"),
            )
            return
        if mistake == "unknown":
            entries.append(ResumeEntry(interrupt_id="no-such-interrupt", status="resolved"))
        elif mistake == "twice":
            entries.append(entries[0])
        else:
            entries.pop()

        async def act() -> None:
            engine = self._engine()
            models = len(self._models)
            try:
                engine.start_turn(thread, resume=entries)
            except ResumeError as error:
                problem = {
                    "unknown": error.unknown,
                    "twice": error.duplicated,
                    "left_out": error.unanswered,
                }[mistake]
                assert problem, f"{mistake}: {error}"
            else:
                raise AssertionError(f"a resume with a {mistake} entry was accepted")
            assert engine.turn(thread) is turn, "a refused resume changed the thread's turn"
            assert len(self._models) == models

        self._call(act)

    @rule(data=st.data(), message=st.sampled_from(["stop", "cancelled by the user"]))
    def cancel(self, data: st.DataObject, message: str) -> None:
        """The user cancels a thread's turn, live (streaming, parked on a gate, executing
        tools) or not (promise 4: a live one ends ``cancelled`` at once, with the
        user's message; ``cancel`` says whether it was live)."""
        # Live threads first: Hypothesis favours the first choices.
        thread = data.draw(st.sampled_from((*self._live, *THREADS)), label="thread")

        async def act() -> None:
            engine = self._engine()
            turn = engine.turn(thread)
            live = turn is not None and not turn.finished
            cancelled = engine.cancel(thread, message)
            assert cancelled == live, f"cancel({thread}) returned {cancelled}, live={live}"
            if cancelled:
                assert turn is not None
                model = self._latest[thread]
                model.external = ReasonKind.CANCELLED
                assert turn.status is RunStatus.cancelled, (
                    f"promise 4: {model.label} is {turn.status} right after cancel()"
                )
                assert turn.reason is not None and turn.reason.message == message, turn.reason

        self._call(act)

    @rule(thread=st.none() | st.sampled_from(THREADS), fresh_view=st.booleans())
    def focus(self, thread: str | None, fresh_view: bool) -> None:
        """The UI shows ``thread`` (or nothing). With ``fresh_view``, a view subscribed
        just before sees the thread's current state at once (promise 6: background
        turns are visible when focused)."""

        async def act() -> None:
            self._check_focused_notifications()
            engine = self._engine()
            view = engine.subscribe(focused_only=True) if fresh_view else None
            snapshot = engine.focus(thread)
            self._focus = thread
            state = None if thread is None else engine.state(thread)
            assert snapshot == state, (
                f"promise 6: focus({thread}) returned {snapshot}, the thread's state is {state}"
            )
            if view is not None:
                seen = drain(view)
                await view.aclose()
                expected = [] if state is None or self._closed else [state]
                shown = [n.snapshot for n in seen if isinstance(n, StateChanged)]
                assert shown == expected, f"promise 6: focusing {thread} showed {shown}"

        self._call(act)

    @precondition(lambda self: bool(self._held))
    @rule(data=st.data())
    def release_one(self, data: st.DataObject) -> None:
        """Open one gate a stream or a slow tool waits on."""
        name = data.draw(st.sampled_from(self._held), label="gate")

        async def act() -> None:
            hold = self._stream_holds.get(name) or self._tool_holds[name]
            hold.set()

        self._call(act)

    @precondition(lambda self: bool(self._awaiting))
    @rule(data=st.data(), approve=st.booleans())
    def decide(self, data: st.DataObject, approve: bool) -> None:
        """Approve or deny one call that awaits approval (a tool policy)."""
        thread, call_id = data.draw(st.sampled_from(self._awaiting), label="call")

        async def act() -> None:
            turn = self._engine().turn(thread)
            assert turn is not None
            if approve:
                turn.approve(call_id)
            else:
                turn.deny(call_id, f"denied {call_id}")
            self._decisions[call_id] = approve
            assert call_id not in {a.id for a in turn.approvals}

        self._call(act)

    @precondition(lambda self: bool(self._held))
    @rule()
    def release_all(self) -> None:
        """Open every gate."""

        async def act() -> None:
            for hold in (*self._stream_holds.values(), *self._tool_holds.values()):
                hold.set()

        self._call(act)

    @precondition(lambda self: not self._closed and len(self._models) >= 4)
    @rule()
    def close(self) -> None:
        """Close the engine: every live turn ends ``cancelled`` (reason ``closed``)."""

        async def act() -> None:
            for model in self._models:
                assert model.turn is not None
                if not model.turn.finished:
                    model.external = ReasonKind.CLOSED
            await self._engine().aclose()
            self._closed = True
            for model in self._models:
                assert model.turn is not None
                assert model.turn.finished, f"promise 1: {model.label} live after aclose()"

        self._call(act)

    @precondition(lambda self: self._closed)
    @rule(thread=st.sampled_from(THREADS))
    def send_after_close(self, thread: str) -> None:
        """Sending on a closed engine is a typed error that changes nothing."""

        async def act() -> None:
            try:
                self._engine().start_turn(thread, "too late")
            except ClosedError:
                return
            raise AssertionError("start_turn on a closed engine did not raise ClosedError")

        self._call(act)
