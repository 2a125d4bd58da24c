"""What the server measures, read off its log as records commit (reference 004's list).

Every metric comes from a committed record (see :class:`~toolrelay.server._watch.
WatchedStore`), so what ``/metrics`` says is what the log holds: a turn is counted
as completed when its ``TurnEnded`` is written, a tool's latency runs from its
batch's ``ToolsStarted`` to its ``ToolFinished``. Each record also goes to the
``toolrelay.server`` logger at debug level with the fields of 004's continuation
logs: ``thread``, ``turn``, ``round``, ``seq`` and ``next_seq``.

=========================================  =========  ===============================
metric                                     type       labels
=========================================  =========  ===============================
``toolrelay_turns_started_total``          counter
``toolrelay_turns_completed_total``        counter    ``status``, ``reason`` (the
                                                      stop reason or the reason kind)
``toolrelay_turn_rounds``                  histogram  tool rounds per ended turn
``toolrelay_tool_seconds``                 histogram  ``tool``, ``outcome``
                                                      (``ok``/``error``)
``toolrelay_store_write_seconds``          histogram  ``outcome`` (``ok``/``error``)
``toolrelay_live_turns``                   gauge
``toolrelay_claim_seconds``                histogram  ``outcome`` (``claimed``,
                                                      ``busy``, ``error``): shared
                                                      mode, a run's claim of its
                                                      thread
=========================================  =========  ===============================

Each server has its own registry (two servers in one process do not mix their
counts). Needs ``prometheus-client`` (the ``server`` extra); without it the server
measures nothing and ``/metrics`` answers 501.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from toolrelay._core import ThreadKey
from toolrelay.server._feed import SERVER_STOPS, StopReason
from toolrelay.store import Entry, ToolFinished, ToolsStarted, TurnEnded, TurnStarted

try:
    import prometheus_client
except ImportError:  # pragma: no cover - the server extra is missing
    prometheus_client = None  # type: ignore[assignment]

__all__ = ("Metrics",)

logger = logging.getLogger("toolrelay.server")

_ROUND_BUCKETS = (0, 1, 2, 3, 4, 5, 8, 10, 20, 50)
_CLAIM_BUCKETS = (
    *(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02, 0.05),
    *(0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)


@dataclass(slots=True)
class _LiveTurn:
    turn_id: str
    rounds: int = 0
    calls: dict[str, tuple[str, float]] = field(default_factory=dict)  # id -> name, start


class Metrics:
    """The server's Prometheus metrics and structured records (module docstring)."""

    def __init__(self) -> None:
        self._turns: dict[str, _LiveTurn] = {}  # live turns by id
        self.enabled: bool = prometheus_client is not None
        if not self.enabled:  # pragma: no cover - the server extra is missing
            return
        registry = self.registry = prometheus_client.CollectorRegistry(auto_describe=True)
        self.turns_started = prometheus_client.Counter(
            "toolrelay_turns_started", "Turns started on the server.", registry=registry
        )
        self.turns_completed = prometheus_client.Counter(
            "toolrelay_turns_completed",
            "Turns that ended, by final status and reason.",
            ["status", "reason"],
            registry=registry,
        )
        self.turn_rounds = prometheus_client.Histogram(
            "toolrelay_turn_rounds",
            "Tool rounds per turn.",
            buckets=_ROUND_BUCKETS,
            registry=registry,
        )
        self.tool_seconds = prometheus_client.Histogram(
            "toolrelay_tool_seconds",
            "Tool call latency, from its batch's start to its result.",
            ["tool", "outcome"],
            registry=registry,
        )
        self.store_write_seconds = prometheus_client.Histogram(
            "toolrelay_store_write_seconds",
            "Store append latency.",
            ["outcome"],
            registry=registry,
        )
        self.claim_seconds = prometheus_client.Histogram(
            "toolrelay_claim_seconds",
            "Latency of a run's claim of its thread (several processes on one store).",
            ["outcome"],
            buckets=_CLAIM_BUCKETS,
            registry=registry,
        )
        self.live_turns = prometheus_client.Gauge(
            "toolrelay_live_turns", "Turns started and not ended.", registry=registry
        )

    def render(self) -> tuple[bytes, str]:
        """The exposition text and its content type."""
        assert prometheus_client is not None
        return prometheus_client.generate_latest(
            self.registry
        ), prometheus_client.CONTENT_TYPE_LATEST

    def write(self, seconds: float, committed: bool) -> None:
        if self.enabled:
            self.store_write_seconds.labels("ok" if committed else "error").observe(seconds)

    def claim(self, seconds: float, outcome: str) -> None:
        """A run claimed its thread (``claimed``), found it held (``busy``), or the
        store failed (``error``)."""
        if self.enabled:
            self.claim_seconds.labels(outcome).observe(seconds)

    def live_at_start(self, turns: Sequence[tuple[ThreadKey, str]]) -> None:
        """These turns (thread, turn id) were live in the store when the server started."""
        for _key, turn_id in turns:
            self._turns[turn_id] = _LiveTurn(turn_id)
        if self.enabled:
            self.live_turns.set(len(self._turns))

    def _live(self, turn_id: str) -> _LiveTurn:
        """The live turn ``turn_id`` (counted live from its first record seen)."""
        turn = self._turns.get(turn_id)
        if turn is None:
            turn = self._turns[turn_id] = _LiveTurn(turn_id)
            if self.enabled:
                self.live_turns.inc()
        return turn

    def commit(self, key: ThreadKey, entry: Entry) -> None:
        """One record committed (the :class:`WatchedStore` hook). Turns are told apart
        by id: a turn superseded on a thread may end after the next one started."""
        record = entry.record
        now = time.perf_counter()
        fields: dict[str, Any] = {
            "thread": str(key),
            "turn": record.turn_id,
            "record": type(record).__name__,
            "seq": entry.seq,
            "next_seq": entry.seq + 1,
        }
        if not record.turn_id:  # history supplied with a thread's first turn
            fields["round"] = 0
        else:
            match record:
                case TurnStarted(turn_id=turn_id):
                    self._live(turn_id)
                    if self.enabled:
                        self.turns_started.inc()
                    fields["round"] = 0
                case ToolsStarted(turn_id=turn_id, calls=calls):
                    turn = self._live(turn_id)
                    turn.rounds += 1
                    for call in calls:
                        if call.result is None:
                            turn.calls[call.id] = (call.name, now)
                    fields["round"] = turn.rounds
                case ToolFinished(turn_id=turn_id, call_id=call_id, result=result):
                    known = self._turns.get(turn_id)
                    fields["round"] = known.rounds if known is not None else 0
                    started = known.calls.pop(call_id, None) if known is not None else None
                    if started is not None and self.enabled:
                        name, at = started
                        outcome = "ok" if result.error is None else "error"
                        self.tool_seconds.labels(name, outcome).observe(now - at)
                case TurnEnded(turn_id=turn_id, status=status, reason=reason):
                    ended = self._turns.pop(turn_id, None)
                    rounds = ended.rounds if ended is not None else 0
                    fields["round"] = rounds
                    if status == "completed":
                        label = reason.code if reason.code in SERVER_STOPS else StopReason.END_TURN
                    else:
                        label = reason.kind.value
                    if self.enabled:
                        self.turns_completed.labels(status, label).inc()
                        self.turn_rounds.observe(rounds)
                        if ended is not None:
                            self.live_turns.dec()
                    fields["status"] = status
                    fields["reason"] = label
                case _:
                    known = self._turns.get(record.turn_id)
                    fields["round"] = known.rounds if known is not None else 0
        logger.debug(
            "%s %s seq=%d",
            fields["record"],
            fields["thread"],
            entry.seq,
            extra={"toolrelay": fields},
        )
