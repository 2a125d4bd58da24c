"""The OpenAI adapters: Chat Completions and the Responses API.

Streams are written from OpenAI's published streaming formats. Each is played through
the pure translator, through the backend over httpx.MockTransport (the real httpx and
httpx-sse code runs), and, as a multi-hop tool conversation, through the Engine
against a loopback HTTP server; re-chunked at arbitrary byte boundaries
(Hypothesis), with every provider's, in ``test_providers_engine.py``.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import httpx
import msgspec
import pytest

from toolrelay import ConversationError, RunStatus
from toolrelay.backends.providers import (
    Capabilities,
    OpenAIChatBackend,
    OpenAIChatTranslator,
    OpenAIResponsesBackend,
    OpenAIResponsesTranslator,
    ProviderBackend,
)
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    AssistantMessage,
    AudioPart,
    ContentPart,
    Context,
    DataSource,
    DeveloperMessage,
    Event,
    FunctionCall,
    ImagePart,
    Message,
    ReasoningMessage,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    SystemMessage,
    TextPart,
    ToolCall,
    ToolCallEndEvent,
    ToolMessage,
    UrlSource,
    UserMessage,
)

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _oa_servers import (
    KEY,
    LoopbackServer,
    Outcome,
    ScriptedProvider,
    collect,
    refuse,
    run_input,
    sse,
    summarize,
)
from _provider_table import run_recorded_turn
from _wire_openai import (
    CHAT_ERROR_MID_STREAM,
    CHAT_INTERLEAVED,
    RESP_ERROR_MID_STREAM,
    RESP_TEXT_BEFORE_CALLS,
    ROLE,
    args_delta,
    call_added,
    call_done,
    calls,
    chunk,
    completed,
    created,
    head,
    incomplete,
    message_added,
    message_done,
    piece,
    reasoning_item,
    reasoning_text_delta,
    summary_delta,
    text_delta,
)

SSE_HEADERS = {"content-type": "text/event-stream"}

# --- Chat Completions streams, from the published chunk format ---


CHAT_TEXT_ONLY = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Hello"}),
    chunk({"content": ", wörld ✓"}),
    chunk({}, "stop"),
]
CHAT_ONE_CALL = [
    ROLE,
    calls(head(0, "call_abc", "get_secret_number")),
    calls(piece(0, '{"na')),
    calls(piece(0, 'me": "al')),
    calls(piece(0, 'ice"}')),
    chunk({}, "tool_calls"),
]
CHAT_PARALLEL = [
    ROLE,
    calls(head(0, "call_a", "get_secret_number")),
    calls(piece(0, '{"name": "alice"}')),
    calls(head(1, "call_b", "lookup_city")),
    calls(piece(1, '{"person": "bob"}')),
    chunk({}, "tool_calls"),
]
CHAT_ZERO_ARG = [ROLE, calls(head(0, "call_z", "list_people")), chunk({}, "tool_calls")]
CHAT_TEXT_BEFORE_CALLS = [
    chunk({"role": "assistant", "content": ""}),
    chunk({"content": "Let me "}),
    chunk({"content": "check."}),
    calls(head(0, "call_a", "get_secret_number")),
    calls(piece(0, '{"name": "alice"}')),
    chunk({}, "tool_calls"),
]
CHAT_NO_IDS = [
    ROLE,
    calls(head(0, None, "get_secret_number"), head(1, None, "list_people")),
    calls(piece(0, '{"name": "bob"}')),
    chunk({}, "tool_calls"),
]
CHAT_STOP_WITH_CALLS = [*CHAT_ONE_CALL[:-1], chunk({}, "stop")]
CHAT_LENGTH = [chunk({"content": "A long ans"}), chunk({}, "length")]
# Cut off by max_tokens in the middle of a call's arguments.
CHAT_LENGTH_MID_CALL = [
    ROLE,
    calls(head(0, "call_abc", "get_secret_number")),
    calls(piece(0, '{"name": "al')),
    chunk({}, "length"),
]
# Filtered after arguments that happen to parse: the call is still not complete.
CHAT_FILTERED_MID_CALL = [
    ROLE,
    calls(head(0, "call_abc", "get_secret_number")),
    calls(piece(0, '{"name": "alice"}')),
    chunk({}, "content_filter"),
]
# Cut off during the second call of a batch: the first looks whole, yet the batch is not.
CHAT_LENGTH_MID_BATCH = [
    ROLE,
    calls(head(0, "call_a", "get_secret_number")),
    calls(piece(0, '{"name": "alice"}')),
    calls(head(1, "call_b", "lookup_city")),
    calls(piece(1, '{"person": "b')),
    chunk({}, "length"),
]
CHAT_REASONING = [
    chunk({"role": "assistant", "reasoning_content": "The user says hi."}),
    chunk({"content": "Hi!"}),
    chunk({}, "stop"),
]

ALICE = ("call_a", "get_secret_number", '{"name": "alice"}')
BOB_CITY = ("call_b", "lookup_city", '{"person": "bob"}')
ALICE_ABC = ("call_abc", "get_secret_number", '{"name": "alice"}')

CHAT_CASES: dict[str, tuple[list[dict[str, Any]], Outcome]] = {
    "text-only": (
        CHAT_TEXT_ONLY,
        Outcome(
            texts=["Hello, wörld ✓"],
            calls=[],
            ended=[],
            reasoning=[],
            finish={"stopReason": "end_turn", "providerStopReason": "stop"},
        ),
    ),
    "one-call": (
        CHAT_ONE_CALL,
        Outcome(
            texts=[],
            calls=[("call_abc", "get_secret_number", '{"name": "alice"}')],
            ended=["call_abc"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "tool_calls"},
        ),
    ),
    "parallel": (
        CHAT_PARALLEL,
        Outcome(
            texts=[],
            calls=[ALICE, BOB_CITY],
            ended=["call_a", "call_b"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "tool_calls"},
        ),
    ),
    "interleaved": (
        CHAT_INTERLEAVED,
        Outcome(
            texts=[],
            calls=[
                ("call_a", "get_secret_number", '{"name": "alice"}'),
                ("call_b", "lookup_city", '{"person": "bob"}'),
            ],
            ended=["call_a", "call_b"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "tool_calls"},
        ),
    ),
    "zero-arg": (
        CHAT_ZERO_ARG,
        Outcome(
            texts=[],
            calls=[("call_z", "list_people", "")],
            ended=["call_z"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "tool_calls"},
        ),
    ),
    "text-before-calls": (
        CHAT_TEXT_BEFORE_CALLS,
        Outcome(
            texts=["Let me check."],
            calls=[ALICE],
            ended=["call_a"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "tool_calls"},
        ),
    ),
    "error-mid-stream": (
        CHAT_ERROR_MID_STREAM,
        Outcome(
            texts=["Half an ans"],
            calls=[],
            ended=[],
            reasoning=[],
            error=("The server had an error while processing your request.", "server_error"),
        ),
    ),
    "stop-with-calls": (
        # OpenAI says "stop" after a call that tool_choice forced: the response still
        # stopped for its tool.
        CHAT_STOP_WITH_CALLS,
        Outcome(
            texts=[],
            calls=[("call_abc", "get_secret_number", '{"name": "alice"}')],
            ended=["call_abc"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "stop"},
        ),
    ),
    "length": (
        CHAT_LENGTH,
        Outcome(
            texts=["A long ans"],
            calls=[],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens", "providerStopReason": "length"},
        ),
    ),
    "length-mid-call": (
        CHAT_LENGTH_MID_CALL,
        # A call of a cut-off response stays open: the processor never runs it.
        Outcome(
            texts=[],
            calls=[("call_abc", "get_secret_number", '{"name": "al')],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens", "providerStopReason": "length"},
        ),
    ),
    "content-filter-mid-call": (
        CHAT_FILTERED_MID_CALL,
        Outcome(
            texts=[],
            calls=[ALICE_ABC],
            ended=[],
            reasoning=[],
            finish={"stopReason": "content_filter", "providerStopReason": "content_filter"},
        ),
    ),
    "length-mid-batch": (
        CHAT_LENGTH_MID_BATCH,
        Outcome(
            texts=[],
            calls=[ALICE, ("call_b", "lookup_city", '{"person": "b')],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens", "providerStopReason": "length"},
        ),
    ),
    "reasoning": (
        CHAT_REASONING,
        Outcome(
            texts=["Hi!"],
            calls=[],
            ended=[],
            reasoning=["The user says hi."],
            finish={"stopReason": "end_turn", "providerStopReason": "stop"},
        ),
    ),
}


def translate(translator: Any, chunks: list[dict[str, Any]], *, named: bool = False) -> list[Event]:
    events: list[Event] = []
    for item in chunks:
        events.extend(translator.feed(item, item.get("type") if named else None))
    events.extend(translator.finish())
    return events


@pytest.mark.parametrize("case", list(CHAT_CASES))
def test_chat_translator_turns_each_published_stream_into_its_events(case: str) -> None:
    chunks, expected = CHAT_CASES[case]
    assert summarize(translate(OpenAIChatTranslator(), chunks)) == expected


@pytest.mark.parametrize("case", ["one-call", "parallel", "interleaved", "text-before-calls"])
def test_chat_tool_call_end_waits_for_the_finish_reason(case: str) -> None:
    chunks, _ = CHAT_CASES[case]
    translator = OpenAIChatTranslator()
    for item in chunks[:-1]:
        # The arguments may already parse: the call is still not complete.
        assert not any(isinstance(e, ToolCallEndEvent) for e in translator.feed(item))
    last = translator.feed(chunks[-1])
    assert [type(e) for e in last][-1] is RunFinishedEvent
    assert any(isinstance(e, ToolCallEndEvent) for e in last)


@pytest.mark.parametrize(
    ("finish_reason", "stop_reason", "ended"),
    [
        ("stop", "tool_use", ["call_abc"]),
        ("tool_calls", "tool_use", ["call_abc"]),
        # Cut off or filtered: the call is not complete, so it is not ended.
        ("length", "max_tokens", []),
        ("content_filter", "content_filter", []),
    ],
)
def test_chat_calls_make_stop_tool_use_but_a_cut_off_keeps_its_reason(
    finish_reason: str, stop_reason: str, ended: list[str]
) -> None:
    stream = [*CHAT_ONE_CALL[:-1], chunk({}, finish_reason)]
    outcome = summarize(translate(OpenAIChatTranslator(), stream))
    assert outcome.finish == {"stopReason": stop_reason, "providerStopReason": finish_reason}
    assert outcome.ended == ended


def test_chat_a_call_that_never_got_its_name_does_not_make_stop_tool_use() -> None:
    stream = [
        ROLE,
        chunk({"content": "Done."}),
        calls({"index": 0, "id": "call_x", "function": {"arguments": "{}"}}),
        chunk({}, "stop"),
    ]
    outcome = summarize(translate(OpenAIChatTranslator(), stream))
    assert outcome.calls == []
    assert outcome.finish == {"stopReason": "end_turn", "providerStopReason": "stop"}


def test_chat_calls_without_ids_get_call_n_ids() -> None:
    outcome = summarize(translate(OpenAIChatTranslator(), CHAT_NO_IDS))
    assert outcome.calls == [
        ("call_0", "get_secret_number", '{"name": "bob"}'),
        ("call_1", "list_people", ""),
    ]
    assert outcome.ended == ["call_0", "call_1"]


def test_chat_call_numbers_can_be_shared_so_ids_stay_unique_across_runs() -> None:
    numbers = itertools.count()
    first = summarize(translate(OpenAIChatTranslator(call_numbers=numbers), CHAT_NO_IDS))
    second = summarize(translate(OpenAIChatTranslator(call_numbers=numbers), CHAT_NO_IDS))
    assert [c[0] for c in first.calls + second.calls] == ["call_0", "call_1", "call_2", "call_3"]


def test_chat_a_stream_without_finish_reason_ends_its_calls_but_not_the_run() -> None:
    outcome = summarize(translate(OpenAIChatTranslator(), CHAT_ONE_CALL[:-1]))
    assert outcome.ended == ["call_abc"]
    assert outcome.finish is None and outcome.error is None


def test_chat_calls_and_text_name_the_response_as_their_message() -> None:
    events = translate(OpenAIChatTranslator(), CHAT_TEXT_BEFORE_CALLS)
    starts = [e for e in events if type(e).__name__ == "ToolCallStartEvent"]
    texts = [e for e in events if type(e).__name__ == "TextMessageStartEvent"]
    assert [getattr(e, "parent_message_id", None) for e in starts] == ["chatcmpl-1"]
    assert [getattr(e, "message_id", None) for e in texts] == ["chatcmpl-1"]


def test_chat_reasoning_ends_before_the_answer_or_a_call_starts() -> None:
    stream = [
        chunk({"role": "assistant", "reasoning_content": "Need alice's number."}),
        calls(head(0, "call_a", "get_secret_number"), piece(0, '{"name": "alice"}')),
        chunk({}, "tool_calls"),
    ]
    kinds = [type(e).__name__ for e in translate(OpenAIChatTranslator(), stream)]
    assert kinds == [
        "ReasoningMessageStartEvent",
        "ReasoningMessageContentEvent",
        "ReasoningMessageEndEvent",
        "ToolCallStartEvent",
        "ToolCallArgsEvent",
        "ToolCallEndEvent",
        "RunFinishedEvent",
    ]


def test_chat_nothing_is_translated_after_the_end_of_the_run() -> None:
    translator = OpenAIChatTranslator()
    translate(translator, CHAT_TEXT_ONLY)
    assert translator.feed(chunk({"content": "late"})) == []
    assert translator.finish() == []


def test_chat_a_chunk_that_is_not_an_object_is_skipped() -> None:
    translator = OpenAIChatTranslator()
    assert translator.feed(["choices"]) == []
    assert translator.feed(7) == []
    assert summarize(translate(translator, CHAT_TEXT_ONLY)).texts == ["Hello, wörld ✓"]


def test_chat_a_usage_chunk_with_no_choices_emits_nothing_and_its_usage_is_kept() -> None:
    translator = OpenAIChatTranslator()
    usage = {"prompt_tokens": 4, "completion_tokens": 5, "total_tokens": 9}
    assert translator.feed({"id": "chatcmpl-1", "choices": [], "usage": usage}) == []
    assert translator.trailing_usage is not None
    assert translator.trailing_usage[0].total_tokens == 9


def test_chat_servers_that_send_the_name_after_the_id_or_objects_as_arguments() -> None:
    translator = OpenAIChatTranslator()
    stream = [
        calls({"index": 0, "id": "call_x", "function": {"arguments": '{"na'}}),
        calls({"index": 0, "function": {"name": "get_secret_number", "arguments": 'me": 1}'}}),
        chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_y",
                        "function": {"name": "lookup_city", "arguments": {"person": "bob"}},
                    }
                ]
            }
        ),
        chunk({}, "tool_calls"),
    ]
    outcome = summarize(translate(translator, stream))
    assert outcome.calls == [
        ("call_x", "get_secret_number", '{"name": 1}'),
        ("call_y", "lookup_city", '{"person":"bob"}'),
    ]


# --- Responses API streams, from the published event format ---


RESP_TEXT_ONLY = [
    created(),
    message_added(0, "msg_1"),
    text_delta(0, "msg_1", "Hello"),
    text_delta(0, "msg_1", ", wörld ✓"),
    *message_done(0, "msg_1", "Hello, wörld ✓"),
    completed(),
]
RESP_ONE_CALL = [
    created(),
    call_added(0, "fc_1", "call_a", "get_secret_number"),
    args_delta(0, "fc_1", '{"name"'),
    args_delta(0, "fc_1", ': "alice"}'),
    *call_done(0, "fc_1", "call_a", "get_secret_number", '{"name": "alice"}'),
    completed(),
]
RESP_INTERLEAVED = [
    created(),
    call_added(0, "fc_1", "call_a", "get_secret_number"),
    call_added(1, "fc_2", "call_b", "lookup_city"),
    args_delta(0, "fc_1", '{"name"'),
    args_delta(1, "fc_2", '{"person"'),
    args_delta(1, "fc_2", ': "bob"}'),
    args_delta(0, "fc_1", ': "alice"}'),
    *call_done(1, "fc_2", "call_b", "lookup_city", '{"person": "bob"}'),
    *call_done(0, "fc_1", "call_a", "get_secret_number", '{"name": "alice"}'),
    completed(),
]
RESP_ZERO_ARG = [
    created(),
    call_added(0, "fc_1", "call_z", "list_people"),
    *call_done(0, "fc_1", "call_z", "list_people", "{}"),
    completed(),
]
RESP_FAILED = [
    created(),
    {
        "type": "response.failed",
        "response": {
            "id": "resp_1",
            "status": "failed",
            "error": {"code": "rate_limit_exceeded", "message": "Slow down"},
        },
    },
]
RESP_INCOMPLETE = [
    created(),
    call_added(0, "fc_1", "call_a", "get_secret_number"),
    args_delta(0, "fc_1", '{"name": "al'),
    incomplete("max_output_tokens"),
]
# The first call of the batch got its done, the second was cut mid-arguments.
RESP_INCOMPLETE_MID_BATCH = [
    created(),
    call_added(0, "fc_1", "call_a", "get_secret_number"),
    args_delta(0, "fc_1", '{"name": "alice"}'),
    *call_done(0, "fc_1", "call_a", "get_secret_number", '{"name": "alice"}'),
    call_added(1, "fc_2", "call_b", "lookup_city"),
    args_delta(1, "fc_2", '{"person": "b'),
    incomplete("max_output_tokens"),
]
# Both calls got their done; the response was cut off before it said it was complete.
RESP_INCOMPLETE_AFTER_CALLS = [
    created(),
    call_added(0, "fc_1", "call_a", "get_secret_number"),
    args_delta(0, "fc_1", '{"name": "alice"}'),
    *call_done(0, "fc_1", "call_a", "get_secret_number", '{"name": "alice"}'),
    call_added(1, "fc_2", "call_b", "lookup_city"),
    args_delta(1, "fc_2", '{"person": "bob"}'),
    *call_done(1, "fc_2", "call_b", "lookup_city", '{"person": "bob"}'),
    incomplete("max_output_tokens"),
]
RESP_REASONING = [
    created(),
    {
        "type": "response.output_item.added",
        "output_index": 0,
        "item": {"id": "rs_1", "type": "reasoning", "summary": []},
    },
    {
        "type": "response.reasoning_summary_text.delta",
        "item_id": "rs_1",
        "output_index": 0,
        "summary_index": 0,
        "delta": "Thinking about it.",
    },
    {
        "type": "response.output_item.done",
        "output_index": 0,
        "item": {"id": "rs_1", "type": "reasoning", "summary": []},
    },
    message_added(1, "msg_1"),
    text_delta(1, "msg_1", "Hi!"),
    *message_done(1, "msg_1", "Hi!"),
    completed(),
]

RESP_CASES: dict[str, tuple[list[dict[str, Any]], Outcome]] = {
    "text-only": (
        RESP_TEXT_ONLY,
        Outcome(
            texts=["Hello, wörld ✓"],
            calls=[],
            ended=[],
            reasoning=[],
            finish={"stopReason": "end_turn", "providerStopReason": "completed"},
        ),
    ),
    "one-call": (
        RESP_ONE_CALL,
        Outcome(
            texts=[],
            calls=[ALICE],
            ended=["call_a"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "completed"},
        ),
    ),
    "interleaved": (
        RESP_INTERLEAVED,
        Outcome(
            texts=[],
            calls=[ALICE, BOB_CITY],
            ended=["call_b", "call_a"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "completed"},
        ),
    ),
    "zero-arg": (
        RESP_ZERO_ARG,
        Outcome(
            texts=[],
            calls=[("call_z", "list_people", "{}")],
            ended=["call_z"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "completed"},
        ),
    ),
    "text-before-calls": (
        RESP_TEXT_BEFORE_CALLS,
        Outcome(
            texts=["Let me check."],
            calls=[ALICE],
            ended=["call_a"],
            reasoning=[],
            finish={"stopReason": "tool_use", "providerStopReason": "completed"},
        ),
    ),
    "error-mid-stream": (
        RESP_ERROR_MID_STREAM,
        Outcome(
            texts=["Half an ans"],
            calls=[],
            ended=[],
            reasoning=[],
            error=("The server had an error", "server_error"),
        ),
    ),
    "failed": (
        RESP_FAILED,
        Outcome(
            texts=[], calls=[], ended=[], reasoning=[], error=("Slow down", "rate_limit_exceeded")
        ),
    ),
    "incomplete": (
        RESP_INCOMPLETE,
        # The call was cut off before its done: it stays open and is never run.
        Outcome(
            texts=[],
            calls=[("call_a", "get_secret_number", '{"name": "al')],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens", "providerStopReason": "max_output_tokens"},
        ),
    ),
    "incomplete-mid-batch": (
        RESP_INCOMPLETE_MID_BATCH,
        # The call that got its done is not complete either: its response was cut off.
        Outcome(
            texts=[],
            calls=[ALICE, ("call_b", "lookup_city", '{"person": "b')],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens", "providerStopReason": "max_output_tokens"},
        ),
    ),
    "incomplete-after-calls": (
        RESP_INCOMPLETE_AFTER_CALLS,
        Outcome(
            texts=[],
            calls=[ALICE, BOB_CITY],
            ended=[],
            reasoning=[],
            finish={"stopReason": "max_tokens", "providerStopReason": "max_output_tokens"},
        ),
    ),
    "reasoning": (
        RESP_REASONING,
        Outcome(
            texts=["Hi!"],
            calls=[],
            ended=[],
            reasoning=["Thinking about it."],
            finish={"stopReason": "end_turn", "providerStopReason": "completed"},
        ),
    ),
}


@pytest.mark.parametrize("case", list(RESP_CASES))
def test_responses_translator_turns_each_published_stream_into_its_events(case: str) -> None:
    chunks, expected = RESP_CASES[case]
    assert summarize(translate(OpenAIResponsesTranslator(), chunks, named=True)) == expected


@pytest.mark.parametrize("case", ["one-call", "interleaved", "zero-arg", "text-before-calls"])
def test_responses_tool_call_end_waits_for_the_response_completed(case: str) -> None:
    chunks, _ = RESP_CASES[case]
    translator = OpenAIResponsesTranslator()
    for item in chunks[:-1]:
        # Even after the call's done: the response may yet say it was cut off.
        assert not any(isinstance(e, ToolCallEndEvent) for e in translator.feed(item, None))
    last = translator.feed(chunks[-1], None)
    assert [type(e) for e in last][-1] is RunFinishedEvent
    assert any(isinstance(e, ToolCallEndEvent) for e in last)


@pytest.mark.parametrize(
    "stream",
    [
        pytest.param(RESP_INTERLEAVED, id="in-the-order-of-their-done"),
        # A call whose done never came is complete too: it ends after the others.
        pytest.param([*RESP_INTERLEAVED[:-3], completed()], id="without-a-done-last"),
    ],
)
def test_responses_completed_ends_the_calls_in_order_then_finishes_the_run(
    stream: list[dict[str, Any]],
) -> None:
    translator = OpenAIResponsesTranslator()
    for item in stream[:-1]:
        assert not any(isinstance(e, ToolCallEndEvent) for e in translator.feed(item, None))
    *ends, finish = translator.feed(stream[-1], None)
    assert [e.tool_call_id for e in ends if isinstance(e, ToolCallEndEvent)] == ["call_b", "call_a"]
    assert len(ends) == 2
    assert isinstance(finish, RunFinishedEvent)
    assert finish.result == {"stopReason": "tool_use", "providerStopReason": "completed"}


@pytest.mark.parametrize(
    ("reason", "stop_reason"),
    [
        ("max_output_tokens", "max_tokens"),
        ("content_filter", "content_filter"),
        # Whatever the reason, an incomplete response did not complete its calls.
        ("a_reason_added_later", "other"),
    ],
)
def test_responses_incomplete_after_whole_calls_ends_none_and_keeps_its_reason(
    reason: str, stop_reason: str
) -> None:
    stream = [*RESP_INCOMPLETE_AFTER_CALLS[:-1], incomplete(reason)]
    outcome = summarize(translate(OpenAIResponsesTranslator(), stream, named=True))
    assert (outcome.calls, outcome.ended) == ([ALICE, BOB_CITY], [])
    assert outcome.finish == {"stopReason": stop_reason, "providerStopReason": reason}


@pytest.mark.parametrize(
    "failure",
    [
        pytest.param(RESP_FAILED[-1], id="response.failed"),
        pytest.param(RESP_ERROR_MID_STREAM[-1], id="error"),
    ],
)
def test_responses_a_failure_ends_the_calls_that_got_their_done_then_errors(
    failure: dict[str, Any],
) -> None:
    # As before the calls waited for the outcome: a failure does not say the response
    # was cut off, and the turn fails on RUN_ERROR whatever was ended.
    stream = [*RESP_INCOMPLETE_MID_BATCH[:-1], failure]
    events = translate(OpenAIResponsesTranslator(), stream, named=True)
    outcome = summarize(events)
    assert outcome.ended == ["call_a"]
    assert outcome.finish is None and outcome.error is not None
    assert isinstance(events[-1], RunErrorEvent)


def test_responses_a_stream_closed_after_a_done_ends_that_call_but_not_the_run() -> None:
    stream = RESP_INCOMPLETE_MID_BATCH[:-1]
    outcome = summarize(translate(OpenAIResponsesTranslator(), stream, named=True))
    assert outcome.ended == ["call_a"]
    assert outcome.finish is None and outcome.error is None


def test_responses_arguments_only_in_done_are_sent_once() -> None:
    stream = [
        created(),
        call_added(0, "fc_1", "call_a", "get_secret_number"),
        *call_done(0, "fc_1", "call_a", "get_secret_number", '{"name": "alice"}'),
        completed(),
    ]
    outcome = summarize(translate(OpenAIResponsesTranslator(), stream, named=True))
    assert outcome.calls == [ALICE]


def test_responses_a_call_given_whole_in_output_item_done_is_started_and_ended() -> None:
    stream = [
        created(),
        call_done(0, "fc_1", "call_a", "get_secret_number", '{"name": "alice"}')[1],
        completed(),
    ]
    outcome = summarize(translate(OpenAIResponsesTranslator(), stream, named=True))
    assert (outcome.calls, outcome.ended) == ([ALICE], ["call_a"])


def test_responses_calls_name_the_text_before_them_as_their_message() -> None:
    events = translate(OpenAIResponsesTranslator(), RESP_TEXT_BEFORE_CALLS, named=True)
    (start,) = [e for e in events if type(e).__name__ == "ToolCallStartEvent"]
    assert getattr(start, "parent_message_id", None) == "msg_1"


def test_responses_a_stream_that_stops_early_ends_no_call_and_not_the_run() -> None:
    outcome = summarize(translate(OpenAIResponsesTranslator(), RESP_ONE_CALL[:3], named=True))
    assert outcome.ended == [] and outcome.finish is None and outcome.error is None


def test_responses_summary_parts_of_one_reasoning_item_are_paragraphs_of_one_message() -> None:
    stream = [
        created(),
        reasoning_item(0, "rs_1"),
        {"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "summary_index": 0},
        summary_delta("rs_1", 0, "**Checking the road**\n\nLook "),
        summary_delta("rs_1", 0, "both ways."),
        {"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "summary_index": 1},
        summary_delta("rs_1", 1, "**Crossing**\n\nWalk."),
        # A part with no text adds no blank line of its own.
        {"type": "response.reasoning_summary_part.added", "item_id": "rs_1", "summary_index": 2},
        summary_delta("rs_1", 2, ""),
        summary_delta("rs_1", 3, "Done."),
        reasoning_item(0, "rs_1", done=True),
        completed(),
    ]
    outcome = summarize(translate(OpenAIResponsesTranslator(), stream, named=True))
    assert outcome.reasoning == [
        "**Checking the road**\n\nLook both ways.\n\n**Crossing**\n\nWalk.\n\nDone."
    ]


def test_responses_raw_reasoning_content_parts_are_paragraphs_and_items_stay_apart() -> None:
    stream = [
        created(),
        reasoning_item(0, "rs_1"),
        reasoning_text_delta("rs_1", 0, "The user asks "),
        reasoning_text_delta("rs_1", 0, "about Tokyo."),
        reasoning_text_delta("rs_1", 1, "I'll call the tool."),
        reasoning_item(0, "rs_1", done=True),
        reasoning_item(1, "rs_2"),
        summary_delta("rs_2", 0, "A second item starts afresh."),
        reasoning_item(1, "rs_2", done=True),
        completed(),
    ]
    outcome = summarize(translate(OpenAIResponsesTranslator(), stream, named=True))
    assert outcome.reasoning == [
        "The user asks about Tokyo.\n\nI'll call the tool.",
        "A second item starts afresh.",
    ]


# --- through the backend, over httpx.MockTransport ---


class Chunks(httpx.AsyncByteStream):
    """A response body sent in the given pieces (an iterator class, not a generator)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self._pieces = iter(pieces)

    def __aiter__(self) -> Chunks:
        return self

    async def __anext__(self) -> bytes:
        try:
            return next(self._pieces)
        except StopIteration:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        pass


def chat_body(chunks: list[dict[str, Any]]) -> bytes:
    return sse(chunks, done=True)


def responses_body(chunks: list[dict[str, Any]]) -> bytes:
    return sse(chunks, named=True)


class Recorder:
    """A MockTransport handler that answers with ``body`` and keeps each request."""

    def __init__(self, body: bytes | Callable[[], httpx.AsyncByteStream]) -> None:
        self.body = body
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        if isinstance(self.body, bytes):
            return httpx.Response(200, headers=SSE_HEADERS, content=self.body)
        return httpx.Response(200, headers=SSE_HEADERS, stream=self.body())

    def json(self, index: int = 0) -> Any:
        return msgspec.json.decode(self.requests[index].content)


BACKENDS: dict[
    str,
    tuple[
        Callable[..., ProviderBackend],
        Callable[[list[dict[str, Any]]], bytes],
        dict[str, tuple[list[dict[str, Any]], Outcome]],
    ],
] = {
    "chat": (OpenAIChatBackend, chat_body, CHAT_CASES),
    "responses": (OpenAIResponsesBackend, responses_body, RESP_CASES),
}
BACKEND_CASES = [
    pytest.param(api, case, id=f"{api}-{case}")
    for api, (_, _, cases) in BACKENDS.items()
    for case in cases
]


@pytest.mark.anyio
@pytest.mark.parametrize(("api", "case"), BACKEND_CASES)
async def test_backend_streams_each_published_stream_as_its_events(api: str, case: str) -> None:
    cls, body, cases = BACKENDS[api]
    chunks, expected = cases[case]
    recorder = Recorder(body(chunks))
    backend = cls("gpt-4o-mini", api_key="sk-test", transport=httpx.MockTransport(recorder))
    events = await collect(backend)
    assert events[0] == RunStartedEvent(thread_id="t1", run_id="r1")
    assert summarize(events) == expected
    finished = [e for e in events if isinstance(e, RunFinishedEvent)]
    assert all((e.thread_id, e.run_id) == ("t1", "r1") for e in finished)
    (request,) = recorder.requests
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["accept"] == "text/event-stream"


@pytest.mark.anyio
async def test_backend_endpoints_and_the_base_url_of_a_compatible_server() -> None:
    chat = Recorder(chat_body(CHAT_TEXT_ONLY))
    await collect(OpenAIChatBackend("m", transport=httpx.MockTransport(chat), api_key="sk-test"))
    assert str(chat.requests[0].url) == "https://api.openai.com/v1/chat/completions"
    local = Recorder(chat_body(CHAT_TEXT_ONLY))
    await collect(
        OpenAIChatBackend(
            "llama",
            base_url="http://127.0.0.1:8080/v1/",
            api_key="",
            transport=httpx.MockTransport(local),
        )
    )
    assert str(local.requests[0].url) == "http://127.0.0.1:8080/v1/chat/completions"
    assert "authorization" not in local.requests[0].headers
    responses = Recorder(responses_body(RESP_TEXT_ONLY))
    await collect(
        OpenAIResponsesBackend("m", transport=httpx.MockTransport(responses), api_key="sk-test")
    )
    assert str(responses.requests[0].url) == "https://api.openai.com/v1/responses"


class Tracked(Chunks):
    """Chunks that remember whether the whole body was read."""

    def __init__(self, pieces: list[bytes]) -> None:
        super().__init__(pieces)
        self.exhausted = False

    async def __anext__(self) -> bytes:
        try:
            return await super().__anext__()
        except StopAsyncIteration:
            self.exhausted = True
            raise


@pytest.mark.anyio
async def test_the_rest_of_the_body_is_read_once_the_run_has_ended() -> None:
    # RUN_FINISHED comes with the finish_reason; "data: [DONE]" is still on the wire.
    body = chat_body(CHAT_ONE_CALL)
    stream = Tracked([body[: body.index(b"data: [DONE]")], b"data: [DONE]\n\n"])
    backend = OpenAIChatBackend(
        "m", transport=httpx.MockTransport(Recorder(lambda: stream)), api_key="sk-test"
    )
    async with backend.run(KEY, run_input()) as events:
        async for event in events:
            if isinstance(event, RunFinishedEvent):
                break  # as the engine does
        assert stream.exhausted
    await backend.aclose()


# --- the request ---


def call(call_id: str, name: str, arguments: str) -> ToolCall:
    return ToolCall(id=call_id, function=FunctionCall(name=name, arguments=arguments))


CONVERSATION: list[Message] = [
    SystemMessage(id="s1", content="You are terse."),
    DeveloperMessage(id="d1", content="Use the tools."),
    UserMessage(id="u1", content="Secret numbers of alice, and everyone?"),
    ReasoningMessage(id="r1", content="not sent"),
    AssistantMessage(
        id="a1",
        content="Let me check.",
        tool_calls=[
            call("call_a", "get_secret_number", '{"name": "alice"}'),
            call("call_z", "list_people", ""),
        ],
    ),
    ToolMessage(id="t1", content="42", tool_call_id="call_a"),
    ToolMessage(
        id="t2",
        content='{"error": "the people list is down"}',
        tool_call_id="call_z",
        error="the people list is down",
    ),
    AssistantMessage(id="a2", content="Alice's is 42."),
    UserMessage(
        id="u2",
        content=[TextPart(text="And this?"), ImagePart(source=UrlSource(value="https://x/y.png"))],
    ),
]


@pytest.mark.anyio
async def test_chat_request_maps_every_message_and_tool() -> None:
    recorder = Recorder(chat_body(CHAT_TEXT_ONLY))
    backend = OpenAIChatBackend(
        "gpt-4o-mini",
        transport=httpx.MockTransport(recorder),
        options={"temperature": 0},
        api_key="sk-test",
    )
    await collect(backend, run_input(CONVERSATION))
    body = recorder.json()
    assert body["model"] == "gpt-4o-mini" and body["stream"] is True
    assert body["temperature"] == 0
    assert body["messages"] == [
        {"role": "system", "content": "You are terse."},
        {"role": "developer", "content": "Use the tools."},
        {"role": "user", "content": "Secret numbers of alice, and everyone?"},
        {
            "role": "assistant",
            "content": "Let me check.",
            "tool_calls": [
                {
                    "id": "call_a",
                    "type": "function",
                    "function": {"name": "get_secret_number", "arguments": '{"name": "alice"}'},
                },
                {
                    "id": "call_z",
                    "type": "function",
                    "function": {"name": "list_people", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "42"},
        {
            "role": "tool",
            "tool_call_id": "call_z",
            "content": '{"error": "the people list is down"}',
        },
        {"role": "assistant", "content": "Alice's is 42."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "And this?"},
                {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
            ],
        },
    ]
    tools = body["tools"]
    assert [t["type"] for t in tools] == ["function"] * 4
    assert [t["function"]["name"] for t in tools] == list(DEMO_TOOLS.names)
    assert tools[0]["function"]["parameters"] == DEMO_TOOLS.definitions()[0].parameters
    assert tools[0]["function"]["description"] == DEMO_TOOLS.definitions()[0].description


@pytest.mark.anyio
async def test_responses_request_maps_messages_to_input_items() -> None:
    recorder = Recorder(responses_body(RESP_TEXT_ONLY))
    backend = OpenAIResponsesBackend(
        "gpt-4.1", transport=httpx.MockTransport(recorder), api_key="sk-test"
    )
    await collect(backend, run_input(CONVERSATION))
    body = recorder.json()
    assert body["stream"] is True and body["model"] == "gpt-4.1"
    assert body["input"] == [
        {"type": "message", "role": "system", "content": "You are terse."},
        {"type": "message", "role": "developer", "content": "Use the tools."},
        {"type": "message", "role": "user", "content": "Secret numbers of alice, and everyone?"},
        {"type": "message", "role": "assistant", "content": "Let me check."},
        {
            "type": "function_call",
            "call_id": "call_a",
            "name": "get_secret_number",
            "arguments": '{"name": "alice"}',
        },
        {"type": "function_call", "call_id": "call_z", "name": "list_people", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "42"},
        {
            "type": "function_call_output",
            "call_id": "call_z",
            "output": '{"error": "the people list is down"}',
        },
        {"type": "message", "role": "assistant", "content": "Alice's is 42."},
        {
            "type": "message",
            "role": "user",
            "content": [
                {"type": "input_text", "text": "And this?"},
                {"type": "input_image", "image_url": "https://x/y.png"},
            ],
        },
    ]
    assert body["tools"][0] == {
        "type": "function",
        "name": "get_secret_number",
        "description": DEMO_TOOLS.definitions()[0].description,
        "parameters": DEMO_TOOLS.definitions()[0].parameters,
        "strict": False,
    }


# --- refused before any network call ---

BROKEN_CONVERSATIONS: dict[str, tuple[list[Message], str]] = {
    "call-without-result": (
        [
            UserMessage(id="u1", content="hi"),
            AssistantMessage(id="a1", tool_calls=[call("call_a", "get_secret_number", "{}")]),
            UserMessage(id="u2", content="well?"),
        ],
        "asks for tool call\\(s\\) 'call_a' with no tool message right after it",
    ),
    "one-result-of-two": (
        [
            UserMessage(id="u1", content="hi"),
            AssistantMessage(
                id="a1", tool_calls=[call("call_a", "x", "{}"), call("call_b", "x", "{}")]
            ),
            ToolMessage(id="t1", content="1", tool_call_id="call_a"),
        ],
        "'call_b'",
    ),
    "result-without-call": (
        [
            UserMessage(id="u1", content="hi"),
            ToolMessage(id="t1", content="1", tool_call_id="call_ghost"),
        ],
        "tool message 't1' answers tool call 'call_ghost'",
    ),
    "result-after-a-user-message": (
        [
            UserMessage(id="u1", content="hi"),
            AssistantMessage(id="a1", tool_calls=[call("call_a", "x", "{}")]),
            ToolMessage(id="t1", content="1", tool_call_id="call_a"),
            UserMessage(id="u2", content="and?"),
            ToolMessage(id="t2", content="1", tool_call_id="call_a"),
        ],
        "'t2' answers tool call 'call_a'",
    ),
    "two-results-for-one-call": (
        [
            UserMessage(id="u1", content="hi"),
            AssistantMessage(id="a1", tool_calls=[call("call_a", "x", "{}")]),
            ToolMessage(id="t1", content="1", tool_call_id="call_a"),
            ToolMessage(id="t2", content="2", tool_call_id="call_a"),
        ],
        "two results",
    ),
    "audio-from-a-url": (
        [UserMessage(id="u1", content=[AudioPart(source=UrlSource(value="https://x/a.wav"))])],
        "cannot take an audio part from a url source",
    ),
}


@pytest.mark.anyio
@pytest.mark.parametrize("cls", [OpenAIChatBackend, OpenAIResponsesBackend])
@pytest.mark.parametrize("case", list(BROKEN_CONVERSATIONS))
async def test_a_conversation_the_provider_would_refuse_is_refused_before_sending(
    cls: Callable[..., ProviderBackend], case: str
) -> None:
    messages, message = BROKEN_CONVERSATIONS[case]
    backend = cls("m", transport=httpx.MockTransport(refuse))
    with pytest.raises(ConversationError, match=message):
        await collect(backend, run_input(messages))


@pytest.mark.anyio
async def test_a_provider_without_tools_refuses_tools_before_sending() -> None:
    class NoTools(OpenAIChatBackend):
        capabilities: ClassVar[Capabilities] = Capabilities(
            streaming=True, tools=False, tool_ids=False, parallel_calls=False
        )

    with pytest.raises(ConversationError, match="does not support tools"):
        await collect(NoTools("m", transport=httpx.MockTransport(refuse)))


@pytest.mark.anyio
async def test_inline_audio_and_images_are_sent_as_content_parts() -> None:
    recorder = Recorder(chat_body(CHAT_TEXT_ONLY))
    parts: list[ContentPart] = [
        ImagePart(source=DataSource(value="aW1n", mime_type="image/png")),
        AudioPart(source=DataSource(value="d2F2", mime_type="audio/wav")),
    ]
    await collect(
        OpenAIChatBackend("m", transport=httpx.MockTransport(recorder), api_key="sk-test"),
        run_input([UserMessage(id="u1", content=parts)]),
    )
    assert recorder.json()["messages"][0]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aW1n"}},
        {"type": "input_audio", "input_audio": {"data": "d2F2", "format": "wav"}},
    ]


# --- the Engine, end to end, against a loopback server ---


@pytest.fixture
def provider() -> Iterator[LoopbackServer]:
    with LoopbackServer(ScriptedProvider()) as server:
        yield server


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stream", "stop_reason", "abandoned"),
    [
        pytest.param(CHAT_LENGTH_MID_CALL, "max_tokens", ["call_abc"], id="length-mid-call"),
        pytest.param(
            CHAT_FILTERED_MID_CALL, "content_filter", ["call_abc"], id="content-filter-mid-call"
        ),
        pytest.param(CHAT_LENGTH_MID_BATCH, "max_tokens", ["call_a", "call_b"], id="mid-batch"),
    ],
)
async def test_chat_engine_runs_no_call_of_a_response_cut_off(
    provider: LoopbackServer, stream: list[dict[str, Any]], stop_reason: str, abandoned: list[str]
) -> None:
    provider.app.script(chat_body(stream))
    ran: list[tuple[str, str]] = []
    backend = OpenAIChatBackend("gpt-4o-mini", api_key="sk-test", base_url=f"{provider.url}/v1")
    turn, finished = await run_recorded_turn(backend, ran)
    assert ran == [], "no tool runs on the calls of a cut-off response"
    # The run finished with its stop reason; nothing was pending, so the turn ends with it.
    assert [result["stopReason"] for result in finished] == [stop_reason]
    assert turn.status is RunStatus.completed, turn.reason
    assert [c.id for c in turn.abandoned_calls] == abandoned
    assert [v.code for v in turn.violations] == ["tool_call_not_ended"] * len(abandoned)
    assert list(turn.conversation.tool_calls()) == []
    assert len(provider.app.requests) == 1, "no continuation: there is no result to send"


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("stream", "stop_reason"),
    [
        pytest.param(RESP_INCOMPLETE_MID_BATCH, "max_tokens", id="mid-batch"),
        pytest.param(RESP_INCOMPLETE_AFTER_CALLS, "max_tokens", id="after-calls"),
        pytest.param(
            [*RESP_INCOMPLETE_AFTER_CALLS[:-1], incomplete("content_filter")],
            "content_filter",
            id="filtered-after-calls",
        ),
    ],
)
async def test_responses_engine_runs_no_call_of_a_response_incomplete(
    provider: LoopbackServer, stream: list[dict[str, Any]], stop_reason: str
) -> None:
    provider.app.script(responses_body(stream))
    ran: list[tuple[str, str]] = []
    backend = OpenAIResponsesBackend("gpt-4.1", api_key="sk-test", base_url=f"{provider.url}/v1")
    turn, finished = await run_recorded_turn(backend, ran)
    assert ran == [], "no tool runs on the calls of a response cut off"
    assert [result["stopReason"] for result in finished] == [stop_reason]
    assert turn.status is RunStatus.completed, turn.reason
    assert [c.id for c in turn.abandoned_calls] == ["call_a", "call_b"]
    assert [v.code for v in turn.violations] == ["tool_call_not_ended"] * 2
    assert list(turn.conversation.tool_calls()) == []
    assert len(provider.app.requests) == 1, "no continuation: there is no result to send"


@pytest.mark.anyio
async def test_responses_engine_runs_no_call_of_a_response_that_failed_after_a_done(
    provider: LoopbackServer,
) -> None:
    provider.app.script(responses_body([*RESP_INCOMPLETE_MID_BATCH[:-1], RESP_FAILED[-1]]))
    ran: list[tuple[str, str]] = []
    backend = OpenAIResponsesBackend("gpt-4.1", api_key="sk-test", base_url=f"{provider.url}/v1")
    turn, finished = await run_recorded_turn(backend, ran)
    assert ran == [] and finished == []
    assert turn.status is RunStatus.failed, turn.reason
    assert [c.id for c in turn.abandoned_calls] == ["call_a", "call_b"]
    assert len(provider.app.requests) == 1


@pytest.mark.anyio
@pytest.mark.parametrize("backend_class", [OpenAIChatBackend, OpenAIResponsesBackend])
async def test_developer_messages_can_go_out_as_system_for_servers_without_the_role(
    backend_class: type[OpenAIChatBackend] | type[OpenAIResponsesBackend],
) -> None:
    chat = backend_class is OpenAIChatBackend
    recorder = Recorder(chat_body(CHAT_TEXT_ONLY) if chat else responses_body(RESP_TEXT_ONLY))
    backend = backend_class(
        "m", transport=httpx.MockTransport(recorder), developer_role="system", api_key="sk-test"
    )
    await collect(backend, run_input(CONVERSATION))
    body = recorder.json()
    sent = body["messages"] if chat else body["input"]
    roles = [m["role"] for m in sent if "role" in m]
    assert roles[:3] == ["system", "system", "user"]
    assert "developer" not in roles
    assert sent[1]["content"] == "Use the tools."


def test_an_unknown_developer_role_is_refused() -> None:
    with pytest.raises(ValueError, match="developer_role"):
        OpenAIChatBackend("m", developer_role="admin")  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_the_context_goes_after_the_leading_system_and_developer_messages() -> None:
    recorder = Recorder(chat_body(CHAT_TEXT_ONLY))
    backend = OpenAIChatBackend("m", transport=httpx.MockTransport(recorder), api_key="sk-test")
    context = [Context(description="The user's name", value="Ada")]
    given = msgspec.structs.replace(run_input(CONVERSATION), context=context)
    await collect(backend, given)
    sent = recorder.json()["messages"]
    assert [m["role"] for m in sent[:4]] == ["system", "developer", "system", "user"]
    assert sent[2]["content"] == "Context from the application:\n\nThe user's name:\nAda"
    assert given.messages == CONVERSATION  # the engine's input is left as it was
