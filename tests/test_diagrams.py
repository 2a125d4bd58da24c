"""toolrelay.diagrams: machine diagrams, their files and drift check, images, traces."""

from __future__ import annotations

import enum
import os
import re
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from statemachine import State, StateChart
from statemachine.states import States

from toolrelay import diagrams
from toolrelay._reasons import ReasonKind, TerminalReason
from toolrelay.core import (
    Conversation,
    TextMessage,
    ToolCallInfo,
    ToolCallMessage,
    ToolError,
    ToolRegistry,
    ToolResult,
)
from toolrelay.diagrams import (
    MACHINES,
    DiagramError,
    GraphvizError,
    GraphvizNotFoundError,
    check,
    escape_mermaid,
    render,
    render_image,
    trace_diagram,
    trace_diagram_for_turn,
    write_all,
)
from toolrelay.machines import (
    RunEvent,
    RunLifecycle,
    RunStatus,
    ToolCallEvent,
    ToolCallLifecycle,
    ToolCallStatus,
)
from toolrelay.protocol import Interrupt, ResumeEntry, UserMessage
from toolrelay.runtime import Engine
from toolrelay.testing import ScriptedAgent, run_interrupted, text, tool_call

REPO = Path(__file__).resolve().parents[1]
FILES = ["run_lifecycle.mmd", "run_lifecycle.dot", "tool_call.mmd", "tool_call.dot"]
MACHINE_CLASSES: list[type[StateChart[Any]]] = [RunLifecycle, ToolCallLifecycle]
#: Each machine's spellings: the enums its state ids and event ids come from.
SPELLINGS: dict[type[StateChart[Any]], tuple[type[enum.StrEnum], type[enum.StrEnum]]] = {
    RunLifecycle: (RunStatus, RunEvent),
    ToolCallLifecycle: (ToolCallStatus, ToolCallEvent),
}


def _state_ids(machine: type[StateChart[Any]]) -> set[str]:
    return {member.value for member in SPELLINGS[machine][0]}


def _event_ids(machine: type[StateChart[Any]]) -> set[str]:
    """The event ids, read from the enum (not from the machine's labels)."""
    return {member.value for member in SPELLINGS[machine][1]}


def _mermaid_labels(mermaid: str) -> tuple[set[str], set[str]]:
    """The state labels (``state "label" as id``) and transition labels (``a --> b : label``)."""
    states = set(re.findall(r'^\s*state "([^"]*)" as ', mermaid, re.M))
    transitions = set(re.findall(r"^\s*\S+ --> \S+ : (.*)$", mermaid, re.M))
    return states, transitions


def _dot_labels(dot: str) -> tuple[dict[str, str], set[str]]:
    """The node labels by node id, and the edge labels."""
    nodes = dict(re.findall(r'^    "(\w+)" \[label="([^"]*)"', dot, re.M))
    edges = set(re.findall(r'^    "\w+" -> "\w+" \[label="([^"]*)"\];$', dot, re.M))
    return nodes, edges


def _finals(machine: type[StateChart[Any]]) -> list[str]:
    return [state.id for state in machine.states if state.final]


# --- machine diagrams ----------------------------------------------------------------


def test_machines_are_the_run_lifecycle_and_the_tool_call() -> None:
    assert dict(MACHINES) == {"run_lifecycle": RunLifecycle, "tool_call": ToolCallLifecycle}


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_mermaid_names_every_state_and_event_and_marks_initial_and_finals(
    machine: type[StateChart[Any]],
) -> None:
    mermaid = render(machine, "mermaid")
    lines = mermaid.splitlines()
    assert lines[0] == "stateDiagram-v2"
    for state_id in _state_ids(machine):
        assert any(re.search(rf"(^| ){state_id}( |$)", line) for line in lines), state_id
    for event_id in _event_ids(machine):
        assert any(line.endswith(f" : {event_id}") for line in lines), event_id
    initial = machine.initial_state
    assert initial is not None
    assert f"    [*] --> {initial.id}" in lines
    finals = _finals(machine)
    assert finals
    for state in machine.states:
        assert (f"    {state.id} --> [*]" in lines) is state.final


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_dot_names_every_state_and_event_and_marks_initial_and_finals(
    machine: type[StateChart[Any]],
) -> None:
    dot = render(machine, "dot")
    lines = dot.splitlines()
    assert lines[0] == f'digraph "{machine.__name__}" {{'
    assert lines[-1] == "}"
    for state in machine.states:
        node = next(line for line in lines if line.startswith(f'    "{state.id}" [label='))
        assert ('peripheries="2"' in node) is state.final
        assert (f'    "{state.id}" -> "__final__";' in lines) is state.final
    for event_id in _event_ids(machine):
        assert any(line.endswith(f'[label="{event_id}"];') for line in lines), event_id
    initial = machine.initial_state
    assert initial is not None
    assert f'    "__initial__" -> "{initial.id}";' in lines


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_mermaid_labels_are_the_ids_never_humanized(machine: type[StateChart[Any]]) -> None:
    states, transitions = _mermaid_labels(render(machine, "mermaid"))
    # A label equal to its id needs no `state "..." as id` line; any such line is a
    # label that differs from the id ("Executing tools").
    assert states == set()
    assert transitions == _event_ids(machine)


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_dot_labels_are_the_ids_never_humanized(machine: type[StateChart[Any]]) -> None:
    nodes, edges = _dot_labels(render(machine, "dot"))
    assert nodes == {state_id: state_id for state_id in _state_ids(machine)} | {
        "__initial__": "",
        "__final__": "",
    }
    assert edges == _event_ids(machine)


def test_label_checks_catch_the_library_humanized_labels() -> None:
    # A graph declared without labels: python-statemachine humanizes them,
    # and the parsers above see it (so the label tests can fail).
    class Spot(enum.StrEnum):
        idle = "idle"
        executing_tools = "executing_tools"
        completed = "completed"

    class Humanized(StateChart[object]):
        s = States.from_enum(Spot, initial=Spot.idle, final=Spot.completed)
        continue_run = s.idle.to(s.executing_tools)
        execute_tools = s.executing_tools.to(s.completed)

    states, transitions = _mermaid_labels(render(Humanized, "mermaid"))
    assert {"Idle", "Executing tools", "Completed"} <= states
    assert transitions == {"Continue run", "Execute tools"}
    nodes, edges = _dot_labels(render(Humanized, "dot"))
    assert nodes["executing_tools"] == "Executing tools"
    assert edges == {"Continue run", "Execute tools"}


@pytest.mark.parametrize("machine", MACHINE_CLASSES, ids=lambda m: m.__name__)
def test_every_transition_of_the_class_is_drawn_once(machine: type[StateChart[Any]]) -> None:
    dot = render(machine, "dot")
    mermaid = render(machine, "mermaid")
    count = 0
    for state in machine.states:
        for transition in state.transitions:
            for target in transition.targets:
                label = " ".join(event.id for event in transition.events)
                assert f'"{state.id}" -> "{target.id}" [label="{label}"];' in dot
                assert f"{state.id} --> {target.id} : {label}" in mermaid
                count += 1
    assert dot.count(" -> ") == count + 1 + len(_finals(machine))  # + initial + final arrows


@pytest.mark.parametrize("fmt", ["mermaid", "dot"])
def test_rendering_is_deterministic_in_one_process(fmt: diagrams.TextFormat) -> None:
    for machine in MACHINE_CLASSES:
        assert render(machine, fmt) == render(machine, fmt)


def test_rendering_is_byte_identical_across_processes() -> None:
    code = (
        "import sys\n"
        "from toolrelay.diagrams import MACHINES, render\n"
        "sys.stdout.buffer.write(b''.join(render(m, f).encode() "
        "for m in MACHINES.values() for f in ('mermaid', 'dot')))\n"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("0", "1", "12345")
    }
    assert len(outputs) == 1
    here = b"".join(render(m, f).encode() for m in MACHINES.values() for f in ("mermaid", "dot"))
    assert outputs == {here}


def test_unknown_text_format_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="svg"):
        render(RunLifecycle, "svg")  # type: ignore[arg-type]


def test_final_states_the_library_leaves_unmarked_are_marked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    library = format(ToolCallLifecycle, "mermaid")
    stripped = "".join(line for line in library.splitlines(True) if "--> [*]" not in line[4:])
    assert "completed --> [*]" not in stripped
    # render() looks `format` up in its module: shadow the builtin there.
    monkeypatch.setattr(
        "toolrelay.diagrams._render.format", lambda cls, fmt: stripped, raising=False
    )
    marked = render(ToolCallLifecycle, "mermaid").splitlines()
    assert "    completed --> [*]" in marked
    assert "    failed --> [*]" in marked
    assert "    streaming --> [*]" not in marked


class Nested(StateChart[object]):
    class outer(State.Compound):
        inner = State(initial=True)
        inner_done = State(final=True)
        go = inner.to(inner_done)

    done = State(final=True)
    leave = outer.to(done)


def test_dot_refuses_a_machine_that_is_not_flat() -> None:
    assert 'state "Outer" as outer {' in render(Nested, "mermaid")
    with pytest.raises(ValueError, match="flat machines only"):
        render(Nested, "dot")


# --- files and drift ---------------------------------------------------------------------


def test_write_all_writes_the_four_files_and_check_finds_them_clean(tmp_path: Path) -> None:
    out = tmp_path / "new" / "diagrams"
    paths = write_all(out)
    assert [path.name for path in paths] == FILES
    assert all(path.parent == out for path in paths)
    assert check(out) == []
    for path in paths:
        machine = MACHINES[path.stem]
        fmt: diagrams.TextFormat = "mermaid" if path.suffix == ".mmd" else "dot"
        assert path.read_bytes() == render(machine, fmt).encode("utf-8")
    assert b"\r\n" not in (out / "tool_call.dot").read_bytes()


def test_check_names_edited_and_missing_files(tmp_path: Path) -> None:
    write_all(tmp_path)
    edited = tmp_path / "tool_call.mmd"
    edited.write_text(edited.read_text() + "    completed --> streaming : Oops\n")
    (tmp_path / "run_lifecycle.dot").unlink()
    assert check(tmp_path) == ["run_lifecycle.dot", "tool_call.mmd"]
    assert check(tmp_path, ("mermaid",)) == ["tool_call.mmd"]
    write_all(tmp_path)
    assert check(tmp_path) == []


def test_check_of_an_empty_directory_lists_every_file(tmp_path: Path) -> None:
    assert check(tmp_path / "nowhere") == FILES


def test_a_one_byte_change_is_drift(tmp_path: Path) -> None:
    write_all(tmp_path)
    path = tmp_path / "run_lifecycle.dot"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n", 1))
    assert check(tmp_path) == ["run_lifecycle.dot"]


def test_write_all_leaves_up_to_date_files_untouched(tmp_path: Path) -> None:
    paths = write_all(tmp_path)
    for path in paths:
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    write_all(tmp_path)
    assert {path.stat().st_mtime_ns for path in paths} == {1_000_000_000}


def test_write_all_and_check_refuse_unknown_formats(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown diagram format 'gif'"):
        write_all(tmp_path, ("mermaid", "gif"))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="'png'"):
        check(tmp_path, ("png",))  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []


def test_the_committed_diagrams_are_up_to_date() -> None:
    assert check(REPO / "diagrams") == [], "run `toolrelay diagrams` from the repository root"


# --- images (Graphviz) -------------------------------------------------------------------


def test_svg_and_png_are_drawn_by_graphviz() -> None:
    svg = render_image(RunLifecycle, "svg").decode("utf-8")
    assert "<svg" in svg
    for state_id in _state_ids(RunLifecycle):
        assert f">{state_id}</text>" in svg
    for event_id in _event_ids(RunLifecycle):
        assert f">{event_id}</text>" in svg
    assert "Executing tools" not in svg and "Continue run" not in svg
    png = render_image(ToolCallLifecycle, "png")
    assert png.startswith(b"\x89PNG\r\n\x1a\n")


def test_write_all_writes_images(tmp_path: Path) -> None:
    paths = write_all(tmp_path, ("svg", "png"))
    assert [path.name for path in paths] == [
        "run_lifecycle.svg",
        "run_lifecycle.png",
        "tool_call.svg",
        "tool_call.png",
    ]


def test_without_graphviz_images_raise_a_typed_error_with_the_install_hint(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: None)
    with pytest.raises(GraphvizNotFoundError) as info:
        render_image(RunLifecycle, "png")
    message = str(info.value)
    assert "apt-get install graphviz" in message
    assert "brew install graphviz" in message
    assert "\n" not in message
    assert isinstance(info.value, DiagramError)
    assert isinstance(info.value, FileNotFoundError)
    with pytest.raises(GraphvizNotFoundError):
        write_all(tmp_path, ("mermaid", "svg"))
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the mermaid file
    # Text never needs Graphviz.
    assert render(RunLifecycle, "dot").startswith("digraph")
    assert write_all(tmp_path)


def test_a_failing_dot_program_is_a_graphviz_error(monkeypatch: pytest.MonkeyPatch) -> None:
    false = subprocess.run(
        ["sh", "-c", "command -v false"], capture_output=True, text=True, check=True
    ).stdout.strip()
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: false)
    with pytest.raises(GraphvizError, match="exit code 1") as info:
        render_image(RunLifecycle, "svg")
    assert not isinstance(info.value, GraphvizNotFoundError)


def test_a_dot_program_that_vanished_is_graphviz_not_found(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr("shutil.which", lambda name, *args, **kwargs: str(tmp_path / "dot"))
    with pytest.raises(GraphvizNotFoundError, match="apt-get install graphviz"):
        render_image(RunLifecycle, "svg")


def test_unknown_image_format_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="svg, png"):
        render_image(RunLifecycle, "gif")  # type: ignore[arg-type]


def _block_pydot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make ``import pydot`` fail, as when it is not installed."""
    monkeypatch.setitem(sys.modules, "pydot", None)
    monkeypatch.delitem(sys.modules, "statemachine.contrib.diagram.renderers.dot", raising=False)


def test_without_pydot_every_format_still_works(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")}
    _block_pydot(monkeypatch)
    # python-statemachine's own DOT path needs pydot: the reason toolrelay prints its own.
    with pytest.raises(ImportError):
        format(RunLifecycle, "dot")
    assert {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")} == expected
    assert b"<svg" in render_image(RunLifecycle, "svg")


def test_with_pydot_installed_the_output_does_not_change(monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")}
    fake = types.ModuleType("pydot")
    fake.__dict__["Dot"] = object  # anything toolrelay would touch would be this fake
    monkeypatch.setitem(sys.modules, "pydot", fake)
    assert {(m, f): render(m, f) for m in MACHINE_CLASSES for f in ("mermaid", "dot")} == expected


def test_importing_the_diagrams_needs_neither_pydot_nor_graphviz() -> None:
    code = (
        "import sys; sys.modules['pydot'] = None\n"
        "import toolrelay.diagrams as d\n"
        "from toolrelay.machines import RunLifecycle\n"
        "print(d.render(RunLifecycle, 'dot').splitlines()[0])\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PATH": ""},
    )
    assert result.stdout == 'digraph "RunLifecycle" {\n'


# --- trace diagrams ----------------------------------------------------------------------

SECRETS = {"alice": 42, "bob": 7}


async def get_secret_number(name: str) -> int:
    """Look up a person's secret number."""
    if name not in SECRETS:
        raise ToolError(f"nobody called {name}")
    return SECRETS[name]


@pytest.mark.anyio
async def test_trace_of_a_finished_turn_shows_calls_outcomes_continuation_and_end() -> None:
    agent = ScriptedAgent(
        [
            text("Let me look them up."),
            tool_call("get_secret_number", {"name": "alice"}),
            tool_call("get_secret_number", {"name": "zed"}),
        ],
        [text("Alice's number is 42; nobody is called zed.")],
    )
    tools = ToolRegistry().register(get_secret_number)
    async with Engine(agent, tools=tools) as engine:
        turn = await engine.run_turn("t1", "What are the secret numbers?")
    assert turn.status is RunStatus.completed
    lines = trace_diagram_for_turn(turn).splitlines()
    assert lines == [
        "sequenceDiagram",
        "    participant User",
        "    participant Agent",
        "    participant Tools as Tools (toolrelay)",
        "    User->>Agent: What are the secret numbers?",
        "    Note over Agent: run 1",
        "    Agent-->>User: Let me look them up.",
        "    Agent->>Tools: get_secret_number({#34;name#34;:#34;alice#34;})",
        "    Agent->>Tools: get_secret_number({#34;name#34;:#34;zed#34;})",
        "    Tools-->>Agent: get_secret_number: completed: 42",
        "    Tools-->>Agent: get_secret_number: failed: nobody called zed",
        "    Note over Agent,Tools: continuation: run 2 with the tool results",
        "    Agent-->>User: Alice's number is 42#59; nobody is called zed.",
        "    Note over User,Tools: turn completed (completed: the agent answered)",
    ]
    assert trace_diagram_for_turn(turn) == trace_diagram_for_turn(turn)


@pytest.mark.anyio
async def test_trace_of_a_turn_that_hit_the_depth_bound_shows_the_abandoned_call() -> None:
    agent = ScriptedAgent(respond=lambda key, run_input: [tool_call("get_secret_number", "{}")])
    tools = ToolRegistry().register(get_secret_number)
    async with Engine(agent, tools=tools, max_depth=1) as engine:
        turn = await engine.run_turn("t1", "loop forever")
    assert turn.status is RunStatus.failed
    lines = trace_diagram_for_turn(turn).splitlines()
    # The wording of the argument error is the tool registry's; only its outcome matters.
    assert lines[7].startswith("    Tools-->>Agent: get_secret_number: failed: ")
    assert lines[7].endswith("…")  # long: cut at 80 characters
    del lines[7]
    assert lines[4:] == [
        "    User->>Agent: loop forever",
        "    Note over Agent: run 1",
        "    Agent->>Tools: get_secret_number({})",
        "    Note over Agent,Tools: continuation: run 2 with the tool results",
        "    Agent-xTools: get_secret_number({}) abandoned, never run",
        "    Note over User,Tools: turn failed (max_depth: max tool continuation depth "
        "exceeded (1): the agent kept asking for tools)",
    ]


@pytest.mark.anyio
async def test_traces_of_an_interrupted_turn_and_of_the_turn_that_answers_it() -> None:
    asked = Interrupt(id="i1", reason="approval", message="Delete it; really?")
    agent = ScriptedAgent(
        [text("Before I delete:"), tool_call("delete", {}), run_interrupted("t1", "r", asked)],
        [text("Deleted.")],
    )
    async with Engine(agent) as engine:
        first = await engine.run_turn("t1", "Clean up")
        yes = ResumeEntry(interrupt_id="i1", status="resolved", payload=True)
        second = await engine.run_turn("t1", resume=[yes])
    assert trace_diagram_for_turn(first).splitlines()[4:] == [
        "    User->>Agent: Clean up",
        "    Note over Agent: run 1",
        "    Agent-->>User: Before I delete:",
        "    Agent-xTools: delete({}) abandoned, never run",
        "    Agent-->>User: asks: Delete it#59; really?",
        "    Note over User,Tools: turn interrupted (interrupted: the agent waits for an "
        "answer: Delete it#59; really?)",
    ]
    # The answering turn has no message of its own: it starts at its answer.
    assert trace_diagram_for_turn(second).splitlines()[4:] == [
        "    User->>Agent: answer: resolved: True",
        "    Note over Agent: run 1",
        "    Agent-->>User: Deleted.",
        "    Note over User,Tools: turn completed (completed: the agent answered)",
    ]


def _finished_call(name: str, arguments: str, result: ToolResult) -> ToolCallInfo:
    call = ToolCallInfo("id-" + name, name, arguments=arguments)
    call.send(ToolCallEvent.finish_args)
    call.send(ToolCallEvent.execute)
    call.result = result
    call.send(ToolCallEvent.succeed if result.ok else ToolCallEvent.fail)
    return call


def _conversation(*extra: Any) -> Conversation:
    return Conversation(
        "t",
        [
            UserMessage(id="u0", content="an earlier question"),
            TextMessage("m0", text="an earlier answer"),
            UserMessage(id="u1", content="the question"),
            *extra,
        ],
    )


def test_trace_counts_earlier_messages_and_draws_only_the_last_turn() -> None:
    answer = TextMessage("m1", text="the answer")
    lines = trace_diagram(
        _conversation(answer),
        status=RunStatus.completed,
        reason=TerminalReason(kind=ReasonKind.COMPLETED, message="the agent answered"),
    ).splitlines()
    assert "    Note over User,Agent: 2 earlier messages not shown" in lines
    assert "    User->>Agent: the question" in lines
    assert "earlier" not in "\n".join(lines[5:])


def test_trace_uses_the_run_count_to_tell_whether_a_continuation_started() -> None:
    call = _finished_call("lookup", '{"q": 1}', ToolResult.success("found"))
    message = ToolCallMessage(id="b1", calls=(call,), result_message_ids=("r1",))
    cancelled = TerminalReason(kind=ReasonKind.CANCELLED, message="cancelled by the user")
    one_run = trace_diagram(
        _conversation(message), status=RunStatus.cancelled, reason=cancelled, runs=1
    )
    assert "continuation" not in one_run
    two_runs = trace_diagram(
        _conversation(message), status=RunStatus.cancelled, reason=cancelled, runs=2
    )
    assert "continuation: run 2" in two_runs
    assert two_runs.endswith(
        "    Note over User,Tools: turn cancelled (cancelled: cancelled by the user)\n"
    )


def test_trace_of_a_turn_still_running_says_so() -> None:
    diagram = trace_diagram(_conversation(), status=RunStatus.executing_tools, reason=None)
    assert diagram.endswith("    Note over User,Tools: still executing_tools\n")


@pytest.mark.parametrize("status", list(RunStatus), ids=str)
def test_trace_spells_the_turn_state_as_its_id(status: RunStatus) -> None:
    ending = trace_diagram(_conversation(), status=status, reason=None).splitlines()[-1]
    word = "turn" if status.is_final else "still"
    assert ending == f"    Note over User,Tools: {word} {status.value}"


#: The events that move a new tool call (no result attached) to each state.
PATHS: dict[ToolCallStatus, tuple[ToolCallEvent, ...]] = {
    ToolCallStatus.streaming: (),
    ToolCallStatus.pending: (ToolCallEvent.finish_args,),
    ToolCallStatus.awaiting_approval: (ToolCallEvent.finish_args, ToolCallEvent.request_approval),
    ToolCallStatus.executing: (ToolCallEvent.finish_args, ToolCallEvent.execute),
    ToolCallStatus.completed: (ToolCallEvent.receive_result,),
    ToolCallStatus.failed: (ToolCallEvent.abandon,),
}


@pytest.mark.parametrize("status", list(ToolCallStatus), ids=str)
def test_trace_spells_a_tool_call_state_as_its_id(status: ToolCallStatus) -> None:
    call = ToolCallInfo("id-x", "lookup", arguments="{}")
    for event in PATHS[status]:
        call.send(event)
    assert call.status is status
    message = ToolCallMessage(id="b1", calls=(call,), result_message_ids=("r1",))
    diagram = trace_diagram(_conversation(message), status=RunStatus.completed, reason=None)
    (line,) = [line for line in diagram.splitlines() if line.startswith("    Tools-->>Agent")]
    assert line.removeprefix("    Tools-->>Agent: lookup: ").rstrip(":") == status.value


def test_trace_of_a_turn_that_never_started_a_run() -> None:
    failed = TerminalReason(kind=ReasonKind.BACKEND_ERROR, message="no run", code="503")
    diagram = trace_diagram(_conversation(), status=RunStatus.failed, reason=failed, runs=0)
    assert "    Note over Agent: no run started" in diagram
    assert "turn failed (backend_error: no run [503])" in diagram


def test_trace_marks_interrupted_text() -> None:
    cut = TextMessage("m1", text="half an ans")
    cut.interrupted = True
    diagram = trace_diagram(
        _conversation(cut),
        status=RunStatus.failed,
        reason=TerminalReason(kind=ReasonKind.TRANSPORT_ERROR, message="dropped"),
    )
    assert "    Agent-->>User: half an ans (interrupted)" in diagram


# --- escaping ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("plain text", "plain text"),
        ("a;b", "a#59;b"),
        ("#1 #35;", "#35;1 #35;35#59;"),
        ('say "hi"', "say #34;hi#34;"),
        ("<b>&</b>", "#60;b#62;#38;#60;/b#62;"),
        ("100%%", "100#37;#37;"),
        ("line one\nline two\r\n\tend", "line one line two end"),
        ("  \n ", "(empty)"),
        ("bell\x07ring", "bell ring"),
    ],
)
def test_escape_mermaid(raw: str, escaped: str) -> None:
    assert escape_mermaid(raw) == escaped


def test_escape_mermaid_truncates_long_text_before_escaping() -> None:
    assert escape_mermaid("x" * 100, 10) == "x" * 9 + "…"
    assert escape_mermaid("abcdefgh;;;;;;", 10) == "abcdefgh#59;…"
    assert escape_mermaid("short", 10) == "short"
    with pytest.raises(ValueError):
        escape_mermaid("x", 0)


def test_text_from_the_wire_cannot_change_the_diagram_structure() -> None:
    hostile = 'hi";\nNote over User: injected\nend\n%% comment #x; <script>'
    call = _finished_call("evil;tool", hostile, ToolResult.failure(hostile))
    message = ToolCallMessage(id="b1", calls=(call,), result_message_ids=("r1",))
    conversation = Conversation(
        "t", [UserMessage(id="u", content=hostile), message, TextMessage("m", text=hostile)]
    )
    diagram = trace_diagram(
        conversation,
        status=RunStatus.failed,
        reason=TerminalReason(kind=ReasonKind.AGENT_ERROR, message=hostile),
        runs=2,
        max_text=500,
    )
    lines = diagram.splitlines()
    assert len(lines) == 11  # header 4, user, run, call, result, continuation, text, end
    body = lines[4:]
    for line in body:
        assert line.startswith("    ")
        bare = re.sub(r"#\d+;", "", line.split(": ", 1)[1])  # only entity codes may remain
        assert not set(bare) & set(';"<>%#&'), line
    assert "injected" in lines[4]  # still there, as text on the user's line
    assert all(not line.strip().startswith(("end", "Note over User: injected")) for line in lines)


def test_long_text_is_truncated_in_traces() -> None:
    long = "word " * 100
    diagram = trace_diagram(
        _conversation(TextMessage("m1", text=long)),
        status=RunStatus.completed,
        reason=None,
        max_text=30,
    )
    line = next(line for line in diagram.splitlines() if line.startswith("    Agent-->>User"))
    assert line == "    Agent-->>User: " + ("word " * 6).strip()[:29].rstrip() + "…"
    with pytest.raises(ValueError):
        trace_diagram(_conversation(), status=RunStatus.completed, reason=None, max_text=0)


def test_trace_accepts_messages_and_not_only_a_conversation() -> None:
    conversation = _conversation(TextMessage("m1", text="the answer"))
    assert trace_diagram(
        conversation.messages, status=RunStatus.completed, reason=None
    ) == trace_diagram(conversation, status=RunStatus.completed, reason=None)


def test_tool_call_status_is_final_in_traces() -> None:
    call = _finished_call("lookup", "", ToolResult.success("ok"))
    assert call.status is ToolCallStatus.completed
    message = ToolCallMessage(id="b1", calls=(call,), result_message_ids=("r1",))
    diagram = trace_diagram(_conversation(message), status=RunStatus.completed, reason=None)
    assert "    Agent->>Tools: lookup({})" in diagram
    assert "    Tools-->>Agent: lookup: completed: ok" in diagram
    assert "continuation: run 2" in diagram


def test_the_public_surface_is_a_sorted_tuple_of_existing_names() -> None:
    exported = diagrams.__all__
    assert isinstance(exported, tuple)
    assert list(exported) == sorted(exported)
    assert all(hasattr(diagrams, name) for name in exported)
    public = {name for name in vars(diagrams) if not name.startswith("_")} - {"annotations"}
    assert set(exported) == {
        name for name in public if not isinstance(getattr(diagrams, name), types.ModuleType)
    }
