"""Entry point: parse flags, configure logging, run the build, print a summary."""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import logging
import os
import sys
from collections.abc import Sequence

from beam_pipeline.layouts import LayoutError
from beam_pipeline.options import BuildOptions
from beam_pipeline.output import OutputExistsError, OutputNotWritableError
from beam_pipeline.pipeline import failure_message, run
from schemas import DEAD_LETTER_FILE, LABEL_SOURCES, SplitInfo
from schemas.classes import FROM_BACKGROUND, FROM_FOLDER, FROM_NOTHING, FROM_XML

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
    no measurable cost in throughput (benchmarks/RESULTS.md). A no-op where the C library is not
    glibc; values already in the environment win.
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


_SOURCE_WORDS = {
    FROM_XML: "from XML",
    FROM_FOLDER: "from the class folder",
    FROM_BACKGROUND: "background",
    FROM_NOTHING: "unlabelled (label -1)",
}


def label_summary(split: SplitInfo) -> str:
    """Where a split's labels came from, e.g. `900 from XML, 100 background`."""
    parts = [
        f"{split.label_sources[source]} {_SOURCE_WORDS[source]}"
        for source in LABEL_SOURCES
        if split.label_sources.get(source)
    ]
    if split.folder_disagreements:
        parts.append(f"{split.folder_disagreements} whose XML and folder name different classes")
    return ", ".join(parts) or "none"


def main(argv: Sequence[str] | None = None) -> int:
    """Runs a build; returns the process exit code (0 ok, 2 bad arguments or tree, 1 failed)."""
    tune_malloc()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    logging.getLogger("apache_beam").setLevel(logging.WARNING)
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or "-h" in argv or "--help" in argv:
        parser = argparse.ArgumentParser(
            prog="python -m beam_pipeline",
            description="Build sharded TFRecords from an ILSVRC or Pascal VOC tree. "
            "Every Apache Beam pipeline option is accepted as well (--runner, "
            "--direct_num_workers, --direct_running_mode, and Dataflow's --project, --region, "
            "--temp_location, --setup_file, ...); an unknown flag is refused.",
        )
        BuildOptions._add_argparse_args(parser)
        parser.print_help()
        return 0
    try:
        info = run(argv)
    except (ValueError, LayoutError, OutputExistsError, OutputNotWritableError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # noqa: BLE001 - the runner wraps every failure
        print(failure_message(error), file=sys.stderr)
        return 1
    for name, split in sorted(info.splits.items()):
        print(
            f"{name}: {split.num_examples} examples in {split.num_shards} shards "
            f"({split.num_rejected} of {split.num_discovered} images rejected); "
            f"labels: {label_summary(split)}"
        )
    print(f"{info.num_classes} classes + background (index {info.background_index})")
    if info.failures:
        print(f"rejected files by reason: {info.failures}; see {DEAD_LETTER_FILE}")
    return 0
