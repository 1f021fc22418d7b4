"""`stats`: a committed build's numbers, from its metadata alone (instant at any size).

    python -m beam_pipeline stats OUTPUT [--json]

Per split: examples, shards, bytes; class counts (min, median, max over the real classes, the
imbalance ratio max/min, background apart; a class named with its display name where the build
knows one, `n01440764 tench`); stored image widths and heights (min, median, max);
objects per image; rejections by reason, and the files only reported (from `rejected.jsonl`).
Builds before schema 1.2 did not record sizes and objects: those lines say so. Exit 0, or 2
when OUTPUT holds no build.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from beam_pipeline.arguments import parse_once
from beam_pipeline.core.quality import odd_images
from schemas import ODD_IMAGES_FILE, DatasetInfo, SplitInfo
from schemas.classes import BACKGROUND
from schemas.metadata import histogram_median


def _spread(histogram: Mapping[int, int]) -> dict[str, float] | None:
    if not histogram:
        return None
    return {"min": min(histogram), "median": histogram_median(histogram), "max": max(histogram)}


def split_stats(
    info: DatasetInfo,
    split: SplitInfo,
    rejected: Mapping[str, int],
    reported: Mapping[str, int] | None = None,
) -> dict:
    """One split's numbers, as `stats --json` prints them."""
    names = info.class_list.names
    real = list(split.class_counts[: info.num_classes])
    classes = None
    if split.labelled and real:
        low, high = min(real), max(real)
        classes = {
            "min": low,
            "median": statistics.median(real),
            "max": high,
            "imbalance": (high / low) if low else None,
            "empty": [names[i] for i, count in enumerate(real) if count == 0],
            BACKGROUND: split.class_counts[info.background_index],
            "rarest": _ranked(names, real, reverse=False),
            "commonest": _ranked(names, real, reverse=True),
        }
    objects = dict(split.objects_per_image)
    return {
        "examples": split.num_examples,
        "discovered": split.num_discovered,
        "rejected": split.num_rejected,
        "shards": split.num_shards,
        "bytes": sum(shard.num_bytes for shard in split.shards),
        "labelled": split.labelled,
        "label_sources": dict(split.label_sources),
        "classes": classes,
        "image_width": _spread(split.image_widths),
        "image_height": _spread(split.image_heights),
        "objects_per_image": {str(k): v for k, v in sorted(objects.items())} or None,
        "objects_mean": (
            sum(k * v for k, v in objects.items()) / sum(objects.values()) if objects else None
        ),
        "rejections": dict(sorted(rejected.items(), key=lambda kv: (-kv[1], kv[0]))),
        "reported": dict(sorted((reported or {}).items(), key=lambda kv: (-kv[1], kv[0]))),
    }


def _ranked(names, counts, reverse: bool, n: int = 5) -> list[list]:
    order = sorted(range(len(counts)), key=lambda i: ((-counts[i] if reverse else counts[i]), i))
    return [[names[i], counts[i]] for i in order[:n]]


def build_stats(output_dir: str) -> dict[str, Any]:
    """Every split's numbers; raises FileNotFoundError when `output_dir` holds no build."""
    from beam_pipeline.output.readback import read_build_info, rejections_and_reports

    info = read_build_info(output_dir)
    rejected, reported = rejections_and_reports(output_dir) if info.failures else ({}, {})
    stats = {
        "output_dir": output_dir,
        "schema_version": info.schema_version,
        "num_classes": info.num_classes,
        "splits": {
            name: split_stats(info, split, rejected.get(name, {}), reported.get(name, {}))
            for name, split in sorted(info.splits.items())
        },
    }
    if info.display_names:  # (--labels_file LOC_synset_mapping.txt): the text names them
        stats["display_names"] = dict(info.display_names)
    if info.duplicates:  # (builds before the build looked for copies have none)
        stats["duplicates"] = dict(info.duplicates)
        stats["odd_images"] = dict(info.odd_images)
    return stats


def _number(value: float) -> str:
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.1f}"


def _ranked_text(ranked: list[list], display_names: Mapping[str, str]) -> str:
    """`n01440764 tench 12, n01443537 goldfish 15`: classes, as a person reads them, and counts."""
    from beam_pipeline.tools.build_records import class_title

    return ", ".join(f"{class_title(display_names, name)} {count:,}" for name, count in ranked)


def format_stats(stats: dict[str, Any]) -> str:
    from beam_pipeline.console.summary import human_bytes, plural

    known = stats.get("display_names", {})
    background = any(
        (split["classes"] or {}).get(BACKGROUND) for split in stats["splits"].values()
    )  # (none: the loader's labels have no background column)
    lines = [
        f"{stats['output_dir']}: {plural(stats['num_classes'], 'class')}"
        f"{' + background' if background else ' (no image is background)'}, schema "
        f"{stats['schema_version']}"
    ]
    not_recorded = "not recorded (built before schema 1.2; rebuild to record it)"
    for name, split in stats["splits"].items():
        lines += [
            "",
            f"{name}: {plural(split['examples'], 'example')} in "
            f"{plural(split['shards'], 'shard')}, {human_bytes(split['bytes'])} "
            f"({split['discovered']:,} found, "
            f"{split['rejected']:,} rejected)",
        ]
        classes = split["classes"]
        if classes is None:
            lines.append("  classes: none (unlabelled split: every label is -1)")
        else:
            imbalance = (
                f"{classes['imbalance']:.2f}"
                if classes["imbalance"] is not None
                else f"infinite ({plural(len(classes['empty']), 'class')} without examples)"
            )
            lines.append(
                f"  examples per class: min {classes['min']:,}, median "
                f"{_number(classes['median'])}, max {classes['max']:,}; imbalance (max/min) "
                f"{imbalance}" + (f"; {BACKGROUND} {classes[BACKGROUND]:,}" if background else "")
            )
            lines.append(f"  rarest: {_ranked_text(classes['rarest'], known)}")
            lines.append(f"  commonest: {_ranked_text(classes['commonest'], known)}")
        for key, label in (("image_width", "width"), ("image_height", "height")):
            spread = split[key]
            lines.append(
                f"  image {label}: "
                + (
                    f"min {spread['min']:,}, median {_number(spread['median'])}, "
                    f"max {spread['max']:,} px"
                    if spread
                    else not_recorded
                )
            )
        objects = split["objects_per_image"]
        if objects:
            shown = ", ".join(f"{k}: {v:,}" for k, v in objects.items())
            lines.append(f"  objects per image (mean {split['objects_mean']:.2f}): {shown}")
        else:
            lines.append(f"  objects per image: {not_recorded}")
        lines += _rejection_lines(split, stats["output_dir"])
    return "\n".join(lines + _copies_lines(stats.get("duplicates"), stats.get("odd_images")))


def _rejection_lines(split: dict[str, Any], output_dir: str) -> list[str]:
    """A split's rejected images by reason, and apart, the files only reported; where
    `rejected.jsonl` names another number of them than `build_info.json` counts, that."""

    def counted(reasons: dict[str, int]) -> str:
        return ", ".join(f"{reason} {count:,}" for reason, count in reasons.items())

    lines = [f"  rejections: {counted(split['rejections']) or 'none'}"]
    listed = sum(split["rejections"].values())
    if listed != split["rejected"]:
        lines.append(
            f"  (rejected.jsonl names {listed:,} rejected images of the split, "
            f"build_info.json counts {split['rejected']:,}: the build is damaged; run "
            f"python -m beam_pipeline verify {output_dir})"
        )
    if split.get("reported"):
        lines.append(f"  reported (not rejected): {counted(split['reported'])}")
    return lines


def _copies_lines(found: dict[str, Any] | None, odd: dict[str, int] | None) -> list[str]:
    """The copies and the odd images among the images, as the build's summary says them (none
    before the build looked for them: schema 2.1)."""
    from beam_pipeline.console.summary import duplicates_notes

    if not found:
        return []
    copies = duplicates_notes(found)
    oddities = odd_images.note(odd or {}, ODD_IMAGES_FILE) or "Odd images: none (odd_images.jsonl)"
    return ["", *copies, oddities]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline stats", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("output_dir")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parse_once(parser, argv)
    try:
        stats = build_stats(args.output_dir)
    except (FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(json.dumps(stats, indent=1, ensure_ascii=False) if args.json else format_stats(stats))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
