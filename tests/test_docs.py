"""Every Python code block in docs/ runs, in order, one namespace per page."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(p for p in DOCS.glob("*.md") if "```python" in p.read_text(encoding="utf-8"))


def test_the_docs_have_code_to_run() -> None:
    assert len(PAGES) >= 5


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_code_block_on_the_page_runs(page: Path) -> None:
    blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S)
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for number, block in enumerate(blocks, 1):
        code = compile(block, f"{page.name}[block {number}]", "exec")
        exec(code, namespace)


def test_the_provider_capability_table_in_the_docs_is_the_live_one() -> None:
    from toolrelay.backends.providers import capability_table

    assert capability_table() in (DOCS / "providers.md").read_text(encoding="utf-8")


def _page_namespace(name: str) -> dict[str, Any]:
    blocks = re.findall(r"```python\n(.*?)```", (DOCS / name).read_text(encoding="utf-8"), re.S)
    namespace: dict[str, Any] = {"__name__": f"docs_{Path(name).stem}"}
    for number, block in enumerate(blocks, 1):
        exec(compile(block, f"{name}[block {number}]", "exec"), namespace)
    return namespace


def test_the_web_page_app_cancels_the_turn_when_the_browser_leaves() -> None:
    """docs/web.md's app under a real uvicorn server: a client that reads the first
    event and hangs up cancels the turn (the page's ``finally``)."""
    import threading

    import httpx
    import uvicorn

    from toolrelay import RunStatus
    from toolrelay.testing import Hang, ScriptedAgent, text

    page = _page_namespace("web.md")
    page["make_backend"] = lambda: ScriptedAgent([text("thinking..."), Hang()])
    app = page["app"]
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        url = f"http://127.0.0.1:{port}/threads/t1/turns"
        with httpx.stream("POST", url, json={"message": "hi"}, timeout=30) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            first = next(response.iter_lines())
            assert first.startswith("event: ")
        # Hung up. The turn (which would hang for ever) ends cancelled, by the page.
        engine = app.state.engine
        while (turn := engine.turn("t1")) is None or not turn.status.is_final:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert turn.status is RunStatus.cancelled
        assert turn.reason is not None and turn.reason.message == "the client disconnected"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
