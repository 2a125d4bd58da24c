"""Shared fixtures: every async test runs on asyncio and on trio; Hypothesis profiles."""

from __future__ import annotations

import os
import sys
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
