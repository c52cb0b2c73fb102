"""SPEC §3 and §4 rule by rule, against real trees: each test names the rule or table row it pins."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import make_skill
from support import ERAS, connect, payload

from skill_mcp.catalog import discover
from skill_mcp.deployment import build_deployment


def names(catalog) -> list[str]:
    return [skill.name for skill in catalog.skills]


def reasons(catalog) -> list[tuple[str, str]]:
    return [(problem.path, problem.reason) for problem in catalog.problems]


# --- §3.3 problem order per root ---------------------------------------------------------------------------


def test_a_roots_own_no_skill_md_comes_after_the_collection_problems(root):
    # §3.3: "collection problems, then no-skill-md problems": the note on a root holding a misspelt skill.md is a
    # no-skill-md problem, so a broken link among its entries is reported before it.
    (root / "skill.md").write_text("---\nname: root\n---\n")
    (root / "zz-broken").symlink_to(root / "nowhere")
    (root / "empty").mkdir()
    catalog = discover([str(root)], 32)
    assert reasons(catalog) == [
        (str(root / "zz-broken"), "symlink-escape"),
        (str(root), "no-skill-md"),
        (str(root / "empty"), "no-skill-md"),
    ]
    assert '"skill.md"' in catalog.problems[1].detail



# --- §3.2 layouts ------------------------------------------------------------------------------------------


def test_a_layout_a_root_is_the_only_candidate_and_nothing_under_it_is_scanned(tmp_path, root):
    # Its `skills` directory, an empty directory and a link out are the skill's own files, not entries: no
    # skill "beta", no no-skill-md, no symlink-escape.
    skill_dir = make_skill(root, "alpha", files={"skills/beta/SKILL.md": "---\nname: beta\n---\n"})
    (skill_dir / "empty").mkdir()
    (skill_dir / "out").symlink_to(tmp_path)
    catalog = discover([str(skill_dir)], 32)
    assert (names(catalog), catalog.problems) == (["alpha"], ())
    assert [entry.path for entry in catalog.skills[0].manifest] == ["SKILL.md", "skills/beta/SKILL.md"]


def test_scans_are_one_level_deep_under_the_root_and_under_skills(root):
    make_skill(root / "group", "deep")
    make_skill(root / "skills" / "group2", "deeper")
    make_skill(root / "skills", "shallow")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["shallow"]
    assert reasons(catalog) == [(str(root / "group"), "no-skill-md"), (str(root / "skills" / "group2"), "no-skill-md")]


# --- §3.1 skill-name pattern, §3.4 step 7 ------------------------------------------------------------------


def test_the_skill_name_pattern_is_matched_whole_at_its_boundaries(root):
    # `^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`, ASCII, full match: 1 and 64 characters pass, 65 do not; a first
    # character other than a letter or digit, a non-ASCII letter or digit, or a trailing newline (which `$`
    # alone would let through) makes the directory unaddressable.
    fine = ["a", "7", "Z.9_-", "x" * 64]
    unusable = ["-x", "_x", "é", "\uff11", "x" * 65, "a\n", "a b"]
    for name in fine + unusable:
        make_skill(root, name, "description: d\n")
    catalog = discover([str(root)], 32)
    assert names(catalog) == sorted(fine)
    assert reasons(catalog) == [(str(root / name), "unusable-name") for name in sorted(unusable)]
    assert all(f"the directory name {json.dumps(name, ensure_ascii=False)} is not addressable" in problem.detail
               for name, problem in zip(sorted(unusable), catalog.problems))


def test_an_unusable_directory_name_suggests_the_frontmatter_name_when_that_one_is_usable(root):
    # A folder named for display ("My Skill") is the usual slip; the frontmatter name is then the fix to offer.
    make_skill(root, "My Skill", "name: my-skill\ndescription: d\n")
    make_skill(root, "Other Skill", "name: other skill\ndescription: d\n")
    make_skill(root, "Nameless Skill", "description: d\n")
    details = {os.path.basename(problem.path): problem.detail for problem in discover([str(root)], 32).problems}
    assert details["My Skill"].endswith('; skipped. Rename the directory to its frontmatter name, "my-skill", to serve it')
    assert details["Other Skill"].endswith("; skipped")
    assert details["Nameless Skill"].endswith("; skipped")


def test_a_layout_a_root_is_named_by_its_real_basename_and_held_to_the_pattern(tmp_path):
    # §3.4 step 7: "layout A: the root's real basename"; a hidden one is no exception.
    hidden = make_skill(tmp_path, ".dotted", "description: d\n")
    catalog = discover([str(hidden)], 32)
    assert (names(catalog), reasons(catalog)) == ([], [(str(hidden), "unusable-name")])


def test_declaration_problems_stay_when_the_name_is_unusable(root):
    # §3.4 step 7: the skill is dropped, "declaration problems from step 6 stay", and come first.
    make_skill(root, "no good", "name: other\nflavour: lemon\nmcp-host: [1]\n")
    catalog = discover([str(root)], 32)
    assert names(catalog) == []
    assert [(problem.reason, problem.detail) for problem in catalog.problems] == [
        ("declaration", 'unknown frontmatter key "flavour" (ignored)'),
        ("declaration", '"mcp-host" is not a mapping; the block is ignored'),
        ("unusable-name", catalog.problems[2].detail),
    ]
    # Step 8 is never reached: no name-mismatch for a dropped skill.
    assert '"no good"' in catalog.problems[2].detail


# --- §3.4 one candidate's problems, in step order ----------------------------------------------------------


def test_one_candidates_problems_follow_the_steps_of_3_4(root):
    # Steps 6 (declaration), 8 (name-mismatch), 9 (the walk: unusable-path, then file-limit when the cap stops
    # it) and 10 (declared-script-missing), all at the skill directory; the skill is still served.
    skill_dir = make_skill(
        root,
        "alpha",
        "name: beta\nflavour: x\nmcp-host:\n  version: 1\n  run:\n    - {script: zz/late.py, interpreter: python3}\n",
        files={"a\\b.txt": "x", "zz/late.py": "x"},
    )
    (skill_dir / "data").mkdir()
    for index in range(2000):  # with SKILL.md, one file more than the cap allows before zz/late.py
        (skill_dir / "data" / f"f{index:04d}").write_bytes(b"")
    catalog = discover([str(root)], 32)
    assert names(catalog) == ["alpha"]
    assert reasons(catalog) == [
        (str(skill_dir), reason)
        for reason in ("declaration", "name-mismatch", "unusable-path", "file-limit", "declared-script-missing")
    ]
    assert '"zz/late.py"' in catalog.problems[-1].detail


# --- §3.7 the path each problem names ----------------------------------------------------------------------


def test_each_problem_names_the_path_3_7_gives_it_under_an_aliased_root(tmp_path, root):
    # Entry problems name the entry under the root as configured; no-skill-md names the directory's real path;
    # a candidate's problems name its real directory; symlink-escape of `skills` names `<root>/skills`.
    (root / "notes").mkdir()
    make_skill(root, "bent", "- not a mapping\n")
    make_skill(root / "skills", "real-name")
    (root / "skills" / "alias").symlink_to(Path("..") / "notes")
    (root / "skills" / "link-name").symlink_to("real-name")
    (root / "skills" / "out").symlink_to(tmp_path)
    aliased = tmp_path / "aliased"
    aliased.symlink_to(root)
    catalog = discover([str(aliased)], 32)
    assert names(catalog) == ["real-name"]
    assert reasons(catalog) == [
        (str(aliased / "skills" / "link-name"), "name-mismatch"),
        (str(aliased / "skills" / "out"), "symlink-escape"),
        (str(root / "notes"), "no-skill-md"),
        (str(root / "bent"), "malformed-frontmatter"),
    ]
    assert catalog.skills[0].source == str(aliased)


# --- §3.6 duplicates and the skill limit --------------------------------------------------------------------


def test_a_name_twice_in_one_root_serves_neither_and_takes_no_place_under_the_limit(root):
    # §3.6 step 1 groups by name whatever the root: `<root>/x` and `<root>/skills/x` are two real directories.
    # Step 2 then counts the names left, so the limit of 1 serves "y" and draws no skill-limit.
    make_skill(root, "x")
    make_skill(root, "y")
    make_skill(root / "skills", "x")
    catalog = discover([str(root)], 1)
    assert names(catalog) == ["y"]
    [problem] = catalog.problems
    assert (problem.path, problem.reason) == (str(root / "x"), "duplicate-name")
    assert f"2 directories contribute the name \"x\": {root / 'x'}, {root / 'skills' / 'x'}; NONE" in problem.detail


def test_duplicates_are_reported_before_the_skill_limit(tmp_path):
    first, second = tmp_path / "one", tmp_path / "two"
    for name in ("a", "b", "c"):
        make_skill(first, name)
    make_skill(second, "a")
    catalog = discover([str(first), str(second), str(first)], 1)
    assert names(catalog) == ["b"]
    assert reasons(catalog) == [(str(first / "a"), "duplicate-name"), (f"{first}:{second}:{first}", "skill-limit")]
    assert catalog.problems[1].detail.startswith("found 2 skills but the limit is 1 (MCP_MAX_SKILLS)")


@pytest.mark.parametrize(("value", "served"), [("0", 32), ("1", 1), ("33", 33), ("-1", 32)])
def test_max_skills_reaches_discovery_as_parsed(root, value, served):
    # §2.2: valid range 1–4096, anything else 32 (+ a warning).
    for index in range(34):
        make_skill(root, f"s{index:02d}")
    deployment, warnings = build_deployment({"SKILLS_DIR": str(root), "MCP_MAX_SKILLS": value})
    assert [skill.name for skill in deployment.skills] == [f"s{index:02d}" for index in range(served)]
    [problem] = deployment.problems
    assert (problem.path, problem.reason) == (str(root), "skill-limit")
    assert f"found 34 skills but the limit is {served} " in problem.detail
    assert [warning.variable for warning in warnings] == (["MCP_MAX_SKILLS"] if value in ("0", "-1") else [])


def test_max_skills_above_4096_is_clamped_and_the_4097th_skill_is_left_out(tmp_path):
    root = tmp_path
    for index in range(4097):
        directory = root / f"s{index:04d}"
        directory.mkdir()
        (directory / "SKILL.md").write_text(f"---\nname: {directory.name}\ndescription: d\n---\n")
    deployment, warnings = build_deployment({"SKILLS_DIR": str(root), "MCP_MAX_SKILLS": "4097"})
    assert [warning.variable for warning in warnings] == ["MCP_MAX_SKILLS"]
    assert (len(deployment.skills), deployment.skills[-1].name) == (4096, "s4095")
    [problem] = deployment.problems
    assert (problem.path, problem.reason) == (str(root), "skill-limit")
    assert problem.detail == (
        'found 4097 skills but the limit is 4096 (MCP_MAX_SKILLS); the first 4096 are served, 1 ignored: "s4096"'
    )


# --- §7.1 through the real server: every discovery reason, in the order of §3 ------------------------------


@pytest.mark.anyio
@pytest.mark.parametrize("era", ERAS)
async def test_skill_list_carries_every_discovery_problem_exactly_and_in_the_order_of_3(tmp_path, root, era):
    other = tmp_path / "other"
    make_skill(other, "twin")
    make_skill(root, "twin")
    make_skill(root, "a-bad", "name: [unclosed\n")
    make_skill(root, "b-link-target")
    (root / "c-alias").symlink_to("b-link-target")
    (root / "d-empty").mkdir()
    (root / "e-out").symlink_to(tmp_path)
    make_skill(root, "f-odd", "name: f-odd\ndescription: d\nflavour: x\nmcp-host:\n  version: 1\n  run:\n"
               "    - {script: gone.py, interpreter: python3}\n", files={"%20.txt": "x"})
    make_skill(root, "g name")
    (root / "h-pipe").mkdir()
    os.mkfifo(root / "h-pipe" / "SKILL.md")
    (root / "i-dangling").mkdir()
    (root / "i-dangling" / "SKILL.md").symlink_to("nowhere")
    full = make_skill(root, "j-full")
    for index in range(2000):
        (full / f"f{index:04d}").write_bytes(b"")
    missing = str(tmp_path / "missing")
    roots = f"{missing}:{root}:{other}"
    grant = '[{"skill": "nobody", "script": "x.py"}]'
    deployment, _ = build_deployment({"SKILLS_DIR": roots, "MCP_MAX_SKILLS": "2", "MCP_SKILL_RUN": grant})
    async with connect(deployment, era) as client:
        listing = payload(await client.call_tool("skill_list", {}))
    assert listing["problems"] == [problem.to_json() for problem in deployment.problems]
    assert all(list(problem) == ["path", "reason", "detail"] for problem in listing["problems"])
    assert [(problem["path"], problem["reason"]) for problem in listing["problems"]] == [
        (missing, "root-unreadable"),
        (str(root / "c-alias"), "name-mismatch"),
        (str(root / "e-out"), "symlink-escape"),
        (str(root / "d-empty"), "no-skill-md"),
        (str(root / "a-bad"), "malformed-frontmatter"),
        (str(root / "f-odd"), "declaration"),
        (str(root / "f-odd"), "unusable-path"),
        (str(root / "f-odd"), "declared-script-missing"),
        (str(root / "g name"), "unusable-name"),
        (str(root / "h-pipe"), "unreadable-skill-md"),
        (str(root / "i-dangling"), "symlink-escape"),
        (str(full), "file-limit"),
        (str(root / "twin"), "duplicate-name"),
        (f"{missing}:{root}:{other}", "skill-limit"),
        ("MCP_SKILL_RUN", "grant"),
    ]
    assert [skill["name"] for skill in listing["skills"]] == ["b-link-target", "f-odd"]
