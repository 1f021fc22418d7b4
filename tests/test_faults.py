"""Faults during a build: retried bundles, unwritable outputs."""

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time

import pytest
from helpers import build, dead_letters, failure_line, write

from beam_pipeline.output import commit, directory
from beam_pipeline.stages import writing
from beam_pipeline.stages.coders import LabelledEntryCoder
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import plan as plan_tool
from beam_pipeline.tools import sample_tree, verify
from beam_pipeline.tree import fileio
from schemas import BUILD_INFO_FILE


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("tree")
    sample_tree.write_tree(str(root), num_train=30, num_val=10, seed=4)
    return root


def files(out):
    return {
        p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()
    }


def test_retried_bundle_leaves_exactly_one_copy_of_each_shard(tree, tmp_path, monkeypatch):
    """A shard writer dies mid-shard and its bundle is retried, as Dataflow does.

    The retry is emulated inside a real DirectRunner build: the first attempt runs until the
    injected failure and its outputs are discarded; a second attempt then processes the same
    element from scratch. (Beam's legacy BundleBasedDirectRunner does retry bundles, but drops a
    retried bundle's outputs from later side inputs; Finalize then refuses to commit, which is
    safe but not what this test is about.)
    """
    reference = tmp_path / "reference"
    build(tree, reference, "--num_shards", "train=3,val=2")

    real_process = writing._WriteShardFn.process
    real_read = fileio.read_file
    attempts = []

    def failing_read(path, **kwargs):
        if path.endswith("train_000007.JPEG"):
            raise RuntimeError("injected worker failure in the middle of a shard")
        return real_read(path, **kwargs)

    def process_with_retry(self, element, *args, **kwargs):
        entries = [
            LabelledEntryCoder().decode(data)
            for batch in element[1]
            for _, data in writing.decode_members(batch)
        ]
        victim = any(e.entry.filename.endswith("train_000007.JPEG") for e in entries)
        if victim:
            monkeypatch.setattr(fileio, "read_file", failing_read)
            try:
                list(real_process(self, element, *args, **kwargs))  # attempt 1: outputs discarded
            except RuntimeError as error:
                attempts.append(str(error))
            monkeypatch.setattr(fileio, "read_file", real_read)
        yield from real_process(self, element, *args, **kwargs)  # the retried attempt

    monkeypatch.setattr(writing._WriteShardFn, "process", process_with_retry)
    out = tmp_path / "retried"
    build(tree, out, "--num_shards", "train=3,val=2")

    assert attempts == ["injected worker failure in the middle of a shard"]
    assert files(out) == files(reference)  # one copy of each shard, same bytes, no temp files


@pytest.fixture
def tmpfs(tmp_path):
    """Mounts small tmpfs file systems (root only); skips where mounting is not allowed."""
    mounts = []

    def mount(options: str):
        target = tmp_path / f"mount{len(mounts)}"
        target.mkdir()
        result = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(target)], capture_output=True
        )
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
        mounts.append(target)
        return target

    yield mount
    for target in mounts:
        subprocess.run(["umount", str(target)], check=False)


def test_an_output_that_is_a_dangling_link_is_named_so(tree, tmp_path, capsys):
    # It said "cannot write to OUT: [Errno 17] File exists: 'OUT'".
    out, target = tmp_path / "out", tmp_path / "disk" / "builds"
    out.symlink_to(target)
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--splits", "train"]
    assert build_tool.main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: cannot write to {out}: it is a link to {target}, which does not exist (make "
        "that folder, or give another --output_dir)\n"
    )
    target.mkdir(parents=True)  # (the fix it names)
    assert build_tool.main(argv) == 0
    assert (target / BUILD_INFO_FILE).exists()


def test_read_only_output_location_gives_a_clear_error(tree, tmpfs, capsys):
    out = tmpfs("ro,size=64k")
    code = build_tool.main(["--input_dir", str(tree), "--output_dir", str(out / "build")])
    assert code == 2
    assert f"cannot write to {out}/build" in capsys.readouterr().err


def test_full_output_location_fails_loudly_and_commits_nothing(tree, tmpfs, capsys):
    out = tmpfs("size=64k")
    code = build_tool.main(
        ["--input_dir", str(tree), "--output_dir", str(out), "--num_shards", "2"]
    )
    assert code == 1
    err = capsys.readouterr().err
    message = failure_line(err)
    assert message.startswith("BUILD FAILED: cannot write ")  # a shard or its progress record
    assert "No space left on device" in message
    note = err.splitlines()[-2]  # what to do: a trial found only the error's text
    assert note.startswith(f"the disk of {out} is full: free space on it; nothing was committed")
    assert re.search(r"; rerun (the same command|with --resume to keep the \d+ shards?)", note)
    assert not (out / BUILD_INFO_FILE).exists()


def test_a_shard_past_the_largest_file_allowed_names_the_shard_size_flag(tree, tmp_path):
    # FAT32 takes files of 4 GiB at most, `ulimit -f` less: "BUILD FAILED: ... File too large",
    # and nothing said of what to change or of what was kept.
    out = tmp_path / "out"
    argv = ["--input_dir", tree, "--output_dir", out, "--num_shards", "1", "--splits", "train"]
    command = shlex.join([sys.executable, "-m", "beam_pipeline", *map(str, argv)])
    done = subprocess.run(  # (Python ignores SIGXFSZ: a write past the limit fails, EFBIG)
        ["bash", "-c", f"ulimit -f 100 && exec {command}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "File too large" in failure_line(done.stderr)
    note = done.stderr.splitlines()[-2]
    assert note.startswith(
        f"a shard grew past the largest file {out}'s file system takes (FAT32: 4 GiB), or the "
        "process's limit (ulimit -f): a smaller --target_shard_mb makes smaller shards; "
        "nothing was committed"
    ), done.stderr
    assert not (out / BUILD_INFO_FILE).exists()


def test_a_file_larger_than_any_image_is_rejected_unread(tree, tmp_path):
    # An 8 GiB file named .JPEG was read whole: a MemoryError with no words, or the kernel
    # ending the build.
    from beam_pipeline.tree.fileio import MAX_FILE_BYTES

    root = tmp_path / "tree"
    shutil.copytree(tree, root)
    huge = root / "Data/DET/train/sample_train/huge.JPEG"
    with open(huge, "wb") as stream:  # (sparse: no disk taken)
        stream.truncate(MAX_FILE_BYTES + 1)
    info = build(root, tmp_path / "out", "--splits", "train", "--max_bad_fraction", "0.1")
    assert info.splits["train"].num_examples == 30
    (rejected,) = dead_letters(tmp_path / "out")
    assert (rejected["path"], rejected["reason"]) == (str(huge), "read_error")
    assert rejected["detail"] == (
        f"{MAX_FILE_BYTES + 1:,} bytes: larger than any image or XML a build reads "
        f"({MAX_FILE_BYTES:,} bytes at most), not read"
    )


def built_with_a_change_after_one_shard(monkeypatch, argv: list[str], change) -> int:
    """The exit code of the build command `argv` run in this process, `change()` made once
    its first shard is written (and before the next)."""
    written, write_shard = [], writing._WriteShardFn._write

    def _write(self, *args):
        if len(written) == 1:
            change()
        written.append(write_shard(self, *args))
        return written[-1]

    monkeypatch.setattr(writing._WriteShardFn, "_write", _write)
    return build_tool.main([*argv, "--direct_running_mode", "in_memory"])


def test_an_output_directory_deleted_during_the_build_is_said_and_nothing_committed(
    tree, tmp_path, monkeypatch, capsys
):
    # It failed on Beam's "Rename operation failed with exceptions" or a missing shard alone.
    out = tmp_path / "out"
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--num_shards", "3"]
    # the user's rm -rf, after the first shard
    assert built_with_a_change_after_one_shard(monkeypatch, argv, lambda: shutil.rmtree(out)) == 1
    err = capsys.readouterr().err
    assert failure_line(err).startswith("BUILD FAILED: ")
    assert err.splitlines()[-2] == (
        f"{out} was deleted or moved while the build wrote to it (its marker file is gone): "
        "nothing was committed; rerun the same command"
    )
    assert not (out / BUILD_INFO_FILE).exists()
    monkeypatch.undo()
    assert build_tool.main(argv) == 0  # as said
    assert verify.main([str(out)]) == 0


def test_a_tree_moved_away_during_the_build_is_said_not_taken_for_bad_images(
    tree, tmp_path, monkeypatch, capsys
):
    # A trial's: its files' read errors failed the budget, whose message offered to commit
    # the build without them (--max_bad_fraction 0.63 --resume), and no word of the tree.
    moving, out = shutil.copytree(tree, tmp_path / "tree"), tmp_path / "out"
    argv = ["--input_dir", str(moving), "--output_dir", str(out), "--num_shards", "3"]
    move = lambda: moving.rename(tmp_path / "moved")  # noqa: E731 - the user's mv
    assert built_with_a_change_after_one_shard(monkeypatch, argv, move) == 1
    err = capsys.readouterr().err
    assert "read_error" in failure_line(err)
    assert err.splitlines()[-2] == (
        f"the tree {moving} was deleted or moved while the build read it: its files' read "
        "errors are that, not bad images; nothing was committed; put it back and rerun the "
        "same command"
    )
    assert not (out / BUILD_INFO_FILE).exists()


def test_plan_says_a_build_would_run_out_of_room(tree, tmpfs, capsys):
    # A trial: on a disk with no room plan said "The build would go ahead."
    out = tmpfs("size=64k")
    assert plan_tool.main(["--input_dir", str(tree), "--output_dir", str(out)]) == 1
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert re.fullmatch(
        rf"The build would fail once its shards are written: the disk of {re.escape(str(out))} "
        r"has [\d.]+ KiB free, and the records need about [\d.]+ KiB: free space on it, or "
        r"give --output_dir a disk with room",
        last,
    ), last
    assert plan_tool.main(["--input_dir", str(tree), "--output_dir", str(out / "a" / "b")]) == 1
    capsys.readouterr()


@pytest.mark.parametrize("resume", [False, True])
def test_probe_left_by_a_killed_run_is_removed(tree, tmp_path, resume):
    out = tmp_path / "out"
    out.mkdir()
    # A run killed while probing, long ago and a moment ago (a rerun at once keeps no stray file).
    stale = out / ".write-probe-0123456789abcdef"
    stale.write_bytes(b"probe")
    os.utime(stale, (time.time() - 120, time.time() - 120))
    (out / ".write-probe-fedcba9876543210").write_bytes(b"probe")
    argv = ["--input_dir", str(tree), "--output_dir", str(out)]
    assert build_tool.main([*argv, *(["--resume"] if resume else [])]) == 0
    assert list(out.glob(".write-probe-*")) == []


def test_a_probe_deleted_by_a_build_probing_beside_is_no_refusal(tmp_path, monkeypatch):
    # Two builds probing one folder at once: each deletes the other's probe. The one whose
    # probe went first wrote it all the same; the lock, next, tells it it is not alone.
    real_match = directory.FileSystems.match

    def match_then_other_build_deletes(patterns, *args, **kwargs):
        found = real_match(patterns, *args, **kwargs)
        for probe in (tmp_path / "out").glob(".write-probe-*"):
            probe.unlink()
        return found

    monkeypatch.setattr(directory.FileSystems, "match", match_then_other_build_deletes)
    directory.check_writable(str(tmp_path / "out"))
    assert list((tmp_path / "out").iterdir()) == []


def test_a_probe_made_but_not_written_is_deleted_with_the_refusal(tmp_path, monkeypatch):
    # A full disk: the probe file was made, its write failed, and the refusal left it behind
    # (one per attempt, in a complete build too, where verify said nothing of it).
    real_create = directory.FileSystems.create

    class DiskFull:
        def __init__(self, stream):
            self._stream = stream

        def __enter__(self):
            return self

        def __exit__(self, *exc_info):
            self._stream.close()

        def write(self, data):
            raise OSError(28, "No space left on device")

    monkeypatch.setattr(
        directory.FileSystems, "create", lambda path, *a, **k: DiskFull(real_create(path, *a, **k))
    )
    out = tmp_path / "out"
    with pytest.raises(directory.OutputNotWritableError) as refusal:
        directory.check_writable(str(out))
    assert str(refusal.value) == (f"cannot write to {out}: [Errno 28] No space left on device")
    assert list(out.iterdir()) == []


def test_output_location_that_is_a_file_gives_a_clear_error(tree, tmp_path, capsys):
    out = tmp_path / "a_file"
    out.write_text("not a directory")
    code = build_tool.main(["--input_dir", str(tree), "--output_dir", str(out)])
    assert code == 2
    assert capsys.readouterr().err == (
        f"error: cannot write to {out}: {out} is a file, not a directory\n"
    )
    code = build_tool.main(["--input_dir", str(out), "--output_dir", str(tmp_path / "build")])
    assert code == 2
    assert capsys.readouterr().err == (
        f"error: --input_dir {out} is a file: pass the directory that holds the tree (Data/ and "
        "Annotations/, or VOC's JPEGImages/ and ImageSets/)\n"
    )


KILL_ARGS = [
    "--num_shards",
    "train=6,val=2",
    "--image_policy",
    "exact",
    "--image_size",
    "512x512",
    "--direct_running_mode",
    "multi_processing",
    "--direct_num_workers",
    "2",
]
SDK_WORKER = "apache_beam.runners.worker.sdk_worker_main"  # the module a worker process runs
KILL_POINTS = {
    # The output directory exists: the pipeline is starting (listing, labelling, ranking).
    "before_any_output": lambda out: out.is_dir(),
    # A shard is being streamed into .tmp/.
    "while_writing": lambda out: any((out / ".tmp").glob("*.tfrecord.*")),
    # At least one finished shard has been renamed into place.
    "after_first_shard": lambda out: any(out.glob("*.tfrecord")),
}


def kill_build_when(argv, condition):
    """Starts a CLI build, SIGKILLs its whole process group once `condition()` holds."""
    process = subprocess.Popen(
        [sys.executable, "-m", "beam_pipeline", *argv],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while not condition() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    os.killpg(process.pid, signal.SIGKILL)  # the launcher and its DirectRunner workers
    process.wait()
    assert process.returncode == -signal.SIGKILL, "the build finished before it could be killed"


@pytest.fixture(scope="module")
def kill_tree(tmp_path_factory):
    """Large enough that a kill lands while shards are still being written, with margin."""
    root = tmp_path_factory.mktemp("kill_tree")
    sample_tree.write_tree(str(root), num_train=150, num_val=30, seed=5)
    return root


@pytest.fixture(scope="module")
def kill_reference(kill_tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("kill_reference")
    build(kill_tree, out, *KILL_ARGS)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_sigkill_leaves_nothing_the_loader_accepts_and_a_rerun_matches(
    kill_tree, kill_reference, tmp_path, point
):
    out = tmp_path / "out"
    argv = ["--input_dir", str(kill_tree), "--output_dir", str(out), *KILL_ARGS]
    kill_build_when(argv, lambda: KILL_POINTS[point](out))
    assert not (out / BUILD_INFO_FILE).exists()
    tf = pytest.importorskip("tensorflow")  # noqa: F841 - the loader needs it
    from loaders import IncompleteDatasetError, load_dataset

    with pytest.raises(IncompleteDatasetError):
        load_dataset(str(out), "train", batch_size=2)
    assert (
        build_tool.main(argv) == 0
    )  # a plain rerun: no --overwrite needed for an incomplete build
    assert files(out) == files(kill_reference)


@pytest.mark.slow
@pytest.mark.parametrize(
    "when, stop",
    [
        ("workers_started", signal.SIGKILL),
        ("while_writing", signal.SIGKILL),
        ("while_writing", signal.SIGINT),
    ],
)
def test_a_killed_worker_process_fails_the_build_loudly_and_resume_matches(
    kill_tree, kill_reference, tmp_path, when, stop
):
    # From the chaos campaign (benchmarks/chaos.py): with one of its worker processes SIGKILLed
    # (as the kernel's out-of-memory killer does), Beam's local runner waited for that worker's
    # answer forever: the build never ended. A worker a SIGINT ended, the build's main thread
    # taking none (a Ctrl-C's handler late on a loaded machine, a trial's 1 in 20): the build
    # said BUILD FAILED, the worker lost, and to rerun without --resume; it is interrupted.
    psutil = pytest.importorskip("psutil")
    out = tmp_path / "out"
    argv = ["--input_dir", str(kill_tree), "--output_dir", str(out), *KILL_ARGS]
    process = subprocess.Popen(
        [sys.executable, "-m", "beam_pipeline", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )

    def workers():
        # A worker is started as `sh -c "python -m ...sdk_worker_main"`: until the launcher's
        # fork has exec'd the shell it is a process named python too (the race that counted one
        # worker twice). Only a python process whose command line runs the SDK worker counts.
        found = []
        for child in psutil.Process(process.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                line = child.cmdline()
                if child.name().startswith("python") and SDK_WORKER in line:
                    found.append(child)
        return found

    ready = {
        "workers_started": lambda: len(workers()) == 2,
        **{name: (lambda point=point: point(out)) for name, point in KILL_POINTS.items()},
    }[when]
    try:
        deadline = time.monotonic() + 120
        while not ready() and time.monotonic() < deadline:
            time.sleep(0.005)
        assert len(workers()) == 2
        worker = workers()[0]
        if stop == signal.SIGINT:  # as a Ctrl-C reaches it: with the shell that started it
            worker.parent().send_signal(stop)
        worker.send_signal(stop)
        printed, _ = process.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):  # what is left of it
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    lines = printed.splitlines()
    if stop == signal.SIGINT:
        assert process.returncode == 130, printed
        assert re.fullmatch(
            r"BUILD INTERRUPTED: nothing was committed(, and no shard was written yet; rerun "
            r"the same command|; rerun with --resume to keep the [1-8] shards? already written)",
            lines[-2],
        ), printed
        assert "BUILD FAILED" not in printed and "Traceback" not in printed, printed
        assert build_tool.main([*argv, "--resume"]) == 0
        assert files(out) == files(kill_reference)
        return
    assert process.returncode == 1, printed
    assert re.fullmatch(
        r"BUILD FAILED: a worker process of the build ended before the build did \(exit code "
        r"(137|-9), SIGKILL: killed by `kill -9` or by the kernel's out-of-memory killer; dmesg "
        r"tells which\)",
        lines[1],
    ), printed
    assert lines[2:] == [
        "nothing was committed, and no shard was written yet; rerun the same command"
        if when == "workers_started"
        else lines[2],
        lines[-1],
    ] and lines[-1].startswith("full log: "), printed
    assert not (out / BUILD_INFO_FILE).exists()
    assert build_tool.main([*argv, "--resume"]) == 0
    assert files(out) == files(kill_reference)


@pytest.mark.slow
def test_resume_rewrites_only_missing_or_damaged_shards(kill_tree, kill_reference, tmp_path):
    out = tmp_path / "out"
    argv = ["--input_dir", str(kill_tree), "--output_dir", str(out), *KILL_ARGS]

    def recorded():
        return sorted(p.name[: -len(".json")] for p in (out / ".progress").glob("*.json"))

    kill_build_when(argv, lambda: len(recorded()) >= 3)
    finished = recorded()
    assert 3 <= len(finished) < 8 and not (out / BUILD_INFO_FILE).exists()
    damaged = out / finished[0]
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    inodes = {name: (out / name).stat().st_ino for name in finished}

    assert build_tool.main([*argv, "--resume"]) == 0

    assert files(out) == files(kill_reference)
    for name in finished[1:]:  # intact: kept, not rewritten
        assert (out / name).stat().st_ino == inodes[name], name
    assert (out / finished[0]).stat().st_ino != inodes[finished[0]]  # damaged: rewritten


def built_files(out):
    """The build's own files: `files` but the work folders."""
    return {name: data for name, data in files(out).items() if not name.startswith(".")}


@pytest.mark.slow
def test_a_rebuild_killed_while_writing_keeps_the_old_build_and_resumes(
    kill_tree, kill_reference, tmp_path, capsys
):
    # --overwrite deleted the old build once the new build's index passed: a rebuild killed
    # while writing its shards left no build at all. It is now kept until the commit, and
    # --overwrite --resume keeps the shards the killed rebuild staged.
    out, reference = tmp_path / "out", tmp_path / "reference"
    shutil.copytree(kill_reference, out)
    old = built_files(out)
    flags = ["--input_dir", str(kill_tree), *KILL_ARGS, "--seed", "1"]
    argv = [*flags, "--output_dir", str(out)]

    def recorded():
        return sorted(p.name[: -len(".json")] for p in (out / ".progress").glob("*.json"))

    kill_build_when([*argv, "--overwrite"], lambda: len(recorded()) >= 3)
    finished = recorded()
    assert 3 <= len(finished) < 8
    assert built_files(out) == old and verify.verify(str(out)) == (8, [])
    # A shard is renamed into .staged/ before its record is written: one a worker had just
    # finished may have none.
    staged = sorted(p.name for p in (out / ".staged").glob("*.tfrecord"))
    assert set(finished) <= set(staged) and len(staged) - len(finished) <= 2
    inodes = {name: (out / ".staged" / name).stat().st_ino for name in finished}
    assert verify.main([str(out), "--workers", "1"]) == 0
    assert (
        capsys.readouterr()
        .out.splitlines()[-1]
        .startswith(f"note: {out}/.staged holds {len(staged)} shards (")
    )
    assert build_tool.main([*argv, "--resume"]) == 2  # the complete build needs --overwrite
    assert capsys.readouterr().err.endswith(
        "(--overwrite --resume, with the flags of the rebuild that stopped, keeps the "
        f"{len(staged)} shards it staged in .staged/)\n"
    )

    assert build_tool.main([*argv, "--overwrite", "--resume"]) == 0

    assert build_tool.main([*flags, "--output_dir", str(reference)]) == 0
    assert files(out) == files(reference) != old  # the work folders are gone too
    for name in finished:  # recorded: kept, moved into place, not rewritten
        assert (out / name).stat().st_ino == inodes[name], name


def test_resume_removes_the_shards_of_an_attempt_with_other_options(tree, tmp_path):
    # An interrupted build with 8 train shards, resumed with 2: its shards are not this build's.
    reference, out = tmp_path / "reference", tmp_path / "out"
    argv = ["--input_dir", str(tree), "--num_shards", "train=2,val=1"]
    assert build_tool.main([*argv, "--output_dir", str(reference)]) == 0
    out.mkdir()
    (out / directory.OWNER_FILE).write_bytes((reference / directory.OWNER_FILE).read_bytes())
    for name in ("train-00003-of-00008.tfrecord", "validation-00000-of-00004.tfrecord"):
        (out / name).write_bytes(b"left by an attempt with --num_shards train=8,val=4")
    (out / "notes.txt").write_text("not ours: kept")
    assert build_tool.main([*argv, "--output_dir", str(out), "--resume"]) == 0
    assert files(out) == {**files(reference), "notes.txt": b"not ours: kept"}


def same_size_jpeg(path, colour) -> bytes:
    """Another picture of the JPEG at `path`'s dimensions, in exactly as many bytes (a comment
    pads it)."""
    import io

    from PIL import Image

    stream, size = io.BytesIO(), path.stat().st_size
    with Image.open(path) as image:
        Image.new("RGB", image.size, colour).save(stream, "JPEG", quality=90)
    data = stream.getvalue()
    padding = size - len(data) - 4  # the comment segment: marker and length, then its text
    assert 0 <= padding < 65533
    return data[:2] + b"\xff\xfe" + (padding + 2).to_bytes(2, "big") + b" " * padding + data[2:]


def test_resume_writes_again_the_shard_of_an_image_replaced_by_one_of_its_size_and_time(
    tree, tmp_path, monkeypatch
):
    root, out, reference = tmp_path / "tree", tmp_path / "out", tmp_path / "reference"
    shutil.copytree(tree, root)
    args = ["--num_shards", "train=3,val=2"]
    monkeypatch.setattr(commit, "commit", lambda *a, **k: sys.exit("stopped before the commit"))
    with pytest.raises(SystemExit):
        build(root, out, *args)
    monkeypatch.undo()
    assert len(list((out / ".progress").glob("*.json"))) == 5
    image = next(root.glob("Data/DET/train/*/*000007.JPEG"))
    before = image.stat()
    image.write_bytes(same_size_jpeg(image, (200, 30, 30)))
    # given its old modification time back, as `cp -p` and `touch -r` do (once kept stale)
    os.utime(image, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (image.stat().st_size, image.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)

    build(root, out, *args, "--resume")
    build(root, reference, *args)
    assert built_files(out) == built_files(reference)


@pytest.mark.parametrize("swap", ["links", "folders"])
def test_resume_writes_again_a_shard_whose_path_leads_to_another_file_of_its_size_and_time(
    tmp_path, monkeypatch, swap
):
    # A trial's: a link pointed at another picture, or two class folders swapped by renames,
    # sets no file's time; written in one burst, files of one size share their ctime. The
    # resumed build kept the shard, each record the other class's picture, and verify said OK.
    import io

    from PIL import Image

    root, out, reference = tmp_path / "tree", tmp_path / "out", tmp_path / "reference"
    store = tmp_path / "store" if swap == "links" else root
    paths = [store / f"{c}/{i}.bmp" for c in ("cat", "dog") for i in range(2)]
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
    pictures = []
    for number in range(4):
        stream = io.BytesIO()
        Image.new("RGB", (32, 32), (60 * number, 40, 200 - 40 * number)).save(stream, "BMP")
        pictures.append(stream.getvalue())
    for path, data in zip(
        paths, pictures, strict=True
    ):  # one burst, no stat between: one coarse ctime
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
        os.write(fd, data)
        os.close(fd)
    if len({path.stat().st_ctime_ns for path in paths}) > 1:
        pytest.skip("this file system gave the four files different ctimes")
    if swap == "links":
        for path in paths:
            (root / path.relative_to(store)).parent.mkdir(parents=True, exist_ok=True)
            (root / path.relative_to(store)).symlink_to(path)
    monkeypatch.setattr(commit, "commit", lambda *a, **k: sys.exit("stopped before the commit"))
    with pytest.raises(SystemExit):
        build(root, out)
    monkeypatch.undo()
    if swap == "links":  # cat/0.bmp <-> dog/0.bmp
        for name, target in (("cat/0.bmp", "dog/0.bmp"), ("dog/0.bmp", "cat/0.bmp")):
            (root / name).unlink()
            (root / name).symlink_to(store / target)
    else:
        (root / "cat").rename(root / "was_cat")
        (root / "dog").rename(root / "cat")
        (root / "was_cat").rename(root / "dog")
    build(root, out, "--resume")
    build(root, reference)
    assert built_files(out) == built_files(reference)


FOREIGN = {
    "coco-00000-of-00004.tfrecord": b"another dataset's shard",
    "train-00000-of-00001.tfrecord": b"someone's shard",
    "labels.txt": b"my labels",
    "dataset_info.json": b'{"name": "my_tfds_dataset"}',
    ".tmp/cache/scratch.bin": b"a tool's scratch",
    ".progress/notes.json": b"{}",
}


@pytest.mark.parametrize("flags", [[], ["--overwrite"], ["--resume"]])
def test_files_no_build_wrote_are_never_replaced_or_deleted(tree, tmp_path, capsys, flags):
    # A directory holding other files of the names a build writes or deletes: the build
    # replaced or deleted them all, exit 0, with any flag.
    out = tmp_path / "shared"
    for name, data in {**FOREIGN, "keep.txt": b"other names were always kept"}.items():
        write(out / name, data)
    before = files(out)
    argv = ["--input_dir", str(tree), "--output_dir", str(out), *flags]
    assert plan_tool.main(argv) == 1
    refusal = (
        f"{out} holds files that a build would replace or delete, and no build of "
        "imagenet-tfrecords wrote them: coco-00000-of-00004.tfrecord, dataset_info.json, "
        "labels.txt, train-00000-of-00001.tfrecord and 2 more; choose an empty or new "
        "--output_dir, or move them away (--overwrite and --resume replace only a build's own "
        "files; if an earlier version of imagenet-tfrecords, which did not mark its "
        f"directories, wrote them: touch {out}/.imagenet-tfrecords and rerun)"
    )
    assert capsys.readouterr().out.splitlines()[-1] == f"The build would be refused: {refusal}"
    assert build_tool.main(argv) == 2
    assert capsys.readouterr().err == f"error: {refusal}\n"
    assert files(out) == before
    # Other names alone are no obstacle, and are kept; the build marks the directory its own.
    for name in FOREIGN:
        (out / name).unlink()
    assert build_tool.main(argv) == 0
    assert (out / "keep.txt").read_bytes() == b"other names were always kept"
    assert (out / directory.OWNER_FILE).is_file()
    rebuild = ["--input_dir", str(tree), "--output_dir", str(out), "--overwrite"]
    assert build_tool.main(rebuild) == 0  # and replaces its own build


@pytest.mark.parametrize("trace", ["progress record", "rejected.jsonl"])
def test_an_unfinished_build_of_a_version_without_the_mark_is_still_its_own(tree, tmp_path, trace):
    # Interrupted or failed before this version: shards and what the build wrote first.
    out = tmp_path / "out"
    argv = ["--input_dir", str(tree), "--output_dir", str(out)]
    assert build_tool.main(argv) == 0
    reference = files(out)
    for name in (directory.OWNER_FILE, BUILD_INFO_FILE, "dataset_info.json", "labels.txt"):
        (out / name).unlink()
    if trace == "progress record":
        (out / "rejected.jsonl").unlink()
        record = {"fingerprint": "of an older build", "result": {}, "rejections": []}
        write(out / ".progress" / "train-00000-of-00001.tfrecord.json", json.dumps(record))
    else:
        line = {"split": "train", "path": "x", "stage": "image", "reason": "truncated_image"}
        write(out / "rejected.jsonl", json.dumps({**line, "detail": "", "is_image": True}))
    assert build_tool.main([*argv, "--resume"]) == 0
    assert files(out) == reference


def test_a_build_killed_as_it_marked_its_directory_is_rerun(tree, tmp_path):
    # SIGKILL between writing the mark's temp file and its rename left `.tmp/` holding the mark
    # alone, and the rerun refused it as files no build wrote (a fresh-clone run's flake).
    out = tmp_path / "out"
    argv = ["--input_dir", str(tree), "--output_dir", str(out)]
    assert build_tool.main(argv) == 0
    reference = files(out)
    shutil.rmtree(out)
    write(out / ".tmp" / f"{directory.OWNER_FILE}.cfff95483fc148478055d20041670c12", b"")
    assert build_tool.main(argv) == 0
    assert files(out) == reference


def test_a_second_build_into_a_directory_being_written_is_refused(tree, tmp_path, capsys):
    # A build in another process holds the output's lock; the second deletes nothing.
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_AND_WAIT, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "locked\n"
        (out / "train-00000-of-00001.tfrecord").write_bytes(b"being written")
        argv = ["--input_dir", str(tree), "--output_dir", str(out)]
        for extra in ([], ["--overwrite"], ["--resume"]):
            assert build_tool.main([*argv, *extra]) == 2
            assert capsys.readouterr().err == (
                f"error: another build is writing to {out}; wait for it to end, or choose "
                "another --output_dir\n"
            )
        assert (out / "train-00000-of-00001.tfrecord").read_bytes() == b"being written"
        # plan foresees the refusal, and its look at the lock leaves it held.
        assert plan_tool.main(argv) == 1
        assert capsys.readouterr().out.splitlines()[-1] == (
            f"The build would be refused: another build is writing to {out}; wait for it to "
            "end, or choose another --output_dir"
        )
        assert build_tool.main(argv) == 2
        assert "another build is writing" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
    assert plan_tool.main(argv) == 0
    assert build_tool.main(argv) == 0  # the lock dies with its process
    assert build_tool.main([*argv, "--overwrite"]) == 0  # and this process takes it again


LOCK_AND_WAIT = """
import sys, time
from beam_pipeline.output import commit, directory
directory.prepare_output(sys.argv[1], overwrite=False, resume=False)  # locks it, as a build does
print("locked", flush=True)
time.sleep(600)
"""


def test_a_resume_from_the_tree_moved_names_its_rejections_where_the_tree_is(
    tree, tmp_path, monkeypatch
):
    root, out = tmp_path / "tree", tmp_path / "out"
    shutil.copytree(tree, root)
    bad = next(root.glob("Data/DET/train/*/*000003.JPEG"))
    bad.write_bytes(bad.read_bytes()[:200])
    args = ["--num_shards", "train=3,val=2", "--max_bad_fraction", "0.1"]
    monkeypatch.setattr(commit, "commit", lambda *a, **k: sys.exit("stopped before the commit"))
    with pytest.raises(SystemExit):
        build(root, out, *args)
    monkeypatch.undo()
    moved = tmp_path / "moved"
    shutil.move(root, moved)
    build(moved, out, *args, "--resume")
    (line,) = (out / "rejected.jsonl").read_text().splitlines()
    assert json.loads(line)["path"] == str(moved / bad.relative_to(root))
