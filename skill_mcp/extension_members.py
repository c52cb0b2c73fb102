"""Which served skills the MCP Skills extension carries (SPEC §12.2): those whose frontmatter is in Agent Skills form.
Pure: skills in, names and problems out; the deployment decides once, at boot."""

from __future__ import annotations

from collections.abc import Sequence

from .frontmatter import frontmatter_name
from .limits import AGENT_SKILLS_MAX_DESCRIPTION_CHARS, AGENT_SKILLS_NAME_RULE, is_agent_skills_name
from .model import Problem, Skill
from .text import quoted


def exclusion_reason(skill: Skill) -> str | None:
    """Why a served skill cannot be an extension skill (§12.2), or None when it can."""
    name = frontmatter_name(skill.frontmatter)
    if name is None:
        return "its frontmatter has no string name"
    if name != skill.name:
        return f"its frontmatter name {quoted(name)} differs from its directory name {quoted(skill.name)}"
    if not is_agent_skills_name(name):
        return f"its name {quoted(name)} is not in Agent Skills form ({AGENT_SKILLS_NAME_RULE})"
    description = skill.description
    if description is None:
        return "its frontmatter has no string description"
    if not 1 <= len(description) <= AGENT_SKILLS_MAX_DESCRIPTION_CHARS:
        return f"its description is {len(description)} characters, outside 1-{AGENT_SKILLS_MAX_DESCRIPTION_CHARS}"
    return None


def split_extension_skills(skills: Sequence[Skill]) -> tuple[frozenset[str], list[Problem]]:
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
