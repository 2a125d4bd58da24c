"""The inspector page in a real browser (Debian's chromium, headless, through
Playwright): a live two-round turn, a reload in the middle of it, the machines lit
as the turn goes, a failed tool, another principal's thread, and ``toolrelay
inspect`` on a capture with violations. One browser for them all; each test has
its own server. Screenshots of every stage go to the artifacts directory printed at
the end of the run (``$TOOLRELAY_ARTIFACTS``, else under pytest's base temp dir).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest

from toolrelay import ThreadKey, ToolRegistry
from toolrelay.protocol import (
    Event,
    ReasoningEndEvent,
    ReasoningMessageContentEvent,
    ReasoningMessageEndEvent,
    ReasoningMessageStartEvent,
    ReasoningStartEvent,
    RunAgentInput,
    ToolMessage,
)
from toolrelay.server import AguiServer, BearerTokens
from toolrelay.store import MemoryStore
from toolrelay.testing import ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _browser import ServerThread, chromium_path, unavailable

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

SRC = Path(__file__).resolve().parents[2] / "src"
TOKENS = {"alice-token": "alice", "bob-token": "bob"}
WAIT_MS = 15_000

# -- the model and the tools -----------------------------------------------------------

#: Per person, the gate their secret-number lookup waits on (set by the test).
GATES: dict[str, threading.Event] = {}


def get_secret_number(name: str) -> int:
    """A person's secret number (waits until the test lets it answer)."""
    gate = GATES.get(name)
    if gate is not None and not gate.wait(30):
        raise TimeoutError(f"the test never let {name}'s lookup answer")
    return {"alice": 42, "bob": 7}[name]


def explode(reason: str) -> str:
    """A tool that always fails (once the test lets it)."""
    gate = GATES.get("explode")
    if gate is not None:
        gate.wait(30)
    raise RuntimeError(f"the tool broke: {reason}")


def _reasoning(message_id: str, thought: str) -> list[Event]:
    return [
        ReasoningStartEvent(message_id=message_id),
        ReasoningMessageStartEvent(message_id=message_id),
        ReasoningMessageContentEvent(message_id=message_id, delta=thought),
        ReasoningMessageEndEvent(message_id=message_id),
        ReasoningEndEvent(message_id=message_id),
    ]


def _respond(key: ThreadKey, run_input: RunAgentInput) -> list[Any]:
    results = sum(isinstance(message, ToolMessage) for message in run_input.messages)
    if key.thread_id.startswith("failing"):
        if results == 0:
            return [tool_call("explode", {"reason": "on purpose"}, id="call-explode")]
        return [text("The tool failed, sorry.")]
    if results == 0:
        return [
            _reasoning("think-1", "Two people: look up Alice, then Bob."),
            text("Looking up Alice first.", chunk=6),
            tool_call("get_secret_number", {"name": "alice"}, id="call-alice"),
        ]
    if results == 1:
        return [tool_call("get_secret_number", {"name": "bob"}, id="call-bob")]
    return [text("Alice's number is 42 and Bob's is 7.", chunk=6)]


def _make_server() -> AguiServer:
    tools = ToolRegistry().register(get_secret_number).register(explode)
    return AguiServer(
        ScriptedAgent(respond=_respond),
        tools=tools,
        store=MemoryStore(),
        authenticator=BearerTokens(TOKENS),
        heartbeat=1.0,
    )


class Turn:
    """A POST of a user message, read to its end in a thread of its own."""

    def __init__(self, url: str, token: str, thread: str, message: str) -> None:
        self.status: int | None = None
        self.body = ""
        body = {
            "threadId": thread,
            "runId": f"run-{thread}",
            "messages": [{"id": f"u-{thread}", "role": "user", "content": message}],
        }

        def post() -> None:
            with httpx.Client(timeout=60) as client:
                response = client.post(
                    f"{url}/", json=body, headers={"Authorization": f"Bearer {token}"}
                )
                self.status = response.status_code
                self.body = response.text

        self._thread = threading.Thread(target=post, daemon=True)
        self._thread.start()

    def join(self) -> None:
        self._thread.join(30)
        assert self.status == 200, self.body
        assert '"RUN_FINISHED"' in self.body


# -- fixtures ------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def artifacts(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Path]:
    """Where the screenshots go; printed at the end of the session."""
    given = os.environ.get("TOOLRELAY_ARTIFACTS")
    directory = Path(given) if given else tmp_path_factory.getbasetemp() / "inspector-artifacts"
    directory.mkdir(parents=True, exist_ok=True)
    yield directory
    shots = sorted(path.name for path in directory.glob("*.png"))
    _say(request, f"inspector screenshots ({len(shots)}) in {directory}")


def _say(request: pytest.FixtureRequest, line: str) -> None:
    """Write a line on the terminal, past pytest's output capture."""
    plugins = request.config.pluginmanager
    reporter = plugins.get_plugin("terminalreporter")
    capture = plugins.get_plugin("capturemanager")
    if reporter is None:
        return
    if capture is None:
        reporter.write_line(line)
        return
    with capture.global_and_fixture_disabled():
        reporter.write_line(line)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """One headless system chromium for the session's browser tests (all in this
    module). Module-scoped, not session-scoped: Playwright's synchronous API keeps an
    event loop running in the main thread while it is started, and the suite's async
    tests need that thread's loop free once these tests are done."""
    executable = chromium_path()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        unavailable("playwright is not installed: pip install -e '.[test]'")
    args = ["--no-sandbox"] if hasattr(os, "geteuid") and os.geteuid() == 0 else []
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(
                executable_path=executable, headless=True, args=args
            )
        except Exception as exc:
            unavailable(f"chromium at {executable} did not start: {exc}")
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(params=["asyncio", "trio"])
def server(request: pytest.FixtureRequest) -> Iterator[ServerThread]:
    """The server under test, on each event loop toolrelay supports."""
    GATES.clear()
    GATES.update(alice=threading.Event(), bob=threading.Event(), explode=threading.Event())
    with ServerThread(_make_server, backend=request.param) as running:
        try:
            yield running
        finally:
            for gate in GATES.values():
                gate.set()  # nothing left waiting when the server stops


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 950})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield opened
    finally:
        context.close()
    assert not errors, f"the page raised: {errors}"


def _wait_for_thread(url: str, token: str, thread: str) -> None:
    """Until the server lists ``thread`` (a turn started in the background)."""
    with httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}) as client:
        for _ in range(300):
            threads = client.get("/threads").json()["threads"]
            if any(info["threadId"] == thread for info in threads):
                return
            time.sleep(0.05)
    raise AssertionError(f"thread {thread!r} never appeared")


def _sign_in(page: Page, url: str, token: str, thread: str | None = None) -> None:
    page.goto(f"{url}/inspect/" + (f"#thread={thread}" if thread else ""))
    page.locator("#token").fill(token)
    page.locator("#login button[type=submit]").click()
    page.locator("#app").wait_for(state="visible", timeout=WAIT_MS)


def _lit(page: Page, diagram: str) -> list[str]:
    return sorted(page.locator(f"#{diagram} g.node.lit > title").all_text_contents())


def _expect_lit(page: Page, diagram: str, states: list[str]) -> None:
    from playwright.sync_api import expect

    expect(page.locator(f"#{diagram} g.node.lit > title")).to_have_text(states, timeout=WAIT_MS)


def _expect_call(page: Page, call_id: str, state: str) -> None:
    from playwright.sync_api import expect

    expect(page.locator(f'tr.call[data-call-id="{call_id}"]')).to_have_attribute(
        "data-state", state, timeout=WAIT_MS
    )


# -- the tests -------------------------------------------------------------------------------


def test_page_shows_a_live_two_round_turn_with_the_machines_lit(
    server: ServerThread, page: Page, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    requests: list[tuple[str, str | None]] = []
    page.on("request", lambda r: requests.append((r.url, r.headers.get("authorization"))))
    _sign_in(page, server.url, "alice-token")
    before_sign_in = len(requests)
    turn = Turn(server.url, "alice-token", "two-rounds", "What are the secret numbers?")
    link = page.locator('#threads a[data-thread="two-rounds"]')
    expect(link).to_be_visible(timeout=WAIT_MS)
    link.click()

    # Round 1: reasoning and text streamed, Alice's lookup running.
    _expect_call(page, "call-alice", "executing")
    expect(page.locator(".reasoning")).to_have_text("Two people: look up Alice, then Bob.")
    expect(page.locator(".round[data-round='1'] .text")).to_have_text("Looking up Alice first.")
    _expect_lit(page, "run-diagram", ["executing_tools"])
    _expect_lit(page, "call-diagram", ["executing"])
    page.screenshot(path=artifacts / f"{server.backend}-live-round-1-executing.png", full_page=True)

    # Round 2: Alice's answer is in, Bob's lookup runs.
    GATES["alice"].set()
    _expect_call(page, "call-alice", "completed")
    _expect_call(page, "call-bob", "executing")
    expect(page.locator('tr.call[data-call-id="call-alice"] .result')).to_have_text("42")
    expect(page.locator(".round")).to_have_count(2)
    _expect_lit(page, "run-diagram", ["executing_tools"])
    _expect_lit(page, "call-diagram", ["executing"])
    page.screenshot(path=artifacts / f"{server.backend}-live-round-2-executing.png", full_page=True)

    # The answer: the turn completes with its stop reason; the last calls are lit done.
    GATES["bob"].set()
    turn.join()
    card = page.locator(".turn[data-run-id]").first
    expect(card).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    expect(card).to_have_attribute("data-stop-reason", "end_turn")
    expect(page.locator(".round[data-round='3'] .text")).to_have_text(
        "Alice's number is 42 and Bob's is 7."
    )
    _expect_lit(page, "run-diagram", ["completed"])
    _expect_lit(page, "call-diagram", ["completed"])
    timing = page.locator('tr.call[data-call-id="call-bob"] .timing').inner_text()
    assert re.fullmatch(r"\d+\.\d\d s", timing), timing
    page.screenshot(path=artifacts / f"{server.backend}-live-turn-completed.png", full_page=True)

    # The token went in a header, never in a URL.
    assert requests
    assert all("alice-token" not in url for url, _ in requests)
    api = [auth for url, auth in requests[before_sign_in:] if "/threads" in url]
    assert api and all(auth == "Bearer alice-token" for auth in api)
    assert "alice-token" not in page.url

    # Stepping through the finished turn: the lit states follow the events.
    page.locator("#first").click()
    expect(page.locator("#position")).to_have_text(re.compile(r"^event 0 of \d+$"))
    _expect_lit(page, "run-diagram", ["idle"])
    page.locator("#next").click()
    _expect_lit(page, "run-diagram", ["running"])
    seen: list[str] = []
    for _ in range(200):
        page.locator("#next").click()
        state = page.locator("#run-state").inner_text()
        if not seen or seen[-1] != state:
            seen.append(state)
        if "event" in page.locator("#position").inner_text() and state == "completed":
            break
    assert seen == [
        "running",
        "executing_tools",
        "running",
        "executing_tools",
        "running",
        "completed",
    ], seen
    row = page.locator("#events li.current")
    expect(row).to_have_attribute("data-type", "RUN_FINISHED")
    page.locator('#events li[data-type="TOOL_CALL_END"]').first.click()
    _expect_lit(page, "call-diagram", ["executing"])
    page.screenshot(path=artifacts / f"{server.backend}-stepping-finished-turn.png", full_page=True)


def test_a_reload_mid_turn_catches_up_then_goes_on_live(
    server: ServerThread, page: Page, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    turn = Turn(server.url, "alice-token", "two-rounds-reload", "The secret numbers?")
    _wait_for_thread(server.url, "alice-token", "two-rounds-reload")
    _sign_in(page, server.url, "alice-token", thread="two-rounds-reload")
    _expect_call(page, "call-alice", "executing")
    GATES["alice"].set()
    _expect_call(page, "call-bob", "executing")

    page.reload()  # the token stays in the tab; the view is folded again from the log
    expect(page.locator("#app")).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#login")).to_be_hidden()
    _expect_call(page, "call-alice", "completed")
    _expect_call(page, "call-bob", "executing")
    expect(page.locator(".reasoning")).to_have_text("Two people: look up Alice, then Bob.")
    expect(page.locator(".round[data-round='1'] .text")).to_have_text("Looking up Alice first.")
    _expect_lit(page, "run-diagram", ["executing_tools"])
    page.screenshot(path=artifacts / f"{server.backend}-reload-mid-turn.png", full_page=True)

    GATES["bob"].set()  # and it goes on, live
    turn.join()
    card = page.locator(".turn[data-run-id]").first
    expect(card).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
    expect(page.locator(".round[data-round='3'] .text")).to_have_text(
        "Alice's number is 42 and Bob's is 7."
    )
    _expect_lit(page, "run-diagram", ["completed"])
    page.screenshot(path=artifacts / f"{server.backend}-reload-then-completed.png", full_page=True)


def test_a_failed_tool_shows_failed(server: ServerThread, page: Page, artifacts: Path) -> None:
    from playwright.sync_api import expect

    turn = Turn(server.url, "alice-token", "failing", "Break it.")
    _wait_for_thread(server.url, "alice-token", "failing")
    _sign_in(page, server.url, "alice-token", thread="failing")
    _expect_call(page, "call-explode", "executing")
    GATES["explode"].set()
    turn.join()
    _expect_call(page, "call-explode", "failed")
    expect(page.locator('tr.call[data-call-id="call-explode"] .result')).to_contain_text(
        "the tool broke: on purpose"
    )
    card = page.locator(".turn[data-run-id]").first
    expect(card).to_have_attribute("data-state", "completed")
    _expect_lit(page, "run-diagram", ["completed"])
    _expect_lit(page, "call-diagram", ["failed"])
    page.screenshot(path=artifacts / f"{server.backend}-failed-tool.png", full_page=True)


def test_another_principals_thread_is_not_reachable(
    server: ServerThread, page: Page, artifacts: Path
) -> None:
    from playwright.sync_api import expect

    for gate in GATES.values():
        gate.set()
    Turn(server.url, "alice-token", "alice-only", "Secret numbers?").join()
    Turn(server.url, "bob-token", "bobs-thread", "Secret numbers?").join()

    # A wrong token is refused and asked again.
    page.goto(f"{server.url}/inspect/")
    page.locator("#token").fill("not-a-token")
    page.locator("#login button[type=submit]").click()
    expect(page.locator("#error")).to_have_text("The server refused this token.")
    expect(page.locator("#login")).to_be_visible()

    _sign_in(page, server.url, "bob-token")
    expect(page.locator('#threads a[data-thread="bobs-thread"]')).to_be_visible(timeout=WAIT_MS)
    assert page.locator('#threads a[data-thread="alice-only"]').count() == 0
    page.goto(f"{server.url}/inspect/#thread=alice-only")
    expect(page.locator("#error")).to_have_text(
        "No thread alice-only (or not yours).", timeout=WAIT_MS
    )
    assert page.locator(".turn").count() == 0
    page.screenshot(path=artifacts / f"{server.backend}-other-principal.png", full_page=True)


CAPTURE = b"".join(
    b"data: " + line + b"\n\n"
    for line in (
        b'{"type":"RUN_STARTED","threadId":"t","runId":"r"}',
        b'{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}',
        b'{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"Let me look."}',
        b'{"type":"TOOL_CALL_ARGS","toolCallId":"ghost","delta":"{}"}',
        b"not json",
        b'{"type":"TEXT_MESSAGE_END","messageId":"m1"}',
        b'{"type":"TOOL_CALL_START","toolCallId":"c1","toolCallName":"lookup"}',
        b'{"type":"TOOL_CALL_ARGS","toolCallId":"c1","delta":"{\\"q\\":1}"}',
        b'{"type":"TOOL_CALL_END","toolCallId":"c1"}',
        b'{"type":"RUN_FINISHED","threadId":"t","runId":"r"}',
    )
)


def test_toolrelay_inspect_shows_a_captures_violations_where_they_happened(
    page: Page, artifacts: Path, tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    capture = tmp_path / "broken.sse"
    capture.write_bytes(CAPTURE)
    env = dict(os.environ, PYTHONPATH=str(SRC))
    process = subprocess.Popen(
        [sys.executable, "-m", "toolrelay", "inspect", str(capture), "--no-browser"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        match = re.search(r"http://127\.0\.0\.1:\d+/inspect/", line)
        assert match, line
        page.goto(match.group())
        violations = page.locator("#events li.violation")
        expect(violations).to_have_count(2, timeout=WAIT_MS)
        expect(violations.nth(0)).to_have_attribute("data-index", "4")
        expect(violations.nth(0)).to_contain_text("args_for_unknown_call")
        expect(violations.nth(1)).to_have_attribute("data-index", "5")
        expect(violations.nth(1)).to_contain_text("malformed_event")
        expect(page.locator('#summary [data-fact="violations"]')).to_have_text("2")
        # The run handed its call over: what replay reports as "would execute".
        _expect_lit(page, "run-diagram", ["executing_tools"])
        _expect_lit(page, "call-diagram", ["pending"])
        page.screenshot(path=artifacts / "inspect-capture.png", full_page=True)

        # Stepping to a violation shows the machines as they were there.
        page.locator('#findings a[data-index="4"]').click()
        expect(page.locator("#position")).to_have_text("event 4 of 10")
        expect(page.locator("#current-event .violation")).to_contain_text("args_for_unknown_call")
        _expect_lit(page, "run-diagram", ["running"])
        assert _lit(page, "call-diagram") == []
        page.screenshot(path=artifacts / "inspect-capture-violation.png", full_page=True)
    finally:
        process.terminate()
        process.communicate(timeout=10)


def test_toolrelay_serve_serves_the_page(page: Page, artifacts: Path, tmp_path: Path) -> None:
    """The command, as a real process with the demo model: the page it serves shows a
    turn a client ran."""
    from playwright.sync_api import expect

    env = dict(os.environ, PYTHONPATH=str(SRC))
    env.pop("TOOLRELAY_TOKEN", None)
    command = [sys.executable, "-m", "toolrelay", "serve", "--port", "0", "--store", "memory:"]
    process = subprocess.Popen(
        [*command, "--token", "demo-token"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        process.stdout.readline()
        line = process.stdout.readline()
        match = re.search(r"inspector page at (http://\S+)/inspect/", line)
        assert match, line
        url = match.group(1)
        turn = Turn(url, "demo-token", "demo", "What are the secret numbers of alice and bob?")
        turn.join()
        _sign_in(page, url, "demo-token", thread="demo")
        card = page.locator(".turn[data-run-id]").first
        expect(card).to_have_attribute("data-state", "completed", timeout=WAIT_MS)
        expect(card).to_have_attribute("data-stop-reason", "end_turn")
        calls = page.locator("tr.call")
        assert calls.count() >= 1
        for index in range(calls.count()):  # once the page has the outcomes
            expect(calls.nth(index)).to_have_attribute("data-state", "completed")
        _expect_lit(page, "run-diagram", ["completed"])
        page.screenshot(path=artifacts / "toolrelay-serve-demo.png", full_page=True)
    finally:
        process.terminate()
        process.communicate(timeout=30)
