"""A failed environ scrub on a hosted server blocks every run, fail closed, and any failed hardening step warns
(SPEC §9.7; §17 items 122–123)."""

from __future__ import annotations

import pytest
import structlog.testing
from support import ERAS, connect, deployment_for, error_text, payload, write_skill

from skill_mcp.hardening import ScrubResult
from skill_mcp.logs import get_logger, log_boot, log_ready

FAILED = ScrubResult("failed", reason="/proc/self/stat carries no usable env_start/env_end (nothing written)")
GRANT = '[{"skill": "skill-mcp-demo", "script": "scripts/report.py"}]'
HOSTED = {"PATH": "/usr/bin:/bin", "MCP_DATA_DIR": "/data", "MCP_SKILL_RUN": GRANT, "MCP_SKILL_PYTHON": "/usr/bin/python3"}
RUN = {"name": "skill-mcp-demo", "script": "scripts/report.py"}

pytestmark = pytest.mark.anyio


@pytest.fixture(params=ERAS)
def era(request):
    return request.param


async def test_hosted_and_unscrubbed_refuses_every_run_but_keeps_serving(era) -> None:
    deployment = deployment_for(HOSTED, scrub=FAILED)
    async with connect(deployment, era) as client:
        refused = error_text(await client.call_tool("skill_run", RUN))
        listing = payload(await client.call_tool("skill_list", {}))
        loaded = payload(await client.call_tool("skill_load", {"name": "skill-mcp-demo"}))
    assert refused.startswith("no script may run on this server: the exec-time environment block could not be wiped")
    for needed in ("/proc/<pid>/environ", "MCP_SKILL_ALLOW_UNSCRUBBED=1", "carries no usable env_start"):
        assert needed in refused
    assert refused.endswith(
        "\n\nHint: Every skill's instructions and files are still served via skill_load and skill_file."
    )
    [problem] = [p for p in listing["problems"] if p["reason"] == "environ-unscrubbed"]
    assert problem["path"] == "/proc/self/environ" and "MCP_SKILL_ALLOW_UNSCRUBBED" in problem["detail"]
    assert [skill["executable"] for skill in listing["skills"]] == [False]
    assert listing["hardening"]["environScrubbed"] is False
    assert loaded["name"] == "skill-mcp-demo"


def test_the_unscrubbed_problem_comes_between_grant_and_extension_problems(tmp_path) -> None:
    # §7.1 lists problems in the order of §3, whose table puts environ-unscrubbed after grant and before
    # extension-excluded.
    write_skill(tmp_path, "fine")
    write_skill(tmp_path, "no-name", "description: d\n")  # served, but left out of the Skills extension
    grant = '[{"skill": "fine", "script": "scripts/missing.py"}]'
    deployment = deployment_for({**HOSTED, "SKILLS_DIR": str(tmp_path), "MCP_SKILL_RUN": grant}, scrub=FAILED)
    assert [problem.reason for problem in deployment.problems] == ["grant", "environ-unscrubbed", "extension-excluded"]


@pytest.mark.parametrize(
    "environ",
    [
        {**HOSTED, "MCP_SKILL_ALLOW_UNSCRUBBED": "1"},
        {"PATH": "/usr/bin:/bin", "MCP_SKILL_PYTHON": "/usr/bin/python3"},  # standalone: the failure only warns
    ],
    ids=["owner-override", "standalone"],
)
async def test_the_override_or_standalone_reaches_confirmation(era, environ) -> None:
    deployment = deployment_for(environ, scrub=FAILED)
    async with connect(deployment, era) as client:
        answer = payload(await client.call_tool("skill_run", RUN))
        listing = payload(await client.call_tool("skill_list", {}))
    assert answer["status"] == "confirmation-required"
    assert all(problem["reason"] != "environ-unscrubbed" for problem in listing["problems"])
    assert [skill["executable"] for skill in listing["skills"]] == [True]


@pytest.mark.parametrize("environ", [HOSTED, {**HOSTED, "MCP_SKILL_ALLOW_UNSCRUBBED": "1"}, {"PATH": "/usr/bin"}])
@pytest.mark.parametrize("non_dumpable", [True, False])
def test_each_failed_hardening_step_warns_at_boot(environ, non_dumpable) -> None:
    # §9.7: a failed scrub warns always (blocked or not); a failed PR_SET_DUMPABLE warns and blocks nothing.
    deployment = deployment_for(environ, scrub=FAILED, non_dumpable=non_dumpable)
    with structlog.testing.capture_logs() as events:
        log_boot(get_logger(), deployment, [], FAILED, [])
    warned = [(event["step"], event["problem"]) for event in events if event["event"] == "hardening.warning"]
    expected = [("environ-scrub", FAILED.reason)]
    if not non_dumpable:
        expected.append(("non-dumpable", "prctl(PR_SET_DUMPABLE, 0) did not hold; a script of this uid could read this server's memory"))
    assert warned == expected
    (boot,) = [event for event in events if event["event"] == "boot"]
    assert (boot["environScrub"], boot["nonDumpable"]) == ("failed", non_dumpable)


def test_a_scrubbed_and_non_dumpable_boot_does_not_warn() -> None:
    scrubbed = ScrubResult("scrubbed", wiped_bytes=100)
    with structlog.testing.capture_logs() as events:
        log_boot(get_logger(), deployment_for({"PATH": "/usr/bin"}, scrub=scrubbed, non_dumpable=True), [], scrubbed, [])
    assert not [event for event in events if event["log_level"] == "warning"]


async def test_an_unknown_skill_is_named_before_the_block(era) -> None:
    # §9.1: step 2 (unknown skill) comes before step 3 (runs blocked).
    deployment = deployment_for(HOSTED, scrub=FAILED)
    async with connect(deployment, era) as client:
        refused = error_text(await client.call_tool("skill_run", {"name": "nope", "script": "scripts/report.py"}))
    assert refused.startswith('no skill named "nope"')


@pytest.mark.parametrize("script", ["scripts/report.js", "scripts/undeclared.py", "../x/y.py"])
async def test_the_block_is_reported_before_the_script_is_judged(era, script) -> None:
    # §9.1: step 3 (runs blocked) comes before step 4 (not granted / not declared).
    deployment = deployment_for(HOSTED, scrub=FAILED)
    async with connect(deployment, era) as client:
        refused = error_text(await client.call_tool("skill_run", {"name": "skill-mcp-demo", "script": script}))
    assert refused.startswith("no script may run on this server: the exec-time environment block could not be wiped")


def test_the_ready_line_says_no_script_may_run_while_runs_are_blocked() -> None:
    deployment = deployment_for(HOSTED, scrub=FAILED)
    with structlog.testing.capture_logs() as events:
        log_ready(get_logger(), deployment)
    (ready,) = [event["message"] for event in events if event["event"] == "ready"]
    assert "and no script may run (the environ scrub failed; skill_list says why);" in ready


def test_where_no_hardening_is_supported_nothing_warns() -> None:
    # Off Linux neither step is attempted (scrub "unsupported", nonDumpable false): that is not a failed step.
    unsupported = ScrubResult("unsupported")
    deployment = deployment_for({"PATH": "/usr/bin"}, scrub=unsupported, non_dumpable=False)
    with structlog.testing.capture_logs() as events:
        log_boot(get_logger(), deployment, [], unsupported, [])
    assert not [event for event in events if event["log_level"] == "warning"]
    (boot,) = [event for event in events if event["event"] == "boot"]
    assert (boot["environScrub"], boot["nonDumpable"]) == ("unsupported", False)
    assert deployment.hardening.environ_scrubbed is False  # §9.7: true only for a scrub that was done


@pytest.mark.parametrize(("setting", "logged"), [({}, "on"), ({"MCP_CONFIRM_ELICITATION": "off"}, "off")])
def test_boot_reports_whether_elicitation_is_used(setting, logged) -> None:
    deployment = deployment_for({"PATH": "/usr/bin", **setting})
    with structlog.testing.capture_logs() as events:
        log_boot(get_logger(), deployment, [], ScrubResult("scrubbed", wiped_bytes=1), [])
    (boot,) = [event for event in events if event["event"] == "boot"]
    assert boot["elicitation"] == logged


def test_a_malformed_grant_warns_at_boot_without_its_text() -> None:
    # §2.1: the grant's text (which names skills and variables) is never logged, only what is wrong with it.
    deployment = deployment_for({"PATH": "/usr/bin", "MCP_SKILL_RUN": '[{"skill": "GRANT-SENTINEL", "bogus": 1}]'})
    with structlog.testing.capture_logs() as events:
        log_boot(get_logger(), deployment, [], ScrubResult("scrubbed", wiped_bytes=1), [])
    warned = [event for event in events if event["event"] == "config.warning"]
    assert [(event["variable"], event["log_level"]) for event in warned] == [("MCP_SKILL_RUN", "warning")]
    assert warned[0]["problem"] == deployment.grant.grant_error and "unknown key" in warned[0]["problem"]
    assert "GRANT-SENTINEL" not in repr(events)


def test_each_startup_lever_that_could_not_apply_warns_at_boot() -> None:
    deployment = deployment_for({"PATH": "/usr/bin"})
    with structlog.testing.capture_logs() as events:
        log_boot(get_logger(), deployment, [], ScrubResult("scrubbed", wiped_bytes=1), ["frozen-gc", "skipped-inits"])
    assert [event["lever"] for event in events if event["event"] == "startup.warning"] == ["frozen-gc", "skipped-inits"]


ROOT_WARNING = (
    "uid",
    "the server runs as root, so its scripts do too, and root reads any process's memory and environment whatever "
    "the server's non-dumpable flag; run the server as an unprivileged user (the appliance's fenced start does)",
)
SCRUBBED = ScrubResult("scrubbed", wiped_bytes=100)
STANDALONE = {"PATH": "/usr/bin:/bin", "MCP_SKILL_PYTHON": "/usr/bin/python3"}


@pytest.mark.parametrize(
    ("environ", "scrub", "as_root", "warns"),
    [
        (STANDALONE, SCRUBBED, True, True),
        (STANDALONE, SCRUBBED, False, False),
        ({**HOSTED, "MCP_SKILL_RUN": "[]"}, SCRUBBED, True, False),  # nothing may run, so root runs nothing
        (HOSTED, FAILED, True, False),  # runs are blocked: the block is the warning that matters
    ],
    ids=["root-with-runnable-scripts", "unprivileged", "root-granting-nothing", "root-blocked"],
)
def test_a_root_server_whose_scripts_may_run_warns_that_they_run_as_root(environ, scrub, as_root, warns) -> None:
    # Non-dumpable keeps out processes of the same uid only: root's scripts read the server regardless.
    deployment = deployment_for(environ, scrub=scrub, non_dumpable=True)
    with structlog.testing.capture_logs() as events:
        log_boot(get_logger(), deployment, [], scrub, [], as_root=as_root)
    uid_warnings = [(e["step"], e["problem"]) for e in events if e["event"] == "hardening.warning" and e["step"] == "uid"]
    assert uid_warnings == ([ROOT_WARNING] if warns else [])
