"""The whole fence, end to end: the real `skill-mcp serve` as an unprivileged uid runs real scripts that try
to reach into it (SPEC §9.6–§9.8, §7.1 `hardening`; issue 3 items 4 and 7).

As root, /proc would let any script read the server (CAP_SYS_PTRACE), so the server is started as uid 10001
under Debian's python3 with the test's own site-packages on its path; the scripts run as 10001 too.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support import REPO, world_readable_dir, write_skill
from wire import LineClient, legacy_handshake, tool_payload

SYSTEM_PYTHON = "/usr/bin/python3"
NODE = shutil.which("node")
SENTINEL = "sentinel-secret-4242"

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the hardening under test is Linux-only"),
    pytest.mark.skipif(not os.access(SYSTEM_PYTHON, os.X_OK), reason=f"{SYSTEM_PYTHON} is needed for uid 10001"),
    pytest.mark.skipif(os.geteuid() == 0 and shutil.which("setpriv") is None, reason="setpriv is needed as root"),
]

PEEK = """\
import json, os
parent = os.getppid()

def attempt(path):
    try:
        with open(path, "rb") as handle:
            data = handle.read(1 << 20)
        return {"read": len(data), "sentinel": b"%s" in data}
    except OSError as error:
        return {"error": error.errno}

status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
names = sorted(entry.split(b"=", 1)[0].decode() for entry in open("/proc/self/environ", "rb").read().split(b"\\0") if entry)
print(json.dumps({
    "environ": attempt(f"/proc/{parent}/environ"),
    "mem": attempt(f"/proc/{parent}/mem"),
    "noNewPrivs": status["NoNewPrivs"].strip(),
    "capEff": status["CapEff"].strip(),
    "uid": os.getuid(),
    "envNames": names,
}))
""" % SENTINEL

SKILL = """\
name: fence
description: Tries to reach into its server.
mcp-host:
  version: 1
  run:
    - script: peek.py
      interpreter: python3
"""


# The leader's child leaves the session and leaves a sleeper behind; the leader exits once the child has gone.
DETACH = """\
import os, time
if os.fork() == 0:
    os.setsid()
    sleeper = os.fork()
    if sleeper == 0:
        time.sleep(60)
        os._exit(0)
    print(sleeper, flush=True)
    os._exit(0)
os.wait()
"""

# The leader's child leaves the session, starts a thread and ends its main thread alone (SYS_exit): the process
# then reads as a zombie ("Z") in /proc while its thread runs on.
THREAD_LEFT = """\
import ctypes, os, threading, time
if os.fork() == 0:
    os.setsid()
    threading.Thread(target=time.sleep, args=(60,)).start()
    print(os.getpid(), flush=True)
    ctypes.CDLL(None).syscall(60, 0)  # SYS_exit on x86-64: this thread only
time.sleep(0.5)
"""

# Each shell backgrounds a short job and exits: the job, orphaned, ends as a zombie of its reaper. Reports how many
# zombies the server (the script's parent) holds once every job has ended.
BACKGROUND = """\
import os, subprocess, time
for _ in range(50):
    subprocess.run(["/bin/sh", "-c", "/bin/sleep 0.01 &"], check=True)
time.sleep(0.5)
server = os.getppid()
zombies = 0
for task in os.listdir(f"/proc/{server}/task"):
    for child in open(f"/proc/{server}/task/{task}/children").read().split():
        zombies += open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
print(zombies)
"""

# A chain of setsid links, each the child of the one before: the leader exits once the last is in place. Every
# link but the first is adopted only when its parent dies, so a sweep that kills one link per pass falls behind.
CHAIN = """\
import os, sys, time
ready_read, ready_write = os.pipe()
for depth in range(int(sys.argv[1])):
    if os.fork():
        if depth == 0:
            os.close(ready_write)
            os.read(ready_read, 1)
            os._exit(0)
        time.sleep(600)
    if depth == 0:  # the links do not hold the run's output open
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
    os.setsid()
os.write(ready_write, b"x")
time.sleep(600)
"""

# The leader waits; its child, in a session of its own, outlives it unless the server kills it. The leader holds
# 256 MiB, so that its death, once killed, takes a while.
HOLD = """\
import os, time
if os.fork() == 0:
    os.setsid()
    time.sleep(600)
held = b"x" * (256 << 20)
time.sleep(600)
"""


@pytest.fixture(scope="module")
def sandbox() -> Path:
    """Skills and the server's code where uid 10001 can read them."""
    root = world_readable_dir()
    write_skill(root / "skills", "fence", SKILL, files={"peek.py": PEEK})
    write_skill(root / "skills", "detach", SKILL.replace("fence", "detach").replace("peek.py", "detach.py"),
                files={"detach.py": DETACH})
    write_skill(root / "skills", "linger", SKILL.replace("fence", "linger").replace("peek.py", "linger.py"),
                files={"linger.py": THREAD_LEFT})
    write_skill(root / "skills", "background", SKILL.replace("fence", "background").replace("peek.py", "background.py"),
                files={"background.py": BACKGROUND})
    write_skill(root / "skills", "fail", SKILL.replace("fence", "fail").replace("peek.py", "fail.py"),
                files={"fail.py": "import sys\nsys.exit(3)\n"})
    for name, script in (("chain", CHAIN), ("hold", HOLD), ("nap", "import time\ntime.sleep(1.5)\n")):
        write_skill(root / "skills", name, SKILL.replace("fence", name).replace("peek.py", f"{name}.py"),
                    files={f"{name}.py": script})
    for name in ("locked", "unlisted"):
        write_skill(root / "skills", name, SKILL.replace("fence", name).replace("peek.py", "private/peek.py"),
                    files={"private/peek.py": PEEK})
    site = root / "site"
    shutil.copytree(sysconfig.get_paths()["purelib"], site, ignore=shutil.ignore_patterns("__pycache__", "*.pth"))
    shutil.copytree(Path(REPO) / "skill_mcp", site / "skill_mcp", ignore=shutil.ignore_patterns("__pycache__"))
    # A sweep that waits its budget out then stands out from any slowness of a loaded machine.
    reaper = site / "skill_mcp" / "reaper.py"
    source = reaper.read_text()
    assert "\n_SWEEP_BUDGET_S = 2.0 " in source
    reaper.write_text(source.replace("\n_SWEEP_BUDGET_S = 2.0 ", "\n_SWEEP_BUDGET_S = 10.0 "))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    (root / "skills" / "locked" / "private").chmod(0o700)  # root's: uid 10001 may not enter it
    (root / "skills" / "unlisted" / "private").chmod(0o711)  # uid 10001 may enter it, not list it
    yield root
    shutil.rmtree(root)


def unprivileged_server(sandbox: Path, launcher: tuple[str, ...] = (), **extra: str) -> LineClient:
    drop = ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups"] if os.geteuid() == 0 else []
    environ = {
        **extra,
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "PYTHONPATH": str(sandbox / "site"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "SKILLS_DIR": str(sandbox / "skills"),
        "MCP_SKILL_PYTHON": SYSTEM_PYTHON,
        "NEIGHBOUR_TOKEN": SENTINEL,
    }
    return LineClient([*launcher, *drop, SYSTEM_PYTHON, "-m", "skill_mcp"], environ, cwd=str(sandbox))


@contextlib.contextmanager
def serving(sandbox: Path, launcher: tuple[str, ...] = (), **extra: str) -> Iterator[LineClient]:
    """The unprivileged server after its handshake; at the end it must exit 0 on the end of its input."""
    server = unprivileged_server(sandbox, launcher, **extra)
    try:
        legacy_handshake(server)
        yield server
        server.close_stdin()
        assert server.wait() == 0
    finally:
        server.kill()


def confirmed_run(server: LineClient, call: dict) -> dict:
    token = tool_payload(server.request("tools/call", {"name": "skill_run", "arguments": call}))["confirmToken"]
    answer = server.request("tools/call", {"name": "skill_run", "arguments": {**call, "confirmToken": token}})
    return tool_payload(answer)


def test_a_script_cannot_read_its_unprivileged_servers_environment_or_memory(sandbox: Path) -> None:
    server = unprivileged_server(sandbox)
    try:
        legacy_handshake(server)
        listing = tool_payload(server.request("tools/call", {"name": "skill_list", "arguments": {}}))
        result = confirmed_run(server, {"name": "fence", "script": "peek.py"})
        server.close_stdin()
        assert server.wait() == 0
    finally:
        server.kill()
    assert listing["hardening"] == {
        "environScrubbed": True, "nonDumpable": True, "noNewPrivs": True, "rlimitNproc": None, "rlimitAsMb": None,
    }  # fmt: skip
    assert listing["interpreters"] == ["python3"] if NODE is None else ["node", "python3"]
    assert result["exitCode"] == 0, result["stderr"]
    seen = json.loads(result["stdout"])
    assert seen["uid"] == 10001 or os.geteuid() != 0
    # Non-dumpable: the same uid is refused both files outright (EACCES).
    assert seen["environ"] == {"error": 13} and seen["mem"] == {"error": 13}
    assert seen["noNewPrivs"] == "1" and int(seen["capEff"], 16) == 0
    # Exactly the allowlist reached the script, and it equals what the preview promised.
    assert seen["envNames"] == result["env"] == ["HOME", "PATH"]
    boot = [event for event in server.log_events() if event["event"] == "boot"]
    assert boot[0]["environScrub"] == "scrubbed" and boot[0]["nonDumpable"] is True
    assert SENTINEL not in server.stderr_text()


def test_the_same_script_reads_everything_from_an_unhardened_parent(sandbox: Path) -> None:
    """The control: without the scrub and non-dumpable, the peek does see the secret — so the test can fail."""
    drop = ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups"] if os.geteuid() == 0 else []
    parent = (
        "import subprocess, sys\n"
        f"out = subprocess.run([{SYSTEM_PYTHON!r}, sys.argv[1]], capture_output=True, text=True).stdout\n"
        "print(out)\n"
    )
    completed = subprocess.run(
        [*drop, SYSTEM_PYTHON, "-c", parent, str(sandbox / "skills" / "fence" / "peek.py")],
        env={"PATH": "/usr/bin:/bin", "NEIGHBOUR_TOKEN": SENTINEL},
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    seen = json.loads(completed.stdout)
    assert seen["environ"]["sentinel"] is True


def test_what_a_script_left_running_outside_its_session_dies_with_it(sandbox: Path) -> None:
    # setsid escapes every group and session kill; the server adopts the orphan and kills it as the leader exits.
    with serving(sandbox) as server:
        result = confirmed_run(server, {"name": "detach", "script": "detach.py"})
        left = live_threads(int(result["stdout"]))
    assert (result["exitCode"], result["timedOut"], left) == (0, False, [])


def test_a_chain_of_setsid_links_dies_with_its_run(sandbox: Path) -> None:
    try:
        with serving(sandbox) as server:
            result = confirmed_run(server, {"name": "chain", "script": "chain.py", "args": ["300"]})
            time.sleep(0.2)
            left = running_scripts("chain.py")
    finally:
        kill_all("chain.py")
    assert (result["exitCode"], result["timedOut"], len(left)) == (0, False, 0), result["stderr"]


def test_a_signal_that_stops_the_server_mid_run_kills_what_the_script_started_in_another_session(
    sandbox: Path,
) -> None:
    server = unprivileged_server(sandbox)
    try:
        legacy_handshake(server)
        call = {"name": "hold", "script": "hold.py"}
        token = tool_payload(server.request("tools/call", {"name": "skill_run", "arguments": call}))["confirmToken"]
        arguments = {**call, "confirmToken": token}
        server.send_line(json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                                     "params": {"name": "skill_run", "arguments": arguments}}).encode())
        deadline = time.monotonic() + 10
        while len(running_scripts("hold.py")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        started = len(running_scripts("hold.py"))
        server.process.send_signal(signal.SIGTERM)
        assert server.wait() == 0
        time.sleep(0.2)
        left = running_scripts("hold.py")
    finally:
        server.kill()
        kill_all("hold.py")
    assert (started, left) == (2, [])


def running_scripts(script: str) -> list[int]:
    """Live processes running `script` of the sandbox."""
    found = []
    for pid in (int(name) for name in os.listdir("/proc") if name.isdigit()):
        try:
            command = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if any(part.endswith(f"/{script}".encode()) for part in command) and live_threads(pid):
            found.append(pid)
    return found


def kill_all(script: str) -> None:
    # A chain forks as it is killed: a few rounds.
    for _ in range(5):
        for pid in running_scripts(script):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def live_threads(pid: int) -> list[str]:
    """The threads of `pid` that are not zombies (none once it is gone)."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    states = []
    for task in tasks:
        try:
            states.append(open(f"/proc/{pid}/task/{task}/stat").read().rsplit(")", 1)[1].split()[0])
        except FileNotFoundError:
            continue
    return [state for state in states if state not in ("Z", "X")]


def test_a_process_whose_main_thread_ended_does_not_outlive_its_run(sandbox: Path) -> None:
    # Its zombie-looking leader must not pass for dead: SIGKILL reaches its remaining thread.
    lingerer = None
    try:
        with serving(sandbox) as server:
            result = confirmed_run(server, {"name": "linger", "script": "linger.py"})
            lingerer = int(result["stdout"])
            time.sleep(0.5)
            left = live_threads(lingerer)
    finally:
        if lingerer is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(lingerer, signal.SIGKILL)
    assert (result["exitCode"], left) == (0, [])


def test_what_a_script_orphans_is_collected_while_it_runs(sandbox: Path) -> None:
    # Adopted orphans that end are zombies of the server: held until the run ends, each keeps a pid and a slot of
    # the uid's RLIMIT_NPROC, and a script that backgrounds jobs through a shell runs out of both.
    with serving(sandbox) as server:
        result = confirmed_run(server, {"name": "background", "script": "background.py"})
    assert (result["exitCode"], result["stdout"]) == (0, "0\n"), result["stderr"]


AS_PID_1 = ("unshare", "--pid", "--fork", "--mount-proc")
UNPRIVILEGED = ("setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups")


def namespace_init(server: LineClient) -> int:
    """The host pid of the server as its PID namespace's PID 1 (unshare forks it; setpriv becomes the server)."""
    (host_pid,) = [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and is_child(int(pid), server.process.pid, "python3")]
    return host_pid


def operators_jobs(init: int, command: str, *drop: str) -> list[int]:
    """`docker exec`'s stand-in: enter the namespace, run `command` in a shell that leaves; the `sleep`s then
    adopted by the server."""
    subprocess.run(["nsenter", "-t", str(init), "-p", "-m", *drop, "/bin/sh", "-c", command],
                   capture_output=True, text=True, timeout=10, check=True)  # fmt: skip
    time.sleep(0.5)
    return [int(pid) for pid in os.listdir("/proc") if pid.isdigit() and is_child(int(pid), init, "sleep")]


def kill_pids(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter"), reason="needs root, unshare and nsenter")
def test_the_server_as_pid_1_leaves_an_operators_background_job_alone(sandbox: Path) -> None:
    # Without an init the server is PID 1, and every orphan in the container becomes its child: one of a
    # `docker exec` too. Such a job is no script's, and no run's end may kill it.
    job: list[int] = []
    try:
        with serving(sandbox, launcher=AS_PID_1) as server:
            init = namespace_init(server)
            # The short job has ended by the time this returns: the server collected it, before any run.
            job = operators_jobs(init, "sleep 60 >/dev/null 2>&1 & sleep 0.1 >/dev/null 2>&1 &", *UNPRIVILEGED)
            zombies = [pid for pid in job if not live_threads(pid)]
            result = confirmed_run(server, {"name": "fence", "script": "peek.py"})
            time.sleep(0.2)
            alive = len(job) == 1 and live_threads(job[0]) != []
    finally:
        kill_pids(job)
    assert (result["exitCode"], alive, zombies) == (0, True, [])


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, so that uid 10001 has a directory it may not enter")
def test_a_declared_script_the_server_may_not_reach_is_not_said_to_be_missing(sandbox: Path) -> None:
    with serving(sandbox) as server:
        answer = server.request("tools/call", {"name": "skill_run", "arguments": {"name": "locked", "script": "private/peek.py"}})
        listing = tool_payload(server.request("tools/call", {"name": "skill_list", "arguments": {}}))
    (content,) = answer["result"]["content"]
    assert content["text"] == (
        '"private/peek.py" is not a file in this skill that the server can reach: Permission denied\n\n'
        "Hint: The server's user must be allowed to enter every directory on the way to the file."
    )
    assert [problem["detail"] for problem in listing["problems"] if problem["path"].endswith("/locked")] == [
        'the skill declares "private/peek.py", which is not a file in this skill that the server\'s user can reach '
        "(Permission denied), so it never runs"
    ]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, so that uid 10001 has a directory it may not list")
def test_a_declared_script_in_a_directory_the_server_may_not_list_is_said_to_be_there_and_runs(sandbox: Path) -> None:
    with serving(sandbox) as server:
        listing = tool_payload(server.request("tools/call", {"name": "skill_list", "arguments": {}}))
        result = confirmed_run(server, {"name": "unlisted", "script": "private/peek.py"})
    assert [problem["detail"] for problem in listing["problems"] if problem["path"].endswith("/unlisted")] == [
        'the skill declares "private/peek.py", which is not a file in this skill; the file is there, but the '
        "server's user may not list a directory on its path, so the manifest lacks it: a run still finds it"
    ]
    assert result["exitCode"] == 0, result["stderr"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("nsenter"), reason="needs root, unshare and nsenter")
def test_the_server_as_pid_1_neither_waits_for_nor_kills_a_job_it_may_not_signal(sandbox: Path) -> None:
    # A root `docker exec` job orphaned during a run is adopted by the unprivileged PID 1, which cannot kill it: the
    # sweep must not wait its budget out for it, nor go on to take a later job of the server's uid for the script's.
    jobs: list[int] = []
    results: list[dict] = []
    try:
        with serving(sandbox, launcher=AS_PID_1) as server:
            init = namespace_init(server)
            napping = threading.Thread(target=lambda: results.append(confirmed_run(server, {"name": "nap", "script": "nap.py"})))
            napping.start()
            deadline = time.monotonic() + 10
            while not running_scripts("nap.py") and time.monotonic() < deadline:
                time.sleep(0.02)  # until the nap has started: the root job is younger than the script
            assert running_scripts("nap.py"), "the nap did not start within 10 s"
            jobs = operators_jobs(init, "sleep 60 >/dev/null 2>&1 &")
            napping.join()
            jobs = operators_jobs(init, "sleep 60 >/dev/null 2>&1 &", *UNPRIVILEGED)
            results.append(confirmed_run(server, {"name": "fence", "script": "peek.py"}))
            alive = [pid for pid in jobs if live_threads(pid)]
    finally:
        kill_pids(jobs)
    nap, peek = results
    assert (nap["exitCode"], peek["exitCode"], len(alive)) == (0, 0, 2)
    assert nap["durationMs"] < 1500 + 5000 and peek["durationMs"] < 5000  # the sandbox's sweep budget is 10 s


def is_child(pid: int, parent: int, comm: str) -> bool:
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[1]) == parent and open(f"/proc/{pid}/comm").read().strip() == comm
    except OSError:
        return False


def test_a_server_started_with_sigchld_ignored_still_reports_exit_codes(sandbox: Path) -> None:
    # exec keeps SIG_IGN: a launcher that ignores SIGCHLD makes the kernel reap every child at once, and Popen,
    # finding nothing to wait for (ECHILD), reads exit status 0. The server must restore SIGCHLD for itself.
    ignoring = ("/usr/bin/python3", "-c",
                "import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); os.execvp(sys.argv[1], sys.argv[1:])")
    with serving(sandbox, launcher=ignoring) as server:
        result = confirmed_run(server, {"name": "fail", "script": "fail.py"})
    assert (result["exitCode"], result["signal"]) == (3, None)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("prlimit"), reason="needs root and prlimit")
def test_a_child_setup_step_the_kernel_refuses_is_a_start_failure_naming_it(sandbox: Path) -> None:
    # §9.8 and §9.4: the unprivileged server may not raise its hard RLIMIT_NPROC to the configured one; the child
    # must not exec, the call says why, and the lock is free for the next call.
    with serving(sandbox, launcher=("prlimit", "--nproc=1000:1000", "--"), MCP_SKILL_RLIMIT_NPROC="2000") as server:
        call = {"name": "fail", "script": "fail.py"}
        token = tool_payload(server.request("tools/call", {"name": "skill_run", "arguments": call}))["confirmToken"]
        answer = server.request("tools/call", {"name": "skill_run", "arguments": {**call, "confirmToken": token}})
        token = tool_payload(server.request("tools/call", {"name": "skill_run", "arguments": call}))["confirmToken"]
        again = server.request("tools/call", {"name": "skill_run", "arguments": {**call, "confirmToken": token}})
    runs = "python3" if NODE is None else "node, python3"
    hint = f"\n\nHint: This deployment runs: {runs}; the script must be a regular file inside the skill."
    refused = 'could not start "fail.py": setrlimit(RLIMIT_NPROC): not allowed to raise maximum limit' + hint
    for result in (answer["result"], again["result"]):
        assert (result["isError"], result["content"]) == (True, [{"type": "text", "text": refused}])
    events = [(event["event"], event.get("reason")) for event in server.log_events() if event["event"].startswith("run.")]
    assert ("run.start", None) not in events
    assert [reason for name, reason in events if name == "run.refused"] == ["spawn-failed", "spawn-failed"]


def test_a_server_started_through_a_same_uid_wrapper_runs_nothing_hosted(sandbox: Path) -> None:
    # `sh -c` (or uv run, npx) that does not exec keeps the environment the server wipes from its own block: a script
    # would read every secret from /proc/<wrapper>/environ, so a hosted server must not call itself scrubbed.
    grant = json.dumps([{"skill": "fence", "script": "peek.py"}])
    drop = ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups"] if os.geteuid() == 0 else []
    wrapped = [*drop, "/bin/sh", "-c", f"{SYSTEM_PYTHON} -m skill_mcp; exit $?"]
    environ = {"PATH": "/usr/bin:/bin", "HOME": "/nonexistent", "PYTHONPATH": str(sandbox / "site"),
               "PYTHONDONTWRITEBYTECODE": "1", "SKILLS_DIR": str(sandbox / "skills"), "MCP_SKILL_PYTHON": SYSTEM_PYTHON,
               "NEIGHBOUR_TOKEN": SENTINEL, "MCP_HOST_METER_FILE": "/nonexistent/meter", "MCP_SKILL_RUN": grant}
    server = LineClient(wrapped, environ, cwd=str(sandbox))
    try:
        legacy_handshake(server)
        listed = tool_payload(server.request("tools/call", {"name": "skill_list", "arguments": {}}))
        answer = server.request("tools/call", {"name": "skill_run", "arguments": {"name": "fence", "script": "peek.py"}})
        server.close_stdin()
        assert server.wait() == 0
    finally:
        server.kill()
    assert listed["hardening"]["environScrubbed"] is False
    assert answer["result"]["isError"] is True
    assert "a process this server was started through" in answer["result"]["content"][0]["text"]
