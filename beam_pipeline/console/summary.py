"""What a finished build prints: the summary table, the notes on the tree, where to read on."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

from schemas import DEAD_LETTER_FILE, LABEL_SOURCES, DatasetInfo, SplitInfo
from schemas.classes import BACKGROUND, FROM_BACKGROUND, FROM_FOLDER, FROM_NOTHING, FROM_XML
from schemas.paths import join

if TYPE_CHECKING:
    from beam_pipeline.tree.layouts import DiscoveryPlan


_SOURCE_WORDS = {
    FROM_XML: "from XML",
    FROM_FOLDER: "from the class folder",
    FROM_BACKGROUND: BACKGROUND,
    FROM_NOTHING: "unlabelled (label -1)",
}


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


def unbuilt_note(splits: Sequence[str], unbuilt: Sequence[str]) -> str:
    """The line saying which of the tree's splits a build leaves out, and the flag that adds
    them: `Not built: the tree's test split (--splits is train,val); ...`."""
    names = ", ".join(unbuilt)
    noun = "split" if len(unbuilt) == 1 else "splits"
    them = "it" if len(unbuilt) == 1 else "them"
    return (
        f"Not built: the tree's {names} {noun} (--splits is {','.join(splits)}); to build "
        f"{them} too, pass --splits {','.join([*splits, *unbuilt])}"
    )


def unannotated_note(split: str, annotation_dir: str, layout: str) -> str:
    """The line warning that a split other than `test` will be built without labels."""
    from beam_pipeline.tree.layouts import ILSVRC_CLS_LOC

    folders = " (or its images into synset folders)" if layout == ILSVRC_CLS_LOC else ""
    return (
        f"Unlabelled: the {split} split has no annotations ({annotation_dir} is empty or "
        f"missing): its examples get label -1; put its XML there{folders} to label it"
    )


def shared_note(shared: Mapping[tuple[str, ...], int]) -> str:
    """The line saying how many images the build writes in more than one split (VOC lists
    that overlap), e.g. `Note: 2 images are in more than one split (train and val: 2); ...`."""
    total = sum(shared.values())
    each = ", ".join(f"{' and '.join(splits)}: {count:,}" for splits, count in shared.items())
    return (
        f"Note: {plural(total, 'image')} {'is' if total == 1 else 'are'} in more than one split "
        f"({each}); each is written once in every split that lists it"
    )


def tree_notes(plan: DiscoveryPlan, splits: Sequence[str]) -> list[str]:
    """What the console (and `plan`) says of the tree before a build of `splits` starts: the
    splits it leaves out, the images several splits share, the splits without annotations."""
    notes = [unbuilt_note(splits, plan.unbuilt)] if plan.unbuilt else []
    if shared := plan.shared_images():
        notes.append(shared_note(shared))
    notes += [
        unannotated_note(split, directory, plan.layout) for split, directory in plan.unannotated
    ]
    return notes


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


def load_line(output_dir: str, info: DatasetInfo) -> str | None:
    """The Python that loads the build's first labelled split (train, or trainval, when
    there is one)."""
    from beam_pipeline.tree.planner import vocabulary_split

    labelled = [name for name, split in info.splits.items() if split.labelled]
    if not labelled:
        return None
    split = vocabulary_split(labelled) or sorted(labelled)[0]
    batch_size = min(32, info.splits[split].num_examples)  # a batch never larger than the split
    return (
        f"from loaders import load_dataset; "
        f"ds = load_dataset({output_dir!r}, {split!r}, batch_size={batch_size})"
    )


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
) -> None:
    """The table a finished build ends with: what was written, from where, how fast.

    `rejected` maps each split ("" for files in none) to its rejections by reason
    (from `rejected.jsonl`). A split given fewer shards than `--num_shards` asked (it has
    fewer examples; the build's recorded options say what was asked) says so.
    """
    splits = sorted(info.splits.items())
    examples = sum(split.num_examples for _, split in splits)
    wide = not getattr(stream, "isatty", lambda: False)()
    console = Console(file=stream, width=160 if wide else None, highlight=False, soft_wrap=False)
    rate = examples / seconds if seconds > 0 else 0.0
    console.print(
        f"Built {output_dir} from {input_dir} ({info.source.get('layout', '?')}): "
        f"{plural(examples, 'example')} in {seconds:,.1f} s, {rate:,.0f} images/s, {workers}",
        markup=False,
        soft_wrap=True,
    )
    console.print(_split_table(splits))
    lines = [f"{plural(info.num_classes, 'class')} + background (index {info.background_index})"]
    lines += _shard_notes(info)
    for split, reasons in sorted((rejected or {}).items()):
        where = f"in {split}" if split else "outside any split"
        listed = ", ".join(f"{reason} {count:,}" for reason, count in sorted(reasons.items()))
        lines.append(f"files rejected or reported {where}: {listed}")
    if info.failures:
        lines.append(f"every rejected file, with its reason: {join(output_dir, DEAD_LETTER_FILE)}")
    line = load_line(output_dir, info)
    if line:
        lines.append(f"load it: {line}")
    lines.append(f"full log: {log_path}")
    for text in lines:
        console.print(text, markup=False, soft_wrap=True)


def _split_table(splits: Sequence[tuple[str, SplitInfo]]) -> Table:
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
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
