"""Environment mapping → Config, read once at boot (SPEC §2). Pure: no I/O beyond the given mapping."""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .limits import MAX_SKILLS_CEILING, MAX_SKILLS_DEFAULT, PROXY_VARIABLES

BUNDLED_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "skills")

TTL_DEFAULT_SECONDS = 600
TTL_MAX_SECONDS = 86400
CONFIRM_MODES = ("ask-user", "auto", "refuse")
LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "console")
HOSTED_MARKERS = ("MCP_SKILLS_PATH", "MCP_HOST_METER_FILE", "MCP_DATA_DIR", "MCP_BLOB_BASE_URL")
# setrlimit takes a 64-bit value; anything larger could only fail in the child at spawn time.
RLIMIT_MAX = 2**62
MIB = 1048576

_DIGITS = re.compile(r"[0-9]+")
_TTL = re.compile(r"[1-9][0-9]*")
# More digits than this are "huge": int() would refuse past 4300 digits, and no limit here needs them.
_MAX_DIGITS = 19
_HUGE = 10**_MAX_DIGITS


@dataclass(frozen=True)
class ConfigWarning:
    """One `config.warning` event: the variable and what is wrong, never its value."""

    variable: str
    problem: str


@dataclass(frozen=True)
class Config:
    """Boot configuration. `confirm_mode` is effective: an unknown mode or invalid TTL makes it
    `refuse`, and `confirm_mode_reason` ("mode-unknown" | "ttl-invalid") says why."""

    roots: tuple[str, ...]
    roots_from: str
    host_markers: tuple[str, ...]  # the HOSTED_MARKERS that are set: any one makes the server hosted (§2.4)
    grant_raw: str | None
    allow_unscrubbed: bool
    data_dir: str | None
    confirm_mode: str
    confirm_mode_reason: str | None
    elicitation: bool
    ttl_seconds: int
    confirm_secret: str | None
    host_confirm_secret: str | None
    max_skills: int
    node_override: str | None
    python_override: str | None
    rlimit_nproc: int | None
    rlimit_as_mb: int | None
    log_level: str
    log_format: str
    egress_fenced: bool
    proxy_set: bool

    @property
    def hosted(self) -> bool:
        return bool(self.host_markers)


NO_GRANT_FROM_PLACEHOLDER = (
    "null, undefined or an unexpanded ${...} placeholder counts as unset: no grant is set, so each skill's own "
    "declaration decides what may run (hosted: nothing may run)"
)


def read_var(environ: Mapping[str, str], name: str) -> str | None:
    """The unset rule (§2.1): the stripped value, or None when absent, blank, null-ish or a placeholder."""
    raw = environ.get(name)
    if raw is None:
        return None
    value = raw.strip()
    if value in ("", "undefined", "null") or (value.startswith("${") and value.endswith("}")):
        return None
    return value


RELATIVE_DATA_DIR = (
    "is a relative path, which scripts are handed as it is and resolve from their own skill's directory (where "
    "each runs), so it names a directory inside each skill, and no spent-token store is kept in it; give an "
    "absolute path"
)


def load_config(environ: Mapping[str, str], cwd: str | None, bundled_root: str) -> tuple[Config, list[ConfigWarning]]:
    """Build the boot configuration; a malformed value falls back and adds a warning, never raises."""
    warnings: list[ConfigWarning] = []

    def var(name: str) -> str | None:
        return read_var(environ, name)

    def choice(name: str, allowed: tuple[str, ...], default: str, fallback: str) -> tuple[str, bool]:
        """The lowercased value if allowed (or the default when unset), and whether it was recognised."""
        value = var(name)
        if value is None:
            return default, True
        if value.lower() in allowed:
            return value.lower(), True
        warnings.append(ConfigWarning(name, f"not one of {', '.join(allowed)}; using {fallback}"))
        return fallback, False

    def flag(name: str) -> bool:
        """On only for exactly `1`; any other value is a typo for something, so it warns (and stays off)."""
        value = var(name)
        if value is not None and value != "1":
            warnings.append(ConfigWarning(name, "only the value 1 turns this on; it stays off"))
        return value == "1"

    def positive(name: str, ceiling: int, unit: str) -> int | None:
        value = var(name)
        number = _decimal(value)
        if value is not None and (number is None or not 1 <= number <= ceiling):
            problem = f"not a positive decimal integer of {unit} (at most {ceiling}); the limit is not applied"
            warnings.append(ConfigWarning(name, problem))
            return None
        return number

    roots, roots_from = _roots(var, cwd, bundled_root)

    mode, mode_known = choice("MCP_CONFIRM_MODE", CONFIRM_MODES, "ask-user", "refuse")
    mode_reason = None if mode_known else "mode-unknown"
    ttl = _ttl(var("MCP_CONFIRM_TTL_SECONDS"))
    if ttl is None:
        warnings.append(ConfigWarning(
            "MCP_CONFIRM_TTL_SECONDS",
            f"not a decimal integer from 1 to {TTL_MAX_SECONDS} written without sign or leading zero; confirmation "
            "mode becomes refuse, so a client that cannot answer a question in the call can run nothing",
        ))
        mode_reason = "ttl-invalid"
    warnings += _secret_warnings(var)
    elicitation, _ = choice("MCP_CONFIRM_ELICITATION", ("on", "off"), "on", "on")
    log_level, _ = choice("MCP_LOG_LEVEL", LOG_LEVELS, "info", "info")
    log_format, _ = choice("MCP_LOG_FORMAT", LOG_FORMATS, "json", "json")

    grant_raw = var("MCP_SKILL_RUN")
    if grant_raw is None and environ.get("MCP_SKILL_RUN", "").strip():  # a host's null or unfilled ${...}
        warnings.append(ConfigWarning("MCP_SKILL_RUN", NO_GRANT_FROM_PLACEHOLDER))

    config = Config(
        roots=roots,
        roots_from=roots_from,
        host_markers=tuple(name for name in HOSTED_MARKERS if var(name) is not None),
        grant_raw=grant_raw,
        allow_unscrubbed=flag("MCP_SKILL_ALLOW_UNSCRUBBED"),
        data_dir=var("MCP_DATA_DIR"),
        confirm_mode="refuse" if mode_reason else mode,
        confirm_mode_reason=mode_reason,
        elicitation=elicitation != "off",
        ttl_seconds=ttl or TTL_DEFAULT_SECONDS,
        confirm_secret=var("MCP_CONFIRM_SECRET"),
        host_confirm_secret=var("MCP_HOST_CONFIRM_SECRET"),
        max_skills=_max_skills(var("MCP_MAX_SKILLS"), warnings),
        node_override=var("MCP_SKILL_NODE"),
        python_override=var("MCP_SKILL_PYTHON"),
        rlimit_nproc=positive("MCP_SKILL_RLIMIT_NPROC", RLIMIT_MAX, "processes"),
        rlimit_as_mb=positive("MCP_SKILL_RLIMIT_AS_MB", RLIMIT_MAX // MIB, "MiB"),
        log_level=log_level,
        log_format=log_format,
        egress_fenced=flag("MCP_EGRESS_FENCED"),
        proxy_set=any(var(name) is not None for name in PROXY_VARIABLES),
    )
    return config, warnings


def absolute_root(cwd: str | None, root: str) -> str:
    """`root` made absolute against `cwd`; with no working directory (it was deleted) a relative root stays
    relative, and discovery reports it unreadable."""
    if cwd is None and not os.path.isabs(root):
        return root
    return os.path.abspath(os.path.join(cwd or "/", root))


def _roots(var: Callable[[str], str | None], cwd: str | None, bundled_root: str) -> tuple[tuple[str, ...], str]:
    for name in ("MCP_SKILLS_PATH", "SKILLS_DIR"):
        parts = [part.strip() for part in (var(name) or "").split(":")]
        roots = tuple(absolute_root(cwd, part) for part in parts if part)
        if roots:
            return roots, name
    return (absolute_root(cwd, bundled_root),), "default"


def _decimal(value: str | None) -> int | None:
    """A non-negative decimal integer; huge digit strings collapse to one value above every limit."""
    if value is None or not _DIGITS.fullmatch(value):
        return None
    digits = value.lstrip("0") or "0"
    return int(digits) if len(digits) <= _MAX_DIGITS else _HUGE


def _ttl(value: str | None) -> int | None:
    if value is None:
        return TTL_DEFAULT_SECONDS
    number = _decimal(value) if _TTL.fullmatch(value) else None
    return number if number is not None and number <= TTL_MAX_SECONDS else None


def _max_skills(value: str | None, warnings: list[ConfigWarning]) -> int:
    if value is None:
        return MAX_SKILLS_DEFAULT
    number = _decimal(value)
    if number is None or number < 1:
        warnings.append(ConfigWarning("MCP_MAX_SKILLS", f"not an integer of at least 1; using {MAX_SKILLS_DEFAULT}"))
        return MAX_SKILLS_DEFAULT
    if number > MAX_SKILLS_CEILING:
        problem = f"above {MAX_SKILLS_CEILING}; clamped to {MAX_SKILLS_CEILING}"
        warnings.append(ConfigWarning("MCP_MAX_SKILLS", problem))
        return MAX_SKILLS_CEILING
    return number


def _secret_warnings(var: Callable[[str], str | None]) -> list[ConfigWarning]:
    """What a relative MCP_DATA_DIR does, and what a secret cannot do without an absolute one: the rule
    confirm.confirm_key and confirm.spent_dir apply (§11.6)."""
    warnings = []
    data_dir_absolute = os.path.isabs(var("MCP_DATA_DIR") or "")
    if var("MCP_DATA_DIR") is not None and not data_dir_absolute:
        warnings.append(ConfigWarning("MCP_DATA_DIR", RELATIVE_DATA_DIR))
    if var("MCP_CONFIRM_SECRET") is not None and not data_dir_absolute:
        # §11.6 keeps spent records in memory then: one approval runs once per process, not once in all.
        warnings.append(ConfigWarning(
            "MCP_CONFIRM_SECRET",
            "tokens outlive a restart, but without an absolute MCP_DATA_DIR the record that one was used does not: "
            "until it expires, an approval could run again after a restart",
        ))
    host_secret_alone = var("MCP_HOST_CONFIRM_SECRET") is not None and var("MCP_CONFIRM_SECRET") is None
    if host_secret_alone and not data_dir_absolute:
        warnings.append(ConfigWarning(
            "MCP_HOST_CONFIRM_SECRET",
            "ignored: a host's secret is used only with an absolute MCP_DATA_DIR; tokens are signed with a key made "
            "at start, so none outlives a restart",
        ))
    return warnings
