"""Path discipline: the string check (SPEC §6.1), then the resolve check (§6.2)."""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from .limits import MAX_PATH_CHARS
from .text import encodes_as_utf8, os_error_text, quoted, quoted_path

PATH_HINT = (
    "Paths are relative to the skill's own directory: plain segments separated by \"/\", "
    'no leading "/", no "." or ".." segment. Call skill_load to see the exact paths.'
)

_MISSING_ERRNOS = frozenset({errno.ENOENT, errno.ENOTDIR, errno.ELOOP})


def _lstat_error(path: str) -> OSError | None:
    try:
        os.lstat(path)
    except OSError as error:
        return error
    return None


def is_missing(path: str) -> bool:
    """Whether nothing is at `path` (not os.path.lexists: that is False too for a path the server may not reach)."""
    error = _lstat_error(path)
    return error is not None and error.errno in _MISSING_ERRNOS


def reach_error(path: str) -> OSError | None:
    """What keeps the server's user from `path` (EACCES, say), which may be there; None when it is there, or missing."""
    error = _lstat_error(path)
    return None if error is None or error.errno in _MISSING_ERRNOS else error


def path_refusal(rel: object) -> str | None:
    """The §6.1 reason `rel` is refused, first matching rule wins; None when it is usable."""
    if not isinstance(rel, str) or not rel:
        return "it is empty"
    if len(rel) > MAX_PATH_CHARS:
        return f"it is longer than {MAX_PATH_CHARS} characters"
    if "\0" in rel:
        return "it contains a NUL byte"
    if not encodes_as_utf8(rel):
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


def real_path(path: str) -> str:
    """os.path.realpath(strict=True), except that a link loop Python follows without end (one through
    /proc/<pid>/root into another mount namespace) is the OSError (ELOOP) it is, not a RecursionError that would
    end the server."""
    try:
        return os.path.realpath(path, strict=True)
    except RecursionError:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), path) from None


def is_within(path: str, base: str, strictly: bool = False) -> bool:
    """Whether `path` is `base` (unless strictly) or lies under it, compared as written (no resolving here)."""
    if path == base:
        return not strictly
    return path.startswith(os.path.join(base, ""))


def describe_refusal(rel: str, reason: str) -> str:
    """The refusal message: the path JSON-quoted and cut to 120 characters (§6.1), then the reason."""
    return f"path {quoted(rel)} is not usable: {reason}"


class PathRefused(Exception):
    """A refused path: `message`, and a `hint` that skill_run appends; a file's own error in skill_file, a resource
    read or the catalog shows the message only (§7.3)."""

    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


class UnreadableFile(OSError):
    """A file that passed the resolve check but could not be opened for reading (EACCES): `status` is what the check
    saw, so skill_file still counts it against the call's budget (§7.3 step 2)."""

    def __init__(self, error: OSError, status: os.stat_result) -> None:
        super().__init__(error.errno, error.strerror)
        self.status = status


def _open_for_reading(path: str, flags: int, status: os.stat_result) -> int:
    try:
        return os.open(path, flags)
    except OSError as error:
        raise UnreadableFile(error, status) from error


class NotRegularFile(PathRefused):
    """A directory, FIFO, device…: only regular files are read or run."""

    def __init__(self, subject: str) -> None:
        super().__init__(f"{subject} is not a regular file", "Only regular files can be read or executed.")


# Linux can check a file before opening it for reading: an O_PATH handle follows the links without
# touching the file, /proc tells its real path, and reopening the handle reads exactly what was checked.
_CHECK_THEN_OPEN = hasattr(os, "O_PATH") and os.path.isdir("/proc/self/fd")
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC  # O_NONBLOCK: a FIFO swapped in cannot block the open


class _OpenHow(ctypes.Structure):  # struct open_how, openat2(2)
    _fields_ = (("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64))


class Openat2:
    """openat2(2) with RESOLVE_NO_SYMLINKS (Linux 5.6+), called by its number through libc's syscall(): it opens
    a path (for reading, unless other flags are given) only when none of the path's components is a link."""

    SYSCALL_NUMBERS = {"x86_64": 437, "aarch64": 437}
    _AT_FDCWD, _RESOLVE_NO_SYMLINKS = -100, 0x04

    def __init__(self, number: int, flags: int = _READ_FLAGS) -> None:
        self._number = number
        self._syscall = ctypes.CDLL(None, use_errno=True).syscall
        self._syscall.restype = ctypes.c_long
        self._syscall.argtypes = (ctypes.c_long, ctypes.c_int, ctypes.c_char_p, ctypes.c_void_p, ctypes.c_size_t)
        self._how = _OpenHow(flags, 0, self._RESOLVE_NO_SYMLINKS)
        self._how_ref, self._how_size = ctypes.byref(self._how), ctypes.sizeof(self._how)
        self.usable = True

    @classmethod
    def for_this_machine(cls, flags: int = _READ_FLAGS) -> Openat2 | None:
        number = cls.SYSCALL_NUMBERS.get(os.uname().machine) if sys.platform == "linux" else None
        return cls(number, flags) if number is not None else None

    def __call__(self, path: str) -> int | None:
        """A descriptor on `path`; None when a component is a link or the open fails for any reason."""
        if not self.usable:
            return None
        fd = self._syscall(self._number, self._AT_FDCWD, os.fsencode(path), self._how_ref, self._how_size)
        if fd >= 0:
            return fd
        # An older kernel, or a seccomp filter (a container runtime's) that refuses the call: never try again.
        self.usable = ctypes.get_errno() not in (errno.ENOSYS, errno.EPERM, errno.EINVAL, errno.E2BIG)
        return None


_OPEN_LINK_FREE = Openat2.for_this_machine()
_OPEN_DIRECTORY_LINK_FREE = Openat2.for_this_machine(os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
_OPEN_HANDLE_LINK_FREE = Openat2.for_this_machine(os.O_PATH | os.O_CLOEXEC) if _CHECK_THEN_OPEN else None


def _descriptor_path(fd: int) -> str:
    """The real path of what `fd` refers to now, as the kernel tells it (Linux, `_CHECK_THEN_OPEN`)."""
    return os.readlink(f"/proc/self/fd/{fd}")


def _is_real_path_here(path: str, status: os.stat_result) -> bool:
    """Whether `path` is, in this process's view, a path with no link in it to the file `status` describes."""
    handle = _OPEN_HANDLE_LINK_FREE(path) if _OPEN_HANDLE_LINK_FREE is not None else None
    if handle is not None:  # three system calls, where the walk takes one per component
        try:
            here = os.fstat(handle)
        finally:
            os.close(handle)
    else:
        try:
            here = _status_through_no_link(path)
        except OSError:
            return False
    return os.path.samestat(here, status)


# Each component opened below the last with O_NOFOLLOW; O_PATH (Linux) needs only search permission on directories.
_WALK_DIRECTORY_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_WALK_TARGET_FLAGS = getattr(os, "O_PATH", os.O_RDONLY | os.O_NONBLOCK) | os.O_NOFOLLOW | os.O_CLOEXEC


def _status_through_no_link(path: str) -> os.stat_result:
    """The status of what absolute, normalized `path` names, reached through no link: opened one component at a
    time below the last, so a link swapped in anywhere on it, at any moment, fails the walk instead of being followed
    (a realpath and a stat, two separate walks, can each see a different side of such a swap)."""
    parts = path.split("/")
    if parts[0] != "" or any(part in ("", ".", "..") for part in parts[1:]):
        raise OSError(errno.EINVAL, f"not a normalized absolute path: {path!r}")
    *directories, name = parts[1:]
    fd = os.open("/", _WALK_DIRECTORY_FLAGS)
    try:
        for directory in directories:
            parent, fd = fd, os.open(directory, _WALK_DIRECTORY_FLAGS, dir_fd=fd)
            os.close(parent)
        target = os.open(name, _WALK_TARGET_FLAGS, dir_fd=fd)
    finally:
        os.close(fd)
    try:
        return os.fstat(target)
    finally:
        os.close(target)


def open_directory_in_place(directory: str) -> int | None:
    """A descriptor for listing `directory`, a real path, or None when it cannot be opened or is no longer there
    (it, or a directory on the way, was swapped for a link). Entries are then read and stat'ed through the
    descriptor, so a swap after this check changes nothing about what is listed."""
    if _OPEN_DIRECTORY_LINK_FREE is not None:
        fd = _OPEN_DIRECTORY_LINK_FREE(directory)  # one call for the usual directory, which has no link on its path
        if fd is not None:
            return fd
    # Anything else (a link swapped in, an error openat2 may give for its own reasons, no openat2): the checked open.
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    if not _is_real_path_here(directory, os.fstat(fd)):
        os.close(fd)
        return None
    return fd


def _real_dir(path: str) -> str:
    if not _CHECK_THEN_OPEN:
        return real_path(path)
    # One open and one readlink, where realpath lstats every component of the path.
    handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
    try:
        return _descriptor_path(handle)
    finally:
        os.close(handle)


class SkillDir:
    """A skill's directory, given as the real path discovery found; every file is checked as it is opened (§6.2).

    A file whose real path lies under that path is inside with no further system call (a path with a link in it
    is never a prefix of a real path). Otherwise the directory is resolved once more: if it was moved or swapped
    for a link since boot, nothing in it is served, since the link could lead anywhere.
    """

    def __init__(self, skill_dir: str) -> None:
        self._given = skill_dir
        # Compared with a trailing "/" so a sibling such as "<skill>-evil" is not taken for inside.
        self._given_prefix = os.path.join(skill_dir, "")
        self._in_place = False

    def check_in_place(self) -> None:
        """PathRefused unless the directory still resolves to the real path discovery found (§6.2 step 2)."""
        if self._in_place:
            return
        try:
            resolved = _real_dir(self._given)
        except OSError:
            raise PathRefused(
                "the skill's directory is not readable",
                "The skills slot may not be mounted; call skill_list to see what is served.",
            ) from None
        if resolved != self._given:
            raise PathRefused(
                "the skill's directory is no longer where the server found it at start: it was moved, or it or a "
                "directory above it was replaced by a link",
                "Restart the server to serve the skills as they are now; call skill_list to see what is served.",
            )
        self._in_place = True

    def open(self, rel: str) -> tuple[int, str, os.stat_result]:
        """A descriptor open for reading on regular file `rel` inside this skill, its real path, and the
        status it was checked by (the descriptor's own)."""
        reason = path_refusal(rel)
        if reason is not None:
            raise PathRefused(describe_refusal(rel, reason), PATH_HINT)
        path = f"{self._given}/{rel}"  # rel passed the string check: no leading "/", no ".."
        if (opened := self._open_link_free(path)) is not None:
            return opened
        if not _CHECK_THEN_OPEN:
            return self._open_by_real_path(rel, path)
        try:
            handle = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError as error:
            raise self._not_a_file(rel, error) from None
        try:
            real, status = _descriptor_path(handle), os.fstat(handle)
            if status.st_nlink == 0:  # removed or replaced since it was opened: its path now reads "… (deleted)"
                raise PathRefused(f"{quoted_path(rel)} was removed or replaced while it was opened", "Call again.")
            self._check(rel, real, status)
            # The kernel words the path in the file's own mount namespace: a link through /proc/<pid>/root can reach
            # a file mounted over `real` in another one, or make a link here lead back into the skill.
            if not _is_real_path_here(real, status):
                raise self._outside(rel)
            # Reopening the handle opens the very inode checked, so `status` is the descriptor's too.
            return _open_for_reading(f"/proc/self/fd/{handle}", _READ_FLAGS, status), real, status
        finally:
            os.close(handle)

    @contextmanager
    def opened(self, rel: str) -> Iterator[tuple[int, os.stat_result]]:
        fd, _, status = self.open(rel)
        try:
            yield fd, status
        finally:
            os.close(fd)

    def _open_link_free(self, path: str) -> tuple[int, str, os.stat_result] | None:
        """The usual file, opened in three system calls: a regular file reached through no link. Its path is then
        its real path, under the discovered directory, so it is inside. Anything else (a link anywhere in the
        path, a missing file, no openat2) returns None, and the full check decides."""
        if _OPEN_LINK_FREE is None:
            return None
        try:
            checked = os.stat(path, follow_symlinks=False)
        except OSError:
            return None
        # Only what lstat has just shown to be a regular file is opened here, so a device node is not opened to be
        # refused (short of a swap between the two calls, which the check of what was opened then catches).
        if not stat.S_ISREG(checked.st_mode):
            return None
        fd = _OPEN_LINK_FREE(path)
        if fd is None:
            return None
        status = os.fstat(fd)
        # The type is checked again: a file removed since the lstat frees its inode number, which a FIFO or device
        # node made in its place can take, so the same number alone does not prove the same file.
        if stat.S_ISREG(status.st_mode) and os.path.samestat(status, checked):
            return fd, path, status
        os.close(fd)  # swapped since the stat: the full check decides
        return None

    def _open_by_real_path(self, rel: str, path: str) -> tuple[int, str, os.stat_result]:
        try:
            real = real_path(path)
            status = os.stat(real)
        except OSError as error:
            raise self._not_a_file(rel, error) from None
        self._check(rel, real, status)
        # Opened by its checked real path: O_NOFOLLOW refuses a final link swapped in since, and a file swapped in is
        # checked again. A directory on the way swapped for a link is followed by the open, so the path, walked
        # through no link, must still name the opened inode: a swap undone since leaves the walk another one.
        fd = _open_for_reading(real, _READ_FLAGS | os.O_NOFOLLOW, status)
        try:
            status = os.fstat(fd)
            self._check(rel, real, status)
            if not _is_real_path_here(real, status):
                raise self._outside(rel)
        except BaseException:
            os.close(fd)
            raise
        return fd, real, status

    def _check(self, rel: str, real: str, status: os.stat_result) -> None:
        if not (real.startswith(self._given_prefix) or real == self._given):  # the directory itself: not regular
            self.check_in_place()
            raise self._outside(rel)
        if not stat.S_ISREG(status.st_mode):
            raise NotRegularFile(quoted_path(rel))

    def _outside(self, rel: str) -> PathRefused:
        return PathRefused(
            f"{quoted_path(rel)} resolves outside the skill's own directory",
            "A file or symlink may only be read from inside its own skill.",
        )

    def _not_a_file(self, rel: str, error: OSError) -> PathRefused:
        self.check_in_place()  # an unreadable or moved directory is reported as such
        if error.errno in (errno.EACCES, errno.EPERM):  # there may well be a file: say what stands in the way
            return PathRefused(
                f"{quoted_path(rel)} is not a file in this skill that the server can reach: {os_error_text(error)}",
                "The server's user must be allowed to enter every directory on the way to the file.",
            )
        return PathRefused(f"{quoted_path(rel)} is not a file in this skill", "Call skill_load for the exact files.")
