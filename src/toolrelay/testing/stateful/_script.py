"""The agent's side of the machine: what the scripted agent streams for each run,
drawn from its turn's plan, and the records the invariants later check it against."""

from __future__ import annotations

import itertools
from typing import Any, ClassVar

from toolrelay._errors import StreamDroppedError
from toolrelay.backends._base import ThreadKey
from toolrelay.protocol import (
    Event,
    Interrupt,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    UnknownEvent,
    UserMessage,
)
from toolrelay.testing._builders import run_cancelled, run_interrupted, text, tool_call
from toolrelay.testing._scripted import Hang, Raise, Step
from toolrelay.testing.stateful._doubles import Hold, Mark, RunRecord, TurnModel, gate_of
from toolrelay.testing.stateful._plans import (
    VIOLATING,
    CallOutcome,
    CallPlan,
    Malformation,
    RunKind,
)

__all__ = ("AgentScripts",)


#: The probe tool each call outcome calls (with its ticket as the only argument).
_PROBE_TOOLS: dict[CallOutcome, str] = {
    CallOutcome.ok: "probe_ok",
    CallOutcome.raises: "probe_raise",
    CallOutcome.slow: "probe_slow",
    CallOutcome.timeout: "probe_timeout",
    CallOutcome.unknown: "probe_missing",
    CallOutcome.raises_base: "probe_exit",
    CallOutcome.stuck: "probe_stuck",
    CallOutcome.unsendable: "probe_unsendable",
    CallOutcome.approval: "probe_guarded",
    CallOutcome.agent: "probe_ok",
}


class AgentScripts:
    """The scripted agent's answers, a part of
    :class:`~toolrelay.testing.stateful._host.MachineBase` (which sets the state below)."""

    max_depth: ClassVar[int]
    max_repeated_calls: ClassVar[int | None]
    _models: list[TurnModel]
    _latest: dict[str, TurnModel]
    _records: dict[str, RunRecord]
    _tool_holds: dict[str, Hold]
    _stream_holds: dict[str, Hold]
    _problems: list[str]

    def _allocation_fails(self, key: ThreadKey) -> bool:
        model = self._latest.get(key.thread_id)
        if model is None:
            return False
        index = model.allocations
        model.allocations += 1
        return model.plan.run_at(index).kind is RunKind.alloc_fails

    def _dispose_raises(self, key: ThreadKey) -> bool:
        model = self._latest.get(key.thread_id)
        return model is not None and model.plan.dispose_raises

    def _respond(self, key: ThreadKey, run_input: RunAgentInput) -> list[Step]:
        try:
            return self._script(key, run_input)
        except Exception as exc:  # a bug of the machine itself: make it loud
            self._problems.append(f"the machine's responder failed: {exc!r}")
            raise

    def _model_of(self, run_input: RunAgentInput) -> TurnModel:
        """The turn a run belongs to: a continuation's by its parent run; a first run's
        by its resume entries (their payload names the turn) or its last user message."""
        parent = run_input.parent_run_id
        if isinstance(parent, str):
            return self._records[parent].model
        resume = run_input.resume
        if isinstance(resume, list) and resume:
            return self._models[int(resume[0].payload["turn"]) - 1]
        users = [m for m in run_input.messages if isinstance(m, UserMessage)]
        return next(m for m in self._models if users and f"user-{m.ordinal}" == users[-1].id)

    def _script(self, key: ThreadKey, run_input: RunAgentInput) -> list[Step]:
        model = self._model_of(run_input)
        index = model.runs_started
        model.runs_started += 1
        plan = model.plan.run_at(index)
        parent = run_input.parent_run_id
        record = RunRecord(
            model,
            index,
            run_input.run_id,
            parent if isinstance(parent, str) else None,
            plan,
        )
        model.runs.append(record)
        self._records[run_input.run_id] = record
        prefix = f"T{model.ordinal}R{index}"
        thread_id, run_id = run_input.thread_id, run_input.run_id
        # Our own RUN_STARTED, so that the envelope never adds one (a duplicate below
        # is then always a second one).
        steps: list[Step] = [RunStartedEvent(thread_id=thread_id, run_id=run_id)]

        text_id: str | None = None
        if plan.text is not None:
            text_id = f"{prefix}M"
            mark = Mark()
            text_events = text(plan.text, id=text_id, chunk=plan.text_chunk)
            if plan.cut and not plan.calls:
                text_events.pop()  # the stream breaks mid-message: no TEXT_MESSAGE_END
            steps.extend(text_events)
            steps.append(gate_of(mark))
            record.texts.append((text_id, plan.text, mark))
        if plan.gated:
            hold = record.stream_hold = Hold(f"{prefix}G")
            self._stream_holds[hold.name] = hold
            steps.append(gate_of(hold))

        executes = (
            plan.kind is RunKind.tools
            and plan.asks_client
            and index < self.max_depth
            and index != model.plan.no_progress_at(self.max_depth, self.max_repeated_calls)
        )
        call_ids: list[str] = []
        per_call: list[list[Event]] = []
        for number, call in enumerate(plan.calls):
            call_id = f"{prefix}C{number}"
            call_ids.append(call_id)
            name, arguments = self._call_target(call, call_id)
            per_call.append(
                tool_call(name, arguments, id=call_id, parent_message_id=text_id, chunk=call.chunk)
            )
            if call.outcome is CallOutcome.agent:
                # Never run here; when the run continues, its result goes back with it.
                record.never_run.add(call_id)
                if executes:
                    record.calls[call_id] = call
            elif executes:
                record.calls[call_id] = call
                if call.outcome is CallOutcome.slow:
                    self._tool_holds[call_id] = Hold(call_id)
            else:
                record.never_run.add(call_id)
        if plan.interleaved:
            starts = [events[0] for events in per_call]
            ends = [events[-1] for events in per_call]
            middles = [events[1:-1] for events in per_call]
            interleaved = [e for group in itertools.zip_longest(*middles) for e in group if e]
            call_events: list[Event] = [*starts, *interleaved, *ends]
        else:
            call_events = [e for events in per_call for e in events]
        cut_call: str | None = None
        last = call_events[-1] if call_events else None
        if plan.cut and isinstance(last, ToolCallEndEvent):
            call_events.pop()
            cut_call = last.tool_call_id
        steps.extend(call_events)
        # The agent's own calls: their results, once their calls have ended.
        steps.extend(
            ToolCallResultEvent(
                message_id=f"{call_id}R", tool_call_id=call_id, content=f"agent {call_id}"
            )
            for call, call_id in zip(plan.calls, call_ids, strict=True)
            if call.outcome is CallOutcome.agent and call_id != cut_call
        )

        if plan.malformed:
            steps.extend(self._malformed(record, prefix, call_ids, thread_id, run_id))
            record.malformed_mark = Mark()
            steps.append(gate_of(record.malformed_mark))
            violating = VIOLATING.intersection(plan.malformed)
            if cut_call is not None and cut_call == call_ids[0]:
                # The cut took the first call's END away, so the "duplicate" END sent
                # for it is its only one: nothing wrong with it.
                violating -= {Malformation.duplicate_end}
            record.expects_violation = bool(violating)

        late: list[Step] = []
        if Malformation.events_after_finish in plan.malformed:
            record.late_text_id = f"{prefix}L"
            late_call = f"{prefix}LC"
            record.never_run.add(late_call)
            late = [
                *text("too late", id=record.late_text_id),
                *tool_call("probe_ok", {"ticket": late_call}, id=late_call),
            ]
        match plan.kind:
            case RunKind.answer | RunKind.tools:
                steps.append(RunFinishedEvent(thread_id=thread_id, run_id=run_id))
                steps.extend(late)
            case RunKind.interrupts:
                record.interrupts = tuple(
                    Interrupt(
                        id=f"{prefix}I{number}",
                        reason="probe_approval",
                        message=f"May I? ({prefix}, {number})",
                        tool_call_id=call_ids[0] if call_ids and number == 0 else None,
                    )
                    for number in range(plan.asks)
                )
                steps.append(run_interrupted(thread_id, run_id, *record.interrupts))
                steps.extend(late)
            case RunKind.agent_cancels:
                steps.append(run_cancelled(thread_id, run_id))
                steps.extend(late)
            case RunKind.run_error:
                steps.append(RunErrorEvent(message="scripted run error", code="scripted"))
                steps.extend(late)
            case RunKind.breaks:
                steps.append(Raise(RuntimeError("the scripted stream broke")))
            case RunKind.drops:
                steps.append(Raise(StreamDroppedError("the scripted connection dropped")))
            case RunKind.hangs:
                record.hang_mark = Mark()
                steps.extend([gate_of(record.hang_mark), Hang()])
            case RunKind.alloc_fails:  # pragma: no cover - allocation failed before
                self._problems.append(f"{model.label}: a run whose allocation fails streamed")
        return steps

    def _call_target(self, call: CallPlan, call_id: str) -> tuple[str, dict[str, Any]]:
        match call.outcome:
            case CallOutcome.user:
                assert call.tool is not None
                return call.tool, dict(call.arguments or {})
            case CallOutcome.invalid:
                return "probe_typed", {"ticket": call_id, "n": "not a number"}
            case outcome:
                return _PROBE_TOOLS[outcome], {"ticket": call_id}

    def _malformed(
        self,
        record: RunRecord,
        prefix: str,
        call_ids: list[str],
        thread_id: str,
        run_id: str,
    ) -> list[Step]:
        steps: list[Step] = []
        for number, malformation in enumerate(record.plan.malformed):
            fresh = f"{prefix}X{number}"
            match malformation:
                case Malformation.args_for_unknown_call:
                    steps.append(ToolCallArgsEvent(tool_call_id=fresh, delta="{}"))
                case Malformation.duplicate_start:
                    call = record.plan.calls[0]
                    name, _ = self._call_target(call, call_ids[0])
                    steps.append(ToolCallStartEvent(tool_call_id=call_ids[0], tool_call_name=name))
                case Malformation.duplicate_end:
                    steps.append(ToolCallEndEvent(tool_call_id=call_ids[0]))
                case Malformation.content_without_start:
                    mark = Mark()
                    steps.append(TextMessageContentEvent(message_id=fresh, delta="orphan"))
                    steps.append(gate_of(mark))
                    record.texts.append((fresh, "orphan", mark))
                case Malformation.end_for_unknown_message:
                    steps.append(TextMessageEndEvent(message_id=fresh))
                case Malformation.unknown_event_type:
                    raw = b'{"type":"X_VENDOR_EVENT","value":1}'
                    steps.append(UnknownEvent(type="X_VENDOR_EVENT", raw=raw))
                case Malformation.duplicate_run_started:
                    steps.append(RunStartedEvent(thread_id=thread_id, run_id=run_id))
                case Malformation.result_for_unknown_call:
                    steps.append(
                        ToolCallResultEvent(message_id=f"{fresh}R", tool_call_id=fresh, content="?")
                    )
                case Malformation.call_without_end:
                    record.never_run.add(fresh)
                    steps.extend(tool_call("probe_ok", {"ticket": fresh}, id=fresh)[:-1])
                case Malformation.events_after_finish:
                    pass  # added after the run's last event
        return steps
