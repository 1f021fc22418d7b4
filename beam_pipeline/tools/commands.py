"""The command line: `python -m beam_pipeline COMMAND ...` (or `imagenet-tfrecords COMMAND ...`).

A bare `python -m beam_pipeline --input_dir TREE --output_dir OUT` is a build, as before the
commands existed; each command's module also runs alone (`python -m beam_pipeline.tools.verify`).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence

from beam_pipeline import interrupts

# name → (module of `beam_pipeline.tools` with `main(argv) -> int`, what it does).
COMMANDS = {
    "build": ("build", "build the TFRecords of a tree (the default command)"),
    "plan": ("plan", "what a build would do: read the tree and XML only"),
    "show": ("show", "a contact sheet PNG of records, of copies, or a class histogram"),
    "inspect": ("inspect_record", "records by shard and index, file name or split position"),
    "stats": ("stats", "a build's numbers: examples, classes, sizes, rejections"),
    "verify": ("verify", "re-read a build and check every byte"),
    "upgrade": ("upgrade", "write a build's metadata of this version (TFDS's too)"),
    "sample": ("sample_tree", "write the bundled sample tree to try a build on (1,250 images)"),
}

USAGE = """usage: python -m beam_pipeline COMMAND [ARGS]   (or: imagenet-tfrecords COMMAND [ARGS])

commands:
{commands}

A bare `python -m beam_pipeline --input_dir TREE --output_dir OUT ...` builds, as `build` does.
`python -m beam_pipeline COMMAND --help` describes each command; `--version` says the versions.
"""


def version() -> str:
    """This project's version, and those of the Beam, TensorFlow and Python it runs on (read
    from the installed packages' metadata: nothing imported)."""
    from importlib import metadata

    from beam_pipeline import __version__

    def installed(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    python = ".".join(map(str, sys.version_info[:3]))
    return (
        f"imagenet-tfrecords {__version__} (apache-beam {installed('apache-beam')}, "
        f"tensorflow {installed('tensorflow')}, Python {python})"
    )


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items()]
    return USAGE.format(commands="\n".join(lines))


def cli(argv: Sequence[str] | None = None) -> int:
    """`main` as a process runs it (`run`). A build's console leaves stderr in its log
    (`BuildConsole.park_stderr`), and a Ctrl-C before the build's own handling (in the first
    second: imports) is one line, not a trace."""
    try:
        try:
            return main(argv, cli=True)
        finally:
            sys.stdout.flush()  # (--help too, whose SystemExit flushed after the last except)
    except KeyboardInterrupt:
        print("INTERRUPTED (Ctrl-C)", file=sys.stderr)
        return 128 + signal.SIGINT
    except BrokenPipeError:
        return _reader_left()


def run(argv: Sequence[str] | None = None) -> int:
    """`python -m beam_pipeline` and `imagenet-tfrecords`: `cli`, in a process that ends after
    a stopping signal even where a thread of the build cannot (`_end_after_signal`); after a
    committed build, one that ends with exit 0, whatever signal comes while Python tidies up
    (its handlers gone, a Ctrl-C ended the process by SIGINT: 130 of a complete build)."""
    code = cli(argv)
    if code in _STOPPED:
        _end_after_signal(code)
    elif interrupts.completed():  # (a build committed: no signal ends it by the signal now)
        for number in _STOPPING:  # (ignored, not blocked: any thread may take a signal, and
            signal.signal(number, signal.SIG_IGN)  # Python resets its handlers as it ends)
        _end_after_signal(code)
    return code


_STOPPING = (signal.SIGINT, signal.SIGTERM)
_STOPPED = tuple(128 + number for number in _STOPPING)
# How long the process may take to end after an interrupted command has said so.
END_AFTER_SIGNAL_S = 10.0


def _end_after_signal(code: int) -> None:
    """Ends the process with `code` `END_AFTER_SIGNAL_S` seconds from now, if it has not ended:
    at its exit Python waits for every thread, and a build's read thread stuck in a read (a
    hung network mount; a pipe put in an image's place) held a process that had said `BUILD
    INTERRUPTED` forever."""

    def end() -> None:
        time.sleep(END_AFTER_SIGNAL_S)
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        os._exit(code)

    threading.Thread(target=end, name="end-after-signal", daemon=True).start()


def main(argv: Sequence[str] | None = None, *, cli: bool = False) -> int:
    """Runs one command; returns its exit code (2 for an unknown command)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv == ["-h"] or argv == ["--help"]:
        print(usage())
        return 0
    if argv in (["--version"], ["-V"]):
        print(version())
        return 0
    if argv[0].startswith("-"):
        command, rest = "build", argv
    else:
        command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        close = difflib.get_close_matches(command, list(COMMANDS), n=1)
        hint = f" (did you mean {close[0]}?)" if close else ""
        print(f"error: unknown command {command!r}{hint}\n\n{usage()}", file=sys.stderr)
        return 2
    if command == "build" and cli:
        from beam_pipeline.console.build_console import BuildConsole

        BuildConsole.park_stderr = True
        interrupts.OWN_PROCESS[0] = True  # (a Ctrl-C after the commit: `build_complete`)
    if command != "build":
        # Beam's import logs "apitools not found" through the root logger, which would set up
        # a stderr handler on the way; the read-only commands print what they have to say.
        logging.getLogger().addHandler(logging.NullHandler())
    module = importlib.import_module(f"beam_pipeline.tools.{COMMANDS[command][0]}")
    try:
        code = module.main(rest)
        sys.stdout.flush()  # here, where a closed pipe can still be caught
        return code
    except BrokenPipeError:
        return _reader_left()


def _reader_left() -> int:
    """The reader of stdout left (`stats OUT | head`, `--help | head`): say nothing more, as
    other tools do (no BrokenPipeError trace as the interpreter flushes at its exit)."""
    os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 1
