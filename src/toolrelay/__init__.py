"""toolrelay: the lifecycle of LLM tool-calling conversations as declared state machines."""

from __future__ import annotations

from toolrelay._reasons import ReasonKind as ReasonKind, TerminalReason as TerminalReason

__version__ = "0.1.0"

__all__ = ("ReasonKind", "TerminalReason", "__version__")
