"""RunRegistry: which run owns each thread (promise 5: stale work never wins)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from anyio.streams.memory import MemoryObjectReceiveStream

from toolrelay import (
    ClosedError,
    RegistryChange,
    RunHandle,
    RunRegistered,
    RunRegistry,
    RunReplaced,
    RunUnregistered,
)
from toolrelay.backends._base import ThreadKey

# The shared helper sits next to this file (importlib mode puts no test dir on sys.path).
sys.path.insert(0, str(Path(__file__).parent))
from _streams import drain

A = ThreadKey("thread-a")
B = ThreadKey("thread-b")


def is_disposed(handle: RunHandle) -> bool:
    """``handle.disposed``, read through a call so that type checkers do not narrow it."""
    return handle.disposed


@pytest.fixture
def registry() -> Iterator[RunRegistry]:
    registry = RunRegistry()
    yield registry
    registry.close()


Subscribe = Callable[[RunRegistry], MemoryObjectReceiveStream[RegistryChange]]


@pytest.fixture
def subscribe() -> Iterator[Subscribe]:
    """``registry.subscribe()``, closed again at teardown."""
    streams: list[MemoryObjectReceiveStream[RegistryChange]] = []

    def _subscribe(registry: RunRegistry) -> MemoryObjectReceiveStream[RegistryChange]:
        stream = registry.subscribe()
        streams.append(stream)
        return stream

    yield _subscribe
    for stream in streams:
        stream.close()


class TestRunRegistry:
    def test_register_run_emits_run_started_and_disposes_the_previous_handle(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        events = subscribe(registry)
        first = RunHandle(A, "run-1")
        second = RunHandle(A, "run-2")

        registry.register_run(first)
        assert registry.get_handle(A) is first
        assert not is_disposed(first)

        registry.register_run(second)
        assert registry.get_handle(A) is second
        assert first.disposed
        assert not second.disposed
        assert drain(events) == [RunRegistered(A, "run-1"), RunRegistered(A, "run-2")]

    def test_register_run_disposes_the_previous_handle_after_registering_the_new_one(
        self, registry: RunRegistry
    ) -> None:
        first = RunHandle(A, "run-1")
        second = RunHandle(A, "run-2")
        seen: list[RunHandle | None] = []
        first.on_dispose(lambda: seen.append(registry.get_handle(A)))
        registry.register_run(first)
        registry.register_run(second)
        assert seen == [second]

    def test_replace_run_swaps_the_handle_and_emits_run_continued(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        old = RunHandle(A, "run-1")
        new = RunHandle(A, "run-2", depth=1)
        registry.register_run(old)
        events = subscribe(registry)

        assert registry.replace_run(old, new) is True

        assert registry.get_handle(A) is new
        assert registry.is_registered(new)
        assert not registry.is_registered(old)
        assert old.disposed
        assert not new.disposed
        # A continuation is not a new user run: RunReplaced, never RunRegistered.
        assert drain(events) == [RunReplaced(A, "run-2", previous_run_id="run-1")]

    def test_replace_run_with_a_stale_handle_returns_false_and_changes_nothing(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        stale = RunHandle(A, "run-1")
        current = RunHandle(A, "run-2")
        registry.register_run(stale)
        registry.register_run(current)  # the user re-sent: run-1 is stale
        events = subscribe(registry)
        continuation = RunHandle(A, "run-3", depth=1)

        assert registry.replace_run(stale, continuation) is False

        assert registry.get_handle(A) is current
        assert len(registry) == 1
        assert not current.disposed
        assert not continuation.disposed  # the caller disposes it, not the registry
        assert drain(events) == []

    def test_replace_run_of_an_unregistered_thread_returns_false(
        self, registry: RunRegistry
    ) -> None:
        assert registry.replace_run(RunHandle(A, "run-1"), RunHandle(A, "run-2")) is False
        assert registry.get_handle(A) is None

    def test_replace_run_registers_the_new_handle_before_disposing_the_old_one(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        events = subscribe(registry)
        old = RunHandle(A, "run-1")
        new = RunHandle(A, "run-2")
        registry.register_run(old)
        drain(events)
        seen: list[tuple[RunHandle | None, list[RegistryChange]]] = []
        old.on_dispose(lambda: seen.append((registry.get_handle(A), drain(events))))

        assert registry.replace_run(old, new)

        # When the old handle's dispose callback runs, the new handle already owns the
        # thread and RunReplaced was already emitted.
        assert seen == [(new, [RunReplaced(A, "run-2", "run-1")])]

    def test_replace_run_logs_dispose_errors_and_keeps_the_swap(
        self, registry: RunRegistry, caplog: pytest.LogCaptureFixture
    ) -> None:
        old = RunHandle(A, "run-1")
        new = RunHandle(A, "run-2")
        registry.register_run(old)
        later: list[str] = []

        def broken() -> None:
            raise RuntimeError("dispose exploded")

        old.on_dispose(broken)
        old.on_dispose(lambda: later.append("ran"))

        with caplog.at_level(logging.WARNING, logger="toolrelay.runtime"):
            assert registry.replace_run(old, new) is True

        assert registry.get_handle(A) is new
        assert old.disposed
        assert later == ["ran"]  # one failing callback does not stop the others
        [record] = [r for r in caplog.records if r.name == "toolrelay.runtime"]
        assert record.levelno == logging.WARNING
        assert "run-1" in record.getMessage()
        assert record.exc_info is not None
        assert isinstance(record.exc_info[1], RuntimeError)

    def test_register_run_logs_dispose_errors_of_the_previous_handle(
        self, registry: RunRegistry, caplog: pytest.LogCaptureFixture
    ) -> None:
        old = RunHandle(A, "run-1")

        def broken() -> None:
            raise RuntimeError("dispose exploded")

        old.on_dispose(broken)
        registry.register_run(old)
        new = RunHandle(A, "run-2")
        with caplog.at_level(logging.WARNING, logger="toolrelay.runtime"):
            registry.register_run(new)
        assert registry.get_handle(A) is new
        assert old.disposed
        [record] = [r for r in caplog.records if r.name == "toolrelay.runtime"]
        assert record.exc_info is not None
        assert str(record.exc_info[1]) == "dispose exploded"

    def test_replace_run_with_itself_is_refused_and_changes_nothing(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        handle = RunHandle(A, "run-1")
        registry.register_run(handle)
        events = subscribe(registry)

        with pytest.raises(ValueError, match="itself"):
            registry.replace_run(handle, handle)

        # The swap would have left a disposed handle registered (its stream cancelled
        # while it still owns the thread): refused, nothing happened.
        assert registry.get_handle(A) is handle
        assert registry.is_registered(handle)
        assert not is_disposed(handle)
        assert drain(events) == []

    def test_replace_run_with_itself_is_refused_for_an_unregistered_handle_too(
        self, registry: RunRegistry
    ) -> None:
        handle = RunHandle(A, "run-1")
        with pytest.raises(ValueError, match="itself"):
            registry.replace_run(handle, handle)
        assert registry.get_handle(A) is None
        assert not is_disposed(handle)

    def test_replace_run_across_threads_is_refused(self, registry: RunRegistry) -> None:
        old = RunHandle(A, "run-1")
        registry.register_run(old)
        with pytest.raises(ValueError, match="different|cannot replace"):
            registry.replace_run(old, RunHandle(B, "run-2"))
        assert registry.get_handle(A) is old
        assert registry.get_handle(B) is None
        assert not old.disposed

    def test_complete_run_unregisters_disposes_and_emits_run_completed(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        handle = RunHandle(A, "run-1")
        registry.register_run(handle)
        events = subscribe(registry)

        assert registry.complete_run(handle, "failed") is True

        assert registry.get_handle(A) is None
        assert len(registry) == 0
        assert handle.disposed
        assert drain(events) == [RunUnregistered(A, "run-1", "failed")]

    def test_complete_run_of_a_stale_handle_changes_nothing(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        stale = RunHandle(A, "run-1")
        current = RunHandle(A, "run-2")
        registry.register_run(stale)
        registry.register_run(current)
        events = subscribe(registry)

        assert registry.complete_run(stale) is False

        assert registry.get_handle(A) is current
        assert not current.disposed
        assert drain(events) == []

    def test_every_subscriber_gets_every_event(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        streams = [subscribe(registry) for _ in range(3)]
        old = RunHandle(A, "run-1")
        new = RunHandle(A, "run-2")
        registry.register_run(old)
        registry.replace_run(old, new)
        registry.complete_run(new)
        expected: list[RegistryChange] = [
            RunRegistered(A, "run-1"),
            RunReplaced(A, "run-2", "run-1"),
            RunUnregistered(A, "run-2", "completed"),
        ]
        for stream in streams:
            assert drain(stream) == expected

    def test_a_closed_subscription_is_dropped_and_does_not_disturb_the_others(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        gone = subscribe(registry)
        kept = subscribe(registry)
        gone.close()
        registry.register_run(RunHandle(A, "run-1"))
        assert drain(kept) == [RunRegistered(A, "run-1")]

    def test_a_full_subscriber_loses_events_and_they_are_counted(
        self, subscribe: Subscribe
    ) -> None:
        registry = RunRegistry(subscriber_buffer=1)
        slow = subscribe(registry)
        registry.register_run(RunHandle(A, "run-1"))
        registry.register_run(RunHandle(B, "run-2"))
        registry.close()
        assert drain(slow) == [RunRegistered(A, "run-1")]
        assert registry.dropped_events == 1

    def test_a_closed_registry_refuses_every_change(self, registry: RunRegistry) -> None:
        handle = RunHandle(A, "run-1")
        registry.register_run(handle)
        events = registry.subscribe()
        registry.close()
        events.close()

        assert registry.closed
        assert handle.disposed  # close disposes every handle
        with pytest.raises(ClosedError):
            registry.register_run(RunHandle(A, "run-2"))
        with pytest.raises(ClosedError):
            registry.replace_run(handle, RunHandle(A, "run-3"))
        with pytest.raises(ClosedError):
            registry.replace_run(handle, handle)
        with pytest.raises(ClosedError):
            registry.complete_run(handle)
        with pytest.raises(ClosedError):
            registry.subscribe()
        registry.close()  # idempotent
        assert len(registry) == 0

    def test_a_closed_registry_holds_nothing(self, registry: RunRegistry) -> None:
        a = RunHandle(A, "run-a")
        b = RunHandle(B, "run-b")
        registry.register_run(a)
        registry.register_run(b)

        registry.close()

        # Reading a closed registry answers for what it holds: nothing (close disposed
        # every handle). It never raises, so the engine's staleness check sees a run
        # that no longer owns its thread.
        assert len(registry) == 0
        assert list(registry) == []
        assert not registry.is_registered(a)
        assert not registry.is_registered(b)
        assert registry.get_handle(A) is None
        assert registry.get_handle(B) is None

    def test_a_dispose_callback_run_by_close_sees_the_closed_empty_registry(
        self, registry: RunRegistry, caplog: pytest.LogCaptureFixture
    ) -> None:
        handle = RunHandle(A, "run-1")
        seen: list[tuple[bool, RunHandle | None, bool, int]] = []
        handle.on_dispose(
            lambda: seen.append(
                (
                    registry.closed,
                    registry.get_handle(A),
                    registry.is_registered(handle),
                    len(registry),
                )
            )
        )
        registry.register_run(handle)

        with caplog.at_level(logging.WARNING, logger="toolrelay.runtime"):
            registry.close()

        assert seen == [(True, None, False, 0)]
        assert [r for r in caplog.records if r.name == "toolrelay.runtime"] == []

    def test_different_threads_are_independent(
        self, registry: RunRegistry, subscribe: Subscribe
    ) -> None:
        events = subscribe(registry)
        a1 = RunHandle(A, "a-1")
        b1 = RunHandle(B, "b-1")
        registry.register_run(a1)
        registry.register_run(b1)
        assert len(registry) == 2

        a2 = RunHandle(A, "a-2")
        assert registry.replace_run(a1, a2)
        assert registry.get_handle(B) is b1
        assert not b1.disposed

        registry.register_run(RunHandle(B, "b-new"))
        assert registry.get_handle(A) is a2
        assert not a2.disposed

        assert registry.complete_run(a2)
        assert registry.get_handle(B) is not None
        assert {h.run_id for h in registry} == {"b-new"}
        assert [type(e).__name__ for e in drain(events)] == [
            "RunRegistered",
            "RunRegistered",
            "RunReplaced",
            "RunRegistered",
            "RunUnregistered",
        ]


class TestRunHandle:
    def test_dispose_is_idempotent_and_runs_each_callback_once(self) -> None:
        handle = RunHandle(A, "run-1")
        calls: list[int] = []
        handle.on_dispose(lambda: calls.append(1))
        handle.dispose()
        handle.dispose()
        assert calls == [1]

    def test_on_dispose_after_dispose_runs_at_once(self) -> None:
        handle = RunHandle(A, "run-1")
        handle.dispose()
        calls: list[int] = []
        handle.on_dispose(lambda: calls.append(1))
        assert calls == [1]

    def test_dispose_runs_every_callback_then_raises_the_first_error(self) -> None:
        handle = RunHandle(A, "run-1")
        calls: list[str] = []

        def first() -> None:
            calls.append("first")
            raise RuntimeError("first")

        def second() -> None:
            calls.append("second")
            raise KeyError("second")

        handle.on_dispose(first)
        handle.on_dispose(second)
        with pytest.raises(RuntimeError, match="first"):
            handle.dispose()
        assert calls == ["first", "second"]
        assert handle.disposed

    def test_dispose_runs_callbacks_in_the_order_they_were_added(self) -> None:
        handle = RunHandle(A, "run-1")
        calls: list[int] = []
        for n in range(4):
            handle.on_dispose(lambda n=n: calls.append(n))  # type: ignore[misc]
        handle.dispose()
        handle.dispose()  # idempotent: none runs twice
        assert calls == [0, 1, 2, 3]

    def test_handles_compare_by_identity(self) -> None:
        assert RunHandle(A, "run-1") != RunHandle(A, "run-1")
