"""What every tool definition must satisfy, however it is declared.

:func:`~toolrelay.tool` and :meth:`ToolSpec.from_schema` both check the name,
the timeout and ``blocking`` here, and tell a sync handler from an async one through
decorators and :func:`functools.partial`.
"""

from __future__ import annotations

import functools
import inspect
import math
import re
from collections.abc import Callable
from typing import Any

from toolrelay._errors import ToolDefinitionError

__all__ = ("check_blocking", "check_name", "check_timeout", "is_async_callable", "unwrap")

#: Tool names the major providers all accept (OpenAI, Anthropic, Google).
_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")


def unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function behind decorators (``__wrapped__``) and ``functools.partial``."""
    while True:
        fn = inspect.unwrap(fn)
        if not isinstance(fn, functools.partial):
            return fn
        fn = fn.func


def is_async_callable(fn: Callable[..., Any]) -> bool:
    """Whether calling ``fn`` gives an awaitable: a coroutine function behind its
    decorators and partials, or an object whose ``__call__`` is one."""
    target = unwrap(fn)
    if inspect.iscoroutinefunction(target):
        return True
    # A callable object: look at its class's __call__.
    return not inspect.isroutine(target) and inspect.iscoroutinefunction(type(target).__call__)


def check_name(name: str) -> None:
    """Refuse a name some provider would refuse."""
    if not _NAME_PATTERN.fullmatch(name):
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use letters, digits, '_' and '-' (1 to 64 characters)"
        )


def check_timeout(name: str, timeout: float | None) -> float | None:
    """``timeout`` as a float (``None`` stays ``None``); refuses a non-number and a
    number that is not positive and finite."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ToolDefinitionError(f"tool {name!r}: timeout must be a number, got {timeout!r}")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ToolDefinitionError(f"tool {name!r}: timeout must be positive, got {timeout!r}")
    return float(timeout)


def check_blocking(name: str, is_async: bool, blocking: bool | None) -> bool:
    """Whether the handler runs in a worker thread: by default a sync one does; an
    async one never may."""
    if blocking is None:
        return not is_async
    if blocking and is_async:
        raise ToolDefinitionError(f"tool {name!r}: an async tool cannot be blocking")
    return blocking
