"""How a message shows a string it did not write: a caller's argument, a file name, a frontmatter value."""

from __future__ import annotations

import json
from typing import Any

_SHOWN_CHARS = 120


def quoted(text: str) -> str:
    """JSON-quoted, so a quote or a newline in it cannot pass for our own words (a forged "Hint:"), and cut to
    120 characters, so a megabyte name is not echoed whole. A lone surrogate (a non-UTF-8 file name) is escaped,
    so the message itself stays encodable."""
    shown = text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"
    return json.dumps(shown, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")


def shown(value: Any) -> str:
    """A value from outside in a message: a string quoted as above, anything else by its JSON type."""
    return quoted(value) if isinstance(value, str) else json_type(value)


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), type(value).__name__)
