"""Shared fixtures: every async test runs on asyncio and on trio; Hypothesis profiles;
no SQLite connection left open."""

from __future__ import annotations

import functools
import gc
import os
import sqlite3
import sys
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, settings

# The PostgreSQL helper sits with the store tests (importlib mode puts no test dir on
# sys.path).
sys.path.insert(0, str(Path(__file__).parent / "store"))
if TYPE_CHECKING:
    from _pg_cluster import PostgresServer

settings.register_profile(
    "ci",
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile("dev", max_examples=100, deadline=None, print_blob=True)
settings.register_profile(
    "deep", max_examples=2000, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param("trio", id="trio"),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Run every ``@pytest.mark.anyio`` test on both backends."""
    return str(request.param)


@pytest.fixture(autouse=True)
def no_blocking_calls(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail an async test that blocks the event loop (anyio's conftest habit)."""
    if "anyio_backend" not in request.fixturenames:
        yield
        return
    from blockbuster import blockbuster_ctx

    with blockbuster_ctx(scanned_modules=["toolrelay"]):
        yield


class _WatchedConnection(sqlite3.Connection):
    """A connection that notes it was collected without being closed: Python 3.13 warns
    of such a connection (``ResourceWarning``) in whatever test runs when it is
    collected, older Pythons close it silently. Every connection the tests and the
    store open in this process is one (``sqlite3.connect`` makes them)."""

    open_now: weakref.WeakSet[_WatchedConnection] = weakref.WeakSet()
    leaked: list[str] = []

    def __init__(self, database: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        super().__init__(database, *args, **kwargs)  # type: ignore[arg-type]
        self.database = os.fspath(database)
        self.closed = False
        _WatchedConnection.open_now.add(self)

    def close(self) -> None:
        self.closed = True
        _WatchedConnection.open_now.discard(self)
        super().close()

    def __del__(self) -> None:
        if not self.closed:
            _WatchedConnection.leaked.append(self.database)
            self.close()


sqlite3.connect = functools.partial(sqlite3.connect, factory=_WatchedConnection)  # type: ignore[assignment]


@pytest.fixture(autouse=True)
def sqlite_connections_closed() -> Iterator[None]:
    """Fail a test that leaves a SQLite connection open (a store it opened and did not
    close, or one of its own): on Python 3.13 it would fail a later test instead."""
    yield
    if _WatchedConnection.open_now:
        gc.collect()  # one that only a reference cycle holds is collected, and noted
    leaked, _WatchedConnection.leaked[:] = list(_WatchedConnection.leaked), []
    if leaked:
        pytest.fail(f"SQLite connections left open: {leaked}")


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real, throwaway PostgreSQL server for this test session (``initdb`` and
    ``pg_ctl`` on a loopback port); the tests that use it skip, saying why, where
    PostgreSQL cannot be had (CI installs it, so it never skips there)."""
    from _pg_cluster import running_postgres

    with running_postgres() as server:
        yield server


@pytest.fixture
def postgres_dsn(postgres_server: PostgresServer) -> str:
    """A fresh, empty database on the session's PostgreSQL server."""
    return postgres_server.create_database()
