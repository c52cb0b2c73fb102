"""Runs the engine-free egress stage (ci/netns-egress-test.sh, SPEC §15.6 item 2) from pytest."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "ci" / "netns-egress-test.sh"


def missing_prerequisite() -> str | None:
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "needs root to create network namespaces"
    for tool in ("ip", "nft", "setpriv", "bash"):
        if shutil.which(tool) is None:
            return f"needs {tool} on PATH (apt-get install iproute2 nftables)"
    if not os.access("/usr/bin/python3", os.X_OK):
        return "needs /usr/bin/python3 (runnable by uid 10001/10002)"
    return None


def test_netns_egress_policy() -> None:
    reason = missing_prerequisite()
    if reason:
        pytest.skip(f"netns egress test skipped: {reason}")
    proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, timeout=120)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output
    assert "SKIP:" not in output, output
    assert "PASS: netns egress test" in proc.stdout, output
