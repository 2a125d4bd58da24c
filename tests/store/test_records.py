"""Records as the collector sees them."""

from __future__ import annotations

import gc

from toolrelay.store import decode_record, encode_record
from toolrelay.testing.store_contract import sample_records


def test_records_are_not_tracked_by_the_cyclic_collector_made_or_decoded() -> None:
    # Every write holds its records until its commit; untracked, they cost the
    # collector nothing however many writes wait (they never form a cycle: frozen data).
    records = sample_records()
    kinds = {type(record).__name__ for record in records}
    assert {"TurnStarted", "MessageSaved", "ToolsStarted", "ToolFinished", "StateSaved"} <= kinds
    for record in records:
        decoded = decode_record(encode_record(record))
        assert decoded == record
        for made in (record, decoded):
            assert not gc.is_tracked(made), type(made).__name__
            message = getattr(made, "message", None)
            if message is not None:
                assert not gc.is_tracked(message), type(message).__name__
            for call in getattr(made, "calls", ()):
                assert not gc.is_tracked(call)
