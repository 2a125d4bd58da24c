"""The :func:`tool` decorator: a typed Python function declared as a :class:`ToolSpec`.

The function's signature gives the arguments' type and JSON Schema
(``_tool_schema``), its docstring the descriptions (``_tool_docstrings``); the name,
timeout and ``blocking`` are checked as for any tool (``_tool_checks``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import ParamSpec, TypeVar, overload

from toolrelay._core._tool_checks import (
    check_blocking,
    check_name,
    check_timeout,
    is_async_callable,
    unwrap,
)
from toolrelay._core._tool_docstrings import parse_docstring
from toolrelay._core._tool_schema import signature_arguments
from toolrelay._core._tool_spec import ToolSpec
from toolrelay._errors import ToolDefinitionError

__all__ = ("tool",)

P = ParamSpec("P")
R = TypeVar("R")


@overload
def tool(
    fn: Callable[P, R],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    blocking: bool | None = None,
    needs_approval: bool = False,
    idempotent: bool = False,
) -> ToolSpec[P, R]: ...


@overload
def tool(
    fn: None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    blocking: bool | None = None,
    needs_approval: bool = False,
    idempotent: bool = False,
) -> Callable[[Callable[P, R]], ToolSpec[P, R]]: ...


def tool(
    fn: Callable[P, R] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    blocking: bool | None = None,
    needs_approval: bool = False,
    idempotent: bool = False,
) -> ToolSpec[P, R] | Callable[[Callable[P, R]], ToolSpec[P, R]]:
    """Declare a typed function (sync or async) as a tool.

    Usable bare (``@tool``), with arguments (``@tool(name="x", timeout=5)``) or as a
    call on an existing function (``tool(fn, name="x")``).

    Every parameter must be annotated with a type msgspec can describe as JSON
    Schema; ``Annotated[int, msgspec.Meta(ge=0, description=...)]`` adds constraints
    and a description. String annotations (``from __future__ import annotations``)
    are resolved in the function's module, so the names they use must be defined at
    module level. A default makes a parameter optional. The tool's description is the
    first paragraph of the docstring, and a Google-style ``Args:`` section describes
    the parameters (an explicit ``Meta(description=...)`` wins). Arguments the
    schema does not declare are ignored when the tool is called, as JSON Schema
    allows by default.

    Args:
        fn: The function to declare; omit it to get a decorator.
        name: The tool's name (default: the function's ``__name__``); letters,
            digits, ``_`` and ``-``, 1 to 64 characters.
        description: What the tool does (default: the docstring's first paragraph).
        timeout: Seconds the tool may run; ``None`` for the engine's default.
        blocking: Run a sync function in a worker thread (default ``True`` for sync
            functions, ``False`` for async ones, for which ``True`` is an error).
        needs_approval: A tool policy: each call waits for the embedding code to
            approve or deny it before it runs.
        idempotent: Running a call twice does no harm, so a call a crash interrupted
            may run again on recovery (see :attr:`ToolSpec.idempotent`).

    Returns:
        The :class:`ToolSpec`, or a decorator producing it when ``fn`` is omitted.

    Raises:
        ToolDefinitionError: The function has ``*args``/``**kwargs``, positional-only
            or unannotated parameters, an annotation that cannot be resolved or has no
            JSON Schema, a default that is not JSON, or an invalid name, timeout or
            ``blocking``. The message names the parameter.
    """

    def decorate(func: Callable[P, R]) -> ToolSpec[P, R]:
        return _spec_from_function(
            func,
            name=name,
            description=description,
            timeout=timeout,
            blocking=blocking,
            needs_approval=needs_approval,
            idempotent=idempotent,
        )

    return decorate if fn is None else decorate(fn)


def _spec_from_function(
    fn: Callable[P, R],
    *,
    name: str | None,
    description: str | None,
    timeout: float | None,
    blocking: bool | None,
    needs_approval: bool = False,
    idempotent: bool = False,
) -> ToolSpec[P, R]:
    if isinstance(fn, ToolSpec):
        raise ToolDefinitionError(f"{fn.name!r} is already a tool")
    target = unwrap(fn)
    tool_name = name if name is not None else getattr(target, "__name__", None)
    if not isinstance(tool_name, str):
        raise ToolDefinitionError(f"{fn!r} has no __name__: pass name=...")
    check_name(tool_name)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise ToolDefinitionError(f"tool {tool_name!r}: generator functions cannot be tools")
    summary, arg_docs = parse_docstring(inspect.getdoc(target))
    arguments = signature_arguments(fn, target, tool_name, arg_docs)
    is_async = is_async_callable(fn)
    return ToolSpec(
        name=tool_name,
        description=summary if description is None else description,
        parameters=arguments.parameters,
        handler=fn,
        is_async=is_async,
        blocking=check_blocking(tool_name, is_async, blocking),
        timeout=check_timeout(tool_name, timeout),
        args_type=arguments.args_type,
        context_parameter=arguments.context_parameter,
        hidden=arguments.hidden,
        needs_approval=bool(needs_approval),
        _decode_type=arguments.decode_type,
        _validators=arguments.validators,
        idempotent=idempotent,
    )
