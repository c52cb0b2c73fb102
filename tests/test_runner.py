"""The execution fence with real processes (SPEC §9.3–§9.6, §9.8); Node cases skip visibly without node."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import anyio
import pytest

from skill_mcp import runner
from skill_mcp.hardening import ChildLimits
from skill_mcp.limits import MAX_OUTPUT_BYTES
from skill_mcp.runner import (
    NETWORK_NOTE,
    RunOutcome,
    SpawnFailed,
    build_argv,
    kill_process_group,
    network_note,
    run_process,
    script_environment,
)

SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"
# The pyenv python3 first on PATH is unusable for other uids; the system one stands in for a deployment's.
INTERPRETER_PATHS = {
    "python3": "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else shutil.which("python3"),
    "node": shutil.which("node"),
}
EXTENSIONS = {"python3": "py", "node": "js"}
SETTLE_SLACK_MS = 1500  # loose enough for a loaded CI machine; a broken fence misses by tens of seconds


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(params=["python3", "node"])
def interpreter(request: pytest.FixtureRequest) -> str:
    if INTERPRETER_PATHS[request.param] is None:
        pytest.skip(f"NOTICE: {request.param} not found on PATH, its fixture scripts were not run")
    return request.param


async def run_fixture(interpreter: str, name: str, args: list[str] | None = None, *, timeout_ms: int = 10000,
                      env: dict[str, str] | None = None, limits: ChildLimits = ChildLimits(),
                      cwd: Path = SCRIPTS, on_start=None) -> RunOutcome:
    script = str(SCRIPTS / f"{name}.{EXTENSIONS[interpreter]}")
    argv = build_argv(interpreter, INTERPRETER_PATHS[interpreter], script, args or [])
    env = {"PATH": os.environ["PATH"]} if env is None else env
    return await run_process(argv, str(cwd), env, timeout_ms, limits, on_start=on_start)


def grandchild_pid(stdout: str) -> int:
    return int(re.search(r"grandchild (\d+)", stdout).group(1))


def no_pidfd(pid: int) -> int:
    raise OSError("pidfd_open unavailable")


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- pure parts ---------------------------------------------------------------------------------

def test_python_argv_gets_isolation_flags() -> None:
    assert build_argv("python3", "/usr/bin/python3", "/s/x.py", ["a", "b"]) == [
        "/usr/bin/python3", "-B", "-E", "-s", "/s/x.py", "a", "b"]


def test_node_argv_is_interpreter_script_args() -> None:
    assert build_argv("node", "/usr/bin/node", "/s/x.js", ["--a"]) == ["/usr/bin/node", "/s/x.js", "--a"]


def test_argv_refuses_interpreters_outside_the_closed_set() -> None:
    with pytest.raises(ValueError):
        build_argv("bash", "/bin/bash", "/s/x.sh", [])


def test_script_environment_spec_example() -> None:
    environ = {"PATH": "/bin", "HOME": "/h", "TZ": "UTC", "API_KEY": "k", "UNRELATED_TOKEN": "t", "SKILLS_DIR": "/s"}
    assert script_environment(environ, ["API_KEY"]) == {"PATH": "/bin", "HOME": "/h", "TZ": "UTC", "API_KEY": "k"}
    assert sorted(script_environment(environ, ["API_KEY"])) == ["API_KEY", "HOME", "PATH", "TZ"]


def test_script_environment_order_raw_values_and_reserved_names() -> None:
    environ = {
        "TMPDIR": "/t", "LANG": "C.UTF-8", "PATH": "/bin", "HOME": "/h", "TZ": "", "MCP_DATA_DIR": " /d ",
        "B": "undefined", "A": "${A}", "NODE_OPTIONS": "--require x", "MCP_SKILL_RUN": "[]", "LC_ALL": "C",
        "HTTPS_PROXY": "http://p", "USER": "u",
    }
    handed = script_environment(environ, ["B", "NODE_OPTIONS", "A", "MISSING", "B", "MCP_SKILL_RUN", "HTTPS_PROXY"])
    assert list(handed.items()) == [
        ("PATH", "/bin"), ("HOME", "/h"), ("LANG", "C.UTF-8"), ("TZ", ""), ("TMPDIR", "/t"),
        ("MCP_DATA_DIR", " /d "), ("B", "undefined"), ("A", "${A}"),
    ]


def test_script_environment_of_an_empty_server_environment_is_empty() -> None:
    assert script_environment({}, ["API_KEY"]) == {}


def outcome(exit_code: int | None = 0, timed_out: bool = False) -> RunOutcome:
    return RunOutcome(exit_code, None if exit_code is not None else "SIGKILL", "", "", False, False, timed_out, 1, 1, 0, 0)


@pytest.mark.parametrize(
    ("exit_code", "timed_out", "fenced", "proxy", "expected"),
    [
        (0, False, True, True, False),
        (1, False, False, False, False),
        (1, False, True, False, True),
        (1, False, False, True, True),
        (None, False, True, False, True),
        (0, True, False, True, True),
    ],
)
def test_network_note_only_for_failed_runs_behind_a_fence(exit_code, timed_out, fenced, proxy, expected) -> None:
    note = network_note(outcome(exit_code, timed_out), egress_fenced=fenced, proxy_set=proxy)
    assert (note == NETWORK_NOTE) is expected and (note is None) is not expected
    note = network_note(outcome(exit_code, timed_out), egress_fenced=fenced, proxy_set=proxy)
    assert note == (NETWORK_NOTE if expected else None)


def test_network_note_names_the_egress_allowlist() -> None:
    assert "egress" in NETWORK_NOTE.lower()


# --- real processes -----------------------------------------------------------------------------

@pytest.mark.anyio
async def test_arguments_arrive_verbatim(interpreter: str, tmp_path: Path) -> None:
    args = ["; touch pwned", "$(whoami)", "|| ls", "", "two words", "ünï`id`", "-c"]
    result = await run_fixture(interpreter, "echo_argv", args, cwd=tmp_path)
    assert (result.exit_code, result.signal, result.timed_out) == (0, None, False)
    assert json.loads(result.stdout) == args
    assert list(tmp_path.iterdir()) == []


@pytest.mark.anyio
async def test_non_zero_exit_keeps_code_and_output(interpreter: str) -> None:
    result = await run_fixture(interpreter, "exit3")
    assert (result.exit_code, result.signal, result.timed_out) == (3, None, False)
    assert result.stdout == "partial result\n"
    assert result.stderr == "something went wrong\n"
    assert (result.stdout_bytes, result.stderr_bytes) == (15, 21)


@pytest.mark.anyio
async def test_timeout_terminates_the_group_and_keeps_partial_output(interpreter: str) -> None:
    result = await run_fixture(interpreter, "spinner", timeout_ms=1000)
    assert result.timed_out is True
    assert (result.exit_code, result.signal) == (None, "SIGTERM")
    assert result.stdout == "spinning\n"
    assert 1000 <= result.duration_ms < 1000 + SETTLE_SLACK_MS


@pytest.mark.anyio
async def test_output_is_capped_per_stream(interpreter: str) -> None:
    result = await run_fixture(interpreter, "flood")
    assert result.exit_code == 0
    assert len(result.stdout) == MAX_OUTPUT_BYTES == 1048576
    assert (result.truncated_stdout, result.truncated_stderr) == (True, False)
    assert (result.stdout_bytes, result.stderr_bytes) == (40 * 65536, 0)


@pytest.mark.anyio
async def test_detached_grandchild_holding_the_pipes_does_not_delay_settling(interpreter: str) -> None:
    result = await run_fixture(interpreter, "detached_holder", timeout_ms=10000)
    try:
        assert (result.exit_code, result.timed_out) == (0, False)
        assert "leader done" in result.stdout
        # The leader exits about 100 ms after start and the drain adds 250 ms; the holder would keep it 30 s.
        assert result.duration_ms < 2000
    finally:
        kill_quietly(grandchild_pid(result.stdout))


@pytest.mark.anyio
@pytest.mark.parametrize("waitid", ["waitid", "no-waitid"])  # macOS has neither pidfd_open nor os.waitid
async def test_exit_is_detected_without_pidfd(monkeypatch: pytest.MonkeyPatch, waitid: str) -> None:
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    if waitid == "no-waitid":
        monkeypatch.delattr(os, "waitid")
    result = await run_fixture("python3", "detached_holder", timeout_ms=10000)
    try:
        assert (result.exit_code, result.timed_out) == (0, False)
        assert result.duration_ms < 2000
    finally:
        kill_quietly(grandchild_pid(result.stdout))


@pytest.mark.anyio
@pytest.mark.parametrize("exit_watch", ["pidfd", "thread"])
@pytest.mark.parametrize("fixture", ["group_child", "regrouped_child"])
async def test_what_the_script_leaves_in_its_session_dies_with_it(
    exit_watch: str, fixture: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A background job would outlive the run, its timeout and the server, and could rewrite the skill's scripts
    # between an approval and the next run; a child that only changed its process group (setpgid) is still in
    # the script's session, and dies too.
    if exit_watch == "thread":
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    result = await run_fixture("python3", fixture)
    children = [int(pid) for pid in re.findall(r"grandchild (\d+)", result.stdout)]
    try:
        assert (result.exit_code, result.timed_out) == (0, False)
        deadline = time.monotonic() + 2
        while not all(map(_gone, children)) and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        assert [_gone(child) for child in children] == [True] * len(children)
    finally:
        for child in children:
            kill_quietly(child)


def _session(*args: str) -> tuple[subprocess.Popen, list[int]]:
    """regrouped_child.py as a script's session leader, run to its exit (reaped); its regrouped children live."""
    leader = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "regrouped_child.py"), *args], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    return leader, [int(pid) for pid in re.findall(r"grandchild (\d+)", leader.communicate()[0])]


def _all_gone(children: list[int], seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not all(map(_gone, children)) and time.monotonic() < deadline:  # a signal lands asynchronously
        time.sleep(0.01)
    return all(map(_gone, children))


def test_killing_a_group_whose_leader_is_gone_still_reports_its_session() -> None:
    # The leader exited (and was reaped): its group is empty, but the children it moved to groups of their own
    # are still in its session, and are what was signalled.
    leader, children = _session("6")
    try:
        assert len(children) == 6
        assert kill_process_group(leader.pid) is True
        assert _all_gone(children)
        assert kill_process_group(leader.pid) is False  # nothing left to signal
    finally:
        for child in children:
            kill_quietly(child)


def test_a_timeouts_sigterm_reaches_every_group_of_the_session(tmp_path: Path) -> None:
    marker = tmp_path / "terms"
    leader, children = _session("3", str(marker))
    try:
        assert kill_process_group(leader.pid, signal.SIGTERM) is True
        assert _all_gone(children)
        assert marker.read_text() == "term\n" * 3
    finally:
        for child in children:
            kill_quietly(child)


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # killed, awaiting its reaper
    except FileNotFoundError:
        return True


@pytest.mark.anyio
async def test_detached_writer_is_cut_at_the_hard_deadline(interpreter: str) -> None:
    started = time.monotonic()
    result = await run_fixture(interpreter, "detached_spinner", timeout_ms=1000)
    elapsed_ms = (time.monotonic() - started) * 1000
    try:
        # The leader's real exit code stands next to timedOut.
        assert (result.exit_code, result.signal, result.timed_out) == (0, None, True)
        assert "tick" in result.stdout
        assert 1000 + 3250 <= result.duration_ms <= elapsed_ms < 1000 + 3250 + SETTLE_SLACK_MS
    finally:
        kill_quietly(grandchild_pid(result.stdout))


@pytest.mark.anyio
async def test_environment_is_exactly_the_allowlist_and_declared_names(interpreter: str) -> None:
    environ = {
        "PATH": os.environ["PATH"], "HOME": "/nonexistent", "TZ": "UTC", "MCP_DATA_DIR": "/data",
        "API_KEY": "granted value", "SENTINEL_SECRET": "must-not-leak", "SKILLS_DIR": "/skills",
        "NODE_OPTIONS": "--require /evil.js", "PYTHONPATH": "/evil", "LC_ALL": "C",
    }
    handed = script_environment(environ, ["API_KEY", "NODE_OPTIONS"])
    result = await run_fixture(interpreter, "env_dump", env=handed)
    seen = json.loads(result.stdout)
    assert seen == {"PATH": environ["PATH"], "HOME": "/nonexistent", "TZ": "UTC", "MCP_DATA_DIR": "/data",
                    "API_KEY": "granted value"}
    assert "must-not-leak" not in result.stdout


@pytest.mark.anyio
async def test_children_get_no_new_privs_and_no_core_dumps(interpreter: str) -> None:
    result = await run_fixture(interpreter, "limits_report")
    report = json.loads(result.stdout)
    assert report["noNewPrivs"] == 1
    assert report["core"] == ["0", "0"]


@pytest.mark.anyio
async def test_configured_rlimits_are_the_childs(interpreter: str) -> None:
    # node needs about 4 GiB of address space to start.
    result = await run_fixture(interpreter, "limits_report", limits=ChildLimits(rlimit_nproc=777, rlimit_as_mb=8192))
    report = json.loads(result.stdout)
    assert report["nproc"] == ["777", "777"]
    assert report["as"] == [str(8192 * 1048576)] * 2


@pytest.mark.anyio
async def test_missing_interpreter_is_a_spawn_failure(tmp_path: Path) -> None:
    with pytest.raises(SpawnFailed) as failure:
        await run_process([str(tmp_path / "node"), "x.js"], str(tmp_path), {}, 1000, ChildLimits())
    assert "No such file or directory" in failure.value.reason


@pytest.mark.anyio
async def test_failed_child_setup_never_execs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(limits: ChildLimits, parent_pid: int) -> None:
        raise OSError("prctl(PR_SET_NO_NEW_PRIVS): Operation not permitted")

    monkeypatch.setattr(runner, "harden_child", refuse)
    argv = [INTERPRETER_PATHS["python3"], "-c", "open('ran', 'w')"]
    with pytest.raises(SpawnFailed) as failure:
        await run_process(argv, str(tmp_path), {}, 1000, ChildLimits())
    assert failure.value.reason == "prctl(PR_SET_NO_NEW_PRIVS): Operation not permitted"
    assert not (tmp_path / "ran").exists()


@pytest.mark.anyio
async def test_on_start_reports_the_pid_and_an_outside_kill_ends_the_run(interpreter: str) -> None:
    started: list[int] = []

    def on_start(pid: int) -> None:
        started.append(pid)
        asyncio.get_running_loop().call_later(0.5, kill_process_group, pid)

    result = await run_fixture(interpreter, "spinner", timeout_ms=10000, on_start=on_start)
    assert started == [result.pid]
    assert (result.exit_code, result.signal, result.timed_out) == (None, "SIGKILL", False)
    assert result.stdout == "spinning\n"


@pytest.mark.anyio
async def test_cancelling_the_run_kills_the_script() -> None:
    started: list[int] = []
    with anyio.move_on_after(0.5):
        await run_fixture("python3", "spinner", timeout_ms=10000, on_start=started.append)
    pid = started[0]
    # Killed and reaped by the exit watcher: no zombie left behind.
    with anyio.fail_after(2):
        while Path(f"/proc/{pid}").exists():
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_a_script_ignoring_sigterm_is_killed_2000_ms_after_the_timeout(tmp_path: Path) -> None:
    # §9.4: SIGTERM to the group at the timeout, SIGKILL to the group 2000 ms later (not only at the hard deadline).
    argv = [INTERPRETER_PATHS["python3"], "-c",
            "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ignoring', flush=True)\n"
            "while True: time.sleep(0.05)"]
    result = await run_process(argv, str(tmp_path), {}, 1000, ChildLimits())
    assert result.timed_out is True
    assert (result.exit_code, result.signal) == (None, "SIGKILL")
    assert result.stdout == "ignoring\n"
    # killed by the grace timer, before the hard deadline (timeout + 3250 ms) would have done it
    assert 1000 + 2000 <= result.duration_ms < 1000 + 3250


@pytest.mark.anyio
async def test_output_of_exactly_the_cap_is_not_truncated(tmp_path: Path) -> None:
    # §9.4: only a dropped byte sets truncated; 1048576 bytes (split over many pipe reads) are all kept.
    argv = [INTERPRETER_PATHS["python3"], "-c",
            f"import os\nfor _ in range(16): os.write(1, b'x' * 65536)\nos.write(2, b'y' * {MAX_OUTPUT_BYTES})"]
    result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
    assert result.exit_code == 0
    assert (len(result.stdout), len(result.stderr)) == (MAX_OUTPUT_BYTES, MAX_OUTPUT_BYTES)
    assert (result.truncated_stdout, result.truncated_stderr) == (False, False)


@pytest.mark.anyio
async def test_stdin_is_dev_null_not_the_servers_stdin(tmp_path: Path) -> None:
    # §9.4: stdin is /dev/null. The server's own stdin (the MCP stream on stdio) is made a pipe here, so a
    # script inheriting it would see the pipe and the bytes waiting in it.
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"jsonrpc": "2.0"}\n')
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        argv = [INTERPRETER_PATHS["python3"], "-c",
                "import os, sys\nprint(os.readlink('/proc/self/fd/0'))\nprint(repr(sys.stdin.read()))"]
        result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert result.stdout == "/dev/null\n''\n"
