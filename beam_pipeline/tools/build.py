"""Entry point: the console, the flags, the build, the summary."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import signal
import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from beam_pipeline import failures
from beam_pipeline.console import build_console as console
from beam_pipeline.console import summary, tree_notes
from beam_pipeline.failures import WorkerLost
from beam_pipeline.interrupts import (
    build_complete,
    interrupts_remembered,
    stopping_signal,
    worker_interrupted,
    worker_lost,
)
from beam_pipeline.output.readback import rejections_by_split

if TYPE_CHECKING:
    from apache_beam.options.pipeline_options import PipelineOptions

    from beam_pipeline.pipeline import Prepared
    from schemas.metadata import DatasetInfo

# glibc mallopt parameters, and the environment variables that set them in child processes.
_MALLOC_SETTINGS = (
    (-8, "MALLOC_ARENA_MAX", 2),  # M_ARENA_MAX
    (-3, "MALLOC_MMAP_THRESHOLD_", 1 << 20),  # M_MMAP_THRESHOLD
    (-1, "MALLOC_TRIM_THRESHOLD_", 1 << 20),  # M_TRIM_THRESHOLD
)


def tune_malloc() -> None:
    """Keeps glibc from holding on to freed memory, here and in the DirectRunner workers.

    Beam's gRPC threads each get an arena by default (up to 8 per core), and glibc raises its
    mmap and trim thresholds (up to 32 MiB) after the first large free, so the multi-megabyte
    buffers of the index stages then come from the heap and stay mapped: the peak memory grew
    with the size of the index. Two arenas and thresholds fixed at 1 MiB (blocks that large are
    mapped and returned when freed; images and decode buffers stay below) keep it nearly flat at
    no measurable cost in throughput (benchmarks/RESULTS.md, "Memory: glibc's malloc settings",
    measured at `a1f9018`). A no-op where the C library is not glibc; values already in the
    environment win.
    """
    for _, variable, value in _MALLOC_SETTINGS:
        os.environ.setdefault(variable, str(value))
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    for parameter, variable, _ in _MALLOC_SETTINGS:
        with contextlib.suppress(AttributeError, ValueError):
            libc.mallopt(parameter, int(os.environ[variable]))


logger = logging.getLogger(__name__)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a build; returns the process exit code (0 ok, 2 bad arguments or tree, 1 failed).

    The console (`console.BuildConsole`) is entered before Beam is imported, so everything the
    runner and the libraries print goes to the log file rather than the terminal.
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    flags = console.console_flags(argv)
    if problem := console.log_file_problem(argv, flags.log_file):
        print(f"error: --log_file {flags.log_file}: {problem}", file=sys.stderr)
        return 2
    try:
        build_console = console.BuildConsole(
            flags.log_file, verbose=flags.verbose, quiet=flags.quiet
        )
    except OSError as error:
        print(f"error: --log_file: cannot write the log: {error}", file=sys.stderr)
        return 2
    with build_console as out:
        return _main(argv, out)


def _main(argv: list[str], out: console.BuildConsole) -> int:
    tune_malloc()
    from beam_pipeline.options import BuildOptions

    if not argv or "-h" in argv or "--help" in argv:
        parser = argparse.ArgumentParser(
            prog="python -m beam_pipeline [build]",
            description="Build sharded TFRecords from an ILSVRC or Pascal VOC tree, a folder of "
            "class folders, or images with their VOC XML. "
            "Every Apache Beam pipeline option is accepted as well (--runner, "
            "--direct_num_workers, --direct_running_mode; --runner DaskRunner with "
            "--dask_client_address for a Dask cluster; Dataflow's --project, --region, "
            "--temp_location, --setup_file, ...); an unknown flag is refused.",
        )
        BuildOptions._add_argparse_args(parser)
        parser.print_help()
        return 0
    logger.info("Command line: %s", argv)
    with interrupts_remembered():  # from here: a Ctrl-C or SIGTERM is one line, never a traceback
        return _build(argv, out)


def _build(argv: list[str], out: console.BuildConsole) -> int:
    from beam_pipeline import pipeline
    from beam_pipeline.output.directory import OutputExistsError
    from beam_pipeline.output.lock import OutputNotWritableError
    from beam_pipeline.runners import local
    from beam_pipeline.stages import resume
    from beam_pipeline.tree.layouts import LayoutError

    started = time.monotonic()
    try:
        options, prepared = pipeline.prepare_build(argv, every_core=True)
    except (ValueError, LayoutError, OutputExistsError, OutputNotWritableError) as error:
        logger.error("Refused: %s", error)
        out.say(f"error: {error}")
        return 2
    except KeyboardInterrupt as error:  # while the tree is read (minutes on an unreachable gs://)
        return _interrupted(out, error, "nothing was committed (it had not started building)")
    except Exception as error:  # noqa: BLE001 - reading the tree failed (storage out of reach)
        return _failed(out, error, "Could not prepare the build")
    config = prepared.config
    before = _commit_marker(config.output_dir)  # a complete build that --overwrite replaces
    out.say(
        f"Building {config.output_dir} from {config.input_dir} ({config.layout}); "
        f"full log: {out.log_path}"
    )
    for note in tree_notes.tree_notes(prepared.plan, config):
        out.say(note)
    in_place = resume.shards_in_place(config.output_dir) if config.resume else None
    info = _execute(options, prepared, out, before)
    if isinstance(info, int):
        return info
    build_complete()  # (committed: a Ctrl-C from here ends the process, exit 0)
    summary.print_summary(
        sys.stdout,
        info,
        input_dir=config.input_dir,
        output_dir=config.output_dir,
        seconds=time.monotonic() - started,
        workers=local.describe_workers(options),
        log_path=out.log_path,
        rejected=rejections_by_split(config.output_dir) if info.failures else None,
        kept=resume.kept_shards(config.output_dir, info, in_place),
    )
    sys.stdout.flush()  # (said while the process still ends at once on a Ctrl-C)
    return 0


def _execute(
    options: PipelineOptions, prepared: Prepared, out: console.BuildConsole, before: bytes | None
) -> DatasetInfo | int:
    """Runs the build: its DatasetInfo, or the exit code of a build that stopped (said).
    A worker lost once the commit wrote its marker leaves a whole build (`_whole_after_commit`):
    kept, with a warning, exit 0."""
    from beam_pipeline import pipeline
    from beam_pipeline.output.readback import read_build_info

    output_dir = prepared.config.output_dir
    try:
        with out.progress(output_dir) as live:
            info = pipeline.execute(options, prepared)
            if live is not None:
                live.finish()
        return info
    except (KeyboardInterrupt, Exception) as error:
        # Ctrl-C reaches an in-process build inside a DoFn, which the runner re-raises wrapped;
        # a worker process ended by it can fail the runner first, on its closed channel.
        if failures.was_interrupted(error) or worker_interrupted(wait=1.0):
            left = _what_is_left(output_dir, before, interrupted=True)
            assert left is not None  # an interrupted build always says what it left
            return _interrupted(out, error, left)
        lost = worker_lost()  # (waited for above: the runner may fail first, as there)
        if lost is not None and _whole_after_commit(output_dir, before):
            logger.warning("After the commit marker was written: %s; the build is whole", lost)
            return read_build_info(output_dir)
        full, large = failures.out_of_space(error), failures.file_too_large(error)
        left = _what_is_left(output_dir, before, lost is not None or full or large)
        if full and left is not None:  # (said as for an interrupted build)
            left = f"the disk of {output_dir} is full: free space on it; {left}"
        elif large and left is not None:
            left = (
                f"a shard grew past the largest file {output_dir}'s file system takes (FAT32: "
                f"4 GiB), or the process's limit (ulimit -f): a smaller --target_shard_mb makes "
                f"smaller shards; {left}"
            )
        elif _owner_file_gone(output_dir):  # (then a Beam rename error, or a missing shard)
            left = (
                f"{output_dir} was deleted or moved while the build wrote to it (its marker "
                "file is gone): nothing was committed; rerun the same command"
            )
        elif _tree_gone(prepared.config.input_dir):  # its files then fail as read_error
            left = (
                f"the tree {prepared.config.input_dir} was deleted or moved while the build "
                "read it: its files' read errors are that, not bad images; nothing was "
                "committed; put it back and rerun the same command"
            )
        if lost is not None:
            logger.error("Build failed", exc_info=error)
            error = WorkerLost(lost)
        return _failed(out, error, "Build failed", left)


def _tree_gone(input_dir: str) -> bool:
    """Whether a local tree's top directory is gone (deleted or moved during the build)."""
    from schemas.paths import is_local

    return is_local(input_dir) and not os.path.isdir(input_dir)


def _owner_file_gone(output_dir: str) -> bool:
    """Whether the file a build writes into its output directory first, and no command
    removes, is gone: the directory was deleted or moved during the build."""
    from beam_pipeline.output.directory import OWNER_FILE
    from beam_pipeline.output.readback import file_exists
    from schemas.paths import join

    try:
        return not file_exists(join(output_dir, OWNER_FILE))
    except OSError:  # (a remote file system that cannot be asked: say nothing more)
        return False


def _whole_after_commit(output_dir: str, before: bytes | None) -> bool:
    """Whether the build in `output_dir` is whole although a worker was lost: the commit wrote
    its marker (a new `build_info.json`), so every shard and file before it is in place; what
    follows it (TFDS's `dataset_info.json`, from it, and the work folders' removal) is done
    here when the worker was lost in the middle of those."""
    from beam_pipeline.output.commit import commit_stage, write_atomic
    from beam_pipeline.output.directory import remove_work_dirs
    from beam_pipeline.output.readback import read_build_info
    from schemas.tfds_metadata import TFDS_INFO_FILE, tfds_files

    now = _commit_marker(output_dir)
    if now is None or now == before or commit_stage(output_dir) == "retiring":
        return False
    if not _commit_finished(output_dir):  # (TFDS's other files come before the marker)
        marker = tfds_files(read_build_info(output_dir))[TFDS_INFO_FILE]
        write_atomic(output_dir, TFDS_INFO_FILE, marker.encode("utf-8"))
        remove_work_dirs(output_dir)
    return True


def _commit_finished(output_dir: str) -> bool:
    """Whether a commit wrote its last file (TFDS's marker, after `build_info.json`) and
    removed the work folders: then a stop during the runner's shutdown left a whole build."""
    from apache_beam.io.filesystems import FileSystems

    from beam_pipeline.output.directory import PROGRESS_DIR, STAGING_DIR, TEMP_DIR
    from schemas.paths import join
    from schemas.tfds_metadata import TFDS_INFO_FILE

    work = (TEMP_DIR, PROGRESS_DIR, STAGING_DIR)
    return FileSystems.exists(join(output_dir, TFDS_INFO_FILE)) and not any(
        FileSystems.exists(join(output_dir, folder)) for folder in work
    )


def _what_is_left(output_dir: str, before: bytes | None, interrupted: bool) -> str | None:
    """What a build that stopped left in `output_dir`, and what to do, from its commit marker
    now and `before` the build (that of the complete build --overwrite replaces, or None) and
    how far a rebuild's commit got; None for a build that failed before its commit with no
    build to keep."""
    from beam_pipeline.output.commit import commit_stage
    from beam_pipeline.output.directory import list_shard_files
    from schemas import BUILD_INFO_FILE

    def written(staged: bool) -> int:
        try:
            return len(list_shard_files(output_dir, staged=staged))
        except OSError:
            return 0

    now, stage = _commit_marker(output_dir), commit_stage(output_dir)
    kept = now is not None and now == before and stage != "moving"
    if kept:
        if not interrupted:
            return f"the complete build in {output_dir} is kept as it was"
        shards = written(staged=True)
        rerun = (
            f"rerun with --overwrite --resume to keep the {summary.plural(shards, 'shard')} "
            "already written"
            if shards
            else "rerun with --overwrite (no shard was written yet)"
        )
        return (
            f"nothing was committed, and the complete build in {output_dir} is kept as it was; "
            + rerun
        )
    if now is not None and stage is None and _commit_finished(output_dir):
        return (
            f"the stop came after the commit: the build in {output_dir} is complete "
            f"(python -m beam_pipeline verify {output_dir} checks every record)"
        )
    if now is not None and stage != "retiring":
        return (
            f"the new build was committed ({BUILD_INFO_FILE} is in place), but not all of its "
            f"commit: python -m beam_pipeline upgrade {output_dir} writes what is missing"
        )
    if before is not None:
        return (
            "the commit had begun: the build it replaces was deleted, and the new one is not "
            "in place; rerun with --resume to finish it (it keeps every shard already written)"
        )
    if interrupted:
        shards = written(staged=False)
        if not shards:
            return "nothing was committed, and no shard was written yet; rerun the same command"
        return (
            f"nothing was committed; rerun with --resume to keep the "
            f"{summary.plural(shards, 'shard')} already written"
        )
    return None


def _commit_marker(output_dir: str) -> bytes | None:
    """The bytes of the commit marker of the build in `output_dir` (`build_info.json`, or a
    schema 1.x build's `dataset_info.json`: not TFDS's, left when a commit's first deletion
    took `build_info.json` alone), or None."""
    from apache_beam.io.filesystems import FileSystems

    from schemas import BUILD_INFO_FILE, LEGACY_INFO_FILE
    from schemas.metadata import build_payload
    from schemas.paths import join

    for name in (BUILD_INFO_FILE, LEGACY_INFO_FILE):
        try:
            with FileSystems.open(join(output_dir, name)) as stream:
                data = stream.read()
        except OSError:
            continue
        return data if name == BUILD_INFO_FILE or build_payload(data) is not None else None
    return None


def _interrupted(out: console.BuildConsole, error: BaseException, what: str) -> int:
    """Logs the traceback, says `BUILD INTERRUPTED[ by SIGTERM]: <what>` and where the log is;
    exit 128 + the signal's number."""
    logger.error("Interrupted", exc_info=error)
    stopped_by = stopping_signal()
    by = "" if stopped_by == signal.SIGINT else f" by {stopped_by.name}"
    out.say(f"BUILD INTERRUPTED{by}: {what}")
    out.say(f"full log: {out.log_path}")
    return 128 + stopped_by


def _failed(
    out: console.BuildConsole, error: BaseException, what: str, note: str | None = None
) -> int:
    """Logs the traceback, says the one `BUILD FAILED:` line, `note` (what is kept) and where
    the log is; exit 1."""

    logger.error(what, exc_info=error)
    out.say(failures.failure_message(error))
    if note:
        out.say(note)
    out.say(f"full log: {out.log_path}")
    return 1


if __name__ == "__main__":  # `python -m beam_pipeline.tools.build ...`: the `build` command
    from beam_pipeline.tools.commands import run

    raise SystemExit(run(["build", *sys.argv[1:]]))
