"""SPEC §3 and §4 rule by rule, against real trees: each test names the rule or table row it pins."""

from __future__ import annotations

from skill_mcp.catalog import discover


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
