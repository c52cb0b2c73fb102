"""Roots → Catalog: the three layouts, candidate reading, duplicates and the limit (SPEC §3).

With manifest.py (each skill's walk), the only modules that walk skill directories. `discover` never raises;
every failure becomes a Problem.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice

from .declaration import read_declaration
from .files import CappedRead, read_capped_fd
from .frontmatter import FrontmatterError, description, frontmatter_name, parse_skill_md, when_to_use
from .limits import MAX_SKILL_MD_BYTES, SKILL_MD, SKILL_NAME_PATTERN
from .manifest import ManifestWalk, walk_manifest
from .model import Catalog, Problem, Skill
from .paths import PathRefused, SkillDir, is_within, reach_error, real_path
from .text import encodable, os_error_text, quoted, quoted_path


def discover(roots: Sequence[str], max_skills: int) -> Catalog:
    """Scan every root once, read each real skill directory once, then apply §3.6."""
    problems: list[Problem] = []
    skills: list[Skill] = []
    claimed_dirs: set[str] = set()  # taken as a skill or already reported: each real directory once (§3.3)
    scanned_dirs: set[str] = set()  # already listed for skills
    for root in roots:
        scan = _scan_root(root, claimed_dirs, scanned_dirs)
        problems += scan.problems
        problems += scan.missing_skill_md
        for real_dir in scan.candidates:
            try:
                skill = _read_candidate(real_dir, root, problems)
            except Exception as error:  # noqa: BLE001 - R3: one unexpected failure costs this skill, never the listing
                # Its type only: an exception's text can quote what it was reading, which no problem or log holds.
                detail = f"reading this skill failed unexpectedly ({type(error).__name__}); it is not served"
                problems.append(Problem(real_dir, "unreadable-skill-md", detail))
                continue
            if skill is not None:
                skills.append(skill)
    served = _apply_skill_limit(_refuse_duplicates(skills, problems), roots, max_skills, problems)
    return Catalog(skills=tuple(served), problems=tuple(_encodable_problem(problem) for problem in problems))


def _apply_skill_limit(
    served: list[Skill], roots: Sequence[str], max_skills: int, problems: list[Problem]
) -> list[Skill]:
    """§3.6 step 2: the first `max_skills` skills, and one problem naming those left out."""
    if len(served) <= max_skills:
        return served
    ignored = [skill.name for skill in served[max_skills:]]
    more = ", …" if len(ignored) > _IGNORED_NAMED else ""
    problems.append(
        Problem(
            ":".join(roots),
            "skill-limit",
            f"found {len(served)} skills but the limit is {max_skills} (MCP_MAX_SKILLS); "
            f"the first {max_skills} are served, {len(ignored)} ignored: "
            f"{', '.join(quoted(name) for name in ignored[:_IGNORED_NAMED])}{more}",
        )
    )
    return served[:max_skills]


_IGNORED_NAMED = 8  # skills past the limit named in its problem


@dataclass
class _RootScan:
    """One root's collection pass, kept apart so its problems can be emitted in §3.3 order."""

    root: str  # as configured, which problems name
    real_root: str = ""  # once resolved
    problems: list[Problem] = field(default_factory=list)
    missing_skill_md: list[Problem] = field(default_factory=list)
    candidates: list[str] = field(default_factory=list)


def _scan_root(root: str, claimed_dirs: set[str], scanned_dirs: set[str]) -> _RootScan:
    """§3.2: resolve the root, then layout A, or layouts B and C; each real directory is read or reported once."""
    scan = _RootScan(root)
    try:
        scan.real_root = real_root = real_path(root)
    except OSError as error:
        scan.problems.append(Problem(root, "root-unreadable", os_error_text(error) + _unexpanded_note(root, error)))
        return scan
    if not os.path.isdir(real_root):
        scan.problems.append(Problem(root, "root-unreadable", "not a directory"))
        return scan
    if real_root in scanned_dirs:
        return scan  # the same root configured twice, or another root's `skills`
    if _is_a_skill(real_root):  # layout A: a skill, whose entries are not scanned here
        if real_root not in claimed_dirs:  # else a skill another root already holds
            claimed_dirs.add(real_root)
            scan.candidates.append(real_root)
        return scan
    scanned_dirs.add(real_root)
    claimed_dirs.add(real_root)
    _scan_entries(scan, root, real_root, claimed_dirs)
    _scan_skills_dir(scan, claimed_dirs, scanned_dirs)
    return scan


def _scan_skills_dir(scan: _RootScan, claimed_dirs: set[str], scanned_dirs: set[str]) -> None:
    """§3.2 layout C: the entries of `<root>/skills`, when it resolves to a directory inside the root."""
    root, real_root = scan.root, scan.real_root
    skills_entry = os.path.join(real_root, "skills")
    if not os.path.isdir(skills_entry):
        return
    skills_path = os.path.join(root, "skills")
    try:
        real_skills = real_path(skills_entry)
    except OSError as error:  # resolved a moment ago by isdir; a link swapped in since
        scan.problems.append(Problem(skills_path, "symlink-escape", _unresolvable_entry(True, error)))
        return
    if not is_within(real_skills, real_root):
        scan.problems.append(
            Problem(
                skills_path,
                "symlink-escape",
                f"the skills directory resolves to {real_skills}, outside the configured root {real_root}; refused",
            )
        )
    elif real_skills not in scanned_dirs:  # `skills -> .` names the root; another root may be this one
        scanned_dirs.add(real_skills)
        _scan_entries(scan, skills_path, real_skills, claimed_dirs)


def _scan_entries(scan: _RootScan, scan_path: str, real_scan_path: str, claimed_dirs: set[str]) -> None:
    """Apply the §3.3 entry table to one directory's entries (the root's, or its `skills` directory's), one level
    deep."""
    root, real_root = scan.root, scan.real_root
    at_root = scan_path == root
    try:
        with os.scandir(real_scan_path) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
    except OSError as error:
        detail = f"cannot list this directory: {os_error_text(error)}"
        if not at_root:
            detail = f"cannot list its skills directory {scan_path} ({os_error_text(error)}), so no skill in it is served"
        scan.problems.append(Problem(root, "root-unreadable", detail))
        return
    try:  # listable but not searchable (a `chmod -R 644`): none of its entries resolves, `skills` included
        os.lstat(os.path.join(real_scan_path, os.curdir))
    except OSError as error:
        where = "this directory" if at_root else f"its skills directory {scan_path}"
        detail = f"cannot enter {where} ({os_error_text(error)}), so no skill in it is served"
        scan.problems.append(Problem(root, "root-unreadable", detail))
        return
    if at_root and (case_note := _case_note(entry.name for entry in entries)):  # one skill's folder as the root
        detail = "this root has no SKILL.md, so it is not a skill itself; only its directories are scanned for skills"
        scan.missing_skill_md.append(Problem(real_scan_path, "no-skill-md", detail + case_note))
    for entry in entries:
        if entry.name.startswith("."):
            continue
        is_link = entry.is_symlink()
        if not is_link and not entry.is_dir(follow_symlinks=False):
            continue
        entry_path = os.path.join(scan_path, entry.name)
        # Layout C reports an escaping `skills`; a broken one is simply not a directory.
        is_root_skills_entry = at_root and entry.name == "skills"
        real, escape = _resolve_entry(entry.path, entry_path, is_link, real_root)
        if escape is not None and not is_root_skills_entry:
            scan.problems.append(escape)
        if real is None:
            continue
        holds = _holds_skill_md(real)
        # What this uid cannot tell is a candidate, whose SKILL.md §3.4 then reports; but for `skills`, which
        # layout C reports, only one known to hold a SKILL.md is also a skill.
        is_candidate = holds or (holds is None and not is_root_skills_entry)
        if is_candidate and is_link and entry.name != os.path.basename(real):
            realname = quoted(os.path.basename(real))
            detail = (
                f"this is a symlink to {real}; the skill is served under the real directory's name {realname}, "
                "which is also the name a grant must use"
            )
            scan.problems.append(Problem(entry_path, "name-mismatch", detail))
        if real in claimed_dirs or (is_root_skills_entry and not is_candidate):
            continue
        claimed_dirs.add(real)
        if is_candidate:
            scan.candidates.append(real)
        else:
            # An alias of a directory scanned for skills (`x -> skills`, `skills/self -> .`) holds them one level
            # down, served already: no hint to add it as a root.
            scanned = real in (real_scan_path, os.path.join(real_root, "skills"))
            note = _case_note_of(real, nested=not scanned)
            detail = "this directory has no SKILL.md, so it is not a skill" + note
            scan.missing_skill_md.append(Problem(real, "no-skill-md", detail))


def _resolve_entry(path: str, entry_path: str, is_link: bool, real_root: str) -> tuple[str | None, Problem | None]:
    """§3.3: the entry's real path when it is a directory inside the root; else None, and the escape it draws."""
    try:
        real = real_path(path)
    except OSError as error:
        return None, Problem(entry_path, "symlink-escape", _unresolvable_entry(is_link, error))
    if not is_within(real, real_root):
        kind = "symlink" if is_link else "directory (a bind mount?)"
        detail = f"this {kind} resolves to {real}, outside the configured root {real_root}; refused"
        return None, Problem(entry_path, "symlink-escape", detail)
    try:
        is_directory = stat.S_ISDIR(os.stat(real).st_mode)
    except OSError as error:  # resolved a moment ago: renamed or removed since, as the server boots
        detail = f"this {'symlink' if is_link else 'directory'} could not be read as the roots were scanned"
        return None, Problem(entry_path, "symlink-escape", f"{detail} ({os_error_text(error)}); refused")
    return (real if is_directory else None), None


def _unexpanded_note(root: str, error: OSError) -> str:
    # A root written for a shell (`~/skills`, `$HOME/skills`) reaches the server as written from a client's config.
    if error.errno == errno.ENOENT and any(segment.startswith(("~", "$")) for segment in root.split("/")):
        return '; "~" and "$VARIABLE" are not expanded in a root: give the absolute path'
    return ""


_CASE_PROBE_ENTRIES = 4096  # a directory without SKILL.md may be large; its first names are enough for a hint


def _case_note_of(directory: str, nested: bool) -> str:
    try:
        with os.scandir(directory) as listing:
            entries = list(islice(listing, _CASE_PROBE_ENTRIES))
    except OSError:
        return ""
    return _case_note(entry.name for entry in entries) or (_nested_note(directory, entries) if nested else "")


def _nested_note(directory: str, entries: Iterable[os.DirEntry[str]]) -> str:
    """A hint naming a skill one level too deep (`<root>/group/skill/SKILL.md`), which no scan reaches."""
    for entry in sorted(entries, key=lambda each: each.name):
        if not entry.name.startswith(".") and entry.is_dir(follow_symlinks=False) and _holds_skill_md(entry.path):
            return (
                f" (it holds the skill directory {quoted(entry.name)}, but skills are found only one level under a "
                f"root or its skills directory: add {directory} as a root)"
            )
    return ""


def _case_note(names: Iterable[str]) -> str:
    """A hint naming a file that differs from SKILL.md only in case, among a directory's names (it lacks SKILL.md)."""
    misspelled = sorted(name for name in names if name.lower() == SKILL_MD.lower() and name != SKILL_MD)
    return f" (it has {quoted(misspelled[0])}: the name is case-sensitive, rename it SKILL.md)" if misspelled else ""


def _is_a_skill(real_root: str) -> bool:
    """§3.2 layout A: `SKILL.md` resolves to a non-directory (a FIFO too), or is there but cannot be stat'd by this
    uid: §3.4 then says why it is not read, rather than the root going quiet."""
    try:
        return not stat.S_ISDIR(os.stat(os.path.join(real_root, SKILL_MD)).st_mode)
    except PermissionError:
        return bool(_holds_skill_md(real_root))
    except OSError:
        return False


def _holds_skill_md(directory: str) -> bool | None:
    """Whether `directory` has an entry named SKILL.md, of any kind; None when this uid cannot tell."""
    try:
        os.lstat(os.path.join(directory, SKILL_MD))
        return True
    except FileNotFoundError:
        return False
    except OSError:
        pass
    try:  # readable but not searchable: its names still tell
        return SKILL_MD in os.listdir(directory)
    except OSError:
        return None


def _read_candidate(real_dir: str, source: str, problems: list[Problem]) -> Skill | None:
    """§3.4 steps 1–11; appends this candidate's problems and returns the skill, or None when refused."""

    def report(reason: str, detail: str) -> None:
        problems.append(Problem(real_dir, reason, detail))

    capped = _read_skill_md(real_dir, report)
    if capped is None:
        return None
    try:
        frontmatter, body = parse_skill_md(capped.data.decode("utf-8", errors="replace"), truncated=capped.truncated)
    except FrontmatterError as error:
        report("malformed-frontmatter", str(error))
        return None
    declaration, findings = read_declaration(frontmatter)
    for finding in findings:
        report("declaration", finding)
    name = os.path.basename(real_dir)
    claimed = frontmatter_name(frontmatter)
    if not SKILL_NAME_PATTERN.fullmatch(name):
        # The usual cause is a folder named for display ("My Skill"); its frontmatter name is then the fix.
        usable = claimed is not None and SKILL_NAME_PATTERN.fullmatch(claimed)
        rename = f". Rename the directory to its frontmatter name, {quoted(claimed)}, to serve it" if usable else ""
        report(
            "unusable-name",
            f"the directory name {quoted(name)} is not addressable; a skill is served under its directory name "
            f"(letters, digits, '.', '_', '-', at most 64, starting with a letter or digit); skipped{rename}",
        )
        return None
    if claimed is not None and claimed != name:
        report(
            "name-mismatch",
            f"the frontmatter name {quoted(claimed)} differs from the directory name {quoted(name)}; "
            "the skill is served under its DIRECTORY name",
        )
    walk = walk_manifest(real_dir, report)
    listed = {entry.path for entry in walk.files}
    for run in declaration.runs:
        if run.script not in listed:
            report("declared-script-missing", _missing_script_detail(walk, real_dir, run.script))
    return Skill(
        name=name,
        real_dir=real_dir,
        source=source,
        body=body,
        body_truncated=capped.truncated,
        manifest=walk.manifest,
        declaration=declaration,
        frontmatter=frontmatter,
        description=description(frontmatter),
        when_to_use=when_to_use(frontmatter),
        file_limit_hit=walk.hit_limit,
        skipped=walk.skipped,
        unlisted_dirs=walk.unlisted_dirs,
    )


def _missing_script_detail(walk: ManifestWalk, real_dir: str, script: str) -> str:
    """§3.4 step 10, with the likely cause when the file is there but the manifest lacks it."""
    detail = f"the skill declares {quoted_path(script)}, which is not a file in this skill"
    if (unreachable := reach_error(os.path.join(real_dir, script))) is not None:
        return detail + f" that the server's user can reach ({os_error_text(unreachable)}), so it never runs"
    if _passes_through_a_link(real_dir, script):
        if (leads := _link_leads_out(real_dir, script)) is not None:
            return detail + f"; its path passes through a symbolic link and {leads}, so a run refuses it"
        return detail + (
            "; its path passes through a symbolic link, and the manifest lists no link: a run still follows "
            "it while it resolves inside the skill, and declaring the real file clears this problem"
        )
    if _found_past_an_unlisted_directory(walk, real_dir, script):
        return detail + (
            "; the file is there, but the server's user may not list a directory on its path, so the "
            "manifest lacks it: a run still finds it"
        )
    return detail


def _passes_through_a_link(real_dir: str, rel: str) -> bool:
    path = real_dir
    for segment in rel.split("/"):
        path = os.path.join(path, segment)
        if os.path.islink(path):
            return True
    return False


def _link_leads_out(real_dir: str, rel: str) -> str | None:
    """Why `rel`, through a link, can never be run: it resolves outside the skill, to no regular file, or not at
    all; None otherwise."""
    try:
        target = real_path(os.path.join(real_dir, rel))
    except OSError as error:
        return f"does not resolve to a file ({os_error_text(error)})"
    if not is_within(target, real_dir):
        return f"resolves outside the skill, to {target}"
    if not os.path.isfile(target):
        return f"resolves to {target}, which is not a regular file"
    return None


def _found_past_an_unlisted_directory(walk: ManifestWalk, real_dir: str, rel: str) -> bool:
    """Whether `rel` is a regular file that the walk, stopped by no cap, missed for a directory it could not list."""
    if walk.hit_limit or not walk.unlisted_dirs.count:
        return False
    try:
        return stat.S_ISREG(os.lstat(os.path.join(real_dir, rel)).st_mode)
    except OSError:
        return False


def _read_skill_md(real_dir: str, report: Callable[[str, str], None]) -> CappedRead | None:
    """§3.4 steps 1–4: SKILL.md stat'ed, a link followed only inside the skill, then read bounded; None when
    refused (the problem is added)."""
    skill_md = os.path.join(real_dir, SKILL_MD)
    try:
        status = os.lstat(skill_md)
    except OSError as error:
        report("unreadable-skill-md", f"SKILL.md could not be stat'd: {os_error_text(error)}")
        return None
    read_path = skill_md
    if stat.S_ISLNK(status.st_mode):
        try:
            read_path = target = real_path(skill_md)
        except OSError as error:  # a loop, or a directory on its way this uid cannot search: the OS says which
            read_path, target = None, f"unresolvable: {os_error_text(error)}"
        if read_path is None or not is_within(read_path, real_dir, strictly=True):
            detail = f"SKILL.md is a symlink pointing outside this skill's own directory ({target}); refused"
            report("symlink-escape", detail)
            return None
        try:
            status = os.stat(read_path)
        except OSError as error:  # its target removed since it resolved
            report("unreadable-skill-md", f"SKILL.md could not be stat'd: {os_error_text(error)}")
            return None
    if not stat.S_ISREG(status.st_mode):
        report("unreadable-skill-md", "SKILL.md is not a regular file")
        return None
    try:
        # Opened through the resolve check, like every later read: the directory swapped for a link since the
        # checks above would otherwise have SKILL.md read from wherever the link leads.
        with SkillDir(real_dir).opened(SKILL_MD) as (fd, opened):
            capped = read_capped_fd(fd, MAX_SKILL_MD_BYTES, opened)
    except PathRefused as refused:
        report("unreadable-skill-md", f"SKILL.md could not be read: {refused.message}")
        return None
    except OSError as error:
        report("unreadable-skill-md", f"SKILL.md could not be read: {os_error_text(error)}")
        return None
    return capped


def _refuse_duplicates(skills: list[Skill], problems: list[Problem]) -> list[Skill]:
    """R1: a name contributed by two real directories is served by neither."""
    by_name: dict[str, list[Skill]] = {}
    for skill in skills:
        by_name.setdefault(skill.name, []).append(skill)
    served = []
    for name, group in by_name.items():
        if len(group) == 1:
            served.append(group[0])
            continue
        dirs = ", ".join(skill.real_dir for skill in group)
        problems.append(
            Problem(
                group[0].real_dir,
                "duplicate-name",
                f"{len(group)} directories contribute the name {quoted(name)}: {dirs}; NONE of them is served, "
                "because serving one would let whichever was scanned first stand in for the others, "
                "and the owner's grant for that name would follow it; rename all but one, or drop a root",
            )
        )
    return served


def _unresolvable_entry(is_link: bool, error: OSError) -> str:
    if is_link:
        return f"this is a broken symlink: its target cannot be resolved ({os_error_text(error)}); refused"
    return f"this directory's real path cannot be read ({os_error_text(error)}); refused"


def _encodable_problem(problem: Problem) -> Problem:
    return Problem(encodable(problem.path), problem.reason, encodable(problem.detail))
