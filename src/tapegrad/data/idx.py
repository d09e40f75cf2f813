"""A defensive reader for IDX files (the MNIST format), plain or gzip-compressed.

IDX layout: a 4-byte magic ``00 00 TT NN`` (``TT`` the element type, ``0x08`` = unsigned byte;
``NN`` the number of dimensions), then ``NN`` big-endian uint32 sizes, then the elements.
MNIST images use magic ``0x00000803`` (N, rows, cols), labels ``0x00000801`` (N,).

The reader trusts nothing: the magic and dimension count must be the expected ones, the sizes
must multiply to at most ``MAX_IDX_BYTES`` (so a lying header cannot make it allocate gigabytes),
the data are read in chunks (memory grows only with the bytes actually present, never with what
the header claims), gzip data are decompressed (and CRC-checked) before the header is trusted, and
the byte count must match the header exactly. Every failure is a :class:`DatasetError` naming
the file.
"""

from __future__ import annotations

import gzip
import io
import zlib
from typing import BinaryIO

import numpy as np

from ..safefile import open_regular
from .errors import DatasetError

#: Largest payload accepted (MNIST's training images are 47,040,000 bytes).
MAX_IDX_BYTES = 1 << 27
IDX_UBYTE = 0x08
_CHUNK = 1 << 20


def _read_exact(stream: BinaryIO, n: int) -> bytes:
    """Up to ``n`` bytes, in chunks, so a short stream never costs an ``n``-byte allocation."""
    if n <= _CHUNK:
        return stream.read(n)
    parts = []
    left = n
    while left > 0:
        chunk = stream.read(min(left, _CHUNK))
        if not chunk:
            break
        parts.append(chunk)
        left -= len(chunk)
    return b"".join(parts)


def parse_idx(stream: BinaryIO, name: str, ndim: int, max_bytes: int = MAX_IDX_BYTES) -> np.ndarray:
    """Parse an unsigned-byte IDX array with ``ndim`` dimensions from a seekable binary stream.

    A stream starting with the gzip magic is decompressed on the fly. ``name`` (usually the
    file path) appears in every error message.
    """
    gz = False
    try:
        magic = stream.read(2)
        stream.seek(-len(magic), io.SEEK_CUR)
        gz = magic == b"\x1f\x8b"
        raw: BinaryIO = stream
        if gz:
            # Decompress first (bounded by the size limit), so that damage to the gzip layer is
            # reported as such rather than as a confusing IDX header error.
            limit = max_bytes + 4 + 4 * ndim
            with gzip.GzipFile(fileobj=stream, mode="rb") as gzf:
                blob = _read_exact(gzf, limit + 1)
            if len(blob) > limit:
                raise DatasetError(
                    f"{name}: decompresses to more than {limit} bytes, above the limit for an "
                    f"IDX file with {ndim} dimension(s) (corrupt file?)"
                )
            raw = io.BytesIO(blob)
        return _parse(raw, name, ndim, max_bytes)
    except (OSError, EOFError, zlib.error) as err:
        # gzip.BadGzipFile is an OSError; a truncated gzip stream raises EOFError.
        what = "corrupt or truncated gzip data" if gz else "read error"
        raise DatasetError(f"{name}: {what} ({err})") from err


def _parse(raw: BinaryIO, name: str, ndim: int, max_bytes: int) -> np.ndarray:
    magic = raw.read(4)
    expected_magic = (IDX_UBYTE << 8) | ndim
    if len(magic) < 4:
        raise DatasetError(f"{name}: file too short for an IDX header ({len(magic)} bytes)")
    got_magic = int.from_bytes(magic, "big")
    if got_magic != expected_magic:
        raise DatasetError(
            f"{name}: wrong IDX magic 0x{got_magic:08x}, expected 0x{expected_magic:08x} "
            f"(unsigned bytes, {ndim} dimension{'s' if ndim != 1 else ''})"
        )
    dim_bytes = raw.read(4 * ndim)
    if len(dim_bytes) != 4 * ndim:
        raise DatasetError(
            f"{name}: truncated IDX header: {ndim} sizes need {4 * ndim} bytes, "
            f"got {len(dim_bytes)}"
        )
    shape = tuple(int.from_bytes(dim_bytes[4 * i : 4 * i + 4], "big") for i in range(ndim))
    count = 1
    for s in shape:
        count *= s
    if count > max_bytes or max(shape, default=0) > max_bytes:  # a 0 elsewhere hides a lie
        raise DatasetError(
            f"{name}: IDX header claims shape {shape} = {count} bytes, above the "
            f"{max_bytes}-byte limit (corrupt header?)"
        )
    payload = _read_exact(raw, count)
    if len(payload) != count:
        raise DatasetError(
            f"{name}: truncated: header shape {shape} needs {count} data bytes, "
            f"file has {len(payload)}"
        )
    if raw.read(1):
        raise DatasetError(
            f"{name}: trailing bytes after the {count} data bytes that header shape {shape} "
            "announces (header and data disagree)"
        )
    return np.frombuffer(payload, dtype=np.uint8).reshape(shape)


def read_idx(path, ndim: int, max_bytes: int = MAX_IDX_BYTES) -> np.ndarray:
    """Read an unsigned-byte IDX file (``.gz`` or plain) with ``ndim`` dimensions."""
    with open_regular(path, DatasetError) as f:
        return parse_idx(f, str(path), ndim, max_bytes)
