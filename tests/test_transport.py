"""The files under the SDK's stdio transport (skill_mcp/transport.py), over real pipes and real descriptors.

The SDK must read and write through them (its own files would read this process's stdin), the server must
wait for a client that stops reading, and a client that closes its end must end the session.
"""

from __future__ import annotations

import fcntl
import json
import os
import resource
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager, suppress

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage

from skill_mcp.transport import STDOUT_PIPE_BYTES, WRITE_AHEAD_BYTES, stdio_transport

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def answer(request_id: int, text: str = "") -> SessionMessage:
    return SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=request_id, result={"text": text}))


@contextmanager
def collected(fd: int, lines: int) -> Iterator[bytearray]:
    """The first `lines` lines read from `fd`, read on a thread meanwhile (the transport keeps its end open)."""
    received = bytearray()

    def read() -> None:
        while received.count(b"\n") < lines and (chunk := os.read(fd, 1 << 16)):
            received.extend(chunk)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        yield received
    finally:
        reader.join(10)


@pytest.mark.parametrize("stdin", ["pipe", "socket"])
async def test_the_clients_close_is_seen_while_the_lines_it_left_are_still_unread(stdin: str) -> None:
    # §5.1's 5 s count from the client's close, which a backlog of lines would hide until they were all read.
    if stdin == "pipe":
        wire_in, client_out = os.pipe()
    else:
        wire_in, client_out = (each.detach() for each in socket.socketpair())
    client_in, wire_out = os.pipe()
    os.write(client_out, b'{"jsonrpc":"2.0","id":1,"method":"ping"}\n' * 3)
    hung_up = anyio.Event()
    async with stdio_transport(wire_in, wire_out, on_hangup=hung_up.set) as (read_stream, write_stream):
        with anyio.fail_after(5):
            await read_stream.receive()
        assert not hung_up.is_set()
        os.close(client_out)
        with anyio.fail_after(5):
            await hung_up.wait()  # two lines are still to be read
        assert [(await read_stream.receive()).message.id for _ in range(2)] == [1, 1]
        await write_stream.aclose()
    for fd in (wire_in, client_in, wire_out):
        os.close(fd)


async def test_the_sdk_reads_and_writes_the_given_pipes_through_the_transports_threads() -> None:
    wire_in, client_out = os.pipe()
    client_in, wire_out = os.pipe()
    os.write(client_out, b'{"jsonrpc":"2.0","method":"notifications/initialized"}\r\n')
    os.write(client_out, b'{"jsonrpc":"2.0","id":1,"method":"ping","params":{"_meta":{"k":"\xff"}}}\n')
    os.write(client_out, b'{"jsonrpc":"2.0","id":2,"method":"ping"}\r{"jsonrpc":"2.0","id":3,"method":"ping"}\r')
    os.write(client_out, b"not json\n")
    os.close(client_out)
    async with stdio_transport(wire_in, wire_out) as (read_stream, write_stream):
        items = [await read_stream.receive()]
        assert {"skill-mcp stdin", "skill-mcp stdout"} <= {thread.name for thread in threading.enumerate()}
        items += [item async for item in read_stream]
        await write_stream.send(answer(1, "é"))
        await write_stream.aclose()
    assert [type(item.message).__name__ for item in items[:2]] == ["JSONRPCNotification", "JSONRPCRequest"]
    assert items[1].message.params["_meta"] == {"k": "\ufffd"}  # bad UTF-8 replaced, as the SDK's own file does
    assert [item.message.id for item in items[2:4]] == [2, 3]  # a lone CR ends a line too, as it does there
    assert isinstance(items[4], Exception) and len(items) == 5
    assert json.loads(os.read(client_in, 1 << 16)) == {"jsonrpc": "2.0", "id": 1, "result": {"text": "é"}}


async def test_the_server_waits_for_a_client_that_stops_reading_and_goes_on_when_it_reads() -> None:
    wire_in, client_out = os.pipe()
    client_in, wire_out = os.pipe()
    chunk = "x" * (1 << 20)
    async with stdio_transport(wire_in, wire_out) as (_, write_stream):
        sent = 0
        with anyio.move_on_after(2):
            while True:
                await write_stream.send(answer(sent, chunk))
                sent += 1
        # Nothing reads: the server stopped once the write-ahead was full, not before and not much after.
        assert WRITE_AHEAD_BYTES <= sent * len(chunk) <= WRITE_AHEAD_BYTES + 2 * len(chunk)
        with collected(client_in, sent + 1) as received:
            await write_stream.send(answer(sent, "last"))
            await write_stream.aclose()
            os.close(client_out)
    # Every answer queued before the transport closed was written, in order.
    lines = bytes(received).splitlines()
    assert [json.loads(line)["id"] for line in lines] == list(range(sent + 1))


async def test_a_client_that_closes_its_end_of_stdout_ends_the_session_with_broken_pipe() -> None:
    wire_in, client_out = os.pipe()
    client_in, wire_out = os.pipe()
    os.close(client_in)
    os.close(client_out)  # the end of input ends nothing here: only the broken pipe may end the wait below
    started = time.monotonic()
    with pytest.raises(BaseExceptionGroup) as ended:
        async with stdio_transport(wire_in, wire_out) as (_, write_stream):
            await write_stream.send(answer(1))
            await anyio.sleep(10)  # the broken pipe cancels this wait; no later write is needed to notice it
            await write_stream.aclose()
    assert ended.group_contains(BrokenPipeError)
    assert time.monotonic() - started < 5


@pytest.mark.parametrize("descriptors_below", [0, 1100])
async def test_a_stdout_inherited_non_blocking_is_waited_for_not_taken_for_a_failure(descriptors_below: int) -> None:
    wire_in, client_out = os.pipe()
    client_in, wire_out = os.pipe()
    os.set_blocking(wire_out, False)
    chunk = "x" * (1 << 20)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, 4096)), hard))
    # With every number up to 1100 taken, the transport's own copy of stdout lies past what select() can watch.
    taken = [os.open(os.devnull, os.O_RDONLY) for _ in range(descriptors_below)]
    try:
        with collected(client_in, 3) as received:  # 1 MiB answers outrun the client's reads: the writer meets EAGAIN
            async with stdio_transport(wire_in, wire_out) as (_, write_stream):
                for request_id in range(3):
                    await write_stream.send(answer(request_id, chunk))
                await write_stream.aclose()
                os.close(client_out)
    finally:
        for fd in taken:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert [json.loads(line)["id"] for line in bytes(received).splitlines()] == [0, 1, 2]


async def test_a_stdout_that_fails_otherwise_ends_the_session_too() -> None:
    wire_in, client_out = os.pipe()
    os.close(client_out)
    with pytest.raises(BaseExceptionGroup) as ended:
        async with stdio_transport(wire_in, os.open("/dev/full", os.O_WRONLY)) as (_, write_stream):
            await write_stream.send(answer(1))
            await anyio.sleep(10)
            await write_stream.aclose()
    assert ended.group_contains(BrokenPipeError)


# The process's own stdin and stdout: while serving, fd 0 reads /dev/null and fd 1 writes to stderr.
CLAIM_PROBE = """
import os, anyio
from skill_mcp.transport import stdio_transport

async def main():
    async with stdio_transport() as (read_stream, write_stream):
        os.write(1, b"stray\\n")
        seen = {"fd0": os.read(0, 10).decode()}
        async for item in read_stream:
            seen["method"] = item.message.method
            break
        await write_stream.send(item.__class__(item.message.__class__(jsonrpc="2.0", method="notifications/echo")))
        await write_stream.aclose()
    os.write(1, (str(seen) + "\\n").encode())

anyio.run(main)
"""


def test_stdin_and_stdout_read_null_and_write_to_stderr_while_serving_and_come_back_after() -> None:
    finished = subprocess.run(
        [sys.executable, "-c", CLAIM_PROBE],
        input=b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
        capture_output=True,
        timeout=30,
        check=True,
    )
    lines = finished.stdout.decode().splitlines()
    assert json.loads(lines[0]) == {"jsonrpc": "2.0", "method": "notifications/echo"}
    assert lines[1:] == ["{'fd0': '', 'method': 'notifications/initialized'}"]
    assert finished.stderr == b"stray\n"


async def test_a_stdout_pipe_is_widened_for_a_large_answer_only_and_narrowed_back_once_it_is_read() -> None:
    # Its pages count against the user's pipe quota, which 64 servers widened for good would spend.
    wire_in, client_out = os.pipe()
    client_in, wire_out = os.pipe()
    narrow = fcntl.fcntl(client_in, fcntl.F_GETPIPE_SZ)
    assert narrow < STDOUT_PIPE_BYTES
    async with stdio_transport(wire_in, wire_out) as (_, write_stream):
        await write_stream.send(answer(1))
        assert os.read(client_in, narrow).count(b"\n") == 1
        assert fcntl.fcntl(client_in, fcntl.F_GETPIPE_SZ) == narrow
        for request_id in (2, 3):  # and widened again for the next large answer, once narrowed back
            await write_stream.send(answer(request_id, "x" * (STDOUT_PIPE_BYTES // 2)))
            large = answer(request_id, "x" * (STDOUT_PIPE_BYTES // 2))
            line = len(large.message.model_dump_json(by_alias=True, exclude_unset=True)) + 1
            deadline = time.monotonic() + 5
            while unread(client_in) < line:  # the whole answer in the pipe, written at once: it was widened
                assert time.monotonic() < deadline, unread(client_in)
                await anyio.sleep(0.01)
            assert fcntl.fcntl(client_in, fcntl.F_GETPIPE_SZ) == STDOUT_PIPE_BYTES
            received = b""
            while len(received) < line:
                received += os.read(client_in, 1 << 20)
            while fcntl.fcntl(client_in, fcntl.F_GETPIPE_SZ) != narrow:
                assert time.monotonic() < deadline, "never narrowed back"
                await anyio.sleep(0.01)
        await write_stream.aclose()
        os.close(client_out)


def unread(fd: int) -> int:
    import termios

    return int.from_bytes(fcntl.ioctl(fd, termios.FIONREAD, b"\0" * 4), sys.byteorder)


async def test_a_session_leaves_no_descriptor_open_but_duplicates_of_its_own_pipes() -> None:
    # What stood in for stdin and stdout meanwhile (/dev/null, a duplicate of stderr) is closed after; a private
    # duplicate of a pipe may stay open, as a thread may still be blocked on it.
    wire_in, client_out = os.pipe()
    client_in, wire_out = os.pipe()
    before = open_files()
    async with stdio_transport(wire_in, wire_out) as (_, write_stream):
        await write_stream.aclose()
        os.close(client_out)
    left_open = open_files() - before
    assert set(left_open) <= {os.fstat(wire_in).st_ino, os.fstat(wire_out).st_ino}


def open_files() -> Counter[int]:
    """How many descriptors of this process have each inode open."""
    inodes: Counter[int] = Counter()
    for fd in os.listdir("/proc/self/fd"):
        with suppress(OSError):  # the descriptor that listed them, closed since
            inodes[os.fstat(int(fd)).st_ino] += 1
    return inodes


async def test_a_stdout_pipe_already_wider_is_left_as_wide() -> None:
    wire_in, client_out = os.pipe()
    client_in, wire_out = os.pipe()
    with pipe_max_size_at_least(2 * STDOUT_PIPE_BYTES):
        wider = fcntl.fcntl(wire_out, fcntl.F_SETPIPE_SZ, 2 * STDOUT_PIPE_BYTES)
    async with stdio_transport(wire_in, wire_out) as (_, write_stream):
        assert fcntl.fcntl(client_in, fcntl.F_GETPIPE_SZ) == wider == 2 * STDOUT_PIPE_BYTES
        await write_stream.aclose()
        os.close(client_out)


@contextmanager
def pipe_max_size_at_least(size: int) -> Iterator[None]:
    """The system's pipe-max-size raised to `size` meanwhile (root without CAP_SYS_RESOURCE is bound by it too)."""
    setting = "/proc/sys/fs/pipe-max-size"
    with open(setting) as f:
        before = f.read().strip()
    if int(before) < size:
        with open(setting, "w") as f:
            f.write(str(size))
    try:
        yield
    finally:
        with open(setting, "w") as f:
            f.write(before)
