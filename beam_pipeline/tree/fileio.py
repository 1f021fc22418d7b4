"""Reading the tree's files over Beam's FileSystems (local paths and gs:// alike).

A file whole, a text, an image's header, the writer's reads ahead of its decoder, a file's
digest.

Paths are joined with `schemas.paths.join`. The tree's folders as a plan asks them are
`folders`'; writing into the output directory is `beam_pipeline.output.directory`'s concern.
"""

from __future__ import annotations

import codecs
import collections
import concurrent.futures
import errno
import hashlib
import os
import stat
import warnings
from collections.abc import Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from PIL import Image

from beam_pipeline.core.rejections import InputError
from schemas.paths import is_local


def read_file(path: str, *, regular: bool = False) -> bytes:
    """Whole file; raises InputError(read_error) when it cannot be read. `regular` (a file of
    the tree, listed as a regular file): also when a local path is no longer one (a pipe put
    in an image's place after the listing held a build forever: a read of a pipe waits for a
    writer; a flag's file may be one, `--labels_file <(...)`)."""
    try:
        if regular and is_local(path):
            return _read_regular_file(path)
        with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
            return stream.read()
    except InputError:
        raise
    except Exception as error:  # noqa: BLE001 - any I/O failure of one file is that file's fault
        raise InputError("read_error", f"{type(error).__name__}: {error}") from None


# No image a build takes (--max_pixels' default, 89 Mpx, of 16-bit RGBA: 715 MB raw) or XML
# is larger: a file past it (a disk image, a video named .jpg) is not read into memory whole
# (8 GiB of it was a MemoryError without a word, or the kernel ending the build).
MAX_FILE_BYTES = 2 << 30


def _read_regular_file(path: str) -> bytes:
    """A local regular file's bytes, opened without waiting (O_NONBLOCK: a pipe's open waits
    for a writer) and read only once `fstat` says it is a regular file of at most
    `MAX_FILE_BYTES`."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # (POSIX; Windows has no pipes of this kind)
    descriptor = os.open(path, os.O_RDONLY | nonblocking)
    try:
        found = os.fstat(descriptor)
        mode = found.st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise InputError(
                "read_error",
                "not a regular file: a device, socket or pipe (there since the tree was listed?)",
            )
        if found.st_size > MAX_FILE_BYTES:
            raise InputError(
                "read_error",
                f"{found.st_size:,} bytes: larger than any image or XML a build reads "
                f"({MAX_FILE_BYTES:,} bytes at most), not read",
            )
        if nonblocking:
            os.set_blocking(descriptor, True)
        with os.fdopen(descriptor, "rb", closefd=True) as stream:
            descriptor = -1
            return stream.read()
    finally:
        if descriptor >= 0:
            os.close(descriptor)


def decode_text(data: bytes) -> str:
    """A text file's bytes as text: UTF-8, with or without a byte-order mark, or UTF-16 with
    one (what Windows editors save); raises UnicodeDecodeError otherwise, and for NUL bytes
    (UTF-16 without its mark decodes as UTF-8 with a NUL between letters)."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        return data.decode("utf-16")
    text = data.decode("utf-8-sig")
    if "\x00" in text:  # valid UTF-8, but UTF-16 or UTF-32 without a byte-order mark
        position = data.index(b"\x00")
        raise UnicodeDecodeError("utf-8", data, position, position + 1, "NUL byte")
    return text


def read_text(path: str, flag: str = "") -> str:
    """A whole text file (`decode_text`); raises ValueError naming the file (and the flag
    that named it) when it cannot be read or is not UTF-8 or UTF-16 text."""
    named = f"{flag} {path}" if flag else path
    try:
        return decode_text(read_file(path))
    except InputError as error:
        raise ValueError(f"{named}: cannot read it: {error.detail}") from None
    except UnicodeDecodeError as error:
        bad = error.object[error.start : error.start + 1]
        hint = " (UTF-16 without a byte-order mark?)" if bad == b"\x00" else ""
        raise ValueError(
            f"{named}: not UTF-8 text (byte {error.start} is {bad!r}{hint}); save it as UTF-8"
        ) from None


def ensure_dir(path: str) -> None:
    """Creates a directory if the file system has directories and it is missing."""
    if FileSystems.exists(path):
        return
    try:
        FileSystems.mkdirs(path)
    except OSError:
        if not FileSystems.exists(path):
            raise


def sha256_of(path: str, chunk: int = 1 << 22) -> tuple[str, int]:
    """(hex SHA-256, size in bytes) of a file, streamed."""
    digest, size = hashlib.sha256(), 0
    with FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream:
        while block := stream.read(chunk):
            digest.update(block)
            size += len(block)
    return digest.hexdigest(), size


# Image reads kept in flight ahead of the decoder by each shard writer, bounded by count and by
# the files' listed sizes: an object store answers each read after tens of milliseconds, a cold
# disk after a seek, and a writer that waited for each in turn would idle its core meanwhile.
READ_AHEAD_FILES = 16
READ_AHEAD_BYTES = 64 << 20


def read_ahead(
    paths: Iterable[tuple[str, int]],
    executor: concurrent.futures.Executor,
    max_files: int = READ_AHEAD_FILES,
    max_bytes: int = READ_AHEAD_BYTES,
) -> Iterator[concurrent.futures.Future]:
    """Futures of `read_file(path)` for (path, expected size) pairs, yielded in order.

    Up to `max_files` reads (and `max_bytes` of expected size, at least one read) run ahead of
    the consumer. A read's InputError is raised by its future's `result()`. Reads still pending
    when the consumer stops early are cancelled.
    """
    pending: collections.deque = collections.deque()
    in_flight = 0
    remaining = iter(paths)
    try:
        while True:
            for path, size in remaining:
                pending.append((executor.submit(read_file, path, regular=True), size))
                in_flight += size
                if len(pending) >= max_files or in_flight >= max_bytes:
                    break
            if not pending:
                return
            future, size = pending.popleft()
            in_flight -= size
            yield future
    finally:
        for future, _ in pending:
            future.cancel()


def header_size(path: str) -> tuple[int, int] | None:
    """(width, height) from an image file's header (a few KiB read, nothing decoded), or None
    when it is no image Pillow knows, or cannot be read: the writer rejects such a file."""
    try:
        with (
            FileSystems.open(path, compression_type=CompressionTypes.UNCOMPRESSED) as stream,
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)
            with Image.open(stream) as image:
                width, height = image.size
    except Exception:  # noqa: BLE001 - any failure here is the image's, reported when written
        return None
    return (width, height) if width > 0 and height > 0 else None
