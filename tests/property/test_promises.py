"""The stateful property suite of the eight promises, on asyncio and on trio, and proof
that it can fail."""

from __future__ import annotations

import re
from collections.abc import Callable

import anyio
import pytest
from hypothesis import HealthCheck, settings

from toolrelay import Engine, RunStatus, StateChanged, ToolRegistry, TurnSnapshot
from toolrelay._runtime._driver import TurnDriver
from toolrelay.testing import Hang, ScriptedAgent, text
from toolrelay.testing.stateful import PromisesMachine, run_promises

# Modest programs: the loaded profile decides how many (ci: 60, dev: 100, deep: 2000).
_SETTINGS = settings(
    stateful_step_count=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


class AsyncioPromises(PromisesMachine):
    backend = "asyncio"


class TrioPromises(PromisesMachine):
    backend = "trio"


TestAsyncioPromises = AsyncioPromises.TestCase
TestAsyncioPromises.settings = _SETTINGS
TestTrioPromises = TrioPromises.TestCase
TestTrioPromises.settings = _SETTINGS


async def lookup(city: str, days: int = 1) -> dict[str, object]:
    """A user's tool: the machine draws its arguments from the schema."""
    return {"city": city, "days": days}


def blocking_lookup(city: str) -> str:
    """A user's blocking tool (runs in a worker thread)."""
    return city.upper()


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_run_promises_against_user_tools(backend: str) -> None:
    run_promises(
        examples=15,
        seed=1,
        backend=backend,
        tools=ToolRegistry.of(lookup, blocking_lookup),
        max_depth=2,
        steps=15,
    )


def test_user_tools_must_not_take_probe_names() -> None:
    async def probe_ok(ticket: str) -> str:
        return ticket

    with pytest.raises(ValueError, match="probe_"):
        run_promises(examples=1, tools=ToolRegistry.of(probe_ok))


def _steal_focus(monkeypatch: pytest.MonkeyPatch) -> str:
    start_turn = Engine.start_turn

    def stealing(self: Engine, key: object, *args: object, **kwargs: object) -> object:
        turn = start_turn(self, key, *args, **kwargs)  # type: ignore[arg-type]
        self._observers.focused = turn.key  # a background turn takes the focus
        return turn

    monkeypatch.setattr(Engine, "start_turn", stealing)
    return "promise 6"


def _leave_turns_running(monkeypatch: pytest.MonkeyPatch) -> str:
    async def never_ends(self: TurnDriver) -> None:
        await anyio.sleep_forever()  # the turn is left running, nothing ever happens

    monkeypatch.setattr(TurnDriver, "_first", never_ends)
    return "promises 1/4"


@pytest.mark.parametrize(
    "breakage", [_steal_focus, _leave_turns_running], ids=["steals-focus", "leaves-turns-running"]
)
def test_the_suite_fails_on_a_broken_engine(
    monkeypatch: pytest.MonkeyPatch, breakage: Callable[[pytest.MonkeyPatch], str]
) -> None:
    promise = breakage(monkeypatch)
    with pytest.raises(AssertionError) as info:
        run_promises(examples=50, seed=0, steps=8)
    assert promise in str(info.value)
    notes = "\n".join(getattr(info.value, "__notes__", []))
    blob = re.search(r"@reproduce_failure\('[^']+', b'([^']+)'\)", notes)
    assert blob is not None, notes
    # The blob replays the very failure (what `toolrelay verify` prints).
    with pytest.raises(AssertionError, match=re.escape(promise)):
        run_promises(examples=50, steps=8, reproduce=blob.group(1))


def test_a_derandomized_run_passes() -> None:
    run_promises(examples=5, derandomize=True, steps=6)


@pytest.mark.anyio
async def test_a_superseded_turn_does_not_notify_after_the_newer_one() -> None:
    # Found by the suite: the superseded turn's task re-published "superseded" when it
    # ended, after the newer turn's "idle", so the thread flashed an older turn's end.
    agent = ScriptedAgent([Hang()], [text("hi")])
    async with Engine(agent) as engine:
        with engine.subscribe(key="t0") as view:
            first = engine.start_turn("t0", "one")
            async for notification in view:
                if isinstance(notification, StateChanged) and notification.snapshot.is_running:
                    break
            second = engine.start_turn("t0", "two")
            await first.wait_finished()
            await second.wait_finished()
            shown: list[TurnSnapshot] = []
            while True:
                try:
                    notification = view.receive_nowait()
                except anyio.WouldBlock:
                    break
                if isinstance(notification, StateChanged):
                    shown.append(notification.snapshot)
    assert first.status is RunStatus.superseded and second.status is RunStatus.completed
    after = shown[[s.status for s in shown].index(RunStatus.idle) :]
    assert all(s.run_id != first.run_id for s in after), shown
