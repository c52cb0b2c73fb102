"""Bounded reads (through the resolve check, as every caller makes them), text-or-base64 and media types against
real files (SPEC §6.3–6.5, §17 items 78–79, 85–86, 89–91)."""

import base64
import os
import subprocess
import sys
import tracemalloc

import pytest
from support import fails_after

from skill_mcp.files import CappedRead, encode_content, media_type, read_capped_fd
from skill_mcp.limits import MAX_FILE_BYTES
from skill_mcp.paths import NotRegularFile, PathRefused, SkillDir

MIB = 1024 * 1024
PNG_BYTES = bytes.fromhex(
    "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c489"
    "0000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
)


def write(path, data: bytes) -> str:
    path.write_bytes(data)
    return str(path)


def read_capped(path: str, max_bytes: int) -> CappedRead:
    """The bounded read the tools make: opened through the resolve check, then read by descriptor."""
    directory, name = os.path.split(path)
    with SkillDir(directory).opened(name) as (fd, status):
        return read_capped_fd(fd, max_bytes, status)


def peak_growth(read) -> int:
    tracemalloc.start()
    try:
        baseline, _ = tracemalloc.get_traced_memory()
        read()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - baseline


def test_small_file_is_read_whole(tmp_path):
    assert read_capped(write(tmp_path / "hello.txt", b"hello"), MAX_FILE_BYTES) == CappedRead(b"hello", 5, False)


def test_file_exactly_at_cap_is_not_truncated(tmp_path):
    data = bytes(range(64))
    assert read_capped(write(tmp_path / "f.bin", data), 64) == CappedRead(data, 64, False)


def test_empty_file(tmp_path):
    assert read_capped(write(tmp_path / "empty", b""), 64) == CappedRead(b"", 0, False)


def test_file_over_cap_is_cut_at_cap_with_full_size(tmp_path):
    data = os.urandom(MAX_FILE_BYTES + 4096)
    result = read_capped(write(tmp_path / "big.bin", data), MAX_FILE_BYTES)
    assert (result.size, result.truncated, len(result.data)) == (1052672, True, 1048576)
    assert result.data == data[:MAX_FILE_BYTES]


def test_size_is_never_below_bytes_read(tmp_path):
    # procfs files report st_size 0 yet have content.
    result = read_capped(f"/proc/{os.getpid()}/status", MAX_FILE_BYTES)
    assert result.size >= len(result.data) > 0


@pytest.mark.parametrize(
    ("grown", "cap", "expected_size", "truncated"),
    [(150_000, MIB, 150_000, False), (200_000, 100_000, 100_001, True), (400_000, 200_000, 200_001, True)],
)
def test_a_file_that_grew_after_its_check_is_read_to_its_end_or_the_cap(tmp_path, grown, cap, expected_size,
                                                                        truncated):
    # skill_file sizes every file before it reads any (§7.3): one written to meanwhile is still read to its end,
    # or cut at the cap with one byte past it read to know, as one whose st_size says too little (procfs).
    data = os.urandom(grown)
    (tmp_path / "log.txt").write_bytes(b"")
    with SkillDir(str(tmp_path)).opened("log.txt") as (fd, status):
        (tmp_path / "log.txt").write_bytes(data)
        assert read_capped_fd(fd, cap, status) == CappedRead(data[:cap], expected_size, truncated)

def test_sparse_256_mib_file_with_1_mib_cap_stays_near_cap(tmp_path):
    sparse = tmp_path / "sparse.bin"
    with open(sparse, "wb") as f:
        f.truncate(256 * MIB)
    results = []
    growth = peak_growth(lambda: results.append(read_capped(str(sparse), MIB)))
    assert growth < 32 * MIB
    assert results[0] == CappedRead(bytes(MIB), 256 * MIB, True)
    # The measurement sees the read's buffers: an 8 MiB cap must show at least 8 MiB.
    assert peak_growth(lambda: read_capped(str(sparse), 8 * MIB)) >= 8 * MIB


def test_directory_is_not_a_regular_file(tmp_path):
    with pytest.raises(NotRegularFile):
        read_capped(str(tmp_path), 64)


def test_a_fifo_is_refused_without_blocking(tmp_path):
    os.mkfifo(tmp_path / "pipe")  # no writer: a blocking open would wait forever
    with fails_after(5), pytest.raises(NotRegularFile) as caught:
        read_capped(str(tmp_path / "pipe"), 64)
    assert isinstance(caught.value, PathRefused)  # which every caller of SkillDir's opening catches
    assert caught.value.message == '"pipe" is not a regular file'


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", True),
        (b"hello\n", True),
        ("héllo ✓".encode(), True),
        (b"a\x00b", False),
        (b"\xff\xfeA", False),
        ("é".encode()[:1], False),
    ],
)
def test_text_is_no_nul_and_strict_utf8(data, expected):
    encoding, content = encode_content(data)
    assert encoding == ("utf-8" if expected else "base64")
    assert (content.encode() if expected else base64.b64decode(content)) == data


def test_text_comes_back_exact_as_utf8():
    text = "# Notes\n\nunicode: héllo ✓\r\n"
    assert encode_content(text.encode()) == ("utf-8", text)


def test_empty_is_utf8_empty_string():
    assert encode_content(b"") == ("utf-8", "")


def test_invalid_utf8_without_nul_is_base64():
    assert encode_content(b"\xff\xfeA") == ("base64", base64.b64encode(b"\xff\xfeA").decode())


def test_png_round_trips_as_base64_image_png(tmp_path):
    path = write(tmp_path / "pixel.png", PNG_BYTES)
    encoding, content = encode_content(read_capped(path, MAX_FILE_BYTES).data)
    assert (encoding, media_type("pixel.png")) == ("base64", "image/png")
    assert base64.b64decode(content) == PNG_BYTES


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("notes.md", "text/markdown"),
        ("a.txt", "text/plain"),
        ("a.json", "application/json"),
        ("a.yaml", "application/yaml"),
        ("a.yml", "application/yaml"),
        ("a.csv", "text/csv"),
        ("a.js", "text/javascript"),
        ("a.mjs", "text/javascript"),
        ("a.ts", "text/plain"),
        ("a.py", "text/x-python"),
        ("a.sh", "application/x-sh"),
        ("a.html", "text/html"),
        ("a.css", "text/css"),
        ("a.xml", "application/xml"),
        ("a.xsd", "application/xml"),
        ("a.svg", "image/svg+xml"),
        ("a.png", "image/png"),
        ("a.jpg", "image/jpeg"),
        ("a.jpeg", "image/jpeg"),
        ("a.gif", "image/gif"),
        ("a.webp", "image/webp"),
        ("a.pdf", "application/pdf"),
        ("a.zip", "application/zip"),
        ("scripts/deep/REPORT.PDF", "application/pdf"),
        ("archive.tar.zip", "application/zip"),
        ("a.cjs", "application/octet-stream"),
        ("a.htm", "application/octet-stream"),
        ("x.constructor", "application/octet-stream"),
        ("x.toString", "application/octet-stream"),
        ("x.__class__", "application/octet-stream"),
        ("a.b/c", "application/octet-stream"),
        ("Makefile", "application/octet-stream"),
        ("trailing.", "application/octet-stream"),
    ],
)
def test_media_type(path, expected):
    assert media_type(path) == expected


HEAP_PROBE = """
from skill_mcp.files import keep_read_buffers_on_heap

def on_the_heap(buffer):
    for line in open("/proc/self/maps"):
        if line.rstrip().endswith("[heap]"):
            low, high = (int(bound, 16) for bound in line.split()[0].split("-"))
            return low <= id(buffer) < high
    return False

fresh = on_the_heap(bytes(2 << 20))
applied = keep_read_buffers_on_heap()
print(fresh, applied, on_the_heap(bytes(2 << 20)))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_read_buffers_come_from_the_heap_once_the_thresholds_are_set() -> None:
    # A fresh glibc process maps a 2 MiB block on its own; with the fixed thresholds it comes from the heap.
    shown = subprocess.run([sys.executable, "-c", HEAP_PROBE], capture_output=True, text=True, timeout=60, check=True)
    assert shown.stdout.split() == ["False", "True", "True"]
