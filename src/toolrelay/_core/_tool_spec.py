"""One declared tool, :class:`ToolSpec`: its wire declaration, and the decisions of
one call (bind the arguments, turn what came back into a result).

The core decides and the runtime runs: :meth:`ToolSpec.bind` decodes and
validates the model's arguments into a callable (or the failure saying why not), the
runtime calls it (awaiting an async tool, a blocking one in a worker thread, under
its timeout) and :meth:`ToolSpec.outcome` / :meth:`ToolSpec.failure_of` turn what came
back into the :class:`ToolResult` the model sees. Nothing on the tool's side raises
out of that: bad arguments, an exception, a result that cannot be encoded all become
failures (promise 2: the model sees every outcome), and arguments nested past the
decoder's depth are a failure of that call alone (promise 11).

This module is sans-IO: it never imports an event loop library, awaits or reads the
clock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

import msgspec

from toolrelay._core._tool_checks import (
    check_blocking,
    check_name,
    check_timeout,
    is_async_callable,
)
from toolrelay._core._tool_context import ToolContext
from toolrelay._core._tool_pydantic import validation_text
from toolrelay._core._tool_result import (
    DEFAULT_MAX_RESULT_BYTES,
    ToolResult,
    exception_result,
    value_result,
)
from toolrelay._errors import ToolDefinitionError
from toolrelay.protocol import Tool

__all__ = ("ToolSpec",)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")


@dataclass(frozen=True, slots=True, eq=False, kw_only=True)
class ToolSpec(Generic[P, R]):
    """One declared tool. Build it with :func:`tool` or :meth:`from_schema`.

    A spec is immutable and holds no per-call state: it can be shared between
    registries, threads and concurrent executions. Calling it calls the handler
    directly, so a decorated function stays usable (and typed) as a function.

    Attributes:
        name: The name the agent calls the tool by.
        description: What the tool does, for the model.
        parameters: The JSON Schema of the arguments (an ``object`` schema). Treat it
            as read-only: it is shared with every definition built from this spec.
        handler: The function that runs the tool.
        is_async: Whether ``handler`` returns an awaitable that must be awaited.
        blocking: Whether the runtime should run the (sync) handler in a worker thread.
        timeout: Seconds this tool may run, or ``None`` for the engine's default.
        args_type: The Struct type of the arguments the model sends (its fields are
            the handler's keyword arguments, the schema's properties), or ``None``
            when the handler takes the decoded JSON object as its only argument
            (:meth:`from_schema`).
        context_parameter: The parameter the engine fills with a
            :class:`ToolContext`, or ``None``.
        hidden: The parameters the model may not set: the context parameter and the
            arguments bound with :func:`functools.partial`.
        needs_approval: A tool policy: each call waits for the embedding code to
            approve it (it then runs) or deny it (the model receives the denial)
            before it runs; see ``Turn.approve`` and ``Turn.deny``.
        idempotent: Whether running a call twice does no harm. On a durable store, a
            call that was running when the process stopped runs again on recovery
            only if its tool is idempotent; otherwise the model is told it was
            interrupted (promise 10).
    """

    name: str
    description: str
    parameters: dict[str, Any]
    handler: Callable[P, R]
    is_async: bool
    blocking: bool
    timeout: float | None = None
    args_type: type[msgspec.Struct] | None = None
    context_parameter: str | None = None
    hidden: frozenset[str] = frozenset()
    needs_approval: bool = False
    #: What the arguments are decoded into: ``args_type`` plus a field per hidden
    #: parameter, so that a model naming one is caught.
    _decode_type: type[msgspec.Struct] | None = None
    #: Per pydantic-typed parameter, the function validating its decoded value.
    _validators: tuple[tuple[str, Callable[[Any], Any]], ...] = ()
    idempotent: bool = False

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.handler(*args, **kwargs)

    def definition(self) -> Tool:
        """The wire declaration of this tool, for ``RunAgentInput.tools``."""
        return Tool(name=self.name, description=self.description, parameters=self.parameters)

    @staticmethod
    def from_schema(
        name: str,
        description: str,
        parameters: Mapping[str, Any],
        handler: Callable[[dict[str, Any]], T],
        *,
        timeout: float | None = None,
        blocking: bool | None = None,
        needs_approval: bool = False,
        idempotent: bool = False,
    ) -> ToolSpec[[dict[str, Any]], T]:
        """Declare a tool from an existing JSON Schema and a handler taking a dict.

        The arguments are decoded as a JSON object and passed to ``handler`` as one
        ``dict``. msgspec does not check JSON Schema, so the handler validates them
        itself (raise :class:`ToolError` to tell the model what is wrong).

        Args:
            name: The tool's name (letters, digits, ``_`` and ``-``; 1 to 64 characters).
            description: What the tool does, for the model.
            parameters: A JSON Schema whose top level is ``{"type": "object", ...}``.
                It is copied, so later changes to the mapping do not reach the spec.
            handler: A sync or async function taking the decoded arguments.
            timeout: Seconds the tool may run; ``None`` for the engine's default.
            blocking: Run a sync handler in a worker thread (default ``True`` for sync
                handlers; must not be ``True`` for async ones).
            needs_approval: Each call waits for the embedding code's approval.
            idempotent: Running a call twice does no harm (see :attr:`idempotent`).

        Returns:
            The spec.

        Raises:
            ToolDefinitionError: The name, schema, timeout or ``blocking`` is invalid.
        """
        check_name(name)
        if not isinstance(parameters, Mapping) or parameters.get("type") != "object":
            raise ToolDefinitionError(
                f"tool {name!r}: parameters must be a JSON Schema with "
                f'"type": "object" at the top level, got {parameters!r}'
            )
        try:
            # A round trip through JSON copies the schema and proves it is plain JSON.
            schema = msgspec.json.decode(msgspec.json.encode(parameters))
        except (TypeError, ValueError, OverflowError, msgspec.DecodeError) as exc:
            raise ToolDefinitionError(
                f"tool {name!r}: parameters cannot be encoded as JSON: {exc}"
            ) from exc
        is_async = is_async_callable(handler)
        return ToolSpec(
            name=name,
            description=description,
            parameters=schema,
            handler=handler,
            is_async=is_async,
            blocking=check_blocking(name, is_async, blocking),
            timeout=check_timeout(name, timeout),
            args_type=None,
            needs_approval=bool(needs_approval),
            idempotent=idempotent,
        )

    def bind(
        self, arguments: str, *, context: ToolContext[Any] | None = None
    ) -> Callable[[], Any] | ToolResult:
        """Decode ``arguments`` and bind them to the handler, without calling it.

        The runtime calls what this returns (awaiting it for an async tool, in a
        worker thread for a blocking one) and turns the outcome into a result with
        :meth:`outcome` or :meth:`failure_of`: the core decides, the runtime runs.

        Args:
            arguments: The JSON text of the arguments; empty, whitespace or ``null``
                means no arguments (``{}``).
            context: What the :attr:`context_parameter` receives; without it, a
                context whose ``deps`` is ``None``.

        Returns:
            A callable taking no argument, or the failure saying why there is none
            (bad JSON, nested too deeply, invalid arguments: msgspec's message with
            the path, such as ``Expected `int`, got `str` - at `$.n```; an argument
            the model may not set).
        """
        stripped = arguments.strip()
        raw = stripped if stripped and stripped != "null" else "{}"
        decode_type = self._decode_type or self.args_type
        try:
            if decode_type is None:
                decoded: Any = msgspec.json.decode(raw, type=dict[str, Any])
            else:
                decoded = msgspec.json.decode(raw, type=decode_type)
        except msgspec.ValidationError as exc:
            return ToolResult.failure(f"Invalid arguments for tool {self.name!r}: {exc}")
        except msgspec.DecodeError as exc:
            return ToolResult.failure(f"Arguments for tool {self.name!r} are not valid JSON: {exc}")
        except RecursionError:
            return ToolResult.failure(f"Arguments for tool {self.name!r} are nested too deeply")
        handler: Callable[..., Any] = self.handler
        if decode_type is None:
            return functools.partial(handler, decoded)
        kwargs = msgspec.structs.asdict(decoded)
        refused = sorted(
            n for n in self.hidden if kwargs.pop(n, msgspec.UNSET) is not msgspec.UNSET
        )
        if refused:
            return ToolResult.failure(
                f"Invalid arguments for tool {self.name!r}: "
                f"{', '.join(map(repr, refused))} cannot be set by the model"
            )
        for field_name, validate in self._validators:
            try:
                kwargs[field_name] = validate(kwargs[field_name])
            except Exception as exc:
                return ToolResult.failure(
                    f"Invalid arguments for tool {self.name!r}: {validation_text(exc, field_name)}"
                )
        if self.context_parameter is not None:
            kwargs[self.context_parameter] = (
                context if context is not None else ToolContext(deps=None, tool_name=self.name)
            )
        return functools.partial(handler, **kwargs)

    def outcome(self, value: object, *, max_bytes: int = DEFAULT_MAX_RESULT_BYTES) -> ToolResult:
        """The result the model sees for the handler's return value: a ``str`` as is,
        ``None`` as ``""``, a :class:`ToolResult` as is, a pydantic model as its JSON,
        anything else JSON-encoded by msgspec. A failure, never an exception, when the
        value cannot be encoded (unsupported, cyclic, nested too deeply) or its text
        is longer than ``max_bytes`` UTF-8 bytes."""
        return value_result(self.name, value, max_bytes)

    @staticmethod
    def failure_of(exc: BaseException, *, detail: bool = True) -> ToolResult:
        """The result the model sees for an exception the handler raised.

        A :class:`ToolError` sends its message alone; any other exception
        ``"<ExceptionType>: <message>"`` (its text cut at 2000 characters), or, with
        ``detail=False``, a generic message that tells the model nothing of the
        tool's internals. The exception stays on the result (:attr:`ToolResult.exception`).
        Never raises, even when the exception's ``__str__`` does.
        """
        return exception_result(exc, detail=detail)
