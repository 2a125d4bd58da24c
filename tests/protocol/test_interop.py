"""The official ``ag-ui-protocol`` SDK is a real peer: it reads what we write, we read it.

For generated values of every wire type, our JSON is validated by the SDK's pydantic
models and compared field for field with what they hold; the SDK's JSON (camelCase, and
the snake_case of ``model_dump_json()``) decodes back to an equal Struct. The legacy
``THINKING_*`` events are left out: AG-UI 1.0, which this SDK speaks, removed them.
"""

from __future__ import annotations

import typing
from typing import Any

import ag_ui.core as agui
import msgspec
import pydantic
import pytest
from hypothesis import given, settings, strategies as st

from toolrelay import InvalidEventError, protocol
from toolrelay.protocol import (
    EVENT_TYPES,
    LEGACY_EVENT_TYPES,
    AguiEvent,
    Event,
    Message,
    RunAgentInput,
    decode_event,
    decode_message,
    decode_run_input,
    encode,
    encode_event,
)
from toolrelay.testing.strategies import event_of, messages, run_agent_inputs

SDK_EVENT: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(agui.Event)
SDK_MESSAGE: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(agui.Message)

CURRENT_EVENT_CLASSES = [
    cls for cls in typing.get_args(Event) if cls.__struct_config__.tag not in LEGACY_EVENT_TYPES
]


#: Required in the SDK, optional (UNSET when absent) in ours: ag-ui-protocol 0.1.x
#: encoders dropped them when null (``exclude_none=True``), and a client must read that.
RELAXED = frozenset(
    {("CustomEvent", "value"), ("RawEvent", "event"), ("StateSnapshotEvent", "snapshot")}
)


def sdk_view(obj: Any) -> Any:
    """What the SDK's ``model_dump(by_alias=True, mode="json")`` holds for our value.

    The SDK leaves out an optional field with no value and writes every other field,
    defaults included (``"role": "reasoning"``, ``"type": "function"``); tags are fields
    there.
    """
    if isinstance(obj, msgspec.Struct):
        config = obj.__struct_config__
        view: dict[str, Any] = {}
        if config.tag_field is not None:
            view[config.tag_field] = config.tag
        for info in msgspec.structs.fields(obj):
            value = getattr(obj, info.name)
            required = info.required or (type(obj).__name__, info.name) in RELAXED
            if value is msgspec.UNSET or (value is None and not required):
                continue
            view[info.encode_name] = sdk_view(value)
        return view
    if isinstance(obj, list):
        return [sdk_view(item) for item in obj]
    if isinstance(obj, dict):
        return {key: sdk_view(value) for key, value in obj.items()}
    return obj


def has_required_compound_field(cls: type[msgspec.Struct]) -> bool:
    """Whether snake_case JSON of ``cls`` is told apart from camelCase (see ``_codec``)."""
    return any(
        info.required and info.name != info.encode_name for info in msgspec.structs.fields(cls)
    )


# --- the type vocabulary -------------------------------------------------------------------


def test_every_sdk_event_type_is_a_type_we_know() -> None:
    # A protocol upgrade that adds an event type fails here, loudly.
    sdk_types = {member.value for member in agui.EventType}

    assert sdk_types <= EVENT_TYPES
    assert EVENT_TYPES - sdk_types == LEGACY_EVENT_TYPES


@pytest.mark.parametrize(
    "sdk_cls", typing.get_args(typing.get_args(agui.Event)[0]), ids=lambda cls: cls.__name__
)
def test_each_sdk_event_class_has_a_namesake_with_the_same_tag(sdk_cls: Any) -> None:
    ours = getattr(protocol, sdk_cls.__name__)

    assert issubclass(ours, AguiEvent)
    assert ours.__struct_config__.tag == sdk_cls.model_fields["type"].default.value


@pytest.mark.parametrize(
    "sdk_cls", typing.get_args(typing.get_args(agui.Message)[0]), ids=lambda cls: cls.__name__
)
def test_each_sdk_message_class_has_a_namesake_with_the_same_role(sdk_cls: Any) -> None:
    ours = getattr(protocol, sdk_cls.__name__)

    assert ours.__struct_config__.tag == sdk_cls.model_fields["role"].default


@pytest.mark.parametrize("cls", CURRENT_EVENT_CLASSES, ids=lambda cls: cls.__name__)
def test_our_fields_are_the_sdk_fields(cls: type[AguiEvent]) -> None:
    sdk_cls = getattr(agui, cls.__name__)
    sdk_fields = {
        name: field.is_required() for name, field in sdk_cls.model_fields.items() if name != "type"
    }

    ours = {
        info.name: info.required or (cls.__name__, info.name) in RELAXED
        for info in msgspec.structs.fields(cls)
    }

    assert ours == sdk_fields


# --- events ----------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", CURRENT_EVENT_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_sdk_reads_our_event_field_for_field(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(event_of(cls))

    theirs = SDK_EVENT.validate_json(encode_event(event))

    assert type(theirs).__name__ == cls.__name__
    assert theirs.model_dump(by_alias=True, mode="json") == sdk_view(event)


@pytest.mark.parametrize("cls", CURRENT_EVENT_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_we_read_the_sdk_event_json(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(event_of(cls))
    theirs = SDK_EVENT.validate_json(encode_event(event))

    assert decode_event(theirs.model_dump_json(by_alias=True)) == event
    if has_required_compound_field(cls):
        assert decode_event(theirs.model_dump_json()) == event


@pytest.mark.parametrize("cls", CURRENT_EVENT_CLASSES, ids=lambda cls: cls.__name__)
@settings(max_examples=25)
@given(data=st.data())
def test_we_read_what_the_sdk_reads_of_its_exclude_none_json(
    cls: type[Event], data: st.DataObject
) -> None:
    # ag-ui-protocol 0.1.x encoders wrote ``exclude_none=True``, which drops a required
    # null (CUSTOM.value, STATE_SNAPSHOT.snapshot) too. The 1.0 SDK rejects that; we read
    # the fields of RELAXED as absent (UNSET), and reject the rest as the SDK does.
    event = data.draw(event_of(cls))
    sparse = SDK_EVENT.validate_json(encode_event(event)).model_dump_json(
        by_alias=True, exclude_none=True
    )

    try:
        theirs = SDK_EVENT.validate_json(sparse)
    except pydantic.ValidationError:
        relaxed = [name for owner, name in RELAXED if owner == cls.__name__]
        if relaxed and all(getattr(event, name) is None for name in relaxed):
            ours = decode_event(sparse)
            assert all(getattr(ours, name) is msgspec.UNSET for name in relaxed)
        else:
            with pytest.raises(InvalidEventError):
                decode_event(sparse)
    else:
        assert sdk_view(decode_event(sparse)) == theirs.model_dump(by_alias=True, mode="json")


def test_we_read_the_sdk_sse_encoder_payload() -> None:
    from ag_ui.encoder import EventEncoder

    frame = EventEncoder().encode(
        agui.ToolCallStartEvent(
            tool_call_id="call_1", tool_call_name="search", parent_message_id="msg_1"
        )
    )

    assert frame.startswith("data: ") and frame.endswith("\n\n")
    assert decode_event(frame.removeprefix("data: ").strip()) == protocol.ToolCallStartEvent(
        tool_call_id="call_1", tool_call_name="search", parent_message_id="msg_1"
    )


# --- messages and the run input ------------------------------------------------------------


@settings(max_examples=100)
@given(message=messages())
def test_messages_interoperate(message: Message) -> None:
    theirs = SDK_MESSAGE.validate_json(encode(message))

    assert type(theirs).__name__ == type(message).__name__
    assert theirs.model_dump(by_alias=True, mode="json") == sdk_view(message)
    assert decode_message(theirs.model_dump_json(by_alias=True)) == message


@settings(max_examples=50)
@given(run_input=run_agent_inputs())
def test_run_inputs_interoperate(run_input: RunAgentInput) -> None:
    theirs = agui.RunAgentInput.model_validate_json(encode(run_input))

    assert theirs.model_dump(by_alias=True, mode="json") == sdk_view(run_input)
    assert decode_run_input(theirs.model_dump_json(by_alias=True)) == run_input
    assert decode_run_input(theirs.model_dump_json()) == run_input


def test_sdk_tool_call_without_extras_matches_ours_byte_for_byte() -> None:
    sdk_message = agui.AssistantMessage(
        id="a",
        tool_calls=[agui.ToolCall(id="c", function=agui.FunctionCall(name="f", arguments="{}"))],
    )
    ours = protocol.AssistantMessage(
        id="a",
        tool_calls=[
            protocol.ToolCall(id="c", function=protocol.FunctionCall(name="f", arguments="{}"))
        ],
    )

    assert msgspec.json.decode(encode(ours)) == msgspec.json.decode(
        sdk_message.model_dump_json(by_alias=True)
    )
