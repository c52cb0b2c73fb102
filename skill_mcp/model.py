"""The data every module passes around: plain frozen values, no I/O."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import reduce
from typing import Any

# The stable reasons, in the order of SPEC §3.7; `spec` is the CLI's own (`skill-mcp check`).
PROBLEM_REASONS = (
    "root-unreadable", "no-skill-md", "unreadable-skill-md", "malformed-frontmatter", "declaration",
    "duplicate-name", "name-mismatch", "unusable-name", "declared-script-missing", "symlink-escape",
    "unusable-path", "file-limit", "skill-limit", "grant", "environ-unscrubbed", "extension-excluded",
)
CLI_REASONS = ("spec",)


@dataclass(frozen=True, slots=True)
class Problem:
    """Anything that kept something from being served or narrowed it (SPEC §3.7)."""

    path: str
    reason: str
    detail: str

    def __post_init__(self) -> None:
        # A reason outside the published set is a bug here, caught by the tests, never a new wire value.
        if self.reason not in PROBLEM_REASONS and self.reason not in CLI_REASONS:
            raise ValueError(f"unknown problem reason {self.reason!r}")

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class RunEntry:
    """One `mcp-host.run` entry (declared), or its grant-narrowed form (effective)."""

    script: str
    interpreter: str
    env: tuple[str, ...]
    timeout_ms: int


@dataclass(frozen=True, slots=True)
class EnvField:
    """An informational `mcp-host.env` entry."""

    name: str
    description: str | None = None
    secret: bool | None = None
    required: bool | None = None


@dataclass(frozen=True, slots=True)
class Declaration:
    runs: tuple[RunEntry, ...] = ()
    env: tuple[EnvField, ...] = ()
    egress: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ManifestEntry:
    path: str
    size: int


_PATHS_NAMED = 8  # enough for a note to show which; the count says how many in all


@dataclass(frozen=True, slots=True)
class PathTally:
    """Paths met one by one that a note names: the first few, and how many in all."""

    first: tuple[str, ...] = ()
    count: int = 0

    @classmethod
    def of(cls, paths: Iterable[str]) -> PathTally:
        return reduce(cls.plus, paths, cls())

    def plus(self, path: str) -> PathTally:
        first = self.first if len(self.first) == _PATHS_NAMED else (*self.first, path)
        return PathTally(first, self.count + 1)


@dataclass(frozen=True, slots=True)
class Skill:
    """A served skill as discovery read it at boot."""

    name: str
    real_dir: str
    source: str
    body: str
    body_truncated: bool
    manifest: tuple[ManifestEntry, ...]
    declaration: Declaration
    frontmatter: dict[str, Any] = field(hash=False, compare=False)
    description: str | None = None
    when_to_use: str | None = None
    file_limit_hit: bool = False
    # What the manifest walk skipped silently (§3.5): links and special files, and directories it could not list.
    skipped: PathTally = PathTally()
    unlisted_dirs: PathTally = PathTally()


@dataclass(frozen=True, slots=True)
class Catalog:
    """Discovery's answer: served skills in catalog order and every problem, in order."""

    skills: tuple[Skill, ...]
    problems: tuple[Problem, ...]
