"""The codec: the fast typed decode, the unknown-type fallback, typed errors, encoding rules."""

from __future__ import annotations

import json
import typing
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from toolrelay import InvalidEventError, MalformedEventError, RemoteProtocolError, protocol
from toolrelay.protocol import (
    AssistantMessage,
    Context,
    Event,
    FunctionCall,
    Message,
    ResumeEntry,
    RunAgentInput,
    RunStartedEvent,
    StateDeltaEvent,
    TextMessageChunkEvent,
    Tool,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallStartEvent,
    ToolMessage,
    UnknownEvent,
    UserMessage,
    decode_event,
    decode_message,
    decode_messages,
    decode_run_input,
    encode,
    encode_event,
)
from toolrelay.testing.strategies import (
    event_of,
    events,
    messages,
    run_agent_inputs,
    tools,
    wire_structs,
)

ARGS = b'{"type":"TOOL_CALL_ARGS","toolCallId":"call_1","delta":"{\\"a\\":"}'


# --- decoding ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [ARGS, bytearray(ARGS), memoryview(ARGS), ARGS.decode()],
    ids=["bytes", "bytearray", "memoryview", "str"],
)
def test_decode_event_accepts_bytes_buffers_and_text(data: Any) -> None:
    assert decode_event(data) == ToolCallArgsEvent(tool_call_id="call_1", delta='{"a":')


def test_unknown_fields_are_ignored_at_every_level() -> None:
    event = decode_event(
        b'{"type":"RUN_STARTED","threadId":"t","runId":"r","agentVersion":"9",'
        b'"input":{"threadId":"t","runId":"r","futureField":[1],'
        b'"messages":[{"id":"u","role":"user","content":"hi","mood":"happy"}]}}'
    )

    assert event == RunStartedEvent(
        thread_id="t",
        run_id="r",
        input=RunAgentInput(
            thread_id="t", run_id="r", messages=[UserMessage(id="u", content="hi")]
        ),
    )


@pytest.mark.parametrize(
    "data",
    [b'{"type":"TOOL_CALL_PROGRESS","toolCallId":"c","percent":50}', b'{"type":""}'],
)
def test_unknown_type_becomes_unknown_event_with_the_raw_bytes(data: bytes) -> None:
    event = decode_event(data)

    assert isinstance(event, UnknownEvent)
    assert event.type == msgspec.json.decode(data)["type"]
    assert event.raw == data


def test_unknown_event_from_text_keeps_its_utf8_bytes() -> None:
    text = '{"type":"X_NEW","note":"café"}'

    event = decode_event(text)

    assert event == UnknownEvent(type="X_NEW", raw=text.encode())


def test_unknown_event_from_a_buffer_owns_its_bytes() -> None:
    buffer = bytearray(b'{"type":"X_NEW"}')

    event = decode_event(memoryview(buffer))
    buffer[2:6] = b"XXXX"

    assert isinstance(event, UnknownEvent)
    assert event.raw == b'{"type":"X_NEW"}'


def test_unknown_event_encodes_back_to_its_raw_bytes() -> None:
    data = b'{ "type" : "X_NEW",  "n": 1.50 }'
    event = decode_event(data)

    assert isinstance(event, UnknownEvent)
    assert encode_event(event) == data
    assert encode(event) == data


@pytest.mark.parametrize(
    ("data", "event_type", "field"),
    [
        (b'{"type":"TOOL_CALL_ARGS","delta":"x"}', "TOOL_CALL_ARGS", "$.toolCallId"),
        (b'{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":5}', "TOOL_CALL_ARGS", "$.delta"),
        (b'{"type":"TOOL_CALL_START","toolCallId":"c"}', "TOOL_CALL_START", "$.toolCallName"),
        (b'{"type":"RUN_STARTED","threadId":"t","runId":7}', "RUN_STARTED", "$.runId"),
        (
            b'{"type":"RUN_FINISHED","threadId":"t","runId":"r",'
            b'"outcome":{"type":"interrupt","interrupts":[{"id":"i1"}]}}',
            "RUN_FINISHED",
            "$.outcome.interrupts[0].reason",
        ),
        (
            b'{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"handoff"}}',
            "RUN_FINISHED",
            "$.outcome.type",
        ),
        (
            b'{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"1","role":"user","content":"a"},'
            b'{"id":"2","role":"tool","content":"b"}]}',
            "MESSAGES_SNAPSHOT",
            "$.messages[1].toolCallId",
        ),
        (b'{"type":"STATE_DELTA","delta":[{"op":"frobnicate"}]}', "STATE_DELTA", "$.delta[0].op"),
        (b'{"type":"TEXT_MESSAGE_CHUNK","messageId":5}', "TEXT_MESSAGE_CHUNK", "$.messageId"),
        (b'{"type":"THINKING_TEXT_MESSAGE_CONTENT"}', "THINKING_TEXT_MESSAGE_CONTENT", "$.delta"),
        (b'{"type":"CUSTOM","value":1}', "CUSTOM", "$.name"),
        (b'{"type":"RUN_ERROR","message":"m","timestamp":1.5}', "RUN_ERROR", "$.timestamp"),
    ],
)
def test_known_type_with_a_bad_body_is_invalid_event_error(
    data: bytes, event_type: str, field: str
) -> None:
    with pytest.raises(InvalidEventError) as info:
        decode_event(data)

    assert info.value.event_type == event_type
    assert info.value.field == field
    assert info.value.detail
    assert field in str(info.value)
    assert isinstance(info.value.__cause__, msgspec.ValidationError)
    assert isinstance(info.value, RemoteProtocolError)


def test_invalid_event_error_detail_is_msgspecs_message_without_the_path() -> None:
    with pytest.raises(InvalidEventError) as info:
        decode_event(b'{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":5}')

    assert info.value.detail == "Expected `str`, got `int`"


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b"",
        b'{"type":"TOOL_CALL_ARGS","toolCallId":"c"',
        b'[{"type":"TOOL_CALL_END","toolCallId":"c"}]',
        b'"TOOL_CALL_END"',
        b"null",
        b'{"toolCallId":"c"}',
        b'{"type":7}',
        b'{"type":null}',
        b'{"type":"TOOL_CALL_END","toolCallId":"c"} trailing',
    ],
)
def test_payload_that_is_not_an_object_with_a_string_type_is_malformed(data: bytes) -> None:
    with pytest.raises(MalformedEventError) as info:
        decode_event(data)

    assert isinstance(info.value.__cause__, msgspec.DecodeError)
    assert repr(data.decode()[:80]) in str(info.value)


def test_malformed_error_quotes_only_an_excerpt_of_a_long_payload() -> None:
    data = b"<html>" + b"x" * 10_000

    with pytest.raises(MalformedEventError) as info:
        decode_event(data)

    message = str(info.value)
    assert "<html>xxx" in message
    assert len(message) < 300


def test_decoding_goes_on_after_an_error() -> None:
    with pytest.raises(MalformedEventError):
        decode_event(b"{")

    assert decode_event(ARGS) == ToolCallArgsEvent(tool_call_id="call_1", delta='{"a":')


# --- snake_case input -------------------------------------------------------------------


def test_snake_case_event_decodes_like_its_camel_case_twin() -> None:
    snake = decode_event(
        b'{"type":"TOOL_CALL_START","tool_call_id":"c","tool_call_name":"search",'
        b'"parent_message_id":"m","raw_event":{"k":1}}'
    )

    assert snake == ToolCallStartEvent(
        tool_call_id="c", tool_call_name="search", parent_message_id="m", raw_event={"k": 1}
    )


def test_snake_case_decoding_reaches_nested_structs() -> None:
    event = decode_event(
        b'{"type":"RUN_STARTED","thread_id":"t","run_id":"r","input":{"thread_id":"t",'
        b'"run_id":"r","forwarded_props":{"x":1},"messages":[{"id":"a","role":"assistant",'
        b'"tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"},'
        b'"encrypted_value":"e"}]}]}}'
    )

    assert event == RunStartedEvent(
        thread_id="t",
        run_id="r",
        input=RunAgentInput(
            thread_id="t",
            run_id="r",
            forwarded_props={"x": 1},
            messages=[
                AssistantMessage(
                    id="a",
                    tool_calls=[
                        ToolCall(
                            id="c",
                            function=FunctionCall(name="f", arguments="{}"),
                            encrypted_value="e",
                        )
                    ],
                )
            ],
        ),
    )


def test_snake_case_json_patch_keeps_from() -> None:
    event = decode_event(
        b'{"type":"ACTIVITY_DELTA","message_id":"m","activity_type":"PLAN",'
        b'"patch":[{"op":"copy","from":"/a","path":"/b"}]}'
    )

    assert isinstance(event, protocol.ActivityDeltaEvent)
    assert event.patch == [protocol.CopyOperation(from_="/a", path="/b")]


def test_invalid_snake_case_event_reports_the_camel_case_error() -> None:
    with pytest.raises(InvalidEventError) as info:
        decode_event(b'{"type":"TOOL_CALL_ARGS","tool_call_id":"c","delta":5}')

    assert info.value.field == "$.delta"


def test_camel_case_event_with_a_wrong_type_is_not_reread_as_snake_case() -> None:
    # Every field of TEXT_MESSAGE_CHUNK is optional: read as snake_case this payload
    # would be an empty, valid chunk. The wrong type proves it is camelCase.
    with pytest.raises(InvalidEventError) as info:
        decode_event(b'{"type":"TEXT_MESSAGE_CHUNK","messageId":5,"delta":"x"}')

    assert info.value.field == "$.messageId"


def test_snake_case_fields_of_an_event_with_no_required_compound_field_are_skipped() -> None:
    # The documented limit: nothing fails, so the payload is taken as camelCase and its
    # snake_case keys are skipped like any unknown field.
    event = decode_event(b'{"type":"TEXT_MESSAGE_CHUNK","message_id":"m","delta":"x"}')

    assert event == TextMessageChunkEvent(message_id=None, delta="x")


def test_snake_case_run_input_and_messages_decode() -> None:
    run_input = decode_run_input(
        b'{"thread_id":"t","run_id":"r","parent_run_id":"p","messages":[]}'
    )
    messages_ = decode_messages(b'[{"id":"t1","role":"tool","tool_call_id":"c","content":"ok"}]')

    assert run_input == RunAgentInput(thread_id="t", run_id="r", parent_run_id="p", messages=[])
    assert messages_ == [ToolMessage(id="t1", tool_call_id="c", content="ok")]
    assert (
        decode_message(b'{"id":"t1","role":"tool","tool_call_id":"c","content":"ok"}')
        == (messages_[0])
    )


# --- run input, messages ------------------------------------------------------------------


def test_run_input_always_writes_state_tools_context_and_forwarded_props() -> None:
    wire = json.loads(encode(RunAgentInput(thread_id="t", run_id="r", messages=[])))

    assert wire == {
        "threadId": "t",
        "runId": "r",
        "state": {},
        "messages": [],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }


def test_run_input_writes_optionals_only_when_set() -> None:
    run_input = RunAgentInput(
        thread_id="t",
        run_id="r",
        parent_run_id="r0",
        protocol_version="1.0",
        messages=[],
        state={"n": 1},
        tools=[Tool(name="f", description="d", parameters={"type": "object"})],
        context=[Context(description="tz", value="UTC")],
        forwarded_props={"model": "x"},
        resume=[ResumeEntry(interrupt_id="i", status="resolved")],
    )

    wire = json.loads(encode(run_input))

    assert wire["parentRunId"] == "r0"
    assert wire["protocolVersion"] == "1.0"
    assert wire["resume"] == [{"interruptId": "i", "status": "resolved"}]
    assert wire["tools"] == [{"name": "f", "description": "d", "parameters": {"type": "object"}}]
    assert wire["context"] == [{"description": "tz", "value": "UTC"}]
    assert (wire["state"], wire["forwardedProps"]) == ({"n": 1}, {"model": "x"})


def test_run_input_without_the_portable_fields_decodes_with_empty_defaults() -> None:
    run_input = decode_run_input(b'{"threadId":"t","runId":"r","messages":[]}')

    assert run_input.state == {}
    assert run_input.tools == []
    assert run_input.context == []
    assert run_input.forwarded_props == {}
    assert run_input.parent_run_id is msgspec.UNSET
    assert run_input.resume is msgspec.UNSET


def test_run_input_keeps_an_explicit_null_optional() -> None:
    data = b'{"threadId":"t","runId":"r","parentRunId":null,"messages":[]}'

    run_input = decode_run_input(data)

    assert run_input.parent_run_id is None
    assert json.loads(encode(run_input))["parentRunId"] is None


def test_invalid_run_input_is_invalid_event_error() -> None:
    with pytest.raises(InvalidEventError) as info:
        decode_run_input(b'{"threadId":"t","runId":"r","messages":[{"id":"1","role":"robot"}]}')

    assert info.value.event_type == "RunAgentInput"
    assert info.value.field == "$.messages[0].role"


def test_run_input_that_is_not_json_is_malformed() -> None:
    with pytest.raises(MalformedEventError):
        decode_run_input(b"threadId=t")


def test_tool_call_type_is_written_although_it_is_the_default() -> None:
    call = ToolCall(id="c", function=FunctionCall(name="f", arguments="{}"))

    assert json.loads(encode(call)) == {
        "id": "c",
        "type": "function",
        "function": {"name": "f", "arguments": "{}"},
    }


def test_tool_call_without_type_decodes_as_function_and_is_written_with_it() -> None:
    message = decode_message(
        b'{"id":"a","role":"assistant","toolCalls":[{"id":"c","function":'
        b'{"name":"f","arguments":"{}"}}]}'
    )

    assert isinstance(message, AssistantMessage)
    assert message.tool_calls is not None
    assert message.tool_calls[0].type == "function"
    assert b'"type":"function"' in encode(message)


def test_tool_call_of_another_type_is_passed_on() -> None:
    message = decode_message(
        b'{"id":"a","role":"assistant","toolCalls":[{"id":"c","type":"custom",'
        b'"function":{"name":"f","arguments":"x"}}]}'
    )

    assert b'"type":"custom"' in encode(message)


def test_assistant_message_writes_tool_calls_and_leaves_out_absent_content() -> None:
    call = ToolCall(id="c", function=FunctionCall(name="f", arguments="{}"))

    with_calls = json.loads(encode(AssistantMessage(id="a", tool_calls=[call])))
    text_only = json.loads(encode(AssistantMessage(id="a", content="hi")))

    assert with_calls == {
        "role": "assistant",
        "id": "a",
        "toolCalls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ],
    }
    assert text_only == {"role": "assistant", "id": "a", "content": "hi"}


def test_tool_without_parameters_is_written_with_an_empty_object_schema() -> None:
    wire = json.loads(encode(Tool(name="now", description="the time")))

    assert wire == {
        "name": "now",
        "description": "the time",
        "parameters": {"type": "object", "properties": {}},
    }


def test_decode_messages_reports_the_offending_element() -> None:
    with pytest.raises(InvalidEventError) as info:
        decode_messages(b'[{"id":"1","role":"user","content":"a"},{"id":"2","role":"user"}]')

    assert info.value.event_type == "Message"
    assert info.value.field == "$[1].content"


def test_decode_message_rejects_non_json() -> None:
    with pytest.raises(MalformedEventError):
        decode_message(b"{'id': 1}")


def test_encode_writes_lists_of_wire_types() -> None:
    conversation: list[Message] = [UserMessage(id="u", content="hi")]

    assert encode(conversation) == b'[{"role":"user","id":"u","content":"hi"}]'


def test_encode_event_leaves_out_none_and_writes_camel_case() -> None:
    event = ToolCallStartEvent(tool_call_id="c", tool_call_name="f", timestamp=5)

    assert encode_event(event) == (
        b'{"type":"TOOL_CALL_START","timestamp":5,"toolCallId":"c","toolCallName":"f"}'
    )


def test_required_null_is_written_as_null() -> None:
    assert encode_event(protocol.CustomEvent(name="n", value=None)) == (
        b'{"type":"CUSTOM","name":"n","value":null}'
    )


# --- round trips ---------------------------------------------------------------------------


@settings(max_examples=200)
@given(event=events())
def test_every_event_round_trips(event: Event) -> None:
    assert decode_event(encode_event(event)) == event


@pytest.mark.parametrize("cls", typing.get_args(Event), ids=lambda cls: cls.__name__)
@settings(max_examples=10)
@given(data=st.data())
def test_each_event_type_round_trips(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(event_of(cls))

    decoded = decode_event(encode_event(event))

    assert type(decoded) is cls
    assert decoded == event


@settings(max_examples=100)
@given(message=messages())
def test_every_message_round_trips(message: Message) -> None:
    assert decode_message(encode(message)) == message
    assert decode_messages(encode([message, message])) == [message, message]


@settings(max_examples=100)
@given(run_input=run_agent_inputs())
def test_every_run_input_round_trips(run_input: RunAgentInput) -> None:
    assert decode_run_input(encode(run_input)) == run_input


@settings(max_examples=50)
@given(tool=tools())
def test_every_tool_round_trips(tool: Tool) -> None:
    assert msgspec.json.decode(encode(tool), type=Tool) == tool


def _nested_struct_types() -> list[type[msgspec.Struct]]:
    return [
        obj
        for name in protocol.__all__
        if isinstance(obj := getattr(protocol, name), type)
        and issubclass(obj, msgspec.Struct)
        and obj not in (UnknownEvent, protocol.AguiEvent)
    ]


@pytest.mark.parametrize("cls", _nested_struct_types(), ids=lambda cls: cls.__name__)
@settings(max_examples=10)
@given(data=st.data())
def test_every_wire_type_round_trips(cls: type[msgspec.Struct], data: st.DataObject) -> None:
    value = data.draw(wire_structs(cls))

    assert msgspec.json.decode(encode(value), type=cls) == value


@settings(max_examples=50)
@given(event=event_of(StateDeltaEvent), junk=st.dictionaries(st.text(max_size=5), st.integers()))
def test_unknown_fields_never_change_what_an_event_decodes_to(
    event: StateDeltaEvent, junk: dict[str, int]
) -> None:
    wire = {f"x-{key}": value for key, value in junk.items()} | json.loads(encode_event(event))

    assert decode_event(json.dumps(wire)) == event


def test_required_any_fields_dropped_by_old_encoders_decode_and_round_trip() -> None:
    # ag-ui-protocol 0.1.x wrote exclude_none=True: a null value vanished from the wire.
    from toolrelay.protocol import CustomEvent, RawEvent, StateSnapshotEvent, encode_event

    cases: dict[bytes, tuple[str, type[object]]] = {
        b'{"type":"CUSTOM","name":"ping"}': ("value", CustomEvent),
        b'{"type":"RAW","source":"openai"}': ("event", RawEvent),
        b'{"type":"STATE_SNAPSHOT"}': ("snapshot", StateSnapshotEvent),
    }
    for payload, (field, cls) in cases.items():
        event = decode_event(payload)
        assert isinstance(event, cls)
        assert getattr(event, field) is msgspec.UNSET
        assert msgspec.json.decode(encode_event(event)) == msgspec.json.decode(payload)
    explicit = decode_event(b'{"type":"CUSTOM","name":"ping","value":null}')
    assert isinstance(explicit, CustomEvent) and explicit.value is None
    assert b'"value":null' in encode_event(explicit)


# --- hostile payloads: nesting, bytes that are not UTF-8, lone surrogates -----------------


DEEP = b"[" * 100_000 + b"]" * 100_000


@pytest.mark.parametrize(
    "payload",
    [
        b'{"type":"CUSTOM","name":"x","value":' + DEEP + b"}",
        b'{"type":"STATE_SNAPSHOT","snapshot":' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"}",
        b'{"type":"NOT_A_KNOWN_TYPE","x":' + DEEP + b"}",
        b'{"type":"TOOL_CALL_ARGS","toolCallId":' + DEEP + b"}",
        b'{"type":"CUSTOM","name":"x","value":' + b"[" * 100_000,
    ],
    ids=["custom", "state", "unknown-type", "bad-body", "unclosed"],
)
def test_json_nested_too_deeply_is_a_typed_malformed_input_error(payload: bytes) -> None:
    with pytest.raises(MalformedEventError) as caught:
        decode_event(payload)
    assert caught.value.code == "nesting_too_deep"


def test_deep_nesting_in_a_run_input_is_typed() -> None:
    with pytest.raises(MalformedEventError) as caught:
        protocol.decode_run_input(b'{"threadId":"t","runId":"r","state":' + DEEP + b"}")
    assert caught.value.code == "nesting_too_deep"


def test_bytes_that_are_not_utf8_are_a_typed_error() -> None:
    with pytest.raises(MalformedEventError) as caught:
        decode_event(b'{"type":"CUSTOM","name":"x","value":"\xff\xfe"}')
    assert caught.value.code == "invalid_utf8"


@pytest.mark.parametrize(
    ("escaped", "text"),
    [
        ("a\\ud83d", "a\ufffd"),  # a high surrogate cut from its pair, at the end
        ("a\\ud83d b", "a\ufffd b"),
        ("\\ude00x", "\ufffdx"),  # a low one alone
        ("\\ud83d\\ud83d\\ude00", "\ufffd\U0001f600"),  # a lone one before a pair
        ("\\\\ud83d \\ud83d", "\\ud83d \ufffd"),  # an escaped backslash is text
    ],
)
def test_a_lone_surrogate_escape_spoils_one_character_not_the_event(
    escaped: str, text: str
) -> None:
    payload = '{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"' + escaped + '"}'
    event = decode_event(payload.encode())
    assert isinstance(event, protocol.TextMessageContentEvent)
    assert event.delta == text


def test_a_payload_broken_otherwise_is_still_malformed_after_the_surrogate_repair() -> None:
    with pytest.raises(MalformedEventError):
        decode_event(b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"\\ud83d')
    assert protocol._codec.repair_surrogates(b'{"a": "\\ud83d\\ude00"}') is None


def test_snake_case_nesting_too_deep_after_a_missing_camel_case_field_is_typed() -> None:
    # The camelCase decoder stops at the first message (no toolCallId); the snake_case
    # retry reads on into the second one, nested past the stack.
    first = b'{"role":"tool","id":"t","content":"c","tool_call_id":"x"}'
    second = b'{"role":"user","id":"u","content":"c","extra":' + DEEP + b"}"
    body = b'{"thread_id":"t","run_id":"r","messages":[' + first + b"," + second + b"]}"
    with pytest.raises(MalformedEventError) as caught:
        protocol.decode_run_input(body)
    assert caught.value.code == "nesting_too_deep"


def test_a_snake_case_event_at_every_depth_decodes_or_is_too_deep_never_a_recursion_error() -> None:
    # The snake_case retry runs a few frames deeper than the camelCase decode and the
    # envelope, so near msgspec's limit it alone can run out of stack: every depth up to
    # past the limit either decodes or is typed, and the depths that decode are a prefix.
    outcomes: list[bool] = []
    for depth in range(1, 1_500):
        nested = b"[" * depth + b"]" * depth
        payload = b'{"type":"TOOL_CALL_ARGS","tool_call_id":"c","delta":"d","x":' + nested + b"}"
        try:
            event = decode_event(payload)
        except MalformedEventError as exc:
            assert exc.code == "nesting_too_deep"
            outcomes.append(False)
        else:
            assert event == ToolCallArgsEvent(tool_call_id="c", delta="d")
            outcomes.append(True)
    decoded = outcomes.count(True)
    assert decoded >= 100
    assert outcomes == [True] * decoded + [False] * (len(outcomes) - decoded)


def test_a_malformed_text_payload_is_quoted_in_the_error() -> None:
    with pytest.raises(MalformedEventError, match="'not json'"):
        decode_event("not json")
    with pytest.raises(MalformedEventError, match=r"'x{80}\.\.\.'"):
        decode_event("x" * 200)


def test_bytes_that_are_not_utf8_in_a_run_input_are_a_typed_error() -> None:
    with pytest.raises(MalformedEventError) as caught:
        protocol.decode_run_input(b'{"threadId":"t\xff","runId":"r","messages":[]}')
    assert caught.value.code == "invalid_utf8"


def test_a_lone_surrogate_escape_in_a_run_input_spoils_one_character() -> None:
    run_input = protocol.decode_run_input(b'{"threadId":"t\\ud800","runId":"r","messages":[]}')
    assert run_input.thread_id == "t\ufffd"
