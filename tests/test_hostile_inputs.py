"""Hostile files and paths through the protocol, in both eras (SPEC §6, §7.3, §8.2, §12.3): what a client reads
when a skill holds link loops, names that URIs must escape, Unicode normalization twins, bytes that are not
UTF-8, or files that change between the listing and the read. skill_file and resources/read must agree (§8.2)."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import sys
import unicodedata
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp.shared.exceptions import MCPError
from pydantic import TypeAdapter
from support import ERAS, connect, deployment_for, fails_after, payload, write_skill
from wire import clean_environ, legacy_handshake, running, tool_payload

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
INVALID_PARAMS = -32602
_RAW = TypeAdapter(dict[str, Any])
NFC = unicodedata.normalize("NFC", "café.md")
NFD = unicodedata.normalize("NFD", "café.md")


@pytest.fixture(params=ERAS)
def era(request) -> str:
    return request.param


async def extension(client: Any, method: str, **params: Any) -> dict[str, Any]:
    return await client.session.send_request(types.Request[dict[str, Any], str](method=method, params=params), _RAW)


async def read_file(client: Any, rel: str) -> dict[str, Any]:
    (entry,) = payload(await client.call_tool("skill_file", {"name": "alpha", "paths": [rel]}))["files"]
    return entry


async def read_uri(client: Any, uri: str) -> dict[str, Any]:
    (contents,) = (await client.read_resource(uri, cache_mode="bypass")).model_dump(by_alias=True, exclude_none=True)[
        "contents"
    ]
    return contents


async def refused_uri(client: Any, uri: str) -> str:
    with pytest.raises(MCPError) as raised:
        await client.read_resource(uri, cache_mode="bypass")
    assert raised.value.error.code == INVALID_PARAMS
    return raised.value.error.message


# --- links inside a skill -----------------------------------------------------------------------------------


@pytest.fixture
def linked(root: Path, tmp_path: Path) -> Path:
    skill = write_skill(root, "alpha", files={"docs/guide.md": "guide\n"})
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "secret.txt").write_text("secret\n")
    os.symlink("loop-b", skill / "loop-a")
    os.symlink("loop-a", skill / "loop-b")
    os.symlink(".", skill / "self")
    os.symlink("docs", skill / "docs-again")
    os.symlink(tmp_path / "outside", skill / "out")
    os.symlink("nowhere", skill / "broken")
    return skill


# (path, what skill_file's entry and resources/read both say: the content, or the error message)
LINK_CASES = [
    ("loop-a", '"loop-a" is not a file in this skill'),
    ("loop-a/guide.md", '"loop-a/guide.md" is not a file in this skill'),
    ("self/self/docs/guide.md", "guide\n"),
    ("docs-again/guide.md", "guide\n"),
    ("self", '"self" is not a regular file'),
    ("out/secret.txt", "\"out/secret.txt\" resolves outside the skill's own directory"),
    ("out", "\"out\" resolves outside the skill's own directory"),
    ("broken", '"broken" is not a file in this skill'),
    ("docs/guide.md/below", '"docs/guide.md/below" is not a file in this skill'),
]


@pytest.mark.parametrize(("rel", "expected"), LINK_CASES)
async def test_links_inside_a_skill_read_alike_through_skill_file_and_resources(linked, era, rel, expected):
    is_error = expected.startswith('"')
    async with connect(deployment_for({"SKILLS_DIR": str(linked.parent)}), era) as client:
        entry = await read_file(client, rel)
        if is_error:
            assert entry == {"path": rel, "error": expected}
            assert await refused_uri(client, f"skill://alpha/{rel}") == expected
        else:
            assert entry["content"] == expected and entry["encoding"] == "utf-8"
            assert (await read_uri(client, f"skill://alpha/{rel}"))["text"] == expected


async def test_links_are_neither_listed_nor_digested_and_leave_the_skill_in_the_extension(linked, era):
    async with connect(deployment_for({"SKILLS_DIR": str(linked.parent)}), era) as client:
        listed = [resource.uri for resource in (await client.list_resources()).resources]
        assert listed == ["skill://alpha/SKILL.md", "skill://alpha/docs/guide.md"]
        got = await extension(client, "skills/get", uri="skill://alpha/SKILL.md")
        assert [resource["uri"] for resource in got["skill"]["resources"]] == listed
        children = await extension(client, "resources/directory/read", uri="skill://alpha")
        assert [child["uri"] for child in children["resources"]] == ["skill://alpha/SKILL.md", "skill://alpha/docs"]


@pytest.mark.parametrize(
    ("rel", "expected"),
    [
        ("x" * 300, f'"{"x" * 300}" is not a file in this skill'),  # a segment over the file system's 255 bytes
        ("é" * 1024, f'"{"é" * 1024}" is not a file in this skill'),  # 1024 characters: the string check passes
        ("é" * 1025, f'path "{"é" * 120}…" is not usable: it is longer than 1024 characters'),
    ],
)
async def test_paths_too_long_for_the_file_system_are_no_file(linked, era, rel, expected):
    async with connect(deployment_for({"SKILLS_DIR": str(linked.parent)}), era) as client:
        assert await read_file(client, rel) == {"path": rel, "error": expected}
        assert await refused_uri(client, "skill://alpha/" + "%C3%A9" * rel.count("é") + "x" * rel.count("x")) == expected


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        ("a%00b", 'path "a\\u0000b" is not usable: it contains a NUL byte'),
        ("docs%5Cguide.md", 'path "docs\\\\guide.md" is not usable: it contains a backslash'),
        ("%2Fetc%2Fpasswd", 'path "/etc/passwd" is not usable: it has an empty segment (leading, trailing or doubled "/")'),
        ("docs/%2E/guide.md", 'path "docs/./guide.md" is not usable: it has a "." segment'),
        ("docs/%20%09/guide.md", 'path "docs/ \\t/guide.md" is not usable: it has a whitespace-only segment'),
        ("docs%2Fguide.md", None),  # "/" decoded once is a separator, as the same path given to skill_file
    ],
)
async def test_escapes_in_a_resource_uri_are_decoded_once_then_checked_as_skill_file_would(linked, era, encoded, expected):
    async with connect(deployment_for({"SKILLS_DIR": str(linked.parent)}), era) as client:
        if expected is None:
            assert (await read_uri(client, f"skill://alpha/{encoded}"))["text"] == "guide\n"
        else:
            assert await refused_uri(client, f"skill://alpha/{encoded}") == expected


# --- names a URI must escape, and normalization twins --------------------------------------------------------


ODD_FILES = {
    NFC: "composed\n",
    NFD: "decomposed\n",
    "q?x.txt": "question\n",
    "h#x.txt": "hash\n",
    "line\nbreak.txt": "newline\n",
    "sp ace/~a+b=c.txt": "deep\n",
    ".hidden": "hidden\n",
}
ODD_URIS = {
    NFC: "skill://alpha/caf%C3%A9.md",
    NFD: "skill://alpha/cafe%CC%81.md",
    "q?x.txt": "skill://alpha/q%3Fx.txt",
    "h#x.txt": "skill://alpha/h%23x.txt",
    "line\nbreak.txt": "skill://alpha/line%0Abreak.txt",
    "sp ace/~a+b=c.txt": "skill://alpha/sp%20ace/~a%2Bb%3Dc.txt",
    ".hidden": "skill://alpha/.hidden",
}


async def test_odd_names_and_normalization_twins_are_each_their_own_resource(root, era):
    skill = write_skill(root, "alpha", files=ODD_FILES)
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        listed = {resource.uri: resource for resource in (await client.list_resources()).resources}
        assert set(listed) == {"skill://alpha/SKILL.md", *ODD_URIS.values()}
        got = await extension(client, "skills/get", uri="skill://alpha/SKILL.md")
        digests = {resource["uri"]: resource["digest"] for resource in got["skill"]["resources"]}
        for rel, content in ODD_FILES.items():
            uri = ODD_URIS[rel]
            assert listed[uri].name == f"alpha/{rel}"
            assert (await read_uri(client, uri))["text"] == content
            assert (await read_file(client, rel))["content"] == content
            assert digests[uri] == "sha256:" + hashlib.sha256((skill / rel).read_bytes()).hexdigest()
        # a "?" or "#" left unescaped is no query or fragment here: the path is the name as written
        assert (await read_uri(client, "skill://alpha/q?x.txt"))["text"] == "question\n"
        children = await extension(client, "resources/directory/read", uri="skill://alpha/sp%20ace")
        assert children["resources"] == [
            {"uri": ODD_URIS["sp ace/~a+b=c.txt"], "name": "~a+b=c.txt", "mimeType": "text/plain", "size": 5}
        ]


# --- contents that are not UTF-8 -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "encoding"),
    [
        (b"\xef\xbb\xbfbom\n", "utf-8"),  # a byte order mark is a character
        (b"\xed\xa0\x80", "base64"),  # an encoded surrogate (CESU-8) is no UTF-8
        (b"\xc0\x80", "base64"),  # an overlong NUL
        (b"tab\tand\x01control", "utf-8"),
        (b"text\x00nul", "base64"),
        ("\ufffe\uffff".encode(), "utf-8"),  # noncharacters are still UTF-8
    ],
)
async def test_bytes_come_back_exact_as_text_only_when_strict_utf8_without_nul(root, era, data, encoding):
    write_skill(root, "alpha", files={"data.txt": data})
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        entry = await read_file(client, "data.txt")
        contents = await read_uri(client, "skill://alpha/data.txt")
    assert entry["encoding"] == encoding
    if encoding == "utf-8":
        assert entry["content"].encode() == data and contents["text"].encode() == data and "blob" not in contents
    else:
        assert base64.b64decode(entry["content"]) == data == base64.b64decode(contents["blob"]) and "text" not in contents


# --- files that change between the listing and the read ------------------------------------------------------


async def test_files_changed_after_boot_are_read_as_they_are_now(root, tmp_path, era):
    skill = write_skill(
        root, "alpha", files={"grown.txt": "abc", "shrunk.txt": "x" * 100, "gone.txt": "g", "piped.txt": "p", "swapped.txt": "s"}
    )
    deployment = deployment_for({"SKILLS_DIR": str(root)})
    (skill / "grown.txt").write_bytes(b"g" * (2 * MIB + 5))
    (skill / "shrunk.txt").write_text("y")
    (skill / "gone.txt").unlink()
    (skill / "piped.txt").unlink()
    os.mkfifo(skill / "piped.txt")
    (tmp_path / "secret.txt").write_text("secret\n")
    (skill / "swapped.txt").unlink()
    os.symlink(tmp_path / "secret.txt", skill / "swapped.txt")
    async with connect(deployment, era) as client:
        sizes = {resource.uri: resource.size for resource in (await client.list_resources()).resources}
        assert sizes["skill://alpha/grown.txt"] == 3  # the listing is the boot-time manifest
        with fails_after(10):
            read = payload(
                await client.call_tool(
                    "skill_file", {"name": "alpha", "paths": ["grown.txt", "shrunk.txt", "gone.txt", "piped.txt", "swapped.txt"]}
                )
            )["files"]
            grown = await read_uri(client, "skill://alpha/grown.txt")
            assert await refused_uri(client, "skill://alpha/piped.txt") == '"piped.txt" is not a regular file'
        assert await refused_uri(client, "skill://alpha/swapped.txt") == "\"swapped.txt\" resolves outside the skill's own directory"
        # the grown file's digest could not be checked against a 1 MiB read: the skill's resources are "dynamic"
        got = await extension(client, "skills/get", uri="skill://alpha/SKILL.md")
    assert read[0] == {
        "path": "grown.txt",
        "size": 2 * MIB + 5,
        "mediaType": "text/plain",
        "encoding": "utf-8",
        "truncated": True,
        "truncationNote": f"the file is {2 * MIB + 5} bytes; the first 1048576 bytes are returned",
        "content": "g" * MIB,
    }
    assert (read[1]["size"], read[1]["content"], read[1]["truncated"]) == (1, "y", False)
    assert read[2:] == [
        {"path": "gone.txt", "error": '"gone.txt" is not a file in this skill'},
        {"path": "piped.txt", "error": '"piped.txt" is not a regular file'},
        {"path": "swapped.txt", "error": "\"swapped.txt\" resolves outside the skill's own directory"},
    ]
    assert grown["_meta"] == {"skill-mcp/truncated": True, "skill-mcp/size": 2 * MIB + 5} and len(grown["text"]) == MIB
    assert got["skill"]["resources"] == "dynamic"
    assert "secret" not in json.dumps(read)


# --- the same over real stdio ---------------------------------------------------------------------------------


MODERN_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.mark.parametrize("wire_era", ["legacy", "2026-07-28"])
def test_hostile_reads_over_stdio_are_answered_and_the_session_goes_on(linked, wire_era):
    (linked / NFD).write_text("decomposed\n")  # after boot: readable, though not listed
    with running((sys.executable, "-m", "skill_mcp"), clean_environ(SKILLS_DIR=str(linked.parent))) as client:
        meta = {"_meta": MODERN_ENVELOPE} if wire_era != "legacy" else {}
        if wire_era == "legacy":
            legacy_handshake(client)

        def error(method: str, **params: Any) -> dict[str, Any]:
            return client.request(method, {**meta, **params})["error"]

        for uri, message in [
            ("skill://alpha/a%00b", 'path "a\\u0000b" is not usable: it contains a NUL byte'),
            ("skill://alpha/%FF", '"skill://alpha/%FF" does not decode to a UTF-8 path'),
            ("skill://alpha/loop-a", '"loop-a" is not a file in this skill'),
            ("skill://alpha/out/secret.txt", "\"out/secret.txt\" resolves outside the skill's own directory"),
        ]:
            assert error("resources/read", uri=uri) == {"code": INVALID_PARAMS, "message": message}
        assert error("skills/get", uri="skill://alpha/loop-a") == {
            "code": INVALID_PARAMS,
            "message": 'no skill is served at "skill://alpha/loop-a"; skills/list shows the URI of every skill',
        }
        paths = ["self/docs/guide.md", "loop-a", "out/secret.txt", "docs/guide.md", NFD, "docs/guide.md", "a\\b", "x" * 300]
        answer = client.request("tools/call", {**meta, "name": "skill_file", "arguments": {"name": "alpha", "paths": paths}})
        files = tool_payload(answer)["files"]
        assert [entry["path"] for entry in files] == paths
        assert [entry.get("content") for entry in files] == ["guide\n", None, None, "guide\n", "decomposed\n", "guide\n", None, None]
        assert [entry["error"] for entry in files if "error" in entry] == [
            '"loop-a" is not a file in this skill',
            "\"out/secret.txt\" resolves outside the skill's own directory",
            'path "a\\\\b" is not usable: it contains a backslash',
            f'"{"x" * 300}" is not a file in this skill',
        ]
        read = client.request("resources/read", {**meta, "uri": "skill://alpha/" + NFD.replace("e\u0301", "e%CC%81")})
        assert read["result"]["contents"][0]["text"] == "decomposed\n"
        client.close_stdin()
        assert client.wait() == 0
    for line in client.stdout_lines:
        assert json.loads(line)["jsonrpc"] == "2.0"
