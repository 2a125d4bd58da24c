"""The tool registry: an ordered set of :class:`ToolSpec`, keyed by name.

It holds the tools a turn may call and their wire declarations
(``RunAgentInput.tools``); it runs none of them (the runtime does, see
``runtime/_executor.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Self

from toolrelay._core._tool_decorator import tool
from toolrelay._core._tool_result import ToolResult
from toolrelay._core._tool_spec import ToolSpec
from toolrelay._errors import ToolDefinitionError
from toolrelay.protocol import Tool

__all__ = ("ToolRegistry",)


class ToolRegistry:
    """An ordered set of tools, keyed by name: filled with :meth:`register`, then frozen.

    ``registry.register(f)`` adds ``f`` to this registry and returns it, so calls
    chain (``ToolRegistry().register(a).register(b)``). The first turn that uses the
    registry freezes it (:meth:`freeze`): from then on it never changes, and
    :meth:`register` raises rather than change the tools of turns under way; build
    another one from :meth:`copy`.

    Thread safety and concurrency: a frozen registry and its specs are never mutated,
    so any number of threads and tasks may read them at once. Concurrent executions
    share nothing mutable: each decodes its own arguments and builds its own result.
    The tools themselves must be safe to call
    concurrently, with themselves and with each other: the engine runs the tool
    calls of one batch concurrently (promise 2), and a blocking sync tool may run in
    several worker threads at once.
    """

    __slots__ = ("_approval", "_definitions", "_frozen", "_tools")

    def __init__(self) -> None:
        """An empty registry, open to :meth:`register`."""
        self._tools: dict[str, ToolSpec[..., Any]] = {}
        self._definitions: tuple[Tool, ...] = ()
        self._approval: frozenset[str] = frozenset()
        self._frozen = False

    @classmethod
    def of(cls, *tools: ToolSpec[..., Any] | Callable[..., Any]) -> ToolRegistry:
        """A registry holding ``tools``, in that order (see :meth:`register`)."""
        registry = cls()
        for item in tools:
            registry.register(item)
        return registry

    def register(self, tool_or_function: ToolSpec[..., Any] | Callable[..., Any], /) -> Self:
        """Add one tool to this registry, after the ones it holds.

        Args:
            tool_or_function: A :class:`ToolSpec`, or a plain function, which is
                declared with :func:`tool` (its defaults).

        Returns:
            This registry, so that calls chain.

        Raises:
            ToolDefinitionError: A tool with that name is already registered, the
                function cannot be declared as a tool, or the registry is frozen (a
                turn uses it). The registry is unchanged.
        """
        if self._frozen:
            raise ToolDefinitionError(
                "this ToolRegistry is frozen: a turn uses it, so its tools cannot change; "
                "register on registry.copy() and pass that to the next turn"
            )
        spec = (
            tool_or_function if isinstance(tool_or_function, ToolSpec) else tool(tool_or_function)
        )
        if spec.name in self._tools:
            raise ToolDefinitionError(f"a tool named {spec.name!r} is already registered")
        self._tools[spec.name] = spec
        self._definitions = (*self._definitions, spec.definition())
        if spec.needs_approval:
            self._approval = self._approval | {spec.name}
        return self

    def freeze(self) -> Self:
        """Refuse every later :meth:`register` (idempotent); returns this registry.

        The engine freezes the registry of every turn it starts.
        """
        self._frozen = True
        return self

    @property
    def frozen(self) -> bool:
        """Whether :meth:`freeze` ran: the tools never change again."""
        return self._frozen

    def copy(self) -> ToolRegistry:
        """A registry open to :meth:`register`, holding the same tools."""
        new = ToolRegistry()
        new._tools = dict(self._tools)
        new._definitions = self._definitions
        new._approval = self._approval
        return new

    @property
    def needing_approval(self) -> frozenset[str]:
        """The names of the tools whose calls wait for approval (``needs_approval``).

        Kept as each tool is registered: every turn's processor shares the one set.
        """
        return self._approval

    def lookup(self, name: str) -> ToolSpec[..., Any]:
        """The tool called ``name``.

        Raises:
            KeyError: No such tool; the message lists the known names.
        """
        spec = self._tools.get(name)
        if spec is None:
            raise KeyError(f"unknown tool {name!r}; known tools: {self._known()}")
        return spec

    def get(self, name: str) -> ToolSpec[..., Any] | None:
        """The tool called ``name``, or ``None``."""
        return self._tools.get(name)

    @property
    def names(self) -> tuple[str, ...]:
        """The tool names, in registration order."""
        return tuple(self._tools)

    def definitions(self) -> tuple[Tool, ...]:
        """The wire declarations (``RunAgentInput.tools``), in registration order.

        Computed as each tool is registered, not per call.
        """
        return self._definitions

    def unknown(self, name: str) -> ToolResult:
        """The failure the model sees for a call to a tool the registry does not have."""
        return ToolResult.failure(f"Unknown tool {name!r}. Available tools: {self._known()}.")

    def _known(self) -> str:
        return ", ".join(self._tools) if self._tools else "(none)"

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def __iter__(self) -> Iterator[ToolSpec[..., Any]]:
        return iter(self._tools.values())

    def __repr__(self) -> str:
        return f"ToolRegistry({list(self._tools)!r})"
