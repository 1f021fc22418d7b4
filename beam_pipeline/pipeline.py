"""Build sharded TFRecords from an ILSVRC (DET, CLS-LOC) or Pascal VOC tree.

    python -m beam_pipeline --input_dir ILSVRC --output_dir out/ --num_shards 16

    python -m beam_pipeline --input_dir gs://b/ILSVRC --output_dir gs://b/out \\
        --runner DataflowRunner --project P --region R --temp_location gs://b/tmp \\
        --setup_file ./setup.py

Stages, each in its own module of `stages/`: DiscoverImages (`discovery`) → ParseAnnotations,
BuildVocabulary, LabelImages (`labelling`) → AssignShards, WriteShards (`writing`) → Finalize
(`finalize`). Before the pipeline is built, `prepare` checks the tree and
`output.directory.prepare_output` the output directory, so bad flags and trees fail before
anything is written. The runner and its size: `runners/`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import posixpath
import re
import sys
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    PipelineOptions,
)

from beam_pipeline.console import watch
from beam_pipeline.core.holdout import HoldOut
from beam_pipeline.core.labels import Vocabulary, parse_display_names, parse_labels_file
from beam_pipeline.core.quality import duplicates
from beam_pipeline.options import BuildConfig
from beam_pipeline.output.directory import prepare_output
from beam_pipeline.output.lock import unlock_output
from beam_pipeline.runners.beam_flags import beam_argv
from beam_pipeline.runners.beam_version import check_beam_version
from beam_pipeline.runners.dataflow import (
    absolute_path,
    check_dataflow,
    check_file_systems,
    with_absolute_paths,
)
from beam_pipeline.runners.local import (
    SMALL_BUILD_IMAGES,
    check_runner,
    pipeline_options,
    tree_size_up_to,
)
from beam_pipeline.stages.discovery import DiscoverImages
from beam_pipeline.stages.duplicates import FindDuplicates, TrainingFirst, training_copies
from beam_pipeline.stages.finalize import CheckIndexBudget, Finalize, FinalizeSpec
from beam_pipeline.stages.labelling import (
    BuildVocabulary,
    ClassifySplits,
    HoldOutSplits,
    LabelImages,
    ParseAnnotations,
)
from beam_pipeline.stages.misplaced import misplaced_annotations
from beam_pipeline.stages.writing import AssignShards, WriteShards
from beam_pipeline.tree import layouts, planner
from beam_pipeline.tree.fileio import read_file, read_text
from beam_pipeline.tree.folders import (
    TREE_ACCESS,
    classes_without_images,
    has_files,
    subdirectories,
)
from beam_pipeline.tree.locate import locate_tree
from beam_pipeline.tree.refusals import folder_key, refuse_classes_without_images
from schemas import BUILD_INFO_FILE, DatasetInfo
from schemas.label_map import label_map_classes, renumbered_note
from schemas.paths import is_local, join

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Prepared:
    """What the launcher settles before the pipeline is built."""

    config: BuildConfig
    plan: layouts.DiscoveryPlan
    classes: tuple[str, ...] | None
    display_names: dict[str, str] = dataclasses.field(default_factory=dict)
    replaces_build: bool = False  # a complete build is in the output: the new one is staged


def prepare(config: BuildConfig) -> Prepared:
    """Detects the layout, plans discovery and reads the labels file; raises on bad input."""
    check_file_systems(config)
    if not has_files(config.input_dir):
        if is_local(config.input_dir) and os.path.isfile(config.input_dir):
            raise ValueError(
                f"--input_dir {config.input_dir} is a file: pass the directory that holds the "
                "tree (Data/ and Annotations/, or VOC's JPEGImages/ and ImageSets/)"
            )
        raise ValueError(f"--input_dir {config.input_dir} does not exist or holds no files")
    if config.labels_file and not FileSystems.exists(config.labels_file):
        raise ValueError(f"--labels_file {config.labels_file} does not exist")
    root, layout = locate_tree(config.input_dir, config.layout, has_files, subdirectories)
    if root != config.input_dir.rstrip("/"):
        logger.info("Found the %s tree in %s", layout, root)
    if config.output_dir and in_listed_folders(config.output_dir, root, layout):
        raise ValueError(
            f"--output_dir {config.output_dir} lies inside the input tree {root}'s image or "
            "annotation folders: the next build would list its files as input; choose a "
            "directory outside them"
        )
    logger.info("Layout %s in %s", layout, root)
    holding_out = bool(config.validation_split or config.test_split)
    splits = config.splits or (
        ("train",) if holding_out else planner.default_splits(root, layout, TREE_ACCESS)
    )
    config = dataclasses.replace(config, input_dir=root, layout=layout, splits=splits)
    plan = planner.plan_discovery(root, layout, splits, TREE_ACCESS)
    if holding_out:
        plan = dataclasses.replace(plan, splits=(*plan.splits, *held_out_of(config).splits))
    classes: tuple[str, ...] | None = None
    display_names: dict[str, str] = {}
    if config.labels_file:
        text = read_text(config.labels_file, "--labels_file")
        try:
            # A build's own labels.txt first: a class folder named "item {" is no label map.
            if builds := _a_builds_labels(config.labels_file, text):
                classes, display_names = builds
            elif re.search(r"^\s*item\s*\{", text, re.MULTILINE):  # the OD API's label map
                classes, display_names = label_map_classes(text)
                if note := renumbered_note(text):
                    plan = dataclasses.replace(plan, notes=(*plan.notes, note))
            else:
                folders = _class_folder_names(plan)  # (a line that names one is that class)
                classes = parse_labels_file(text, folders)
                display_names = parse_display_names(text, folders)
            Vocabulary(classes)
        except ValueError as error:
            raise ValueError(f"--labels_file {config.labels_file}: {error}") from None
    elif planner.vocabulary_split(plan.splits) is None:
        either = "train (or trainval)" if plan.layout == layouts.VOC else "train"
        raise ValueError(
            f"without the {either} split the vocabulary is unknown: pass --labels_file"
        )
    elif layout in (layouts.ILSVRC_CLS_LOC, layouts.CLASS_FOLDERS):  # classes from folders
        train = next(t for t in plan.tasks if t.kind == layouts.IMAGES and t.split == "train")
        missing = classes_without_images(train.directory, train.foreign)
        refuse_classes_without_images(train.directory, missing, layout)
    return Prepared(config, plan, classes, display_names)


def held_out_splits(config: BuildConfig) -> tuple[str, ...]:
    """The splits held out of train (their images' classes are train's: the vocabulary reads
    them too, so a class whose only box in train is a held-out image's second object stays)."""
    return held_out_of(config).splits if config.validation_split or config.test_split else ()


def held_out_of(config: BuildConfig) -> HoldOut:
    """The held-out splits of a build that asks for them; ValueError when it builds no split
    to take them from, or already builds one of them from the tree."""
    flags = " and ".join(
        f"--{name}_split"
        for name, fraction in (("validation", config.validation_split), ("test", config.test_split))
        if fraction
    )
    source = planner.vocabulary_split(config.splits)
    if source is None:
        raise ValueError(
            f"{flags} hold{'s' if ' and ' not in flags else ''} images out of the train split "
            f"(or VOC's trainval), which --splits {','.join(config.splits)} does not build: "
            "add train to --splits"
        )
    held_out = config.held_out(layouts.output_split(source))
    assert held_out is not None
    for split in config.splits:
        if layouts.output_split(split) in held_out.splits:
            name = layouts.output_split(split)
            raise ValueError(
                f"--{name}_split makes the {name} split, but --splits "
                f"{','.join(config.splits)} also builds the tree's {split} as {name}: leave "
                f"{split} out of --splits, or drop --{name}_split"
            )
    return held_out


def _class_folder_names(plan: layouts.DiscoveryPlan) -> set[str]:
    """The names of the class folders a build of a class-folder tree lists (none for another
    layout): where one holds a space (`sea lion`), a labels file's line that is the name is
    that class, not its first word with a display name."""
    tasks = [task for task in plan.tasks if task.folder_classes]
    return {name for task in tasks for name in TREE_ACCESS.subdirectories(task.directory)}


def _a_builds_labels(path: str, text: str) -> tuple[tuple[str, ...], dict[str, str]] | None:
    """A build's `labels.txt` (its classes, a line each, beside its metadata): its classes
    as written, with their display names; None for any other labels file. A class folder's
    name may hold spaces, where a labels file's class is a line's first word."""
    from beam_pipeline.output.readback import read_build_info

    try:
        info = read_build_info(posixpath.dirname(path))
    except Exception:  # noqa: BLE001 - no build there (or none this code reads): not its labels
        return None
    if "".join(name + "\n" for name in info.classes) != text:
        return None
    return tuple(info.classes), dict(info.display_names)


def in_listed_folders(path: str, root: str, layout: str = layouts.AUTO) -> bool:
    """Whether `path` lies in the folders a build of the tree at `root` lists (`Data/`,
    `Annotations/`, VOC's `JPEGImages/` and `ImageSets/`, in a year folder or not; anywhere
    below a class-folder tree's root, and that root itself); local links resolved. Beside them
    (`ROOT/out`) nothing is listed."""
    if is_local(path) and is_local(root):
        path, root = os.path.realpath(path), os.path.realpath(root)
    path, root = path.rstrip("/"), root.rstrip("/")
    if layout in layouts.FOLDER_LAYOUTS and (path == root or path.startswith(root + "/")):
        return True
    if not path.startswith(root + "/"):
        return False
    return bool(set(path[len(root) + 1 :].split("/")[:2]) & layouts.TREE_FOLDERS)


def _versions() -> dict[str, str]:
    from importlib import metadata

    versions = {"python": platform.python_version()}
    for package in ("imagenet-tfrecords", "apache-beam", "pillow", "lxml", "protobuf"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "not installed"
    return versions


@dataclasses.dataclass(frozen=True)
class Index:
    """The index stages' outputs (no pixels read yet)."""

    labelled: beam.PCollection  # LabelledEntry
    vocabulary: beam.PCollection  # a single Vocabulary
    counts: beam.PCollection  # (refusals.folder_key, entries): by folder in a DET tree, else split
    rejected: beam.PCollection  # Rejection, from listing, parsing and labelling


def build_index(pipeline: beam.Pipeline, prepared: Prepared) -> Index:
    """Adds the index stages to `pipeline`: discover, parse, vocabulary, label."""
    config, plan = prepared.config, prepared.plan
    entries, found_rejected = pipeline | "DiscoverImages" >> DiscoverImages(plan)
    if config.validation_split or config.test_split:
        entries = entries | "HoldOut" >> HoldOutSplits(plan.root, held_out_of(config))
    parsed, parse_rejected = entries | "ParseAnnotations" >> ParseAnnotations(
        plan.root, config.output_dir
    )
    if prepared.classes is not None:
        vocabulary = pipeline | "Vocabulary" >> beam.Create([Vocabulary(prepared.classes)])
    else:
        vocabulary = parsed | "BuildVocabulary" >> BuildVocabulary(
            planner.vocabulary_split(plan.splits), held_out_splits(config)
        )
    holding_out = held_out_of(config) if config.validation_split or config.test_split else None
    split_kinds = entries | "ClassifySplits" >> ClassifySplits(
        layouts.has_negatives(plan.layout), holding_out
    )
    misplaced = found_rejected | "MisplacedAnnotations" >> beam.FlatMap(
        misplaced_annotations, plan.tasks
    )
    labelled, label_rejected = parsed | "LabelImages" >> LabelImages(
        vocabulary, split_kinds, plan.root, misplaced
    )
    # Entries by `folder_key`: a DET tree's image folders (`refusals.unannotated_det_folders`;
    # VOC's years: `refuse_unannotated_voc_years`), by split alone otherwise; the checks and
    # Finalize sum them by split (`by_split`).
    layout = plan.layout
    index_counts = (
        entries
        | "FolderOfEntry"
        >> beam.Map(lambda e: folder_key(layout, e.split, e.filename, e.annotation_filename))
        | "CountPerFolder" >> beam.combiners.Count.PerElement()
    )
    index_rejected = (found_rejected, parse_rejected, label_rejected) | "IndexRejected" >> (
        beam.Flatten()
    )
    return Index(labelled, vocabulary, index_counts, index_rejected)


def finalize_spec(prepared: Prepared) -> FinalizeSpec:
    """What the checks of the index and of the finished build need to know of this build."""
    config, plan = prepared.config, prepared.plan
    return FinalizeSpec(
        output_dir=config.output_dir,
        splits=plan.splits,
        max_bad_fraction=config.max_bad_fraction,
        options=config.to_metadata(),
        source={"input_dir": absolute_path(config.input_dir), "layout": plan.layout},
        versions=_versions(),
        display_names=prepared.display_names,
        replaces_build=prepared.replaces_build,
        vocabulary_source=(
            f"--labels_file {config.labels_file}"
            if config.labels_file
            else f"the classes seen in the {planner.vocabulary_split(plan.splits)} split; "
            "--labels_file names them"
        ),
    )


def build_pipeline(pipeline: beam.Pipeline, prepared: Prepared) -> beam.PCollection:
    """Adds the build to `pipeline`; returns the PCollection holding the committed DatasetInfo."""
    config, plan = prepared.config, prepared.plan
    index = build_index(pipeline, prepared)
    labelled, vocabulary = index.labelled, index.vocabulary
    index_counts, index_rejected = index.counts, index.rejected
    spec = finalize_spec(prepared)
    checked = pipeline | "CheckIndexBudget" >> CheckIndexBudget(
        spec, index_counts=index_counts, rejected=index_rejected
    )
    num_shards = {split: config.num_shards_for(split) for split in plan.splits}
    assigned, plans = labelled | "AssignShards" >> AssignShards(
        config.seed, num_shards, config.target_shard_bytes
    )

    def write(label, shards, training=None):
        return shards | label >> WriteShards(
            plan.root,
            config.output_dir,
            config.image_policy,
            vocabulary,
            plans,
            resume=config.resume,
            gate=checked,
            staged=prepared.replaces_build,
            training=training,
        )

    if config.duplicates == duplicates.DROP_LEAKS:
        training = planner.vocabulary_split(plan.splits)
        results, write_rejected, prints = _write_training_first(assigned, write, training)
    else:
        results, write_rejected, prints = write("WriteShards", assigned)
    rejected = (index_rejected, write_rejected) | "AllRejected" >> beam.Flatten()
    if config.duplicates != duplicates.OFF:
        found = prints | "FindDuplicates" >> FindDuplicates()
    else:
        found = pipeline | "NoDuplicates" >> beam.Create([])
    return pipeline | "Finalize" >> Finalize(
        spec,
        vocabulary=vocabulary,
        plans=plans,
        index_counts=index_counts,
        results=results,
        rejected=rejected,
        found=found,
    )


def _write_training_first(assigned, write, split: str | None):
    """`--duplicates drop_leaks`: the training `split`'s shards, then the others', whose writers
    leave out the copies of training images (`leaks.TrainingCopies`)."""
    training, held_out = assigned | "TrainingFirst" >> beam.Partition(TrainingFirst(split), 2)
    first = write("WriteShards", training)
    then = write("WriteHeldOutShards", held_out, training_copies(first[2]))
    return tuple((first[i], then[i]) | f"AllWritten{i}" >> beam.Flatten() for i in range(3))


def prepare_build(
    argv: Sequence[str], *, every_core: bool = False
) -> tuple[PipelineOptions, Prepared]:
    """Everything before the pipeline: flags, tree, labels file and output directory.

    `every_core`: see `pipeline_options` (the command line passes True).

    Raises:
      ValueError, layouts.LayoutError: bad or unknown flags, or a bad input tree (before
        anything is written).
      output.OutputExistsError: a complete build is in the way.
      output.lock.OutputNotWritableError: the output location cannot be written.
    """
    check_beam_version()
    argv = list(argv)
    # The project's flags never reach Beam.
    beam_flags = beam_argv(argv)
    config = with_absolute_paths(BuildConfig.from_options(PipelineOptions(argv)))
    beam_options = PipelineOptions(beam_flags)
    check_dataflow(beam_options, config)
    check_runner(beam_options, beam_flags)
    prepared = prepare(config)
    images, one_shard = None, False
    if every_core:
        target = config.target_shard_bytes
        images, size = tree_size_up_to(prepared.plan, SMALL_BUILD_IMAGES, target)
        one_shard = config.num_shards is None and size <= target
    options = pipeline_options(
        beam_flags, every_core=every_core, images=images, one_shard=one_shard
    )
    complete = prepare_output(config.output_dir, overwrite=config.overwrite, resume=config.resume)
    watch.clear(config.output_dir)
    return options, dataclasses.replace(prepared, replaces_build=complete)


def execute(options: PipelineOptions, prepared: Prepared) -> DatasetInfo:
    """Runs the build; returns the committed DatasetInfo.

    Raises:
      RuntimeError: the pipeline failed; a message starting with 'BUILD FAILED:' when the
        build ran but could not be committed (error budget, empty split, lost images).
    """
    try:
        with beam.Pipeline(options=options) as pipeline:
            build_pipeline(pipeline, prepared)
    finally:
        watch.clear(prepared.config.output_dir)
        unlock_output(prepared.config.output_dir)
    info_path = join(prepared.config.output_dir, BUILD_INFO_FILE)
    return DatasetInfo.from_json(read_file(info_path).decode("utf-8"))


def run(argv: Sequence[str] | None = None) -> DatasetInfo:
    """Parses flags, builds and runs the pipeline, and returns the committed DatasetInfo.

    Raises what `prepare_build` and `execute` raise.
    """
    return execute(*prepare_build(sys.argv[1:] if argv is None else argv))
