"""toolrelay.verify and ``toolrelay verify``: the checks, the report, the exit codes."""

from __future__ import annotations

import dataclasses
import enum
import io
import logging
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import given, seed as hypothesis_seed, settings, strategies as st
from hypothesis.reporting import report
from statemachine import StateChart
from statemachine.states import States

from toolrelay import RunLifecycle
from toolrelay._machines import (
    RUN_MACHINE,
    TOOL_CALL_MACHINE,
    CompiledMachine,
    CompiledRunMachine,
    compile_machine,
)
from toolrelay.cli import ExitCode, main
from toolrelay.verify import CheckResult, VerifyReport, format_report, verify

STATEFUL = "toolrelay.testing.stateful"


# --- test doubles ---------------------------------------------------------------------


class Spot(enum.StrEnum):
    start = "start"
    middle = "middle"
    island = "island"
    done = "done"


class Move(enum.StrEnum):
    go = "go"
    finish = "finish"
    swim = "swim"


class Unreachable(StateChart[object]):
    """Strict, but ``island`` has no way in (the library's own check is turned off)."""

    allow_event_without_transition = False
    catch_errors_as_events = False
    validate_disconnected_states = False

    s = States.from_enum(Spot, initial=Spot.start, final=Spot.done, use_enum_instance=True)
    go = s.start.to(s.middle)
    finish = s.middle.to(s.done)
    swim = s.island.to(s.done)


class Lenient(StateChart[object]):
    """A sound graph, but python-statemachine's default: unknown events are ignored."""

    allow_event_without_transition = True

    s = States.from_enum(Spot, initial=Spot.start, final=Spot.done, use_enum_instance=True)
    go = s.start.to(s.middle)
    finish = s.middle.to(s.done)
    swim = s.island.to(s.done) | s.start.to(s.island)


class Detour(StateChart[object]):
    """Same states and events as ``Lenient`` but ``go`` leads elsewhere."""

    allow_event_without_transition = False

    s = States.from_enum(Spot, initial=Spot.start, final=Spot.done, use_enum_instance=True)
    go = s.start.to(s.island)
    finish = s.middle.to(s.done)
    swim = s.island.to(s.done) | s.start.to(s.middle)


def _by_name(results: tuple[CheckResult, ...], *words: str) -> CheckResult:
    matches = [r for r in results if all(word in r.name for word in words)]
    assert len(matches) == 1, [r.name for r in results]
    return matches[0]


@pytest.fixture
def stub_suite(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[Any], list[dict[str, Any]]]]:
    """Install a stand-in ``toolrelay.testing.stateful`` whose ``run_promises`` is given."""

    def install(run_promises: Any) -> list[dict[str, Any]]:
        calls: list[dict[str, Any]] = []

        def recording(**kwargs: Any) -> None:
            calls.append(kwargs)
            run_promises(**kwargs)

        module = types.ModuleType(STATEFUL)
        module.__dict__["run_promises"] = recording
        monkeypatch.setitem(sys.modules, STATEFUL, module)
        return calls

    yield install


def _passes(**kwargs: Any) -> None:
    return None


def _finds_a_counterexample(**kwargs: Any) -> None:
    """A real, tiny Hypothesis run that fails, with the blob printed."""

    @hypothesis_seed(kwargs["seed"] or 0)
    @settings(max_examples=kwargs["examples"], print_blob=True, database=None, deadline=None)
    @given(st.integers(min_value=0))
    def promise_never_exceeds_ten(depth: int) -> None:
        if depth > 10:
            report("a line through Hypothesis's reporter")
        assert depth <= 10, f"depth {depth} passed the bound"

    promise_never_exceeds_ten()


# --- the machine checks -----------------------------------------------------------------


def test_the_real_machines_pass_every_machine_check() -> None:
    result = verify(properties=False)
    assert result.ok
    assert len(result.results) == 4
    for machine in ("RunLifecycle", "ToolCallLifecycle"):
        assert _by_name(result.results, machine, "reachable").ok
        assert _by_name(result.results, machine, "no illegal pair silently accepted").ok
    assert all(r.detail == "" for r in result.results)


def test_an_unreachable_state_fails_the_graph_check() -> None:
    compiled = compile_machine(Unreachable, Spot, Move)
    result = verify(machines=[compiled], properties=False)
    assert not result.ok
    graph = _by_name(result.results, "every state reachable")
    assert not graph.ok
    assert graph.detail == "unreachable from the initial state: island"
    # The rest of this machine is sound: only the graph check fails.
    assert [r.name for r in result.failures] == [graph.name]


def test_a_machine_that_ignores_events_fails_the_illegal_pair_check() -> None:
    compiled = compile_machine(Lenient, Spot, Move)
    pairs = _by_name(verify(machines=[compiled], properties=False).results, "illegal pair")
    assert not pairs.ok
    assert "start --finish-->: silently accepted (did nothing); the table refuses it" in (
        pairs.detail
    )
    assert "(4 states x 3 events" in pairs.name


def test_a_table_that_differs_from_its_class_fails_the_table_check() -> None:
    compiled = compile_machine(Lenient, Spot, Move)
    object.__setattr__(compiled, "machine", Detour)  # the table no longer matches its class
    result = verify(machines=[compiled], properties=False)
    table = _by_name(result.results, "compiled table equals the declared machine")
    assert not table.ok
    assert "start --go-->: moved to island; the table says middle" in table.detail


def test_a_run_table_that_miscounts_the_depth_fails_the_table_check() -> None:
    compiled = CompiledRunMachine(RunLifecycle)
    object.__setattr__(compiled, "counting", frozenset())
    table = _by_name(verify(machines=[compiled], properties=False).results, "compiled table")
    assert not table.ok
    assert table.detail == (
        "executing_tools --continue_run-->: the declared machine counts depth +1, "
        "the table +0 (to running)"
    )


def test_a_check_that_raises_is_a_failure_not_a_crash() -> None:
    compiled = compile_machine(Unreachable, Spot, Move)
    object.__setattr__(compiled, "machine", None)
    result = verify(machines=[compiled], properties=False)
    assert not any(r.ok for r in result.results)
    assert all("the check raised" in r.detail for r in result.results)


def test_default_machines_are_the_compiled_run_and_tool_call_tables(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    stub_suite(_passes)
    explicit = verify(machines=[RUN_MACHINE, TOOL_CALL_MACHINE], examples=1, seed=5)
    assert verify(examples=1, seed=5) == explicit


# --- the property suite ------------------------------------------------------------------


def test_the_suite_gets_the_arguments(stub_suite: Callable[[Any], list[dict[str, Any]]]) -> None:
    calls = stub_suite(_passes)
    result = verify(examples=7, seed=3, backend="trio", tools="the tools")
    assert calls == [{"examples": 7, "seed": 3, "backend": "trio", "tools": "the tools"}]
    suite = result.results[-1]
    assert suite.ok
    assert suite.name == "stateful property suite, promises 1-7 (7 examples, seed 3, trio)"
    assert result.ok


def test_a_counterexample_fails_with_the_exception_the_reporter_output_and_the_blob(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    stub_suite(_finds_a_counterexample)
    result = verify(examples=50, seed=1)
    assert not result.ok
    suite = result.results[-1]
    assert not suite.ok
    assert "AssertionError: depth" in suite.detail
    assert "passed the bound" in suite.detail
    assert "promise_never_exceeds_ten(" in suite.detail  # the falsifying example
    assert "depth=11" in suite.detail
    assert "@reproduce_failure(" in suite.detail
    assert "a line through Hypothesis's reporter" in suite.detail
    text = format_report(result)
    assert f"FAIL  {suite.name}" in text
    assert "      You can reproduce this test case" in text or "      @reproduce" in text


def test_an_exception_group_is_described_member_by_member(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    def raises_a_group(**kwargs: Any) -> None:
        first = AssertionError("promise 1 broken")
        first.add_note("@reproduce_failure('x', b'AAAA')")
        raise ExceptionGroup("two bugs", [first, ValueError("promise 5 broken")])

    stub_suite(raises_a_group)
    detail = verify(examples=1).results[-1].detail
    assert detail.splitlines() == [
        "ExceptionGroup: two bugs (2 sub-exceptions)",
        "+-- 1:",
        "    AssertionError: promise 1 broken",
        "    @reproduce_failure('x', b'AAAA')",
        "+-- 2:",
        "    ValueError: promise 5 broken",
    ]


def test_toolrelay_logs_of_the_suite_are_kept_out_of_the_caller_logs(
    stub_suite: Callable[[Any], list[dict[str, Any]]], caplog: pytest.LogCaptureFixture
) -> None:
    def logs_then_fails(**kwargs: Any) -> None:
        logging.getLogger("toolrelay.runtime").error("error disposing run r1 on t1")
        logging.getLogger("toolrelay.core").info("too quiet to keep")
        raise AssertionError("promise 5 broken")

    stub_suite(logs_then_fails)
    with caplog.at_level(logging.INFO):
        detail = verify(examples=1).results[-1].detail
    assert "toolrelay logged (the last 1 lines):" in detail
    assert "ERROR toolrelay.runtime: error disposing run r1 on t1" in detail
    assert "too quiet" not in detail
    assert caplog.records == []
    assert logging.getLogger("toolrelay").propagate
    assert logging.getLogger("toolrelay").handlers == []


def test_a_missing_suite_is_a_failed_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, STATEFUL, None)
    suite = verify(examples=1).results[-1]
    assert not suite.ok
    assert "toolrelay.testing.stateful.run_promises is not available" in suite.detail
    module = types.ModuleType(STATEFUL)
    monkeypatch.setitem(sys.modules, STATEFUL, module)
    assert "AttributeError" in verify(examples=1).results[-1].detail


def test_the_real_property_suite_passes_with_five_examples() -> None:
    result = verify(examples=5, seed=0)
    assert result.ok, format_report(result)


# --- arguments and the report ----------------------------------------------------------------


def test_bad_arguments_are_value_errors() -> None:
    with pytest.raises(ValueError, match="examples"):
        verify(examples=0)
    with pytest.raises(ValueError, match="backend"):
        verify(backend="curio")


def test_format_report_prints_pass_fail_details_and_a_summary() -> None:
    report_ = VerifyReport(
        (
            CheckResult("first check", True),
            CheckResult("second check", False, "line one\n\nline three"),
        )
    )
    assert format_report(report_) == (
        "PASS  first check\n"
        "FAIL  second check\n"
        "      line one\n"
        "\n"
        "      line three\n"
        "1 passed, 1 failed: verification FAILED\n"
    )
    clean = VerifyReport((CheckResult("only", True),))
    assert format_report(clean) == "PASS  only\n1 passed, 0 failed: all checks passed\n"


def test_reports_are_frozen_and_compare_by_value() -> None:
    report_ = VerifyReport((CheckResult("a", True),))
    with pytest.raises(dataclasses.FrozenInstanceError):
        report_.results = ()  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        report_.results[0].ok = False  # type: ignore[misc]
    assert report_ == VerifyReport((CheckResult("a", True, ""),))
    assert report_.ok and report_.failures == ()
    assert not VerifyReport((CheckResult("a", True), CheckResult("b", False))).ok


# --- the command -----------------------------------------------------------------------------


def _run(*argv: str) -> tuple[int, str, str]:
    stdout, stderr = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=stdout, stderr=stderr)
    return code, stdout.getvalue(), stderr.getvalue()


def test_verify_command_passes_with_exit_0(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    calls = stub_suite(_passes)
    code, out, err = _run("verify", "--examples", "12", "--seed", "9", "--backend", "trio")
    assert (code, err) == (ExitCode.OK, "")
    assert calls == [{"examples": 12, "seed": 9, "backend": "trio", "tools": None}]
    lines = out.splitlines()
    assert len(lines) == 6
    assert all(line.startswith("PASS  ") for line in lines[:5])
    assert lines[-1] == "5 passed, 0 failed: all checks passed"


def test_verify_command_defaults(stub_suite: Callable[[Any], list[dict[str, Any]]]) -> None:
    calls = stub_suite(_passes)
    code, out, _ = _run("verify")
    assert code == ExitCode.OK
    (call,) = calls
    drawn = call.pop("seed")
    assert isinstance(drawn, int)
    assert call == {"examples": 100, "backend": "asyncio", "tools": None}
    assert f"(100 examples, seed {drawn}, asyncio)" in out


def test_a_drawn_seed_is_reported_and_replays_the_same_run(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    stub_suite(_finds_a_counterexample)
    first = verify(examples=50)
    assert first.seed is not None and not first.ok
    replayed = verify(examples=50, seed=first.seed)
    assert replayed.seed == first.seed
    assert replayed.results[-1].detail == first.results[-1].detail
    assert f"replay the suite's run with --seed {first.seed}" in format_report(first)
    assert verify(examples=1, properties=False).seed is None


def test_each_check_is_reported_the_moment_it_finishes(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    seen: list[tuple[str, int]] = []

    def suite(**kwargs: Any) -> None:
        seen.append(("suite starts", len(reported)))

    reported: list[CheckResult] = []
    stub_suite(suite)
    report_ = verify(examples=1, seed=4, on_result=reported.append)
    assert seen == [("suite starts", 4)]  # the four machine checks were out before it ran
    assert tuple(reported) == report_.results


def test_verify_command_writes_each_line_before_the_suite_runs(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    stdout = io.StringIO()

    def suite(**kwargs: Any) -> None:
        printed = stdout.getvalue().splitlines()
        assert len(printed) == 4 and all(line.startswith("PASS  ") for line in printed)

    stub_suite(suite)
    assert main(["verify", "--seed", "1"], stdout=stdout, stderr=io.StringIO()) == ExitCode.OK
    assert len(stdout.getvalue().splitlines()) == 6


def test_verify_command_fails_with_exit_5_and_prints_the_blob(
    stub_suite: Callable[[Any], list[dict[str, Any]]],
) -> None:
    stub_suite(_finds_a_counterexample)
    code, out, err = _run("verify", "--examples", "50", "--seed", "2")
    assert code == ExitCode.CHECK_FAILED
    assert code == 5
    assert "FAIL  stateful property suite" in out
    assert "@reproduce_failure(" in out
    assert out.splitlines()[-2:] == [
        "4 passed, 1 failed: verification FAILED",
        "replay the suite's run with --seed 2",
    ]
    assert err == "toolrelay verify: 1 check(s) failed (details above)\n"


@pytest.mark.parametrize(
    "argv",
    [["--examples", "0"], ["--examples", "many"], ["--backend", "curio"], ["--seed", "x"]],
)
def test_verify_command_usage_errors(argv: list[str]) -> None:
    assert _run("verify", *argv)[0] == ExitCode.USAGE


def test_compiled_machines_are_what_verify_reads() -> None:
    # A guard for the test doubles above: they compile, so failures come from the checks.
    for machine in (Unreachable, Lenient, Detour):
        assert isinstance(compile_machine(machine, Spot, Move), CompiledMachine)


def test_the_public_surface_is_a_sorted_tuple() -> None:
    from toolrelay import verify as module

    assert module.__all__ == (
        "CheckResult",
        "VerifyReport",
        "format_report",
        "format_result",
        "format_summary",
        "verify",
    )
