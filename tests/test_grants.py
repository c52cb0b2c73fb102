"""SPEC §10 grants: parsing, resolution, narrowing (§17 items 8–10, 13, 125–130)."""

import json
import sys

import pytest
from conftest import make_skill
from hypothesis import given
from hypothesis import strategies as st
from wire import clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.config import load_config
from skill_mcp.grants import (
    GrantError,
    GrantRow,
    GrantState,
    apply_grant,
    not_granted_advice,
    parse_grant,
    resolve_grant,
)
from skill_mcp.model import Declaration, Problem, RunEntry, Skill

NO_GRANT = GrantState(None, "declaration", None, None)
BAD_JSON = "Expecting property name enclosed in double quotes at line 1 column 2"


def run(script, env=(), interpreter="python3"):
    return RunEntry(script=script, interpreter=interpreter, env=tuple(env), timeout_ms=60000)


def skill(name, *runs, frontmatter_name=None):
    return Skill(
        name=name, real_dir=f"/skills/{name}", source="/skills", body="", body_truncated=False, manifest=(),
        declaration=Declaration(runs=runs), frontmatter={"name": frontmatter_name or name},
    )


def granted(raw):
    return GrantState(parse_grant(raw), "MCP_SKILL_RUN", None, None)


WEATHER = skill("weather", run("scripts/fetch.py", ["WEATHER_API_KEY", "EXTRA"]), run("scripts/plot.js", [], "node"))


def resolve(**environ):
    return resolve_grant(load_config(environ, "/", "/bundled")[0])


# Parsing (§10.1)

def test_parse_rows():
    raw = '[{"skill": "a", "script": "s.py"}, {"skill": "b", "script": "t.js", "env": ["K", "L"]}, ' \
          '{"script": "u", "env": [], "skill": "c"}]'
    assert parse_grant(raw) == (
        GrantRow("a", "s.py", None), GrantRow("b", "t.js", ("K", "L")), GrantRow("c", "u", ()),
    )


def test_empty_array_is_valid():
    assert parse_grant(" [] ") == ()


@pytest.mark.parametrize(("raw", "message"), [
    ("{not json", f"MCP_SKILL_RUN is not valid JSON: {BAD_JSON}"),
    ("/etc/skill-mcp/grant.json", "MCP_SKILL_RUN is not valid JSON: Expecting value at line 1 column 1 (it holds the "
     "grant's JSON itself, not a path to a file)"),
    ('{"skill": "a", "script": "b"}', "MCP_SKILL_RUN must be a JSON array of objects"),
    ("[1]", "MCP_SKILL_RUN row 0 is not an object"),
    ('[{"skill": "a", "script": "b"}, {"skill": "a"}]', 'MCP_SKILL_RUN row 1 is missing "script"'),
    ('[{"skill": "", "script": "b"}]', 'MCP_SKILL_RUN row 0: "skill" must be a non-empty string'),
    ('[{"skill": "a", "script": 3}]', 'MCP_SKILL_RUN row 0: "script" must be a non-empty string'),
    ('[{"skill": "a", "script": "b", "envs": []}]',
     "MCP_SKILL_RUN row 0 has an unknown key (allowed: skill, script, env)"),
    ('[{"skill": "a", "script": "b", "env": "K"}]', 'MCP_SKILL_RUN row 0: "env" must be an array of strings'),
    ('[{"skill": "a", "script": "b", "env": ["K", 1]}]', 'MCP_SKILL_RUN row 0: "env" must be an array of strings'),
    ('[{"skill": "a", "script": "b", "env": null}]', 'MCP_SKILL_RUN row 0: "env" must be an array of strings'),
    ('[{"skill": "a", "script": "b", "skill": "c"}]', "MCP_SKILL_RUN row 0 repeats a key"),
    ("[" * 100000, "MCP_SKILL_RUN is not valid JSON (nested too deeply or a number too long)"),
    ("[" + "1" * 5000 + "]", "MCP_SKILL_RUN is not valid JSON (nested too deeply or a number too long)"),
])
def test_grant_errors_name_the_variable_and_row(raw, message):
    with pytest.raises(GrantError) as caught:
        parse_grant(raw)
    assert str(caught.value) == message


# Resolution (§10.2)

def test_malformed_grant_grants_nothing():
    state = resolve(MCP_SKILL_RUN="{not json", SKILLS_DIR="/b")
    assert state == GrantState(
        (), "MCP_SKILL_RUN",
        f"MCP_SKILL_RUN is not valid JSON: {BAD_JSON}; nothing is granted, so no script may run until it is fixed",
        None,
    )


def test_standalone_without_grant_is_declaration():
    assert resolve(SKILLS_DIR="/b") == NO_GRANT


def test_hosted_without_grant_is_hosted_default():
    state = resolve(MCP_SKILLS_PATH="/a")
    assert (state.rows, state.grant_from, state.grant_error) == ((), "hosted-default", None)
    assert "MCP_SKILL_RUN" in state.grant_note
    assert "nothing may run" in state.grant_note


@pytest.mark.parametrize("raw", ["[]", '[{"skill": "a", "script": "b"}]'])
def test_explicit_grant_beats_the_hosted_default(raw):
    state = resolve(MCP_SKILLS_PATH="/a", MCP_SKILL_RUN=raw)
    assert (state.grant_from, state.grant_error, state.grant_note) == ("MCP_SKILL_RUN", None, None)
    assert state.rows == parse_grant(raw)


def test_unset_grant_value_is_no_grant():
    assert resolve(MCP_SKILL_RUN="null") == NO_GRANT


def test_a_refusal_for_a_script_left_out_says_why_and_who_can_grant_it():
    advice = not_granted_advice(resolve(SKILLS_DIR="/b", MCP_SKILL_RUN="{"))
    assert advice == (
        f"The grant is malformed: MCP_SKILL_RUN is not valid JSON: {BAD_JSON}; nothing is granted, so no script may "
        "run until it is fixed. The README gives its syntax: a JSON array of {skill, script, env?} objects."
    )
    assert not_granted_advice(resolve(MCP_SKILLS_PATH="/a")) == (
        "This hosted deployment was given no grant; its owner grants scripts in MCP_SKILL_RUN."
    )
    assert not_granted_advice(resolve(SKILLS_DIR="/b", MCP_SKILL_RUN="[]")) == (
        "The deployment's grant, MCP_SKILL_RUN, does not name it; only the deployment's owner can add it."
    )


def test_the_hosted_default_note_names_the_variables_that_made_the_server_hosted():
    state = resolve(SKILLS_DIR="/b", MCP_DATA_DIR="/data", MCP_HOST_METER_FILE="/meter")
    assert state.grant_note == (
        "A host-injected variable (MCP_HOST_METER_FILE, MCP_DATA_DIR) is set and no MCP_SKILL_RUN grant was "
        "supplied, so nothing may run here; a script becomes runnable when the deployment grants it in "
        "MCP_SKILL_RUN. Instructions and files are served either way."
    )


# Applying (§10.3)

def test_no_grant_keeps_declared_runs():
    assert apply_grant([WEATHER], NO_GRANT) == ({"weather": WEATHER.declaration.runs}, [])


def test_granting_one_of_two_scripts_keeps_only_it():
    effective, problems = apply_grant([WEATHER], granted('[{"skill": "weather", "script": "scripts/plot.js"}]'))
    assert (effective, problems) == ({"weather": (run("scripts/plot.js", [], "node"),)}, [])
    assert WEATHER.declaration.runs[0].script == "scripts/fetch.py"


def test_env_is_declared_intersect_granted():
    grant = granted('[{"skill": "weather", "script": "scripts/fetch.py", '
                    '"env": ["WEATHER_API_KEY", "NEIGHBOUR_KEY"]}]')
    effective, problems = apply_grant([WEATHER], grant)
    assert effective == {"weather": (run("scripts/fetch.py", ["WEATHER_API_KEY"]),)}
    assert problems == [Problem("/skills/weather", "grant", (
        'MCP_SKILL_RUN row 0 grants variable "NEIGHBOUR_KEY" to script "scripts/fetch.py" of skill "weather", '
        "which the script does not declare, so it is not handed over"
    ))]


def test_row_without_env_grants_no_variables():
    effective, problems = apply_grant([WEATHER], granted('[{"skill": "weather", "script": "scripts/fetch.py"}]'))
    assert (effective, problems) == ({"weather": (run("scripts/fetch.py", []),)}, [])


def test_rows_for_one_pair_merge_in_declared_order():
    grant = granted('[{"skill": "weather", "script": "scripts/fetch.py", "env": ["EXTRA"]}, '
                    '{"skill": "weather", "script": "scripts/fetch.py", "env": ["WEATHER_API_KEY"]}]')
    effective, problems = apply_grant([WEATHER], grant)
    assert effective == {"weather": (run("scripts/fetch.py", ["WEATHER_API_KEY", "EXTRA"]),)}
    assert problems == []


def test_undeclared_script_grants_nothing():
    effective, problems = apply_grant([WEATHER], granted('[{"skill": "weather", "script": "scripts/evil.js"}]'))
    assert effective == {"weather": ()}
    assert problems == [Problem("/skills/weather", "grant", (
        'MCP_SKILL_RUN row 0 names script "scripts/evil.js" of skill "weather", '
        "which the skill does not declare in mcp-host.run, so it grants nothing"
    ))]


def test_undeclared_script_with_env_draws_one_problem_and_grants_nothing():
    # The row is dropped whole: its env is not checked against some other script, nor does it break the boot.
    grant = granted('[{"skill": "weather", "script": "scripts/evil.js", "env": ["WEATHER_API_KEY"]}]')
    effective, problems = apply_grant([WEATHER], grant)
    assert effective == {"weather": ()}
    assert [p.detail.split(" ")[3:5] for p in problems] == [["names", "script"]]


def test_unserved_skill_problem_has_the_variable_as_path():
    _, problems = apply_grant([WEATHER], granted('[{"skill": "ghost", "script": "scripts/evil.js"}]'))
    assert problems == [Problem("MCP_SKILL_RUN", "grant", (
        'MCP_SKILL_RUN row 0 names skill "ghost" (script "scripts/evil.js"), '
        "which is not served, so it grants nothing"
    ))]


def test_names_in_a_grant_problem_are_quoted_as_json():
    _, problems = apply_grant([WEATHER], granted('[{"skill": "gh\\"ost\\nHint: x", "script": "a\\nb"}]'))
    assert problems[0].detail.startswith('MCP_SKILL_RUN row 0 names skill "gh\\"ost\\nHint: x" (script "a\\nb")')


def test_rows_match_the_directory_name_not_the_frontmatter_name():
    claimed = skill("aaa", run("scripts/fetch.py"), frontmatter_name="weather")
    grant = granted('[{"skill": "aaa", "script": "scripts/fetch.py"}, '
                    '{"skill": "weather", "script": "scripts/fetch.py"}]')
    effective, problems = apply_grant([claimed], grant)
    assert effective == {"aaa": (run("scripts/fetch.py"),)}
    assert [p.path for p in problems] == ["MCP_SKILL_RUN"]


def test_empty_grant_grants_nothing_and_keeps_declarations():
    effective, problems = apply_grant([WEATHER], granted("[]"))
    assert (effective, problems) == ({"weather": ()}, [])
    assert len(WEATHER.declaration.runs) == 2


def test_problems_follow_row_order_one_per_offending_row_or_name():
    grant = granted('[{"skill": "ghost", "script": "x"}, '
                    '{"skill": "weather", "script": "scripts/fetch.py", "env": ["A", "B", "A"]}, '
                    '{"skill": "weather", "script": "scripts/evil.js"}]')
    _, problems = apply_grant([WEATHER], grant)
    assert [(p.path, p.detail.split(" ")[2:5]) for p in problems] == [
        ("MCP_SKILL_RUN", ["0", "names", "skill"]),
        ("/skills/weather", ["1", "grants", "variable"]),
        ("/skills/weather", ["1", "grants", "variable"]),
        ("/skills/weather", ["2", "names", "script"]),
    ]
    assert ['"A"' in problems[1].detail, '"B"' in problems[2].detail] == [True, True]


NAMES = st.sampled_from(["A", "B", "C", "D", "E", "F"])


@given(st.lists(NAMES, unique=True), st.lists(st.lists(NAMES) | st.none(), min_size=1, max_size=4))
def test_effective_env_is_declared_intersect_granted_in_declared_order(declared, row_envs):
    target = skill("s", run("x.py", declared))
    rows = tuple(GrantRow("s", "x.py", None if env is None else tuple(env)) for env in row_envs)
    grant = GrantState(rows, "MCP_SKILL_RUN", None, None)
    effective, problems = apply_grant([target], grant)
    union = {name for env in row_envs for name in env or ()}
    assert effective["s"][0].env == tuple(name for name in declared if name in union)
    assert len(problems) == sum(len(set(env or ()) - set(declared)) for env in row_envs)


@pytest.mark.parametrize("script", ["fetch.py", "./scripts/fetch.py", "scripts/fetch.py ", "Scripts/fetch.py"])
def test_a_row_must_name_the_declared_script_string_exactly(script):
    # §10.3: `script` == the declared script string; a suffix, a spelling variant or a case change grants nothing.
    effective, problems = apply_grant([WEATHER], granted(f'[{{"skill": "weather", "script": "{script}"}}]'))
    assert effective == {"weather": ()}
    assert [(p.reason, script in p.detail) for p in problems] == [("grant", True)]


@pytest.mark.parametrize("name", ["Weather", "weather ", "weath"])
def test_a_row_must_name_the_skill_directory_exactly(name):
    # §10.3: `skill` == the directory name; a case change or another spelling names a skill that is not served.
    effective, problems = apply_grant([WEATHER], granted(f'[{{"skill": "{name}", "script": "scripts/fetch.py"}}]'))
    assert effective == {"weather": ()}
    assert [(p.path, p.reason) for p in problems] == [("MCP_SKILL_RUN", "grant")]


def served_weather(tmp_path, declared_env: str, granted_env: list[str]) -> tuple[dict, str]:
    """skill_list, and the log, of a server given a grant of `granted_env` for weather's one script."""
    make_skill(tmp_path, "weather", f"""\
        name: weather
        description: Forecasts.
        mcp-host:
          version: 1
          run:
            - script: scripts/fetch.py
              interpreter: python3
              env: {declared_env}
        """, files={"scripts/fetch.py": "print(1)\n"})
    grant = json.dumps([{"skill": "weather", "script": "scripts/fetch.py", "env": granted_env}])
    with running([sys.executable, "-m", "skill_mcp"], clean_environ(MCP_SKILLS_PATH=str(tmp_path), MCP_SKILL_RUN=grant)) as client:
        legacy_handshake(client)
        listing = tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))
        client.close_stdin()
        assert client.wait() == 0
    return listing, client.stderr_text()


def test_a_grant_env_item_that_is_no_variable_name_is_reported_by_index_never_echoed(tmp_path):
    # An owner who thinks a grant carries values (`"env": ["API_KEY=sk-…"]`) must not see the secret reach the
    # client in skill_list's problems, nor the log: the item is named by its index, as a declaration's is (§4.4).
    secret = "sk-live-0123456789abcdef"
    listing, log = served_weather(tmp_path, "[API_KEY]", ["API_KEY", f"API_KEY={secret}"])
    assert [script["env"] for script in listing["skills"][0]["scripts"]] == [["API_KEY"]]
    assert [problem["detail"] for problem in listing["problems"]] == [
        "MCP_SKILL_RUN row 0 env item 1 is not a variable name (letters, digits, _), so it grants nothing; list "
        "variable names only: a script is handed each one's value from the server's environment"
    ]
    assert secret not in json.dumps(listing) and secret not in log


def test_a_grant_of_a_reserved_or_ambient_variable_says_what_becomes_of_it(tmp_path):
    # "the script does not declare, so it is not handed over" was false twice: SKILL.md did ask for HTTPS_PROXY
    # (refused as reserved), and PATH, which no script declares, is handed over anyway.
    listing, _ = served_weather(tmp_path, "[API_KEY, HTTPS_PROXY]", ["API_KEY", "HTTPS_PROXY", "PATH", "MCP_DATA_DIR", "OTHER"])
    prefix = 'MCP_SKILL_RUN row 0 grants variable "{}" to script "scripts/fetch.py" of skill "weather", '
    assert [p["detail"] for p in listing["problems"] if p["reason"] == "grant"] == [
        prefix.format("HTTPS_PROXY") + "which is reserved, so it is never handed to a script",
        prefix.format("PATH") + "which every script is handed anyway when the server has it; no grant is needed",
        prefix.format("MCP_DATA_DIR") + "which every script is handed anyway when the server has it; no grant is needed",
        prefix.format("OTHER") + "which the script does not declare, so it is not handed over",
    ]


def grant_tree(root):
    """`weather` declares two scripts; `aaa` declares one and names itself "claimed" in its frontmatter."""
    runs = "mcp-host:\n  version: 1\n  run:\n    - script: scripts/fetch.py\n      interpreter: python3\n"
    make_skill(root, "weather", "name: weather\ndescription: Forecasts.\n" + runs +
               "    - script: scripts/plot.py\n      interpreter: python3\n  egress: [api.example]\n",
               files={"scripts/fetch.py": "print(1)\n", "scripts/plot.py": "print(2)\n"})  # fmt: skip
    make_skill(root, "aaa", "name: claimed\ndescription: Claims another name.\n" + runs,
               files={"scripts/fetch.py": "print(3)\n"})  # fmt: skip


def listed_under(root, grant: str) -> dict:
    environ = clean_environ(SKILLS_DIR=str(root), MCP_SKILL_RUN=grant, MCP_SKILL_PYTHON="/usr/bin/python3")
    with running([sys.executable, "-m", "skill_mcp"], environ) as client:
        legacy_handshake(client)
        listing = tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))
    return {"problems": listing["problems"], **{skill["name"]: skill for skill in listing["skills"]}}


UNGRANTED = "declared by the skill and not granted for this deployment, so it may not run here"


def test_what_a_client_sees_of_a_narrowing_grant(tmp_path):
    # §17 items 126, 128 and 129 through a real server: one of two scripts granted, an undeclared script, and a
    # row keyed by a frontmatter name beside one keyed by the directory name.
    grant_tree(tmp_path)
    listed = listed_under(tmp_path, json.dumps([
        {"skill": "weather", "script": "scripts/plot.py"},
        {"skill": "weather", "script": "scripts/evil.js"},
        {"skill": "claimed", "script": "scripts/fetch.py"},
        {"skill": "aaa", "script": "scripts/fetch.py"},
    ]))  # fmt: skip
    weather, aaa = listed["weather"], listed["aaa"]
    assert [script["script"] for script in weather["scripts"]] == ["scripts/plot.py"]
    assert weather["ungrantedScripts"] == [{"script": "scripts/fetch.py", "reason": UNGRANTED}]
    assert ([script["script"] for script in aaa["scripts"]], "ungrantedScripts" in aaa) == (["scripts/fetch.py"], False)
    assert [(p["reason"], p["path"]) for p in listed["problems"] if p["reason"] == "grant"] == [
        ("grant", str(tmp_path / "weather")), ("grant", "MCP_SKILL_RUN"),
    ]
    evil, claimed = (p["detail"] for p in listed["problems"] if p["reason"] == "grant")
    assert "scripts/evil.js" in evil and evil.endswith("so it grants nothing")
    assert '"claimed"' in claimed and claimed.endswith("which is not served, so it grants nothing")


def test_an_empty_grant_runs_nothing_and_still_shows_every_declaration(tmp_path):
    # §17 item 130: `[]` leaves each declared script visible in ungrantedScripts, and the declared egress.
    grant_tree(tmp_path)
    listed = listed_under(tmp_path, "[]")
    assert [p["reason"] for p in listed["problems"]] == ["name-mismatch", "extension-excluded"]  # no grant problem
    for name, scripts in (("weather", ["scripts/fetch.py", "scripts/plot.py"]), ("aaa", ["scripts/fetch.py"])):
        assert (listed[name]["executable"], listed[name]["scripts"]) == (False, [])
        assert listed[name]["ungrantedScripts"] == [{"script": script, "reason": UNGRANTED} for script in scripts]
    assert listed["weather"]["declaredEgress"] == ["api.example"]
