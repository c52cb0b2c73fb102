"""The resolve check against real files and links (SPEC §6.2, §17 items 75–77)."""

import collections
import ctypes
import os
import shutil
import stat
import subprocess
import sys

import pytest
from support import as_unprivileged, fails_after, mount_namespace, needs_root, resolve_in_skill, world_readable_dir

from skill_mcp import paths
from skill_mcp.paths import PATH_HINT, PathRefused, SkillDir, describe_refusal, path_refusal


@pytest.fixture(autouse=True, params=["link-free-first", "check-then-open", "realpath"])
def resolution(request, monkeypatch):
    """Every test runs on each way of checking: a link-free openat2 first (then the O_PATH handle for the
    rest), the O_PATH handle alone (Linux), and the realpath fallback."""
    if request.param == "link-free-first" and paths._OPEN_LINK_FREE is None:
        pytest.skip("no openat2 here")
    if request.param == "check-then-open" and not paths._CHECK_THEN_OPEN:
        pytest.skip("no O_PATH and /proc here")
    if request.param != "link-free-first":  # as where there is no openat2
        for opener in ("_OPEN_LINK_FREE", "_OPEN_DIRECTORY_LINK_FREE", "_OPEN_HANDLE_LINK_FREE"):
            monkeypatch.setattr(paths, opener, None)
    if request.param == "realpath":
        monkeypatch.setattr(paths, "_CHECK_THEN_OPEN", False)
    return request.param


@pytest.fixture
def layout(tmp_path):
    """A skill directory with inside files and links, next to files it must not reach."""
    skill = tmp_path / "skill"
    (skill / "scripts" / "lib").mkdir(parents=True)
    (skill / "notes.md").write_text("notes")
    (skill / "scripts" / "ok.js").write_text("ok")
    (skill / "scripts" / "lib" / "util.js").write_text("util")
    (tmp_path / "outside.txt").write_text("secret")
    (tmp_path / "outdir").mkdir()
    (tmp_path / "outdir" / "secret.txt").write_text("secret")
    # Shares the skill's name as a string prefix; must still count as outside.
    (tmp_path / "skill-evil").mkdir()
    (tmp_path / "skill-evil" / "x.txt").write_text("evil")
    return tmp_path


def refusal(skill_dir, rel) -> PathRefused:
    with pytest.raises(PathRefused) as caught:
        resolve_in_skill(str(skill_dir), rel)
    return caught.value


def test_plain_file_resolves_to_its_real_path(layout):
    skill = layout / "skill"
    assert resolve_in_skill(str(skill), "scripts/ok.js") == os.path.realpath(skill / "scripts" / "ok.js")


def test_link_inside_the_skill_resolves_to_its_target(layout):
    skill = layout / "skill"
    os.symlink("scripts/ok.js", skill / "alias.js")
    assert resolve_in_skill(str(skill), "alias.js") == str(skill / "scripts" / "ok.js")


def test_path_through_a_directory_link_inside_resolves(layout):
    skill = layout / "skill"
    os.symlink(skill / "scripts" / "lib", skill / "lib")
    assert resolve_in_skill(str(skill), "lib/util.js") == str(skill / "scripts" / "lib" / "util.js")


@pytest.mark.parametrize(
    ("link_name", "target", "rel"),
    [
        ("abs.txt", "{root}/outside.txt", "abs.txt"),
        ("rel.txt", "../outside.txt", "rel.txt"),
        ("evil.txt", "../skill-evil/x.txt", "evil.txt"),
        ("outdir", "{root}/outdir", "outdir/secret.txt"),
        ("up", "..", "up/outside.txt"),
        # Containment is judged before the file type: what lies outside is never described (here: a directory).
        ("outdir", "{root}/outdir", "outdir"),
    ],
)
def test_links_leaving_the_skill_are_refused_as_outside(layout, link_name, target, rel):
    skill = layout / "skill"
    os.symlink(target.format(root=layout), skill / link_name)
    refused = refusal(skill, rel)
    assert refused.message == f'"{rel}" resolves outside the skill\'s own directory'
    assert "inside its own skill" in refused.hint


@pytest.fixture
def file_mounted_in_another_namespace(layout):
    """`<skill>/decoy.txt`, with `outside.txt` bind-mounted over it in another mount namespace: the path is
    inside the skill, the file that namespace sees there is not."""
    decoy = layout / "skill" / "decoy.txt"
    decoy.write_text("decoy")
    with mount_namespace(f'mount --bind "{layout}/outside.txt" "{decoy}"') as namespace_root:
        yield decoy, f"{namespace_root}{decoy}"


def test_a_link_into_another_mount_namespace_never_reaches_its_file(layout, file_mounted_in_another_namespace,
                                                                    resolution):
    # /proc/<pid>/root is a magic link: the kernel names what it reaches by that namespace's path, which lies
    # inside the skill, while the file there is `outside.txt`. Before, "secret" was served as "leak".
    decoy, through_namespace = file_mounted_in_another_namespace
    skill = layout / "skill"
    os.symlink(through_namespace, skill / "leak")
    with open(through_namespace) as mounted:
        assert mounted.read() == "secret"  # the trap is set: that path reaches the outside file
    if resolution == "realpath":  # resolved as strings in this namespace: the link names the decoy here
        with SkillDir(str(skill)).opened("leak") as (fd, _):
            assert os.read(fd, 100) == b"decoy"
    else:
        assert refusal(skill, "leak").message == '"leak" resolves outside the skill\'s own directory'
    assert resolve_in_skill(str(skill), "decoy.txt") == str(decoy)


def test_a_skill_directory_swapped_for_a_link_into_another_namespace_serves_nothing(layout, resolution):
    # The skills root holds the skill; in another mount namespace a directory of secrets is mounted at the skill's
    # path, and here the skill is swapped for a link to it through /proc/<pid>/root. Every path the kernel reports
    # then lies inside the skill, and stat() here follows the same link to the same files.
    skills = layout / "skills"
    skill = skills / "skill"
    skill.mkdir(parents=True)
    (skill / "notes.md").write_text("notes")
    setup = f'mount -t tmpfs none "{skills}" && mkdir "{skill}" && mount --bind "{layout}/outdir" "{skill}"'
    with mount_namespace(setup) as namespace_root:
        directory = SkillDir(str(skill))  # as discovery found it
        os.rename(skill, skills / "skill.orig")
        os.symlink(f"{namespace_root}{skill}", skill)
        with open(skill / "secret.txt") as reached:
            assert reached.read() == "secret"  # the trap is set
        with pytest.raises(PathRefused) as refused:
            directory.open("secret.txt")
    assert "secret.txt" in refused.value.message or "skill's directory" in refused.value.message


def test_directory_is_refused_as_not_regular(layout):
    refused = refusal(layout / "skill", "scripts")
    assert refused.message == '"scripts" is not a regular file'
    assert refused.hint == "Only regular files can be read or executed."


def test_a_link_to_the_skill_directory_itself_is_not_regular_not_outside(layout):
    os.symlink(".", layout / "skill" / "self")  # §6.2: equal to the directory is not outside it
    assert refusal(layout / "skill", "self").message == '"self" is not a regular file'


def test_fifo_is_refused_as_not_regular(layout):
    os.mkfifo(layout / "skill" / "pipe")
    assert refusal(layout / "skill", "pipe").message == '"pipe" is not a regular file'


@pytest.mark.parametrize("rel", ["missing.txt", "scripts/missing.js", "notes.md/below", "broken", "loop"])
def test_missing_and_broken_paths_are_not_files_in_this_skill(layout, rel):
    skill = layout / "skill"
    os.symlink("nowhere.txt", skill / "broken")
    os.symlink("loop", skill / "loop")
    refused = refusal(skill, rel)
    assert refused.message == f'"{rel}" is not a file in this skill'
    assert "skill_load" in refused.hint


@needs_root
def test_a_file_behind_a_directory_the_server_may_not_enter_says_so():
    # The file is there; "not a file in this skill" alone would send the reader looking for a typo.
    skill = world_readable_dir() / "skill"
    (skill / "private").mkdir(parents=True, mode=0o700)
    (skill / "private" / "guide.md").write_text("guide")
    try:
        refused = as_unprivileged(lambda: refusal_text(skill, "private/guide.md"))
    finally:
        shutil.rmtree(skill.parent)
    assert refused == (
        '"private/guide.md" is not a file in this skill that the server can reach: Permission denied',
        "The server's user must be allowed to enter every directory on the way to the file.",
    )


def refusal_text(skill_dir, rel) -> tuple[str, str]:
    refused = refusal(skill_dir, rel)
    return refused.message, refused.hint


def test_unreadable_skill_directory(layout):
    refused = refusal(layout / "not-mounted", "notes.md")
    assert refused.message == "the skill's directory is not readable"
    assert "mounted" in refused.hint and "skill_list" in refused.hint


def test_skill_directory_replaced_by_a_file_leaves_no_file_in_it(layout):
    (layout / "now-a-file").write_text("x")
    assert refusal(layout / "now-a-file", "notes.md").message == '"notes.md" is not a file in this skill'


MOVED = (
    "the skill's directory is no longer where the server found it at start: it was moved, or it or a directory "
    "above it was replaced by a link"
)


@pytest.mark.parametrize("swapped", ["skill", "parent"])
def test_a_skill_directory_swapped_for_a_link_serves_nothing(layout, swapped):
    # The link could lead anywhere (here: to the directory of the outside files), so no file of it is judged
    # against where it now resolves; every path, present or not, gets the same refusal.
    skill = layout / "skill"
    directory = SkillDir(str(skill))
    if swapped == "skill":
        skill.rename(layout / "moved")
        (layout / "outdir" / "notes.md").write_text("secret")
        os.symlink(layout / "outdir", skill)
    else:
        moved = layout.with_name(f"{layout.name}-moved")
        layout.rename(moved)
        os.symlink(moved, layout)
    for rel in ("notes.md", "secret.txt", "scripts/ok.js", "missing.md"):
        with pytest.raises(PathRefused) as caught:
            directory.open(rel)
        assert caught.value.message == MOVED
        assert "Restart the server" in caught.value.hint


def test_a_directory_gone_after_discovery_is_reported_unreadable_for_every_file(layout):
    directory = SkillDir(str(layout / "skill"))
    (layout / "skill").rename(layout / "elsewhere")
    for rel in ("notes.md", "scripts/ok.js"):
        with pytest.raises(PathRefused) as caught:
            directory.open(rel)
        assert caught.value.message == "the skill's directory is not readable"


def test_open_returns_the_status_of_the_descriptor_it_returns(layout):
    skill = layout / "skill"
    os.symlink("scripts/ok.js", skill / "alias.js")
    fd, real, status = SkillDir(str(skill)).open("alias.js")
    try:
        assert real == str(skill / "scripts" / "ok.js")
        opened = os.fstat(fd)
        assert (status.st_dev, status.st_ino, status.st_size) == (opened.st_dev, opened.st_ino, 2)
    finally:
        os.close(fd)


@pytest.mark.parametrize("rel", ["../outside.txt", "/etc/passwd", "scripts//ok.js", ""])
def test_string_check_runs_first(layout, rel):
    # Refused by the string rules even though some of these would resolve to real files.
    refused = refusal(layout / "skill", rel)
    assert (refused.message, refused.hint) == (describe_refusal(rel, path_refusal(rel)), PATH_HINT)


def test_dotdot_is_refused_with_the_relative_path_hint(layout):
    refused = refusal(layout / "skill", "../outside.txt")
    assert 'it has a ".." segment' in refused.message
    assert "relative to the skill" in refused.hint.lower()
    assert str(refused) == refused.message


def test_opened_reads_the_file_that_was_checked_even_if_renamed_after(layout):
    skill = layout / "skill"
    directory = SkillDir(str(skill))
    fd, real, _ = directory.open("notes.md")
    try:
        os.rename(skill / "notes.md", skill / "moved.md")
        (skill / "notes.md").write_text("planted")
        assert os.read(fd, 100) == b"notes"
        assert real == os.path.realpath(skill / "moved.md").replace("moved.md", "notes.md")
    finally:
        os.close(fd)


def test_opened_refuses_like_resolve_and_leaks_no_descriptor(layout):
    skill = layout / "skill"
    os.symlink("../outside.txt", skill / "out.txt")
    before = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else None
    for rel in ("out.txt", "scripts", "missing.txt", "../outside.txt"):
        with pytest.raises(PathRefused):
            with SkillDir(str(skill)).opened(rel):
                pass
    if before is not None:
        assert len(os.listdir("/proc/self/fd")) == before


def test_opened_closes_its_descriptor_when_the_reader_fails(layout):
    # A reader that raises (a digest over its budget, a failed read) must not leak the descriptor it was given.
    before = len(os.listdir("/proc/self/fd"))
    with pytest.raises(RuntimeError), SkillDir(str(layout / "skill")).opened("notes.md"):
        raise RuntimeError("the reader failed")
    assert len(os.listdir("/proc/self/fd")) == before


def test_a_read_leaves_no_descriptor_open_and_hands_none_to_a_script(layout):
    # §6.3: the read descriptor is close-on-exec, and the handles checked on the way to it are all closed: one
    # left per read through a link would run the server out of descriptors.
    skill = layout / "skill"
    os.symlink("scripts/ok.js", skill / "alias.js")
    os.symlink("scripts", skill / "linked")
    before = len(os.listdir("/proc/self/fd"))
    for rel in ("notes.md", "alias.js", "linked/ok.js"):
        with SkillDir(str(skill)).opened(rel) as (fd, _):
            assert not os.get_inheritable(fd), rel
    assert len(os.listdir("/proc/self/fd")) == before


@needs_root
def test_a_file_is_read_through_directories_the_server_may_enter_but_not_list():
    # A home directory is often 0711: checking a path may need only search permission on the directories above.
    home = world_readable_dir()
    skill = home / "user" / "skill"
    (skill / "scripts").mkdir(parents=True)
    (skill / "scripts" / "ok.js").write_text("ok")
    os.symlink("scripts/ok.js", skill / "alias.js")  # through a link: the full check, not the link-free open
    (home / "user").chmod(0o711)
    try:
        real = as_unprivileged(lambda: resolve_in_skill(str(skill), "alias.js"))
    finally:
        shutil.rmtree(home)
    assert real == str(skill / "scripts" / "ok.js")


def test_a_link_swapped_in_after_the_realpath_is_not_followed(layout, monkeypatch):
    # The realpath fallback opens the checked real path again: with no O_NOFOLLOW, a link put there since would
    # be followed out of the skill while the path string still passes the containment check.
    skill = layout / "skill"
    os.symlink("notes.md", skill / "alias.md")  # through a link: never the link-free open
    os.symlink(layout / "outside.txt", skill / "planted")
    resolve = paths.real_path

    def resolve_then_swap(path):
        real = resolve(path)
        if real == str(skill / "notes.md"):
            os.replace(skill / "planted", skill / "notes.md")
        return real

    monkeypatch.setattr(paths, "real_path", resolve_then_swap)
    assert_serves_no_secret(skill, "alias.md")


def assert_serves_no_secret(skill, rel):
    try:
        fd, _, _ = SkillDir(str(skill)).open(rel)
    except (OSError, PathRefused):  # refused, or the open met a link: nothing was served
        return
    try:
        assert os.read(fd, 100) != b"secret"
    finally:
        os.close(fd)


def test_a_directory_swapped_for_a_link_after_the_realpath_is_not_followed_out(layout, monkeypatch):
    # Without O_PATH and /proc the file is opened by its checked real path, which follows a directory on the way
    # that was swapped for a link since: the path must still resolve to itself, or nothing is served.
    skill = layout / "skill"
    (layout / "outdir" / "ok.js").write_text("secret")
    resolve = paths.real_path
    swapped = []

    def resolve_then_swap(path):
        real = resolve(path)
        if not swapped and real == str(skill / "scripts" / "ok.js"):
            os.rename(skill / "scripts", skill / "scripts.orig")
            os.symlink(layout / "outdir", skill / "scripts")
            swapped.append(real)
        return real

    monkeypatch.setattr(paths, "real_path", resolve_then_swap)
    os.symlink("scripts/ok.js", skill / "alias.js")  # through a link: never the link-free open
    assert_serves_no_secret(skill, "alias.js")


def test_a_file_swapped_for_a_fifo_after_the_check_is_refused(layout, monkeypatch):
    # The file checked can be replaced before it is opened: what was opened is checked again, so a FIFO swapped
    # in is refused as not regular instead of being served as an empty file.
    skill = layout / "skill"
    os.symlink("notes.md", skill / "alias.md")  # through a link: never the link-free open
    check = SkillDir._check

    def check_then_swap(self, rel, real, status):
        check(self, rel, real, status)
        if not stat.S_ISFIFO(os.lstat(skill / "notes.md").st_mode):
            os.remove(skill / "notes.md")
            os.mkfifo(skill / "notes.md")

    monkeypatch.setattr(SkillDir, "_check", check_then_swap)
    with fails_after(5):
        try:
            fd, _, status = SkillDir(str(skill)).open("alias.md")
        except PathRefused:
            return
    try:
        assert stat.S_ISREG(os.fstat(fd).st_mode) and os.read(fd, 100) == b"notes"
    finally:
        os.close(fd)


def test_the_check_then_open_way_reads_the_inode_it_checked_not_what_now_sits_at_its_path(layout, monkeypatch):
    # The checked handle is reopened through /proc/self/fd; reopening its path instead would follow a link
    # swapped in after the last check, out of the skill.
    skill = layout / "skill"
    os.symlink("notes.md", skill / "alias.md")  # through a link: the full check
    os.symlink(layout / "outside.txt", skill / "planted")
    is_real_path_here = paths._is_real_path_here

    def check_then_swap(path, status):
        here = is_real_path_here(path, status)
        if path == str(skill / "notes.md") and os.path.lexists(skill / "planted"):
            os.replace(skill / "planted", skill / "notes.md")
        return here

    monkeypatch.setattr(paths, "_is_real_path_here", check_then_swap)
    with SkillDir(str(skill)).opened("alias.md") as (fd, _):
        assert os.read(fd, 100) == b"notes"


@pytest.mark.skipif(not paths._CHECK_THEN_OPEN, reason="no O_PATH and /proc here")
def test_a_file_replaced_while_it_is_checked_is_said_to_be_so(layout, monkeypatch):
    # An editor's save renames a new file over the old one: the handle then names "… (deleted)", no place outside.
    # Only the O_PATH handle is read back by its path, so it is the way checked here, whatever the fixture's.
    monkeypatch.setattr(paths, "_CHECK_THEN_OPEN", True)
    for opener in ("_OPEN_LINK_FREE", "_OPEN_DIRECTORY_LINK_FREE", "_OPEN_HANDLE_LINK_FREE"):
        monkeypatch.setattr(paths, opener, None)
    skill = layout / "skill"
    os.symlink("scripts/ok.js", skill / "alias.js")  # through a link: the handle's check decides
    read_path = paths._descriptor_path

    def replaced_meanwhile(fd: int) -> str:
        (skill / "scripts" / "new.js").write_text("new")
        os.replace(skill / "scripts" / "new.js", skill / "scripts" / "ok.js")
        return read_path(fd)

    monkeypatch.setattr(paths, "_descriptor_path", replaced_meanwhile)
    refused = refusal(skill, "alias.js")
    assert (refused.message, refused.hint) == ('"alias.js" was removed or replaced while it was opened', "Call again.")


EXCHANGE_LOOP = """
import ctypes, os, sys
renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
first, second = os.fsencode(sys.argv[1]), os.fsencode(sys.argv[2])
print("ready", flush=True)
while True:
    renameat2(-100, first, -100, second, 2)  # AT_FDCWD, RENAME_EXCHANGE: both names always exist
"""


@pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "renameat2"), reason="no renameat2 (glibc 2.28+) here")
def test_a_directory_flipping_with_a_link_to_outside_never_serves_outside(layout, resolution):
    # A directory on the way and a link to outside trade places as fast as the kernel allows while the file is
    # opened: the realpath fallback's check (a realpath, then a stat) could see each side of a swap once, and
    # served the outside file in about 2% of reads.
    skill = layout / "skill"
    (skill / "d").mkdir()
    (skill / "d" / "f.txt").write_text("inside")
    (layout / "outdir" / "f.txt").write_text("secret")
    os.symlink(layout / "outdir", skill / "d.swap")
    flipping = subprocess.Popen([sys.executable, "-c", EXCHANGE_LOOP, str(skill / "d"), str(skill / "d.swap")],
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
    served = collections.Counter()
    try:
        assert flipping.stdout.readline() == "ready\n"
        directory = SkillDir(str(skill))
        for _ in range(4000):
            try:
                with directory.opened("d/f.txt") as (fd, _):
                    served[os.read(fd, 100)] += 1
            except (OSError, PathRefused):
                served["refused"] += 1
    finally:
        flipping.kill()
        flipping.wait()
    assert served[b"secret"] == 0, served
    assert served[b"inside"] > 0, served  # the race was run, not refused throughout
