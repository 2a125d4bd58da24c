"""The inspector's server side: its files (no data, strict CSP, no authentication),
the JSON it reads behind the server's authentication (a principal's threads, the
outcome of each tool call), its bounds, the diagrams it ships against the machines,
the wheel that carries it, and ``toolrelay inspect``'s document and loopback server.
The page itself runs in a real browser in ``test_inspector_browser.py``."""

from __future__ import annotations

import io
import re
import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import msgspec
import pytest

from toolrelay import ThreadKey, ToolRegistry
from toolrelay.cli import main
from toolrelay.cli._inspect import capture_document, make_server as make_capture_server
from toolrelay.diagrams import MACHINES, render
from toolrelay.server import AguiServer, BearerTokens, _inspector as inspector
from toolrelay.store import MemoryStore
from toolrelay.testing import ScriptedAgent, text, tool_call

sys.path.insert(0, str(Path(__file__).parent))
from _serving import read_events, run_input, serving

ALICE = {"Authorization": "Bearer alice-token"}
BOB = {"Authorization": "Bearer bob-token"}
ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "src" / "toolrelay" / "server" / "static"


async def lookup(name: str) -> str:
    """Look a name up (``boom`` fails)."""
    if name == "boom":
        raise ValueError("no such name: boom")
    return name.upper()


def make_server(store: MemoryStore) -> AguiServer:
    def respond(key: object, run_input: object) -> list[object]:
        messages = getattr(run_input, "messages", [])
        if any(getattr(m, "role", None) == "tool" for m in messages):
            return [text("done")]
        return [
            tool_call("lookup", {"name": "ada"}, id="call-ok"),
            tool_call("lookup", {"name": "boom"}, id="call-bad"),
        ]

    return AguiServer(
        ScriptedAgent(respond=respond),  # type: ignore[arg-type]
        tools=ToolRegistry().register(lookup),
        store=store,
        authenticator=BearerTokens({"alice-token": "alice", "bob-token": "bob"}),
    )


# -- the page's files ---------------------------------------------------------------------


@pytest.mark.anyio
async def test_the_page_and_its_files_are_served_with_a_strict_policy_and_no_token() -> None:
    async with (
        serving(make_server(MemoryStore())) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        redirect = await client.get("/inspect")
        assert redirect.status_code == 308
        assert redirect.headers["location"] == "inspect/"
        for name, content_type in inspector.STATIC_FILES.items():
            response = await client.get(f"/inspect/{name}")
            assert response.status_code == 200, name
            assert response.headers["content-type"] == content_type
            assert response.headers["content-security-policy"] == inspector.CONTENT_SECURITY_POLICY
            assert response.headers["x-content-type-options"] == "nosniff"
            assert response.content == (STATIC / name).read_bytes()
        page = await client.get("/inspect/")
        assert page.content == (STATIC / "index.html").read_bytes()
        for path in ("/inspect/capture.json", "/inspect/..%2f_app.py", "/inspect/static"):
            assert (await client.get(path)).status_code == 404, path
        assert (await client.post("/inspect/")).status_code == 405


def test_the_page_fetches_nothing_from_elsewhere() -> None:
    """No CDN, no absolute URL: every reference is relative to the page."""
    html = (STATIC / "index.html").read_text()
    references = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert sorted(references) == ["inspector.css", "inspector.js"]
    for name in ("index.html", "inspector.js", "inspector.css"):
        source = (STATIC / name).read_text()
        assert not re.search(r"https?://", source.replace("http://www.w3.org", "")), name
        assert "<script>" not in source  # no inline script (the CSP forbids it anyway)
        assert "innerHTML" not in source  # data reaches the DOM as text only


@pytest.mark.anyio
async def test_the_data_routes_need_the_token() -> None:
    async with (
        serving(make_server(MemoryStore())) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        for path in ("/threads", "/threads/t/calls", "/threads/t/events"):
            response = await client.get(path)
            assert response.status_code == 401, path
            assert response.json()["error"]["code"] == "unauthorized"
        assert (await client.post("/threads", headers=ALICE)).status_code == 405
        assert (await client.post("/threads/t/calls", headers=ALICE)).status_code == 405


# -- the JSON it reads ----------------------------------------------------------------------


@pytest.mark.anyio
async def test_a_principal_lists_only_its_threads_and_reads_only_its_calls() -> None:
    store = MemoryStore()
    async with serving(make_server(store)) as url, httpx.AsyncClient(base_url=url) as client:
        await read_events(client, "POST", "/", json_body=run_input("a1", "hi"), headers=ALICE)
        await read_events(client, "POST", "/", json_body=run_input("a2", "hi"), headers=ALICE)
        await read_events(client, "POST", "/", json_body=run_input("b1", "hi"), headers=BOB)

        alice = (await client.get("/threads", headers=ALICE)).json()
        assert sorted(t["threadId"] for t in alice["threads"]) == ["a1", "a2"]
        assert alice["truncated"] is False
        assert all(t["live"] is False and t["lastSeq"] > 0 for t in alice["threads"])
        bob = (await client.get("/threads", headers=BOB)).json()
        assert [t["threadId"] for t in bob["threads"]] == ["b1"]

        calls = (await client.get("/threads/a1/calls", headers=ALICE)).json()
        assert calls["calls"]["call-ok"]["outcome"] == "ok"
        assert calls["calls"]["call-ok"]["name"] == "lookup"
        assert calls["calls"]["call-bad"]["outcome"] == "error"
        assert "no such name: boom" in calls["calls"]["call-bad"]["error"]

        for path in ("/threads/a1/calls", "/threads/a1/events"):
            hidden = await client.get(path, headers=BOB)
            assert hidden.status_code == 404, path  # as if it did not exist
        assert (await client.get("/threads/nope/calls", headers=ALICE)).status_code == 404


@pytest.mark.anyio
async def test_the_lists_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inspector, "MAX_LISTED_THREADS", 2)
    monkeypatch.setattr(inspector, "MAX_SCANNED_RECORDS", 3)
    store = MemoryStore()
    async with serving(make_server(store)) as url, httpx.AsyncClient(base_url=url) as client:
        for thread in ("t1", "t2", "t3"):
            await read_events(client, "POST", "/", json_body=run_input(thread, "hi"), headers=ALICE)
        listed = (await client.get("/threads", headers=ALICE)).json()
        assert [t["threadId"] for t in listed["threads"]] == ["t3", "t2"]  # newest first
        assert listed["truncated"] is True
        info = await store.thread(ThreadKey("t1"))
        assert info is not None and info.last_seq > 3
        calls = (await client.get("/threads/t1/calls", headers=ALICE)).json()
        assert calls["scannedFrom"] == info.last_seq - 3
        assert len(calls["calls"]) <= 2


# -- the diagrams it ships -----------------------------------------------------------------


def _dot_graph(dot: str) -> tuple[set[str], set[tuple[str, str, str]]]:
    nodes = set(re.findall(r'^\s+"(\w+)" \[label="', dot, re.M)) - {"__initial__", "__final__"}
    edges = set(re.findall(r'^\s+"(\w+)" -> "(\w+)" \[label="(\w+)"\]', dot, re.M))
    return nodes, edges


def _svg_graph(svg: bytes) -> tuple[set[str], set[tuple[str, str, str]]]:
    ns = {"s": "http://www.w3.org/2000/svg"}
    root = ET.fromstring(svg)
    nodes = {
        (g.findtext("s:title", "", ns) or "").strip()
        for g in root.iterfind(".//s:g[@class='node']", ns)
    }
    edges = set()
    for g in root.iterfind(".//s:g[@class='edge']", ns):
        source, _, target = (g.findtext("s:title", "", ns) or "").strip().partition("->")
        label = g.findtext("s:text", None, ns)
        if label is not None:
            edges.add((source, target, label.strip()))
    return nodes - {"__initial__", "__final__"}, edges


@pytest.mark.parametrize("stem", sorted(MACHINES))
def test_the_shipped_diagrams_are_the_machines(stem: str) -> None:
    """Every state and every labelled transition of the machine, nothing else; the
    page reads its transitions from these edges. On drift, regenerate with
    ``python -c "from pathlib import Path; from toolrelay.diagrams import MACHINES,
    render_image; [Path(f'src/toolrelay/server/static/{s}.svg').write_bytes(
    render_image(m, 'svg')) for s, m in MACHINES.items()]"`` (needs Graphviz)."""
    expected = _dot_graph(render(MACHINES[stem], "dot"))
    assert expected[0] and expected[1]
    shipped = _svg_graph((STATIC / f"{stem}.svg").read_bytes())
    assert shipped == expected, f"static/{stem}.svg drifted from the machine: regenerate it"


@pytest.mark.slow
def test_the_wheel_carries_the_page(tmp_path: Path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("toolrelay-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for name in inspector.STATIC_FILES:
        assert f"toolrelay/server/static/{name}" in names


# -- toolrelay inspect ---------------------------------------------------------------------

CAPTURE = (
    b'data: {"type":"RUN_STARTED","threadId":"t","runId":"r"}\n\n'
    b'id: 7\ndata: {"type":"TOOL_CALL_ARGS","toolCallId":"ghost","delta":"{}"}\n\n'
    b"data: not json\n\n"
    b'data: {"type":"RUN_FINISHED","threadId":"t","runId":"r"}\n\n'
)


def test_the_capture_document_numbers_events_and_violations_as_replay_does() -> None:
    document = capture_document(CAPTURE, "c.sse")
    assert document["status"] == "completed"
    assert [e["index"] for e in document["events"]] == [1, 2, 3, 4]
    assert [e["line"] for e in document["events"]] == [1, 3, 6, 8]
    assert document["events"][1]["id"] == "7"
    assert document["events"][2]["data"] == "not json"
    assert [(f["index"], f["code"]) for f in document["findings"]] == [
        (2, "args_for_unknown_call"),
        (3, "malformed_event"),
    ]


def test_the_capture_document_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("toolrelay.cli._inspect.MAX_EVENTS", 2)
    document = capture_document(CAPTURE, "c.sse")
    assert len(document["events"]) == 2
    assert document["truncated"] is True
    assert len(document["findings"]) == 2  # the verdict still covers the whole capture


@pytest.fixture
def capture_server() -> Iterator[str]:
    document = msgspec.json.encode(capture_document(CAPTURE, "c.sse"))
    server = make_capture_server(document)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_the_capture_server_serves_the_page_and_the_document_on_loopback_only(
    capture_server: str,
) -> None:
    with httpx.Client(base_url=f"http://{capture_server}") as client:
        assert client.get("/").headers["location"] == "/inspect/"
        page = client.get("/inspect/")
        assert page.content == (STATIC / "index.html").read_bytes()
        assert page.headers["content-security-policy"] == inspector.CONTENT_SECURITY_POLICY
        document = client.get("/inspect/capture.json")
        assert document.headers["content-type"] == "application/json"
        assert len(document.json()["findings"]) == 2
        assert client.get("/inspect/nothing").status_code == 404
        # DNS rebinding: a name that resolves here is still not this server's name.
        rebound = client.get("/inspect/capture.json", headers={"Host": "evil.example:80"})
        assert rebound.status_code == 421


def test_inspect_reports_an_unreadable_capture(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    assert (
        main(["inspect", str(tmp_path / "missing.sse"), "--no-browser"], stdout=out, stderr=err)
        == 2
    )
    assert "cannot read" in err.getvalue()


def test_inspect_refuses_a_capture_over_its_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("toolrelay.cli._inspect.MAX_CAPTURE_BYTES", len(CAPTURE) - 1)
    capture = tmp_path / "big.sse"
    capture.write_bytes(CAPTURE)
    out, err = io.StringIO(), io.StringIO()
    assert main(["inspect", str(capture), "--no-browser"], stdout=out, stderr=err) == 2
    assert "larger than" in err.getvalue()
