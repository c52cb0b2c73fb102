"""Shared test plumbing: skill trees on disk, deployments from an environ, protocol clients."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import textwrap
import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client

from skill_mcp.deployment import Deployment, build_deployment
from skill_mcp.run_tool import RunService
from skill_mcp.server import build_server

ERAS = ("legacy", "auto")  # "auto" negotiates 2026-07-28 through server/discover
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSPECTOR = "@modelcontextprotocol/inspector@2.12.0"


def in_signal_mask(pid: int, field: str, signum: int) -> bool:
    """Whether `signum` is in a /proc/<pid>/status signal mask: SigIgn (ignored), SigCgt (caught), ..."""
    with open(f"/proc/{pid}/status") as status:
        mask = next(line for line in status if line.startswith(f"{field}:")).split()[1]
    return bool(int(mask, 16) & (1 << (signum - 1)))


def inspector_unavailable() -> str | None:
    """Why the Inspector CLI cannot run here, or None. Its CLI needs Node's global CustomEvent (Node 19 and
    later; Debian bookworm ships 18, where it fails); it is checked here on Node 20."""
    if shutil.which("npx") is None:
        return "Node's npx is not on PATH: the MCP Inspector CLI cannot run"
    version = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        return f"the MCP Inspector CLI needs Node 20 or later (its package asks for 22.19); this Node is {version}"
    return None


def write_skill(
    root: str | os.PathLike[str],
    name: str,
    frontmatter: str | None = None,
    body: str = "Instructions.\n",
    files: Mapping[str, str | bytes] | None = None,
) -> Path:
    """Create `<root>/<name>/SKILL.md` (default frontmatter: name and a description) plus bundled files."""
    directory = Path(root) / name
    directory.mkdir(parents=True, exist_ok=True)
    if frontmatter is None:
        frontmatter = f"name: {name}\ndescription: The {name} skill.\n"
    (directory / "SKILL.md").write_text(f"---\n{textwrap.dedent(frontmatter)}---\n{body}", encoding="utf-8")
    for rel, content in (files or {}).items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return directory


def deployment_for(environ: Mapping[str, str], **options: Any) -> Deployment:
    deployment, _ = build_deployment(dict(environ), **options)
    return deployment


@asynccontextmanager
async def connect(deployment: Deployment, era: str, run_tool: Any = None, **client_options: Any) -> AsyncIterator[Client]:
    server = build_server(deployment, run_tool or RunService(deployment).call)
    async with Client(server, mode=era, **client_options) as client:
        yield client


def payload(result: Any) -> Any:
    """The minified JSON body of a successful tool result."""
    assert not result.is_error, result.content[0].text
    text = result.content[0].text
    assert "\n" not in text
    return json.loads(text)


def error_text(result: Any) -> str:
    assert result.is_error, result.content[0].text
    return result.content[0].text


UNPRIVILEGED_UID = 10001


# For every test that calls as_unprivileged: skipped before it locks anything its cleanup could not remove.
needs_root = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="needs root, to run as uid 10001: the owner of the files a permission test locks still enters them",
)


def as_unprivileged(action: Any) -> Any:
    """Run `action()` without root's powers, in a forked child as uid 10001: root reads and lists anything, and the
    files' owner may still enter what it locked, so a permission test run by either would prove nothing. Without
    root to drop from, the test is skipped."""
    import pickle

    if os.geteuid() != 0:
        pytest.skip(needs_root.kwargs["reason"])
    reader, writer = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        try:
            os.setgroups([])
            os.setgid(UNPRIVILEGED_UID)
            os.setuid(UNPRIVILEGED_UID)
            outcome = ("ok", action())
        except BaseException as error:  # noqa: BLE001 - carried back to the parent as is
            outcome = ("error", repr(error))
        with os.fdopen(writer, "wb") as pipe:
            pickle.dump(outcome, pipe)
        os._exit(0)
    os.close(writer)
    with os.fdopen(reader, "rb") as pipe:
        status, value = pickle.load(pipe)
    os.waitpid(pid, 0)
    assert status == "ok", value
    return value


def process_gone(pid: int) -> bool:
    """No such process, or one killed and awaiting its reaper (a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def world_readable_dir() -> Path:
    """A fresh directory an unprivileged uid can reach (pytest's tmp_path is root-only)."""
    directory = Path(tempfile.mkdtemp(prefix="skill-mcp-test-"))
    directory.chmod(0o755)
    return directory


def resolve_in_skill(skill_dir: str, rel: str) -> str:
    """The §6.2 check as a path: open `rel` the way every read does, keep only its checked real path."""
    from skill_mcp.paths import SkillDir

    fd, real, _ = SkillDir(skill_dir).open(rel)
    os.close(fd)
    return real


@contextmanager
def fails_after(seconds: int) -> Any:
    """Raise TimeoutError in the block after `seconds`: a blocking system call is interrupted, not waited out."""

    def on_alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"blocked for more than {seconds}s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@contextmanager
def mount_namespace(script: str) -> Iterator[str]:
    """A private mount namespace set up by `script` (sh) and held open by a sleeping process: yields its root as
    this process sees it, /proc/<pid>/root (a magic link)."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) to make a mount namespace")
    ready = Path(tempfile.mkdtemp()) / "ns.pid"
    holder = subprocess.Popen(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c",
         f'{script} && echo $$ > "{ready}" && exec sleep 30'],
    )  # fmt: skip
    try:
        for _ in range(200):
            if ready.exists() and ready.read_text().strip():
                break
            time.sleep(0.01)
        else:
            pytest.skip("could not mount in a private mount namespace here")
        yield f"/proc/{ready.read_text().strip()}/root"
    finally:
        holder.kill()
        holder.wait()
        shutil.rmtree(ready.parent)
