"""How a build fails: the one exception a build raises when it ran but must not be committed,
and the one line a failed pipeline run is said in (`failure_message`). Signals and the worker
processes they stop: `interrupts.py`."""

import errno
import re

BUILD_FAILED_MARKER = "BUILD FAILED:"


class BuildFailed(RuntimeError):
    """The build ran but its output must not be committed; the message says why."""

    def __init__(self, message: str):
        # Runners re-raise with `type(error)(message + context)`: add the marker only once.
        if not message.startswith(BUILD_FAILED_MARKER):
            message = f"{BUILD_FAILED_MARKER} {message}"
        super().__init__(message)


class WorkerLost(BuildFailed):
    """A worker process of a local multi-process build ended before the build did."""


_LONGEST = 600  # characters of a multi-line error message the one-line failure keeps
_EXCEPTION_LINE = re.compile(r"^((?:\w+\.)*\w*(?:Error|Exception|Exit|Interrupt)): (.*)$")
_STEP = re.compile(r" ?\[while running '([^']*)'\].*$")


def was_interrupted(error: BaseException | None) -> bool:
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


# What a full disk or quota says, as an OSError's number or in a worker process's text.
_OUT_OF_SPACE = (errno.ENOSPC, errno.EDQUOT)


def out_of_space(error: BaseException | None) -> bool:
    """Whether a failed run ran out of disk space (or quota): an OSError of it in the cause
    chain, or its `[Errno 28]` in the text the runner re-raised it as."""
    return _of_errno(error, _OUT_OF_SPACE)


def file_too_large(error: BaseException | None) -> bool:
    """Whether a failed run wrote a file past the largest its file system holds (FAT32: 4 GiB)
    or the process may write (`ulimit -f`): EFBIG, as `out_of_space` finds its numbers."""
    return _of_errno(error, (errno.EFBIG,))


def _of_errno(error: BaseException | None, numbers: tuple[int, ...]) -> bool:
    text = re.compile(rf"\[Errno (?:{'|'.join(map(str, numbers))})\]")
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in numbers:
            return True
        if text.search(str(error)):
            return True
        error = error.__cause__ or error.__context__
    return False


def _unquoted(line: str) -> str:
    """`line` without the quote that closed the repr it was cut from (`BuildFailed('...')`),
    keeping a quoted path's own closing quote (a quote character is an odd one out)."""
    while line and line[-1] in "'\"" and line.count(line[-1]) % 2:
        line = line[:-1]
    return line


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
            return _unquoted(_STEP.sub("", line).strip())
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
