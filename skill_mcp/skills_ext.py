"""The MCP Skills extension (SEP-2640, SPEC §12): which skills it carries, and its methods."""

from __future__ import annotations

import re
from collections.abc import Sequence

from .model import Problem, Skill

EXTENSION_ID = "io.modelcontextprotocol/skills"
_AGENT_SKILLS_NAME = re.compile(r"[a-z0-9]+(-[a-z0-9]+)*")
_MAX_NAME_CHARS = 64
_MAX_DESCRIPTION_CHARS = 1024


def exclusion_reason(skill: Skill) -> str | None:
    """Why a served skill cannot be an extension skill (§12.2), or None when it can."""
    name = skill.frontmatter.get("name")
    if not isinstance(name, str):
        return "its frontmatter has no string name"
    if name != skill.name:
        return f'its frontmatter name "{name}" differs from its directory name "{skill.name}"'
    if len(name) > _MAX_NAME_CHARS or not _AGENT_SKILLS_NAME.fullmatch(name):
        return f'its name "{name}" is not in Agent Skills form (1-64 lowercase letters, digits and single hyphens)'
    description = skill.frontmatter.get("description")
    if not isinstance(description, str):
        return "its frontmatter has no string description"
    if not 1 <= len(description) <= _MAX_DESCRIPTION_CHARS:
        return f"its description is {len(description)} characters, outside 1-{_MAX_DESCRIPTION_CHARS}"
    return None


def extension_exclusions(skills: Sequence[Skill]) -> tuple[frozenset[str], list[Problem]]:
    """The names carried by the extension, and one `extension-excluded` problem per skill left out."""
    carried: set[str] = set()
    problems: list[Problem] = []
    for skill in skills:
        reason = exclusion_reason(skill)
        if reason is None:
            carried.add(skill.name)
        else:
            problems.append(
                Problem(
                    skill.real_dir,
                    "extension-excluded",
                    f"the skill is left out of skills/list and skills/get because {reason}; "
                    "the tools, prompts and resources still serve it",
                )
            )
    return frozenset(carried), problems

