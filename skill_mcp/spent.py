"""Spent approvals (SPEC §11.6): a token or request state runs once. Kept in memory, or in files that survive a
restart: one per nonce under `<MCP_DATA_DIR>/.mcp-confirm/spent/`. The file store is an I/O edge."""

from __future__ import annotations

import contextlib
import os
import re
import stat
from typing import Protocol

from .text import os_error_text

NONCE_PATTERN = re.compile(r"[A-Za-z0-9_-]{22}")  # 16 bytes, base64url without padding: a record's file name


def is_expired(expires_ms: int, now_ms: int) -> bool:
    # An approval lives for [issue, exp): at exp itself it is gone, and so may its spent record be.
    return now_ms >= expires_ms


def store_dirs(data_dir: str) -> tuple[str, str]:
    """The file store's two levels in `data_dir`: `.mcp-confirm`, and `spent` in it."""
    store = os.path.join(data_dir, ".mcp-confirm")
    return store, os.path.join(store, "spent")


class SpentStoreError(Exception):
    """The store could not record a spend; the caller refuses the run (fail closed)."""


class SpentStore(Protocol):
    def is_spent(self, nonce: str) -> bool: ...

    def spend(self, nonce: str, expires_ms: int, now_ms: int) -> bool:
        """Record the nonce; False if it was already spent. Raises SpentStoreError if it cannot."""
        ...


class MemorySpentStore:
    def __init__(self) -> None:
        self._expiry_by_nonce: dict[str, int] = {}

    def is_spent(self, nonce: str) -> bool:
        return nonce in self._expiry_by_nonce

    def spend(self, nonce: str, expires_ms: int, now_ms: int) -> bool:
        self._expiry_by_nonce = {
            spent: expiry for spent, expiry in self._expiry_by_nonce.items() if not is_expired(expiry, now_ms)
        }
        if nonce in self._expiry_by_nonce:
            return False
        self._expiry_by_nonce[nonce] = expires_ms
        return True


class FileSpentStore:
    """One file per spent nonce under `<data_dir>/.mcp-confirm/spent/`, so approvals survive restarts."""

    def __init__(self, data_dir: str) -> None:
        self._levels = store_dirs(data_dir)
        self.directory = self._levels[1]

    def _path(self, nonce: str) -> str:
        if NONCE_PATTERN.fullmatch(nonce) is None:
            raise ValueError("a nonce is 22 base64url characters")
        return os.path.join(self.directory, nonce)

    def is_spent(self, nonce: str) -> bool:
        # A record that cannot be read here still cannot be created by spend(), which then fails closed.
        return os.path.lexists(self._path(nonce))

    def spend(self, nonce: str, expires_ms: int, now_ms: int) -> bool:
        path = self._path(nonce)
        try:
            # Only the store's own two levels: a mistyped MCP_DATA_DIR fails the spend rather than appearing. Each is
            # made private whatever the umask: were `.mcp-confirm` open, another uid could move `spent` away.
            for directory in self._levels:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(directory, 0o700)
                os.chmod(directory, 0o700)
            try:
                descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            except FileExistsError:
                return False
            with os.fdopen(descriptor, "w", encoding="ascii") as record:
                record.write(str(expires_ms))
        except OSError as error:
            raise SpentStoreError(f"cannot record a spent approval in {self.directory}: {os_error_text(error)}") from error
        self._prune(now_ms, keep=nonce)
        return True

    def _prune(self, now_ms: int, keep: str) -> None:
        # Best effort: a record left behind only costs disk, never a second run.
        try:
            names = os.listdir(self.directory)
        except OSError:
            return
        for name in names:
            if name == keep or NONCE_PATTERN.fullmatch(name) is None:
                continue
            path = os.path.join(self.directory, name)
            try:
                expiry = _read_record(path)
                if expiry is not None and is_expired(expiry, now_ms):
                    os.unlink(path)
            except (OSError, ValueError):
                continue


def _read_record(path: str) -> int | None:
    """A spent record's expiry; None for anything but a small regular file. A script of the server's uid can
    write here, and a FIFO opened the ordinary way would block the server for good."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return int(os.read(fd, 32).decode("ascii"))
    finally:
        os.close(fd)


def store_writable(data_dir: str) -> bool:
    """Whether the server's user may write in the store, or create what of it is missing (a read-only filesystem
    counts as not writable)."""
    store, spent = store_dirs(data_dir)
    for directory in (spent, store, data_dir):
        if os.path.isdir(directory):
            return os.access(directory, os.W_OK | os.X_OK)
    return False


def store_owned(data_dir: str) -> bool:
    """Whether the store's existing levels are the server's user's own: a spend makes each private, which only
    its owner (or root) may."""
    for directory in store_dirs(data_dir):
        try:
            if os.geteuid() != 0 and os.stat(directory).st_uid != os.geteuid():
                return False
        except OSError:  # missing: the spend creates it, as this user
            continue
    return True
