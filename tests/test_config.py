"""SPEC §2 configuration: unset rule, roots, hosted markers, parsing fallbacks (§17 items 1–16)."""

import os
import resource
import shutil
import subprocess
import sys

import pytest
from conftest import make_skill
from hypothesis import given
from hypothesis import strategies as st
from support import UNPRIVILEGED_UID, as_unprivileged, deployment_for, needs_root, world_readable_dir
from wire import clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.config import (
    BUNDLED_ROOT,
    NO_GRANT_FROM_PLACEHOLDER,
    RELATIVE_DATA_DIR,
    Config,
    ConfigWarning,
    load_config,
    read_var,
)
from skill_mcp.deployment import build_deployment
from skill_mcp.hardening import ScrubResult

CWD = "/srv/work"
BUNDLED = "/pkg/skill_mcp/skills"


def load(**environ: str) -> tuple[Config, list[ConfigWarning]]:
    return load_config(environ, CWD, BUNDLED)


def test_defaults_with_an_empty_environment():
    config, warnings = load()
    assert warnings == []
    assert config == Config(
        roots=(BUNDLED,), roots_from="default", host_markers=(), grant_raw=None, allow_unscrubbed=False,
        data_dir=None, confirm_mode="ask-user", confirm_mode_reason=None, elicitation=True, ttl_seconds=600,
        confirm_secret=None, host_confirm_secret=None, max_skills=32, node_override=None, python_override=None,
        rlimit_nproc=None, rlimit_as_mb=None, log_level="info", log_format="json", egress_fenced=False,
        proxy_set=False,
    )


def test_mcp_skills_path_wins_over_skills_dir():
    config, _ = load(MCP_SKILLS_PATH="/a", SKILLS_DIR="/b")
    assert (config.roots, config.roots_from) == (("/a",), "MCP_SKILLS_PATH")


def test_empty_parts_are_dropped_and_parts_stripped():
    config, _ = load(MCP_SKILLS_PATH="/a:: /b :")
    assert config.roots == ("/a", "/b")


def test_duplicates_are_kept_in_order():
    config, _ = load(SKILLS_DIR="/b:/a:/b")
    assert config.roots == ("/b", "/a", "/b")


def test_skills_dir_alone():
    config, _ = load(SKILLS_DIR="/b:/c")
    assert (config.roots, config.roots_from, config.hosted) == (("/b", "/c"), "SKILLS_DIR", False)


def test_bundled_root_is_the_package_skills_directory():
    config, _ = load_config({}, "/somewhere/else", BUNDLED_ROOT)
    assert config.roots == (BUNDLED_ROOT,)
    assert os.path.isabs(BUNDLED_ROOT)
    assert os.path.isfile(os.path.join(BUNDLED_ROOT, "skill-mcp-demo", "SKILL.md"))


@pytest.mark.parametrize("value", ["   ", "null", "undefined", "${MCP_SKILLS_PATH}", ""])
def test_unset_values_of_mcp_skills_path(value):
    config, _ = load(MCP_SKILLS_PATH=value)
    assert (config.roots, config.roots_from, config.hosted) == ((BUNDLED,), "default", False)


def test_colon_alone_is_hosted_without_roots():
    config, _ = load(MCP_SKILLS_PATH=":", SKILLS_DIR="/b")
    assert (config.roots, config.roots_from, config.hosted) == (("/b",), "SKILLS_DIR", True)


def test_relative_roots_become_absolute_without_tilde_expansion():
    config, _ = load(SKILLS_DIR="rel/x:~/skills:../up")
    assert config.roots == ("/srv/work/rel/x", "/srv/work/~/skills", "/srv/up")


def test_roots_are_made_absolute_not_resolved(tmp_path):
    # §2.3: os.path.abspath, not realpath: a root reached through a link stays as configured.
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    config, _ = load_config({"SKILLS_DIR": "link:./link/../real"}, str(tmp_path), BUNDLED)
    assert config.roots == (str(tmp_path / "link"), str(tmp_path / "real"))


def test_absolute_roots_are_normalised_without_a_working_directory():
    # §2.3: every root goes through os.path.abspath, also when the working directory is gone.
    config, _ = load_config({"SKILLS_DIR": "/srv//a/../b/"}, None, BUNDLED)
    assert config.roots == ("/srv/b",)


@pytest.mark.parametrize("marker", ["MCP_HOST_METER_FILE", "MCP_DATA_DIR", "MCP_BLOB_BASE_URL"])
def test_skills_dir_plus_a_marker_is_hosted(marker):
    config, _ = load(SKILLS_DIR="/b", **{marker: "x"})
    assert config.hosted is True


def test_unset_marker_is_not_hosted():
    config, _ = load(SKILLS_DIR="/b", MCP_DATA_DIR="${MCP_DATA_DIR}", MCP_BLOB_BASE_URL=" null ")
    assert config.hosted is False


@pytest.mark.parametrize(("value", "expected", "problem"), [
    ("5000", 4096, "above 4096; clamped to 4096"),
    ("4097", 4096, "above 4096; clamped to 4096"),
    ("9" * 5000, 4096, "above 4096; clamped to 4096"),
    ("abc", 32, "not an integer of at least 1; using 32"),
    ("٣", 32, "not an integer of at least 1; using 32"),
    ("0", 32, "not an integer of at least 1; using 32"),
    ("-3", 32, "not an integer of at least 1; using 32"),
])
def test_max_skills_fallbacks_warn_once_without_the_value(value, expected, problem):
    config, warnings = load(MCP_MAX_SKILLS=value)
    assert config.max_skills == expected
    assert warnings == [ConfigWarning("MCP_MAX_SKILLS", problem)]
    assert value not in warnings[0].problem


@pytest.mark.parametrize(
    ("value", "expected"), [("1", 1), ("40", 40), ("4096", 4096), (" 040 ", 40), ("0" * 30 + "40", 40)]
)
def test_max_skills_valid(value, expected):
    config, warnings = load(MCP_MAX_SKILLS=value)
    assert (config.max_skills, warnings) == (expected, [])


@pytest.mark.parametrize(("value", "mode"), [("ask-user", "ask-user"), ("AUTO", "auto"), (" Refuse ", "refuse")])
def test_confirm_mode_known_values(value, mode):
    config, warnings = load(MCP_CONFIRM_MODE=value)
    assert (config.confirm_mode, config.confirm_mode_reason, warnings) == (mode, None, [])


def test_unknown_confirm_mode_refuses_with_one_warning():
    config, warnings = load(MCP_CONFIRM_MODE="yolo")
    assert (config.confirm_mode, config.confirm_mode_reason) == ("refuse", "mode-unknown")
    assert warnings == [ConfigWarning("MCP_CONFIRM_MODE", "not one of ask-user, auto, refuse; using refuse")]


@pytest.mark.parametrize("value", ["0", "010", "abc", "90000", "+5", "-5", "1.5", "86401", "٣"])
def test_invalid_ttl_makes_the_mode_refuse(value):
    config, warnings = load(MCP_CONFIRM_MODE="auto", MCP_CONFIRM_TTL_SECONDS=value)
    assert (config.confirm_mode, config.confirm_mode_reason, config.ttl_seconds) == ("refuse", "ttl-invalid", 600)
    assert warnings == [ConfigWarning("MCP_CONFIRM_TTL_SECONDS", TTL_INVALID)]


TTL_INVALID = (
    "not a decimal integer from 1 to 86400 written without sign or leading zero; confirmation mode becomes refuse, "
    "so a client that cannot answer a question in the call can run nothing"
)


def test_a_ttl_with_a_leading_zero_is_refused_by_the_server_saying_so():
    # "0600" is a whole number from 1 to 86400 as anyone reads it: the warning and the refusal must say what is
    # wrong with it.
    environ = clean_environ(MCP_CONFIRM_TTL_SECONDS="0600", MCP_SKILL_PYTHON=os.path.realpath(sys.executable))
    with running([sys.executable, "-m", "skill_mcp"], environ, cwd="/") as client:
        legacy_handshake(client)
        demo = {"name": "skill-mcp-demo", "script": "scripts/report.py"}
        refused = tool_payload(client.request("tools/call", {"name": "skill_run", "arguments": demo}))
        client.close_stdin()
        assert client.wait() == 0
    warnings = [e["problem"] for e in client.log_events() if e["event"] == "config.warning"]
    assert TTL_INVALID in warnings and "0600" not in client.stderr_text()
    assert refused["reason"] == "confirmation-unsupported" and "without a leading zero" in refused["note"]


@pytest.mark.parametrize(("value", "ttl"), [("1", 1), ("86400", 86400), (" 30 ", 30)])
def test_valid_ttl(value, ttl):
    config, warnings = load(MCP_CONFIRM_TTL_SECONDS=value)
    assert (config.ttl_seconds, config.confirm_mode, warnings) == (ttl, "ask-user", [])


def test_invalid_ttl_reason_wins_over_unknown_mode():
    config, warnings = load(MCP_CONFIRM_MODE="yolo", MCP_CONFIRM_TTL_SECONDS="0")
    assert (config.confirm_mode, config.confirm_mode_reason) == ("refuse", "ttl-invalid")
    assert [w.variable for w in warnings] == ["MCP_CONFIRM_MODE", "MCP_CONFIRM_TTL_SECONDS"]


@pytest.mark.parametrize(("value", "on", "warned"), [
    ("on", True, False), ("OFF", False, False), ("maybe", True, True),
])
def test_elicitation(value, on, warned):
    config, warnings = load(MCP_CONFIRM_ELICITATION=value)
    assert config.elicitation is on
    assert warnings == ([ConfigWarning("MCP_CONFIRM_ELICITATION", "not one of on, off; using on")] if warned else [])


def test_log_settings():
    config, warnings = load(MCP_LOG_LEVEL="ERROR", MCP_LOG_FORMAT="Console")
    assert (config.log_level, config.log_format, warnings) == ("error", "console", [])
    config, warnings = load(MCP_LOG_LEVEL="loud", MCP_LOG_FORMAT="xml")
    assert (config.log_level, config.log_format) == ("info", "json")
    assert warnings == [
        ConfigWarning("MCP_LOG_LEVEL", "not one of debug, info, warning, error; using info"),
        ConfigWarning("MCP_LOG_FORMAT", "not one of json, console; using json"),
    ]


def test_rlimits():
    config, warnings = load(MCP_SKILL_RLIMIT_NPROC="256", MCP_SKILL_RLIMIT_AS_MB="4096")
    assert (config.rlimit_nproc, config.rlimit_as_mb, warnings) == (256, 4096, [])


@pytest.mark.parametrize(
    ("name", "field", "ceiling"),
    [("MCP_SKILL_RLIMIT_NPROC", "rlimit_nproc", 2**62), ("MCP_SKILL_RLIMIT_AS_MB", "rlimit_as_mb", 2**62 // 1048576)],
)
def test_rlimits_are_applied_up_to_what_setrlimit_takes_in_bytes(name, field, ceiling):
    # setrlimit takes a 64-bit value: a larger one could only fail in the child when a script starts.
    config, warnings = load(**{name: str(ceiling)})
    assert (getattr(config, field), warnings) == (ceiling, [])
    config, warnings = load(**{name: str(ceiling + 1)})
    assert (getattr(config, field), [warning.variable for warning in warnings]) == (None, [name])


@pytest.mark.parametrize("value", ["0", "-1", "1e3", "abc", "9" * 30])
def test_invalid_rlimits_are_not_applied(value):
    config, warnings = load(MCP_SKILL_RLIMIT_NPROC=value, MCP_SKILL_RLIMIT_AS_MB=value)
    assert (config.rlimit_nproc, config.rlimit_as_mb) == (None, None)
    assert [w.variable for w in warnings] == ["MCP_SKILL_RLIMIT_NPROC", "MCP_SKILL_RLIMIT_AS_MB"]


@pytest.mark.parametrize(("value", "on"), [
    ("1", True), (" 1 ", True), ("true", False), ("yes", False), ("01", False),
])
def test_exactly_one_flags(value, on):
    config, _ = load(MCP_EGRESS_FENCED=value, MCP_SKILL_ALLOW_UNSCRUBBED=value)
    assert (config.egress_fenced, config.allow_unscrubbed) == (on, on)


@pytest.mark.parametrize("name", ["HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"])
def test_any_proxy_variable_counts(name):
    assert load(**{name: "http://proxy:3128"})[0].proxy_set is True
    assert load(**{name: "${HTTPS_PROXY}"})[0].proxy_set is False


def test_strings_pass_through_the_unset_rule():
    config, _ = load(
        MCP_SKILL_RUN=" [] ", MCP_DATA_DIR="/data", MCP_CONFIRM_SECRET="s1", MCP_HOST_CONFIRM_SECRET="null",
        MCP_SKILL_NODE="/usr/bin/node", MCP_SKILL_PYTHON="  ",
    )
    assert (config.grant_raw, config.data_dir, config.confirm_secret, config.host_confirm_secret) == (
        "[]", "/data", "s1", None,
    )
    assert (config.node_override, config.python_override) == ("/usr/bin/node", None)


@pytest.mark.parametrize("value", ["${MCP_DATA_DIR}", "null", "   "])
def test_an_unset_data_dir_is_none(value):
    # §2.1: MCP_DATA_DIR is read with the unset rule (only a script's copy of it is raw, §9.6).
    assert load(MCP_DATA_DIR=value)[0].data_dir is None


def test_unset_rule_examples():
    env = {"A": "${A}", "B": "null", "C": "   ", "D": "undefined", "E": " Null ", "F": " x ", "G": "${a}b", "I": "$a}"}
    assert [read_var(env, name) for name in "ABCDEFGHI"] == [None, None, None, None, "Null", "x", "${a}b", None, "$a}"]


@given(st.text(alphabet=st.characters(categories=["Zs", "Cc"]).filter(str.isspace)))
def test_whitespace_only_is_unset(value):
    assert read_var({"V": value}, "V") is None


@given(st.sampled_from(["", "null", "undefined"]) | st.text().map(lambda t: "${" + t + "}"), st.text(" \t\n"),
       st.text(" \t\n"))
def test_null_words_and_placeholders_are_unset(core, left, right):
    assert read_var({"V": left + core + right}, "V") is None


@given(st.text())
def test_any_other_value_is_kept_stripped(value):
    stripped = value.strip()
    placeholder = stripped.startswith("${") and stripped.endswith("}")
    if stripped and stripped not in ("null", "undefined") and not placeholder:
        assert read_var({"V": value}, "V") == stripped
    else:
        assert read_var({"V": value}, "V") is None


def test_a_deleted_working_directory_costs_only_the_relative_roots(tmp_path, monkeypatch):
    make_skill(tmp_path / "skills", "alpha")
    gone = tmp_path / "gone"
    gone.mkdir()
    monkeypatch.chdir(gone)
    gone.rmdir()
    deployment = deployment_for({"SKILLS_DIR": f"{tmp_path / 'skills'}:relative"})
    assert deployment.config.roots == (str(tmp_path / "skills"), "relative")
    assert [skill.name for skill in deployment.skills] == ["alpha"]
    assert [(problem.path, problem.reason) for problem in deployment.problems] == [("relative", "root-unreadable")]


@pytest.mark.parametrize(
    ("data_dir", "warned"), [(None, True), ("relative/data", True), ("/data", False)], ids=["unset", "relative", "absolute"]
)
def test_a_stable_secret_without_a_spent_store_that_outlives_a_restart_warns(data_dir, warned):
    environ = {"MCP_CONFIRM_SECRET": "s3cret-value"} | ({"MCP_DATA_DIR": data_dir} if data_dir else {})
    _, warnings = load(**environ)
    secret_warnings = [warning for warning in warnings if warning.variable == "MCP_CONFIRM_SECRET"]
    assert len(secret_warnings) == warned
    assert all("s3cret" not in warning.problem and "restart" in warning.problem for warning in secret_warnings)


@pytest.mark.parametrize(
    ("environ", "warned"),
    [
        ({}, True),
        ({"MCP_DATA_DIR": "relative/data"}, True),
        ({"MCP_DATA_DIR": "/data"}, False),
        ({"MCP_CONFIRM_SECRET": "s1"}, False),  # the owner's secret wins anyway (§2.2)
    ],
    ids=["no-data-dir", "relative", "absolute", "owner-secret"],
)
def test_a_host_secret_that_will_not_be_used_warns(environ, warned):
    _, warnings = load(MCP_HOST_CONFIRM_SECRET="h0st-value", **environ)
    host_warnings = [warning.problem for warning in warnings if warning.variable == "MCP_HOST_CONFIRM_SECRET"]
    assert host_warnings == (
        ["ignored: a host's secret is used only with an absolute MCP_DATA_DIR; tokens are signed with a key made at "
         "start, so none outlives a restart"] if warned else []
    )


@pytest.mark.parametrize(
    ("name", "unit", "ceiling"),
    [("MCP_SKILL_RLIMIT_NPROC", "processes", 2**62), ("MCP_SKILL_RLIMIT_AS_MB", "MiB", 2**62 // 1048576)],
)
def test_an_invalid_rlimit_warns_in_its_unit(name, unit, ceiling):
    config, warnings = load(**{name: "0"})
    assert (config.rlimit_nproc, config.rlimit_as_mb) == (None, None)
    assert [(w.variable, w.problem) for w in warnings] == [
        (name, f"not a positive decimal integer of {unit} (at most {ceiling}); the limit is not applied")
    ]


def test_a_process_limit_for_a_root_server_warns_that_it_does_nothing(tmp_path):
    environ = {"MCP_SKILL_RLIMIT_NPROC": "64"}
    _, warnings = build_deployment(environ, cwd=str(tmp_path), scrub=ScrubResult("scrubbed", wiped_bytes=1))
    _, cli_warnings = build_deployment(environ, cwd=str(tmp_path))  # `check` as root judges no server's uid
    assert [w for w in cli_warnings if w.variable == "MCP_SKILL_RLIMIT_NPROC"] == []
    expected = [(
        "MCP_SKILL_RLIMIT_NPROC",
        "has no effect while the server runs as root: the kernel does not hold root to RLIMIT_NPROC; run the "
        "server as an unprivileged user",
    )]
    assert [(w.variable, w.problem) for w in warnings if w.variable == "MCP_SKILL_RLIMIT_NPROC"] == (
        expected if os.geteuid() == 0 else []
    )


@pytest.mark.parametrize("data_dir", ["data", "./data", "~/data"])
def test_a_relative_data_dir_warns_that_it_names_a_directory_in_each_skill(tmp_path, data_dir):
    _, warnings = load_config({"MCP_DATA_DIR": data_dir}, str(tmp_path), BUNDLED_ROOT)
    assert [(w.variable, w.problem) for w in warnings] == [("MCP_DATA_DIR", RELATIVE_DATA_DIR)]
    _, absolute = load_config({"MCP_DATA_DIR": str(tmp_path)}, str(tmp_path), BUNDLED_ROOT)
    assert absolute == []


def test_a_spent_store_in_a_missing_data_dir_warns_at_boot(tmp_path):
    missing = tmp_path / "missing"
    _, warned = build_deployment({"MCP_CONFIRM_SECRET": "s1", "MCP_DATA_DIR": str(missing)}, cwd=str(tmp_path))
    _, present = build_deployment({"MCP_CONFIRM_SECRET": "s1", "MCP_DATA_DIR": str(tmp_path)}, cwd=str(tmp_path))
    _, in_memory = build_deployment({"MCP_DATA_DIR": str(missing)}, cwd=str(tmp_path))  # a random key: no store
    assert [(w.variable, w.problem) for w in warned if w.variable == "MCP_DATA_DIR"] == [(
        "MCP_DATA_DIR",
        "is not an existing directory, so no token or request state can be recorded as spent, and a run confirmed "
        "by one (any client without elicitation) is refused after the user approved it; create it, writable by the "
        "server's user (the server creates only .mcp-confirm/spent in it)",
    )]
    assert [w for w in (*present, *in_memory) if w.variable == "MCP_DATA_DIR"] == []
    assert not missing.exists()


def test_a_spent_store_the_servers_user_cannot_write_warns_at_boot():
    # The token was offered and approved, then refused as spend-failed: the boot said nothing.
    shared = world_readable_dir()
    try:
        (shared / "locked").mkdir(mode=0o755)  # root's: uid 10001 may enter it, not write in it
        (shared / "own" / ".mcp-confirm" / "spent").mkdir(parents=True)
        for level in (".mcp-confirm", ".mcp-confirm/spent"):  # both the server's: a spend makes each private
            os.chown(shared / "own" / level, UNPRIVILEGED_UID, UNPRIVILEGED_UID)

        def data_dir_warnings(data_dir: str, serving: bool) -> list[str]:
            environ = {"MCP_CONFIRM_SECRET": "s1", "MCP_DATA_DIR": data_dir}
            scrub = ScrubResult("scrubbed", wiped_bytes=1) if serving else None
            _, warnings = build_deployment(environ, cwd=str(shared), scrub=scrub)
            return [w.problem for w in warnings if w.variable == "MCP_DATA_DIR"]

        locked, own = str(shared / "locked"), str(shared / "own")
        seen = as_unprivileged(lambda: [data_dir_warnings(locked, True), data_dir_warnings(own, True),
                                        data_dir_warnings(locked, False)])  # fmt: skip
    finally:
        shutil.rmtree(shared)
    assert seen[0] == [
        "is not writable by the server's user, so no token or request state can be recorded as spent, and a run "
        "confirmed by one (any client without elicitation) is refused after the user approved it; make it "
        "writable (the server creates only .mcp-confirm/spent in it)"
    ]
    assert seen[1:] == [[], []]  # its own store is writable; `check` judges no server's user


@pytest.mark.parametrize("name", ["MCP_SKILL_ALLOW_UNSCRUBBED", "MCP_EGRESS_FENCED"])
@pytest.mark.parametrize(
    ("value", "on", "warned"), [("1", True, False), ("true", False, True), ("yes", False, True), ("0", False, True)]
)
def test_flags_are_on_only_for_1_and_any_other_value_warns(name, value, on, warned):
    config, warnings = load(**{name: value})
    field = {"MCP_SKILL_ALLOW_UNSCRUBBED": "allow_unscrubbed", "MCP_EGRESS_FENCED": "egress_fenced"}[name]
    assert getattr(config, field) is on
    assert [(warning.variable, warning.problem) for warning in warnings] == (
        [(name, "only the value 1 turns this on; it stays off")] if warned else []
    )


@pytest.mark.parametrize("value", ["${SKILL_GRANT}", "null", " undefined "])
def test_a_grant_that_counts_as_unset_although_set_warns_without_its_value(value):
    # A host that never filled its placeholder in: standalone, every declared script may then run once confirmed.
    config, warnings = load_config({"MCP_SKILL_RUN": value}, "/work", BUNDLED)
    assert config.grant_raw is None
    assert warnings == [ConfigWarning("MCP_SKILL_RUN", NO_GRANT_FROM_PLACEHOLDER)]
    assert "SKILL_GRANT" not in NO_GRANT_FROM_PLACEHOLDER


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_grant_is_unset_without_a_warning(value):
    assert load_config({"MCP_SKILL_RUN": value}, "/work", BUNDLED)[1] == []


@needs_root
@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs prlimit")
@pytest.mark.parametrize(
    ("name", "option", "hard", "shown"),
    [("MCP_SKILL_RLIMIT_NPROC", "--nproc", 500, "500 processes"),
     ("MCP_SKILL_RLIMIT_AS_MB", "--as", 8 * 2**30, "8192 MiB")],
)  # fmt: skip
def test_a_script_limit_above_the_servers_hard_limit_warns_at_boot_that_no_script_would_start(name, option, hard, shown):
    # A script may not raise a hard limit it inherits, so every run failed to start, after its confirmation: the
    # boot said nothing, and skill_list reported the limit as applied.
    command = ["prlimit", f"{option}={hard}:{hard}", "setpriv", f"--reuid={UNPRIVILEGED_UID}",
               f"--regid={UNPRIVILEGED_UID}", "--clear-groups", sys.executable, "-m", "skill_mcp"]  # fmt: skip
    seen = {}
    at_the_limit = shown.split()[0]
    for value in ("100000", at_the_limit, "400"):
        with running(command, clean_environ(**{name: value}), cwd="/") as client:
            legacy_handshake(client)
            client.close_stdin()
            assert client.wait() == 0
        seen[value] = [event["problem"] for event in client.log_events()
                       if event["event"] == "config.warning" and event["variable"] == name]  # fmt: skip
    assert seen == {
        "100000": [
            f"is above the hard limit the server was started with ({shown}), which a script may not raise, so every "
            "script would fail to start; set it to at most that, or start the server with a higher hard limit"
        ],
        at_the_limit: [],
        "400": [],
    }
    # `list` under the same limit judges no server's: the server's own start may set another.
    listed = subprocess.run([*command, "list"], env=clean_environ(**{name: "100000"}), cwd="/", capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    assert listed.returncode == 0 and name not in listed.stderr


@needs_root
@pytest.mark.skipif(not shutil.which("prlimit"), reason="needs prlimit")
def test_root_without_cap_sys_resource_is_warned_like_any_user_that_no_script_would_start():
    # A container's root usually lacks CAP_SYS_RESOURCE: being root is not what lets a script raise a hard limit.
    command = ["prlimit", f"--as={8 * 2**30}:{8 * 2**30}", "setpriv", "--bounding-set=-sys_resource",
               sys.executable, "-m", "skill_mcp"]  # fmt: skip
    with running(command, clean_environ(MCP_SKILL_RLIMIT_AS_MB="100000"), cwd="/") as client:
        legacy_handshake(client)
        client.close_stdin()
        assert client.wait() == 0
    assert [event["problem"] for event in client.log_events()
            if event["event"] == "config.warning" and event["variable"] == "MCP_SKILL_RLIMIT_AS_MB"] == [
        "is above the hard limit the server was started with (8192 MiB), which a script may not raise, so "
        "every script would fail to start; set it to at most that, or start the server with a higher hard limit"
    ]  # fmt: skip


@needs_root
def test_a_script_limit_under_an_unlimited_hard_limit_draws_no_warning():
    if resource.getrlimit(resource.RLIMIT_AS)[1] != resource.RLIM_INFINITY:
        pytest.skip("needs an unlimited hard RLIMIT_AS")
    command = ["setpriv", f"--reuid={UNPRIVILEGED_UID}", f"--regid={UNPRIVILEGED_UID}", "--clear-groups",
               sys.executable, "-m", "skill_mcp"]  # fmt: skip
    with running(command, clean_environ(MCP_SKILL_RLIMIT_AS_MB="100000"), cwd="/") as client:
        legacy_handshake(client)
        client.close_stdin()
        assert client.wait() == 0
    assert [event for event in client.log_events() if event["event"] == "config.warning"] == []
