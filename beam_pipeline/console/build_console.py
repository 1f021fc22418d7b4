"""What a person sees while a build runs: a short console, a full log file, live progress.

`BuildConsole` sends file descriptor 2, and with it everything that Beam, its worker processes
(which inherit it) and native libraries print, into a log file; only the build's own lines reach
the terminal (all of it with `--verbose`). `LiveProgress` draws the counts of `watch` as rich
progress bars on a terminal. The table a finished build ends with: `summary.py`.

Nothing here imports Beam: the command line enters the console before Beam is imported, so even
its import-time warnings land in the log.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import logging
import os
import re
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from beam_pipeline.console import watch
from schemas.paths import within

if TYPE_CHECKING:
    pass

logger = logging.getLogger(__name__)

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# How many logs the default log folder keeps, the new build's counted: some weeks of a build a
# day, or a day of trying flags on a small tree; a local build's log is some 35 KiB.
KEEP_LOGS = 20
# The name `default_log_path` gives a log; the process id is the last number.
_LOG_NAME = re.compile(r"build-\d{8}-\d{6}-(\d+)\.log")
# The logs of this process's builds that are running (a process may run several, one by one).
_OPEN_LOGS: set[str] = set()
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
        help="Where the full log goes (default: a new file build-<time>-<pid>.log in an "
        "imagenet-tfrecords folder of the system's temp directory, which keeps the newest "
        f"{KEEP_LOGS}; its path is printed). A log named here is never deleted; it may not lie "
        "in the tree or the output directory.",
    )


def console_flags(argv: Sequence[str]) -> argparse.Namespace:
    """The console flags of a command line, read without Beam."""
    parser = argparse.ArgumentParser(  # (its errors said `__main__.py` and 3 flags of many)
        prog="python -m beam_pipeline build",
        usage="%(prog)s --input_dir TREE --output_dir OUT [FLAGS] (--help lists them)",
        add_help=False,
        allow_abbrev=False,
    )
    add_console_flags(parser)
    flags, _ = parser.parse_known_args(list(argv))
    return flags


def log_file_problem(argv: list[str], log_file: str | None) -> str | None:
    """Why the log may not go to `log_file`: into the tree (it was appended to an image, which
    the build then stored), over the labels file, or into the output directory."""
    if log_file is None:
        return None
    if not log_file or os.path.isdir(log_file):
        return "name the file the log is written to"
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for flag in ("--input_dir", "--output_dir", "--labels_file"):
        parser.add_argument(flag, default="")
    paths, _ = parser.parse_known_args(argv)
    for directory, what in ((paths.input_dir, "the tree"), (paths.output_dir, "the output")):
        if within(log_file, directory):
            return f"it is inside {what} ({directory}): write the log outside it"
    if paths.labels_file and within(log_file, paths.labels_file):
        return "it is the labels file: name another file for the log"
    return None


def log_folder() -> str:
    """The folder of the default logs: `imagenet-tfrecords` in the system's temp directory."""
    return os.path.join(tempfile.gettempdir(), "imagenet-tfrecords")


def default_log_path() -> str:
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    return os.path.join(log_folder(), f"build-{stamp}-{os.getpid()}.log")


def prune_logs(directory: str, current: str, keep: int = KEEP_LOGS) -> list[str]:
    """Deletes the oldest build logs in `directory` so that `keep` remain, `current` (the new
    build's) counted; returns the names deleted, oldest first.

    Only our own logs go: regular files named as `default_log_path` names them and owned by
    this user. Newest is last written. A log whose build may still be running (its process id
    is in use by another process, or it is this process's and its console is open) is never
    deleted; it does not count against `keep` either, so it takes no finished build's place.
    A file that cannot be read or deleted is left as it is.
    """
    finished = []
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        for entry in entries:
            found = _LOG_NAME.fullmatch(entry.name)
            path = os.path.join(directory, entry.name)
            if not found or path == current or _running(int(found.group(1)), path):
                continue
            with contextlib.suppress(OSError):
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISREG(info.st_mode) and _ours(info):
                    finished.append((info.st_mtime_ns, entry.name))
    finished.sort(reverse=True)
    deleted = []
    for _, name in sorted(finished[max(keep - 1, 0) :]):
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(directory, name))
            deleted.append(name)
    return deleted


def _ours(info: os.stat_result) -> bool:
    """Whether this user owns the file (where files have no owner, Windows: yes)."""
    getuid = getattr(os, "getuid", None)
    return getuid is None or info.st_uid == getuid()


def _running(pid: int, log_path: str) -> bool:
    """Whether the build writing `log_path`, in process `pid`, may be running (when in doubt,
    yes)."""
    if pid == os.getpid():
        return os.path.abspath(log_path) in _OPEN_LOGS
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError, ValueError):  # another user's process, or no such number
        return True
    return True


class BuildConsole:
    """Context manager: the log file, fd 2 captured into it, and the terminal for our lines.

    Inside it, `say` writes a line to the terminal (whatever stderr was on entry), Python
    logging goes to the log file (and, with `verbose`, the terminal), and whatever is written
    to fd 2 (Beam's workers, gRPC, native libraries, warnings) is copied into the log file by a
    pump thread (and, with `verbose`, to the terminal as well).
    """

    # Set by the command line's process (`commands.cli`), which ends after the build: on a
    # return (not an exception, whose traceback or line is the terminal's) the console leaves
    # fd 2 on the log file, so what the runner's threads and loggers print as they end after
    # the build's last line (a Ctrl-C's: gRPC streams cut, "Worker subprocess exited") is
    # logged, not shown under it.
    park_stderr = False

    def __init__(self, log_path: str | None = None, *, verbose=False, quiet=False):
        """Creates the log file; raises OSError when it cannot be written. Without `log_path`,
        the log goes to the default folder, whose oldest logs it deletes (`prune_logs`)."""
        self.log_path = os.path.abspath(os.path.expanduser(log_path or default_log_path()))
        os.makedirs(os.path.dirname(self.log_path), exist_ok=True)
        self._log = open(self.log_path, "ab", buffering=0)  # noqa: SIM115 - closed on exit
        _OPEN_LOGS.add(self.log_path)
        self.pruned: list[str] = []  # the old logs deleted, said in the log
        if log_path is None:
            self.pruned = prune_logs(os.path.dirname(self.log_path), self.log_path)
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
        if self.pruned:
            logger.info(
                "Deleted %d old build logs in %s (it keeps the newest %d): %s",
                len(self.pruned),
                os.path.dirname(self.log_path),
                KEEP_LOGS,
                ", ".join(self.pruned),
            )
        return self

    def __exit__(self, *exc_info) -> None:
        root = logging.getLogger()
        unwritten: OSError | None = None
        for handler in self._handlers:
            root.removeHandler(handler)
            try:
                handler.close()
            except OSError as error:  # its last lines (a full disk): the build's outcome stands
                unwritten = error
        root.setLevel(self._root_level)
        for handler in self._displaced:
            root.addHandler(handler)
        if unwritten is not None:
            why = unwritten.strerror or unwritten
            self.say(
                f"warning: the log {self.log_path} is incomplete ({why}): give --log_file a "
                "disk with room"
            )
        self._release_fd2(park=BuildConsole.park_stderr and exc_info[0] is None)
        with contextlib.suppress(OSError):
            self._log.close()
        _OPEN_LOGS.discard(self.log_path)

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

    def _release_fd2(self, park: bool = False) -> None:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        assert self._saved_fd is not None and self._pump is not None  # set by _capture_fd2
        if park:
            parked = os.open(self.log_path, os.O_WRONLY | os.O_APPEND)
            os.dup2(parked, 2)
            os.close(parked)
        else:
            os.dup2(self._saved_fd, 2)  # the pipe stays open only in worker processes alive
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
        self._writing: TaskID | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, name="progress", daemon=True)

    def start(self) -> None:
        self._progress.start()
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.wait(POLL_SECONDS):
            self.update(watch.read_counts(self._output_dir))

    def update(self, counts: dict[str, int]) -> None:
        """Shows `counts` (a `watch.read_counts` result).

        A bar never goes back: the commit deletes the live files while they are read, and a
        read then misses some (the index's 1,000 were drawn as 0/0). Once the number to write
        is known, the index is whole: its bar is full.
        """
        progress = self._progress
        indexed = max(progress.tasks[self._indexing].completed, counts.get(watch.INDEXED, 0))
        if watch.TO_WRITE in counts and self._writing is None:
            self._writing = progress.add_task("writing", total=counts[watch.TO_WRITE])
        whole = self._writing is not None
        progress.update(self._indexing, completed=indexed, total=indexed if whole else None)
        if self._writing is not None and watch.WRITTEN in counts:
            written = max(progress.tasks[self._writing].completed, counts[watch.WRITTEN])
            progress.update(self._writing, completed=written)

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
