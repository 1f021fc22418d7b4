"""The one exception a build raises when it ran but must not be committed, and the Ctrl-C that
must stop a commit."""

import contextlib
import signal
import threading

BUILD_FAILED_MARKER = "BUILD FAILED:"
_interrupted = threading.Event()


class BuildFailed(RuntimeError):
    """The build ran but its output must not be committed; the message says why."""

    def __init__(self, message: str):
        # Runners re-raise with `type(error)(message + context)`: add the marker only once.
        if not message.startswith(BUILD_FAILED_MARKER):
            message = f"{BUILD_FAILED_MARKER} {message}"
        super().__init__(message)


def _on_interrupt(signum, frame):
    _interrupted.set()
    raise KeyboardInterrupt


@contextlib.contextmanager
def interrupts_remembered():
    """Within it, a Ctrl-C (SIGINT) raises KeyboardInterrupt as Python's own handler does, and
    is remembered: one that lands in a finalizer (a `__del__`, a weakref callback), where
    Python prints and drops the exception, still stops the commit (`refuse_if_interrupted`).
    For the main thread of a build that runs in its own process."""
    _interrupted.clear()
    previous = signal.signal(signal.SIGINT, _on_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _interrupted.clear()


def refuse_if_interrupted() -> None:
    """Raises KeyboardInterrupt when this process saw a Ctrl-C inside `interrupts_remembered`."""
    if _interrupted.is_set():
        raise KeyboardInterrupt("Ctrl-C before the commit")
