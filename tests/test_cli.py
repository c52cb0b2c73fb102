"""The CLI as users run it (SPEC §14): real `skill-mcp` subprocesses from an unrelated directory,
with stdin left open, so a command that started a server would hang and fail the timeout."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import pty
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from importlib import metadata
from pathlib import Path

import pytest
from conftest import make_skill
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from support import UNPRIVILEGED_UID, fails_after, payload, world_readable_dir

from skill_mcp.config import BUNDLED_ROOT
from skill_mcp.limits import MAX_FILE_BYTES, MAX_SCRIPT_BYTES, MAX_SKILL_MD_BYTES
from skill_mcp.stderr import BACKLOG_LINES, BackgroundStderr

SKILL_MCP = os.path.join(os.path.dirname(sys.executable), "skill-mcp")
ENTRY_POINTS = {"script": [SKILL_MCP], "module": [sys.executable, "-m", "skill_mcp"]}
BASE_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
PROMPT_SECONDS = 60


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def run_cli(
    args: list[str], cwd: Path, env: dict[str, str] | None = None, via: str = "script", uid: int | None = None
) -> tuple[int, str, str]:
    """Exit code, stdout and stderr; stdin stays open and output goes to files, so nothing can block on it. With
    `uid`, the command runs as that user and group (setpriv), as the appliance runs the server."""
    as_user = [] if uid is None else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
    out, err = cwd / ".cli-stdout", cwd / ".cli-stderr"
    with open(out, "wb") as stdout, open(err, "wb") as stderr:
        process = subprocess.Popen(
            [*as_user, *ENTRY_POINTS[via], *args], cwd=cwd, env={**BASE_ENV, **(env or {})},
            stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
        )  # fmt: skip
        try:
            code = process.wait(timeout=PROMPT_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            pytest.fail(f"skill-mcp {' '.join(args)} did not exit with stdin open: it started a server")
        finally:
            assert process.stdin is not None
            process.stdin.close()
    return code, out.read_text(encoding="utf-8"), err.read_text(encoding="utf-8")


def cli_json(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> object:
    code, stdout, stderr = run_cli([*args, "--json"], cwd, env)
    assert code in (0, 1), stderr
    return json.loads(stdout)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory unrelated to the repository and to the skills."""
    cwd = tmp_path.resolve() / "elsewhere"
    cwd.mkdir()
    return cwd


def outside_venv_python() -> str:
    python = os.path.realpath(sys.executable)
    if python.startswith(sys.prefix + os.sep):
        pytest.skip("no python3 outside the test virtual environment")
    return python


RUNNER = """name: {name}
description: The {name} skill.
mcp-host:
  version: 1
  run:
    - script: scripts/run.py
      interpreter: python3
    - script: scripts/run.sh
      interpreter: bash
  egress: [{egress}]
"""

SHELL_ONLY = """name: shell-only
description: d
mcp-host:
  version: 1
  run:
    - script: run.sh
      interpreter: bash
  egress: [z.example]
"""


def grant(skill: str, script: str) -> dict[str, str]:
    return {"MCP_SKILL_RUN": json.dumps([{"skill": skill, "script": script}])}


def runnable_tree(root: Path) -> None:
    """`fetch` and `upload` can run python3; `shell-only` declares only an interpreter that never runs."""
    scripts = {"scripts/run.py": "", "scripts/run.sh": ""}
    for name, egress in (("fetch", "b.example, a.example"), ("upload", "a.example, c.example")):
        make_skill(root, name, RUNNER.format(name=name, egress=egress), files=scripts)
    make_skill(root, "shell-only", SHELL_ONLY, files={"run.sh": ""})


# --- version, usage, exit codes ---------------------------------------------------------------


@pytest.mark.parametrize("via", ENTRY_POINTS)
def test_version_is_the_installed_package_version(elsewhere: Path, via: str) -> None:
    code, stdout, _ = run_cli(["--version"], elsewhere, via=via)
    assert (code, stdout.strip()) == (0, f"skill-mcp {metadata.version('skill-mcp')}")


def test_help_says_where_roots_come_from_and_what_the_exit_codes_mean(elsewhere: Path) -> None:
    code, stdout, _ = run_cli(["--help"], elsewhere)
    words = " ".join(stdout.split())
    assert code == 0 and "MCP_SKILLS_PATH or SKILLS_DIR" in words and "bundled demo skill" in words
    assert "0 ok, 1 `check` found problems, 2 usage error" in words
    code, stdout, _ = run_cli(["check", "--help"], elsewhere)
    assert code == 0 and "ROOT" in stdout and "default: the configured roots" in " ".join(stdout.split())


@pytest.mark.parametrize(
    "args", [["check", "--bogus"], ["list", "--nope"], ["frobnicate"], ["c"], ["check", "--json=yes"]]
)
def test_usage_errors_exit_2(elsewhere: Path, args: list[str]) -> None:
    code, stdout, stderr = run_cli(args, elsewhere)
    assert code == 2 and stdout == "" and "usage:" in stderr


@pytest.mark.parametrize(
    ("args", "usage"),
    [
        (["check", "--bogus"], "usage: skill-mcp check [-h] [--json] [ROOT ...]"),
        (["list", "a", "--nope"], "usage: skill-mcp list [-h] [--json] [--egress] [ROOT ...]"),
        (["serve", "--nope"], "usage: skill-mcp serve [-h]"),
    ],
)
def test_an_unknown_flag_shows_its_subcommands_usage(elsewhere: Path, args: list[str], usage: str) -> None:
    code, _, stderr = run_cli(args, elsewhere)
    assert code == 2 and stderr.splitlines()[0] == usage


@pytest.mark.parametrize("via", ENTRY_POINTS)
def test_the_bundled_demo_skill_checks_clean(elsewhere: Path, via: str) -> None:
    code, stdout, stderr = run_cli(["check"], elsewhere, via=via)
    assert (code, stdout) == (0, "1 skill(s), 0 problem(s)\n")
    # an author who forgot the ROOT is told what was checked instead
    assert stderr == (
        "skill-mcp: note: no ROOT argument, MCP_SKILLS_PATH or SKILLS_DIR, so this checked the bundled demo skill; "
        "pass the directory that holds your skills, e.g. `skill-mcp check ./skills`\n"
    )
    assert cli_json(["check"], elsewhere) == {"roots": [BUNDLED_ROOT], "skills": ["skill-mcp-demo"], "problems": []}


def notes_of_a_clean_check(root: Path, elsewhere: Path, skills: int, uid: int | None = None) -> list[str]:
    """The notes `check` prints on stderr for a root without problems, which leave its exit code 0."""
    code, stdout, stderr = run_cli(["check", str(root)], elsewhere, uid=uid)
    assert (code, stdout) == (0, f"{skills} skill(s), 0 problem(s)\n")
    return stderr.splitlines()


def first_eight_quoted(path_template: str) -> str:
    return ", ".join(f'"{path_template.format(index)}"' for index in range(8)) + ", …"


def test_check_notes_scripts_no_deployment_can_run_without_failing(root: Path, elsewhere: Path) -> None:
    runnable_tree(root)
    never = 'declares the interpreter "bash", and skill-mcp runs only node and python3, so it never runs'
    assert notes_of_a_clean_check(root, elsewhere, skills=3) == [
        f'skill-mcp: note: fetch: "scripts/run.sh" {never}',
        f'skill-mcp: note: shell-only: "run.sh" {never}',
        f'skill-mcp: note: upload: "scripts/run.sh" {never}',
    ]


def test_on_a_terminal_the_notes_come_before_the_report_and_never_inside_its_lines(root: Path, elsewhere: Path) -> None:
    # Both streams on one terminal: stderr's writer thread used to put a note between a line and its newline.
    runnable_tree(root)
    for _ in range(5):
        controller, terminal = pty.openpty()
        process = subprocess.Popen([*ENTRY_POINTS["script"], "check", str(root)], cwd=elsewhere, env=BASE_ENV,
                                   stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal)  # fmt: skip
        os.close(terminal)
        seen = b""
        with contextlib.suppress(OSError):  # EIO once the command has exited and closed the terminal
            while chunk := os.read(controller, 65536):
                seen += chunk
        os.close(controller)
        assert process.wait(timeout=PROMPT_SECONDS) == 0
        lines = seen.decode().splitlines()
        assert [line[: len("skill-mcp: note:")] for line in lines[:3]] == ["skill-mcp: note:"] * 3
        assert lines[3:] == ["3 skill(s), 0 problem(s)"]


def test_check_notes_a_root_holding_no_skill(root: Path, elsewhere: Path) -> None:
    # Exit 0 is right (no problem), but an author pointing at the wrong folder is told that nothing was checked.
    code, stdout, stderr = run_cli(["check", str(root)], elsewhere)
    assert (code, stdout) == (0, "0 skill(s), 0 problem(s)\n")
    assert stderr == (
        f"skill-mcp: note: no skill was found under {root}: a skill is a directory holding a SKILL.md, given as a "
        "ROOT itself or placed in a ROOT or in its `skills` directory\n"
    )
    (root / "notes").mkdir()  # a problem already says why: no note
    assert run_cli(["check", str(root)], elsewhere)[2] == ""


def test_check_given_a_skill_md_says_to_give_its_directory(root: Path, elsewhere: Path) -> None:
    skill_md = make_skill(root, "alpha") / "SKILL.md"
    code, stdout, stderr = run_cli(["check", str(skill_md)], elsewhere)
    assert code == 1 and f"root-unreadable  {skill_md}: not a directory" in stdout
    assert stderr == f"skill-mcp: note: {skill_md} is a skill's SKILL.md: give its directory, {root / 'alpha'}\n"


def test_check_given_another_file_or_a_missing_skill_md_adds_no_note(root: Path, elsewhere: Path) -> None:
    # The hint is for a SKILL.md that is there: a README given by mistake, or a path that does not exist, is the
    # problem alone.
    readme = make_skill(root, "alpha", files={"README.md": ""}) / "README.md"
    missing = root / "beta" / "SKILL.md"
    for given, detail in ((readme, "not a directory"), (missing, "No such file or directory")):
        code, stdout, stderr = run_cli(["check", str(given)], elsewhere)
        assert code == 1 and f"root-unreadable  {given}: {detail}" in stdout
        assert stderr == ""


def test_check_notes_what_clients_will_not_see_of_a_skill(root: Path, elsewhere: Path) -> None:
    skill = make_skill(root, "big", body="x" * MAX_SKILL_MD_BYTES)
    for index in range(9):
        (skill / f"link{index}").symlink_to("SKILL.md" if index % 2 else "/etc/passwd")
    os.mkfifo(skill / "pipe")
    make_skill(root, "plain")
    assert notes_of_a_clean_check(root, elsewhere, skills=2) == [
        f"skill-mcp: note: big: SKILL.md is over {MAX_SKILL_MD_BYTES} bytes, so the instructions skill_load returns "
        f"stop at byte {MAX_SKILL_MD_BYTES} of the file (frontmatter included); skill_file reads up to {MAX_FILE_BYTES} bytes of it",
        f"skill-mcp: note: big: 10 symbolic link(s) or special file(s) are not listed, so clients are not offered "
        f"them: {first_eight_quoted('link{}')}; skill_file reads a link by its path only while it resolves inside the skill",
    ]


def test_check_notes_an_unlisted_link_without_implying_more(root: Path, elsewhere: Path) -> None:
    skill = make_skill(root, "linked")
    (skill / "link").symlink_to("SKILL.md")
    code, _, stderr = run_cli(["check", str(root)], elsewhere)
    assert code == 0 and stderr == (
        'skill-mcp: note: linked: 1 symbolic link(s) or special file(s) are not listed, so clients are not offered '
        'them: "link"; skill_file reads a link by its path only while it resolves inside the skill\n'
    )


def test_check_notes_files_clients_get_cut_and_scripts_too_large_to_run(root: Path, elsewhere: Path) -> None:
    sizes = {
        **{f"data/{index}.bin": MAX_FILE_BYTES + 1 for index in range(9)},
        "data/exact.bin": MAX_FILE_BYTES,
        "scripts/run.py": MAX_SCRIPT_BYTES + 1,
        "scripts/run.sh": MAX_SCRIPT_BYTES,  # at the cap: only its interpreter keeps it from running
    }
    skill = make_skill(root, "heavy", RUNNER.format(name="heavy", egress=""), files=dict.fromkeys(sizes, ""))
    for path, size in sizes.items():
        os.truncate(skill / path, size)  # sparse: no disk is spent
    assert notes_of_a_clean_check(root, elsewhere, skills=1) == [
        f"skill-mcp: note: heavy: 11 file(s) are over {MAX_FILE_BYTES} bytes, so skill_file and resources/read "
        f"return only their first {MAX_FILE_BYTES} bytes: {first_eight_quoted('data/{}.bin')}",
        f'skill-mcp: note: heavy: "scripts/run.py" is {MAX_SCRIPT_BYTES + 1} bytes, over the {MAX_SCRIPT_BYTES}-byte '
        "cap for a script, so skill_run never runs it",
        'skill-mcp: note: heavy: "scripts/run.sh" declares the interpreter "bash", and skill-mcp runs only node and '
        "python3, so it never runs",
    ]


@pytest.fixture
def unprivileged_cwd() -> Iterator[Path]:
    """A directory uid 10001 can read, from which it can run this `skill-mcp` (pytest's tmp_path is root's)."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv (util-linux) to run skill-mcp as another user")
    directory = world_readable_dir()
    try:
        code, _, stderr = run_cli(["--version"], directory, uid=UNPRIVILEGED_UID)
        if code != 0:  # a per-user Python build other users cannot execute
            pytest.skip(f"uid {UNPRIVILEGED_UID} cannot run this environment's skill-mcp: {stderr.strip()}")
        yield directory
    finally:
        shutil.rmtree(directory)


def test_check_as_the_servers_user_notes_the_directories_it_cannot_list(unprivileged_cwd: Path) -> None:
    root = unprivileged_cwd / "root"
    files = {"open.md": "o", "docs/guide.md": "g", "docs/private/notes.md": "n", "locked/inside.md": "i"}
    skill = make_skill(root, "partly", files=files)
    for directory in ("docs/private", "locked"):
        (skill / directory).chmod(0o700)  # root's own, so uid 10001 cannot list it
    # A skill directory it may search but not list: its SKILL.md is served, and no file of it is offered.
    make_skill(root, "sealed", files={"guide.md": "g"}).chmod(0o711)
    assert notes_of_a_clean_check(root, unprivileged_cwd, skills=2, uid=UNPRIVILEGED_UID) == [
        "skill-mcp: note: partly: 2 directories could not be listed by this user, so no file in them is "
        'offered to clients: "locked", "docs/private"',
        "skill-mcp: note: sealed: 1 directory could not be listed by this user (\".\" is the skill's own), so no "
        'file in it is offered to clients: "."',
    ]


@pytest.mark.parametrize("args", [["serve", "{root}"], ["{root}"], ["serve", "--flag", "{root}"]])
def test_a_root_given_to_serve_is_a_usage_error_that_names_the_variable(
    root: Path, elsewhere: Path, args: list[str]
) -> None:
    # Started anyway, the server would serve the bundled demo instead of the directory the user meant.
    code, stdout, stderr = run_cli([arg.format(root=root) for arg in args], elsewhere)
    assert (code, stdout) == (2, "")
    assert f"serve takes no ROOT ({root}): it serves the roots in SKILLS_DIR, e.g. " in stderr
    assert f"`SKILLS_DIR={root} skill-mcp`; `check` and `list` take ROOT arguments" in stderr


@pytest.mark.parametrize("command", [["serve"], []])
def test_the_suggested_skills_dir_is_absolute_quoted_and_keeps_every_root(elsewhere: Path, command: list[str]) -> None:
    (elsewhere / "my skills").mkdir()
    (elsewhere / "more").mkdir()
    code, _, stderr = run_cli([*command, "my skills", "more"], elsewhere)
    assert code == 2 and f"`SKILLS_DIR='{elsewhere}/my skills:{elsewhere}/more' skill-mcp`" in stderr
    assert "serve takes no ROOT (my skills more): " in stderr  # each root as the user typed it


@pytest.mark.parametrize("args", [["serve", "chekc"], ["serve", "list"], ["serve", "-h", "."], ["serve", "--help", "."]])
def test_serve_leaves_what_is_not_a_directory_or_asks_for_help_to_the_parser(elsewhere: Path, args: list[str]) -> None:
    code, stdout, stderr = run_cli(args, elsewhere)
    assert "serve takes no ROOT" not in stderr
    assert (code, "usage: skill-mcp serve" in stdout) == (0, True) if args[1] in ("-h", "--help") else code == 2


@pytest.mark.parametrize("command", ["check", "list"])
def test_a_directory_named_like_the_subcommand_is_no_root_given_to_serve(elsewhere: Path, command: str) -> None:
    # An author's working directory may well hold a `check` or `list` directory; the subcommand still runs.
    (elsewhere / command).mkdir()
    code, stdout, stderr = run_cli([command], elsewhere)
    assert code == 0 and "serve takes no ROOT" not in stderr and "1 skill(s)" in stdout


def test_a_file_given_to_serve_is_left_to_the_parser(elsewhere: Path) -> None:
    # Only a directory is taken for a skills root the user meant to serve; a file is an ordinary unknown argument.
    (elsewhere / "notes.txt").write_text("x")
    code, _, stderr = run_cli(["serve", "notes.txt"], elsewhere)
    assert code == 2 and "serve takes no ROOT" not in stderr and "unrecognized arguments: notes.txt" in stderr


def test_a_mistyped_subcommand_before_a_root_is_reported_as_the_typo(root: Path, elsewhere: Path) -> None:
    # `skill-mcp chekc ./skills` meant check: the root after the typo is no root given to serve.
    code, _, stderr = run_cli(["chekc", str(root)], elsewhere)
    assert code == 2 and "serve takes no ROOT" not in stderr and "invalid choice: 'chekc'" in stderr


def test_check_exits_1_on_any_problem_and_list_still_exits_0(root: Path, elsewhere: Path) -> None:
    make_skill(root, "fine")
    assert run_cli(["check", str(root)], elsewhere)[0] == 0
    make_skill(root, "Odd", "name: Odd\ndescription: d\n")
    assert run_cli(["check", str(root)], elsewhere)[0] == 1
    assert run_cli(["list", str(root)], elsewhere)[0] == 0
    assert run_cli(["list", str(root), "--json"], elsewhere)[0] == 0
    assert run_cli(["list", str(root), "--egress"], elsewhere)[0] == 0


def test_check_exits_1_on_a_discovery_problem_alone(root: Path, elsewhere: Path) -> None:
    # §14.2: exit 1 when ANY problem exists, not only `spec` findings.
    make_skill(root, "fine")
    (root / "not-a-skill").mkdir()
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert code == 1
    assert stdout.startswith(f"no-skill-md  {root / 'not-a-skill'}: ")


# --- check ------------------------------------------------------------------------------------


def problem_tree(root: Path) -> None:
    make_skill(root, "fine")
    make_skill(root, "no-name", "description: d\n")  # spec + extension-excluded
    make_skill(root, "broken", "name: [unclosed\n")  # malformed-frontmatter
    make_skill(root, "two\nlines", "name: two-lines\ndescription: d\n")  # unusable-name; a newline in its path
    (root / "not-a-skill").mkdir()  # no-skill-md


def test_check_json_has_the_documented_shape_and_adds_spec_after_discovery(root: Path, elsewhere: Path) -> None:
    problem_tree(root)
    report = cli_json(["check", str(root)], elsewhere)
    assert isinstance(report, dict) and set(report) == {"roots", "skills", "problems"}
    assert report["roots"] == [str(root)] and report["skills"] == ["fine", "no-name"]
    assert all(set(problem) == {"path", "reason", "detail"} for problem in report["problems"])
    assert all(isinstance(value, str) for problem in report["problems"] for value in problem.values())
    reasons = [(problem["reason"], problem["path"]) for problem in report["problems"]]
    assert reasons == [
        ("no-skill-md", str(root / "not-a-skill")),
        ("malformed-frontmatter", str(root / "broken")),
        ("unusable-name", str(root / "two\nlines")),
        ("extension-excluded", str(root / "no-name")),
        ("spec", str(root / "no-name")),
    ]


def test_check_reports_spec_for_the_first_and_only_skill(root: Path, elsewhere: Path) -> None:
    # §14.2: `spec` findings for every served skill, the first one included.
    make_skill(root, "solo", "name: solo\ndescription: d\ncompatibility: " + "c" * 600 + "\n")
    code, stdout, _ = run_cli(["check", str(root), "--json"], elsewhere)
    assert code == 1
    assert [(p["reason"], p["path"]) for p in json.loads(stdout)["problems"]] == [("spec", str(root / "solo"))]


def test_check_reports_spec_for_an_uppercase_name_an_empty_description_and_a_600_char_compatibility(
    root: Path, elsewhere: Path
) -> None:
    # §17 item 163, through the real CLI: each of the three is a `spec` problem of its own skill, and check exits 1.
    make_skill(root, "upper", "name: Upper\ndescription: d\n")
    make_skill(root, "empty", "name: empty\ndescription: ''\n")
    make_skill(root, "compat", "name: compat\ndescription: d\ncompatibility: " + "c" * 600 + "\n")
    code, stdout, _ = run_cli(["check", str(root), "--json"], elsewhere)
    spec = {p["path"]: p["detail"] for p in json.loads(stdout)["problems"] if p["reason"] == "spec"}
    assert code == 1 and set(spec) == {str(root / name) for name in ("upper", "empty", "compat")}
    assert 'name "Upper" is not 1-64 lowercase' in spec[str(root / "upper")]
    assert '"description" is empty' in spec[str(root / "empty")]
    assert "600 characters, over the 500" in spec[str(root / "compat")]


def test_check_human_output_is_one_line_per_problem_then_the_summary(root: Path, elsewhere: Path) -> None:
    problem_tree(root)
    problems = cli_json(["check", str(root)], elsewhere)["problems"]
    assert any("\n" in problem["path"] for problem in problems)  # escaping is exercised
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert code == 1
    assert stdout.splitlines() == [
        *(f"{p['reason']}  {p['path']}: {p['detail']}".replace("\n", "\\u000a") for p in problems),
        "2 skill(s), 5 problem(s)",
    ]


def test_directories_whose_names_differ_by_a_line_break_or_a_space_print_apart(root: Path, elsewhere: Path) -> None:
    for name in ("a b", "a\nb", "a\u2028b"):
        (root / name).mkdir()
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert code == 1
    assert sorted(stdout.splitlines()[:-1]) == [
        f"no-skill-md  {root}/{name}: this directory has no SKILL.md, so it is not a skill"
        for name in ("a b", "a\\u000ab", "a\\u2028b")
    ]


def test_terminal_escapes_in_skill_text_reach_the_terminal_only_as_text(root: Path, elsewhere: Path) -> None:
    # §1.4: skill text is untrusted. A frontmatter name, a description, a script and a directory name each try to
    # clear the screen or rewrite the line above; check, list and check's notes show every one escaped.
    frontmatter = (
        'name: "x\\e[1A\\e[2Ky"\ndescription: "\\e[2J\\e[31mred \\u202eevil"\n'
        'mcp-host:\n  version: 1\n  run:\n    - script: "s\\e[2J.sh"\n      interpreter: bash\n'
    )
    make_skill(root, "evil", frontmatter, files={"s\x1b[2J.sh": "echo\n"})
    (root / "dir\x1b[2J").mkdir()
    outputs = [run_cli(["check", str(root)], elsewhere), run_cli(["list", str(root)], elsewhere)]
    for code, stdout, stderr in outputs:
        for text in (stdout, stderr):
            assert not any(char in text for char in "\x1b\u202e"), text
    check_stdout, list_stdout = outputs[0][1], outputs[1][1]
    assert "\\u001b[2J" in check_stdout and "\\u001b[2J\\u001b[31mred \\u202eevil" in list_stdout
    assert "\\u001b[2J.sh" in outputs[0][2]  # the note on stderr: bash never runs here


def test_an_undecodable_root_argument_is_printed_not_a_crash(elsewhere: Path) -> None:
    strict = {"PYTHONIOENCODING": "utf-8:strict"}  # as under a UTF-8 locale other than C.UTF-8
    code, stdout, stderr = run_cli(["check", os.fsdecode(b"bad\xff"), "--json"], elsewhere, strict)
    assert (code, stderr) == (1, "")
    assert json.loads(stdout)["roots"] == [f"{elsewhere}/bad\udcff"]


def test_relative_roots_are_made_absolute_against_the_working_directory(elsewhere: Path) -> None:
    make_skill(elsewhere / "skills", "fine")
    report = cli_json(["check", "skills", "./skills/fine"], elsewhere)
    assert report["roots"] == [str(elsewhere / "skills"), str(elsewhere / "skills" / "fine")]
    assert report["skills"] == ["fine"]  # one real directory reached twice is one skill
    listing = cli_json(["list", "skills"], elsewhere, {"SKILLS_DIR": "/nonexistent"})
    assert (listing["roots"], listing["rootsFrom"]) == ([str(elsewhere / "skills")], "arguments")


def test_check_ignores_the_owner_grant_that_list_applies(root: Path, elsewhere: Path) -> None:
    make_skill(root, "fine")
    env = grant("fine", "scripts/evil.js")
    assert cli_json(["check", str(root)], elsewhere, env)["problems"] == []
    listing = cli_json(["list", str(root)], elsewhere, env)
    assert [problem["reason"] for problem in listing["problems"]] == ["grant"]
    assert listing["grantFrom"] == "MCP_SKILL_RUN"


# --- list -------------------------------------------------------------------------------------


def test_list_table_has_a_row_per_skill_within_120_characters(root: Path, elsewhere: Path) -> None:
    runnable_tree(root)
    make_skill(root, "wordy", f"name: wordy\ndescription: {'w' * 300}\n")
    env = {"MCP_SKILL_PYTHON": outside_venv_python()}
    code, stdout, _ = run_cli(["list", str(root)], elsewhere, env)
    lines = stdout.splitlines()
    assert code == 0 and lines[0].split() == ["NAME", "FILES", "RUNNABLE", "DESCRIPTION"]
    rows = {line.split()[0]: line for line in lines[1:5]}
    assert list(rows) == ["fetch", "shell-only", "upload", "wordy"]
    assert all(len(line) <= 120 for line in lines[:5])
    assert rows["fetch"].split()[:4] == ["fetch", "3", "scripts/run.py", "The"]
    assert rows["shell-only"].split()[:3] == ["shell-only", "2", "-"]
    assert lines[5] == "4 skill(s), 0 problem(s)"


def test_a_skill_with_many_runnable_scripts_leaves_the_others_their_description(root: Path, elsewhere: Path) -> None:
    scripts = [f"scripts/script_number_{index}.py" for index in range(1, 7)]
    runs = "".join(f"    - script: {script}\n      interpreter: python3\n" for script in scripts)
    make_skill(root, "many", f"name: many\ndescription: Runs a lot.\nmcp-host:\n  version: 1\n  run:\n{runs}",
               files=dict.fromkeys(scripts, ""))  # fmt: skip
    make_skill(root, "small", "name: small\ndescription: A small skill with a description\n")
    code, stdout, _ = run_cli(["list", str(root)], elsewhere, {"MCP_SKILL_PYTHON": outside_venv_python()})
    lines = stdout.splitlines()
    assert code == 0 and all(len(line) <= 120 for line in lines), lines
    assert lines[1].startswith("many   7      scripts/script_number_1.py, scripts/script_number_2.py, +4 more  ")
    assert lines[2].startswith("small  1      -") and lines[2].endswith("  A small skill with a description")
    listing = cli_json(["list", str(root)], elsewhere, {"MCP_SKILL_PYTHON": outside_venv_python()})
    assert [entry["script"] for entry in listing["skills"][0]["scripts"]] == scripts  # --json names every one


def test_list_json_never_shows_a_scrubbed_or_non_dumpable_cli(root: Path, elsewhere: Path) -> None:
    make_skill(root, "fine")
    for env in ({}, {"MCP_SKILLS_PATH": str(root)}):
        hardening = cli_json(["list", str(root)], elsewhere, env)["hardening"]
        assert (hardening["environScrubbed"], hardening["nonDumpable"]) == (False, False)


async def served_skill_list(env: dict[str, str], cwd: Path) -> dict:
    server = StdioServerParameters(command=SKILL_MCP, args=["serve"], env={**BASE_ENV, **env}, cwd=cwd)
    async with Client(server, mode="legacy") as client:
        return payload(await client.call_tool("skill_list", {}))


ENVIRONMENTS = {
    "standalone": lambda root: {"SKILLS_DIR": str(root)},
    "hosted-default": lambda root: {"MCP_SKILLS_PATH": str(root)},
    "hosted-granted": lambda root: {
        "MCP_SKILLS_PATH": str(root),
        "MCP_SKILL_RUN": json.dumps([{"skill": "fetch", "script": "scripts/run.py"}, {"skill": "gone", "script": "x"}]),
    },
    "malformed-grant": lambda root: {"SKILLS_DIR": str(root), "MCP_SKILL_RUN": "{"},
}


@pytest.mark.anyio
@pytest.mark.parametrize("environment", ENVIRONMENTS)
async def test_list_json_is_the_skill_list_of_a_real_server(root: Path, elsewhere: Path, environment: str) -> None:
    runnable_tree(root)
    make_skill(root, "no-name", "description: d\n")
    env = {**ENVIRONMENTS[environment](root), "MCP_SKILL_PYTHON": outside_venv_python()}
    served = await served_skill_list(env, elsewhere)
    listed = cli_json(["list"], elsewhere, env)
    assert served["hardening"]["environScrubbed"] is True  # the server scrubs; the CLI must not
    assert listed["hardening"]["environScrubbed"] is False
    served.pop("hardening"), listed.pop("hardening")
    assert listed == served


@pytest.mark.parametrize(
    ("env", "hosts"),
    [
        ({}, ["a.example", "b.example", "c.example"]),
        (grant("upload", "scripts/run.py"), ["a.example", "c.example"]),
        (grant("shell-only", "run.sh"), []),
        ({"MCP_SKILL_RUN": "[]"}, []),
        ({"MCP_SKILLS_PATH": ":"}, []),  # hosted without a grant: nothing may run
        ({"MCP_DATA_DIR": "/data", **grant("fetch", "scripts/run.py")}, ["a.example", "b.example"]),
    ],
    ids=["standalone", "granted-one", "granted-unrunnable", "empty-grant", "hosted-default", "hosted-granted"],
)
def test_list_egress_follows_the_grant_and_the_hosted_default(root: Path, elsewhere: Path, env: dict, hosts: list):
    runnable_tree(root)
    env = {**env, "MCP_SKILL_PYTHON": outside_venv_python()}
    code, stdout, _ = run_cli(["list", str(root), "--egress"], elsewhere, env)
    assert (code, stdout.splitlines()) == (0, hosts)
    assert cli_json(["list", str(root), "--egress"], elsewhere, env) == hosts


@pytest.mark.parametrize("command", ["check", "list"])
def test_a_configuration_warning_is_printed_on_stderr(elsewhere: Path, command: str) -> None:
    code, stdout, stderr = run_cli([command], elsewhere, {"MCP_MAX_SKILLS": "lots"})
    assert code == 0 and "warning" not in stdout
    assert "skill-mcp: warning: MCP_MAX_SKILLS: not an integer of at least 1; using 32\n" in stderr


def test_json_output_writes_non_ascii_text_as_utf_8(root: Path, elsewhere: Path) -> None:
    make_skill(root, "accents", "name: accents\ndescription: Résumé à la carte\n")
    code, stdout, _ = run_cli(["list", str(root), "--json"], elsewhere)
    assert code == 0 and '"description": "Résumé à la carte"' in stdout
    make_skill(root, "Ünï", "name: Ünï\ndescription: d\n")
    code, stdout, _ = run_cli(["check", str(root), "--json"], elsewhere)
    assert code == 1 and str(root / "Ünï") in stdout


@pytest.mark.parametrize("encoding", ["ascii", "latin-1"])
def test_json_output_stays_json_on_a_stdout_that_is_not_utf_8(root: Path, elsewhere: Path, encoding: str) -> None:
    make_skill(root, "cafe", "name: cafe\ndescription: café 😀\n")
    make_skill(root, "Ünï", "name: Ünï\ndescription: d\n")
    env = {"PYTHONIOENCODING": encoding}
    code, stdout, _ = run_cli(["list", str(root), "--json"], elsewhere, env)
    assert code == 0 and [skill["description"] for skill in json.loads(stdout)["skills"]] == ["café 😀"]
    code, stdout, _ = run_cli(["check", str(root), "--json"], elsewhere, env)  # Ünï is no usable skill name
    assert code == 1 and {problem["path"] for problem in json.loads(stdout)["problems"]} == {str(root / "Ünï")}


def test_list_without_roots_says_it_lists_the_bundled_demo(elsewhere: Path) -> None:
    code, stdout, stderr = run_cli(["list"], elsewhere)
    assert code == 0 and stdout.splitlines()[1].startswith("skill-mcp-demo ")
    assert stderr == (
        "skill-mcp: note: no ROOT argument, MCP_SKILLS_PATH or SKILLS_DIR, so this lists the bundled demo skill; "
        "pass the directory that holds your skills, e.g. `skill-mcp list ./skills`\n"
    )


def test_an_unusable_interpreter_override_is_a_warning_on_stderr(elsewhere: Path) -> None:
    code, _, stderr = run_cli(["list"], elsewhere, {"MCP_SKILL_PYTHON": str(elsewhere / "no-such-python")})
    assert code == 0 and "skill-mcp: warning: MCP_SKILL_PYTHON: " in stderr and "python3 is unavailable" in stderr


def test_list_reports_grant_problems_before_extension_exclusions(root: Path, elsewhere: Path) -> None:
    make_skill(root, "fine")
    make_skill(root, "no-name", "description: d\n")  # served, but left out of the Skills extension
    listing = cli_json(["list", str(root)], elsewhere, grant("fine", "scripts/evil.js"))
    assert [(problem["reason"], problem["path"]) for problem in listing["problems"]] == [
        ("grant", str(root / "fine")),
        ("extension-excluded", str(root / "no-name")),
    ]


# --- scale ------------------------------------------------------------------------------------


def test_134_skills_report_the_limit_by_default_and_list_all_under_a_raised_one(root: Path, elsewhere: Path) -> None:
    names = [f"skill-{index:03d}" for index in range(134)]
    for name in names:
        make_skill(root, name)
    report = cli_json(["check", str(root)], elsewhere)
    assert report["skills"] == names[:32]
    limits = [problem for problem in report["problems"] if problem["reason"] == "skill-limit"]
    assert len(limits) == 1 and limits[0]["path"] == str(root)
    assert "134" in limits[0]["detail"] and "32" in limits[0]["detail"]
    listing = cli_json(["list", str(root)], elsewhere, {"MCP_MAX_SKILLS": "200"})
    assert [skill["name"] for skill in listing["skills"]] == names and listing["problems"] == []
    code, stdout, _ = run_cli(["list", str(root)], elsewhere, {"MCP_MAX_SKILLS": "200"})
    assert code == 0 and len(stdout.splitlines()) == 1 + 134 + 1
    assert run_cli(["check", str(root)], elsewhere, {"MCP_MAX_SKILLS": "200"})[0] == 0


@pytest.mark.parametrize("command", ["list", "check"])
def test_a_reader_that_leaves_early_is_no_crash(elsewhere: Path, command: str) -> None:
    # `skill-mcp list --json | head -1`: the pipe's reader is gone before anything is written.
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([*ENTRY_POINTS["script"], command, "--json"], cwd=elsewhere, env=BASE_ENV,
                              stdin=subprocess.DEVNULL, stdout=write_end, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
    assert done.returncode == 0  # the bundled demo: no problems
    assert all(line.startswith(b"skill-mcp: note: ") for line in done.stderr.splitlines()), done.stderr  # no traceback


def run_cli_to(stdout: str | None, args: list[str], cwd: Path) -> tuple[int, str]:
    """Exit code and stderr of the CLI writing to the file `stdout`, or with fd 1 closed when it is None."""
    with contextlib.ExitStack() as stack:
        target = None if stdout is None else stack.enter_context(open(stdout, "wb"))
        done = subprocess.run([*ENTRY_POINTS["script"], *args], cwd=cwd, env=BASE_ENV, stdin=subprocess.DEVNULL,
                              stdout=target, stderr=subprocess.PIPE, timeout=60,
                              preexec_fn=None if target else lambda: os.close(1))  # fmt: skip
    return done.returncode, done.stderr.decode()


@pytest.mark.parametrize(("command", "code"), [("list", 0), ("check", 1)])
def test_a_closed_stdout_is_written_as_dev_null_and_keeps_the_exit_code(
    root: Path, elsewhere: Path, command: str, code: int
) -> None:
    make_skill(root, "fine")
    make_skill(root, "no-name", "description: d\n")  # a `spec` problem for check
    for args in ([command, str(root)], [command, str(root), "--json"]):
        assert run_cli_to(None, args, elsewhere) == (code, "")


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="no /dev/full")
@pytest.mark.parametrize(
    "args", [["list", "{root}"], ["list", "{root}", "--json"], ["check", "{root}"], ["--version"], ["--help"]]
)
def test_a_stdout_that_cannot_be_written_exits_74_with_the_reason_on_stderr(
    root: Path, elsewhere: Path, args: list[str]
) -> None:
    # check's 1 would say "problems found" (it finds one here): a failed output has a code of its own.
    make_skill(root, "no-name", "description: d\n")
    code, stderr = run_cli_to("/dev/full", [arg.format(root=root) for arg in args], elsewhere)
    assert (code, stderr) == (74, "skill-mcp: error: could not write to stdout: No space left on device\n")


def test_roots_may_follow_the_flags_and_an_unknown_flag_is_a_usage_error(elsewhere: Path) -> None:
    make_skill(elsewhere / "one", "alpha")
    make_skill(elsewhere / "two", "beta")
    report = cli_json(["check", "one", "--json", "two"], elsewhere)  # cli_json appends one more --json
    assert (report["roots"], report["skills"]) == ([str(elsewhere / "one"), str(elsewhere / "two")], ["alpha", "beta"])
    # the skills come in catalog order (root by root), as the server serves them
    assert cli_json(["check", "two", "one"], elsewhere)["skills"] == ["beta", "alpha"]
    code, stdout, stderr = run_cli(["check", "one", "--bogus"], elsewhere)
    assert (code, stdout) == (2, "") and "unrecognized arguments: --bogus" in stderr
    code, _, stderr = run_cli(["serve", "extra"], elsewhere)
    assert code == 2 and "unrecognized arguments: extra" in stderr


@pytest.mark.parametrize("command", ["check", "list"])
def test_an_empty_root_is_a_usage_error_not_the_working_directory(elsewhere: Path, command: str) -> None:
    # `skill-mcp check "$SKILLS"` with SKILLS unset: checking the working directory instead would mislead.
    make_skill(elsewhere, "alpha")
    code, stdout, stderr = run_cli([command, "one", ""], elsewhere)
    assert (code, stdout) == (2, "")
    assert f"usage: skill-mcp {command}" in stderr and "a ROOT is empty (an unset shell variable?)" in stderr


# --- stderr, which logs and notes use and nothing may stop the server through ---------------------


F_GETPIPE_SZ = 1032  # Linux fcntl


class _Pipe:
    """A stream recording each write it gets; `full_at_first`: its first write finds the (non-blocking) pipe full."""

    def __init__(self, full_at_first: bool = False) -> None:
        self.written: list[str] = []
        self._full = full_at_first

    def write(self, text: str) -> int:
        if self._full:
            self._full = False
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        self.written.append(text)
        return len(text)

    def flush(self) -> None:
        pass


def test_a_line_printed_in_pieces_is_written_whole() -> None:
    # print() writes the text and its newline apart; written apart, another writer of fd 2 could split the line.
    pipe = _Pipe()
    stderr = BackgroundStderr(pipe)
    print('{"event": "boot"}', file=stderr, flush=True)
    stderr.write("no newline yet")
    stderr.drain(5)
    assert pipe.written == ['{"event": "boot"}\n', "no newline yet"]


def test_a_log_line_that_cannot_be_written_is_dropped_and_the_next_one_still_goes_out() -> None:
    full = _Pipe(full_at_first=True)
    stderr = BackgroundStderr(full)
    assert stderr.write("first\n") == len("first\n")
    stderr.write("second\n")
    stderr.drain(5)
    assert full.written == ["second\n"]


def test_once_stderrs_reader_is_gone_its_descriptor_becomes_dev_null() -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", buffering=1, encoding="utf-8") as stream:
        stderr = BackgroundStderr(stream)
        stderr.write("lost\n")  # EPIPE: dropped, and the descriptor now leads nowhere
        stderr.drain(5)
        assert os.stat(os.devnull).st_rdev == os.fstat(write_end).st_rdev
        stderr.write("also lost\n")
        stderr.drain(5)


@pytest.mark.parametrize("failing", ["closed", "read-only"])
def test_a_stderr_descriptor_failing_with_ebadf_becomes_dev_null_and_stays_open(tmp_path: Path, failing: str) -> None:
    # Every write fails for good, as after EPIPE: a descriptor open only for reading (`2<file`), or one closed under
    # the writer. Closed, the /dev/null opened in its place takes that very number (the lowest free one), and a dup2
    # onto itself then a close would free it again, for the next file opened to be written as logs.
    (tmp_path / "read-only").write_text("")
    fd = os.open(os.devnull, os.O_WRONLY) if failing == "closed" else os.open(tmp_path / "read-only", os.O_RDONLY)
    stream = open(fd, "w", buffering=1, encoding="utf-8", closefd=False)
    if failing == "closed":
        os.close(fd)
    try:
        stderr = BackgroundStderr(stream)
        stderr.write("lost\n")
        stderr.drain(5)
        assert os.stat(os.devnull).st_rdev == os.fstat(fd).st_rdev
    finally:
        os.close(fd)


def test_a_stderr_nobody_reads_holds_up_no_write_and_lines_past_the_backlog_are_dropped() -> None:
    read_end, write_end = os.pipe()
    stream = open(write_end, "w", buffering=1, encoding="utf-8", closefd=False)
    try:
        stderr = BackgroundStderr(stream)
        line = "x" * 1023 + "\n"
        with fails_after(10):
            for _ in range(BACKLOG_LINES + 200):  # 4 MiB, where the pipe takes 64 KiB: not one write blocks
                stderr.write(line)
        stderr.drain(0.2)  # gives up: the writer is stuck on the full pipe
        seen, idle = 0, 0
        os.set_blocking(read_end, False)
        while idle < 20:  # read until the writer has had nothing more for a while
            try:
                seen += len(os.read(read_end, 1 << 20))
                idle = 0
            except BlockingIOError:
                idle += 1
                time.sleep(0.02)
        # What the pipe held, then the backlog (and the line in the writer's hands); the rest was dropped.
        held = fcntl.fcntl(write_end, F_GETPIPE_SZ) + (BACKLOG_LINES + 1) * len(line)
        assert BACKLOG_LINES * len(line) <= seen <= held
    finally:
        os.close(read_end)  # first: a write still waiting on the pipe now fails (EPIPE) instead
        with contextlib.suppress(OSError):
            stream.close()
        os.close(write_end)


def test_draining_a_stderr_nothing_was_written_to_returns_at_once() -> None:
    # Every CLI command drains stderr before its report and at exit: no writer thread, nothing to wait for.
    stderr = BackgroundStderr(_Pipe())
    with fails_after(1):
        stderr.drain(5)


def test_the_last_lines_written_before_the_interpreter_exits_are_all_written() -> None:
    # The writer is a daemon thread, which the exit would stop mid-backlog: the exit waits for it (a crash's line).
    program = (
        "import sys\n"
        "from skill_mcp.stderr import install_background_stderr\n"
        "install_background_stderr()\n"
        "for index in range(2000):\n"
        "    print(index, file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=20)
    assert done.returncode == 0 and done.stderr.splitlines() == [str(index) for index in range(2000)]


def test_a_first_line_written_as_the_interpreter_exits_is_written_and_the_exit_not_held() -> None:
    # A stdout that fails its final flush makes Python write "Exception ignored" to stderr while finalizing, when
    # no thread can start any more: 3.11 waited forever for the writer thread that first line would start.
    program = (
        "import sys\n"
        "from skill_mcp.stderr import install_background_stderr\n"
        "install_background_stderr()\n"
        "sys.stdout = open('/dev/full', 'w')\n"
        "sys.stdout.write('kept in the buffer until the exit flushes it')\n"
    )
    done = subprocess.run([sys.executable, "-c", program], capture_output=True, text=True, timeout=20,
                          env={**os.environ, "PYTHONUNBUFFERED": ""})  # fmt: skip
    assert "Exception ignored" in done.stderr and "No space left on device" in done.stderr
    assert done.returncode == 120  # Python's own status for a failed flush at exit


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"MCP_SKILL_RUN": '[{"skill": "fetch"}]'}, 'skill-mcp: warning: MCP_SKILL_RUN: MCP_SKILL_RUN row 0 is missing '
         '"script"; nothing is granted, so no script may run until it is fixed\n'),
        ({"MCP_DATA_DIR": "/data"}, "skill-mcp: note: A host-injected variable (MCP_DATA_DIR) is set and no "
         "MCP_SKILL_RUN grant was supplied, so nothing may run here"),
        ({}, None),
    ],
    ids=["malformed-grant", "hosted-default", "standalone"],
)  # fmt: skip
def test_list_egress_says_on_stderr_why_the_grant_leaves_it_empty(root: Path, elsewhere: Path, env: dict, said):
    # The appliance computes its allowlist with `list --egress`: an empty one came with no word of the cause.
    runnable_tree(root)
    env = {**env, "MCP_SKILL_PYTHON": outside_venv_python()}
    for args in (["list", str(root), "--egress"], ["list", str(root), "--egress", "--json"]):
        code, stdout, stderr = run_cli(args, elsewhere, env)
        assert code == 0 and "MCP_SKILL_RUN" not in stdout
        assert (said in stderr) if said else "MCP_SKILL_RUN" not in stderr
