"""The files under the SDK's stdio transport (SPEC §5.1): a reader and a writer thread of their own.

The SDK's `stdio_server` reads and writes its own files through anyio's worker threads, three round trips per
request (read a line, write the answer, flush it): a third of a warm call's time (bench/). Given these files
instead, it pays one wake-up each way, and it still reads, validates and dumps every message as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import io
import os
import queue
import re
import select
import stat
import sys
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import anyio

from .limits import MAX_MESSAGE_CHARS
from .logs import get_logger
from .text import os_error_text
from .unreadable import LINE_CUT

WRITE_AHEAD_BYTES = 4 * 1024 * 1024  # answers queued for a client that is slow to read, before the server waits
STDOUT_PIPE_BYTES = 1024 * 1024  # a 1 MiB answer crosses a pipe this wide in one wake-up of the client, not 16
# A widened pipe is narrowed back once the client has read what did not fit (F_SETPIPE_SZ refuses before: EBUSY),
# tried this long after the writer fell idle, then at twice the wait, up to a second.
NARROW_FIRST_SECONDS, NARROW_MAX_SECONDS = 0.01, 1.0
_BLANK_LINE = re.compile(r"[ \t\r\n]*\Z")  # JSON's whitespace alone: no message (matched without copying the line)
_END = object()


@contextlib.asynccontextmanager
async def stdio_transport(
    wire_in: int = 0, wire_out: int = 1, on_hangup: Callable[[], None] = lambda: None
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's stdio_server over `wire_in` and `wire_out`, whose numbers read /dev/null and write to stderr
    while it serves, as the SDK's own claim does: nothing else in the process reads the client's messages or
    writes on the protocol stream. A stdout that fails (the client closed its end, or any other error, logged)
    ends it with BrokenPipeError. `on_hangup` runs, on the event loop, when the client closes its end of a pipe or
    socket stdin, maybe long before the server has read the lines it left."""
    from mcp.server.stdio import stdio_server

    with _claimed(wire_in, _null_input) as reading, _claimed(wire_out, _stderr_output) as writing:
        writer = _LineWriter(writing)
        async with anyio.create_task_group() as group:
            group.start_soon(writer.fail_when_broken)
            async with stdio_server(stdin=_LineReader(reading, on_hangup), stdout=writer) as streams:  # type: ignore[arg-type]
                yield streams
            await writer.written(0)
            group.cancel_scope.cancel()


def reports_hangup(fd: int) -> bool:
    """Whether `fd` tells of the client's close at once, by `poll`: as stdin before what was written is read, as
    stdout with nothing written. A pipe, a socket or a terminal (a pty's hangup) does; a file or /dev/null does not
    (its end is known only once read)."""
    try:
        mode = os.fstat(fd).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or os.isatty(fd)


def _pipe_size(fd: int) -> int | None:
    """The size of the pipe `fd` writes to, when it is one Linux may widen; None otherwise."""
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: no F_GETPIPE_SZ outside Linux
        if stat.S_ISFIFO(os.fstat(fd).st_mode):
            return int(fcntl.fcntl(fd, fcntl.F_GETPIPE_SZ))
    return None


def _resized_pipe(fd: int, size: int) -> int | None:
    """The pipe's size once set to `size` (rounded up by Linux), or None where it is refused: the user's pipe
    quota or pipe-max-size when widening, the bytes still unread when narrowing (EBUSY)."""
    with contextlib.suppress(OSError, AttributeError):
        return int(fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, size))
    return None


@contextlib.contextmanager
def _claimed(fd: int, diversion: Any) -> Iterator[int]:
    """A private duplicate of `fd`, which meanwhile points where `diversion()` opens, and is restored after."""
    private = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    replacement = diversion()
    os.dup2(replacement, fd)
    if replacement != fd:
        os.close(replacement)
    try:
        yield private
    finally:
        with contextlib.suppress(Exception):  # stray prints buffered meanwhile stay off the wire
            sys.stdout.flush()
        os.dup2(private, fd)  # `private` stays open: a thread may still be blocked on it


def _null_input() -> int:
    return os.open(os.devnull, os.O_RDONLY)


def _stderr_output() -> int:
    try:
        return os.dup(2)
    except OSError:  # no stderr: stray output goes nowhere
        return os.open(os.devnull, os.O_WRONLY)


class _WaitingReads(io.RawIOBase):
    """Reads of `fd` that wait for data (a non-blocking stdin's EAGAIN is not its end; its mode, shared with the
    client, is left alone), with "\r\n" and a lone "\r" made "\n" as they arrive: the text layer would hold a "\r"
    last in a read until the next byte, so a client ending its lines with "\r" would wait for answers forever."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._after_cr = False  # the last byte read was "\r": a "\n" first in the next read is that line's end

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while True:
            data = self._read(len(buffer))
            if self._after_cr and data.startswith(b"\n"):
                data = data[1:]
                self._after_cr = False
                if not data:
                    continue
            if b"\r" in data:
                self._after_cr = data.endswith(b"\r")
                data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            elif data:
                self._after_cr = False
            buffer[: len(data)] = data
            return len(data)

    def _read(self, size: int) -> bytes:
        while True:
            try:
                return os.read(self._fd, size)
            except BlockingIOError:
                readable = select.poll()
                readable.register(self._fd, select.POLLIN)
                readable.poll()


class _LineReader:
    """The wire's lines, read as the SDK's own file reads them (UTF-8, bad bytes replaced, universal newlines), on
    a thread of its own at most one line ahead of the server."""

    def __init__(self, fd: int, on_hangup: Callable[[], None]) -> None:
        self._fd, self._on_hangup = fd, on_hangup

    def __aiter__(self) -> _LineReader:
        self._loop = asyncio.get_running_loop()  # anyio.run's default backend
        self._lines: asyncio.Queue[Any] = asyncio.Queue()
        self._taken = threading.Semaphore(0)
        threading.Thread(target=self._read, name="skill-mcp stdin", daemon=True).start()
        if reports_hangup(self._fd):
            threading.Thread(target=self._watch_hangup, name="skill-mcp stdin hangup", daemon=True).start()
        return self

    async def __anext__(self) -> str:
        line = await self._lines.get()
        if line is _END:
            raise StopAsyncIteration
        self._taken.release()
        return line

    def _read(self) -> None:
        try:
            # Newlines as the SDK's file reads them: "\n", "\r\n" or a lone "\r" ends a line.
            raw = io.BufferedReader(_WaitingReads(self._fd))
            with io.TextIOWrapper(raw, encoding="utf-8", errors="replace") as wire:
                while line := wire.readline(MAX_MESSAGE_CHARS + 1):
                    if _BLANK_LINE.match(line):  # Enter pressed at a terminal, a "\n\n" ending
                        continue
                    if len(line) > MAX_MESSAGE_CHARS and not line.endswith("\n"):
                        line = line[:MAX_MESSAGE_CHARS] + LINE_CUT  # refused, answered by an id read from its start
                        while (rest := wire.readline(MAX_MESSAGE_CHARS)) and not rest.endswith("\n"):
                            pass
                    self._hand(line)
                    self._taken.acquire()
            self._hand(_END)
        except OSError as error:  # a pty whose other end closed (EIO), a reset socket: the client has left
            get_logger().warning("stdin.failed", problem=os_error_text(error))
            with contextlib.suppress(RuntimeError):
                self._hand(_END)
        except RuntimeError:  # the event loop has closed: the server is gone
            pass

    def _hand(self, item: Any) -> None:
        self._loop.call_soon_threadsafe(self._lines.put_nowait, item)

    def _watch_hangup(self) -> None:
        # A pipe reports the client's close at once, lines still unread; a pty its hangup; a socket's, asked (POLLRDHUP).
        if _hung_up(self._fd, asked=select.POLLRDHUP, seen=select.POLLHUP | select.POLLRDHUP):
            with contextlib.suppress(RuntimeError):  # the event loop has closed: the server is gone
                self._loop.call_soon_threadsafe(self._on_hangup)


class _LineWriter:
    """Answers written in order by a thread of their own; the server waits only when more than WRITE_AHEAD_BYTES
    wait for a client that is not reading."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._loop = asyncio.get_running_loop()
        self._chunks: queue.SimpleQueue[bytes] = queue.SimpleQueue()
        self._pending = 0  # bytes queued and not yet written; under _lock
        self._lock = threading.Lock()
        self._waiters: list[tuple[int, asyncio.Future[None]]] = []  # (pending bytes awaited, future); under _lock
        self._broken: asyncio.Future[None] = self._loop.create_future()
        # The client's pipe is widened for an answer longer than it only (at most to STDOUT_PIPE_BYTES), and
        # narrowed back after: its pages count against the user's pipe quota (pipe-user-pages-soft, 64 MiB), past
        # which every new pipe of that user, the client's and its other programs' included, gets 8 KiB. Widened
        # for good, 64 idle servers would spend it all.
        self._narrow_size = self._size = _pipe_size(fd)
        threading.Thread(target=self._write, name="skill-mcp stdout", daemon=True).start()
        if reports_hangup(fd):  # a pipe with no reader left (POLLERR), a socket or terminal hung up (POLLHUP)
            threading.Thread(target=self._watch_reader, name="skill-mcp stdout reader", daemon=True).start()

    async def write(self, text: str) -> None:
        data = text.encode()
        with self._lock:
            self._pending += len(data)
        self._chunks.put(data)

    async def flush(self) -> None:
        await self.written(WRITE_AHEAD_BYTES)

    async def written(self, at_most: int) -> None:
        """Returns once at most `at_most` bytes wait to be written; raises the writer's error if it failed."""
        with self._lock:
            if self._pending <= at_most or self._broken.done():
                waiter = None
            else:
                waiter = self._loop.create_future()
                self._waiters.append((at_most, waiter))
        if waiter is not None:
            await asyncio.wait([waiter, self._broken], return_when=asyncio.FIRST_COMPLETED)
        if self._broken.done():
            self._broken.result()

    async def fail_when_broken(self) -> None:
        await asyncio.shield(self._broken)

    def _watch_reader(self) -> None:
        # The client closing its end of stdout is its leaving, seen here at once: at the next write (which an idle
        # session, its stdin still open, never makes) it would come too late for §5.1's 5 s. Nothing is asked:
        # POLLERR (a pipe's reader gone) and POLLHUP (a socket's or terminal's) are always reported.
        if _hung_up(self._fd, asked=0, seen=select.POLLERR | select.POLLHUP):
            with contextlib.suppress(RuntimeError):  # the event loop has closed: the server is gone
                self._loop.call_soon_threadsafe(_settle, self._broken, BrokenPipeError(errno.EPIPE, "stdout closed"))

    def _next_chunk(self) -> bytes:
        wait = NARROW_FIRST_SECONDS
        while self._size is not None and self._narrow_size is not None and self._size > self._narrow_size:
            try:
                return self._chunks.get(timeout=wait)
            except queue.Empty:
                if _resized_pipe(self._fd, self._narrow_size) is not None:
                    self._size = self._narrow_size
                wait = min(2 * wait, NARROW_MAX_SECONDS)
        return self._chunks.get()

    def _widen_for(self, size: int) -> None:
        wanted = min(size, STDOUT_PIPE_BYTES)
        if self._size is None or self._size >= wanted:
            return
        if self._size == self._narrow_size:  # as the client left it, which it may have resized since: asked again
            self._narrow_size = self._size = _pipe_size(self._fd) or self._size
            if self._size >= wanted:
                return
        self._size = _resized_pipe(self._fd, wanted) or self._size

    def _write(self) -> None:
        try:
            while True:
                data = memoryview(self._next_chunk())
                size = len(data)
                self._widen_for(size)
                while data:
                    try:
                        data = data[os.write(self._fd, data) :]
                    except BlockingIOError:  # a descriptor inherited non-blocking: wait until the client reads
                        writable = select.poll()  # select() refuses descriptors past 1023
                        writable.register(self._fd, select.POLLOUT)
                        writable.poll()
                with self._lock:
                    self._pending -= size
                    ready = [waiter for at_most, waiter in self._waiters if self._pending <= at_most]
                    self._waiters = [each for each in self._waiters if each[1] not in ready]
                for waiter in ready:
                    self._loop.call_soon_threadsafe(_settle, waiter, None)
        except Exception as error:  # noqa: BLE001 - whatever stops this thread, no answer can reach the client
            if self._loop.is_closed():  # the server is gone
                return
            if not isinstance(error, BrokenPipeError):  # the client closing its end is no failure
                code = errno.errorcode.get(getattr(error, "errno", None))
                get_logger().warning("stdout.failed", errorType=type(error).__name__, errno=code)
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(_settle, self._broken, BrokenPipeError(errno.EPIPE, "stdout failed"))


def _hung_up(fd: int, asked: int, seen: int) -> bool:
    """Waits until `poll` reports one of `seen` on `fd`, `asked` registered; False if polling fails."""
    watch = select.poll()
    watch.register(fd, asked)
    try:
        events = watch.poll()
    except OSError:
        return False
    return any(happened & seen for _, happened in events)


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.done():
        return
    if error is None:
        future.set_result(None)
    else:
        future.set_exception(error)
