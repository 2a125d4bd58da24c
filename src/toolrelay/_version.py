"""The package version: the one place it is written (hatch reads it for the build)."""

from __future__ import annotations

__all__ = ("__version__",)

__version__ = "0.1.0"
