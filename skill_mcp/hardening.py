"""Server and child hardening (SPEC §9.7, §9.8): environ scrub, non-dumpable, adopting orphans, child prctl and rlimits."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import resource
import signal
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .limits import AMBIENT_SCRIPT_ALLOWLIST
from .text import os_error_text

PR_SET_PDEATHSIG = 1
PR_GET_DUMPABLE = 3
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_GET_CHILD_SUBREAPER = 37
PR_SET_NO_NEW_PRIVS = 38

STAT_UNUSABLE = "/proc/self/stat carries no usable env_start/env_end (nothing written)"
ENVIRON_NOT_WIPED = "/proc/self/environ still reads back non-empty after the write"
INIT_HOLDS_ENVIRON = (
    "PID 1 runs as this server's user and still holds the environment (an init such as docker run --init, "
    "started as that user), so any script can read it from /proc/1/environ; start the container without an init "
    "(the server is then PID 1 itself) or as root (the fenced start, where the init stays root's)"
)
ANCESTOR_HOLDS_ENVIRON = (
    "a process this server was started through (a wrapper such as sh -c, uv run or npx, which did not exec it) runs "
    "as this server's user and still holds this deployment's environment, so any script can read it from "
    "/proc/<pid>/environ; start the server with exec, or from a process of another user"
)

_DECIMAL = re.compile(rb"[0-9]+")
# Indexes into stat_fields(): field N of proc(5)'s /proc/<pid>/stat sits at N - 3.
STAT_STATE, STAT_PGRP, STAT_SESSION, STAT_START_TIME = 3 - 3, 5 - 3, 6 - 3, 22 - 3
_STAT_PPID = 4 - 3
_STAT_ENV_START, _STAT_ENV_END = 50 - 3, 51 - 3
# Loaded before any fork: the child's setup must not load libraries between fork and exec.
_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None


def _prctl(option: int, arg: int = 0) -> int:
    result = _LIBC.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0))
    if result == -1:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))
    return result


def prctl_available() -> bool:
    """Children get no_new_privs and a parent-death signal only where prctl exists."""
    return _LIBC is not None and hasattr(_LIBC, "prctl")


CAP_SYS_RESOURCE = 24


def may_raise_rlimits() -> bool:
    """Whether this process may raise a hard rlimit (CAP_SYS_RESOURCE, which a child inherits); without
    /proc, whether it is root."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError, IndexError):
        pass
    return os.geteuid() == 0


@dataclass(frozen=True, slots=True)
class ScrubResult:
    status: str  # "scrubbed" | "failed" | "unsupported"
    wiped_bytes: int | None = None
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class ScrubIO:
    """The scrub's effects, injectable so every branch is testable without /proc."""

    platform: str
    read_stat: Callable[[], bytes]
    rehome_environ: Callable[[], None]
    write_mem: Callable[[int, bytes], None]
    read_environ: Callable[[], bytes]
    # PID 1's environment when a script of this uid could read it too, else b"".
    read_init_environ: Callable[[], bytes] = bytes
    # The environments of the server's ancestors that a script of this uid could read too.
    read_ancestor_environs: Callable[[], list[bytes]] = list


def _read_file(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _rehome_environ() -> None:
    # setenv copies "name=value" to the heap and repoints environ[], so getenv survives the wipe. An entry with
    # no name ("=x", which execve allows) cannot be set, and no lookup can find it: it is wiped with the rest.
    for name, value in list(os.environb.items()):
        if name:
            os.putenv(name, value)


def _write_mem(offset: int, data: bytes) -> None:
    fd = os.open("/proc/self/mem", os.O_WRONLY)
    try:
        if os.pwrite(fd, data, offset) != len(data):
            raise OSError("short write to /proc/self/mem")
    finally:
        os.close(fd)


def _same_uid_init_environ() -> bytes:
    # Root's scripts can read every process anyway, and as PID 1 the server is the init itself.
    if os.getpid() == 1 or os.geteuid() == 0:
        return b""
    try:
        return _read_file("/proc/1/environ")
    except OSError:  # another uid's init: out of a script's reach too
        return b""


def _same_uid_ancestor_environs() -> list[bytes]:
    # Root's scripts can read every process anyway; PID 1 is checked on its own.
    if os.geteuid() == 0:
        return []
    environs, pid, seen = [], os.getppid(), set()
    while pid > 1 and pid not in seen:
        seen.add(pid)
        with contextlib.suppress(OSError):  # another uid's, or non-dumpable: out of a script's reach too
            environs.append(_read_file(f"/proc/{pid}/environ"))
        try:
            fields = stat_fields(_read_file(f"/proc/{pid}/stat"))
            pid = int(fields[_STAT_PPID]) if fields else 0
        except (OSError, ValueError, IndexError):
            break
    return environs


REAL_SCRUB_IO = ScrubIO(
    platform=sys.platform,
    read_stat=lambda: _read_file("/proc/self/stat"),
    rehome_environ=_rehome_environ,
    write_mem=_write_mem,
    read_environ=lambda: _read_file("/proc/self/environ"),
    read_init_environ=_same_uid_init_environ,
    read_ancestor_environs=_same_uid_ancestor_environs,
)


def stat_fields(stat: bytes) -> list[bytes] | None:
    """The fields after `comm` of a /proc/<pid>/stat line (index with the STAT_* constants), or None without one."""
    close = stat.rfind(b")")  # `comm` may hold spaces and parentheses itself
    return None if close < 0 else stat[close + 1 :].split()


def environ_range(stat: bytes) -> tuple[int, int] | None:
    """env_start/env_end of a /proc/<pid>/stat line, or None when unusable."""
    fields = stat_fields(stat)
    if fields is None or len(fields) <= _STAT_ENV_END:
        return None
    if not all(_DECIMAL.fullmatch(field) for field in (fields[_STAT_ENV_START], fields[_STAT_ENV_END])):
        return None
    start, end = int(fields[_STAT_ENV_START]), int(fields[_STAT_ENV_END])
    if start <= 0 or end <= start:
        return None
    return start, end


def scrub_environ(io: ScrubIO = REAL_SCRUB_IO) -> ScrubResult:
    """Wipe the exec-time environment block so /proc/<pid>/environ reads empty; never raises."""
    if io.platform != "linux":
        return ScrubResult("unsupported")
    try:
        bounds = environ_range(io.read_stat())
        if bounds is None:
            return ScrubResult("failed", reason=STAT_UNUSABLE)
        start, end = bounds
        io.rehome_environ()
        io.write_mem(start, bytes(end - start))
        if any(io.read_environ()):
            return ScrubResult("failed", reason=ENVIRON_NOT_WIPED)
        # The variables a wipe hides here are worth nothing while a same-uid init still shows them all; those every
        # script is handed anyway (PATH, HOME, ...) hide nothing.
        if _names(io.read_init_environ()) - set(AMBIENT_SCRIPT_ALLOWLIST):
            return ScrubResult("failed", reason=INIT_HOLDS_ENVIRON)
        # An ancestor holding this server's own configuration (name and value) was handed its whole environment.
        configuration = _configuration_entries(os.environb)
        if any(configuration & set(environ.split(b"\0")) for environ in io.read_ancestor_environs()):
            return ScrubResult("failed", reason=ANCESTOR_HOLDS_ENVIRON)
        return ScrubResult("scrubbed", wiped_bytes=end - start)
    except Exception as exc:  # noqa: BLE001 - the scrub reports, it never raises
        return ScrubResult("failed", reason=str(exc) or type(exc).__name__)


def _configuration_entries(environ: Mapping[bytes, bytes]) -> set[bytes]:
    """This deployment's own settings as `name=value` entries: the variables a launcher hands the server alone."""
    return {name + b"=" + value for name, value in environ.items() if name.startswith(b"MCP_") or name == b"SKILLS_DIR"}


def _names(environ_block: bytes) -> set[str]:
    return {entry.split(b"=", 1)[0].decode(errors="replace") for entry in environ_block.split(b"\0") if entry}


def make_non_dumpable() -> bool:
    """Keep same-uid scripts out of our environ, mem and ptrace; True only when verified."""
    if not prctl_available():
        return False
    try:
        _prctl(PR_SET_DUMPABLE, 0)
        return _prctl(PR_GET_DUMPABLE) == 0
    except OSError:
        return False


def adopt_orphans() -> bool:
    """Make this process the reaper of its descendants' orphans, so what a script leaves running stays reachable
    as a child of the server (reaper.py kills it there). Only for a process that starts nothing but scripts, since
    every child it has then is a script's. False where prctl cannot."""
    if not prctl_available():
        return False
    try:
        _prctl(PR_SET_CHILD_SUBREAPER, 1)
    except OSError:
        return False
    return is_subreaper()


def is_subreaper() -> bool:
    """Whether orphaned descendants become this process's children: as PID 1, or after `adopt_orphans`."""
    if os.getpid() == 1:
        return True
    if not prctl_available():
        return False
    flag = ctypes.c_int(0)
    try:
        _prctl(PR_GET_CHILD_SUBREAPER, ctypes.addressof(flag))
    except OSError:
        return False
    return flag.value == 1


def run_block_reason(scrub: ScrubResult, hosted: bool, allow_unscrubbed: bool) -> str | None:
    """Why no script may run (hosted, scrub failed, no owner override), else None."""
    if scrub.status != "failed" or not hosted or allow_unscrubbed:
        return None
    until = "no script may run until this is fixed or until the owner sets MCP_SKILL_ALLOW_UNSCRUBBED=1"
    if scrub.reason in (INIT_HOLDS_ENVIRON, ANCESTOR_HOLDS_ENVIRON):  # this process's block was wiped; theirs not
        return f"{scrub.reason}; {until}"
    return (
        f"the exec-time environment block could not be wiped ({scrub.reason}), so any script could read "
        f"every variable this deployment holds from /proc/<pid>/environ; {until}"
    )


@dataclass(frozen=True, slots=True)
class ChildLimits:
    """Optional per-script rlimits (SPEC §2.2); None means not applied."""

    rlimit_nproc: int | None = None
    rlimit_as_mb: int | None = None


@dataclass(frozen=True, slots=True)
class Hardening:
    """The fence's state as `skill_list.hardening` reports it."""

    environ_scrubbed: bool
    non_dumpable: bool
    no_new_privs: bool
    rlimit_nproc: int | None
    rlimit_as_mb: int | None


def _step(name: str, action: Callable[[], object]) -> None:
    try:
        action()
    except (OSError, ValueError) as exc:  # resource.setrlimit reports EPERM/EINVAL as ValueError
        raise OSError(f"{name}: {os_error_text(exc)}") from None


def _default_signals() -> None:
    # exec keeps ignored signals and the blocked mask: a script starts as a fresh process, not with those of
    # whatever started the server (`sh -c 'skill-mcp &'` ignores SIGQUIT). libc, since Python's own setter only
    # works on the main thread; handlers are reset by exec anyway.
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    for number in signal.valid_signals() - {signal.SIGKILL, signal.SIGSTOP}:
        if _LIBC.signal(int(number), None) == -1:  # None is SIG_DFL
            raise OSError(ctypes.get_errno(), f"signal {number}")


def harden_child(limits: ChildLimits, parent_pid: int) -> None:
    """Runs between fork and exec; any failure raises, so the child never execs."""
    if _LIBC is not None:
        _step("default signal dispositions", _default_signals)
    if prctl_available():
        _step("prctl(PR_SET_NO_NEW_PRIVS)", lambda: _prctl(PR_SET_NO_NEW_PRIVS, 1))
        _step("prctl(PR_SET_PDEATHSIG)", lambda: _prctl(PR_SET_PDEATHSIG, signal.SIGKILL))
        # The parent may have died before the death signal was armed.
        if os.getppid() != parent_pid:
            raise OSError("the server exited before the script could start")
    _step("setrlimit(RLIMIT_CORE)", lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0)))
    if limits.rlimit_nproc is not None:
        nproc = limits.rlimit_nproc
        _step("setrlimit(RLIMIT_NPROC)", lambda: resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc)))
    if limits.rlimit_as_mb is not None:
        address_space = limits.rlimit_as_mb * 1048576
        _step("setrlimit(RLIMIT_AS)", lambda: resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space)))
