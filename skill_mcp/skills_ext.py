"""The MCP Skills extension (SEP-2640, SPEC §12): its methods, over the skills extension_members.py lets in."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from .deployment import Deployment
from .extension_members import exclusion_reason
from .files import media_type, sha256_fd
from .frontmatter import frontmatter_to_json
from .limits import MAX_FILE_BYTES, SKILL_MD
from .model import Skill
from .paths import PathRefused, SkillDir
from .results import BadRequest
from .surfaces import page_start, resource_uri, split_skill_uri
from .text import quoted_uri

EXTENSION_ID = "io.modelcontextprotocol/skills"

SKILLS_PAGE = 16
DIRECTORY_PAGE = 500
MAX_DIGEST_ENTRIES = 512
MAX_DIGEST_BYTES = 16777216
DYNAMIC = "dynamic"
CACHE_HINTS = {"ttlMs": 60000, "cacheScope": "private"}
DIRECTORY_MIME_TYPE = "inode/directory"
_Item = TypeVar("_Item")


# --- entries and digests (§12.3) ---------------------------------------------------------------


def extension_skills(deployment: Deployment) -> list[Skill]:
    return [skill for skill in deployment.skills if skill.name in deployment.extension_names]


def _resource_paths(skill: Skill) -> list[str]:
    """SKILL.md first when the manifest lacks it (an in-skill symlink), then the manifest in order."""
    paths = [entry.path for entry in skill.manifest]
    return paths if SKILL_MD in paths else [SKILL_MD, *paths]


def _digests(skill: Skill) -> list[dict[str, Any]] | str:
    """Each resource's digest and size, hashed now; DYNAMIC when the skill is too large to hash, a read fails, or a
    file is larger than `resources/read` serves (§8.2 cuts it at MAX_FILE_BYTES): its digest could not be checked."""
    paths = _resource_paths(skill)
    if (
        skill.file_limit_hit
        or len(paths) > MAX_DIGEST_ENTRIES
        or sum(entry.size for entry in skill.manifest) > MAX_DIGEST_BYTES
        or any(entry.size > MAX_FILE_BYTES for entry in skill.manifest)
    ):
        return DYNAMIC
    resources: list[dict[str, Any]] = []
    hashed = 0
    try:
        directory = SkillDir(skill.real_dir)
        for rel in paths:
            # Each file is capped by what resources/read serves and by the remaining budget, so hashing stops as
            # soon as one grew past the read cap since the walk, or the total passes the budget.
            with directory.opened(rel) as (fd, _):
                digest, size = sha256_fd(fd, min(MAX_FILE_BYTES, MAX_DIGEST_BYTES - hashed))
            hashed += size
            resources.append({"uri": resource_uri(skill.name, rel), "digest": f"sha256:{digest}", "size": size})
    except (PathRefused, OSError):
        return DYNAMIC
    return resources


def skill_entry(skill: Skill) -> dict[str, Any]:
    """`{uri, frontmatter, resources}`, digests computed now, streamed, through the resolve check."""
    return {
        "uri": resource_uri(skill.name, SKILL_MD),
        "frontmatter": frontmatter_to_json(skill.frontmatter),
        "resources": _digests(skill),
    }


# --- methods (§12.4) ---------------------------------------------------------------------------


def _paged(
    key: str, items: Sequence[_Item], cursor: str | None, size: int, render: Callable[[_Item], dict[str, Any]]
) -> dict[str, Any]:
    """One page of `items`, rendered only once on the page; `nextCursor` when more follow."""
    start = page_start(cursor, len(items), size)
    end = min(start + size, len(items))
    result: dict[str, Any] = {key: [render(item) for item in items[start:end]], **CACHE_HINTS}
    if end < len(items):
        result["nextCursor"] = str(end)
    return result


def skills_page(deployment: Deployment, cursor: str | None) -> dict[str, Any]:
    return _paged("skills", extension_skills(deployment), cursor, SKILLS_PAGE, skill_entry)


def get_skill(deployment: Deployment, uri: str) -> dict[str, Any]:
    for skill in extension_skills(deployment):
        if uri == resource_uri(skill.name, SKILL_MD):
            return {"skill": skill_entry(skill), **CACHE_HINTS}
    left_out = next((skill for skill in deployment.skills if uri == resource_uri(skill.name, SKILL_MD)), None)
    if left_out is not None:  # served by the tools, but not a skill of the extension: say why
        raise BadRequest(
            f"no skill is served at {quoted_uri(uri)} in the Skills extension: {exclusion_reason(left_out)}; "
            f'skill_load and the skill:// resources still serve "{left_out.name}"'
        )
    raise BadRequest(f"no skill is served at {quoted_uri(uri)}; skills/list shows the URI of every skill")


def _directory(deployment: Deployment, uri: str) -> tuple[Skill, str]:
    """The skill and directory path ("" for the skill itself) that `uri` names; BadRequest otherwise."""
    refusal = BadRequest(
        f"{quoted_uri(uri)} is not a directory resource; "
        "use skill://<skill> or skill://<skill>/<directory> where the directory holds listed files"
    )
    if not uri.startswith("skill://"):
        raise refusal
    name, slash, _ = uri.removeprefix("skill://").partition("/")
    try:
        rel = split_skill_uri(uri)[1] if slash else ""
    except BadRequest:
        raise refusal from None
    skill = deployment.by_name.get(name)
    # skill://<name>/<dir> is a directory only when <dir> prefixes a manifest path; a bare trailing "/" never is.
    if skill is None or (slash and not any(entry.path.startswith(rel + "/") for entry in skill.manifest)):
        raise refusal
    return skill, rel


def _children(skill: Skill, rel: str) -> list[dict[str, Any]]:
    prefix = f"{rel}/" if rel else ""
    children: dict[str, dict[str, Any]] = {}
    for entry in skill.manifest:
        if not entry.path.startswith(prefix):
            continue
        child, slash, _ = entry.path[len(prefix) :].partition("/")
        if child in children:
            continue
        uri = resource_uri(skill.name, prefix + child)
        if slash:
            children[child] = {"uri": uri, "name": child, "mimeType": DIRECTORY_MIME_TYPE}
        else:
            children[child] = {"uri": uri, "name": child, "mimeType": media_type(child), "size": entry.size}
    return [children[child] for child in sorted(children)]


def directory_page(deployment: Deployment, uri: str, cursor: str | None) -> dict[str, Any]:
    """Direct children of a directory resource, from the boot-time manifest (§12.4)."""
    # The cache hints are additive to §12.4 here; SEP-2640 clients (the Inspector) require them.
    return _paged("resources", _children(*_directory(deployment, uri)), cursor, DIRECTORY_PAGE, dict)
