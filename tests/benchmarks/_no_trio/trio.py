"""Stands for trio not being installed (case 9 of the benchmark suite puts it first on
the path of a child process): importing it fails as a missing module does."""

from __future__ import annotations

raise ImportError("trio is not installed (simulated by tests/benchmarks/_no_trio)")
