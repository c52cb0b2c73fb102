"""Path discipline: the string check (SPEC §6.1), then the resolve check (§6.2)."""

from __future__ import annotations

import json

from skill_mcp.limits import MAX_PATH_CHARS

PATH_HINT = (
    "Paths are relative to the skill's own directory: plain segments separated by \"/\", "
    'no leading "/", no "." or ".." segment. Call skill_load to see the exact paths.'
)
_SHOWN_PATH_CHARS = 120


def path_refusal(rel: object) -> str | None:
    """The §6.1 reason `rel` is refused, first matching rule wins; None when it is usable."""
    if not isinstance(rel, str) or not rel:
        return "it is empty"
    if len(rel) > MAX_PATH_CHARS:
        return f"it is longer than {MAX_PATH_CHARS} characters"
    if "\0" in rel:
        return "it contains a NUL byte"
    try:
        rel.encode("utf-8")
    except UnicodeEncodeError:
        return "it is not valid UTF-8"
    if "\\" in rel:
        return "it contains a backslash"
    if "%" in rel:
        return "it contains a percent escape"
    for segment in rel.split("/"):
        if not segment:
            return 'it has an empty segment (leading, trailing or doubled "/")'
        if segment == ".":
            return 'it has a "." segment'
        if segment == "..":
            return 'it has a ".." segment'
        if segment.isspace():
            return "it has a whitespace-only segment"
    return None


def describe_refusal(rel: str, reason: str) -> str:
    """The refusal message: the path JSON-quoted and cut to 120 characters, then the reason."""
    shown = rel if len(rel) <= _SHOWN_PATH_CHARS else rel[:_SHOWN_PATH_CHARS] + "…"
    # A lone surrogate (a non-UTF-8 file name) is escaped so the message itself stays encodable.
    quoted = json.dumps(shown, ensure_ascii=False).encode("utf-8", "backslashreplace").decode("utf-8")
    return f"path {quoted} is not usable: {reason}"
