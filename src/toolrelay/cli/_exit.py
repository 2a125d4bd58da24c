"""The exit codes of the ``toolrelay`` command, shared by every subcommand."""

from __future__ import annotations

import enum

__all__ = ("ExitCode",)


class ExitCode(enum.IntEnum):
    """What the ``toolrelay`` command's exit status means."""

    #: The turn completed / the command succeeded.
    OK = 0
    #: The turn failed (agent error, protocol error, depth bound, tool trouble).
    FAILED = 1
    #: Wrong usage: a bad flag, a missing file, a tool module that does not import.
    USAGE = 2
    #: The turn was superseded, or the agent reported its run cancelled (AG-UI
    #: ``cancelled`` outcome).
    CANCELLED = 3
    #: The agent's server could not be reached.
    UNREACHABLE = 4
    #: A check failed (``diagrams --check`` drift, ``verify`` found a counterexample,
    #: ``replay`` found protocol violations).
    CHECK_FAILED = 5
    #: The turn ended ``interrupted``: the agent waits for answers (AG-UI ``interrupt``
    #: outcome; what it asks is printed). Not a failure, and not an answer either.
    INTERRUPTED = 6
    #: Ctrl-C (SIGINT), 128 + 2 as shells report it: a turn is cancelled and its
    #: summary printed first.
    CTRL_C = 130
    #: The reader of the output went away (``toolrelay demo | head``): the command stops
    #: quietly, 128 + 13 (SIGPIPE) as shells report it.
    BROKEN_PIPE = 141
