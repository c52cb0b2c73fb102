"""What a script leaves running, killed (SPEC §9.4): its session's groups, a group another uid owns, and the sweep of
adopted orphans raced by their reaping; runs through the whole fence are in test_runner.py and test_fence_e2e.py."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support import as_unprivileged, kill_quietly, needs_root, process_gone

from skill_mcp.reaper import kill_process_group

SCRIPTS = Path(__file__).parent / "fixtures" / "scripts"


def _session(*args: str) -> tuple[subprocess.Popen, list[int]]:
    """regrouped_child.py as a script's session leader, run to its exit (reaped); its regrouped children live."""
    leader = subprocess.Popen(
        [sys.executable, str(SCRIPTS / "regrouped_child.py"), *args], stdout=subprocess.PIPE, text=True,
        start_new_session=True,
    )  # fmt: skip
    return leader, [int(pid) for pid in re.findall(r"grandchild (\d+)", leader.communicate()[0])]


def _allprocess_gone(children: list[int], seconds: float = 5) -> bool:
    deadline = time.monotonic() + seconds
    while not all(map(process_gone, children)) and time.monotonic() < deadline:  # a signal lands asynchronously
        time.sleep(0.01)
    return all(map(process_gone, children))


def test_killing_a_group_whose_leader_is_gone_still_reports_its_session() -> None:
    # The leader exited (and was reaped): its group is empty, but the children it moved to groups of their own
    # are still in its session, and are what was signalled.
    leader, children = _session("6")
    try:
        assert len(children) == 6
        assert kill_process_group(leader.pid) is True
        assert _allprocess_gone(children)
        assert kill_process_group(leader.pid) is False  # nothing left to signal
    finally:
        for child in children:
            kill_quietly(child)


def test_a_timeouts_sigterm_reaches_every_group_of_the_session(tmp_path: Path) -> None:
    marker = tmp_path / "terms"
    leader, children = _session("3", str(marker))
    try:
        assert kill_process_group(leader.pid, signal.SIGTERM) is True
        assert _allprocess_gone(children)
        assert marker.read_text() == "term\n" * 3
    finally:
        for child in children:
            kill_quietly(child)


def test_a_timeouts_sigterm_reaches_each_group_once_even_when_it_is_handled(tmp_path: Path) -> None:
    # A script that cleans up on SIGTERM and keeps running must see one SIGTERM, not one per pass of the sweep.
    marker = tmp_path / "terms"
    leader, children = _session("3", str(marker), "stay")
    try:
        assert kill_process_group(leader.pid, signal.SIGTERM) is True
        deadline = time.monotonic() + 5
        while (not marker.exists() or marker.read_text().count("term") < 3) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # a repeated SIGTERM would have landed by now
        assert marker.read_text() == "term\n" * 3
        assert not any(map(process_gone, children))
    finally:
        for child in children:
            kill_quietly(child)


@needs_root
def test_a_group_another_uid_owns_is_not_signalled_and_raises_nothing() -> None:
    # A pid reused by another user's process (or a script's group it cannot signal) refuses with EPERM: the kill
    # reports nothing signalled instead of raising out of a timer or the exit watcher.
    owner = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        assert as_unprivileged(lambda: kill_process_group(owner.pid)) is False
        assert as_unprivileged(lambda: kill_process_group(owner.pid, signal.SIGTERM)) is False
        assert owner.poll() is None
    finally:
        owner.kill()
        owner.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="adopting orphans (a subreaper) is Linux-only")
def test_a_child_collected_between_the_sweeps_listing_and_its_kill_does_not_end_the_sweep() -> None:
    # Without pidfds the SIGCHLD handler collects on the loop while the sweep runs on a waiter thread: a process
    # collected in between has handed its daemon to the server, and the sweep must go on to find it.
    race = Path(__file__).parent / "fixtures" / "sweep_race.py"
    completed = subprocess.run([sys.executable, str(race)], capture_output=True, text=True, timeout=30, check=True)
    assert json.loads(completed.stdout) == {"daemonSurvived": False}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="adopting orphans (a subreaper) is Linux-only")
def test_reaping_what_died_spares_a_leader_its_popen_has_not_reaped() -> None:
    # Reaped with the orphans, the leader's exit code would be lost: its Popen would read 0 for it.
    server = """if True:
        import subprocess, sys, time
        from skill_mcp.hardening import adopt_orphans
        from skill_mcp.reaper import reap_adopted_as_they_die, track_leader
        assert adopt_orphans()
        leader = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
        track_leader(leader.pid)
        while open(f"/proc/{leader.pid}/stat").read().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)
        reap_adopted_as_they_die()
        print(leader.wait())
    """
    completed = subprocess.run([sys.executable, "-c", server], capture_output=True, text=True, timeout=30, check=True)
    assert completed.stdout == "3\n"
