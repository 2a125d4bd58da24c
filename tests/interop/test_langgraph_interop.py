"""Interop with a real third-party AG-UI server: LangGraph's AG-UI adapter.

``ag-ui-langgraph`` serves a compiled LangGraph graph as an AG-UI endpoint
(``LangGraphAgent`` + ``add_langgraph_fastapi_endpoint``, FastAPI). The graph here is an
ordinary one: a ``StateGraph`` whose ``chat`` node binds the client's tools (the adapter
puts ``RunAgentInput.tools`` in the graph state under ``tools``) plus one server-side
tool to a chat model, and ends the run when the model asks for a client tool. The model
is a small ``BaseChatModel`` whose stream is scripted (no network model), so every event
on the wire comes from the adapter's own translation of LangGraph's ``astream_events``.
The server runs under uvicorn on 127.0.0.1, in a thread; the graph's history lives in an
in-memory checkpointer, keyed by thread, which is why every test uses a fresh thread id.

Every quirk of the real server found here is written down in ``docs/quirks.md``.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import msgspec
import pytest
from ag_ui.core import RunAgentInput as SdkRunAgentInput
from ag_ui_langgraph import LangGraphAgent, add_langgraph_fastapi_endpoint
from fastapi import FastAPI
from langchain_core.language_models import BaseChatModel, LanguageModelInput
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    BaseMessage,
    HumanMessage,
    ToolMessage as LcToolMessage,
)
from langchain_core.messages.tool import tool_call_chunk
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import BaseTool, tool as lc_tool
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode
from langgraph.types import interrupt

from toolrelay import Engine, ResumeError, RunStatus, ToolCallStatus, ToolRegistry, Turn
from toolrelay._core import ReasoningRecord
from toolrelay._reasons import ReasonKind
from toolrelay.backends import AguiHttpBackend
from toolrelay.demo import DEMO_TOOLS
from toolrelay.protocol import (
    AssistantMessage,
    CustomEvent,
    MessagesSnapshotEvent,
    RawEvent,
    ResumeEntry,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunStartedEvent,
    StateSnapshotEvent,
    ToolCallArgsEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
    encode,
)

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _loopback import (
    completed_turn,
    failure,
    new_thread,
    no_arguments_turn,
    no_tools_turn,
    reasoning_turn,
    recorded_engine,
    rejected_without_run_id,
    run_turn,
    secret_input,
    serve,
    server_tool_turn,
    texts,
    wire_run,
)

pytestmark = [
    pytest.mark.anyio,
    # The adapter calls a LangGraph API deprecated since LangGraph 1.0 on every run; with
    # warnings as errors that warning, raised in the server's thread, would end every
    # run in RUN_ERROR (see docs/quirks.md).
    pytest.mark.filterwarnings(
        "ignore:`get_config_jsonschema` is deprecated"
        ":langgraph.warnings.LangGraphDeprecatedSinceV10"
    ),
]


# --- the "LLM": a chat model whose stream follows from the prompt and the results -----------


def _chunk(content: str | list[str | dict[str, Any]] = "", **call: Any) -> AIMessageChunk:
    """One streamed chunk: some text, or one piece of one tool call."""
    chunks = [tool_call_chunk(**call)] if call else []
    return AIMessageChunk(content=content, tool_call_chunks=chunks)


def _call(name: str, call_id: str, index: int, *args: str) -> Iterator[AIMessageChunk]:
    """A tool call streamed as OpenAI streams one: the name first, then argument deltas."""
    yield _chunk(name=name, args="", id=call_id, index=index)
    for delta in args:
        yield _chunk(args=delta, index=index)


def script(messages: Sequence[BaseMessage], tools: Sequence[dict[str, Any]]) -> Iterator[Any]:
    """What the model says: its chunks, in order."""
    prompt = next(str(m.content) for m in reversed(messages) if isinstance(m, HumanMessage))
    prompt = prompt.lower()
    names = {c["id"]: c["name"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls}
    results = [m for m in messages if isinstance(m, LcToolMessage)]
    done = {names.get(m.tool_call_id): m for m in results}
    offered = {t["function"]["name"] for t in tools}
    if "fail" in prompt:
        raise RuntimeError("the model fell over")
    if "secret" in prompt:
        if "get_secret_number" not in offered:
            yield _chunk("I have no get_secret_number tool.")
        elif not results:
            yield from _call("get_secret_number", "call-a", 0, '{"name":', ' "alice"}')
            yield from _call("get_secret_number", "call-b", 1, '{"name": "bob"}')
        else:
            yield _chunk("The numbers are ")
            yield _chunk(" and ".join(str(r.content) for r in results) + ".")
    elif "weather" in prompt:
        if "lookup_city" not in done:
            yield _chunk("Looking up ")
            yield _chunk("the city. ")
            yield from _call("lookup_city", "c1", 0, '{"person": "alice"}')
        elif "get_weather" not in done:
            city = done["lookup_city"].content
            yield from _call("get_weather", "c2", 0, f'{{"city": "{city}"}}')
        else:
            yield _chunk(f"Forecast: {done['get_weather'].content}")
    elif "people" in prompt:
        if not results:
            yield from _call("list_people", "p1", 0)  # no arguments at all
        else:
            yield _chunk(f"People: {results[-1].content}")
    elif "think" in prompt:
        if not results:
            yield _chunk([{"type": "thinking", "thinking": "The user wants ", "index": 0}])
            yield _chunk(
                [{"type": "thinking", "thinking": "a number.", "signature": "sig-1", "index": 0}]
            )
            yield from _call("get_secret_number", "t1", 1, '{"name": "bob"}')
        else:
            yield _chunk(f"Bob has {results[-1].content}.")
    elif "together" in prompt:
        if not results:
            # Two calls in the same chunks (as some providers stream parallel calls).
            yield AIMessageChunk(
                content="",
                tool_call_chunks=[
                    tool_call_chunk(name="get_secret_number", args="", id="x1", index=0),
                    tool_call_chunk(name="get_secret_number", args="", id="x2", index=1),
                ],
            )
            yield AIMessageChunk(
                content="",
                tool_call_chunks=[
                    tool_call_chunk(args='{"name": "alice"}', index=0),
                    tool_call_chunk(args='{"name": "bob"}', index=1),
                ],
            )
        else:
            yield _chunk(f"{len(results)} result(s).")
    elif "interleave" in prompt:
        if not results:
            # Two parallel calls whose argument deltas alternate, as models stream them.
            yield _chunk(name="get_secret_number", args="", id="i-a", index=0)
            yield _chunk(args='{"name":', index=0)
            yield _chunk(name="get_secret_number", args="", id="i-b", index=1)
            yield _chunk(args='{"na', index=1)
            yield _chunk(args=' "alice"}', index=0)
            yield _chunk(args='me": "bob"}', index=1)
        else:
            yield _chunk("Numbers: " + ", ".join(str(r.content) for r in results))
    elif "glued" in prompt:
        if not results:
            # The name and the whole arguments in one chunk (as some providers do).
            yield _chunk(name="get_secret_number", args='{"name": "bob"}', id="g1", index=0)
        else:
            yield _chunk(f"Got: {results[-1].content}")
    elif "roll" in prompt:
        if "roll_die" not in done:
            yield from _call("roll_die", "srv-1", 0, "{}")
        elif "get_secret_number" not in done:
            yield _chunk("Rolled. ")
            yield from _call("get_secret_number", "cli-1", 0, '{"name": "alice"}')
        else:
            die, secret = done["roll_die"].content, done["get_secret_number"].content
            yield _chunk(f"Die {die}, secret {secret}.")
    else:
        yield _chunk("Hello from LangGraph.")


class ScriptedChatModel(BaseChatModel):
    """A LangChain chat model that streams what :func:`script` says."""

    @property
    def _llm_type(self) -> str:
        return "toolrelay-scripted"

    def bind_tools(
        self,
        tools: Sequence[dict[str, Any] | type | Any | BaseTool],
        *,
        tool_choice: str | None = None,
        **kwargs: Any,
    ) -> Runnable[LanguageModelInput, AIMessage]:
        return self.bind(tools=[convert_to_openai_tool(t) for t in tools], **kwargs)

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        merged = AIMessageChunk(content="")
        for chunk in script(messages, kwargs.get("tools", [])):
            merged += chunk
        message = AIMessage(content=merged.content, tool_calls=merged.tool_calls)
        return ChatResult(generations=[ChatGeneration(message=message)])

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        for chunk in script(messages, kwargs.get("tools", [])):
            yield ChatGenerationChunk(message=chunk)


# --- the server: a LangGraph graph behind ag-ui-langgraph's FastAPI endpoint --------------------

#: For each thread, every message list the model was called with, in order.
MODEL_CALLS: dict[str, list[list[BaseMessage]]] = {}

#: How often the server-side tool ran (it must run on the server only).
SERVER_TOOL_RUNS: list[int] = []


@lc_tool
def roll_die() -> int:
    """Roll a die (a server-side tool: the graph runs it itself)."""
    SERVER_TOOL_RUNS.append(4)
    return 4


class AgentState(MessagesState):
    #: The client's tools: the adapter fills this key from ``RunAgentInput.tools``.
    tools: list[Any]


def _route(state: AgentState) -> str:
    last = state["messages"][-1]
    if isinstance(last, AIMessage) and any(c["name"] == "roll_die" for c in last.tool_calls):
        return "server_tools"
    return END  # a client tool call (or an answer) ends the run


def build_graph(model: ScriptedChatModel, *, checkpointer: bool = True) -> Any:
    async def chat(state: AgentState, config: RunnableConfig) -> dict[str, Any]:
        thread_id = config.get("configurable", {})["thread_id"]
        MODEL_CALLS.setdefault(thread_id, []).append(list(state["messages"]))
        bound = model.bind_tools([*state.get("tools", []), roll_die])
        return {"messages": [await bound.ainvoke(state["messages"], config)]}

    builder = StateGraph(AgentState)
    builder.add_node("chat", chat)
    builder.add_node("server_tools", ToolNode([roll_die]))
    builder.add_edge(START, "chat")
    builder.add_conditional_edges("chat", _route, ["server_tools", END])
    builder.add_edge("server_tools", "chat")
    return builder.compile(checkpointer=InMemorySaver() if checkpointer else None)


async def approval(state: MessagesState) -> dict[str, Any]:
    """A human-in-the-loop node: the graph stops here until the client resumes it."""
    answer = interrupt({"question": "May I?"})
    return {"messages": [AIMessage(content=f"You said {answer}.")]}


def build_approval_graph() -> Any:
    builder = StateGraph(MessagesState)
    builder.add_node("approval", approval)
    builder.add_edge(START, "approval")
    builder.add_edge("approval", END)
    return builder.compile(checkpointer=InMemorySaver())


APP = FastAPI()
#: The adapter as shipped (RAW events on).
add_langgraph_fastapi_endpoint(
    APP, LangGraphAgent(name="interop", graph=build_graph(ScriptedChatModel())), "/agent"
)
#: Without the RAW passthrough (what the committed capture was recorded from).
add_langgraph_fastapi_endpoint(
    APP,
    LangGraphAgent(
        name="interop-lean", graph=build_graph(ScriptedChatModel()), emit_raw_events=False
    ),
    "/lean",
)
#: The same graph with a model that does not stream.
add_langgraph_fastapi_endpoint(
    APP,
    LangGraphAgent(
        name="interop-nostream", graph=build_graph(ScriptedChatModel(disable_streaming=True))
    ),
    "/nostream",
)
#: The same graph compiled without a checkpointer.
add_langgraph_fastapi_endpoint(
    APP,
    LangGraphAgent(
        name="interop-stateless", graph=build_graph(ScriptedChatModel(), checkpointer=False)
    ),
    "/stateless",
)
#: A graph that interrupts, as shipped (a CUSTOM event) and with the AG-UI 1.0 outcome.
add_langgraph_fastapi_endpoint(
    APP, LangGraphAgent(name="interop-approval", graph=build_approval_graph()), "/approval"
)
add_langgraph_fastapi_endpoint(
    APP,
    LangGraphAgent(
        name="interop-approval-outcome",
        graph=build_approval_graph(),
        emit_interrupt_outcome=True,
    ),
    "/approval-outcome",
)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    """ag-ui-langgraph's FastAPI app served by uvicorn on loopback, in a thread."""
    with serve(APP, "the LangGraph server") as url:
        yield url


# --- helpers ---------------------------------------------------------------------------------


def model_calls(turn: Turn) -> list[list[BaseMessage]]:
    return MODEL_CALLS[turn.conversation.thread_id]


def shape(messages: Sequence[BaseMessage]) -> list[str]:
    """The graph's history as the model saw it: types, and each result's call id."""
    return [
        f"tool:{m.tool_call_id}" if isinstance(m, LcToolMessage) else type(m).__name__
        for m in messages
    ]


# --- the round trip -----------------------------------------------------------------------------


async def test_client_tools_go_out_come_back_and_the_results_continue(
    server: str, caplog: pytest.LogCaptureFixture
) -> None:
    turn, inputs = await completed_turn(f"{server}/agent", "What are the secret numbers?")
    assert [r for r in caplog.records if r.name.startswith("toolrelay")] == []
    calls = list(turn.conversation.tool_calls())
    assert [(c.id, c.name, c.arguments, c.status) for c in calls] == [
        ("call-a", "get_secret_number", '{"name": "alice"}', ToolCallStatus.completed),
        ("call-b", "get_secret_number", '{"name": "bob"}', ToolCallStatus.completed),
    ]
    # Both calls name the model's message as parent, a message never streamed as text.
    (parent,) = {c.parent_message_id for c in calls}
    assert parent is not None and parent.startswith("lc_run--")
    assert texts(turn) == ["The numbers are 42 and 7."]
    # The continuation sends the calls under that parent id, which is the id of the
    # model's message in the graph's checkpoint: the adapter keeps its own copy (by id)
    # and appends only the two results.
    assert len(inputs) == 2
    assert inputs[1].parent_run_id == inputs[0].run_id
    (sent,) = [m for m in inputs[1].messages if isinstance(m, AssistantMessage)]
    assert sent.id == parent
    first, second = model_calls(turn)
    assert shape(first) == ["HumanMessage"]
    assert shape(second) == ["HumanMessage", "AIMessage", "tool:call-a", "tool:call-b"]
    assert second[1].id == parent
    assert [m.content for m in second[2:]] == ["42", "7"]
    # What toolrelay sends is valid for the official SDK too.
    for run_input in inputs:
        SdkRunAgentInput.model_validate_json(encode(run_input))


async def test_multihop_continues_twice(server: str) -> None:
    turn, inputs = await completed_turn(f"{server}/agent", "What's the weather where Alice lives?")
    assert [c.arguments for c in turn.conversation.tool_calls()] == [
        '{"person": "alice"}',
        '{"city": "Paris"}',
    ]
    assert texts(turn) == [
        "Looking up the city. ",
        'Forecast: {"city":"Paris","forecast":"sunny","temperature_c":21}',
    ]
    assert len(inputs) == 3
    # The text streamed before the first call and the call travel as one assistant message.
    (merged, alone) = [m for m in inputs[2].messages if isinstance(m, AssistantMessage)]
    assert merged.content == "Looking up the city. "
    assert [c.id for c in merged.tool_calls or ()] == ["c1"]
    assert (alone.content, [c.id for c in alone.tool_calls or ()]) == (None, ["c2"])
    # The graph's history has each message once.
    assert shape(model_calls(turn)[-1]) == [
        "HumanMessage",
        "AIMessage",
        "tool:c1",
        "AIMessage",
        "tool:c2",
    ]


async def test_a_tool_without_arguments_streams_no_args_and_is_sent_back_as_empty_object(
    server: str,
) -> None:
    turn, _ = await no_arguments_turn(f"{server}/agent")
    assert texts(turn) == ['People: ["alice","bob","carol"]']


async def test_reasoning_is_recorded_and_its_signature_stays_in_the_checkpoint(
    server: str,
) -> None:
    turn, _ = await reasoning_turn(f"{server}/agent")
    assert texts(turn) == ["Bob has 7."]
    (reasoning,) = [m for m in turn.conversation.messages if isinstance(m, ReasoningRecord)]
    assert reasoning.encrypted_value == "sig-1"  # REASONING_ENCRYPTED_VALUE, kept
    # The continuation carries no signature, but the model gets its own message back from
    # the checkpoint, thinking block and signature included.
    answered = model_calls(turn)[-1][1]
    assert isinstance(answered, AIMessage)
    assert answered.content == [
        {
            "type": "thinking",
            "thinking": "The user wants a number.",
            "index": 0,
            "signature": "sig-1",
        }
    ]


async def test_arguments_the_adapter_drops_come_back_from_its_snapshot(server: str) -> None:
    turn, inputs = await run_turn(f"{server}/agent", "glued")
    assert turn.status is RunStatus.completed, turn.reason
    # TOOL_CALL_START, then TOOL_CALL_END: the arguments never reach the client on the
    # wire; the graph's checkpoint (and so its MESSAGES_SNAPSHOT) has them, and the
    # call, not yet executed, takes them from there.
    (call,) = turn.conversation.tool_calls()
    assert (call.id, call.arguments, call.status) == (
        "g1",
        '{"name": "bob"}',
        ToolCallStatus.completed,
    )
    assert [v.code for v in turn.violations] == ["arguments_from_snapshot"]
    assert call.result is not None and call.result.content == "7"
    assert texts(turn) == ["Got: 7"]
    assert len(inputs) == 2


async def test_interleaved_arguments_the_adapter_misroutes_are_taken_from_its_snapshot(
    server: str,
) -> None:
    # Two parallel calls whose deltas alternate: the adapter ends the first call when
    # the second starts and sends every later delta under the second call's id. Its
    # MESSAGES_SNAPSHOT, at the end of the run, holds each call's true arguments, and
    # the snapshot is the server's record: it wins for calls not yet executed.
    events = await wire_run(
        f"{server}/agent",
        secret_input(thread_id=new_thread(), prompt="interleave"),
    )
    streamed: dict[str, str] = {}
    for event in events:
        if isinstance(event, ToolCallArgsEvent):
            streamed[event.tool_call_id] = streamed.get(event.tool_call_id, "") + event.delta
    assert streamed != {"i-a": '{"name": "alice"}', "i-b": '{"name": "bob"}'}, (
        "the adapter now routes interleaved deltas right"
    )

    turn, inputs = await run_turn(f"{server}/agent", "interleave")
    assert turn.status is RunStatus.completed, turn.reason
    calls = list(turn.conversation.tool_calls())
    assert [(c.id, c.arguments, c.status) for c in calls] == [
        ("i-a", '{"name": "alice"}', ToolCallStatus.completed),
        ("i-b", '{"name": "bob"}', ToolCallStatus.completed),
    ]
    assert {v.code for v in turn.violations} == {"arguments_from_snapshot"}
    assert texts(turn) == ["Numbers: 42, 7"]
    # The continuation sends the arguments the calls ran with.
    (asked,) = [m for m in inputs[1].messages if isinstance(m, AssistantMessage) and m.tool_calls]
    assert asked.tool_calls is not None
    assert [c.function.arguments for c in asked.tool_calls] == [
        '{"name": "alice"}',
        '{"name": "bob"}',
    ]


async def test_of_two_calls_in_one_chunk_only_the_first_reaches_the_client(server: str) -> None:
    turn, inputs = await completed_turn(f"{server}/agent", "both numbers together")
    assert [(c.id, c.arguments) for c in turn.conversation.tool_calls()] == [
        ("x1", '{"name": "alice"}')
    ]
    # The checkpoint has both calls, so the graph's history now holds a call without a
    # result (which providers that check tool results refuse).
    history = model_calls(turn)[-1]
    assert shape(history) == ["HumanMessage", "AIMessage", "tool:x1"]
    asked = history[1]
    assert isinstance(asked, AIMessage)
    assert [c["id"] for c in asked.tool_calls] == ["x1", "x2"]
    assert texts(turn) == ["1 result(s)."]
    assert len(inputs) == 2


async def test_a_server_side_tool_result_is_kept_not_executed_again(server: str) -> None:
    turn, inputs = await server_tool_turn(f"{server}/agent", SERVER_TOOL_RUNS)
    assert texts(turn) == ["Rolled. ", "Die 4, secret 42."]
    # TOOL_CALL_RESULT names the result by the call id; the checkpoint stores it under a
    # uuid, which MESSAGES_SNAPSHOT shows. toolrelay sends the result back under the
    # stored id, so the graph merges it instead of appending it a second time
    # (docs/quirks.md; a provider that checks tool message order would refuse a double).
    history = model_calls(turn)[-1]
    assert shape(history) == ["HumanMessage", "AIMessage", "tool:srv-1", "AIMessage", "tool:cli-1"]
    stored_id = history[2].id
    assert stored_id != "srv-1"
    results = [m for m in inputs[1].messages if isinstance(m, ToolMessage)]
    assert [(m.id, m.tool_call_id) for m in results][0] == (stored_id, "srv-1")


async def test_a_model_error_is_run_error_and_fails_the_turn(server: str) -> None:
    turn, _ = await run_turn(f"{server}/agent", "please fail")
    assert failure(turn) == (RunStatus.failed, ReasonKind.AGENT_ERROR, "the model fell over")


async def test_a_graph_without_a_checkpointer_fails_every_run(server: str) -> None:
    turn, _ = await run_turn(f"{server}/stateless", "hi")
    assert failure(turn) == (RunStatus.failed, ReasonKind.AGENT_ERROR, "No checkpointer set")


async def test_a_missing_tool_is_answered_in_words(server: str) -> None:
    await no_tools_turn(f"{server}/agent")


async def test_a_model_that_does_not_stream_answers_only_in_the_messages_snapshot(
    server: str,
) -> None:
    # No TEXT_MESSAGE_* at all: the answer is kept from the snapshot, with a warning.
    turn, _ = await run_turn(f"{server}/nostream", "hi")
    assert turn.status is RunStatus.completed, turn.reason
    assert texts(turn) == ["Hello from LangGraph."]
    assert [v.code for v in turn.violations] == ["snapshot_only_message"]
    assert turn.conversation.last_snapshot is not None
    answer = turn.conversation.last_snapshot[-1]
    assert isinstance(answer, AssistantMessage) and answer.content == "Hello from LangGraph."

    # Calls that never streamed have no lifecycle: not executed, and said so.
    turn, inputs = await run_turn(f"{server}/nostream", "What are the secret numbers?")
    assert turn.status is RunStatus.completed, turn.reason
    assert list(turn.conversation.tool_calls()) == []  # nothing ran
    assert [v.code for v in turn.violations] == ["snapshot_only_tool_calls"]
    assert len(inputs) == 1
    assert turn.conversation.last_snapshot is not None
    asked = turn.conversation.last_snapshot[-1]
    assert isinstance(asked, AssistantMessage) and asked.tool_calls is not None
    assert [c.id for c in asked.tool_calls] == ["call-a", "call-b"]


async def test_the_thread_history_lives_on_the_server(server: str) -> None:
    thread = new_thread()
    async with AguiHttpBackend(f"{server}/agent") as backend:
        async with Engine(backend, tools=DEMO_TOOLS) as engine:
            first = await engine.run_turn(thread, "What are the secret numbers?")
            second = await engine.run_turn(thread, "hi again")
        assert first.status is second.status is RunStatus.completed
        assert texts(second)[-1] == "Hello from LangGraph."
        # Everything toolrelay sends back is already in the checkpoint: nothing doubles.
        history = shape(MODEL_CALLS[thread][-1])
        assert history == [
            "HumanMessage",
            "AIMessage",
            "tool:call-a",
            "tool:call-b",
            "AIMessage",
            "HumanMessage",
        ]
        # A client that starts afresh on a known thread continues the server's history.
        async with Engine(backend, tools=DEMO_TOOLS) as engine:
            fresh = await engine.run_turn(thread, "hello, it's a new client")
    assert fresh.status is RunStatus.completed
    assert len(fresh.conversation.messages) == 2
    assert shape(MODEL_CALLS[thread][-1]) == [*history, "AIMessage", "HumanMessage"]


async def test_the_state_snapshot_is_echoed_and_keeps_a_withdrawn_tool_offered(
    server: str,
) -> None:
    thread = new_thread()
    async with recorded_engine(f"{server}/agent") as (engine, recording):
        first = await engine.run_turn(thread, "hi")
        state = first.conversation.state
        assert isinstance(state, dict) and sorted(state) == ["messages", "tools"]
        # The next turn offers no tools at all...
        second = await engine.run_turn(thread, "secret numbers?", tools=ToolRegistry())
    assert recording.inputs[1].tools == []
    assert recording.inputs[1].state == state
    # ...but the graph merges the echoed state's tools after the (empty) input's, so the
    # model still sees get_secret_number and calls it; toolrelay refuses the unknown tool.
    assert second.status is RunStatus.completed
    calls = list(second.conversation.tool_calls())
    assert [(c.name, c.status) for c in calls] == [("get_secret_number", ToolCallStatus.failed)] * 2
    assert calls[0].result is not None and calls[0].result.error is not None
    assert calls[0].result.error.startswith("Unknown tool 'get_secret_number'")


async def test_an_interrupt_outcome_ends_the_turn_interrupted_and_a_resume_continues_it(
    server: str,
) -> None:
    thread = new_thread()
    async with recorded_engine(f"{server}/approval-outcome") as (engine, recording):
        first = await engine.run_turn(thread, "may I?")

        # The graph stopped in interrupt(): the turn is interrupted, not completed,
        # and says what the graph asks (its payload under metadata.langgraph.raw).
        assert first.status is RunStatus.interrupted, first.reason
        assert first.reason is not None
        assert first.reason.kind is ReasonKind.INTERRUPTED
        assert first.violations == ()
        (asked,) = first.interrupts
        assert asked.reason == "langgraph:interrupt"
        assert asked.message is None  # the payload is a dict without "message"
        assert asked.metadata is not None
        assert asked.metadata["langgraph"]["raw"] == {"question": "May I?"}
        assert engine.open_interrupts(thread) == (asked,)

        # The answer: a new turn with no message, its first run carrying resume.
        answer = ResumeEntry(interrupt_id=asked.id, status="resolved", payload="yes")
        second = await engine.run_turn(thread, resume=[answer])
        assert engine.open_interrupts(thread) == ()

    assert second.status is RunStatus.completed, second.reason
    # The node answers without a chat model, so without streaming: kept from the
    # snapshot, with a warning.
    assert [v.code for v in second.violations] == ["snapshot_only_message"]
    assert texts(second) == ["You said yes."]
    asking, resuming = recording.inputs
    assert asking.resume is msgspec.UNSET
    assert resuming.resume == [answer]
    assert [type(m) for m in resuming.messages] == [UserMessage]  # nothing new to say
    # The graph went on from interrupt() with the payload: the node's answer is in the
    # checkpoint, and so in the MESSAGES_SNAPSHOT (the node does not stream text).
    snapshot = second.conversation.last_snapshot
    assert snapshot is not None
    said = snapshot[-1]
    assert isinstance(said, AssistantMessage) and said.content == "You said yes."


async def test_an_interrupt_without_the_outcome_reads_as_an_answer(server: str) -> None:
    # As shipped, the adapter reports the interrupt only as a CUSTOM event and ends the
    # run with a plain RUN_FINISHED: on the wire that is a success, and toolrelay cannot
    # know what to resume (docs/quirks.md). Every later message gets the interrupt back.
    thread = new_thread()
    async with recorded_engine(f"{server}/approval") as (engine, recording):
        first = await engine.run_turn(thread, "may I?")
        second = await engine.run_turn(thread, "hello?")
        assert engine.open_interrupts(thread) == ()
        with pytest.raises(ResumeError, match="the thread has no open interrupt"):
            engine.start_turn(thread, resume=[ResumeEntry(interrupt_id="any", status="resolved")])
    for turn in (first, second):
        assert turn.status is RunStatus.completed, turn.reason
        assert turn.interrupts == ()
        assert turn.violations == ()
    assert texts(second) == []
    assert len(recording.inputs) == 2


# --- the wire, directly -----------------------------------------------------------------------


async def test_what_a_run_looks_like_on_the_wire(server: str) -> None:
    run_input = secret_input(thread_id=new_thread(), protocol_version="1.0")
    received = await wire_run(f"{server}/agent", run_input)
    started, finished = received[0], received[-1]
    assert isinstance(started, RunStartedEvent)
    assert (started.thread_id, started.run_id) == (run_input.thread_id, "wire-run")
    # No protocol version, no outcome, no timestamps, whatever the client declares.
    assert started.protocol_version is None
    assert isinstance(finished, RunFinishedEvent)
    assert finished.outcome is None
    assert all(getattr(event, "timestamp", None) is None for event in received)
    # Every LangGraph event is passed through as RAW, and each translated event carries
    # its source as rawEvent.
    raws = [e for e in received if isinstance(e, RawEvent)]
    assert {r.event["event"] for r in raws} >= {"on_chat_model_stream", "on_chain_end"}
    starts = [e for e in received if isinstance(e, ToolCallStartEvent)]
    assert [s.tool_call_id for s in starts] == ["call-a", "call-b"]
    assert all(s.raw_event["event"] == "on_chat_model_stream" for s in starts)
    # The graph's state (LangChain-serialized messages and the tools) and the messages.
    state = [e for e in received if isinstance(e, StateSnapshotEvent)][-1]
    assert sorted(state.snapshot) == ["messages", "tools"]
    (snapshot,) = [e for e in received if isinstance(e, MessagesSnapshotEvent)]
    assert [type(m) for m in snapshot.messages] == [UserMessage, AssistantMessage]


async def test_an_interrupt_is_a_custom_event_or_an_interrupt_outcome(server: str) -> None:
    received: dict[str, list[Any]] = {}
    for path in ("/approval", "/approval-outcome"):
        received[path] = await wire_run(f"{server}{path}", secret_input(thread_id=new_thread()))
    for run in received.values():
        (custom,) = [e for e in run if isinstance(e, CustomEvent)]
        assert (custom.name, custom.value) == ("on_interrupt", '{"question": "May I?"}')
    plain, with_outcome = received["/approval"][-1], received["/approval-outcome"][-1]
    assert isinstance(plain, RunFinishedEvent) and plain.outcome is None
    assert isinstance(with_outcome, RunFinishedEvent)
    assert isinstance(with_outcome.outcome, RunFinishedInterruptOutcome)
    (pending,) = with_outcome.outcome.interrupts
    assert pending.reason == "langgraph:interrupt"
    assert pending.metadata is not None
    assert pending.metadata["langgraph"]["raw"] == {"question": "May I?"}


async def test_a_request_the_server_rejects_is_a_422_with_its_reasons(server: str) -> None:
    rejected = await rejected_without_run_id(
        f"{server}/agent", secret_input(thread_id=new_thread())
    )
    assert rejected.status_code == 422
    assert '"loc":["body","runId"]' in rejected.body_excerpt
