"""A failed environ scrub on a hosted server blocks every run, fail closed (SPEC §9.7 step 3; §17 items 122–123)."""

from __future__ import annotations

import pytest
from support import ERAS, connect, deployment_for, error_text, payload

from skill_mcp.hardening import ScrubResult

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
