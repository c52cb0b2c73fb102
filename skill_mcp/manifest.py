"""One skill's manifest walk (SPEC §3.5); with catalog.py, the only modules that walk skill directories."""

from __future__ import annotations

import heapq
import os
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from itertools import chain, islice

from .limits import (
    MAX_DIRS_PER_SKILL,
    MAX_FILES_PER_SKILL,
    MAX_UNLISTED_ENTRIES,
    MAX_UNUSABLE_PATH_PROBLEMS,
    SKILL_MD,
)
from .model import ManifestEntry, PathTally
from .paths import open_directory_in_place, path_refusal
from .text import quoted_path


def walk_manifest(real_dir: str, report: Callable[[str, str], None]) -> ManifestWalk:
    """§3.5: breadth-first, sorted, regular files only, bounded by the file and directory caps."""
    walk = ManifestWalk(report)
    try:
        walk._run(real_dir)
    finally:
        walk._report_unusable_rest()
    return walk


class ManifestWalk:
    """One skill's walk: what it lists, what is queued, and the budgets that bound it."""

    def __init__(self, report: Callable[[str, str], None]) -> None:
        self.report = report
        self.files: list[ManifestEntry] = []
        self.queue: deque[tuple[str, str]] = deque()
        self.dirs_enqueued = 0
        self.unlisted_left = MAX_UNLISTED_ENTRIES
        self.unusable_reported = self.unusable_unreported = 0
        self.hit_limit = False
        # Links, special files and directories that cannot be listed are skipped without a problem (§3.5);
        # `check` still names them for the author.
        self.skipped = PathTally()
        self.unlisted_dirs = PathTally()

    @property
    def manifest(self) -> tuple[ManifestEntry, ...]:
        """The files listed, in manifest order (by path; the walk lists them breadth-first)."""
        return tuple(sorted(self.files, key=lambda entry: entry.path))

    def _run(self, real_dir: str) -> None:
        """Walks until done or until a cap stops it (`hit_limit`)."""
        self.queue.append((real_dir, ""))
        while self.queue:
            directory, prefix = self.queue.popleft()
            # Every entry is listed, walked or charged to a cap, so one name more than the caps leave is enough to
            # reach one; a directory of millions of names is read through once, holding no more than that.
            room = self.unlisted_left + MAX_FILES_PER_SKILL - len(self.files) + MAX_DIRS_PER_SKILL - self.dirs_enqueued
            with _listing(directory, room + 1) as entries:
                if entries is None:  # "." for the skill directory itself, whose SKILL.md may still be read
                    self.unlisted_dirs = self.unlisted_dirs.plus(prefix.rstrip("/") or ".")
                    continue
                for entry in entries:
                    if self._visit(entry, directory, prefix + entry.name):
                        self.hit_limit = True
                        return

    def _visit(self, entry: os.DirEntry[str], directory: str, rel: str) -> bool:
        """Lists, enqueues, skips or refuses one entry; True when a cap stops the walk here."""
        is_dir = entry.is_dir(follow_symlinks=False)
        if not is_dir and not entry.is_file(follow_symlinks=False):  # links, FIFOs, sockets, devices
            if rel != SKILL_MD:  # a linked SKILL.md is still served, by skill_load
                self.skipped = self.skipped.plus(rel)
            return self._charge_unlisted()
        refusal = path_refusal(rel)
        if refusal is not None:
            below = "; nothing under it is listed either" if is_dir else ""
            self._report_unusable(f"{quoted_path(rel)} cannot be addressed by skill_file ({refusal}), so it is not "
                                  f"listed{below}")
            return self._charge_unlisted()
        if is_dir:
            if self.dirs_enqueued == MAX_DIRS_PER_SKILL:
                self.report(
                    "file-limit",
                    f"this skill has more than {MAX_DIRS_PER_SKILL} directories; the manifest lists the "
                    f"{len(self.files)} files found; the rest is not walked",
                )
                return True
            self.dirs_enqueued += 1
            self.queue.append((os.path.join(directory, entry.name), rel + "/"))
            return False
        if len(self.files) == MAX_FILES_PER_SKILL:
            self.report(
                "file-limit",
                f"this skill has more than {MAX_FILES_PER_SKILL} files; the manifest lists the first "
                f"{MAX_FILES_PER_SKILL}; the rest is not walked",
            )
            return True
        try:
            size = entry.stat(follow_symlinks=False).st_size
        except OSError:  # gone since the listing: nothing to read
            return self._charge_unlisted()
        self.files.append(ManifestEntry(rel, size))
        return False

    def _charge_unlisted(self) -> bool:
        """Charges an entry that is neither listed nor walked; True when that budget is spent."""
        self.unlisted_left -= 1
        if self.unlisted_left >= 0:
            return False
        self.report(
            "file-limit",
            f"this skill holds more than {MAX_UNLISTED_ENTRIES} entries that are not listed (links, FIFOs, names "
            f"skill_file cannot address); the manifest lists the {len(self.files)} files found; the rest is not walked",
        )
        return True

    def _report_unusable(self, detail: str) -> None:
        if self.unusable_reported < MAX_UNUSABLE_PATH_PROBLEMS:
            self.unusable_reported += 1
            self.report("unusable-path", detail)
        else:
            self.unusable_unreported += 1

    def _report_unusable_rest(self) -> None:
        if self.unusable_unreported:
            self.report(
                "unusable-path",
                f"{self.unusable_unreported} more paths cannot be addressed by skill_file either, so they are not "
                f"listed; only the first {MAX_UNUSABLE_PATH_PROBLEMS} are reported one by one",
            )


@contextmanager
def _listing(directory: str, at_most: int) -> Iterator[list[os.DirEntry[str]] | None]:
    """The first `at_most` entries of `directory` by name, or None when it cannot be listed. Read (and then stat'ed)
    through a descriptor checked to be this very directory, so a link swapped in mid-walk cannot list an outside one."""
    fd = open_directory_in_place(directory)
    if fd is None:
        yield None
        return
    entries: list[os.DirEntry[str]] | None
    try:
        try:
            # Listable but not searchable (mode 0644): no entry of it can be stat'ed or read, so it is not listed.
            os.stat(os.curdir, dir_fd=fd)
            with os.scandir(fd) as listing:
                first = list(islice(listing, at_most))
                if len(first) < at_most:  # the usual directory, read whole
                    entries = sorted(first, key=_name)
                else:  # more names than the walk keeps: read through, keeping only the first ones by name
                    entries = heapq.nsmallest(at_most, chain(first, listing), key=_name)
        except OSError:
            entries = None
        yield entries
    finally:
        os.close(fd)


def _name(entry: os.DirEntry[str]) -> str:
    return entry.name
