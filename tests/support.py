"""Shared test plumbing: skill trees on disk, deployments from an environ, protocol clients."""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from mcp.client import Client

from skill_mcp.deployment import Deployment, build_deployment
from skill_mcp.server import build_server

ERAS = ("legacy", "auto")  # "auto" negotiates 2026-07-28 through server/discover
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write_skill(
    root: str | os.PathLike[str],
    name: str,
    frontmatter: str | None = None,
    body: str = "Body.\n",
    files: Mapping[str, str | bytes] | None = None,
) -> str:
    """Create `<root>/<name>/SKILL.md` (and bundled files); return the skill directory."""
    directory = os.path.join(root, name)
    os.makedirs(directory, exist_ok=True)
    if frontmatter is None:
        frontmatter = f"name: {name}\ndescription: The {name} skill.\n"
    with open(os.path.join(directory, "SKILL.md"), "w", encoding="utf-8") as handle:
        handle.write(f"---\n{textwrap.dedent(frontmatter)}---\n{body}")
    for rel, content in (files or {}).items():
        path = os.path.join(directory, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(content.encode("utf-8") if isinstance(content, str) else content)
    return directory


def deployment_for(environ: Mapping[str, str], **options: Any) -> Deployment:
    deployment, _ = build_deployment(dict(environ), **options)
    return deployment


@asynccontextmanager
async def connect(deployment: Deployment, era: str, run_tool: Any = None, **client_options: Any) -> AsyncIterator[Client]:
    server = build_server(deployment, run_tool)
    async with Client(server, mode=era, **client_options) as client:
        yield client


def payload(result: Any) -> Any:
    """The minified JSON body of a successful tool result."""
    assert not result.is_error, result.content[0].text
    text = result.content[0].text
    assert "\n" not in text
    return json.loads(text)


def error_text(result: Any) -> str:
    assert result.is_error, result.content[0].text
    return result.content[0].text
