"""Frontmatter → the `mcp-host` declaration plus findings (SPEC §4.3–4.4). Reading never raises."""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from typing import Any

from .frontmatter import json_key, string_field
from .limits import (
    DECLARATION_VERSION,
    DEFAULT_TIMEOUT_MS,
    EGRESS_PATTERN,
    ENV_NAME_PATTERN,
    LOADER_VARIABLES,
    MAX_TIMEOUT_MS,
    PROXY_VARIABLES,
    RESERVED_SCRIPT_ENV,
)
from .model import Declaration, EnvField, RunEntry
from .paths import describe_refusal, path_refusal
from .text import cut, quoted, quoted_path

KNOWN_TOP_LEVEL_KEYS = frozenset(
    {
        "name", "description", "when-to-use", "when_to_use", "license", "version",
        "allowed-tools", "metadata", "compatibility", "mcp-host",
    }
)
_BLOCK_KEYS = ("version", "run", "env", "egress", "state")
_RUN_ENTRY_KEYS = ("script", "interpreter", "env", "timeout")
# Not in the spec, which makes each finding a problem: a 64 KiB frontmatter holds some 32,000 (`env: [1,1,…]`),
# which would cost every listing megabytes (R3); past this many they are counted in one.
MAX_FINDINGS_SHOWN = 32


def read_declaration(frontmatter: dict[Any, Any]) -> tuple[Declaration, list[str]]:
    """The declaration and its findings, in order: unknown top-level keys first, then the `mcp-host` block.

    Each finding is the detail of one `declaration` problem at the skill directory; the first MAX_FINDINGS_SHOWN are
    given one by one, then one that counts the rest.
    """
    declaration, findings = _read_declaration(frontmatter)
    if len(findings) > MAX_FINDINGS_SHOWN:
        rest = len(findings) - MAX_FINDINGS_SHOWN
        findings[MAX_FINDINGS_SHOWN:] = [
            f"{rest} more findings in the frontmatter keys or the \"mcp-host\" block; only the first "
            f"{MAX_FINDINGS_SHOWN} are reported one by one"
        ]
    return declaration, findings


def _read_declaration(frontmatter: dict[Any, Any]) -> tuple[Declaration, list[str]]:
    findings = [
        f"unknown frontmatter key {quoted(json_key(key))} (ignored)"
        for key in frontmatter
        if key not in KNOWN_TOP_LEVEL_KEYS
    ]
    if "mcp-host" not in frontmatter:
        return Declaration(), findings
    block = frontmatter["mcp-host"]
    if not isinstance(block, dict):
        findings.append('"mcp-host" is not a mapping; the block is ignored')
        return Declaration(), findings
    version = block.get("version")
    if not _is_integer(version):
        findings.append('"mcp-host.version" is missing or not an integer; the block is ignored')
        return Declaration(), findings
    if version != DECLARATION_VERSION:
        findings.append(
            f'"mcp-host" declares version {cut(str(version), 20)}, but only version {DECLARATION_VERSION} is understood; '
            "the block is ignored"
        )
        return Declaration(), findings
    findings.extend(
        f'unknown key {quoted(json_key(key))} in "mcp-host" (ignored)' for key in block if key not in _BLOCK_KEYS
    )
    declaration = Declaration(
        runs=_read_runs(block, findings),
        env=_read_env_fields(block, findings),
        egress=_read_egress(block, findings),
    )
    return declaration, findings


def _list_or_empty(mapping: dict[Any, Any], key: str, not_a_list: str, findings: list[str]) -> list[Any]:
    """`mapping[key]` when it is a list; [] when the key is absent, or with the `not_a_list` finding otherwise."""
    value = mapping.get(key, [])
    if isinstance(value, list):
        return value
    findings.append(not_a_list)
    return []


def _is_integer(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_runs(block: dict[Any, Any], findings: list[str]) -> tuple[RunEntry, ...]:
    entries = _list_or_empty(block, "run", '"mcp-host.run" is not a list; no scripts are declared', findings)
    runs: list[RunEntry] = []
    declared: set[str] = set()
    for index, entry in enumerate(entries):
        run = _read_run_entry(f'"mcp-host.run[{index}]"', entry, declared, findings)
        if run is not None:
            declared.add(run.script)
            runs.append(run)
    return tuple(runs)


def _read_run_entry(at: str, entry: Any, declared: set[str], findings: list[str]) -> RunEntry | None:
    if not isinstance(entry, dict):
        findings.append(f"{at} is not a mapping; the entry is ignored")
        return None
    findings.extend(
        f"{at} has an unknown key {quoted(json_key(key))} (ignored)" for key in entry if key not in _RUN_ENTRY_KEYS
    )
    script = entry.get("script")
    if not isinstance(script, str):
        findings.append(f'{at} has no "script" string; the entry is ignored')
        return None
    refusal = path_refusal(script)
    if refusal is not None:
        findings.append(f"{at} script {describe_refusal(script, refusal)}; the entry is ignored")
        return None
    if script in declared:
        findings.append(f"{at} declares {quoted_path(script)} a second time; the entry is ignored")
        return None
    interpreter = entry.get("interpreter")
    if not isinstance(interpreter, str):
        findings.append(f'{at} has no "interpreter" string; the entry is ignored')
        return None
    return RunEntry(
        script=script,
        interpreter=interpreter,
        env=_read_run_env(at, entry, findings),
        timeout_ms=_read_timeout_ms(at, entry, findings),
    )


def _read_timeout_ms(at: str, entry: dict[Any, Any], findings: list[str]) -> int:
    if "timeout" not in entry:
        return DEFAULT_TIMEOUT_MS
    seconds = entry["timeout"]
    is_number = _is_integer(seconds) or (isinstance(seconds, float) and not math.isnan(seconds))
    if not is_number or seconds <= 0:
        findings.append(
            f"{at} timeout is not a positive number of seconds; "
            f"the default {DEFAULT_TIMEOUT_MS // 1000} s ({DEFAULT_TIMEOUT_MS} ms) is used"
        )
        return DEFAULT_TIMEOUT_MS
    if seconds * 1000 > MAX_TIMEOUT_MS:
        findings.append(f"{at} timeout is over {MAX_TIMEOUT_MS // 1000} s; clamped to {MAX_TIMEOUT_MS // 1000} s")
        return MAX_TIMEOUT_MS
    # Decimal of the float's shortest text, so 1.0005 s rounds half-up to 1001 ms as written.
    milliseconds = (Decimal(repr(seconds)) * 1000).to_integral_value(rounding=ROUND_HALF_UP)
    return max(1, int(milliseconds))


def _read_run_env(at: str, entry: dict[Any, Any], findings: list[str]) -> tuple[str, ...]:
    items = _list_or_empty(entry, "env", f'{at} has a non-list "env"; no variables are passed', findings)
    names: dict[str, None] = {}
    for index, item in enumerate(items):
        if not _is_identifier(item):
            # By its index only: details are logged (§13), and an item such as `KEY=value` would carry a secret.
            findings.append(f"{at} env item {index} is not an identifier (letters, digits, _); ignored")
        elif item in PROXY_VARIABLES:
            findings.append(f"{at} asks for {item}, which is reserved: a proxy URL can carry credentials; refused")
        elif item in LOADER_VARIABLES:
            findings.append(
                f"{at} asks for {item}, which is reserved: it changes what the interpreter loads before the script; "
                "refused"
            )
        elif item in RESERVED_SCRIPT_ENV:
            findings.append(f"{at} asks for {item}, which is reserved: it is set by the host for itself; refused")
        else:
            names.setdefault(item)
    return tuple(names)


def _is_identifier(value: Any) -> bool:
    return isinstance(value, str) and ENV_NAME_PATTERN.fullmatch(value) is not None


def _read_env_fields(block: dict[Any, Any], findings: list[str]) -> tuple[EnvField, ...]:
    items = _list_or_empty(block, "env", '"mcp-host.env" is not a list (ignored)', findings)
    fields: list[EnvField] = []
    for index, item in enumerate(items):
        if not isinstance(item, dict):
            findings.append(f'"mcp-host.env" item {index} is not a mapping (ignored)')
        elif not _is_identifier(item.get("name")):
            findings.append(f'"mcp-host.env" item {index} has no identifier "name" (ignored)')
        else:
            fields.append(
                EnvField(
                    name=item["name"],
                    description=string_field(item, "description"),
                    secret=_bool_or_none(item.get("secret")),
                    required=_bool_or_none(item.get("required")),
                )
            )
    return tuple(fields)


def _bool_or_none(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _read_egress(block: dict[Any, Any], findings: list[str]) -> tuple[str, ...]:
    items = _list_or_empty(block, "egress", '"mcp-host.egress" is not a list (ignored)', findings)
    hosts: dict[str, None] = {}
    for index, item in enumerate(items):
        if isinstance(item, str) and EGRESS_PATTERN.fullmatch(item):
            hosts.setdefault(item)
        else:
            findings.append(
                f'"mcp-host.egress" item {index} is not a host name (letters, digits, ".", "*", "-"); ignored'
            )
    return tuple(hosts)
