"""JSON encoding and decoding of AG-UI wire types: the protocol's one error boundary.

Strategy: every decoder is built once, at import, and the fast path of
:func:`decode_event` is a single typed ``msgspec.json.Decoder(Event)`` call, with no
intermediate ``dict``. Only when that call fails does the slow path run, to explain the
failure (AG-UI gives no other way to tell "unknown event" from "broken event"):

1. Decode a one-field envelope ``{"type": str}``. msgspec cannot fall back to a default
   type on an unknown tag, so this is how an unknown ``type`` is told apart. If the
   envelope does not decode either, the payload is not a JSON object with a string
   ``type``: :class:`~toolrelay.MalformedEventError`.
2. An unknown ``type`` becomes :class:`UnknownEvent` carrying the payload's bytes as
   received; the caller decides whether to skip it.
3. A known ``type`` with a bad body is :class:`~toolrelay.InvalidEventError`,
   carrying the event type and the JSON path msgspec reports (``"$.delta"``; for a missing
   field, the path of the field itself: ``"$.toolCallId"``).

The slow path also reads snake_case field names (through "mirror" Structs built on
first use) and turns hostile bytes (deep nesting, invalid UTF-8, lone surrogate
escapes) into typed errors or a replaced character; docs/protocol.md, "Reading
(liberal)", gives the reasons and the limits accepted.

Every msgspec exception is translated here and chained (``raise ... from exc``); nothing
else in toolrelay sees one.
"""

from __future__ import annotations

import functools
import operator
import re
import types
import typing
from collections.abc import Callable
from typing import Any, TypeVar, Union

import msgspec

from toolrelay._errors import InvalidEventError, MalformedEventError

from ._event_base import EVENT_TYPES, UnknownEvent
from ._events import Event
from ._messages import Message
from ._run_input import RunAgentInput

__all__ = (
    "decode_event",
    "decode_known_event",
    "decode_message",
    "decode_messages",
    "decode_run_input",
    "encode",
    "encode_event",
    "repair_surrogates",
)

_T = TypeVar("_T")

_Data = bytes | bytearray | memoryview | str  # what the decoders accept


class _Envelope(msgspec.Struct):
    """The least an event must be: a JSON object with a string ``type``."""

    type: str


_EVENT_DECODER: msgspec.json.Decoder[Event] = msgspec.json.Decoder(Event)
_decode_typed = _EVENT_DECODER.decode  # bound once: the fast path is this one call

#: The fast path of :func:`decode_event` on its own, for a transport's per-event loop:
#: msgspec's typed decoder (one C call, no Python frame). It raises
#: ``msgspec.MsgspecError`` wherever :func:`decode_event` would do anything else
#: (an unknown type, snake_case, an error to explain); the caller then calls
#: :func:`decode_event` with the same payload for the answer::
#:
#:     try:
#:         event = decode_known_event(data)
#:     except msgspec.MsgspecError:
#:         event = decode_event(data)
decode_known_event: Callable[[_Data], Event] = _decode_typed
_ENVELOPE_DECODER = msgspec.json.Decoder(_Envelope)
_RUN_INPUT_DECODER = msgspec.json.Decoder(RunAgentInput)
_MESSAGE_DECODER: msgspec.json.Decoder[Message] = msgspec.json.Decoder(Message)
_MESSAGES_DECODER = msgspec.json.Decoder(list[Message])
_ENCODER = msgspec.json.Encoder()

_EXCERPT_CHARS = 80  # of a malformed payload, quoted in the error
_MISSING_FIELD = re.compile(r"Object missing required field `(?P<name>[^`]+)`")


# --- public functions --------------------------------------------------------------------


def decode_event(data: bytes | bytearray | memoryview | str) -> Event | UnknownEvent:
    """Decode one AG-UI event from its JSON (an SSE ``data:`` payload).

    Args:
        data: The JSON of one event, as bytes or text.

    Returns:
        The event's Struct, a member of :data:`Event`; or :class:`UnknownEvent` with the
        payload's bytes when its ``type`` is not one toolrelay knows. Unknown fields of a
        known event are skipped. snake_case field names are accepted (see the module
        docstring for the limits).

    Raises:
        MalformedEventError: ``data`` is not JSON, or not a JSON object with a string
            ``type``.
        InvalidEventError: The ``type`` is known but the body does not match it (a
            missing field, a wrong type); ``event_type`` and ``field`` say where.

    Decoding is stateless: after an exception the next payload decodes as usual.
    """
    try:
        return _decode_typed(data)
    except msgspec.ValidationError as exc:
        error = exc
    except msgspec.DecodeError as exc:
        repaired = repair_surrogates(data)
        if repaired is None:
            raise _not_utf8(data) or _malformed(data, exc) from exc
        return decode_event(repaired)
    except RecursionError:
        raise _too_deep(data) from None
    except UnicodeDecodeError as exc:  # pragma: no cover - msgspec before 0.23 only
        raise _invalid_utf8(data, exc) from exc
    # The slow path, outside the except block so that its exceptions chain to `error`
    # alone and not to an implicit "during handling of the above" context as well.
    try:
        event_type = _ENVELOPE_DECODER.decode(data).type
    except msgspec.DecodeError as exc:
        raise _malformed(data, exc) from error
    except RecursionError:
        raise _too_deep(data) from None
    if event_type not in EVENT_TYPES:
        return UnknownEvent(type=event_type, raw=_as_bytes(data))
    try:
        snake: Event | None = _decode_snake_case(lambda mirrors: mirrors.event, data, error)
    except RecursionError:
        raise _too_deep(data) from None
    if snake is not None:
        return snake
    raise _invalid(event_type, error) from error


def decode_run_input(data: bytes | bytearray | memoryview | str) -> RunAgentInput:
    """Decode the body of a request that starts a run.

    Args:
        data: The JSON of a ``RunAgentInput``, as bytes or text.

    Returns:
        The :class:`RunAgentInput`. ``state``, ``tools``, ``context`` and
        ``forwardedProps`` may be absent (they default to empty); snake_case field names
        are accepted.

    Raises:
        MalformedEventError: ``data`` is not JSON.
        InvalidEventError: The JSON does not match; ``event_type`` is ``"RunAgentInput"``.
    """
    return _decode_payload(
        _RUN_INPUT_DECODER, lambda mirrors: mirrors.run_input, data, "RunAgentInput"
    )


def decode_message(data: bytes | bytearray | memoryview | str) -> Message:
    """Decode one AG-UI message.

    Args:
        data: The JSON of one message, as bytes or text.

    Returns:
        The message's Struct, chosen by its ``role``.

    Raises:
        MalformedEventError: ``data`` is not JSON.
        InvalidEventError: The JSON is not a message (an unknown ``role`` included);
            ``event_type`` is ``"Message"``.
    """
    return _decode_payload(_MESSAGE_DECODER, lambda mirrors: mirrors.message, data, "Message")


def decode_messages(data: bytes | bytearray | memoryview | str) -> list[Message]:
    """Decode a JSON array of AG-UI messages (a conversation).

    Args:
        data: The JSON array, as bytes or text.

    Returns:
        The messages, in order.

    Raises:
        MalformedEventError: ``data`` is not JSON.
        InvalidEventError: The JSON is not an array of messages; ``event_type`` is
            ``"Message"`` and ``field`` the path of the offending element
            (``"$[2].content"``).
    """
    return _decode_payload(_MESSAGES_DECODER, lambda mirrors: mirrors.messages, data, "Message")


def encode_event(event: Event | UnknownEvent) -> bytes:
    """Encode one event as JSON (camelCase; ``None`` optionals left out).

    Args:
        event: Any event; an :class:`UnknownEvent` is written back as the bytes it was
            decoded from.

    Returns:
        The JSON, as UTF-8 bytes.
    """
    if isinstance(event, UnknownEvent):
        return event.raw
    return _ENCODER.encode(event)


def encode(obj: msgspec.Struct | Any) -> bytes:
    """Encode any wire value (an event, a message, a :class:`RunAgentInput`, a list...).

    Args:
        obj: A protocol Struct, or JSON-compatible builtins containing them. An
            :class:`UnknownEvent` at the top level is written back as its raw bytes.

    Returns:
        The JSON, as UTF-8 bytes.

    Raises:
        TypeError: ``obj`` holds a value msgspec cannot encode. This is the caller's bug,
            so it is not translated into a toolrelay error.
    """
    if isinstance(obj, UnknownEvent):
        return obj.raw
    return _ENCODER.encode(obj)


# --- errors ------------------------------------------------------------------------------


def _as_bytes(data: _Data) -> bytes:
    if isinstance(data, str):
        return data.encode()
    return data if isinstance(data, bytes) else bytes(data)


def _excerpt(data: _Data) -> str:
    text = data[: _EXCERPT_CHARS + 1]
    if not isinstance(text, str):
        text = bytes(text).decode("utf-8", errors="replace")
    if len(text) > _EXCERPT_CHARS:
        text = text[:_EXCERPT_CHARS] + "..."
    return repr(text)


def _malformed(data: _Data, exc: msgspec.DecodeError) -> MalformedEventError:
    return MalformedEventError(
        f"event is not a JSON object with a string type ({exc}): {_excerpt(data)}"
    )


def _too_deep(data: _Data) -> MalformedEventError:
    return MalformedEventError(
        f"JSON nested too deeply to decode: {_excerpt(data)}", code="nesting_too_deep"
    )


def _not_utf8(data: _Data) -> MalformedEventError | None:
    """The error for ``data`` that is not UTF-8 (``None`` if it is): asked after a
    failed decode, since msgspec says so in its own words (0.23 and later) or raises
    Python's ``UnicodeDecodeError`` (before)."""
    if isinstance(data, str):
        return None  # text: its lone surrogates, if any, are repaired or malformed
    try:
        bytes(data).decode("utf-8")
    except UnicodeDecodeError as exc:
        return _invalid_utf8(data, exc)
    return None


def _invalid_utf8(data: _Data, exc: UnicodeDecodeError) -> MalformedEventError:
    return MalformedEventError(
        f"payload is not UTF-8 ({exc.reason}): {_excerpt(data)}", code="invalid_utf8"
    )


# An escaped backslash (consumed first, so that "\\ud83d" stays text), a surrogate
# pair, a lone high or a lone low surrogate escape.
_SURROGATES = re.compile(
    rb"\\\\|\\u[dD][89abAB][0-9a-fA-F]{2}(?:\\u[dD][c-fC-F][0-9a-fA-F]{2})?"
    rb"|\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _keep_pairs(match: re.Match[bytes]) -> bytes:
    text = match.group()
    return text if len(text) == 2 or len(text) == 12 else b"\\ufffd"


def repair_surrogates(data: bytes | bytearray | memoryview | str) -> bytes | None:
    """``data`` with every lone UTF-16 surrogate escape replaced by ``\\ufffd``;
    ``None`` when it has none (a payload that failed to decode for another reason).

    Linear in the payload; called only after a decode failed.
    """
    raw = _as_bytes(data)
    if b"\\u" not in raw:
        return None
    repaired = _SURROGATES.sub(_keep_pairs, raw)
    return None if repaired == raw else repaired


def _split_error(exc: msgspec.ValidationError) -> tuple[str, str]:
    """Split msgspec's ``"<detail> - at `$.path`"`` into the path and the detail.

    For a missing field the path is extended to the field itself, so that it names
    what is wrong rather than the object around it.
    """
    detail, sep, path = str(exc).rpartition(" - at `")
    if sep:
        path = path.removesuffix("`")
    else:
        detail, path = str(exc), "$"
    missing = _MISSING_FIELD.fullmatch(detail)
    if missing is not None:
        path = f"{path}.{missing['name']}"
    return path, detail


def _invalid(what: str, exc: msgspec.ValidationError) -> InvalidEventError:
    field, detail = _split_error(exc)
    return InvalidEventError(what, field, detail)


def _decode_payload(
    decoder: msgspec.json.Decoder[_T],
    snake_decoder: Callable[[_SnakeCaseMirrors], msgspec.json.Decoder[Any]],
    data: _Data,
    what: str,
) -> _T:
    try:
        return decoder.decode(data)
    except msgspec.ValidationError as exc:
        error = exc
    except msgspec.DecodeError as exc:
        repaired = repair_surrogates(data)
        if repaired is None:
            raise _not_utf8(data) or MalformedEventError(
                f"{what} is not JSON ({exc}): {_excerpt(data)}"
            ) from exc
        return _decode_payload(decoder, snake_decoder, repaired, what)
    except RecursionError:
        raise _too_deep(data) from None
    except UnicodeDecodeError as exc:  # pragma: no cover - msgspec before 0.23 only
        raise _invalid_utf8(data, exc) from exc
    try:
        snake: _T | None = _decode_snake_case(snake_decoder, data, error)
    except RecursionError:
        raise _too_deep(data) from None
    if snake is not None:
        return snake
    raise _invalid(what, error) from error


# --- snake_case: mirror Structs (see the module docstring) --------------------------------


def _decode_snake_case(
    snake_decoder: Callable[[_SnakeCaseMirrors], msgspec.json.Decoder[Any]],
    data: _Data,
    error: msgspec.ValidationError,
) -> Any:
    """Decode ``data`` as snake_case if ``error`` says a required field is missing.

    Returns:
        The real (camelCase) Structs, or ``None`` when the payload is not snake_case.
    """
    if _MISSING_FIELD.match(str(error)) is None:
        return None
    mirrors = _mirrors()
    try:
        mirrored = snake_decoder(mirrors).decode(data)
    except msgspec.DecodeError:
        return None
    return mirrors.unmirror(mirrored)


class _SnakeCaseMirrors:
    """Mirror Structs: the same fields and tags, with the Python field names on the wire.

    Only decoding uses them; :meth:`unmirror` turns what they decode into the real Structs.
    """

    def __init__(self) -> None:
        self._mirror_of: dict[type[msgspec.Struct], type[msgspec.Struct]] = {}
        self._real_of: dict[type[msgspec.Struct], type[msgspec.Struct]] = {}
        self.event = msgspec.json.Decoder(self.mirror(Event))
        self.run_input = msgspec.json.Decoder(self.mirror(RunAgentInput))
        self.message = msgspec.json.Decoder(self.mirror(Message))
        self.messages = msgspec.json.Decoder(list[self.mirror(Message)])  # type: ignore[misc]

    def mirror(self, tp: Any) -> Any:
        """``tp`` with every Struct in it replaced by its mirror."""
        if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
            return self._mirror_struct(tp)
        origin, args = typing.get_origin(tp), typing.get_args(tp)
        if origin is Union or origin is types.UnionType:
            return functools.reduce(operator.or_, [self.mirror(arg) for arg in args])
        if origin is list:
            return list[self.mirror(args[0])]  # type: ignore[misc]
        if origin is dict:
            key, value = args
            return dict[key, self.mirror(value)]  # type: ignore[misc,valid-type]
        return tp  # Any, str, int, Literal[...], msgspec.UnsetType, ...

    def _mirror_struct(self, cls: type[msgspec.Struct]) -> type[msgspec.Struct]:
        mirror = self._mirror_of.get(cls)
        if mirror is None:
            fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
            for info in msgspec.structs.fields(cls):
                if info.default is not msgspec.NODEFAULT:
                    fields.append((info.name, self.mirror(info.type), info.default))
                elif info.default_factory is not msgspec.NODEFAULT:
                    factory = msgspec.field(default_factory=info.default_factory)
                    fields.append((info.name, self.mirror(info.type), factory))
                else:
                    fields.append((info.name, self.mirror(info.type)))
            config = cls.__struct_config__
            mirror = msgspec.defstruct(
                f"SnakeCase{cls.__name__}",
                fields,
                kw_only=True,
                tag_field=config.tag_field,
                tag=config.tag,
                # ``from_`` (JSON Patch) is ``from`` in both spellings, as in pydantic's dump.
                rename=lambda name: name.rstrip("_"),
                module=__name__,
            )
            self._mirror_of[cls] = mirror
            self._real_of[mirror] = cls
        return mirror

    def unmirror(self, value: Any) -> Any:
        """The real Structs rebuilt from a decoded mirror (Structs sit in fields and lists)."""
        real = self._real_of.get(type(value))
        if real is not None:
            fields = value.__struct_fields__
            return real(**{name: self.unmirror(getattr(value, name)) for name in fields})
        if type(value) is list:
            return [self.unmirror(item) for item in value]
        return value


@functools.cache
def _mirrors() -> _SnakeCaseMirrors:
    return _SnakeCaseMirrors()
