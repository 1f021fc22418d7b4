"""ImageNet's copies on one machine: time and peak memory of the build's near-duplicate search.

    python -m benchmarks.duplicates_scale WORK_DIR [--sizes 100000,400000,1330000] [--in_process]

For each size, runs `stages.duplicates.FindDuplicates` alone, in a fresh process and with the
command line's default runner (one worker process per core; `--in_process`: FnApiRunner in
that process, as a small build runs), on the ImagePrints a build of `benchmarks/index_scale.py`'s
synthetic tree of that many entries would give it: its split shares and file names
(`Data/CLS-LOC/train/<synset>/<synset>_N.JPEG`, `Data/CLS-LOC/val/ILSVRC2012_val_N.JPEG`), 1,000
classes, one tuple per shard of ~1,200 prints as the writer emits them. Hashes are random (64-bit
perceptual, 16-byte content; luma spread 60-200, chroma 20-120), with planted copies: 1% exact
copies (the source's content and perceptual hash), 1% near ones (1-6 bits from the source's),
each source copied once, anywhere in the tree (so some leak from train to validation), and 0.1%
nearly uniform images (luma spread under 8) that all share one hash (the crowded case: the
search must leave them out). The prints are generated inside the pipeline, shard by shard from
a seed, so no process holds them all; a counting sink checks each planted copy came out once.

Prints, per size: prints, wall seconds, the peak resident memory of the whole process tree
(launcher and workers, sampled every 50 ms), bytes per print, and exact groups and near pairs
found against planted ("+N": pairs of random hashes within the radius, by chance); exits 1
when a planted copy was missed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import random
import sys

import numpy as np

from benchmarks.index_scale import IMAGES_PER_SHARD, SYNSETS, TRAIN_SHARE
from benchmarks.measure import run_measured

# Copies are planted by position in a permutation of the entries, per block of PERIOD: slots
# [0, 10) are exact copies' sources and [10, 20) their copies (1%); [20, 30) and [30, 40) the
# same for near copies (1%); slot 40 nearly uniform (0.1%); every other slot an original.
PERIOD = 1000
EXACT_COPIES, NEAR_COPIES, UNIFORM_SLOT = (10, 20), (30, 40), 40  # see PERIOD
COPY_OFFSET = 10  # a copy's source is 10 positions before it
NEAR_BITS = (1, 6)  # a near copy's hash differs from its source's in this many bits
UNIFORM_HASH = 0x8000_0000_0000_0000  # every nearly uniform picture's hash
SIZES = ((500, 375), (375, 500), (500, 333), (500, 500), (640, 480), (333, 500))
SPLITS = (("train", "Data/CLS-LOC/train"), ("validation", "Data/CLS-LOC/val"))
PLANTED, FOUND, LEAK = "planted", "found", "leak"
_MASK64 = (1 << 64) - 1


@dataclasses.dataclass(frozen=True)
class Layout:
    """The prints of a synthetic tree of `entries` images: entry g (0 to entries - 1) is the
    g-th training image (index_scale's order), then the (g - train)-th validation image."""

    entries: int
    seed: int = 0

    @property
    def train(self) -> int:
        return round(self.entries * TRAIN_SHARE)

    def split_range(self, split: int) -> tuple[int, int]:
        """(first entry, count) of split 0 (train) or 1 (validation)."""
        return (0, self.train) if split == 0 else (self.train, self.entries - self.train)

    def num_shards(self, split: int) -> int:
        """As many shards as a build of that many ImageNet images writes (index_scale's)."""
        return max(1, round(self.split_range(split)[1] / IMAGES_PER_SHARD))

    def shards(self) -> list[tuple[int, int]]:
        """(split, shard) of every shard that holds an image."""
        return [
            (split, shard)
            for split in (0, 1)
            if self.split_range(split)[1] > 0
            for shard in range(self.num_shards(split))
        ]


def _mix(values: np.ndarray, salt: int) -> np.ndarray:
    """SplitMix64 of each value, salted: a random-looking uint64 per value, the same each run."""
    x = values.astype(np.uint64) + np.uint64((salt * 0x9E37_79B9_7F4A_7C15) & _MASK64)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58_476D_1CE4_E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D0_49BB_1331_11EB)
    return x ^ (x >> np.uint64(31))


@dataclasses.dataclass(frozen=True)
class Permutation:
    """x -> (a x + b) mod n, a bijection of [0, n) (a coprime to n), and its inverse."""

    n: int
    a: int
    b: int

    @classmethod
    def of(cls, n: int, salt: int) -> Permutation:
        a = max(1, int(n * 0.6180339887)) | 1
        while math.gcd(a, n) != 1:
            a += 1
        return cls(n, a, (salt * 7919) % n)

    def forward(self, x: np.ndarray) -> np.ndarray:
        return (self.a * x + self.b) % self.n

    def inverse(self, y: np.ndarray) -> np.ndarray:
        return ((y - self.b) % self.n * pow(self.a, -1, self.n)) % self.n


def shard_entries(layout: Layout, split: int, shard: int) -> np.ndarray:
    """The entries of one shard: a stretch of a permutation of the split's (a build's shards
    hold a shuffle of their split), ~IMAGES_PER_SHARD of them."""
    first, count = layout.split_range(split)
    shards = layout.num_shards(split)
    start, stop = shard * count // shards, (shard + 1) * count // shards
    order = Permutation.of(count, layout.seed + 1 + split)
    return first + order.inverse(np.arange(start, stop, dtype=np.int64))


def roles(layout: Layout, entries: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(slot, source) of each entry: its slot (see PERIOD), and the entry whose picture it
    shows (the source of a copy; the entry itself otherwise)."""
    order = Permutation.of(layout.entries, layout.seed)
    position = order.forward(entries)
    slot = position % PERIOD
    copy = ((slot >= EXACT_COPIES[0]) & (slot < EXACT_COPIES[1])) | (
        (slot >= NEAR_COPIES[0]) & (slot < NEAR_COPIES[1])
    )
    source = entries.copy()
    source[copy] = order.inverse(position[copy] - COPY_OFFSET)
    return slot, source


def member(layout: Layout, entry: int) -> tuple[str, str, int]:
    """(split, file name, label) of an entry, as a build of index_scale's tree has them."""
    if entry < layout.train:
        synset = f"n{10_000_000 + entry % SYNSETS * 7919:08d}"  # index_scale's synset names
        name = f"{synset}/{synset}_{entry // SYNSETS}.JPEG"
        return SPLITS[0][0], f"{SPLITS[0][1]}/{name}", entry % SYNSETS
    number = entry - layout.train
    return SPLITS[1][0], f"{SPLITS[1][1]}/ILSVRC2012_val_{number + 1:08d}.JPEG", number % SYNSETS


def _near_mask(entry: int, seed: int) -> int:
    """The bits a near copy's hash flips: 1 to 6 of them, chosen by the entry."""
    choose = random.Random(entry * 1_000_003 + seed)
    return sum(1 << bit for bit in choose.sample(range(64), choose.randint(*NEAR_BITS)))


def shard_prints(layout: Layout, split: int, shard: int) -> tuple:
    """The shard's ImagePrints, in a tuple as the writer emits them."""
    from beam_pipeline.core.quality.duplicates import ImagePrint

    entries = shard_entries(layout, split, shard)
    slot, source = roles(layout, entries)
    seed = layout.seed * 16
    perceptual = _mix(source, seed + 1)
    content = np.stack([_mix(source, seed + 2), _mix(source, seed + 3)], axis=1)
    # Only an exact copy has its source's bytes; a near copy has bytes of its own.
    exact = (slot >= EXACT_COPIES[0]) & (slot < EXACT_COPIES[1])
    own = ~exact & (source != entries)
    content[own] = np.stack([_mix(entries[own], seed + 4), _mix(entries[own], seed + 5)], axis=1)
    raw = content.astype(">u8").tobytes()
    spreads = _mix(source, seed + 6)
    luma, chroma = 60 + spreads % 141, 20 + (spreads >> np.uint64(8)) % 101
    uniform = slot == UNIFORM_SLOT
    luma[uniform], chroma[uniform] = spreads[uniform] % 8, spreads[uniform] % 6
    perceptual[uniform] = UNIFORM_HASH
    prints = []
    columns = zip(
        entries.tolist(), perceptual.tolist(), luma.tolist(), chroma.tolist(), strict=True
    )
    for i, (entry, hash_, luma_spread, chroma_spread) in enumerate(columns):
        if own[i]:
            hash_ ^= _near_mask(entry, layout.seed)
        where, name, label = member(layout, entry)
        width, height = SIZES[int(spreads[i]) % len(SIZES)]
        content_hash = raw[16 * i : 16 * i + 16]
        prints.append(
            ImagePrint(
                where, name, label, content_hash, hash_, luma_spread, chroma_spread, width, height
            )
        )
    return tuple(prints)


def _key(kind: str, members) -> tuple:
    """A group as the sink matches it: its kind and its members' (split, file name), sorted."""
    return kind, tuple(sorted((m[0], m[1]) for m in members))


def planted_groups(layout: Layout, split: int, shard: int) -> list[tuple]:
    """(key, PLANTED) of each copy planted in the shard: the group of it and its source."""
    from beam_pipeline.core.quality.duplicates import EXACT, NEAR

    entries = shard_entries(layout, split, shard)
    slot, source = roles(layout, entries)
    planted = []
    for entry, origin, place in zip(entries.tolist(), source.tolist(), slot.tolist(), strict=True):
        if entry != origin:
            kind = EXACT if place < EXACT_COPIES[1] else NEAR
            planted.append((_key(kind, [member(layout, entry), member(layout, origin)]), PLANTED))
    return planted


def _verdicts(key, marks):
    """What became of one group: (kind, found | missed | extra), and (kind, leak) if it is one,
    (kind, twice) if it came out more than once."""
    marks = list(marks)
    kind, found = key[0], marks.count(FOUND) + marks.count(LEAK)
    yield kind, ("found" if found else "missed") if PLANTED in marks else "extra"
    if LEAK in marks:
        yield kind, LEAK
    if found > 1:
        yield kind, "twice"


def run_search(layout: Layout, counts_file: str, argv: list[str]) -> dict[str, int]:
    """FindDuplicates on the layout's prints, on the command line's default runner (argv:
    Beam's flags); writes and returns the counts of `_verdicts` ("exact found", ...)."""
    import apache_beam as beam

    from beam_pipeline.core.quality import duplicates
    from beam_pipeline.runners.local import pipeline_options
    from beam_pipeline.stages.duplicates import FindDuplicates

    def save(pairs):
        with open(counts_file, "w", encoding="utf-8") as stream:
            json.dump({" ".join(verdict): count for verdict, count in pairs}, stream)

    def found(parts):  # FindDuplicates' parts, all of them, named as Finalize names them
        found, alike = duplicates.copies_of(parts)
        groups = duplicates.report_order(found)
        _, leaking = duplicates.leaks_of(groups, "train", alike)
        return [(_key(g.kind, g.members), LEAK if g in leaking else FOUND) for g in groups]

    with beam.Pipeline(options=pipeline_options(argv, every_core=True)) as pipeline:
        shards = pipeline | "Shards" >> beam.Create(layout.shards())
        groups = (
            shards
            | "Prints" >> beam.MapTuple(lambda split, shard: shard_prints(layout, split, shard))
            | "FindDuplicates" >> FindDuplicates()
        )
        planted = shards | "Planted" >> beam.FlatMapTuple(
            lambda split, shard: planted_groups(layout, split, shard)
        )
        _ = (
            (
                groups | "AllParts" >> beam.combiners.ToList() | "Found" >> beam.FlatMap(found),
                planted,
            )
            | "Both" >> beam.Flatten()
            | "ByGroup" >> beam.GroupByKey()
            | "Verdicts" >> beam.FlatMapTuple(_verdicts)
            | "Count" >> beam.combiners.Count.PerElement()
            | "Collect" >> beam.combiners.ToList()
            | "Save" >> beam.Map(save)
        )
    with open(counts_file, encoding="utf-8") as stream:
        return json.load(stream)


def row(entries: int, seconds: float, peak: int, counts: dict[str, int]) -> str:
    """The table's line of one size."""
    cells = [f"{entries:,}", f"{seconds:.1f}", f"{peak / 2**20:,.0f}", f"{peak / entries:,.0f}"]
    for kind in ("exact", "near"):
        found, missed = counts.get(f"{kind} found", 0), counts.get(f"{kind} missed", 0)
        extra = counts.get(f"{kind} extra", 0)
        cells.append(f"{found:,}/{found + missed:,}" + (f" +{extra}" if extra else ""))
    cells.append(f"{counts.get('exact leak', 0) + counts.get('near leak', 0):,}")
    twice = counts.get("exact twice", 0) + counts.get("near twice", 0)
    missed = counts.get("exact missed", 0) + counts.get("near missed", 0)
    cells.append("yes" if not missed and not twice else f"no ({missed} missed, {twice} twice)")
    return "| " + " | ".join(cells) + " |"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work_dir")
    parser.add_argument("--sizes", default="100000,400000,1330000")
    parser.add_argument(
        "--in_process", action="store_true", help="FnApiRunner in the measured process"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--run", type=int, metavar="ENTRIES", help=argparse.SUPPRESS)
    args = parser.parse_args()
    argv = ["--direct_num_workers", "1"] if args.in_process else []
    os.makedirs(args.work_dir, exist_ok=True)
    if args.run:  # the measured process
        counts_file = os.path.join(args.work_dir, f"counts-{args.run}.json")
        print(json.dumps(run_search(Layout(args.run, args.seed), counts_file, argv)))
        return 0
    columns = "prints | wall s | peak MiB | B/print | exact groups | near pairs | leaks | all found"
    print(f"| {columns} |\n" + "|---" * 8 + "|")
    complete = True
    for entries in (int(size) for size in args.sizes.split(",")):
        command = [sys.executable, "-m", "benchmarks.duplicates_scale", args.work_dir]
        command += ["--run", str(entries), "--seed", str(args.seed)]
        command += ["--in_process"] if args.in_process else []
        measured = run_measured(command)
        counts = json.loads(measured.output.strip().splitlines()[-1])
        line = row(entries, measured.seconds, measured.peak_rss_bytes, counts)
        complete = complete and line.endswith("| yes |")
        print(line, flush=True)
    return 0 if complete else 1


if __name__ == "__main__":
    sys.exit(main())
