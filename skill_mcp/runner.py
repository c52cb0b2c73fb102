"""The execution fence (SPEC §9.3–§9.6): argv, the script's environment, spawn, timeouts, output caps and drain;
reaper.py kills what a script leaves running."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .hardening import ChildLimits, harden_child
from .limits import AMBIENT_SCRIPT_ALLOWLIST, INTERPRETERS, MAX_OUTPUT_BYTES, RESERVED_SCRIPT_ENV
from .reaper import kill_process_group, mark_leader_reaped, reap_adopted_as_they_die, track_leader
from .text import os_error_text

TERM_GRACE_MS = 2000
OUTPUT_DRAIN_MS = 250
HARD_DEADLINE_EXTRA_MS = 3250
_READ_CHUNK = 65536
_SETUP_REASON_MAX = 1024
# Out of open files (the process's, the system's), processes (fork's EAGAIN: RLIMIT_NPROC, a pids cgroup) or memory.
_RESOURCE_ERRNOS = {errno.EMFILE, errno.ENFILE, errno.EAGAIN, errno.ENOMEM}

NETWORK_NOTE = (
    "The network is restricted to a declared egress allowlist: a host not on it shows up as an HTTP 403 "
    "from a proxy or as a timeout or refused connection, which looks the same from inside the script. "
    "If this failure looks like a network failure, the fix is the deployment's egress policy, not the script."
)


def build_argv(interpreter: str, interpreter_path: str, real_script: str, args: Sequence[str]) -> list[str]:
    """No shell: the script and each argument are argv entries, verbatim."""
    if interpreter not in INTERPRETERS:
        raise ValueError(f"interpreter {interpreter!r} is not in the closed set")
    # No bytecode writes, no PYTHON* variables, no user site.
    flags = ["-B", "-E", "-s"] if interpreter == "python3" else []
    return [interpreter_path, *flags, real_script, *args]


def script_environment(environ: Mapping[str, str], effective_env: Sequence[str]) -> dict[str, str]:
    """Ambient allowlist, MCP_DATA_DIR, then the effective names minus reserved ones; raw, by presence."""
    declared = (name for name in effective_env if name not in RESERVED_SCRIPT_ENV)
    wanted = dict.fromkeys([*AMBIENT_SCRIPT_ALLOWLIST, "MCP_DATA_DIR", *declared])
    return {name: environ[name] for name in wanted if name in environ}


@dataclass
class RunOutcome:
    exit_code: int | None
    signal: str | None
    stdout: str
    stderr: str
    truncated_stdout: bool
    truncated_stderr: bool
    timed_out: bool
    duration_ms: int
    pid: int
    stdout_bytes: int  # received before settling, dropped bytes included
    stderr_bytes: int


class SpawnFailed(Exception):
    """The script could not start: exec error, missing interpreter or failed child setup; or the server is out of
    a resource a start needs (open files, processes, memory), which is its deployment's to raise, not the skill's."""

    def __init__(self, reason: str, out_of_resources: bool = False) -> None:
        super().__init__(reason)
        self.reason = reason
        self.out_of_resources = out_of_resources

    @classmethod
    def from_os_error(cls, error: OSError) -> SpawnFailed:
        reason = os_error_text(error)
        return cls(f"{reason}: {error.filename}" if error.filename else reason, error.errno in _RESOURCE_ERRNOS)


def network_note(outcome: RunOutcome, egress_fenced: bool, proxy_set: bool) -> str | None:
    """The result's `networkNote`: for a failed run where the network is fenced or proxied; else None."""
    failed = outcome.timed_out or outcome.exit_code != 0
    return NETWORK_NOTE if failed and (egress_fenced or proxy_set) else None


def _spawn(argv: Sequence[str], cwd: str, env: Mapping[str, str], limits: ChildLimits) -> subprocess.Popen:
    parent_pid = os.getpid()
    # Close-on-exec pipe: the child's setup writes why it failed, since preexec_fn errors lose their text.
    try:
        reason_read, reason_write = os.pipe()
    except OSError as exc:
        raise SpawnFailed.from_os_error(exc) from exc

    def child_setup() -> None:
        try:
            harden_child(limits, parent_pid)
        except BaseException as exc:
            os.write(reason_write, str(exc).encode(errors="replace")[:_SETUP_REASON_MAX])
            raise

    try:
        process = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, close_fds=True, start_new_session=True, preexec_fn=child_setup,
        )
        track_leader(process.pid)
        return process
    except OSError as exc:
        raise SpawnFailed.from_os_error(exc) from exc
    except subprocess.SubprocessError as exc:
        os.close(reason_write)
        reason_write = -1
        reason = os.read(reason_read, _SETUP_REASON_MAX).decode(errors="replace")
        raise SpawnFailed(reason or "the script's process setup failed before exec") from exc
    finally:
        os.close(reason_read)
        if reason_write >= 0:
            os.close(reason_write)


def _watch_exit(loop: asyncio.AbstractEventLoop, process: subprocess.Popen, on_exit: Callable[[], None]) -> None:
    """Call on_exit once the leader is reaped, never looking at its pipes (a grandchild may hold them). What the
    script left running (its group, its session, the orphans adopted) is killed first: until the leader is reaped,
    no other process can reuse its group and session ids."""
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        pidfd = None
    if pidfd is None:
        def wait() -> None:
            if hasattr(os, "waitid"):  # not on macOS, where the group is killed only at a timeout
                os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOWAIT)
                kill_process_group(process.pid)
            process.wait()
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(on_exit)

        threading.Thread(target=wait, name=f"wait-{process.pid}", daemon=True).start()
        return

    def exited() -> None:
        loop.remove_reader(pidfd)
        os.close(pidfd)
        kill_process_group(process.pid)
        process.poll()
        on_exit()

    loop.add_reader(pidfd, exited)


@dataclass
class _Capture:
    fd: int
    data: bytearray = field(default_factory=bytearray)
    received: int = 0
    truncated: bool = False
    is_open: bool = True

    def keep(self, chunk: bytes) -> None:
        self.received += len(chunk)
        room = MAX_OUTPUT_BYTES - len(self.data)
        self.data += chunk[:room]
        self.truncated = self.truncated or len(chunk) > room


class _Run:
    """One spawned script's timers, readers and exit, settling once (SPEC §9.4)."""

    def __init__(self, loop: asyncio.AbstractEventLoop, process: subprocess.Popen, timeout_ms: int,
                 started: float) -> None:
        self.loop = loop
        self.process = process
        self.started = started
        self.exited = False
        self.timed_out = False
        self.settled = False
        self.outcome: asyncio.Future[RunOutcome] = loop.create_future()
        self.captures = (_Capture(process.stdout.fileno()), _Capture(process.stderr.fileno()))
        for capture in self.captures:
            os.set_blocking(capture.fd, False)
            loop.add_reader(capture.fd, self._read, capture)
        self.timers = [
            loop.call_later(timeout_ms / 1000, self._time_out),
            loop.call_later((timeout_ms + HARD_DEADLINE_EXTRA_MS) / 1000, self._hard_deadline),
        ]
        self.drain: asyncio.TimerHandle | None = None
        _watch_exit(loop, process, self._leader_exited)

    def _read(self, capture: _Capture) -> None:
        try:
            chunk = os.read(capture.fd, _READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            capture.is_open = False
            self.loop.remove_reader(capture.fd)
            if self.exited and not any(c.is_open for c in self.captures):
                self.settle()
            return
        capture.keep(chunk)
        if self.exited:
            self._arm_drain()

    def _arm_drain(self) -> None:
        if self.drain is not None:
            self.drain.cancel()
        self.drain = self.loop.call_later(OUTPUT_DRAIN_MS / 1000, self.settle)

    def _leader_exited(self) -> None:
        """The leader has exited and its Popen has reaped it."""
        self.exited = True
        mark_leader_reaped(self.process.pid)
        if self.settled:
            return
        if any(c.is_open for c in self.captures):
            self._arm_drain()
        else:
            self.settle()

    def _time_out(self) -> None:
        self.timed_out = True
        if not kill_process_group(self.process.pid, signal.SIGTERM) and not self.exited:
            with contextlib.suppress(OSError):
                os.kill(self.process.pid, signal.SIGTERM)
        self.timers.append(self.loop.call_later(TERM_GRACE_MS / 1000, kill_process_group, self.process.pid))

    def _hard_deadline(self) -> None:
        self.timed_out = True
        kill_process_group(self.process.pid)
        self.settle()

    def settle(self) -> None:
        if self.settled:
            return
        self.settled = True
        for timer in [*self.timers, self.drain]:
            if timer is not None:
                timer.cancel()
        if self.timed_out:
            kill_process_group(self.process.pid)
        for capture in self.captures:
            if capture.is_open:
                self.loop.remove_reader(capture.fd)
        self.process.stdout.close()
        self.process.stderr.close()
        if not self.outcome.done():
            self.outcome.set_result(self._result())

    def _result(self) -> RunOutcome:
        code = self.process.returncode
        if code is None:
            # Only the hard deadline settles before the leader is reaped, and it has just sent SIGKILL.
            exit_code, signal_name = None, "SIGKILL"
        elif code < 0:
            exit_code, signal_name = None, _signal_name(-code)
        else:
            exit_code, signal_name = code, None
        stdout, stderr = self.captures
        return RunOutcome(
            exit_code=exit_code,
            signal=signal_name,
            stdout=stdout.data.decode("utf-8", errors="replace"),
            stderr=stderr.data.decode("utf-8", errors="replace"),
            truncated_stdout=stdout.truncated,
            truncated_stderr=stderr.truncated,
            timed_out=self.timed_out,
            duration_ms=int((time.monotonic() - self.started) * 1000),
            pid=self.process.pid,
            stdout_bytes=stdout.received,
            stderr_bytes=stderr.received,
        )


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"SIG{number}"


async def run_process(
    argv: Sequence[str],
    cwd: str,
    env: Mapping[str, str],
    timeout_ms: int,
    limits: ChildLimits,
    on_start: Callable[[int], None] | None = None,
) -> RunOutcome:
    """Run one script inside the fence; raises SpawnFailed if it cannot start.

    Await it on the event-loop thread: the parent-death signal follows the spawning thread.
    on_start gets the pid as soon as the script runs; cancelling the call kills its process group.
    """
    loop = asyncio.get_running_loop()
    reap_adopted_as_they_die()
    started = time.monotonic()
    process = _spawn(argv, cwd, env, limits)
    run = _Run(loop, process, timeout_ms, started)
    try:
        if on_start is not None:
            on_start(process.pid)
        return await run.outcome
    finally:
        if not run.settled:
            kill_process_group(process.pid)
            run.settle()
