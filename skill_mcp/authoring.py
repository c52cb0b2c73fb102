"""`skill-mcp check` and `skill-mcp list` (SPEC §14.2–14.3): the server's own deployment, printed.

Both build the deployment as `serve` does, minus the environ scrub and non-dumpable step, so what they print
is what the server would serve; `check` also leaves out the owner's grant, since it judges skills, not a
deployment. Findings and formatting are pure; the notes for authors read the skill's files again, and the
commands at the end read the environment and write notes and warnings on stderr (cli.py prints the report).
"""

from __future__ import annotations

import codecs
import datetime
import itertools
import json
import os
import posixpath
import re
import sys
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from .catalog import discover
from .deployment import Deployment, build_deployment
from .files import read_capped_fd
from .frontmatter import json_key
from .limits import (
    AGENT_SKILLS_MAX_DESCRIPTION_CHARS,
    AGENT_SKILLS_NAME_RULE,
    INTERPRETERS,
    MAX_FILE_BYTES,
    MAX_SCRIPT_BYTES,
    MAX_SKILL_MD_BYTES,
    SKILL_MD,
    is_agent_skills_name,
)
from .model import Catalog, PathTally, Problem, Skill
from .paths import PathRefused, SkillDir, is_within, real_path
from .text import fit, json_for_people, printable, quoted, quoted_path
from .tools import skill_list

_MAX_COMPATIBILITY_CHARS = 500
_STRING_ONLY_KEYS = ("license", "allowed-tools")
_MAX_ROW_CHARS = 120
_COLUMN_GAP = "  "
# What a description keeps, at most, beside a skill that may run more scripts than its row has room for.
_DESCRIPTION_ROOM = 30

# --- `spec` findings (§14.2) ------------------------------------------------------------------


def spec_findings(skill: Skill) -> list[Problem]:
    """One `spec` problem per Agent Skills format rule the skill's frontmatter breaks."""
    frontmatter = skill.frontmatter
    details = [
        _name_finding(frontmatter),
        _description_finding(frontmatter),
        _compatibility_finding(frontmatter),
        _metadata_finding(frontmatter),
        *(_string_finding(frontmatter, key) for key in _STRING_ONLY_KEYS),
    ]
    return [Problem(skill.real_dir, "spec", detail) for detail in details if detail]


def _name_finding(frontmatter: Mapping[Any, Any]) -> str | None:
    if "name" not in frontmatter:
        return 'frontmatter "name" is missing; the Agent Skills format requires it'
    name = frontmatter["name"]
    if not isinstance(name, str):
        return f'frontmatter "name" is {_kind(name)}, not a string'
    if not is_agent_skills_name(name):
        return (
            f'frontmatter name {quoted(name)} is not {AGENT_SKILLS_NAME_RULE} (no leading, trailing or doubled "-")'
        )
    return None


def _description_finding(frontmatter: Mapping[Any, Any]) -> str | None:
    if "description" not in frontmatter:
        return 'frontmatter "description" is missing; the Agent Skills format requires it'
    return _bounded_string_finding("description", frontmatter["description"], AGENT_SKILLS_MAX_DESCRIPTION_CHARS)


def _compatibility_finding(frontmatter: Mapping[Any, Any]) -> str | None:
    if "compatibility" not in frontmatter:
        return None
    return _bounded_string_finding("compatibility", frontmatter["compatibility"], _MAX_COMPATIBILITY_CHARS)


def _bounded_string_finding(key: str, value: Any, max_chars: int) -> str | None:
    if not isinstance(value, str):
        return f'frontmatter "{key}" is {_kind(value)}, not a string'
    if not value:
        return f'frontmatter "{key}" is empty; it must be 1-{max_chars} characters'
    if len(value) > max_chars:
        return f'frontmatter "{key}" is {len(value)} characters, over the {max_chars}-character limit'
    return None


def _metadata_finding(frontmatter: Mapping[Any, Any]) -> str | None:
    if "metadata" not in frontmatter:
        return None
    metadata = frontmatter["metadata"]
    if not isinstance(metadata, dict):
        return f'frontmatter "metadata" is {_kind(metadata)}, not a mapping of strings to strings'
    # Every key and value at once: an author who fixes the one named would otherwise meet the next on each run.
    wrong = [f'"metadata" has the key {json_key(key)}, which is {_kind(key)}' for key in metadata if not isinstance(key, str)]
    wrong += [
        f'"metadata.{key}" is {_kind(value)}'
        for key, value in metadata.items()
        if isinstance(key, str) and not isinstance(value, str)
    ]
    if wrong:
        return f"frontmatter {', '.join(wrong)}; metadata keys and values must be strings"
    return None


def _string_finding(frontmatter: Mapping[Any, Any], key: str) -> str | None:
    if key in frontmatter and not isinstance(frontmatter[key], str):
        # Some agents take a YAML list of tools; the Agent Skills format takes one string.
        how = '; write the tools as one space-separated string, e.g. "Read Grep"' if key == "allowed-tools" else ""
        return f'frontmatter "{key}" is {_kind(frontmatter[key])}, not a string{how}'
    return None


def _kind(value: Any) -> str:
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, (datetime.date, datetime.datetime)):
        return "a date"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return "a string" if isinstance(value, str) else type(value).__name__


# --- output (pure) ----------------------------------------------------------------------------


def check_report(roots: Sequence[str], skill_names: Sequence[str], problems: Sequence[Problem]) -> dict[str, Any]:
    return {"roots": list(roots), "skills": list(skill_names), "problems": [problem.to_json() for problem in problems]}


def demo_note(command: str, done: str) -> str:
    return (
        f"no ROOT argument, MCP_SKILLS_PATH or SKILLS_DIR, so this {done} the bundled demo skill; "
        f"pass the directory that holds your skills, e.g. `skill-mcp {command} ./skills`"
    )


def check_lines(report: Mapping[str, Any]) -> list[str]:
    lines = [_one_line(f"{p['reason']}  {p['path']}: {p['detail']}") for p in report["problems"]]
    return [*lines, _summary(len(report["skills"]), len(report["problems"]))]


# --- notes for authors (they read the skill's files again) ---------------------------------------


def check_notes(deployment: Deployment) -> list[str]:
    """What an author would want to know that is no problem (a problem changes the exit code): which skills were
    checked when no root was given or none was found, what a client will not see of a skill or will get cut, and
    declared scripts no deployment of skill-mcp can ever run."""
    notes = []
    if deployment.roots_from == "default":
        notes.append(demo_note("check", "checked"))
    elif empty := _roots_holding_nothing(deployment):
        notes.append(
            f"no skill was found under {', '.join(empty)}: a skill is a directory holding a SKILL.md, "
            "given as a ROOT itself or placed in a ROOT or in its `skills` directory"
        )
    for problem in deployment.problems:  # `check path/to/SKILL.md`: the skill is the directory holding it
        not_a_directory = problem.reason == "root-unreadable" and problem.detail == "not a directory"
        if not_a_directory and os.path.basename(problem.path) == SKILL_MD:
            notes.append(f"{problem.path} is a skill's {SKILL_MD}: give its directory, {os.path.dirname(problem.path)}")
    return [*notes, *(note for skill in deployment.skills for note in _skill_notes(skill))]


def _roots_holding_nothing(deployment: Deployment) -> list[str]:
    """The roots that yield no skill and no problem: beside a root that does, one given by mistake (`check skills/*`
    over a folder of notes) would otherwise pass unnoticed."""
    if not deployment.skills and not deployment.problems:
        return list(dict.fromkeys(deployment.roots))
    served_from = {skill.source for skill in deployment.skills}
    max_skills = deployment.config.max_skills
    return [
        root
        for root in dict.fromkeys(deployment.roots)
        if root not in served_from and _yields_nothing(discover((root,), max_skills))
    ]


def _yields_nothing(catalog: Catalog) -> bool:
    return not catalog.skills and not catalog.problems


def _skill_notes(skill: Skill) -> list[str]:
    notes = []
    if (where := _first_non_utf8(skill)) is not None:
        notes.append(
            f"{skill.name}: SKILL.md is not valid UTF-8 ({where}), so each byte that does not decode reads as "
            "U+FFFD, the replacement character, in its description and instructions; save it as UTF-8"
        )
    if (broken := _missing_link_targets(skill)).count:
        notes.append(
            f"{skill.name}: SKILL.md links to {broken.count} path(s) that are not in this skill, so a client that "
            f"follows them with skill_file gets an error: {_named(broken)}"
        )
    if skill.body_truncated:
        notes.append(
            f"{skill.name}: SKILL.md is over {MAX_SKILL_MD_BYTES} bytes, so the instructions skill_load returns "
            f"stop at byte {MAX_SKILL_MD_BYTES} of the file (frontmatter included); skill_file reads up to {MAX_FILE_BYTES} bytes of it"
        )
    if skill.skipped.count:
        notes.append(
            f"{skill.name}: {skill.skipped.count} symbolic link(s) or special file(s) are not listed, so clients "
            f"are not offered them: {_named(skill.skipped)}; skill_file reads a link by its path only while it "
            "resolves inside the skill"
        )
    if count := skill.unlisted_dirs.count:
        which, them = ("1 directory", "it") if count == 1 else (f"{count} directories", "them")
        own = ' ("." is the skill\'s own)' if "." in skill.unlisted_dirs.first else ""
        notes.append(
            f"{skill.name}: {which} could not be listed by this user{own}, so no file in {them} is offered to "
            f"clients: {_named(skill.unlisted_dirs)}"
        )
    oversized = PathTally.of(entry.path for entry in skill.manifest if entry.size > MAX_FILE_BYTES)
    if oversized.count:
        notes.append(
            f"{skill.name}: {oversized.count} file(s) are over {MAX_FILE_BYTES} bytes, so skill_file and "
            f"resources/read return only their first {MAX_FILE_BYTES} bytes: {_named(oversized)}"
        )
    sizes = {entry.path: entry.size for entry in skill.manifest}
    for entry in skill.declaration.runs:
        if entry.interpreter not in INTERPRETERS:
            notes.append(
                f"{skill.name}: {quoted_path(entry.script)} declares the interpreter "
                f"{quoted(entry.interpreter)}, and "
                f"skill-mcp runs only {' and '.join(INTERPRETERS)}, so it never runs"
            )
        if sizes.get(entry.script, 0) > MAX_SCRIPT_BYTES:  # skill_run refuses it before hashing it
            notes.append(
                f"{skill.name}: {quoted_path(entry.script)} is {sizes[entry.script]} bytes, over the "
                f"{MAX_SCRIPT_BYTES}-byte cap for a script, so skill_run never runs it"
            )
    return notes


_FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`\n]*`")
# An inline link or image, `[text](target "title")`, or a reference definition, `[ref]: target`: its target, bare
# or in <…>.
_LINK_TARGET = re.compile(r"(?:\]\(|^ {0,3}\[[^\]\n]+\]:)[ \t]*(?:<([^>\n]*)>|([^)\s]+))", re.MULTILINE)
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")


def _missing_link_targets(skill: Skill) -> PathTally:
    """The relative targets of the body's Markdown links (outside code) that name neither a file nor a directory of
    the skill; links to a URL, an absolute path or an anchor are not the skill's to have."""
    text = _CODE_SPAN.sub("", _FENCE.sub("", skill.body))
    files = {entry.path for entry in skill.manifest}
    dirs = {os.path.dirname(path) for path in files}
    dirs |= {parent for path in dirs for parent in _parents(path)}
    missing = []
    for match in _LINK_TARGET.finditer(text):
        target = urllib.parse.unquote((match[1] or match[2] or "").split("#", 1)[0].split("?", 1)[0])
        if not target or target.startswith("/") or _SCHEME.match(target):
            continue
        rel = posixpath.normpath(target)
        if rel not in files and rel not in dirs and rel != "." and not _inside_link(skill.real_dir, rel):
            missing.append(target)
    return PathTally.of(dict.fromkeys(missing))


def _parents(path: str) -> list[str]:
    parents = []
    while path:
        path = posixpath.dirname(path)
        parents.append(path)
    return parents


def _inside_link(real_dir: str, rel: str) -> bool:
    """A target the manifest leaves out (a link, §3.5) that skill_file still reads, resolving inside the skill."""
    try:
        return is_within(real_path(os.path.join(real_dir, rel)), real_dir, strictly=True)
    except OSError:
        return False


def _first_non_utf8(skill: Skill) -> str | None:
    """Where the SKILL.md the catalog read first fails to decode as UTF-8 (line, and column in bytes); discovery
    decodes it replacing what fails (§3.4), which is no problem, and so tells the author nothing."""
    try:
        with SkillDir(skill.real_dir).opened(SKILL_MD) as (fd, status):
            capped = read_capped_fd(fd, MAX_SKILL_MD_BYTES, status)
    except (OSError, PathRefused):  # read a moment ago; whatever happened since, the catalog stands
        return None
    try:  # a cut file may end inside a character, which is no fault of the author's
        codecs.getincrementaldecoder("utf-8")().decode(capped.data, final=not capped.truncated)
    except UnicodeDecodeError as error:
        line = capped.data.count(b"\n", 0, error.start) + 1
        column = error.start - capped.data.rfind(b"\n", 0, error.start)
        return f"line {line}, byte {column} of the line"
    return None


def _named(tally: PathTally) -> str:
    """The paths a note names: the first few, quoted, then "…" when the tally holds more."""
    more = ", …" if tally.count > len(tally.first) else ""
    return ", ".join(quoted_path(path) for path in tally.first) + more


# --- output (pure), continued ----------------------------------------------------------------


def table_lines(listing: Mapping[str, Any]) -> list[str]:
    """The `list` table from the `skill_list` object, so both views show the same facts. Each row stays within 120
    characters (§14.3): a name is shown whole; what may run is shortened to leave a description its room
    (_runnable), and a description is cut to the room its row leaves."""
    header = ("NAME", "FILES", "RUNNABLE", "DESCRIPTION")
    skills = listing["skills"]
    # Escaped before measuring, so an escape widens its column rather than shifting the next.
    names = [printable(skill["name"]) for skill in skills]
    files = [str(skill["files"]) for skill in skills]
    descriptions = [
        printable(next(iter((skill.get("description") or "").strip().splitlines()), "")) for skill in skills
    ]
    widths = [max(map(len, column)) for column in ((header[0], *names), (header[1], *files))]
    kept = min(_DESCRIPTION_ROOM, max(map(len, (header[3], *descriptions))))
    runnable_room = _MAX_ROW_CHARS - sum(widths) - 3 * len(_COLUMN_GAP) - kept
    runnables = [
        _runnable([printable(entry["script"]) for entry in skill["scripts"]], runnable_room) for skill in skills
    ]
    widths.append(max(map(len, (header[2], *runnables))))
    room = _MAX_ROW_CHARS - sum(width + len(_COLUMN_GAP) for width in widths)
    rows = [(*row[:3], fit(row[3], room)) for row in zip(names, files, runnables, descriptions)]
    lines = [_table_row(row, widths) for row in (header, *rows)]
    summary = _summary(len(listing["skills"]), len(listing["problems"]))
    if listing["problems"]:
        summary += "; `skill-mcp list --json` shows each with its detail"
    notes = [listing[key] for key in ("grantError", "grantNote") if key in listing]
    return [*lines, summary, *notes]


def egress_allowlist(listing: Mapping[str, Any]) -> list[str]:
    """Hosts declared by skills that have a runnable effective script (what the owner accepted)."""
    return sorted({host for skill in listing["skills"] if skill["scripts"] for host in skill.get("declaredEgress", ())})


def _summary(skills: int, problems: int) -> str:
    return f"{skills} skill(s), {problems} problem(s)"


def _one_line(text: str) -> str:
    # What breaks a line (\n, U+0085, U+2028) or hides in it is escaped, not made a space: `a\nb` never prints as `a b`.
    return printable(json_for_people(text))


def _table_row(cells: Sequence[str], widths: Sequence[int]) -> str:
    return _COLUMN_GAP.join([*(cell.ljust(width) for cell, width in zip(cells, widths)), cells[3]]).rstrip()


def _runnable(scripts: Sequence[str], room: int) -> str:
    """The scripts in `room` characters: whole names, then how many more (`a.py, +3 more`), else only how many; never
    a name cut short, which could pass for another script. `list --json` names them all."""
    whole = ", ".join(scripts) or "-"
    if len(whole) <= room:
        return whole
    ends = list(itertools.accumulate(len(script) + len(", ") for script in scripts))
    for shown in range(len(scripts) - 1, 0, -1):
        more = f"+{len(scripts) - shown} more"
        if ends[shown - 1] + len(more) <= room:
            return ", ".join([*scripts[:shown], more])
    return fit(f"{len(scripts)} script(s)", room)


# --- commands (the I/O edge) ------------------------------------------------------------------


def check(roots: tuple[str, ...], as_json: bool) -> tuple[str, bool]:
    """The report, and whether it found problems; its notes, and the configuration's warnings, are on stderr."""
    deployment = _deployment(roots, apply_owner_grant=False)
    findings = [finding for skill in deployment.skills for finding in spec_findings(skill)]
    problems = [*deployment.problems, *findings]
    report = check_report(deployment.roots, [skill.name for skill in deployment.skills], problems)
    for note in check_notes(deployment):
        print(f"skill-mcp: note: {_one_line(note)}", file=sys.stderr)
    output = _json(report) if as_json else "\n".join(check_lines(report))
    return output, bool(problems)


def list_deployment(roots: tuple[str, ...], as_json: bool, egress: bool) -> str:
    deployment = _deployment(roots, apply_owner_grant=True)
    if deployment.roots_from == "default":
        print(f"skill-mcp: note: {demo_note('list', 'lists')}", file=sys.stderr)
    listing = skill_list(deployment)
    if egress:
        # The table ends with these, the JSON carries them; an allowlist has no room for why it is empty.
        if "grantError" in listing:
            print(f"skill-mcp: warning: MCP_SKILL_RUN: {_one_line(listing['grantError'])}", file=sys.stderr)
        if "grantNote" in listing:
            print(f"skill-mcp: note: {_one_line(listing['grantNote'])}", file=sys.stderr)
        hosts = egress_allowlist(listing)
        return json.dumps(hosts) if as_json else "\n".join(hosts)
    return _json(listing) if as_json else "\n".join(table_lines(listing))


def _json(document: Mapping[str, Any]) -> str:
    # Non-ASCII text goes out as itself only on a UTF-8 stdout: any other would print `\xe9` for it, which is no JSON.
    as_itself = codecs.lookup(sys.stdout.encoding).name == "utf-8"
    return json.dumps(document, ensure_ascii=not as_itself, indent=2)


def _deployment(roots: tuple[str, ...], apply_owner_grant: bool) -> Deployment:
    # No scrub and no non-dumpable step: the CLI reports on a deployment, it does not harden itself.
    deployment, warnings = build_deployment(os.environ, roots_override=roots, apply_owner_grant=apply_owner_grant)
    for warning in warnings:
        print(f"skill-mcp: warning: {warning.variable}: {warning.problem}", file=sys.stderr)
    return deployment
