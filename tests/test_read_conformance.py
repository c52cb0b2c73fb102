"""The read tools' rules at their exact boundaries, through the protocol in both eras (SPEC §5.3, §6.1, §6.4,
§7.1–7.3, §8.1): the per-file cap to the byte, the text-or-base64 decision at the cut, the call budget to the byte,
what presence "when strings" means, and the shape of every read tool's result on the wire."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from support import ERAS, connect, deployment_for, error_text, payload, write_skill
from wire import clean_environ, legacy_handshake, running

pytestmark = pytest.mark.anyio

MIB = 1024 * 1024
CAP_NOTE = "the file is {size} bytes; the first 1048576 bytes are returned"
MODERN_ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture(params=ERAS)
def era(request) -> str:
    return request.param


async def read_one(client, rel: str) -> dict:
    (entry,) = payload(await client.call_tool("skill_file", {"name": "edges", "paths": [rel]}))["files"]
    return entry


# --- §6.3/§7.3: the 1 MiB per-file cap, to the byte ------------------------------------------------------------


async def test_a_file_of_exactly_the_cap_is_whole_and_one_byte_more_is_cut(root, era):
    write_skill(root, "edges", files={"exact.txt": b"a" * MIB, "over.txt": b"a" * MIB + b"b"})
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        exact = await read_one(client, "exact.txt")
        over = await read_one(client, "over.txt")
    # not truncated: no truncationNote at all (it is there only when truncated)
    assert exact == {
        "path": "exact.txt",
        "size": MIB,
        "mediaType": "text/plain",
        "encoding": "utf-8",
        "truncated": False,
        "content": "a" * MIB,
    }
    assert over == {
        "path": "over.txt",
        "size": MIB + 1,
        "mediaType": "text/plain",
        "encoding": "utf-8",
        "truncated": True,
        "truncationNote": CAP_NOTE.format(size=MIB + 1),
        "content": "a" * MIB,
    }


# --- §6.4: text or base64 is decided on the bytes returned -----------------------------------------------------

CUT_CASES = {
    # a NUL in the last byte returned makes the read binary; one just past the cut is never seen
    "nul-last-returned.txt": (b"a" * (MIB - 1) + b"\x00" + b"a", "base64"),
    "nul-past-the-cut.txt": (b"a" * MIB + b"\x00", "utf-8"),
    # a two-byte character cut in half by the cap: no longer UTF-8, which §6.4 accepts
    "char-across-the-cut.txt": (b"a" * (MIB - 1) + "é".encode() + b"a", "base64"),
    "char-ending-at-the-cut.txt": (b"a" * (MIB - 2) + "é".encode() + b"a", "utf-8"),
    # the same rules on files under the cap
    "nul-first.txt": (b"\x00abc", "base64"),
    "invalid-last.txt": (b"abc\xc3", "base64"),
}


@pytest.mark.parametrize("rel", sorted(CUT_CASES))
async def test_text_or_base64_is_judged_on_the_bytes_returned(root, era, rel):
    data, encoding = CUT_CASES[rel]
    write_skill(root, "edges", files={rel: data})
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        entry = await read_one(client, rel)
    returned = data[:MIB]
    assert (entry["encoding"], entry["size"], entry["truncated"]) == (encoding, len(data), len(data) > MIB)
    assert entry["mediaType"] == "text/plain"
    if encoding == "utf-8":
        assert entry["content"] == returned.decode("utf-8")
    else:
        assert base64.b64decode(entry["content"], validate=True) == returned


# --- §7.3 step 2: the 4 MiB call budget, to the byte -----------------------------------------------------------


async def test_the_call_budget_allows_exactly_4_mib_served_and_refuses_one_byte_more(root, era):
    files = {f"m{index}.bin": b"\x01" * MIB for index in range(3)}
    files |= {"two-mib.bin": b"\x02" * (2 * MIB), "empty.txt": b"", "one.txt": b"1"}
    write_skill(root, "edges", files=files)
    # a file over the cap counts as the 1 MiB it would serve: 3 + 1 MiB (+ an empty file) is exactly the budget
    at_budget = ["m0.bin", "m1.bin", "m2.bin", "two-mib.bin", "empty.txt"]
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        served = payload(await client.call_tool("skill_file", {"name": "edges", "paths": at_budget}))["files"]
        refused = error_text(await client.call_tool("skill_file", {"name": "edges", "paths": [*at_budget, "one.txt"]}))
    assert [(entry["path"], entry["size"], entry["truncated"]) for entry in served] == [
        ("m0.bin", MIB, False),
        ("m1.bin", MIB, False),
        ("m2.bin", MIB, False),
        ("two-mib.bin", 2 * MIB, True),
        ("empty.txt", 0, False),
    ]
    assert refused == (
        "the 6 paths total 4194305 bytes to read, over this call's 4194304-byte limit; nothing was read"
        "\n\nHint: Ask for fewer files per call, or read the largest file alone; skill_load lists every file's size."
    )


# --- §6.1: a path of exactly 1024 characters is usable -----------------------------------------------------------


async def test_a_path_of_exactly_1024_characters_is_listed_and_served(root, era):
    directories = "/".join(["d" * 200] * 4)  # 803 characters with their separators
    at_limit = f"{directories}/{'f' * 217}.md"
    over_limit = f"{directories}/{'g' * 218}.md"
    assert (len(at_limit), len(over_limit)) == (1024, 1025)
    write_skill(root, "edges", files={at_limit: "at the limit\n", over_limit: "over it\n"})
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        listed = [entry["path"] for entry in payload(await client.call_tool("skill_load", {"name": "edges"}))["files"]]
        read = payload(await client.call_tool("skill_file", {"name": "edges", "paths": [at_limit, over_limit]}))["files"]
    assert listed == ["SKILL.md", at_limit]
    assert read[0]["content"] == "at the limit\n"
    assert read[1] == {
        "path": over_limit,
        "error": f'path "{over_limit[:120]}…" is not usable: it is longer than 1024 characters',
    }


# --- §7.1, §7.2, §8.1: description and whenToUse are there when they are strings -------------------------------


async def test_description_and_when_to_use_appear_only_as_strings(root, era):
    write_skill(root, "numbers", "name: numbers\ndescription: 42\nwhen-to-use: [a]\nwhen_to_use: Fallback.\n")
    write_skill(root, "empties", "name: empties\ndescription: ''\nwhen-to-use: ''\n")
    write_skill(root, "whenonly", "name: whenonly\nwhen-to-use: Only when.\n")
    async with connect(deployment_for({"SKILLS_DIR": str(root)}), era) as client:
        listed = {skill["name"]: skill for skill in payload(await client.call_tool("skill_list", {}))["skills"]}
        loaded = {
            name: payload(await client.call_tool("skill_load", {"name": name})) for name in ("numbers", "empties", "whenonly")
        }
        prompts = {prompt.name: prompt.description for prompt in (await client.list_prompts()).prompts}
    # a number or a list is as good as absent; the underscore spelling is the fallback for a non-string hyphenated one
    assert ("description" in listed["numbers"], listed["numbers"]["whenToUse"]) == (False, "Fallback.")
    assert ("description" in loaded["numbers"], loaded["numbers"]["whenToUse"]) == (False, "Fallback.")
    # an empty string is a string: shown as it is
    assert (listed["empties"]["description"], listed["empties"]["whenToUse"]) == ("", "")
    assert (loaded["empties"]["description"], loaded["empties"]["whenToUse"]) == ("", "")
    assert "description" not in listed["whenonly"] and "description" not in loaded["whenonly"]
    # §8.1: empty parts are dropped from the prompt's description; with nothing left, it names the skill (SPEC names
    # only the absent case; an empty description tells a client nothing either)
    assert prompts == {"empties": "The empties skill.", "numbers": "Fallback.", "whenonly": "Only when."}


# --- §5.3 on the wire: one text item, never structuredContent, in both eras --------------------------------------


@pytest.mark.parametrize("wire_era", ["legacy", "2026-07-28"])
def test_every_read_tool_answers_one_text_item_and_no_structured_content(root: Path, wire_era):
    write_skill(root, "edges", files={"notes.md": "# Notes\n"})
    calls = [
        ("skill_list", {}, False),
        ("skill_load", {"name": "edges"}, False),
        ("skill_file", {"name": "edges", "paths": ["notes.md", "missing.md"]}, False),
        ("skill_load", {"name": "nope"}, True),
        ("skill_file", {"name": "edges", "paths": ["notes.md"], "path": "notes.md"}, True),
        ("skill_file", {"name": "edges", "paths": ["notes.md"] * 9}, True),
    ]
    with running((sys.executable, "-m", "skill_mcp"), clean_environ(SKILLS_DIR=str(root))) as client:
        meta = {"_meta": MODERN_ENVELOPE} if wire_era != "legacy" else {}
        if wire_era == "legacy":
            legacy_handshake(client)
        for tool, arguments, is_error in calls:
            result = client.request("tools/call", {**meta, "name": tool, "arguments": arguments})["result"]
            assert "structuredContent" not in result, (tool, arguments)
            assert result["isError"] is is_error, (tool, arguments, result)
            (item,) = result["content"]
            assert set(item) == {"type", "text"} and item["type"] == "text"
            if is_error:  # plain text: a message, then the hint after a blank line when there is one
                with pytest.raises(json.JSONDecodeError):
                    json.loads(item["text"])
            else:  # minified JSON: one line, the compact separators, non-ASCII as itself
                value = json.loads(item["text"])
                assert item["text"] == json.dumps(value, ensure_ascii=False, separators=(",", ":"))
            expected_keys = {"content", "isError"} if wire_era == "legacy" else {"content", "isError", "resultType", "_meta"}
            assert set(result) == expected_keys, (tool, result)
