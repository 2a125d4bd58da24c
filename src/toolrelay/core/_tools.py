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
encoded all become failures (promise 2: the model sees every outcome). Whatever
the model sends and whatever the tool gives back is bounded: arguments nested past
the decoder's depth, a result that is cyclic, too deep or larger than
``max_result_bytes``, an exception whose ``__str__`` raises, each become a failure
of that call alone (promise 11).

What the model never sets: a parameter annotated :class:`ToolContext` (the engine
injects it) and an argument bound with :func:`functools.partial` are left out of the
schema, and a call whose arguments name one of them is refused.

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
    "DEFAULT_MAX_RESULT_BYTES",
    "ToolContext",
    "ToolError",
    "ToolRegistry",
    "ToolResult",
    "ToolSpec",
    "tool",
)

P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
D = TypeVar("D", covariant=True)

#: The default bound on a result's size (UTF-8 bytes of the text the model sees).
DEFAULT_MAX_RESULT_BYTES = 1_000_000

#: The most characters of an exception's text sent to the model.
_MAX_ERROR_CHARS = 2_000

#: Tool names the major providers all accept (OpenAI, Anthropic, Google).
_NAME_PATTERN = re.compile(r"[A-Za-z0-9_-]{1,64}")

#: The schema of a tool without parameters.
_EMPTY_OBJECT_SCHEMA: dict[str, Any] = {"type": "object", "properties": {}}


# ---------------------------------------------------------------------------
# Results


class ToolResult(msgspec.Struct, frozen=True, dict=True):
    """The outcome of one tool call, as the model will see it.

    A failure's :attr:`content` is the JSON object ``{"error": "<message>"}`` (the
    text sent to the model); :attr:`error` holds the bare message. Build results with
    :meth:`success` and :meth:`failure` to keep that convention.

    Attributes:
        content: The text sent to the model in the ``tool`` message.
        error: The error message for a failure, ``None`` for a success.
    The exception a tool raised stays on its failure (:attr:`exception`), for the
    embedding code; it is not a field: never encoded, stored or compared.
    """

    content: str
    error: str | None = None

    @property
    def exception(self) -> BaseException | None:
        """The exception the tool raised, for the embedding code (logs, error
        reports); ``None`` when there is none or the result was decoded. Never sent
        to the model, never encoded."""
        exc: BaseException | None = self.__dict__.get("_exception")
        return exc

    @property
    def ok(self) -> bool:
        """``True`` for a success, ``False`` for a failure."""
        return self.error is None

    @classmethod
    def success(cls, content: str) -> ToolResult:
        """A successful result whose text is ``content``."""
        return cls(content)

    @classmethod
    def failure(cls, message: str, *, exception: BaseException | None = None) -> ToolResult:
        """A failed result: the model receives ``{"error": message}`` as JSON text;
        ``exception`` (the tool's own, if any) stays on the result."""
        result = cls(msgspec.json.encode({"error": message}).decode(), error=message)
        if exception is not None:
            msgspec.structs.force_setattr(result, "_exception", exception)
        return result


class ToolError(Exception):
    """Raised by a tool to send a clean error message to the model.

    The model receives the message alone; for any other exception it receives
    ``"<ExceptionType>: <message>"``.
    """


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolContext(Generic[D]):
    """What the engine tells a tool about the call it runs; the model never sets it.

    Annotate one parameter of a tool with ``ToolContext[YourDeps]`` and the engine
    passes it in: it is left out of the JSON Schema the model sees, and a call whose
    arguments name it is refused. ``deps`` is what the embedding code gave
    (``Engine(tool_context=...)``, or ``start_turn(..., tool_context=...)`` for one
    turn): the user, a database session, permissions, without globals.

    Attributes:
        deps: The embedding code's object (``None`` when it gave none).
        thread_id: The thread of the turn.
        run_id: The run whose call this is.
        tool_call_id: The call's ``toolCallId``.
        tool_name: The tool called.
    """

    deps: D
    thread_id: str = ""
    run_id: str | None = None
    tool_call_id: str = ""
    tool_name: str = ""


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
                    f"Invalid arguments for tool {self.name!r}: {_validation_text(exc, field_name)}"
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
        return _to_result(self.name, value, max_bytes)

    @staticmethod
    def failure_of(exc: BaseException, *, detail: bool = True) -> ToolResult:
        """The result the model sees for an exception the handler raised.

        A :class:`ToolError` sends its message alone; any other exception
        ``"<ExceptionType>: <message>"`` (its text cut at 2000 characters), or, with
        ``detail=False``, a generic message that tells the model nothing of the
        tool's internals. The exception stays on the result (:attr:`ToolResult.exception`).
        Never raises, even when the exception's ``__str__`` does.
        """
        kind = type(exc).__name__
        try:
            text = str(exc)
        except Exception:
            text = "<the exception's message could not be read>"
        if len(text) > _MAX_ERROR_CHARS:
            text = f"{text[:_MAX_ERROR_CHARS]}... ({len(text) - _MAX_ERROR_CHARS} characters cut)"
        if isinstance(exc, ToolError):
            return ToolResult.failure(text or kind, exception=exc)
        if not detail:
            return ToolResult.failure("The tool failed.", exception=exc)
        return ToolResult.failure(f"{kind}: {text}" if text else kind, exception=exc)


def _validation_text(exc: Exception, field_name: str) -> str:
    """One line per problem of a (pydantic) validation error, with its path."""
    errors = getattr(exc, "errors", None)
    if callable(errors):
        try:
            items = errors(include_url=False)
            return "; ".join(
                f"{item['msg']} - at `$.{'.'.join(map(str, (field_name, *item['loc'])))}`"
                for item in items
            )
        except Exception:  # pragma: no cover - not pydantic's shape after all
            pass
    return f"{type(exc).__name__}: {exc} - at `$.{field_name}`"


def _encode_hook(value: Any) -> Any:
    """What msgspec cannot encode itself: a pydantic model, as its JSON data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and _is_pydantic_model(type(value)):
        return dump(mode="json")
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def _to_result(name: str, value: object, max_bytes: int) -> ToolResult:
    """Turn a handler's return value into the text the model sees (never raises)."""
    if isinstance(value, ToolResult):
        content: object = value.content  # a Struct does not check its fields' types
        error: object = value.error
        if not isinstance(content, str) or not isinstance(error, str | None):
            return ToolResult.failure(
                f"tool {name!r} returned a ToolResult whose content or error is not a str"
            )
        result = value
    elif isinstance(value, str):
        # str.__str__ copies a subclass without calling its own __str__.
        result = ToolResult.success(str.__str__(value))
    elif value is None:
        result = ToolResult.success("")
    else:
        try:
            result = ToolResult.success(msgspec.json.encode(value, enc_hook=_encode_hook).decode())
        except RecursionError:
            return ToolResult.failure(
                f"The result of tool {name!r} cannot be encoded as JSON: it is cyclic "
                "or nested too deeply"
            )
        except Exception as exc:
            detail = ToolSpec.failure_of(exc).error
            return ToolResult.failure(
                f"The result of tool {name!r} cannot be encoded as JSON: {detail}"
            )
    size = _utf8_size(result.content, max_bytes)
    if size > max_bytes:
        return ToolResult.failure(
            f"The result of tool {name!r} is too large: more than {max_bytes} bytes "
            "(the engine's max_result_bytes)"
        )
    return result


def _utf8_size(text: str, bound: int) -> int:
    """The UTF-8 size of ``text``, or some size past ``bound`` when it is past it."""
    if len(text) > bound:
        return len(text)  # at least one byte per character
    if 4 * len(text) <= bound:
        return len(text)  # at most four bytes per character: under the bound anyway
    return len(text.encode("utf-8", "surrogatepass"))


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
    bound = _bound_keywords(fn)
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    schema_defaults: dict[str, Any] = {}
    # Per pydantic-typed parameter: its TypeAdapter (schema and validation).
    adapters: dict[str, Any] = {}
    context_parameter: str | None = None
    for param in signature.parameters.values():
        where = f"tool {tool_name!r}, parameter {param.name!r}"
        if param.name in bound:
            continue  # bound with functools.partial: never the model's to set
        if param.kind is param.VAR_POSITIONAL or param.kind is param.VAR_KEYWORD:
            raise ToolDefinitionError(f"{where}: *args and **kwargs cannot be tool parameters")
        if param.kind is param.POSITIONAL_ONLY:
            raise ToolDefinitionError(f"{where}: positional-only parameters cannot be passed")
        if param.annotation is param.empty:
            raise ToolDefinitionError(f"{where}: missing type annotation")
        annotation = _resolve_annotation(param.name, param.annotation, globalns, where)
        if _is_context(annotation):
            if context_parameter is not None:
                raise ToolDefinitionError(
                    f"{where}: only one parameter can take the ToolContext "
                    f"({context_parameter!r} already does)"
                )
            context_parameter = param.name
            continue
        if _mentions_pydantic(annotation):
            adapters[param.name] = _pydantic_adapter(annotation, where)
            annotation = Any
        if param.default is param.empty:
            fields.append((param.name, annotation))
        elif (
            isinstance(param.default, (list, dict, set, bytearray)) and param.default
        ) or _is_pydantic_model(type(param.default)):
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
    for field_name, adapter in adapters.items():
        _merge_pydantic_schema(tool_name, field_name, adapter, parameters)
    for field_name, default in schema_defaults.items():
        try:
            if field_name in adapters:
                properties[field_name]["default"] = adapters[field_name].dump_python(
                    default, mode="json"
                )
            else:
                properties[field_name]["default"] = msgspec.to_builtins(default)
        except Exception as exc:
            raise ToolDefinitionError(
                f"tool {tool_name!r}, parameter {field_name!r}: default is not JSON: {exc}"
            ) from exc
    for field_name, text in arg_docs.items():
        if field_name in properties and text:
            properties[field_name].setdefault("description", text)

    hidden = frozenset(bound) | ({context_parameter} if context_parameter else frozenset())
    decode_type = args_type
    if hidden:
        # The same fields, plus one per hidden parameter: a model that names one is
        # caught (msgspec ignores unknown fields).
        decode_type = msgspec.defstruct(
            f"{tool_name}_arguments_checked",
            [*fields, *((n, Any, msgspec.UNSET) for n in sorted(hidden))],
            kw_only=True,
            module=__name__,
        )

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
        context_parameter=context_parameter,
        hidden=hidden,
        needs_approval=bool(needs_approval),
        _decode_type=decode_type,
        _validators=tuple(
            (field_name, adapter.validate_python) for field_name, adapter in adapters.items()
        ),
        idempotent=idempotent,
    )


def _bound_keywords(fn: Callable[..., Any]) -> set[str]:
    """The arguments bound by keyword with :func:`functools.partial` (through
    decorators): the signature keeps them, with their bound value as a default."""
    names: set[str] = set()
    while True:
        fn = inspect.unwrap(fn)
        if not isinstance(fn, functools.partial):
            return names
        names.update(fn.keywords)
        fn = fn.func


def _strip_annotated(annotation: Any) -> Any:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation


def _is_context(annotation: Any) -> bool:
    """Whether ``annotation`` is ``ToolContext`` or ``ToolContext[X]``."""
    annotation = _strip_annotated(annotation)
    return annotation is ToolContext or typing.get_origin(annotation) is ToolContext


def _is_pydantic_model(cls: Any) -> bool:
    """Whether ``cls`` is a pydantic model class (pydantic stays optional: a model
    class exists only if its user imported pydantic)."""
    pydantic = sys.modules.get("pydantic")
    base = getattr(pydantic, "BaseModel", None)
    return isinstance(cls, type) and base is not None and issubclass(cls, base)


def _mentions_pydantic(annotation: Any) -> bool:
    """Whether a pydantic model appears anywhere in ``annotation`` (``Model``,
    ``Model | None``, ``list[Model]``, ``Annotated[Model, ...]``)."""
    if _is_pydantic_model(annotation):
        return True
    return any(_mentions_pydantic(arg) for arg in typing.get_args(annotation))


def _pydantic_adapter(annotation: Any, where: str) -> Any:
    """A pydantic ``TypeAdapter`` for ``annotation``: its JSON Schema and validator."""
    import pydantic  # present: a model class of it is in the annotation

    try:
        adapter = pydantic.TypeAdapter(annotation)
        adapter.json_schema()
    except Exception as exc:
        raise ToolDefinitionError(
            f"{where}: pydantic cannot describe its type as JSON Schema: {exc}"
        ) from exc
    return adapter


def _merge_pydantic_schema(
    tool_name: str, field_name: str, adapter: Any, parameters: dict[str, Any]
) -> None:
    """Put a pydantic parameter's schema in ``parameters``, its definitions beside
    msgspec's (both refer to them as ``#/$defs/<name>``)."""
    schema: dict[str, Any] = dict(adapter.json_schema(ref_template="#/$defs/{model}"))
    definitions: dict[str, Any] = schema.pop("$defs", {})
    existing: dict[str, Any] = parameters.setdefault("$defs", {})
    for def_name, definition in definitions.items():
        if def_name in existing and existing[def_name] != definition:
            raise ToolDefinitionError(
                f"tool {tool_name!r}, parameter {field_name!r}: two different types are "
                f"named {def_name!r} in its schema; rename one"
            )
        existing[def_name] = definition
    if not existing:
        del parameters["$defs"]
    parameters["properties"][field_name] = schema


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
_UNDERLINE = re.compile(r"-{3,}")
_NUMPY_ENTRY = re.compile(r"\*{0,2}(?P<name>\w+)\s*(?::.*)?")
_REST_FIELD = re.compile(
    r":(?P<kind>\w+)(?:\s+[^:]*?)?\s+\*{0,2}(?P<name>\w+):(?P<text>.*)|:\w+:.*"
)
_REST_PARAM_KINDS = frozenset({"param", "parameter", "arg", "argument", "key", "keyword"})


def _parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph of ``doc`` and its parameter descriptions, from a
    Google-style ``Args:`` section, reST ``:param name:`` fields or a NumPy
    ``Parameters`` section (whichever it uses)."""
    if not doc:
        return "", {}
    lines = doc.expandtabs().splitlines()
    summary: list[str] = []
    for index, line in enumerate(lines):
        text = line.strip()
        if (
            not text
            or _SECTION.fullmatch(text)
            or text.startswith(":")
            or _is_underline(lines, index + 1)
        ):
            break
        summary.append(text)
    args = _google_args(lines)
    args.update({k: v for k, v in _numpy_args(lines).items() if k not in args})
    args.update({k: v for k, v in _rest_args(lines).items() if k not in args})
    return " ".join(summary), args


def _is_underline(lines: list[str], index: int) -> bool:
    """Whether ``lines[index]`` underlines a NumPy section title (``-----``)."""
    return index < len(lines) and _UNDERLINE.fullmatch(lines[index].strip()) is not None


def _google_args(lines: list[str]) -> dict[str, str]:
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
    return args


def _numpy_args(lines: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    inside = False
    section_indent = 0
    current: str | None = None
    for index, line in enumerate(lines):
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if _is_underline(lines, index + 1):  # a section title
            inside = text in _ARG_SECTIONS
            section_indent, current = indent, None
            continue
        if not inside or not text or _UNDERLINE.fullmatch(text):
            continue
        if indent <= section_indent:
            entry = _NUMPY_ENTRY.fullmatch(text)
            current = entry["name"] if entry else None
            if current is not None:
                args[current] = ""
        elif current is not None:
            args[current] = f"{args[current]} {text}".strip()
    return args


def _rest_args(lines: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    current: str | None = None
    field_indent = 0
    for line in lines:
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        field = _REST_FIELD.fullmatch(text)
        if field is not None:
            current = field["name"] if field["kind"] in _REST_PARAM_KINDS else None
            field_indent = indent
            if current is not None:
                args[current] = field["text"].strip()
        elif current is not None and text and indent > field_indent:
            args[current] = f"{args[current]} {text}".strip()
        elif text:
            current = None
    return args


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

    __slots__ = ("_approval", "_definitions", "_frozen", "_tools")

    def __init__(self) -> None:
        """An empty registry, open to :meth:`register`."""
        self._tools: dict[str, ToolSpec[..., Any]] = {}
        self._definitions: tuple[Tool, ...] = ()
        self._approval: frozenset[str] = frozenset()
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
        if spec.needs_approval:
            self._approval = self._approval | {spec.name}
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
        new._approval = self._approval
        return new

    @property
    def needing_approval(self) -> frozenset[str]:
        """The names of the tools whose calls wait for approval (``needs_approval``).

        Kept as each tool is registered: every turn's processor shares the one set.
        """
        return self._approval

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
