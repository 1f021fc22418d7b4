"""Build sharded TFRecords from an ILSVRC (DET, CLS-LOC) or Pascal VOC tree.

    python -m beam_pipeline --input_dir ILSVRC --output_dir out/ --num_shards 16

    python -m beam_pipeline --input_dir gs://b/ILSVRC --output_dir gs://b/out \\
        --runner DataflowRunner --project P --region R --temp_location gs://b/tmp \\
        --setup_file ./setup.py

Stages, each in its own module: DiscoverImages (`discovery`) → ParseAnnotations,
BuildVocabulary, LabelImages (`labelling`) → AssignShards, WriteShards (`writing`) → Finalize
(`finalize`). Before the pipeline is built, `prepare` checks the tree and `output.prepare_output`
the output directory, so bad flags and trees fail before anything is written.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import os
import platform
import re
import shlex
import sys
from collections.abc import Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import (
    DirectOptions,
    PipelineOptions,
    SetupOptions,
    StandardOptions,
    WorkerOptions,
)

from beam_pipeline import layouts, machine, watch
from beam_pipeline.beam_version import check_beam_version
from beam_pipeline.discovery import DiscoverImages
from beam_pipeline.failures import BUILD_FAILED_MARKER
from beam_pipeline.fileio import (
    classes_without_images,
    has_files,
    has_top_level_files,
    is_directory,
    match,
    read_file,
    read_text,
    subdirectories,
    without_images,
)
from beam_pipeline.finalize import CheckIndexBudget, Finalize, FinalizeSpec
from beam_pipeline.labelling import (
    BuildVocabulary,
    ClassifySplits,
    LabelImages,
    ParseAnnotations,
    misplaced_annotations,
)
from beam_pipeline.labels import Vocabulary, parse_display_names, parse_labels_file
from beam_pipeline.options import DASK_RUNNER, BuildConfig, beam_argv
from beam_pipeline.output import prepare_output, unlock_output
from beam_pipeline.writing import AssignShards, WriteShards
from schemas import BUILD_INFO_FILE, DatasetInfo
from schemas.paths import first_few, is_local, join

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
    root, layout = layouts.locate_tree(config.input_dir, config.layout, has_files, subdirectories)
    if root != config.input_dir.rstrip("/"):
        logger.info("Found the %s tree in %s", layout, root)
    if config.output_dir and in_listed_folders(config.output_dir, root):
        raise ValueError(
            f"--output_dir {config.output_dir} lies inside the input tree {root}'s image or "
            "annotation folders: the next build would list its files as input; choose a "
            "directory outside them"
        )
    logger.info("Layout %s in %s", layout, root)
    plan = layouts.plan_discovery(
        root,
        layout,
        config.splits,
        has_files,
        match,
        read_text,
        subdirectories,
        has_top_level_files,
        is_directory,
        without_images,
    )
    classes, display_names = None, {}
    if config.labels_file:
        text = read_text(config.labels_file, "--labels_file")
        try:
            classes, display_names = parse_labels_file(text), parse_display_names(text)
            Vocabulary(classes)
        except ValueError as error:
            raise ValueError(f"--labels_file {config.labels_file}: {error}") from None
    elif layouts.vocabulary_split(plan.splits) is None:
        either = "train (or trainval)" if plan.layout == layouts.VOC else "train"
        raise ValueError(
            f"without the {either} split the vocabulary is unknown: pass --labels_file"
        )
    elif layout == layouts.ILSVRC_CLS_LOC:
        train = next(t for t in plan.tasks if t.kind == layouts.IMAGES and t.split == "train")
        _refuse_classes_without_images(train.directory, train.foreign)
    config = dataclasses.replace(config, input_dir=root, layout=layout)
    return Prepared(config, plan, classes, display_names)


def _refuse_classes_without_images(train_dir: str, foreign: tuple[str, ...]) -> None:
    """Refuses a CLS-LOC train split with a class that holds no image (a class folder empty,
    or its archive not extracted: beside the folders, or inside its own) when the vocabulary
    is the classes seen in train: the class would be left out, and every class after it
    numbered lower than in every other build of the same dataset, with nothing said."""
    missing = classes_without_images(train_dir, foreign)
    if not missing:
        return
    shown = first_few(missing, 5)
    one = len(missing) == 1
    said = " ".join(missing)
    fixes = ""
    if "(a link" in said or "(the same folder as" in said:
        fixes = "point each linked class folder at its own images, "
    if "not UTF-8 text" in said:
        fixes += (
            "rename each folder whose name is not UTF-8 (every name below the split: "
            f"convmv -f latin1 -t utf8 -r --notest {shlex.quote(train_dir)}), "
        )
    raise layouts.LayoutError(
        f"split 'train': {len(missing)} class{'' if one else 'es'} in {train_dir} "
        f"hold{'s' if one else ''} no image ({shown}): a build would leave "
        f"{'it' if one else 'them'} out of the vocabulary (the classes seen in train) and "
        f"number the classes after {'it' if one else 'them'} lower than other builds of the "
        "dataset do. Extract each class's archive into its folder (ImageNet's, in that "
        'folder: for f in n*.tar; do mkdir -p "${f%.tar}" && tar -xf "$f" -C "${f%.tar}" '
        '&& rm "$f"; done; an archive inside its class folder: tar -xf it there), '
        f"{fixes}remove what is not wanted, or pass --labels_file (LOC_synset_mapping.txt, "
        "or a build's labels.txt) to keep every class's index"
    )


_INSTALL_HINTS = {
    "gs": "pip install 'imagenet-tfrecords[dataflow]' (Beam's gcp extra)",
    "s3": "pip install 'apache-beam[aws]'",
    "az": "pip install 'apache-beam[azure]'",
}


def check_file_systems(config: BuildConfig) -> None:
    """ValueError, naming the flag, for a URL whose scheme no installed Beam file system reads
    (`gs://` without `apache-beam[gcp]`)."""
    for flag, path in _path_flags(config):
        if is_local(path):
            continue
        try:
            FileSystems.get_filesystem(path)
        except ValueError:
            scheme = path.split("://", 1)[0]
            hint = f": {_INSTALL_HINTS[scheme]}" if scheme in _INSTALL_HINTS else ""
            raise ValueError(
                f"{flag} {path}: no Apache Beam file system for {scheme}:// is installed{hint}"
            ) from None


def _path_flags(config: BuildConfig) -> list[tuple[str, str]]:
    flags = [
        ("--input_dir", config.input_dir),
        ("--output_dir", config.output_dir),
        ("--labels_file", config.labels_file),
    ]
    return [(flag, path) for flag, path in flags if path]


def with_absolute_paths(config: BuildConfig) -> BuildConfig:
    """The config with local paths made absolute: a cluster's workers run in directories of
    their own, where a relative path names another tree (or none)."""
    return dataclasses.replace(
        config,
        input_dir=_absolute(config.input_dir),
        output_dir=_absolute(config.output_dir) if config.output_dir else config.output_dir,
        labels_file=_absolute(config.labels_file) if config.labels_file else None,
    )


_DATAFLOW = ("dataflowrunner", "dataflow", "testdataflowrunner")


def check_dataflow(options: PipelineOptions, config: BuildConfig) -> None:
    """ValueError for a Dataflow build its workers could not run: local paths (they read
    Cloud Storage, not this machine's disk), no way to install this package on them, a
    `--setup_file` that is not there, or options Beam's own validation refuses (a missing
    `--project`): all found before the tree is read, which on an unreachable Cloud Storage
    takes minutes of retries."""
    runner = options.view_as(StandardOptions).runner or ""
    if runner.lower().rsplit(".", 1)[-1] not in _DATAFLOW:
        return
    local = [f"{flag} {path}" for flag, path in _path_flags(config) if is_local(path)]
    if local:
        raise ValueError(
            f"--runner {runner}: {', '.join(local)} {'is' if len(local) == 1 else 'are'} on "
            "this machine, which Dataflow's workers cannot reach; copy it to Cloud Storage and "
            "pass gs://BUCKET/... paths"
        )
    setup = options.view_as(SetupOptions)
    image = options.view_as(WorkerOptions).sdk_container_image
    if not (setup.setup_file or setup.extra_packages or image):
        raise ValueError(
            f"--runner {runner}: the workers need this package: pass --setup_file ./setup.py "
            "(a checkout's, or the unpacked sdist's), --extra_package the sdist, or "
            "--sdk_container_image an image that has it installed"
        )
    for flag, path in [("--setup_file", setup.setup_file)] + [
        ("--extra_package", package) for package in setup.extra_packages or ()
    ]:
        if path and is_local(path) and not os.path.isfile(path):
            what = "is a directory, not a file" if os.path.isdir(path) else "does not exist"
            raise ValueError(f"--runner {runner}: {flag} {path} {what}")
        if flag == "--setup_file" and path and os.path.basename(path) != "setup.py":
            raise ValueError(
                f"--runner {runner}: --setup_file {path} is not a setup.py (Beam runs it to "
                "package this project for the workers): pass --setup_file ./setup.py"
            )
    from apache_beam.options.pipeline_options_validator import PipelineOptionsValidator
    from apache_beam.runners.dataflow.dataflow_runner import DataflowRunner

    errors = PipelineOptionsValidator(options, DataflowRunner()).validate()
    if errors:
        raise ValueError(f"--runner {runner}: {' '.join(errors)}")


def _absolute(path: str) -> str:
    """A local path made absolute (build_info.json records where the tree was); URLs as they are."""
    return os.path.abspath(path) if is_local(path) else path


def in_listed_folders(path: str, root: str) -> bool:
    """Whether `path` lies in the folders a build of the tree at `root` lists (`Data/`,
    `Annotations/`, VOC's `JPEGImages/` and `ImageSets/`, in a year folder or not); local
    links resolved. Beside them (`ROOT/out`) nothing is listed."""
    if is_local(path) and is_local(root):
        path, root = os.path.realpath(path), os.path.realpath(root)
    path, root = path.rstrip("/"), root.rstrip("/")
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
    counts: beam.PCollection  # (split, entries)
    rejected: beam.PCollection  # Rejection, from listing, parsing and labelling


def build_index(pipeline: beam.Pipeline, prepared: Prepared) -> Index:
    """Adds the index stages to `pipeline`: discover, parse, vocabulary, label."""
    config, plan = prepared.config, prepared.plan
    entries, found_rejected = pipeline | "DiscoverImages" >> DiscoverImages(plan)
    parsed, parse_rejected = entries | "ParseAnnotations" >> ParseAnnotations(
        plan.root, config.output_dir
    )
    if prepared.classes is not None:
        vocabulary = pipeline | "Vocabulary" >> beam.Create([Vocabulary(prepared.classes)])
    else:
        vocabulary = parsed | "BuildVocabulary" >> BuildVocabulary(
            layouts.vocabulary_split(plan.splits)
        )
    split_kinds = entries | "ClassifySplits" >> ClassifySplits(layouts.has_negatives(plan.layout))
    misplaced = found_rejected | "MisplacedAnnotations" >> beam.FlatMap(
        misplaced_annotations, plan.tasks
    )
    labelled, label_rejected = parsed | "LabelImages" >> LabelImages(
        vocabulary, split_kinds, plan.root, misplaced
    )
    index_counts = (
        entries
        | "SplitOfEntry" >> beam.Map(lambda entry: entry.split)
        | "CountPerSplit" >> beam.combiners.Count.PerElement()
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
        source={"input_dir": _absolute(config.input_dir), "layout": plan.layout},
        versions=_versions(),
        display_names=prepared.display_names,
        replaces_build=prepared.replaces_build,
        vocabulary_source=(
            f"--labels_file {config.labels_file}"
            if config.labels_file
            else f"the classes seen in the {layouts.vocabulary_split(plan.splits)} split; "
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
    results, write_rejected = assigned | "WriteShards" >> WriteShards(
        plan.root,
        config.output_dir,
        config.image_policy,
        vocabulary,
        plans,
        resume=config.resume,
        gate=checked,
        staged=prepared.replaces_build,
    )
    rejected = (index_rejected, write_rejected) | "AllRejected" >> beam.Flatten()
    return pipeline | "Finalize" >> Finalize(
        spec,
        vocabulary=vocabulary,
        plans=plans,
        index_counts=index_counts,
        results=results,
        rejected=rejected,
    )


# Without --runner, Beam (>= 2.68) starts DirectRunner, which first tries Prism: a Go binary it
# downloads at run time, which ignores --direct_running_mode and --direct_num_workers. Local builds
# run on FnApiRunner instead, the engine DirectRunner used for batch pipelines until then (and
# still falls back to when offline): the same on every machine, with or without a network.
LOCAL_RUNNER = "FnApiRunner"


# Beam options (WorkerOptions) that only a cloud runner reads; locally they would be ignored.
_CLOUD_WORKER_FLAGS = {"--num_workers", "--max_num_workers"}


# A local build of fewer images than this runs in the launching process: worker processes take
# ~2.3 s longer to start than an in-process build, which 2 of them first win back at ~2,000
# images of ImageNet's size (benchmarks/RESULTS.md, session 6).
SMALL_BUILD_IMAGES = 1000


def count_images_up_to(plan: layouts.DiscoveryPlan, limit: int) -> int:
    """Files below the plan's image directories, counted until `limit` is reached.

    `limit` for a tree that is not on a local disk (listing it twice would cost a cloud build
    time; a local runner on such a tree is rare).
    """
    count = 0
    for task in plan.tasks:
        if task.kind != layouts.IMAGES:
            continue
        if "://" in task.directory:
            return limit
        for _, _, names in os.walk(task.directory):
            count += len(names)
            if count >= limit:
                return limit
    return count


def pipeline_options(
    argv: Sequence[str] = (), *, every_core: bool = False, images: int | None = None
) -> PipelineOptions:
    """Beam's options from the command line; FnApiRunner when no --runner is given.

    With `every_core` (the command line's default), a local build whose command line names
    neither a runner nor a running mode runs one worker process per available core
    (`--direct_running_mode multi_processing --direct_num_workers N`); `--direct_num_workers`
    alone keeps its number. On one core, or for fewer than SMALL_BUILD_IMAGES `images`, it
    stays in this process. A local build refuses Dataflow's worker counts (`--num_workers`),
    which it would ignore.
    """
    argv = list(argv)
    options = PipelineOptions(argv)
    standard = options.view_as(StandardOptions)
    named = {token.split("=", 1)[0] for token in argv}
    if standard.runner is None:
        cloud_only = sorted(named & _CLOUD_WORKER_FLAGS)
        if cloud_only:
            raise ValueError(
                f"{', '.join(cloud_only)} sizes a cloud runner's workers and does nothing in a "
                "local build: pass --direct_num_workers N for N local worker processes, or "
                "--runner DataflowRunner"
            )
        standard.runner = LOCAL_RUNNER
        direct = options.view_as(DirectOptions)
        if every_core and "--direct_running_mode" not in named:
            if "--direct_num_workers" not in named:
                cores = machine.available_cores()
                small = images is not None and images < SMALL_BUILD_IMAGES
                direct.direct_num_workers = 1 if small else cores
                if small and cores > 1:
                    logger.info(
                        "%d images: building in this process (worker processes would take "
                        "longer to start than they save; --direct_num_workers N asks for N)",
                        images,
                    )
            if direct.direct_num_workers > 1:
                direct.direct_running_mode = "multi_processing"
    return options


# Runners by the names a user types, for the did-you-mean of a mistyped --runner.
_RUNNER_NAMES = (
    "DaskRunner",
    "DataflowRunner",
    "DirectRunner",
    "FlinkRunner",
    "FnApiRunner",
    "PortableRunner",
    "PrismRunner",
    "SparkRunner",
)
_LOCAL_WORKER_FLAGS = {"--direct_num_workers", "--direct_running_mode"}


def check_runner(options: PipelineOptions, argv: Sequence[str]) -> None:
    """ValueError for a runner Beam does not know (naming the closest), for flags the runner
    would ignore (`--streaming`: the build is a batch pipeline; local or cloud worker counts on
    Dask), and for a Dask scheduler address where nothing answers."""
    named = {token.split("=", 1)[0] for token in argv}
    if "--streaming" in named:
        raise ValueError("--streaming: a build is a batch pipeline over a finite tree; drop it")
    if "--direct_num_workers" in named:
        workers = options.view_as(DirectOptions).direct_num_workers
        most = max(64, 4 * machine.available_cores())
        if not 1 <= workers <= most:
            raise ValueError(
                f"--direct_num_workers {workers}: give 1 to {most} worker processes (this "
                f"machine has {machine.available_cores()} cores; each process is a Python "
                "interpreter of its own, started one after another)"
            )
    runner = options.view_as(StandardOptions).runner
    if runner is None:
        return
    if runner == DASK_RUNNER:
        ignored = sorted(named & (_CLOUD_WORKER_FLAGS | _LOCAL_WORKER_FLAGS))
        if ignored:
            raise ValueError(
                f"{', '.join(ignored)} does nothing on Dask, whose cluster runs the build: give "
                "it workers (`dask worker SCHEDULER --nworkers N --nthreads 1` on each "
                "machine); without --dask_client_address the build starts one per core here"
            )
        from beam_pipeline.dask_runner import check_scheduler

        check_scheduler(options)
        return
    if "." in runner:  # a runner's class path: Beam imports it
        return
    from apache_beam.runners.runner import _RUNNER_MAP

    if runner.lower() in _RUNNER_MAP or runner.lower() + "runner" in _RUNNER_MAP:
        return
    close = difflib.get_close_matches(runner, _RUNNER_NAMES, n=1, cutoff=0.6)
    raise ValueError(
        f"unknown --runner {runner}{f' (did you mean {close[0]}?)' if close else ''}: "
        f"{', '.join(_RUNNER_NAMES)}, or a runner's class path"
    )


def describe_workers(options: PipelineOptions) -> str:
    """How the build ran, for its summary: `2 worker processes (FnApiRunner)`, or the runner."""
    runner = options.view_as(StandardOptions).runner
    if runner == DASK_RUNNER:
        from beam_pipeline import dask_runner

        address = options.get_all_options().get("address")
        where = f"on the Dask cluster at {address}" if address else "on a local Dask cluster"
        if dask_runner.last_cluster is None or dask_runner.last_cluster[0] != address:
            return where
        _, workers, threads = dask_runner.last_cluster
        plural = "s" if workers != 1 else ""
        return f"{where} ({workers} worker{plural}, {threads} thread{'s' if threads != 1 else ''})"
    if runner != LOCAL_RUNNER:
        return f"on {runner}"
    direct = options.view_as(DirectOptions)
    mode, workers = direct.direct_running_mode, direct.direct_num_workers
    if mode == "multi_processing":
        return f"on {workers} worker process{'es' if workers != 1 else ''}"
    if mode == "multi_threading":
        return f"on {workers} worker thread{'s' if workers != 1 else ''}"
    return "in this process (in_memory)"


def prepare_build(
    argv: Sequence[str], *, every_core: bool = False
) -> tuple[PipelineOptions, Prepared]:
    """Everything before the pipeline: flags, tree, labels file and output directory.

    `every_core`: see `pipeline_options` (the command line passes True).

    Raises:
      ValueError, layouts.LayoutError: bad or unknown flags, or a bad input tree (before
        anything is written).
      output.OutputExistsError: a complete build is in the way.
      output.OutputNotWritableError: the output location cannot be written.
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
    images = count_images_up_to(prepared.plan, SMALL_BUILD_IMAGES) if every_core else None
    options = pipeline_options(beam_flags, every_core=every_core, images=images)
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


_LONGEST = 600  # characters of a multi-line error message the one-line failure keeps
_EXCEPTION_LINE = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception|Exit|Interrupt)): (.*)$")
_STEP = re.compile(r" ?\[while running '([^']*)'\].*$")


def was_interrupted(error: BaseException) -> bool:
    """Whether a failed run was a Ctrl-C: a KeyboardInterrupt in its cause chain, or in the
    text the runner re-raised it as (`RuntimeError: KeyboardInterrupt [while running ...]`)."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, KeyboardInterrupt):
            return True
        if any(line.startswith("KeyboardInterrupt") for line in str(error).splitlines()):
            return True
        error = error.__cause__ or error.__context__
    return False


def failure_message(error: BaseException) -> str:
    """One line, starting 'BUILD FAILED:', for an exception a pipeline run raised.

    A `BuildFailed` anywhere in the runner's wrapped text is returned as it is. Anything else
    (a bug, an I/O error) becomes its last `Type: message` line (worker processes send their
    tracebacks as text; the last line is the runner's re-raise of the original error, naming
    the step) and the step that raised it; the traceback is in the log.
    """
    text = str(error)
    for line in text.splitlines():
        if BUILD_FAILED_MARKER in line:
            line = line[line.index(BUILD_FAILED_MARKER) :]
            return _STEP.sub("", line).strip().strip("'\"")
    # A message of several lines (Beam's option validation, Dask's) is said on one.
    kind, message = type(error).__name__, " ".join(text.split())[:_LONGEST]
    for line in text.splitlines():
        found = _EXCEPTION_LINE.match(line)
        if found and not found.group(2).startswith("Traceback"):
            kind, message = found.group(1), found.group(2)
    step = _STEP.search(message)
    where = f" (in step {step.group(1)})" if step else ""
    message = _STEP.sub("", message).strip()
    return f"{BUILD_FAILED_MARKER} {kind}: {message}{where}; the traceback is in the log"
