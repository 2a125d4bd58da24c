"""A gzip bomb against a client whose address space is capped: with the default
limits the turn ends typed, well inside a few hundred MB, where decoding the bomb
would need gigabytes."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
from pathlib import Path

import pytest

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _hostile import HostileServer, Request, event, gzip_bomb, head

CLIENT = """
import json, sys
import anyio
from toolrelay import Engine
from toolrelay.backends import AguiHttpBackend

async def main() -> None:
    async with AguiHttpBackend(sys.argv[1]) as backend:
        async with Engine(backend) as engine:  # the default Limits
            turn = await engine.run_turn("t", "hi")
    print(json.dumps({"kind": turn.reason.kind.value, "code": turn.reason.code}))

anyio.run(main, backend=sys.argv[2])
"""

ADDRESS_SPACE = 512 * 1024 * 1024  # the interpreter, its libraries and 8 MiB events


def cap_address_space() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS as Linux counts it")
@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_gzip_bomb_ends_typed_in_a_capped_address_space(backend: str) -> None:
    started = event('{"type":"RUN_STARTED","threadId":"t","runId":"r"}')
    endless = gzip_bomb(started + b'data: {"type":"CUSTOM","name":"x","value":"')

    def scenario(conn: socket.socket, request: Request, number: int) -> None:
        conn.sendall(head(extra=["Content-Encoding: gzip"]))
        endless.send(conn, server, megabytes=4096)  # up to 4 GiB decoded

    src = str(Path(__file__).resolve().parents[2] / "src")
    env = {**os.environ, "PYTHONPATH": src}
    with HostileServer(scenario) as server:
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, server.url, backend],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
            preexec_fn=cap_address_space,
            check=False,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"kind": "protocol_error", "code": "max_event_bytes"}
