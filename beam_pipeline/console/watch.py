"""Live counts a person can watch while a build runs, from every worker process.

Workers keep a count (`Tally`) and write it, at most every `FLUSH_SECONDS` and when they finish,
to a small file `OUT/.tmp/live/<stage>/<name>` (temp-then-rename, so a reader never sees half a
number); the launcher sums each stage's files (`read_counts`) to draw the progress bar. Files
work across every local runner mode (threads, worker processes, a local Dask cluster) without a
server. A count is keyed by what it counts (a shard's file name), so a retried shard replaces
its failed attempt's count instead of adding to it. Counting is best effort: a count that
cannot be written never fails a build.

Only a local output directory gets the files; on Dataflow and other remote runners the same
numbers are Beam metrics (namespace `imagenet_tfrecords`: `images_written`, ...) in the job's
page. The directory lies under `OUT/.tmp/`; the launcher clears it before and after a build.

The build's commit deletes `OUT/.tmp/`, the live files with it, one by one while the launcher
may be reading them: a read can miss files but never sees a count too high (`read_counts`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
import uuid

from schemas.paths import is_local

LIVE_DIR = os.path.join(".tmp", "live")
FLUSH_SECONDS = 0.5

# Stages.
INDEXED = "indexed"  # images whose annotation was read (the index being built)
TO_WRITE = "to_write"  # images the shard writers will process, once the index checked out
WRITTEN = "written"  # images the shard writers processed (written or rejected)
STAGES = (INDEXED, TO_WRITE, WRITTEN)


def _stage_dir(output_dir: str, stage: str) -> str:
    return os.path.join(output_dir, LIVE_DIR, stage)


class Tally:
    """A worker's count of one thing, written to its live file now and then."""

    def __init__(self, output_dir: str, stage: str, name: str | None = None):
        self.count = 0
        self._path = None
        if is_local(output_dir):
            self._path = os.path.join(_stage_dir(output_dir, stage), name or uuid.uuid4().hex)
        self._flushed_at = time.monotonic()

    def add(self, n: int = 1) -> None:
        self.count += n
        if self._path is not None and time.monotonic() - self._flushed_at >= FLUSH_SECONDS:
            self.flush()

    def flush(self) -> None:
        """Writes the count now."""
        if self._path is None:
            return
        self._flushed_at = time.monotonic()
        temp = f"{self._path}.{os.getpid()}-{threading.get_ident()}~"
        with contextlib.suppress(OSError):
            os.makedirs(os.path.dirname(self._path), exist_ok=True)
            with open(temp, "w", encoding="ascii") as stream:
                stream.write(str(self.count))
            os.replace(temp, self._path)


def report(output_dir: str, stage: str, count: int) -> None:
    """Writes a one-off count, e.g. the number of images to write."""
    tally = Tally(output_dir, stage, "total")
    tally.count = count
    tally.flush()


def read_counts(output_dir: str) -> dict[str, int]:
    """Each stage's sum over its live files; stages without files are absent, and so is one
    whose file went as it was read (the commit deleting them; it was summed as 0).

    The stages are read last first: a stage's count is written before the next stage's (the
    index's last before the number to write), so a read that sees a stage has the earlier
    stages' final counts (or fewer, while the commit deletes them).
    """
    counts = {}
    for stage in reversed(STAGES):
        total = _stage_total(_stage_dir(output_dir, stage))
        if total is not None:
            counts[stage] = total
    return counts


def _stage_total(directory: str) -> int | None:
    try:
        names = [name for name in os.listdir(directory) if not name.endswith("~")]
    except OSError:
        return None
    total = 0
    for name in names:
        try:
            with open(os.path.join(directory, name), encoding="ascii") as stream:
                text = stream.read()
        except OSError:  # deleted since listed
            return None
        with contextlib.suppress(ValueError):
            total += int(text)
    return total if names else None


def clear(output_dir: str) -> None:
    """Removes the live files: an interrupted run's before a build, the build's own after it.

    `OUT/.tmp/` goes too when nothing else is left in it.
    """
    if not is_local(output_dir):
        return
    shutil.rmtree(os.path.join(output_dir, LIVE_DIR), ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(os.path.dirname(os.path.join(output_dir, LIVE_DIR)))
