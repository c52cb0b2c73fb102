"""`skill_run` checked against SPEC §9.2-§9.5 rule by rule, with real scripts through the real server in both eras:
edge values of the result (empty, 255, a signal, output at and past the cap, bytes that are no UTF-8), what
decides the interpreter, the timeout clamp, the drain and the hard deadline, `networkNote` and start failures.

The server here is in-process and does not adopt orphans (only `serve` does), so a grandchild that left the
session outlives its leader, as §9.4's drain and hard deadline describe.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs
from support import ERAS, connect, deployment_for, error_text, kill_quietly, payload, write_skill
from wire import clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.limits import MAX_OUTPUT_BYTES
from skill_mcp.run_tool import OUT_OF_RESOURCES_HINT, RunService

pytestmark = pytest.mark.anyio

PYTHON = "/usr/bin/python3"
NODE = "/usr/bin/node" if os.path.isfile("/usr/bin/node") else shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed on this machine; Node cases skipped")

# name -> (source, timeout in seconds or None)
SCRIPTS: dict[str, tuple[str, float | None]] = {
    "empty.py": ("", None),
    "exit255.py": ("import sys\nsys.exit(255)\n", None),
    "killed.py": ("import os, signal\nprint('before', flush=True)\nos.kill(os.getpid(), signal.SIGKILL)\n", None),
    "exit3.py": ("import sys\nsys.exit(3)\n", None),
    # stdout and stderr closed long before the exit: the run ends at the exit, with its code, not at the close.
    "closes.py": ("import os, time\nos.write(1, b'early')\nos.close(1)\nos.close(2)\ntime.sleep(1)\nos._exit(7)\n",
                  None),
    "at_cap.py": (f"import os\nfor _ in range(16): os.write(1, b'x' * 65536)\nos.write(2, b'y' * {MAX_OUTPUT_BYTES})\n",
                  None),
    "past_cap.py": (f"import os\nos.write(1, b'x' * {MAX_OUTPUT_BYTES + 1})\nos.write(2, b'e')\n", None),
    # 1048575 ASCII bytes, then "é" (C3 A9): the cap cuts it after its first byte.
    "cut.py": (f"import os\nos.write(1, b'x' * {MAX_OUTPUT_BYTES - 1} + 'é'.encode())\n", None),
    "bad_utf8.py": ("import os\nos.write(1, b'a\\xffb\\xc3(c\\x00d')\nos.write(2, 'ok é ✓'.encode())\n", None),
    "terms.py": ("import signal, sys, time\nsignal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
                 "print('up', flush=True)\ntime.sleep(60)\n", 0.5),
    # Python runs these, as declared, whatever their extension or first line says.
    "tool.js": ("#!/usr/bin/env node\nimport sys\nprint(sys.implementation.name)\n", None),
    "tool.sh": ("#!/bin/sh\nimport sys\nprint(sys.implementation.name)\n", None),
    "clamp300.py": ("print('ok')\n", 300),
    "clamp301.py": ("print('ok')\n", 301),
    # The leader exits at once; a child that left the session writes ten chunks 50 ms apart once the leader has
    # gone, then exits (closing the pipes): each chunk re-arms the 250 ms drain, so all ten are kept.
    "after_exit.py": (textwrap.dedent("""\
        import os, time
        leader = os.getpid()
        if os.fork() == 0:
            os.setsid()
            while os.getppid() == leader:
                time.sleep(0.005)
            for n in range(10):
                time.sleep(0.05)
                os.write(1, f"chunk {n}\\n".encode())
            os._exit(0)
        print("leader", flush=True)
        """), 20),
    "detached_spinner.py": ((Path(__file__).parent / "fixtures" / "scripts" / "detached_spinner.py").read_text(), 0.5),
    "exit3_partial.py": ((Path(__file__).parent / "fixtures" / "scripts" / "exit3.py").read_text(), None),
    "spinner.py": ((Path(__file__).parent / "fixtures" / "scripts" / "spinner.py").read_text(), 1),
    "detached_holder.py": ((Path(__file__).parent / "fixtures" / "scripts" / "detached_holder.py").read_text(), 10),
}
NODE_SCRIPTS: dict[str, tuple[str, float | None]] = {
    "empty.js": ("", None),
    "tool.py": ("#!/usr/bin/env python3\nconsole.log(process.release.name)\n", None),
}


def frontmatter(scripts: dict[str, tuple[str, float | None]], node: bool) -> str:
    lines = ["name: edge", "description: Edge values.", "mcp-host:", "  version: 1", "  run:"]
    for name, (_, timeout) in scripts.items():
        interpreter = "node" if node and name in NODE_SCRIPTS else "python3"
        lines += [f"    - script: {name}", f"      interpreter: {interpreter}"]
        if timeout is not None:
            lines.append(f"      timeout: {timeout}")
    return "\n".join(lines) + "\n"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    scripts = {**SCRIPTS, **(NODE_SCRIPTS if NODE else {})}
    skills = tmp_path.resolve() / "root"
    write_skill(skills, "edge", frontmatter(scripts, NODE is not None),
                files={name: source for name, (source, _) in scripts.items()})
    return skills


def service_for(root: Path, **extra: str) -> RunService:
    environ = {"SKILLS_DIR": str(root), "PATH": "/usr/bin:/bin", "MCP_SKILL_PYTHON": PYTHON, **extra}
    if NODE:
        environ["MCP_SKILL_NODE"] = NODE
    return RunService(deployment_for(environ))


async def preview(client: Any, script: str, **extra: Any) -> dict[str, Any]:
    body = payload(await client.call_tool("skill_run", {"name": "edge", "script": script, **extra}))
    assert body["status"] == "confirmation-required", body
    return body


async def run(client: Any, script: str, **extra: Any) -> dict[str, Any]:
    token = (await preview(client, script, **extra))["confirmToken"]
    return payload(await client.call_tool("skill_run", {"name": "edge", "script": script, **extra, "confirmToken": token}))


async def run_once(root: Path, era: str, script: str, **environ: str) -> dict[str, Any]:
    """The result of one confirmed run of `script` on a fresh server, given `environ` besides the usual."""
    service = service_for(root, **environ)
    async with connect(service.deployment, era, service.call) as client:
        return await run(client, script)


def result(script: str, interpreter: str = "python3", **fields: Any) -> dict[str, Any]:
    """A §9.5 result for `script` with every field but durationMs; `fields` override the defaults."""
    return {
        "skill": "edge", "script": script, "interpreter": interpreter, "exitCode": 0, "signal": None, "stdout": "",
        "stderr": "", "truncated": {"stdout": False, "stderr": False}, "timedOut": False, "timeoutMs": 60000,
        "env": ["PATH"], **fields,
    }


def without_duration(ran: dict[str, Any]) -> dict[str, Any]:
    assert type(ran["durationMs"]) is int and ran["durationMs"] >= 0, ran
    return {key: value for key, value in ran.items() if key != "durationMs"}


# --- §9.5: the result's fields at their edge values ----------------------------------------------


EDGE_RESULTS = {
    "empty.py": {},
    "exit255.py": {"exitCode": 255},
    "killed.py": {"exitCode": None, "signal": "SIGKILL", "stdout": "before\n"},
    "closes.py": {"exitCode": 7, "stdout": "early"},
    "bad_utf8.py": {"stdout": "a\ufffdb\ufffd(c\x00d", "stderr": "ok é ✓"},
}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("script", sorted(EDGE_RESULTS))
async def test_edge_exits_and_outputs_are_reported_exactly(root: Path, era: str, script: str) -> None:
    ran = await run_once(root, era, script)
    assert without_duration(ran) == result(script, **EDGE_RESULTS[script])
    assert type(ran["exitCode"]) is int or ran["exitCode"] is None  # never a bool
    if script == "closes.py":
        assert ran["durationMs"] >= 1000  # it waited for the exit, not for the pipes, which closed at once


@pytest.mark.parametrize("era", ERAS)
async def test_a_zero_byte_script_previews_its_empty_hash_and_runs(root: Path, era: str) -> None:
    service = service_for(root)
    async with connect(service.deployment, era, service.call) as client:
        will_run = (await preview(client, "empty.py"))["preview"]["willRun"]
        ran = await run(client, "empty.py")
    assert will_run["scriptSha256"] == hashlib.sha256(b"").hexdigest()
    assert without_duration(ran) == result("empty.py")


@needs_node
@pytest.mark.parametrize("era", ERAS)
async def test_a_zero_byte_node_script_runs(root: Path, era: str) -> None:
    ran = await run_once(root, era, "empty.js")
    assert without_duration(ran) == result("empty.js", "node")


CAPS = {
    # exactly the cap on both streams, stdout over many reads: nothing dropped
    "at_cap.py": ("x" * MAX_OUTPUT_BYTES, "y" * MAX_OUTPUT_BYTES, {"stdout": False, "stderr": False}),
    # one byte over on stdout; stderr, its own cap, keeps its byte
    "past_cap.py": ("x" * MAX_OUTPUT_BYTES, "e", {"stdout": True, "stderr": False}),
    # the cut falls inside "é": its first byte is kept, and decodes as U+FFFD
    "cut.py": ("x" * (MAX_OUTPUT_BYTES - 1) + "\ufffd", "", {"stdout": True, "stderr": False}),
}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("script", sorted(CAPS))
async def test_output_caps_and_truncation_flags(root: Path, era: str, script: str) -> None:
    stdout, stderr, truncated = CAPS[script]
    ran = await run_once(root, era, script)
    assert (ran["stdout"] == stdout, ran["stderr"] == stderr, ran["truncated"]) == (True, True, truncated)
    assert (ran["exitCode"], ran["signal"], ran["timedOut"]) == (0, None, False)


# --- §17 items 111, 112, 114 through the server ----------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_an_exit_3_is_a_normal_result_with_its_partial_output(root: Path, era: str) -> None:
    service = service_for(root)
    async with connect(service.deployment, era, service.call) as client:
        token = (await preview(client, "exit3_partial.py"))["confirmToken"]
        raw = await client.call_tool("skill_run", {"name": "edge", "script": "exit3_partial.py", "confirmToken": token})
    assert raw.is_error is False
    assert without_duration(payload(raw)) == result(
        "exit3_partial.py", exitCode=3, stdout="partial result\n", stderr="something went wrong\n"
    )


@pytest.mark.parametrize("era", ERAS)
async def test_a_1_s_spinner_times_out_with_its_partial_output(root: Path, era: str) -> None:
    ran = await run_once(root, era, "spinner.py")
    assert without_duration(ran) == result(
        "spinner.py", exitCode=None, signal="SIGTERM", stdout="spinning\n", timedOut=True, timeoutMs=1000
    )


async def with_a_grandchild_then_another_run(root: Path, era: str, script: str) -> tuple[dict, dict]:
    """The run of `script`, which leaves a grandchild running (killed afterwards), then a run of exit255.py."""
    service = service_for(root)
    async with connect(service.deployment, era, service.call) as client:
        first = await run(client, script)
        grandchild = int(re.search(r"grandchild (\d+)", first["stdout"]).group(1))
        try:
            return first, await run(client, "exit255.py")
        finally:
            kill_quietly(grandchild)


@pytest.mark.parametrize("era", ERAS)
async def test_a_detached_grandchild_holding_the_pipes_holds_neither_the_run_nor_the_lock(root: Path, era: str) -> None:
    held, after = await with_a_grandchild_then_another_run(root, era, "detached_holder.py")
    assert (held["exitCode"], held["signal"], held["timedOut"]) == (0, None, False)
    assert "leader done\n" in held["stdout"]
    # the leader exits after about 100 ms and the drain adds 250 ms; the holder would keep the pipes 30 s
    assert held["durationMs"] < 2000
    assert after["exitCode"] == 255


# --- §9.3: the declaration alone picks the interpreter ---------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("script", ["tool.js", "tool.sh"])
async def test_the_interpreter_is_the_declared_one_whatever_the_extension_or_shebang(
    root: Path, era: str, script: str
) -> None:
    ran = await run_once(root, era, script)
    assert without_duration(ran) == result(script, stdout="cpython\n")


@needs_node
@pytest.mark.parametrize("era", ERAS)
async def test_a_py_file_declared_for_node_runs_on_node(root: Path, era: str) -> None:
    ran = await run_once(root, era, "tool.py")
    assert without_duration(ran) == result("tool.py", "node", stdout="node\n")


# --- §9.2: omitted args and [] are one call -----------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_omitted_args_and_an_empty_list_are_the_same_approval(root: Path, era: str) -> None:
    service = service_for(root)
    async with connect(service.deployment, era, service.call) as client:
        omitted = await preview(client, "exit255.py")
        empty = await preview(client, "exit255.py", args=[])
        ran_empty = await client.call_tool("skill_run", {"name": "edge", "script": "exit255.py", "args": [],
                                                         "confirmToken": omitted["confirmToken"]})
        ran_omitted = await client.call_tool("skill_run", {"name": "edge", "script": "exit255.py",
                                                           "confirmToken": empty["confirmToken"]})
    assert omitted["preview"] == empty["preview"]
    assert omitted["preview"]["willRun"]["argv"] == ["exit255.py"]
    assert [payload(ran)["exitCode"] for ran in (ran_empty, ran_omitted)] == [255, 255]


# --- §9.4: the timeout clamp, the drain, the hard deadline ----------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("script", ["clamp300.py", "clamp301.py"])
async def test_a_timeout_at_or_over_the_clamp_is_300000_ms_everywhere(root: Path, era: str, script: str) -> None:
    service = service_for(root)
    async with connect(service.deployment, era, service.call) as client:
        listed = payload(await client.call_tool("skill_list", {}))
        will_run = (await preview(client, script))["preview"]["willRun"]
        ran = await run(client, script)
    (edge,) = listed["skills"]
    assert [entry["timeoutMs"] for entry in edge["scripts"] if entry["script"] == script] == [300000]
    assert will_run["timeoutMs"] == 300000
    assert without_duration(ran) == result(script, stdout="ok\n", timeoutMs=300000)


@pytest.mark.parametrize("era", ERAS)
async def test_output_written_after_the_exit_is_kept_while_each_chunk_rearms_the_drain(root: Path, era: str) -> None:
    # The ten chunks span 500 ms after the exit, twice the drain: a drain that is not re-armed loses most of them.
    ran = await run_once(root, era, "after_exit.py")
    chunks = "".join(f"chunk {n}\n" for n in range(10))
    assert without_duration(ran) == result("after_exit.py", stdout="leader\n" + chunks, timeoutMs=20000)


@pytest.mark.parametrize("era", ERAS)
async def test_a_writer_outliving_its_leader_is_cut_at_the_hard_deadline_and_frees_the_lock(
    root: Path, era: str
) -> None:
    # §9.4 and §17 item 115: the drain never expires, so the run settles at timeout + 3250 ms, timedOut next to
    # the leader's real exit code; the next run is not refused as busy.
    spun, after = await with_a_grandchild_then_another_run(root, era, "detached_spinner.py")
    assert (spun["exitCode"], spun["signal"], spun["timedOut"], spun["timeoutMs"]) == (0, None, True, 500)
    assert "leader done\n" in spun["stdout"] and "tick\n" in spun["stdout"]
    assert spun["durationMs"] >= 500 + 3250
    assert after["exitCode"] == 255


# --- §9.5: networkNote --------------------------------------------------------------------------


NOTE_CASES = {
    # a death by signal (exitCode null) behind a proxy, the lowercase variable counting as much as the others
    "signal, http_proxy": ("killed.py", {"http_proxy": "http://proxy.invalid:3128"}, True),
    # a timed-out run whose script exited 0 on its SIGTERM still failed
    "timed out, HTTPS_PROXY": ("terms.py", {"HTTPS_PROXY": "http://proxy.invalid:3128"}, True),
    "exit 255, fenced": ("exit255.py", {"MCP_EGRESS_FENCED": "1"}, True),
    # success carries no note, fenced or not
    "success, fenced and proxied": ("empty.py", {"MCP_EGRESS_FENCED": "1", "HTTP_PROXY": "http://p.invalid"}, False),
    # the unset rule: "null", blanks and a placeholder are no proxy; MCP_EGRESS_FENCED counts only as exactly 1
    "failure, proxies unset": ("exit3.py", {"HTTPS_PROXY": "null", "https_proxy": "  ", "HTTP_PROXY": "${HTTP_PROXY}",
                                            "MCP_EGRESS_FENCED": "yes"}, False),
}


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("case", sorted(NOTE_CASES))
async def test_network_note_only_for_a_failed_run_behind_a_fence(root: Path, era: str, case: str) -> None:
    script, environ, noted = NOTE_CASES[case]
    ran = await run_once(root, era, script, **environ)
    assert ("networkNote" in ran) is noted, ran
    if noted:
        assert "egress" in ran["networkNote"].lower()
    assert "proxy.invalid" not in json.dumps(ran)  # a proxy URL is never handed over, nor echoed


# --- §9.4: start failures -------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_an_interpreter_gone_since_boot_is_a_start_failure_naming_the_os_reason(
    root: Path, tmp_path: Path, era: str
) -> None:
    interpreter = tmp_path / "bin" / "python3"
    interpreter.parent.mkdir()
    interpreter.symlink_to(PYTHON)
    service = service_for(root, MCP_SKILL_PYTHON=str(interpreter))
    with capture_logs() as logs:
        async with connect(service.deployment, era, service.call) as client:
            token = (await preview(client, "exit255.py"))["confirmToken"]
            interpreter.unlink()
            failed = await client.call_tool("skill_run", {"name": "edge", "script": "exit255.py", "confirmToken": token})
            interpreter.symlink_to(PYTHON)
            after = await run(client, "exit255.py")
    runs = "node, python3" if NODE else "python3"
    assert error_text(failed) == (
        f'could not start "exit255.py": No such file or directory: {interpreter}\n\n'
        f"Hint: This deployment runs: {runs}; the script must be a regular file inside the skill."
    )
    assert [(entry["event"], entry.get("reason")) for entry in logs if entry["event"] in ("run.refused", "run.start")] \
        == [("run.refused", "spawn-failed"), ("run.start", None)]
    assert after["exitCode"] == 255  # the lock was released


@pytest.mark.skipif(shutil.which("prlimit") is None, reason="lowers the server's open-file limit with util-linux's prlimit")
def test_a_server_out_of_open_files_says_whose_limit_that_is(root: Path) -> None:
    arguments = {"name": "edge", "script": "exit255.py"}
    with running([sys.executable, "-m", "skill_mcp"], clean_environ(SKILLS_DIR=str(root), MCP_SKILL_PYTHON=PYTHON)) \
            as server:
        legacy_handshake(server)

        def confirmed_run() -> dict[str, Any]:
            asked = tool_payload(server.request("tools/call", {"name": "skill_run", "arguments": arguments}))
            confirmed = {**arguments, "confirmToken": asked["confirmToken"]}
            return server.request("tools/call", {"name": "skill_run", "arguments": confirmed})["result"]

        pid = server.process.pid
        # Room for the script's hash, not for the pipes of its start: the soft limit alone, as `ulimit -Sn` sets it.
        subprocess.run(["prlimit", f"--pid={pid}", f"--nofile={len(os.listdir(f'/proc/{pid}/fd')) + 1}:"], check=True)
        failed = confirmed_run()
        subprocess.run(["prlimit", f"--pid={pid}", "--nofile=1024:"], check=True)
        after = confirmed_run()
    assert failed["isError"] is True
    assert failed["content"][0]["text"] == f'could not start "exit255.py": Too many open files\n\nHint: {OUT_OF_RESOURCES_HINT}'
    assert json.loads(after["content"][0]["text"])["exitCode"] == 255  # the lock was released


# --- §9.4: one run at a time, whatever the outcome of the one before ------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_a_script_killed_by_a_signal_frees_the_lock(root: Path, era: str) -> None:
    service = service_for(root)
    async with connect(service.deployment, era, service.call) as client:
        killed = await run(client, "killed.py")
        after = await run(client, "exit255.py")
    assert (killed["signal"], after["exitCode"]) == ("SIGKILL", 255)


# --- §9.4, §9.8: the process a script runs as, under the real `serve` over stdio ------------------

CHILD_STATE = """\
import ctypes, json, os, resource, sys
libc = ctypes.CDLL(None, use_errno=True)
death = ctypes.c_int(-1)
libc.prctl(2, ctypes.byref(death), 0, 0, 0)  # PR_GET_PDEATHSIG
status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines())
print(json.dumps({
    "argv": sys.argv[1:],
    "cwd": os.getcwd(),
    "parent": os.getppid(),
    "leadsSessionAndGroup": [os.getsid(0) == os.getpid(), os.getpgrp() == os.getpid()],
    "deathSignal": death.value,
    "noNewPrivs": libc.prctl(39, 0, 0, 0, 0),  # PR_GET_NO_NEW_PRIVS
    "dumpable": libc.prctl(3, 0, 0, 0, 0),  # PR_GET_DUMPABLE: the server is not, its scripts are
    "core": list(resource.getrlimit(resource.RLIMIT_CORE)),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "stdin": os.readlink("/proc/self/fd/0"),
    "outputs": [os.readlink(f"/proc/self/fd/{fd}").split(":")[0] for fd in (1, 2)],
    "blocked": int(status["SigBlk"], 16),
}))
"""


@pytest.mark.skipif(not os.path.isfile("/proc/self/status"), reason="reads the script's state from Linux's /proc")
@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
def test_a_script_under_serve_runs_in_its_own_session_with_the_child_hardening(tmp_path: Path, era: str) -> None:
    skills = tmp_path.resolve() / "root"
    skill = write_skill(skills, "state", "name: state\ndescription: S.\nmcp-host:\n  version: 1\n  run:\n"
                        "    - script: state.py\n      interpreter: python3\n", files={"state.py": CHILD_STATE})
    envelope = {} if era == "legacy" else {"_meta": {
        "io.modelcontextprotocol/protocolVersion": era,
        "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}
    arguments = {"name": "state", "script": "state.py", "args": ["a b", "-c"]}
    with running([sys.executable, "-m", "skill_mcp"], clean_environ(SKILLS_DIR=str(skills), MCP_SKILL_PYTHON=PYTHON)) \
            as server:
        if era == "legacy":
            legacy_handshake(server)
        asked = tool_payload(server.request("tools/call", {**envelope, "name": "skill_run", "arguments": arguments}))
        answer = server.request("tools/call", {**envelope, "name": "skill_run",
                                               "arguments": {**arguments, "confirmToken": asked["confirmToken"]}})
        listing = tool_payload(server.request("tools/call", {**envelope, "name": "skill_list", "arguments": {}}))
        server.close_stdin()
        assert server.wait() == 0
    ran = tool_payload(answer)
    assert (ran["exitCode"], ran["signal"], ran["timedOut"]) == (0, None, False), ran["stderr"]
    assert listing["hardening"]["nonDumpable"] is True and listing["hardening"]["noNewPrivs"] is True
    assert json.loads(ran["stdout"]) == {
        "argv": ["a b", "-c"],
        "cwd": str(skill),
        "parent": server.process.pid,
        "leadsSessionAndGroup": [True, True],
        "deathSignal": signal.SIGKILL,
        "noNewPrivs": 1,
        "dumpable": 1,
        "core": [0, 0],
        "fds": [0, 1, 2, 3],  # 3 is listdir's own
        "stdin": "/dev/null",
        "outputs": ["pipe", "pipe"],
        "blocked": 0,
    }


# Forks a child that stays in the script's group and a grandchild that leaves the session; both would write
# later. The leader reports their pids and exits at once.
FORKS = """\
import os, time
children = []
for leaves in (False, True):
    pid = os.fork()
    if pid == 0:
        if leaves:
            os.setsid()
        time.sleep(0.5)
        print("late", flush=True)
        time.sleep(60)
        os._exit(0)
    children.append(pid)
print(*children, flush=True)
"""


def gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isfile("/proc/self/status"), reason="watches the script's children in Linux's /proc")
def test_under_serve_a_script_that_forks_and_exits_ends_its_run_with_its_children(tmp_path: Path) -> None:
    # Not §9.4's letter, which would let a child hold the pipes for the drain: `serve` kills what a script still
    # runs when it exits (README, "The execution fence"), so nothing is written after the exit and the run settles
    # at once, far from its 20 s timeout.
    skills = tmp_path.resolve() / "root"
    write_skill(skills, "forks", "name: forks\ndescription: F.\nmcp-host:\n  version: 1\n  run:\n"
                "    - script: forks.py\n      interpreter: python3\n      timeout: 20\n", files={"forks.py": FORKS})
    arguments = {"name": "forks", "script": "forks.py"}
    children: list[int] = []
    try:
        with running([sys.executable, "-m", "skill_mcp"], clean_environ(SKILLS_DIR=str(skills), MCP_SKILL_PYTHON=PYTHON)) \
                as server:
            legacy_handshake(server)
            asked = tool_payload(server.request("tools/call", {"name": "skill_run", "arguments": arguments}))
            answer = server.request("tools/call", {"name": "skill_run",
                                                   "arguments": {**arguments, "confirmToken": asked["confirmToken"]}})
            ran = tool_payload(answer)
            children = [int(pid) for pid in ran["stdout"].split()]
            time.sleep(1)  # past the moment the children would have written
            left = [pid for pid in children if not gone(pid)]
            server.close_stdin()
            assert server.wait() == 0
    finally:
        for pid in children:
            kill_quietly(pid)
    assert (ran["exitCode"], ran["signal"], ran["timedOut"], ran["truncated"]) == (
        0, None, False, {"stdout": False, "stderr": False})
    assert len(children) == 2 and "late" not in ran["stdout"]
    assert ran["durationMs"] < 10000
    assert left == []


# Runs until the test releases it: "started" tells the test it is in flight, "release" lets it end.
HELD = """\
import os, sys, time
open(os.path.join(sys.argv[1], "started"), "w").close()
for _ in range(3000):
    if os.path.exists(os.path.join(sys.argv[1], "release")):
        break
    time.sleep(0.01)
print(sys.argv[2])
"""
BUSY = (
    "another skill script is already in flight on this server; nothing was run\n\n"
    "Hint: Wait for it to finish and call again: one script runs at a time."
)


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
def test_a_second_run_on_the_same_stdio_connection_is_refused_at_once_not_queued(tmp_path: Path, era: str) -> None:
    # §9.4, §9.1 step 8: one run at a time per server; the second call's answer comes while the first still runs,
    # and its token, not spent, runs once the first is done.
    skills, signals = tmp_path.resolve() / "root", tmp_path.resolve() / "signals"
    signals.mkdir()
    write_skill(skills, "held", "name: held\ndescription: H.\nmcp-host:\n  version: 1\n  run:\n"
                "    - script: held.py\n      interpreter: python3\n", files={"held.py": HELD})
    envelope = {} if era == "legacy" else {"_meta": {
        "io.modelcontextprotocol/protocolVersion": era,
        "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }}

    def arguments(tag: str) -> dict[str, Any]:
        return {"name": "held", "script": "held.py", "args": [str(signals), tag]}

    def tools_call(request_id: int, args: dict[str, Any]) -> bytes:
        params = {**envelope, "name": "skill_run", "arguments": args}
        return json.dumps({"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": params}).encode()

    with running([sys.executable, "-m", "skill_mcp"], clean_environ(SKILLS_DIR=str(skills), MCP_SKILL_PYTHON=PYTHON)) \
            as server:
        if era == "legacy":
            legacy_handshake(server)
        first, second = (
            tool_payload(server.request("tools/call", {**envelope, "name": "skill_run", "arguments": arguments(tag)}))
            ["confirmToken"] for tag in ("first", "second")
        )
        server.send_line(tools_call(101, {**arguments("first"), "confirmToken": first}))
        deadline = time.monotonic() + 15
        while not (signals / "started").exists():
            assert time.monotonic() < deadline, "the first run never started"
            time.sleep(0.01)
        server.send_line(tools_call(102, {**arguments("second"), "confirmToken": second}))
        refused = server.next_message()  # the first run is still held: this can only be the second's answer
        (signals / "release").touch()
        ran_first = server.next_message()
        (signals / "started").unlink()
        (signals / "release").unlink()
        server.send_line(tools_call(103, {**arguments("second"), "confirmToken": second}))
        deadline = time.monotonic() + 15
        while not (signals / "started").exists():
            assert time.monotonic() < deadline, "the second run never started"
            time.sleep(0.01)
        (signals / "release").touch()
        ran_second = server.next_message()
    assert (refused["id"], refused["result"]["isError"]) == (102, True)
    assert refused["result"]["content"] == [{"type": "text", "text": BUSY}]
    assert (ran_first["id"], tool_payload(ran_first)["stdout"]) == (101, "first\n")
    assert (ran_second["id"], tool_payload(ran_second)["stdout"]) == (103, "second\n")
