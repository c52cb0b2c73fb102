"""The preview stage of `skill_run` (SPEC §9.1 steps 2-7, §9.2): deployment and call in, a `Draft` or a
`Refused` out. The only file it touches is the script, resolved inside its skill and hashed."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from typing import Any

from . import confirm
from .deployment import Deployment
from .files import FileTooLarge, sha256_fd
from .grants import not_granted_advice
from .limits import MAX_ARG_BYTES, MAX_ARGS, MAX_SCRIPT_BYTES
from .model import RunEntry, Skill
from .paths import PathRefused, SkillDir, is_missing
from .results import ToolFailure, read_error_text
from .runner import script_environment
from .text import encodes_as_utf8, quoted_path
from .tools import find_skill

_NOTHING_MAY_RUN_HINT = (
    "Nothing may run for this skill: a script needs both an mcp-host.run entry in SKILL.md AND "
    "acceptance by this deployment; skill_list shows which is missing."
)
_SCRIPT_MISSING_HINT = (
    "The skill declares it, but there is no such file in the skill (skill_list's problems report it as "
    "declared-script-missing): only the skill's author can fix that."
)


class Refused(ToolFailure):
    """A `skill_run` refusal, tagged with its `run.refused` reason: the preview stage's, and the run stage's."""

    def __init__(self, reason: str, message: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.reason = reason


@dataclass(frozen=True)
class Draft:
    """What the preview stage settled on: the script to run and exactly what the user approves."""

    skill: Skill
    entry: RunEntry
    real_script: str
    args: tuple[str, ...]
    will_run: dict[str, Any]

    @property
    def target(self) -> str:
        return f"{self.skill.name}/{self.entry.script}"

    @property
    def argv_sha256(self) -> str:
        """What the logs carry of the arguments (§13): the hex SHA-256 of the canonical JSON of argv."""
        return hashlib.sha256(confirm.canonical_json(self.will_run["argv"])).hexdigest()


def build_draft(deployment: Deployment, name: str, script: str, args: tuple[str, ...]) -> Draft:
    """The preview stage (§9.1 steps 2-7): what would run, or the first `Refused` on the way."""
    try:
        skill = find_skill(deployment, name)
    except ToolFailure as failure:
        raise Refused("unknown-skill", failure.message, failure.hint) from None
    if deployment.run_block is not None:
        raise Refused(
            "run-blocked",
            f"no script may run on this server: {deployment.run_block}",
            "Every skill's instructions and files are still served via skill_load and skill_file.",
        )
    entry = _effective_entry(deployment, skill, script)
    if not deployment.runnable(entry):
        raise Refused(
            "interpreter-unavailable",
            f'{quoted_path(script)} of the skill "{skill.name}" {deployment.unavailable_reason(entry)}, '
            "so this deployment cannot run it",
            "The skill's instructions remain available via skill_load.",
        )
    real_script, script_sha256 = _resolve_and_hash_script(skill, script)
    _check_arguments(args)
    return Draft(skill, entry, real_script, args, _will_run(deployment, skill, entry, script_sha256, args))


def _effective_entry(deployment: Deployment, skill: Skill, script: str) -> RunEntry:
    effective = deployment.effective_runs(skill)
    for entry in effective:
        if entry.script == script:
            return entry
    if effective:
        listed = ", ".join(quoted_path(entry.script) for entry in effective)
        hint = (
            f"The scripts this skill declares and this deployment accepts: {listed}. Only a script named in "
            "SKILL.md's mcp-host.run block and accepted for this deployment may run."
        )
    else:
        hint = _NOTHING_MAY_RUN_HINT
    if any(entry.script == script for entry in skill.declaration.runs):
        raise Refused(
            "not-granted",
            f'{quoted_path(script)} is declared by the skill "{skill.name}" but is not granted for this '
            "deployment, so it may not run",
            f"{hint} {not_granted_advice(deployment.grant)}",
        )
    undeclared = f'{quoted_path(script)} is not declared as a runnable script by the skill "{skill.name}"'
    raise Refused("not-declared", undeclared, hint)


def _resolve_and_hash_script(skill: Skill, script: str) -> tuple[str, str]:
    """The script's real path and the SHA-256 of its bytes, through the resolve check (§9.1 step 6)."""
    try:
        fd, real_script, _ = SkillDir(skill.real_dir).open(script)
        try:
            script_sha256, _ = sha256_fd(fd, MAX_SCRIPT_BYTES)
        finally:
            os.close(fd)
    except PathRefused as refused:
        # Not in the boot-time manifest (what skill_load lists), and not there now: a declared file never shipped.
        never_there = all(entry.path != script for entry in skill.manifest)
        if never_there and is_missing(os.path.join(skill.real_dir, script)):
            raise Refused("path-refused", refused.message, _SCRIPT_MISSING_HINT) from None
        raise Refused("path-refused", refused.message, refused.hint) from None
    except FileTooLarge:
        raise Refused(
            "path-refused",
            f"{quoted_path(script)} is more than {MAX_SCRIPT_BYTES} bytes, the cap for a script; it is not run",
            "A script this large is not run here; its skill can ship a smaller entry point.",
        ) from None
    except OSError as error:
        hint = "A script must be a regular file inside its skill that the server's user can read."
        raise Refused("path-refused", read_error_text(script, error), hint) from None
    return real_script, script_sha256


def _check_arguments(args: tuple[str, ...]) -> None:
    hint = "Pass a path (for example a file under MCP_DATA_DIR) rather than a payload."
    if len(args) > MAX_ARGS:
        raise Refused("bad-arguments", f"too many arguments: {len(args)}, the cap is {MAX_ARGS}", hint)
    if any("\0" in arg for arg in args):
        raise Refused("bad-arguments", "an argument contains a NUL byte", "Arguments are C strings; remove the NUL.")
    if not all(map(encodes_as_utf8, args)):  # a lone surrogate: no bytes the preview could have shown
        raise Refused(
            "bad-arguments", "an argument is not Unicode text: it holds a lone surrogate", "Pass arguments as text."
        )
    total = arg_bytes(args)
    if total > MAX_ARG_BYTES:
        raise Refused("bad-arguments", f"arguments total {total} bytes, over the {MAX_ARG_BYTES}-byte cap", hint)


def arg_bytes(args: tuple[str, ...]) -> int:
    return sum(len(arg.encode("utf-8")) for arg in args)  # after _check_arguments: every one encodes


def _will_run(
    deployment: Deployment, skill: Skill, entry: RunEntry, script_sha256: str, args: tuple[str, ...]
) -> dict[str, Any]:
    env = script_environment(deployment.environ, entry.env)
    will_run: dict[str, Any] = {
        "skill": skill.name,
        "interpreter": entry.interpreter,
        "argv": [entry.script, *args],
        "cwd": skill.real_dir,
        "timeoutMs": entry.timeout_ms,  # clamped to MAX_TIMEOUT_MS when declared
        "scriptSha256": script_sha256,
        "envNames": sorted(env),
    }
    not_set = [name for name in entry.env if name not in deployment.environ]
    if not_set:
        will_run["envNotSet"] = not_set
    handed = [name for name in entry.env if name in env]
    if deployment.grant.rows is None and handed:  # no grant: the declaration alone asked for these
        will_run["envWarning"] = (
            "No MCP_SKILL_RUN grant is set, so this third-party script will be handed the VALUES of "
            f"{', '.join(handed)} from this server's environment only because its own SKILL.md asked; "
            "approve only if you would give this skill those secrets. Set MCP_SKILL_RUN to grant "
            "variables explicitly."
        )
    return will_run
