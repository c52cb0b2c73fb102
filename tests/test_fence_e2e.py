"""The whole fence, end to end: the real `skill-mcp serve` as an unprivileged uid runs real scripts that try
to reach into it (SPEC §9.6–§9.8, §7.1 `hardening`; issue 3 items 4 and 7).

As root, /proc would let any script read the server (CAP_SYS_PTRACE), so the server is started as uid 10001
under Debian's python3 with the test's own site-packages on its path; the scripts run as 10001 too.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
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


@pytest.fixture(scope="module")
def sandbox() -> Path:
    """Skills and the server's code where uid 10001 can read them."""
    root = world_readable_dir()
    write_skill(root / "skills", "fence", SKILL, files={"peek.py": PEEK})
    write_skill(root / "skills", "detach", SKILL.replace("fence", "detach").replace("peek.py", "detach.py"),
                files={"detach.py": DETACH})
    site = root / "site"
    shutil.copytree(sysconfig.get_paths()["purelib"], site, ignore=shutil.ignore_patterns("__pycache__", "*.pth"))
    shutil.copytree(Path(REPO) / "skill_mcp", site / "skill_mcp", ignore=shutil.ignore_patterns("__pycache__"))
    for path in [root, *root.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    yield root
    shutil.rmtree(root)


def unprivileged_server(sandbox: Path) -> LineClient:
    drop = ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups"] if os.geteuid() == 0 else []
    environ = {
        "PATH": "/usr/bin:/bin",
        "HOME": "/nonexistent",
        "PYTHONPATH": str(sandbox / "site"),
        "PYTHONDONTWRITEBYTECODE": "1",
        "SKILLS_DIR": str(sandbox / "skills"),
        "MCP_SKILL_PYTHON": SYSTEM_PYTHON,
        "NEIGHBOUR_TOKEN": SENTINEL,
    }
    return LineClient([*drop, SYSTEM_PYTHON, "-m", "skill_mcp"], environ, cwd=str(sandbox))


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
    server = unprivileged_server(sandbox)
    try:
        legacy_handshake(server)
        result = confirmed_run(server, {"name": "detach", "script": "detach.py"})
        sleeper = int(result["stdout"])
        alive = os.path.exists(f"/proc/{sleeper}") and open(f"/proc/{sleeper}/stat").read().rsplit(")", 1)[1].split()[0] != "Z"
        server.close_stdin()
        assert server.wait() == 0
    finally:
        server.kill()
    assert (result["exitCode"], result["timedOut"], alive) == (0, False, False)
