"""The event Structs: every AG-UI type decodes from the JSON real servers send."""

from __future__ import annotations

import inspect
import re
import typing
from typing import Any

import msgspec
import pytest

from toolrelay import protocol
from toolrelay.protocol import (
    EVENT_TYPES,
    LEGACY_EVENT_TYPES,
    ActivityDeltaEvent,
    ActivitySnapshotEvent,
    AddOperation,
    AguiEvent,
    AssistantMessage,
    CustomEvent,
    Event,
    EventType,
    FunctionCall,
    ImagePart,
    Interrupt,
    MessagesSnapshotEvent,
    MoveOperation,
    RawEvent,
    ReasoningEncryptedValueEvent,
    ReasoningEndEvent,
    ReasoningMessageChunkEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RemoveOperation,
    ReplaceOperation,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    SubagentErrorEvent,
    SubagentFinishedEvent,
    SubagentFinishedSuspendedOutcome,
    SubagentStartedEvent,
    TextMessageChunkEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    TextPart,
    ThinkingEndEvent,
    ThinkingStartEvent,
    ThinkingTextMessageContentEvent,
    ThinkingTextMessageEndEvent,
    ThinkingTextMessageStartEvent,
    TokenUsage,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallChunkEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UnknownEvent,
    UrlSource,
    UserMessage,
    decode_event,
)

EVENT_CLASSES: tuple[type[AguiEvent], ...] = typing.get_args(Event)

# One hand-written camelCase payload per event type, shaped like what AG-UI servers send
# (pydantic-ai's and LangGraph's adapters, the TypeScript SDK), with the Struct it must
# decode to.
WIRE_SAMPLES: list[tuple[str, AguiEvent]] = [
    (
        '{"type":"RUN_STARTED","threadId":"thread_1","runId":"run_1","timestamp":1732189200123}',
        RunStartedEvent(thread_id="thread_1", run_id="run_1", timestamp=1732189200123),
    ),
    (
        '{"type":"RUN_STARTED","threadId":"t","runId":"r","parentRunId":"r0",'
        '"protocolVersion":"1.0","input":{"threadId":"t","runId":"r","state":{},'
        '"messages":[{"id":"u1","role":"user","content":"hi"}],"tools":[],"context":[],'
        '"forwardedProps":{}}}',
        RunStartedEvent(
            thread_id="t",
            run_id="r",
            parent_run_id="r0",
            protocol_version="1.0",
            input=RunAgentInput(
                thread_id="t", run_id="r", messages=[UserMessage(id="u1", content="hi")]
            ),
        ),
    ),
    (
        '{"type":"RUN_FINISHED","threadId":"t","runId":"r","result":{"answer":42},'
        '"usage":[{"provider":"openai","model":"gpt-4o","inputTokens":12,"outputTokens":3}]}',
        RunFinishedEvent(
            thread_id="t",
            run_id="r",
            result={"answer": 42},
            usage=[TokenUsage(provider="openai", model="gpt-4o", input_tokens=12, output_tokens=3)],
        ),
    ),
    (
        '{"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt",'
        '"interrupts":[{"id":"i1","reason":"tool_approval","toolCallId":"call_1",'
        '"responseSchema":{"type":"object"}}]}}',
        RunFinishedEvent(
            thread_id="t",
            run_id="r",
            outcome=RunFinishedInterruptOutcome(
                interrupts=[
                    Interrupt(
                        id="i1",
                        reason="tool_approval",
                        tool_call_id="call_1",
                        response_schema={"type": "object"},
                    )
                ]
            ),
        ),
    ),
    (
        '{"type":"RUN_ERROR","message":"model overloaded","code":"529"}',
        RunErrorEvent(message="model overloaded", code="529"),
    ),
    (
        '{"type":"STEP_STARTED","stepName":"agent"}',
        StepStartedEvent(step_name="agent"),
    ),
    (
        '{"type":"STEP_FINISHED","stepName":"agent"}',
        StepFinishedEvent(step_name="agent"),
    ),
    (
        '{"type":"TEXT_MESSAGE_START","messageId":"msg_1","role":"assistant"}',
        TextMessageStartEvent(message_id="msg_1", role="assistant"),
    ),
    (
        '{"type":"TEXT_MESSAGE_CONTENT","messageId":"msg_1","delta":"Hello"}',
        TextMessageContentEvent(message_id="msg_1", delta="Hello"),
    ),
    (
        '{"type":"TEXT_MESSAGE_END","messageId":"msg_1"}',
        TextMessageEndEvent(message_id="msg_1"),
    ),
    (
        '{"type":"TEXT_MESSAGE_CHUNK","messageId":"msg_2","role":"assistant","delta":"Hi"}',
        TextMessageChunkEvent(message_id="msg_2", role="assistant", delta="Hi"),
    ),
    # pydantic-ai: TOOL_CALL_START names the assistant message the call belongs to.
    (
        '{"type":"TOOL_CALL_START","toolCallId":"call_Xq1","toolCallName":"get_weather",'
        '"parentMessageId":"msg_1"}',
        ToolCallStartEvent(
            tool_call_id="call_Xq1", tool_call_name="get_weather", parent_message_id="msg_1"
        ),
    ),
    # LangGraph: the same, with the LangChain event it was translated from in rawEvent.
    (
        '{"type":"TOOL_CALL_START","toolCallId":"call_Xq1","toolCallName":"get_weather",'
        '"parentMessageId":"run-42","rawEvent":{"event":"on_chat_model_stream",'
        '"run_id":"run-42","metadata":{"langgraph_node":"agent"}}}',
        ToolCallStartEvent(
            tool_call_id="call_Xq1",
            tool_call_name="get_weather",
            parent_message_id="run-42",
            raw_event={
                "event": "on_chat_model_stream",
                "run_id": "run-42",
                "metadata": {"langgraph_node": "agent"},
            },
        ),
    ),
    (
        '{"type":"TOOL_CALL_ARGS","toolCallId":"call_Xq1","delta":"{\\"city\\": \\"Par"}',
        ToolCallArgsEvent(tool_call_id="call_Xq1", delta='{"city": "Par'),
    ),
    (
        '{"type":"TOOL_CALL_END","toolCallId":"call_Xq1"}',
        ToolCallEndEvent(tool_call_id="call_Xq1"),
    ),
    (
        '{"type":"TOOL_CALL_CHUNK","toolCallId":"call_2","toolCallName":"search",'
        '"parentMessageId":"msg_3","delta":"{}"}',
        ToolCallChunkEvent(
            tool_call_id="call_2", tool_call_name="search", parent_message_id="msg_3", delta="{}"
        ),
    ),
    (
        '{"type":"TOOL_CALL_RESULT","messageId":"tool_msg_1","toolCallId":"call_Xq1",'
        '"content":"18 degrees","role":"tool"}',
        ToolCallResultEvent(
            message_id="tool_msg_1", tool_call_id="call_Xq1", content="18 degrees", role="tool"
        ),
    ),
    (
        '{"type":"TOOL_CALL_RESULT","messageId":"m","toolCallId":"c","content":['
        '{"type":"text","text":"chart:"},'
        '{"type":"image","source":{"type":"url","value":"https://x.test/c.png"}}]}',
        ToolCallResultEvent(
            message_id="m",
            tool_call_id="c",
            content=[
                TextPart(text="chart:"),
                ImagePart(source=UrlSource(value="https://x.test/c.png")),
            ],
        ),
    ),
    (
        '{"type":"STATE_SNAPSHOT","snapshot":{"count":1,"items":["a"]}}',
        StateSnapshotEvent(snapshot={"count": 1, "items": ["a"]}),
    ),
    (
        '{"type":"STATE_SNAPSHOT","snapshot":null}',
        StateSnapshotEvent(snapshot=None),
    ),
    (
        '{"type":"STATE_DELTA","delta":[{"op":"replace","path":"/count","value":2},'
        '{"op":"add","path":"/items/-","value":"b"},{"op":"remove","path":"/old"},'
        '{"op":"move","from":"/a","path":"/b"}]}',
        StateDeltaEvent(
            delta=[
                ReplaceOperation(path="/count", value=2),
                AddOperation(path="/items/-", value="b"),
                RemoveOperation(path="/old"),
                MoveOperation(from_="/a", path="/b"),
            ]
        ),
    ),
    (
        '{"type":"MESSAGES_SNAPSHOT","messages":[{"id":"u1","role":"user","content":"weather?"},'
        '{"id":"a1","role":"assistant","toolCalls":[{"id":"call_1","type":"function",'
        '"function":{"name":"get_weather","arguments":"{\\"city\\":\\"Paris\\"}"}}]},'
        '{"id":"t1","role":"tool","toolCallId":"call_1","content":"18 degrees"}]}',
        MessagesSnapshotEvent(
            messages=[
                UserMessage(id="u1", content="weather?"),
                AssistantMessage(
                    id="a1",
                    tool_calls=[
                        ToolCall(
                            id="call_1",
                            function=FunctionCall(name="get_weather", arguments='{"city":"Paris"}'),
                        )
                    ],
                ),
                ToolMessage(id="t1", tool_call_id="call_1", content="18 degrees"),
            ]
        ),
    ),
    (
        '{"type":"ACTIVITY_SNAPSHOT","messageId":"act_1","activityType":"PLAN",'
        '"content":{"steps":["search"]},"replace":true}',
        ActivitySnapshotEvent(
            message_id="act_1",
            activity_type="PLAN",
            content={"steps": ["search"]},
            replace=True,
        ),
    ),
    (
        '{"type":"ACTIVITY_DELTA","messageId":"act_1","activityType":"PLAN",'
        '"patch":[{"op":"add","path":"/steps/-","value":"answer"}]}',
        ActivityDeltaEvent(
            message_id="act_1",
            activity_type="PLAN",
            patch=[AddOperation(path="/steps/-", value="answer")],
        ),
    ),
    (
        '{"type":"RAW","event":{"id":"chatcmpl-1","object":"chat.completion.chunk"},'
        '"source":"openai"}',
        RawEvent(event={"id": "chatcmpl-1", "object": "chat.completion.chunk"}, source="openai"),
    ),
    (
        '{"type":"CUSTOM","name":"PredictState","value":[{"state_key":"doc","tool":"write"}]}',
        CustomEvent(name="PredictState", value=[{"state_key": "doc", "tool": "write"}]),
    ),
    (
        '{"type":"REASONING_START","messageId":"r1"}',
        ReasoningStartEvent(message_id="r1"),
    ),
    (
        '{"type":"REASONING_MESSAGE_START","messageId":"r1","role":"reasoning"}',
        ReasoningMessageStartEvent(message_id="r1"),
    ),
    (
        '{"type":"REASONING_MESSAGE_CONTENT","messageId":"r1","delta":"Let me think"}',
        ReasoningMessageContentEvent(message_id="r1", delta="Let me think"),
    ),
    (
        '{"type":"REASONING_MESSAGE_END","messageId":"r1"}',
        ReasoningMessageEndEvent(message_id="r1"),
    ),
    (
        '{"type":"REASONING_MESSAGE_CHUNK","messageId":"r1","delta":"..."}',
        ReasoningMessageChunkEvent(message_id="r1", delta="..."),
    ),
    (
        '{"type":"REASONING_END","messageId":"r1"}',
        ReasoningEndEvent(message_id="r1"),
    ),
    (
        '{"type":"REASONING_ENCRYPTED_VALUE","subtype":"message","entityId":"r1",'
        '"encryptedValue":"gAAAAB..."}',
        ReasoningEncryptedValueEvent(
            subtype="message", entity_id="r1", encrypted_value="gAAAAB..."
        ),
    ),
    (
        '{"type":"SUBAGENT_STARTED","subagentRunId":"sub_1","name":"researcher",'
        '"parentToolCallId":"call_9"}',
        SubagentStartedEvent(
            subagent_run_id="sub_1", name="researcher", parent_tool_call_id="call_9"
        ),
    ),
    (
        '{"type":"SUBAGENT_FINISHED","subagentRunId":"sub_1",'
        '"outcome":{"type":"suspended","interruptIds":["i1"]}}',
        SubagentFinishedEvent(
            subagent_run_id="sub_1",
            outcome=SubagentFinishedSuspendedOutcome(interrupt_ids=["i1"]),
        ),
    ),
    (
        '{"type":"SUBAGENT_ERROR","subagentRunId":"sub_1","message":"boom","code":"E1"}',
        SubagentErrorEvent(subagent_run_id="sub_1", message="boom", code="E1"),
    ),
    # Legacy THINKING_* events, as pydantic-ai sends them to clients below AG-UI 0.1.11.
    (
        '{"type":"THINKING_START","title":"Thinking"}',
        ThinkingStartEvent(title="Thinking"),
    ),
    (
        '{"type":"THINKING_TEXT_MESSAGE_START"}',
        ThinkingTextMessageStartEvent(),
    ),
    (
        '{"type":"THINKING_TEXT_MESSAGE_CONTENT","delta":"The user wants"}',
        ThinkingTextMessageContentEvent(delta="The user wants"),
    ),
    (
        '{"type":"THINKING_TEXT_MESSAGE_END"}',
        ThinkingTextMessageEndEvent(),
    ),
    (
        '{"type":"THINKING_END"}',
        ThinkingEndEvent(),
    ),
]


@pytest.mark.parametrize(("payload", "expected"), WIRE_SAMPLES)
def test_camel_case_payload_decodes_to_its_struct(payload: str, expected: AguiEvent) -> None:
    decoded = decode_event(payload.encode())

    assert type(decoded) is type(expected)
    assert decoded == expected


def test_the_samples_cover_every_event_type() -> None:
    covered = {msgspec.json.decode(payload)["type"] for payload, _ in WIRE_SAMPLES}

    assert covered == EVENT_TYPES


def test_run_finished_success_outcome_keeps_pending_tool_calls() -> None:
    event = decode_event(
        b'{"type":"RUN_FINISHED","threadId":"t","runId":"r",'
        b'"outcome":{"type":"success","pendingToolCallIds":["call_1"]}}'
    )

    assert isinstance(event, RunFinishedEvent)
    assert event.outcome == RunFinishedSuccessOutcome(pending_tool_call_ids=["call_1"])


def test_event_type_enum_lists_exactly_the_union_tags() -> None:
    tags = [cls.__struct_config__.tag for cls in EVENT_CLASSES]

    assert len(tags) == len(set(tags)) == 36
    assert set(tags) == EVENT_TYPES == {member.value for member in EventType}


def test_legacy_types_are_the_five_thinking_events() -> None:
    assert LEGACY_EVENT_TYPES == {
        "THINKING_START",
        "THINKING_END",
        "THINKING_TEXT_MESSAGE_START",
        "THINKING_TEXT_MESSAGE_CONTENT",
        "THINKING_TEXT_MESSAGE_END",
    }
    assert LEGACY_EVENT_TYPES < EVENT_TYPES


def test_event_classes_are_named_after_their_tag() -> None:
    for cls in EVENT_CLASSES:
        tag = str(cls.__struct_config__.tag)
        assert cls.__name__ == tag.title().replace("_", "") + "Event"


def test_unknown_event_is_not_a_member_of_the_union() -> None:
    assert UnknownEvent not in typing.get_args(Event)
    assert not issubclass(UnknownEvent, AguiEvent)


def _wire_struct_types() -> list[type[msgspec.Struct]]:
    return [
        obj
        for name in protocol.__all__
        if isinstance(obj := getattr(protocol, name), type)
        and issubclass(obj, msgspec.Struct)
        and obj is not UnknownEvent
    ]


@pytest.mark.parametrize("cls", _wire_struct_types(), ids=lambda cls: cls.__name__)
def test_wire_struct_is_frozen_keyword_only_camel_case_and_tolerant(
    cls: type[msgspec.Struct],
) -> None:
    config = cls.__struct_config__
    params = inspect.signature(cls).parameters.values()

    assert config.frozen
    assert all(param.kind is inspect.Parameter.KEYWORD_ONLY for param in params)
    assert not config.forbid_unknown_fields
    for info in msgspec.structs.fields(cls):
        assert re.fullmatch(r"[a-z][a-z0-9]*(_[a-z0-9]+)*_?", info.name), info.name
        assert info.encode_name == _camel(info.name), info.name


@pytest.mark.parametrize("cls", _wire_struct_types(), ids=lambda cls: cls.__name__)
def test_a_struct_that_writes_its_defaults_has_no_none_default(
    cls: type[msgspec.Struct],
) -> None:
    # omit_defaults=False Structs (ToolCall, Tool, RunAgentInput) would write a None
    # default as null, which zod's .optional() rejects; their optionals must be UNSET.
    if cls.__struct_config__.omit_defaults:
        return
    for info in msgspec.structs.fields(cls):
        assert info.default is not None, f"{cls.__name__}.{info.name}"


def test_only_the_three_request_shapes_write_their_defaults() -> None:
    writers = {
        cls.__name__ for cls in _wire_struct_types() if not cls.__struct_config__.omit_defaults
    }

    assert writers == {"ToolCall", "Tool", "RunAgentInput"}


def test_required_fields_stay_required() -> None:
    required = {info.name for info in msgspec.structs.fields(ToolCallStartEvent) if info.required}

    assert required == {"tool_call_id", "tool_call_name"}
    with pytest.raises(TypeError):
        ToolCallArgsEvent(tool_call_id="c")  # type: ignore[call-arg]


def _camel(name: str) -> str:
    first, *rest = name.rstrip("_").split("_")
    return first + "".join(part.title() for part in rest)


def test_events_are_immutable() -> None:
    event = ToolCallArgsEvent(tool_call_id="c", delta="{")

    with pytest.raises(AttributeError):
        event.delta = "}"  # type: ignore[misc]


def test_match_dispatches_on_the_event_class() -> None:
    def describe(event: Any) -> str:
        match event:
            case ToolCallArgsEvent(tool_call_id=call_id, delta=delta):
                return f"{call_id}+{delta}"
            case UnknownEvent(type=event_type):
                return f"unknown {event_type}"
            case _:
                return "other"

    assert describe(decode_event(b'{"type":"TOOL_CALL_ARGS","toolCallId":"c","delta":"{"}')) == (
        "c+{"
    )
    assert describe(decode_event(b'{"type":"FUTURE_EVENT"}')) == "unknown FUTURE_EVENT"
