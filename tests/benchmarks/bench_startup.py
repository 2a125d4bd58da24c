"""Case c, cold start: ``import toolrelay`` and ``toolrelay demo``'s first answer.

Both are measured in fresh interpreters (a child process per repeat), best of a few
runs, because a cold start is what a user's first command pays: every module read and
executed, nothing cached in this process.

- *import*: the child times ``import toolrelay`` itself with ``time.perf_counter``
  (the interpreter's own start-up is shown beside it, for information), and the first
  read of a public name that needs the engine (``from toolrelay import Engine``), which
  imports the layers under it.
- *demo*: from the moment the ``toolrelay demo`` child is spawned to the moment the
  agent's first words (the first byte after ``"Agent: "``) reach this process through
  the child's stdout pipe; the whole command's wall time (its paced events run to
  the end) is shown beside it, from one run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench_harness import Report, Sample, Target

__all__ = ("run_startup",)

CASE = "c. cold start"

_IMPORT = (
    "import time\n"
    "t0 = time.perf_counter()\n"
    "import toolrelay\n"
    "t1 = time.perf_counter()\n"
    "from toolrelay import Engine\n"
    "t2 = time.perf_counter()\n"
    "print((t1 - t0) * 1e3, (t2 - t1) * 1e3)\n"
)


def _env(*, without_trio: bool = False) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # a user's install has its bytecode cached
    env["PYTHONUNBUFFERED"] = "1"
    if without_trio:
        # trio is a test dependency here, not one of toolrelay's: httpcore imports it
        # when it can (about a third of the demo's start-up), a user's install cannot.
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [_NO_TRIO, env.get("PYTHONPATH")]))
    return env


#: A directory whose ``trio`` module cannot be imported, put first on the path (made
#: by :func:`run_startup`, removed after).
_NO_TRIO = ""

_NO_TRIO_MODULE = (
    '"""Stands for trio not being installed: importing it fails as a missing module."""\n'
    'raise ImportError("trio is not installed (simulated by the benchmark suite)")\n'
)


def _interpreter_ms() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True, env=_env())
    return (time.perf_counter() - started) * 1e3


def _import_ms() -> tuple[float, float]:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT], check=True, capture_output=True, text=True, env=_env()
    )
    first, engine = done.stdout.split()
    return float(first), float(engine)


def _demo_ms(*, without_trio: bool = False, whole: bool = True) -> tuple[float, float]:
    """Milliseconds to the agent's first words, and to the command's exit (``nan``
    without ``whole``: the child is then stopped once it has answered, since the rest
    of its run, about a second of paced events, is not measured)."""
    started = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "toolrelay", "demo"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=_env(without_trio=without_trio),
    )
    assert child.stdout is not None
    seen = b""
    first = float("nan")
    while True:
        chunk = os.read(child.stdout.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
        marker = seen.find(b"Agent: ")
        if marker >= 0 and len(seen) > marker + len(b"Agent: "):
            first = (time.perf_counter() - started) * 1e3
            break
    if not whole and first == first:  # answered (not nan): the rest is not measured
        child.kill()
        child.stdout.close()
        child.wait()
        return first, float("nan")
    child.stdout.read()
    child.wait()
    total = (time.perf_counter() - started) * 1e3
    if child.returncode != 0:
        raise RuntimeError(f"toolrelay demo exited {child.returncode}")
    return first, total


def run_startup(report: Report, *, quick: bool) -> None:
    global _NO_TRIO
    with tempfile.TemporaryDirectory() as no_trio:
        Path(no_trio, "trio.py").write_text(_NO_TRIO_MODULE, encoding="utf-8")
        _NO_TRIO = no_trio
        _run_startup(report, quick=quick)


def _run_startup(report: Report, *, quick: bool) -> None:
    repeats = 3 if quick else 7
    with report.part(f"c import x {repeats}"):
        _import_ms()  # warm the bytecode cache and the OS's file cache, as an install is
        interpreter, imports, engines = [], [], []
        for _ in range(repeats):
            interpreter.append(_interpreter_ms())
            first, engine = _import_ms()
            imports.append(first)
            engines.append(engine)
    report.add(
        Sample(
            CASE,
            "python -c pass (the interpreter alone)",
            "ms",
            tuple(interpreter),
            "a child process's whole wall time; for information",
        )
    )
    imported = report.add(
        Sample(
            CASE,
            "import toolrelay",
            "ms",
            tuple(imports),
            "timed inside a fresh interpreter; the names are imported on first read",
        )
    )
    report.add(
        Sample(
            CASE,
            "then from toolrelay import Engine",
            "ms",
            tuple(engines),
            "the first read of a name that needs the engine: its layers and libraries",
        )
    )
    demo_repeats = 1 if quick else 5
    firsts, totals, bare = [], [], []
    with report.part(f"c demo x {demo_repeats} x 2"):
        _demo_ms(whole=False)  # warm the caches, as for the import
        for i in range(demo_repeats):
            # The whole command once (for information: its paced events take a
            # second); the other runs stop at the first answer, the figure timed.
            first, total = _demo_ms(whole=i == 0)
            firsts.append(first)
            if i == 0:
                totals.append(total)
            bare.append(_demo_ms(without_trio=True, whole=False)[0])
    demo = report.add(
        Sample(
            CASE,
            "toolrelay demo: the agent's first words, trio not installed",
            "ms",
            tuple(bare),
            "as `pip install toolrelay[demo]` installs it: httpcore has no trio to import",
        )
    )
    report.add(
        Sample(
            CASE,
            "toolrelay demo: the agent's first words, this environment",
            "ms",
            tuple(firsts),
            "from spawning the command to the first byte after 'Agent: ' on its stdout",
        )
    )
    report.add(
        Sample(
            CASE,
            "toolrelay demo: the whole command",
            "ms",
            tuple(totals),
            "the default scenario and its default 0.02 s between the agent's events",
        )
    )
    report.target(
        Target(
            "import_toolrelay", "cold start: import toolrelay (best run)", imported.min, 100.0, "ms"
        )
    )
    report.target(
        Target(
            "demo_first_answer",
            "cold start: toolrelay demo's first answer, as the demo extra installs it (best run)",
            demo.min / 1e3,
            1.0,
            "s",
        )
    )
