"""``POST /``: a ``RunAgentInput`` starts a turn (or continues one) and streams it.

Everything is checked first (the body's size, the input, the thread's owner, the
tools), then the turn starts with ``engine.start_turn``: it belongs to the engine's
task group, not to the request, so a client that goes away cancels nothing.

Client tools: each tool of ``RunAgentInput.tools`` becomes, for that turn, a tool whose
execution is a wait for the client's result. The feed ends the AG-UI run once the
batch's server tools are done (the client calls stay pending), and a ``POST`` whose
messages end with the ``tool`` messages of those calls resolves the waits: the same
turn goes on, and that request streams it. On a process that does not hold the
thread, the results go to the one that does (``_inbox``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import msgspec

from toolrelay._core import ThreadKey, ToolRegistry, ToolResult, ToolSpec, check_resume
from toolrelay._core._patch import StateBoundError, StateBounds, bounded_copy
from toolrelay._errors import (
    InvalidEventError,
    MalformedEventError,
    ResumeError,
    ToolDefinitionError,
)
from toolrelay._runtime import running_call
from toolrelay.backends._propagation import continued_trace
from toolrelay.protocol import (
    AssistantMessage,
    RunAgentInput,
    ToolMessage,
    UserMessage,
    decode_run_input,
)
from toolrelay.server._asgi import HTTPError, Receive, Scope, Send, read_body, respond
from toolrelay.server._auth import Request
from toolrelay.server._base import Slot
from toolrelay.server._catch_up import CatchUp, parse_position
from toolrelay.server._feed import LogFeed
from toolrelay.server._shared import SharedMode

__all__ = ("Runs",)


class Runs(CatchUp, SharedMode):
    """Runs: starting turns, and the client tools that wait for the client."""

    async def _run(
        self, request: Request, principal: str, scope: Scope, receive: Receive, send: Send
    ) -> None:
        if self._stopping.is_set() or self._engine is None:
            raise HTTPError(503, "unavailable", "the server is not accepting runs")
        self._check_streams()
        body = await read_body(receive, request.headers, self.max_body_bytes, self.body_timeout)
        try:
            run_input = decode_run_input(body)
        except (MalformedEventError, InvalidEventError) as exc:
            raise HTTPError(422, "invalid_run_input", f"not a RunAgentInput: {exc}") from exc
        if not run_input.thread_id:
            raise HTTPError(422, "invalid_run_input", "threadId must not be empty")
        key = ThreadKey(run_input.thread_id)
        exists = await self._check_owner(key, principal)
        if "last-event-id" in request.headers:
            # A client whose stream broke reconnecting (the same POST, plus the id of
            # the last event it got): the rest of that run from there, nothing started.
            if not exists:
                raise HTTPError(404, "not_found", f"no thread {key.thread_id!r}")
            feed, head = await self._resume_at(key, *parse_position(scope, request.headers))
            if not head and not feed.run_open:
                # No run open at that position: the run it asks for had ended there.
                await respond(send, 204, b"", None)
                return
            await self._stream(scope, receive, send, key, feed, head, post=True)
            return
        info = await self._thread_info(key) if exists else None
        last_seq = info.last_seq if info is not None else 0
        feed = await self._warm(key, last_seq)
        pending = feed.pending_client_calls()
        results = _trailing_results(run_input)
        if pending and any(call_id in results for call_id in pending):
            if self._fenced is None or key in self._holders:
                self._take_results(key, feed, results)
            elif self._inbox is not None:
                await self._hand_over_results(key, feed, results)
            else:
                raise self._held_elsewhere(key)
        else:
            if results and not isinstance(run_input.messages[-1], UserMessage):
                unknown = ", ".join(sorted(results))
                raise HTTPError(
                    409,
                    "no_pending_call",
                    f"no tool call waits for a result on thread {key.thread_id!r} ({unknown})",
                )
            holder = await self._hold_thread(key) if self._fenced is not None else None
            try:
                with continued_trace(request.headers):  # the turn's span continues the caller's
                    own = self._start_turn(
                        key, principal, run_input, new_thread=info is None, feed=feed
                    )
            finally:
                if holder is not None:
                    holder.ready.set()
            # The stream starts at this turn's own start: what the log shows before it
            # (a turn it superseded ending) is not this run's.
            await self._stream(scope, receive, send, key, feed, (), post=True, skip_until=own)
            return
        await self._stream(scope, receive, send, key, feed, (), post=True)

    def _start_turn(
        self,
        key: ThreadKey,
        principal: str,
        run_input: RunAgentInput,
        *,
        new_thread: bool,
        feed: LogFeed,
    ) -> str:
        """Start the turn ``run_input`` asks for; returns its id. ``feed`` stands at the
        thread's last record: its resume entries are checked against the interrupts
        the log shows open, whether or not the engine holds the thread (it checks
        only those it knows, and knows none of a thread it has not loaded)."""
        messages = run_input.messages
        last = messages[-1] if messages else None
        resume = tuple(run_input.resume or ())
        if isinstance(last, UserMessage):
            message: UserMessage | None = last
            history = messages[:-1]
        elif resume:
            message, history = None, messages
        else:
            raise HTTPError(
                422,
                "invalid_run_input",
                "a run needs the user's message last (or resume entries, or the results "
                "of the client calls the thread waits for)",
            )
        if resume:
            try:
                check_resume(feed.interrupts, resume)
            except ResumeError as exc:
                raise HTTPError(422, "invalid_resume", str(exc)) from exc
        registry = self._turn_tools(key, run_input)
        # The client's context comes after the server's own (engine_options), and its
        # forwarded props reach the model: both go with every run of the turn. A state
        # it sends (AG-UI's shared state, edited on its side) is the turn's from now
        # on; an empty one is what a client that keeps no state sends.
        state = self._bounded(run_input.state, "state")
        props = self._bounded(run_input.forwarded_props, "forwardedProps")
        self._check_capacity(key)
        self.store.claim(key, principal)
        if new_thread:
            self._claims[key] = principal
        self._client_tools_next[key] = frozenset(tool.name for tool in run_input.tools)
        context = (
            (*self._engine_options.get("context", ()), *run_input.context)
            if run_input.context
            else None
        )
        try:
            turn = self.engine.start_turn(
                key,
                message,
                resume=resume,
                history=history if new_thread else None,
                tools=registry,
                owner=principal,
                context=context,
                forwarded_props=props or None,
                state=msgspec.UNSET if state is None or state == {} else state,
            )
        except ValueError as exc:  # ResumeError: the entries do not answer the interrupts
            self._client_tools_next.pop(key, None)
            raise HTTPError(422, "invalid_resume", str(exc)) from exc
        return turn.turn_id

    def _bounded(self, value: Any, name: str) -> Any:
        """``value`` (the client's state or forwarded props, which the turn keeps and
        sends on) within the engine's state bounds: nesting (``max_json_depth``) and
        size (``max_state_bytes``); 422 beyond them."""
        limits = self.engine.limits
        bounds = StateBounds(max_bytes=limits.max_state_bytes, max_depth=limits.max_json_depth)
        try:
            return bounded_copy(value, bounds)[0]
        except StateBoundError as exc:
            raise HTTPError(422, "invalid_run_input", f"{name}: {exc}") from exc

    def _check_capacity(self, key: ThreadKey) -> None:
        """429 when one more live turn would pass ``max_live_turns`` (a turn that
        supersedes the thread's live one adds none)."""
        bound = self.max_live_turns
        if bound is None:
            return
        current = self.engine.turn(key)
        if current is not None and not current.finished:
            return
        counts = self.engine.statistics().turns
        live = sum(count for status, count in counts.items() if not status.is_final)
        if live >= bound:
            raise HTTPError(
                429,
                "too_many_turns",
                f"the server runs {live} turns, its bound (max_live_turns); retry later",
                [(b"retry-after", b"1")],
            )

    def _turn_tools(self, key: ThreadKey, run_input: RunAgentInput) -> ToolRegistry:
        if not run_input.tools:
            return self.tools
        registry = self.tools.copy()
        seen: set[str] = set()
        for tool in run_input.tools:
            if tool.name in self.tools:
                raise HTTPError(
                    422,
                    "tool_conflict",
                    f"the client's tool {tool.name!r} has the name of a server tool",
                )
            if tool.name in seen:
                raise HTTPError(422, "tool_conflict", f"the client declares {tool.name!r} twice")
            seen.add(tool.name)
            try:
                spec = ToolSpec.from_schema(
                    tool.name,
                    tool.description,
                    tool.parameters if isinstance(tool.parameters, Mapping) else {},
                    self._client_handler(key, tool.name),
                    timeout=self.client_tool_timeout,
                    idempotent=True,  # "running" it again is waiting for the client again
                )
            except ToolDefinitionError as exc:
                raise HTTPError(422, "invalid_tool", str(exc)) from exc
            registry.register(spec)
        return registry

    def _client_handler(
        self, key: ThreadKey, name: str
    ) -> Callable[[dict[str, Any]], Awaitable[ToolResult]]:
        async def wait_for_client(arguments: dict[str, Any]) -> ToolResult:
            call_id = _running_call_id(name)
            # The slot outlives the wait (it says the call was answered) until the
            # next batch or the turn's end is committed (ServerBase._committed).
            slot = self._slots.setdefault(key, {}).setdefault(call_id, Slot())
            waits = self._client_waits.setdefault(key, set())
            waits.add(call_id)
            try:
                await slot.event.wait()
            finally:
                waits.discard(call_id)
                if not waits:
                    self._client_waits.pop(key, None)
            assert slot.result is not None
            return slot.result

        wait_for_client.__name__ = f"client_tool_{name}"
        return wait_for_client


def _running_call_id(name: str) -> str:
    """The id of the tool call being run: a tool handler is not given its call id, so
    a client tool reads it from the engine's executor
    (:func:`toolrelay._runtime.running_call`)."""
    call = running_call()
    if call is None or call.name != name:
        raise RuntimeError(f"client tool {name!r} was not run by the engine's executor")
    return call.id


def _trailing_results(run_input: RunAgentInput) -> dict[str, ToolMessage]:
    """The ``tool`` messages after the last assistant message with tool calls."""
    results: dict[str, ToolMessage] = {}
    for message in reversed(run_input.messages):
        if isinstance(message, ToolMessage):
            results.setdefault(message.tool_call_id, message)
        elif isinstance(message, AssistantMessage) and message.tool_calls:
            break
        elif isinstance(message, UserMessage):
            break
    return results
