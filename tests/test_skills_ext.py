"""The Skills extension (SPEC §12) through the SDK client, on both eras."""

from __future__ import annotations

import hashlib
import os
import tracemalloc
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter
from support import ERAS, connect, deployment_for, payload, write_skill

from skill_mcp import skills_ext
from skill_mcp.skills_ext import EXTENSION_ID

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
_RAW = TypeAdapter(dict[str, Any])


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


async def call(client: Any, method: str, **params: Any) -> dict[str, Any]:
    return await client.session.send_request(types.Request[dict[str, Any], str](method=method, params=params), _RAW)


async def refused(client: Any, method: str, **params: Any) -> MCPError:
    with pytest.raises(MCPError) as caught:
        await call(client, method, **params)
    return caught.value


def sha256_of(path: str) -> str:
    with open(path, "rb") as handle:
        return "sha256:" + hashlib.sha256(handle.read()).hexdigest()


def plain_skill(root: str, name: str, files: dict[str, str | bytes] | None = None) -> str:
    return str(write_skill(root, name, files=files or {"notes.txt": "notes\n"}))


async def get_resources(deployment: Any, era: str, name: str) -> Any:
    async with connect(deployment, era) as client:
        answer = await call(client, "skills/get", uri=f"skill://{name}/SKILL.md")
    return answer["skill"]["resources"]


# --- declaration and both eras -----------------------------------------------------------------


async def test_extension_is_declared_on_2026_07_28(tmp_path: Any) -> None:
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), "auto") as client:
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.extensions == {EXTENSION_ID: {"directoryRead": True}}
    assert EXTENSION_ID == "io.modelcontextprotocol/skills"  # §12.1's id, spelled out


@pytest.mark.parametrize("era", ERAS)
async def test_methods_answer_on_both_eras(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "alpha", {"scripts/run.py": "print(1)\n"})
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        listed = await call(client, "skills/list")
        got = await call(client, "skills/get", uri="skill://alpha/SKILL.md")
        directory = await call(client, "resources/directory/read", uri="skill://alpha")
    assert [entry["uri"] for entry in listed["skills"]] == ["skill://alpha/SKILL.md"]
    assert "nextCursor" not in listed
    assert (listed["ttlMs"], listed["cacheScope"]) == (60000, "private")
    assert (got["ttlMs"], got["cacheScope"]) == (60000, "private")
    assert (directory["ttlMs"], directory["cacheScope"]) == (60000, "private")
    assert got["skill"] == listed["skills"][0]
    assert [child["name"] for child in directory["resources"]] == ["SKILL.md", "scripts"]
    if era == "auto":
        assert listed["resultType"] == "complete"


# --- entries and digests -----------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_digests_and_sizes_match_an_independent_sha256(tmp_path: Any, era: str) -> None:
    files = {"a.txt": "alpha\n", "bin/blob.dat": bytes(range(256)) * 300, "docs/deep/é x.md": "# deep\n", "empty": b""}
    directory = plain_skill(str(tmp_path), "alpha", files)
    resources = await get_resources(deployment_for({"SKILLS_DIR": str(tmp_path)}), era, "alpha")
    expected = [
        ("skill://alpha/SKILL.md", "SKILL.md"),
        ("skill://alpha/a.txt", "a.txt"),
        ("skill://alpha/bin/blob.dat", "bin/blob.dat"),
        ("skill://alpha/docs/deep/%C3%A9%20x.md", "docs/deep/é x.md"),
        ("skill://alpha/empty", "empty"),
    ]
    assert resources == [
        {"uri": uri, "digest": sha256_of(os.path.join(directory, rel)), "size": os.path.getsize(os.path.join(directory, rel))}
        for uri, rel in expected
    ]
    assert resources[4]["digest"] == "sha256:" + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"


@pytest.mark.parametrize("era", ERAS)
async def test_a_file_changed_after_boot_yields_its_new_digest(tmp_path: Any, era: str) -> None:
    directory = plain_skill(str(tmp_path), "alpha", {"notes.txt": "before\n"})
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    with open(os.path.join(directory, "notes.txt"), "w") as handle:
        handle.write("after, and longer\n")
    resources = await get_resources(deployment, era, "alpha")
    assert resources[1] == {
        "uri": "skill://alpha/notes.txt",
        "digest": "sha256:" + hashlib.sha256(b"after, and longer\n").hexdigest(),
        "size": 18,
    }


@pytest.mark.parametrize("era", ERAS)
async def test_a_symlink_planted_after_boot_is_refused_not_followed(tmp_path: Any, era: str) -> None:
    root = tmp_path / "root"
    directory = plain_skill(str(root), "alpha", {"notes.txt": "inside\n"})
    outside = tmp_path / "secret.txt"
    outside.write_text("outside\n")
    deployment = deployment_for({"SKILLS_DIR": str(root)})
    os.remove(os.path.join(directory, "notes.txt"))
    os.symlink(outside, os.path.join(directory, "notes.txt"))
    assert await get_resources(deployment, era, "alpha") == "dynamic"


@pytest.mark.parametrize("era", ERAS)
async def test_an_in_skill_symlinked_skill_md_is_added_to_the_resources(tmp_path: Any, era: str) -> None:
    directory = plain_skill(str(tmp_path), "alpha", {"docs/real.md": "---\nname: alpha\ndescription: Linked.\n---\nB\n"})
    os.remove(os.path.join(directory, "SKILL.md"))
    os.symlink("docs/real.md", os.path.join(directory, "SKILL.md"))
    resources = await get_resources(deployment_for({"SKILLS_DIR": str(tmp_path)}), era, "alpha")
    real = os.path.join(directory, "docs/real.md")
    assert resources == [
        {"uri": "skill://alpha/SKILL.md", "digest": sha256_of(real), "size": os.path.getsize(real)},
        {"uri": "skill://alpha/docs/real.md", "digest": sha256_of(real), "size": os.path.getsize(real)},
    ]


@pytest.mark.parametrize("era", ERAS)
async def test_frontmatter_is_echoed_as_json_with_iso_dates(tmp_path: Any, era: str) -> None:
    frontmatter = (
        "name: alpha\ndescription: Dated.\nmetadata:\n  created: 2024-01-02\n  at: 2024-01-02T03:04:05\n"
        "  1: one\n  ratio: .nan\n  tags: [a, b]\n"
    )
    write_skill(str(tmp_path), "alpha", frontmatter)
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        entry = (await call(client, "skills/list"))["skills"][0]
    assert entry["frontmatter"] == {
        "name": "alpha",
        "description": "Dated.",
        "metadata": {"created": "2024-01-02", "at": "2024-01-02T03:04:05", "1": "one", "ratio": ".nan", "tags": ["a", "b"]},
    }


@pytest.mark.parametrize("era", ERAS)
async def test_frontmatter_echo_keeps_the_mcp_host_block(tmp_path: Any, era: str) -> None:
    # §12.3: `frontmatter` is the whole parsed frontmatter, every key the author wrote.
    frontmatter = "name: alpha\ndescription: D.\nmcp-host:\n  version: 1\n  egress: [api.example]\n"
    write_skill(str(tmp_path), "alpha", frontmatter)
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        entry = (await call(client, "skills/list"))["skills"][0]
    assert entry["frontmatter"] == {"name": "alpha", "description": "D.", "mcp-host": {"version": 1, "egress": ["api.example"]}}


# --- "dynamic" ---------------------------------------------------------------------------------


def many_files(count: int, size: int = 1) -> dict[str, str | bytes]:
    return {f"f/{index:04d}": b"x" * size for index in range(count)}


@pytest.mark.parametrize("era", ERAS)
async def test_dynamic_when_the_walk_hit_the_file_limit(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "alpha", many_files(2001))
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    assert deployment.by_name["alpha"].file_limit_hit
    assert await get_resources(deployment, era, "alpha") == "dynamic"


@pytest.mark.parametrize("era", ERAS)
async def test_dynamic_when_the_walk_hit_the_directory_cap_with_few_files(tmp_path: Any, era: str) -> None:
    # §12.3: "dynamic" whenever the walk hit file-limit, also the directory cap with a short manifest.
    skill = plain_skill(str(tmp_path), "alpha")
    for index in range(2001):
        os.mkdir(os.path.join(skill, "d", f"{index:04d}") if index else os.path.join(skill, "d"))
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    assert deployment.by_name["alpha"].file_limit_hit and len(deployment.by_name["alpha"].manifest) < 512
    assert await get_resources(deployment, era, "alpha") == "dynamic"


@pytest.mark.parametrize("era", ERAS)
async def test_dynamic_above_512_entries_and_not_at_512(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "at-limit", many_files(511))
    plain_skill(str(tmp_path), "over-limit", many_files(512))
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    assert len(await get_resources(deployment, era, "at-limit")) == 512
    assert await get_resources(deployment, era, "over-limit") == "dynamic"


def sparse(path: str, size: int) -> None:
    with open(path, "wb") as handle:
        handle.truncate(size)


def fill_to(directory: str, total: int) -> None:
    """Sparse files of at most 1 MiB each (what resources/read serves whole) until the skill holds `total` bytes."""
    used = sum(os.path.getsize(os.path.join(directory, name)) for name in ("SKILL.md", "notes.txt"))
    for index, start in enumerate(range(0, total - used, MIB)):
        sparse(os.path.join(directory, f"zeros{index:02d}.bin"), min(MIB, total - used - start))


@pytest.mark.parametrize("era", ERAS)
async def test_dynamic_when_the_manifest_total_passes_16_mib_and_not_at_16_mib(tmp_path: Any, era: str) -> None:
    for name, extra in (("at-budget", 0), ("over-budget", 1)):
        fill_to(plain_skill(str(tmp_path), name), 16 * MIB + extra)
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    at_budget = await get_resources(deployment, era, "at-budget")
    assert sum(resource["size"] for resource in at_budget) == 16 * MIB
    assert await get_resources(deployment, era, "over-budget") == "dynamic"


@pytest.mark.parametrize("era", ERAS)
async def test_dynamic_when_the_hashed_total_passes_16_mib_after_boot(tmp_path: Any, era: str) -> None:
    directory = plain_skill(str(tmp_path), "alpha", {"notes.txt": "notes\n", **{f"z{index:02d}": "" for index in range(17)}})
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    for index in range(17):  # each within what resources/read serves, 17 MiB together
        sparse(os.path.join(directory, f"z{index:02d}"), MIB)
    assert await get_resources(deployment, era, "alpha") == "dynamic"


@pytest.mark.parametrize("era", ERAS)
async def test_dynamic_when_a_file_is_larger_than_resources_read_serves(tmp_path: Any, era: str) -> None:
    # resources/read cuts a file at 1 MiB (§8.2), so a client could never check a digest of all of it (the
    # Inspector's --verify failed on one): such a skill is dynamic, at boot and when a file grows after it.
    at_cap = plain_skill(str(tmp_path), "at-cap")
    sparse(os.path.join(at_cap, "big.bin"), MIB)
    sparse(os.path.join(plain_skill(str(tmp_path), "over-cap"), "big.bin"), MIB + 1)
    grows = plain_skill(str(tmp_path), "grows")
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    sparse(os.path.join(grows, "notes.txt"), MIB + 1)
    sizes = {resource["uri"]: resource["size"] for resource in await get_resources(deployment, era, "at-cap")}
    assert sizes["skill://at-cap/big.bin"] == MIB
    assert await get_resources(deployment, era, "over-cap") == "dynamic"
    assert await get_resources(deployment, era, "grows") == "dynamic"


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("failure", ["removed", "fifo", "directory"])
async def test_dynamic_when_a_file_fails_at_request_time(tmp_path: Any, era: str, failure: str) -> None:
    directory = plain_skill(str(tmp_path), "alpha")
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    notes = os.path.join(directory, "notes.txt")
    os.remove(notes)
    if failure == "fifo":
        os.mkfifo(notes)
    elif failure == "directory":
        os.mkdir(notes)
    assert await get_resources(deployment, era, "alpha") == "dynamic"


# --- pagination and cursors --------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_skills_list_pages_walk_every_extension_skill_exactly_once(tmp_path: Any, era: str) -> None:
    names = [f"skill-{index:02d}" for index in range(37)]
    for name in names:
        plain_skill(str(tmp_path), name)
    write_skill(str(tmp_path), "skill-18b", "name: other\ndescription: Excluded.\n")
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path), "MCP_MAX_SKILLS": "64"})
    seen: list[str] = []
    pages: list[int] = []
    async with connect(deployment, era) as client:
        answer = await call(client, "skills/list")
        while True:
            # §12.4: every page carries the cache hints, and each entry is whole: uri, frontmatter, resources
            assert (answer["ttlMs"], answer["cacheScope"]) == (60000, "private")
            assert all(set(entry) == {"uri", "frontmatter", "resources"} for entry in answer["skills"])
            assert all(entry["resources"][0]["uri"] == entry["uri"] for entry in answer["skills"])
            pages.append(len(answer["skills"]))
            seen += [entry["uri"] for entry in answer["skills"]]
            if "nextCursor" not in answer:
                break
            answer = await call(client, "skills/list", cursor=answer["nextCursor"])
    assert seen == [f"skill://{name}/SKILL.md" for name in names]
    assert pages == [16, 16, 5]


@pytest.mark.parametrize("era", ERAS)
async def test_directory_pages_hold_500_children(tmp_path: Any, era: str) -> None:
    # §12.4: resources/directory/read pages 500 children at a time.
    plain_skill(str(tmp_path), "alpha", many_files(501))
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        first = await call(client, "resources/directory/read", uri="skill://alpha/f")
        second = await call(client, "resources/directory/read", uri="skill://alpha/f", cursor=first["nextCursor"])
    assert (len(first["resources"]), first["nextCursor"], len(second["resources"])) == (500, "500", 1)


@pytest.mark.parametrize("era", ERAS)
async def test_directory_children_are_sorted_by_name_not_by_path(tmp_path: Any, era: str) -> None:
    # §12.4: direct children sorted by name; the manifest's path order puts "a-b.txt" before "a/x.txt".
    plain_skill(str(tmp_path), "alpha", {"a-b.txt": "1", "a/x.txt": "2"})
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        listed = await call(client, "resources/directory/read", uri="skill://alpha")
    assert [child["name"] for child in listed["resources"]] == ["SKILL.md", "a", "a-b.txt"]


@pytest.mark.parametrize("era", ERAS)
async def test_directory_pages_walk_every_child_exactly_once(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "alpha", {**many_files(1203), "f/sub/inner.txt": "x"})
    seen: list[dict[str, Any]] = []
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        answer = await call(client, "resources/directory/read", uri="skill://alpha/f")
        while True:
            assert len(answer["resources"]) <= 500
            seen += answer["resources"]
            if "nextCursor" not in answer:
                break
            answer = await call(client, "resources/directory/read", uri="skill://alpha/f", cursor=answer["nextCursor"])
    octets = "application/octet-stream"
    files = [{"uri": f"skill://alpha/f/{i:04d}", "name": f"{i:04d}", "mimeType": octets, "size": 1} for i in range(1203)]
    assert seen == [*files, {"uri": "skill://alpha/f/sub", "name": "sub", "mimeType": "inode/directory"}]


@pytest.mark.parametrize("era", ERAS)
async def test_an_unknown_cursor_is_invalid_params(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "alpha")
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        for cursor in ("bogus", "16", "0", "-1", "1" * 5000):
            assert (await refused(client, "skills/list", cursor=cursor)).error.code == types.INVALID_PARAMS
            error = await refused(client, "resources/directory/read", uri="skill://alpha", cursor=cursor)
            assert error.error.code == types.INVALID_PARAMS
            assert "unknown cursor" in error.error.message


@pytest.mark.parametrize("era", ERAS)
async def test_a_cursor_at_the_end_of_a_full_last_page_is_unknown(tmp_path: Any, era: str) -> None:
    # Exactly 16 skills and exactly 500 children: each list is one full page with no nextCursor, so "16" and
    # "500" were never issued and must be unknown, not an empty page past the end.
    for index in range(15):
        plain_skill(str(tmp_path), f"skill-{index:02d}")
    plain_skill(str(tmp_path), "omega", {f"{index:03d}.txt": "x" for index in range(499)})  # and SKILL.md: 500
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    async with connect(deployment, era) as client:
        listed = await call(client, "skills/list")
        directory = await call(client, "resources/directory/read", uri="skill://omega")
        errors = [
            await refused(client, "skills/list", cursor="16"),
            await refused(client, "resources/directory/read", uri="skill://omega", cursor="500"),
        ]
    assert len(listed["skills"]) == 16 and "nextCursor" not in listed
    assert len(directory["resources"]) == 500 and "nextCursor" not in directory
    for error in errors:
        assert error.error.code == types.INVALID_PARAMS and "unknown cursor" in error.error.message


@pytest.mark.parametrize("era", ERAS)
async def test_dynamic_when_an_added_symlinked_skill_md_makes_513_entries(tmp_path: Any, era: str) -> None:
    # The 512-entry limit counts the resources array, which gains SKILL.md when it is an in-skill link outside the
    # manifest: 512 manifest files plus it are 513 entries.
    directory = plain_skill(str(tmp_path), "alpha", many_files(511))
    os.rename(os.path.join(directory, "SKILL.md"), os.path.join(directory, "real.md"))
    os.symlink("real.md", os.path.join(directory, "SKILL.md"))
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path)})
    assert len(deployment.by_name["alpha"].manifest) == 512
    assert await get_resources(deployment, era, "alpha") == "dynamic"


async def test_a_frontmatter_name_differing_from_the_directory_only_in_case_is_excluded(root: Any) -> None:
    # §12.2: the name must equal the directory name exactly; the extension's URI ends in the directory name.
    write_skill(root, "Alpha", "name: alpha\ndescription: Cased.\n")
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), "auto") as client:
        listed = await call(client, "skills/list")
        problems = payload(await client.call_tool("skill_list", {}))["problems"]
    assert listed["skills"] == []
    assert [problem["reason"] for problem in problems] == ["name-mismatch", "extension-excluded"]
    assert 'frontmatter name "alpha" differs from its directory name "Alpha"' in problems[1]["detail"]


@pytest.mark.parametrize("era", ERAS)
async def test_skills_list_follows_catalog_order_across_roots(tmp_path: Any, era: str) -> None:
    # §12.4: catalog order, which is root by root (as skill_list and resources/list give it), not one name sort.
    first, second = tmp_path / "first", tmp_path / "second"
    plain_skill(str(first), "zeta")
    plain_skill(str(first), "mid")
    plain_skill(str(second), "alpha")
    async with connect(deployment_for({"MCP_SKILLS_PATH": f"{first}:{second}"}), era) as client:
        listed = await call(client, "skills/list")
    assert [entry["uri"] for entry in listed["skills"]] == [
        "skill://mid/SKILL.md",
        "skill://zeta/SKILL.md",
        "skill://alpha/SKILL.md",
    ]

# --- directory resources -----------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_directory_read_lists_direct_children_by_name(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "alpha", {"scripts/run.py": "print(1)\n", "scripts/lib/util.js": "x", "b.md": "bb"})
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        scripts = await call(client, "resources/directory/read", uri="skill://alpha/scripts")
        lib = await call(client, "resources/directory/read", uri="skill://alpha/scripts/lib")
    assert scripts["resources"] == [
        {"uri": "skill://alpha/scripts/lib", "name": "lib", "mimeType": "inode/directory"},
        {"uri": "skill://alpha/scripts/run.py", "name": "run.py", "mimeType": "text/x-python", "size": 9},
    ]
    assert lib["resources"] == [
        {"uri": "skill://alpha/scripts/lib/util.js", "name": "util.js", "mimeType": "text/javascript", "size": 1}
    ]
    assert "nextCursor" not in scripts


@pytest.mark.parametrize("era", ERAS)
async def test_anything_but_a_directory_resource_is_invalid_params(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "alpha", {"scripts/run.py": "print(1)\n"})
    uris = [
        "skill://alpha/scripts/run.py",
        "skill://alpha/SKILL.md",
        "skill://alpha/",
        "skill://alpha/nothing",
        "skill://alpha/scripts/",
        "skill://alpha/../alpha",
        "skill://ghost",
        "skill://alpha/%FF",
        "file:///etc",
        "",
        "alpha",  # no skill:// scheme at all
        "alpha/scripts",
        "skill://alpha/" + "deep/" * 200 + "nothing",  # quoted whole, however long
    ]
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        for uri in uris:
            error = (await refused(client, "resources/directory/read", uri=uri)).error
            assert error.code == types.INVALID_PARAMS
            assert f'"{uri}" is not a directory resource' in error.message
        # A lone surrogate decodes to no path at all: bad input too, not an internal error.
        lone = (await refused(client, "resources/directory/read", uri="skill://alpha/a\ud800b")).error
        assert lone.code == types.INVALID_PARAMS and "is not a directory resource" in lone.message


@pytest.mark.parametrize("era", ERAS)
async def test_skills_get_refuses_anything_but_an_extension_skill_md_uri(tmp_path: Any, era: str) -> None:
    plain_skill(str(tmp_path), "alpha")
    write_skill(str(tmp_path), "mismatch", "name: other\ndescription: Excluded.\n")
    uris = [
        "skill://alpha",
        "skill://alpha/notes.txt",
        "skill://alpha/SKILL.md/",
        "skill://ghost/SKILL.md",
        "skill://mismatch/SKILL.md",
        "skill://alpha/" + "deep/" * 200 + "SKILL.md",  # §12.4: «<uri>» verbatim, however long a path it names
    ]
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        for uri in uris:
            error = (await refused(client, "skills/get", uri=uri)).error
            assert error.code == types.INVALID_PARAMS
            assert f'no skill is served at "{uri}"' in error.message
            if uri == "skill://mismatch/SKILL.md":  # served by the tools: the message says why it is left out
                assert 'in the Skills extension: its frontmatter name "other" differs' in error.message
                assert error.message.endswith('skill_load and the skill:// resources still serve "mismatch"')
        assert (await refused(client, "skills/get")).error.code == types.INVALID_PARAMS


@pytest.mark.parametrize("era", ERAS)
async def test_an_unexpected_failure_is_internal_error(tmp_path: Any, era: str, monkeypatch: Any) -> None:
    plain_skill(str(tmp_path), "alpha")

    def broken(skill: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr(skills_ext, "skill_entry", broken)
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        error = (await refused(client, "skills/list")).error
    assert error.code == types.INTERNAL_ERROR
    assert "boom" not in error.message


# --- which skills the extension carries --------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_excluded_skills_are_served_by_the_tools_only(root: Any, era: str) -> None:
    plain_skill(str(root), "alpha")
    mismatch = str(write_skill(root, "mismatch", "name: other\ndescription: Named otherwise.\n"))
    silent = str(write_skill(root, "silent", "name: silent\n"))
    nameless = str(write_skill(root, "nameless", "description: No name at all.\n"))
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        listed = await call(client, "skills/list")
        for name in ("mismatch", "silent", "nameless"):
            assert (await refused(client, "skills/get", uri=f"skill://{name}/SKILL.md")).error.code == types.INVALID_PARAMS
        tool_list = payload(await client.call_tool("skill_list", {}))
        loaded = payload(await client.call_tool("skill_load", {"name": "silent"}))
        directory = await call(client, "resources/directory/read", uri="skill://mismatch")
    assert [entry["uri"] for entry in listed["skills"]] == ["skill://alpha/SKILL.md"]
    assert [skill["name"] for skill in tool_list["skills"]] == ["alpha", "mismatch", "nameless", "silent"]
    assert loaded["name"] == "silent"
    assert [child["name"] for child in directory["resources"]] == ["SKILL.md"]
    problems = tool_list["problems"]
    excluded = {problem["path"]: problem["detail"] for problem in problems if problem["reason"] == "extension-excluded"}
    assert set(excluded) == {mismatch, silent, nameless}
    assert "its frontmatter has no string name" in excluded[nameless]
    assert "left out of skills/list" in excluded[mismatch] and '"other"' in excluded[mismatch]
    assert "description" in excluded[silent]


@pytest.mark.parametrize(
    ("name", "description", "included"),
    [
        ("a-b1", "x", True),
        ("Upper", "x", False),  # the Agent Skills name rule: lowercase ASCII letters and digits
        ("a--b", "x", False),  # hyphens only between runs
        ("a" * 64, "x", True),
        ("dotted.name", "x", False),
        ("long-description", "é" * 1024, True),  # 1024 characters, 2048 bytes: characters count
        ("too-long", "d" * 1025, False),
        ("empty", "", False),
    ],
)
async def test_extension_membership_follows_the_agent_skills_rules(root: Any, name: str, description: str, included: bool) -> None:
    write_skill(root, name, f"name: {name}\ndescription: '{description}'\n")
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), "auto") as client:
        listed = await call(client, "skills/list")
        problems = payload(await client.call_tool("skill_list", {}))["problems"]
    assert [entry["uri"] for entry in listed["skills"]] == ([f"skill://{name}/SKILL.md"] if included else [])
    assert [problem["reason"] for problem in problems] == ([] if included else ["extension-excluded"])


# --- bounded memory ----------------------------------------------------------------------------


async def allocation_growth(action: Any) -> int:
    """Peak traced allocation while `action` runs, above what was allocated before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        await action()
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()


@pytest.mark.parametrize("era", ERAS)
async def test_skills_get_streams_digests_in_bounded_memory(tmp_path: Any, era: str) -> None:
    # 16 MiB to hash, each file as large as resources/read serves, and one grown to 15 MiB after boot: none is
    # held whole.
    directory = plain_skill(str(tmp_path), "alpha", {f"part{index:02d}.bin": os.urandom(MIB) for index in range(15)})
    used = sum(os.path.getsize(os.path.join(directory, name)) for name in os.listdir(directory))
    with open(os.path.join(directory, "rest.bin"), "wb") as handle:
        handle.write(os.urandom(16 * MIB - used - 1))
    grows = plain_skill(str(tmp_path), "grows")
    answers: list[dict[str, Any]] = []

    async def get(name: str) -> None:
        answers.append(await call(client, "skills/get", uri=f"skill://{name}/SKILL.md"))

    async def read_whole_file() -> None:
        sha256_of(os.path.join(directory, "part00.bin"))

    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        with open(os.path.join(grows, "notes.txt"), "wb") as handle:
            handle.write(os.urandom(15 * MIB))
        growth = await allocation_growth(lambda: get("alpha"))
        grown_growth = await allocation_growth(lambda: get("grows"))
    assert sum(resource["size"] for resource in answers[0]["skill"]["resources"]) == 16 * MIB - 1
    assert answers[1]["skill"]["resources"] == "dynamic"
    assert max(growth, grown_growth) < MIB // 2, (growth, grown_growth)
    # The same measurement catches a whole-file read, so the bound above means something.
    assert await allocation_growth(read_whole_file) > MIB // 2


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize(
    ("method", "params", "expected"),
    [
        ("skills/get", {}, 'invalid params for skills/get: "uri" is required'),
        ("skills/get", {"uri": 5}, 'invalid params for skills/get: "uri" must be a string, not a number'),
        ("skills/list", {"cursor": []}, 'invalid params for skills/list: "cursor" must be a string, not an array'),
        ("resources/directory/read", {"uri": "skill://alpha", "cursor": {}},
         'invalid params for resources/directory/read: "cursor" must be a string, not an object'),
    ],
)
async def test_wrong_params_say_which_field_and_what_it_must_be(tmp_path: Any, era: str, method: str, params: Any,
                                                                  expected: str) -> None:
    plain_skill(str(tmp_path), "alpha")
    async with connect(deployment_for({"SKILLS_DIR": str(tmp_path)}), era) as client:
        error = (await refused(client, method, **params)).error
        assert (error.code, error.message) == (types.INVALID_PARAMS, expected)
        assert (await call(client, "skills/get", uri="skill://alpha/SKILL.md"))["skill"]  # still serving


@pytest.mark.parametrize("era", ERAS)
async def test_a_listed_uri_of_a_long_non_ascii_path_is_quoted_whole_in_refusals(root: Any, era: str) -> None:
    # 913 characters pass §6.1's 1024, but percent-encoded the URI is 5427: §12.4 wants «<uri>» verbatim.
    rel = "/".join(["é" * 100] * 9) + "/f.md"
    write_skill(root, "alpha", files={rel: "deep\n"})
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        uri = [resource.uri for resource in (await client.list_resources()).resources][1]
        assert len(uri) > 5000
        assert (await client.read_resource(uri, cache_mode="bypass")).contents[0].text == "deep\n"
        assert f'no skill is served at "{uri}";' in (await refused(client, "skills/get", uri=uri)).error.message
        not_a_directory = await refused(client, "resources/directory/read", uri=uri)
        assert f'"{uri}" is not a directory resource;' in not_a_directory.error.message
        with pytest.raises(MCPError) as undecodable:
            await client.read_resource(uri + "%FF", cache_mode="bypass")
        assert undecodable.value.error.message == f'"{uri}%FF" does not decode to a UTF-8 path'
