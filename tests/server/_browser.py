"""A real browser for the inspector tests: Debian's ``chromium``, driven headless
through Playwright's Python API (the system browser: Playwright's own downloads are
not used), and an :class:`AguiServer` served on loopback from a thread of its own.

Where chromium or Playwright is missing the tests skip, saying why; in CI (``CI``
set) they fail instead: ``.ci/run`` installs both, so their absence there is a broken
setup, not a reason to run less.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, NoReturn

import anyio
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from _serving import serving

#: Where to look for the browser, after ``$TOOLRELAY_CHROMIUM``.
CHROMIUM_NAMES = ("chromium", "chromium-browser")


def unavailable(reason: str) -> NoReturn:
    """Skip, saying why; in CI, fail."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the browser tests: {reason}")
    pytest.skip(reason)


def chromium_path() -> str:
    """The system chromium's path (skips, or fails in CI, when there is none)."""
    given = os.environ.get("TOOLRELAY_CHROMIUM")
    if given:
        return given
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    unavailable("chromium is not installed (apt-get install chromium; .ci/run installs it)")


class ServerThread:
    """``make_app()`` served on 127.0.0.1 in a thread running its own event loop
    (asyncio: uvicorn; trio: hypercorn), so a synchronous Playwright test drives a
    browser against it."""

    def __init__(self, make_app: Callable[[], Any], backend: str = "asyncio") -> None:
        self._make_app = make_app
        self.backend = backend
        self._ready = threading.Event()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.url = ""
        self.app: Any = None
        self._thread = threading.Thread(target=self._run, name="inspector-server", daemon=True)

    def _run(self) -> None:
        try:
            anyio.run(self._main, backend=self.backend)
        except BaseException as exc:  # reported to the test in __enter__/__exit__
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.app = self._make_app()
        async with serving(self.app) as url:
            self.url = url
            self._ready.set()
            await anyio.to_thread.run_sync(self._stop.wait)

    def __enter__(self) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(30) or self._error is not None:
            raise RuntimeError(f"the server did not start: {self._error!r}")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        self._thread.join(30)
        if self._error is not None and exc is None:
            raise self._error
