"""Properties of parsing and discovery over generated input: nothing raises past its module, every answer can be
written as JSON, a grant only narrows, and no directory under a root goes unreported (R3)."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from skill_mcp.catalog import discover
from skill_mcp.config import load_config
from skill_mcp.declaration import MAX_FINDINGS_SHOWN, read_declaration
from skill_mcp.frontmatter import FrontmatterError, frontmatter_to_json, parse_skill_md
from skill_mcp.grants import apply_grant, resolve_grant
from skill_mcp.limits import SKILL_NAME_PATTERN
from skill_mcp.model import Declaration, PathTally, RunEntry, Skill
from skill_mcp.text import encodable

# Pieces that reach the parser's corners: anchors, tags, directives, merge keys, huge and odd numbers, dates, escapes
# of surrogates, control characters, a BOM, CRLF, tabs, flow and block collections, and the mcp-host keys.
_YAML_PIECES = [
    "name", "mcp-host", "version", "run", "script", "interpreter", "env", "timeout", "egress", "1", "0x1F", "0o17",
    "1e400", ".inf", ".nan", "~", "null", "true", "yes", "2024-01-01", "2024-13-45", "2001-12-14t21:59:43.10-05:00",
    "&a", "*a", "!!str", "!foo", "!", "%YAML 1.1", "<<", "=", "? ", "[", "]", "{", "}", ",", ":", " ", "\t", "\n",
    "\r\n", "- ", "--- ", "...", "'", '"', "\\ud800", "\\ud83d\\ude00", "#", "|", ">", "\ufeff", "\u2028", "\x00",
    "\x07", "é", "1_000", "0b101", "9" * 5000, "scripts/a.py", "python3", "[x, y]", "{a: 1}",
]
_FRONTMATTER = st.lists(st.sampled_from(_YAML_PIECES), max_size=40).map("".join)
_RELAXED = settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))


@_RELAXED
@given(_FRONTMATTER, st.booleans())
def test_any_frontmatter_parses_or_is_refused_and_what_parses_is_json(raw_yaml, truncated):
    try:
        frontmatter, _ = parse_skill_md(f"---\n{raw_yaml}\n---\nbody", truncated)
    except FrontmatterError as error:
        str(error).encode("utf-8")
        return
    json.dumps(frontmatter_to_json(frontmatter), allow_nan=False).encode("utf-8")
    _, findings = read_declaration(frontmatter)
    assert len(findings) <= MAX_FINDINGS_SHOWN + 1
    for finding in findings:
        finding.encode("utf-8")


_GRANT_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.sampled_from(["a", "s.py", "t.py", "X", "Z", ""]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["skill", "script", "env", "x"]), inner),
    max_leaves=12,
)
_SKILL = Skill(
    name="a",
    real_dir="/r/a",
    source="/r",
    body="",
    body_truncated=False,
    manifest=(),
    declaration=Declaration(runs=(RunEntry("s.py", "python3", ("X", "Z"), 1000), RunEntry("t.py", "node", (), 1000))),
    frontmatter={},
    description=None,
    when_to_use=None,
    file_limit_hit=False,
    skipped=PathTally(),
    unlisted_dirs=PathTally(),
)


@_RELAXED
@given(_GRANT_VALUE.map(json.dumps) | st.text(max_size=40), st.booleans())
def test_a_grant_only_narrows_and_a_bad_one_grants_nothing(raw, hosted):
    environ = {"MCP_SKILL_RUN": raw, **({"MCP_DATA_DIR": "/data"} if hosted else {})}
    config, _ = load_config(environ, "/", "/bundled")
    grant = resolve_grant(config)
    effective, problems = apply_grant([_SKILL], grant)
    if grant.grant_error is not None:
        assert grant.rows == () and effective == {"a": ()}
    if grant.rows is None:
        assert config.grant_raw is None and not config.hosted
        return
    for run in effective["a"]:
        rows = [row for row in grant.rows if (row.skill, row.script) == ("a", run.script)]
        assert rows and set(run.env) <= {name for row in rows for name in row.env or ()}
    for problem in problems:
        json.dumps(problem.to_json()).encode("utf-8")


_ENTRY_NAMES = st.sampled_from(["alpha", "skills", "SKILL.md", "x" * 70, "a b", "\udcff", "new\nline", "café", "-a"])
_ENTRY_KINDS = st.sampled_from(
    ["skill", "no-skill-md", "link-to-first", "link-outside", "broken-link", "link-loop", "link-to-root", "file",
     "fifo", "skill-md-dir", "skill-md-link-out", "skill-md-link-in", "skill-md-loop"]
)


def _make_entry(path: str, kind: str, first: str | None, root: str, outside: str) -> None:
    links = {"link-outside": outside, "broken-link": os.path.join(outside, "gone"), "link-loop": path, "link-to-root": root}
    if kind in links:
        os.symlink(links[kind], path)
    elif kind == "link-to-first" and first is not None:
        os.symlink(first, path)
    elif kind == "file":
        with open(path, "w") as file:
            file.write("x")
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind != "link-to-first":
        os.mkdir(path)
        skill_md = os.path.join(path, "SKILL.md")
        if kind == "skill":
            with open(skill_md, "w") as file:
                file.write(f"---\nname: {json.dumps(os.path.basename(path))}\n---\n")
        elif kind == "skill-md-dir":
            os.mkdir(skill_md)
        elif kind == "skill-md-link-out":
            os.symlink(os.path.join(outside, "SKILL.md"), skill_md)
        elif kind == "skill-md-link-in":
            with open(os.path.join(path, "real.md"), "w") as file:
                file.write("---\nname: x\n---\n")
            os.symlink("real.md", skill_md)
        elif kind == "skill-md-loop":
            os.symlink("SKILL.md", skill_md)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(st.tuples(_ENTRY_NAMES, _ENTRY_KINDS), max_size=6, unique_by=lambda pair: pair[0]),
       st.booleans())
def test_every_directory_under_a_root_is_served_or_reported(entries, under_skills):
    base = os.path.realpath(tempfile.mkdtemp())
    try:
        root, outside = os.path.join(base, "root"), os.path.join(base, "outside")
        os.mkdir(outside)
        with open(os.path.join(outside, "SKILL.md"), "w") as file:
            file.write("---\nname: outside\n---\n")
        scanned = os.path.join(root, "skills") if under_skills else root
        os.makedirs(scanned)
        first = None
        for name, kind in entries:
            path = os.path.join(scanned, name)
            if not os.path.lexists(path):
                _make_entry(path, kind, first, root, outside)
                first = first or path
        catalog = discover([root], 32)
        json.dumps([problem.to_json() for problem in catalog.problems]).encode("utf-8")
        assert all(SKILL_NAME_PATTERN.fullmatch(skill.name) for skill in catalog.skills)
        assert len({skill.name for skill in catalog.skills}) == len(catalog.skills)
        root_skill_md = os.path.join(root, "SKILL.md")
        if os.path.exists(root_skill_md) and not os.path.isdir(root_skill_md):
            return  # layout A (a FIFO too, reported when read): the root is the skill, and nothing under it is scanned
        accounted = {skill.real_dir for skill in catalog.skills} | {problem.path for problem in catalog.problems}
        for name in os.listdir(scanned):
            path = os.path.join(scanned, name)
            if not (os.path.isdir(path) or os.path.islink(path)) or (scanned == root and name == "skills"):
                continue  # plain files are skipped; layout C answers for `skills`
            try:
                real = os.path.realpath(path, strict=True)
            except OSError:
                assert encodable(path) in accounted, path
                continue
            if os.path.isdir(real) and real not in (root, scanned):
                assert {encodable(path), encodable(real)} & accounted, (path, catalog)
    finally:
        shutil.rmtree(base)
