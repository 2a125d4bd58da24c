"""Records as the collector sees them."""

from __future__ import annotations

import gc

import msgspec

from toolrelay import ToolCallStatus
from toolrelay.store import (
    StoredAgentResult,
    StoredCall,
    ToolsStarted,
    decode_record,
    encode_record,
)
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


def test_a_batch_without_the_agents_own_calls_is_written_as_before() -> None:
    # Where the agent's own calls go back is written only for a batch that has some: a
    # batch of the client's calls is the record older versions wrote, and theirs
    # decodes as it was (restored with every call in the batch).
    call = StoredCall(id="c1", name="lookup", arguments="{}", status=ToolCallStatus.executing)
    plain = ToolsStarted(turn_id="turn-1", run_id="run-1", depth=0, runs=1, calls=(call,))
    older = (
        b'{"kind":"tools_started","turn_id":"turn-1","run_id":"run-1","depth":0,"runs":1,'
        b'"calls":[{"id":"c1","name":"lookup","arguments":"{}","status":"executing"}]}'
    )
    assert encode_record(plain) == older
    assert decode_record(older) == plain
    assert plain.agent_results == ()
    mixed = msgspec.structs.replace(
        plain, agent_results=(StoredAgentResult(call_id="s1", message_id="r-s1"),)
    )
    assert b'"agent_results":[{"call_id":"s1","message_id":"r-s1"}]' in encode_record(mixed)
    assert decode_record(encode_record(mixed)) == mixed
