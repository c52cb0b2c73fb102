"""The read tools (SPEC §7): `skill_list`, `skill_load`, `skill_file`, and finding a skill by name.

Handlers take the deployment and validated arguments and return a JSON-able object or raise `ToolFailure`;
server.py turns either into the answer with results.py (SPEC §5.3).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from .deployment import Deployment
from .files import encode_content, media_type, read_capped_fd
from .limits import MAX_CALL_BYTES, MAX_FILE_BYTES, MAX_SKILL_MD_BYTES, SKILL_MD
from .model import RunEntry, Skill
from .paths import PathRefused, SkillDir, UnreadableFile
from .results import ToolFailure, read_error_text
from .text import quoted

_MAX_NAMES_IN_HINT = 64
# Reasons that keep a skill directory (or a link to one) from being served, each reported at its own path (§3.7).
_REFUSALS = frozenset(
    {"unreadable-skill-md", "malformed-frontmatter", "duplicate-name", "unusable-name", "symlink-escape", "name-mismatch"}
)


def find_skill(deployment: Deployment, name: str) -> Skill:
    skill = deployment.by_name.get(name)
    if skill is None:
        raise ToolFailure(f"no skill named {quoted(name)}", _served_names_hint(deployment, name))
    return skill


def no_skills_message(deployment: Deployment) -> str:
    if deployment.problems:
        return "No skills were found on this server; call skill_list, whose problems say why."
    # Nothing was refused either: no directory under the roots holds a SKILL.md (an empty or wrong root).
    return (
        "No skills were found on this server: no directory under its roots holds a SKILL.md; "
        "call skill_list to see the roots it searched."
    )


def _served_names_hint(deployment: Deployment, name: str) -> str:
    # A directory of that name that discovery refused is most likely what the caller meant.
    refused = next((p for p in deployment.problems if p.reason in _REFUSALS and os.path.basename(p.path) == name), None)
    names = [skill.name for skill in deployment.skills]
    if refused is not None:
        why = f"A directory of that name was not served ({refused.reason}); skill_list's problems say why."
        return why + (f" This server serves: {_names_text(names)}" if names else " No other skill is served.")
    if not names:
        return no_skills_message(deployment)
    return f"This server serves: {_names_text(names)}"


def _names_text(names: list[str]) -> str:
    more = len(names) - _MAX_NAMES_IN_HINT
    return ", ".join(names[:_MAX_NAMES_IN_HINT]) + (f", and {more} more." if more > 0 else ".")


def _present(**fields: Any) -> dict[str, Any]:
    """Drop the optional fields that are absent (None)."""
    return {key: value for key, value in fields.items() if value is not None}


# --- skill_list -------------------------------------------------------------------------------


def skill_list(deployment: Deployment) -> dict[str, Any]:
    grant = deployment.grant
    hardening = deployment.hardening
    return {
        "roots": list(deployment.roots),
        "rootsFrom": deployment.roots_from,
        "grantFrom": grant.grant_from,
        **_present(grantNote=grant.grant_note, grantError=grant.grant_error),
        "interpreters": sorted(deployment.interpreters),
        "hardening": {
            "environScrubbed": hardening.environ_scrubbed,
            "nonDumpable": hardening.non_dumpable,
            "noNewPrivs": hardening.no_new_privs,
            "rlimitNproc": hardening.rlimit_nproc,
            "rlimitAsMb": hardening.rlimit_as_mb,
        },
        "skills": [_listed_skill(deployment, skill) for skill in deployment.skills],
        "problems": [problem.to_json() for problem in deployment.problems],
    }


def _listed_skill(deployment: Deployment, skill: Skill) -> dict[str, Any]:
    effective = deployment.effective_runs(skill)
    runnable = [entry for entry in effective if deployment.runnable(entry)]
    effective_scripts = {entry.script for entry in effective}
    declared = skill.declaration.runs
    listed = {
        "name": skill.name,
        **_present(description=skill.description, whenToUse=skill.when_to_use),
        "source": skill.source,
        "files": len(skill.manifest),
        "bytes": sum(entry.size for entry in skill.manifest),
        "executable": bool(runnable) and deployment.run_block is None,
        "scripts": [_script_json(entry) for entry in runnable],
        "unavailableScripts": [
            {"script": entry.script, "reason": deployment.unavailable_reason(entry)}
            for entry in declared
            if not deployment.runnable(entry)
        ],
    }
    ungranted = [
        {"script": entry.script, "reason": "declared by the skill and not granted for this deployment, so it may not run here"}
        for entry in declared
        if deployment.runnable(entry) and entry.script not in effective_scripts
    ]
    if ungranted:
        listed["ungrantedScripts"] = ungranted
    if skill.declaration.egress:
        listed["declaredEgress"] = list(skill.declaration.egress)
    return listed


def _script_json(entry: RunEntry) -> dict[str, Any]:
    return {"script": entry.script, "interpreter": entry.interpreter, "timeoutMs": entry.timeout_ms, "env": list(entry.env)}


# --- skill_load -------------------------------------------------------------------------------


def skill_load(deployment: Deployment, name: str) -> dict[str, Any]:
    skill = find_skill(deployment, name)
    loaded: dict[str, Any] = {
        "name": skill.name,
        **_present(description=skill.description, whenToUse=skill.when_to_use),
        "source": skill.source,
        "body": skill.body,
        "truncated": skill.body_truncated,
    }
    if skill.body_truncated:
        loaded["truncationNote"] = (
            f"SKILL.md was cut at {MAX_SKILL_MD_BYTES} bytes (frontmatter included); skill_file reads the whole "
            f'file as "{SKILL_MD}", up to {MAX_FILE_BYTES} bytes.'
        )
    loaded["files"] = [{"path": entry.path, "size": entry.size} for entry in skill.manifest]
    loaded["scripts"] = [
        {"script": entry.script, "interpreter": entry.interpreter, "runnableHere": deployment.runnable(entry)}
        for entry in deployment.effective_runs(skill)
    ]
    return loaded


# --- skill_file -------------------------------------------------------------------------------


def skill_file(deployment: Deployment, name: str, paths: list[str]) -> dict[str, Any]:
    skill = find_skill(deployment, name)
    # Pass 1 opens every path and decides the call's budget from sizes alone, so nothing is read when it is over.
    directory = SkillDir(skill.real_dir)
    slots: list[tuple[str, int, os.stat_result] | dict[str, str]] = []
    try:
        total = 0
        for rel in paths:
            try:
                fd, _, status = directory.open(rel)
            except PathRefused as refused:
                slots.append({"path": rel, "error": refused.message})
                continue
            except OSError as error:
                slots.append({"path": rel, "error": read_error_text(rel, error)})
                if isinstance(error, UnreadableFile):  # resolved, so it counts, as if its read were what failed
                    total += min(error.status.st_size, MAX_FILE_BYTES)
                continue
            slots.append((rel, fd, status))
            total += min(status.st_size, MAX_FILE_BYTES)
        if total > MAX_CALL_BYTES:
            raise ToolFailure(
                f"the {len(paths)} paths total {total} bytes to read, over this call's {MAX_CALL_BYTES}-byte "
                "limit; nothing was read",
                "Ask for fewer files per call, or read the largest file alone; skill_load lists every file's size.",
            )
        return {"skill": skill.name, "files": [_read_entry(slot) for slot in slots]}
    finally:
        for slot in slots:
            if isinstance(slot, tuple):
                os.close(slot[1])


def _read_entry(slot: tuple[str, int, os.stat_result] | dict[str, str]) -> dict[str, Any]:
    if isinstance(slot, dict):
        return slot
    rel, fd, status = slot
    try:
        read = read_capped_fd(fd, MAX_FILE_BYTES, status)
    except OSError as error:
        return {"path": rel, "error": read_error_text(rel, error)}
    encoding, content = encode_content(read.data)
    entry: dict[str, Any] = {
        "path": rel,
        "size": read.size,
        "mediaType": media_type(rel),
        "encoding": encoding,
        "truncated": read.truncated,
    }
    if read.truncated:
        entry["truncationNote"] = f"the file is {read.size} bytes; the first {MAX_FILE_BYTES} bytes are returned"
    entry["content"] = content
    return entry


# Answered from the boot-time catalog alone: the same arguments always get the same answer.
BOOT_TIME_TOOLS = frozenset({"skill_list", "skill_load"})

READ_TOOLS: Mapping[str, Any] = {
    "skill_list": lambda deployment, args: skill_list(deployment),
    "skill_load": lambda deployment, args: skill_load(deployment, args["name"]),
    "skill_file": lambda deployment, args: skill_file(deployment, args["name"], args["paths"]),
}
