"""A hostile HTTP server on loopback, written on raw sockets.

A framework would refuse to misbehave (send a gzip bomb, a bad chunk, a reset at the
wrong moment), so :class:`HostileServer` reads each request by hand and hands the
socket to a scenario function that writes whatever bytes it wants. It runs in
threads (one per connection), so asyncio and trio tests share it, and every write
error (the client went away) simply ends the scenario.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import TracebackType
from typing import Self

__all__ = (
    "Bomb",
    "brotli_bomb",
    "HostileServer",
    "Request",
    "deflate_bomb",
    "event",
    "gzip_bomb",
    "head",
    "normal_run",
    "reset",
    "trickle",
)


@dataclass(frozen=True, slots=True)
class Request:
    """What a scenario is given: the request line and headers, and the body."""

    head: bytes
    body: bytes

    def header(self, name: str) -> str | None:
        for line in self.head.split(b"\r\n")[1:]:
            key, _, value = line.partition(b":")
            if key.strip().lower() == name.lower().encode():
                return value.strip().decode()
        return None


Scenario = Callable[[socket.socket, Request, int], None]
"""Writes the answer to one request: the socket, the request, its number (from 0)."""


class HostileServer:
    """Serves ``scenario`` on 127.0.0.1 and an ephemeral port, one thread per connection."""

    def __init__(self, scenario: Scenario) -> None:
        self._scenario = scenario
        self._listener = socket.socket()
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._closed = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/agent"

    def __enter__(self) -> Self:
        self._acceptor.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        self._listener.close()
        self._acceptor.join(5)
        for thread in self._threads:
            thread.join(5)

    @property
    def closed(self) -> threading.Event:
        """Set when the server stops: long scenarios check it to end."""
        return self._closed

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                return
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(10)
            try:
                request = _read_request(conn)
            except (OSError, ValueError):
                return
            with self._lock:
                number = len(self.requests)
                self.requests.append(request)
            with contextlib.suppress(OSError):
                self._scenario(conn, request, number)


def _read_request(conn: socket.socket) -> Request:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            raise ValueError("closed before the request's head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    request = Request(head, b"")
    length = int(request.header("content-length") or 0)
    while len(body) < length:
        chunk = conn.recv(65536)
        if not chunk:
            break
        body += chunk
    return Request(head, body)


def head(
    status: str = "200 OK",
    content_type: str = "text/event-stream",
    extra: Iterable[str] = (),
) -> bytes:
    """A response head for a body that ends when the connection closes."""
    lines = [f"HTTP/1.1 {status}", f"Content-Type: {content_type}", "Connection: close", *extra]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def event(json: str) -> bytes:
    return b"data: " + json.encode() + b"\n\n"


def normal_run(thread_id: str = "t", run_id: str = "r", text: str = "hello") -> bytes:
    """The SSE body of a run that answers ``text``."""
    return b"".join(
        (
            event(f'{{"type":"RUN_STARTED","threadId":"{thread_id}","runId":"{run_id}"}}'),
            event('{"type":"TEXT_MESSAGE_START","messageId":"m1","role":"assistant"}'),
            event(f'{{"type":"TEXT_MESSAGE_CONTENT","messageId":"m1","delta":"{text}"}}'),
            event('{"type":"TEXT_MESSAGE_END","messageId":"m1"}'),
            event(f'{{"type":"RUN_FINISHED","threadId":"{thread_id}","runId":"{run_id}"}}'),
        )
    )


def reset(conn: socket.socket) -> None:
    """Close with a TCP reset (RST), not a clean FIN."""
    conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    conn.close()


@dataclass(frozen=True, slots=True)
class Bomb:
    """A compressed body that never ends: ``start`` (the prefix, compressed), then
    ``block`` again and again, each one inflating to 1 MiB of ``A`` (from about 1 KiB)."""

    start: bytes
    block: bytes

    def send(self, conn: socket.socket, server: HostileServer, megabytes: int = 1 << 20) -> int:
        """Send the start, then blocks until the client goes (or ``megabytes``);
        returns the MiB sent."""
        conn.sendall(self.start)
        sent = 0
        while sent < megabytes and not server.closed.is_set():
            conn.sendall(self.block)
            sent += 1
        return sent


def _bomb(wbits: int, prefix: bytes) -> Bomb:
    compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
    start = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    mebibyte = b"A" * (1024 * 1024)
    # After a full flush the compressor starts afresh: every block compresses alike.
    block = compressor.compress(mebibyte) + compressor.flush(zlib.Z_FULL_FLUSH)
    return Bomb(start, block)


def gzip_bomb(prefix: bytes) -> Bomb:
    """An endless gzip body: ``prefix``, then ``A`` forever."""
    return _bomb(zlib.MAX_WBITS | 16, prefix)


def deflate_bomb(prefix: bytes) -> Bomb:
    """The same as zlib-wrapped deflate."""
    return _bomb(zlib.MAX_WBITS, prefix)


def brotli_bomb(prefix: bytes, megabytes: int) -> bytes:
    """``prefix`` then ``megabytes`` MiB of ``A``, brotli-compressed (about 190 bytes per
    MiB at quality 1). Needs the ``brotli`` package."""
    import brotli  # type: ignore[import-untyped,unused-ignore]

    compressor = brotli.Compressor(quality=1)
    mebibyte = b"A" * (1024 * 1024)
    parts = [compressor.process(prefix)]
    parts.extend(compressor.process(mebibyte) for _ in range(megabytes))
    parts.append(compressor.finish())
    return b"".join(parts)


def trickle(conn: socket.socket, server: HostileServer, data: bytes, every: float) -> None:
    """Send ``data`` again every ``every`` seconds until the client or server goes."""
    while not server.closed.is_set():
        conn.sendall(data)
        time.sleep(every)
