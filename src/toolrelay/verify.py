"""Verification: toolrelay checks its own promises, on demand (``toolrelay verify``).

:func:`verify` runs, and :func:`format_report` prints, one line per check:

* **graph** (per machine): every state is reachable from the initial state and
  every non-final state can reach a final state (promise 1), by
  :func:`toolrelay._machines.check_graph`;
* **compiled table equals the declared machine, no illegal pair silently
  accepted** (per machine), by :func:`toolrelay._machines.compare_with_declared`:
  every ``(state, event)`` pair is sent to a real python-statemachine instance
  started in that state; it must move to the compiled table's target, or raise
  (``IllegalTransition``) where the table has none, never do nothing (STYLE point
  3); finals and the initial state agree; for ``RunLifecycle``, exactly the
  transitions that count a continuation count one (promise 3);
* **stateful property suite**: ``toolrelay.testing.stateful.run_promises`` with
  ``examples`` examples (promises 1-7; promise 8, constant cost per event, is
  measured by the benchmarks). A counterexample fails the check; its detail holds the
  exception and everything Hypothesis reported, the falsifying steps and the
  ``@reproduce_failure`` blob included.

A check never raises: whatever goes wrong becomes a failed :class:`CheckResult`.
"""

from __future__ import annotations

import importlib
import logging
import random
import traceback
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

from toolrelay._machines import (
    RUN_MACHINE,
    TOOL_CALL_MACHINE,
    CompiledMachine,
    check_graph,
    compare_with_declared,
)

__all__ = (
    "CheckResult",
    "VerifyReport",
    "format_report",
    "format_result",
    "format_summary",
    "verify",
)

Backend = Literal["asyncio", "trio"]

#: The machines :func:`verify` checks unless told otherwise.
DEFAULT_MACHINES: tuple[CompiledMachine[Any, Any], ...] = (RUN_MACHINE, TOOL_CALL_MACHINE)


@dataclass(frozen=True, slots=True)
class CheckResult:
    """The outcome of one check.

    Attributes:
        name: What was checked, in one line.
        ok: Whether it held.
        detail: Why it failed (several lines for a counterexample); empty when it held.
    """

    name: str
    ok: bool
    detail: str = ""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Every check :func:`verify` ran, in order.

    Attributes:
        results: One :class:`CheckResult` per check.
        seed: The seed the property suite ran with (the one drawn when none was given,
            so a failure can be replayed with ``--seed``); ``None`` when it did not run.
    """

    results: tuple[CheckResult, ...]
    seed: int | None = None

    @property
    def ok(self) -> bool:
        """Whether every check held."""
        return all(result.ok for result in self.results)

    @property
    def failures(self) -> tuple[CheckResult, ...]:
        """The checks that did not hold."""
        return tuple(result for result in self.results if not result.ok)


# --- the machine checks ------------------------------------------------------------------


def _guarded(name: str, check: Callable[[], str | None]) -> CheckResult:
    """Run ``check`` (``None`` when it held, otherwise why not); an exception is a failure."""
    try:
        problem = check()
    except Exception as exc:
        return CheckResult(name, False, f"the check raised {type(exc).__name__}: {exc}")
    return CheckResult(name, problem is None, problem or "")


def _graph(compiled: CompiledMachine[Any, Any]) -> CheckResult:
    def check() -> str | None:
        report = check_graph(compiled.machine)
        problems = []
        if report.unreachable:
            problems.append(f"unreachable from the initial state: {_names(report.unreachable)}")
        if report.trapped:
            problems.append(f"no path to a final state from: {_names(report.trapped)}")
        return "\n".join(problems) or None

    return _guarded(
        f"{compiled.name}: every state reachable, every non-final state reaches a final state",
        check,
    )


def _equivalent(compiled: CompiledMachine[Any, Any]) -> CheckResult:
    def check() -> str | None:
        return "\n".join(compare_with_declared(compiled)) or None

    return _guarded(
        f"{compiled.name}: the compiled table equals the declared machine, no illegal "
        f"pair silently accepted ({len(compiled.states)} states x {len(compiled.events)} "
        "events sent to the declared machine)",
        check,
    )


def _names(values: Any) -> str:
    return ", ".join(sorted(str(value) for value in values)) or "nothing"


# --- the property suite -------------------------------------------------------------------

#: Lines of Hypothesis's reporter output kept in a failure's detail (the last ones:
#: the falsifying steps are reported at the end, when the minimal example is replayed).
REPORTED_LINES = 200


#: Warnings and errors toolrelay logged during the suite kept for a failure's detail.
LOGGED_LINES = 50


class _Collector(logging.Handler):
    def __init__(self, lines: deque[str]) -> None:
        super().__init__(logging.WARNING)
        self.lines = lines

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


@contextmanager
def _collect_logs() -> Iterator[deque[str]]:
    """Keep toolrelay's log records of the suite out of the caller's logs, and the last ones.

    The suite provokes failures on purpose (tools that raise, disposals that fail),
    which toolrelay logs, as it should; printed, they would bury the report. The
    records still reach any handler on a ``toolrelay`` logger; they stop there.
    """
    logger = logging.getLogger("toolrelay")
    lines: deque[str] = deque(maxlen=LOGGED_LINES)
    handler = _Collector(lines)
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


def _tail(reported: list[str]) -> list[str]:
    lines = [line for text in reported for line in text.splitlines()]
    if len(lines) <= REPORTED_LINES:
        return lines
    return [f"... ({len(lines) - REPORTED_LINES} earlier lines)", *lines[-REPORTED_LINES:]]


def _describe(exc: BaseException) -> list[str]:
    """The exception's text and notes (Hypothesis adds its blob as a note), groups nested."""
    lines = [line.rstrip("\n") for line in traceback.format_exception_only(exc)]
    if isinstance(exc, BaseExceptionGroup):
        for index, inner in enumerate(exc.exceptions, 1):
            lines.append(f"+-- {index}:")
            lines.extend(f"    {line}" for line in _describe(inner))
    return lines


def _properties(examples: int, seed: int, backend: str, tools: Any) -> CheckResult:
    name = f"stateful property suite, promises 1-7 ({examples} examples, seed {seed}, {backend})"
    try:
        # Lazily: the suite needs Hypothesis, a test dependency, not a runtime one.
        from hypothesis.reporting import with_reporter

        stateful = importlib.import_module("toolrelay.testing.stateful")
        run_promises: Callable[..., None] = stateful.run_promises
    except (ImportError, AttributeError) as exc:
        hint = "; install toolrelay[verify]" if getattr(exc, "name", None) == "hypothesis" else ""
        return CheckResult(
            name,
            False,
            "toolrelay.testing.stateful.run_promises is not available "
            f"({type(exc).__name__}: {exc}){hint}",
        )

    reported: list[str] = []
    with _collect_logs() as logged, with_reporter(lambda value: reported.append(str(value))):
        try:
            run_promises(examples=examples, seed=seed, backend=backend, tools=tools)
        except Exception as exc:
            lines = [*_describe(exc)]
            if reported:
                lines.extend(["", "Hypothesis reported:", *_tail(reported)])
            if logged:
                lines.extend(["", f"toolrelay logged (the last {len(logged)} lines):", *logged])
            return CheckResult(name, False, "\n".join(lines).strip("\n"))
    return CheckResult(name, True)


# --- the entry points ---------------------------------------------------------------------


def verify(
    *,
    examples: int = 100,
    seed: int | None = None,
    backend: Backend | str = "asyncio",
    tools: Any = None,
    machines: Sequence[CompiledMachine[Any, Any]] | None = None,
    properties: bool = True,
    on_result: Callable[[CheckResult], object] | None = None,
) -> VerifyReport:
    """Run every check and return the report; never raises for a failed check.

    Args:
        examples: Examples the stateful property suite runs (Hypothesis ``max_examples``).
        seed: The suite's seed (``None``: one is drawn at random, and the report's
            ``seed`` says which, so ``verify(seed=report.seed)`` replays the run).
        backend: The anyio backend the suite runs on, ``"asyncio"`` or ``"trio"``.
        tools: The tools the suite's engine runs (``None``: the suite's own).
        machines: The compiled machines to check (default: ``RUN_MACHINE`` and
            ``TOOL_CALL_MACHINE``).
        properties: Run the stateful property suite (``False``: machine checks only).
        on_result: Called with each check's result the moment it finishes (the command
            prints it there, so a long suite shows its progress).

    Raises:
        ValueError: ``examples`` is less than 1 or ``backend`` is unknown.
    """
    if examples < 1:
        raise ValueError("examples must be >= 1")
    if backend not in ("asyncio", "trio"):
        raise ValueError(f"unknown backend {backend!r}: use asyncio or trio")
    results: list[CheckResult] = []

    def done(result: CheckResult) -> None:
        results.append(result)
        if on_result is not None:
            on_result(result)

    for compiled in DEFAULT_MACHINES if machines is None else machines:
        for check in (_graph, _equivalent):
            done(check(compiled))
    if not properties:
        return VerifyReport(tuple(results))
    if seed is None:
        seed = random.randrange(2**32)  # drawn here, so the report can say which
    done(_properties(examples, seed, backend, tools))
    return VerifyReport(tuple(results), seed)


def format_result(result: CheckResult) -> str:
    """One check as text: its ``PASS``/``FAIL`` line, a failure's detail indented under
    it. Ends with a newline."""
    lines = [f"{'PASS' if result.ok else 'FAIL'}  {result.name}"]
    lines.extend(f"      {line}".rstrip() for line in result.detail.splitlines())
    return "\n".join(lines) + "\n"


def format_summary(report: VerifyReport) -> str:
    """The report's last line(s): the counts, the verdict and, after a failure with a
    seed, how to replay it. Ends with a newline."""
    failed = len(report.failures)
    passed = len(report.results) - failed
    verdict = "all checks passed" if report.ok else "verification FAILED"
    text = f"{passed} passed, {failed} failed: {verdict}\n"
    if not report.ok and report.seed is not None:
        text += f"replay the suite's run with --seed {report.seed}\n"
    return text


def format_report(report: VerifyReport) -> str:
    """The report as text: one ``PASS``/``FAIL`` line per check, failure details
    indented under their line, then a summary line. Ends with a newline."""
    return "".join(map(format_result, report.results)) + format_summary(report)
