"""What a finished build prints: the summary table, its notes, where to read on."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import TextIO

from rich import box
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table

from beam_pipeline.core.quality import odd_images
from beam_pipeline.core.quality.leaks import CLASH
from beam_pipeline.tree.layouts import vocabulary_split
from schemas import (
    DEAD_LETTER_FILE,
    DUPLICATES_FILE,
    LABEL_SOURCES,
    ODD_IMAGES_FILE,
    DatasetInfo,
    SplitInfo,
)
from schemas.classes import BACKGROUND, FROM_BACKGROUND, FROM_FOLDER, FROM_NOTHING, FROM_XML
from schemas.paths import is_local, join

_SOURCE_WORDS = {
    FROM_XML: "from XML",
    FROM_FOLDER: "from the class folder",
    FROM_BACKGROUND: BACKGROUND,
    FROM_NOTHING: "unlabelled (label -1)",
}
# The columns every line of the summary fits in (but a path or a line of code wider than it).
WIDTH = 80


def label_summary(split: SplitInfo) -> str:
    """Where a split's labels came from, e.g. `900 from XML, 100 background`."""
    parts = []
    for source in LABEL_SOURCES:
        if split.label_sources.get(source):
            part = f"{split.label_sources[source]:,} {_SOURCE_WORDS[source]}"
            if source == FROM_XML and split.folder_disagreements:  # the XML won over the folder
                part += f" ({split.folder_disagreements:,} in a folder of another class)"
            parts.append(part)
    return ", ".join(parts) or "none"


def plural(number: int, noun: str) -> str:
    """`1 shard`, `1,000 shards`: a number with its noun, plural unless it is 1."""
    return (
        f"{number:,} {noun if number == 1 else noun + 'es' if noun.endswith('s') else noun + 's'}"
    )


def human_bytes(num_bytes: int) -> str:
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def load_lines(output_dir: str, info: DatasetInfo) -> list[str]:
    """The Python that loads the build's first labelled split (train, or trainval, when
    there is one, for training): the import, then the call (none for a build without labels).
    The output is named relative to the working directory when it lies under it (where
    `run_local.sh` and a training script beside it run), so the call fits a terminal."""
    from beam_pipeline.tree.planner import vocabulary_split

    labelled = [name for name, split in info.splits.items() if split.labelled]
    if not labelled:
        return []
    training = vocabulary_split(labelled)
    split = training or sorted(labelled)[0]
    batch_size = min(32, info.splits[split].num_examples)  # a batch never larger than the split
    # (training=True shuffles and augments: the line copied as it was trained without either)
    shuffled = ", training=True" if training else ""
    return [
        "from loaders import load_dataset",
        f"ds = load_dataset({_from_here(output_dir)!r}, {split!r}, batch_size={batch_size}"
        f"{shuffled})",
    ]


def _from_here(path: str) -> str:
    """`path` relative to the working directory when it lies under it; else as it is."""
    if not is_local(path):
        return path
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative == os.pardir or relative.startswith(os.pardir + os.sep) else relative


def fold(chunks: Sequence[str], width: int = WIDTH, indent: str = "  ") -> list[str]:
    """`chunks` joined by spaces into lines of at most `width` columns, each line after the
    first indented: a line breaks only between chunks, so a path, a command or a number with
    its noun is never cut (a chunk wider than a line has a line of its own)."""
    lines: list[str] = []
    line = ""
    for chunk in chunks:
        if line and cell_len(line) + 1 + cell_len(chunk) <= width:
            line += " " + chunk
            continue
        if line:
            lines.append(line)
        line = (indent if lines else "") + chunk
    return [*lines, line] if line else lines


def built_chunks(
    info: DatasetInfo,
    *,
    input_dir: str,
    output_dir: str,
    seconds: float,
    workers: str,
    kept: tuple[int, int] | None = None,
) -> list[str]:
    """The summary's first sentence, in `fold`'s chunks: `Built OUT from IN (layout): 1,250
    examples in 3.1 s, 406 images/s, on 2 worker processes`. With `kept` (the shards and
    images a --resume build kept from the interrupted one), what it kept, what it wrote, and
    the rate of what it wrote alone."""
    examples = sum(split.num_examples for split in info.splits.values())
    layout = info.source.get("layout", "?")
    chunks = [f"Built {output_dir}", f"from {input_dir} ({layout}):", plural(examples, "example")]
    written = examples
    if kept is not None and kept[0] == 0:  # (into a new folder: "kept 0 shards from the run
        chunks += [f"in {seconds:,.1f} s", "(--resume found no shard to keep)"]  # that stopped")
    elif kept is not None:
        shards = sum(split.num_shards for split in info.splits.values())
        kept_shards, kept_images = kept
        written = examples - kept_images
        chunks += [f"in {seconds:,.1f} s;", f"kept {_shards(kept_shards, kept_images)}"]
        chunks += ["from the run that stopped;", f"wrote {_shards(shards - kept_shards, written)}"]
    else:
        chunks.append(f"in {seconds:,.1f} s")
    if written and seconds > 0:
        chunks[-1] += ","
        chunks.append(f"{written / seconds:,.0f} images/s")
    chunks[-1] += ","
    return [*chunks, workers]


def _shards(shards: int, images: int) -> str:
    return f"{plural(shards, 'shard')} ({plural(images, 'image')})"


def print_summary(
    stream: TextIO,
    info: DatasetInfo,
    *,
    input_dir: str,
    output_dir: str,
    seconds: float,
    workers: str,
    log_path: str,
    rejected: Mapping[str, Mapping[str, int]] | None = None,
    kept: tuple[int, int] | None = None,
) -> None:
    """The table a finished build ends with: what was written, from where, how fast; every
    line within 80 columns (narrower on a narrower terminal) but for a path or a line of code
    wider than that.

    `rejected` maps each split ("" for files in none) to its rejections by reason
    (from `rejected.jsonl`). A split given fewer shards than `--num_shards` asked (it has
    fewer examples; the build's recorded options say what was asked) says so. `kept`: see
    `built_chunks`.
    """
    tty = getattr(stream, "isatty", lambda: False)()
    width = min(WIDTH, Console(file=stream).width) if tty else WIDTH
    console = Console(file=stream, width=width, highlight=False, soft_wrap=False)
    chunks = built_chunks(
        info,
        input_dir=input_dir,
        output_dir=output_dir,
        seconds=seconds,
        workers=workers,
        kept=kept,
    )
    for text in fold(chunks, width):
        console.print(text, markup=False, soft_wrap=True)
    console.print()
    console.print(_split_table(sorted(info.splits.items())))
    console.print()
    for text in _closing_lines(info, output_dir, log_path, rejected, width):
        console.print(text, markup=False, soft_wrap=True)


def _closing_lines(
    info: DatasetInfo,
    output_dir: str,
    log_path: str,
    rejected: Mapping[str, Mapping[str, int]] | None,
    width: int,
) -> list[str]:
    """The lines below the table: classes, shard notes, rejections, how to load, the log."""
    notes = [
        f"{plural(info.num_classes, 'class')} + background (index {info.background_index})"
        if info.has_background
        else f"{plural(info.num_classes, 'class')} (no image is background)"
    ]
    notes += empty_class_notes(info)
    notes += _shard_notes(info)
    notes += duplicates_notes(info.duplicates)
    notes += filter(None, [odd_images.note(info.odd_images, ODD_IMAGES_FILE)])
    lines = [line for note in notes for line in fold(note.split(" "), width)]
    for split, reasons in sorted((rejected or {}).items()):
        where = f"in {split}:" if split else "outside any split:"
        listed = [f"{reason} {count:,}" for reason, count in sorted(reasons.items())]
        listed = [item + "," for item in listed[:-1]] + listed[-1:]
        lines += fold(["files rejected or reported", where, *listed], width)
    if info.failures:
        dead_letter = join(output_dir, DEAD_LETTER_FILE)
        lines += fold(["every rejected file, with its reason:", dead_letter], width)
    code = load_lines(output_dir, info)
    if code:
        lines += ["load it:", *(f"  {statement}" for statement in code)]
    return lines + fold(["full log:", log_path], width)


def empty_class_notes(info: DatasetInfo) -> list[str]:
    """A line for each labelled split where some class labels no image: a warning for train
    (a classifier never learns the class), a note for a held-out split (its score there is
    not measured). A label is an image's class folder or its largest box. The training split
    is train, or VOC's trainval."""
    notes, training = [], vocabulary_split(list(info.splits))
    for name, split in sorted(info.splits.items(), key=lambda item: item[0] != training):
        if not split.num_examples or not split.labelled:
            continue
        empty = [
            info.classes[i] for i, n in enumerate(split.class_counts[: info.num_classes]) if not n
        ]
        if not empty:
            continue
        shown = ", ".join(empty[:5]) + (f" and {len(empty) - 5:,} more" if len(empty) > 5 else "")
        if name == training:
            sources = {FROM_XML: "its largest object's class", FROM_FOLDER: "its class folder"}
            rule = " or ".join(v for k, v in sources.items() if split.label_sources.get(k))
            left = "; rejected.jsonl lists the images left out" if split.num_rejected else ""
            boxes = (
                " (its boxes beside larger objects, if any, are still a detector's)"
                if split.label_sources.get(FROM_XML)
                else ""
            )
            notes.append(
                f"Warning: no training image is labelled {shown} (an image's label is "
                f"{rule or 'its class'}): a classifier trained on this build never learns "
                f"it{boxes}{left}"
            )
        else:
            by = " (by its largest object)" if split.label_sources.get(FROM_XML) else ""
            notes.append(f"Note: no {name} image is labelled {shown}{by}: not measured there")
    return notes


def duplicates_notes(found: Mapping) -> list[str]:
    """What the summary says of the copies among the images (`core.quality.duplicates.counts`):
    the held-out images dropped as copies of training ones, leaks and clashes as warnings,
    copies within a class as a note; "none found" where the build looked and found none."""
    notes = [
        f"Dropped {plural(count, split + ' image')} that "
        f"{'copies a training image' if count == 1 else 'copy training images'} "
        f"({DEAD_LETTER_FILE}, reason duplicate)"
        for split, count in found.get("dropped", {}).items()
    ]
    if clashes := found.get("dropped_clashes"):
        one = clashes == 1
        notes.append(
            f"Warning: {plural(clashes, 'dropped image')} {'is' if one else 'are'} labelled "
            f"otherwise than the training image {'it copies' if one else 'they copy'} "
            f"({DEAD_LETTER_FILE}: {CLASH}); "
            + ("one of the two is mislabelled" if one else "one of each pair is mislabelled")
        )
    if not found.get("images"):  # (a build that looked: said, so that it shows it looked)
        return notes or ([f"Copies: none found ({DUPLICATES_FILE})"] if found else [])
    groups = [
        plural(found["exact_groups"], "group") + " of exact copies"
        if found["exact_groups"]
        else "",
        plural(found["near_pairs"], "pair") + " of near copies" if found["near_pairs"] else "",
    ]
    notes += [
        f"Copies: {' and '.join(filter(None, groups))} among "
        f"{plural(found['images'], 'image')} ({DUPLICATES_FILE})"
    ]
    for split, count in found.get("leaked", {}).items():
        are, them = (
            ("is a copy of a training image", "it")
            if count == 1
            else ("are copies of training images", "them")
        )
        notes.append(
            f"Warning: {plural(count, split + ' image')} {are} "
            f"({DUPLICATES_FILE}, leak: true); --duplicates drop_leaks leaves {them} out"
        )
    if found.get("clashes"):
        notes.append(
            f"Warning: {plural(found['clashes'], 'group')} of copies "
            f"{'holds' if found['clashes'] == 1 else 'hold'} images of different classes "
            f"({DUPLICATES_FILE}, clash: true)"
        )
    return notes


def _split_table(splits: Sequence[tuple[str, SplitInfo]]) -> Table:
    """Two spaces between columns and none at the edges; the labels fold within their column."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, collapse_padding=True)
    for column in ("split", "examples", "shards", "size", "rejected"):
        table.add_column(column, justify="left" if column == "split" else "right")
    table.add_column("labels", overflow="fold")
    for name, split in splits:
        table.add_row(
            name,
            f"{split.num_examples:,}",
            f"{split.num_shards:,}",
            human_bytes(sum(shard.num_bytes for shard in split.shards)),
            f"{split.num_rejected:,}",
            label_summary(split),
        )
    return table


def _shard_notes(info: DatasetInfo) -> list[str]:
    """A split given fewer shards than asked, and shards left empty by rejections."""
    requested = info.options.get("num_shards")
    lines = []
    for name, split in sorted(info.splits.items()):
        asked = requested.get(name) if isinstance(requested, dict) else requested
        if asked is not None and asked > split.num_shards:
            lines.append(
                f"{name}: {plural(split.num_shards, 'shard')}, not the {asked:,} asked for: a "
                "shard holds at least one example"
            )
        empty = sum(1 for shard in split.shards if shard.num_examples == 0)
        if empty:
            lines.append(
                f"{name}: {empty:,} of {plural(split.num_shards, 'shard')} hold no example: "
                "images rejected while writing left them empty (valid, read as no records)"
            )
    return lines
