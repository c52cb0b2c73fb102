"""The execution fence (SPEC §9.3–§9.6): argv, the script's environment, spawn, bounds, drain, kill, and the sweep of what
a script leaves running (its group, its session, the orphans the server adopts)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from skill_mcp.hardening import ChildLimits, adopting_orphans, harden_child
from skill_mcp.limits import AMBIENT_SCRIPT_ALLOWLIST, INTERPRETERS, MAX_OUTPUT_BYTES, RESERVED_SCRIPT_ENV
from skill_mcp.text import os_error_text

TERM_GRACE_MS = 2000
OUTPUT_DRAIN_MS = 250
_SESSION_PASSES = 4
_SWEEP_BUDGET_S = 2.0  # for killing what one script left: a chain of 1000 setsid links dies in about 0.5 s
_QUIET_PASSES = 3
_QUIET_PASS_GAP_S = 0.001
_DEATH_POLL_S = 0.0002
_EXIT_WAIT_S = 0.5  # at the server's exit, for a killed leader to die, so what it left is adopted and swept
HARD_DEADLINE_EXTRA_MS = 3250
_READ_CHUNK = 65536
_SETUP_REASON_MAX = 1024

# Leaders spawned here that their Popen has not collected yet: their start time (clock ticks since boot), and
# an event set once collected. The sweep of adopted processes leaves them to their Popen, and spares any process
# older than the script.
_LEADERS: dict[int, tuple[int, asyncio.Event]] = {}
# The start time of the oldest leader whose sweep ran out of time: every later sweep goes back that far, so what
# it left is not spared for being older than the next script.
_sweep_floor: int | None = None

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
    """The script could not start: exec error, missing interpreter or failed child setup."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def network_note(outcome: RunOutcome, egress_fenced: bool, proxy_set: bool) -> str | None:
    """The result's `networkNote`: for a failed run where the network is fenced or proxied; else None."""
    failed = outcome.timed_out or outcome.exit_code != 0
    return NETWORK_NOTE if failed and (egress_fenced or proxy_set) else None


def kill_process_group(pid: int, sig: int = signal.SIGKILL, deadline: float | None = None) -> bool:
    """Signal a script's whole process group, and every group a child made in the script's session with setpgid
    (only setsid leaves the session); False when there was nothing to signal. `deadline` (monotonic) bounds the
    sweep of what it left, by default `_SWEEP_BUDGET_S` from now."""
    signalled = _signal(os.killpg, pid, sig)
    if sig == signal.SIGKILL and adopting_orphans():
        # Whatever survives the group kill descends from a dead process, so it is the server's child by now, or
        # will be once its parent dies: the sweep of adopted children reaches it, no scan of /proc is needed.
        return _kill_adopted(pid, deadline) or signalled
    # A process forked while a pass runs is missed by it: passes repeat until one finds nobody left to kill.
    for _ in range(_SESSION_PASSES if sig == signal.SIGKILL else 1):
        members = _left_the_group(pid)
        if not members:
            break
        for member in members:
            signalled = _signal(os.kill, member, sig) or signalled
    return signalled


def _kill_adopted(leader: int, deadline: float | None = None) -> bool:
    """Kill, and collect, what a script left running that the server adopted (as a subreaper or PID 1): every child
    that started after the script's leader, bar the leaders a Popen still owns, even one that left its session with
    setsid. A chain of processes that each move to a new group, fork and exit outruns a scan of /proc, but each
    link is the server's child once its parent is gone: each pass kills the links adopted so far and waits for them
    to die, which hands the server the next."""
    global _sweep_floor
    if leader not in _LEADERS:
        return False  # collected already: what it left was swept as it exited
    born = _LEADERS[leader][0] if _sweep_floor is None else min(_LEADERS[leader][0], _sweep_floor)
    deadline = time.monotonic() + _SWEEP_BUDGET_S if deadline is None else deadline
    # A child the server may not signal is another uid's (no_new_privs keeps a script's processes at its own):
    # an operator's job under a PID 1 server, neither the script's to kill nor to wait for.
    foreign: set[int] = set()
    signalled, quiet_passes, first_pass = False, 0, True
    while quiet_passes < _QUIET_PASSES:
        if time.monotonic() >= deadline:
            _sweep_floor = born  # the next sweep goes on from here
            return signalled
        members = [
            (child, state) for child, state, start in _children()
            if child not in _LEADERS and child not in foreign and start >= born
        ]  # fmt: skip
        killed, vanished = [], False
        for child, state in members:
            try:
                os.kill(child, signal.SIGKILL)
            except PermissionError:
                foreign.add(child)
                continue
            except ProcessLookupError:
                # Collected meanwhile (the SIGCHLD handler, from another thread): what it left is adopted now. A
                # pid /proc still shows is no such child: that /proc is another PID namespace's.
                vanished = vanished or _stat_fields(child) is None
                continue
            killed.append(child)
            signalled = signalled or state != b"Z"
        if not killed and not vanished and first_pass:
            break  # the script left nothing behind: the usual case, one pass
        first_pass = False
        # Their descendants too, not adopted yet: a chain dies at once, not one link per pass.
        for descendant in _descendants(killed):
            signalled = _signal(os.kill, descendant, signal.SIGKILL) or signalled
        for child in killed:
            _collect_once_dead(child, deadline)
        # The children file can miss a child that is being reparented as it is read (proc(5)): only a few
        # passes in a row that find nothing say that nothing is left.
        quiet_passes = 0 if killed or vanished else quiet_passes + 1
        if not killed:
            time.sleep(_QUIET_PASS_GAP_S)
    _sweep_floor = None
    return signalled


def _collect_once_dead(child: int, deadline: float) -> None:
    """Collect a killed child as soon as it is dead (its own children are the server's from then on); a zombie
    whose other threads still run, or one stuck in the kernel, is waited for until the deadline."""
    while not _collected(child) and time.monotonic() < deadline:
        time.sleep(_DEATH_POLL_S)


def _collected(child: int) -> bool:
    try:
        return os.waitpid(child, os.WNOHANG)[0] == child
    except ChildProcessError:
        return True  # collected elsewhere (the SIGCHLD handler)


def kill_for_exit(leader: int) -> None:
    """At the server's exit: kill a running script's group, and once its leader is dead (what it started in other
    sessions is adopted then), whatever it left; without this, those would outlive the server."""
    # One budget for all of it: the server must still exit within §5.1's 5 s.
    deadline = time.monotonic() + _SWEEP_BUDGET_S
    kill_process_group(leader, deadline=deadline)
    if not adopting_orphans():
        return
    leader_deadline = min(deadline, time.monotonic() + _EXIT_WAIT_S)
    with contextlib.suppress(ChildProcessError):  # collected already
        # WNOWAIT: the leader stays for its Popen to collect.
        while (
            os.waitid(os.P_PID, leader, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            and time.monotonic() < leader_deadline
        ):
            time.sleep(_DEATH_POLL_S)
    _kill_adopted(leader, deadline)


def _collect_zombies() -> None:
    """Collect the adopted children that have died, so none holds a pid (or a slot of RLIMIT_NPROC) until the run
    ends; a leader is left to its Popen."""
    for child, state, _ in _children():
        if state == b"Z" and child not in _LEADERS:
            _collected(child)


def collect_adopted_as_they_die() -> None:
    """For a process that adopts orphans, on the running loop's thread: collect what has died, then each orphan as
    it dies (SIGCHLD). Off the main thread, the next sweep collects them instead."""
    if not adopting_orphans():
        return
    _collect_zombies()
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGCHLD, _collect_zombies)


def _children() -> list[tuple[int, bytes, int]]:
    """The server's children as (pid, state, start time in clock ticks), from /proc (none without /proc)."""
    children = []
    for pid in _child_pids("self"):
        fields = _stat_fields(pid)
        if fields is not None:
            children.append((pid, fields[0], int(fields[19])))
    return children


def _descendants(roots: list[int]) -> list[int]:
    """Every process below `roots`, from /proc; one that forks as it is read is missed here and adopted later."""
    found: list[int] = []
    seen, pending = set(roots), list(roots)
    while pending:
        for child in _child_pids(pending.pop()):
            if child not in seen:
                seen.add(child)
                found.append(child)
                pending.append(child)
    return found


def _child_pids(process: int | str) -> list[int]:
    """The children of each thread of `process` (a pid, or "self"); none when it is gone or there is no /proc."""
    pids = []
    try:
        tasks = os.listdir(f"/proc/{process}/task")
    except OSError:
        return []
    for task in tasks:
        try:
            with open(f"/proc/{process}/task/{task}/children", "rb") as listed:
                pids += [int(pid) for pid in listed.read().split()]
        except OSError:
            continue
    return pids


def _stat_fields(pid: int) -> list[bytes] | None:
    """Fields 3 onwards of /proc/<pid>/stat (the state first), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            return status.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _signal(send: Callable[[int, int], None], target: int, sig: int) -> bool:
    try:
        send(target, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def _left_the_group(session: int) -> list[int]:
    """Live processes of the session `session` outside its leader's process group, from /proc (none where there
    is no /proc)."""
    members = []
    try:
        pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return []
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is None:
            continue  # gone meanwhile
        state, pgrp, sid = fields[0], int(fields[2]), int(fields[3])
        if sid == session and pgrp != session and state != b"Z":
            members.append(pid)
    return members


def _spawn(argv: Sequence[str], cwd: str, env: Mapping[str, str], limits: ChildLimits) -> subprocess.Popen:
    parent_pid = os.getpid()
    # Close-on-exec pipe: the child's setup writes why it failed, since preexec_fn errors lose their text.
    reason_read, reason_write = os.pipe()

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
        fields = _stat_fields(process.pid)
        _LEADERS[process.pid] = (int(fields[19]) if fields else 0, asyncio.Event())
        return process
    except OSError as exc:
        reason = os_error_text(exc)
        raise SpawnFailed(f"{reason}: {exc.filename}" if exc.filename else reason) from exc
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
    """Call on_exit once the leader is reaped; never looks at its pipes, which a grandchild may hold.

    What the script left running in its process group or session, or left for the server to adopt, is killed as
    it exits, before it is reaped: the unreaped leader still holds the group and session id, so the signal cannot
    reach one that reused it. (Without adoption, a child that left the session with setsid is out of reach; the
    hard deadline bounds what it can still write here.)"""
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
        self.finished = False
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
        """The leader has exited and its Popen has collected it."""
        self.exited = True
        leader = _LEADERS.pop(self.process.pid, None)
        if leader is not None:
            leader[1].set()
        if self.finished:
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
        if self.finished:
            return
        self.finished = True
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


async def leader_collected(pid: int) -> None:
    """Returns once the leader `pid` has exited and been collected (at once for one that is)."""
    if pid in _LEADERS:
        await _LEADERS[pid][1].wait()


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
    collect_adopted_as_they_die()
    started = time.monotonic()
    process = _spawn(argv, cwd, env, limits)
    run = _Run(loop, process, timeout_ms, started)
    try:
        if on_start is not None:
            on_start(process.pid)
        return await run.outcome
    finally:
        if not run.finished:
            kill_process_group(process.pid)
            run.settle()
