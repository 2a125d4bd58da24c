"""The tool registry: declaring tools, describing them to the agent, executing them.

A tool is a typed Python function (sync or async). :func:`tool` turns it into a
:class:`ToolSpec`: a name, a description, the JSON Schema of its parameters (what
goes in ``RunAgentInput.tools``) and a msgspec Struct type built from its signature.
A :class:`ToolRegistry` is an immutable, ordered set of specs.

Strategy: the signature is the single source of truth. Each parameter becomes a
field of a Struct type made with ``msgspec.defstruct`` (annotation, default,
``kw_only``). The same type gives the JSON Schema
(``msgspec.json.schema_components``, with the top-level object inlined so the wire
sees ``{"type": "object", "properties": ..., "required": ...}``) and decodes and
validates the model's arguments in one step (``msgspec.json.decode(args, type=...)``),
so the schema the model is shown and the check its arguments pass cannot drift apart.

The core decides and the runtime runs: :meth:`ToolSpec.bind` decodes and
validates the model's arguments into a callable (or the failure saying why not), the
runtime calls it (awaiting an async tool, a blocking one in a worker thread, under
its timeout) and :meth:`ToolSpec.outcome` / :meth:`ToolSpec.failure_of` turn what came
back into the :class:`ToolResult` the model sees. Nothing on the tool's side raises
out of that: an unknown name, bad arguments, an exception, a result that cannot be
encoded all become failures (promise 2: the model sees every outcome).

This module is sans-IO: it never imports an event loop library, awaits or reads the
clock.
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, Self, TypeVar, overload

import msgspec

from toolrelay.errors import ToolDefinitionError
from toolrelay.protocol import Tool

__all__ = (
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "tool",
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")

#: Tool names the major providers all accept (OpenAI, Anthropic, Google).
_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")

#: The schema of a tool without parameters.
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


# ---------------------------------------------------------------------------
# Results


class ToolResult(msgspec.Struct, frozen=True):
    """The outcome of one tool call, as the model will see it.

    A failure's :attr:`content` is the JSON object ``{"error": "<message>"}`` (the
    text sent to the model); :attr:`error` holds the bare message. Build results with
    :meth:`success` and :meth:`failure` to keep that convention.

    Attributes:
        content: The text sent to the model in the ``tool`` message.
        error: The error message for a failure, ``None`` for a success.
    """

    content: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        """``True`` for a success, ``False`` for a failure."""
        return self.error is None

    @classmethod
    def success(cls, content: str) -> ToolResult:
        """A successful result whose text is ``content``."""
        return cls(content)

    @classmethod
    def failure(cls, message: str) -> ToolResult:
        """A failed result: the model receives ``{"error": message}`` as JSON text."""
        return cls(msgspec.json.encode({"error": message}).decode(), error=message)


class ToolError(Exception):
    """Raised by a tool to send a clean error message to the model.

    The model receives the message alone; for any other exception it receives
    ``"<ExceptionType>: <message>"``.
    """


# ---------------------------------------------------------------------------
# Specs


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
        args_type: The Struct type the arguments are decoded into (its fields are the
            handler's keyword arguments), or ``None`` when the handler takes the
            decoded JSON object as its only argument (:meth:`from_schema`).
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
            idempotent: Running a call twice does no harm (see :attr:`idempotent`).

        Returns:
            The spec.

        Raises:
            ToolDefinitionError: The name, schema, timeout or ``blocking`` is invalid.
        """
        _check_name(name)
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
        is_async = _is_async_callable(handler)
        return ToolSpec(
            name=name,
            description=description,
            parameters=schema,
            handler=handler,
            is_async=is_async,
            blocking=_check_blocking(name, is_async, blocking),
            timeout=_check_timeout(name, timeout),
            args_type=None,
            idempotent=idempotent,
        )

    def bind(self, arguments: str) -> Callable[[], Any] | ToolResult:
        """Decode ``arguments`` and bind them to the handler, without calling it.

        The runtime calls what this returns (awaiting it for an async tool, in a
        worker thread for a blocking one) and turns the outcome into a result with
        :meth:`outcome` or :meth:`failure_of`: the core decides, the runtime runs.

        Args:
            arguments: The JSON text of the arguments; empty, whitespace or ``null``
                means no arguments (``{}``).

        Returns:
            A callable taking no argument, or the failure saying why there is none
            (bad JSON, invalid arguments: msgspec's message with the path, such as
            ``Expected `int`, got `str` - at `$.n```).
        """
        stripped = arguments.strip()
        raw = stripped if stripped and stripped != "null" else "{}"
        try:
            if self.args_type is None:
                decoded: Any = msgspec.json.decode(raw, type=dict[str, Any])
            else:
                decoded = msgspec.json.decode(raw, type=self.args_type)
        except msgspec.ValidationError as exc:
            return ToolResult.failure(f"Invalid arguments for tool {self.name!r}: {exc}")
        except msgspec.DecodeError as exc:
            return ToolResult.failure(f"Arguments for tool {self.name!r} are not valid JSON: {exc}")
        handler: Callable[..., Any] = self.handler
        if self.args_type is None:
            return functools.partial(handler, decoded)
        return functools.partial(handler, **msgspec.structs.asdict(decoded))

    def outcome(self, value: object) -> ToolResult:
        """The result the model sees for the handler's return value: a ``str`` as is,
        ``None`` as ``""``, a :class:`ToolResult` as is, anything else JSON-encoded by
        msgspec (a failure when it cannot be)."""
        return _to_result(self.name, value)

    @staticmethod
    def failure_of(exc: Exception) -> ToolResult:
        """The result the model sees for an exception the handler raised: a
        :class:`ToolError`'s message alone, otherwise ``"<ExceptionType>: <message>"``."""
        if isinstance(exc, ToolError):
            return ToolResult.failure(str(exc) or type(exc).__name__)
        text = str(exc)
        return ToolResult.failure(f"{type(exc).__name__}: {text}" if text else type(exc).__name__)


def _to_result(name: str, value: object) -> ToolResult:
    """Turn a handler's return value into the text the model sees."""
    if isinstance(value, ToolResult):
        return value
    if isinstance(value, str):
        return ToolResult.success(str(value))
    if value is None:
        return ToolResult.success("")
    try:
        return ToolResult.success(msgspec.json.encode(value).decode())
    except (TypeError, ValueError, OverflowError) as exc:
        return ToolResult.failure(f"The result of tool {name!r} cannot be encoded as JSON: {exc}")


# ---------------------------------------------------------------------------
# The decorator


@overload
def tool(
    fn: Callable[P, R],
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float | None = None,
    blocking: bool | None = None,
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
    idempotent: bool = False,
) -> ToolSpec[P, R]:
    if isinstance(fn, ToolSpec):
        raise ToolDefinitionError(f"{fn.name!r} is already a tool")
    target = _unwrap(fn)
    tool_name = name if name is not None else getattr(target, "__name__", None)
    if not isinstance(tool_name, str):
        raise ToolDefinitionError(f"{fn!r} has no __name__: pass name=...")
    _check_name(tool_name)
    if inspect.isgeneratorfunction(target) or inspect.isasyncgenfunction(target):
        raise ToolDefinitionError(f"tool {tool_name!r}: generator functions cannot be tools")
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ToolDefinitionError(f"tool {tool_name!r}: no signature: {exc}") from exc

    summary, arg_docs = _parse_docstring(inspect.getdoc(target))
    globalns = _globals_of(target)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    schema_defaults: dict[str, Any] = {}
    for param in signature.parameters.values():
        where = f"tool {tool_name!r}, parameter {param.name!r}"
        if param.kind is param.VAR_POSITIONAL or param.kind is param.VAR_KEYWORD:
            raise ToolDefinitionError(f"{where}: *args and **kwargs cannot be tool parameters")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"{where}: positional-only parameters cannot be passed")
        if param.annotation is param.empty:
            raise ToolDefinitionError(f"{where}: missing type annotation")
        annotation = _resolve_annotation(param.name, param.annotation, globalns, where)
        if param.default is param.empty:
            fields.append((param.name, annotation))
        elif isinstance(param.default, (list, dict, set, bytearray)) and param.default:
            # msgspec refuses non-empty mutable defaults; give each call its own copy.
            factory = functools.partial(copy.deepcopy, param.default)
            fields.append((param.name, annotation, msgspec.field(default_factory=factory)))
            schema_defaults[param.name] = param.default
        else:
            fields.append((param.name, annotation, param.default))

    args_type = msgspec.defstruct(
        f"{tool_name}_arguments",
        fields,
        kw_only=True,
        module=__name__,
    )
    parameters = _object_schema(tool_name, args_type, fields)
    properties: dict[str, Any] = parameters["properties"]
    for field_name, default in schema_defaults.items():
        try:
            properties[field_name]["default"] = msgspec.to_builtins(default)
        except (TypeError, ValueError) as exc:
            raise ToolDefinitionError(
                f"tool {tool_name!r}, parameter {field_name!r}: default is not JSON: {exc}"
            ) from exc
    for field_name, text in arg_docs.items():
        if field_name in properties and text:
            properties[field_name].setdefault("description", text)

    is_async = _is_async_callable(fn)
    return ToolSpec(
        name=tool_name,
        description=summary if description is None else description,
        parameters=parameters,
        handler=fn,
        is_async=is_async,
        blocking=_check_blocking(tool_name, is_async, blocking),
        timeout=_check_timeout(tool_name, timeout),
        args_type=args_type,
        idempotent=idempotent,
    )


def _object_schema(
    tool_name: str,
    args_type: type[msgspec.Struct],
    fields: list[tuple[str, Any] | tuple[str, Any, Any]],
) -> dict[str, Any]:
    """The JSON Schema of ``args_type`` with its top-level object inlined."""
    try:
        (ref,), components = msgspec.json.schema_components([args_type])
    except (TypeError, ValueError) as exc:
        # Find the parameter at fault to name it; each one alone is cheap to check.
        for field in fields:
            probe = msgspec.defstruct("probe", [field], kw_only=True)
            try:
                msgspec.json.schema(probe)
            except (TypeError, ValueError) as field_exc:
                detail = " ".join(str(field_exc).split())
                raise ToolDefinitionError(
                    f"tool {tool_name!r}, parameter {field[0]!r}: no JSON Schema "
                    f"for its type or default: {detail}"
                ) from field_exc
        # Defensive: a type msgspec refuses is refused alone as well.
        raise ToolDefinitionError(  # pragma: no cover
            f"tool {tool_name!r}: no JSON Schema: {' '.join(str(exc).split())}"
        ) from exc
    top = components.pop(ref["$ref"].rsplit("/", 1)[-1])
    schema: dict[str, Any] = dict(_EMPTY_OBJECT_SCHEMA)
    schema["properties"] = top["properties"]
    if top.get("required"):
        schema["required"] = top["required"]
    if components:
        # Nested types keep their "#/$defs/<name>" references, valid from the root.
        schema["$defs"] = components
    return schema


def _resolve_annotation(name: str, annotation: Any, globalns: dict[str, Any], where: str) -> Any:
    """Resolve one (possibly string) annotation, keeping ``Annotated`` metadata."""
    probe = types.SimpleNamespace(__annotations__={name: annotation})
    try:
        return typing.get_type_hints(probe, globalns=globalns, include_extras=True)[name]
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: cannot resolve annotation {annotation!r}: {exc} (string "
            "annotations are resolved in the function's module globals)"
        ) from exc


def _unwrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The function behind decorators (``__wrapped__``) and ``functools.partial``."""
    while True:
        fn = inspect.unwrap(fn)
        if not isinstance(fn, functools.partial):
            return fn
        fn = fn.func


def _globals_of(target: Callable[..., Any]) -> dict[str, Any]:
    """The namespace string annotations of ``target`` are resolved in."""
    namespace = getattr(target, "__globals__", None)
    if isinstance(namespace, dict):
        return namespace
    # A callable object: its class's module.
    module = sys.modules.get(getattr(target, "__module__", None) or "")
    return vars(module) if module is not None else {}


def _is_async_callable(fn: Callable[..., Any]) -> bool:
    target = _unwrap(fn)
    if inspect.iscoroutinefunction(target):
        return True
    # A callable object: look at its class's __call__.
    return not inspect.isroutine(target) and inspect.iscoroutinefunction(type(target).__call__)


def _check_name(name: str) -> None:
    if not _NAME_PATTERN.fullmatch(name):
        raise ToolDefinitionError(
            f"invalid tool name {name!r}: use letters, digits, '_' and '-' (1 to 64 characters)"
        )


def _check_timeout(name: str, timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise ToolDefinitionError(f"tool {name!r}: timeout must be a number, got {timeout!r}")
    if not (timeout > 0 and math.isfinite(timeout)):
        raise ToolDefinitionError(f"tool {name!r}: timeout must be positive, got {timeout!r}")
    return float(timeout)


def _check_blocking(name: str, is_async: bool, blocking: bool | None) -> bool:
    if blocking is None:
        return not is_async
    if blocking and is_async:
        raise ToolDefinitionError(f"tool {name!r}: an async tool cannot be blocking")
    return blocking


_SECTION = re.compile(r"(?P<title>[A-Z][A-Za-z ]*):")
_ARG_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Keyword Args", "Keyword Arguments"})
_ARG_ENTRY = re.compile(r"\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:(?P<text>.*)")


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph and the Google-style ``Args:`` descriptions of ``doc``."""
    if not doc:
        return "", {}
    lines = doc.expandtabs().splitlines()
    summary: list[str] = []
    for line in lines:
        if not line.strip() or _SECTION.fullmatch(line.strip()):
            break
        summary.append(line.strip())

    args: dict[str, str] = {}
    section_indent: int | None = None  # indentation of the current Args: header
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if section_indent is not None and text and indent <= section_indent:
            section_indent = None  # the Args section ended
        if section_indent is None:
            header = _SECTION.fullmatch(text)
            if header and header["title"] in _ARG_SECTIONS:
                section_indent, entry_indent, current = indent, None, None
            continue
        if not text:
            continue
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            entry = _ARG_ENTRY.fullmatch(text)
            current = entry["name"] if entry else None
            if current is not None and entry is not None:
                args[current] = entry["text"].strip()
        elif current is not None:
            args[current] = f"{args[current]} {text}".strip()
    return " ".join(summary), args


# ---------------------------------------------------------------------------
# The registry


class ToolRegistry:
    """An ordered set of tools, keyed by name: filled with :meth:`register`, then frozen.

    ``registry.register(f)`` adds ``f`` to this registry and returns it, so calls
    chain (``ToolRegistry().register(a).register(b)``). The first turn that uses the
    registry freezes it (:meth:`freeze`): from then on it never changes, and
    :meth:`register` raises rather than change the tools of turns under way; build
    another one from :meth:`copy`.

    Thread safety and concurrency: a frozen registry and its specs are never mutated,
    so any number of threads and tasks may read them at once. Concurrent executions
    share nothing mutable: each decodes its own arguments and builds its own result.
    The tools themselves must be safe to call
    concurrently, with themselves and with each other: the engine runs the tool
    calls of one batch concurrently (promise 2), and a blocking sync tool may run in
    several worker threads at once.
    """

    __slots__ = ("_definitions", "_frozen", "_tools")

    def __init__(self) -> None:
        """An empty registry, open to :meth:`register`."""
        self._tools: dict[str, ToolSpec[..., Any]] = {}
        self._definitions: tuple[Tool, ...] = ()
        self._frozen = False

    @classmethod
    def of(cls, *tools: ToolSpec[..., Any] | Callable[..., Any]) -> ToolRegistry:
        """A registry holding ``tools``, in that order (see :meth:`register`)."""
        registry = cls()
        for item in tools:
            registry.register(item)
        return registry

    def register(self, tool_or_function: ToolSpec[..., Any] | Callable[..., Any], /) -> Self:
        """Add one tool to this registry, after the ones it holds.

        Args:
            tool_or_function: A :class:`ToolSpec`, or a plain function, which is
                declared with :func:`tool` (its defaults).

        Returns:
            This registry, so that calls chain.

        Raises:
            ToolDefinitionError: A tool with that name is already registered, the
                function cannot be declared as a tool, or the registry is frozen (a
                turn uses it). The registry is unchanged.
        """
        if self._frozen:
            raise ToolDefinitionError(
                "this ToolRegistry is frozen: a turn uses it, so its tools cannot change; "
                "register on registry.copy() and pass that to the next turn"
            )
        spec = (
            tool_or_function if isinstance(tool_or_function, ToolSpec) else tool(tool_or_function)
        )
        if spec.name in self._tools:
            raise ToolDefinitionError(f"a tool named {spec.name!r} is already registered")
        self._tools[spec.name] = spec
        self._definitions = (*self._definitions, spec.definition())
        return self

    def freeze(self) -> Self:
        """Refuse every later :meth:`register` (idempotent); returns this registry.

        The engine freezes the registry of every turn it starts.
        """
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        """Whether :meth:`freeze` ran: the tools never change again."""
        return self._frozen

    def copy(self) -> ToolRegistry:
        """A registry open to :meth:`register`, holding the same tools."""
        new = ToolRegistry()
        new._tools = dict(self._tools)
        new._definitions = self._definitions
        return new

    def lookup(self, name: str) -> ToolSpec[..., Any]:
        """The tool called ``name``.

        Raises:
            KeyError: No such tool; the message lists the known names.
        """
        spec = self._tools.get(name)
        if spec is None:
            raise KeyError(f"unknown tool {name!r}; known tools: {self._known()}")
        return spec

    def get(self, name: str) -> ToolSpec[..., Any] | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in registration order."""
        return tuple(self._tools)

    def definitions(self) -> tuple[Tool, ...]:
        """The wire declarations (``RunAgentInput.tools``), in registration order.

        Computed as each tool is registered, not per call.
        """
        return self._definitions

    def unknown(self, name: str) -> ToolResult:
        """The failure the model sees for a call to a tool the registry does not have."""
        return ToolResult.failure(f"Unknown tool {name!r}. Available tools: {self._known()}.")

    def _known(self) -> str:
        return ", ".join(self._tools) if self._tools else "(none)"

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[ToolSpec[..., Any]]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"
