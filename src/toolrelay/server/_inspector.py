"""The inspector: a page that shows a thread's turns and the machines, live.

Theory of operation
-------------------
The page (``static/``: HTML, CSS, JavaScript and the two machine diagrams as SVG)
ships in the package and is served as it is: no build step, nothing fetched from
anywhere else. It holds no data, so its files are served without authentication;
everything it shows comes from routes that authenticate like the rest of the server:

==========================================  ==========================================
``GET /inspect``, ``GET /inspect/<file>``   the page and its files (no data)
``GET /threads``                            the principal's threads (JSON)
``GET /threads/{thread}/calls``             the outcome of each finished tool call
                                            of the thread (JSON: AG-UI's
                                            ``TOOL_CALL_RESULT`` does not say failed)
``GET /threads/{thread}/events?after=N``    the catch-up stream the page reads
==========================================  ==========================================

How the page authenticates: it asks for the token once, keeps it in the tab's
``sessionStorage`` and sends it as ``Authorization: Bearer`` with ``fetch`` (the
SSE stream is read from the ``fetch`` body, since ``EventSource`` cannot send a
header). The token is never in a URL (so never in an access log or the history),
never in a cookie (so no request the browser sends by itself carries it: no CSRF on
``POST /`` or cancel), and it goes when the tab closes. Every file is sent with a
strict Content-Security-Policy (``'self'`` only, no inline script), so no script
from elsewhere runs next to the token.

The diagrams are Graphviz's drawing of the DOT text ``toolrelay.diagrams`` prints
from the machine classes (the same source as ``diagrams/``), generated at release
time; ``tests/server/test_inspector.py`` fails when their states or transitions
drift from the machines. The page reads each transition from the SVG (its edges'
titles and labels), so which state an AG-UI event leads to is the diagram's answer,
not a second table.
"""

from __future__ import annotations

import importlib.resources
from collections.abc import Mapping
from typing import Any, Final

from toolrelay._core import ThreadKey
from toolrelay.server._base import READ_BYTES
from toolrelay.store import Entry, Store, ThreadInfo, ToolFinished, ToolsStarted

__all__ = (
    "CONTENT_SECURITY_POLICY",
    "MAX_LISTED_THREADS",
    "MAX_SCANNED_RECORDS",
    "STATIC_FILES",
    "call_outcomes",
    "static_file",
    "static_headers",
    "thread_list",
)

#: The page's files, by name under ``/inspect/``, with their content types.
STATIC_FILES: Final[Mapping[str, str]] = {
    "index.html": "text/html; charset=utf-8",
    "inspector.css": "text/css; charset=utf-8",
    "inspector.js": "text/javascript; charset=utf-8",
    "run_lifecycle.svg": "image/svg+xml",
    "tool_call.svg": "image/svg+xml",
}

#: Only the server's own files; no inline script, no framing, no form posts.
CONTENT_SECURITY_POLICY: Final = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)

#: Threads ``GET /threads`` lists at most (the most recently updated first).
MAX_LISTED_THREADS: Final = 500
#: Records ``GET /threads/{thread}/calls`` reads at most (the thread's last ones).
MAX_SCANNED_RECORDS: Final = 5000


def _load() -> dict[str, bytes]:
    folder = importlib.resources.files("toolrelay.server").joinpath("static")
    return {name: folder.joinpath(name).read_bytes() for name in STATIC_FILES}


# Read once, at import (about 70 kB): serving them never touches the disk, so never
# blocks the event loop.
_FILES: Final = _load()


def static_file(name: str) -> bytes | None:
    """The bytes of one of the page's files, or ``None`` for a name it does not have."""
    return _FILES.get(name)


def static_headers(name: str) -> list[tuple[bytes, bytes]]:
    """The headers a page file is sent with (its type, the CSP, no sniffing, no
    referrer)."""
    return [
        (b"content-type", STATIC_FILES[name].encode()),
        (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"referrer-policy", b"no-referrer"),
        (b"cache-control", b"no-cache"),
    ]


def _thread_json(info: ThreadInfo) -> dict[str, Any]:
    return {
        "threadId": info.key.thread_id,
        "lastSeq": info.last_seq,
        "live": info.live_turn is not None,
        "liveTurn": info.live_turn,
        "createdAt": info.created_at,
        "updatedAt": info.updated_at,
    }


async def thread_list(store: Store, principal: str) -> dict[str, Any]:
    """``GET /threads``: the threads ``principal`` owns, the most recently updated
    first, at most :data:`MAX_LISTED_THREADS` (``truncated`` says when there were
    more).

    Raises:
        StoreError: The store could not be read.
    """
    owned = await store.threads(owner=principal)
    owned.sort(key=lambda info: info.updated_at, reverse=True)
    return {
        "threads": [_thread_json(info) for info in owned[:MAX_LISTED_THREADS]],
        "truncated": len(owned) > MAX_LISTED_THREADS,
    }


async def call_outcomes(store: Store, key: ThreadKey, last_seq: int) -> dict[str, Any]:
    """``GET /threads/{thread}/calls``: each finished tool call of the thread's last
    :data:`MAX_SCANNED_RECORDS` records, with its name and outcome (``ok`` or
    ``error`` and the error's text).

    Raises:
        StoreError: The store could not be read.
    """
    first = max(0, last_seq - MAX_SCANNED_RECORDS)
    names: dict[str, str] = {}
    calls: dict[str, dict[str, Any]] = {}
    after = first
    while after < last_seq:
        entries: list[Entry] = await store.read(key, after=after, limit=1000, max_bytes=READ_BYTES)
        if not entries:
            break
        for entry in entries:
            record = entry.record
            if isinstance(record, ToolsStarted):
                for call in record.calls:
                    names[call.id] = call.name
            elif isinstance(record, ToolFinished):
                result = record.result
                calls[record.call_id] = {
                    "name": names.get(record.call_id),
                    "outcome": "ok" if result.error is None else "error",
                    "error": result.error,
                    "seq": entry.seq,
                }
        after = entries[-1].seq
    return {"threadId": key.thread_id, "calls": calls, "scannedFrom": first}
