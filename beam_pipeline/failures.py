"""The one exception a build raises when it ran but must not be committed, and the Ctrl-C that
must stop a commit."""

import contextlib
import functools
import logging
import signal
import threading

BUILD_FAILED_MARKER = "BUILD FAILED:"
_interrupted = threading.Event()
logger = logging.getLogger(__name__)


class BuildFailed(RuntimeError):
    """The build ran but its output must not be committed; the message says why."""

    def __init__(self, message: str):
        # Runners re-raise with `type(error)(message + context)`: add the marker only once.
        if not message.startswith(BUILD_FAILED_MARKER):
            message = f"{BUILD_FAILED_MARKER} {message}"
        super().__init__(message)


_STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)
_last_signal: list[int] = []  # the signal that stopped the last build, if one did


def _on_interrupt(signum, frame):
    _interrupted.set()
    _last_signal[:] = [signum]
    raise KeyboardInterrupt(signal.Signals(signum).name)


# How long a failing thread waits for the main thread to take a stopping signal. A Ctrl-C
# (or `kill` of the process group) reaches the worker processes as well: one can end, and a
# runner thread fail for it, before the main thread, busy in C, has run its handler.
_SIGNAL_GRACE_S = 2.0


def _log_thread_failure(args: threading.ExceptHookArgs, *, otherwise) -> None:
    """After a stopping signal, the runner's threads fail as its worker processes end (a gRPC
    stream cut, "Worker subprocess exited with return code -2"): their tracebacks go to the
    log, not between the console's lines. Without one, Python's hook prints them as usual,
    `_SIGNAL_GRACE_S` later."""
    if not _interrupted.wait(_SIGNAL_GRACE_S):
        otherwise(args)
        return
    name = args.thread.name if args.thread else "a thread"
    error = (args.exc_type, args.exc_value, args.exc_traceback)
    logger.info("After the interruption, %s failed", name, exc_info=error)


@contextlib.contextmanager
def interrupts_remembered():
    """Within it, a Ctrl-C (SIGINT) or a SIGTERM (`kill`, `timeout`, a cluster's scheduler)
    raises KeyboardInterrupt, as Python's own handler does for SIGINT (its default for SIGTERM
    ends the process without a word), and is remembered: one that lands in a finalizer (a
    `__del__`, a weakref callback), where Python prints and drops the exception, still stops
    the commit (`refuse_if_interrupted`). For the main thread of a build that runs in its own
    process; `stopping_signal` tells which signal it was, after."""
    _interrupted.clear()
    _last_signal.clear()
    previous = {number: signal.signal(number, _on_interrupt) for number in _STOPPING_SIGNALS}
    previous_hook = threading.excepthook
    threading.excepthook = functools.partial(_log_thread_failure, otherwise=previous_hook)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        threading.excepthook = previous_hook
        _interrupted.clear()


def stopping_signal() -> signal.Signals:
    """The signal that interrupted the last build (SIGINT when none was seen: a Ctrl-C that
    reached the build before the handler was in place)."""
    return signal.Signals(_last_signal[0] if _last_signal else signal.SIGINT)


def refuse_if_interrupted() -> None:
    """Raises KeyboardInterrupt when this process saw a Ctrl-C inside `interrupts_remembered`."""
    if _interrupted.is_set():
        raise KeyboardInterrupt("Ctrl-C before the commit")
