"""ToolCallLifecycle beyond what both machines share (tests/machines/test_lifecycles.py):
its paths, and which calls are open."""

from __future__ import annotations

import pytest

from toolrelay import ToolCallLifecycle, ToolCallStatus as S
from toolrelay._machines import TOOL_CALL_MACHINE, ToolCallEvent as E


@pytest.mark.parametrize(
    ("events", "final"),
    [
        ([E.finish_args, E.execute, E.succeed], S.completed),
        ([E.finish_args, E.execute, E.fail], S.failed),
        ([E.receive_result], S.completed),
        ([E.finish_args, E.receive_result], S.completed),
        ([E.abandon], S.failed),
        ([E.finish_args, E.abandon], S.failed),
        ([E.finish_args, E.execute, E.abandon], S.failed),
        ([E.finish_args, E.request_approval, E.approve, E.succeed], S.completed),
        ([E.finish_args, E.request_approval, E.deny], S.failed),
        ([E.finish_args, E.request_approval, E.abandon], S.failed),
    ],
)
def test_happy_paths_end_final_in_machine_and_cursor(events: list[E], final: S) -> None:
    machine = ToolCallLifecycle()
    cursor = TOOL_CALL_MACHINE.cursor()
    for event in events:
        machine.send(event)
        cursor.send(event)
        assert cursor.state is machine.current_state_value
    assert cursor.state is final
    assert machine.is_terminated


def test_every_open_call_can_be_abandoned() -> None:
    # Promise 1: a broken run leaves no call open.
    assert {s for s in S if s.is_open} == {s for s in S if TOOL_CALL_MACHINE.can(s, E.abandon)}


def test_open_is_every_status_that_is_not_final() -> None:
    assert {s for s in S if s.is_open} == {
        S.streaming,
        S.pending,
        S.awaiting_approval,
        S.executing,
    }
    assert all(s.is_open is not s.is_final for s in S)
