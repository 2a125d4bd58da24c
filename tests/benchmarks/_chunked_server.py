"""A bare HTTP/1.1 server for case 5 (run as a child process): every POST of a
``RunAgentInput`` gets one run of ``DELTAS`` small text deltas as an SSE stream, written
in large chunks (64 KiB per write), on a kept-alive connection. It prints its URL, then
serves until its stdin closes. Built on asyncio streams alone, so that the server costs
as little as it can and the client's CPU is what is compared.
"""

from __future__ import annotations

import asyncio
import json
import sys

__all__ = ("DELTAS", "main")

DELTAS = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
_WRITE = 64 * 1024
_WORDS = ("the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. ", "é ")


def _sse(event: dict[str, object]) -> bytes:
    return b"data: " + json.dumps(event, separators=(",", ":")).encode() + b"\n\n"


_MIDDLE = b"".join(
    _sse({"type": "TEXT_MESSAGE_CONTENT", "messageId": "m1", "delta": _WORDS[i % len(_WORDS)]})
    for i in range(DELTAS)
)


def _body(run_input: dict[str, str]) -> bytes:
    thread, run = run_input["threadId"], run_input["runId"]
    return b"".join(
        (
            _sse({"type": "RUN_STARTED", "threadId": thread, "runId": run}),
            _sse({"type": "TEXT_MESSAGE_START", "messageId": "m1", "role": "assistant"}),
            _MIDDLE,
            _sse({"type": "TEXT_MESSAGE_END", "messageId": "m1"}),
            _sse({"type": "RUN_FINISHED", "threadId": thread, "runId": run}),
        )
    )


async def _serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            body = _body(json.loads(await reader.readexactly(length)))
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"content-length: %d\r\n\r\n" % len(body)
            )
            for start in range(0, len(body), _WRITE):
                writer.write(body[start : start + _WRITE])
                await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def main() -> None:
    server = await asyncio.start_server(_serve, "127.0.0.1", 0)
    host, port = server.sockets[0].getsockname()[:2]
    print(f"http://{host}:{port}/", flush=True)
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, sys.stdin.read)
    server.close()


if __name__ == "__main__":
    asyncio.run(main())
