"""The published tool contract (SPEC §5.2) and the validator that enforces it.

The low-level SDK does not validate tool arguments, so the schemas below are both what
`tools/list` publishes and what every call is checked against: one source of truth.
"""

from __future__ import annotations

from typing import Any

from .limits import MAX_ARGS, MAX_CALL_BYTES, MAX_FILE_BYTES, MAX_PATHS_PER_CALL
from .text import quoted

_NAME = {"type": "string", "minLength": 1, "description": "The skill's name, as listed by skill_list."}

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "skill_list",
        "description": (
            "List every served skill with its description, what may run here and every problem found "
            "while loading the skills directory. Call this first."
        ),
        "inputSchema": {"type": "object", "properties": {}, "additionalProperties": False},
        "annotations": {"title": "List skills", "readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "skill_load",
        "description": (
            "Return a skill's instructions (its SKILL.md body, verbatim) and the list of its bundled files "
            "with their sizes. Read referenced files with skill_file."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {"name": _NAME},
            "required": ["name"],
            "additionalProperties": False,
        },
        "annotations": {"title": "Load a skill", "readOnlyHint": True, "idempotentHint": True, "openWorldHint": False},
    },
    {
        "name": "skill_file",
        "description": (
            f"Read 1-{MAX_PATHS_PER_CALL} bundled files of a skill by their path relative to the skill's directory "
            f"({MAX_FILE_BYTES >> 20} MiB per file, {MAX_CALL_BYTES >> 20} MiB per call). Text comes back as UTF-8, "
            "anything else as base64."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": _NAME,
                "paths": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1},
                    "minItems": 1,
                    "maxItems": MAX_PATHS_PER_CALL,
                    "description": "Relative paths such as references/guide.md, as listed by skill_load.",
                },
            },
            "required": ["name", "paths"],
            "additionalProperties": False,
        },
        "annotations": {
            "title": "Read skill files",
            "readOnlyHint": True,
            "idempotentHint": True,
            "openWorldHint": False,
        },
    },
    {
        "name": "skill_run",
        "description": (
            "Run a script that the skill declares in its SKILL.md, with arguments as an argv array (no shell), "
            "only after the user confirms it. The first call may return a preview and a confirmToken: show the "
            "preview to the user and call again with the token once they approve."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "name": _NAME,
                "script": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The declared script path, e.g. scripts/report.py.",
                },
                "args": {
                    "type": "array",
                    "items": {"type": "string"},
                    "maxItems": MAX_ARGS,
                    "description": "Arguments passed verbatim as argv (no shell interpretation).",
                },
                "confirmToken": {
                    "type": "string",
                    "minLength": 1,
                    "description": "The token from a confirmation-required answer, after the user approved.",
                },
            },
            "required": ["name", "script"],
            "additionalProperties": False,
        },
        "annotations": {
            "title": "Run a declared skill script",
            "readOnlyHint": False,
            "destructiveHint": True,
            "idempotentHint": False,
            "openWorldHint": True,
        },
    },
)

TOOLS_BY_NAME = {tool["name"]: tool for tool in TOOLS}

_JSON_TYPES = {"object": dict, "array": list, "string": str}


def schema_violation(tool: str, arguments: Any) -> str | None:
    """The first way `arguments` break the tool's published schema, or None."""
    schema = TOOLS_BY_NAME[tool]["inputSchema"]
    if arguments is None:
        arguments = {}
    problem = _violation(schema, arguments, "")
    return None if problem is None else f"invalid arguments for {tool}: {problem}"


# The Skills extension's params, checked here rather than by the SDK, whose answer names no field.
_STRING = {"type": "string"}
EXTENSION_PARAMS: dict[str, dict[str, Any]] = {
    "skills/list": {"type": "object", "properties": {"cursor": _STRING}},
    "skills/get": {"type": "object", "properties": {"uri": _STRING}, "required": ["uri"]},
    "resources/directory/read": {"type": "object", "properties": {"uri": _STRING, "cursor": _STRING}, "required": ["uri"]},
}


def params_violation(method: str, params: dict[str, Any]) -> str | None:
    """What is wrong with an extension method's params (absent and null alike are left out), or None."""
    problem = _violation(EXTENSION_PARAMS[method], params, "")
    return None if problem is None else f"invalid params for {method}: {problem}"


# What a pydantic error type says a field must be, in the words `_violation` uses.
_PYDANTIC_EXPECTED = {
    "string_type": "a string",
    "dict_type": "an object",
    "model_type": "an object",
    "list_type": "an array",
    "bool_type": "a boolean",
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
}
_ABSENT = object()


def sdk_params_violation(method: str, params: Any, errors: list[Any]) -> str:
    """What the SDK's own check of a method's params found (pydantic `errors()`, located in the params), said
    the way the tool checks say it."""
    return f"invalid params for {method}: {_params_problem(params, tuple(errors[0]['loc']), errors)}"


def _params_problem(params: Any, field: tuple[Any, ...], errors: list[Any]) -> str:
    if not field:
        return "params is required" if params is None else f"params must be an object, not {json_type(params)}"
    # How deep the path goes into what the client sent: past that, pydantic names union members, not fields.
    sent, value = 0, params
    while sent < len(field) and (inner := _child(value, field[sent])) is not _ABSENT:
        sent, value = sent + 1, inner
    label = quoted(_dotted(field[:sent])) if sent else "params"
    kind = errors[0]["type"]
    if sent == len(field) - 1 and kind == "missing":
        return f"{quoted(_dotted(field))} is required"
    if sent == len(field):
        if kind in _PYDANTIC_EXPECTED:
            return f"{label} must be {_PYDANTIC_EXPECTED[kind]}, not {json_type(value)}"
        return f"{label}: {errors[0]['msg']}"
    # A union: one error per member tried, each located at the member's name right under the part sent.
    members = [error["type"] for error in errors if tuple(error["loc"])[:-1] == field[:sent]]
    if members and all(kind in _PYDANTIC_EXPECTED for kind in members):
        accepted = " or ".join(dict.fromkeys(_PYDANTIC_EXPECTED[kind] for kind in members))
        return f"{label} must be {accepted}, not {json_type(value)}"
    return f"{label} matches none of the forms this method accepts"


def _child(value: Any, part: Any) -> Any:
    if isinstance(value, dict) and isinstance(part, str) and part in value:
        return value[part]
    if isinstance(value, list) and isinstance(part, int) and 0 <= part < len(value):
        return value[part]
    return _ABSENT


def _dotted(path: tuple[Any, ...]) -> str:
    return "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in path).lstrip(".")


def _violation(schema: dict[str, Any], value: Any, where: str) -> str | None:
    label = f'"{where}"' if where else "arguments"
    expected = schema["type"]
    if not isinstance(value, _JSON_TYPES[expected]):
        return f"{label} must be {'an' if expected[0] in 'ao' else 'a'} {expected}, not {json_type(value)}"
    if expected == "string" and len(value) < schema.get("minLength", 0):
        return f"{label} must not be empty"
    if expected == "array":
        if len(value) < schema.get("minItems", 0):
            return f"{label} must have at least {schema['minItems']} item(s)"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            return f"{label} must have at most {schema['maxItems']} items (got {len(value)})"
        for index, item in enumerate(value):
            if (problem := _violation(schema["items"], item, f"{where}[{index}]")) is not None:
                return problem
    if expected == "object":
        properties = schema["properties"]
        for key in schema.get("required", ()):
            if key not in value:
                return f'"{key}" is required'
        for key, item in value.items():
            if key not in properties:
                allowed = ", ".join(properties) or "none"
                return f"{quoted(key)} is not an accepted argument (accepted: {allowed})"
            if (problem := _violation(properties[key], item, key)) is not None:
                return problem
    return None


def json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {dict: "an object", list: "an array", str: "a string"}.get(type(value), type(value).__name__)
