"""A third-party client: the official AG-UI TypeScript client (``@ag-ui/client`` from
npm, run with Node) against ``toolrelay serve``. Its own pipeline verifies every event
it reads (its ``verifyEvents`` throws on anything out of protocol); server tools over
two rounds, client tools handed over and answered, and the round limit."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
CLIENT = HERE / "agui_js"
SRC = HERE.parents[1] / "src"
pytestmark = pytest.mark.slow

TOOLS_MODULE = """
from toolrelay import ToolRegistry
from toolrelay.demo import get_weather, lookup_city

TOOLS = ToolRegistry().register(lookup_city).register(get_weather)
"""


@pytest.fixture(scope="module")
def node_client() -> Path:
    """The client's folder with ``@ag-ui/client`` installed (``.ci/run`` installs it)."""
    if shutil.which("node") is None:
        pytest.skip("Node is not installed (.ci/run installs it)")
    if not (CLIENT / "node_modules" / "@ag-ui" / "client").is_dir():
        npm = shutil.which("npm")
        if npm is None:
            pytest.skip("npm is not installed (.ci/run installs it)")
        subprocess.run(
            [npm, "install", "--no-package-lock", "--no-audit", "--no-fund"],
            cwd=CLIENT,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return CLIENT


def types(run: list[dict[str, Any]]) -> list[str]:
    return [event["type"] for event in run]


def test_the_official_typescript_client_runs_turns_and_accepts_every_stream(
    node_client: Path, tmp_path: Path
) -> None:
    (tmp_path / "jstools.py").write_text(TOOLS_MODULE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(SRC), str(tmp_path)]))
    env.pop("TOOLRELAY_TOKEN", None)
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "toolrelay",
            "serve",
            "--port",
            "0",
            "--store",
            "js.db",
            "--tools",
            "jstools:TOOLS",
            "--max-tool-rounds",
            "3",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        line = server.stdout.readline()
        match = re.search(r"on (http://\S+/)", line)
        assert match, line
        done = subprocess.run(
            ["node", str(node_client / "run.mjs"), match.group(1)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        server.send_signal(signal.SIGINT)
        assert server.wait(30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(10)
        for stream in (server.stdout, server.stderr):
            if stream is not None:
                stream.close()
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["error"] is None and done.returncode == 0, out["error"] or done.stderr
    multihop, client, loop = out["turns"]
    # Server tools, two rounds, one AG-UI run.
    assert len(multihop["runs"]) == 1
    assert types(multihop["runs"][0]).count("TOOL_CALL_RESULT") == 2
    assert multihop["runs"][0][-1]["result"] == {"stopReason": "end_turn", "rounds": 2}
    assert "Paris" in multihop["answer"]
    # Client tools: handed over in one run, answered, and the turn goes on.
    assert len(client["runs"]) == 2 and client["clientCalls"] == 2
    handover = client["runs"][0][-1]
    assert handover["result"]["stopReason"] == "client_tools"
    assert handover["outcome"]["type"] == "success"
    assert len(handover["outcome"]["pendingToolCallIds"]) == 2
    assert client["runs"][1][-1]["result"]["stopReason"] == "end_turn"
    assert "42" in client["answer"] and "7" in client["answer"]
    # The round limit, a client tool each round: completed, with its CUSTOM event.
    last = loop["runs"][-1]
    assert loop["clientCalls"] == 3
    assert types(last)[-2:] == ["CUSTOM", "RUN_FINISHED"]
    assert last[-2]["name"] == "toolrelay.stop"
    assert last[-1]["result"] == {"stopReason": "max_tool_rounds", "rounds": 3}
