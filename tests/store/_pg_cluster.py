"""A real, throwaway PostgreSQL server for the store tests (``postgres_server`` in
the suite's conftest starts one per session).

Debian's ``postgresql`` package provides ``initdb`` and ``pg_ctl`` (under
``/usr/lib/postgresql/<version>/bin``; ``.ci/run`` installs it). The cluster lives in
a temporary directory and listens on a free loopback port; as root, it runs as the
``postgres`` system user (``initdb`` refuses root). Where no PostgreSQL can be had,
the tests that need it skip, saying why.
"""

from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import pytest


def _bindir() -> Path | None:
    """Where ``initdb`` and ``pg_ctl`` are: ``pg_config --bindir``, else the newest
    of Debian's versioned directories."""
    candidates: list[Path] = []
    pg_config = shutil.which("pg_config")
    if pg_config:
        done = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        if done.returncode == 0:
            candidates.append(Path(done.stdout.strip()))
    versions = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"),
        key=lambda p: int(Path(p).parent.name) if Path(p).parent.name.isdigit() else 0,
        reverse=True,
    )
    candidates += [Path(p) for p in versions]
    for directory in candidates:
        if (directory / "initdb").exists() and (directory / "pg_ctl").exists():
            return directory
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    """A running throwaway cluster: trust authentication on loopback, user ``postgres``."""

    bindir: Path
    directory: Path
    port: int
    run_as: str | None

    @property
    def data(self) -> Path:
        return self.directory / "data"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def _command(self, *argv: str) -> list[str]:
        return ["runuser", "-u", self.run_as, "--", *argv] if self.run_as else list(argv)

    def pg_ctl(self, *argv: str) -> None:
        done = subprocess.run(
            self._command(str(self.bindir / "pg_ctl"), "-D", str(self.data), *argv),
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            log = (self.directory / "log").read_text(errors="replace")[-2000:]
            raise RuntimeError(f"pg_ctl {argv} failed: {done.stderr}\n{log}")

    def start(self) -> None:
        options = (
            f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1 "
            "-c fsync=off -c full_page_writes=off -c max_connections=300"
        )
        self.pg_ctl("-o", options, "-l", str(self.directory / "log"), "-w", "-t", "60", "start")

    def restart(self) -> None:
        """``pg_ctl restart``: every connection is ended, committed data stays."""
        # -l again: without it the new server would write to (and hold open) our pipes.
        self.pg_ctl("-m", "fast", "-l", str(self.directory / "log"), "-w", "-t", "60", "restart")

    def stop(self) -> None:
        self.pg_ctl("-m", "immediate", "-w", "stop")

    def create_database(self) -> str:
        """A fresh, empty database; its DSN."""
        import psycopg

        name = f"db_{secrets.token_hex(6)}"
        with psycopg.connect(self.dsn(), autocommit=True) as connection:
            connection.execute(f"CREATE DATABASE {name}")
        return self.dsn(name)


def _unavailable(reason: str) -> NoReturn:
    """Skip, saying why; in CI (``CI`` set), fail: CI installs PostgreSQL, so its
    absence there is a broken setup, not a reason to run less."""
    if os.environ.get("CI"):
        pytest.fail(f"CI must run the PostgreSQL tests: {reason}")
    pytest.skip(reason)


@contextmanager
def running_postgres() -> Iterator[PostgresServer]:
    """Start a throwaway server, yield it, stop it and remove its files; skip (the
    test) saying why where no PostgreSQL can be had."""
    try:
        import psycopg  # noqa: F401
    except ImportError:
        _unavailable("psycopg is not installed: pip install -e '.[test]' (the postgres extra)")
    bindir = _bindir()
    if bindir is None:
        _unavailable(
            "PostgreSQL is not installed (no initdb/pg_ctl; on Debian: "
            "apt-get install postgresql): the PostgreSQL store tests did not run"
        )
    run_as: str | None = None
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            _unavailable("running as root and there is no 'postgres' user to run initdb as")
        run_as = "postgres"
    directory = Path(tempfile.mkdtemp(prefix="toolrelay-pg-"))
    if run_as:
        shutil.chown(directory, run_as)
    server = PostgresServer(bindir, directory, _free_port(), run_as)
    try:
        subprocess.run(
            server._command(
                str(bindir / "initdb"),
                "-D",
                str(server.data),
                "-A",
                "trust",
                "-U",
                "postgres",
                "-E",
                "UTF8",
                "--no-sync",
            ),
            check=True,
            capture_output=True,
            timeout=120,
        )
        server.start()
        yield server
    finally:
        if (server.data / "postmaster.pid").exists():
            server.stop()
        shutil.rmtree(directory, ignore_errors=True)
