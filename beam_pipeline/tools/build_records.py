"""A committed build's records as the read-only tools find them, and its classes as they name them.

`records_at` reads the records at positions of a split (shard order, then record order),
opening only the shards that hold them (`show`, `inspect --split S --index N`); `find_filename`
reads every shard of the build for the records whose stored file name (`image/filename`) is a
name or ends with `/name`; `locate` is what `inspect OUT` asks of both, with its messages.
`class_title` names a class for a person: `n01440764 tench` where the build knows its display
name (`--labels_file LOC_synset_mapping.txt`), the class alone where it does not;
`classes_named` finds a class by either, `class_label` its label (`show --class`).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import shlex
import unicodedata
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from beam_pipeline.output.readback import (
    example_values,
    file_exists,
    file_size,
    open_file,
    read_build_info,
    stored_filename,
)
from schemas import (
    BACKGROUND,
    BUILD_INFO_FILE,
    DatasetInfo,
    ShardInfo,
    SplitInfo,
    is_shard_filename,
)
from schemas.paths import first_few, is_local, join, within
from schemas.tfrecord import CorruptRecordError, read_records
from schemas.trees import tree_instead_of_build

# A display name longer than this is cut (with "…") where a class is named for a person.
TITLE_CHARACTERS = 30


@dataclasses.dataclass(frozen=True)
class Located:
    """One record of a build and where it lies.

    Attributes:
      split: its split.
      shard: the file name of its shard.
      index: its position in the shard.
      position: its position in the split (the shards in order, then their records).
      record: the serialised Example; None where `find_filename` did not keep it.
    """

    split: str
    shard: str
    index: int
    position: int
    record: bytes | None


class CorruptShardError(CorruptRecordError):
    """A shard of a build whose framing or checksums are wrong, with its path."""

    def __init__(self, path: str, error: CorruptRecordError):
        super().__init__(error.offset, error.index, error.problem)
        self.path = path


def read_shard(path: str) -> Iterator[bytes]:
    """The records of one shard; CorruptShardError (naming it) at its first bad frame."""
    try:
        with open_file(path) as stream:
            yield from read_records(stream)
    except CorruptRecordError as error:
        raise CorruptShardError(path, error) from None


class ShardMismatchError(OSError):
    """A shard of another size than the build's metadata says: cut, replaced or swapped."""


def read_build_shard(output_dir: str, shard: ShardInfo) -> Iterator[bytes]:
    """The records of one of a build's shards, once its size is the metadata's (a shard cut
    at a record boundary read as the split's, short; another split's shard copied in its
    place was shown as its records): ShardMismatchError, naming it, where it is not."""
    path = join(output_dir, shard.file)
    size = file_size(path)
    if size != shard.num_bytes:
        raise ShardMismatchError(
            f"{path} has {size:,} bytes, {BUILD_INFO_FILE} says {shard.num_bytes:,}: it is not "
            f"the shard the build wrote (cut, replaced or swapped); run python -m beam_pipeline "
            f"verify {output_dir}"
        )
    return read_shard(path)


def records_at(
    output_dir: str, split: str, split_info: SplitInfo, positions: Sequence[int]
) -> Iterator[Located]:
    """The records at sorted positions of a split, reading only the shards that hold them.

    A shard of another size than the metadata says, or one that holds fewer records than it
    counts, is refused: ShardMismatchError, naming it (`show` drew what the short shard held
    and nothing of the shards after it, exit 0: a damaged-output trial).
    """
    wanted = iter(positions)
    target = next(wanted, None)
    start = 0
    for shard in split_info.shards:
        end = start + shard.num_examples
        if target is not None and target < end:
            position = start - 1  # (a shard with no record)
            for position, record in enumerate(read_build_shard(output_dir, shard), start=start):
                if position == target:
                    yield Located(split, shard.file, position - start, position, record)
                    target = next(wanted, None)
                    if target is None or target >= end:
                        break
            else:
                raise ShardMismatchError(
                    f"{join(output_dir, shard.file)} holds {position + 1 - start} records, "
                    f"{BUILD_INFO_FILE} counts {shard.num_examples}: it is not the shard the "
                    f"build wrote; run python -m beam_pipeline verify {output_dir}"
                )
        start = end
        if target is None:
            return


@dataclasses.dataclass
class FilenameSearch:
    """What `find_filename` found.

    Attributes:
      name: the name searched for.
      searched: records read, by split.
      exact: the records whose `image/filename` is `name`.
      ending: stored file name → its records, for those that end with `/name`; only the
        records of the first such name keep their bytes (more than one name is ambiguous).
    """

    name: str
    searched: dict[str, int] = dataclasses.field(default_factory=dict)
    exact: list[Located] = dataclasses.field(default_factory=list)
    ending: dict[str, list[Located]] = dataclasses.field(default_factory=dict)

    @property
    def found(self) -> list[Located]:
        """The records of the one stored file name meant (an image may be in several splits):
        those named exactly, else those of the only name ending with it; [] when none is, or
        when several names end with it (`ambiguous`)."""
        if self.exact:
            return self.exact
        return next(iter(self.ending.values())) if len(self.ending) == 1 else []

    @property
    def ambiguous(self) -> list[str]:
        """The stored file names that end with the name, when there is no exact one and more
        than one; [] otherwise."""
        return sorted(self.ending) if not self.exact and len(self.ending) > 1 else []


def find_filename(
    output_dir: str, info: DatasetInfo, name: str, splits: Sequence[str] | None = None
) -> FilenameSearch:
    """Reads every shard of the build's `splits` (default: all, in name order) for the records
    whose `image/filename` is `name` or ends with `/name`, in either Unicode form.

    A record whose bytes do not hold the name's is skipped unparsed. Raises CorruptShardError,
    OSError (a shard missing), ValueError (a record that is no Example).
    """
    search = FilenameSearch(name)
    # In either Unicode form (`café` typed composed, stored as macOS wrote it, decomposed).
    needles = {unicodedata.normalize(form, name).encode("utf-8") for form in ("NFC", "NFD")}
    wanted = unicodedata.normalize("NFC", name)
    for split in splits or sorted(info.splits):
        read = 0
        for shard in info.splits[split].shards:
            path, start = join(output_dir, shard.file), read
            for index, record in enumerate(read_build_shard(output_dir, shard)):
                read += 1
                if any(needle in record for needle in needles):
                    stored = _stored_name(record, path, index)
                    located = Located(split, shard.file, index, start + index, record)
                    if unicodedata.normalize("NFC", stored) == wanted:
                        search.exact.append(located)
                    elif unicodedata.normalize("NFC", stored).endswith("/" + wanted):
                        if not set(search.ending) <= {stored}:
                            located = dataclasses.replace(located, record=None)
                        search.ending.setdefault(stored, []).append(located)
        search.searched[split] = read
    return search


class RequestError(ValueError):
    """A record asked for that the build cannot have: an unknown split, an index out of range,
    an `--index` without its `--split`, a file name that several files end with."""


class RecordNotFoundError(LookupError):
    """No record of the build is the one asked for (or the build holds fewer than it says)."""


def locate(
    output_dir: str,
    info: DatasetInfo,
    *,
    filename: str | None = None,
    split: str | None = None,
    index: int | None = None,
) -> list[Located]:
    """The records of a build that `inspect OUT` asks for, with their bytes: those of the one
    file name meant by `filename` (in `split` only, when given), or the `index`-th record of
    `split` in shard order (default 0; negative: from the end).

    Raises RequestError (the message says what to ask instead), RecordNotFoundError, and what
    `find_filename` raises.
    """
    if split is not None and split not in info.splits:
        starting = [name for name in sorted(info.splits) if name.startswith(split)]
        hint = f"; did you mean --split {starting[0]}?" if len(starting) == 1 else ""
        raise RequestError(
            f"no split {split!r} in {output_dir}; its splits are "
            f"{', '.join(sorted(info.splits))}{hint}"
        )
    if filename is not None:
        return _by_filename(output_dir, info, filename, split)
    if split is None:
        raise RequestError(
            f"--index in a build's directory needs --split (the splits of {output_dir}: "
            f"{', '.join(sorted(info.splits))}), or name one shard file"
        )
    return [_by_position(output_dir, info, split, index or 0)]


def _by_filename(output_dir: str, info: DatasetInfo, name: str, split: str | None) -> list[Located]:
    search = find_filename(output_dir, info, name, [split] if split else None)
    if search.found:
        return search.found
    if search.ambiguous:
        names = [
            f"{n} ({', '.join(sorted({r.split for r in search.ending[n]}))})"
            for n in search.ambiguous
        ]
        raise RequestError(
            f"{len(names)} files of the build in {output_dir} end with /{name}: "
            f"{first_few(names, 10)}; name one by more of its path, e.g. --filename "
            f"{shlex.quote(search.ambiguous[0])}"
        )
    total = sum(search.searched.values())
    counts = ", ".join(f"{split} {n:,}" for split, n in search.searched.items())
    raise RecordNotFoundError(
        f"no record of the build in {output_dir} has image/filename {name} or .../{name} "
        f"(searched {total:,} records: {counts})"
    )


def _by_position(output_dir: str, info: DatasetInfo, split: str, index: int) -> Located:
    count = info.splits[split].num_examples
    if not -count <= index < count:
        span = f" (0..{count - 1}, or -{count}..-1 from the end)" if count else ""
        raise RequestError(
            f"--index {index} is out of range: split {split} of {output_dir} has {count} "
            f"records{span}"
        )
    for record in records_at(output_dir, split, info.splits[split], [index % count]):
        return record
    raise RecordNotFoundError(
        f"the build in {output_dir} is damaged: split {split}'s shards hold fewer records "
        f"than {BUILD_INFO_FILE} says; run python -m beam_pipeline verify {output_dir}"
    )


class NotAnExampleError(ValueError):
    """A record, its checksums intact, whose bytes are not a `tf.train.Example`."""


def record_values(record: bytes, path: str, index: int) -> dict[str, list[Any]]:
    """`example_values` of record `index` of the shard at `path`; NotAnExampleError, naming
    them, for bytes protobuf cannot parse (`show` ended in a DecodeError traceback)."""
    try:
        return example_values(record)
    except Exception as error:  # noqa: BLE001 - protobuf raises its own DecodeError
        raise NotAnExampleError(
            f"{path} record {index} is not a tf.train.Example ({type(error).__name__})"
        ) from None


def _stored_name(record: bytes, path: str, index: int) -> str:
    values = record_values(record, path, index)
    return stored_filename(values)


# --- naming classes -------------------------------------------------------------------------


def display_name(display_names: Mapping[str, str], name: str) -> str:
    """The first of the names a class's display name lists (`tench` of `tench, Tinca
    tinca`), cut to `TITLE_CHARACTERS`; "" where there is none for it, or it is the class.
    `display_names`: a build's (`DatasetInfo.display_names`)."""
    short = display_names.get(name, "").split(",")[0].strip()
    if short == name:
        return ""
    return short if len(short) <= TITLE_CHARACTERS else short[: TITLE_CHARACTERS - 1] + "…"


def class_title(display_names: Mapping[str, str], name: str) -> str:
    """A class as a person reads it: `n01440764 tench` with a display name, else `name`."""
    short = display_name(display_names, name)
    return f"{name} {short}" if short else name


def classes_named(info: DatasetInfo, text: str) -> list[str]:
    """The classes `text` names: a class itself; else those whose name, title, display name or
    one of the names it lists is `text`, ignoring case and Unicode form (`tench`, `Tinca
    tinca`; `café` typed composed, a folder's name decomposed)."""
    if text in info.classes:
        return [text]
    wanted = _folded(text)
    found = []
    for name in info.classes:
        display = info.display_names.get(name, "")
        names = {name, display, class_title(info.display_names, name), *display.split(",")}
        if wanted in {_folded(n) for n in names if n.strip()}:
            found.append(name)
    return found


def _folded(text: str) -> str:
    return unicodedata.normalize("NFC", text).strip().casefold()


def class_label(info: DatasetInfo, name: str) -> int:
    """The label of a class (`background` included), or of the class a display name names
    (`tench`: see `classes_named`); RequestError naming some known classes, or the classes that
    share the display name given."""
    names = info.class_list.names
    if name in names:
        return names.index(name)
    named = classes_named(info, name)
    if len(named) == 1:
        return names.index(named[0])
    if named:
        which = ", ".join(class_title(info.display_names, n) for n in named[:10])
        raise RequestError(
            f"--class {name!r} names {len(named)} classes ({which}); name one by its class, "
            f"e.g. --class {named[0]}"
        )
    titles = [class_title(info.display_names, n) for n in info.classes]
    spelled = {n: n for n in names}  # what a person may type → how the hint names it
    for n, title in zip(info.classes, titles, strict=True):
        display = info.display_names.get(n, "")
        spelled.update({part.strip(): title for part in display.split(",") if part.strip()})
        spelled[n] = title
    close = difflib.get_close_matches(name, list(spelled), n=3)
    hint = f"; did you mean {', '.join(dict.fromkeys(spelled[c] for c in close))}?" if close else ""
    examples = ", ".join([*titles[:5], "..."] if info.num_classes > 5 else titles)
    listed = f"({examples}) and {BACKGROUND}" if info.has_background else f"({examples})"
    raise RequestError(
        f"unknown class {name!r}: this build has {info.num_classes} classes {listed}{hint}"
    )


def shard_directory(path: str) -> str:
    """The directory a shard file lies in (its build's, where it has one)."""
    if is_local(path):
        return os.path.dirname(os.path.abspath(path))
    return path.rsplit("/", 1)[0]


def _build_at(directory: str) -> DatasetInfo | None:
    try:
        return read_build_info(directory)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def shard_build_info(shard: str) -> DatasetInfo | None:
    """The metadata of the build a shard lies in, or None when there is none readable."""
    return _build_at(shard_directory(shard))


def check_shard(shard: str) -> None:
    """RequestError (naming what to give instead) for a directory or a path with no file."""
    if is_local(shard) and os.path.isdir(shard):
        if info := _build_at(shard):
            names = [s.file for split in info.splits.values() for s in split.shards]
            said = f"{shard} is a directory; name one shard file"
            find = ", or find a record of its build: --filename NAME, or --split SPLIT --index N"
        elif tree := tree_instead_of_build(shard, os.path.isdir, os.listdir):
            raise RequestError(str(tree))
        else:  # a build that did not commit: its shards are read only by name
            names, find = sorted(n for n in os.listdir(shard) if is_shard_filename(n)), ""
            said = f"{shard} holds no committed build ({BUILD_INFO_FILE} is missing)"
            said += "; to read one of its uncommitted shards, name the file" if names else ""
        example = f", e.g. {join(shard, names[0])}" if names else ""
        raise RequestError(f"{said}{example}{find}")
    if not file_exists(shard):
        raise RequestError(f"{shard} does not exist")


_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def png_output_problem(output: str, build: str) -> str | None:
    """Why a tool cannot write its PNG at `output` for the build at `build`, or None: inside
    the build (over its files), inside the tree it was built from (the next build would take
    the picture for an image of the tree), over a file that is no PNG (a text file was
    overwritten), or in a folder that does not exist."""
    folder = os.path.dirname(os.path.abspath(output))
    if not output.strip() or os.path.isdir(output):
        return "name the PNG file to write"
    if within(output, build) and os.path.isfile(join(build, BUILD_INFO_FILE)):  # (over its files)
        return f"it is inside the build {build}: write the PNG outside it"
    try:
        tree = read_build_info(build).source.get("input_dir") or ""
    except (OSError, ValueError):
        tree = ""  # (not a build: the tool says so)
    if tree and is_local(tree) and within(output, tree):
        return f"it is inside the tree {tree} the build was made from: write the PNG outside it"
    if os.path.splitext(output)[1].lower() not in ("", ".png"):
        return "the picture is a PNG: name the file .png"
    if os.path.isfile(output):
        with open(output, "rb") as existing:
            if existing.read(8) != _PNG_SIGNATURE:
                return "it is a file that is no PNG: name a new file or a PNG to replace"
    return None if os.path.isdir(folder) else f"the folder {folder} does not exist"
