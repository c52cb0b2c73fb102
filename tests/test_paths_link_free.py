"""The link-free way in (SkillDir._open_link_free): openat2 opens a regular file reached through no link, whose
path is then its real path; everything else is left to the full check (tests/test_paths_resolve.py runs every
resolve test with and without this way in)."""

import os
import stat

import pytest
from support import fails_after

from skill_mcp import paths
from skill_mcp.paths import NotRegularFile, Openat2, SkillDir

pytestmark = pytest.mark.skipif(paths._OPEN_LINK_FREE is None, reason="no openat2 here")


@pytest.fixture
def skill(tmp_path):
    skill = tmp_path / "skill"
    (skill / "scripts" / "lib").mkdir(parents=True)
    (skill / "scripts" / "ok.js").write_text("ok")
    (skill / "scripts" / "lib" / "util.js").write_text("util")
    (tmp_path / "outside.txt").write_text("secret")
    return skill


def test_a_plain_file_is_opened_with_its_path_as_real_path(skill):
    opened = SkillDir(str(skill))._open_link_free(f"{skill}/scripts/lib/util.js")
    assert opened is not None
    fd, real, status = opened
    try:
        assert real == str(skill / "scripts" / "lib" / "util.js") == os.path.realpath(real)
        assert os.read(fd, 100) == b"util"
        assert (status.st_dev, status.st_ino) == (os.fstat(fd).st_dev, os.fstat(fd).st_ino)
    finally:
        os.close(fd)


def test_anything_but_a_plain_file_reached_through_no_link_is_left_to_the_full_check(skill):
    os.symlink("scripts/ok.js", skill / "alias.js")
    os.symlink(skill / "scripts", skill / "linked")
    os.symlink("../outside.txt", skill / "out.txt")
    os.mkfifo(skill / "pipe")
    rels = ["alias.js", "linked/ok.js", "out.txt", "pipe", "scripts", "missing.txt"]
    if os.geteuid() == 0:  # a device node is never opened this way (opening some has effects)
        os.mknod(skill / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
        rels.append("null")
    directory = SkillDir(str(skill))
    for rel in rels:
        assert directory._open_link_free(f"{skill}/{rel}") is None, rel


def test_the_opener_refuses_any_link_and_keeps_working(skill):
    opener = Openat2.for_this_machine()
    os.symlink(skill / "scripts", skill / "linked")
    assert opener(f"{skill}/linked/ok.js") is None  # ELOOP: a link, no reason to give up
    fd = opener(f"{skill}/scripts/ok.js")
    assert fd is not None
    try:
        assert os.read(fd, 10) == b"ok"
    finally:
        os.close(fd)
    assert opener.usable


def test_the_opener_gives_up_for_good_where_the_kernel_lacks_the_call(skill):
    # A system call number no kernel has: the kernel itself answers ENOSYS, as one older than 5.6 does for openat2.
    opener = Openat2(number=1_000_000)
    assert opener(f"{skill}/scripts/ok.js") is None
    assert not opener.usable


def test_a_fifo_swapped_in_after_the_lstat_does_not_block_the_open(skill):
    # §17 #78. The link-free way is the only one that opens a path for reading after checking it (the full check
    # reopens the very inode it checked): a FIFO put there between its lstat and its openat2 must not block it.
    # The swap cannot be timed from here, so the opener is called on the FIFO itself; the inode comparison that
    # follows in _open_link_free hands it to the full check, which refuses it.
    os.mkfifo(skill / "pipe")  # no writer: a blocking open would wait forever
    with fails_after(5):
        fd = paths._OPEN_LINK_FREE(str(skill / "pipe"))
    try:
        assert fd is not None and stat.S_ISFIFO(os.fstat(fd).st_mode)
    finally:
        os.close(fd)


def test_a_fifo_swapped_in_between_the_lstat_and_the_open_goes_to_the_full_check(skill, monkeypatch):
    # §6.2 step 5, §17 #78: lstat shows a regular file, then a FIFO takes its place before openat2 runs. The
    # descriptor openat2 returns is the FIFO's; only the inode comparison keeps it from being served as the file.
    real_opener = paths._OPEN_LINK_FREE
    target = skill / "scripts" / "ok.js"

    def swap_then_open(path):
        os.mkfifo(skill / "fifo")
        os.replace(skill / "fifo", target)
        return real_opener(path)

    monkeypatch.setattr(paths, "_OPEN_LINK_FREE", swap_then_open)
    with fails_after(5), pytest.raises(paths.NotRegularFile):
        SkillDir(str(skill)).open("scripts/ok.js")
    assert stat.S_ISFIFO(os.lstat(target).st_mode)


def test_a_directory_is_opened_link_free_in_one_call(skill, monkeypatch):
    # Where openat2 works the walk's directories need no path check after the open (the fallback's realpath).
    def no_fallback(path):
        raise AssertionError(f"the fallback check ran for {path}")

    monkeypatch.setattr(paths, "real_path", no_fallback)
    fd = paths.open_directory_in_place(str(skill / "scripts"))
    assert fd is not None
    try:
        assert stat.S_ISDIR(os.fstat(fd).st_mode)
    finally:
        os.close(fd)
    os.symlink(skill / "scripts", skill / "linked")
    assert paths.open_directory_in_place(str(skill / "linked")) is None
    assert paths.open_directory_in_place(str(skill / "scripts" / "ok.js")) is None  # a file is no directory


def test_the_opener_gives_up_for_good_when_a_filter_refuses_the_call(monkeypatch):
    # A container runtime's seccomp filter answers EPERM: trying again would cost a wasted system call on every read.
    import errno

    opener = Openat2(number=437)
    monkeypatch.setattr(opener, "_syscall", lambda *arguments: -1)
    monkeypatch.setattr(paths.ctypes, "get_errno", lambda: errno.EPERM)
    assert opener("/") is None
    assert not opener.usable


@pytest.mark.parametrize(
    ("error", "gives_up"),
    [
        ("ENOSYS", True),
        ("EPERM", True),
        ("EINVAL", True),
        ("E2BIG", True),
        ("ELOOP", False),
        ("ENOENT", False),
        ("EACCES", False),
    ],
)
def test_the_opener_gives_up_only_on_errors_that_say_the_call_is_unusable(monkeypatch, error, gives_up):
    # ENOSYS (old kernel), EPERM (seccomp), EINVAL and E2BIG (a kernel that knows no such flags or struct) say the
    # call will never work: once given up, no further system call is spent. A link or a missing file says nothing.
    import errno

    calls = []
    opener = Openat2(number=437)
    monkeypatch.setattr(opener, "_syscall", lambda *arguments: calls.append(arguments) or -1)
    monkeypatch.setattr(paths.ctypes, "get_errno", lambda: getattr(errno, error))
    assert opener("/") is None
    assert opener.usable is not gives_up
    assert opener("/") is None
    assert len(calls) == (1 if gives_up else 2)


def test_a_fifo_taking_the_files_place_and_inode_number_after_the_lstat_is_refused_and_leaks_nothing(skill, monkeypatch):
    # The link-free open trusts only the regular file lstat has just shown; anything else found there is closed,
    # and the full check decides. Here a FIFO takes the file's place in that gap, and on most file systems its
    # inode number too (the file's, freed): refused as not regular, and no descriptor left open.
    target = skill / "scripts" / "ok.js"
    open_link_free = paths._OPEN_LINK_FREE

    def swap_then_open(path):
        if not stat.S_ISFIFO(os.lstat(target).st_mode):
            os.remove(target)
            os.mkfifo(target)
        return open_link_free(path)

    monkeypatch.setattr(paths, "_OPEN_LINK_FREE", swap_then_open)
    before = len(os.listdir("/proc/self/fd"))
    with fails_after(5), pytest.raises(NotRegularFile):
        SkillDir(str(skill)).open("scripts/ok.js")
    assert len(os.listdir("/proc/self/fd")) == before
