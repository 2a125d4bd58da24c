"""A tool's description and its parameters' descriptions, read from its docstring.

The first paragraph is the tool's description; the parameters are described by a
Google-style ``Args:`` section, reST ``:param name:`` fields or a NumPy
``Parameters`` section, whichever the docstring uses (a Google entry wins over a
NumPy one, which wins over a reST one, when a docstring mixes them).
"""

from __future__ import annotations

import re

__all__ = ("parse_docstring",)

_SECTION = re.compile(r"(?P<title>[A-Z][A-Za-z ]*):")
_ARG_SECTIONS = frozenset({"Args", "Arguments", "Parameters", "Keyword Args", "Keyword Arguments"})
_ARG_ENTRY = re.compile(r"\*{0,2}(?P<name>\w+)\s*(?:\([^)]*\))?\s*:(?P<text>.*)")
_UNDERLINE = re.compile(r"-{3,}")
_NUMPY_ENTRY = re.compile(r"\*{0,2}(?P<name>\w+)\s*(?::.*)?")
_REST_FIELD = re.compile(
    r":(?P<kind>\w+)(?:\s+[^:]*?)?\s+\*{0,2}(?P<name>\w+):(?P<text>.*)|:\w+:.*"
)
_REST_PARAM_KINDS = frozenset({"param", "parameter", "arg", "argument", "key", "keyword"})


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """The first paragraph of ``doc`` and its parameter descriptions, from a
    Google-style ``Args:`` section, reST ``:param name:`` fields or a NumPy
    ``Parameters`` section (whichever it uses)."""
    if not doc:
        return "", {}
    lines = doc.expandtabs().splitlines()
    summary: list[str] = []
    for index, line in enumerate(lines):
        text = line.strip()
        if (
            not text
            or _SECTION.fullmatch(text)
            or text.startswith(":")
            or _is_underline(lines, index + 1)
        ):
            break
        summary.append(text)
    args = _google_args(lines)
    args.update({k: v for k, v in _numpy_args(lines).items() if k not in args})
    args.update({k: v for k, v in _rest_args(lines).items() if k not in args})
    return " ".join(summary), args


def _is_underline(lines: list[str], index: int) -> bool:
    """Whether ``lines[index]`` underlines a NumPy section title (``-----``)."""
    return index < len(lines) and _UNDERLINE.fullmatch(lines[index].strip()) is not None


def _google_args(lines: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    section_indent: int | None = None  # indentation of the current Args: header
    entry_indent: int | None = None
    current: str | None = None
    for line in lines:
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if section_indent is not None and text and indent <= section_indent:
            section_indent = None  # the Args section ended
        if section_indent is None:
            header = _SECTION.fullmatch(text)
            if header and header["title"] in _ARG_SECTIONS:
                section_indent, entry_indent, current = indent, None, None
            continue
        if not text:
            continue
        if entry_indent is None:
            entry_indent = indent
        if indent <= entry_indent:
            entry = _ARG_ENTRY.fullmatch(text)
            current = entry["name"] if entry else None
            if current is not None and entry is not None:
                args[current] = entry["text"].strip()
        elif current is not None:
            args[current] = f"{args[current]} {text}".strip()
    return args


def _numpy_args(lines: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    inside = False
    section_indent = 0
    current: str | None = None
    for index, line in enumerate(lines):
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        if _is_underline(lines, index + 1):  # a section title
            inside = text in _ARG_SECTIONS
            section_indent, current = indent, None
            continue
        if not inside or not text or _UNDERLINE.fullmatch(text):
            continue
        if indent <= section_indent:
            entry = _NUMPY_ENTRY.fullmatch(text)
            current = entry["name"] if entry else None
            if current is not None:
                args[current] = ""
        elif current is not None:
            args[current] = f"{args[current]} {text}".strip()
    return args


def _rest_args(lines: list[str]) -> dict[str, str]:
    args: dict[str, str] = {}
    current: str | None = None
    field_indent = 0
    for line in lines:
        text = line.strip()
        indent = len(line) - len(line.lstrip())
        field = _REST_FIELD.fullmatch(text)
        if field is not None:
            current = field["name"] if field["kind"] in _REST_PARAM_KINDS else None
            field_indent = indent
            if current is not None:
                args[current] = field["text"].strip()
        elif current is not None and text and indent > field_indent:
            args[current] = f"{args[current]} {text}".strip()
        elif text:
            current = None
    return args
