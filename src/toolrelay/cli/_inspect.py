"""``toolrelay inspect``: a recorded AG-UI response in the inspector page, offline.

::

    toolrelay inspect capture.sse              # serves the page on 127.0.0.1, opens it
    toolrelay inspect capture.sse --no-browser --port 8765

The capture is read as ``toolrelay replay`` reads it (the same SSE parser, decoder
and processor, so the same violations, numbered by the same SSE event index), and
the inspector page that ``toolrelay serve`` ships at ``/inspect/`` shows it: the
turn, the machines lit at each event, the violations marked on the events where they
happened, stepped through event by event. The page is served by the standard
library's HTTP server on the loopback interface only; nothing is fetched from
anywhere, and a request whose ``Host`` is not the loopback address it listens on is
refused (a web page elsewhere cannot read the capture through DNS rebinding).
"""

from __future__ import annotations

import argparse
import http.server
import threading
import webbrowser
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO, TextIO

import httpx
import msgspec
from httpx_sse import EventSource

from toolrelay._core import Limits
from toolrelay.cli._exit import ExitCode
from toolrelay.cli._replay import Finding, capture_lines, replay_capture

__all__ = ("MAX_EVENTS", "capture_document", "make_server", "register", "run")

#: Events of a capture the page shows at most (the report covers them all).
MAX_EVENTS = 20_000


def _events(data: bytes, limits: Limits) -> tuple[list[dict[str, Any]], bool]:
    """The capture's SSE events with data, numbered as ``replay`` numbers them."""
    lines = capture_lines(data, limits, lambda finding: None)
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=lines)
    out: list[dict[str, Any]] = []
    index = 0
    for sse in EventSource(response).iter_sse():
        if not sse.data:
            continue
        index += 1
        if index > MAX_EVENTS:
            return out, True
        text = sse.data
        if len(text.encode()) > limits.max_event_bytes:
            text = text[: limits.max_event_bytes]  # reported as event_too_large
        out.append({"index": index, "line": lines.block_start, "id": sse.id or None, "data": text})
    return out, False


def capture_document(data: bytes, name: str, *, limits: Limits | None = None) -> dict[str, Any]:
    """What the page shows of a capture: its events, the replay's verdict and
    findings (``capture.json``)."""
    limits = limits if limits is not None else Limits()
    report = replay_capture(data, limits=limits)
    events, truncated = _events(data, limits)
    reason = report.reason

    def finding(f: Finding) -> dict[str, Any]:
        return {
            "index": f.index,
            "line": f.line,
            "code": f.code,
            "eventType": f.event_type,
            "message": f.message,
        }

    return {
        "name": name,
        "status": report.status.value,
        "reason": None if reason is None else f"{reason.kind.value}: {reason.message}",
        "events": events,
        "truncated": truncated,
        "findings": [finding(f) for f in report.findings],
        "omittedFindings": report.omitted,
    }


def make_server(document: bytes, port: int = 0) -> http.server.ThreadingHTTPServer:
    """An HTTP server on 127.0.0.1:``port`` (0: any free one) serving the page and
    ``document`` as its ``capture.json``; not started."""
    # The page's files live with the server; building the command line must not load it.
    from toolrelay.server._inspector import static_file, static_headers

    class Handler(http.server.BaseHTTPRequestHandler):
        server_version = "toolrelay-inspect"

        def log_message(self, format: str, *args: Any) -> None:
            pass  # a local page: no access log on the terminal

        def _send(self, status: int, body: bytes, headers: list[tuple[bytes, bytes]]) -> None:
            self.send_response(status)
            for name, value in headers:
                self.send_header(name.decode(), value.decode())
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            address = self.server.server_address
            port = address[1] if isinstance(address, tuple) else None
            allowed = {f"127.0.0.1:{port}", f"localhost:{port}"}
            if self.headers.get("Host", "") not in allowed:
                self._send(421, b"wrong host", [(b"content-type", b"text/plain")])
                return
            path = self.path.split("?", 1)[0]
            if path in ("/", "/inspect"):
                self._send(308, b"", [(b"location", b"/inspect/")])
            elif path == "/inspect/capture.json":
                self._send(
                    200,
                    document,
                    [*static_headers("index.html")[1:], (b"content-type", b"application/json")],
                )
            elif path.startswith("/inspect/") and (body := static_file(path[9:] or "index.html")):
                self._send(200, body, static_headers(path[9:] or "index.html"))
            else:
                self._send(404, b"not found", [(b"content-type", b"text/plain")])

    return http.server.ThreadingHTTPServer(("127.0.0.1", port), Handler)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add the ``inspect`` subcommand to ``subparsers``."""
    parser = subparsers.add_parser(
        "inspect",
        help="open a recorded AG-UI SSE response in the inspector page (offline)",
        description=(
            "Serve the inspector page on the loopback interface with a recorded AG-UI "
            "response (what `toolrelay replay` checks): step through its events with the "
            "machines lit and every violation marked where it happened."
        ),
    )
    parser.add_argument("file", type=Path, metavar="FILE", help="the capture (raw SSE bytes)")
    parser.add_argument("--port", type=int, default=0, help="the port (default: any free one)")
    parser.add_argument(
        "--no-browser", action="store_true", help="print the address, do not open a browser"
    )
    parser.set_defaults(func=run)


def run(
    args: argparse.Namespace,
    stdout: TextIO,
    stderr: TextIO,
    *,
    open_browser: Callable[[str], object] = webbrowser.open,
) -> int:
    """Run ``toolrelay inspect`` until Ctrl-C; returns an :class:`~toolrelay.cli.ExitCode`."""
    path: Path = args.file
    try:
        with path.open("rb") as capture:
            data = _read(capture)
    except OSError as exc:
        stderr.write(f"toolrelay inspect: cannot read {path}: {exc.strerror or exc}\n")
        return ExitCode.USAGE
    document = msgspec.json.encode(capture_document(data, path.name))
    try:
        server = make_server(document, args.port)
    except OSError as exc:
        stderr.write(f"toolrelay inspect: cannot listen on port {args.port}: {exc}\n")
        return ExitCode.USAGE
    url = f"http://127.0.0.1:{server.server_address[1]}/inspect/"
    stdout.write(f"toolrelay inspect: {path.name} at {url} (Ctrl-C stops)\n")
    stdout.flush()
    if not args.no_browser:
        threading.Thread(target=open_browser, args=(url,), daemon=True).start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return ExitCode.OK


#: The largest capture ``inspect`` reads (the page holds it whole).
MAX_CAPTURE_BYTES = 256 * 1024 * 1024


def _read(capture: BinaryIO) -> bytes:
    data = capture.read(MAX_CAPTURE_BYTES + 1)
    if len(data) > MAX_CAPTURE_BYTES:
        raise OSError(f"the capture is larger than {MAX_CAPTURE_BYTES} bytes")
    return data
