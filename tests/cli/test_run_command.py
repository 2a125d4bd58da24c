"""``toolrelay demo | run | replay``, in-process through ``toolrelay.cli.main`` (with
injected I/O), and once as the installed console script."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from toolrelay import ToolRegistry
from toolrelay.cli import ExitCode, main
from toolrelay.cli._summary import exit_code, state_json, write_summary
from toolrelay.cli._turn import run_turn
from toolrelay.demo import DemoServer
from toolrelay.protocol import Interrupt
from toolrelay.testing import ScriptedAgent, run_interrupted, text

CAPTURES = Path(__file__).parent.parent / "backends" / "captures"


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def server() -> Iterator[DemoServer]:
    with DemoServer() as demo:
        yield demo


@pytest.fixture
def tools_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A module in the current directory holding tools in several shapes."""
    name = f"cli_tools_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            from toolrelay import tool
            from toolrelay.demo import DEMO_TOOLS, get_secret_number

            TOOLS = DEMO_TOOLS
            SPEC = get_secret_number

            def list_people() -> list[str]:
                \"\"\"Who there is.\"\"\"
                return ["zoe"]

            FUNCTIONS = [list_people]
            NOT_TOOLS = 42
            GUARDED = [
                tool(get_secret_number.handler, name="get_secret_number", needs_approval=True)
            ]
            """
        )
    )
    (tmp_path / f"{name}_broken.py").write_text("raise RuntimeError('no luck')\n")
    monkeypatch.chdir(tmp_path)
    return name


# --- toolrelay demo ----------------------------------------------------------------------


def test_demo_prints_the_turn_live_and_exits_0() -> None:
    code, out, err = cli("demo", "--delay", "0")
    assert code == ExitCode.OK, err
    lines = out.splitlines()
    expected_in_order = [
        "Scenario secret: two get_secret_number calls in one run (alice and bob), then an "
        "answer quoting both results.",
        "You: What are Alice's and Bob's secret numbers?",
        "Agent: Let me look up both secret numbers.",
        "Calling: get_secret_number",
        "Executing: get_secret_number, get_secret_number",
        '  ok   get_secret_number({"name":"alice"}) -> 42',
        '  ok   get_secret_number({"name":"bob"}) -> 7',
        "Continuing: run 2 (depth 1)",
        "Agent: Alice's secret number is 42 and Bob's secret number is 7.",
        "Completed: the agent answered.",
        "Final answer: Alice's secret number is 42 and Bob's secret number is 7.",
    ]
    positions = [lines.index(line) for line in expected_in_order]
    assert positions == sorted(positions)
    # Each call's name is printed once, as it comes (never the whole list again).
    assert lines.count("Calling: get_secret_number") == 2
    assert lines[-1].startswith("Runs: 2 | tool calls: 2 executed (2 completed, 0 failed)")
    assert "| depth: 1 | time: " in lines[-1]
    assert err == ""


@pytest.mark.parametrize(
    ("scenario", "code", "says"),
    [
        ("multihop", ExitCode.OK, "Final answer: Alice lives in Paris, where the weather"),
        ("zero-arg", ExitCode.OK, "  ok   list_people() -> "),
        ("text", ExitCode.OK, "Final answer: Hello! I am toolrelay's demo agent."),
        ("loop", ExitCode.FAILED, "loop detection stopped the turn with a typed reason"),
        ("broken", ExitCode.FAILED, "Failed (transport_error): the connection to the agent"),
        ("error", ExitCode.FAILED, "Failed (agent_error): the demo agent's model is overloaded"),
        ("malformed", ExitCode.FAILED, "Failed (protocol_error): event is not a JSON object"),
    ],
)
def test_demo_scenarios_exit_codes_and_explanations(scenario: str, code: int, says: str) -> None:
    status, out, _ = cli("demo", "--scenario", scenario, "--delay", "0", "--max-depth", "2")
    assert status == code
    assert says in out


def test_demo_broken_explains_what_was_kept_and_abandoned() -> None:
    code, out, _ = cli("demo", "--scenario", "broken", "--delay", "0")
    assert code == ExitCode.FAILED
    assert "Agent: Let me look up both secret numbers." in out
    assert "Abandoned, never executed: get_secret_number" in out
    assert "kept the text already received" in out


def test_demo_json_prints_the_final_state_only() -> None:
    code, out, _ = cli("demo", "--json", "--delay", "0")
    assert code == ExitCode.OK
    state = json.loads(out)
    assert state["status"] == "completed"
    assert state["reason"] == {"kind": "completed", "message": "the agent answered", "code": None}
    assert state["runs"] == 2 and state["depth"] == 1
    roles = [m["role"] for m in state["messages"]]
    assert roles == ["user", "assistant", "tool", "tool", "assistant"]
    assistant = state["messages"][1]
    assert [c["function"]["arguments"] for c in assistant["toolCalls"]] == [
        '{"name":"alice"}',
        '{"name":"bob"}',
    ]
    assert [m["content"] for m in state["messages"][2:4]] == ["42", "7"]
    assert state["messages"][2]["toolCallId"] == assistant["toolCalls"][0]["id"]


def test_demo_json_of_a_failure_has_the_typed_reason() -> None:
    code, out, _ = cli("demo", "--json", "--delay", "0", "--scenario", "loop", "--max-depth", "1")
    assert code == ExitCode.FAILED
    state = json.loads(out)
    assert state["status"] == "failed"
    assert state["reason"]["kind"] == "max_depth"
    assert [c["name"] for c in state["abandonedCalls"]] == ["get_secret_number"]


def test_demo_runs_on_trio() -> None:
    code, out, _ = cli("demo", "--delay", "0", "--backend", "trio", "--scenario", "multihop")
    assert code == ExitCode.OK
    assert "Final answer: Alice lives in Paris" in out


def test_demo_rejects_an_unknown_scenario() -> None:
    code, _, err = cli("demo", "--scenario", "nope")
    assert code == ExitCode.USAGE
    assert "invalid choice: 'nope'" in err


# --- toolrelay run -----------------------------------------------------------------------


def test_run_executes_the_named_registry_and_prints_json(
    server: DemoServer, tools_module: str
) -> None:
    code, out, err = cli(
        "run",
        server.url,
        "--tools",
        f"{tools_module}:TOOLS",
        "--message",
        "What are the secret numbers?",
        "--thread",
        "cli-thread-1",
        "--json",
        "--header",
        "X-Api-Key: k-123",
    )
    assert code == ExitCode.OK, err
    state = json.loads(out)
    assert state["status"] == "completed"
    assert state["threadId"] == "cli-thread-1"
    assert state["messages"][-1]["content"] == (
        "Alice's secret number is 42 and Bob's secret number is 7."
    )
    index = [r.thread_id for r in server.app.requests].index("cli-thread-1")
    assert server.app.headers[index]["x-api-key"] == "k-123"


@pytest.mark.parametrize(
    ("attribute", "message", "says"),
    [
        ("SPEC", "secret numbers?", "Alice's secret number is 42"),
        ("FUNCTIONS", "who do you know?", "I know Zoe."),
    ],
)
def test_run_accepts_a_spec_or_a_list_of_functions(
    server: DemoServer, tools_module: str, attribute: str, message: str, says: str
) -> None:
    code, out, err = cli(
        "run", server.url, "--tools", f"{tools_module}:{attribute}", "--message", message
    )
    assert code == ExitCode.OK, err
    assert f"Final answer: {says}" in out


def test_run_denies_a_tool_that_needs_approval_rather_than_wait(
    server: DemoServer, tools_module: str
) -> None:
    code, out, err = cli(
        "run",
        server.url,
        "--tools",
        f"{tools_module}:GUARDED",
        "--message",
        "What are the secret numbers?",
        "--json",
    )
    assert code == ExitCode.OK, err
    state = json.loads(out)
    errors = [m.get("error") for m in state["messages"] if m["role"] == "tool"]
    assert len(errors) == 2
    assert all("cannot ask for it: the call was denied" in e for e in errors)


def test_run_prints_live_and_counts(server: DemoServer, tools_module: str) -> None:
    code, out, _ = cli(
        "run", server.url, "--tools", f"{tools_module}:TOOLS", "--message", "the weather?"
    )
    assert code == ExitCode.OK
    assert "Calling: lookup_city" in out
    assert '  ok   lookup_city({"person":"alice"}) -> Paris' in out
    assert "Continuing: run 3 (depth 2)" in out
    assert "Runs: 3 | tool calls: 2 executed (2 completed, 0 failed) | depth: 2" in out


def test_run_hits_the_circuit_breaker_with_max_depth(server: DemoServer, tools_module: str) -> None:
    code, out, _ = cli(
        "run",
        server.url,
        "--tools",
        f"{tools_module}:TOOLS",
        "--message",
        "loop",
        "--max-depth",
        "1",
        "--json",
    )
    assert code == ExitCode.FAILED
    assert json.loads(out)["reason"]["kind"] == "max_depth"


def test_run_against_an_unreachable_server_says_so_in_one_line() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    code, out, err = cli("run", f"http://127.0.0.1:{port}/", "--message", "hi")
    assert code == ExitCode.UNREACHABLE
    assert err.count("\n") == 1
    assert err.startswith(f"toolrelay run: cannot reach http://127.0.0.1:{port}/: cannot connect")
    assert "Traceback" not in err + out
    assert out == ""


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("no_colon_here", "--tools takes MODULE:ATTR"),
        ("surely_not_a_module_xyz:TOOLS", "cannot import 'surely_not_a_module_xyz'"),
        ("{module}:MISSING", "has no attribute 'MISSING'"),
        ("{module}:NOT_TOOLS", "expected a ToolRegistry, a ToolSpec, a function"),
        ("{module}_broken:TOOLS", "failed: RuntimeError: no luck"),
    ],
)
def test_run_with_bad_tools_is_a_usage_error_without_traceback(
    tools_module: str, spec: str, says: str
) -> None:
    code, out, err = cli(
        "run", "http://127.0.0.1:9/", "--tools", spec.format(module=tools_module), "--message", "x"
    )
    assert code == ExitCode.USAGE
    assert says in err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert out == ""


def test_run_rejects_a_malformed_header() -> None:
    code, _, err = cli("run", "http://127.0.0.1:9/", "--message", "x", "--header", "novalue")
    assert code == ExitCode.USAGE
    assert "a header is NAME:VALUE" in err


# --- toolrelay replay ----------------------------------------------------------------------


def test_replay_of_tools_ready_says_what_would_execute() -> None:
    code, out, _ = cli("replay", str(CAPTURES / "demo-secret-tools-ready.sse"))
    assert code == ExitCode.OK
    assert "assistant: Let me look up both secret numbers." in out
    assert "Protocol violations: none." in out
    assert (
        'would execute: get_secret_number({"name":"alice"}), get_secret_number({"name":"bob"})'
        in out
    )


def test_replay_of_a_completed_run_exits_0() -> None:
    code, out, _ = cli("replay", str(CAPTURES / "demo-secret-answer.sse"))
    assert code == ExitCode.OK
    assert "Result: the recorded run completed." in out


def test_replay_of_a_broken_run_exits_1() -> None:
    code, out, _ = cli("replay", str(CAPTURES / "demo-broken.sse"))
    assert code == ExitCode.FAILED
    assert "Result: failed (protocol_error): the event stream ended before RUN_FINISHED" in out
    assert 'tool call get_secret_number({"name": "al) [capture-broken-call-2]: abandoned' in out


def test_replay_json() -> None:
    code, out, _ = cli("replay", "--json", str(CAPTURES / "demo-secret-tools-ready.sse"))
    assert code == ExitCode.OK
    report: dict[str, Any] = json.loads(out)
    assert report["status"] == "executing_tools"
    assert [c["arguments"] for c in report["wouldExecute"]] == [
        '{"name":"alice"}',
        '{"name":"bob"}',
    ]
    assert report["violations"] == []
    assert report["sseEvents"] == report["events"] == 20


CAPTURE_WITH_PROBLEMS = (
    b": a recorded stream with problems\r\n"
    b"\r\n"
    b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\r\n'  # line 3
    b"\r\n"
    b'data: {"type":"TOOL_CALL_ARGS","toolCallId":"ghost","delta":"{}"}\r\n'  # line 5
    b"\r\n"
    b"data: {not json\r\n"  # line 7
    b"\r\n"
    b'event: message\r\ndata: {"type":"TEXT_MESSAGE_START",\r\ndata: "messageId":"m"}\r\n'
    b"\r\n"  # lines 9-11: a multi-line event
    b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"kept"}\r\n'  # line 13
    b"\r\n"
    b'data: {"type":"TOOL_CALL_START","toolCallId":"c"}\r\n'  # line 15: no toolCallName
    b"\r\n"
    b'data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}\r\n'  # line 17
    b"\r\n"
    b'data: {"type":"TEXT_MESSAGE_CONTENT","messageId":"m","delta":"late"}\r\n'  # line 19
    b"\r\n"
    b'data: {"type":"RUN_STARTED","threadId":"t",'  # line 21: cut off
)


def test_replay_reports_every_violation_with_its_event_and_line(tmp_path: Path) -> None:
    capture = tmp_path / "problems.sse"
    capture.write_bytes(CAPTURE_WITH_PROBLEMS)
    code, out, _ = cli("replay", "--json", str(capture))
    report = json.loads(out)
    found = [(v["index"], v["line"], v["code"]) for v in report["violations"]]
    assert found == [
        (2, 5, "args_for_unknown_call"),
        (3, 7, "malformed_event"),
        (6, 15, "invalid_event"),
        (7, 17, "text_message_not_ended"),
        (8, 19, "event_after_run_end"),
        (None, 21, "incomplete_sse_event"),
    ]
    assert report["status"] == "completed"
    assert code == ExitCode.CHECK_FAILED  # the run ended well, the capture did not
    assert report["messages"] == [{"role": "assistant", "id": "m", "content": "kept"}]
    code, out, _ = cli("replay", str(capture))
    assert code == ExitCode.CHECK_FAILED
    assert "  event #3, line 7: [malformed_event] ?: event is not a JSON object" in out
    assert "  line 21: [incomplete_sse_event] ?: the capture ends inside an event" in out


def test_replay_prints_each_violation_once(tmp_path: Path) -> None:
    # A real process: in-process, pytest's handlers hold the log, not the CLI's stderr.
    capture = tmp_path / "problems.sse"
    capture.write_bytes(CAPTURE_WITH_PROBLEMS)

    def replay(*flags: str) -> subprocess.CompletedProcess[str]:
        src = str(Path(__file__).resolve().parents[2] / "src")
        return subprocess.run(
            [sys.executable, "-m", "toolrelay", *flags, "replay", str(capture)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "PYTHONPATH": src},
        )

    done = replay()
    assert done.returncode == ExitCode.CHECK_FAILED
    codes = ["args_for_unknown_call", "text_message_not_ended", "event_after_run_end"]
    for violation in codes:
        assert (done.stdout + done.stderr).count(violation) == 1, violation
    assert done.stderr == ""  # the processor's warnings are not logged on top of the report
    debug = replay("--debug")
    assert all(f"AG-UI protocol violation ({c})" in debug.stderr for c in codes)  # --debug logs


def test_replay_allow_violations_exits_0_for_a_run_that_ended_well(tmp_path: Path) -> None:
    capture = tmp_path / "problems.sse"
    capture.write_bytes(CAPTURE_WITH_PROBLEMS)
    code, out, _ = cli("replay", "--allow-violations", str(capture))
    assert code == ExitCode.OK
    assert "Protocol violations (6):" in out
    broken = str(CAPTURES / "demo-broken.sse")
    assert cli("replay", "--allow-violations", broken)[0] == ExitCode.FAILED  # still a failure


def test_replay_of_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = cli("replay", str(tmp_path / "nope.sse"))
    assert code == ExitCode.USAGE
    assert err.startswith("toolrelay replay: cannot read")


def test_replay_of_an_empty_capture_fails() -> None:
    code, out, _ = cli("replay", "/dev/null")
    assert code == ExitCode.FAILED
    assert "ended before RUN_FINISHED" in out


CAPTURE_INTERRUPTED = (
    b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
    b'data: {"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"delete"}\n\n'
    b'data: {"type":"TOOL_CALL_END","toolCallId":"c1"}\n\n'
    b'data: {"type":"RUN_FINISHED","threadId":"t","runId":"r","outcome":{"type":"interrupt",'
    b'"interrupts":[{"id":"i1","reason":"approval","message":"Delete it?","toolCallId":"c1"}]}}'
    b"\n\n"
)


def test_replay_of_an_interrupted_run_lists_what_the_agent_asks(tmp_path: Path) -> None:
    capture = tmp_path / "interrupted.sse"
    capture.write_bytes(CAPTURE_INTERRUPTED)
    code, out, _ = cli("replay", str(capture))
    assert code == ExitCode.OK  # a run that asks ends well
    assert "Result: the run was interrupted; the agent asks:\n  [i1, approval]: Delete it?" in out
    assert "tool call delete() [c1]: abandoned" in out
    code, out, _ = cli("replay", "--json", str(capture))
    report = json.loads(out)
    assert report["status"] == "interrupted"
    assert report["interrupts"] == [
        {"id": "i1", "reason": "approval", "message": "Delete it?", "toolCallId": "c1"}
    ]
    assert report["wouldExecute"] == []


def test_replay_of_a_run_the_agent_cancelled_exits_3(tmp_path: Path) -> None:
    capture = tmp_path / "cancelled.sse"
    capture.write_bytes(
        b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
        b'data: {"type":"RUN_FINISHED","threadId":"t","runId":"r",'
        b'"outcome":{"type":"cancelled"}}\n\n'
    )
    code, out, _ = cli("replay", str(capture))
    assert code == ExitCode.CANCELLED
    assert "Result: cancelled (agent_cancelled): the agent reported its run cancelled" in out


def test_run_of_an_interrupted_turn_prints_the_questions_and_exits_6() -> None:
    asked = Interrupt(id="i1", reason="approval", message="Delete it?", tool_call_id="c1")
    agent = ScriptedAgent([text("Before I go on:"), run_interrupted("t", "r", asked)])

    async def main() -> tuple[int, str, str]:
        live = io.StringIO()
        outcome = await run_turn(
            agent, ToolRegistry(), "clean up", thread_id="t", max_depth=3, out=live
        )
        summary = io.StringIO()
        write_summary(outcome, summary)
        return exit_code(outcome), summary.getvalue(), state_json(outcome)

    code, summary, state = anyio.run(main)
    assert code == ExitCode.INTERRUPTED
    assert int(ExitCode.INTERRUPTED) == 6  # documented: scripts rely on it
    assert "Interrupted (interrupted): the agent waits for an answer: Delete it?" in summary
    assert "The agent asks [i1, approval] (tool call c1): Delete it?" in summary
    document = json.loads(state)
    assert document["status"] == "interrupted"
    assert document["interrupts"] == [
        {"id": "i1", "reason": "approval", "message": "Delete it?", "toolCallId": "c1"}
    ]


# --- the installed entry point ---------------------------------------------------------------


def test_the_console_script_runs_the_demo() -> None:
    script = Path(sys.executable).parent / "toolrelay"
    done = subprocess.run(
        [str(script), "demo", "--delay", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Final answer: Alice's secret number is 42 and Bob's secret number is 7." in done.stdout
    assert done.stderr == ""


@pytest.mark.parametrize("max_depth", ["5", "1"])
def test_demo_loop_text_and_json_count_the_same_calls(max_depth: str) -> None:
    argv = ("demo", "--delay", "0", "--scenario", "loop", "--max-depth", max_depth)
    code, out, _ = cli(*argv)
    json_code, json_out, _ = cli(*argv, "--json")
    assert code == json_code == ExitCode.FAILED
    state = json.loads(json_out)
    calls = state["toolCalls"]
    assert calls["abandoned"] == len(state["abandonedCalls"]) == 1
    assert calls["executed"] == calls["completed"] + calls["failed"]
    assert calls["executed"] == sum(m["role"] == "tool" for m in state["messages"])
    (summary,) = [line for line in out.splitlines() if line.startswith("Runs: ")]
    assert summary.startswith(
        f"Runs: {state['runs']} | tool calls: {calls['executed']} executed "
        f"({calls['completed']} completed, {calls['failed']} failed), "
        f"{calls['abandoned']} abandoned | depth: {state['depth']} | "
    )
    assert f"Failed ({state['reason']['kind']}): " in out
