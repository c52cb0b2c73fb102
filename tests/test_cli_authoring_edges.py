"""What a skill author meets running `skill-mcp check` / `list` on broken skills (SPEC §3, §4, §14), through real
subprocesses on real files."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_skill
from test_cli import run_cli

from skill_mcp.limits import MAX_SKILL_MD_BYTES


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory unrelated to the repository and to the skills."""
    cwd = tmp_path.resolve() / "elsewhere"
    cwd.mkdir()
    return cwd


def test_a_utf_16_skill_md_is_said_to_be_no_utf_8(root: Path, elsewhere: Path) -> None:
    # Notepad's "Unicode": the author's editor shows a "---" first line, so "its first line must be ---" misleads.
    skill = root / "windows"
    skill.mkdir()
    (skill / "SKILL.md").write_bytes("---\r\nname: windows\r\ndescription: d\r\n---\r\n".encode("utf-16"))
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert code == 1
    assert stdout.splitlines()[0] == (
        f'malformed-frontmatter  {skill}: SKILL.md does not begin with a "---" frontmatter block: it is not UTF-8 '
        "text (its first line holds NUL bytes, as UTF-16 does); save it as UTF-8"
    )


def test_a_skill_md_saved_as_latin_1_is_noted_with_where_it_stops_being_utf_8(root: Path, elsewhere: Path) -> None:
    # Discovery reads it with U+FFFD for each bad byte (§3.4) and serves it: no problem, exit 0, but the author is
    # told, since clients would see "R\ufffdsum\ufffd" for its description.
    skill = root / "resume"
    skill.mkdir()
    (skill / "SKILL.md").write_bytes("---\nname: resume\ndescription: Résumé helper\n---\nBody\n".encode("latin-1"))
    code, stdout, stderr = run_cli(["check", str(root)], elsewhere)
    assert (code, stdout) == (0, "1 skill(s), 0 problem(s)\n")
    assert stderr == (
        "skill-mcp: note: resume: SKILL.md is not valid UTF-8 (line 3, byte 15 of the line), so each byte that does "
        "not decode reads as U+FFFD, the replacement character, in its description and instructions; save it as UTF-8\n"
    )


def test_a_utf_8_character_cut_by_the_skill_md_cap_draws_no_utf_8_note(root: Path, elsewhere: Path) -> None:
    head = "---\nname: long\ndescription: d\n---\n"
    filler = "x" * (MAX_SKILL_MD_BYTES - len(head) - 1)  # "é" (2 bytes) straddles the cap: only the read cut it
    make_skill(root, "long", "name: long\ndescription: d\n", body=filler + "é" * 10)
    _, _, stderr = run_cli(["check", str(root)], elsewhere)
    assert "UTF-8" not in stderr and "SKILL.md is over" in stderr


def test_a_root_holding_nothing_beside_one_holding_a_skill_is_noted(root: Path, elsewhere: Path) -> None:
    # `skill-mcp check skills/*` where one folder lost its SKILL.md: it held nothing to scan, so no problem says so.
    make_skill(root, "alpha")
    draft = root / "draft"
    draft.mkdir()
    (draft / "README.md").write_text("notes\n")
    code, stdout, stderr = run_cli(["check", str(root / "alpha"), str(draft), str(root / "alpha")], elsewhere)
    assert (code, stdout) == (0, "1 skill(s), 0 problem(s)\n")
    assert stderr == (
        f"skill-mcp: note: no skill was found under {draft}: a skill is a directory holding a SKILL.md, given as a "
        "ROOT itself or placed in a ROOT or in its `skills` directory\n"
    )
    # A root whose skill another root already holds, or beyond the skill limit, does hold one: no note.
    code, _, stderr = run_cli(["check", str(root), str(root / "alpha")], elsewhere, env={"MCP_MAX_SKILLS": "1"})
    assert (code, stderr) == (1, "")


RUNS_S_PY = (
    "name: {name}\ndescription: d\nmcp-host:\n  version: 1\n  run:\n    - script: s.py\n      interpreter: python3\n"
)


def test_a_declared_script_linked_outside_the_skill_to_a_directory_or_nowhere_is_said_never_to_run(root: Path, elsewhere: Path) -> None:
    # "a run still follows it while it resolves inside the skill, and declaring the real file clears this problem"
    # told the author of a link to /etc/hostname that it might run; the run refuses it as outside (§6.2), every time.
    out = make_skill(root, "out", RUNS_S_PY.format(name="out"))
    (out / "s.py").symlink_to("/etc/hostname")
    broken = make_skill(root, "broken", RUNS_S_PY.format(name="broken"))
    (broken / "s.py").symlink_to("gone.py")
    inside = make_skill(root, "inside", RUNS_S_PY.format(name="inside"), files={"real.py": "print(1)\n"})
    (inside / "s.py").symlink_to("real.py")
    itself = make_skill(root, "itself", RUNS_S_PY.format(name="itself"))
    (itself / "s.py").symlink_to(".")
    folder = make_skill(root, "folder", RUNS_S_PY.format(name="folder"), files={"lib/util.py": ""})
    (folder / "s.py").symlink_to("lib")
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    declares = 'declared-script-missing  {}: the skill declares "s.py", which is not a file in this skill; its path ' \
        "passes through a symbolic link"
    assert (code, stdout.splitlines()) == (1, [
        declares.format(broken) + " and does not resolve to a file (No such file or directory), so a run refuses it",
        declares.format(folder) + f" and resolves to {folder / 'lib'}, which is not a regular file, so a run refuses it",
        declares.format(inside) + ", and the manifest lists no link: a run still follows it while it resolves "
        "inside the skill, and declaring the real file clears this problem",
        declares.format(itself) + f" and resolves to {itself}, which is not a regular file, so a run refuses it",
        declares.format(out) + " and resolves outside the skill, to /etc/hostname, so a run refuses it",
        "5 skill(s), 5 problem(s)",
    ])


def test_an_unclosed_quote_is_placed_where_it_opens_not_only_at_the_closing_dashes(root: Path, elsewhere: Path) -> None:
    # The parser runs out of YAML at the closing "---" (line 5), which is all the author was shown.
    skill = make_skill(root, "quote", 'name: quote\ndescription: "Summarise a file\nlicense: MIT\n')
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert (code, stdout.splitlines()[0]) == (1, (
        f"malformed-frontmatter  {skill}: SKILL.md frontmatter is not valid YAML: while scanning a quoted scalar, "
        "found unexpected end of stream (line 5, column 1); the quoted scalar that begins at line 3, column 14 is "
        "never closed"
    ))


def test_a_skill_one_level_too_deep_is_named_beside_its_groups_no_skill_md(root: Path, elsewhere: Path) -> None:
    # Skills grouped in category folders (`<root>/writing/summarise/SKILL.md`) are never scanned (§3.2).
    make_skill(root / "writing", "summarise")
    (root / "writing" / "notes").mkdir()
    make_skill(root / "empty" / ".cache", "hidden")  # a hidden directory is no skill, here as anywhere
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert (code, stdout.splitlines()) == (1, [
        f"no-skill-md  {root / 'empty'}: this directory has no SKILL.md, so it is not a skill",
        f"no-skill-md  {root / 'writing'}: this directory has no SKILL.md, so it is not a skill (it holds the skill "
        f'directory "summarise", but skills are found only one level under a root or its skills directory: add '
        f"{root / 'writing'} as a root)",
        "0 skill(s), 2 problem(s)",
    ])


@pytest.mark.parametrize("alias", ["x -> skills", "skills/self -> ."])
def test_an_alias_of_a_scanned_skills_directory_draws_no_hint_to_add_it_as_a_root(
    root: Path, elsewhere: Path, alias: str
) -> None:
    # Its skills are served already, through layout C; §3.3 still reports the alias as a directory without SKILL.md.
    make_skill(root / "skills", "summarise")
    link, target = alias.split(" -> ")
    (root / link).symlink_to(target)
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert (code, stdout.splitlines()) == (1, [
        f"no-skill-md  {root / 'skills'}: this directory has no SKILL.md, so it is not a skill",
        "1 skill(s), 1 problem(s)",
    ])


LINKING_BODY = """See [the guide](references/guide.md), [a typo](references/gude.md) and ![the logo](assets/logo.png "Logo").
Also [the folder](references/), [usage](#usage), [part](references/guide.md#part), [web](https://example.com/a.md),
[mail](mailto:a@example.com), [an absolute path](/etc/passwd), [a sibling](../other/SKILL.md),
[spaced](<my notes.md>), [escaped](my%20notes.md), [dotted](./references/guide.md), [linked](latest.md), [ref][r]
and [the skill itself](./).

```markdown
[in a fence](fenced/nowhere.md)
```

Inline `[in code](spanned/nowhere.md)` is code.

[r]: references/defined.md
"""


def test_check_notes_the_paths_skill_md_links_to_that_the_skill_does_not_have(root: Path, elsewhere: Path) -> None:
    # A client follows these with skill_file and gets an error; the author only learns it from a user.
    skill = make_skill(root, "linking", body=LINKING_BODY, files={"references/guide.md": "", "my notes.md": ""})
    (skill / "assets").mkdir()
    (skill / "latest.md").symlink_to("references/guide.md")  # not listed, but skill_file reads it
    code, stdout, stderr = run_cli(["check", str(root)], elsewhere)
    assert (code, stdout) == (0, "1 skill(s), 0 problem(s)\n")
    assert stderr.splitlines() == [
        "skill-mcp: note: linking: SKILL.md links to 4 path(s) that are not in this skill, so a client that follows "
        'them with skill_file gets an error: "references/gude.md", "assets/logo.png", "../other/SKILL.md", '
        '"references/defined.md"',
        "skill-mcp: note: linking: 1 symbolic link(s) or special file(s) are not listed, so clients are not offered "
        'them: "latest.md"; skill_file reads a link by its path only while it resolves inside the skill',
    ]
