"""`plan`: what a build of a tree would do, from the tree and its XML alone.

    python -m beam_pipeline plan --input_dir TREE [build flags] [--json] [--rejections N]

Runs the build's index steps in this process, on the same functions the pipeline's steps call
(listing, pairing, XML parsing, the vocabulary, labelling, the shard plan and the index's error
budget), reads no pixel and writes nothing. Prints per split: images, annotations, orphans,
label sources, classes (most and least frequent, unknown ones), the shard plan, and what would
be rejected for reasons known without decoding. Exit code 0 when the build would go ahead, 1
when it would be refused or fail (the reason last, as the build words it; also a local output
disk with less room than the records' estimate), 2 for bad flags or a tree that cannot be read.

The command and the computing of its plan (`plan_build`); what the plan holds and how it is
printed are `plan_report`'s.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from beam_pipeline.console.tree_notes import tree_notes
from beam_pipeline.core.entries import IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.core.examples import build_example, normalised_boxes
from beam_pipeline.core.holdout import hold_out
from beam_pipeline.core.images import ORIGINAL, NormalisedImage, normalise_image
from beam_pipeline.core.labels import (
    UNLABELLED_SPLIT,
    Vocabulary,
)
from beam_pipeline.core.rejections import IMAGE, InputError, Rejection
from beam_pipeline.core.sharding import SplitPlan, plan_split, shard_start, sort_key
from beam_pipeline.failures import BUILD_FAILED_MARKER, BuildFailed
from beam_pipeline.stages.discovery import list_task
from beam_pipeline.stages.labelling import (
    any_marks,
    class_names,
    disagreement,
    kinds_of,
    label_entry,
    parse_entry,
    split_marks,
    stratum,
    vocabulary_from_names,
)
from beam_pipeline.stages.misplaced import misplaced_index
from beam_pipeline.stages.writing import split_size
from beam_pipeline.tools.plan_report import (
    SMALL_FILE_BYTES,
    BuildPlan,
    SplitPlanReport,
    format_plan,
    rebuild_notes,
    write_failure,
)
from beam_pipeline.tree import layouts, planner
from beam_pipeline.tree.fileio import read_file
from beam_pipeline.tree.pairing import in_no_split, pair_files
from beam_pipeline.tree.refusals import folder_key
from schemas.paths import join
from schemas.tfrecord import encode_record

# Records whose size is sampled per split to estimate the bytes besides the image.
_OVERHEAD_SAMPLE = 64


def plan_build(prepared) -> BuildPlan:
    """The build's index, run here on `pipeline.prepare`'s result; nothing is written."""
    from beam_pipeline.pipeline import finalize_spec, held_out_of

    started = time.monotonic()
    config, plan = prepared.config, prepared.plan
    entries, rejections, listed = _index_entries(plan)
    held_out = None
    if config.validation_split or config.test_split:  # as the build's HoldOut step divides
        held_out = held_out_of(config)
        strata = {e.filename: stratum(plan.root, e) for e in entries if e.split == held_out.source}
        entries = hold_out(entries, held_out, strata)
    # One thread: parsing is CPU-bound under the GIL, and a pool of threads measured slower
    # (2.0 s against 1.6 s for 10,500 entries); so was a pool of processes (pickling).
    parsed_or_not = [parse_entry(plan.root, entry) for entry in entries]
    parsed = [p for p in parsed_or_not if isinstance(p, ParsedEntry)]
    rejections += [p for p in parsed_or_not if isinstance(p, Rejection)]

    spec = finalize_spec(prepared)
    reports = {name: SplitPlanReport(name, "") for name in plan.splits}
    vocabulary, refusal = _vocabulary(prepared, parsed)
    kinds = _split_kinds(entries, layouts.has_negatives(plan.layout), held_out)
    labelled = _label(plan, parsed, vocabulary, kinds, rejections)
    unread, small_read = _small_files(config, labelled, vocabulary)
    unread += _box_rejections(config, labelled, {r.path for r in unread})
    dropped = {r.path for r in unread}
    written = [i for i in labelled if not dropped or _path(config, i) not in dropped]

    counts = collections.Counter(entry.split for entry in entries)
    _count_images(reports, kinds, counts, entries)
    _count_rejections(reports, [*rejections, *unread])
    if vocabulary is not None:
        _describe_labels(reports, written, vocabulary)
    _plan_shards(reports, labelled, config, vocabulary, dropped)

    failure = None
    if refusal is None:
        refusal = _refusal(prepared, spec, counts, rejections, reports, _folders(plan, entries))
    if refusal is None:
        failure = write_failure(config, counts, [*rejections, *unread], unread, reports)
    rejections += unread
    rejections.sort(key=lambda r: (r.split, r.reason, r.path))
    return BuildPlan(
        input_dir=plan.root,
        layout=plan.layout,
        classes=vocabulary.classes if vocabulary is not None else (),
        vocabulary_source=spec.vocabulary_source.split(";")[0],
        splits=reports,
        rejections=rejections,
        refusal=refusal,
        failure=failure,
        small_files_read=small_read,
        seconds=time.monotonic() - started,
        files_listed=listed,
        unbuilt=plan.unbuilt,
        shared=plan.shared_images(),
        notes=(*tree_notes(plan, config), *rebuild_notes(config, reports)),
    )


def _index_entries(plan) -> tuple[list[IndexEntry], list[Rejection], int]:
    """(the entries, the rejections, the files listed) of listing the tree and pairing each
    key's image with its annotation, as the build's discovery does."""
    rejections: list[Rejection] = [in_no_split(path) for path in plan.outside]  # (as a build)
    images: collections.defaultdict[str, list[Any]] = collections.defaultdict(list)
    annotations: collections.defaultdict[str, list[Any]] = collections.defaultdict(list)
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
    return entries, rejections, listed


def _vocabulary(prepared, parsed: list[ParsedEntry]) -> tuple[Vocabulary | None, str | None]:
    """(the build's vocabulary, None) or, when the build could not make one, (None, why)."""
    try:
        if prepared.classes is not None:
            return Vocabulary(prepared.classes), None
        split = planner.vocabulary_split(prepared.plan.splits)
        from beam_pipeline.pipeline import held_out_splits

        sources = (split, *held_out_splits(prepared.config))  # (as the build's)
        names = {name for p in parsed if p.entry.split in sources for name in class_names(p)}
        return vocabulary_from_names(sorted(names), split), None
    except BuildFailed as error:
        return None, _reason(error)


def _split_kinds(entries: list[IndexEntry], negatives: bool, held_out=None) -> dict[str, str]:
    """Each split's kind (annotated, classified, unlabelled...), from its entries' marks; a
    held-out split's is the kind of the split it is taken from (`held_out`: `HoldOut`)."""
    marks = collections.defaultdict(list)
    for entry in entries:
        split, mark = split_marks(entry, held_out)
        marks[split].append(mark)
    kinds = {}
    for split, found in marks.items():
        kinds.update(kinds_of(split, any_marks(found), negatives, held_out))
    return kinds


def _label(plan, parsed, vocabulary, kinds, rejections: list[Rejection]) -> list[LabelledEntry]:
    """The labelled entries (none without a vocabulary); the entries refused, and the folder
    disagreements, are added to `rejections`."""
    labelled: list[LabelledEntry] = []
    if vocabulary is None:
        return labelled
    misplaced = misplaced_index(rejections, plan.tasks, parsed)
    for p in parsed:
        result = label_entry(plan.root, p, vocabulary, kinds, misplaced)
        if isinstance(result, Rejection):
            rejections.append(result)
            continue
        labelled.append(result)
        if result.folder_disagrees:
            rejections.append(disagreement(plan.root, result, vocabulary))
    return labelled


def _small_files(config, labelled, vocabulary) -> tuple[list[Rejection], int]:
    """(the rejections the build's writer will make of the image files under
    SMALL_FILE_BYTES, the files read to know): each is checked as the writer checks it (its
    bytes decoded and made into the record), an empty one without reading it."""
    rejections, read = [], 0
    for item in labelled:
        entry = item.entry
        if entry.num_bytes >= SMALL_FILE_BYTES:
            continue
        path = _path(config, item)
        try:
            data = read_file(path, regular=True) if entry.num_bytes else b""
            read += bool(entry.num_bytes)
            build_example(item, normalise_image(data, config.image_policy), vocabulary)
        except InputError as error:
            rejections.append(
                Rejection.from_error(error, split=entry.split, path=path, stage=IMAGE)
            )
        except OSError as error:  # Pillow's, as the writer words it (`writing._encode`)
            detail = f"{type(error).__name__}: {error}"
            rejections.append(Rejection(entry.split, path, IMAGE, "corrupt_image", detail))
    return rejections, read


def _box_rejections(config, labelled, read: set[str]) -> list[Rejection]:
    """The writer's rejections of boxes outside their image or without area once stored, by
    their XML's `<size>` (which it checks against the decode), but of the files `read`."""
    rejections = []
    for item, path in ((item, _path(config, item)) for item in labelled if item.annotation):
        if item.annotation.width is not None and path not in read:
            try:
                normalised_boxes(item, item.annotation.width, item.annotation.height)
            except InputError as error:
                split = item.entry.split
                rejections.append(Rejection.from_error(error, split=split, path=path, stage=IMAGE))
    return rejections


def _count_images(reports, kinds, counts, entries: list[IndexEntry]) -> None:
    """Each split's kind and images, and how many have XML, a class folder, or neither."""
    for name, report in reports.items():
        report.kind = kinds.get(name, "")
        report.images = counts[name]
    for entry in entries:
        reports[entry.split].count_entry(entry)


def _count_rejections(reports, rejections: list[Rejection]) -> None:
    for rejection in rejections:
        if rejection.split in reports:
            reports[rejection.split].count_rejection(rejection)


def _describe_labels(reports, labelled: list[LabelledEntry], vocabulary: Vocabulary) -> None:
    for report in reports.values():
        if report.kind != UNLABELLED_SPLIT:
            report.class_counts = dict.fromkeys(vocabulary.names, 0)
    for item in labelled:
        reports[item.entry.split].count_label(item, vocabulary.names)


def _plan_shards(reports, labelled, config, vocabulary, dropped: set[str]) -> None:
    """The shard plan from the same bucket counts the build's AssignShards makes; each shard
    holds its planned entries but those whose image the writer will reject (`dropped`)."""
    buckets: collections.defaultdict[str, collections.Counter[int]] = collections.defaultdict(
        collections.Counter
    )
    sizes: collections.Counter[str] = collections.Counter()
    samples: collections.defaultdict[str, list[Any]] = collections.defaultdict(list)
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
        items = [item for item in labelled if item.entry.split == name]
        per_shard = _per_shard(plan, items, config, dropped)
        report.examples, report.shards = sum(per_shard), plan.num_shards
        report.image_bytes = sizes[name]
        report.examples_per_shard = (min(per_shard), max(per_shard))
        report.shards_asked = config.num_shards_for(name)
        if config.image_policy.mode == ORIGINAL and vocabulary is not None:
            overhead = _record_overhead(samples[name], vocabulary)
            report.estimated_bytes = sizes[name] + round(overhead * report.examples)


def _per_shard(plan: SplitPlan, items: list[LabelledEntry], config, dropped: set[str]) -> list:
    """The examples each shard of a split holds: its planned entries (ranked as `sharding`
    ranks them: by sort key, then key) but those in `dropped`."""
    n, shards = plan.num_examples, plan.num_shards
    per_shard = [shard_start(i + 1, n, shards) - shard_start(i, n, shards) for i in range(shards)]
    if not dropped or not any(_path(config, item) in dropped for item in items):
        return per_shard
    ranked = sorted(
        (sort_key(config.seed, item.entry.split, item.entry.key), item.entry.key, item)
        for item in items
    )
    for rank, (_, _, item) in enumerate(ranked):
        if _path(config, item) in dropped:
            per_shard[plan.shard(rank)] -= 1
    return per_shard


def _path(config, item: LabelledEntry) -> str:
    """The image's path as the build's writer reads it (and names it in `rejected.jsonl`)."""
    return join(config.input_dir, item.entry.filename)


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


def _folders(plan, entries: list[IndexEntry]) -> collections.Counter:
    """The entries by `refusals.folder_key`, as the build counts them."""
    return collections.Counter(
        folder_key(plan.layout, e.split, e.filename, e.annotation_filename) for e in entries
    )


def _refusal(prepared, spec, counts, rejections, reports, folders) -> str | None:
    """The build's own message when its fail-fast checks would stop it; None otherwise.
    `counts`: the entries by split; `folders`: by `refusals.folder_key`."""
    from beam_pipeline.output.directory import (
        OutputExistsError,
        refuse_complete_build,
        refuse_foreign_files,
        unwritable_reason,
    )
    from beam_pipeline.output.lock import busy_reason
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
        check_index_budget(spec, counts, rejections, folders)
    except BuildFailed as error:
        return _reason(error).rsplit("; see ", 1)[0]
    for name, report in reports.items():
        if report.images == 0:
            return f"split {name!r} has no images"
        if report.shards == 0:  # no entry left to plan (those its writer rejects are planned)
            return f"split {name!r}: all {report.images} images would be rejected"
    return None


def _reason(error: BuildFailed) -> str:
    return str(error).removeprefix(BUILD_FAILED_MARKER).strip()


def main(argv: Sequence[str] | None = None) -> int:
    from beam_pipeline.arguments import count, parse_once
    from beam_pipeline.console.build_console import console_flags, log_file_problem
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
    listed = "rejections listed in the text (default 20)"
    parser.add_argument("--rejections", type=count, default=20, help=listed)
    ours, rest = parse_once(parser, argv, known=True)
    if "-h" in rest or "--help" in rest:
        parser.print_help()
        return 0
    try:
        from apache_beam.options.pipeline_options import PipelineOptions

        if problem := log_file_problem(rest, log := console_flags(rest).log_file):  # (build's)
            raise ValueError(f"--log_file {log}: {problem}")
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
    text = json.dumps(plan.to_json(), indent=1, ensure_ascii=False) if ours.json else None
    print(text or format_plan(plan, ours.rejections))
    return 0 if plan.refusal is None and plan.failure is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
