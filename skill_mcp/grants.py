"""The owner's grant `MCP_SKILL_RUN`: parse, resolve, and narrow declared scripts with it (SPEC §10). Pure."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from .config import Config
from .limits import AMBIENT_SCRIPT_ALLOWLIST, ENV_NAME_PATTERN, RESERVED_SCRIPT_ENV
from .model import Problem, RunEntry, Skill
from .text import quoted, quoted_path

GRANT_VARIABLE = "MCP_SKILL_RUN"
_ROW_KEYS = frozenset({"skill", "script", "env"})


class GrantError(ValueError):
    """A malformed `MCP_SKILL_RUN`; the message names the variable and, where it applies, the row."""


@dataclass(frozen=True)
class GrantRow:
    skill: str
    script: str
    env: tuple[str, ...] | None


@dataclass(frozen=True)
class GrantState:
    """The resolved grant: rows None means no grant at all (the declaration decides)."""

    rows: tuple[GrantRow, ...] | None
    grant_from: str
    grant_error: str | None
    grant_note: str | None


NO_GRANT = GrantState(None, "declaration", None, None)  # standalone: each skill's own declaration decides (§10.2)


class _RepeatedKeys(dict):
    """A JSON object that repeated a key, which json.loads would otherwise resolve silently."""


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj = dict(pairs)
    return obj if len(obj) == len(pairs) else _RepeatedKeys(obj)


def parse_grant(raw: str) -> tuple[GrantRow, ...]:
    """Rows of a set `MCP_SKILL_RUN`, or GrantError saying what is wrong; `[]` grants nothing."""
    try:
        data = json.loads(raw, object_pairs_hook=_object)
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno} column {exc.colno}"
        # A path there is a guess at how the grant is given: it is the JSON itself, never a file.
        is_path = raw.lstrip().startswith(("/", "./", "~"))
        path_note = " (it holds the grant's JSON itself, not a path to a file)" if is_path else ""
        raise GrantError(f"{GRANT_VARIABLE} is not valid JSON: {exc.msg} at {where}{path_note}") from None
    except (ValueError, RecursionError):
        raise GrantError(f"{GRANT_VARIABLE} is not valid JSON (nested too deeply or a number too long)") from None
    if not isinstance(data, list):
        raise GrantError(f"{GRANT_VARIABLE} must be a JSON array of objects")
    return tuple(_row(index, item) for index, item in enumerate(data))


def _row(index: int, item: Any) -> GrantRow:
    where = f"{GRANT_VARIABLE} row {index}"
    if not isinstance(item, dict):
        raise GrantError(f"{where} is not an object")
    if isinstance(item, _RepeatedKeys):
        raise GrantError(f"{where} repeats a key")
    if not item.keys() <= _ROW_KEYS:  # not named: the grant's text is never logged (§2.1)
        raise GrantError(f"{where} has an unknown key (allowed: skill, script, env)")
    for key in ("skill", "script"):
        if key not in item:
            raise GrantError(f'{where} is missing "{key}"')
        if not isinstance(item[key], str) or not item[key]:
            raise GrantError(f'{where}: "{key}" must be a non-empty string')
    env = item.get("env")
    if "env" in item and not (isinstance(env, list) and all(isinstance(name, str) for name in env)):
        raise GrantError(f'{where}: "env" must be an array of strings')
    return GrantRow(item["skill"], item["script"], None if env is None else tuple(env))


def resolve_grant(config: Config) -> GrantState:
    """§10.2: an explicit grant (even malformed or `[]`) beats the hosted default; a bad grant grants nothing."""
    if config.grant_raw is None:
        if config.hosted:
            return GrantState((), "hosted-default", None, _hosted_default_note(config.host_markers))
        return NO_GRANT
    try:
        return GrantState(parse_grant(config.grant_raw), GRANT_VARIABLE, None, None)
    except GrantError as exc:
        error = f"{exc}; nothing is granted, so no script may run until it is fixed"
        return GrantState((), GRANT_VARIABLE, error, None)


def _hosted_default_note(markers: tuple[str, ...]) -> str:
    return (
        f"A host-injected variable ({', '.join(markers)}) is set and no {GRANT_VARIABLE} grant was supplied, so "
        f"nothing may run here; a script becomes runnable when the deployment grants it in {GRANT_VARIABLE}. "
        "Instructions and files are served either way."
    )


def not_granted_advice(grant: GrantState) -> str:
    """For a declared script the grant leaves out: why, and who can change that (not the client). The text quotes
    no grant, so a client may see it, as it sees skill_list's grantError."""
    if grant.grant_error is not None:
        return (
            f"The grant is malformed: {grant.grant_error}. The README gives its syntax: a JSON array of "
            "{skill, script, env?} objects."
        )
    if grant.grant_from == "hosted-default":
        return f"This hosted deployment was given no grant; its owner grants scripts in {GRANT_VARIABLE}."
    return f"The deployment's grant, {GRANT_VARIABLE}, does not name it; only the deployment's owner can add it."


def apply_grant(
    skills: Sequence[Skill], grant: GrantState
) -> tuple[dict[str, tuple[RunEntry, ...]], list[Problem]]:
    """Effective scripts per served skill name, and one `grant` problem per row or env name that matches nothing."""
    if grant.rows is None:
        return {skill.name: skill.declaration.runs for skill in skills}, []
    by_name = {skill.name: skill for skill in skills}
    granted: dict[tuple[str, str], set[str]] = {}
    problems: list[Problem] = []
    for index, row in enumerate(grant.rows):
        where = f"{GRANT_VARIABLE} row {index}"
        skill = by_name.get(row.skill)
        if skill is None:
            problems.append(Problem(GRANT_VARIABLE, "grant", (
                f"{where} names skill {quoted(row.skill)} (script {quoted_path(row.script)}), "
                "which is not served, so it grants nothing"
            )))
            continue
        run = next((run for run in skill.declaration.runs if run.script == row.script), None)
        if run is None:
            problems.append(Problem(skill.real_dir, "grant", (
                f"{where} names script {quoted_path(row.script)} of skill {quoted(row.skill)}, "
                "which the skill does not declare in mcp-host.run, so it grants nothing"
            )))
            continue
        names = granted.setdefault((row.skill, row.script), set())
        seen: set[str] = set()
        for item, name in enumerate(row.env or ()):
            if name in seen:
                continue
            seen.add(name)
            if name in run.env:
                names.add(name)
            elif not ENV_NAME_PATTERN.fullmatch(name):
                # By its index only, as a declaration's (§4.4): an item such as `KEY=value` would carry a secret.
                problems.append(Problem(skill.real_dir, "grant", (
                    f"{where} env item {item} is not a variable name (letters, digits, _), so it grants nothing; "
                    "list variable names only: a script is handed each one's value from the server's environment"
                )))
            else:
                problems.append(Problem(skill.real_dir, "grant", (
                    f"{where} grants variable {quoted(name)} to script {quoted_path(row.script)} "
                    f"of skill {quoted(row.skill)}, {_why_not_granted(name)}"
                )))
    effective = {
        skill.name: tuple(
            replace(run, env=tuple(name for name in run.env if name in granted[skill.name, run.script]))
            for run in skill.declaration.runs
            if (skill.name, run.script) in granted
        )
        for skill in skills
    }
    return effective, problems


def _why_not_granted(name: str) -> str:
    """What a grant of an undeclared `name` changes: nothing, but not always because the script did not ask."""
    if name in RESERVED_SCRIPT_ENV:  # a declaration asking for it drew its own problem (§4.4)
        return "which is reserved, so it is never handed to a script"
    if name in (*AMBIENT_SCRIPT_ALLOWLIST, "MCP_DATA_DIR"):
        return "which every script is handed anyway when the server has it; no grant is needed"
    return "which the script does not declare, so it is not handed over"
