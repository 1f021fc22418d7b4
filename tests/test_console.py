"""What a person sees: live progress, a short console, one line and a log when a build fails."""

import fcntl
import io
import logging
import os
import pathlib
import pty
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import time

import pytest
from helpers import failure_line, ilsvrc_image, jpeg_bytes, summary_rows, write

from beam_pipeline import failures, pipeline
from beam_pipeline.console import watch
from beam_pipeline.console.build_console import BuildConsole, LiveProgress
from beam_pipeline.console.summary import human_bytes, label_summary, plural
from beam_pipeline.console.tree_notes import shared_note, unannotated_note
from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.runners import machine
from beam_pipeline.stages import writing
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import sample_tree, verify
from beam_pipeline.tools.commands import COMMANDS
from schemas import SplitInfo

WORKERS = ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")


@pytest.fixture(scope="module")
def small_tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(root), num_train=60, num_val=20, seed=6)
    return root


def first_sentence(stdout: str) -> str:
    """The summary's first sentence (`Built ...`), its lines joined again."""
    return " ".join(line.strip() for line in stdout.split("\n\n", 1)[0].splitlines())


def run_cli(argv, tmp_path, **kwargs):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    return subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *map(str, argv)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        **kwargs,
    )


def run_on_terminal(argv, tmp_path, timeout=600, stop=None) -> tuple[int, str]:
    """Runs the CLI with stdout and stderr on a pseudo-terminal 160 columns wide.

    `stop`: (condition, signal): the signal goes to the build's processes, as a Ctrl-C on a
    terminal does, once `condition()` holds.
    """
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 160, 0, 0))
    env = {**os.environ, "TMPDIR": str(tmp_path), "TERM": "xterm-256color", "COLUMNS": "160"}
    for variable in ("NO_COLOR", "CI", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
        env.pop(variable, None)
    process = subprocess.Popen(
        [sys.executable, "-m", "beam_pipeline", *map(str, argv)],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
        start_new_session=True,
    )
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    while time.monotonic() < deadline:
        if stop is not None and stop[0]():
            os.killpg(process.pid, stop[1])
            stop = None
        ready, _, _ = select.select([master], [], [], 0.01 if stop else 1.0)
        if not ready:
            if process.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 1 << 16)
        except OSError:  # EIO: every process holding the terminal has closed it
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    return process.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def frames(output: str, bar: str) -> list[tuple[int, int | None]]:
    """Every (done, total) the terminal showed on the named bar's line."""
    shown = []
    for line in re.split(r"[\r\n]", ANSI.sub("", output)):
        found = re.search(rf"{bar}\s.*?(\d+)/(\d+|\?)", line)
        if found:
            total = None if found.group(2) == "?" else int(found.group(2))
            shown.append((int(found.group(1)), total))
    return shown


@pytest.fixture(scope="module")
def slow_tree(tmp_path_factory):
    """Enough resizing work that the writers report several times before they finish."""
    root = tmp_path_factory.mktemp("slow_tree")
    sample_tree.write_tree(str(root), num_train=900, num_val=100, seed=7)
    return root


def test_progress_is_drawn_on_a_terminal_with_several_workers(slow_tree, tmp_path):
    out = tmp_path / "out"
    argv = ["--input_dir", slow_tree, "--output_dir", out, "--num_shards", "6", *WORKERS]
    argv += ["--image_policy", "exact", "--image_size", "480x480"]
    code, output = run_on_terminal(argv, tmp_path)
    assert code == 0, output
    indexing, writing_ = frames(output, "indexing"), frames(output, "writing")
    # The index count comes from the workers alone: it reaches every image.
    assert indexing[-1] == (1000, 1000)
    # ... and never goes back (a read as the commit deleted the counts drew 0/1000, then 0/0).
    assert [done for done, _ in indexing] == sorted(done for done, _ in indexing), indexing
    assert {total for _, total in indexing} <= {None, 1000}, indexing
    # The writers' counts are summed across both worker processes while they run...
    assert writing_[0][1] == 1000 and writing_[-1] == (1000, 1000)
    assert any(0 < done < 1000 for done, _ in writing_), writing_
    assert [done for done, _ in writing_] == sorted(done for done, _ in writing_)
    assert "images/s" in ANSI.sub("", output) and "ETA" in output


def test_no_progress_when_quiet_or_not_on_a_terminal(small_tree, tmp_path):
    out = tmp_path / "out"
    argv = ["--input_dir", small_tree, "--output_dir", out, *WORKERS, "--quiet"]
    code, output = run_on_terminal(argv, tmp_path)
    assert code == 0, output
    assert frames(output, "indexing") == frames(output, "writing") == []
    assert "Built " in output
    piped = run_cli([*argv[:-1], "--overwrite"], tmp_path)
    assert piped.returncode == 0
    assert "indexing" not in piped.stderr and "writing" not in piped.stderr


@pytest.mark.parametrize("module", ["verify", "stats", "inspect_record", "upgrade"])
def test_a_command_run_as_its_own_module_prints_only_its_answer(module, tmp_path):
    """`python -m beam_pipeline.tools.verify` as quiet as the command."""
    missing = tmp_path / "no-build"
    done = subprocess.run(
        [sys.executable, "-m", f"beam_pipeline.tools.{module}", str(missing)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    assert "apitools" not in done.stderr and "WARNING:root" not in done.stderr
    assert f"error: {missing}" in done.stderr


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_module_runs_alone_as_its_command(command):
    """`python -m beam_pipeline.tools.MODULE --help` is `python -m beam_pipeline COMMAND
    --help` (the build's module once ran nothing and exited 0)."""
    module = COMMANDS[command][0]
    alone, through = (
        subprocess.run(
            [sys.executable, "-m", *argv, "--help"], capture_output=True, text=True, timeout=600
        )
        for argv in ([f"beam_pipeline.tools.{module}"], ["beam_pipeline", command])
    )
    assert alone.returncode == through.returncode == 0, alone.stderr
    assert alone.stdout.split("\n", 1)[1] == through.stdout.split("\n", 1)[1] != ""


def test_a_good_build_prints_a_short_summary_naming_the_output(small_tree, tmp_path):
    out = tmp_path / "out"
    # What the command a user types does on a tree of 1,000 images or more: one worker process
    # per core (this small tree would be built in the launching process without the flag).
    cores = machine.available_cores()
    argv = ["--input_dir", small_tree, "--output_dir", out, "--direct_num_workers", cores]
    result = run_cli(argv, tmp_path)
    assert result.returncode == 0, result.stderr
    (started,) = result.stderr.splitlines()  # the runner's and workers' chatter is in the log
    log = pathlib.Path(started.split("full log: ")[1])
    assert started == f"Building {out} from {small_tree} (ilsvrc_det); full log: {log}"
    lines = result.stdout.splitlines()
    assert len(lines) <= 16, result.stdout
    built = first_sentence(result.stdout)  # the lines of a test's long paths
    assert built.startswith(f"Built {out} from {small_tree} (ilsvrc_det): 80 examples in ")
    assert built.endswith(
        f" images/s, on {cores} worker processes"
        if cores > 1
        else " images/s, in this process (in_memory)"
    )
    sizes = {p.name.split("-")[0]: p.stat().st_size for p in out.glob("*.tfrecord")}
    rows = [row.split() for row in summary_rows(result.stdout)]
    assert [row[:3] + row[5:6] for row in rows] == [
        ["train", "60", "1", "0"],
        ["validation", "20", "1", "0"],
    ]
    assert [" ".join(row[3:5]) for row in rows] == [
        human_bytes(sizes["train"]),
        human_bytes(sizes["validation"]),
    ]
    assert (
        "\nload it:\n  from loaders import load_dataset\n"
        f"  ds = load_dataset('{out}', 'train', batch_size=32, training=True)\n"
    ) in result.stdout
    assert lines[-2:] == ["full log:", f"  {log}"]  # a test's log path is wider than a line
    for noise in ("INFO", "WARNING", "Traceback", "apitools", "sdk_worker"):
        assert noise not in result.stdout + result.stderr
    text = log.read_text(encoding="utf-8")
    assert "beam_pipeline.tools.build: Command line:" in text
    # Every worker process's own stderr lines are kept (the runner relays a copy of each too).
    harnesses = re.findall(r"^INFO:__main__:Python sdk harness starting", text, re.M)
    assert len(harnesses) == (cores if cores > 1 else 0)


def test_a_small_build_runs_in_the_launching_process_and_says_so(small_tree, tmp_path):
    result = run_cli(["--input_dir", small_tree, "--output_dir", tmp_path / "out"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert first_sentence(result.stdout).endswith(" images/s, in this process (in_memory)")
    log = pathlib.Path(result.stdout.split("full log:")[-1].strip()).read_text()
    if machine.available_cores() > 1:
        assert "80 images: building in this process (worker processes would take longer" in log
    assert "sdk harness starting" not in log


def test_a_failed_build_ends_with_one_line_and_the_log(small_tree, tmp_path):
    out = tmp_path / "out"
    labels = tmp_path / "labels.txt"
    labels.write_text("circle\n")
    argv = ["--input_dir", small_tree, "--output_dir", out, "--labels_file", labels, *WORKERS]
    result = run_cli(argv, tmp_path)
    assert result.returncode == 1
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 3 and lines[0].startswith(f"Building {out} from {small_tree}")
    message = failure_line(result.stderr)
    assert message.startswith("BUILD FAILED: ") and f"--labels_file {labels}" in message
    log = pathlib.Path(lines[-1][len("full log: ") :])
    assert "BuildFailed: BUILD FAILED:" in log.read_text(encoding="utf-8")
    # The dead letters explain it; no live count or temp file is left behind.
    left = sorted(p.relative_to(out).as_posix() for p in out.rglob("*"))
    assert left == [".imagenet-tfrecords", "rejected.jsonl"]


@pytest.mark.slow
def test_verbose_shows_the_runner_and_the_traceback(small_tree, tmp_path):
    out = tmp_path / "out"
    labels = tmp_path / "labels.txt"
    labels.write_text("circle\n")
    argv = ["--input_dir", small_tree, "--output_dir", out, "--labels_file", labels]
    result = run_cli([*argv, *WORKERS, "--verbose"], tmp_path)
    assert result.returncode == 1
    assert "Python sdk harness starting" in result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert result.stderr.strip().splitlines()[-2].startswith("BUILD FAILED: ")


def test_a_crash_is_one_line_naming_the_error_and_the_step(
    small_tree, tmp_path, capsys, monkeypatch
):
    def crash(*_):
        raise ZeroDivisionError("a bug in the writer")

    monkeypatch.setattr(writing._WriteShardFn, "_encode", crash)
    log = tmp_path / "build.log"
    argv = ["--input_dir", small_tree, "--output_dir", tmp_path / "out", "--log_file", log]
    argv += ["--direct_running_mode", "in_memory"]  # the patched writer runs in this process
    assert build_tool.main([str(a) for a in argv]) == 1
    assert failure_line(capsys.readouterr().err) == (
        "BUILD FAILED: ZeroDivisionError: a bug in the writer (in step "
        "WriteShards/WriteShard/ParDo(_WriteShardFn)); the traceback is in the log"
    )
    assert 'raise ZeroDivisionError("a bug in the writer")' in log.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    "stop, code, by", [(signal.SIGINT, 130, ""), (signal.SIGTERM, 143, " by SIGTERM")]
)
@pytest.mark.parametrize("mode", ["in_memory", "multi_processing"])
def test_ctrl_c_during_a_build_is_an_interruption(slow_tree, tmp_path, stop, code, by, mode):
    # The runner re-raises the KeyboardInterrupt that hits a DoFn as a RuntimeError. SIGTERM
    # (kill, timeout, a cluster's scheduler) ended the build without a word. With worker
    # processes, the runner's threads printed some 80 lines of tracebacks as the workers died.
    out = tmp_path / "out"
    argv = ["--input_dir", slow_tree, "--output_dir", out, "--direct_running_mode", mode]
    argv += ["--image_policy", "exact", "--image_size", "224x224", "--num_shards", "8"]
    shard_written = lambda: any(out.glob("*.tfrecord"))  # noqa: E731
    returncode, output = run_on_terminal(argv, tmp_path, timeout=300, stop=(shard_written, stop))
    assert returncode == code, output
    lines = [line for line in re.split(r"[\r\n]+", ANSI.sub("", output)) if line.strip()]
    assert lines[-1] == lines[0].split("; ", 1)[1], output  # full log: PATH
    assert re.fullmatch(  # how many shards were written when it stopped varies
        rf"BUILD INTERRUPTED{re.escape(by)}: nothing was committed; rerun with --resume to keep "
        r"the [1-8] shards? already written",
        lines[-2],
    ), output
    assert "Traceback" not in output and "Exception in thread" not in output, output
    assert not (out / "build_info.json").exists()


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM])
def test_a_stopping_signal_after_the_summary_leaves_a_complete_build_exit_0(
    small_tree, tmp_path, stop
):
    # In the ~0.3 s after the summary (Python tidying up), a Ctrl-C made the process say
    # "INTERRUPTED (Ctrl-C)" or end by the signal: exit 130 or 143 of a build `verify` found
    # whole, and a script's `build && train` stopped there.
    out = tmp_path / "out"
    process = subprocess.Popen(
        [sys.executable, "-m", "beam_pipeline", "--input_dir", small_tree, "--output_dir", out],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        bufsize=0,  # (what is read here is not read again by communicate)
        start_new_session=True,
    )
    said = b""
    while b"Built " not in said:
        chunk = os.read(process.stdout.fileno(), 1 << 16)
        assert chunk, said
        said += chunk
    os.killpg(process.pid, stop)
    rest, err = process.communicate(timeout=120)
    said = (said + rest).decode()
    assert process.returncode == 0, (said, err)
    assert said.startswith(f"Built {out}") and said.rstrip().endswith(".log"), said  # (whole)
    assert "INTERRUPTED" not in err.decode(), err
    assert (out / "build_info.json").exists()


@pytest.mark.parametrize(
    "stop, code, by", [(signal.SIGINT, 130, ""), (signal.SIGTERM, 143, " by SIGTERM")]
)
def test_an_interruption_while_the_tree_is_read_is_one_line(small_tree, tmp_path, stop, code, by):
    # Reading a tree can take minutes (gs:// out of reach): a Ctrl-C printed a traceback, and
    # a SIGTERM ended the process without a word. Here a labels file that is a pipe no one
    # writes holds the build at that stage.
    pipe = tmp_path / "labels.txt"
    os.mkfifo(pipe)
    log = tmp_path / "build.log"
    argv = ["--input_dir", small_tree, "--output_dir", tmp_path / "out", "--labels_file", pipe]
    process = subprocess.Popen(
        [sys.executable, "-m", "beam_pipeline", *map(str, argv), "--log_file", str(log)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while "Layout ilsvrc_det in" not in (log.read_text() if log.exists() else ""):
        assert process.poll() is None and time.monotonic() < deadline, process.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # into the read of the pipe
    os.killpg(process.pid, stop)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert err.splitlines() == [
        f"BUILD INTERRUPTED{by}: nothing was committed (it had not started building)",
        f"full log: {log}",
    ]
    assert not (tmp_path / "out").exists()


def test_an_interrupted_rebuild_that_kept_the_old_build_says_so(small_tree, tmp_path, capsys):
    # Stopped before its commit, --overwrite had not touched the old build: the line told to
    # rerun with --resume, which a complete build refuses without --overwrite.
    out = tmp_path / "out"
    argv = ["--input_dir", str(small_tree), "--output_dir", str(out), "--quiet"]
    assert build_tool.main([*argv, "--direct_running_mode", "in_memory"]) == 0
    capsys.readouterr()

    def stopped(*args):
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "execute", stopped)
        assert build_tool.main([*argv, "--overwrite"]) == 130
    lines = capsys.readouterr().err.splitlines()
    # Stopped before any shard was written: "to keep the shards already written" said of none.
    assert lines[-2] == (
        f"BUILD INTERRUPTED: nothing was committed, and the complete build in {out} is kept as "
        "it was; rerun with --overwrite (no shard was written yet)"
    )
    assert verify.verify(str(out))[1] == []
    (out / ".staged").mkdir()
    (out / ".staged" / "train-00000-of-00002.tfrecord").write_bytes(b"")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pipeline, "execute", stopped)
        assert build_tool.main([*argv, "--overwrite", "--resume"]) == 130
    assert capsys.readouterr().err.splitlines()[-2] == (
        f"BUILD INTERRUPTED: nothing was committed, and the complete build in {out} is kept as "
        "it was; rerun with --overwrite --resume to keep the 1 shard already written"
    )


def test_an_interruption_is_told_from_a_failure():
    assert failures.was_interrupted(KeyboardInterrupt())
    wrapped = RuntimeError("KeyboardInterrupt [while running 'WriteShards/WriteShard']")
    assert failures.was_interrupted(wrapped)
    try:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as cause:
            raise RuntimeError("the runner gave up") from cause
    except RuntimeError as error:
        assert failures.was_interrupted(error)
    assert not failures.was_interrupted(RuntimeError("ValueError: disk on fire"))


def test_the_command_lines_console_leaves_late_stderr_in_the_log(tmp_path):
    # After a Ctrl-C near the commit, the runner's threads and loggers printed ~60 lines of
    # gRPC tracebacks under "BUILD INTERRUPTED" and the "full log" line, as they ended.
    log = tmp_path / "build.log"
    script = (
        "import os, sys\n"
        "from beam_pipeline.console.build_console import BuildConsole\n"
        "BuildConsole.park_stderr = True\n"
        f"with BuildConsole({str(log)!r}) as out:\n"
        "    out.say('BUILD INTERRUPTED: the last line')\n"
        "os.write(2, b'Exception in thread run_worker: late\\n')\n"
        "print('a late logging line', file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert (done.returncode, done.stderr) == (0, "BUILD INTERRUPTED: the last line\n")
    assert log.read_text().endswith("Exception in thread run_worker: late\na late logging line\n")
    # An exception through the console (a Ctrl-C while Beam is imported): the terminal keeps
    # stderr for what is said of it (parked, `INTERRUPTED (Ctrl-C)` went to the log alone).
    script = (
        "import sys\n"
        "from beam_pipeline.console.build_console import BuildConsole\n"
        "BuildConsole.park_stderr = True\n"
        "try:\n"
        f"    with BuildConsole({str(log)!r}):\n"
        "        raise KeyboardInterrupt\n"
        "except KeyboardInterrupt:\n"
        "    print('INTERRUPTED (Ctrl-C)', file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stderr == "INTERRUPTED (Ctrl-C)\n"


def test_a_lost_worker_stops_the_build_once_whichever_threads_tell_it():
    # Each runner thread of a lost worker told it, each by a SIGINT to the main thread: the
    # second raised WorkerLost again while the console said the first (a traceback on it).
    import threading

    from beam_pipeline import interrupts

    try:
        with interrupts.interrupts_remembered():
            with pytest.raises(interrupts.WorkerLost, match=r"exit code 143, SIGTERM\)$"):
                assert interrupts._worker_lost(128 + signal.SIGTERM)
                time.sleep(5)
            assert not interrupts._worker_lost(-signal.SIGTERM)  # no second SIGINT:
            time.sleep(0.5)  # nothing raised here
        assert interrupts.worker_lost() == (
            "a worker process of the build ended before the build did (exit code 143, SIGTERM)"
        )
    finally:
        threading.excepthook = threading.__excepthook__


def test_a_worker_a_stopping_signal_ended_interrupts_the_build_even_if_the_build_took_none():
    # A Ctrl-C whose handler ran late on a loaded machine (a trial's 1 in 20): the runner failed
    # on the worker's closed channel, and the build said BUILD FAILED, its worker lost, and to
    # rerun without --resume.
    import threading

    from beam_pipeline import interrupts

    try:
        with interrupts.interrupts_remembered():
            assert not interrupts.worker_interrupted()
            assert interrupts._worker_stopped(128 + signal.SIGTERM)  # the shell's code for it
            assert not interrupts._worker_stopped(-signal.SIGINT)  # the first one tells
            assert interrupts.worker_interrupted() and interrupts.worker_lost() is None
            assert interrupts.stopping_signal() == signal.SIGTERM
            with pytest.raises(KeyboardInterrupt):
                interrupts.refuse_if_interrupted()
            build = interrupts._within[0]
            interrupts._stop_main_thread(build)  # taken already: no SIGINT
            time.sleep(0.2)
        with interrupts.interrupts_remembered():
            with pytest.raises(KeyboardInterrupt, match="SIGINT"):  # nobody took it: woken
                assert interrupts._worker_stopped(-signal.SIGINT)
                interrupts._stop_main_thread(interrupts._within[0])
                time.sleep(5)
            assert interrupts.stopping_signal() == signal.SIGINT
        interrupts._stop_main_thread(build)  # a build that ended is not stopped
        time.sleep(0.2)
    finally:
        threading.excepthook = threading.__excepthook__


def test_an_inherited_ignored_sigint_stays_ignored_and_an_early_one_is_one_line(
    monkeypatch, capsys
):
    # A script's background job starts with SIGINT ignored: the build took it over after its
    # first second, so a Ctrl-C stopped it or not by when it came. One before the build's own
    # handling (imports) printed an importlib traceback.
    import threading

    from beam_pipeline import interrupts
    from beam_pipeline.tools import commands

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        with interrupts.interrupts_remembered():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.2)  # ignored: nothing raised
            # A lost worker still stops the build (by a SIGINT of its own): it hung.
            with pytest.raises(interrupts.WorkerLost):
                interrupts._worker_lost(-signal.SIGKILL)
                time.sleep(5)
        assert signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)
        threading.excepthook = threading.__excepthook__

    def interrupted(argv=None, *, cli=False):
        raise KeyboardInterrupt

    monkeypatch.setattr(commands, "main", interrupted)
    assert commands.cli() == 130
    assert capsys.readouterr().err == "INTERRUPTED (Ctrl-C)\n"


def test_an_interrupted_command_ends_its_process_though_a_thread_cannot():
    # A trial: a build's read thread stuck in open() on a pipe; SIGTERM said BUILD INTERRUPTED
    # and the process then waited for the thread at its exit, forever.
    script = (
        "import sys, threading\n"
        "from beam_pipeline.tools import commands\n"
        "def stuck(argv=None, *, cli=False):\n"
        "    threading.Thread(target=threading.Event().wait).start()\n"
        "    return 143\n"
        "commands.main, commands.END_AFTER_SIGNAL_S = stuck, 0.5\n"
        "sys.exit(commands.run())\n"
    )
    done = subprocess.run([sys.executable, "-c", script], timeout=60, check=False)
    assert done.returncode == 143


def test_a_worker_process_traceback_becomes_one_line():
    # What FnApiRunner raises when a DoFn fails in a worker process: the worker's text.
    text = (
        "Traceback (most recent call last):\n"
        '  File "apache_beam/runners/common.py", line 1512, in process\n'
        "OSError: [Errno 5] Input/output error\n\n"
        "During handling of the above exception, another exception occurred:\n\n"
        "Traceback (most recent call last):\n"
        '  File "apache_beam/runners/common.py", line 1623, in _reraise_augmented\n'
        "OSError: [Errno 5] Input/output error [while running 'DiscoverImages/List']\n"
    )
    assert failures.failure_message(RuntimeError(text)) == (
        "BUILD FAILED: OSError: [Errno 5] Input/output error (in step DiscoverImages/List); "
        "the traceback is in the log"
    )


def test_a_build_failure_keeps_its_quoted_path_whole():
    # The console dropped the closing quote of a path at the end of the line.
    said = "BUILD FAILED: cannot write shard a to /out: [Errno 28] No space: '/out/.tmp/a.1'"
    wrapped = f"{said} [while running 'WriteShards/WriteShard']"
    assert failures.failure_message(RuntimeError(wrapped)) == said
    assert failures.failure_message(RuntimeError(f"x: {said}'")) == said


def test_live_counts_sum_workers_and_a_retried_shard_replaces_its_count(tmp_path):
    assert watch.read_counts(str(tmp_path)) == {}
    first_attempt = watch.Tally(str(tmp_path), watch.WRITTEN, "train-00000-of-00002.tfrecord")
    first_attempt.add(7)
    first_attempt.flush()
    retry = watch.Tally(str(tmp_path), watch.WRITTEN, "train-00000-of-00002.tfrecord")
    retry.add(5)
    retry.flush()
    other = watch.Tally(str(tmp_path), watch.WRITTEN, "train-00001-of-00002.tfrecord")
    for _ in range(3):
        other.add()
    other.flush()
    watch.report(str(tmp_path), watch.TO_WRITE, 10)
    assert watch.read_counts(str(tmp_path)) == {watch.WRITTEN: 8, watch.TO_WRITE: 10}
    watch.clear(str(tmp_path))
    assert watch.read_counts(str(tmp_path)) == {}
    assert list(tmp_path.iterdir()) == []  # and the emptied .tmp/
    remote = watch.Tally("gs://bucket/out", watch.WRITTEN, "x")  # Beam metrics there
    remote.add(3)
    remote.flush()
    assert remote.count == 3


def test_a_stage_whose_files_go_as_they_are_read_is_not_counted(tmp_path, monkeypatch):
    """The commit deletes `OUT/.tmp/` while the launcher reads the live files in it: the
    index's 1,000 were summed as 0 and the indexing bar ended at 0/0."""
    out = str(tmp_path)
    for count in (600, 400):
        indexed = watch.Tally(out, watch.INDEXED)
        indexed.count = count
        indexed.flush()
    real_open = open

    def open_as_the_commit_deletes(*args, **kwargs):
        shutil.rmtree(tmp_path / ".tmp", ignore_errors=True)
        return real_open(*args, **kwargs)

    monkeypatch.setattr(watch, "open", open_as_the_commit_deletes, raising=False)
    assert watch.read_counts(out) == {}


def test_the_bars_never_go_back_as_the_commit_deletes_the_counts(tmp_path):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    terminal = Terminal()
    live = LiveProgress(str(tmp_path), terminal)
    live.start()
    live.update({watch.INDEXED: 1000})
    live.update({watch.WRITTEN: 600, watch.TO_WRITE: 1000, watch.INDEXED: 1000})
    live.update({watch.WRITTEN: 100, watch.INDEXED: 400})  # the commit deleted some files
    live.update({watch.INDEXED: 0})
    live.finish()
    live.stop()
    for bar in ("indexing", "writing"):
        shown = frames(terminal.getvalue(), bar)
        assert shown[-1] == (1000, 1000)
        assert [done for done, _ in shown] == sorted(done for done, _ in shown), shown


def test_a_read_that_sees_the_number_to_write_sees_the_whole_index(tmp_path, monkeypatch):
    """The index's last count is written before the number to write: a read of the live files
    that sees that number saw the index's last count (the indexing bar was frozen at less)."""
    out = str(tmp_path)
    indexed = watch.Tally(out, watch.INDEXED)
    indexed.count = 300
    indexed.flush()
    real_open = open

    def open_as_the_index_ends(*args, **kwargs):
        stream = real_open(*args, **kwargs)
        if indexed.count == 300:  # once, as the read opens its first file
            indexed.count = 1000
            indexed.flush()
            watch.report(out, watch.TO_WRITE, 1000)
        return stream

    monkeypatch.setattr(watch, "open", open_as_the_index_ends, raising=False)
    assert watch.read_counts(out) == {watch.INDEXED: 300}
    assert watch.read_counts(out) == {watch.INDEXED: 1000, watch.TO_WRITE: 1000}


def test_a_tree_in_a_download_folder_is_announced_where_it_was_found(tmp_path):
    download = tmp_path / "ILSVRC2017_DET"
    sample_tree.write_tree(str(download / "ILSVRC"), num_train=20, num_val=5, seed=1)
    ilsvrc_image(download / "ILSVRC", "test", "t1", b"not read")  # a split it was not asked for
    out = tmp_path / "out"
    result = run_cli(["--input_dir", download, "--output_dir", out], tmp_path)
    assert result.returncode == 0, result.stderr
    started, unbuilt = result.stderr.splitlines()
    assert started.startswith(f"Building {out} from {download}/ILSVRC (ilsvrc_det);")
    assert unbuilt == (
        "Not built: the tree's test split (--splits is train,val); to build it too, pass "
        "--splits train,val,test"
    )


def test_a_cloud_jobs_link_reaches_the_console_and_the_rest_only_the_log(tmp_path, capsys):
    log = tmp_path / "build.log"
    link = (
        "To access the Dataflow monitoring console, please navigate to "
        "https://console.cloud.google.com/dataflow/jobs/us-central1/2026-11-23_1?project=p"
    )
    with BuildConsole(str(log)):
        runner_log = logging.getLogger("apache_beam.runners.dataflow.dataflow_runner")
        runner_log.info("Create job: <Job id: '2026-11-23_1'>")
        runner_log.info(link)
    assert capsys.readouterr().err == link + "\n"
    text = log.read_text(encoding="utf-8")
    assert "Create job: <Job id: '2026-11-23_1'>" in text and link in text


def test_a_log_file_that_cannot_be_written_is_refused(tmp_path, capsys):
    (tmp_path / "file").write_text("not a directory")
    argv = ["--input_dir", str(tmp_path / "tree"), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main([*argv, "--log_file", str(tmp_path / "file" / "build.log")]) == 2
    assert capsys.readouterr().err.startswith("error: --log_file: cannot write the log: ")
    assert not (tmp_path / "out").exists()


def test_the_summary_lists_rejections_per_split_by_reason(small_tree, tmp_path, capsys):
    tree = tmp_path / "tree"
    shutil.copytree(small_tree, tree)
    ilsvrc_image(tree, "train", "broken/empty", b"")
    ilsvrc_image(tree, "val", "broken/text", b"not an image")
    write(tree / "Data" / "DET" / "train" / "broken" / "notes.txt", "not an image file")
    for split in ("train", "val"):  # their images are negatives, or rejected
        (tree / "Annotations" / "DET" / split / "broken").mkdir(parents=True)
    out = tmp_path / "out"
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--max_bad_fraction", "0.1"]
    assert build_tool.main([*argv, "--direct_running_mode", "in_memory"]) == 0
    printed = capsys.readouterr().out
    rows = {row.split()[0]: row.split() for row in summary_rows(printed)}
    assert rows["train"][5] == rows["validation"][5] == "1"  # images rejected
    assert "files rejected or reported in train: empty_file 1, not_an_image_file 1\n" in printed
    assert "files rejected or reported in validation: not_an_image 1\n" in printed
    assert f"every rejected file, with its reason:\n  {out}/rejected.jsonl\n" in printed


def test_a_split_given_fewer_shards_than_asked_says_so(small_tree, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["--input_dir", str(small_tree), "--output_dir", str(out)]
    assert build_tool.main([*argv, "--num_shards", "train=70,val=20"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert "train: 60 shards, not the 70 asked for: a shard holds at least one example" in printed
    assert not [line for line in printed if line.startswith("validation: ")]  # 20 of 20
    assert len(list(out.glob("train-*-of-00060.tfrecord"))) == 60


def test_shards_left_empty_by_rejected_images_are_named(tmp_path, capsys):
    # The shard plan counts 4 images; 2 of them turn out truncated when written.
    for i in range(4):
        data = jpeg_bytes() if i < 2 else b"\xff\xd8\xff\xe0 cut short"
        ilsvrc_image(tmp_path / "tree", "train", f"i{i}", data, voc_xml([("cat", 1, 1, 9, 9)]))
    out = tmp_path / "out"
    argv = ["--input_dir", tmp_path / "tree", "--output_dir", out, "--splits", "train"]
    assert build_tool.main([*map(str, argv), "--num_shards", "4", "--max_bad_fraction", "0.6"]) == 0
    assert (
        "train: 2 of 4 shards hold no example: images rejected while writing left them\n"
        "  empty (valid, read as no records)\n"
    ) in capsys.readouterr().out
    assert sorted(p.stat().st_size == 0 for p in out.glob("train-*.tfrecord")) == [0, 0, 1, 1]
    assert verify.main([str(out)]) == 0


def test_an_unlabelled_split_is_told_the_fix_of_its_layout():
    # DET was told to move its images into synset folders, which label only CLS-LOC.
    det = unannotated_note("validation", "/t/Annotations/DET/val", "ilsvrc_det")
    assert det.endswith("its examples get label -1; put its XML there to label it")
    cls = unannotated_note("validation", "/t/Annotations/CLS-LOC/val", "ilsvrc_cls_loc")
    assert cls.endswith("put its XML there (or its images into synset folders) to label it")


def test_images_in_more_than_one_split_are_one_line():
    # Ids, as the lists name them: "images" counted an id whose image was missing (a trial's).
    assert shared_note({("train", "validation"): 1}) == (
        "Note: 1 image id is listed in more than one split (train and validation: 1); each "
        "image is written once in every split that lists it"
    )
    assert shared_note({("train", "trainval"): 2_500, ("trainval", "validation"): 7}) == (
        "Note: 2,507 image ids are listed in more than one split (train and trainval: 2,500, "
        "trainval and validation: 7); each image is written once in every split that lists it"
    )


def test_the_labels_cell_counts_each_example_once():
    split = SplitInfo(7, 7, 0, (3, 4, 0), (), {"xml": 5, "folder": 2}, folder_disagreements=1)
    assert label_summary(split) == (
        "5 from XML (1 in a folder of another class), 2 from the class folder"
    )


def test_counts_take_the_plural_unless_they_are_one():
    assert [plural(n, "shard") for n in (0, 1, 2, 1000)] == [
        "0 shards",
        "1 shard",
        "2 shards",
        "1,000 shards",
    ]
    assert (plural(1, "class"), plural(4, "class")) == ("1 class", "4 classes")


def test_worker_processes_a_stopping_signal_left_waiting_are_ended():
    # A SIGTERM (not a terminal's Ctrl-C, which reaches the workers too) that landed while the
    # runner's worker processes started left the build waiting for them forever: Beam joins a
    # thread that waits on a worker no control channel ends. Here a child that never ends
    # stands for such a worker, in a process of its own (every descendant is killed).
    code = """
import os, signal, subprocess, sys, time
from beam_pipeline import interrupts
interrupts._WORKERS_GRACE_S = 0.5
with interrupts.interrupts_remembered():
    worker = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert worker.pid in interrupts.descendants(os.getpid())
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    except KeyboardInterrupt:
        pass
    try:
        print(worker.wait(timeout=20))
    finally:
        worker.kill()
with interrupts.interrupts_remembered():  # a build that ends at once: nothing is killed later
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(30)
    except KeyboardInterrupt:
        pass
later = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
time.sleep(2)
print(later.poll())
later.kill()
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == [str(-signal.SIGKILL), "None"]
