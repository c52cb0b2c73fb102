"""Path discipline: the string check (SPEC §6.1), then the resolve check (§6.2)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager

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


class PathRefused(Exception):
    """A refused path: the tool layer shows `message`, then "\n\nHint: " and `hint`."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class NotRegularFile(PathRefused, OSError):
    """A directory, FIFO, device…; also an OSError so plain I/O callers of `read_capped` catch it."""

    def __init__(self, subject: str) -> None:
        super().__init__(f"{subject} is not a regular file", "Only regular files can be read or executed.")


# Linux can check a file before opening it for reading: an O_PATH handle follows the links without
# touching the file, /proc tells its real path, and reopening the handle reads exactly what was checked.
_CHECK_THEN_OPEN = hasattr(os, "O_PATH") and os.path.isdir("/proc/self/fd")


class SkillDir:
    """A skill's directory, resolved once per request; every file is checked as it is opened (§6.2)."""

    def __init__(self, skill_dir: str) -> None:
        try:
            self.real_dir = os.path.realpath(skill_dir, strict=True)
        except OSError:
            raise PathRefused(
                "the skill's directory is not readable",
                "The skills slot may not be mounted; call skill_list to see what is served.",
            ) from None
        # Compared with a trailing "/" so a sibling such as "<skill>-evil" is not taken for inside.
        self._inside_prefix = os.path.join(self.real_dir, "")

    def open(self, rel: str) -> tuple[int, str]:
        """A descriptor open for reading on regular file `rel` inside this skill, and its real path."""
        handle, real = self._locate(rel)
        if handle is None:
            # Without O_PATH the file is opened by its checked real path, refusing a link swapped in since.
            return os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC), real
        try:
            return os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), real
        finally:
            os.close(handle)

    @contextmanager
    def opened(self, rel: str) -> Iterator[int]:
        fd, _ = self.open(rel)
        try:
            yield fd
        finally:
            os.close(fd)

    def _locate(self, rel: str) -> tuple[int | None, str]:
        reason = path_refusal(rel)
        if reason is not None:
            raise PathRefused(describe_refusal(rel, reason), PATH_HINT)
        path = f"{self.real_dir}/{rel}"  # rel passed the string check: no leading "/", no ".."
        handle = None
        try:
            if _CHECK_THEN_OPEN:
                handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
                real, status = os.readlink(f"/proc/self/fd/{handle}"), os.fstat(handle)
            else:
                real = os.path.realpath(path, strict=True)
                status = os.stat(real)
        except OSError:
            if handle is not None:
                os.close(handle)
            raise PathRefused(f'"{rel}" is not a file in this skill', "Call skill_load for the exact files.") from None
        try:
            if real != self.real_dir and not real.startswith(self._inside_prefix):
                raise PathRefused(
                    f'"{rel}" resolves outside the skill\'s own directory',
                    "A file or symlink may only be read from inside its own skill.",
                )
            if not stat.S_ISREG(status.st_mode):
                raise NotRegularFile(f'"{rel}"')
        except PathRefused:
            if handle is not None:
                os.close(handle)
            raise
        return handle, real
