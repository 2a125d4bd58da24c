"""Interop with a real third-party AG-UI server: pydantic-ai's AG-UI adapter.

pydantic-ai (``pydantic-ai-slim[ag-ui]``) serves an ``Agent`` whose model is a
``FunctionModel``: a deterministic function standing in for the LLM, so no network model
is involved. The server runs under uvicorn on 127.0.0.1, in a thread. toolrelay's tools
go out as client (frontend) tools in ``RunAgentInput.tools``; pydantic-ai turns them into
deferred calls, streams them back, and ends the run; toolrelay executes them and sends
the results in a continuation run; the model answers from them.

Every quirk of the real server found here is written down in ``docs/quirks.md``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from ag_ui.core import RunAgentInput as SdkRunAgentInput
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import (
    AgentInfo,
    DeltaThinkingPart,
    DeltaToolCall,
    FunctionModel,
)
from pydantic_ai.ui.ag_ui import AGUIAdapter
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from toolrelay import RunStatus, TextMessage, ToolCallStatus, tool
from toolrelay._core import ReasoningRecord
from toolrelay._reasons import ReasonKind
from toolrelay.cli._replay import replay_capture
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    AssistantMessage,
    RunFinishedEvent,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolMessage,
    encode,
)

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _loopback import (
    completed_turn,
    failure,
    no_arguments_turn,
    no_tools_turn,
    reasoning_turn,
    rejected_without_run_id,
    run_turn,
    secret_input,
    serve,
    server_tool_turn,
    texts,
    wire_run,
)

pytestmark = pytest.mark.anyio


# --- the server: a pydantic-ai agent with a scripted model ---------------------------------

#: Every message list the model was called with, in order (the server runs in a thread).
MODEL_CALLS: list[list[ModelMessage]] = []


def _prompt(messages: list[ModelMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content.lower()
    return ""


def _returns(messages: list[ModelMessage]) -> list[ToolReturnPart]:
    return [
        part
        for message in messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, ToolReturnPart)
    ]


async def scripted_model(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
    """The "LLM": what it does follows from the prompt and the tool results so far."""
    MODEL_CALLS.append(list(messages))
    prompt = _prompt(messages)
    done = {part.tool_name: part for part in _returns(messages)}
    offered = {t.name for t in info.function_tools}
    if "fail" in prompt:
        raise RuntimeError("the model fell over")
    if "interleave" in prompt:
        # Two parallel calls whose argument deltas alternate, as models stream them.
        if not done:
            yield {
                0: DeltaToolCall(name="get_secret_number", json_args='{"name":', tool_call_id="i-a")
            }
            yield {1: DeltaToolCall(name="get_secret_number", json_args='{"na', tool_call_id="i-b")}
            yield {0: DeltaToolCall(json_args=' "ali')}
            yield {1: DeltaToolCall(json_args='me": "bob"}')}
            yield {0: DeltaToolCall(json_args='ce"}')}
        else:
            yield "Numbers: " + ", ".join(p.model_response_str() for p in _returns(messages))
    elif "secret" in prompt:
        if "get_secret_number" not in offered:
            yield "I have no get_secret_number tool."
        elif not done:
            yield {
                0: DeltaToolCall(name="get_secret_number", json_args='{"name":', tool_call_id="a")
            }
            yield {0: DeltaToolCall(json_args=' "alice"}')}
            yield {1: DeltaToolCall(name="get_secret_number", json_args='{"name": "bob"}')}
        else:
            results = [p.model_response_str() for p in _returns(messages)]
            yield f"The numbers are {' and '.join(results)}."
    elif "weather" in prompt:
        if "lookup_city" not in done:
            yield "Looking up the city. "
            yield {
                0: DeltaToolCall(
                    name="lookup_city", json_args='{"person": "alice"}', tool_call_id="c1"
                )
            }
        elif "get_weather" not in done:
            city = done["lookup_city"].model_response_str()
            yield {
                0: DeltaToolCall(
                    name="get_weather", json_args=f'{{"city": "{city}"}}', tool_call_id="c2"
                )
            }
        else:
            yield f"Forecast: {done['get_weather'].model_response_str()}"
    elif "people" in prompt:
        if not done:
            yield {0: DeltaToolCall(name="list_people", tool_call_id="p1")}  # no arguments at all
        else:
            yield f"People: {done['list_people'].model_response_str()}"
    elif "think" in prompt:
        if not done:
            yield {0: DeltaThinkingPart(content="The user wants ", signature="sig-1")}
            yield {0: DeltaThinkingPart(content="a number.")}
            yield {
                1: DeltaToolCall(
                    name="get_secret_number", json_args='{"name": "bob"}', tool_call_id="t1"
                )
            }
        else:
            yield "Bob has " + done["get_secret_number"].model_response_str() + "."
    elif "roll" in prompt:
        if "roll_die" not in done:
            yield {0: DeltaToolCall(name="roll_die", json_args="{}", tool_call_id="srv-1")}
        elif "get_secret_number" not in done:
            yield "Rolled. "
            yield {
                0: DeltaToolCall(
                    name="get_secret_number", json_args='{"name": "alice"}', tool_call_id="cli-1"
                )
            }
        else:
            yield "Die " + done["roll_die"].model_response_str()
            yield ", secret " + done["get_secret_number"].model_response_str() + "."
    else:
        yield "Hello from pydantic-ai."


AGENT: Agent[None, str] = Agent(FunctionModel(stream_function=scripted_model))

#: How often the server-side tool ran (it must run on the server only).
SERVER_TOOL_RUNS: list[int] = []


@AGENT.tool_plain
def roll_die() -> int:
    """Roll a die (a server-side tool: pydantic-ai runs it itself)."""
    SERVER_TOOL_RUNS.append(4)
    return 4


async def current(request: Request) -> Response:
    return await AGUIAdapter.dispatch_request(request, agent=AGENT)


async def legacy(request: Request) -> Response:
    # As pydantic-ai talks to a client on ag-ui-protocol < 0.1.11: THINKING_* events.
    return await AGUIAdapter.dispatch_request(request, agent=AGENT, ag_ui_version="0.1.10")


APP = Starlette(
    routes=[
        Route("/agent", current, methods=["POST"]),
        Route("/legacy", legacy, methods=["POST"]),
    ]
)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """pydantic-ai's AG-UI app served by uvicorn on loopback, in a thread."""
    with serve(APP, "pydantic-ai's server") as url:
        yield url


# --- the round trip -----------------------------------------------------------------------------


async def test_client_tools_go_out_come_back_and_the_results_continue(server: str) -> None:
    MODEL_CALLS.clear()
    turn, inputs = await completed_turn(f"{server}/agent", "What are the secret numbers?")
    calls = list(turn.conversation.tool_calls())
    assert [(c.name, c.arguments, c.status) for c in calls] == [
        ("get_secret_number", '{"name": "alice"}', ToolCallStatus.completed),
        ("get_secret_number", '{"name": "bob"}', ToolCallStatus.completed),
    ]
    assert calls[0].id == "a"
    assert calls[1].id.startswith("pyd_ai_"), "pydantic-ai makes ids the model did not give"
    assert texts(turn)[-1] == "The numbers are 42 and 7."
    # The tools went out as client tools, with their JSON Schemas.
    first = MODEL_CALLS[0]
    assert isinstance(first[-1], ModelRequest)
    # The continuation carried the results, which the model saw as tool returns.
    last = MODEL_CALLS[-1]
    returns = _returns(last)
    assert [(r.tool_call_id, r.model_response_str()) for r in returns] == [
        (calls[0].id, "42"),
        (calls[1].id, "7"),
    ]
    assert len(inputs) == 2
    assert inputs[1].parent_run_id == inputs[0].run_id
    # What toolrelay sends is valid for the official SDK too.
    for sent in inputs:
        SdkRunAgentInput.model_validate_json(encode(sent))


async def test_multihop_continues_twice(server: str) -> None:
    turn, inputs = await run_turn(f"{server}/agent", "What's the weather where Alice lives?")
    assert turn.status is RunStatus.completed, turn.reason
    assert [c.arguments for c in turn.conversation.tool_calls()] == [
        '{"person": "alice"}',
        '{"city": "Paris"}',
    ]
    assert texts(turn)[-1].startswith('Forecast: {"city":"Paris","forecast":"sunny"')
    assert len(inputs) == 3
    # The text streamed before the first call and the call travel as one assistant message.
    merged = [m for m in inputs[1].messages if isinstance(m, AssistantMessage)]
    assert [(m.content, [c.id for c in m.tool_calls or ()]) for m in merged] == [
        ("Looking up the city. ", ["c1"])
    ]


async def test_a_tool_without_arguments_streams_no_args_and_is_sent_back_as_empty_object(
    server: str,
) -> None:
    turn, _ = await no_arguments_turn(f"{server}/agent")
    assert texts(turn)[-1] == 'People: ["alice","bob","carol"]'


async def test_an_empty_text_message_opens_every_tool_call_response(server: str) -> None:
    turn, inputs = await run_turn(f"{server}/agent", "secret numbers")
    empty = [m for m in turn.conversation.messages if isinstance(m, TextMessage) and not m.text]
    assert len(empty) == 1
    (call_message,) = [
        m for m in inputs[1].messages if isinstance(m, AssistantMessage) and m.tool_calls
    ]
    assert call_message.id == empty[0].id
    assert call_message.content == ""


async def test_reasoning_events_are_recorded_and_not_sent_back(server: str) -> None:
    turn, _ = await reasoning_turn(f"{server}/agent")
    assert texts(turn)[-1] == "Bob has 7."
    # The signature (REASONING_ENCRYPTED_VALUE, a JSON string here) is kept on the record.
    (reasoning,) = [m for m in turn.conversation.messages if isinstance(m, ReasoningRecord)]
    assert reasoning.encrypted_value is not None and "sig-1" in reasoning.encrypted_value


async def test_legacy_thinking_events_are_tolerated(server: str) -> None:
    await reasoning_turn(f"{server}/legacy")


async def test_a_server_side_tool_result_is_kept_not_executed_again(server: str) -> None:
    turn, inputs = await server_tool_turn(f"{server}/agent", SERVER_TOOL_RUNS)
    assert texts(turn)[-1] == "Die 4, secret 42."
    # Both results travel back (the server's own one is echoed), each once.
    results = [m.tool_call_id for m in inputs[1].messages if isinstance(m, ToolMessage)]
    assert sorted(results) == ["cli-1", "srv-1"]


async def test_a_client_tool_named_like_a_server_tool_is_refused_by_the_server(
    server: str,
) -> None:
    @tool(name="roll_die")
    async def client_roll_die() -> int:
        """A client tool with the server tool's name."""
        return 1

    turn, _ = await run_turn(
        f"{server}/agent", "roll a die", tools=DEMO_TOOLS.copy().register(client_roll_die)
    )
    assert turn.status is RunStatus.failed
    assert turn.reason is not None and turn.reason.kind is ReasonKind.AGENT_ERROR
    assert "conflicts" in turn.reason.message and "'roll_die'" in turn.reason.message


async def test_a_model_error_is_run_error_and_fails_the_turn(server: str) -> None:
    turn, _ = await run_turn(f"{server}/agent", "please fail")
    assert failure(turn) == (RunStatus.failed, ReasonKind.AGENT_ERROR, "the model fell over")


async def test_a_missing_tool_is_answered_in_words(server: str) -> None:
    await no_tools_turn(f"{server}/agent")


# --- the wire, directly -----------------------------------------------------------------------


async def test_run_ids_are_echoed_and_1_0_clients_get_pending_call_ids(server: str) -> None:
    received = await wire_run(f"{server}/agent", secret_input(protocol_version="1.0"))
    started, finished = received[0], received[-1]
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id, started.protocol_version) == (
        "wire-thread",
        "wire-run",
        "1.0",
    )
    assert started.timestamp is not None
    assert isinstance(finished, RunFinishedEvent)
    assert isinstance(finished.outcome, RunFinishedSuccessOutcome)
    pending = finished.outcome.pending_tool_call_ids
    assert pending is not None and pending[0] == "a" and len(pending) == 2


async def test_a_request_the_server_rejects_is_a_422_with_its_reasons(server: str) -> None:
    rejected = await rejected_without_run_id(f"{server}/agent", secret_input())
    assert rejected.status_code == 422
    assert '"loc":["runId"]' in rejected.body_excerpt


async def test_a_recorded_pydantic_ai_stream_replays_cleanly(server: str) -> None:
    async with httpx.AsyncClient() as client:
        response = await client.post(
            f"{server}/agent",
            content=encode(secret_input()),
            headers={"accept": "text/event-stream", "content-type": "application/json"},
        )
    report = replay_capture(response.content)
    assert report.findings == []
    assert report.status is RunStatus.executing_tools
    assert [c.name for c in report.ready_calls] == ["get_secret_number"] * 2
    await anyio.lowlevel.checkpoint()


# --- interleaved argument streams (issue 15) ------------------------------------------------


async def test_interleaved_arguments_after_an_early_end_belong_to_their_call(server: str) -> None:
    # pydantic-ai ends the first call when the second starts, and then streams the
    # first call's remaining arguments after its TOOL_CALL_END. Tools run when the run
    # ends, so those arguments are the call's: kept, logged once per call.
    events = await wire_run(
        f"{server}/agent",
        secret_input(thread_id="wire-interleave", prompt="interleave alice and bob"),
    )
    ended: set[str] = set()
    late: list[str] = []
    for event in events:
        if isinstance(event, ToolCallEndEvent):
            ended.add(event.tool_call_id)
        elif isinstance(event, ToolCallArgsEvent) and event.tool_call_id in ended:
            late.append(event.tool_call_id)
    assert late == ["i-a", "i-a"], "pydantic-ai no longer sends arguments after TOOL_CALL_END"

    turn, _ = await run_turn(f"{server}/agent", "interleave alice and bob")
    assert turn.status is RunStatus.completed, turn.reason
    calls = list(turn.conversation.tool_calls())
    assert [(c.id, c.arguments) for c in calls] == [
        ("i-a", '{"name": "alice"}'),
        ("i-b", '{"name": "bob"}'),
    ]
    assert [c.result.content for c in calls if c.result is not None] == ["42", "7"]
    assert {v.code for v in turn.violations} == {"args_after_end"}
    assert texts(turn)[-1] == "Numbers: 42, 7"
