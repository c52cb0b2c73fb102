"""Our argument validator against an independent one: jsonschema must agree on every input (SPEC §5.3)."""

from __future__ import annotations

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp_types import methods
from pydantic import ValidationError

from skill_mcp.schemas import TOOLS, schema_violation, sdk_params_violation

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=3)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=10) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=12,
)
NON_EMPTY = st.text(min_size=1, max_size=4)
# Per property: a valid value, a value at the edge of its bounds, or any JSON value at all.
FIELD_VALUES = {
    "name": NON_EMPTY | NON_EMPTY | st.just("") | JSON_VALUES,
    "script": NON_EMPTY | NON_EMPTY | st.just("") | JSON_VALUES,
    "confirmToken": NON_EMPTY | NON_EMPTY | st.just("") | JSON_VALUES,
    "paths": st.lists(NON_EMPTY, min_size=1, max_size=8) | st.lists(st.text(max_size=3), max_size=9) | JSON_VALUES,
    "args": st.lists(st.text(max_size=2), max_size=4) | st.lists(st.just("a"), min_size=63, max_size=66) | JSON_VALUES,
}


def arguments_for(tool: dict) -> st.SearchStrategy:
    schema = tool["inputSchema"]
    required = {key: FIELD_VALUES[key] for key in schema.get("required", ())}
    optional = {key: FIELD_VALUES[key] for key in schema["properties"] if key not in required}
    published = st.fixed_dictionaries(required, optional=optional) | st.fixed_dictionaries({}, optional=required)
    extra = st.dictionaries(st.text(max_size=4), JSON_VALUES, min_size=1, max_size=1)
    return published | st.builds(lambda known, unknown: {**unknown, **known}, published, extra) | JSON_VALUES


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool["name"])
def test_every_published_schema_is_valid_json_schema(tool) -> None:
    jsonschema.Draft202012Validator.check_schema(tool["inputSchema"])


@pytest.mark.parametrize("tool", TOOLS, ids=lambda tool: tool["name"])
@settings(max_examples=500, deadline=None)
@given(data=st.data())
def test_our_validator_agrees_with_jsonschema(tool, data) -> None:
    arguments = data.draw(arguments_for(tool))
    # Missing or null arguments count as {} (SPEC §5.3).
    independent = jsonschema.Draft202012Validator(tool["inputSchema"]).is_valid({} if arguments is None else arguments)
    assert (schema_violation(tool["name"], arguments) is None) == independent, schema_violation(tool["name"], arguments)


BOUNDARIES = [
    ("skill_file", {"name": "a", "paths": []}),
    ("skill_file", {"name": "a", "paths": ["p"] * 8}),
    ("skill_file", {"name": "a", "paths": ["p"] * 9}),
    ("skill_file", {"name": "a", "paths": ["p", ""]}),
    ("skill_file", {"name": "", "paths": ["p"]}),
    ("skill_run", {"name": "a", "script": "s", "args": ["x"] * 64}),
    ("skill_run", {"name": "a", "script": "s", "args": ["x"] * 65}),
    ("skill_run", {"name": "a", "script": "s", "args": [""]}),
    ("skill_run", {"name": "a", "script": "s", "confirmToken": ""}),
    ("skill_run", {"name": "a", "script": "s", "confirm": True}),
    ("skill_run", {"name": "a"}),
    ("skill_load", None),
    ("skill_list", {}),
    ("skill_list", {"x": 1}),
]


@pytest.mark.parametrize(("name", "arguments"), BOUNDARIES)
def test_our_validator_agrees_with_jsonschema_at_every_bound(name, arguments) -> None:
    schema = next(tool["inputSchema"] for tool in TOOLS if tool["name"] == name)
    independent = jsonschema.Draft202012Validator(schema).is_valid({} if arguments is None else arguments)
    assert (schema_violation(name, arguments) is None) == independent


SDK_METHODS = ("tools/call", "prompts/get", "resources/read", "resources/list", "ping")
PARAM_VALUES = st.dictionaries(
    st.sampled_from(["name", "arguments", "uri", "cursor", "_meta", "inputResponses", "x"]), JSON_VALUES, max_size=4
) | JSON_VALUES


def sdk_errors(method: str, params) -> list | None:
    """The SDK's own check of `params`, as the server re-runs it: errors located in the params, or None."""
    try:
        methods.validate_client_request(method, "2025-11-25", params)
    except ValidationError as error:
        return [{**each, "loc": tuple(each["loc"])[1:]} for each in error.errors(include_url=False, include_input=False)]
    return None


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(SDK_METHODS), PARAM_VALUES)
def test_every_params_the_sdk_refuses_is_explained_in_one_line(method, params):
    if (errors := sdk_errors(method, params)) is None:
        return
    explained = sdk_params_violation(method, params, errors)
    assert explained.startswith(f"invalid params for {method}: ") and "\n" not in explained


@pytest.mark.parametrize(
    ("method", "params", "said"),
    [
        ("prompts/get", None, "params is required"),
        ("prompts/get", {"name": 5}, '"name" must be a string, not a number'),
        ("ping", {"_meta": {"progressToken": {}}}, '"_meta.progressToken" must be a string or an integer, not an object'),
        # a fraction is refused by the integer member as int_from_float, not int_type
        ("ping", {"_meta": {"progressToken": 1.5}}, '"_meta.progressToken" must be a string or an integer, not a number'),
        # two members refusing it the same way are said once
        ("completion/complete", {"ref": 5, "argument": {"name": "a", "value": "b"}}, '"ref" must be an object, not a number'),
        ("tools/call", {"name": {"a": 1}, "arguments": 5}, '"arguments" must be an object, not a number'),
        ("completion/complete", {"ref": {"type": "nope"}, "argument": {"name": "a", "value": "b"}},
         '"ref" matches none of the forms this method accepts'),
        # a member refusing it in words of no known type (finite_number) leaves the forms unnamed, not a KeyError
        ("ping", {"_meta": {"progressToken": float("inf")}}, '"_meta.progressToken" matches none of the forms this method accepts'),
    ],
)
def test_the_field_named_is_one_the_client_sent(method, params, said):
    # pydantic locates an error inside a union at the member's name ("str", "PromptReference"), never sent
    assert sdk_params_violation(method, params, sdk_errors(method, params)) == f"invalid params for {method}: {said}"


def test_an_error_of_no_known_type_keeps_pydantics_words():
    errors = [{"loc": ("mode",), "type": "literal_error", "msg": "Input should be 'form' or 'url'"}]
    assert sdk_params_violation("elicit", {"mode": "x"}, errors) == (
        "invalid params for elicit: \"mode\": Input should be 'form' or 'url'"
    )
