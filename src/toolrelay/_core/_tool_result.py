"""A tool call's outcome as the model sees it: :class:`ToolResult` and its making.

Nothing on the tool's side raises out of here (promise 2: the model sees every
outcome). A return value becomes text (a ``str`` as is, anything else JSON); an
exception becomes a failure naming it. Whatever the tool gives back is bounded
(promise 11): a result that is cyclic, too deep or larger than ``max_result_bytes``,
an exception whose ``__str__`` raises, each become a failure of that call alone.
"""

from __future__ import annotations

from typing import Any

import msgspec

from toolrelay._core._tool_pydantic import is_pydantic_model

__all__ = (
    "DEFAULT_MAX_RESULT_BYTES",
    "ToolError",
    "ToolResult",
    "exception_result",
    "value_result",
)

#: The default bound on a result's size (UTF-8 bytes of the text the model sees).
DEFAULT_MAX_RESULT_BYTES = 1_000_000

#: The most characters of an exception's text sent to the model.
_MAX_ERROR_CHARS = 2_000


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


def exception_result(exc: BaseException, *, detail: bool = True) -> ToolResult:
    """The failure the model sees for ``exc`` (see ``ToolSpec.failure_of``); never raises."""
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


def _encode_hook(value: Any) -> Any:
    """What msgspec cannot encode itself: a pydantic model, as its JSON data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump) and is_pydantic_model(type(value)):
        return dump(mode="json")
    raise TypeError(f"Encoding objects of type {type(value).__name__} is unsupported")


def value_result(name: str, value: object, max_bytes: int) -> ToolResult:
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
            detail = exception_result(exc).error
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
