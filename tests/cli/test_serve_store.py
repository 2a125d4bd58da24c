"""``toolrelay serve --store`` and ``--workers``: what is refused before anything starts,
and a PostgreSQL URI's password kept out of every line printed."""

from __future__ import annotations

import io

import pytest

from toolrelay.cli import ExitCode, build_parser, main
from toolrelay.cli._serve import _worker_argv, open_store
from toolrelay.store import MemoryStore, SQLiteStore


def _serve(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["serve", "--port", "0", *argv], stdout=out, stderr=err)
    return code, out.getvalue(), err.getvalue()


def test_a_postgresql_uri_opens_a_postgres_store_whose_repr_hides_the_password() -> None:
    pytest.importorskip("psycopg")
    from toolrelay.store import PostgresStore

    for uri in ("postgresql://app:s3cret@db.example:6543/chat", "postgres://app:s3cret@db/chat"):
        store = open_store(uri)
        assert isinstance(store, PostgresStore)
        assert "s3cret" not in repr(store)
    assert "db.example:6543/chat" in repr(
        open_store("postgresql://app:s3cret@db.example:6543/chat")
    )


def test_a_bad_postgresql_uri_is_refused_without_quoting_it() -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(ValueError, match="not a valid PostgreSQL URI") as caught:
        open_store("postgresql://app:s3cret@db/chat?sslmode=nonsense&bogus=1")
    assert "s3cret" not in str(caught.value)
    code, _, err = _serve("--store", "postgresql://app:s3cret@db/chat?bogus=1")
    assert code == ExitCode.USAGE and "s3cret" not in err


def test_other_stores_are_as_before() -> None:
    assert isinstance(open_store("memory:"), MemoryStore)
    assert isinstance(open_store("sqlite:///x.db"), SQLiteStore)
    with pytest.raises(ValueError, match="unknown store redis://") as caught:
        open_store("redis://user:pw@host/0")
    assert "pw" not in str(caught.value)


@pytest.mark.parametrize("store", ["served.db", "sqlite:///served.db", "memory:"])
def test_several_workers_on_a_store_they_cannot_share_are_refused(store: str) -> None:
    code, out, err = _serve("--store", store, "--workers", "2")
    assert code == ExitCode.USAGE
    assert "--workers 2 needs a store the processes share" in err
    assert "postgresql://" in err and out == ""


@pytest.mark.parametrize(
    ("flag", "value", "says"),
    [
        ("--workers", "0", "--workers must be at least 1"),
        ("--lease", "0", "--lease must be"),
        ("--pool-size", "0", "--pool-size must be at least 1"),
        ("--pool-size", "4", "--pool-size sizes a PostgreSQL store's pool"),
    ],
)
def test_bad_worker_settings_are_refused(flag: str, value: str, says: str) -> None:
    code, _, err = _serve("--store", "memory:", flag, value)
    assert code == ExitCode.USAGE and says in err


def test_the_pool_size_reaches_the_store_and_every_worker() -> None:
    pytest.importorskip("psycopg")
    uri = "postgresql://app@db.example/chat"
    assert getattr(open_store(uri, pool_size=16), "pool_size", None) == 16
    assert getattr(open_store(uri), "pool_size", None) == 8
    args = build_parser(io.StringIO()).parse_args(["serve", "--store", uri, "--pool-size", "16"])
    argv = _worker_argv(args, fd=3)
    assert argv[argv.index("--pool-size") + 1] == "16"
    args = build_parser(io.StringIO()).parse_args(["serve", "--store", uri])
    assert "--pool-size" not in _worker_argv(args, fd=3)
