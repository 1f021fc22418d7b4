"""The index files DALI's TFRecord reader needs, one per shard: written after every record's CRCs
are checked, kept per build under the user's cache, rewritten when a shard changes; and
`epoch_check`, which refuses to go on reading through them once the build has changed."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable

from loaders.info import BuildInfo, CorruptDatasetError
from schemas.tfrecord import CorruptRecordError, read_frames


def shard_indexes(info: BuildInfo, split: str, index_dir: str | None = None) -> list[str]:
    """The index file DALI's reader needs for each shard of a split (written, with every
    record's CRCs checked, when missing or stale). An index line is "offset size" of one
    record, as DALI's `tfrecord2idx` writes it; that script imports TensorFlow for every shard
    (and checks no CRCs), so the loader writes the same lines itself.

    Raises:
      CorruptDatasetError: a shard does not hold the records build_info.json counts.
    """
    given = index_dir is not None
    directory = default_index_dir(info) if index_dir is None else os.path.expanduser(index_dir)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as error:
        what = "index_dir" if given else "the index cache ($XDG_CACHE_HOME or ~/.cache)"
        raise OSError(
            error.errno,
            f"{what} {directory}: {error.strerror}; DALI's reader needs an index file per "
            "shard there: pass an index_dir= this process can write",
        ) from None
    indexes = []
    for path, shard in zip(info.shard_paths(split), info.split(split).shards, strict=True):
        index = os.path.join(directory, os.path.basename(path) + ".idx")
        if not _index_is_current(index, shard, path):
            stamp = _file_stamp(path)  # before the records are checked: a later change shows
            write_index(path, index, shard.num_examples)
            _write_atomically(index + _OF_SHARD, f"{shard.sha256} {stamp}")
        indexes.append(index)
    return indexes


def default_index_dir(info: BuildInfo) -> str:
    """A cache directory for one build: keyed by its path and its metadata file's text
    (`build_info.json`, or a schema 1.x build's `dataset_info.json`)."""
    cache = os.environ.get("XDG_CACHE_HOME", "")
    if not os.path.isabs(cache):  # unset, or relative: ignored, as the XDG spec says
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    text = info.metadata_text.encode("utf-8", "surrogateescape")
    key = hashlib.sha256(os.path.abspath(info.data_dir).encode() + b"\0" + text)
    return os.path.join(cache, "imagenet-tfrecords", "dali-index", key.hexdigest()[:16])


# Beside each index: the SHA-256 (from build_info.json) of the shard it was written for, and
# the shard file's size and modification time when its records were checked. A rebuild with
# another seed can keep a shard's record count and size but not its offsets; a shard changed
# in place (restored from a backup, a bad copy over it) has the same entry in build_info.json
# but other bytes, which DALI's reader would decode without checking a CRC.
_OF_SHARD = ".sha256"


def _file_stamp(path: str) -> str:
    status = os.stat(path)
    return f"{status.st_size} {status.st_mtime_ns}"


def _index_is_current(index: str, shard, path: str) -> bool:
    try:
        with open(index + _OF_SHARD) as file:
            if file.read() != f"{shard.sha256} {_file_stamp(path)}":
                return False
        with open(index) as file:
            lines = file.read().split("\n")[:-1]
    except OSError:
        return False
    if len(lines) != shard.num_examples:
        return False
    if not lines:
        return shard.num_bytes == 0
    offset, size = map(int, lines[-1].split())
    return offset + size == shard.num_bytes


def _write_atomically(path: str, text: str) -> None:
    temporary = f"{path}.tmp-{os.getpid()}"
    with open(temporary, "w") as file:
        file.write(text)
    os.replace(temporary, path)


def write_index(shard: str, index: str, expected: int) -> None:
    """Writes `index` ("offset size" per record) for `shard`, atomically, once every record's
    framing and both masked CRC32Cs (of its length and of its data) check out.

    DALI's reader does not check the CRCs, and it reads a shard through this index for as long
    as the index is current (see `_index_is_current`), so this is where a damaged record is
    caught: once per shard, when the index is written.

    Raises:
      CorruptDatasetError: naming the shard, when a record's checksum is wrong (with the
        record's number and byte offset), a record is cut short or the count differs.
    """
    lines = []
    with open(shard, "rb") as file:
        end = os.fstat(file.fileno()).st_size
        try:
            for offset, size, _ in read_frames(file):
                lines.append(f"{offset} {size}\n")
        except CorruptRecordError as error:
            if not error.problem.startswith("truncated"):  # cut short: counted below
                raise _bad_record(shard, error.index, error.offset, error.problem) from None
    whole = sum(int(line.split()[1]) for line in lines)
    if whole != end or len(lines) != expected:
        raise CorruptDatasetError(
            f"shard {shard}: {len(lines)} whole records in {end} bytes, build_info.json says "
            f"{expected} (python -m beam_pipeline verify locates the damage)"
        )
    _write_atomically(index, "".join(lines))


def epoch_check(info: BuildInfo, split: str) -> Callable[..., None]:
    """What each epoch runs first: CorruptDatasetError when the build's metadata file is gone
    or changed since `load_dali_dataset` read it (a rebuild writes shards of the same names,
    which DALI would read through the old indexes), or when a shard file changed since its
    records were checked (DALI's reader checks no CRC). `check(quick=True)`, after every
    batch, looks at the metadata file's size and time alone, and checks the rest when they
    changed: a rebuild that commits in the middle of an epoch (DALI opens each shard when it
    reaches it, and would read a new one through its old index)."""
    fix = "call load_dali_dataset again once the build is complete"
    path = os.path.join(info.data_dir, info.metadata_file) if info.metadata_file else None
    stamps = {shard: _file_stamp(shard) for shard in info.shard_paths(split)}
    metadata_stamp = _file_stamp(path) if path is not None else None

    def check(quick: bool = False) -> None:
        if quick:
            try:
                if path is None or _file_stamp(path) == metadata_stamp:
                    return
            except FileNotFoundError:
                pass  # the full check says so
        if path is not None:
            try:
                with open(path, "rb") as file:
                    text = file.read().decode("utf-8", errors="replace")
            except FileNotFoundError:
                raise CorruptDatasetError(
                    f"{path} is gone since load_dali_dataset read it (a rebuild under way?): {fix}"
                ) from None
            if text != info.metadata_text:
                raise CorruptDatasetError(
                    f"{path} changed since load_dali_dataset read it (rebuilt, or upgraded): "
                    f"the shards may not be those its indexes describe; {fix}"
                )
        for shard, stamp in stamps.items():
            try:
                changed = _file_stamp(shard) != stamp
            except FileNotFoundError:
                raise CorruptDatasetError(
                    f"shard {shard} is gone since load_dali_dataset read it: {fix}"
                ) from None
            if changed:
                raise CorruptDatasetError(
                    f"shard {shard} changed (size or modification time) since load_dali_dataset "
                    "checked its records; DALI reads no checksum, so call load_dali_dataset "
                    "again, which checks them again (python -m beam_pipeline verify checks "
                    "the whole build)"
                )

    return check


def _bad_record(shard: str, number: int, offset: int, problem: str) -> CorruptDatasetError:
    return CorruptDatasetError(
        f"shard {shard}: record {number} at byte {offset}: {problem} (the shard is damaged; "
        "python -m beam_pipeline verify checks the whole build)"
    )
