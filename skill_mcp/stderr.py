"""stderr for logs and notes (SPEC §5.1, §13): never stdout, and never a reason for the server to stop."""

from __future__ import annotations

import atexit
import errno
import os
import queue
import sys
import threading
from typing import Any

BACKLOG_LINES = 4096  # written lines waiting for a slow reader; past them, lines are dropped
EXIT_DRAIN_SECONDS = 2.0


class BackgroundStderr:
    """sys.stderr, written by a thread of its own. A client that stops reading stderr fills its pipe, and a write
    would then block whatever logged, the event loop included: no answer, no signal handled, no exit. Instead a
    line waits in a backlog, past which lines are dropped; once the reader has gone (EPIPE), fd 2 becomes
    /dev/null and every line is dropped."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._lines: queue.SimpleQueue[str | threading.Event] = queue.SimpleQueue()
        self._writer: threading.Thread | None = None
        self._starting = threading.Lock()
        # print() writes a line and its newline apart: they are handed over as one, written in one system call,
        # so a line cannot be split by another writer of fd 2.
        self._partial, self._joining = "", threading.Lock()
        atexit.register(self.drain, EXIT_DRAIN_SECONDS)

    def write(self, text: str) -> int:
        with self._joining:
            lines, newline, self._partial = (self._partial + text).rpartition("\n")
        if newline:
            self._hand_over(lines + newline)
        return len(text)

    def flush(self) -> None:
        """What was written is handed to the writer, a line ending or not; `drain` waits until it is written."""
        with self._joining:
            partial, self._partial = self._partial, ""
        if partial:
            self._hand_over(partial)

    def _hand_over(self, text: str) -> None:
        if self._writer is None:
            if sys.is_finalizing():  # no thread starts now (3.11 would wait for it forever): written here, as usual
                self._write_out(text)
                return
            self._start()  # at the first line, not before: `serve` hardens the process before any thread exists
        if self._lines.qsize() < BACKLOG_LINES:
            self._lines.put(text)

    def drain(self, seconds: float) -> None:
        """Wait, at most `seconds`, until everything written so far is written out (or dropped)."""
        self.flush()
        if self._writer is None:
            return
        written = threading.Event()
        self._lines.put(written)
        written.wait(seconds)

    def __getattr__(self, name: str) -> Any:  # fileno, isatty, encoding, …
        return getattr(self._stream, name)

    def _start(self) -> None:
        with self._starting:
            if self._writer is None:
                self._writer = threading.Thread(target=self._write_lines, name="stderr", daemon=True)
                self._writer.start()

    def _write_lines(self) -> None:
        while True:
            item = self._lines.get()
            if isinstance(item, threading.Event):
                item.set()
            else:
                self._write_out(item)

    def _write_out(self, text: str) -> None:
        try:
            self._stream.write(text)
            self._stream.flush()
        except OSError as error:
            if error.errno in (errno.EPIPE, errno.EBADF):  # for good; a full non-blocking pipe may drain again
                point_at_devnull(self._stream.fileno())  # what the stream still buffers goes there too


def point_at_devnull(fd: int) -> None:
    """From now on `fd` reads and writes /dev/null. When `fd` is closed, the open may take its very number, which
    then stays open as it is: a dup2 onto itself and a close would free it again."""
    null = os.open(os.devnull, os.O_RDWR)
    if null != fd:
        os.dup2(null, fd)
        os.close(null)


def keep_standard_fds_open() -> None:
    """A descriptor among 0-2 closed at start reads and writes /dev/null: a file opened later (the event loop's
    epoll among them) would otherwise take its number and be read as the client's messages or written as protocol."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            point_at_devnull(fd)


def install_background_stderr() -> None:
    """Logs and notes go to stderr only (§5.1: stdout is the protocol), written by a thread of their own. Started
    with fd 2 closed, Python has no sys.stderr, and print() and structlog would both write to stdout instead: fd 2,
    /dev/null by now (keep_standard_fds_open), stands in for it."""
    if sys.stderr is None:
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace", closefd=False)
    if not isinstance(sys.stderr, BackgroundStderr):
        sys.stderr = BackgroundStderr(sys.stderr)


def drain_stderr(seconds: float) -> None:
    """Before an `os._exit`: the lines logged so far are written, unless stderr's reader keeps them waiting."""
    if isinstance(sys.stderr, BackgroundStderr):
        sys.stderr.drain(seconds)
