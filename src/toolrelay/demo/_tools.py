"""The demo's tools: small, deterministic lookups the demo agent knows how to use.

They are ordinary toolrelay tools (:func:`~toolrelay.tool`), collected in
:data:`DEMO_TOOLS`; the demo agent calls them by name, and only when the client
declares them in ``RunAgentInput.tools``.
"""

from __future__ import annotations

from toolrelay._core import ToolError, ToolRegistry, tool

__all__ = (
    "CITIES",
    "DEMO_TOOLS",
    "SECRET_NUMBERS",
    "WEATHER",
    "get_secret_number",
    "get_weather",
    "list_people",
    "lookup_city",
)

#: Everyone's secret number.
SECRET_NUMBERS: dict[str, int] = {"alice": 42, "bob": 7, "carol": 1234}

#: Where everyone lives.
CITIES: dict[str, str] = {"alice": "Paris", "bob": "Lima", "carol": "Osaka"}

#: The (unchanging) weather in each city.
WEATHER: dict[str, dict[str, object]] = {
    "Paris": {"city": "Paris", "forecast": "sunny", "temperature_c": 21},
    "Lima": {"city": "Lima", "forecast": "overcast", "temperature_c": 17},
    "Osaka": {"city": "Osaka", "forecast": "light rain", "temperature_c": 24},
}


def _person(name: str) -> str:
    return name.strip().lower()


@tool
async def get_secret_number(name: str) -> int:
    """Look up a person's secret number.

    Args:
        name: The person's first name (alice, bob or carol).
    """
    number = SECRET_NUMBERS.get(_person(name))
    if number is None:
        raise ToolError(f"nobody called {name!r} has a secret number")
    return number


@tool
async def lookup_city(person: str) -> str:
    """Find the city a person lives in.

    Args:
        person: The person's first name (alice, bob or carol).
    """
    city = CITIES.get(_person(person))
    if city is None:
        raise ToolError(f"I do not know where {person!r} lives")
    return city


@tool
async def get_weather(city: str) -> dict[str, object]:
    """Get today's weather forecast for a city.

    Args:
        city: The city's name, as lookup_city returns it.
    """
    forecast = WEATHER.get(city.strip().title())
    if forecast is None:
        raise ToolError(f"no forecast for {city!r}")
    return forecast


@tool
async def list_people() -> list[str]:
    """List the people the other tools know about."""
    return sorted(SECRET_NUMBERS)


#: The demo's tools, in the order they are declared to the agent.
#: Shared by every user of the module, so frozen: extend a copy (``DEMO_TOOLS.copy()``).
DEMO_TOOLS: ToolRegistry = ToolRegistry.of(
    get_secret_number, lookup_city, get_weather, list_people
).freeze()
