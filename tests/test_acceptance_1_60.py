"""§17 items 1–60 that the unit tests prove only below the protocol: what a client sees in skill_list (and, for a
missing declared script, skill_load and skill_run), through the real server in both eras."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support import ERAS, connect, deployment_for, error_text, payload, write_skill

from skill_mcp.config import BUNDLED_ROOT
from skill_mcp.deployment import build_deployment

pytestmark = pytest.mark.anyio

OUTSIDE_PYTHON = next(
    (path for path in (os.path.join(sys.base_prefix, "bin", "python3"), "/usr/bin/python3") if os.path.isfile(path)),
    None,
)
RUNS = "name: {name}\ndescription: d\nmcp-host:\n  version: 1\n  run:\n    - script: scripts/run.py\n      interpreter: python3\n"
RUN = {"script": "scripts/run.py", "interpreter": "python3", "timeoutMs": 60000, "env": []}
BAD_GRANT_ERROR = (
    "MCP_SKILL_RUN is not valid JSON: Expecting property name enclosed in double quotes at line 1 column 2; "
    "nothing is granted, so no script may run until it is fixed"
)


@pytest.fixture(params=ERAS)
def era(request) -> str:
    return request.param


@pytest.fixture
def roots(tmp_path: Path) -> tuple[Path, Path]:
    """Root a serving `alpha` and root b serving `beta`, each declaring one python3 script."""
    if OUTSIDE_PYTHON is None:
        pytest.skip("no python3 outside the virtual environment to pin as the python3 interpreter")
    a, b = tmp_path.resolve() / "a", tmp_path.resolve() / "b"
    for root, name in ((a, "alpha"), (b, "beta")):
        write_skill(root, name, RUNS.format(name=name), files={"scripts/run.py": "print('ran')\n"})
    return a, b


async def skill_list(environ: dict[str, str], era: str, cwd: str | None = None) -> dict:
    pinned = {"MCP_SKILL_PYTHON": OUTSIDE_PYTHON, "PATH": "/nonexistent", **environ}
    deployment, _ = build_deployment(pinned, cwd=cwd)
    async with connect(deployment, era) as client:
        return payload(await client.call_tool("skill_list", {}))


def grant_view(listed: dict) -> tuple:
    """grantFrom, whether grantNote and grantError are present, and each skill's runnable scripts."""
    scripts = {skill["name"]: [run["script"] for run in skill["scripts"]] for skill in listed["skills"]}
    return listed["grantFrom"], "grantNote" in listed, listed.get("grantError"), scripts


# Configuration (items 1–13), as skill_list shows it.


async def test_item_1_mcp_skills_path_wins_over_skills_dir(roots, era):
    a, b = roots
    listed = await skill_list({"MCP_SKILLS_PATH": str(a), "SKILLS_DIR": str(b)}, era)
    assert (listed["roots"], listed["rootsFrom"]) == ([str(a)], "MCP_SKILLS_PATH")
    assert [skill["name"] for skill in listed["skills"]] == ["alpha"]


async def test_item_2_empty_parts_of_mcp_skills_path_are_dropped(roots, era):
    a, b = roots
    listed = await skill_list({"MCP_SKILLS_PATH": f"{a}::{b}"}, era)
    assert (listed["roots"], listed["rootsFrom"]) == ([str(a), str(b)], "MCP_SKILLS_PATH")
    assert [(skill["name"], skill["source"]) for skill in listed["skills"]] == [("alpha", str(a)), ("beta", str(b))]


async def test_items_3_9_12_skills_dir_alone_is_standalone_and_its_declaration_decides(roots, era):
    _, b = roots
    listed = await skill_list({"SKILLS_DIR": str(b)}, era)
    assert (listed["roots"], listed["rootsFrom"]) == ([str(b)], "SKILLS_DIR")
    assert grant_view(listed) == ("declaration", False, None, {"beta": ["scripts/run.py"]})


async def test_item_4_no_variables_serve_the_bundled_demo(era, tmp_path):
    listed = await skill_list({}, era, cwd=str(tmp_path))
    assert (listed["roots"], listed["rootsFrom"], listed["problems"]) == ([BUNDLED_ROOT], "default", [])
    assert [skill["name"] for skill in listed["skills"]] == ["skill-mcp-demo"]


@pytest.mark.parametrize("value", ["   ", "null", "undefined", "${MCP_SKILLS_PATH}"])
async def test_item_5_unset_words_leave_mcp_skills_path_unset_and_the_server_standalone(roots, era, value):
    _, b = roots
    listed = await skill_list({"MCP_SKILLS_PATH": value, "SKILLS_DIR": str(b)}, era)
    assert (listed["roots"], listed["rootsFrom"], listed["grantFrom"]) == ([str(b)], "SKILLS_DIR", "declaration")


async def test_item_6_a_colon_alone_yields_no_root_but_marks_the_server_hosted(roots, era):
    _, b = roots
    listed = await skill_list({"MCP_SKILLS_PATH": ":", "SKILLS_DIR": str(b)}, era)
    assert (listed["roots"], listed["rootsFrom"]) == ([str(b)], "SKILLS_DIR")
    assert grant_view(listed) == ("hosted-default", True, None, {"beta": []})
    alone = await skill_list({"MCP_SKILLS_PATH": ":"}, era)
    assert (alone["roots"], alone["rootsFrom"], alone["grantFrom"]) == ([BUNDLED_ROOT], "default", "hosted-default")


async def test_item_7_relative_roots_become_absolute_and_tilde_is_not_expanded(roots, era):
    base = roots[0].parent
    (base / "~").mkdir()
    os.symlink(roots[1], base / "~" / "skills")
    listed = await skill_list({"SKILLS_DIR": "a:~/skills"}, era, cwd=str(base))
    assert listed["roots"] == [str(base / "a"), str(base / "~" / "skills")]
    assert [(skill["name"], skill["source"]) for skill in listed["skills"]] == [
        ("alpha", str(base / "a")), ("beta", str(base / "~" / "skills")),
    ]


async def test_item_8_a_malformed_grant_grants_nothing_and_says_why(roots, era):
    _, b = roots
    listed = await skill_list({"SKILLS_DIR": str(b), "MCP_SKILL_RUN": "{not json"}, era)
    assert grant_view(listed) == ("MCP_SKILL_RUN", False, BAD_GRANT_ERROR, {"beta": []})


async def test_item_10_mcp_skills_path_alone_is_the_hosted_default(roots, era):
    a, _ = roots
    listed = await skill_list({"MCP_SKILLS_PATH": str(a)}, era)
    assert grant_view(listed) == ("hosted-default", True, None, {"alpha": []})
    assert "MCP_SKILL_RUN" in listed["grantNote"] and "nothing may run" in listed["grantNote"]


@pytest.mark.parametrize("marker", ["MCP_HOST_METER_FILE", "MCP_DATA_DIR", "MCP_BLOB_BASE_URL"])
async def test_item_11_skills_dir_with_a_host_marker_is_hosted(roots, era, marker, tmp_path):
    _, b = roots
    listed = await skill_list({"SKILLS_DIR": str(b), marker: str(tmp_path / "marker")}, era)
    assert (listed["rootsFrom"], *grant_view(listed)) == ("SKILLS_DIR", "hosted-default", True, None, {"beta": []})


@pytest.mark.parametrize(
    ("grant", "scripts"), [("[]", []), ('[{"skill": "alpha", "script": "scripts/run.py"}]', ["scripts/run.py"])]
)
async def test_item_13_an_explicit_grant_even_empty_beats_the_hosted_default(roots, era, grant, scripts):
    a, _ = roots
    listed = await skill_list({"MCP_SKILLS_PATH": str(a), "MCP_SKILL_RUN": grant}, era)
    assert grant_view(listed) == ("MCP_SKILL_RUN", False, None, {"alpha": scripts})


# Discovery and frontmatter (items 32, 45, 49), as skill_list, skill_load and skill_run show them.


@pytest.mark.parametrize(("max_skills", "served"), [(None, 32), ("40", 35)])
async def test_item_32_thirty_five_skills_against_the_default_limit_and_a_limit_of_40(root, era, max_skills, served):
    for index in range(35):
        write_skill(root, f"s{index:02d}")
    environ = {"SKILLS_DIR": str(root)} | ({"MCP_MAX_SKILLS": max_skills} if max_skills else {})
    listed = await skill_list(environ, era)
    assert [skill["name"] for skill in listed["skills"]] == [f"s{index:02d}" for index in range(served)]
    limits = [problem for problem in listed["problems"] if problem["reason"] == "skill-limit"]
    if served == 32:
        assert [problem["path"] for problem in limits] == [str(root)]
        assert "32" in limits[0]["detail"] and "35" in limits[0]["detail"] and "3 ignored" in limits[0]["detail"]
    else:
        assert listed["problems"] == []


async def test_item_45_a_missing_declared_script_is_reported_and_stays_declared(root, era):
    if OUTSIDE_PYTHON is None:
        pytest.skip("no python3 outside the virtual environment to pin as the python3 interpreter")
    skill_dir = write_skill(root, "alpha", RUNS.format(name="alpha"))  # no scripts/run.py on disk
    deployment = deployment_for({"SKILLS_DIR": str(root), "MCP_SKILL_PYTHON": OUTSIDE_PYTHON, "PATH": "/nonexistent"})
    async with connect(deployment, era) as client:
        listed = payload(await client.call_tool("skill_list", {}))
        loaded = payload(await client.call_tool("skill_load", {"name": "alpha"}))
        refused = error_text(await client.call_tool("skill_run", {"name": "alpha", "script": "scripts/run.py"}))
    assert listed["problems"] == [{
        "path": str(skill_dir), "reason": "declared-script-missing",
        "detail": 'the skill declares "scripts/run.py", which is not a file in this skill',
    }]
    assert (listed["skills"][0]["scripts"], listed["skills"][0]["executable"]) == ([RUN], True)
    assert loaded["scripts"] == [{"script": "scripts/run.py", "interpreter": "python3", "runnableHere": True}]
    assert refused.startswith('"scripts/run.py" is not a file in this skill')  # fails at resolution, not "not declared"


async def test_item_49_no_opener_an_unclosed_block_and_an_oversized_block_are_malformed(root, era):
    write_skill(root, "alpha")
    for name, text in (
        ("no-opener", "# Just markdown\n"),
        ("unclosed", "---\nname: unclosed\ndescription: d\n"),
        ("oversized", "---\ndescription: " + "x" * 65536 + "\n---\nBody.\n"),
    ):
        (root / name).mkdir()
        (root / name / "SKILL.md").write_text(text, encoding="utf-8")
    listed = await skill_list({"SKILLS_DIR": str(root)}, era)
    assert [skill["name"] for skill in listed["skills"]] == ["alpha"]
    details = {Path(problem["path"]).name: (problem["reason"], problem["detail"]) for problem in listed["problems"]}
    assert set(details) == {"no-opener", "unclosed", "oversized"}
    assert {reason for reason, _ in details.values()} == {"malformed-frontmatter"}
    assert 'does not begin with a "---" frontmatter block' in details["no-opener"][1]
    assert "never closed" in details["unclosed"][1]
    assert "65536" in details["oversized"][1]
