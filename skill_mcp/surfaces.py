"""The second doors (SPEC §8): one prompt per skill, one `skill://` resource per bundled file,
and the `instructions` catalog (SPEC §5.1): deployment in, JSON-able values out. Only `read_resource` touches
the file system, through the resolve check."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, unquote_to_bytes

from .deployment import Deployment
from .files import encode_content, media_type, read_capped_fd
from .limits import MAX_FILE_BYTES, SKILL_MD
from .model import Skill
from .paths import PathRefused, SkillDir
from .results import BadRequest, ToolFailure, read_error_text
from .text import fit, quoted, quoted_uri
from .tools import find_skill, no_skills_message

RESOURCES_PAGE = 500
_INSTRUCTION_SKILLS = 64
_INSTRUCTION_DESCRIPTION_CHARS = 160
_INSTRUCTIONS_MAX_CHARS = 16384


def instructions(deployment: Deployment) -> str:
    lines = [
        "This server serves Agent Skills through four tools: skill_list, skill_load, skill_file and skill_run; "
        "every skill_run asks for confirmation before anything runs."
    ]
    skills = deployment.skills
    if not skills:
        lines.append(no_skills_message(deployment))
    for skill in skills[:_INSTRUCTION_SKILLS]:
        description = " ".join((skill.description or "").splitlines())  # \r, \u2028, ... end a line too
        description = fit(description, _INSTRUCTION_DESCRIPTION_CHARS)
        lines.append(f"- {skill.name}: {description}" if description else f"- {skill.name}")
    if len(skills) > _INSTRUCTION_SKILLS:
        lines.append(f"…and {len(skills) - _INSTRUCTION_SKILLS} more skills; call skill_list to see them all.")
    return "\n".join(lines)[:_INSTRUCTIONS_MAX_CHARS]


# --- prompts ----------------------------------------------------------------------------------


def prompt_description(skill: Skill) -> str:
    parts = [part for part in (skill.description, skill.when_to_use) if part]
    return " ".join(parts) if parts else f"The {skill.name} skill."


def prompts(deployment: Deployment) -> list[dict[str, Any]]:
    return [
        {"name": skill.name, "title": skill.name, "description": prompt_description(skill)}
        for skill in deployment.skills
    ]


def prompt(deployment: Deployment, name: str) -> dict[str, Any]:
    try:
        skill = find_skill(deployment, name)
    except ToolFailure as failure:  # with the served names, as skill_load's refusal
        raise BadRequest(failure.text()) from None
    return {
        "description": prompt_description(skill),
        "messages": [{"role": "user", "content": {"type": "text", "text": skill.body}}],
    }


# --- resources --------------------------------------------------------------------------------


def resource_uri(skill_name: str, rel: str) -> str:
    return f"skill://{skill_name}/" + "/".join(quote(segment, safe="") for segment in rel.split("/"))


def _resource(skill: Skill, rel: str, size: int) -> dict[str, Any]:
    # §8.2 and SEP-2640 name a SKILL.md resource after its skill: the frontmatter name for an extension skill,
    # which §12.2 requires to equal the directory name that every other skill goes by.
    resource = {
        "uri": resource_uri(skill.name, rel),
        "name": skill.name if rel == SKILL_MD else f"{skill.name}/{rel}",
        "title": f"{skill.name}: {rel}",
        "mimeType": media_type(rel),
        "size": size,
    }
    if rel == SKILL_MD and skill.description is not None:
        resource["description"] = skill.description
    return resource


def resources_page(deployment: Deployment, cursor: str | None) -> tuple[list[dict[str, Any]], str | None]:
    total = sum(len(skill.manifest) for skill in deployment.skills)
    start = page_start(cursor, total, RESOURCES_PAGE)
    page: list[dict[str, Any]] = []
    offset = 0
    for skill in deployment.skills:
        count = len(skill.manifest)
        if offset + count > start and len(page) < RESOURCES_PAGE:
            for entry in skill.manifest[max(0, start - offset) :]:
                if len(page) == RESOURCES_PAGE:
                    break
                page.append(_resource(skill, entry.path, entry.size))
        offset += count
    end = start + len(page)
    return page, (str(end) if end < total else None)


def page_start(cursor: str | None, total: int, page_size: int) -> int:
    """Cursors are the decimal offset of a page boundary; anything else is unknown."""
    if cursor is None:
        return 0
    # "²" is a digit to Python; a cursor longer than any offset is unknown before int() refuses its 4301 digits.
    if cursor.isascii() and cursor.isdigit() and len(cursor) <= len(str(total)) and cursor == str(int(cursor)):
        start = int(cursor)
        if 0 < start < total and start % page_size == 0:
            return start
    raise BadRequest(f"unknown cursor {quoted(cursor)}; start again without a cursor")


def refuse_cursor(cursor: str | None) -> None:
    """A list answered in one page (tools, prompts, templates) knows no cursor."""
    if cursor is not None:
        raise BadRequest(f"unknown cursor {quoted(cursor)}; this list has a single page, request it without a cursor")


RESOURCE_TEMPLATE = {
    "uriTemplate": "skill://{skill}/{+path}",
    "name": "skill-file",
    "title": "A bundled file of a skill",
    "description": "Any file listed by skill_load, addressed by skill name and relative path.",
}


def split_skill_uri(uri: str) -> tuple[str, str]:
    """`skill://<name>/<path>` → (name, decoded relative path); the path is decoded once, strictly."""
    if not uri.startswith("skill://"):
        raise BadRequest(f"{quoted_uri(uri)} is not a skill:// URI; use skill://<skill>/<path> as listed by resources/list")
    name, slash, encoded = uri[len("skill://") :].partition("/")
    if not name or not slash:
        raise BadRequest(f"{quoted_uri(uri)} names no file; use skill://<skill>/<path> as listed by resources/list")
    try:
        rel = unquote_to_bytes(encoded).decode("utf-8")
    except UnicodeError:  # bytes that are not UTF-8, or a lone surrogate that is no character at all
        raise BadRequest(f"{quoted_uri(uri)} does not decode to a UTF-8 path") from None
    return name, rel


def read_resource(deployment: Deployment, uri: str) -> dict[str, Any]:
    name, rel = split_skill_uri(uri)
    try:
        skill = find_skill(deployment, name)
        with SkillDir(skill.real_dir).opened(rel) as (fd, status):
            read = read_capped_fd(fd, MAX_FILE_BYTES, status)
    except ToolFailure as failure:  # no such skill: skill_file's whole-call refusal, served names included
        raise BadRequest(failure.text()) from None
    except PathRefused as refused:  # as skill_file's entry for that path
        raise BadRequest(refused.message) from None
    except OSError as error:
        raise BadRequest(read_error_text(rel, error)) from None
    encoding, content = encode_content(read.data)
    contents: dict[str, Any] = {"uri": uri, "mimeType": media_type(rel)}
    contents["text" if encoding == "utf-8" else "blob"] = content
    if read.truncated:
        contents["_meta"] = {"skill-mcp/truncated": True, "skill-mcp/size": read.size}
    return {"contents": [contents]}
