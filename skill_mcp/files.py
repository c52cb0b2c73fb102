"""Bounded reads, streamed digests, text-or-base64 encoding and media types (SPEC §6.3–6.5), and the heap setting
that keeps a large read's buffers cheap."""

from __future__ import annotations

import base64
import hashlib
import os
from dataclasses import dataclass

_CHUNK_BYTES = 65536
_OCTET_STREAM = "application/octet-stream"

_MEDIA_TYPES = {
    "md": "text/markdown",
    "txt": "text/plain",
    "json": "application/json",
    "yaml": "application/yaml",
    "yml": "application/yaml",
    "csv": "text/csv",
    "js": "text/javascript",
    "mjs": "text/javascript",
    "ts": "text/plain",
    "py": "text/x-python",
    "sh": "application/x-sh",
    "html": "text/html",
    "css": "text/css",
    "xml": "application/xml",
    "xsd": "application/xml",
    "svg": "image/svg+xml",
    "png": "image/png",
    "jpg": "image/jpeg",
    "jpeg": "image/jpeg",
    "gif": "image/gif",
    "webp": "image/webp",
    "pdf": "application/pdf",
    "zip": "application/zip",
}


@dataclass(frozen=True, slots=True)
class CappedRead:
    data: bytes
    size: int
    truncated: bool


def _chunks(fd: int, limit: int):
    """Yield the file's bytes in chunks, stopping once `limit` bytes came."""
    seen = 0
    while seen < limit:
        chunk = os.read(fd, min(_CHUNK_BYTES, limit - seen))
        if not chunk:
            return
        seen += len(chunk)
        yield chunk


def read_capped_fd(fd: int, max_bytes: int, status: os.stat_result) -> CappedRead:
    """§6.3's bounded read, of a descriptor `SkillDir.open` checked (`status` is its own): at most `max_bytes`,
    `truncated` when there was more, and `size` never below what was read. The caller closes it."""
    limit = max_bytes + 1  # one byte past the cap is enough to know it was truncated
    # Sized by st_size, a regular file comes in one read; more chunks follow only when st_size understates (procfs
    # reports 0) or the file grew.
    first = os.read(fd, min(limit, max(status.st_size + 1, _CHUNK_BYTES)))
    data = first + b"".join(_chunks(fd, limit - len(first))) if first else first
    return CappedRead(data=data[:max_bytes], size=max(status.st_size, len(data)), truncated=len(data) > max_bytes)


class FileTooLarge(OSError):
    """A streamed digest passed its byte budget."""


def sha256_fd(fd: int, max_bytes: int) -> tuple[str, int]:
    """Streamed (hex digest, bytes hashed) of a descriptor checked to be a regular file (`SkillDir.open`);
    FileTooLarge past `max_bytes`, so memory stays one chunk."""
    digest = hashlib.sha256()
    size = 0
    for chunk in _chunks(fd, max_bytes + 1):
        size += len(chunk)
        digest.update(chunk)
    if size > max_bytes:
        raise FileTooLarge(f"more than {max_bytes} bytes")
    return digest.hexdigest(), size


def _as_text(data: bytes) -> str | None:
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8", errors="strict")
    except UnicodeDecodeError:
        return None


def encode_content(data: bytes) -> tuple[str, str]:
    """Return `(encoding, content)`: `("utf-8", text)` for text, else `("base64", ascii)`."""
    text = _as_text(data)
    if text is not None:
        return "utf-8", text
    return "base64", base64.b64encode(data).decode("ascii")


def media_type(path: str) -> str:
    final_segment = path.rsplit("/", 1)[-1]
    if "." not in final_segment:
        return _OCTET_STREAM
    extension = final_segment.rsplit(".", 1)[1].lower()
    return _MEDIA_TYPES.get(extension, _OCTET_STREAM)


_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # glibc's mallopt parameters


def keep_read_buffers_on_heap() -> bool:
    """Let a 1 MiB read's buffers (the bytes, their text and base64, the JSON answer) reuse heap memory.

    glibc serves blocks over its mmap threshold with fresh mappings whose pages fault in on every read, and
    raises that threshold only after such a block is freed; a fixed 4 MiB threshold skips that, and a 16 MiB
    trim threshold bounds what stays resident after a burst. False where there is no glibc `mallopt`.
    """
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, 4 << 20)) and bool(mallopt(_M_TRIM_THRESHOLD, 16 << 20))
