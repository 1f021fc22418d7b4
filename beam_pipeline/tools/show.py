"""Look at a committed build: a contact sheet of its records, its copies, or its class histogram.

    python -m beam_pipeline show OUT [--split S] [-n 16] [--class NAME] [--seed N] -o PNG
    python -m beam_pipeline show OUT --duplicates [--split S] [-n 16] [--leaks] -o PNG
    python -m beam_pipeline show OUT --histogram [--split S] -o PNG

The contact sheet shows records as stored: a grid of tiles, each the stored image scaled to fit
the tile (aspect kept, on a grey ground), every object box outlined in its class colour with the
class name, and a caption with the example's class (`unlabelled` for label -1) and file name; a
class the build knows the display name of is drawn as `n01440764 tench` (`tench` on a box).
`--seed` draws a deterministic sample of `-n` examples of the split (all when it has fewer),
reading only the shards that hold them. `--class NAME` keeps the examples of that label
(`background` too; or of the class whose display name, or a name it lists, is NAME: `tench`):
shards are visited in a seeded order until `-n` are found, so a sample of one class reads a few
shards of a large build, not all of it. `--palette` writes a 256-colour PNG, four times smaller.
`--duplicates` draws the groups of copies in a `--duplicates report` build's
`duplicates.jsonl`, a row each: a title with the kind (`near copies: 2 bits apart`), `LEAK` and
`CLASH`; the members side by side as stored, captioned with split, class and stored file name
(`not stored`: no shard holds it). Leaks and clashes come first, then the rest, in the file's
order; `-n` groups, with a member in `--split`, with `--leaks` only those that leak.
`--histogram` plots `class_counts` of every split (or `--split`) with matplotlib (the `show`
extra); builds of many classes show their 30 most and 30 least frequent. The PNG is written
outside the build. Exit code 0 when it is written; 2 for bad arguments, a directory without a
committed build, or (`--duplicates`) a build that did not look for copies; 1 when a shard
cannot be read or nothing is to be shown (no examples, or no copies that the flags keep).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Iterator, Sequence

from PIL import Image

from beam_pipeline.arguments import parse_once
from beam_pipeline.output.readback import (
    NoBuildError,
    first_value,
    open_file,
    read_build_info,
    stored_filename,
)
from beam_pipeline.tools.build_records import (
    CorruptShardError,
    NotAnExampleError,
    RequestError,
    class_label,
    class_title,
    png_output_problem,
    read_build_shard,
    record_values,
    records_at,
)
from beam_pipeline.tools.histogram import class_histogram
from beam_pipeline.tools.record_view import Record
from beam_pipeline.tools.sheet import (
    MAX_COPY_ROWS,
    CopyGroup,
    Tile,
    reduce_colours,
    render_copies,
    render_sheet,
)
from beam_pipeline.tree.layouts import output_split, vocabulary_split
from schemas import (
    BACKGROUND,
    BUILD_INFO_FILE,
    DUPLICATES_FILE,
    UNLABELLED,
    DamagedBuildError,
    DatasetInfo,
    SplitInfo,
)
from schemas import features as F
from schemas.paths import join
from schemas.tfrecord import CorruptRecordError

HISTOGRAM_MATPLOTLIB = 'error: --histogram needs matplotlib: pip install "imagenet-tfrecords[show]"'


class UsageError(Exception):
    """Bad arguments, or a directory without a committed build: exit code 2."""


class NothingToShow(Exception):
    """No example, or no group of copies, is what was asked for: no PNG, exit code 1."""


def read_info(output_dir: str) -> DatasetInfo:
    """The build's metadata; UsageError without a committed build (DamagedBuildError as read)."""
    try:
        return read_build_info(output_dir)
    except NoBuildError as error:
        raise UsageError(str(error)) from None
    except DamagedBuildError:
        raise
    except ValueError as error:  # (another schema's)
        raise UsageError(f"{join(output_dir, BUILD_INFO_FILE)}: {error}") from None


def _split(info: DatasetInfo, split: str | None) -> tuple[str, SplitInfo]:
    if split is None:
        split = vocabulary_split(list(info.splits)) or sorted(info.splits)[0]
    if split not in info.splits:
        written = output_split(split)
        hint = f"; the tree's {split} is written as {written}" if written in info.splits else ""
        raise UsageError(
            f"no split {split!r} in this build; its splits are "
            f"{', '.join(sorted(info.splits))}{hint}"
        )
    return split, info.splits[split]


def _records_at(output_dir: str, split: SplitInfo, indices: Sequence[int]) -> Iterator[Record]:
    """The records at sorted split positions, reading only the shards that hold them."""
    for found in records_at(output_dir, "", split, indices):
        path = join(output_dir, found.shard)
        values = record_values(found.record or b"", path, found.index)
        yield Record(found.position, found.shard, values)


def _records_of_class(
    output_dir: str, split: SplitInfo, label: int, n: int, seed: int
) -> list[Record]:
    """Up to `n` examples of a label, in split order.

    The shards are visited in an order shuffled by `seed`, each read until `n` examples of the
    label are found: a build's global shuffle spreads every class over every shard, so a sample
    of a class reads about `n / examples of the class per shard` shards, not the split.
    """
    starts = [0]
    for shard in split.shards:
        starts.append(starts[-1] + shard.num_examples)
    order = list(range(split.num_shards))
    random.Random(seed).shuffle(order)
    found: list[Record] = []
    for i in order:
        records = read_build_shard(output_dir, split.shards[i])
        path = join(output_dir, split.shards[i].file)
        for position, record in enumerate(records, start=starts[i]):
            values = record_values(record, path, position - starts[i])
            if first_value(values, F.LABEL, UNLABELLED) == label:
                found.append(Record(position, split.shards[i].file, values))
                if len(found) == n:
                    return sorted(found, key=lambda record: record.index)
    return sorted(found, key=lambda record: record.index)


def sample(
    output_dir: str,
    info: DatasetInfo,
    split: str | None = None,
    n: int = 16,
    class_name: str | None = None,
    seed: int = 0,
) -> tuple[str, int, list[Record]]:
    """(split, number of candidates, the chosen records in split order).

    The candidates are the split's examples, or its examples of `class_name` (as many as its
    `class_counts` says). Of a split, `n` positions are drawn with `random.Random(seed)` and only
    the shards holding them are read; of a class, see `_records_of_class`. All candidates are
    chosen when there are no more than `n`.
    """
    if n < 1:
        raise UsageError(f"-n must be at least 1, not {n}")
    split, split_info = _split(info, split)
    if class_name is None:
        pool = split_info.num_examples
        chosen = sorted(random.Random(seed).sample(range(pool), min(n, pool)))
        return split, pool, list(_records_at(output_dir, split_info, chosen))
    label = class_label(info, class_name)
    if not split_info.labelled:
        raise UsageError(f"split {split!r} is unlabelled; --class needs a labelled split")
    pool = split_info.class_counts[label]
    records = _records_of_class(output_dir, split_info, label, n, seed) if pool else []
    return split, pool, records


def describe(split: str, shown: int, pool: int, class_name: str | None, seed: int) -> str:
    """What a sheet shows, e.g. `16 of 90 train examples (seed 0)`."""
    of_class = f" of class {class_name}" if class_name is not None else ""
    return f"{shown} of {pool} {split} examples{of_class} (seed {seed})"


def shown_class(info: DatasetInfo, class_name: str | None) -> str | None:
    """The class a sheet shows as its title names it (`n01440764 tench` for `--class tench`
    of a build with display names; the class itself without), or None for no class."""
    if class_name is None:
        return None
    return class_title(info.display_names, info.class_list.names[class_label(info, class_name)])


def contact_sheet(
    output_dir: str,
    split: str | None = None,
    n: int = 16,
    class_name: str | None = None,
    seed: int = 0,
) -> tuple[Image.Image, list[Tile]]:
    """The contact sheet of `n` examples of a split (see `sample`) and its tiles' layout.

    Raises UsageError for an unknown split or class, or a directory without a committed build;
    CorruptRecordError or OSError when a shard cannot be read.
    """
    info = read_info(output_dir)
    split, pool, records = sample(output_dir, info, split, n, class_name, seed)
    shown = shown_class(info, class_name)
    title = f"{output_dir}: {describe(split, len(records), pool, shown, seed)}"
    return render_sheet(records, info, title)


# --- the copies -------------------------------------------------------------------------------


def read_copies(output_dir: str, info: DatasetInfo) -> list[CopyGroup]:
    """The groups of a build's `duplicates.jsonl`, in the file's order. Raises UsageError when
    the build did not look for copies or a line is no group, OSError when it cannot be read."""
    if not info.duplicates:
        raise UsageError("this build did not look for copies: rebuild with --duplicates report")
    path, groups = join(output_dir, DUPLICATES_FILE), []
    with open_file(path) as stream:
        lines = stream.read().decode("utf-8").splitlines()
    for number, line in enumerate(lines, start=1):
        try:
            row = json.loads(line)
            members = tuple((m["split"], m["path"], m.get("class") or "") for m in row["members"])
            group = CopyGroup(row["kind"], row["distance"], row["leak"], row["clash"], members)
        except (ValueError, KeyError, TypeError) as error:
            raise UsageError(f"{path} line {number} is not a group of copies: {error!r}") from None
        groups.append(group)
    return groups


def choose_copies(
    groups: Sequence[CopyGroup], split: str | None = None, leaks: bool = False
) -> list[CopyGroup]:
    """The groups with a member in `split` (that leak, with `leaks`), in a sheet's order: those
    that leak or clash first, then the rest, each in the file's order."""
    kept = [g for g in groups if split is None or any(m[0] == split for m in g.members)]
    kept = [g for g in kept if g.leak or not leaks]
    return sorted(kept, key=lambda group: not (group.leak or group.clash))


def copies_stored(
    output_dir: str, info: DatasetInfo, groups: Sequence[CopyGroup]
) -> dict[tuple[str, str], Record]:
    """The records of the groups' members by (split, stored file name); a member no shard holds
    is left out. Each split holding one is read once, shard by shard, until all are found."""
    wanted: dict[str, dict[str, bytes]] = {}
    for split, filename, _ in (member for group in groups for member in group.members):
        if split in info.splits:
            wanted.setdefault(split, {})[filename] = filename.encode("utf-8")
    found = {}
    for split, needles in wanted.items():
        position = 0
        for shard in info.splits[split].shards:
            if not needles:
                break
            for index, record in enumerate(read_build_shard(output_dir, shard)):
                if any(needle in record for needle in needles.values()):
                    values = record_values(record, join(output_dir, shard.file), index)
                    stored = stored_filename(values)
                    if needles.pop(stored, None) is not None:
                        found[(split, stored)] = Record(position, shard.file, values)
                position += 1
    return found


def pick_copies(
    output_dir: str, info: DatasetInfo, split: str | None = None, n: int = 16, leaks: bool = False
) -> tuple[str, list[CopyGroup]]:
    """(what the sheet shows, e.g. `2 of 4 groups of copies`; the first `n` groups that
    `choose_copies` keeps). Raises UsageError (see `read_copies`; an unknown split), or
    NothingToShow when none is kept."""
    if not 1 <= n <= MAX_COPY_ROWS:  # (-n 3000 drew 402 x 498,740 px: Pillow refused it)
        most = f"at most {MAX_COPY_ROWS} groups, a row each ({DUPLICATES_FILE} lists all)"
        raise UsageError(f"-n must be at least 1, not {n}" if n < 1 else f"-n {n}: draws {most}")
    if split is not None:
        _split(info, split)
    groups = read_copies(output_dir, info)
    kept = choose_copies(groups, split, leaks)
    which = "leaking groups of copies" if leaks else "groups of copies"
    which += f" with a {split} image" if split else ""
    if not kept:
        empty = f"no copies found in {output_dir} ({DUPLICATES_FILE} is empty)"
        asked = f"no {which} in {output_dir} (of its {len(groups)} groups)"
        raise NothingToShow(f"{asked if groups else empty}; nothing to show")
    return f"{min(n, len(kept))} of {len(kept)} {which}", kept[:n]


def copies_sheet(
    output_dir: str, split: str | None = None, n: int = 16, leaks: bool = False
) -> tuple[Image.Image, list[list[Tile]]]:
    """The sheet of up to `n` groups of copies of a build (see `pick_copies`) and its tiles, a
    list per group; raises what `pick_copies` raises, CorruptRecordError or OSError."""
    info = read_info(output_dir)
    summary, groups = pick_copies(output_dir, info, split, n, leaks)
    stored = copies_stored(output_dir, info, groups)
    return render_copies(groups, stored, info, f"{output_dir}: {summary}")


# --- the command ------------------------------------------------------------------------------


# What `show` says in a line (`_failed`), not a trace.
_SAID = (UsageError, RequestError, NotAnExampleError, NothingToShow, CorruptRecordError)
_SAID_TOO = (DamagedBuildError, OSError)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_once(_parser(), argv)
    if args.n is None and not args.histogram:
        args.n = 16
    if problem := png_output_problem(args.output, args.output_dir):
        print(f"error: --output {args.output}: {problem}", file=sys.stderr)
        return 2
    try:
        if args.histogram:
            return _histogram(args)
        summary = _write_copies(args) if args.duplicates else _write_sheet(args)
    except (*_SAID, *_SAID_TOO) as error:
        return _failed(error, args.output_dir)
    print(f"wrote {args.output}: {summary}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline show", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("output_dir", metavar="OUT", help="A build's output directory.")
    parser.add_argument("-o", "--output", required=True, metavar="PNG", help="The PNG to write.")
    parser.add_argument(
        "--split", help="The split to show (default: train, or VOC's trainval, else the first)."
    )
    parser.add_argument("-n", type=int, help="Examples or copy groups (default 16).")
    parser.add_argument(
        "--class",
        dest="class_name",
        metavar="NAME",
        help="Only examples labelled NAME (a class, background, or a display name the "
        "build knows: tench for n01440764).",
    )
    parser.add_argument("--seed", type=int, default=0, help="Seed of the sample (default 0).")
    parser.add_argument(
        "--palette",
        action="store_true",
        help="Write a 256-colour PNG (about 4x smaller; the boxes' and captions' colours stay "
        "exact, the images' are approximated).",
    )
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument(
        "--duplicates",
        action="store_true",
        help="Draw the groups of copies the build found (--duplicates report) instead, a row "
        "each, those that leak or clash first; -n groups, with a member in --split.",
    )
    shown.add_argument(
        "--histogram",
        action="store_true",
        help="Plot each split's class counts instead (needs matplotlib).",
    )
    parser.add_argument(
        "--leaks", action="store_true", help="With --duplicates: only the groups that leak."
    )
    return parser


def _write_sheet(args: argparse.Namespace) -> str:
    """Writes the sheet's PNG and returns what it shows; NothingToShow when the split has no
    examples (of the class)."""
    if args.leaks:
        raise UsageError("--leaks needs --duplicates: it picks groups of copies")
    info = read_info(args.output_dir)
    split, pool, records = sample(
        args.output_dir, info, args.split, args.n, args.class_name, args.seed
    )
    shown = shown_class(info, args.class_name)
    if not records:
        what = f" of class {shown}" if shown is not None else ""
        raise NothingToShow(f"the {split} split has no examples{what}; nothing to show")
    summary = describe(split, len(records), pool, shown, args.seed)
    sheet, _ = render_sheet(records, info, f"{args.output_dir}: {summary}")
    _save(sheet, args)
    return summary


def _write_copies(args: argparse.Namespace) -> str:
    """Writes the sheet of copies' PNG and returns what it shows."""
    if args.class_name is not None:
        raise UsageError("--class picks examples for the contact sheet; --duplicates shows copies")
    info = read_info(args.output_dir)
    summary, groups = pick_copies(args.output_dir, info, args.split, args.n, args.leaks)
    stored = copies_stored(args.output_dir, info, groups)
    _save(render_copies(groups, stored, info, f"{args.output_dir}: {summary}")[0], args)
    return summary


def _save(sheet: Image.Image, args: argparse.Namespace) -> None:
    (reduce_colours(sheet) if args.palette else sheet).save(
        args.output, format="PNG", optimize=True
    )


def _failed(error: Exception, output_dir: str) -> int:
    """Says why the command stopped; its exit code: 2 for bad arguments, 1 for a damaged build
    or nothing to show."""
    if isinstance(error, (UsageError, RequestError)):
        print(f"error: {error}", file=sys.stderr)
        return 2
    verify = f"run python -m beam_pipeline verify {output_dir}"
    if isinstance(error, CorruptShardError):
        said = f"{error.path} is corrupt: {error}; {verify}"
    elif isinstance(error, CorruptRecordError):
        said = f"a shard of {output_dir} is corrupt: {error}; {verify}"
    elif isinstance(error, FileNotFoundError):  # a shard the metadata lists
        said = f"{error.filename} is missing: the build in {output_dir} is damaged; {verify}"
    else:
        said = str(error)
    print(f"error: {said}", file=sys.stderr)
    return 1


def _histogram(args: argparse.Namespace) -> int:
    if args.class_name is not None or args.leaks or args.n is not None:
        raise UsageError("--histogram plots every class; --class, --leaks and -n pick examples")
    info = read_info(args.output_dir)
    splits = [_split(info, args.split)[0]] if args.split else sorted(info.splits)
    try:
        import matplotlib  # noqa: F401 - the optional dependency, checked before any work
    except ImportError:
        print(HISTOGRAM_MATPLOTLIB, file=sys.stderr)
        return 2
    figure = class_histogram(info, splits)
    figure.savefig(args.output, format="png")
    width, height = figure.canvas.get_width_height()
    background = f" and {BACKGROUND}" if info.has_background else ""  # (as drawn)
    print(
        f"wrote {args.output}: class counts of {', '.join(splits)} "
        f"({info.num_classes} classes{background}; {width}x{height} px)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
