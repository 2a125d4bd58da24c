"""Answering interrupts: checking resume entries against the interrupts they answer.

AG-UI 1.0 has no channel from the client into a running run, so an agent that needs
something from outside ends its run with the ``interrupt`` outcome, naming each
question by an ``Interrupt.id`` unique within the run. The client answers in a *new*
run: ``RunAgentInput.resume`` holds one ``ResumeEntry`` per interrupt (its
``interruptId``, ``status`` ``resolved`` or ``cancelled``, and a ``payload``).

:func:`check_resume` is the client-side rule, applied before anything is sent: every
entry names an open interrupt, no interrupt is answered twice, and none is left
unanswered (an entry with ``status="cancelled"`` is how to decline one). Pure: no
I/O, no state; the engine keeps which interrupts a thread has open.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from toolrelay._errors import ResumeError
from toolrelay.protocol import Interrupt, ResumeEntry

__all__ = ("check_resume",)


def check_resume(
    open_interrupts: Sequence[Interrupt] | None, resume: Iterable[ResumeEntry]
) -> tuple[ResumeEntry, ...]:
    """Check that ``resume`` answers exactly the interrupts in ``open_interrupts``.

    Args:
        open_interrupts: The interrupts the thread's last interrupted turn left open;
            ``()`` when the thread has none; ``None`` when they are not known (the
            thread's earlier turns ran elsewhere): then only duplicates are refused.
        resume: The entries to send.

    Returns:
        The entries, as a tuple, in the order given.

    Raises:
        ResumeError: An entry names no open interrupt, an interrupt is answered twice,
            or an open interrupt is left unanswered. Nothing was changed.
    """
    entries = tuple(resume)
    seen: set[str] = set()
    duplicated: list[str] = []
    for entry in entries:
        if entry.interrupt_id in seen and entry.interrupt_id not in duplicated:
            duplicated.append(entry.interrupt_id)
        seen.add(entry.interrupt_id)
    unknown: list[str] = []
    unanswered: list[str] = []
    if open_interrupts is not None:
        open_ids = [interrupt.id for interrupt in open_interrupts]
        known = set(open_ids)
        unknown = [entry.interrupt_id for entry in entries if entry.interrupt_id not in known]
        unanswered = [interrupt_id for interrupt_id in open_ids if interrupt_id not in seen]
    if not (unknown or duplicated or unanswered):
        return entries
    problems: list[str] = []
    if unknown:
        where = (
            "the thread has no open interrupt"
            if not open_interrupts
            else f"the open interrupts are {_ids(i.id for i in open_interrupts)}"
        )
        problems.append(f"no open interrupt has id {_ids(unknown)} ({where})")
    if duplicated:
        problems.append(f"interrupt {_ids(duplicated)} answered more than once")
    if unanswered:
        problems.append(
            f"interrupt {_ids(unanswered)} left unanswered (answer each one, "
            'with status="cancelled" to decline it)'
        )
    raise ResumeError(
        "resume entries do not answer the open interrupts: " + "; ".join(problems),
        unknown=tuple(dict.fromkeys(unknown)),
        duplicated=tuple(duplicated),
        unanswered=tuple(unanswered),
    )


def _ids(ids: Iterable[str]) -> str:
    return ", ".join(repr(i) for i in dict.fromkeys(ids))
