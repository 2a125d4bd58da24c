"""The machine, assembled from its rules and invariants, and :func:`run_promises`."""

from __future__ import annotations

from typing import Any, cast

import hypothesis
from hypothesis import HealthCheck, Phase
from hypothesis.stateful import (
    run_state_machine_as_test,
)

from toolrelay._core import ToolRegistry
from toolrelay.testing.stateful._invariants import Invariants
from toolrelay.testing.stateful._rules import Rules

__all__ = (
    "PromisesMachine",
    "TestPromises",
    "run_promises",
)


class PromisesMachine(Rules, Invariants):
    """The eight promises as a Hypothesis state machine; see the package docstring.

    Override the class attributes, or :meth:`tools`, in a subclass; then run the
    subclass's ``TestCase`` (or :func:`run_promises`).
    """


#: The machine as a ``unittest.TestCase`` (asyncio); pytest collects it where imported.
#: The promise machine as a ``unittest.TestCase``: collect it in a test module to run it.
TestPromises = PromisesMachine.TestCase


def run_promises(
    *,
    examples: int = 100,
    seed: int | None = None,
    backend: str = "asyncio",
    tools: ToolRegistry | None = None,
    max_depth: int = 3,
    steps: int = 30,
    derandomize: bool = False,
    reproduce: str | bytes | None = None,
) -> None:
    """Run :class:`PromisesMachine` and raise on the first counterexample.

    Args:
        examples: How many programs (sequences of steps) to try.
        seed: Make the run reproducible (Hypothesis ``@seed``); ``None`` for a random one.
        backend: The anyio backend ("asyncio" or "trio").
        tools: Your tools, called by the agent beside the machine's own.
        max_depth: The engine's continuation bound.
        steps: The most steps in one program.
        derandomize: Derive the programs from the machine itself (the same ones on
            every run, whatever ``seed``).
        reproduce: The blob of a failure's ``@reproduce_failure`` note: replay that
            very program (same Hypothesis version, same tools and options).

    Raises:
        Exception: The failure of the minimal failing program: an ``AssertionError``
            naming the promise, or the error that broke the engine. Hypothesis
            attaches the program's steps and, as a note, the ``@reproduce_failure``
            blob that replays it.
    """
    registry = tools if tools is not None else ToolRegistry()
    attributes: dict[str, Any] = {
        "backend": backend,
        "max_depth": max_depth,
        "tools": lambda self: registry,
        "__module__": __name__,
    }
    machine = cast("type[PromisesMachine]", type("VerifyPromises", (PromisesMachine,), attributes))
    if seed is not None:
        machine = hypothesis.seed(seed)(machine)
    if reproduce is not None:
        blob = reproduce.encode("ascii") if isinstance(reproduce, str) else reproduce
        machine = hypothesis.reproduce_failure(hypothesis.__version__, blob)(machine)
    settings = hypothesis.settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        derandomize=derandomize,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # The explain phase traces every line the engine runs: five times slower to
        # report a failure, for notes that say little about a whole engine.
        phases=[phase for phase in Phase if phase is not Phase.explain],
    )
    run_state_machine_as_test(machine, settings=settings)
