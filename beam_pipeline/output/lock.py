"""The lock of a local output directory: one build writes into it at a time."""

from __future__ import annotations

import fcntl
import logging
import os

from schemas.paths import is_local

logger = logging.getLogger(__name__)


class OutputNotWritableError(RuntimeError):
    """The output location cannot be written (read-only, not a directory, no permission...)."""


class OutputBusyError(OutputNotWritableError):
    """Another build is writing into the output directory (it holds its lock)."""


_locks: dict[str, int] = {}  # real path of a locked output directory -> its open descriptor


def lock_output(output_dir: str) -> None:
    """Takes the exclusive lock of a local output directory for this process (flock on the
    directory itself: no file is left behind, and the system drops the lock when the process
    ends, however it ends). Object stores have no locks: there, one build per output directory
    is the user's rule; so is it on a file system without flock (logged).

    Raises:
      OutputBusyError: another process holds the lock.
    """
    if not is_local(output_dir):
        return
    key = os.path.realpath(output_dir)
    if key in _locks:
        return
    descriptor = os.open(key, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(descriptor)
        raise OutputBusyError(busy_message(output_dir)) from None
    except OSError as error:
        os.close(descriptor)
        logger.warning("Not locking %s (%s): run one build at a time into it", output_dir, error)
        return
    _locks[key] = descriptor


def busy_reason(output_dir: str) -> str | None:
    """The refusal `lock_output` would give because another build holds the directory's lock,
    found without taking it (for `plan`); None when it is free, absent or not local."""
    if not is_local(output_dir) or os.path.realpath(output_dir) in _locks:
        return None
    try:
        descriptor = os.open(output_dir, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fcntl.flock(descriptor, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return busy_message(output_dir)
    except OSError:
        return None
    finally:
        os.close(descriptor)  # closing the only descriptor also drops the shared lock
    return None


def busy_message(output_dir: str) -> str:
    return (
        f"another build is writing to {output_dir}; wait for it to end, or choose another "
        "--output_dir"
    )


def unlock_output(output_dir: str) -> None:
    """Releases `lock_output`'s lock."""
    if is_local(output_dir):
        descriptor = _locks.pop(os.path.realpath(output_dir), None)
        if descriptor is not None:
            os.close(descriptor)
