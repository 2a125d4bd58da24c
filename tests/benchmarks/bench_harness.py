"""Timing, targets and reporting for the benchmark suite (``tests/benchmarks/run.py``).

Strategy: every measurement is a function that does its own setup, times only the
part that matters with :func:`time.perf_counter_ns`, and returns one value (ns per
event, µs per lifecycle...). :func:`repeat` calls it several times with the garbage
collector collected, then disabled, around each call (re-enabled between calls), and
keeps every value (the heap that lives before the series is frozen meanwhile, so that
each collect walks only what the previous repeat made: :func:`settled_heap`); a
:class:`Sample` reports the min and the median. Ratios and
targets are computed from samples of the same run, never from numbers written down
elsewhere, so a slower or faster machine moves both sides together.

This module is a helper, not a test module: its name has no ``test_`` prefix, so
pytest does not collect it. Nothing here asserts on wall-clock time.
"""

from __future__ import annotations

import gc
import importlib.metadata
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

__all__ = (
    "Ratio",
    "Report",
    "Sample",
    "Target",
    "interleaved",
    "machine_info",
    "no_gc",
    "percentile",
    "repeat",
    "settled_heap",
    "versions",
)

#: The distributions whose versions the report names.
VERSIONED = (
    "msgspec",
    "python-statemachine",
    "anyio",
    "trio",
    "httpx",
    "httpx-sse",
    "ag-ui-protocol",
    "pydantic",
)


@contextmanager
def no_gc() -> Iterator[None]:
    """Collect, then keep the garbage collector off inside the block."""
    was_enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@contextmanager
def settled_heap() -> Iterator[None]:
    """Collect once, then freeze what lives (``gc.freeze``) until the block ends.

    Around a series of repeats: each repeat's own :func:`no_gc` collect then walks only
    what was made since (the previous repeat's garbage), not the whole heap of every
    imported module, which took 50 to 80 ms per repeat here. Nothing is measured with
    the collector on inside the block, so the values are the same; the frozen objects
    are given back to the collector at the end.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


@dataclass(frozen=True, slots=True)
class Sample:
    """The values of one measurement over its repeats.

    Attributes:
        case: The case it belongs to (``"1. processor"``).
        name: What was measured.
        unit: The unit of every value (``"ns/event"``).
        values: One value per repeat, in the order measured; or, for a
            distribution, one value per observation (then p99 is reported too).
        note: A short remark printed beside it.
        distribution: The values are observations (latencies), not repeats.
    """

    case: str
    name: str
    unit: str
    values: tuple[float, ...]
    note: str = ""
    distribution: bool = False

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def p99(self) -> float:
        return percentile(self.values, 0.99)

    def as_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {
            "case": self.case,
            "name": self.name,
            "unit": self.unit,
            "min": self.min,
            "median": self.median,
        }
        if self.distribution:
            found["p99"] = self.p99
            found["count"] = len(self.values)
        else:
            found["values"] = list(self.values)
        found["note"] = self.note
        return found


def repeat(
    case: str,
    name: str,
    unit: str,
    measure: Callable[[], float],
    repeats: int,
    *,
    note: str = "",
    gc_off: bool = True,
) -> Sample:
    """Call ``measure`` ``repeats`` times (gc off inside each call) and keep every value."""
    values: list[float] = []
    if not gc_off:
        values = [measure() for _ in range(repeats)]
        return Sample(case, name, unit, tuple(values), note)
    with settled_heap():
        for _ in range(repeats):
            with no_gc():
                values.append(measure())
    return Sample(case, name, unit, tuple(values), note)


def interleaved(measures: Sequence[Callable[[], float]], repeats: int) -> list[tuple[float, ...]]:
    """Call every measure once per round, ``repeats`` rounds (gc off inside each call).

    Interleaving puts the measures of a comparison side by side in time, so that a slow
    phase of the machine (another process, a frequency change) hits them alike.
    """
    values: list[list[float]] = [[] for _ in measures]
    with settled_heap():
        for _ in range(repeats):
            for found, measure in zip(values, measures, strict=True):
                with no_gc():
                    found.append(measure())
    return [tuple(found) for found in values]


def percentile(values: Sequence[float], fraction: float) -> float:
    """The ``fraction`` percentile of ``values`` (nearest rank; ``0.99`` is p99)."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


@dataclass(frozen=True, slots=True)
class Target:
    """One requirement of the issue, checked against a value measured in this run.

    Attributes:
        name: A stable identifier (``"processor_vs_msgspec"``).
        description: The requirement in words.
        value: What this run measured.
        bound: The limit.
        unit: The unit of ``value`` and ``bound``.
        upper: ``True`` when ``value`` must be at most ``bound``, ``False`` when at
            least.
        met: Whether the requirement holds.
    """

    name: str
    description: str
    value: float
    bound: float
    unit: str
    upper: bool = True
    met: bool = field(init=False)

    def __post_init__(self) -> None:
        met = self.value <= self.bound if self.upper else self.value >= self.bound
        object.__setattr__(self, "met", bool(met))

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "value": self.value,
            "bound": self.bound,
            "unit": self.unit,
            "comparison": "<=" if self.upper else ">=",
            "met": self.met,
        }


@dataclass(frozen=True, slots=True)
class Ratio:
    """A ratio of two measurements of this run, with what it means.

    Attributes:
        name: What is divided by what.
        of_mins: The ratio of the two mins (each side's least disturbed repeat).
        of_medians: The ratio of the two medians.
        paired: For two interleaved measurements, the median of the per-round ratios:
            each round's two values were measured side by side, so a slow or fast
            phase of the machine cancels out. ``None`` otherwise.
        meaning: How to read it.
    """

    name: str
    of_mins: float
    of_medians: float
    paired: float | None
    meaning: str

    @property
    def value(self) -> float:
        """What a target reads: the paired ratio when there is one, else the ratio of
        the mins (other processes only ever add time to a CPU-bound loop)."""
        return self.of_mins if self.paired is None else self.paired


@dataclass(slots=True)
class Report:
    """Everything one run of the suite measured, rendered as markdown or JSON."""

    mode: str
    samples: list[Sample] = field(default_factory=list)
    ratios: list[Ratio] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    #: Wall seconds of each timed part of the run (:meth:`part`), in order: where the
    #: suite's own time goes (set-ups, warm-ups, measurements), not a measurement.
    parts: list[tuple[str, float]] = field(default_factory=list)

    @contextmanager
    def part(self, name: str) -> Iterator[None]:
        """Time a part of the run (a set-up, a warm-up, a measurement) by the wall
        clock, print it to stderr as it ends and keep it for the JSON."""
        began = time.perf_counter()
        try:
            yield
        finally:
            self.record_part(name, time.perf_counter() - began)

    def record_part(self, name: str, took: float) -> None:
        """Keep a part timed by the caller (:meth:`part` where a block cannot be)."""
        self.parts.append((name, took))
        print(f"  {name}: {took:.1f} s", file=sys.stderr, flush=True)

    def add(self, sample: Sample) -> Sample:
        self.samples.append(sample)
        return sample

    def ratio(
        self,
        name: str,
        numerator: Sample,
        denominator: Sample,
        meaning: str,
        *,
        paired: bool = False,
    ) -> float:
        """Record ``numerator / denominator`` and return the value a target reads.

        Args:
            paired: The two samples were measured interleaved (:func:`interleaved`),
                value ``i`` of each in the same round: compare round by round.
        """
        rounds = None
        if paired:
            rounds = statistics.median(
                n / d for n, d in zip(numerator.values, denominator.values, strict=True)
            )
        ratio = Ratio(
            name,
            numerator.min / denominator.min,
            numerator.median / denominator.median,
            rounds,
            meaning,
        )
        self.ratios.append(ratio)
        return ratio.value

    def target(self, target: Target) -> Target:
        self.targets.append(target)
        return target

    def markdown(self) -> str:
        machine = machine_info()
        lines = [
            f"### toolrelay benchmarks ({self.mode} run)",
            "",
            f"- machine: {machine['cpu']}, {machine['cores']} cores "
            f"({machine['platform']}); one process, one core used",
            "- versions: " + ", ".join(f"{k} {v}" for k, v in versions().items()),
            "",
            "| case | measure | min | median | p99 | unit | note |",
            "| --- | --- | ---: | ---: | ---: | --- | --- |",
        ]
        for s in self.samples:
            p99 = _fmt(s.p99) if s.distribution else ""
            lines.append(
                f"| {s.case} | {s.name} | {_fmt(s.min)} | {_fmt(s.median)} | {p99} | {s.unit} "
                f"| {s.note} |"
            )
        if self.ratios:
            lines += [
                "",
                "| ratio (this run; a target reads the one in bold) | of mins | of medians "
                "| paired | meaning |",
                "| --- | ---: | ---: | ---: | --- |",
            ]
            for r in self.ratios:
                mins, medians = _fmt(r.of_mins), _fmt(r.of_medians)
                if r.paired is None:
                    mins, paired = f"**{mins}**", ""
                else:
                    paired = f"**{_fmt(r.paired)}**"
                lines.append(f"| {r.name} | {mins} | {medians} | {paired} | {r.meaning} |")
        if self.targets:
            lines += [
                "",
                "| target | measured | bound | met |",
                "| --- | ---: | ---: | :---: |",
            ]
            for t in self.targets:
                sign = "<=" if t.upper else ">="
                lines.append(
                    f"| {t.description} | {_fmt(t.value)} {t.unit} | {sign} {_fmt(t.bound)} "
                    f"{t.unit} | {'yes' if t.met else '**no**'} |"
                )
        if self.notes:
            lines += ["", *[f"- {note}" for note in self.notes]]
        if self.errors:
            lines += ["", "Errors:", *[f"- {error}" for error in self.errors]]
        lines += ["", f"({time.time() - self.started:.0f} s)"]
        return "\n".join(lines)

    def as_json(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "machine": machine_info(),
            "versions": versions(),
            "samples": [s.as_json() for s in self.samples],
            "ratios": [
                {
                    "name": r.name,
                    "value": r.value,
                    "of_mins": r.of_mins,
                    "of_medians": r.of_medians,
                    "paired": r.paired,
                    "meaning": r.meaning,
                }
                for r in self.ratios
            ],
            "targets": [t.as_json() for t in self.targets],
            "notes": list(self.notes),
            "errors": list(self.errors),
            "parts": [{"name": name, "seconds": took} for name, took in self.parts],
        }


def _fmt(value: float) -> str:
    if value != value:  # NaN
        return "n/a"
    magnitude = abs(value)
    if magnitude >= 100_000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def machine_info() -> dict[str, Any]:
    """The CPU model, the core count and the platform."""
    return {
        "cpu": _cpu_model(),
        "cores": os.cpu_count() or 0,
        "platform": f"{platform.system()} {platform.machine()}",
    }


def versions() -> dict[str, str]:
    """Python and the versions of the libraries the numbers depend on."""
    found = {"python": platform.python_version() + f" ({sys.implementation.name})"}
    for name in VERSIONED:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = "not installed"
    return found
