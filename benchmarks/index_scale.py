"""ImageNet's index on one machine: time and peak memory of the index stages against entries.

    python -m benchmarks.index_scale WORK_DIR [--sizes 100000,400000,1330000]

For each size, writes (once, kept in WORK_DIR/tree-<N>) a synthetic ILSVRC CLS-LOC tree shaped
like ImageNet's: 1,000 synset folders in `train` holding 96.2% of the entries, of which 42.5%
have an XML (544,546 of 1,281,167 in ImageNet), and a flat `val` with an XML for every image
(50,000 of 1,331,167). Images are 1-byte files and each XML names one object of its synset:
the index stages never read pixels, and the writers are not run. Then runs, in a fresh process
and with the command line's default runner (one worker process per core), everything a build
does before its first image is read: listing, pairing, XML parsing, the vocabulary, labelling,
the shuffle keys, the split plans and the grouping of index records into shards
(`pipeline.build_index`, `AssignShards`, the shard writers' `GroupByKey` and their ranking,
into as many shards as a build of that many ImageNet images writes: ~1,200 per shard).
Prints, per size: entries, wall seconds, entries/s, and the peak resident memory of the whole
process tree (launcher and workers), sampled every 50 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from benchmarks.measure import run_measured

SYNSETS = 1000
TRAIN_SHARE = 1_281_167 / 1_331_167
TRAIN_XML_SHARE = 544_546 / 1_281_167
# Shards of the default size (128 MiB) hold ~1,200 of ImageNet's images (~110 KB each): the
# index is grouped into as many shards as a real build of the same entries would write.
IMAGES_PER_SHARD = 1_200


def _write(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


def make_tree(root: str, entries: int) -> None:
    """The synthetic CLS-LOC tree described above (skipped when `root` is complete)."""
    from beam_pipeline.core.annotations import voc_xml

    done = os.path.join(root, "COMPLETE")
    if os.path.exists(done):
        return
    synsets = [f"n{10_000_000 + i * 7919:08d}" for i in range(SYNSETS)]
    xml = {s: voc_xml([(s, 10, 10, 200, 150)], size=(400, 300)).encode() for s in synsets}
    train = round(entries * TRAIN_SHARE)
    images = os.path.join(root, "Data", "CLS-LOC")
    notes = os.path.join(root, "Annotations", "CLS-LOC")
    for synset in synsets[: min(SYNSETS, train)]:  # no empty class folder: a build refuses one
        os.makedirs(os.path.join(images, "train", synset), exist_ok=True)
        os.makedirs(os.path.join(notes, "train", synset), exist_ok=True)
    os.makedirs(os.path.join(images, "val"), exist_ok=True)
    os.makedirs(os.path.join(notes, "val"), exist_ok=True)
    step = 1 / TRAIN_XML_SHARE
    next_xml = 0.0
    for i in range(train):
        synset = synsets[i % SYNSETS]
        name = f"{synset}_{i // SYNSETS}"
        _write(os.path.join(images, "train", synset, name + ".JPEG"), b"x")
        if i >= next_xml:
            _write(os.path.join(notes, "train", synset, name + ".xml"), xml[synset])
            next_xml += step
    for i in range(entries - train):
        name = f"ILSVRC2012_val_{i + 1:08d}"
        _write(os.path.join(images, "val", name + ".JPEG"), b"x")
        _write(os.path.join(notes, "val", name + ".xml"), xml[synsets[i % SYNSETS]])
    _write(done, b"")


def run_index(tree: str, out: str, entries: int) -> None:
    """Runs the index stages on `tree` in this process; prints the counts as JSON."""
    import apache_beam as beam

    from beam_pipeline.options import BuildConfig
    from beam_pipeline.pipeline import build_index, prepare
    from beam_pipeline.runners.local import pipeline_options
    from beam_pipeline.stages.writing import AssignShards, rank_members

    config = BuildConfig(input_dir=tree, output_dir=out, splits=("train", "val"))
    prepared = prepare(config)
    counts_file = os.path.join(out, "counts.json")
    os.makedirs(out, exist_ok=True)

    def save(pairs):
        with open(counts_file, "w", encoding="utf-8") as stream:
            json.dump(dict(pairs), stream)

    train = round(entries * TRAIN_SHARE)
    num_shards = {
        "train": max(1, round(train / IMAGES_PER_SHARD)),
        "validation": max(1, round((entries - train) / IMAGES_PER_SHARD)),
    }
    with beam.Pipeline(options=pipeline_options([], every_core=True)) as pipeline:
        index = build_index(pipeline, prepared)
        assigned, plans = index.labelled | "AssignShards" >> AssignShards(
            config.seed, num_shards, config.target_shard_bytes
        )
        _ = (
            assigned
            | "GroupShards" >> beam.GroupByKey()
            | "RankShard"
            >> beam.Map(
                lambda kv, plans: (
                    kv[0][0],
                    len(rank_members(kv[1], plans[kv[0][0]], kv[0][1])),
                ),
                plans=beam.pvalue.AsDict(plans),
            )
            | "PerSplit" >> beam.CombinePerKey(sum)
            | "Collect" >> beam.combiners.ToList()
            | "Save" >> beam.Map(save)
        )
    with open(counts_file, encoding="utf-8") as stream:
        print(json.dumps(json.load(stream), sort_keys=True))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("work_dir")
    parser.add_argument("--sizes", default="100000,400000,1330000")
    parser.add_argument("--run", metavar="TREE", help=argparse.SUPPRESS)  # the measured process
    parser.add_argument("--entries", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.run:
        run_index(args.run, os.path.join(args.work_dir, "out"), args.entries)
        return 0
    sizes = [int(size) for size in args.sizes.split(",")]
    print("| entries | wall s | entries/s | peak MiB | labelled per split |")
    print("|---|---|---|---|---|")
    for entries in sizes:
        tree = os.path.join(args.work_dir, f"tree-{entries}")
        make_tree(tree, entries)
        command = [sys.executable, "-m", "benchmarks.index_scale", args.work_dir, "--run", tree]
        command += ["--entries", str(entries)]
        measured = run_measured(command)
        counts = measured.output.strip().splitlines()[-1]
        print(
            f"| {entries:,} | {measured.seconds:.1f} | {entries / measured.seconds:,.0f} "
            f"| {measured.peak_rss_bytes / 2**20:,.0f} | {counts} |",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
