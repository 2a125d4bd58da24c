"""Client tool results and cancels, on whichever process they come in.

A turn runs in the process that claimed its thread, and two requests must act on it
there: the ``tool`` messages answering the calls the turn handed to the client, and
``POST /threads/{id}/cancel``. On the holding process they act at once
(:meth:`Inbox._take_results`, ``engine.cancel``). Any other process (shared mode, on a
store with an inbox: :class:`~toolrelay.store.InboxStore`) checks what the log lets it
check, posts the request to the thread's inbox with a ticket, and waits (at most
:data:`ANSWER_WAIT` seconds) for the holder's answer to that ticket:

- **Results.** Checked against the log: the calls the last ``ToolsStarted`` handed to
  the client, those with no ``ToolFinished`` yet (409 ``no_pending_call``, 422
  ``missing_tool_results``, as on the holder). The holder checks again against its
  live turn (the first answer to a call wins; the other is refused 409) and fills the
  same slots a local request fills. The request on the poster then streams the run
  from the log, as a local one does; refused, it answers the holder's error. With no
  answer in time (no process holds the thread: its holder died), it streams anyway:
  the process that takes the turn over applies the letter.
- **Cancel.** The holder cancels the turn if it is still the one the poster saw live,
  and answers once the turn has ended; the poster answers ``{"cancelled": true}`` once
  the log shows the end. With no answer in time: 202, ``{"handedOver": true}``.

The holder looks in a thread's inbox when a letter is notified (the commit feed's
listener hears the inbox's channel too), after it claims the thread, and when the
feed was cut (notifications may have been lost). A process that takes over a turn
whose holder died reads the inbox *before* it resumes the turn: results for the calls
handed to the client are written to the log as their ``ToolFinished`` (so recovery
finds them answered rather than interrupted); a cancel is applied once the turn runs
again.
"""

from __future__ import annotations

import logging
import uuid

import anyio
import msgspec

from toolrelay._core import ThreadKey, ToolResult
from toolrelay._errors import StoreError
from toolrelay._machines import ToolCallStatus
from toolrelay.protocol import ToolMessage
from toolrelay.server._asgi import HTTPError
from toolrelay.server._base import Looking, ServerBase, Slot, Ticket
from toolrelay.server._feed import LogFeed
from toolrelay.store import Letter, LetterKind, ToolFinished

__all__ = ("ANSWER_WAIT", "INBOX_LIMIT", "Inbox", "tool_result")

logger = logging.getLogger("toolrelay.server")

#: Letters a thread's inbox holds at most (a post beyond is refused with 429).
INBOX_LIMIT = 16
#: Seconds a process waits for the holder's answer to a letter it posted.
ANSWER_WAIT = 10.0
#: Leases after which an unread letter is dropped.
_LETTER_LEASES = 4

_EXECUTING = ToolCallStatus.executing


class _Results(msgspec.Struct, frozen=True, kw_only=True):
    """A letter: the client's results for the calls turn ``turn_id`` handed over."""

    ticket: str
    turn_id: str
    results: dict[str, ToolMessage]


class _Cancel(msgspec.Struct, frozen=True, kw_only=True):
    """A letter: cancel turn ``turn_id`` (not a later one)."""

    ticket: str
    turn_id: str


def tool_result(message: ToolMessage) -> ToolResult:
    """The result a client's ``tool`` message gives its call."""
    if message.error:
        return ToolResult.failure(message.error)
    content = message.content
    return ToolResult.success(
        content if isinstance(content, str) else msgspec.json.encode(content).decode()
    )


class Inbox(ServerBase):
    """Client results and cancels for a turn here or on another process (see the
    module docstring)."""

    # -- on the process holding the thread -------------------------------------------------

    def _take_results(self, key: ThreadKey, feed: LogFeed, results: dict[str, ToolMessage]) -> None:
        """Give the client's ``results`` to the calls this process's live turn waits
        for (``feed``: the log at the request's start).

        Checked and answered with no await in between: of two requests carrying the
        same results, one is taken and the other finds the calls answered.

        Raises:
            HTTPError: 409 ``no_pending_call`` (a result no call waits for: answered
                already, or never asked for); 422 ``missing_tool_results``.
        """
        pending = feed.pending_client_calls()
        waiting = self._waiting(key, feed.turn_id, pending)
        batch = feed.handed_calls()
        # The results of the batch's server calls (the stream sent them) may come
        # back; a result for any other call has nobody waiting for it.
        stale = [
            call_id
            for call_id in results
            if call_id not in batch or (call_id in pending and call_id not in waiting)
        ]
        if stale or not waiting:
            raise _no_pending_call(key, stale or list(results))
        missing = [call_id for call_id in waiting if call_id not in results]
        if missing:
            raise _missing(missing)
        for call_id in waiting:
            self._slot(key, call_id, results[call_id])

    def _waiting(self, key: ThreadKey, turn_id: str | None, pending: list[str]) -> list[str]:
        """Of the ``pending`` calls of turn ``turn_id`` (as the log shows them), those
        this process's live turn still waits for, unanswered: none once the turn ended
        (cancelled, superseded, recovered after a crash) or a request answered them."""
        turn = self.engine.turn(key)
        if turn is None or turn.finished or turn.turn_id != turn_id:
            return []
        executing = {call.id for call in turn.tool_calls if call.status is _EXECUTING}
        slots = self._slots.get(key, {})
        return [
            call_id
            for call_id in pending
            if call_id in executing and (call_id not in slots or slots[call_id].result is None)
        ]

    def _slot(self, key: ThreadKey, call_id: str, message: ToolMessage) -> None:
        slot = self._slots.setdefault(key, {}).setdefault(call_id, Slot())
        slot.result = tool_result(message)
        slot.event.set()

    # -- on any other process -----------------------------------------------------------

    async def _hand_over_results(
        self, key: ThreadKey, feed: LogFeed, results: dict[str, ToolMessage]
    ) -> None:
        """Post ``results`` to the process holding ``key`` and wait for its answer;
        returns when they were taken (or no answer came in time: the process that takes
        the turn over applies them).

        Raises:
            HTTPError: 409 ``no_pending_call`` and 422 ``missing_tool_results`` (by the
                log here, or the holder's answer); 429 ``inbox_full``; 503.
        """
        pending = feed.pending_client_calls()
        batch = feed.handed_calls()
        stale = [call_id for call_id in results if call_id not in batch]
        if stale or feed.turn_id is None:
            raise _no_pending_call(key, stale)
        missing = [call_id for call_id in pending if call_id not in results]
        if missing:
            raise _missing(missing)
        ticket = uuid.uuid4().hex
        letter = _Results(
            ticket=ticket,
            turn_id=feed.turn_id,
            results={call_id: results[call_id] for call_id in pending},
        )
        verdict = await self._post(key, "results", msgspec.json.encode(letter), ticket)
        if verdict == "no_pending_call":
            raise _no_pending_call(key, pending)
        if verdict == "missing_tool_results":
            raise _missing(pending)

    async def _hand_over_cancel(self, key: ThreadKey, turn_id: str) -> tuple[int, bool]:
        """Ask the process holding ``key`` to cancel turn ``turn_id``.

        Returns:
            ``(200, True)`` once the log shows the turn ended; ``(200, False)`` when
            the holder found it no longer live; ``(202, False)`` when no answer came
            in time (the letter waits for the holder, or for the process that takes
            the turn over).

        Raises:
            HTTPError: 429 ``inbox_full``; 503.
        """
        deadline = anyio.current_time() + ANSWER_WAIT
        ticket = uuid.uuid4().hex
        letter = msgspec.json.encode(_Cancel(ticket=ticket, turn_id=turn_id))
        verdict = await self._post(key, "cancel", letter, ticket)
        if verdict == "not_live":
            return 200, False
        if verdict == "cancelled":
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                while True:
                    changed = self.store.changed(key)
                    info = await self._thread_info(key)
                    if info is None or info.live_turn != turn_id:
                        return 200, True
                    await changed.wait()
        return 202, False

    async def _post(self, key: ThreadKey, kind: LetterKind, body: bytes, ticket: str) -> str | None:
        """Post a letter with ``ticket``; the holder's verdict, or ``None`` when none
        came within :data:`ANSWER_WAIT` seconds."""
        inbox = self._inbox
        assert inbox is not None
        waiting = self._tickets[ticket] = Ticket()
        try:
            try:
                posted = await inbox.post(
                    key, kind, body, limit=INBOX_LIMIT, max_age=self.lease * _LETTER_LEASES
                )
            except StoreError as exc:
                raise HTTPError(503, "store_unavailable", str(exc)) from exc
            if not posted:
                raise HTTPError(
                    429,
                    "inbox_full",
                    f"{INBOX_LIMIT} requests for thread {key.thread_id!r} wait for the "
                    "process running its turn; retry later",
                    [(b"retry-after", b"1")],
                )
            with anyio.move_on_after(ANSWER_WAIT):
                await waiting.answered.wait()
            return waiting.verdict
        finally:
            del self._tickets[ticket]

    def _answered(self, ticket: str, verdict: str) -> None:
        """The holder answered a letter (maybe one of this process's)."""
        waiting = self._tickets.get(ticket)
        if waiting is not None:
            waiting.verdict = verdict
            waiting.answered.set()

    # -- reading the inbox ----------------------------------------------------------------

    def _look_in_inbox(self, key: ThreadKey, letters: list[Letter] | None = None) -> None:
        """Act on the letters of ``key`` (``letters``: taken already) if this process
        holds it, in a task of the server's group: one at a time per thread."""
        if self._inbox is None or self._group is None:
            return
        looking = self._looking.get(key)
        if looking is not None:
            looking.letters.extend(letters or ())
            looking.again = True
            return
        if key not in self._holders and not letters:
            return
        self._looking[key] = Looking(list(letters or ()))
        self._group.start_soon(self._read_inbox, key, name=f"inbox {key}")

    async def _read_inbox(self, key: ThreadKey) -> None:
        inbox = self._inbox
        fenced = self._fenced
        assert inbox is not None and fenced is not None
        looking = self._looking[key]
        try:
            holder = self._holders.get(key)
            if holder is not None:
                await holder.ready.wait()  # the turn the claim was taken for has started
            while True:
                looking.again = False
                letters, looking.letters = looking.letters, []
                claim = fenced.held(key)
                if claim is not None:
                    letters += await inbox.collect(claim, max_age=self.lease * _LETTER_LEASES)
                for letter in letters:
                    verdict = await self._act_on(letter)
                    ticket = _ticket_of(letter)
                    if ticket is not None:
                        await inbox.answer(ticket, verdict)
                if not looking.again:
                    return
        except StoreError as exc:
            logger.warning("%s could not read the inbox of %s: %s", self.worker, key, exc)
        finally:
            del self._looking[key]

    async def _act_on(self, letter: Letter) -> str:
        """Apply a letter to this process's live turn, as a local request would; the
        verdict its poster gets."""
        key = letter.key
        try:
            if letter.kind == "cancel":
                cancel = msgspec.json.decode(letter.body, type=_Cancel)
                turn = self.engine.turn(key)
                if turn is None or turn.finished or turn.turn_id != cancel.turn_id:
                    return "not_live"
                turn.cancel("cancelled by the client")
                with anyio.move_on_after(ANSWER_WAIT):
                    await turn.wait_finished()
                return "cancelled"
            results = msgspec.json.decode(letter.body, type=_Results)
        except msgspec.DecodeError:  # ValidationError too
            logger.warning("%s dropped a letter it cannot read on %s", self.worker, key)
            return "unreadable"
        info = await self.store.thread(key)
        feed = await self._warm(key, info.last_seq if info is not None else 0)
        if feed.turn_id != results.turn_id:
            return "no_pending_call"
        try:
            self._take_results(key, feed, results.results)
        except HTTPError as exc:
            return exc.code
        return "taken"

    async def _inbox_before_recovery(self, key: ThreadKey) -> list[Letter]:
        """Before a turn taken over resumes: write the results waiting in its inbox as
        the ``ToolFinished`` of the calls handed to the client, so that recovery finds
        them answered. Returns the letters to act on once the turn runs (cancels)."""
        inbox = self._inbox
        fenced = self._fenced
        assert inbox is not None and fenced is not None
        claim = fenced.held(key)
        if claim is None:
            return []
        later: list[Letter] = []
        for letter in await inbox.collect(claim, max_age=self.lease * _LETTER_LEASES):
            if letter.kind != "results":
                later.append(letter)
                continue
            try:
                results = msgspec.json.decode(letter.body, type=_Results)
            except msgspec.DecodeError:  # ValidationError too
                continue
            verdict = await self._write_results(key, results)
            await inbox.answer(results.ticket, verdict)
        return later

    async def _write_results(self, key: ThreadKey, results: _Results) -> str:
        info = await self.store.thread(key)
        if info is None or info.live_turn != results.turn_id:
            return "no_pending_call"
        feed = await self._warm(key, info.last_seq)
        pending = feed.pending_client_calls()
        if feed.turn_id != results.turn_id or not pending:
            return "no_pending_call"
        if any(call_id not in pending for call_id in results.results):
            return "no_pending_call"
        if any(call_id not in results.results for call_id in pending):
            return "missing_tool_results"
        await self.store.append(
            key,
            [
                ToolFinished(
                    turn_id=results.turn_id,
                    call_id=call_id,
                    result=tool_result(results.results[call_id]),
                )
                for call_id in pending
            ],
        )
        return "taken"


def _ticket_of(letter: Letter) -> str | None:
    try:
        return msgspec.json.decode(letter.body, type=_Cancel).ticket
    except msgspec.DecodeError:  # ValidationError too
        return None


def _no_pending_call(key: ThreadKey, calls: list[str]) -> HTTPError:
    return HTTPError(
        409,
        "no_pending_call",
        f"no tool call waits for a result on thread {key.thread_id!r} "
        f"({', '.join(sorted(calls))}): answered already, or not asked for",
    )


def _missing(calls: list[str]) -> HTTPError:
    return HTTPError(
        422,
        "missing_tool_results",
        "the results of every pending client call are needed: missing " + ", ".join(calls),
    )
