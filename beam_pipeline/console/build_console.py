"""What a person sees while a build runs: a short console, a full log file, live progress.

`BuildConsole` sends file descriptor 2, and with it everything that Beam, its worker processes
(which inherit it) and native libraries print, into a log file; only the build's own lines reach
the terminal (all of it with `--verbose`). `LiveProgress` draws the counts of `watch` as rich
progress bars on a terminal. `print_summary` prints the table a finished build ends with.

Nothing here imports Beam: the command line enters the console before Beam is imported, so even
its import-time warnings land in the log.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, TextIO

from rich import box
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from beam_pipeline.console import watch
from schemas import DEAD_LETTER_FILE, LABEL_SOURCES, DatasetInfo, SplitInfo
from schemas.classes import BACKGROUND, FROM_BACKGROUND, FROM_FOLDER, FROM_NOTHING, FROM_XML
from schemas.paths import join

if TYPE_CHECKING:
    from beam_pipeline.tree.layouts import DiscoveryPlan

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
POLL_SECONDS = 0.5
# Log lines a person needs on the console even without --verbose: where a cloud job is watched.
JOB_LINKS = ("console.cloud.google.com/dataflow",)


def add_console_flags(parser: argparse.ArgumentParser) -> None:
    """The flags that decide what the console shows (they do not change the build)."""
    parser.add_argument(
        "--verbose",
        action="store_true",
        default=False,
        help="Show the runner's and libraries' log lines and tracebacks on the console too.",
    )
    parser.add_argument(
        "--quiet",
        action="store_true",
        default=False,
        help="No progress bar (it is only drawn on a terminal anyway).",
    )
    parser.add_argument(
        "--log_file",
        default=None,
        help="Where the full log goes (default: a new file under the system's temp directory, "
        "named build-<time>-<pid>.log; its path is printed).",
    )


def console_flags(argv: Sequence[str]) -> argparse.Namespace:
    """The console flags of a command line, read without Beam."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add_console_flags(parser)
    flags, _ = parser.parse_known_args(list(argv))
    return flags


def default_log_path() -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    directory = os.path.join(tempfile.gettempdir(), "imagenet-tfrecords")
    return os.path.join(directory, f"build-{stamp}-{os.getpid()}.log")


class BuildConsole:
    """Context manager: the log file, fd 2 captured into it, and the terminal for our lines.

    Inside it, `say` writes a line to the terminal (whatever stderr was on entry), Python
    logging goes to the log file (and, with `verbose`, the terminal), and whatever is written
    to fd 2 (Beam's workers, gRPC, native libraries, warnings) is copied into the log file by a
    pump thread (and, with `verbose`, to the terminal as well).
    """

    def __init__(self, log_path: str | None = None, *, verbose=False, quiet=False):
        """Creates the log file; raises OSError when it cannot be written."""
        self.log_path = os.path.abspath(log_path or default_log_path())
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - closed on exit
        self.verbose = verbose
        self.quiet = quiet
        self.terminal: TextIO = sys.stderr
        self._saved_fd: int | None = None
        self._pump: threading.Thread | None = None
        self._last_read = time.monotonic()
        self._handlers: list[logging.Handler] = []
        self._root_level = logging.INFO
        self._displaced: list[logging.Handler] = []

    def __enter__(self) -> BuildConsole:
        self._capture_fd2()
        self._configure_logging()
        return self

    def __exit__(self, *exc_info) -> None:
        root = logging.getLogger()
        for handler in self._handlers:
            root.removeHandler(handler)
            handler.close()
        root.setLevel(self._root_level)
        for handler in self._displaced:
            root.addHandler(handler)
        self._release_fd2()
        self._log.close()

    def _capture_fd2(self) -> None:
        try:
            real_stderr = sys.stderr.fileno() == 2
        except (AttributeError, OSError, ValueError):
            real_stderr = False  # replaced (e.g. by a test's capture): write to it as it is
        sys.stderr.flush()
        self._saved_fd = os.dup(2)
        if real_stderr:
            self.terminal = os.fdopen(
                os.dup(self._saved_fd), "w", buffering=1, errors="backslashreplace"
            )
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._pump = threading.Thread(
            target=self._copy, args=(read_end,), name="stderr-to-log", daemon=True
        )
        self._pump.start()

    def _copy(self, read_end: int) -> None:
        """Copies the pipe behind fd 2 into the log until every writer has closed it."""
        while True:
            try:
                chunk = os.read(read_end, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self._last_read = time.monotonic()
            with contextlib.suppress(OSError, ValueError):
                self._log.write(chunk)
            if self.verbose and self._saved_fd is not None:
                with contextlib.suppress(OSError):
                    os.write(self._saved_fd, chunk)
        os.close(read_end)

    def _release_fd2(self) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(self._saved_fd, 2)  # the pipe stays open only in worker processes still alive
        # Wait for their last words, but not for a helper that outlives the build (a Dask
        # LocalCluster leaves multiprocessing's resource tracker holding the pipe until exit):
        # stop once the pipe has been quiet for a moment.
        deadline = time.monotonic() + 5
        while self._pump.is_alive() and time.monotonic() < deadline:
            self._pump.join(timeout=0.1)
            if time.monotonic() - self._last_read > 0.5:
                break
        if self.terminal is not sys.stderr:
            self.terminal.close()
            self.terminal = sys.stderr
        os.close(self._saved_fd)
        self._saved_fd = None

    def _configure_logging(self) -> None:
        root = logging.getLogger()
        self._root_level = root.level
        # A handler on stderr (what `logging.basicConfig` installs, e.g. on Beam's first import
        # warning) would copy every record into the log a second time, through fd 2.
        self._displaced = [
            handler
            for handler in root.handlers
            if type(handler) is logging.StreamHandler
            and handler.stream in (sys.stderr, sys.__stderr__)
        ]
        for handler in self._displaced:
            root.removeHandler(handler)
        root.setLevel(logging.INFO)
        to_file = logging.FileHandler(self.log_path, encoding="utf-8")  # closed on exit
        to_file.setFormatter(logging.Formatter(LOG_FORMAT))
        self._handlers = [to_file]
        if self.verbose:
            to_terminal = logging.StreamHandler(self.terminal)
            to_terminal.setFormatter(logging.Formatter(LOG_FORMAT))
            self._handlers.append(to_terminal)
        else:
            self._handlers.append(_JobLinks(self))
        for handler in self._handlers:
            root.addHandler(handler)

    def say(self, line: str = "") -> None:
        """A line of the build's own on the terminal."""
        print(line, file=self.terminal, flush=True)

    @property
    def shows_progress(self) -> bool:
        return not self.quiet and self.terminal.isatty()

    @contextlib.contextmanager
    def progress(self, output_dir: str) -> Iterator[LiveProgress | None]:
        """Live progress bars for a build writing to `output_dir`, when they can be shown."""
        if not self.shows_progress:
            yield None
            return
        live = LiveProgress(output_dir, self.terminal)
        live.start()
        try:
            yield live
        finally:
            live.stop()


class _JobLinks(logging.Handler):
    """Says a runner's log line that links to the job's page (Dataflow's) on the console."""

    def __init__(self, console: BuildConsole):
        super().__init__(logging.INFO)
        self._console = console

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if any(link in message for link in JOB_LINKS):
            self._console.say(message)


class _RateColumn(ProgressColumn):
    def render(self, task) -> Text:
        speed = task.finished_speed or task.speed
        return Text(f"{speed:,.0f} images/s" if speed else "", style="progress.data.speed")


class LiveProgress:
    """Polls `watch.read_counts` from a thread and draws an indexing and a writing bar."""

    def __init__(self, output_dir: str, stream: TextIO):
        self._output_dir = output_dir
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description:<9}"),
            BarColumn(),
            MofNCompleteColumn(),
            _RateColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=stream),
            refresh_per_second=4,
        )
        self._indexing = self._progress.add_task("indexing", total=None)
        self._writing = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="progress", daemon=True)

    def start(self) -> None:
        self._progress.start()
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self.update(watch.read_counts(self._output_dir))

    def update(self, counts: dict[str, int]) -> None:
        """Shows `counts` (a `watch.read_counts` result)."""
        progress = self._progress
        if watch.INDEXED in counts:
            progress.update(self._indexing, completed=counts[watch.INDEXED])
        if watch.TO_WRITE in counts and self._writing is None:
            indexed = progress.tasks[self._indexing].completed
            progress.update(self._indexing, total=indexed, completed=indexed)
            self._writing = progress.add_task("writing", total=counts[watch.TO_WRITE])
        if self._writing is not None and watch.WRITTEN in counts:
            progress.update(self._writing, completed=counts[watch.WRITTEN])

    def finish(self) -> None:
        """The build committed, so the writers processed every image they were given.

        The commit clears the live files before a last poll could read them: the bars end at
        the totals they were shown (a build too quick for any poll shows no writing bar).
        """
        self._stop.set()
        self._thread.join()
        progress = self._progress
        indexed = progress.tasks[self._indexing].completed
        progress.update(self._indexing, total=indexed, completed=indexed)
        if self._writing is not None:
            total = progress.tasks[self._writing].total
            progress.update(self._writing, completed=total)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self._progress.stop()


_SOURCE_WORDS = {
    FROM_XML: "from XML",
    FROM_FOLDER: "from the class folder",
    FROM_BACKGROUND: BACKGROUND,
    FROM_NOTHING: "unlabelled (label -1)",
}


def label_summary(split: SplitInfo) -> str:
    """Where a split's labels came from, e.g. `900 from XML, 100 background`."""
    parts = []
    for source in LABEL_SOURCES:
        if split.label_sources.get(source):
            part = f"{split.label_sources[source]:,} {_SOURCE_WORDS[source]}"
            if source == FROM_XML and split.folder_disagreements:  # the XML won over the folder
                part += f" ({split.folder_disagreements:,} in a folder of another class)"
            parts.append(part)
    return ", ".join(parts) or "none"


def unbuilt_note(splits: Sequence[str], unbuilt: Sequence[str]) -> str:
    """The line saying which of the tree's splits a build leaves out, and the flag that adds
    them: `Not built: the tree's test split (--splits is train,val); ...`."""
    names = ", ".join(unbuilt)
    noun = "split" if len(unbuilt) == 1 else "splits"
    them = "it" if len(unbuilt) == 1 else "them"
    return (
        f"Not built: the tree's {names} {noun} (--splits is {','.join(splits)}); to build "
        f"{them} too, pass --splits {','.join([*splits, *unbuilt])}"
    )


def unannotated_note(split: str, annotation_dir: str, layout: str) -> str:
    """The line warning that a split other than `test` will be built without labels."""
    from beam_pipeline.tree.layouts import ILSVRC_CLS_LOC

    folders = " (or its images into synset folders)" if layout == ILSVRC_CLS_LOC else ""
    return (
        f"Unlabelled: the {split} split has no annotations ({annotation_dir} is empty or "
        f"missing): its examples get label -1; put its XML there{folders} to label it"
    )


def shared_note(shared: Mapping[tuple[str, ...], int]) -> str:
    """The line saying how many images the build writes in more than one split (VOC lists
    that overlap), e.g. `Note: 2 images are in more than one split (train and val: 2); ...`."""
    total = sum(shared.values())
    each = ", ".join(f"{' and '.join(splits)}: {count:,}" for splits, count in shared.items())
    return (
        f"Note: {plural(total, 'image')} {'is' if total == 1 else 'are'} in more than one split "
        f"({each}); each is written once in every split that lists it"
    )


def tree_notes(plan: DiscoveryPlan, splits: Sequence[str]) -> list[str]:
    """What the console (and `plan`) says of the tree before a build of `splits` starts: the
    splits it leaves out, the images several splits share, the splits without annotations."""
    notes = [unbuilt_note(splits, plan.unbuilt)] if plan.unbuilt else []
    if shared := plan.shared_images():
        notes.append(shared_note(shared))
    notes += [
        unannotated_note(split, directory, plan.layout) for split, directory in plan.unannotated
    ]
    return notes


def plural(number: int, noun: str) -> str:
    """`1 shard`, `1,000 shards`: a number with its noun, plural unless it is 1."""
    return (
        f"{number:,} {noun if number == 1 else noun + 'es' if noun.endswith('s') else noun + 's'}"
    )


def human_bytes(num_bytes: int) -> str:
    size = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,.0f} {unit}" if unit == "B" else f"{size:,.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")


def load_line(output_dir: str, info: DatasetInfo) -> str | None:
    """The Python that loads the build's first labelled split (train, or trainval, when
    there is one)."""
    from beam_pipeline.tree.layouts import vocabulary_split

    labelled = [name for name, split in info.splits.items() if split.labelled]
    if not labelled:
        return None
    split = vocabulary_split(labelled) or sorted(labelled)[0]
    batch_size = min(32, info.splits[split].num_examples)  # a batch never larger than the split
    return (
        f"from loaders import load_dataset; "
        f"ds = load_dataset({output_dir!r}, {split!r}, batch_size={batch_size})"
    )


def print_summary(
    stream: TextIO,
    info: DatasetInfo,
    *,
    input_dir: str,
    output_dir: str,
    seconds: float,
    workers: str,
    log_path: str,
    rejected: Mapping[str, Mapping[str, int]] | None = None,
) -> None:
    """The table a finished build ends with: what was written, from where, how fast.

    `rejected` maps each split ("" for files in none) to its rejections by reason
    (from `rejected.jsonl`). A split given fewer shards than `--num_shards` asked (it has
    fewer examples; the build's recorded options say what was asked) says so.
    """
    requested = info.options.get("num_shards")
    splits = sorted(info.splits.items())
    examples = sum(split.num_examples for _, split in splits)
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for column in ("split", "examples", "shards", "size", "rejected"):
        table.add_column(column, justify="left" if column == "split" else "right")
    table.add_column("labels", overflow="fold")
    for name, split in splits:
        table.add_row(
            name,
            f"{split.num_examples:,}",
            f"{split.num_shards:,}",
            human_bytes(sum(shard.num_bytes for shard in split.shards)),
            f"{split.num_rejected:,}",
            label_summary(split),
        )
    wide = not getattr(stream, "isatty", lambda: False)()
    console = Console(file=stream, width=160 if wide else None, highlight=False, soft_wrap=False)
    rate = examples / seconds if seconds > 0 else 0.0
    console.print(
        f"Built {output_dir} from {input_dir} ({info.source.get('layout', '?')}): "
        f"{plural(examples, 'example')} in {seconds:,.1f} s, {rate:,.0f} images/s, {workers}",
        markup=False,
        soft_wrap=True,
    )
    console.print(table)
    lines = [f"{plural(info.num_classes, 'class')} + background (index {info.background_index})"]
    for name, split in splits:
        asked = requested.get(name) if isinstance(requested, dict) else requested
        if asked is not None and asked > split.num_shards:
            lines.append(
                f"{name}: {plural(split.num_shards, 'shard')}, not the {asked:,} asked for: a "
                "shard holds at least one example"
            )
        empty = sum(1 for shard in split.shards if shard.num_examples == 0)
        if empty:
            lines.append(
                f"{name}: {empty:,} of {plural(split.num_shards, 'shard')} hold no example: "
                "images rejected while writing left them empty (valid, read as no records)"
            )
    for split, reasons in sorted((rejected or {}).items()):
        where = f"in {split}" if split else "outside any split"
        listed = ", ".join(f"{reason} {count:,}" for reason, count in sorted(reasons.items()))
        lines.append(f"files rejected or reported {where}: {listed}")
    if info.failures:
        lines.append(f"every rejected file, with its reason: {join(output_dir, DEAD_LETTER_FILE)}")
    line = load_line(output_dir, info)
    if line:
        lines.append(f"load it: {line}")
    lines.append(f"full log: {log_path}")
    for text in lines:
        console.print(text, markup=False, soft_wrap=True)
