"""The embedded demo: its tools, its scenarios, the ASGI app and serving it."""

from __future__ import annotations

from typing import Any

import httpx
import msgspec
import pytest

from toolrelay import ToolRegistry, execute_tool
from toolrelay.demo import (
    DEMO_TOOLS,
    SCENARIOS,
    DemoAgent,
    DemoServer,
    choose_scenario,
    plan_reply,
    serve_demo,
)
from toolrelay.protocol import (
    AssistantMessage,
    FunctionCall,
    Message,
    RunAgentInput,
    RunErrorEvent,
    RunFinishedEvent,
    RunStartedEvent,
    TextMessageContentEvent,
    ToolCall,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
    encode,
)

pytestmark = pytest.mark.anyio


def given(
    *messages: Message | str, scenario: str | None = None, tools: ToolRegistry = DEMO_TOOLS
) -> RunAgentInput:
    return RunAgentInput(
        thread_id="t",
        run_id="r",
        messages=[
            UserMessage(id=f"u{i}", content=m) if isinstance(m, str) else m
            for i, m in enumerate(messages)
        ],
        tools=list(tools.definitions()),
        forwarded_props={} if scenario is None else {"scenario": scenario},
    )


def said(plan: list[Any]) -> str:
    return "".join(e.delta for e in plan if isinstance(e, TextMessageContentEvent))


# --- the tools -------------------------------------------------------------------------------


async def test_demo_tools_are_declared_with_json_schemas() -> None:
    assert DEMO_TOOLS.names == ("get_secret_number", "lookup_city", "get_weather", "list_people")
    (secret, _, _, people) = DEMO_TOOLS.definitions()
    assert secret.parameters["required"] == ["name"]
    assert secret.parameters["properties"]["name"]["type"] == "string"
    assert people.parameters == {"type": "object", "properties": {}}


@pytest.mark.parametrize(
    ("name", "arguments", "content", "error"),
    [
        ("get_secret_number", '{"name": "Alice "}', "42", None),
        ("get_secret_number", '{"name": "zed"}', None, "nobody called 'zed' has a secret number"),
        ("lookup_city", '{"person": "bob"}', "Lima", None),
        ("get_weather", '{"city": "osaka"}', None, None),
        ("get_weather", '{"city": "Atlantis"}', None, "no forecast for 'Atlantis'"),
        ("list_people", "", '["alice","bob","carol"]', None),
    ],
)
async def test_demo_tools_answer_deterministically(
    name: str, arguments: str, content: str | None, error: str | None
) -> None:
    result = await execute_tool(DEMO_TOOLS, name, arguments)
    assert result.error == error
    if content is not None:
        assert result.content == content
    if name == "get_weather" and error is None:
        assert msgspec.json.decode(result.content)["forecast"] == "light rain"


# --- choosing and playing scenarios ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "scenario"),
    [
        ("secret", "secret"),
        ("What are the secret numbers?", "secret"),
        ("What's the weather where Alice lives?", "multihop"),
        ("Who do you know?", "zero-arg"),
        ("zero-arg", "zero-arg"),
        ("please loop", "loop"),
        ("the broken one", "broken"),
        ("Hello!", "text"),
    ],
)
async def test_the_last_user_message_chooses_the_scenario(text: str, scenario: str) -> None:
    assert choose_scenario(given("secret numbers?", text)) == scenario


async def test_forwarded_props_choose_the_scenario_first() -> None:
    assert choose_scenario(given("secret numbers?", scenario="text")) == "text"


async def test_an_unknown_scenario_is_answered_in_words() -> None:
    plan = plan_reply(given("hi", scenario="juggling"))
    assert said(plan).startswith("I do not know the scenario 'juggling'. I know: secret,")
    assert isinstance(plan[-1], RunFinishedEvent)


async def test_every_scenario_starts_with_the_inputs_ids() -> None:
    for scenario in SCENARIOS:
        plan = plan_reply(given("hi", scenario=scenario))
        assert plan[0] == RunStartedEvent(thread_id="t", run_id="r"), scenario


async def test_secret_streams_two_calls_with_arguments_in_pieces() -> None:
    plan = plan_reply(given("secret?"))
    starts = [e for e in plan if isinstance(e, ToolCallStartEvent)]
    assert [(s.tool_call_id, s.tool_call_name) for s in starts] == [
        ("r-call-2", "get_secret_number"),
        ("r-call-3", "get_secret_number"),
    ]
    assert {s.parent_message_id for s in starts} == {"r-msg-1"}
    pieces = [e.delta for e in plan if isinstance(e, ToolCallArgsEvent)]
    assert all(len(piece) <= 7 for piece in pieces)
    assert "".join(pieces) == '{"name":"alice"}{"name":"bob"}'
    assert said(plan) == "Let me look up both secret numbers."
    assert isinstance(plan[-1], RunFinishedEvent)


def continuation(calls: list[tuple[str, str, str]], results: list[ToolMessage]) -> RunAgentInput:
    assistant = AssistantMessage(
        id="a1",
        tool_calls=[
            ToolCall(id=call_id, function=FunctionCall(name=name, arguments=args))
            for call_id, name, args in calls
        ],
    )
    return given("secret numbers?", assistant, *results)


async def test_the_answer_quotes_the_results_and_their_errors() -> None:
    plan = plan_reply(
        continuation(
            [("c1", "get_secret_number", '{"name":"alice"}'), ("c2", "get_secret_number", "{}")],
            [
                ToolMessage(id="t1", tool_call_id="c1", content="42"),
                ToolMessage(id="t2", tool_call_id="c2", content='{"error":"no name"}'),
            ],
        )
    )
    assert said(plan) == (
        "Alice's secret number is 42 and I could not get Someone's number (no name)."
    )


async def test_zero_arg_calls_its_tool_without_args_events() -> None:
    plan = plan_reply(given("who do you know?"))
    assert [type(e) for e in plan] == [
        RunStartedEvent,
        ToolCallStartEvent,
        ToolCallEndEvent,
        RunFinishedEvent,
    ]


async def test_broken_ends_with_a_drop_and_malformed_with_raw_bytes() -> None:
    broken = plan_reply(given("hi", scenario="broken"))
    assert broken[-1] is None
    assert not any(isinstance(e, RunFinishedEvent) for e in broken)
    malformed = plan_reply(given("hi", scenario="malformed"))
    assert any(isinstance(e, bytes) for e in malformed)
    error = plan_reply(given("hi", scenario="error"))
    assert error[-1] == RunErrorEvent(
        message="the demo agent's model is overloaded; try again later", code="overloaded"
    )


async def test_loop_asks_again_after_every_result() -> None:
    first = continuation(
        [("c1", "get_secret_number", '{"name":"alice"}')],
        [ToolMessage(id="t1", tool_call_id="c1", content="42")],
    )
    plan = plan_reply(msgspec.structs.replace(first, forwarded_props={"scenario": "loop"}))
    assert said(plan) == "Let me check Alice's number again (attempt 2)."
    assert any(isinstance(e, ToolCallStartEvent) for e in plan)


async def test_a_missing_tool_is_explained_not_called() -> None:
    plan = plan_reply(given("secret numbers?", tools=ToolRegistry()))
    assert said(plan) == (
        "I would need the get_secret_number tool for that, but this client does not offer "
        "it (tools offered: none)."
    )
    assert not any(isinstance(e, ToolCallStartEvent) for e in plan)


# --- the ASGI application ----------------------------------------------------------------------


async def asgi(method: str, path: str = "/", content: bytes = b"") -> httpx.Response:
    transport = httpx.ASGITransport(DemoAgent())
    async with httpx.AsyncClient(transport=transport, base_url="http://demo") as client:
        return await client.request(method, path, content=content)


async def test_get_describes_the_agent() -> None:
    response = await asgi("GET")
    assert response.status_code == 200
    assert response.json() == {"agent": "toolrelay demo", "scenarios": SCENARIOS}


# The 413 stops reading the request body early; httpx's in-memory body is an async
# generator that trio warns about when it is dropped suspended (encode/httpx#3686).
@pytest.mark.filterwarnings(
    r"ignore:Async generator 'httpx\S*' was garbage collected:ResourceWarning"
)
@pytest.mark.parametrize(
    ("method", "path", "content", "status"),
    [
        ("POST", "/elsewhere", b"{}", 404),
        ("PUT", "/", b"{}", 405),
        ("POST", "/", b"{not json", 422),
        ("POST", "/", b'{"threadId": 1}', 422),
        ("POST", "/", b" " * (4 * 1024 * 1024 + 1), 413),
    ],
)
async def test_bad_requests_get_json_errors(
    method: str, path: str, content: bytes, status: int
) -> None:
    response = await asgi(method, path, content)
    assert response.status_code == status
    assert "error" in response.json()


async def test_post_streams_server_sent_events() -> None:
    response = await asgi("POST", "/", encode(given("hello")))
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    body = response.text
    assert body.startswith(": toolrelay demo agent\n\ndata: {")
    assert body.endswith('"type":"RUN_FINISHED","threadId":"t","runId":"r"}\n\n')


# --- serving it -----------------------------------------------------------------------------------


async def test_serve_demo_serves_on_loopback_on_either_library() -> None:
    app = DemoAgent()
    async with serve_demo(app) as url:
        assert url.startswith("http://127.0.0.1:")
        async with httpx.AsyncClient() as client:
            response = await client.post(url, content=encode(given("hi")))
        assert response.status_code == 200
    assert app.completed == 1
    assert [r.run_id for r in app.requests] == ["r"]


def test_demo_server_starts_and_stops_from_synchronous_code() -> None:
    server = DemoServer()
    url = server.start()
    try:
        assert httpx.get(url).json()["agent"] == "toolrelay demo"
        with pytest.raises(RuntimeError, match="already started"):
            server.start()
    finally:
        server.stop()
    with pytest.raises(httpx.ConnectError):
        httpx.get(url)
