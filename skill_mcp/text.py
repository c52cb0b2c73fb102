"""How a message shows a string it did not write: a caller's argument, a file name, a frontmatter value."""

from __future__ import annotations

import json
import re

from .limits import MAX_PATH_CHARS

_SHOWN_CHARS = 120
# Room for any path skill_file accepts, shown whole (§0: «"<rel>"» verbatim).
_SHOWN_PATH_CHARS = 4 * MAX_PATH_CHARS
# Room for any URI naming such a path (§12.4: «<uri>» verbatim): "skill://", a name of up to 64 characters, "/", then
# each character percent-encoded, up to 4 UTF-8 bytes of 3 characters each.
_SHOWN_URI_CHARS = len("skill://") + 64 + 1 + 12 * MAX_PATH_CHARS
# C1 controls and the bidirectional marks and overrides that reorder how a line is shown; C0 controls too.
_REORDERING = "\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_TERMINAL_CONTROLS = re.compile(f"[\x00-\x1f{_REORDERING}]")
# In what a person approves, also what shows as nothing (Unicode's Default_Ignorable_Code_Point: zero-width and
# invisible characters, the soft hyphen, the Hangul fillers, variation selectors, the tag characters that spell
# hidden ASCII) or as a line break.
_HIDING_CHARACTERS = re.compile(
    f"[{_REORDERING}\u00ad\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200d\u2060-\u206f\u3164"
    "\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0000-\U000e0fff"
    "\u2028\u2029]"
)


def quoted(text: str, limit: int = _SHOWN_CHARS) -> str:
    """JSON-quoted, so a quote or a newline in it cannot pass for our own words (a forged "Hint:"), and cut to
    `limit` characters, so a megabyte name is not echoed whole. A lone surrogate (a non-UTF-8 file name) is
    escaped, so the message itself stays encodable."""
    return encodable(json.dumps(cut(text, limit), ensure_ascii=False))


def cut(text: str, limit: int = _SHOWN_CHARS) -> str:
    """`text` cut to `limit` characters, marked with "…" when cut."""
    return text if len(text) <= limit else text[:limit] + "…"


def fit(text: str, room: int) -> str:
    """`text` in `room` characters, its last one "…" when cut; nothing when there is no room at all."""
    if len(text) <= room:
        return text
    return text[: room - 1] + "…" if room > 0 else ""


def quoted_path(text: str) -> str:
    """A path quoted whole, when it is one the server could serve; only a longer one is cut."""
    return quoted(text, _SHOWN_PATH_CHARS)


def quoted_uri(text: str) -> str:
    """A `skill://` URI quoted whole, when it could name a file the server serves; only a longer one is cut."""
    return quoted(text, _SHOWN_URI_CHARS)


def os_error_text(error: BaseException) -> str:
    """An OS error as people read it ("Permission denied"), without errno numbers or the path repeated."""
    return getattr(error, "strerror", None) or str(error)


def encodes_as_utf8(text: str) -> bool:
    """False when `text` holds a lone surrogate (a non-UTF-8 byte, a `\\ud800` escape): no character, so no UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def encodable(text: str) -> str:
    """A non-UTF-8 file name decodes to lone surrogates, which no JSON answer could carry: shown escaped."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def printable(line: str) -> str:
    """A line for a terminal: a skill's text cannot move the cursor, clear the screen or reorder the line."""
    return _TERMINAL_CONTROLS.sub(_escaped, line)


def json_for_people(text: str) -> str:
    """JSON text a person approves: a character that would reorder or hide what is shown (U+202E in a script's
    name shows what follows it backwards) is written as its escape, which is the same string to a parser."""
    return _HIDING_CHARACTERS.sub(_escaped, text)


def _escaped(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code > 0xFFFF:  # JSON escapes a character beyond the BMP as its UTF-16 surrogate pair
        high, low = divmod(code - 0x10000, 0x400)
        return f"\\u{0xD800 + high:04x}\\u{0xDC00 + low:04x}"
    return f"\\u{code:04x}"
