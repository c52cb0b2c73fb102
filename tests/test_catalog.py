"""Discovery against real trees: layouts, entry rules, candidate reading, manifest walk, duplicates, limits
(SPEC §3, §17 items 19–47)."""

from __future__ import annotations

import os
import shutil
import tracemalloc
from pathlib import Path

import pytest
from conftest import make_skill
from support import as_unprivileged, mount_namespace, needs_root, world_readable_dir

from skill_mcp import catalog as catalog_module
from skill_mcp import paths
from skill_mcp.catalog import discover
from skill_mcp.declaration import MAX_FINDINGS_SHOWN
from skill_mcp.limits import (
    MAX_DIRS_PER_SKILL,
    MAX_FILES_PER_SKILL,
    MAX_SKILL_MD_BYTES,
    MAX_UNLISTED_ENTRIES,
    MAX_UNUSABLE_PATH_PROBLEMS,
)
from skill_mcp.model import ManifestEntry, PathTally, Problem
from skill_mcp.paths import open_directory_in_place

MIB = 1024 * 1024
RUNS_MISSING_SCRIPT = """name: runner
description: Runs things.
mcp-host:
  version: 1
  run:
    - script: scripts/missing.py
      interpreter: python3
    - script: scripts/present.py
      interpreter: python3
    - script: scripts/linked.py
      interpreter: python3
"""


def names(catalog) -> list[str]:
    return [skill.name for skill in catalog.skills]


def reasons(catalog) -> list[tuple[str, str]]:
    return [(problem.path, problem.reason) for problem in catalog.problems]


def only_problem(catalog, reason: str) -> Problem:
    matching = [problem for problem in catalog.problems if problem.reason == reason]
    assert len(matching) == 1, catalog.problems
    return matching[0]


def served(catalog, name: str):
    return next(skill for skill in catalog.skills if skill.name == name)


def write_many(directory: Path, count: int) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for index in range(count):
        (directory / f"f{index:04d}.txt").write_bytes(b"x")


# --- layouts (§3.2) ---------------------------------------------------------------------------------------


def test_skill_under_root_is_served_with_its_description(root):
    make_skill(root, "alpha", "name: alpha\ndescription: First skill.\nwhen_to_use: Always.\n", body="Do it.\n")
    catalog = discover([str(root)], 32)
    assert catalog.problems == ()
    (alpha,) = catalog.skills
    assert (alpha.name, alpha.description, alpha.when_to_use) == ("alpha", "First skill.", "Always.")
    assert (alpha.real_dir, alpha.source) == (str(root / "alpha"), str(root))
    assert (alpha.body, alpha.body_truncated) == ("Do it.\n", False)
    assert alpha.frontmatter == {"name": "alpha", "description": "First skill.", "when_to_use": "Always."}
    assert alpha.manifest == (ManifestEntry("SKILL.md", (root / "alpha" / "SKILL.md").stat().st_size),)


def test_hyphenated_when_to_use_wins(root):
    make_skill(root, "alpha", "description: d\nwhen_to_use: second\nwhen-to-use: first\n")
    assert discover([str(root)], 32).skills[0].when_to_use == "first"


def test_root_that_is_a_skill_is_served_under_its_real_basename(root):
    make_skill(root, "realname", files={"nested/SKILL.md": "---\nname: nested\n---\n"})
    alias = root.parent / "alias"
    alias.symlink_to(root / "realname")
    catalog = discover([str(alias)], 32)
    assert catalog.problems == ()
    (skill,) = catalog.skills
    assert (skill.name, skill.source, skill.real_dir) == ("realname", str(alias), str(root / "realname"))
    assert [entry.path for entry in skill.manifest] == ["SKILL.md", "nested/SKILL.md"]


def test_skills_subdirectory_is_scanned(root):
    make_skill(root / "skills", "beta")
    catalog = discover([str(root)], 32)
    assert (names(catalog), catalog.problems) == (["beta"], ())


def test_two_roots_keep_their_configured_source(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    make_skill(first, "alpha")
    make_skill(second, "beta")
    catalog = discover([str(first), str(second)], 32)
    assert [(skill.name, skill.source) for skill in catalog.skills] == [("alpha", str(first)), ("beta", str(second))]


def test_missing_root_and_file_root_are_unreadable(root):
    (root / "plain").write_text("not a directory")
    make_skill(root / "good", "alpha")
    missing, plain = str(root / "missing"), str(root / "plain")
    catalog = discover([missing, plain, str(root / "good")], 32)
    assert names(catalog) == ["alpha"]
    assert catalog.problems == (
        Problem(missing, "root-unreadable", "No such file or directory"),
        Problem(plain, "root-unreadable", "not a directory"),
    )


def test_a_root_holding_a_lowercase_skill_md_is_told_so(root):
    # `skill-mcp check ./my-skill` with my-skill/skill.md: the root is taken for a folder of skills.
    (root / "skill.md").write_text("---\nname: root\ndescription: d\n---\n")
    (root / "scripts").mkdir()
    catalog = discover([str(root)], 32)
    assert catalog.problems[0] == Problem(
        str(root),
        "no-skill-md",
        "this root has no SKILL.md, so it is not a skill itself; only its directories are scanned for skills "
        '(it has "skill.md": the name is case-sensitive, rename it SKILL.md)',
    )
    assert reasons(catalog)[1:] == [(str(root / "scripts"), "no-skill-md")]
    (root / "skill.md").unlink()
    assert reasons(discover([str(root)], 32)) == [(str(root / "scripts"), "no-skill-md")]  # a plain root: no note
    (root / "SKILL.md").mkdir()  # the right name, not a file: no case note at the root either
    assert [reason for reason in reasons(discover([str(root)], 32)) if reason[0] == str(root)] == []


def test_a_root_that_is_not_missing_gets_no_expansion_note(tmp_path):
    looping = tmp_path / "~loop"
    looping.symlink_to(looping)
    [problem] = discover([str(looping)], 32).problems
    assert problem.reason == "root-unreadable" and "expanded" not in problem.detail


@pytest.mark.parametrize("written", ["~/skills", "$HOME/skills", "${SKILLS}/x", "a/~b"])
def test_a_root_written_for_a_shell_says_it_is_not_expanded(root, written):
    catalog = discover([str(root / written)], 32)
    assert catalog.problems == (
        Problem(
            str(root / written),
            "root-unreadable",
            'No such file or directory; "~" and "$VARIABLE" are not expanded in a root: give the absolute path',
        ),
    )


def test_skills_directory_linked_outside_the_root_is_refused(tmp_path, root):
    make_skill(tmp_path / "elsewhere", "stolen")
    (root / "skills").symlink_to(tmp_path / "elsewhere")
    catalog = discover([str(root)], 32)
    assert names(catalog) == []
    problem = only_problem(catalog, "symlink-escape")
    assert problem.path == str(root / "skills") and "outside" in problem.detail
    assert catalog.problems == (problem,)


def test_escaping_skills_directory_is_reported_at_the_configured_root(tmp_path, root):
    # §3.2/§3.7: the path is `<root>/skills` with the root as configured, not its real path.
    make_skill(tmp_path / "elsewhere", "stolen")
    (root / "skills").symlink_to(tmp_path / "elsewhere")
    alias = tmp_path / "alias"
    alias.symlink_to(root)
    catalog = discover([str(alias)], 32)
    assert reasons(catalog) == [(str(alias / "skills"), "symlink-escape")]


def test_skills_directory_linked_inside_the_root_is_scanned(root):
    make_skill(root / "shared", "gamma")
    (root / "skills").symlink_to(root / "shared")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["gamma"]
    # The root-level `shared` entry is itself scanned, and is no skill.
    assert reasons(catalog) == [(str(root / "shared"), "no-skill-md")]


def test_root_level_skills_entry_holding_skill_md_is_also_a_skill(root):
    make_skill(root, "skills")
    make_skill(root / "skills", "inner")
    assert names(discover([str(root)], 32)) == ["skills", "inner"]


def test_broken_skills_link_is_silently_not_a_directory(root):
    (root / "skills").symlink_to(root / "nowhere")
    make_skill(root, "alpha")
    catalog = discover([str(root)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())


# --- entry rules (§3.3) ----------------------------------------------------------------------------------


def test_hidden_entries_plain_files_and_links_to_inside_files_are_skipped(root):
    make_skill(root, ".hidden")
    make_skill(root, "alpha")
    (root / "README.md").write_text("hello")
    (root / "readme-link").symlink_to(root / "README.md")
    os.mkfifo(root / "pipe")
    catalog = discover([str(root)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())


def test_directory_without_skill_md_is_reported_and_siblings_served(root):
    (root / "notes").mkdir()
    make_skill(root, "alpha")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    problem = only_problem(catalog, "no-skill-md")
    assert problem.path == str(root / "notes") and "SKILL.md" in problem.detail
    assert "case-sensitive" not in problem.detail


def test_a_hidden_skill_one_level_too_deep_draws_no_hint_to_add_its_parent_as_a_root(root):
    # That root's scan would skip the hidden directory too, so the hint would not serve it.
    make_skill(root / "group", ".hidden")
    problem = only_problem(discover([str(root)], 32), "no-skill-md")
    assert problem.detail == "this directory has no SKILL.md, so it is not a skill"


@pytest.mark.parametrize("spelling", ["skill.md", "Skill.md", "SKILL.MD", "skill.MD", "SKILL.Md"])
def test_a_skill_md_spelt_in_other_case_is_named_in_the_problem(root, spelling):
    (root / "notes").mkdir()
    (root / "notes" / spelling).write_text("---\nname: notes\ndescription: d\n---\n")
    problem = only_problem(discover([str(root)], 32), "no-skill-md")
    assert problem.detail == (
        f'this directory has no SKILL.md, so it is not a skill (it has "{spelling}": the name is case-sensitive, '
        "rename it SKILL.md)"
    )


def test_of_several_case_misspellings_the_first_in_code_point_order_is_named(root):
    # The hint names one file; which one must not depend on the order the file system lists them in.
    (root / "notes").mkdir()
    for spelling in ("skill.md", "sKILL.md", "Skill.md", "SKILL.Md", "SKILL.MD", "skill.MD"):
        (root / "notes" / spelling).write_text("---\nname: notes\ndescription: d\n---\n")
    problem = only_problem(discover([str(root)], 32), "no-skill-md")
    assert '(it has "SKILL.MD": the name is case-sensitive' in problem.detail


def test_entries_linking_out_are_refused_at_their_own_paths(tmp_path, root):
    outside = tmp_path / "outside"
    make_skill(outside, "evil")
    (outside / "secret.txt").write_text("secret")
    (root / "evil").symlink_to(outside / "evil")
    (root / "file-out").symlink_to(outside / "secret.txt")
    (root / "skills").mkdir()
    (root / "skills" / "evil").symlink_to(outside / "evil")
    catalog = discover([str(root)], 32)
    assert names(catalog) == []
    assert reasons(catalog) == [
        (str(root / "evil"), "symlink-escape"),
        (str(root / "file-out"), "symlink-escape"),
        (str(root / "skills" / "evil"), "symlink-escape"),
    ]
    assert all("outside" in problem.detail and "symlink" in problem.detail for problem in catalog.problems)


def test_dangling_link_is_a_broken_symlink(root):
    (root / "skills").mkdir()
    (root / "skills" / "dangling").symlink_to(root / "nowhere")
    catalog = discover([str(root)], 32)
    problem = only_problem(catalog, "symlink-escape")
    assert problem.path == str(root / "skills" / "dangling")
    assert "broken symlink" in problem.detail


def test_link_inside_the_root_is_served_under_the_target_name(root):
    make_skill(root / "shared", "gamma")
    (root / "skills").mkdir()
    (root / "skills" / "gamma").symlink_to(Path("..") / "shared" / "gamma")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["gamma"]
    assert reasons(catalog) == [(str(root / "shared"), "no-skill-md")]
    assert catalog.skills[0].real_dir == str(root / "shared" / "gamma")


def test_alias_link_is_read_once_and_its_name_reported(root):
    make_skill(root, "bar")
    (root / "skills").mkdir()
    (root / "skills" / "foo").symlink_to(Path("..") / "bar")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["bar"]
    problem = only_problem(catalog, "name-mismatch")
    assert problem.path == str(root / "skills" / "foo") and '"bar"' in problem.detail
    assert catalog.problems == (problem,)


def test_skills_linking_to_the_root_itself_scans_the_root_once(root):
    make_skill(root, "alpha")
    (root / "skills").symlink_to(".")
    catalog = discover([str(root)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())


def test_skills_linking_to_the_root_reports_the_root_entries_once(tmp_path, root):
    # §3.3: each real directory is reported once; `skills -> .` must not rescan the root as skills/ entries.
    make_skill(root, "bar")
    (root / "foo").symlink_to("bar")
    (root / "evil").symlink_to(tmp_path)
    (root / "skills").symlink_to(".")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["bar"]
    assert reasons(catalog) == [(str(root / "evil"), "symlink-escape"), (str(root / "foo"), "name-mismatch")]


def test_problems_under_a_linked_root_are_reported_at_the_paths_as_configured(tmp_path, root):
    # §3.3: at the entry path, unresolved: under the link the operator configured, not the root's real path.
    make_skill(root, "bar")
    (root / "foo").symlink_to("bar")
    (root / "evil").symlink_to(tmp_path)
    configured = tmp_path / "configured"
    configured.symlink_to(root)
    catalog = discover([str(configured)], 32)
    assert reasons(catalog) == [(str(configured / "evil"), "symlink-escape"), (str(configured / "foo"), "name-mismatch")]


def test_only_the_root_level_skills_entry_is_quiet(root):
    # §3.3: the quiet rule is for the ROOT-level entry named `skills`; skills/skills is an ordinary entry.
    (root / "skills").mkdir()
    (root / "skills" / "skills").symlink_to(root / "nowhere")
    catalog = discover([str(root)], 32)
    problem = only_problem(catalog, "symlink-escape")
    assert problem.path == str(root / "skills" / "skills") and "broken symlink" in problem.detail


def test_a_misspelt_skill_md_in_the_skills_directory_draws_no_problem(root):
    # §3.3: the root-level `skills` entry never draws no-skill-md; the case note about a root is for the root.
    (root / "skills").mkdir()
    (root / "skills" / "skill.md").write_text("---\nname: skills\ndescription: d\n---\n")
    make_skill(root / "skills", "alpha")
    catalog = discover([str(root)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())


def test_root_reached_through_an_alias_is_scanned_once(root):
    make_skill(root, "alpha")
    alias = root.parent / "alias"
    alias.symlink_to(root)
    catalog = discover([str(root), str(alias)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())


def test_same_root_twice_serves_each_skill_once(root):
    make_skill(root, "alpha")
    make_skill(root / "skills", "beta")
    catalog = discover([str(root), str(root)], 32)
    assert (names(catalog), catalog.problems) == (["alpha", "beta"], ())


def test_same_root_twice_reports_each_entry_once(tmp_path, root):
    # §3.3: each real directory is reported or read once; the same root configured twice is scanned once.
    make_skill(root, "bar")
    (root / "skills").mkdir()
    (root / "skills" / "foo").symlink_to(Path("..") / "bar")
    (root / "evil").symlink_to(tmp_path)
    catalog = discover([str(root), str(root)], 32)
    assert names(catalog) == ["bar"]
    assert reasons(catalog) == [
        (str(root / "evil"), "symlink-escape"),
        (str(root / "skills" / "foo"), "name-mismatch"),
    ]


@pytest.mark.parametrize("order", ["outer-first", "inner-first"])
def test_a_root_another_root_reported_without_skill_md_is_still_scanned(root, order):
    make_skill(root, "gamma")
    make_skill(root / "group", "beta")
    roots = [str(root), str(root / "group")]
    catalog = discover(roots if order == "outer-first" else roots[::-1], 32)
    assert sorted(names(catalog)) == ["beta", "gamma"]
    # reported once when the outer root saw it first, and not at all when it was scanned as a root first
    expected = [(str(root / "group"), "no-skill-md")] if order == "outer-first" else []
    assert reasons(catalog) == expected


@pytest.mark.parametrize("order", ["outer-first", "inner-first"])
def test_a_root_that_is_another_roots_skills_directory_is_scanned_once(tmp_path, root, order):
    # §3.3: `root/skills` is both the outer root's layout C and a root of its own; its entries are reported once.
    make_skill(root / "skills", "real")
    (root / "skills" / "alias").symlink_to("real")
    (root / "skills" / "out").symlink_to(tmp_path)
    roots = [str(root), str(root / "skills")]
    catalog = discover(roots if order == "outer-first" else roots[::-1], 32)
    assert names(catalog) == ["real"]
    assert reasons(catalog) == [
        (str(root / "skills" / "alias"), "name-mismatch"),
        (str(root / "skills" / "out"), "symlink-escape"),
    ]


@pytest.mark.parametrize("order", ["skill-root-first", "outer-first"])
def test_a_root_that_is_a_skill_and_another_roots_skills_directory_keeps_its_nested_skills(root, order):
    # `root/skills` holds a SKILL.md (a skill, layout A, when configured itself) and is the outer root's layout C
    # directory, whose entries are skills too: whichever root comes first, both are found.
    make_skill(root, "skills")
    make_skill(root / "skills", "inner")
    roots = [str(root / "skills"), str(root)]
    catalog = discover(roots if order == "skill-root-first" else roots[::-1], 32)
    assert sorted(names(catalog)) == ["inner", "skills"]


def test_a_skill_another_root_already_read_is_not_read_again_as_a_root(root):
    make_skill(root, "alpha")
    catalog = discover([str(root), str(root / "alpha")], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())


@pytest.mark.parametrize("kind", ["dangling-link", "directory"])
def test_a_root_whose_skill_md_is_no_file_is_scanned_for_skills(root, kind):
    # Layout A needs SKILL.md to be a file (following links); otherwise the root holds skills (§3.2).
    make_skill(root, "alpha")
    if kind == "dangling-link":
        (root / "SKILL.md").symlink_to(root / "missing")
    else:
        (root / "SKILL.md").mkdir()
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    # and the entry scan reports the entry itself
    reason = "no-skill-md" if kind == "directory" else "symlink-escape"
    assert reasons(catalog) == [(str(root / "SKILL.md"), reason)]


@pytest.mark.parametrize("kind", ["fifo", "link-to-fifo"])
def test_a_root_whose_skill_md_is_no_regular_file_is_a_skill_that_is_reported(root, kind):
    # The entry scan skips a FIFO silently: as a layout B root this one would serve nothing and report nothing.
    make_skill(root, "alpha")
    if kind == "fifo":
        os.mkfifo(root / "SKILL.md")
    else:
        os.mkfifo(root / "pipe")
        (root / "SKILL.md").symlink_to("pipe")
    catalog = discover([str(root)], 32)
    assert (names(catalog), reasons(catalog)) == ([], [(str(root), "unreadable-skill-md")])
    assert catalog.problems[0].detail == "SKILL.md is not a regular file"


@needs_root
@pytest.mark.parametrize(("mode", "reason"), [(0o744, "unreadable-skill-md"), (0o700, "root-unreadable")])
def test_a_skill_root_this_uid_cannot_search_is_reported(mode, reason):
    # Run as uid 10001: a root it may list (0744) shows a SKILL.md it cannot stat; one it may not list is unreadable.
    root = world_readable_dir()
    (root / "SKILL.md").write_text("---\nname: x\n---\n")
    root.chmod(mode)
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert reasons(catalog) == [(str(root), reason)]
    assert "Permission denied" in catalog.problems[0].detail


@needs_root
def test_a_directory_this_uid_may_list_but_not_search_is_told_apart_by_its_names():
    root = world_readable_dir()
    (root / "plain").mkdir()
    make_skill(root, "locked")
    for directory in ("plain", "locked"):
        (root / directory).chmod(0o744)
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert reasons(catalog) == [(str(root / "plain"), "no-skill-md"), (str(root / "locked"), "unreadable-skill-md")]


@needs_root
@pytest.mark.parametrize("locked", ["", "skills"])
def test_a_directory_this_uid_may_list_but_not_enter_is_one_problem_of_its_root(locked):
    # A root (or its skills directory) of mode 0644 lists its names, but none resolves: its skills in `skills/` went
    # unreported, and `check` said "0 problem(s)".
    root = world_readable_dir()
    make_skill(root / "skills", "inner")
    (root / locked).chmod(0o644)
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    where = "this directory" if not locked else f"its skills directory {root / 'skills'}"
    assert (names(catalog), reasons(catalog)) == ([], [(str(root), "root-unreadable")])
    assert catalog.problems[0].detail == f"cannot enter {where} (Permission denied), so no skill in it is served"


@needs_root
def test_a_skills_directory_this_uid_cannot_list_is_one_problem_of_its_root():
    root = world_readable_dir()
    make_skill(root / "skills", "inner")
    make_skill(root, "outer")
    (root / "skills").chmod(0)
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert (names(catalog), reasons(catalog)) == (["outer"], [(str(root), "root-unreadable")])
    detail = f"cannot list its skills directory {root / 'skills'} (Permission denied), so no skill in it is served"
    assert catalog.problems[0].detail == detail


@pytest.mark.parametrize("is_link", [False, True])
def test_a_directory_gone_between_its_resolving_and_its_reading_is_reported(root, monkeypatch, is_link):
    # A deploy renaming skills while the server boots: the rename lands right after the entry is resolved.
    make_skill(root, "alpha")
    if is_link:
        (root / "beta").symlink_to(make_skill(root / "skills", "beta"))
    resolve = catalog_module.real_path

    def resolve_then_rename(path):
        real = resolve(path)
        if os.path.basename(path) in ("alpha", "beta") and os.path.isdir(real):
            os.rename(real, real + "-moved")
        return real

    monkeypatch.setattr(catalog_module, "real_path", resolve_then_rename)
    catalog = discover([str(root)], 32)
    gone = str(root / ("beta" if is_link else "alpha"))
    assert (gone, "symlink-escape") in reasons(catalog)
    kind = "symlink" if is_link else "directory"
    assert f"this {kind} could not be read as the roots were scanned (No such file or directory); refused" in [
        problem.detail for problem in catalog.problems
    ]


def test_a_skill_md_link_whose_target_goes_after_it_resolved_is_reported_with_its_cause(root, monkeypatch):
    # Its target removed between the link's resolving and its stat: "reading this skill failed unexpectedly".
    skill = make_skill(root, "alpha")
    (skill / "SKILL.md").rename(skill / "real.md")
    (skill / "SKILL.md").symlink_to("real.md")
    resolve = catalog_module.real_path

    def resolve_then_remove(path):
        real = resolve(path)
        if real.endswith("real.md"):
            os.unlink(real)
        return real

    monkeypatch.setattr(catalog_module, "real_path", resolve_then_remove)
    catalog = discover([str(root)], 32)
    assert names(catalog) == []
    assert [(problem.reason, problem.detail) for problem in catalog.problems] == [
        ("unreadable-skill-md", "SKILL.md could not be stat'd: No such file or directory")
    ]


def test_problem_order_is_collection_then_missing_skill_md_then_reads(tmp_path, root):
    make_skill(root, "a-bad", "name: [unclosed\n")
    (root / "b-empty").mkdir()
    (root / "c-out").symlink_to(tmp_path)
    make_skill(root / "skills", "d-bad", "name: other\n")
    catalog = discover([str(root)], 32)
    assert reasons(catalog) == [
        (str(root / "c-out"), "symlink-escape"),
        (str(root / "b-empty"), "no-skill-md"),
        (str(root / "a-bad"), "malformed-frontmatter"),
        (str(root / "skills" / "d-bad"), "name-mismatch"),
    ]


# --- reading a candidate (§3.4) --------------------------------------------------------------------------


def test_broken_and_refused_yaml_is_malformed_and_siblings_are_served(root):
    make_skill(root, "broken", "name: [unclosed\n")
    make_skill(root, "anchored", "name: &a anchored\ndescription: *a\n")
    make_skill(root, "tagged", "name: !!str tagged\n")
    make_skill(root, "listed", "- a\n- b\n")
    make_skill(root, "huge", "description: " + "x" * 65536 + "\n")
    make_skill(root, "alpha")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    details = {Path(problem.path).name: problem.detail for problem in catalog.problems}
    assert [problem.reason for problem in catalog.problems] == ["malformed-frontmatter"] * 5
    assert "not valid YAML" in details["broken"]
    assert "anchor or alias" in details["anchored"]
    assert "tag" in details["tagged"]
    assert "not a mapping" in details["listed"]
    assert "65536" in details["huge"]


def test_a_frontmatter_longer_than_the_read_is_over_the_cap_not_unclosed(root):
    # Its closing "---" lies past the 256 KiB read of SKILL.md.
    vast = make_skill(root, "vast", "description: " + "x" * 300000 + "\n")
    detail = f"the SKILL.md frontmatter block is more than {MAX_SKILL_MD_BYTES - 4} bytes, over the 65536-byte cap"
    assert discover([str(root)], 32).problems == (Problem(str(vast), "malformed-frontmatter", detail),)


def test_missing_opener_is_malformed(root):
    (root / "plain").mkdir()
    (root / "plain" / "SKILL.md").write_text("# Just markdown\n")
    assert only_problem(discover([str(root)], 32), "malformed-frontmatter").path == str(root / "plain")


def test_frontmatter_name_differing_is_served_under_the_directory_name(root):
    make_skill(root, "aaa", "name: docx\ndescription: Pretends.\n")
    make_skill(root, "docx")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["aaa", "docx"]
    problem = only_problem(catalog, "name-mismatch")
    assert problem.path == str(root / "aaa")
    assert '"docx"' in problem.detail and '"aaa"' in problem.detail and "DIRECTORY" in problem.detail
    assert catalog.problems == (problem,)


def test_escaping_frontmatter_name_is_only_a_mismatch(root):
    make_skill(root, "plain", "name: ../escape\n")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["plain"]
    assert "../escape" in only_problem(catalog, "name-mismatch").detail


def test_non_string_frontmatter_name_draws_nothing(root):
    make_skill(root, "plain", "name: 42\n")
    assert discover([str(root)], 32).problems == ()


def test_unaddressable_directory_name_is_skipped(root):
    make_skill(root, "not a name")
    make_skill(root, "x" * 65)
    make_skill(root, "alpha")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    assert reasons(catalog) == [(str(root / "not a name"), "unusable-name"), (str(root / ("x" * 65)), "unusable-name")]
    assert '"not a name"' in catalog.problems[0].detail


def test_unknown_frontmatter_key_is_a_declaration_problem_and_the_skill_is_served(root):
    make_skill(root, "alpha", "name: alpha\nlicense: MIT\nflavour: lemon\n")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    problem = only_problem(catalog, "declaration")
    assert problem.path == str(root / "alpha") and '"flavour"' in problem.detail


def test_skill_md_linking_outside_is_refused(tmp_path, root):
    (tmp_path / "elsewhere.md").write_text("---\nname: x\n---\n")
    (root / "linked").mkdir()
    (root / "linked" / "SKILL.md").symlink_to(tmp_path / "elsewhere.md")
    (root / "dangling").mkdir()
    (root / "dangling" / "SKILL.md").symlink_to(root / "nowhere.md")
    make_skill(root, "alpha")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    assert reasons(catalog) == [(str(root / "dangling"), "symlink-escape"), (str(root / "linked"), "symlink-escape")]
    assert all("SKILL.md" in problem.detail for problem in catalog.problems)
    assert "unresolvable" in catalog.problems[0].detail


def test_a_skill_md_link_that_loops_says_why_it_is_unresolvable(root):
    (root / "looping").mkdir()
    (root / "looping" / "SKILL.md").symlink_to("SKILL.md")
    assert discover([str(root)], 32).problems == (
        Problem(
            str(root / "looping"),
            "symlink-escape",
            "SKILL.md is a symlink pointing outside this skill's own directory "
            "(unresolvable: Too many levels of symbolic links); refused",
        ),
    )


def test_root_skill_whose_skill_md_links_outside_is_refused(tmp_path, root):
    (tmp_path / "elsewhere.md").write_text("---\nname: root\n---\n")
    (root / "SKILL.md").symlink_to(tmp_path / "elsewhere.md")
    catalog = discover([str(root)], 32)
    assert names(catalog) == []
    problem = only_problem(catalog, "symlink-escape")
    assert problem.path == str(root) and "SKILL.md" in problem.detail


def test_skill_md_linking_to_its_own_directory_is_not_inside_it(root):
    (root / "selfish").mkdir()
    (root / "selfish" / "SKILL.md").symlink_to(".")
    problem = only_problem(discover([str(root)], 32), "symlink-escape")
    assert problem.path == str(root / "selfish") and "SKILL.md" in problem.detail


def test_an_entry_linking_to_its_root_is_the_root_already_scanned(root):
    make_skill(root, "alpha")
    (root / "here").symlink_to(".")
    catalog = discover([str(root)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())


def test_a_root_or_skills_link_python_would_follow_without_end_is_reported(tmp_path):
    # As for an entry: os.path.realpath recursed on these until RecursionError, which ended discovery.
    root = tmp_path / "root"
    root.mkdir()
    setup = f'mount -t tmpfs none "{tmp_path}" && mkdir -p "{root}/skills" "{tmp_path}/looping-root"'
    with mount_namespace(setup) as namespace_root:
        (tmp_path / "looping-root").symlink_to(f"{namespace_root}{tmp_path}/looping-root")
        (root / "skills").symlink_to(f"{namespace_root}{root}/skills")
        catalog = discover([str(tmp_path / "looping-root"), str(root)], 32)
    assert reasons(catalog) == [(str(tmp_path / "looping-root"), "root-unreadable"), (str(root / "skills"), "symlink-escape")]


def test_skill_md_linking_inside_its_skill_is_followed(root):
    skill_dir = make_skill(root, "alpha", files={"docs/real.md": "---\nname: alpha\n---\nLinked body.\n"})
    (skill_dir / "SKILL.md").unlink()
    (skill_dir / "SKILL.md").symlink_to(Path("docs") / "real.md")
    catalog = discover([str(root)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())
    assert catalog.skills[0].body == "Linked body.\n"
    assert [entry.path for entry in catalog.skills[0].manifest] == ["docs/real.md"]


def test_non_regular_skill_md_is_unreadable(root):
    (root / "piped").mkdir()
    os.mkfifo(root / "piped" / "SKILL.md")
    catalog = discover([str(root)], 32)
    problem = only_problem(catalog, "unreadable-skill-md")
    assert problem.path == str(root / "piped") and "regular file" in problem.detail


@needs_root
def test_unreadable_skill_md_is_reported():
    root = world_readable_dir()
    skill_dir = make_skill(root, "locked")
    (skill_dir / "SKILL.md").chmod(0)
    try:
        problem = only_problem(as_unprivileged(lambda: discover([str(root)], 32)), "unreadable-skill-md")
    finally:
        shutil.rmtree(root)
    assert problem.path == str(skill_dir)


@needs_root
def test_an_unsearchable_skill_directory_is_unreadable_not_missing_its_skill_md():
    # Run as uid 10001 (the appliance's): a root-owned 0700 skill directory holds a SKILL.md it cannot stat.
    root = world_readable_dir()
    skill_dir = make_skill(root, "locked")
    skill_dir.chmod(0o700)
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert reasons(catalog) == [(str(skill_dir), "unreadable-skill-md")]
    assert "could not be stat'd: Permission denied" in catalog.problems[0].detail


@needs_root
def test_a_file_this_uid_cannot_stat_is_not_listed_and_its_skill_is_still_served():
    # A directory it may read but not search (0644) lists names it cannot stat: it is not listed, and counted among
    # the directories `check` names, rather than losing the whole skill to an unexpected failure.
    root = world_readable_dir()
    skill_dir = make_skill(root, "partly", files={"open.md": "x", "locked/inside.md": "y"})
    (skill_dir / "locked").chmod(0o644)
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert [entry.path for entry in served(catalog, "partly").manifest] == ["SKILL.md", "open.md"]
    assert served(catalog, "partly").unlisted_dirs == PathTally(("locked",), 1)


@needs_root
def test_the_walk_counts_the_directories_this_uid_cannot_list_the_skill_directory_as_dot():
    root = world_readable_dir()
    files = {"open.md": "x", **{f"locked{index}/deeper/inside.md": "y" for index in range(9)}}
    skill_dir = make_skill(root, "partly", files=files)
    for index in range(9):
        (skill_dir / f"locked{index}").chmod(0o700)  # root's: what lies under it is never met
    make_skill(root, "sealed").chmod(0o711)  # SKILL.md is read through it, and its walk lists nothing
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert served(catalog, "partly").unlisted_dirs == PathTally(tuple(f"locked{index}" for index in range(8)), 9)
    assert (served(catalog, "sealed").manifest, served(catalog, "sealed").unlisted_dirs) == ((), PathTally((".",), 1))


@needs_root
def test_a_declared_script_the_servers_user_cannot_reach_is_said_never_to_run():
    root = world_readable_dir()
    frontmatter = "name: gated\nmcp-host:\n  version: 1\n  run:\n    - {script: locked/run.py, interpreter: python3}\n"
    skill_dir = make_skill(root, "gated", frontmatter=frontmatter, files={"locked/run.py": ""})
    (skill_dir / "locked").chmod(0o700)  # root's: the server's user can neither list it nor reach the script
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert only_problem(catalog, "declared-script-missing").detail == (
        'the skill declares "locked/run.py", which is not a file in this skill that the server\'s user can reach '
        "(Permission denied), so it never runs"
    )


@needs_root
def test_a_declared_script_in_a_directory_the_servers_user_cannot_list_is_said_to_run_still():
    root = world_readable_dir()
    frontmatter = "name: gated\nmcp-host:\n  version: 1\n  run:\n    - {script: hidden/run.py, interpreter: python3}\n"
    skill_dir = make_skill(root, "gated", frontmatter=frontmatter, files={"hidden/run.py": ""})
    (skill_dir / "hidden").chmod(0o711)  # root's: searchable, so the script is reached, but not listed
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert only_problem(catalog, "declared-script-missing").detail == (
        'the skill declares "hidden/run.py", which is not a file in this skill; the file is there, but the server\'s '
        "user may not list a directory on its path, so the manifest lacks it: a run still finds it"
    )


@needs_root
def test_a_declared_script_missed_by_a_walk_a_cap_stopped_is_not_blamed_on_an_unlisted_directory():
    # A cap stopped the walk, so the manifest may lack the script for that reason alone: no guess is offered.
    root = world_readable_dir()
    frontmatter = "name: gated\nmcp-host:\n  version: 1\n  run:\n    - {script: a/run.py, interpreter: python3}\n"
    files = {"a/run.py": "", **{f"b/f{index:04d}": "" for index in range(2001)}}
    skill_dir = make_skill(root, "gated", frontmatter=frontmatter, files=files)
    (skill_dir / "a").chmod(0o711)  # listed before b, whose 2001st file stops the walk
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        shutil.rmtree(root)
    assert served(catalog, "gated").unlisted_dirs == PathTally(("a",), 1)
    assert only_problem(catalog, "declared-script-missing").detail == (
        'the skill declares "a/run.py", which is not a file in this skill'
    )


def test_an_unexpected_failure_costs_one_skill_and_its_detail_quotes_nothing_read(root, monkeypatch):
    # No real input reaches this branch (that is what makes it unexpected), so the fault is injected.
    make_skill(root, "alpha")
    broken = make_skill(root, "broken", body="secret body\n")
    real_parse = catalog_module.parse_skill_md

    def parse(text, truncated=False):
        if "secret body" in text:
            raise ValueError(f"cannot handle {text!r}")
        return real_parse(text, truncated)

    monkeypatch.setattr(catalog_module, "parse_skill_md", parse)
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    assert catalog.problems == (
        Problem(str(broken), "unreadable-skill-md", "reading this skill failed unexpectedly (ValueError); it is not served"),
    )


def test_missing_declared_script_is_reported_and_stays_declared(root):
    skill_dir = make_skill(root, "runner", RUNS_MISSING_SCRIPT, files={"scripts/present.py": "print(1)\n"})
    (skill_dir / "scripts" / "linked.py").symlink_to("present.py")
    catalog = discover([str(root)], 32)
    assert reasons(catalog) == [(str(skill_dir), "declared-script-missing")] * 2
    # A declared script that is a symlink is never in the manifest.
    assert '"scripts/missing.py"' in catalog.problems[0].detail
    assert '"scripts/linked.py"' in catalog.problems[1].detail
    # The author is told why a link is "missing", and what clears the problem; a missing file gets no such note.
    assert "symbolic link" not in catalog.problems[0].detail
    assert catalog.problems[1].detail.endswith(LINK_NOTE)
    runs = served(catalog, "runner").declaration.runs
    assert [run.script for run in runs] == ["scripts/missing.py", "scripts/present.py", "scripts/linked.py"]


LINK_NOTE = (
    "; its path passes through a symbolic link, and the manifest lists no link: a run still follows it while it "
    "resolves inside the skill, and declaring the real file clears this problem"
)


def test_the_walk_counts_the_links_and_special_files_it_skips_but_not_a_linked_skill_md(root):
    skill_dir = make_skill(root, "linked", files={"docs/real.md": "---\nname: linked\ndescription: d\n---\n"})
    (skill_dir / "SKILL.md").unlink()
    (skill_dir / "SKILL.md").symlink_to("docs/real.md")  # served by skill_load: not "skipped"
    for index in range(10):
        (skill_dir / "docs" / f"link{index}").symlink_to("real.md")
    os.mkfifo(skill_dir / "pipe")
    skill = served(discover([str(root)], 32), "linked")
    assert skill.skipped == PathTally(("pipe", *(f"docs/link{index}" for index in range(7))), 11)


def test_a_link_to_a_directory_in_the_skill_is_skipped_not_walked(root):
    skill_dir = make_skill(root, "aliased", files={"docs/a.md": "a"})
    (skill_dir / "alias").symlink_to("docs")
    skill = served(discover([str(root)], 32), "aliased")
    assert (skill.skipped, skill.unlisted_dirs) == (PathTally(("alias",), 1), PathTally())
    assert [entry.path for entry in skill.manifest] == ["SKILL.md", "docs/a.md"]


def test_a_declared_script_under_a_linked_directory_is_explained_too(root):
    skill_dir = make_skill(root, "runner", RUNS_MISSING_SCRIPT, files={"shared/present.py": "print(1)\n"})
    (skill_dir / "scripts").symlink_to("shared")
    catalog = discover([str(root)], 32)
    details = [problem.detail for problem in catalog.problems]
    # The link resolves, but leads to no `missing.py` or `linked.py`: no real file to declare, and no run.
    nowhere = (
        "; its path passes through a symbolic link and does not resolve to a file (No such file or directory), "
        "so a run refuses it"
    )
    assert [detail.endswith(nowhere) for detail in details] == [True, False, True]
    assert details[1].endswith(LINK_NOTE)
    runs = served(catalog, "runner").declaration.runs
    assert [run.script for run in runs] == ["scripts/missing.py", "scripts/present.py", "scripts/linked.py"]


def test_long_paths_are_quoted_whole_in_problems(root):
    # §0: «"<script>"» and «"<rel>"» appear verbatim; two long paths sharing a prefix stay distinguishable.
    script = "scripts/" + "d" * 300 + ".py"
    directory = "e" * 200 + "%"
    frontmatter = f"name: long\ndescription: d\nmcp-host:\n  version: 1\n  run:\n    - script: {script}\n      interpreter: python3\n"
    make_skill(root, "long", frontmatter, files={f"{directory}/x.txt": "x"})
    details = [problem.detail for problem in discover([str(root)], 32).problems]
    assert any(f'"{script}"' in detail for detail in details), details
    assert any(f'"{directory}"' in detail for detail in details), details


def test_sparse_256_mib_skill_md_is_served_truncated_with_bounded_allocation(root):
    skill_dir = make_skill(root, "big", body="Start of body.\n")
    with open(skill_dir / "SKILL.md", "r+b") as handle:
        handle.truncate(256 * MIB)
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        catalog = discover([str(root)], 32)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    (skill,) = catalog.skills
    assert skill.body_truncated and skill.body.startswith("Start of body.\n")
    assert len(skill.body.encode("utf-8")) <= MAX_SKILL_MD_BYTES
    assert skill.manifest == (ManifestEntry("SKILL.md", 256 * MIB),)
    assert peak - baseline < 32 * MIB


def test_skill_md_of_exactly_the_cap_is_read_whole(root):
    # §3.4 step 4: at most 262144 bytes are read; a SKILL.md of exactly that size is not truncated. The number is
    # the spec's, not MAX_SKILL_MD_BYTES, so a change to the constant fails here.
    cap = 262144
    head = "---\nname: exact\ndescription: d\n---\n"
    skill = make_skill(root, "exact", body="")
    (skill / "SKILL.md").write_text(head + "b" * (cap - len(head)), encoding="utf-8")
    catalog = discover([str(root)], 32)
    exact = served(catalog, "exact")
    assert (exact.body_truncated, len(exact.body)) == (False, cap - len(head))
    (skill / "SKILL.md").write_text(head + "b" * (cap - len(head) + 1), encoding="utf-8")
    assert served(discover([str(root)], 32), "exact").body_truncated is True


def test_invalid_utf8_in_skill_md_is_replaced(root):
    skill_dir = make_skill(root, "alpha")
    with open(skill_dir / "SKILL.md", "ab") as handle:
        handle.write(b"caf\xff\n")
    assert discover([str(root)], 32).skills[0].body == "Instructions.\ncaf\ufffd\n"


# --- manifest walk (§3.5) --------------------------------------------------------------------------------


def test_manifest_lists_skill_md_and_hidden_files_sorted_by_code_point(root):
    make_skill(
        root,
        "alpha",
        files={".hidden": "h", "b.txt": "bb", "B.txt": "B", "é.txt": "ééé", "sub/z.txt": "", "sub/.env": "1234"},
    )
    (root / "alpha" / "empty-dir").mkdir()
    manifest = discover([str(root)], 32).skills[0].manifest
    skill_md_size = (root / "alpha" / "SKILL.md").stat().st_size
    assert manifest == (
        ManifestEntry(".hidden", 1),
        ManifestEntry("B.txt", 1),
        ManifestEntry("SKILL.md", skill_md_size),
        ManifestEntry("b.txt", 2),
        ManifestEntry("sub/.env", 4),
        ManifestEntry("sub/z.txt", 0),
        ManifestEntry("é.txt", 6),
    )


def test_symlinks_and_fifos_in_a_skill_are_not_listed(tmp_path, root):
    skill_dir = make_skill(root, "alpha", files={"real.txt": "r"})
    (skill_dir / "link.txt").symlink_to("real.txt")
    (skill_dir / "dir-link").symlink_to(tmp_path)
    os.mkfifo(skill_dir / "pipe")
    catalog = discover([str(root)], 32)
    assert catalog.problems == ()
    assert [entry.path for entry in catalog.skills[0].manifest] == ["SKILL.md", "real.txt"]


def test_unaddressable_paths_are_reported_and_not_listed(root):
    skill_dir = make_skill(root, "alpha", files={"read%20me.txt": "a", "back\\slash.txt": "b", "ok.txt": "c"})
    catalog = discover([str(root)], 32)
    assert [entry.path for entry in catalog.skills[0].manifest] == ["SKILL.md", "ok.txt"]
    assert reasons(catalog) == [(str(skill_dir), "unusable-path")] * 2
    assert '"back\\\\slash.txt"' in catalog.problems[0].detail and "backslash" in catalog.problems[0].detail
    assert '"read%20me.txt"' in catalog.problems[1].detail and "percent" in catalog.problems[1].detail


def test_unaddressable_directory_is_reported_once_with_nothing_under_it_listed(root):
    make_skill(root, "alpha", files={"od%d/one.txt": "1", "od%d/two.txt": "2"})
    catalog = discover([str(root)], 32)
    assert [entry.path for entry in catalog.skills[0].manifest] == ["SKILL.md"]
    problem = only_problem(catalog, "unusable-path")
    assert '"od%d"' in problem.detail and "nothing under it" in problem.detail


def test_unaddressable_paths_are_reported_one_by_one_only_up_to_the_cap(root):
    # A skill of 200,000 such names used to put 200,000 problems in every skill_list answer (33 MB).
    names = {f"n%{index:03d}": "" for index in range(MAX_UNUSABLE_PATH_PROBLEMS + 8)}
    skill_dir = make_skill(root, "flood", files={**names, "ok.txt": "x"})
    catalog = discover([str(root)], 32)
    assert [entry.path for entry in served(catalog, "flood").manifest] == ["SKILL.md", "ok.txt"]
    assert reasons(catalog) == [(str(skill_dir), "unusable-path")] * (MAX_UNUSABLE_PATH_PROBLEMS + 1)
    assert catalog.problems[-1].detail.startswith("8 more paths cannot be addressed by skill_file either")


def test_a_skill_with_exactly_as_many_unlisted_entries_as_the_walk_allows_is_walked_whole(root):
    skill_dir = make_skill(root, "wide", files={"docs/a.md": "a"})
    for index in range(MAX_UNLISTED_ENTRIES):
        os.mkfifo(skill_dir / f"f{index:05d}")
    catalog = discover([str(root)], 32)
    assert catalog.problems == ()
    assert [entry.path for entry in served(catalog, "wide").manifest] == ["SKILL.md", "docs/a.md"]


def test_the_unlisted_budget_spans_the_whole_skill_not_one_directory(root):
    skill_dir = make_skill(root, "wide", files={"docs/a.md": "a"})
    for index in range(MAX_UNLISTED_ENTRIES // 2 + 1):
        os.mkfifo(skill_dir / f"f{index:05d}")
        os.mkfifo(skill_dir / "docs" / f"g{index:05d}")
    problem = only_problem(discover([str(root)], 32), "file-limit")
    assert f"more than {MAX_UNLISTED_ENTRIES} entries that are not listed" in problem.detail


def test_a_directory_of_more_files_than_every_budget_still_lists_the_first_2000(root):
    # Files count against the file cap, not the unlisted budget: a directory this large lists its first 2000 by
    # name, whatever order the filesystem lists them in (tmpfs: newest first; ext4: by hash), though it holds more
    # names than the walk keeps from one directory.
    skill_dir = make_skill(root, "huge")
    for index in range(MAX_UNLISTED_ENTRIES + MAX_FILES_PER_SKILL + MAX_DIRS_PER_SKILL + 1000):
        (skill_dir / f"f{index:05d}.txt").touch()
    catalog = discover([str(root)], 32)
    manifest = [entry.path for entry in served(catalog, "huge").manifest]
    assert manifest == ["SKILL.md", *(f"f{index:05d}.txt" for index in range(1999))]
    assert "more than 2000 files" in only_problem(catalog, "file-limit").detail


def test_a_skill_holding_more_unlisted_entries_than_the_walk_allows_stops_with_file_limit(root):
    skill_dir = make_skill(root, "wide")
    for index in range(MAX_UNLISTED_ENTRIES + 1):
        os.mkfifo(skill_dir / f"f{index:05d}")
    catalog = discover([str(root)], 32)
    problem = only_problem(catalog, "file-limit")
    assert f"more than {MAX_UNLISTED_ENTRIES} entries that are not listed" in problem.detail
    assert [entry.path for entry in served(catalog, "wide").manifest] == ["SKILL.md"]
    assert served(catalog, "wide").file_limit_hit


def test_names_skill_file_cannot_address_count_against_the_unlisted_budget(root):
    skill_dir = make_skill(root, "flood")
    for index in range(MAX_UNLISTED_ENTRIES + 1):
        (skill_dir / f"n%{index:05d}").touch()
    catalog = discover([str(root)], 32)
    problem = only_problem(catalog, "file-limit")
    assert f"more than {MAX_UNLISTED_ENTRIES} entries that are not listed" in problem.detail
    assert served(catalog, "flood").file_limit_hit


def test_a_directory_holding_exactly_what_every_budget_allows_is_walked_whole(root):
    # One listing reads at most what the file, directory and unlisted budgets leave (plus one): all three count.
    skill_dir = make_skill(root, "full")
    write_many(skill_dir, MAX_FILES_PER_SKILL - 1)
    for index in range(MAX_DIRS_PER_SKILL):
        (skill_dir / f"d{index:04d}").mkdir()
    for index in range(MAX_UNLISTED_ENTRIES):
        os.mkfifo(skill_dir / f"p{index:05d}")
    catalog = discover([str(root)], 32)
    assert catalog.problems == ()
    skill = served(catalog, "full")
    assert (len(skill.manifest), skill.skipped.count) == (MAX_FILES_PER_SKILL, MAX_UNLISTED_ENTRIES)
    assert not skill.file_limit_hit


def test_one_entry_past_every_budget_left_stops_the_walk_instead_of_going_unread(root):
    # The directories are all enqueued first, so d0000 may hold exactly one entry more than the budgets leave:
    # that entry must still be read and hit a cap, never be left out silently.
    skill_dir = make_skill(root, "full")
    for index in range(MAX_DIRS_PER_SKILL):
        (skill_dir / f"d{index:04d}").mkdir()
    write_many(skill_dir / "d0000", MAX_FILES_PER_SKILL - 1)
    for index in range(MAX_UNLISTED_ENTRIES + 1):
        os.mkfifo(skill_dir / "d0000" / f"p{index:05d}")
    catalog = discover([str(root)], 32)
    problem = only_problem(catalog, "file-limit")
    assert f"more than {MAX_UNLISTED_ENTRIES} entries that are not listed" in problem.detail
    assert len(served(catalog, "full").manifest) == MAX_FILES_PER_SKILL


def test_exactly_2000_files_is_fine(root):
    skill_dir = make_skill(root, "alpha")
    write_many(skill_dir / "data", 1999)
    catalog = discover([str(root)], 32)
    assert catalog.problems == ()
    assert len(catalog.skills[0].manifest) == 2000 and not catalog.skills[0].file_limit_hit


def test_the_2001st_file_stops_the_walk(root):
    skill_dir = make_skill(root, "alpha")
    write_many(skill_dir / "data", 1999)
    (skill_dir / "late").mkdir()
    (skill_dir / "late" / "extra.txt").write_text("x")
    catalog = discover([str(root)], 32)
    skill = served(catalog, "alpha")
    assert len(skill.manifest) == 2000 and skill.file_limit_hit
    assert "late/extra.txt" not in {entry.path for entry in skill.manifest}
    problem = only_problem(catalog, "file-limit")
    assert problem.path == str(skill_dir) and "2000" in problem.detail


@pytest.mark.parametrize(("count", "listed"), [(2000, ["SKILL.md", "d1999/last.txt"]), (2001, ["SKILL.md"])])
def test_the_2001st_directory_stops_the_walk(root, count, listed):
    skill_dir = make_skill(root, "alpha")
    for index in range(count):
        (skill_dir / f"d{index:04d}").mkdir()
    (skill_dir / "d1999" / "last.txt").write_text("x")
    catalog = discover([str(root)], 32)
    skill = served(catalog, "alpha")
    assert [entry.path for entry in skill.manifest] == listed
    assert skill.file_limit_hit == (count > 2000)
    if count > 2000:
        assert only_problem(catalog, "file-limit").detail == (
            "this skill has more than 2000 directories; the manifest lists the 1 files found; the rest is not walked"
        )
    else:
        assert catalog.problems == ()


# --- duplicates and the limit (§3.6) ---------------------------------------------------------------------


def test_same_name_in_two_roots_serves_neither(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    make_skill(first, "docx")
    make_skill(second / "skills", "docx")
    make_skill(second, "other")
    catalog = discover([str(first), str(second)], 32)
    assert names(catalog) == ["other"]
    problem = only_problem(catalog, "duplicate-name")
    assert problem.path == str(first / "docx")
    assert str(first / "docx") in problem.detail and str(second / "skills" / "docx") in problem.detail
    assert '"docx"' in problem.detail and "NONE" in problem.detail and "2 directories" in problem.detail
    assert problem.detail.endswith("; rename all but one, or drop a root")  # what the owner can do about it


def test_more_skills_than_the_limit_keeps_the_first(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    for index in range(20):
        make_skill(first, f"s{index:02d}")
    for index in range(20, 33):
        make_skill(second, f"s{index:02d}")
    catalog = discover([str(first), str(second)], 32)
    assert names(catalog) == [f"s{index:02d}" for index in range(32)]
    problem = only_problem(catalog, "skill-limit")
    assert problem.path == f"{first}:{second}"
    assert problem.detail == (
        'found 33 skills but the limit is 32 (MCP_MAX_SKILLS); the first 32 are served, 1 ignored: "s32"'
    )


@pytest.mark.parametrize(("skills", "ending"), [(12, "9 ignored: {named}, …"), (11, "8 ignored: {named}")])
def test_the_skill_limit_names_the_first_8_ignored_skills_and_marks_any_more(root, skills, ending):
    for index in range(skills):
        make_skill(root, f"s{index:02d}")
    [problem] = discover([str(root)], 3).problems
    named = ", ".join(f'"s{index:02d}"' for index in range(3, 11))
    assert problem.detail.endswith("the first 3 are served, " + ending.format(named=named))


def test_a_limit_met_exactly_serves_every_skill_without_a_skill_limit_problem(root):
    # §3.6 step 2: a skill-limit problem only "if more remain" after the first MAX_SKILLS.
    for index in range(3):
        make_skill(root, f"s{index:02d}")
    catalog = discover([str(root)], 3)
    assert (names(catalog), catalog.problems) == (["s00", "s01", "s02"], ())


def test_35_skills_fit_a_limit_of_40(root):
    for index in range(35):
        make_skill(root, f"s{index:02d}")
    catalog = discover([str(root)], 40)
    assert (len(catalog.skills), catalog.problems) == (35, ())


def test_catalog_order_is_code_point_order(root, monkeypatch):
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    for name in ("alpha", "Zulu", "beta", "Beta", "_under"):
        make_skill(root, name)
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["Beta", "Zulu", "alpha", "beta"]
    assert reasons(catalog) == [(str(root / "_under"), "unusable-name")]


# --- whole trees -----------------------------------------------------------------------------------------


def test_real_world_shaped_tree_serves_or_reports_every_skill_md(root):
    long_description = "Handles documents. " * 60
    for index in range(12):
        make_skill(
            root,
            f"tool-{index}",
            f"name: tool-{index}\ndescription: >\n  {long_description}\nlicense: Complete terms in LICENSE.txt\n",
            files={"LICENSE.txt": "terms", "scripts/helper.py": "print('hi')\n", "reference/api.md": "# API\n"},
        )
        write_many(root / f"tool-{index}" / "assets", 40)
    for index in range(6):
        make_skill(root / "skills", f"doc-{index}", files={f"templates/t{n}.html": "<p/>" for n in range(30)})
    make_skill(root / "skills", "tool-3")
    make_skill(root / "skills", "Bad Name")
    make_skill(root / "skills", "broken", "description: [\n")
    (root / "docs").mkdir()
    (root / "docs" / "SKILL.md").write_text("---\nname: docs\n---\n")
    (root / "docs" / "nested").mkdir()
    (root / "docs" / "nested" / "SKILL.md").write_text("---\nname: nested\n---\n")
    (root / ".github").mkdir()
    (root / ".github" / "SKILL.md").write_text("---\nname: ci\n---\n")

    catalog = discover([str(root)], 64)

    scanned, nested = set(), set()
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = [name for name in subdirs if not name.startswith(".")]
        parent = Path(directory).parent
        if "SKILL.md" in files:
            (scanned if parent == root or parent == root / "skills" else nested).add(directory)
    served_dirs = {skill.real_dir for skill in catalog.skills}
    for directory in scanned:
        reported = any(directory == problem.path or directory in problem.detail for problem in catalog.problems)
        assert directory in served_dirs or reported, directory
    # Deeper SKILL.md files are never candidates; they are bundled files of the skill holding them.
    assert nested == {str(root / "docs" / "nested")}
    assert "nested/SKILL.md" in {entry.path for entry in served(catalog, "docs").manifest}
    assert len(scanned) == 12 + 6 + 4
    assert len(catalog.skills) == 12 - 1 + 6 + 1
    assert {problem.reason for problem in catalog.problems} == {
        "duplicate-name",
        "unusable-name",
        "malformed-frontmatter",
    }


def test_non_utf8_names_are_reported_in_encodable_text(root):
    make_skill(root, "alpha")
    bad_dir = os.fsencode(root) + b"/bad\xff"
    os.mkdir(bad_dir)
    os.mkdir(os.fsencode(root) + b"/alpha/caf\xe9")
    with open(bad_dir + b"/SKILL.md", "wb") as handle:
        handle.write(b"---\nname: bad\n---\n")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    assert reasons(catalog) == [(str(root / "alpha"), "unusable-path"), (str(root / "bad\\udcff"), "unusable-name")]
    assert "not valid UTF-8" in catalog.problems[0].detail
    for problem in catalog.problems:
        (problem.path + problem.detail).encode("utf-8")


def test_a_link_python_would_follow_without_end_is_a_broken_symlink_not_a_crash(root):
    # Through /proc/<pid>/root into another mount namespace, where the path is a directory, the link leads back to
    # itself here: os.path.realpath recursed until RecursionError, which ended discovery and so the server.
    skill = root / "skill"
    with mount_namespace(f'mount -t tmpfs none "{root}" && mkdir "{skill}"') as namespace_root:
        skill.symlink_to(f"{namespace_root}{skill}")
        catalog = discover([str(root)], 32)
    assert reasons(catalog) == [(str(skill), "symlink-escape")]
    assert "Too many levels of symbolic links" in catalog.problems[0].detail


def test_symlink_loop_is_a_broken_symlink(root):
    (root / "loop-a").symlink_to("loop-b")
    (root / "loop-b").symlink_to("loop-a")
    catalog = discover([str(root)], 32)
    assert reasons(catalog) == [(str(root / "loop-a"), "symlink-escape"), (str(root / "loop-b"), "symlink-escape")]
    assert all("broken symlink" in problem.detail for problem in catalog.problems)


@needs_root
def test_unlistable_root_is_unreadable():
    root = world_readable_dir()
    root.chmod(0)
    try:
        catalog = as_unprivileged(lambda: discover([str(root)], 32))
    finally:
        root.chmod(0o755)
        shutil.rmtree(root)
    assert reasons(catalog) == [(str(root), "root-unreadable")]


@pytest.fixture(params=["openat2", "checked-with-openat2", "no-openat2", "no-proc"])
def directory_opening(request, monkeypatch):
    """Each way the walk can open a directory: link-free with openat2, else by path checked after the open (its
    path checked link-free with openat2, or by realpath)."""
    if request.param in ("openat2", "checked-with-openat2") and paths._OPEN_DIRECTORY_LINK_FREE is None:
        pytest.skip("no openat2 here")
    if request.param != "openat2":
        monkeypatch.setattr(paths, "_OPEN_DIRECTORY_LINK_FREE", None)
    if request.param in ("no-openat2", "no-proc"):
        monkeypatch.setattr(paths, "_OPEN_HANDLE_LINK_FREE", None)
    if request.param == "no-proc":
        monkeypatch.setattr(paths, "_CHECK_THEN_OPEN", False)


def test_the_walk_lists_a_directory_only_where_discovery_found_it(tmp_path, directory_opening):
    # The manifest walk opens each directory through this check before listing it, so a directory swapped for a
    # link in the middle of a boot (by a process of the server's uid) lists nothing from where the link leads.
    real = tmp_path / "skill" / "docs"
    real.mkdir(parents=True)
    (tmp_path / "outside" / "docs").mkdir(parents=True)
    fd = open_directory_in_place(str(real))
    assert fd is not None and os.listdir(fd) == []
    os.close(fd)
    (tmp_path / "skill").rename(tmp_path / "skill-away")
    os.symlink(tmp_path / "outside", tmp_path / "skill")  # an ancestor now leads outside
    assert open_directory_in_place(str(real)) is None
    os.symlink(tmp_path / "outside" / "docs", tmp_path / "link")
    assert open_directory_in_place(str(tmp_path / "link")) is None  # a link itself is never opened


def test_a_directory_openat2_refuses_for_its_own_reasons_is_still_listed_by_the_checked_open(root, monkeypatch):
    # A filter may answer openat2 with an errno of its own: then every manifest would have been empty.
    monkeypatch.setattr(paths, "_OPEN_DIRECTORY_LINK_FREE", lambda path: None)
    make_skill(root, "alpha", files={"docs/a.md": "a"})
    assert [entry.path for entry in served(discover([str(root)], 32), "alpha").manifest] == ["SKILL.md", "docs/a.md"]


def test_the_walk_lists_nothing_through_a_link_into_another_mount_namespace(tmp_path, directory_opening):
    # There the skill's path holds a directory of secrets; here an ancestor was swapped for a link to it through
    # /proc/<pid>/root, so the kernel names what the walk opened by the very path discovery found.
    skills = tmp_path / "skills"
    docs = skills / "skill" / "docs"
    docs.mkdir(parents=True)
    (tmp_path / "secrets").mkdir()
    (tmp_path / "secrets" / "key.txt").write_text("secret")
    setup = f'mount -t tmpfs none "{skills}" && mkdir -p "{docs}" && mount --bind "{tmp_path}/secrets" "{docs}"'
    with mount_namespace(setup) as namespace_root:
        os.rename(skills / "skill", skills / "skill.orig")
        os.symlink(f"{namespace_root}{skills}/skill", skills / "skill")
        assert os.listdir(docs) == ["key.txt"]  # the trap is set
        assert open_directory_in_place(str(docs)) is None


def test_the_walk_never_opens_a_link_as_a_directory_where_no_descriptor_path_is_told(tmp_path, monkeypatch):
    # Without /proc (the realpath fallback) the open's no-follow flag is all that keeps a directory swapped for a
    # link from being listed from where the link leads.
    monkeypatch.setattr(paths, "_CHECK_THEN_OPEN", False)
    monkeypatch.setattr(paths, "_OPEN_DIRECTORY_LINK_FREE", None)
    monkeypatch.setattr(paths, "_OPEN_HANDLE_LINK_FREE", None)
    (tmp_path / "outside" / "docs").mkdir(parents=True)
    (tmp_path / "outside" / "docs" / "secret.txt").write_text("secret")
    os.symlink(tmp_path / "outside" / "docs", tmp_path / "link")
    assert open_directory_in_place(str(tmp_path / "link")) is None
    (tmp_path / "real").mkdir()
    fd = open_directory_in_place(str(tmp_path / "real"))
    assert fd is not None
    os.close(fd)


def test_declaration_findings_are_reported_one_by_one_only_up_to_the_cap(root):
    # A 64 KiB frontmatter of `env: [1,1,…]` drew 32,000 problems: 6 MB in every skill_list answer.
    items = ",".join(["1"] * 30000)
    frontmatter = f"name: flood\nmcp-host:\n  version: 1\n  run:\n    - {{script: a.py, interpreter: python3, env: [{items}]}}\n"
    skill_dir = make_skill(root, "flood", frontmatter=frontmatter, files={"a.py": ""})
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["flood"]
    assert reasons(catalog) == [(str(skill_dir), "declaration")] * (MAX_FINDINGS_SHOWN + 1)
    assert catalog.problems[-1].detail == (
        f'{30000 - MAX_FINDINGS_SHOWN} more findings in the frontmatter keys or the "mcp-host" block; '
        f"only the first {MAX_FINDINGS_SHOWN} are reported one by one"
    )
