"""Environ scrub, non-dumpable and child setup (SPEC §9.7, §9.8).

Injected I/O covers every scrub branch; the real scrub only ever runs in a separate driver process,
as an unprivileged uid when we are root (root could read any /proc entry and would prove nothing).
"""

from __future__ import annotations

import json
import os
import resource
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from support import fails_after, in_signal_mask, world_readable_dir

from skill_mcp.hardening import (
    ANCESTOR_HOLDS_ENVIRON,
    ENVIRON_NOT_WIPED,
    INIT_HOLDS_ENVIRON,
    STAT_PGRP,
    STAT_SESSION,
    STAT_START_TIME,
    STAT_STATE,
    STAT_UNUSABLE,
    ChildLimits,
    ScrubIO,
    ScrubResult,
    environ_range,
    harden_child,
    run_block_reason,
    scrub_environ,
    stat_fields,
)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"
SYSTEM_PYTHON = "/usr/bin/python3"
NODE = shutil.which("node")
UNPRIVILEGED = ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups"] if os.geteuid() == 0 else []
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="Linux-only hardening")


def stat_line(comm: bytes, env_start: bytes = b"1000", env_end: bytes = b"1600", fields: int = 52) -> bytes:
    """A /proc/<pid>/stat line: pid, (comm), then fields 3..`fields`, with 50/51 set."""
    rest = [b"S"] + [str(n).encode() for n in range(4, fields + 1)]
    if fields >= 51:
        rest[50 - 3], rest[51 - 3] = env_start, env_end
    return b"4242 (" + comm + b") " + b" ".join(rest) + b"\n"


class FakeProc:
    """Records the scrub's effects in call order."""

    def __init__(self, stat: bytes = stat_line(b"python3"), environ_after: bytes = b"\0" * 600,
                 platform: str = "linux", fail: str | None = None, init_environ: bytes = b"") -> None:
        self.stat, self.environ_after, self.platform, self.fail = stat, environ_after, platform, fail
        self.init_environ = init_environ
        self.calls: list[tuple] = []

    def _effect(self, name: str, *args):
        self.calls.append((name, *args))
        if self.fail == name:
            raise OSError(5, f"{name} exploded")

    def io(self) -> ScrubIO:
        def read_stat() -> bytes:
            self._effect("read_stat")
            return self.stat

        def read_environ() -> bytes:
            self._effect("read_environ")
            return self.environ_after

        return ScrubIO(
            platform=self.platform,
            read_stat=read_stat,
            rehome_environ=lambda: self._effect("rehome_environ"),
            write_mem=lambda offset, data: self._effect("write_mem", offset, data),
            read_environ=read_environ,
            read_init_environ=lambda: self.init_environ,
        )


def test_scrub_success_rehomes_then_zeroes_the_block_then_verifies() -> None:
    proc = FakeProc()
    assert scrub_environ(proc.io()) == ScrubResult("scrubbed", wiped_bytes=600)
    assert proc.calls == [("read_stat",), ("rehome_environ",), ("write_mem", 1000, b"\0" * 600), ("read_environ",)]


def test_scrub_is_unsupported_off_linux_and_touches_nothing() -> None:
    proc = FakeProc(platform="darwin")
    assert scrub_environ(proc.io()) == ScrubResult("unsupported")
    assert proc.calls == []


@pytest.mark.parametrize(
    "stat",
    [
        b"",
        b"4242 python3 S 1 2 3",
        stat_line(b"python3", fields=50),
        stat_line(b"python3", env_start=b"12a"),
        stat_line(b"python3", env_start=b"-5"),
        stat_line(b"python3", env_start=b"+5"),
        stat_line(b"python3", env_start=b""),
        stat_line(b"python3", env_start=b"0"),
        stat_line(b"python3", env_start=b"1600", env_end=b"1600"),
        stat_line(b"python3", env_start=b"1601", env_end=b"1600"),
        stat_line(b"python3", env_end=b"+99999"),
        stat_line(b"python3", env_end=b"16a00"),
        stat_line(b"python3", env_end=b""),
    ],
)
def test_unusable_stat_fails_before_anything_is_written(stat: bytes) -> None:
    proc = FakeProc(stat=stat)
    result = scrub_environ(proc.io())
    assert result == ScrubResult("failed", reason=STAT_UNUSABLE)
    assert "env_start" in result.reason and "nothing written" in result.reason
    assert proc.calls == [("read_stat",)]


def test_comm_with_spaces_and_parentheses_parses() -> None:
    proc = FakeProc(stat=stat_line(b"a) (b c) 1 2 (", env_start=b"7", env_end=b"9"))
    assert scrub_environ(proc.io()) == ScrubResult("scrubbed", wiped_bytes=2)
    assert ("write_mem", 7, b"\0\0") in proc.calls


@given(comm=st.binary(max_size=15).filter(lambda b: b"\0" not in b),
       start=st.integers(1, 2**47), length=st.integers(1, 2**20))
def test_environ_range_reads_fields_50_and_51_whatever_the_comm(comm: bytes, start: int, length: int) -> None:
    line = stat_line(comm, env_start=str(start).encode(), env_end=str(start + length).encode())
    assert environ_range(line) == (start, start + length)


@linux_only
def test_stat_fields_name_this_process_s_own_state_group_session_and_start() -> None:
    # The reaper reads these of every process it may kill; a field off by one would spare or kill the wrong ones.
    with open("/proc/self/stat", "rb") as stat:
        fields = stat_fields(stat.read())
    assert fields[STAT_STATE] == b"R"
    assert (int(fields[STAT_PGRP]), int(fields[STAT_SESSION])) == (os.getpgrp(), os.getsid(0))
    with open("/proc/self/stat", "rb") as stat:  # start time: clock ticks after boot, and fixed for a process
        assert fields[STAT_START_TIME] == stat_fields(stat.read())[STAT_START_TIME]
    with open("/proc/1/stat", "rb") as init:
        assert 0 <= int(stat_fields(init.read())[STAT_START_TIME]) <= int(fields[STAT_START_TIME])
    assert stat_fields(b"no comm here") is None


def test_a_same_uid_ancestor_holding_the_deployments_settings_fails_the_scrub(monkeypatch) -> None:
    # `sh -c 'skill-mcp serve; ...'` as the server's uid: the wrapper was handed the whole environment, and keeps it.
    monkeypatch.setenv("MCP_SKILLS_PATH", "/skills")
    wrapper = b"HOME=/h\0MCP_SKILLS_PATH=/skills\0API_KEY=k\0"
    assert scrub_environ(replace(FakeProc().io(), read_ancestor_environs=lambda: [b"", wrapper])) == ScrubResult(
        "failed", reason=ANCESTOR_HOLDS_ENVIRON
    )
    # SKILLS_DIR is the server's own setting too.
    monkeypatch.setenv("SKILLS_DIR", "/s")
    assert scrub_environ(replace(FakeProc().io(), read_ancestor_environs=lambda: [b"SKILLS_DIR=/s\0"])) == ScrubResult(
        "failed", reason=ANCESTOR_HOLDS_ENVIRON
    )
    # A client that handed the settings to the server alone, through exec, holds none of them: no leak.
    client = b"HOME=/h\0MCP_SKILLS_PATH=/elsewhere\0DISPLAY=:0\0"
    assert scrub_environ(replace(FakeProc().io(), read_ancestor_environs=lambda: [client])) == ScrubResult(
        "scrubbed", wiped_bytes=600
    )


def test_environ_still_readable_after_the_write_fails() -> None:
    proc = FakeProc(environ_after=b"\0" * 10 + b"A=1\0")
    assert scrub_environ(proc.io()) == ScrubResult("failed", reason=ENVIRON_NOT_WIPED)
    assert "non-empty" in ENVIRON_NOT_WIPED


def test_a_same_uid_init_still_holding_the_environment_fails_the_scrub() -> None:
    # docker run --init as the server's uid: the wiped block is still readable, whole, from /proc/1/environ.
    assert scrub_environ(FakeProc(init_environ=b"API_KEY=k\0").io()) == ScrubResult("failed", reason=INIT_HOLDS_ENVIRON)
    assert scrub_environ(FakeProc(init_environ=b"\0\0").io()) == ScrubResult("scrubbed", wiped_bytes=600)
    # What every script is handed anyway hides nothing: an init holding only PATH and HOME is no leak.
    only_ambient = FakeProc(init_environ=b"PATH=/usr/bin\0HOME=/nonexistent\0").io()
    assert scrub_environ(only_ambient) == ScrubResult("scrubbed", wiped_bytes=600)


@pytest.mark.parametrize("step", ["read_stat", "rehome_environ", "write_mem", "read_environ"])
def test_any_exception_fails_with_its_message(step: str) -> None:
    proc = FakeProc(fail=step)
    assert scrub_environ(proc.io()) == ScrubResult("failed", reason=f"[Errno 5] {step} exploded")
    assert proc.calls[-1][0] == step


def test_an_exception_without_a_message_fails_with_its_type() -> None:
    def refused(offset: int, data: bytes) -> None:
        raise PermissionError

    assert scrub_environ(replace(FakeProc().io(), write_mem=refused)) == ScrubResult("failed", reason="PermissionError")


def test_rehome_failure_writes_nothing() -> None:
    proc = FakeProc(fail="rehome_environ")
    scrub_environ(proc.io())
    assert [call[0] for call in proc.calls] == ["read_stat", "rehome_environ"]


def test_runs_are_blocked_only_when_hosted_unscrubbed_and_not_overridden() -> None:
    failed = ScrubResult("failed", reason="bad stat")
    assert run_block_reason(ScrubResult("scrubbed", wiped_bytes=1), hosted=True, allow_unscrubbed=False) is None
    assert run_block_reason(ScrubResult("unsupported"), hosted=True, allow_unscrubbed=False) is None
    assert run_block_reason(failed, hosted=False, allow_unscrubbed=False) is None
    assert run_block_reason(failed, hosted=True, allow_unscrubbed=True) is None
    reason = run_block_reason(failed, hosted=True, allow_unscrubbed=False)
    for needed in ("environ", "bad stat", "/proc/<pid>/environ", "MCP_SKILL_ALLOW_UNSCRUBBED=1"):
        assert needed in reason


@pytest.mark.parametrize("holder", [INIT_HOLDS_ENVIRON, ANCESTOR_HOLDS_ENVIRON], ids=["init", "ancestor"])
def test_the_run_block_for_a_same_uid_holder_names_it_not_this_servers_block(holder: str) -> None:
    reason = run_block_reason(ScrubResult("failed", reason=holder), hosted=True, allow_unscrubbed=False)
    assert reason == f"{holder}; no script may run until this is fixed or until the owner sets " \
        "MCP_SKILL_ALLOW_UNSCRUBBED=1"


@linux_only
def test_a_child_setup_step_that_fails_raises_naming_the_step() -> None:
    # In a forked child: lower the hard limit, drop root, then ask for more than the hard limit.
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (100, 100))
            if os.geteuid() == 0:
                os.setresgid(10001, 10001, 10001)
                os.setresuid(10001, 10001, 10001)
            harden_child(ChildLimits(rlimit_nproc=200), os.getppid())
            os.write(write_end, b"no error")
        except OSError as exc:
            os.write(write_end, str(exc).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    message = os.read(read_end, 1024).decode()
    os.close(read_end)
    os.waitpid(pid, 0)
    assert message.startswith("setrlimit(RLIMIT_NPROC): ")


@linux_only
def test_a_server_dying_while_its_child_is_set_up_stops_the_child() -> None:
    # The death signal only covers a parent that dies after it is armed; one that died before (here: while the
    # first prctl runs) is caught by the parent-pid check that must come after the arming.
    from skill_mcp import hardening

    read_end, write_end = os.pipe()
    server = os.fork()
    if server == 0:  # stands in for the server; its child is the script being set up
        if os.fork() == 0:
            real_prctl = hardening._prctl

            def prctl_as_the_server_dies(option: int, arg: int = 0) -> int:
                if option == hardening.PR_SET_NO_NEW_PRIVS:
                    os.kill(server_pid, signal.SIGKILL)
                    while os.getppid() == server_pid:
                        time.sleep(0.001)
                return real_prctl(option, arg)

            try:
                server_pid = os.getppid()
                hardening._prctl = prctl_as_the_server_dies
                harden_child(ChildLimits(), server_pid)
                os.write(write_end, b"no error: the script would exec")
            except OSError as exc:
                os.write(write_end, str(exc).encode())
            finally:
                os._exit(0)
        time.sleep(60)
        os._exit(0)
    os.close(write_end)
    try:
        with fails_after(20):
            message = os.read(read_end, 1024).decode()
    finally:
        os.close(read_end)
        os.kill(server, signal.SIGKILL)
        os.waitpid(server, 0)
    assert message == "the server exited before the script could start"


@linux_only
def test_a_refused_prctl_raises_with_its_errno() -> None:
    # Each hardening step relies on it: a prctl the kernel refuses must not pass as done.
    import errno

    from skill_mcp.hardening import _prctl

    with pytest.raises(OSError) as refused:
        _prctl(0x7FFF)  # no such option
    assert refused.value.errno == errno.EINVAL


@linux_only
def test_non_dumpable_counts_only_when_the_kernel_reads_it_back(monkeypatch: pytest.MonkeyPatch) -> None:
    # A set the kernel accepts but does not keep (the get still says 1) is reported, never taken as done.
    from skill_mcp import hardening

    calls: list[tuple[int, int]] = []

    def kept_dumpable(option: int, arg: int = 0) -> int:
        calls.append((option, arg))
        return 1 if option == hardening.PR_GET_DUMPABLE else 0

    monkeypatch.setattr(hardening, "_prctl", kept_dumpable)
    assert hardening.make_non_dumpable() is False
    assert calls == [(hardening.PR_SET_DUMPABLE, 0), (hardening.PR_GET_DUMPABLE, 0)]


# --- the real thing, in driver processes --------------------------------------------------------

@pytest.fixture(scope="module")
def sandbox() -> Path:
    """A world-readable copy of the package and fixtures, so the unprivileged uid can run them."""
    root = Path(tempfile.mkdtemp(prefix="skill-mcp-hardening-"))
    root.chmod(0o755)
    shutil.copytree(REPO / "skill_mcp", root / "skill_mcp", ignore=shutil.ignore_patterns("__pycache__", "skills"))
    shutil.copytree(FIXTURES, root / "fixtures", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield root
    shutil.rmtree(root)


def driver(
    sandbox: Path, steps: str, interpreter: str, script: str, launcher: tuple[str, ...] = (), args: tuple[str, ...] = (),
    **popen,
) -> subprocess.Popen:
    interpreter_path = {"python3": SYSTEM_PYTHON, "node": NODE}[interpreter]
    # A launcher starts the driver in its own way, as the unprivileged uid.
    argv = [*(launcher or UNPRIVILEGED), SYSTEM_PYTHON, "-B", str(sandbox / "fixtures" / "fence_driver.py"), steps,
            interpreter, interpreter_path, str(sandbox / "fixtures" / "scripts" / script), *args]
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(sandbox), "HOME": "/nonexistent", "FENCE_SECRET": "hunter2"}
    return subprocess.Popen(argv, env=env, cwd=sandbox, stdout=subprocess.PIPE, text=True, **popen)


def drive(
    sandbox: Path, steps: str, interpreter: str, script: str, launcher: tuple[str, ...] = (), args: tuple[str, ...] = ()
) -> dict:
    process = driver(sandbox, steps, interpreter, script, launcher=launcher, args=args)
    stdout, _ = process.communicate(timeout=30)
    assert process.returncode == 0
    return json.loads(stdout)


@pytest.fixture(params=["python3", "node"])
def peek_script(request: pytest.FixtureRequest) -> tuple[str, str]:
    if request.param == "node" and NODE is None:
        pytest.skip("NOTICE: node not found on PATH, the Node peek was not run")
    return request.param, {"python3": "peek_parent.py", "node": "peek_parent.js"}[request.param]


@linux_only
def test_without_hardening_a_script_reads_the_servers_secrets(sandbox: Path, peek_script) -> None:
    report = drive(sandbox, "none", *peek_script)
    assert "FENCE_SECRET=hunter2" in report["child"]["environ"]["text"]


@linux_only
def test_scrub_leaves_only_zeros_in_the_exec_time_block(sandbox: Path, peek_script) -> None:
    report = drive(sandbox, "scrub", *peek_script)
    assert report["scrub"]["status"] == "scrubbed" and report["scrub"]["wiped_bytes"] > 0
    seen = report["child"]
    assert seen["environ"]["nonZero"] == 0
    assert seen["mem"] == {"bytes": report["scrub"]["wiped_bytes"], "nonZero": 0, "text": "\0" * report["scrub"]["wiped_bytes"]}
    assert (report["environ"], report["getenv"]) == ("hunter2", "hunter2")


@linux_only
def test_scrubbed_non_dumpable_server_is_closed_to_its_scripts(sandbox: Path, peek_script) -> None:
    report = drive(sandbox, "scrub,nondump", *peek_script)
    assert report["scrub"]["status"] == "scrubbed"
    assert report["nonDumpable"] is True
    assert report["child"] == {"environ": {"error": "EACCES"}, "mem": {"error": "EACCES"}}
    assert (report["environ"], report["getenv"]) == ("hunter2", "hunter2")


# A PID namespace of its own, PID 1 being whatever the launcher's command runs: what `docker run --init` makes.
OWN_PID_NAMESPACE = ("unshare", "--pid", "--fork", "--mount-proc")
needs_root = pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"), reason="needs root and unshare")


@linux_only
@needs_root
def test_a_same_uid_init_holding_the_environment_fails_the_scrub_for_real(sandbox: Path) -> None:
    # sh stays PID 1 (a command follows the driver), with the driver's environment: as docker-init does.
    init = (*OWN_PID_NAMESPACE, *UNPRIVILEGED, "/bin/sh", "-c", '"$@"; exit $?', "init")
    report = drive(sandbox, "scrub,nondump", "python3", "peek_parent.py", launcher=init)
    assert report["scrub"] == {"status": "failed", "wiped_bytes": None, "reason": INIT_HOLDS_ENVIRON}


# sh -c 'env -u MCP_SKILLS_PATH sh -c "MCP_SKILLS_PATH=/skills <server>; ..."; ...': the wrapper two levels up
# holds the server's settings, the one between does not (it only hands them on).
SETTINGS_TWO_WRAPPERS_UP = ("/usr/bin/env", "MCP_SKILLS_PATH=/skills", "/bin/sh", "-c", '"$@"; exit $?', "outer",
                            "/usr/bin/env", "-u", "MCP_SKILLS_PATH", "/bin/sh", "-c",
                            'MCP_SKILLS_PATH=/skills "$@"; exit $?', "inner")  # fmt: skip


@linux_only
@needs_root
def test_a_same_uid_wrapper_up_the_chain_holding_the_settings_fails_the_scrub_for_real(sandbox: Path) -> None:
    launcher = (*UNPRIVILEGED, *SETTINGS_TWO_WRAPPERS_UP)
    report = drive(sandbox, "scrub,nondump", "python3", "peek_parent.py", launcher=launcher)
    assert report["scrub"] == {"status": "failed", "wiped_bytes": None, "reason": ANCESTOR_HOLDS_ENVIRON}


@linux_only
@needs_root
@pytest.mark.parametrize(
    "launcher",
    [SETTINGS_TWO_WRAPPERS_UP, (*OWN_PID_NAMESPACE, "/bin/sh", "-c", '"$@"; exit $?', "init")],
    ids=["wrappers", "init"],
)
def test_a_root_servers_wrappers_and_init_are_not_held_against_it(sandbox: Path, launcher: tuple[str, ...]) -> None:
    # Root's scripts can read every process anyway: that its wrappers or init hold the settings exposes nothing more.
    report = drive(sandbox, "scrub,nondump", "python3", "peek_parent.py", launcher=launcher)
    assert report["scrub"]["status"] == "scrubbed"


@linux_only
@needs_root
def test_the_server_as_pid_1_is_scrubbed(sandbox: Path) -> None:
    report = drive(sandbox, "scrub,nondump", "python3", "peek_parent.py", launcher=(*OWN_PID_NAMESPACE, *UNPRIVILEGED))
    assert report["scrub"]["status"] == "scrubbed"
    assert report["child"] == {"environ": {"error": "EACCES"}, "mem": {"error": "EACCES"}}


@linux_only
@needs_root
def test_the_server_as_pid_1_reaps_what_a_script_left_behind(sandbox: Path) -> None:
    # Without an init, orphans are the server's: the first run's killed grandchild must not stay a zombie.
    report = drive(sandbox, "twice", "python3", "group_child.py", launcher=(*OWN_PID_NAMESPACE, *UNPRIVILEGED))
    first_grandchild = int(report["runs"][0]["stdout"].split()[1])
    assert first_grandchild not in report["zombies"]


@linux_only
@needs_root
def test_a_server_whose_proc_is_another_pid_namespaces_ends_each_run_at_once(sandbox: Path) -> None:
    # PID 1 of a namespace of its own, with the host's /proc: the children it lists are host pids, which are no
    # processes to it; a sweep taking them for children collected meanwhile would spin out its 2 s every run.
    host_proc = ("unshare", "--pid", "--fork", *UNPRIVILEGED)
    report = drive(sandbox, "adopt,twice", "python3", "exit3.py", launcher=host_proc)
    assert [run["durationMs"] < 1000 for run in report["runs"]] == [True, True]


@linux_only
def test_what_a_sweep_out_of_time_left_is_killed_at_the_next_runs_end(sandbox: Path) -> None:
    # The leftovers are older than the next script; the next sweep still goes back to them.
    report = drive(sandbox, "adopt,twice,short-sweep", "python3", "detached_holder.py")
    first, second = (int(run["stdout"].split()[1]) for run in report["runs"])
    time.sleep(0.2)
    assert (is_alive(first), is_alive(second)) == (False, False)


def is_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as status:
            return status.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


@linux_only
def test_a_run_that_times_out_settles_on_a_server_that_adopts_orphans(sandbox: Path) -> None:
    # Its leader is reaped before the run settles, and settling kills the group once more: that last kill finds
    # no leader to sweep after, and must not fail the run.
    report = drive(sandbox, "adopt,short-timeout", "python3", "spinner.py")
    assert [(run["timedOut"], run["durationMs"] < 5000) for run in report["runs"]] == [(True, True)]


@linux_only
def test_a_relay_that_keeps_changing_group_dies_with_its_script(sandbox: Path) -> None:
    # Each link lives too briefly for a scan of /proc to find it; adopted by the server, it is its child instead.
    shared = world_readable_dir()
    shared.chmod(0o777)
    beat, stop = shared / "beat", shared / "stop"
    try:
        report = drive(sandbox, "adopt", "python3", "relay.py", args=(str(beat), str(stop)))
        assert report["runs"][0]["stdout"] == "leader done\n"
        time.sleep(0.5)
        size = beat.stat().st_size
        time.sleep(0.5)
        assert beat.stat().st_size == size, "a relay still runs after its run settled"
    finally:
        stop.touch()
        time.sleep(0.2)
        shutil.rmtree(shared)


@linux_only
def test_a_grandchild_that_left_the_session_dies_with_its_script(sandbox: Path) -> None:
    # setsid puts it out of reach of any group or session kill; adopted by the server, it is killed as its leader
    # exits, so the run settles at once rather than at the hard deadline.
    report = drive(sandbox, "adopt", "python3", "detached_spinner.py")
    run = report["runs"][0]
    grandchild = int(run["stdout"].split()[1])
    assert (run["timedOut"], run["durationMs"] < 2000) == (False, True)
    assert not os.path.exists(f"/proc/{grandchild}") or process_state(grandchild) == "Z"


def process_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


@linux_only
def test_a_script_dies_with_its_server(sandbox: Path) -> None:
    process = driver(sandbox, "announce", "python3", "spinner.py")
    try:
        script_pid = announced_pid(process)
    finally:
        process.kill()
        process.wait()
    assert_dies_soon(script_pid)


def announced_pid(process: subprocess.Popen) -> int:
    ready, _, _ = select.select([process.stdout], [], [], 10)
    assert ready, "the driver never announced its script"
    return json.loads(process.stdout.readline())["pid"]


def assert_dies_soon(script_pid: int) -> None:
    """The script is gone within 2 s of its server's death (its group is killed here either way)."""
    deadline = time.monotonic() + 2
    try:
        while not is_gone(script_pid):
            assert time.monotonic() < deadline, "the script outlived its server"
            time.sleep(0.02)
    finally:
        try:
            os.killpg(script_pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def is_gone(pid: int) -> bool:
    """Dead counts: reaped, or a zombie whose new parent has not reaped it yet."""
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in (b"Z", b"X")


@linux_only
def test_a_nameless_environ_entry_is_wiped_not_a_failed_scrub(tmp_path: Path) -> None:
    # execve accepts "=x"; setenv refuses an empty name, which used to fail the scrub and block every hosted run.
    exec_server = (
        "import ctypes, sys\n"
        "argv = [sys.executable.encode(), b'-m', b'skill_mcp']\n"
        "envp = [b'PATH=/usr/bin:/bin', b'=nameless', b'MCP_SKILLS_PATH=' + sys.argv[1].encode(), b'MCP_SKILL_RUN=[]']\n"
        "ctypes.CDLL(None).execve(argv[0], (ctypes.c_char_p * 4)(*argv, None), (ctypes.c_char_p * 5)(*envp, None))\n"
    )
    done = subprocess.run([sys.executable, "-c", exec_server, str(tmp_path)], cwd=REPO, input=b"",
                          capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    events = [json.loads(line) for line in done.stderr.splitlines()]
    (boot,) = [event for event in events if event["event"] == "boot"]
    assert (boot["hosted"], boot["environScrub"]) == (True, "scrubbed")
    assert not [event for event in events if event["level"] == "warning"]


@linux_only
def test_a_script_ignoring_sigterm_still_dies_with_its_server(sandbox: Path) -> None:
    # §9.8: the parent-death signal is SIGKILL, which a script cannot ignore (SIGTERM it could). The script writes
    # nothing, so a broken stdout pipe cannot be what kills it (as it is for spinner.py in the test above).
    process = driver(sandbox, "announce", "python3", "term_ignorer.py")
    try:
        script_pid = announced_pid(process)
        deadline = time.monotonic() + 10
        while not in_signal_mask(script_pid, "SigIgn", signal.SIGTERM):
            assert time.monotonic() < deadline, "the script never got to ignore SIGTERM"
            time.sleep(0.02)
    finally:
        process.kill()
        process.wait()
    assert_dies_soon(script_pid)
