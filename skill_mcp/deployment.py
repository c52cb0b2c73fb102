"""Boot assembly: environment → configuration → catalog → grant → what may run (SPEC §14.1).

The server and the CLI build the same `Deployment`, so `skill-mcp list --json` and the
`skill_list` tool cannot drift apart.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass, field

from .catalog import discover
from .config import BUNDLED_ROOT, MIB, Config, ConfigWarning, absolute_root, load_config
from .confirm import spent_dir
from .extension_members import split_extension_skills
from .grants import NO_GRANT, GrantState, apply_grant, resolve_grant
from .hardening import Hardening, ScrubResult, may_raise_rlimits, prctl_available, run_block_reason
from .interpreters import find_interpreters, server_venv_prefix
from .model import Problem, RunEntry, Skill
from .spent import store_owned, store_writable
from .text import quoted


@dataclass(frozen=True)
class Deployment:
    config: Config
    roots: tuple[str, ...]
    roots_from: str
    skills: tuple[Skill, ...]
    problems: tuple[Problem, ...]
    grant: GrantState
    effective: Mapping[str, tuple[RunEntry, ...]]
    interpreters: Mapping[str, str]
    hardening: Hardening
    run_block: str | None
    extension_names: frozenset[str]
    environ: Mapping[str, str] = field(repr=False)
    by_name: Mapping[str, Skill] = field(init=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {skill.name: skill for skill in self.skills})

    def effective_runs(self, skill: Skill) -> tuple[RunEntry, ...]:
        """What `skill` may run here: its declaration, as the grant (if any) narrowed it."""
        return self.effective.get(skill.name, ())

    def runnable(self, entry: RunEntry) -> bool:
        return entry.interpreter in self.interpreters

    def runnable_interpreters(self) -> str:
        return ", ".join(sorted(self.interpreters)) or "none"

    def unavailable_reason(self, entry: RunEntry) -> str:
        """Why `entry` is not `runnable` here, as skill_list and skill_run's refusal both word it."""
        runs = self.runnable_interpreters()
        return f"declares the interpreter {quoted(entry.interpreter)}; this deployment runs: {runs}"


UNSCRUBBED_PATH = "/proc/self/environ"


def build_deployment(
    environ: Mapping[str, str],
    *,
    scrub: ScrubResult | None = None,
    non_dumpable: bool = False,
    cwd: str | None = None,
    roots_override: tuple[str, ...] = (),
    apply_owner_grant: bool = True,
) -> tuple[Deployment, list[ConfigWarning]]:
    """Never raises: every failure is a problem or a warning. `scrub` is None when nothing was
    scrubbed (the CLI), so nothing is blocked for it; `apply_owner_grant=False` is `check`'s view."""
    cwd = cwd or _working_directory()
    config, warnings = load_config(environ, cwd, BUNDLED_ROOT)
    roots, roots_from = config.roots, config.roots_from
    if roots_override:
        roots, roots_from = tuple(absolute_root(cwd, root) for root in roots_override), "arguments"
    interpreters, interpreter_warnings = find_interpreters(config, environ.get("PATH"), server_venv_prefix())
    catalog = discover(roots, config.max_skills)
    grant = resolve_grant(config) if apply_owner_grant else NO_GRANT
    effective, grant_problems = apply_grant(catalog.skills, grant)
    extension_names, extension_problems = split_extension_skills(catalog.skills)
    run_block = run_block_reason(scrub, config.hosted, config.allow_unscrubbed) if scrub else None
    unscrubbed = (Problem(UNSCRUBBED_PATH, "environ-unscrubbed", run_block),) if run_block else ()
    problems = (*catalog.problems, *grant_problems, *unscrubbed, *extension_problems)  # §3.7's order of reasons
    hardening = Hardening(
        environ_scrubbed=scrub is not None and scrub.status == "scrubbed",
        non_dumpable=non_dumpable,
        no_new_privs=prctl_available(),
        rlimit_nproc=config.rlimit_nproc,
        rlimit_as_mb=config.rlimit_as_mb,
    )
    deployment = Deployment(
        config=config,
        roots=roots,
        roots_from=roots_from,
        skills=catalog.skills,
        problems=problems,
        grant=grant,
        effective=effective,
        interpreters=interpreters,
        hardening=hardening,
        run_block=run_block,
        extension_names=extension_names,
        environ=environ,
    )
    return deployment, [*warnings, *interpreter_warnings, *_environment_warnings(config, serving=scrub is not None)]


def _environment_warnings(config: Config, serving: bool) -> list[ConfigWarning]:
    """What the configuration cannot do on this machine; as this user, only for the server itself."""
    warnings = []
    spent_in = spent_dir(config.confirm_secret, config.host_confirm_secret, config.data_dir)
    if spent_in is not None and (problem := _spent_store_problem(spent_in, serving)):
        warnings.append(ConfigWarning("MCP_DATA_DIR", problem))
    if serving and config.rlimit_nproc is not None and os.geteuid() == 0:
        warnings.append(ConfigWarning("MCP_SKILL_RLIMIT_NPROC", (
            "has no effect while the server runs as root: the kernel does not hold root to RLIMIT_NPROC; run the "
            "server as an unprivileged user"
        )))
    if serving:
        warnings += _rlimits_above_hard(config)
    return warnings


def _rlimits_above_hard(config: Config) -> list[ConfigWarning]:
    """A per-script limit above the hard one the server was started with: a child may not raise it, so each
    script's setrlimit would fail and no script would start (§9.8)."""
    warnings = []
    for variable, value, kind, unit, scale in (
        ("MCP_SKILL_RLIMIT_NPROC", config.rlimit_nproc, resource.RLIMIT_NPROC, "processes", 1),
        ("MCP_SKILL_RLIMIT_AS_MB", config.rlimit_as_mb, resource.RLIMIT_AS, "MiB", MIB),
    ):
        hard = resource.getrlimit(kind)[1]
        if value is None or hard == resource.RLIM_INFINITY or value * scale <= hard or may_raise_rlimits():
            continue
        warnings.append(ConfigWarning(variable, (
            f"is above the hard limit the server was started with ({hard // scale} {unit}), which a script may not "
            "raise, so every script would fail to start; set it to at most that, or start the server with a "
            "higher hard limit"
        )))
    return warnings


def _spent_store_problem(data_dir: str, serving: bool) -> str | None:
    """Why no spend could be recorded in `data_dir`'s store, cause then remedy; whether this user may write there
    is asked only for the server itself."""
    if not os.path.isdir(data_dir):
        cause = "is not an existing directory"
        remedy = "create it, writable by the server's user (the server creates only .mcp-confirm/spent in it)"
    elif serving and not store_writable(data_dir):
        cause = "is not writable by the server's user"
        remedy = "make it writable (the server creates only .mcp-confirm/spent in it)"
    elif serving and not store_owned(data_dir):
        cause = ("holds a .mcp-confirm or .mcp-confirm/spent directory another user owns, which the server cannot "
                 "make private (mode 0700) as it does on each spend")
        remedy = "give them to the server's user, or remove them (the server creates them)"
    else:
        return None
    return (f"{cause}, so no token or request state can be recorded as spent, and a run confirmed by one (any client "
            f"without elicitation) is refused after the user approved it; {remedy}")


def _working_directory() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # deleted under the server: only relative roots need it
        return None
