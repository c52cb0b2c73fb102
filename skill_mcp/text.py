"""How a message shows a string it did not write: a caller's argument, a file name, a frontmatter value."""

from __future__ import annotations

import json

_SHOWN_CHARS = 120


def quoted(text: str) -> str:
    """JSON-quoted, so a quote or a newline in it cannot pass for our own words (a forged "Hint:"), and cut to
    120 characters, so a megabyte name is not echoed whole. A lone surrogate (a non-UTF-8 file name) is escaped,
    so the message itself stays encodable."""
    shown = text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "…"
    return json.dumps(shown, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")
