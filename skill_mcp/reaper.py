"""What a script leaves running (SPEC §9.4): kill its process group and the groups it made in its session, and,
where the server adopts orphans (a subreaper or PID 1), sweep every process it left, reaping each as it dies. The
runner registers each script's leader here, so the sweeps leave it to its Popen."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from collections.abc import Callable

from .hardening import STAT_PGRP, STAT_SESSION, STAT_START_TIME, STAT_STATE, is_subreaper, stat_fields

_SESSION_PASSES = 4
_SWEEP_BUDGET_S = 2.0  # for killing what one script left: a chain of 1000 setsid links dies in about 0.5 s
_QUIET_PASSES = 3
_QUIET_PASS_GAP_S = 0.001
_DEATH_POLL_S = 0.0002
_EXIT_WAIT_S = 0.5  # at the server's exit, for a killed leader to die, so what it left is adopted and swept

# Leaders spawned by the runner that their Popen has not reaped yet: their start time (clock ticks since boot),
# and an event set once reaped. The sweep of adopted processes leaves them to their Popen, and spares any
# process older than the script.
_LEADERS: dict[int, tuple[int, asyncio.Event]] = {}
# The start time of the oldest leader whose sweep ran out of time: every later sweep goes back that far, so what
# it left is not spared for being older than the next script.
_sweep_floor: int | None = None


def track_leader(pid: int) -> None:
    """A script's leader has just been spawned: its Popen reaps it, and sweeps spare what is older than it."""
    fields = _stat_fields(pid)
    _LEADERS[pid] = (int(fields[STAT_START_TIME]) if fields else 0, asyncio.Event())


def mark_leader_reaped(pid: int) -> None:
    """The leader's Popen has reaped it: wake whoever waits in `wait_leader_reaped`."""
    leader = _LEADERS.pop(pid, None)
    if leader is not None:
        leader[1].set()


async def wait_leader_reaped(pid: int) -> None:
    """Returns once the leader `pid` has exited and been reaped (at once for one that is)."""
    if pid in _LEADERS:
        await _LEADERS[pid][1].wait()


def kill_process_group(pid: int, sig: int = signal.SIGKILL, deadline: float | None = None) -> bool:
    """Signal a script's whole process group, and every group a child made in the script's session with setpgid
    (only setsid leaves the session); False when there was nothing to signal. The sweep of what it left blocks the
    calling thread until `deadline` (monotonic) at most, by default `_SWEEP_BUDGET_S` from now."""
    signalled = _signal(os.killpg, pid, sig)
    if sig == signal.SIGKILL and is_subreaper():
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
    """Kill, and reap, what a script left running that the server adopted (as a subreaper or PID 1): every child
    that started after the script's leader, bar the leaders a Popen still owns, even one that left its session with
    setsid. A chain of processes that each move to a new group, fork and exit outruns a scan of /proc, but each
    link is the server's child once its parent is gone: each pass kills the links adopted so far and waits for them
    to die, which hands the server the next."""
    global _sweep_floor
    if leader not in _LEADERS:
        return False  # reaped already: what it left was swept as it exited
    born = _LEADERS[leader][0] if _sweep_floor is None else min(_LEADERS[leader][0], _sweep_floor)
    deadline = time.monotonic() + _SWEEP_BUDGET_S if deadline is None else deadline
    foreign: set[int] = set()
    signalled, quiet_passes, first_pass = False, 0, True
    while quiet_passes < _QUIET_PASSES:
        if time.monotonic() >= deadline:
            _sweep_floor = born  # the next sweep goes on from here
            return signalled
        killed, vanished, signalled_now = _kill_adopted_pass(born, foreign)
        signalled = signalled or signalled_now
        if not killed and not vanished and first_pass:
            break  # the script left nothing behind: the usual case, one pass
        first_pass = False
        # Their descendants too, not adopted yet: a chain dies at once, not one link per pass.
        for descendant in _descendants(killed):
            signalled = _signal(os.kill, descendant, signal.SIGKILL) or signalled
        for child in killed:
            _reap_once_dead(child, deadline)
        # The children file can miss a child that is being reparented as it is read (proc(5)): only a few
        # passes in a row that find nothing say that nothing is left.
        quiet_passes = 0 if killed or vanished else quiet_passes + 1
        if not killed:
            time.sleep(_QUIET_PASS_GAP_S)
    _sweep_floor = None
    return signalled


def _kill_adopted_pass(born: int, foreign: set[int]) -> tuple[list[int], bool, bool]:
    """SIGKILL each adopted child started since `born`, bar leaders and `foreign` ones (added to as found);
    returns (the children killed, whether one vanished meanwhile, whether a live one was signalled)."""
    killed, vanished, signalled = [], False, False
    for child, state, start in _children():
        if child in _LEADERS or child in foreign or start < born:
            continue
        try:
            os.kill(child, signal.SIGKILL)
        except PermissionError:
            # Another uid's (no_new_privs keeps a script's processes at its own): an operator's job under a PID 1
            # server, neither the script's to kill nor to wait for.
            foreign.add(child)
            continue
        except ProcessLookupError:
            # Collected meanwhile (the SIGCHLD handler, from another thread): what it left is adopted now. A
            # pid /proc still shows is no such child: that /proc is another PID namespace's.
            vanished = vanished or _stat_fields(child) is None
            continue
        killed.append(child)
        signalled = signalled or state != b"Z"
    return killed, vanished, signalled


def _reap_once_dead(child: int, deadline: float) -> None:
    """Reap a killed child as soon as it is dead (its own children are the server's from then on); a zombie
    whose other threads still run, or one stuck in the kernel, is waited for until the deadline."""
    while not _reap_if_dead(child) and time.monotonic() < deadline:
        time.sleep(_DEATH_POLL_S)


def _reap_if_dead(child: int) -> bool:
    try:
        return os.waitpid(child, os.WNOHANG)[0] == child
    except ChildProcessError:
        return True  # reaped elsewhere (the SIGCHLD handler)


def kill_for_exit(leader: int) -> None:
    """At the server's exit: kill a running script's group, and once its leader is dead (what it started in other
    sessions is adopted then), whatever it left; without this, those would outlive the server."""
    # One budget for all of it: the server must still exit within §5.1's 5 s.
    deadline = time.monotonic() + _SWEEP_BUDGET_S
    kill_process_group(leader, deadline=deadline)
    if not is_subreaper():
        return
    leader_deadline = min(deadline, time.monotonic() + _EXIT_WAIT_S)
    with contextlib.suppress(ChildProcessError):  # reaped already
        # WNOWAIT: the leader stays for its Popen to reap.
        while (
            os.waitid(os.P_PID, leader, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
            and time.monotonic() < leader_deadline
        ):
            time.sleep(_DEATH_POLL_S)
    _kill_adopted(leader, deadline)


def _reap_zombies() -> None:
    """Reap the adopted children that have died, so none holds a pid (or a slot of RLIMIT_NPROC) until the run
    ends; a leader is left to its Popen."""
    for child, state, _ in _children():
        if state == b"Z" and child not in _LEADERS:
            _reap_if_dead(child)


def reap_adopted_as_they_die() -> None:
    """For a process that adopts orphans, on the running loop's thread: reap what has died, then each orphan as
    it dies (SIGCHLD). Off the main thread, the next sweep reaps them instead."""
    if not is_subreaper():
        return
    _reap_zombies()
    with contextlib.suppress(ValueError, RuntimeError, NotImplementedError):
        asyncio.get_running_loop().add_signal_handler(signal.SIGCHLD, _reap_zombies)


def _children() -> list[tuple[int, bytes, int]]:
    """The server's children as (pid, state, start time in clock ticks), from /proc (none without /proc)."""
    children = []
    for pid in _child_pids("self"):
        fields = _stat_fields(pid)
        if fields is not None:
            children.append((pid, fields[STAT_STATE], int(fields[STAT_START_TIME])))
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
    """The stat fields of `pid` (see hardening.stat_fields), or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            return stat_fields(status.read())
    except OSError:
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
        state, pgrp, sid = fields[STAT_STATE], int(fields[STAT_PGRP]), int(fields[STAT_SESSION])
        if sid == session and pgrp != session and state != b"Z":
            members.append(pid)
    return members
