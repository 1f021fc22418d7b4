"""Ctrl-C and SIGTERM during a build, and the worker processes of a local build that must end
with it or that end before it (`WorkerLost`)."""

import collections
import contextlib
import functools
import logging
import os
import re
import signal
import sys
import threading
import time

from beam_pipeline.failures import WorkerLost

logger = logging.getLogger(__name__)


_interrupted = threading.Event()


_STOPPING_SIGNALS = (signal.SIGINT, signal.SIGTERM)


_last_signal: list[int] = []  # the signal that stopped the last build, if one did


_lost: list[str] = []  # why the build's worker process died, once one has


_lost_event = threading.Event()


_stopped: list[int] = []  # the stopping signal that ended a worker process, the build's not


def _on_interrupt(signum, frame):
    if _lost and not _interrupted.is_set():
        raise WorkerLost(_lost[0])
    if _stopped and not _interrupted.is_set():
        signum = _stopped[0]  # `_worker_stopped`'s SIGINT, for the worker's signal
    elif signum in _ignored:  # inherited as ignored (a script's `&` job): stays so, but for
        return  # `_worker_lost`'s and `_worker_stopped`'s own SIGINT, above
    if not _interrupted.is_set():
        _end_workers_later(_WORKERS_GRACE_S)
    _interrupted.set()
    _last_signal[:] = [signum]
    raise KeyboardInterrupt(signal.Signals(signum).name)


# How long the runner has, after a stopping signal, to end its worker processes itself.
_WORKERS_GRACE_S = 5.0


_within = [0]  # odd while `interrupts_remembered` runs; counts its entries and exits
_ignored: list[int] = []  # the stopping signals the process inherited as ignored


def _end_workers_later(grace: float) -> None:
    """Kills the processes below this one (the runner's worker processes) `grace` seconds from
    now, if the build has not ended by then. A SIGTERM that reached the build while its workers
    were starting left it waiting for them forever: Beam's runner joins a thread that waits on
    a worker process, which no control channel ends once it has closed (a Ctrl-C at a terminal
    reaches the workers too; `kill PID`, a scheduler's SIGTERM, does not)."""
    build = _within[0]

    def end() -> None:
        time.sleep(grace)
        if _within[0] != build:
            return  # the build ended: whatever runs now is not its
        for pid in descendants(os.getpid()):
            logger.info("Ending worker process %d, %.0f s after the signal", pid, grace)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    threading.Thread(target=end, name="end-workers", daemon=True).start()


def descendants(pid: int) -> list[int]:
    """The process IDs below `pid`, read from Linux's /proc ([] where there is none)."""
    children: dict[int, list[int]] = collections.defaultdict(list)
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                stat = file.read()
        except OSError:
            continue  # ended meanwhile
        # "pid (command) state ppid ...": the command may hold spaces and parentheses.
        fields = stat[stat.rindex(b")") + 2 :].split()
        if len(fields) > 1:
            children[int(fields[1])].append(int(name))
    found, waiting = [], [pid]
    while waiting:
        for child in children.get(waiting.pop(), ()):
            found.append(child)
            waiting.append(child)
    return found


# How long a failing thread waits for the main thread to take a stopping signal. A Ctrl-C
# (or `kill` of the process group) reaches the worker processes as well: one can end, and a
# runner thread fail for it, before the main thread, busy in C, has run its handler.
_SIGNAL_GRACE_S = 2.0


# Beam's local runner, when a worker process it started ends (its thread raises this, and the
# runner then waits for the worker's answer forever: a build that never ends).
_WORKER_EXIT = re.compile(r"Worker subprocess exited with return code (-?\d+)")


def _log_thread_failure(args: threading.ExceptHookArgs, *, otherwise) -> None:
    """After a stopping signal, the runner's threads fail as its worker processes end (a gRPC
    stream cut, "Worker subprocess exited with return code -2"): their tracebacks go to the
    log, not between the console's lines. Without one, a worker process that ended stops the
    build (`_worker_lost`), and Python's hook prints any other failure as usual,
    `_SIGNAL_GRACE_S` later."""
    ended = _WORKER_EXIT.search(str(args.exc_value))
    code = int(ended.group(1)) if ended else 0
    stopped = code in (-signal.SIGINT, -signal.SIGTERM, 128 + signal.SIGINT, 128 + signal.SIGTERM)
    if ended and not stopped and _within[0] % 2 and not _interrupted.is_set():
        if not _worker_lost(code):  # killed (-9, 137) or failed: no stopping signal is coming
            _log_late_failure(args)
        return
    build = _within[0]
    first = ended and stopped and build % 2 and _worker_stopped(code)
    if not _interrupted.wait(_SIGNAL_GRACE_S):
        if first or (ended and not stopped and _within[0] % 2 and _worker_lost(code)):
            if first:
                _stop_main_thread(build)
            return
        if _lost or _stopped:  # a channel of the lost worker's, closing: the build said why
            _log_late_failure(args)
            return
        otherwise(args)
        return
    name = args.thread.name if args.thread else "a thread"
    logger.info("After the interruption, %s failed", name, exc_info=args.exc_value)


_lost_lock = threading.Lock()


def _worker_lost(code: int) -> bool:
    """Stops the main thread's build with `WorkerLost` (by a SIGINT to it, which wakes it where
    it waits), and ends the other workers if the runner has not within `_WORKERS_GRACE_S`.
    Once a build (False after): each of the runner's threads of a lost worker comes here, and
    a second SIGINT raised `WorkerLost` again while the console said the first (a traceback
    on it, 2 of 4 runs of a worker given a SIGTERM)."""
    with _lost_lock:
        if _lost or _stopped:
            return False
        _lost[:] = [_lost_reason(code)]
    _lost_event.set()
    logger.error("%s; stopping the build", _lost[0])
    _end_workers_later(_WORKERS_GRACE_S)
    signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)
    return True


def _worker_stopped(code: int) -> bool:
    """Notes a worker process that a stopping signal ended (`code`), for `worker_interrupted`:
    True the first time. A Ctrl-C reaches the build's main thread too, which may run its
    handler late on a loaded machine (a build said its worker was lost, and to rerun without
    --resume); a `kill -INT` of a worker alone never does (`_stop_main_thread`)."""
    with _lost_lock:
        if _lost or _stopped or _interrupted.is_set():
            return False
        _stopped[:] = [-code if code < 0 else code - 128]
    logger.warning("A worker process ended by %s", signal.Signals(_stopped[0]).name)
    _lost_event.set()
    return True


def _stop_main_thread(build: int) -> None:
    """Interrupts the main thread's `build`, by a SIGINT to it, for the worker's signal
    (`_on_interrupt`), unless it took the stop meanwhile (`worker_interrupted`) or ended."""
    with _lost_lock:
        if _within[0] == build and not _interrupted.is_set():
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)


def worker_interrupted(wait: float = 0.0) -> bool:
    """Whether a worker process of the running build was ended by a stopping signal (waiting up
    to `wait` seconds for the news), which then interrupts the build as that signal would have:
    for the main thread, whose runner failed on the worker's closed channel first."""
    _lost_event.wait(wait)
    with _lost_lock:
        if not _stopped or _lost:
            return False
        if not _interrupted.is_set():
            _end_workers_later(_WORKERS_GRACE_S)
        _interrupted.set()
        _last_signal[:] = _stopped
    return True


def _lost_reason(code: int) -> str:
    """Why the build stops, from a lost worker's exit `code`."""
    number = -code if code < 0 else code - 128  # a signal: Python's own, or the shell's 128+N
    how = f"exit code {code}"
    with contextlib.suppress(ValueError):
        name = signal.Signals(number).name
        how += f", {name}" + (
            ": killed by `kill -9` or by the kernel's out-of-memory killer; dmesg tells which"
            if name == "SIGKILL"
            else ""
        )
    return f"a worker process of the build ended before the build did ({how})"


def _log_late_failure(args: threading.ExceptHookArgs) -> None:
    name = args.thread.name if args.thread else "a thread"
    logger.info("After the build stopped, %s failed", name, exc_info=args.exc_value)


def worker_lost(wait: float = 0.0) -> str | None:
    """Why a worker process of the running (or last) build ended, if one did; waits up to
    `wait` seconds for the news (the runner's thread that tells it may come second)."""
    _lost_event.wait(wait)
    return _lost[0] if _lost else None


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
    _lost.clear()
    _lost_event.clear()
    _stopped.clear()
    _within[0] += 1  # a build, told from the one before for `_end_workers_later`
    _complete.clear()
    # A signal the process inherited as ignored (a script's background job: SIGINT) stays
    # ignored, as it was before the handler came (it stopped the build or not by when it came);
    # the handler is still set, for `_worker_lost`'s SIGINT.
    _ignored[:] = [n for n in _STOPPING_SIGNALS if signal.getsignal(n) == signal.SIG_IGN]
    previous = {number: signal.signal(number, _on_interrupt) for number in _STOPPING_SIGNALS}
    previous_hook = threading.excepthook
    threading.excepthook = functools.partial(_log_thread_failure, otherwise=previous_hook)
    try:
        yield
    finally:
        for number, handler in previous.items():
            if number not in _complete:  # (`build_complete`'s stays)
                signal.signal(number, handler)
        _ignored.clear()
        # After a lost worker, the runner's threads fail as their channels close, after the
        # build said why it failed: to the log, not after the console's last line.
        threading.excepthook = (
            _log_late_failure if _lost or _interrupted.is_set() else previous_hook
        )
        _interrupted.clear()
        _within[0] += 1


# Whether a build runs in a process of its own (`commands.cli`), which ends when it does.
OWN_PROCESS = [False]
_complete: list[int] = []  # the signals `build_complete` took over


def build_complete() -> None:
    """The build has committed: in a process of its own, a Ctrl-C or SIGTERM from here lets
    it say so and end, exit 0, within `_DONE_WITHIN_S` (it was "INTERRUPTED (Ctrl-C)", exit
    130, of a build that `verify` finds whole, and a script's `build && train` stopped). A
    signal the process inherited as ignored stays so."""
    if not OWN_PROCESS[0]:
        return

    def done(signum, frame):
        if not _ending:
            _ending.append(signum)
            threading.Thread(target=_end_done, name="end-after-commit", daemon=True).start()

    for number in _STOPPING_SIGNALS:
        if number not in _ignored:
            signal.signal(number, done)
            _complete.append(number)


_ending: list[int] = []
# How long a committed build's process may take to end after a stopping signal.
_DONE_WITHIN_S = 10.0


def _end_done() -> None:
    time.sleep(_DONE_WITHIN_S)
    with contextlib.suppress(Exception):
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(0)


def completed() -> bool:
    """Whether the last build has committed and said so (`build_complete`), in this process."""
    return bool(_complete)


def stopping_signal() -> signal.Signals:
    """The signal that interrupted the last build (SIGINT when none was seen: a Ctrl-C that
    reached the build before the handler was in place)."""
    return signal.Signals(_last_signal[0] if _last_signal else signal.SIGINT)


def refuse_if_interrupted() -> None:
    """Raises KeyboardInterrupt when this process saw a Ctrl-C inside `interrupts_remembered`."""
    if _interrupted.is_set():
        raise KeyboardInterrupt("Ctrl-C before the commit")
