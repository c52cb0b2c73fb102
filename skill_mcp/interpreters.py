"""Resolve the `node` and `python3` paths once at boot (SPEC §2.5); the filesystem edge of configuration."""

from __future__ import annotations

import contextlib
import os
import stat
import sys

from .config import Config, ConfigWarning
from .paths import is_within, real_path


def server_venv_prefix() -> str | None:
    """The server's virtual-environment prefix, or None when it runs on a base interpreter."""
    return sys.prefix if sys.prefix != sys.base_prefix else None


def find_interpreters(
    config: Config, search_path: str | None, server_prefix: str | None
) -> tuple[dict[str, str], list[ConfigWarning]]:
    """Runnable interpreter name → absolute path; an unusable override is a warning, never a fallback."""
    found: dict[str, str] = {}
    warnings: list[ConfigWarning] = []
    for name, variable, override in (
        ("node", "MCP_SKILL_NODE", config.node_override),
        ("python3", "MCP_SKILL_PYTHON", config.python_override),
    ):
        # Scripts must not run on the server's own venv python: it carries the server's packages.
        venv = server_prefix if name == "python3" else None
        if override is None:
            path, shims = _search(name, search_path, venv)
            if shims:
                warnings.append(ConfigWarning("PATH", _shims_skipped(name, variable, shims, path)))
        else:
            problem = _override_problem(override, venv)
            path = None if problem else override
            if problem:
                warnings.append(ConfigWarning(variable, f"{problem}; {name} is unavailable"))
        if path is not None:
            found[name] = path
    return found, warnings


def _override_problem(path: str, venv: str | None) -> str | None:
    if not os.path.isabs(path):
        return "not an absolute path"
    if not _is_executable_file(path):
        return "not an existing, executable regular file"
    if _inside(path, venv):
        return "inside the server's virtual environment"
    return None


def _search(name: str, search_path: str | None, venv: str | None) -> tuple[str | None, list[str]]:
    """The first usable `name` on `search_path`, and the scripts skipped on the way there."""
    shims = []
    for directory in (search_path or "").split(os.pathsep):
        # A relative PATH entry would depend on the cwd at spawn time; only absolute ones are trusted.
        if not os.path.isabs(directory):
            continue
        candidate = os.path.join(directory, name)
        if not _is_executable_file(candidate) or _inside(candidate, venv):
            continue
        if not _is_script(candidate):
            return candidate, shims
        shims.append(candidate)
    return None, shims


def _is_script(path: str) -> bool:
    """Whether `path` starts with "#!": a version manager's shim (pyenv, asdf), not an interpreter. A shim picks the
    interpreter when it runs, by files in the current directory, which is the skill's: the skill would choose."""
    try:
        with open(path, "rb") as file:
            return file.read(2) == b"#!"
    except OSError:  # unreadable or gone since its stat: whether it runs is for the spawn to say
        return False


def _shims_skipped(name: str, variable: str, shims: list[str], path: str | None) -> str:
    # Counted, not named: where they lie is PATH's value, which no warning quotes (§2.1).
    outcome = f"{name} is {path}" if path else f"{name} is unavailable"
    found, them = (f"{name} on PATH is a script", "it") if len(shims) == 1 else (f"{len(shims)} {name} on PATH are scripts", "them")
    return (
        f"the first {found}, not an interpreter (a version manager's shim, which would let a skill's own files pick "
        f"the interpreter), so the lookup skipped {them} and {outcome}; set {variable} to the interpreter scripts "
        "should run on"
    )


def _is_executable_file(path: str) -> bool:
    try:
        is_regular = stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False
    return is_regular and os.access(path, os.X_OK)


def _inside(path: str, prefix: str | None) -> bool:
    """Whether the path, as written, resolved, or with only its directory resolved, lies under the prefix (as written
    or resolved)."""
    if prefix is None:
        return False
    prefixes, paths = {os.path.abspath(prefix)}, {os.path.abspath(path)}
    with contextlib.suppress(OSError):  # missing, or a link loop: the path as written counts
        prefixes.add(real_path(prefix))
    with contextlib.suppress(OSError):
        paths.add(real_path(path))
    with contextlib.suppress(OSError):  # Python finds its venv beside the path it was run by, that directory resolved
        paths.add(os.path.join(real_path(os.path.dirname(path)), os.path.basename(path)))
    return any(is_within(p, q) for p in paths for q in prefixes)
