"""The execution fence with real processes (SPEC §9.3–§9.6, §9.8); Node cases skip visibly without node."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import time
from pathlib import Path

import anyio
import pytest
from support import fails_after, kill_quietly, process_gone

from skill_mcp import runner
from skill_mcp.hardening import ChildLimits
from skill_mcp.limits import MAX_OUTPUT_BYTES
from skill_mcp.reaper import kill_process_group
from skill_mcp.runner import (
    NETWORK_NOTE,
    RunOutcome,
    SpawnFailed,
    build_argv,
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
TIMER_SLACK_S = 0.45  # how late one timer may fire on a loaded machine; a timer set wrong misses by more


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


# §9.6's reserved names, spelled out here rather than read from the module under test, and the proxy variables
# (§2.2: never handed to scripts).
SPEC_RESERVED = [
    "MCP_SKILLS_PATH", "MCP_SKILL_RUN", "SKILLS_DIR", "MCP_HOST_METER_FILE", "MCP_BLOB_BASE_URL",
    "MCP_BLOB_SIGNING_KEY", "MCP_SKILL_ALLOW_UNSCRUBBED", "MCP_CONFIRM_MODE", "MCP_CONFIRM_ELICITATION",
    "MCP_CONFIRM_TTL_SECONDS", "MCP_CONFIRM_SECRET", "MCP_HOST_CONFIRM_SECRET", "MCP_MAX_SKILLS", "MCP_SKILL_NODE",
    "MCP_SKILL_PYTHON", "MCP_SKILL_RLIMIT_NPROC", "MCP_SKILL_RLIMIT_AS_MB", "MCP_LOG_LEVEL", "MCP_LOG_FORMAT",
    "MCP_EGRESS_FENCED", "MCP_EGRESS_ALLOW", "NODE_OPTIONS", "NODE_REPL_EXTERNAL_MODULE", "NODE_PATH", "LD_PRELOAD",
    "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP",
    "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
]


@pytest.mark.parametrize("name", SPEC_RESERVED)
def test_a_reserved_name_is_never_handed_over_even_when_declared(name: str) -> None:
    environ = {"PATH": "/bin", name: "server-only value", "API_KEY": "k"}
    assert script_environment(environ, [name, "API_KEY"]) == {"PATH": "/bin", "API_KEY": "k"}


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
        while not all(map(process_gone, children)) and time.monotonic() < deadline:
            await anyio.sleep(0.02)
        assert [process_gone(child) for child in children] == [True] * len(children)
    finally:
        for child in children:
            kill_quietly(child)


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
    assert failure.value.reason == f"No such file or directory: {tmp_path / 'node'}"  # the OS reason and the file


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


IGNORES_SIGTERM = (
    "import signal, time\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nprint('ignoring', flush=True)\n"
    "while True: time.sleep(0.05)"
)


@pytest.mark.anyio
async def test_a_script_ignoring_sigterm_is_killed_2000_ms_after_the_timeout(tmp_path: Path) -> None:
    # §9.4: SIGTERM to the group at the timeout, SIGKILL to the group 2000 ms later (not only at the hard deadline).
    argv = [INTERPRETER_PATHS["python3"], "-c", IGNORES_SIGTERM]
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


@pytest.mark.anyio
async def test_no_inherited_descriptor_reaches_the_script(tmp_path: Path) -> None:
    # §9.4: all descriptors but the three standard ones are closed, even one the server left inheritable.
    read_end, write_end = os.pipe()
    os.set_inheritable(read_end, True)
    os.set_inheritable(write_end, True)
    try:
        argv = [INTERPRETER_PATHS["python3"], "-c", "import os\nprint(sorted(int(fd) for fd in os.listdir('/proc/self/fd')))"]
        result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
    finally:
        os.close(read_end)
        os.close(write_end)
    open_fds = json.loads(result.stdout)
    assert read_end not in open_fds and write_end not in open_fds
    assert open_fds[:3] == [0, 1, 2] and len(open_fds) == 4  # the fourth is listdir's own


@pytest.mark.anyio
async def test_a_setup_failure_without_a_message_still_says_why(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(limits: ChildLimits, parent_pid: int) -> None:
        raise OSError()  # str() is empty: nothing is written to the reason pipe

    monkeypatch.setattr(runner, "harden_child", refuse)
    argv = [INTERPRETER_PATHS["python3"], "-c", "open('ran', 'w')"]
    with fails_after(20), pytest.raises(SpawnFailed) as failure:  # a read of a pipe still open here would block
        await run_process(argv, str(tmp_path), {}, 1000, ChildLimits())
    assert failure.value.reason == "the script's process setup failed before exec"
    assert not (tmp_path / "ran").exists()


@pytest.mark.anyio
@pytest.mark.parametrize("exit_watch", ["pidfd", "thread"])
async def test_a_non_zero_exit_code_is_kept_whichever_way_the_exit_is_watched(
    exit_watch: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if exit_watch == "thread":
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    result = await run_fixture("python3", "exit3")
    assert (result.exit_code, result.signal, result.timed_out) == (3, None, False)


def _open_fds() -> set[int]:
    return {int(fd) for fd in os.listdir("/proc/self/fd")}


@pytest.mark.anyio
async def test_a_run_leaves_no_descriptor_open_behind_it(tmp_path: Path) -> None:
    argv = [INTERPRETER_PATHS["python3"], "-c", "print('x')"]
    await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())  # anything opened once per process
    before = _open_fds()
    for _ in range(3):
        result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
        assert result.stdout == "x\n"
    assert _open_fds() - before == set()


@pytest.mark.anyio
async def test_a_leader_still_running_at_the_hard_deadline_reports_sigkill(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hard deadline settles as it sends SIGKILL, before the leader is reaped: the result names that kill.
    monkeypatch.setattr(runner, "TERM_GRACE_MS", 60000)
    monkeypatch.setattr(runner, "HARD_DEADLINE_EXTRA_MS", 300)
    argv = [INTERPRETER_PATHS["python3"], "-c", IGNORES_SIGTERM]
    result = await run_process(argv, str(tmp_path), {}, 500, ChildLimits())
    assert (result.exit_code, result.signal, result.timed_out) == (None, "SIGKILL", True)
    assert result.stdout == "ignoring\n"
    with anyio.fail_after(5):
        while not process_gone(result.pid):
            await anyio.sleep(0.02)


@pytest.mark.anyio
async def test_a_signal_without_a_name_is_reported_by_number(tmp_path: Path) -> None:
    # Realtime signals have no name in Python's enum: SIGRTMIN + 2 is reported as SIG<number>.
    number = signal.SIGRTMIN + 2
    argv = [INTERPRETER_PATHS["python3"], "-c", f"import os\nos.kill(os.getpid(), {number})"]
    result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
    assert (result.exit_code, result.signal) == (None, f"SIG{number}")


@pytest.mark.anyio
async def test_no_signal_is_sent_for_a_run_once_it_has_settled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Every timer is cancelled at settle: the timeout, the grace kill and the hard deadline would otherwise signal
    # a pid that is no longer the script's (reaped, and free for reuse by any process).
    sent: list[tuple[int, int]] = []
    settled: list[bool] = []

    def recording(pid: int, sig: int = signal.SIGKILL) -> bool:
        if settled:
            sent.append((pid, sig))
        return kill_process_group(pid, sig)

    monkeypatch.setattr(runner, "kill_process_group", recording)
    monkeypatch.setattr(runner, "TERM_GRACE_MS", 300)
    monkeypatch.setattr(runner, "HARD_DEADLINE_EXTRA_MS", 600)
    quick = [INTERPRETER_PATHS["python3"], "-c", "print('done')"]
    result = await run_process(quick, str(tmp_path), {}, 1500, ChildLimits())
    assert (result.exit_code, result.timed_out) == (0, False)
    settled.append(True)
    # exits at the timeout's SIGTERM, so settles before the grace kill is due
    stops = [INTERPRETER_PATHS["python3"], "-c", "import time\nprint('up', flush=True)\ntime.sleep(60)"]
    settled.clear()
    result = await run_process(stops, str(tmp_path), {}, 200, ChildLimits())
    assert (result.signal, result.timed_out) == ("SIGTERM", True)
    settled.append(True)
    await anyio.sleep((1500 + 600) / 1000 + 0.3)  # past every timer of both runs
    assert sent == []


def _session_members(session: int) -> list[int]:
    """Live (not zombie) processes whose session id is `session`."""
    members = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as stat:
                    fields = stat.read().rsplit(b")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if int(fields[3]) == session and fields[0] != b"Z":
                members.append(int(name))
    return members


BREEDER = """\
import os, time
ready_read, ready_write = os.pipe()
if os.fork() == 0:
    os.setpgid(0, 0)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    os.write(ready_write, b".")
    for _ in range(200):
        if os.fork() == 0:
            os.setpgid(0, 0)
            time.sleep(60)
            os._exit(0)
        time.sleep(0.002)
    time.sleep(60)
    os._exit(0)
os.read(ready_read, 1)
"""


@pytest.mark.anyio
async def test_children_forked_while_the_session_is_being_killed_die_too(tmp_path: Path) -> None:
    # A child in a group of its own that keeps forking: what it forks while a kill pass runs is missed by that pass,
    # so passes repeat until one finds nobody left.
    for _ in range(5):
        result = await run_process([INTERPRETER_PATHS["python3"], "-c", BREEDER], str(tmp_path), {}, 10000, ChildLimits())
        assert (result.exit_code, result.timed_out) == (0, False)
        try:
            with anyio.fail_after(5):
                while _session_members(result.pid):
                    await anyio.sleep(0.02)
        finally:
            for pid in _session_members(result.pid):
                kill_quietly(pid)


@pytest.mark.anyio
async def test_the_grace_kill_comes_2000_ms_after_the_sigterm(tmp_path: Path) -> None:
    # §9.4: SIGKILL to the group TERM_GRACE_MS after the timeout's SIGTERM. The script notes when the SIGTERM
    # arrived; the run settles as the SIGKILL lands (exit detection is immediate).
    argv = [INTERPRETER_PATHS["python3"], "-c",
            "import signal, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: print('term', time.monotonic(), flush=True))\n"
            "print('up', flush=True)\nwhile True: time.sleep(0.05)"]
    result = await run_process(argv, str(tmp_path), {}, 500, ChildLimits())
    settled = time.monotonic()
    assert (result.exit_code, result.signal, result.timed_out) == (None, "SIGKILL", True)
    term = float(re.search(r"^term (\S+)$", result.stdout, re.M).group(1))
    assert 2.0 - 0.05 <= settled - term < 2.0 + TIMER_SLACK_S


@pytest.mark.anyio
async def test_the_sigterm_comes_at_the_timeout_counted_from_the_spawn(tmp_path: Path) -> None:
    # §9.4: SIGTERM to the group at timeoutMs. The script notes when the SIGTERM arrived, on_start when it was
    # spawned (CLOCK_MONOTONIC is one clock for every process).
    spawned: list[float] = []
    argv = [INTERPRETER_PATHS["python3"], "-c",
            "import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: (print('term', time.monotonic(), flush=True), sys.exit(0)))\n"
            "print('up', flush=True)\nwhile True: time.sleep(0.05)"]
    result = await run_process(argv, str(tmp_path), {}, 500, ChildLimits(),
                               on_start=lambda pid: spawned.append(time.monotonic()))
    assert (result.exit_code, result.signal, result.timed_out) == (0, None, True)
    term = float(re.search(r"^term (\S+)$", result.stdout, re.M).group(1))
    assert 0.5 - 0.05 <= term - spawned[0] < 0.5 + TIMER_SLACK_S


@pytest.mark.anyio
async def test_the_hard_deadline_settles_3250_ms_after_the_timeout(tmp_path: Path) -> None:
    # §9.4: a leader that exited while a detached grandchild keeps writing re-arms the drain forever; the hard
    # deadline at timeout + 3250 ms settles it, counted from the spawn.
    spawned: list[float] = []
    result = await run_fixture("python3", "detached_spinner", timeout_ms=500,
                               on_start=lambda pid: spawned.append(time.monotonic()))
    settled = time.monotonic()
    try:
        assert (result.exit_code, result.signal, result.timed_out) == (0, None, True)
        assert 0.5 + 3.25 - 0.05 <= settled - spawned[0] < 0.5 + 3.25 + TIMER_SLACK_S
    finally:
        kill_quietly(grandchild_pid(result.stdout))


async def settling_after_the_exit(tmp_path: Path, before_exit: str) -> tuple[RunOutcome, float]:
    """Runs `before_exit`, then prints the time and exits; the outcome, and how long after that exit it settled."""
    argv = [INTERPRETER_PATHS["python3"], "-c",
            f"import os, runpy, time\n{before_exit}\nprint('exit', time.monotonic(), flush=True)\nos._exit(0)"]
    result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
    settled = time.monotonic()
    return result, settled - float(re.search(r"^exit (\S+)$", result.stdout, re.M).group(1))


@pytest.mark.anyio
async def test_pipes_closing_after_the_exit_settle_the_run_without_waiting_out_the_drain(tmp_path: Path) -> None:
    # §9.4: settle when the drain expires OR both pipes close. A child left in the script's group holds the pipes
    # past the leader's exit; it dies with the leader, the pipes close, and the run settles then, not 250 ms later.
    result, after_exit = await settling_after_the_exit(
        tmp_path, "if os.fork() == 0:\n    time.sleep(30)\n    os._exit(0)\ntime.sleep(0.2)"
    )
    assert (result.exit_code, result.timed_out) == (0, False)
    assert after_exit < 0.2  # the drain would add 250 ms


@pytest.mark.anyio
async def test_output_is_drained_250_ms_after_the_exit_then_settled(tmp_path: Path) -> None:
    # §9.4: a detached grandchild keeps the pipes open; the leader's exit starts a 250 ms drain, and the run
    # settles when it expires (not when the pipes close, 30 s later).
    result, after_exit = await settling_after_the_exit(tmp_path, f"runpy.run_path({str(SCRIPTS / 'detached_holder.py')!r})")
    try:
        assert (result.exit_code, result.timed_out) == (0, False)
        assert 0.25 <= after_exit < 0.25 + 0.5
    finally:
        kill_quietly(grandchild_pid(result.stdout))


@pytest.mark.anyio
async def test_a_run_whose_pipes_closed_settles_at_the_exit_without_a_drain(tmp_path: Path) -> None:
    # Both pipes closed and the leader gone: nothing is left to drain, so the run settles at once.
    argv = [INTERPRETER_PATHS["python3"], "-c",
            "import os, time\nos.close(1)\nos.close(2)\ntime.sleep(0.2)\n"
            "open('exit', 'w').write(repr(time.monotonic()))\nos._exit(0)"]
    result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
    settled = time.monotonic()
    assert (result.exit_code, result.stdout) == (0, "")
    assert settled - float((tmp_path / "exit").read_text()) < 0.25  # no drain: it would add 250 ms


@pytest.mark.anyio
async def test_a_run_settled_with_its_pipes_still_open_does_not_blind_the_next_one(tmp_path: Path) -> None:
    # Settling stops watching the pipes it closes: a closed descriptor left in the loop's selector would swallow
    # the next run's pipes when they reuse its number.
    held = await run_fixture("python3", "detached_holder", timeout_ms=10000)
    try:
        assert (held.exit_code, held.timed_out) == (0, False)
        for _ in range(2):
            result = await run_fixture("python3", "exit3")
            assert (result.exit_code, result.stdout, result.stderr) == (3, "partial result\n", "something went wrong\n")
    finally:
        kill_quietly(grandchild_pid(held.stdout))


@pytest.mark.anyio
async def test_where_the_exit_is_not_watched_the_timeouts_settle_kills_the_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without pidfd_open and waitid (macOS) nothing is killed as the leader exits: after a timeout, settling
    # SIGKILLs the group again, which is all that reaches a group member ignoring the SIGTERM.
    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    monkeypatch.delattr(os, "waitid")
    argv = [INTERPRETER_PATHS["python3"], "-c",
            "import os, signal, subprocess, time\n"
            "child = subprocess.Popen(['sleep', '60'], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,\n"
            "                         preexec_fn=lambda: signal.signal(signal.SIGTERM, signal.SIG_IGN))\n"
            "print(f'grandchild {child.pid}', flush=True)\ntime.sleep(60)"]
    result = await run_process(argv, str(tmp_path), {}, 500, ChildLimits())
    child = grandchild_pid(result.stdout)
    try:
        assert (result.signal, result.timed_out) == ("SIGTERM", True)
        with anyio.fail_after(5):
            while not process_gone(child):
                await anyio.sleep(0.02)
    finally:
        kill_quietly(child)


@pytest.mark.anyio
async def test_cancelling_the_run_kills_a_script_that_ignores_sigterm(tmp_path: Path) -> None:
    # A cancelled call (client cancellation, end of input, shutdown) kills with SIGKILL, which cannot be ignored.
    started: list[int] = []
    argv = [INTERPRETER_PATHS["python3"], "-c", IGNORES_SIGTERM]
    with anyio.move_on_after(0.5):
        await run_process(argv, str(tmp_path), {}, 10000, ChildLimits(), on_start=started.append)
    pid = started[0]
    try:
        with anyio.fail_after(5):
            while Path(f"/proc/{pid}").exists():
                await anyio.sleep(0.02)
    finally:
        kill_quietly(pid)


@pytest.mark.anyio
async def test_no_ignored_or_blocked_signal_reaches_the_script(tmp_path: Path) -> None:
    # A server started by `sh -c 'skill-mcp &'` ignores SIGQUIT; one started from a thread that blocks signals
    # blocks them. Neither is the script's: it starts with default dispositions and an empty mask.
    previous = signal.signal(signal.SIGQUIT, signal.SIG_IGN)
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1, signal.SIGALRM})
    try:
        report = "print(''.join(line for line in open('/proc/self/status') if line.startswith(('SigIgn', 'SigBlk'))))"
        result = await run_process([INTERPRETER_PATHS["python3"], "-c", report], str(tmp_path), {}, 10000, ChildLimits())
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        signal.signal(signal.SIGQUIT, previous)
    masks = dict(re.findall(r"^(SigIgn|SigBlk):\s*([0-9a-f]+)$", result.stdout, re.M))
    assert int(masks["SigBlk"], 16) == 0
    # Python ignores SIGPIPE and SIGXFSZ for itself at start; nothing else is ignored.
    assert int(masks["SigIgn"], 16) == 1 << (signal.SIGPIPE - 1) | 1 << (signal.SIGXFSZ - 1)


@pytest.fixture
def adopting_orphans():
    """This process adopts its descendants' orphans for the test, as `serve` does."""
    from skill_mcp import hardening

    if not hardening.adopt_orphans():
        pytest.skip("PR_SET_CHILD_SUBREAPER is unavailable")
    try:
        yield
    finally:
        hardening._prctl(hardening.PR_SET_CHILD_SUBREAPER, 0)


@pytest.mark.anyio
async def test_a_cancelled_runs_late_exit_leaves_the_next_run_alone(tmp_path: Path, adopting_orphans) -> None:
    # A cancelled call settles before its SIGKILLed leader is reaped, and the next run may start at once (a
    # client cancels and calls again). The first leader's exit, seen later, must not kill the second run as
    # something "left behind", nor collect its exit status (Popen then reads 0).
    with anyio.move_on_after(0.5):
        await run_process([INTERPRETER_PATHS["python3"], "-c", "import time; time.sleep(60)"], str(tmp_path), {},
                          10000, ChildLimits())
    argv = [INTERPRETER_PATHS["python3"], "-c", "import sys, time; time.sleep(0.5); sys.exit(3)"]
    result = await run_process(argv, str(tmp_path), {}, 10000, ChildLimits())
    assert (result.exit_code, result.signal) == (3, None)
