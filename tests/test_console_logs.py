"""The default log folder keeps the newest logs: our own finished builds' go, nothing else."""

import errno
import logging
import os
import pathlib
import subprocess
import sys

import pytest

from beam_pipeline.console import build_console
from beam_pipeline.console.build_console import KEEP_LOGS, BuildConsole, prune_logs


@pytest.fixture(scope="module")
def ended():
    """Process ids of builds that ended: children of this test, run and reaped."""
    pids = []
    for _ in range(3):
        child = subprocess.Popen([sys.executable, "-c", ""])
        child.wait()
        pids.append(child.pid)
    return pids


@pytest.fixture
def running():
    """The process id of a build still running."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield child.pid
    child.kill()
    child.wait()


def log(folder: pathlib.Path, second: int, pid: int, written: int | None = None) -> str:
    """A build's log named as the build names it when it starts `second` s after 10:00, last
    written then (or `written` s after it)."""
    name = f"build-20261127-10{second // 60:02d}{second % 60:02d}-{pid}.log"
    path = folder / name
    path.write_text("a build's log")
    mtime = 1_800_000_000 + (second if written is None else written)
    os.utime(path, (mtime, mtime))
    return name


def names(folder: pathlib.Path) -> set[str]:
    return {path.name for path in folder.iterdir()}


def test_the_oldest_finished_logs_go_and_nothing_else(tmp_path, ended, running):
    old = [log(tmp_path, second, ended[second % 3]) for second in range(30)]
    still_running = log(tmp_path, 0, running)  # the oldest of all, but its build runs
    others = ["notes.txt", "build-latest.log", f"{old[0]}.bak", "build-20261127-100000-x.log"]
    for name in others:
        (tmp_path / name).write_text("not a log of ours")
    link, folder = (f"build-20261127-0{hour}0000-{ended[0]}.log" for hour in (8, 9))
    (tmp_path / link).symlink_to(tmp_path / "notes.txt")
    (tmp_path / folder).mkdir()
    current = tmp_path / f"build-20261127-110000-{ended[1]}.log"
    current.write_text("")  # older than any: it is counted, never deleted

    deleted = prune_logs(str(tmp_path), str(current), keep=5)

    assert deleted == old[:26]  # oldest first
    assert names(tmp_path) == {
        *old[26:],
        still_running,
        current.name,
        *others,
        link,
        folder,
    }
    assert prune_logs(str(tmp_path), str(current), keep=5) == []


def test_the_newest_is_the_last_written(tmp_path, ended):
    # A long build's log, started first, is written last: it is the newest.
    long_build = log(tmp_path, 0, ended[0], written=50)
    short_builds = [log(tmp_path, second, ended[1]) for second in (10, 20, 30)]
    current = str(tmp_path / f"build-20261127-120000-{ended[2]}.log")
    assert prune_logs(str(tmp_path), current, keep=3) == short_builds[:2]
    assert names(tmp_path) == {long_build, short_builds[2]}


def test_a_log_of_this_process_goes_once_its_build_ended(tmp_path):
    pid = os.getpid()
    first, second = (str(tmp_path / f"build-20261127-10000{i}-{pid}.log") for i in (1, 2))
    current = str(tmp_path / f"build-20261127-120000-{pid}.log")
    with BuildConsole(first):
        assert prune_logs(str(tmp_path), current, keep=1) == []  # running
    with BuildConsole(second):
        assert prune_logs(str(tmp_path), current, keep=1) == [os.path.basename(first)]
    assert prune_logs(str(tmp_path), current, keep=1) == [os.path.basename(second)]


def test_a_build_keeps_the_default_folder_to_its_newest_logs(tmp_path, ended):
    # conftest makes the temp directory this test's.
    folder = tmp_path / "imagenet-tfrecords"
    folder.mkdir()
    old = [log(folder, second, ended[0]) for second in range(KEEP_LOGS + 5)]
    assert KEEP_LOGS == 20
    with BuildConsole() as console:
        assert os.path.dirname(console.log_path) == str(folder) == build_console.log_folder()
    assert names(folder) == {*old[6:], os.path.basename(console.log_path)}
    text = pathlib.Path(console.log_path).read_text(encoding="utf-8")
    assert (
        f"INFO beam_pipeline.console.build_console: Deleted 6 old build logs in {folder} (it "
        f"keeps the newest 20): {', '.join(old[:6])}\n"
    ) in text
    # A log named with --log_file, even in that folder, deletes none.
    with BuildConsole(str(folder / f"build-20261127-120000-{ended[1]}.log")):
        pass
    assert len(names(folder)) == 21


def test_the_command_line_prunes_the_default_folder(tmp_path, ended):
    folder = tmp_path / "imagenet-tfrecords"
    folder.mkdir()
    old = [log(folder, second, ended[1]) for second in range(30)]
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    argv = ["--input_dir", str(tmp_path / "no-tree"), "--output_dir", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "beam_pipeline", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ")
    (new,) = names(folder) - set(old)
    assert names(folder) == {*old[11:], new}
    assert f"Deleted 11 old build logs in {folder}" in (folder / new).read_text()


@pytest.mark.parametrize(
    "where, problem",
    [
        ("tree/a.JPEG", "it is inside the tree ({tree}): write the log outside it"),
        ("tree/new.log", "it is inside the tree ({tree}): write the log outside it"),
        ("out", "it is inside the output ({out}): write the log outside it"),
        ("labels.txt", "it is the labels file: name another file for the log"),
        ("", "name the file the log is written to"),
    ],
)
def test_a_log_file_in_the_tree_the_output_or_the_labels_file_is_refused(
    tmp_path, capsys, where, problem
):
    """A log appended to one of the tree's images was stored in the build with it, exit 0."""
    from beam_pipeline.tools import build

    tree, out, labels = tmp_path / "tree", tmp_path / "out", tmp_path / "labels.txt"
    tree.mkdir()
    (tree / "a.JPEG").write_bytes(b"\xff\xd8 an image")
    labels.write_text("cat\n")
    log = str(tmp_path / where) if where else ""
    argv = ["--input_dir", tree, "--output_dir", out, "--labels_file", labels, "--log_file", log]
    assert build.main([str(a) for a in argv]) == 2
    said = problem.format(tree=tree, out=out)
    assert capsys.readouterr().err == f"error: --log_file {log}: {said}\n"
    assert (tree / "a.JPEG").read_bytes() == b"\xff\xd8 an image"
    assert labels.read_text() == "cat\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["labels.txt", "tree"]


def test_a_log_file_in_the_tree_is_refused_when_the_tree_is_named_from_home(
    tmp_path, capsys, monkeypatch
):
    """`--input_dir=~/tree` (a shell leaves that tilde): the check compared the raw strings."""
    from beam_pipeline.tools import build

    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "a.JPEG").write_bytes(b"\xff\xd8 an image")
    for log in (str(tmp_path / "tree" / "a.JPEG"), "~/tree/a.JPEG"):
        argv = ["--input_dir=~/tree", "--output_dir", str(tmp_path / "out"), "--log_file", log]
        assert build.main(argv) == 2
        assert "it is inside the tree (~/tree): write the log outside it" in capsys.readouterr().err
    assert (tmp_path / "tree" / "a.JPEG").read_bytes() == b"\xff\xd8 an image"


def test_a_log_that_cannot_be_written_to_the_end_is_a_warning_not_a_failure(tmp_path, capsys):
    # A trial's full log disk: the build committed, said so, then exited 1 with no word (the
    # log handler's close raised ENOSPC, its traceback sent to the log it could not write).
    log = tmp_path / "build.log"
    with BuildConsole(str(log)) as console:
        console.say("Built")
        for handler in logging.getLogger().handlers:
            if getattr(handler, "baseFilename", None) == str(log):
                handler.flush = _disk_full  # type: ignore[method-assign]
    assert capsys.readouterr().err == (
        f"Built\nwarning: the log {log} is incomplete (No space left on device): give "
        "--log_file a disk with room\n"
    )


def _disk_full():
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
