"""`plan`: what a build of a tree would do, from the tree and its XML alone.

    python -m beam_pipeline plan --input_dir TREE [build flags] [--json] [--rejections N]

Runs the build's index steps in this process, on the same functions the pipeline's steps call
(listing, pairing, XML parsing, the vocabulary, labelling, the shard plan and the index's error
budget), reads no pixel and writes nothing. Prints per split: images, annotations, orphans,
label sources, classes (most and least frequent, unknown ones), the shard plan, and what would
be rejected for reasons known without decoding. Exit code 0 when the build would go ahead, 1
when it would be refused (the reason last, as the build words it), 2 for bad flags or a tree
that cannot be read.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from typing import Any

from beam_pipeline.console.summary import human_bytes, plural, tree_notes
from beam_pipeline.core.entries import IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.core.examples import build_example
from beam_pipeline.core.images import ORIGINAL, NormalisedImage
from beam_pipeline.core.labels import (
    ANNOTATED,
    UNLABELLED_SPLIT,
    Vocabulary,
    split_kind,
    unknown_class_name,
)
from beam_pipeline.core.rejections import DISCOVER, InputError, Rejection
from beam_pipeline.core.sharding import plan_split
from beam_pipeline.failures import BUILD_FAILED_MARKER, BuildFailed
from beam_pipeline.stages.discovery import list_task
from beam_pipeline.stages.labelling import (
    any_marks,
    class_names,
    disagreement,
    label_entry,
    misplaced_index,
    parse_entry,
    split_marks,
    vocabulary_from_names,
)
from beam_pipeline.stages.writing import split_size
from beam_pipeline.tree import layouts, planner
from beam_pipeline.tree.pairing import ANNOTATION_WITHOUT_IMAGE, pair_files
from schemas import BACKGROUND, UNLABELLED
from schemas.paths import is_local, join
from schemas.tfrecord import encode_record

ORPHAN_REASONS = (ANNOTATION_WITHOUT_IMAGE, "image_missing")
# Records whose size is sampled per split to estimate the bytes besides the image.
_OVERHEAD_SAMPLE = 64


@dataclasses.dataclass
class SplitPlanReport:
    """What the build would do with one output split."""

    name: str
    kind: str
    images: int = 0
    annotated: int = 0
    without_annotation: int = 0
    folder_class_only: int = 0  # in a class folder, without XML: labelled by the folder
    orphans: dict[str, int] = dataclasses.field(default_factory=dict)
    label_sources: dict[str, int] = dataclasses.field(default_factory=dict)
    class_counts: dict[str, int] = dataclasses.field(default_factory=dict)
    unknown_classes: dict[str, int] = dataclasses.field(default_factory=dict)
    rejected: dict[str, int] = dataclasses.field(default_factory=dict)  # images, by reason
    reported: dict[str, int] = dataclasses.field(default_factory=dict)  # other files, notes
    examples: int = 0
    shards: int = 0
    shards_asked: int | None = None  # --num_shards for the split; more than examples: capped
    examples_per_shard: tuple[int, int] = (0, 0)
    image_bytes: int = 0
    estimated_bytes: int | None = None


@dataclasses.dataclass
class BuildPlan:
    """The plan of a whole build; `refusal` is the build's own message when it would stop."""

    input_dir: str
    layout: str
    classes: tuple[str, ...]
    vocabulary_source: str
    splits: dict[str, SplitPlanReport]
    rejections: list[Rejection]
    refusal: str | None
    seconds: float
    files_listed: int
    unbuilt: tuple[str, ...] = ()
    shared: dict[tuple[str, ...], int] = dataclasses.field(default_factory=dict)
    notes: tuple[str, ...] = ()  # what the build says of the tree before it starts

    def to_json(self, rejections: int | None = None) -> dict[str, Any]:
        listed = self.rejections if rejections is None else self.rejections[:rejections]
        return {
            "input_dir": self.input_dir,
            "layout": self.layout,
            "num_classes": len(self.classes),
            "vocabulary": self.vocabulary_source,
            "would_build": self.refusal is None,
            "refusal": self.refusal,
            "files_listed": self.files_listed,
            "unbuilt_splits": list(self.unbuilt),
            "shared_images": {"+".join(splits): n for splits, n in self.shared.items()},
            "seconds": round(self.seconds, 3),
            "splits": {name: dataclasses.asdict(split) for name, split in self.splits.items()},
            "rejections": [r.as_dict() for r in listed],
            "num_rejections": len(self.rejections),
        }


def plan_build(prepared) -> BuildPlan:
    """The build's index, run here on `pipeline.prepare`'s result; nothing is written."""
    from beam_pipeline.pipeline import finalize_spec

    started = time.monotonic()
    config, plan = prepared.config, prepared.plan
    rejections: list[Rejection] = []
    images, annotations = collections.defaultdict(list), collections.defaultdict(list)
    listed = 0
    for task in plan.tasks:
        for item in list_task(task):
            listed += 1
            if isinstance(item, Rejection):
                rejections.append(item)
                continue
            kind, ref = item
            (images if kind == layouts.IMAGES else annotations)[ref.key].append(ref)
    memberships = collections.defaultdict(list)
    for key, split in plan.memberships:
        memberships[key].append(split)
    entries: list[IndexEntry] = []
    for key in sorted(set(images) | set(annotations) | set(memberships)):
        paired, refused = pair_files(
            key, images.get(key, ()), annotations.get(key, ()), memberships.get(key, ()), plan.root
        )
        entries += paired
        rejections += refused

    # One thread: parsing is CPU-bound under the GIL, and a pool of threads measured slower
    # (2.0 s against 1.6 s for 10,500 entries); so was a pool of processes (pickling).
    parsed_or_not = [parse_entry(plan.root, entry) for entry in entries]
    parsed = [p for p in parsed_or_not if isinstance(p, ParsedEntry)]
    rejections += [p for p in parsed_or_not if isinstance(p, Rejection)]

    spec = finalize_spec(prepared)
    reports = {name: SplitPlanReport(name, "") for name in plan.splits}
    refusal = None
    try:
        if prepared.classes is not None:
            vocabulary = Vocabulary(prepared.classes)
        else:
            split = planner.vocabulary_split(plan.splits)
            names = {name for p in parsed if p.entry.split == split for name in class_names(p)}
            vocabulary = vocabulary_from_names(sorted(names), split)
    except BuildFailed as error:
        vocabulary, refusal = None, _reason(error)

    marks = collections.defaultdict(list)
    for entry in entries:
        split, mark = split_marks(entry)
        marks[split].append(mark)
    negatives = layouts.has_negatives(plan.layout)
    kinds = {split: split_kind(*any_marks(m), negatives) for split, m in marks.items()}
    labelled: list[LabelledEntry] = []
    misplaced = misplaced_index(rejections, plan.tasks)
    if vocabulary is not None:
        for p in parsed:
            result = label_entry(plan.root, p, vocabulary, kinds, misplaced)
            (rejections if isinstance(result, Rejection) else labelled).append(result)
            if isinstance(result, LabelledEntry) and result.folder_disagrees:
                rejections.append(disagreement(plan.root, result, vocabulary))

    counts = collections.Counter(entry.split for entry in entries)
    for name, report in reports.items():
        report.kind = kinds.get(name, "")
        report.images = counts[name]
    for entry in entries:
        report = reports[entry.split]
        if entry.annotation_filename is not None:
            report.annotated += 1
        elif entry.folder_class is None:
            report.without_annotation += 1
        else:
            report.folder_class_only += 1
    for rejection in rejections:
        if rejection.split not in reports:
            continue
        report = reports[rejection.split]
        if rejection.is_image and rejection.stage == DISCOVER:
            report.images += 1
        _add(report.rejected if rejection.is_image else report.reported, rejection.reason)
        if rejection.reason in ORPHAN_REASONS:
            _add(report.orphans, rejection.reason)
        if rejection.reason == "unknown_class":
            _add(report.unknown_classes, unknown_class_name(rejection.detail) or "?")
    if vocabulary is not None:
        _describe_labels(reports, labelled, vocabulary)
    _plan_shards(reports, labelled, config, vocabulary)

    if refusal is None:
        refusal = _refusal(prepared, spec, counts, rejections, reports)
    rejections.sort(key=lambda r: (r.split, r.reason, r.path))
    return BuildPlan(
        input_dir=plan.root,
        layout=plan.layout,
        classes=vocabulary.classes if vocabulary is not None else (),
        vocabulary_source=spec.vocabulary_source.split(";")[0],
        splits=reports,
        rejections=rejections,
        refusal=refusal,
        seconds=time.monotonic() - started,
        files_listed=listed,
        unbuilt=plan.unbuilt,
        shared=plan.shared_images(),
        notes=(*tree_notes(plan, config.splits), *_rebuild_notes(config, reports)),
    )


def _rebuild_notes(config, reports: dict[str, SplitPlanReport]) -> list[str]:
    """What a rebuild costs or loses: with --overwrite over a complete build, the room its
    staged shards need beside it; without --resume, the shards a stopped rebuild staged."""
    from beam_pipeline.output.directory import STAGING_DIR, list_shard_files, refuse_complete_build

    if not config.output_dir:
        return []
    notes = []
    complete = refuse_complete_build(config.output_dir, overwrite=True)
    staged = list_shard_files(config.output_dir, staged=True)
    if staged and not config.resume:
        them = "it" if len(staged) == 1 else "them"
        notes.append(
            f"Note: {join(config.output_dir, STAGING_DIR)} holds {plural(len(staged), 'shard')} "
            f"a rebuild that stopped wrote; this build deletes {them}, --resume"
            f"{' with --overwrite' if complete else ''} keeps what it would write again"
        )
    if not (config.overwrite and complete):
        return notes
    needed = sum(r.estimated_bytes or 0 for r in reports.values())
    note = (
        f"Note: {config.output_dir} holds a complete build, kept until the rebuild commits: "
        f"the new shards, about {human_bytes(needed)}, wait beside it in {STAGING_DIR}/"
    )
    if is_local(config.output_dir) and os.path.isdir(config.output_dir):
        free = shutil.disk_usage(config.output_dir).free
        note += f" ({human_bytes(free)} free{'' if free > needed else ': not enough'})"
    return [*notes, note]


def _add(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


def _describe_labels(reports, labelled: list[LabelledEntry], vocabulary: Vocabulary) -> None:
    names = vocabulary.names
    for report in reports.values():
        if report.kind != UNLABELLED_SPLIT:
            report.class_counts = dict.fromkeys(names, 0)
    for item in labelled:
        report = reports[item.entry.split]
        _add(report.label_sources, item.source)
        if item.label != UNLABELLED:
            report.class_counts[names[item.label]] += 1


def _plan_shards(reports, labelled, config, vocabulary) -> None:
    """The shard plan from the same bucket counts the build's AssignShards makes."""
    buckets = collections.defaultdict(collections.Counter)
    sizes = collections.Counter()
    samples = collections.defaultdict(list)
    for item in labelled:
        split, (bucket, num_bytes) = split_size(item, config.seed)
        buckets[split][bucket] += 1
        sizes[split] += num_bytes
        if len(samples[split]) < _OVERHEAD_SAMPLE:
            samples[split].append(item)
    for name, report in reports.items():
        if not buckets[name]:
            continue
        plan = plan_split(
            buckets[name], sizes[name], config.num_shards_for(name), config.target_shard_bytes
        )
        report.examples, report.shards, report.image_bytes = (
            plan.num_examples,
            plan.num_shards,
            sizes[name],
        )
        per_shard = [plan.num_examples // plan.num_shards] * plan.num_shards
        for index in range(plan.num_examples % plan.num_shards):
            per_shard[index] += 1
        report.examples_per_shard = (min(per_shard), max(per_shard))
        report.shards_asked = config.num_shards_for(name)
        if config.image_policy.mode == ORIGINAL and vocabulary is not None:
            overhead = _record_overhead(samples[name], vocabulary)
            report.estimated_bytes = sizes[name] + round(overhead * plan.num_examples)


def _record_overhead(sample: list[LabelledEntry], vocabulary: Vocabulary) -> float:
    """Mean bytes of a record besides its image (keys, labels, boxes, framing), from a sample."""
    sizes = []
    for item in sample:
        annotation = item.annotation
        width = (annotation.width if annotation else None) or 1000
        height = (annotation.height if annotation else None) or 1000
        image = NormalisedImage(b"", width, height, "jpeg", width, height, False)
        try:
            sizes.append(len(encode_record(build_example(item, image, vocabulary))))
        except InputError:
            continue
    return sum(sizes) / len(sizes) if sizes else 0.0


def _refusal(prepared, spec, counts, rejections, reports) -> str | None:
    """The build's own message when its fail-fast checks would stop it; None otherwise."""
    from beam_pipeline.output.directory import (
        OutputExistsError,
        busy_reason,
        refuse_complete_build,
        refuse_foreign_files,
        unwritable_reason,
    )
    from beam_pipeline.stages.finalize import check_index_budget

    config = prepared.config
    if config.output_dir:
        try:
            complete = refuse_complete_build(config.output_dir, overwrite=config.overwrite)
        except OutputExistsError as error:
            return str(error)
        if reason := unwritable_reason(config.output_dir) or busy_reason(config.output_dir):
            return reason
        try:
            refuse_foreign_files(config.output_dir, complete=complete)
        except OutputExistsError as error:
            return str(error)
    try:  # first, as the build checks its index before it writes a shard
        check_index_budget(spec, counts, rejections)
    except BuildFailed as error:
        return _reason(error).rsplit("; see ", 1)[0]
    for name, report in reports.items():
        if report.images == 0:
            return f"split {name!r} has no images"
        if report.examples == 0:
            return f"split {name!r}: all {report.images} images would be rejected"
    return None


def _reason(error: BuildFailed) -> str:
    return str(error).removeprefix(BUILD_FAILED_MARKER).strip()


def _top(counts: dict[str, int], n: int, reverse: bool) -> str:
    ordered = sorted(counts.items(), key=lambda kv: ((-kv[1] if reverse else kv[1]), kv[0]))
    return ", ".join(f"{name} {count}" for name, count in ordered[:n])


def _image_parts(report: SplitPlanReport) -> str:
    """How a split's images divide (they add up to its count): with XML, without (in a class
    folder or not), and rejected as they were listed (named under `would reject`)."""
    background = " (background)" if report.kind == ANNOTATED else ""
    parts = [f"with XML {report.annotated:,}"]
    if report.folder_class_only:
        parts.append(f"without XML in a class folder {report.folder_class_only:,}")
        parts.append(f"without XML or class folder {report.without_annotation:,}{background}")
    else:
        parts.append(f"without XML {report.without_annotation:,}{background}")
    listed = report.annotated + report.without_annotation + report.folder_class_only
    if report.images > listed:
        parts.append(f"rejected as listed {report.images - listed:,} (below)")
    return ", ".join(parts)


def format_plan(plan: BuildPlan, rejections: int = 20) -> str:
    """The plan as the text `plan` prints."""
    lines = [
        f"Plan for {plan.input_dir} ({plan.layout}): {plan.files_listed:,} files listed, "
        f"no pixels read, nothing written ({plan.seconds:.1f} s)",
        f"classes: {len(plan.classes):,} (from {plan.vocabulary_source}), plus background",
    ]
    for report in plan.splits.values():
        lines.append("")
        lines.append(f"{report.name} ({report.kind or 'no images'}):")
        lines.append(f"  images {report.images:,}: {_image_parts(report)}")
        if report.orphans:
            lines.append(f"  orphans: {_counts(report.orphans)}")
        if report.label_sources:
            lines.append(f"  label sources: {_counts(report.label_sources)}")
        if report.class_counts:
            present = sum(1 for count in report.class_counts.values() if count)
            lines.append(
                f"  classes present: {present:,} of {len(report.class_counts):,} "
                "(background included)"
            )
            # Background without images is no news (CLS-LOC has none): left out of these.
            counts = {
                name: count
                for name, count in report.class_counts.items()
                if count or name != BACKGROUND
            }
            # (a class without images is no one's most frequent: least frequent names it)
            seen = {name: count for name, count in counts.items() if count}
            lines.append(f"  most frequent: {_top(seen, 10, True) or 'none'}")
            lines.append(f"  least frequent: {_top(counts, 10, False)}")
        if report.unknown_classes:
            lines.append(f"  unknown classes: {_top(report.unknown_classes, 10, True)}")
        if report.rejected:
            total = sum(report.rejected.values())
            lines.append(f"  would reject {total:,}: {_counts(report.rejected)}")
        if report.reported:
            lines.append(f"  would report (not rejected): {_counts(report.reported)}")
        if report.shards:
            low, high = report.examples_per_shard
            per_shard = f"{low:,}" if low == high else f"{low:,}-{high:,}"
            estimate = (
                f"about {human_bytes(report.estimated_bytes)} if every image is a JPEG kept as "
                "it is"
                if report.estimated_bytes is not None
                else "unknown until resized"
            )
            of = f"{per_shard} {'example' if high == 1 else 'examples'}"
            lines.append(
                f"  shards: {report.shards:,} of {of} ({plural(report.examples, 'example')}); "
                f"images {human_bytes(report.image_bytes)}, records {estimate}"
            )
            if report.shards_asked is not None and report.shards_asked > report.shards:
                lines.append(
                    f"  (not the {report.shards_asked:,} shards asked for: a shard holds at "
                    "least one example)"
                )
    if plan.rejections and rejections:
        lines.append("")
        lines.append(
            f"files rejected or reported ({len(plan.rejections):,}; --json lists them all):"
        )
        for rejection in plan.rejections[:rejections]:
            lines.append(f"  {rejection.path}: {rejection.reason}: {rejection.detail}")
        if len(plan.rejections) > rejections:
            lines.append(f"  ... and {len(plan.rejections) - rejections:,} more")
    lines.append("")
    lines += plan.notes
    if plan.refusal is None:
        lines.append("The build would go ahead.")
    else:
        lines.append(f"The build would be refused: {plan.refusal}")
    return "\n".join(lines)


def _counts(counts: dict[str, int]) -> str:
    return ", ".join(f"{key} {value:,}" for key, value in sorted(counts.items()))


def main(argv: Sequence[str] | None = None) -> int:
    from beam_pipeline.options import BuildConfig
    from beam_pipeline.pipeline import prepare
    from beam_pipeline.runners.beam_flags import beam_argv, known_flags
    from beam_pipeline.runners.dataflow import check_dataflow
    from beam_pipeline.runners.local import check_runner
    from beam_pipeline.tree.layouts import LayoutError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="python -m beam_pipeline plan",
        description=__doc__.split("\n\n")[0],
        epilog="Every build flag is accepted (python -m beam_pipeline build --help).",
        allow_abbrev=False,
    )
    parser.add_argument("--json", action="store_true", help="print the plan as one JSON object")
    parser.add_argument(
        "--rejections", type=int, default=20, help="rejections listed in the text (default 20)"
    )
    ours, rest = parser.parse_known_args(argv)
    if "-h" in rest or "--help" in rest:
        parser.print_help()
        return 0
    try:
        from apache_beam.options.pipeline_options import PipelineOptions

        beam_flags = beam_argv(rest, command_flags=known_flags(parser))
        config = BuildConfig.from_options(PipelineOptions(rest), need_output=False)
        # What the build refuses before it reads the tree (a Dask scheduler where nothing
        # answers, Dataflow without a way to install the package...), in its words.
        beam_options = PipelineOptions(beam_flags)
        check_dataflow(beam_options, config)
        check_runner(beam_options, beam_flags)
        prepared = prepare(config)
        plan = plan_build(prepared)
    except (ValueError, LayoutError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if ours.json:
        print(json.dumps(plan.to_json(), indent=1, ensure_ascii=False))
    else:
        print(format_plan(plan, ours.rejections))
    return 0 if plan.refusal is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
