"""Reading and finding files over Beam's FileSystems (local paths and gs:// alike).

Paths are joined with `schemas.paths.join`. Writing into the output directory is
`beam_pipeline.output.directory`'s concern.
"""

from __future__ import annotations

import codecs
import collections
import concurrent.futures
import errno
import hashlib
import os
import posixpath
import re
import stat
import warnings
from collections.abc import Iterable, Iterator

from apache_beam.io.filesystem import CompressionTypes
from apache_beam.io.filesystems import FileSystems
from PIL import Image

from beam_pipeline.core.rejections import InputError
from beam_pipeline.tree.layouts import TreeAccess
from beam_pipeline.tree.listing import Listed, is_below, is_skipped_folder, list_tree, same_folder
from beam_pipeline.tree.pairing import IMAGE_EXTENSIONS, printable_path
from schemas.paths import first_few, is_local, join


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


def _read_regular_file(path: str) -> bytes:
    """A local regular file's bytes, opened without waiting (O_NONBLOCK: a pipe's open waits
    for a writer) and read only once `fstat` says it is a regular file."""
    nonblocking = getattr(os, "O_NONBLOCK", 0)  # (POSIX; Windows has no pipes of this kind)
    descriptor = os.open(path, os.O_RDONLY | nonblocking)
    try:
        mode = os.fstat(descriptor).st_mode
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), path)
        if not stat.S_ISREG(mode):
            raise InputError(
                "read_error",
                "not a regular file: a device, socket or pipe (there since the tree was listed?)",
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


def has_files(directory: str) -> bool:
    """Whether any file lies below `directory` (a path, or a glob pattern)."""
    if "*" in directory or not is_local(directory):
        (result,) = FileSystems.match([join(directory, "**")], limits=[1])
        return bool(result.metadata_list)
    return any(isinstance(item, Listed) for item in list_tree(directory))


_ARCHIVES = (".tar", ".tar.gz", ".tgz", ".zip")


def without_images(directory: str) -> str | None:
    """None when an image file (by its name) lies below the local `directory`, or it is not
    local; else what lies there instead, for the refusal of a split with no images to build
    (ImageNet's train folder still holding its 1,000 class archives, say)."""
    if not is_local(directory):
        return None
    others = []
    for item in list_tree(directory):
        if isinstance(item, Listed):
            name = posixpath.basename(item.path)
            if posixpath.splitext(name)[1].lower() in IMAGE_EXTENSIONS:
                return None
            others.append(name)
    shown = first_few(others, 3)
    what = f"{len(others)} file{'s' if len(others) != 1 else ''}, no image: {shown}"
    if any(name.lower().endswith(_ARCHIVES) for name in others):
        what += (
            "; extract the archives first (ImageNet's train comes as one .tar per class: in "
            'that folder, for f in *.tar; do mkdir "${f%.tar}" && tar -xf "$f" -C '
            '"${f%.tar}"; done, then move the archives out)'
        )
    return what


def has_top_level_files(directory: str, extension: str) -> bool:
    """Whether a file named `*extension` lies directly in `directory`, not below a folder of it.

    Locally one directory scan, stopping at the first such file. An object store lists every
    object below a prefix (all of ImageNet's train XML to find none at the top), so there the
    answer is whether ImageNet's first validation file is there (`ILSVRC2012_val_00000001`).
    """
    if not is_local(directory):
        return FileSystems.exists(join(directory, f"ILSVRC2012_val_00000001{extension}"))
    try:
        with os.scandir(directory) as entries:
            return any(e.name.lower().endswith(extension) and _is_file(e) for e in entries)
    except OSError:
        return False


def top_level_images(directory: str) -> list[str]:
    """Names of the images (by extension) directly in a local `directory`, sorted; [] for a
    remote one (an object store would list every object below the prefix)."""
    return _top_level(directory, IMAGE_EXTENSIONS)


# Label tables other tools keep beside an image tree (TFRecorder's data.csv, a competition's
# train.csv): not read here, and said so where they lie beside split folders.
TABLE_EXTENSIONS = frozenset({".csv", ".tsv"})


def top_level_tables(directory: str) -> list[str]:
    """Names of the CSV and TSV files directly in a local `directory`, sorted ([] remote)."""
    return _top_level(directory, TABLE_EXTENSIONS)


def _top_level(directory: str, extensions: frozenset[str]) -> list[str]:
    if not is_local(directory):
        return []
    try:
        with os.scandir(directory) as entries:
            return sorted(
                e.name
                for e in entries
                if posixpath.splitext(e.name)[1].lower() in extensions and _is_file(e)
            )
    except OSError:
        return []


def subdirectories(directory: str) -> list[str]:
    """Names of the subdirectories of a local `directory` that hold files (other than hidden
    ones), sorted; never a folder that listings skip (`listing.is_skipped_folder`).

    Object stores have no directories to list cheaply: [] for remote paths (callers use this
    for messages, and to find a tree one level down).
    """
    if not is_local(directory) or not os.path.isdir(directory):
        return []
    names = sorted(
        entry.name
        for entry in os.scandir(directory)
        if _is_dir(entry) and not is_skipped_folder(entry.name)
    )
    return [name for name in names if _has_visible_files(join(directory, name))]


def classes_without_images(directory: str, foreign: Iterable[str] = ()) -> list[str]:
    """The classes of a local class-folder split that hold no image, sorted: its class folders
    (subdirectories, but those that listings skip) below which no image lies, and ImageNet's
    per-class archives beside them (`n01440764.tar`) whose class has no folder of images: a
    class not extracted yet. (Another archive, such as the whole `ILSVRC2012_img_train.tar`
    left where it was unpacked, or a class's archive beside its extracted folder, is not a
    class; the listing reports it.) [] for an object store's path, which has no empty folders
    and no cheap way to look into ImageNet's 1,000.

    A class folder that is a link the listing does not enter is one too, named with why: a
    link to nothing (its target missing, or a loop), or one to a folder of this split or of
    another (`foreign`: their real paths), whose images are listed by their own path; so is
    the second name of one folder (two links to one folder outside the tree, a bind mount),
    whose images would be listed once or under two classes, and a folder whose name is not
    UTF-8 text, whose images are rejected."""
    if not is_local(directory) or not os.path.isdir(directory):
        return []
    real = os.path.realpath(directory)
    with os.scandir(directory) as scanned:
        entries = sorted(scanned, key=lambda entry: entry.name)  # the listing's order
    folders, archives, named = [], [], []
    first: dict[tuple[int, int], os.DirEntry] = {}  # (device, inode) of a folder: its first
    for entry in entries:
        if is_skipped_folder(entry.name):
            continue
        name = printable_path(entry.name)
        if entry.is_symlink() and (why := _unlisted_link(entry, real, foreign)):
            named.append(f"{name} ({why})")
        elif _is_dir(entry):
            identity = _identity(entry.path)
            earlier = first.get(identity) if identity is not None else None
            if earlier is not None and same_folder(entry.path, earlier.path):
                named.append(f"{name} (the same folder as {printable_path(earlier.name)})")
            elif name != entry.name:
                named.append(f"{name} (a name that is not UTF-8 text: its images are rejected)")
            else:
                folders.append(name)
            if identity is not None:
                first.setdefault(identity, entry)
        elif entry.name.lower().endswith(_ARCHIVES):
            archives.append(entry.name)
    empty = [name for name in folders if not _holds_an_image(join(directory, name))]
    full = set(folders) - set(empty)
    empty = [name + _other_files(join(directory, name)) for name in empty]
    stems = {name: name.split(".", 1)[0] for name in archives}
    classes = [
        name for name, stem in stems.items() if _WORDNET_ID.fullmatch(stem) and stem not in full
    ]
    return sorted(empty + classes + named)


def _other_files(directory: str) -> str:
    """What a class folder holds instead of images, as " (3 .heic files, not images ...)",
    when its files are neither images the build reads nor archives (which the refusal's
    extraction loop is about); "" otherwise."""
    suffixes: collections.Counter[str] = collections.Counter()
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if not entry.name.startswith(".") and _is_file(entry):
                    suffixes[posixpath.splitext(entry.name)[1].lower() or "(none)"] += 1
    except OSError:
        return ""
    if not suffixes or any(suffix in _ARCHIVES for suffix in suffixes):
        return ""
    (suffix, count), *_ = suffixes.most_common(1)
    kind = "files without an extension" if suffix == "(none)" else f"{suffix} files"
    return f" ({count} {kind}, not images the build reads: convert them to JPEG or PNG)"


def _identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of what `path` leads to, to find two names of one folder (then told
    by `same_folder`); None if it cannot be read, or where the file system gives no inode."""
    try:
        status = os.stat(path)
    except OSError:
        return None
    return (status.st_dev, status.st_ino) if status.st_ino else None


def _is_dir(entry: os.DirEntry) -> bool:
    """`entry.is_dir()`, False for a link in a loop (which raises there)."""
    try:
        return entry.is_dir()
    except OSError:
        return False


def _is_file(entry: os.DirEntry) -> bool:
    """`entry.is_file()`, False for a link in a loop (which raises there)."""
    try:
        return entry.is_file()
    except OSError:
        return False


def _unlisted_link(entry: os.DirEntry, real: str, foreign: Iterable[str]) -> str | None:
    """Why a link in a split's folder names a class the listing will find no image of: it
    leads nowhere (and its name, without an extension, is a folder's), or to a folder that is
    listed by its own path (of this split, or of another); None for a link the listing
    enters."""
    if not _is_dir(entry):
        if os.path.exists(entry.path) or posixpath.splitext(entry.name)[1]:
            return None  # a link to a file, or a file's name: not a class folder
        return "a link to nothing"
    target = os.path.realpath(entry.path)
    if target == join(real, entry.name):
        return None  # the split's folder is reached through a link, not this entry
    for folder in (real, *foreign):
        if target == folder or is_below(target, [folder]):
            return f"a link to {target}, whose images are listed there"
    return None


_WORDNET_ID = re.compile(r"n\d{8}")  # ImageNet's class names, and its per-class archives'


def _holds_an_image(directory: str) -> bool:
    """Whether an image file (by its name) lies below the local `directory`, outside the
    folders listings skip; stops at the first (one directory read for a class of ImageNet,
    where `list_tree` would sort its 1,300 names first)."""
    folders = []
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir():
                    if not is_skipped_folder(entry.name):
                        folders.append(entry.path)
                elif entry.name.startswith("."):
                    continue  # macOS's ._NAME.JPEG: not an image, and listings skip it
                elif posixpath.splitext(entry.name)[1].lower() in IMAGE_EXTENSIONS:
                    return True
    except OSError:
        return True  # unreadable: not this refusal; the listing reports it and fails the build
    return any(_holds_an_image(folder) for folder in folders)


def _has_visible_files(directory: str) -> bool:
    """Whether a file whose name does not start with a dot lies below `directory` (`.DS_Store`
    and macOS's `._NAME` files alone do not make a folder of images)."""
    return any(
        isinstance(item, Listed) and not posixpath.basename(item.path).startswith(".")
        for item in list_tree(directory)
    )


def is_directory(path: str) -> bool:
    """Whether `path` is a directory (an empty one too); in an object store, which has no
    directories, whether any object lies below it."""
    if not is_local(path):
        return has_files(path)
    return os.path.isdir(path)


def match(pattern: str) -> list[str]:
    """The sorted paths that match a glob pattern."""
    (result,) = FileSystems.match([pattern])
    return sorted(m.path for m in result.metadata_list)


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


# The tree's file system as a plan asks it (`layouts.TreeAccess`).
TREE_ACCESS = TreeAccess(
    has_files,
    match,
    read_text,
    subdirectories,
    has_top_level_files,
    is_directory,
    without_images,
    top_level_images,
    top_level_tables,
)
