"""`spec` findings and the pure output of `check` / `list` (SPEC §14.2–14.3), on real skill trees."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import make_skill
from support import deployment_for

from skill_mcp.authoring import check_lines, check_report, egress_allowlist, spec_findings, table_lines
from skill_mcp.model import Problem, Skill

VALID = (
    "name: good-skill\n"
    f"description: {'d' * 1024}\n"
    f"compatibility: {'c' * 500}\n"
    "metadata: {author: me, version: '1.0'}\n"
    "license: MIT\n"
    "allowed-tools: Read Grep\n"
)

BASE = "name: skill\ndescription: d\n"
# (frontmatter, a fragment of the one `spec` detail it must draw)
SPEC_RULES = {
    "name-missing": ("description: d\n", '"name" is missing'),
    "name-list": ("name: [x]\ndescription: d\n", '"name" is a list, not a string'),
    "name-number": ("name: 12\ndescription: d\n", '"name" is a number, not a string'),
    "name-uppercase": ("name: Skill\ndescription: d\n", 'name "Skill" is not 1-64 lowercase'),
    "name-underscore": ("name: my_skill\ndescription: d\n", 'name "my_skill" is not'),
    # A hyphen is allowed, so the detail says where it is not.
    "name-leading-hyphen": ("name: -skill\ndescription: d\n", 'name "-skill" is not 1-64 lowercase letters, digits '
                            'and single hyphens (no leading, trailing or doubled "-")'),
    "name-trailing-hyphen": ("name: skill-\ndescription: d\n", 'name "skill-" is not'),
    "name-doubled-hyphen": ("name: my--skill\ndescription: d\n", 'name "my--skill" is not'),
    "name-empty": ("name: ''\ndescription: d\n", 'name "" is not 1-64 lowercase'),
    "name-65-chars": (f"name: {'a' * 65}\ndescription: d\n", "is not 1-64"),
    "description-missing": ("name: skill\n", '"description" is missing'),
    "description-list": ("name: skill\ndescription: [d]\n", '"description" is a list, not a string'),
    "description-empty": ("name: skill\ndescription: ''\n", '"description" is empty'),
    "description-1025-chars": (f"name: skill\ndescription: {'d' * 1025}\n", "1025 characters, over the 1024"),
    "compatibility-number": (BASE + "compatibility: 3\n", '"compatibility" is a number'),
    "compatibility-empty": (BASE + "compatibility: ''\n", '"compatibility" is empty'),
    "compatibility-501-chars": (BASE + f"compatibility: {'c' * 501}\n", "501 characters, over the 500"),
    "metadata-list": (BASE + "metadata: [a]\n", '"metadata" is a list, not a mapping'),
    "metadata-null": (BASE + "metadata:\n", '"metadata" is empty (null)'),
    "metadata-number-value": (BASE + "metadata: {version: 2}\n", '"metadata.version" is a number'),
    "metadata-number-key": (BASE + "metadata: {1: one}\n", "has the key 1, which is a number"),
    "license-list": (BASE + "license: [MIT]\n", '"license" is a list, not a string'),
    "license-null": (BASE + "license:\n", '"license" is empty (null), not a string'),
    "allowed-tools-list": (
        BASE + "allowed-tools: [Read]\n",
        '"allowed-tools" is a list, not a string; write the tools as one space-separated string, e.g. "Read Grep"',
    ),
}


def served_skill(root: Path, frontmatter: str, name: str = "skill") -> Skill:
    make_skill(root, name, frontmatter)
    deployment = deployment_for({}, roots_override=(str(root),), apply_owner_grant=False)
    assert [skill.name for skill in deployment.skills] == [name]
    return deployment.skills[0]


@pytest.mark.parametrize("rule", SPEC_RULES)
def test_each_spec_rule_fires_alone_on_its_fixture(root: Path, rule: str) -> None:
    frontmatter, fragment = SPEC_RULES[rule]
    skill = served_skill(root, frontmatter)
    findings = spec_findings(skill)
    assert [(finding.path, finding.reason) for finding in findings] == [(str(root / "skill"), "spec")]
    assert fragment in findings[0].detail
    assert "\n" not in findings[0].detail


def test_a_name_finding_quotes_the_name_as_json(root: Path) -> None:
    skill = served_skill(root, 'name: "Bad\\"\\n\\nHint: x"\ndescription: d\n')
    (finding,) = spec_findings(skill)
    assert finding.detail.startswith('frontmatter name "Bad\\"\\n\\nHint: x" is not 1-64 lowercase')


def test_a_valid_skill_at_every_limit_draws_no_spec_finding(root: Path) -> None:
    assert spec_findings(served_skill(root, VALID, "good-skill")) == []


def test_an_empty_metadata_mapping_and_a_64_char_name_are_valid(root: Path) -> None:
    name = "a" * 63 + "b"
    assert spec_findings(served_skill(root, f"name: {name}\ndescription: d\nmetadata: {{}}\n", name)) == []


def test_a_metadata_finding_names_every_key_and_value_that_is_not_a_string(root: Path) -> None:
    # the shape a published skill uses: lists, a number and a nested mapping beside one string, and a year as a key
    frontmatter = BASE + "metadata:\n  site: any\n  patterns: [a]\n  2024: new\n  rate: 0.1\n  budget: {calls: 2}\n"
    (finding,) = spec_findings(served_skill(root, frontmatter))
    assert finding.detail == (
        'frontmatter "metadata" has the key 2024, which is a number, "metadata.patterns" is a list, '
        '"metadata.rate" is a number, "metadata.budget" is a mapping; metadata keys and values must be strings'
    )


def test_each_broken_rule_is_its_own_finding(root: Path) -> None:
    skill = served_skill(root, "license: 1\nallowed-tools: [Read]\nmetadata: 7\n")
    details = [finding.detail for finding in spec_findings(skill)]
    assert len(details) == 5
    missing = ('"name" is missing', '"description" is missing')
    for fragment in (*missing, '"metadata" is a number', '"license"', '"allowed-tools"'):
        assert sum(fragment in detail for detail in details) == 1, fragment


def test_check_lines_keep_every_problem_on_one_line_and_end_with_the_summary() -> None:
    problems = [
        Problem("/r/a", "malformed-frontmatter", "not valid YAML:\nwhile scanning\r\n  here"),
        Problem("/r/b", "spec", 'frontmatter "name" is missing'),
    ]
    lines = check_lines(check_report(["/r"], ["b"], problems))
    assert lines == [
        "malformed-frontmatter  /r/a: not valid YAML:\\u000awhile scanning\\u000d\\u000a  here",
        'spec  /r/b: frontmatter "name" is missing',
        "1 skill(s), 2 problem(s)",
    ]


def test_paths_that_differ_by_a_line_break_or_an_invisible_character_print_apart() -> None:
    paths = ["/r/a b", "/r/a\nb", "/r/a\x0bb", "/r/a\x85b", "/r/a\u2028b", "/r/a\u2029b", "/r/a\u200bb"]
    problems = [Problem(path, "no-skill-md", "no SKILL.md") for path in paths]
    lines = check_lines(check_report(["/r"], [], problems))[:-1]
    assert lines == [
        "no-skill-md  /r/a b: no SKILL.md",
        "no-skill-md  /r/a\\u000ab: no SKILL.md",
        "no-skill-md  /r/a\\u000bb: no SKILL.md",
        "no-skill-md  /r/a\\u0085b: no SKILL.md",
        "no-skill-md  /r/a\\u2028b: no SKILL.md",
        "no-skill-md  /r/a\\u2029b: no SKILL.md",
        "no-skill-md  /r/a\\u200bb: no SKILL.md",
    ]


def listed(name: str, scripts: list[str], description: str | None = None, egress: list[str] | None = None) -> dict:
    skill = {"name": name, "files": 3, "scripts": [{"script": script} for script in scripts]}
    if description is not None:
        skill["description"] = description
    if egress:
        skill["declaredEgress"] = egress
    return skill


def test_a_row_one_character_over_120_is_cut_and_a_row_of_120_is_not() -> None:
    # §14.3: each row stays <= 120 characters; the cut is at the limit, not one past it.
    prefix_chars = len("alpha  3      -         ")
    over, at = ("d" * (121 - prefix_chars), "d" * (120 - prefix_chars))
    listing = {"skills": [listed("alpha", [], over), listed("alpha", [], at)], "problems": []}
    _, cut, kept, _ = table_lines(listing)
    assert (len(cut), cut.endswith("…")) == (120, True)
    assert (len(kept), kept.endswith("d")) == (120, True)


def test_table_rows_stay_within_120_characters_and_show_runnable_scripts() -> None:
    listing = {
        "skills": [
            listed("alpha", ["scripts/a.py", "scripts/b.js"], "First line " + "x" * 200 + "\nsecond line"),
            listed("beta", [], "Short.\nMore."),
            listed("gamma", []),
        ],
        "problems": [{"path": "/r", "reason": "spec", "detail": "d"}],
        "grantNote": "nothing may run",
    }
    header, alpha, beta, gamma, summary, note = table_lines(listing)
    assert header.split() == ["NAME", "FILES", "RUNNABLE", "DESCRIPTION"]
    assert all(len(line) <= 120 for line in (header, alpha, beta, gamma))
    assert alpha.split("  ")[0] == "alpha" and "scripts/a.py, scripts/b.js" in alpha
    assert len(alpha) == 120 and alpha.endswith("…") and "second line" not in alpha
    assert beta.split() == ["beta", "3", "-", "Short."]
    assert gamma.split() == ["gamma", "3", "-"]
    # a grant's problems are not `check`'s to explain (it ignores the grant): the pointer is to `list --json`
    assert summary == "3 skill(s), 1 problem(s); `skill-mcp list --json` shows each with its detail"
    assert note == "nothing may run"


def test_a_long_name_is_shown_whole_and_runnable_scripts_give_way_to_the_description() -> None:
    name = "a-skill-with-a-rather-long-name-for-a-table"
    scripts = ["scripts/fetch-everything.py", "scripts/upload-results.js", "scripts/report.py"]
    listing = {"skills": [listed(name, scripts, "Fetches everything."), listed("beta", [], "Short.")], "problems": []}
    header, long_row, beta, _ = table_lines(listing)
    # all three scripts (73 characters) would leave the description 1: the first one and a count leave it 30
    assert header == f"{'NAME':43}  FILES  {'RUNNABLE':36}  DESCRIPTION"
    assert long_row == f"{name}  3      scripts/fetch-everything.py, +2 more  Fetches everything."
    assert beta == f"{'beta':43}  3      {'-':36}  Short."


def test_a_description_keeps_30_characters_beside_runnable_scripts_and_is_cut_past_them() -> None:
    scripts = [f"scripts/step-{index}.py" for index in range(1, 5)]
    runnable = ", ".join(scripts)  # 74 characters: the widest RUNNABLE that leaves a description 30
    listing = {"skills": [listed("alpha", scripts, "d" * 30), listed("beta", scripts, "e" * 31)], "problems": []}
    header, alpha, beta, _ = table_lines(listing)
    assert header == f"NAME   FILES  {'RUNNABLE':74}  DESCRIPTION"
    assert alpha == f"alpha  3      {runnable}  {'d' * 30}"
    assert beta == f"beta   3      {runnable}  {'e' * 29}…"
    assert len(alpha) == len(beta) == 120
    one_more = [*scripts, "lib/x.py"]  # 84 characters: the last ones give way to a count
    _, row, _ = table_lines({"skills": [listed("alpha", one_more, "d" * 30)], "problems": []})
    assert row == f"alpha  3      {', '.join(scripts[:3])}, +2 more  {'d' * 30}"


def test_runnable_scripts_give_way_only_past_their_room_and_fill_it_to_the_last_character() -> None:
    # Beside a 30-character description, RUNNABLE has 74 characters: 75 are shortened, and 74 with a count are not.
    over = ["scripts/step-1.py", "scripts/step-2.py", "scripts/step-3.py", "scripts/step-10.py"]  # 75 characters
    _, row = table_lines({"skills": [listed("alpha", over, "d" * 30)], "problems": []})[:2]
    assert row == f"alpha  3      {', '.join(over[:3])}, +1 more  {'d' * 30}"
    exact = ["scripts/fetch-six.py", "scripts/fetch-ten.py", "scripts/fetch-four.py", "scripts/then-a-long-one.py"]
    _, row = table_lines({"skills": [listed("alpha", exact, "d" * 30)], "problems": []})[:2]
    assert row == f"alpha  3      {', '.join(exact[:3])}, +1 more  {'d' * 30}"
    assert len(row) == 120


def test_many_runnable_scripts_leave_every_row_within_120_characters_and_every_description_whole() -> None:
    many = [f"scripts/script_number_{index}.py" for index in range(1, 7)]  # 178 characters in all
    long_one = "scripts/" + "x" * 90 + ".py"  # no room even for itself: only the count
    listing = {
        "skills": [
            listed("many", many, "Runs a lot."),
            listed("long", [long_one], "Runs one."),
            listed("other", [], "Keeps its description whole, forty chars"),
        ],
        "problems": [],
    }
    lines = table_lines(listing)
    assert lines[:4] == [
        f"NAME   FILES  {'RUNNABLE':63}  DESCRIPTION",
        "many   3      scripts/script_number_1.py, scripts/script_number_2.py, +4 more  Runs a lot.",
        f"long   3      {'1 script(s)':63}  Runs one.",
        f"other  3      {'-':63}  Keeps its description whole, forty chars",
    ]
    assert all(len(line) <= 120 for line in lines)


def test_an_escaped_control_character_widens_its_column_and_keeps_the_next_one_aligned() -> None:
    listing = {"skills": [listed("alpha", ["run\x1b[2J.py"], "Clears."), listed("beta", ["b.py"], "Short.")]}
    assert table_lines({**listing, "problems": []})[:3] == [
        "NAME   FILES  RUNNABLE         DESCRIPTION",
        "alpha  3      run\\u001b[2J.py  Clears.",
        "beta   3      b.py             Short.",
    ]


def test_egress_allowlist_is_the_sorted_union_over_skills_that_can_run() -> None:
    listing = {
        "skills": [
            listed("a", ["s.py"], egress=["b.example", "a.example"]),
            listed("b", ["s.py"], egress=["a.example", "c.example"]),
            listed("no-runnable-script", [], egress=["z.example"]),
            listed("no-egress", ["s.py"]),
        ]
    }
    assert egress_allowlist(listing) == ["a.example", "b.example", "c.example"]


@pytest.mark.parametrize(
    ("frontmatter", "fragment"),
    [
        ("name: true\ndescription: d\n", '"name" is a boolean, not a string'),
        ("name: 2024-01-01\ndescription: d\n", '"name" is a date, not a string'),
    ],
)
def test_a_finding_names_the_kind_yaml_made_of_the_value(root: Path, frontmatter: str, fragment: str) -> None:
    (finding,) = spec_findings(served_skill(root, frontmatter))
    assert fragment in finding.detail


def test_the_table_shows_the_first_line_with_text_of_a_description() -> None:
    listing = {"skills": [listed("alpha", [], "\n  Starts on the second line.\nThen more.")], "problems": []}
    _, alpha, _ = table_lines(listing)
    assert alpha == "alpha  3      -         Starts on the second line."
    # every column starts where its heading does, a name longer than "NAME" included
    header, row, _ = table_lines({"skills": [listed("a-long-name", ["s.py"])], "problems": []})
    assert header.index("FILES") == row.index("3") and header.index("RUNNABLE") == row.index("s.py")


def test_relative_roots_resolve_against_the_working_directory_given(tmp_path: Path) -> None:
    make_skill(tmp_path / "skills", "fine")
    for environ, options in (({"SKILLS_DIR": "skills"}, {}), ({}, {"roots_override": ("skills",)})):
        deployment = deployment_for(environ, cwd=str(tmp_path), **options)
        assert deployment.roots == (str(tmp_path / "skills"),)
        assert [skill.name for skill in deployment.skills] == ["fine"]
