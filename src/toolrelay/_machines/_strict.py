"""The strictness both declared machines share, written once.

python-statemachine's ``StateChart`` is lenient by default: it ignores an event a
state has no transition for, and turns a callback's error into an event. Our
machines turn both off, and refuse in toolrelay's terms (``IllegalTransition``).
:class:`StrictChart` declares no state: the library takes it as an abstract base.
"""

from __future__ import annotations

from typing import Any

from statemachine import StateChart
from statemachine.exceptions import TransitionNotAllowed

from toolrelay._errors import IllegalTransition

__all__ = ("StrictChart",)


class StrictChart(StateChart[object]):
    """A ``StateChart`` that refuses an event it has no transition for, lets a
    callback's error propagate, and raises :class:`~toolrelay.IllegalTransition`."""

    allow_event_without_transition = False
    catch_errors_as_events = False

    def send(self, event: str, *args: Any, **kwargs: Any) -> Any:
        """Send ``event`` by id (``StateChart.send``), refusing in toolrelay's terms.

        Use ``send`` rather than the generated event methods (``machine.start()``):
        those raise the library's ``TransitionNotAllowed`` unwrapped.

        Raises:
            IllegalTransition: The current state does not accept ``event`` (chained
                from ``TransitionNotAllowed``); the machine stays where it was.
            Exception: Whatever a callback raises propagates unchanged
                (``catch_errors_as_events = False``).
        """
        state = self.current_state_value
        try:
            return super().send(event, *args, **kwargs)
        except TransitionNotAllowed as exc:
            raise IllegalTransition(self.name, str(state), str(event)) from exc
