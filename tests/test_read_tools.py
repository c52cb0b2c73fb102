"""The read tools through the protocol, in both eras: skill_list, skill_load, skill_file
(SPEC §5.3, §6, §7; §17 items 74–91)."""

from __future__ import annotations

import base64
import json
import os
import shutil
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support import (
    ERAS,
    as_unprivileged,
    connect,
    deployment_for,
    error_text,
    needs_root,
    payload,
    world_readable_dir,
    write_skill,
)

from skill_mcp import surfaces, tools
from skill_mcp.results import BadRequest, ToolFailure, minified

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
SPARSE_BYTES = 256 * MIB
OUTSIDE_PYTHON = next(
    (path for path in (os.path.join(sys.base_prefix, "bin", "python3"), "/usr/bin/python3") if os.path.isfile(path)),
    None,
)

ALPHA_FRONTMATTER = """\
name: alpha
description: "Alpha  does\\tthings."
when-to-use: When alpha is needed.
mcp-host:
  version: 1
  run:
    - script: scripts/run.py
      interpreter: python3
      env: [API_KEY, OTHER_KEY]
      timeout: 30
    - script: scripts/other.py
      interpreter: python3
    - script: scripts/ctor.js
      interpreter: constructor
    - script: scripts/sh.sh
      interpreter: bash
    - script: scripts/web.js
      interpreter: node
  egress: [api.example.com, "*.cdn.example.com"]
"""
ALPHA_BODY = "# Alpha\n\n  Indented line with\ttab  \n\n---\nA later rule stays.\n\nUnicode: é ✓\n\n"
ALPHA_FILES = {
    "scripts/run.py": "print('run')\n",
    "scripts/other.py": "print('other')\n",
    "scripts/ctor.js": "1\n",
    "scripts/sh.sh": "echo\n",
    "scripts/web.js": "console.log(1)\n",
    "references/guide.md": "# Guide\n",
}
# The closed interpreter set, with only python3 found: node is "not on this machine".
ALPHA_GRANT = json.dumps(
    [
        {"skill": "alpha", "script": "scripts/run.py", "env": ["API_KEY"]},
        {"skill": "alpha", "script": "scripts/web.js"},
    ]
)

PNG = bytes.fromhex("89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489") + b"\x00\x01\x02rest"


def manifest_bytes(skill_dir: str, rels: list[str]) -> int:
    return sum(os.lstat(os.path.join(skill_dir, rel)).st_size for rel in rels)


def interpreter_environ(root: Path, tmp_path: Path, **extra: str) -> dict[str, str]:
    """Interpreters pinned: python3 found outside the venv, node absent (an empty PATH)."""
    if OUTSIDE_PYTHON is None:
        pytest.skip("no python3 outside the virtual environment to pin as the python3 interpreter")
    empty = tmp_path / "empty-path"
    empty.mkdir(exist_ok=True)
    return {"SKILLS_DIR": str(root), "PATH": str(empty), "MCP_SKILL_PYTHON": OUTSIDE_PYTHON, **extra}


@pytest.fixture(params=ERAS)
def era(request) -> str:
    return request.param


@pytest.fixture
def catalog_tree(root: Path) -> dict[str, str]:
    alpha = write_skill(root, "alpha", ALPHA_FRONTMATTER, ALPHA_BODY, ALPHA_FILES)
    beta = write_skill(root, "beta", body="Body.\n")
    return {"alpha": alpha, "beta": beta}


@pytest.fixture
def files_skill(root: Path, tmp_path: Path) -> str:
    skill = write_skill(
        root,
        "files",
        body="Files.\n",
        files={
            "notes.md": "# Notes\n  indented\ttab  \n",
            "image.png": PNG,
            "bad.bin": b"\xff\xfeA",
            "empty.txt": b"",
            "big.txt": b"a" * (MIB + 4096),
            "sub/inner.txt": "inner\n",
        },
    )
    with open(os.path.join(skill, "sparse.bin"), "wb") as handle:
        handle.truncate(SPARSE_BYTES)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    os.symlink(outside, os.path.join(skill, "link_out.txt"))
    return skill


async def call(client, tool: str, arguments: dict | None = None):
    return await client.call_tool(tool, arguments if arguments is not None else {})


# --- skill_list (§7.1) ------------------------------------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="noNewPrivs is true only where prctl exists (Linux)")
async def test_skill_list_with_a_grant_reports_every_field(root, tmp_path, catalog_tree, era):
    deployment = deployment_for(interpreter_environ(root, tmp_path, MCP_SKILL_RUN=ALPHA_GRANT))
    alpha_rels = ["SKILL.md", *ALPHA_FILES]
    async with connect(deployment, era) as client:
        listed = payload(await call(client, "skill_list"))
    assert listed == {
        "roots": [str(root)],
        "rootsFrom": "SKILLS_DIR",
        "grantFrom": "MCP_SKILL_RUN",
        "interpreters": ["python3"],
        "hardening": {
            "environScrubbed": False,
            "nonDumpable": False,
            "noNewPrivs": True,
            "rlimitNproc": None,
            "rlimitAsMb": None,
        },
        "skills": [
            {
                "name": "alpha",
                "description": "Alpha  does\tthings.",
                "whenToUse": "When alpha is needed.",
                "source": str(root),
                "files": 7,
                "bytes": manifest_bytes(catalog_tree["alpha"], alpha_rels),
                "executable": True,
                "scripts": [{"script": "scripts/run.py", "interpreter": "python3", "timeoutMs": 30000, "env": ["API_KEY"]}],
                "unavailableScripts": [
                    {"script": "scripts/ctor.js", "reason": 'declares the interpreter "constructor"; this deployment runs: python3'},
                    {"script": "scripts/sh.sh", "reason": 'declares the interpreter "bash"; this deployment runs: python3'},
                    {"script": "scripts/web.js", "reason": 'declares the interpreter "node"; this deployment runs: python3'},
                ],
                "ungrantedScripts": [
                    {
                        "script": "scripts/other.py",
                        "reason": "declared by the skill and not granted for this deployment, so it may not run here",
                    }
                ],
                "declaredEgress": ["api.example.com", "*.cdn.example.com"],
            },
            {
                "name": "beta",
                "description": "The beta skill.",
                "source": str(root),
                "files": 1,
                "bytes": manifest_bytes(catalog_tree["beta"], ["SKILL.md"]),
                "executable": False,
                "scripts": [],
                "unavailableScripts": [],
            },
        ],
        "problems": [],
    }


async def test_skill_list_standalone_without_grant_runs_what_is_declared(root, tmp_path, catalog_tree, era):
    deployment = deployment_for(interpreter_environ(root, tmp_path))
    async with connect(deployment, era) as client:
        listed = payload(await call(client, "skill_list"))
    assert listed["grantFrom"] == "declaration"
    assert "grantNote" not in listed and "grantError" not in listed
    alpha = listed["skills"][0]
    assert alpha["scripts"] == [
        {"script": "scripts/run.py", "interpreter": "python3", "timeoutMs": 30000, "env": ["API_KEY", "OTHER_KEY"]},
        {"script": "scripts/other.py", "interpreter": "python3", "timeoutMs": 60000, "env": []},
    ]
    assert "ungrantedScripts" not in alpha
    assert [entry["script"] for entry in alpha["unavailableScripts"]] == ["scripts/ctor.js", "scripts/sh.sh", "scripts/web.js"]
    assert alpha["executable"] is True


async def test_skill_list_interpreters_are_sorted(root, tmp_path, catalog_tree, era):
    # §7.1: `interpreters` is sorted; pin both (MCP_SKILL_NODE may name any executable regular file).
    fake_node = tmp_path / "fake-node"
    fake_node.write_text("#!/bin/sh\n")
    fake_node.chmod(0o755)
    environ = interpreter_environ(root, tmp_path, MCP_SKILL_NODE=str(fake_node))
    async with connect(deployment_for(environ), era) as client:
        listed = payload(await call(client, "skill_list"))
    assert listed["interpreters"] == ["node", "python3"]


async def test_skill_list_counts_an_empty_manifest_as_zero_files(root, era):
    # §7.1: `files` is the number of manifest entries; SKILL.md linking to an unaddressable file leaves none.
    skill = root / "linked"
    skill.mkdir()
    (skill / "real%md").write_text("---\nname: linked\ndescription: d\n---\nBody.\n")
    (skill / "SKILL.md").symlink_to("real%md")
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        listed = payload(await call(client, "skill_list"))
    assert [(s["name"], s["files"], s["bytes"]) for s in listed["skills"]] == [("linked", 0, 0)]


async def test_skill_list_with_no_interpreter_names_none(root, tmp_path, catalog_tree, era):
    environ = interpreter_environ(root, tmp_path)
    environ["MCP_SKILL_PYTHON"] = str(tmp_path / "no-such-python3")
    async with connect(deployment_for(environ), era) as client:
        listed = payload(await call(client, "skill_list"))
    assert listed["interpreters"] == []
    alpha = listed["skills"][0]
    assert alpha["scripts"] == []
    assert alpha["executable"] is False
    assert alpha["unavailableScripts"] == [
        {"script": script, "reason": f'declares the interpreter "{interpreter}"; this deployment runs: none'}
        for script, interpreter in [
            ("scripts/run.py", "python3"),
            ("scripts/other.py", "python3"),
            ("scripts/ctor.js", "constructor"),
            ("scripts/sh.sh", "bash"),
            ("scripts/web.js", "node"),
        ]
    ]


async def test_skill_list_hosted_without_grant_carries_the_grant_note(root, tmp_path, catalog_tree, era):
    environ = interpreter_environ(root, tmp_path)
    environ["MCP_SKILLS_PATH"] = environ.pop("SKILLS_DIR")
    async with connect(deployment_for(environ), era) as client:
        listed = payload(await call(client, "skill_list"))
    assert listed["rootsFrom"] == "MCP_SKILLS_PATH"
    assert listed["grantFrom"] == "hosted-default"
    assert "MCP_SKILL_RUN" in listed["grantNote"]
    assert listed["skills"][0]["scripts"] == []
    assert listed["skills"][0]["executable"] is False


async def test_skill_list_with_a_malformed_grant_reports_grant_error(root, tmp_path, catalog_tree, era):
    deployment = deployment_for(interpreter_environ(root, tmp_path, MCP_SKILL_RUN="{not json"))
    async with connect(deployment, era) as client:
        listed = payload(await call(client, "skill_list"))
    assert listed["grantFrom"] == "MCP_SKILL_RUN"
    assert "MCP_SKILL_RUN" in listed["grantError"]
    assert listed["skills"][0]["scripts"] == []


# --- skill_load (§7.2) ------------------------------------------------------------------------------------


async def test_skill_load_returns_the_body_verbatim_and_the_file_list(root, tmp_path, catalog_tree, era):
    deployment = deployment_for(interpreter_environ(root, tmp_path, MCP_SKILL_RUN=ALPHA_GRANT))
    alpha = catalog_tree["alpha"]
    async with connect(deployment, era) as client:
        loaded = payload(await call(client, "skill_load", {"name": "alpha"}))
    assert loaded == {
        "name": "alpha",
        "description": "Alpha  does\tthings.",
        "whenToUse": "When alpha is needed.",
        "source": str(root),
        "body": ALPHA_BODY,
        "truncated": False,
        "files": [
            {"path": rel, "size": os.lstat(os.path.join(alpha, rel)).st_size}
            for rel in sorted(["SKILL.md", *ALPHA_FILES])
        ],
        # effective scripts (granted), including one whose interpreter is not here
        "scripts": [
            {"script": "scripts/run.py", "interpreter": "python3", "runnableHere": True},
            {"script": "scripts/web.js", "interpreter": "node", "runnableHere": False},
        ],
    }


async def test_skill_load_of_a_truncated_skill_md_says_so(root, era):
    body = "x" * 300_000
    write_skill(root, "huge", body=body)
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        loaded = payload(await call(client, "skill_load", {"name": "huge"}))
        whole = payload(await call(client, "skill_file", {"name": "huge", "paths": ["SKILL.md"]}))["files"][0]
    assert loaded["truncated"] is True
    # the note says where the rest is, and it is there
    assert loaded["truncationNote"] == (
        'SKILL.md was cut at 262144 bytes (frontmatter included); skill_file reads the whole file as "SKILL.md", '
        "up to 1048576 bytes."
    )
    assert (whole["truncated"], whole["content"]) == (False, (root / "huge" / "SKILL.md").read_text(encoding="utf-8"))
    assert loaded["body"] == body[: len(loaded["body"])]
    assert len(loaded["body"].encode("utf-8")) < 262144
    assert loaded["files"] == [{"path": "SKILL.md", "size": os.path.getsize(root / "huge" / "SKILL.md")}]


async def test_skill_load_of_an_unknown_skill_lists_the_served_names(root, catalog_tree, era):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        text = error_text(await call(client, "skill_load", {"name": "gamma"}))
        assert text == 'no skill named "gamma"\n\nHint: This server serves: alpha, beta.'
        assert payload(await call(client, "skill_load", {"name": "beta"}))["body"] == "Body.\n"


async def test_unknown_skill_hint_is_capped_at_64_names(root, era):
    for index in range(70):
        os.makedirs(root / f"s{index:02d}")
        (root / f"s{index:02d}" / "SKILL.md").write_text(f"---\nname: s{index:02d}\ndescription: d\n---\nb\n")
    deployment = deployment_for({"SKILLS_DIR": str(root), "MCP_MAX_SKILLS": "100"})
    async with connect(deployment, era) as client:
        text = error_text(await call(client, "skill_file", {"name": "zzz", "paths": ["a"]}))
    shown = ", ".join(f"s{index:02d}" for index in range(64))
    assert text == f'no skill named "zzz"\n\nHint: This server serves: {shown}, and 6 more.'


async def test_unknown_skill_named_like_a_refused_directory_says_so(root, era):
    write_skill(root, "good")
    (root / "bom").mkdir()
    (root / "bom" / "SKILL.md").write_text("\ufeff---\nname: bom\n---\n", encoding="utf-8")
    (root / "plain").mkdir()  # no SKILL.md: not a skill anyone could mean
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        bom = error_text(await call(client, "skill_load", {"name": "bom"}))
        plain = error_text(await call(client, "skill_load", {"name": "plain"}))
    assert bom == (
        'no skill named "bom"\n\nHint: A directory of that name was not served (malformed-frontmatter); '
        "skill_list's problems say why. This server serves: good."
    )
    assert plain == 'no skill named "plain"\n\nHint: This server serves: good.'
    # with nothing else served, once
    shutil.rmtree(root / "good")
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        alone = error_text(await call(client, "skill_load", {"name": "bom"}))
    assert alone == (
        'no skill named "bom"\n\nHint: A directory of that name was not served (malformed-frontmatter); '
        "skill_list's problems say why. No other skill is served."
    )


async def test_unknown_skill_hint_with_exactly_64_names_has_no_more_clause(root, era):
    # §5.3: at most 64 names, "then and N more" only when more exist.
    for index in range(64):
        write_skill(root, f"s{index:02d}")
    deployment = deployment_for({"SKILLS_DIR": str(root), "MCP_MAX_SKILLS": "100"})
    async with connect(deployment, era) as client:
        text = error_text(await call(client, "skill_load", {"name": "zzz"}))
    shown = ", ".join(f"s{index:02d}" for index in range(64))
    assert text == f'no skill named "zzz"\n\nHint: This server serves: {shown}.'


async def test_unknown_skill_with_an_empty_catalog_points_at_skill_list(root, era):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        text = error_text(await call(client, "skill_load", {"name": "alpha"}))
    assert text == (
        'no skill named "alpha"\n\nHint: No skills were found on this server: no directory under its roots holds a '
        "SKILL.md; call skill_list to see the roots it searched."
    )


# --- skill_file (§7.3) ------------------------------------------------------------------------------------


async def test_skill_file_keeps_request_order_serves_duplicates_and_fails_entries_alone(root, files_skill, era):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        read = payload(
            await call(
                client,
                "skill_file",
                {
                    "name": "files",
                    "paths": [
                        "sub/inner.txt",
                        "missing.txt",
                        "notes.md",
                        "../outside.txt",
                        "sub",
                        "link_out.txt",
                        "notes.md",
                        "/etc/passwd",
                    ],
                },
            )
        )
    notes = {
        "path": "notes.md",
        "size": 25,
        "mediaType": "text/markdown",
        "encoding": "utf-8",
        "truncated": False,
        "content": "# Notes\n  indented\ttab  \n",
    }
    assert read == {
        "skill": "files",
        "files": [
            {
                "path": "sub/inner.txt",
                "size": 6,
                "mediaType": "text/plain",
                "encoding": "utf-8",
                "truncated": False,
                "content": "inner\n",
            },
            {"path": "missing.txt", "error": '"missing.txt" is not a file in this skill'},
            notes,
            {"path": "../outside.txt", "error": 'path "../outside.txt" is not usable: it has a ".." segment'},
            {"path": "sub", "error": '"sub" is not a regular file'},
            {"path": "link_out.txt", "error": "\"link_out.txt\" resolves outside the skill's own directory"},
            notes,
            {
                "path": "/etc/passwd",
                "error": 'path "/etc/passwd" is not usable: it has an empty segment (leading, trailing or doubled "/")',
            },
        ],
    }


async def test_png_comes_back_as_base64_with_equal_bytes(root, files_skill, era):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        (entry,) = payload(await call(client, "skill_file", {"name": "files", "paths": ["image.png"]}))["files"]
    assert entry == {
        "path": "image.png",
        "size": len(PNG),
        "mediaType": "image/png",
        "encoding": "base64",
        "truncated": False,
        "content": base64.b64encode(PNG).decode("ascii"),
    }
    assert base64.b64decode(entry["content"]) == PNG


async def test_invalid_utf8_is_base64_and_an_empty_file_is_empty_text(root, files_skill, era):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        read = payload(await call(client, "skill_file", {"name": "files", "paths": ["bad.bin", "empty.txt"]}))
    assert read["files"] == [
        {
            "path": "bad.bin",
            "size": 3,
            "mediaType": "application/octet-stream",
            "encoding": "base64",
            "truncated": False,
            "content": "//5B",
        },
        {"path": "empty.txt", "size": 0, "mediaType": "text/plain", "encoding": "utf-8", "truncated": False, "content": ""},
    ]


async def test_a_file_over_one_mib_is_cut_with_a_note(root, files_skill, era):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        (entry,) = payload(await call(client, "skill_file", {"name": "files", "paths": ["big.txt"]}))["files"]
    assert entry["size"] == 1052672
    assert entry["truncated"] is True
    assert "1048576" in entry["truncationNote"]
    assert "1052672" in entry["truncationNote"]
    assert entry["encoding"] == "utf-8"
    assert entry["content"] == "a" * 1048576


async def test_four_reads_of_a_256_mib_file_fit_the_call_budget(root, files_skill, era):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        read = payload(await call(client, "skill_file", {"name": "files", "paths": ["sparse.bin"] * 4}))
    zeros = base64.b64encode(bytes(MIB)).decode("ascii")
    assert read["files"] == [
        {
            "path": "sparse.bin",
            "size": SPARSE_BYTES,
            "mediaType": "application/octet-stream",
            "encoding": "base64",
            "truncated": True,
            "truncationNote": f"the file is {SPARSE_BYTES} bytes; the first 1048576 bytes are returned",
            "content": zeros,
        }
    ] * 4


@pytest.mark.parametrize(
    "paths",
    [
        ["sparse.bin"] * 5 + ["notes.md", "missing.txt"],
        ["notes.md", "missing.txt"] + ["sparse.bin"] * 5,
        ["sparse.bin", "notes.md", "sparse.bin", "missing.txt", "sparse.bin", "sparse.bin", "sparse.bin"],
    ],
    ids=["big-first", "big-last", "interleaved"],
)
async def test_five_reads_of_a_256_mib_file_fail_before_anything_is_read(root, files_skill, era, paths, monkeypatch):
    reads: list[int] = []
    real_read = tools.read_capped_fd

    def counting_read(fd, max_bytes, status):
        reads.append(fd)
        return real_read(fd, max_bytes, status)

    monkeypatch.setattr(tools, "read_capped_fd", counting_read)
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        text = error_text(await call(client, "skill_file", {"name": "files", "paths": paths}))
        assert reads == []
        # the same budget, whatever the order: 5 × 1 MiB + 25 bytes of notes.md; the missing path counts nothing
        assert text == (
            "the 7 paths total 5242905 bytes to read, over this call's 4194304-byte limit; nothing was read"
            "\n\nHint: Ask for fewer files per call, or read the largest file alone; skill_load lists every file's size."
        )
        assert payload(await call(client, "skill_file", {"name": "files", "paths": ["notes.md"]}))["files"][0]["content"]


def test_skill_file_on_a_256_mib_file_grows_allocation_under_32_mib(root, files_skill):
    deployment = deployment_for({"SKILLS_DIR": str(root)})
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        text = minified(tools.skill_file(deployment, "files", ["sparse.bin"]))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert json.loads(text)["files"][0]["truncated"] is True
    assert peak - baseline < 32 * MIB


def test_skill_file_closes_every_descriptor_it_opened(root, files_skill):
    # Pass 1 holds a descriptor per resolved path until pass 2 has read it: served, failed and over-budget calls
    # must all give them back, or a long-lived server runs out of descriptors.
    deployment = deployment_for({"SKILLS_DIR": str(root)})
    before = len(os.listdir("/proc/self/fd"))
    tools.skill_file(deployment, "files", ["notes.md", "image.png", "missing.txt", "sub", "link_out.txt", "notes.md"])
    with pytest.raises(ToolFailure):
        tools.skill_file(deployment, "files", ["notes.md"] + ["sparse.bin"] * 5)
    assert len(os.listdir("/proc/self/fd")) == before


def test_skill_file_size_is_never_below_the_bytes_read_when_the_file_grew_after_pass_1(root, files_skill, monkeypatch):
    # §6.3: size = max(st_size, bytes read). A file appended to between pass 1 (its stat) and pass 2 (its read)
    # comes back whole, and its size must cover every byte returned.
    real_read = tools.read_capped_fd

    def grow_then_read(fd, max_bytes, status):
        with open(os.path.join(files_skill, "notes.md"), "a") as notes:
            notes.write("appended\n")
        return real_read(fd, max_bytes, status)

    monkeypatch.setattr(tools, "read_capped_fd", grow_then_read)
    (entry,) = tools.skill_file(deployment_for({"SKILLS_DIR": str(root)}), "files", ["notes.md"])["files"]
    assert entry["content"] == "# Notes\n  indented\ttab  \nappended\n"
    assert entry["size"] == len(entry["content"]) == 34


@needs_root
def test_a_file_the_server_may_not_read_fails_its_entry_and_its_resource_read():
    # A mode-0 file resolves (its path is fine) but cannot be opened for reading: skill_file fails only that
    # entry, and resources/read answers the same message as invalid params, not an internal error.
    root = world_readable_dir()
    skill = write_skill(root, "locked", files={"secret.txt": "secret\n", "open.txt": "open\n"})
    (skill / "secret.txt").chmod(0)
    try:
        deployment = deployment_for({"SKILLS_DIR": str(root)})

        def read_both():
            read = tools.skill_file(deployment, "locked", ["secret.txt", "open.txt"])
            try:
                surfaces.read_resource(deployment, "skill://locked/secret.txt")
            except BadRequest as refused:
                return read, str(refused)
            return read, None

        read, refused = as_unprivileged(read_both)
    finally:
        shutil.rmtree(root)
    message = '"secret.txt" could not be read: Permission denied'
    assert read["files"][0] == {"path": "secret.txt", "error": message}
    assert read["files"][1]["content"] == "open\n"
    assert refused == message


@needs_root
def test_a_file_the_server_may_not_read_still_counts_against_the_call_budget():
    # §7.3 step 2 sums what resolved: a mode-0 file resolves and has a size, and only its read fails, so four
    # readable mebibytes and one locked one are over the 4 MiB budget, as five readable ones are.
    root = world_readable_dir()
    skill = write_skill(root, "locked", files={f"r{index}.bin": b"r" * MIB for index in range(5)})
    (skill / "r4.bin").chmod(0)
    try:
        deployment = deployment_for({"SKILLS_DIR": str(root)})

        def read_over_budget():
            try:
                tools.skill_file(deployment, "locked", [f"r{index}.bin" for index in range(5)])
            except ToolFailure as failure:
                return failure.text()
            return None

        refused = as_unprivileged(read_over_budget)
    finally:
        shutil.rmtree(root)
    assert refused is not None and refused.startswith("the 5 paths total 5242880 bytes to read, over this call's")


@needs_root
def test_a_file_the_server_may_not_read_counts_only_the_mebibyte_a_read_would_serve():
    # §7.3 step 1: served = min(size, 1 MiB) for a locked file too, so three readable mebibytes and a locked 2 MiB
    # file are exactly the 4 MiB budget: the call is answered, the locked file failing only its own entry.
    root = world_readable_dir()
    files = {**{f"r{index}.bin": b"r" * MIB for index in range(3)}, "big.bin": b"b" * (2 * MIB)}
    skill = write_skill(root, "locked", files=files)
    (skill / "big.bin").chmod(0)
    try:
        deployment = deployment_for({"SKILLS_DIR": str(root)})
        read = as_unprivileged(lambda: tools.skill_file(deployment, "locked", ["r0.bin", "r1.bin", "r2.bin", "big.bin"]))
    finally:
        shutil.rmtree(root)
    assert [entry.get("size") for entry in read["files"]] == [MIB, MIB, MIB, None]
    assert read["files"][3] == {"path": "big.bin", "error": '"big.bin" could not be read: Permission denied'}


def test_a_read_error_in_pass_2_fails_only_its_own_entry(root, files_skill, monkeypatch):
    # §7.3 step 3: a file that resolved in pass 1 can still fail to read (EIO on a failing disk); that becomes
    # its entry's error and the other files are still served.
    import errno

    real_read = tools.read_capped_fd
    calls = []

    def failing_first_read(fd, max_bytes, status):
        calls.append(fd)
        if len(calls) == 1:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_read(fd, max_bytes, status)

    monkeypatch.setattr(tools, "read_capped_fd", failing_first_read)
    read = tools.skill_file(deployment_for({"SKILLS_DIR": str(root)}), "files", ["notes.md", "sub/inner.txt"])
    assert read["files"][0] == {"path": "notes.md", "error": '"notes.md" could not be read: Input/output error'}
    assert read["files"][1]["content"] == "inner\n"

# --- bad input: clear isError, the server keeps serving (§5.3) ----------------------------------------------


@pytest.mark.parametrize(
    ("tool", "arguments", "expected"),
    [
        ("skill_load", {"name": 7}, 'invalid arguments for skill_load: "name" must be a string, not a number'),
        ("skill_load", {"name": ""}, 'invalid arguments for skill_load: "name" must not be empty'),
        ("skill_load", {"name": None}, 'invalid arguments for skill_load: "name" must be a string, not null'),
        ("skill_load", {}, 'invalid arguments for skill_load: "name" is required'),
        ("skill_file", {"name": "files", "paths": "notes.md"}, 'invalid arguments for skill_file: "paths" must be an array, not a string'),
        ("skill_file", {"name": "files", "paths": []}, 'invalid arguments for skill_file: "paths" must have at least 1 item(s)'),
        ("skill_file", {"name": "files", "paths": ["notes.md", 3]}, 'invalid arguments for skill_file: "paths[1]" must be a string, not a number'),
        ("skill_file", {"name": "files", "paths": ["notes.md", ""]}, 'invalid arguments for skill_file: "paths[1]" must not be empty'),
        ("skill_file", {"name": ["files"], "paths": ["notes.md"]}, 'invalid arguments for skill_file: "name" must be a string, not an array'),
        ("skill_file", {"name": "files"}, 'invalid arguments for skill_file: "paths" is required'),
        ("skill_file", {"name": "files", "paths": ["a"] * 9}, 'invalid arguments for skill_file: "paths" must have at most 8 items (got 9)'),
        ("skill_list", {"verbose": True}, 'invalid arguments for skill_list: "verbose" is not an accepted argument (accepted: none)'),
        ("skill_file", {"name": "files", "path": "notes.md", "paths": ["notes.md"]}, 'invalid arguments for skill_file: "path" is not an accepted argument (accepted: name, paths)'),
        ("skill_file", {"name": "nope", "paths": ["notes.md"]}, 'no skill named "nope"\n\nHint: This server serves: files.'),
    ],
)
async def test_bad_input_is_a_clear_error_and_the_next_call_works(root, files_skill, era, tool, arguments, expected):
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        result = await call(client, tool, arguments)
        assert result.is_error is True
        assert [item.type for item in result.content] == ["text"]
        assert error_text(result) == expected
        read = payload(await call(client, "skill_file", {"name": "files", "paths": ["sub/inner.txt"]}))
        assert read["files"][0]["content"] == "inner\n"


async def test_unusable_paths_fail_their_own_entries_with_the_exact_reason(root, files_skill, era):
    refused = {
        "": None,  # rejected by the schema before the path check
        "scripts/../../x": 'it has a ".." segment',
        "./ok.js": 'it has a "." segment',
        "scripts//ok.js": 'it has an empty segment (leading, trailing or doubled "/")',
        "scripts\\ok.js": "it contains a backslash",
        "C:\\windows": "it contains a backslash",
        "%2e%2e/x": "it contains a percent escape",
        "a\0b.png": "it contains a NUL byte",
        "  ": "it has a whitespace-only segment",
        "scripts/": 'it has an empty segment (leading, trailing or doubled "/")',
        "x" * 1025: "it is longer than 1024 characters",
    }
    paths = [path for path, reason in refused.items() if reason is not None]
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        first = payload(await call(client, "skill_file", {"name": "files", "paths": paths[:8]}))
        second = payload(await call(client, "skill_file", {"name": "files", "paths": paths[8:]}))
    entries = first["files"] + second["files"]
    for path, entry in zip(paths, entries, strict=True):
        shown = path if len(path) <= 120 else path[:120] + "…"  # §6.1 cuts the path in the message, not the entry's
        assert entry == {"path": path, "error": f"path {json.dumps(shown, ensure_ascii=False)} is not usable: {refused[path]}"}


async def test_a_symlink_planted_after_boot_is_refused(root, files_skill, tmp_path, era):
    deployment = deployment_for({"SKILLS_DIR": str(root)})
    secret = tmp_path / "secret.txt"
    secret.write_text("secret\n")
    os.symlink(secret, os.path.join(files_skill, "planted.txt"))
    os.symlink(tmp_path, os.path.join(files_skill, "dirlink"))
    async with connect(deployment, era) as client:
        read = payload(await call(client, "skill_file", {"name": "files", "paths": ["planted.txt", "dirlink/secret.txt"]}))
    assert read["files"] == [
        {"path": "planted.txt", "error": "\"planted.txt\" resolves outside the skill's own directory"},
        {"path": "dirlink/secret.txt", "error": "\"dirlink/secret.txt\" resolves outside the skill's own directory"},
    ]


async def test_an_inside_link_and_a_file_added_after_boot_are_readable(root, files_skill, era):
    deployment = deployment_for({"SKILLS_DIR": str(root)})
    os.symlink("notes.md", os.path.join(files_skill, "alias.md"))
    async with connect(deployment, era) as client:
        (entry,) = payload(await call(client, "skill_file", {"name": "files", "paths": ["alias.md"]}))["files"]
    assert entry["content"] == "# Notes\n  indented\ttab  \n"
    assert entry["mediaType"] == "text/markdown"


ANY_CODE_POINT = st.characters(codec=None, exclude_categories=())
# hypothesis draws no surrogate even so; a root path's non-UTF-8 byte is one
LONE_SURROGATE = st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.text(ANY_CODE_POINT | LONE_SURROGATE),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=8), inner, max_size=5),
    max_leaves=30,
)


@given(JSON_VALUES)
@settings(max_examples=300, deadline=None)
def test_minified_writes_what_json_dumps_writes_and_always_utf8(value) -> None:
    # Tool results carry no floats; everything else they can carry is generated here. A lone surrogate (a root
    # path's non-UTF-8 byte) goes out as its JSON escape, which reads back as the same string.
    text = minified(value)
    text.encode("utf-8")
    assert json.loads(text) == value
    dumped = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    assert text == dumped.encode("utf-8", "backslashreplace").decode("utf-8")
