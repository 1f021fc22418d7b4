"""Look at a committed build: a contact sheet of its records, or its class histogram.

    python -m beam_pipeline show OUT [--split S] [-n 16] [--class NAME] [--seed N] -o PNG
    python -m beam_pipeline show OUT --histogram [--split S] -o PNG

The contact sheet shows records as stored: a grid of tiles, each the stored image scaled to fit
the tile (aspect kept, on a grey ground), every object box outlined in its class colour with the
class name, and a caption with the example's class (`unlabelled` for label -1) and file name; a
class the build knows the display name of is drawn as `n01440764 tench` (`tench` on a box).
`--seed` draws a deterministic sample of `-n` examples of the split (all of them when it has
fewer): record positions are drawn from the per-shard counts in the build's metadata, and only
the shards holding them are read. `--class NAME` keeps the examples of that label (`background`
too; or of the class whose display name, or a name it lists, is NAME: `tench`): shards are
visited in a seeded order until `-n` are found, so a sample of one class reads a few shards of a
large build, not all of it. `--palette` writes a 256-colour PNG, about four times smaller.
`--histogram` plots `class_counts` of every split (or `--split`) with matplotlib (the `show`
extra); builds of many classes show their 30 most and 30 least frequent. Exit code
0 when the PNG is written, 2 for bad arguments or a directory without a committed build, 1 when
a shard cannot be read.

The command: its arguments, reading the build's metadata and sampling its records (the shards
holding them only); the drawing is `sheet`'s, the histogram `histogram`'s.
"""

from __future__ import annotations

import argparse
import difflib
import os
import random
import sys
from collections.abc import Iterator, Sequence

from PIL import Image

from beam_pipeline.output.readback import (
    NoBuildError,
    example_values,
    first_value,
    open_file,
    read_build_info,
)
from beam_pipeline.tools.build_records import class_title, classes_named, records_at
from beam_pipeline.tools.histogram import class_histogram
from beam_pipeline.tools.sheet import Record, Tile, reduce_colours, render_sheet
from schemas import BACKGROUND, BUILD_INFO_FILE, UNLABELLED, DatasetInfo, SplitInfo
from schemas import features as F
from schemas.paths import join
from schemas.tfrecord import CorruptRecordError, read_records

HISTOGRAM_MATPLOTLIB = 'error: --histogram needs matplotlib: pip install "imagenet-tfrecords[show]"'


class UsageError(Exception):
    """Bad arguments, or a directory without a committed build: exit code 2."""


def read_info(output_dir: str) -> DatasetInfo:
    """The build's metadata; UsageError when `output_dir` holds no committed build."""
    try:
        return read_build_info(output_dir)
    except NoBuildError as error:
        raise UsageError(str(error)) from None
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{join(output_dir, BUILD_INFO_FILE)}: {error}") from None


def _split(info: DatasetInfo, split: str | None) -> tuple[str, SplitInfo]:
    if split is None:
        split = "train" if "train" in info.splits else sorted(info.splits)[0]
    if split not in info.splits:
        raise UsageError(
            f"no split {split!r} in this build; its splits are {', '.join(sorted(info.splits))}"
        )
    return split, info.splits[split]


def class_label(info: DatasetInfo, name: str) -> int:
    """The label of a class (`background` included), or of the class a display name names
    (`tench`: see `classes_named`); UsageError naming some known classes, or the classes that
    share the display name given."""
    names = info.class_list.names
    if name in names:
        return names.index(name)
    named = classes_named(info, name)
    if len(named) == 1:
        return names.index(named[0])
    if named:
        which = ", ".join(class_title(info.display_names, n) for n in named[:10])
        raise UsageError(
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
    raise UsageError(
        f"unknown class {name!r}: this build has {info.num_classes} classes "
        f"({examples}) and {BACKGROUND}{hint}"
    )


def _records_at(output_dir: str, split: SplitInfo, indices: Sequence[int]) -> Iterator[Record]:
    """The records at sorted split positions, reading only the shards that hold them."""
    for found in records_at(output_dir, "", split, indices):
        yield Record(found.position, found.shard, example_values(found.record or b""))


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
        with open_file(join(output_dir, split.shards[i].file)) as stream:
            for position, record in enumerate(read_records(stream), start=starts[i]):
                values = example_values(record)
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


# --- the command ------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        print(f"error: --output {args.output}: the folder {folder} does not exist", file=sys.stderr)
        return 2
    try:
        if args.histogram:
            return _histogram(args)
        summary = _write_sheet(args)
    except (UsageError, CorruptRecordError, OSError) as error:
        return _failed(error, args.output_dir)
    if summary is None:
        return 1
    print(f"wrote {args.output}: {summary}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline show", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("output_dir", metavar="OUT", help="A build's output directory.")
    parser.add_argument("-o", "--output", required=True, metavar="PNG", help="The PNG to write.")
    parser.add_argument("--split", help="The split to show (default: train, else the first).")
    parser.add_argument("-n", type=int, default=16, help="Examples on the sheet (default 16).")
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
    parser.add_argument(
        "--histogram",
        action="store_true",
        help="Plot each split's class counts instead (needs matplotlib).",
    )
    return parser


def _write_sheet(args: argparse.Namespace) -> str | None:
    """Writes the sheet's PNG and returns what it shows; None (said on stderr) when the split
    has no examples to show."""
    info = read_info(args.output_dir)
    split, pool, records = sample(
        args.output_dir, info, args.split, args.n, args.class_name, args.seed
    )
    shown = shown_class(info, args.class_name)
    if not records:
        what = f" of class {shown}" if shown is not None else ""
        print(f"error: the {split} split has no examples{what}; nothing to show", file=sys.stderr)
        return None
    summary = describe(split, len(records), pool, shown, args.seed)
    sheet, _ = render_sheet(records, info, f"{args.output_dir}: {summary}")
    if args.palette:
        sheet = reduce_colours(sheet)
    sheet.save(args.output, format="PNG", optimize=True)
    return summary


def _failed(error: Exception, output_dir: str) -> int:
    """Says why the command stopped; its exit code: 2 for bad arguments, 1 for a damaged build."""
    if isinstance(error, UsageError):
        print(f"error: {error}", file=sys.stderr)
        return 2
    if isinstance(error, CorruptRecordError):
        print(
            f"error: a shard of {output_dir} is corrupt: {error}; run "
            f"python -m beam_pipeline verify {output_dir}",
            file=sys.stderr,
        )
    elif isinstance(error, FileNotFoundError):  # a shard the metadata lists
        print(
            f"error: {error.filename} is missing: the build in {output_dir} is damaged; "
            f"run python -m beam_pipeline verify {output_dir}",
            file=sys.stderr,
        )
    else:
        print(f"error: {error}", file=sys.stderr)
    return 1


def _histogram(args: argparse.Namespace) -> int:
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
    print(
        f"wrote {args.output}: class counts of {', '.join(splits)} "
        f"({info.num_classes} classes and {BACKGROUND}; {width}x{height} px)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
