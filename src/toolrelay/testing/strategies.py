"""Hypothesis strategies for the AG-UI wire types of :mod:`toolrelay.protocol`.

Every strategy builds Structs, never dicts. The values are valid AG-UI 1.0 as the official
SDK checks it (roles and subtypes from their closed sets, JSON Pointers that parse,
timestamps and token counts in range, at least one interrupt), so they can be sent to a
real peer as well as round-tripped through our own codec. Strings, lists and JSON values
are kept small, for fast tests.

The field strategies are derived from each Struct's declared field types, with a short
table of overrides where AG-UI constrains a field more than its type does. A field added
to a wire type is therefore generated without touching this module; a field of a new kind
of type makes :func:`wire_structs` raise ``TypeError`` until it is taught that type.

Example::

    @given(event=events())
    def test_round_trip(event: Event) -> None:
        assert decode_event(encode_event(event)) == event
"""

from __future__ import annotations

import functools
import string
import types
import typing
from typing import Any, Literal, TypeVar, Union

import msgspec
from hypothesis import strategies as st
from msgspec import UNSET, UnsetType

from toolrelay.protocol import (
    LEGACY_EVENT_TYPES,
    AddOperation,
    AguiEvent,
    CopyOperation,
    Event,
    Interrupt,
    Message,
    MoveOperation,
    ReasoningEncryptedValueEvent,
    ReasoningMessageStartEvent,
    RemoveOperation,
    ReplaceOperation,
    RunAgentInput,
    RunFinishedInterruptOutcome,
    TestOperation,
    TextMessageChunkEvent,
    TextMessageStartEvent,
    TokenUsage,
    Tool,
    ToolCall,
    ToolCallResultEvent,
)

__all__ = (
    "event_of",
    "events",
    "json_values",
    "messages",
    "run_agent_inputs",
    "tools",
    "wire_structs",
)

S = TypeVar("S", bound=msgspec.Struct)
E = TypeVar("E", bound=AguiEvent)

_MAX_ITEMS = 3
_MAX_SAFE_INT = 2**53 - 1  # JSON numbers round-trip exactly up to here (AG-UI's bound)

_texts = st.text(max_size=8)
_ints = st.integers(-_MAX_SAFE_INT, _MAX_SAFE_INT)
_counts = st.none() | st.integers(0, _MAX_SAFE_INT)
_json_pointers = st.lists(
    st.text(alphabet=string.ascii_letters + string.digits, max_size=4), max_size=3
).map(lambda tokens: "".join(f"/{token}" for token in tokens))


def json_values() -> st.SearchStrategy[Any]:
    """Small JSON values: ``null``, booleans, safe integers, finite floats, strings,
    and lists and objects of them."""
    scalars = (
        st.none()
        | st.booleans()
        | _ints
        | st.floats(allow_nan=False, allow_infinity=False)
        | _texts
    )
    return st.recursive(
        scalars,
        lambda children: (
            st.lists(children, max_size=_MAX_ITEMS)
            | st.dictionaries(_texts, children, max_size=_MAX_ITEMS)
        ),
        max_leaves=6,
    )


_json_objects = st.deferred(lambda: st.dictionaries(_texts, json_values(), max_size=_MAX_ITEMS))


def _overrides() -> dict[tuple[type[msgspec.Struct], str], st.SearchStrategy[Any]]:
    """Fields AG-UI constrains beyond their declared type (we accept more than we send)."""
    text_roles = st.none() | st.sampled_from(["developer", "system", "assistant", "user"])
    table: dict[tuple[type[msgspec.Struct], str], st.SearchStrategy[Any]] = {
        (TextMessageStartEvent, "role"): text_roles,
        (TextMessageChunkEvent, "role"): text_roles,
        (ToolCallResultEvent, "role"): st.none() | st.just("tool"),
        (ReasoningMessageStartEvent, "role"): st.just("reasoning"),
        (ReasoningEncryptedValueEvent, "subtype"): st.sampled_from(["tool-call", "message"]),
        (ToolCall, "type"): st.just("function"),
        # The SDK reads a null state, forwardedProps or parameters as absent; peers send
        # objects (a JSON Schema, for parameters).
        (RunAgentInput, "state"): _json_objects,
        (RunAgentInput, "forwarded_props"): _json_objects,
        (Tool, "parameters"): _json_objects,
        (RunFinishedInterruptOutcome, "interrupts"): st.lists(
            st.deferred(lambda: wire_structs(Interrupt)), min_size=1, max_size=2
        ),
    }
    for info in msgspec.structs.fields(TokenUsage):
        if info.type == int | None:
            table[TokenUsage, info.name] = _counts
    for operation in (
        AddOperation,
        RemoveOperation,
        ReplaceOperation,
        MoveOperation,
        CopyOperation,
        TestOperation,
    ):
        table[operation, "path"] = _json_pointers
    table[MoveOperation, "from_"] = _json_pointers
    table[CopyOperation, "from_"] = _json_pointers
    return table


_OVERRIDES = functools.cache(_overrides)


def _for_type(tp: Any) -> st.SearchStrategy[Any]:
    """A strategy for values of the declared field type ``tp``."""
    if tp is Any:
        return json_values()
    if tp is str:
        return _texts
    if tp is int:
        return _ints
    if tp is bool:
        return st.booleans()
    if tp is types.NoneType:
        return st.none()
    if tp is UnsetType:
        return st.just(UNSET)
    if isinstance(tp, type) and issubclass(tp, msgspec.Struct):
        return wire_structs(tp)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is Union or origin is types.UnionType:
        if UnsetType in args:
            # A field that may be UNSET is absent rather than null when it has no value.
            args = tuple(arg for arg in args if arg is not types.NoneType)
        return st.one_of(*(_for_type(arg) for arg in args))
    if origin is list:
        return st.lists(_for_type(args[0]), max_size=_MAX_ITEMS)
    if origin is dict:
        return st.dictionaries(_texts, _for_type(args[1]), max_size=_MAX_ITEMS)
    if origin is Literal:
        return st.sampled_from(args)
    raise TypeError(f"no strategy for wire field type {tp!r}")


_STRUCTS: dict[type[msgspec.Struct], st.SearchStrategy[Any]] = {}


def wire_structs(cls: type[S]) -> st.SearchStrategy[S]:
    """Instances of the wire Struct ``cls`` (an event, a message, a nested shape).

    Args:
        cls: Any Struct type of :mod:`toolrelay.protocol`.

    Raises:
        TypeError: ``cls`` has a field of a type this module cannot generate.
    """
    strategy: st.SearchStrategy[S] | None = _STRUCTS.get(cls)
    if strategy is None:
        overrides = _OVERRIDES()
        fields = {
            info.name: (
                overrides[cls, info.name] if (cls, info.name) in overrides else _for_type(info.type)
            )
            for info in msgspec.structs.fields(cls)
        }
        strategy = _STRUCTS[cls] = st.builds(cls, **fields)
    return strategy


def event_of(cls: type[E]) -> st.SearchStrategy[E]:
    """Events of the one type ``cls`` (``event_of(ToolCallArgsEvent)``)."""
    return wire_structs(cls)


def events(*, legacy: bool = True) -> st.SearchStrategy[Event]:
    """Events of every known type.

    Args:
        legacy: Include the ag-ui-protocol 0.1.x ``THINKING_*`` events, which AG-UI 1.0
            peers do not accept.
    """
    classes = [
        cls
        for cls in typing.get_args(Event)
        if legacy or cls.__struct_config__.tag not in LEGACY_EVENT_TYPES
    ]
    return st.one_of(*(wire_structs(cls) for cls in classes))


def messages() -> st.SearchStrategy[Message]:
    """Messages of every role."""
    return st.one_of(*(wire_structs(cls) for cls in typing.get_args(Message)))


def run_agent_inputs() -> st.SearchStrategy[RunAgentInput]:
    """Requests that start a run."""
    return wire_structs(RunAgentInput)


def tools() -> st.SearchStrategy[Tool]:
    """Tool definitions (their ``parameters`` a JSON object, as a JSON Schema is)."""
    return wire_structs(Tool)
