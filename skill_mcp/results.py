"""The answer conventions (SPEC §5.3): a tool's success is minified JSON in one text item, its refusal
`ToolFailure`'s message and hint as plain text; bad input to any other method is `BadRequest`, JSON-RPC -32602."""

from __future__ import annotations

import json
from typing import Any

from .text import encodable, os_error_text, quoted_path


class BadRequest(Exception):
    """Bad input on a non-tool method: becomes JSON-RPC -32602 with this message."""


class ToolFailure(Exception):
    """A refusal the caller can act on: `message`, then an optional hint."""

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def text(self) -> str:
        return self.message if not self.hint else f"{self.message}\n\nHint: {self.hint}"


def text_result(text: str, *, is_error: bool = False) -> dict[str, Any]:
    # A result as a plain dict, as a model dumps it: the SDK validates it against the session's protocol revision
    # on its way out (a legacy one drops `resultType`), and no model is built and dumped per call.
    return {"content": [{"type": "text", "text": text}], "isError": is_error, "resultType": "complete"}


def failure_result(failure: ToolFailure) -> dict[str, Any]:
    # A refusal may quote a path under a non-UTF-8 root or data directory: lone surrogates no answer can carry.
    return text_result(encodable(failure.text()), is_error=True)


def minified(value: Any) -> str:
    """Single-line JSON, non-ASCII as UTF-8: what `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`
    writes, through pydantic-core's encoder, several times faster on a large file."""
    from pydantic_core import PydanticSerializationError, to_json  # imported here: `check` and `list` stay light

    try:
        return to_json(value).decode()
    except PydanticSerializationError:
        # A lone surrogate (a root path's non-UTF-8 byte) is no UTF-8: written as its JSON escape, `\udcff`,
        # it reaches the client as the same string and leaves the line writable.
        return encodable(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def read_error_text(rel: str, error: OSError) -> str:
    return f"{quoted_path(rel)} could not be read: {os_error_text(error)}"
