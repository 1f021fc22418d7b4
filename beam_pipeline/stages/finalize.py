"""The last stage: account for every input, check every shard, and commit the build.

`assemble_info` is the pure part: it turns shard results, rejections and discovery counts into a
`DatasetInfo`, or raises `BuildFailed` when the build cannot be trusted (a split is empty, a shard
is missing, an image is unaccounted for, or the error budget is exceeded). `Finalize` writes the
dead-letter file first (so a failed build still explains itself), checks that every shard is in
place, and commits (`commit.commit`: `labels.txt`, the label map, TFDS's metadata, then
`build_info.json`, the marker the loader looks for).
"""

from __future__ import annotations

import collections
import dataclasses
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import apache_beam as beam

from beam_pipeline.console import watch
from beam_pipeline.core.entries import ShardResult
from beam_pipeline.core.labels import Vocabulary, unknown_class_hints, unknown_class_name
from beam_pipeline.core.quality import duplicates, odd_images
from beam_pipeline.core.quality.duplicates import DUPLICATE
from beam_pipeline.core.quality.leaks import says_clash
from beam_pipeline.core.rejections import DISCOVER, Rejection
from beam_pipeline.core.sharding import SplitPlan
from beam_pipeline.failures import BuildFailed
from beam_pipeline.output import commit
from beam_pipeline.stages.budget import (
    most_frequent,
    needed_fraction,
    over_budget_message,
    refuse_unread_inputs,
)
from beam_pipeline.tree.layouts import CLASS_FOLDERS, vocabulary_split
from beam_pipeline.tree.refusals import unannotated_det_folders
from schemas import (
    DEAD_LETTER_FILE,
    DUPLICATES_FILE,
    ODD_IMAGES_FILE,
    SCHEMA_VERSION,
    DatasetInfo,
    SplitInfo,
)
from schemas.paths import join

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class FinalizeSpec:
    """What Finalize needs besides the pipeline's results."""

    output_dir: str
    splits: tuple[str, ...]
    max_bad_fraction: float
    options: dict[str, Any]
    source: dict[str, Any]
    versions: dict[str, str]
    vocabulary_source: str = "the classes seen in the train split"  # for messages
    display_names: dict[str, str] = dataclasses.field(default_factory=dict)  # --labels_file's
    replaces_build: bool = False  # the output holds a complete build: shards are staged (`output`)


def _none_held_out(spec: FinalizeSpec, split: str) -> str:
    """Why a held-out split has no images: its classes are too small for its fraction."""
    fractions = spec.options.get("held_out", {}).get("fractions", {})
    if split not in fractions:
        return ""
    return (
        f": --{split}_split {fractions[split]} took none (each class gives round(images x "
        f"{fractions[split]}), and keeps one image in train); raise --{split}_split"
    )


def assemble_info(
    spec: FinalizeSpec,
    vocabulary: Vocabulary,
    plans: Mapping[str, SplitPlan],
    index_counts: Mapping[str, int],
    results: Iterable[ShardResult],
    rejections: Iterable[Rejection],
) -> DatasetInfo:
    """Builds the metadata of a finished build; raises BuildFailed when it cannot be committed."""
    rejections = list(rejections)
    by_split = collections.defaultdict(list)
    for result in set(results):
        by_split[result.split].append(result)
    rejected_images = collections.Counter(r.split for r in rejections if r.is_image)
    found_rejected = collections.Counter(
        r.split for r in rejections if r.is_image and r.stage == DISCOVER
    )
    splits = {}
    for split in spec.splits:
        discovered = index_counts.get(split, 0) + found_rejected[split]
        if discovered == 0:
            raise BuildFailed(f"split {split!r} has no images" + _none_held_out(spec, split))
        if split not in plans:
            raise BuildFailed(f"split {split!r}: all {discovered} images were rejected")
        splits[split] = _split_info(
            split, plans[split], by_split[split], vocabulary, discovered, rejected_images[split]
        )
        if not splits[split].num_examples:  # (the budget counts every split's images as one)
            reasons = collections.Counter(r.reason for r in rejections if r.split == split)
            raise BuildFailed(
                f"split {split!r}: all {discovered} images were rejected ({dict(reasons)}), so "
                f"it would hold none; {_see(spec)}; mend them, or leave the split out (--splits)"
            )
    _check_error_budget(spec, splits, rejections)
    return DatasetInfo(
        schema_version=SCHEMA_VERSION,
        classes=vocabulary.classes,
        splits=splits,
        failures=dict(collections.Counter(r.reason for r in rejections)),
        options=spec.options,
        source=spec.source,
        versions=spec.versions,
        display_names={
            c: spec.display_names[c] for c in vocabulary.classes if c in spec.display_names
        },
    )


def _check_error_budget(
    spec: FinalizeSpec, splits: Mapping[str, SplitInfo], rejections: list[Rejection]
) -> None:
    """Raises BuildFailed when more than --max_bad_fraction of all discovered images failed."""
    total = sum(s.num_discovered for s in splits.values())
    # Copies dropped by --duplicates drop_leaks are rejected on purpose, not for damage.
    dropped = sum(1 for r in rejections if r.is_image and r.reason == DUPLICATE)
    bad = sum(s.num_rejected for s in splits.values()) - dropped
    if bad > spec.max_bad_fraction * total:
        images = [r for r in rejections if r.is_image and r.reason != DUPLICATE]
        message = over_budget_message(spec.max_bad_fraction, bad, total, images)
        resume = "--overwrite --resume" if spec.replaces_build else "--resume"  # (a rebuild's)
        raise BuildFailed(
            f"{message}; {_see(spec)}; to commit the build without them, rerun with "
            f"--max_bad_fraction {needed_fraction(bad, total)} {resume} (it keeps the shards "
            "written)"
        )


def check_index_budget(
    spec: FinalizeSpec,
    index_counts: Mapping[str, int],
    rejections: Iterable[Rejection],
    folders: Mapping[tuple[str, str, bool], int] | None = None,
) -> None:
    """Raises BuildFailed when the index alone already breaks --max_bad_fraction, or a DET
    tree's image `folders` (`refusals.folder_key` → images) lost their XML.

    `rejections` are those known before any image is read (discovery, annotations, labels).
    The message names the classes outside the vocabulary, most frequent first, and where the
    vocabulary came from, since that is the usual cause and fix.
    """
    rejections = list(rejections)
    refuse_unread_inputs(rejections)
    if lost := unannotated_det_folders(folders or {}):
        raise BuildFailed(lost)
    images = [r for r in rejections if r.is_image]
    found = collections.Counter(r.split for r in images if r.stage == DISCOVER)
    for split in spec.splits:  # (as Finalize would, once every shard was written)
        if not index_counts.get(split, 0) + found[split]:
            raise BuildFailed(f"split {split!r} has no images" + _none_held_out(spec, split))
    total = sum(index_counts.values()) + sum(found.values())
    bad = len(images)
    if not total or bad <= spec.max_bad_fraction * total:
        return
    message = over_budget_message(
        spec.max_bad_fraction, bad, total, images, " before any image was read"
    )
    see = _see(spec)
    unknown = collections.Counter(
        unknown_class_name(r.detail) for r in images if r.reason == "unknown_class"
    )
    unknown.pop(None, None)
    if unknown:
        message += (
            f"; classes outside the vocabulary ({spec.vocabulary_source}), most frequent "
            f"first: {most_frequent(unknown, 10)}"
        )
        details = [r.detail for r in images if r.reason == "unknown_class"]
        labels_file = spec.vocabulary_source.startswith("--labels_file")
        in_folders = spec.source.get("layout") == CLASS_FOLDERS
        message += unknown_class_hints(details, labels_file, in_folders)
    if not unknown:  # (unknown classes: the fix is the vocabulary, named above)
        fraction = needed_fraction(bad, total)
        see += f"; to build without them, rerun with --max_bad_fraction {fraction}"
    raise BuildFailed(f"{message}; {see}")


def _dead_letter(spec: FinalizeSpec) -> str:
    """The build's `rejected.jsonl`, relative to the output: in the work folder while the
    complete build a rebuild replaces is there, with its own (`commit.commit` moves it)."""
    return commit.REBUILD_DEAD_LETTER if spec.replaces_build else DEAD_LETTER_FILE


def _see(spec: FinalizeSpec) -> str:
    """Where a failed build's `rejected.jsonl` is."""
    return f"see {join(spec.output_dir, _dead_letter(spec))}"


class _CheckIndexFn(beam.DoFn):
    def __init__(self, spec: FinalizeSpec):
        self._spec = spec

    def process(self, _, counted, rejections):
        spec, index_counts = self._spec, by_split(counted)
        try:
            check_index_budget(spec, index_counts, rejections, dict(counted))
        except BuildFailed:
            commit.write_dead_letter(spec.output_dir, sorted(set(rejections)), _dead_letter(spec))
            raise
        read_later = sum(1 for r in rejections if r.is_image and r.stage != DISCOVER)
        watch.report(self._spec.output_dir, watch.TO_WRITE, sum(index_counts.values()) - read_later)
        yield True


class CheckIndexBudget(beam.PTransform):
    """Runs once the index is labelled; outputs True, or fails the build before any shard.

    Hand its output to WriteShards as `gate`, so no shard is written before it passed.
    """

    def __init__(self, spec: FinalizeSpec, *, index_counts, rejected):
        """`index_counts`: the index's entries by `refusals.folder_key` (`by_split` sums them)."""
        super().__init__()
        self._spec = spec
        self._inputs = (index_counts, rejected)

    def expand(self, pbegin):
        index_counts, rejected = self._inputs
        return (
            pbegin
            | "Once" >> beam.Create([None])
            | "Check"
            >> beam.ParDo(
                _CheckIndexFn(self._spec),
                counted=beam.pvalue.AsList(index_counts),
                rejections=beam.pvalue.AsList(rejected),
            )
        )


def by_split(counted: Iterable[tuple[tuple[str, str, bool], int]]) -> dict[str, int]:
    """The index's entries per split, from its counts by `refusals.folder_key`."""
    totals: collections.Counter[str] = collections.Counter()
    for (split, _, _), count in counted:
        totals[split] += count
    return dict(totals)


def _split_info(split, plan, results, vocabulary, discovered, rejected) -> SplitInfo:
    results = sorted(results, key=lambda r: r.index)
    indices = [r.index for r in results]
    if indices != list(range(plan.num_shards)):
        missing = sorted(set(range(plan.num_shards)) - set(indices))
        raise BuildFailed(f"split {split!r}: shards {missing} missing or duplicated ({indices})")
    written = sum(r.shard.num_examples for r in results)
    if written + rejected != discovered:
        raise BuildFailed(
            f"split {split!r}: {discovered} images discovered but {written} written and "
            f"{rejected} rejected; {discovered - written - rejected} unaccounted for"
        )
    class_counts = [0] * vocabulary.one_hot_length
    sources: collections.Counter[str] = collections.Counter()
    objects: collections.Counter[int] = collections.Counter()
    widths: collections.Counter[int] = collections.Counter()
    heights: collections.Counter[int] = collections.Counter()
    for result in results:
        for label, count in result.class_counts:
            class_counts[label] += count
        sources.update(dict(result.label_sources))
        objects.update(dict(result.objects))
        widths.update(dict(result.widths))
        heights.update(dict(result.heights))
    shards = tuple(r.shard for r in results)
    return SplitInfo(
        written,
        discovered,
        rejected,
        tuple(class_counts),
        shards,
        label_sources=dict(sorted(sources.items())),
        folder_disagreements=sum(r.folder_disagreements for r in results),
        objects_per_image=dict(sorted(objects.items())),
        image_widths=dict(sorted(widths.items())),
        image_heights=dict(sorted(heights.items())),
    )


def _copies(
    spec: FinalizeSpec, info: DatasetInfo, packed: Iterable, rejections: list[Rejection]
) -> tuple[DatasetInfo, bytes]:
    """The metadata's counts of the copies among the stored images and `duplicates.jsonl`.
    Raises BuildFailed under `fail` when a held-out image copies a training one, and under
    `drop_leaks` when one was kept all the same (its writer's search and the report disagree:
    a defect, never committed)."""
    policy = spec.options["duplicates"]
    grouped, alike = duplicates.copies_of(packed)
    groups = duplicates.report_order(grouped)
    leaks, leaking = duplicates.leaks_of(groups, vocabulary_split(spec.splits), alike)
    if leaks and policy != duplicates.REPORT:
        said, every = duplicates.leak_list(leaks)
        if policy == duplicates.FAIL:
            resume = "--overwrite --resume" if spec.replaces_build else "--resume"
            them, each = ("it", "it") if len(leaks) == 1 else ("them", "every one")
            fix = (
                f"remove {them} from the tree, or rerun with --duplicates drop_leaks {resume} to "
                f"leave {them} out (rejected.jsonl, reason duplicate), or --duplicates report "
                f"{resume} to keep {them} (the shards written are kept); the log lists {each}"
            )
        else:  # drop_leaks: its writers' search and the report disagree
            fix = "this is a defect of the build, please report it; --duplicates report builds"
        # Every copy in the log once (in the error, each traceback of the runner's repeated it).
        logger.error(
            "--duplicates %s: every copy of a training image:\n%s", policy, "\n".join(every)
        )
        raise BuildFailed(f"--duplicates {policy}: {said}. To fix: {fix}")
    found = duplicates.counts(groups, leaks)
    copies = [r for r in rejections if r.reason == DUPLICATE]
    if copies:
        found["dropped"] = dict(sorted(collections.Counter(r.split for r in copies).items()))
        # A dropped copy is in no group: its clash is said in its rejected.jsonl detail.
        if clashing := sum(says_clash(r.detail) for r in copies):
            found["dropped_clashes"] = clashing
    rows = duplicates.rows(groups, info.class_list.names, leaking)
    return dataclasses.replace(info, duplicates=found), rows.encode("utf-8")


def _odd_images(info: DatasetInfo, parts: Iterable) -> tuple[DatasetInfo, bytes]:
    """The metadata's counts of the odd images and `odd_images.jsonl`, by split and path."""
    found = odd_images.found_in(parts)
    names = info.class_list.names
    rows = "".join(odd_images.row(image, why, names) + "\n" for image, why in found)
    return dataclasses.replace(info, odd_images=odd_images.counts(found)), rows.encode("utf-8")


class _FinalizeFn(beam.DoFn):
    def __init__(self, spec: FinalizeSpec):
        self._spec = spec

    def process(self, _, vocabulary, plans, index_counts, results, rejections, found):
        spec = self._spec
        rejections = sorted(set(rejections))
        commit.write_dead_letter(spec.output_dir, rejections, _dead_letter(spec))
        info = assemble_info(spec, vocabulary, plans, by_split(index_counts), results, rejections)
        files = {}
        if spec.options.get("duplicates", duplicates.OFF) != duplicates.OFF:
            info, files[DUPLICATES_FILE] = _copies(spec, info, found, rejections)
            info, files[ODD_IMAGES_FILE] = _odd_images(info, found)
        staged = spec.replaces_build
        if staged and commit.committed_already(spec.output_dir, info):
            # A runner retried a commit that had moved everything in: its metadata again (it
            # may have stopped before TFDS's dataset_info.json), then the work folders.
            commit.commit(spec.output_dir, info, files=files)
        else:
            listed = commit.check_shard_files(spec.output_dir, info, staged=staged)
            commit.commit(spec.output_dir, info, listed, staged=staged, files=files)
        yield info


class Finalize(beam.PTransform):
    """Runs once, after every shard is written; outputs the committed DatasetInfo."""

    def __init__(
        self,
        spec: FinalizeSpec,
        *,
        vocabulary,
        plans,
        index_counts,
        results,
        rejected,
        found,
    ):
        """`found`: FindDuplicates' parts (`stages.duplicates`): the copies and the odd images
        among the stored images, for `duplicates.jsonl`, `odd_images.jsonl` and the metadata's
        counts."""
        super().__init__()
        self._spec = spec
        self._inputs = (vocabulary, plans, index_counts, results, rejected, found)

    def expand(self, pbegin):
        vocabulary, plans, index_counts, results, rejected, found = self._inputs
        return (
            pbegin
            | "Once" >> beam.Create([None])
            | "Commit"
            >> beam.ParDo(
                _FinalizeFn(self._spec),
                vocabulary=beam.pvalue.AsSingleton(vocabulary),
                plans=beam.pvalue.AsDict(plans),
                index_counts=beam.pvalue.AsList(index_counts),
                results=beam.pvalue.AsList(results),
                rejections=beam.pvalue.AsList(rejected),
                found=beam.pvalue.AsList(found),
            )
        )
