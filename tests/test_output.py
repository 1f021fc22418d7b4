"""The output directory's helpers: temp-then-rename, the commit files, the shard check."""

import hashlib
import logging
import os
import signal
import threading
import time

import pytest
from apache_beam.io.filesystems import FileSystems

from beam_pipeline import interrupts
from beam_pipeline.core.rejections import IMAGE, Rejection
from beam_pipeline.failures import BuildFailed
from beam_pipeline.output import commit, directory, lock
from schemas import DatasetInfo, ShardInfo, SplitInfo


def test_incomplete_file_renames_into_place_only_when_the_block_completes(tmp_path):
    with directory.incomplete_file(str(tmp_path), "train-00000-of-00001.tfrecord") as temp:
        assert temp.startswith(f"{tmp_path}/.tmp/train-00000-of-00001.tfrecord.")
        with open(temp, "wb") as f:
            f.write(b"records")
        assert not (tmp_path / "train-00000-of-00001.tfrecord").exists()
    assert (tmp_path / "train-00000-of-00001.tfrecord").read_bytes() == b"records"
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_incomplete_file_removes_its_temp_file_when_the_block_fails(tmp_path):
    with (
        pytest.raises(RuntimeError, match="disk on fire"),
        directory.incomplete_file(str(tmp_path), "labels.txt") as temp,
    ):
        with open(temp, "wb") as f:
            f.write(b"half")
        raise RuntimeError("disk on fire")
    assert not (tmp_path / "labels.txt").exists()
    assert list((tmp_path / ".tmp").iterdir()) == []


def test_each_attempt_has_its_own_temp_name(tmp_path):
    with directory.incomplete_file(str(tmp_path), "a") as first:
        with directory.incomplete_file(str(tmp_path), "a") as second:
            assert first != second
            open(second, "wb").close()
        open(first, "wb").close()


def test_write_atomic_creates_subdirectories_and_replaces_whole(tmp_path):
    directory.write_atomic(str(tmp_path), ".progress/x.json", b"one")
    directory.write_atomic(str(tmp_path), ".progress/x.json", b"two")
    assert (tmp_path / ".progress" / "x.json").read_bytes() == b"two"


# What a commit writes besides the shards, sorted.
COMMITTED = [
    "build_info.json",
    "dataset_info.json",
    "features.json",
    "image.class.label.labels.txt",
    "image.object.class.label.labels.txt",
    "label_map.csv",
    "label_map.pbtxt",
    "labels.txt",
    "rejected.jsonl",
]


def info(*shards: ShardInfo) -> DatasetInfo:
    count = sum(s.num_examples for s in shards)
    split = SplitInfo(count, count, 0, (count, 0), shards)
    return DatasetInfo("1.0.0", ("cat",), {"train": split}, {}, {}, {}, {})


def test_check_shard_files_names_a_missing_or_resized_shard(tmp_path):
    (tmp_path / "train-00000-of-00002.tfrecord").write_bytes(b"12345")
    (tmp_path / "train-00001-of-00002.tfrecord").write_bytes(b"123")
    good = ShardInfo("train-00000-of-00002.tfrecord", 1, 5, "x")
    commit.check_shard_files(str(tmp_path), info(good))
    with pytest.raises(
        BuildFailed, match=r"train-00001-of-00002\.tfrecord: expected 4 bytes, found 3"
    ):
        commit.check_shard_files(
            str(tmp_path), info(good, ShardInfo("train-00001-of-00002.tfrecord", 1, 4, "y"))
        )
    with pytest.raises(
        BuildFailed, match=r"train-00000-of-00001\.tfrecord: expected 5 bytes, found no file"
    ):
        commit.check_shard_files(
            str(tmp_path), info(ShardInfo("train-00000-of-00001.tfrecord", 1, 5, "z"))
        )


def test_commit_writes_labels_then_the_marker_and_clears_the_work_dirs(tmp_path):
    commit.write_dead_letter(
        str(tmp_path), [Rejection("train", "/t/a.JPEG", IMAGE, "truncated_image", "cut")]
    )
    directory.write_atomic(str(tmp_path), ".progress/s.json", b"{}")
    committed = info(ShardInfo("train-00000-of-00001.tfrecord", 1, 5, "x"))
    commit.commit(str(tmp_path), committed)
    assert sorted(p.name for p in tmp_path.iterdir()) == COMMITTED
    assert (tmp_path / "labels.txt").read_text() == "cat\n"
    assert DatasetInfo.from_json((tmp_path / "build_info.json").read_text()) == committed
    assert (tmp_path / "rejected.jsonl").read_text() == (
        '{"detail": "cut", "is_image": true, "path": "/t/a.JPEG", "reason": "truncated_image", '
        '"split": "train", "stage": "image"}\n'
    )


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")  # that drop
def test_a_ctrl_c_dropped_on_the_way_still_stops_the_commit(tmp_path):
    # Python prints and drops a KeyboardInterrupt raised in a finalizer (a `__del__`); the
    # build would then go on to commit. The handler remembers it, and the commit refuses.
    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler runs here and raises; Python drops it

    committed = info(ShardInfo("train-00000-of-00001.tfrecord", 1, 5, "x"))
    with interrupts.interrupts_remembered():
        Finalized()  # collected at once: the interrupt is raised inside __del__ and dropped
        with pytest.raises(KeyboardInterrupt, match="Ctrl-C before the commit"):
            commit.commit(str(tmp_path), committed)
    assert not (tmp_path / "build_info.json").exists()
    commit.commit(str(tmp_path), committed)  # outside it, and the next build, commit as usual
    assert (tmp_path / "build_info.json").exists()


def test_a_staged_commit_replaces_the_old_build_with_the_staged_shards(tmp_path):
    # A rebuild stages its shards and dead letter beside the complete build it replaces; the
    # commit deletes the old build's files (its shard of another name too) and moves them in.
    old = ("build_info.json", "labels.txt", "rejected.jsonl", "train-00000-of-00001.tfrecord")
    for name in old:
        (tmp_path / name).write_text("old")
    (tmp_path / ".imagenet-tfrecords").write_text("mark")
    staged = tmp_path / ".staged"
    staged.mkdir()
    for name, data in (
        ("train-00000-of-00002.tfrecord", b"12345"),
        ("train-00001-of-00002.tfrecord", b"123"),
    ):
        (staged / name).write_bytes(data)
    (staged / "train-00005-of-00009.tfrecord").write_bytes(b"an earlier attempt's")
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "rejected.jsonl").write_text("new")
    new = info(
        ShardInfo("train-00000-of-00002.tfrecord", 1, 5, "x"),
        ShardInfo("train-00001-of-00002.tfrecord", 1, 3, "y"),
    )
    listed = commit.check_shard_files(str(tmp_path), new, staged=True)
    with pytest.raises(BuildFailed, match=r"train-00000-of-00002\.tfrecord: expected 5 bytes"):
        commit.check_shard_files(str(tmp_path), new)  # none of the new ones is in place yet
    commit.commit(str(tmp_path), new, listed, staged=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [".imagenet-tfrecords", *COMMITTED, *(shard.file for shard in new.splits["train"].shards)]
    )
    assert (tmp_path / "train-00000-of-00002.tfrecord").read_bytes() == b"12345"
    assert (tmp_path / "rejected.jsonl").read_text() == "new"
    assert (tmp_path / "labels.txt").read_text() == "cat\n"


def test_a_thread_that_fails_just_before_the_stopping_signal_is_handled_is_logged(capfd, caplog):
    # A Ctrl-C reaches the worker processes too: a runner thread could fail for a worker
    # that ended before the main thread ran its handler, and its traceback reached the console.
    def runner_thread():
        raise ConnectionError("Worker subprocess exited with return code -2")

    caplog.set_level(logging.INFO, logger=interrupts.__name__)
    with interrupts.interrupts_remembered():
        thread = threading.Thread(target=runner_thread, name="run_worker")
        thread.start()
        time.sleep(0.3)  # the thread has failed; the main thread takes the signal only now
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        thread.join()
    assert capfd.readouterr().err == ""
    assert [r.getMessage() for r in caplog.records] == [
        "A worker process ended by SIGINT",
        "After the interruption, run_worker failed",
    ]


def staged_rebuild(tmp_path):
    """An old build and a rebuild's two staged shards and dead letter: (the rebuild's info,
    its shards' bytes)."""
    for name in ("build_info.json", "labels.txt", "train-00000-of-00001.tfrecord"):
        (tmp_path / name).write_text("old")
    new = {"train-00000-of-00002.tfrecord": b"12345", "train-00001-of-00002.tfrecord": b"123"}
    (tmp_path / ".staged").mkdir()
    for name, data in new.items():
        (tmp_path / ".staged" / name).write_bytes(data)
    (tmp_path / ".tmp").mkdir()
    (tmp_path / ".tmp" / "rejected.jsonl").write_text("new")
    shards = [
        ShardInfo(name, 1, len(data), hashlib.sha256(data).hexdigest())
        for name, data in new.items()
    ]
    return info(*shards), new


def test_a_staged_commit_never_leaves_a_reused_shard_name_missing(tmp_path, monkeypatch):
    # The commit deleted every old shard, then moved the new ones in: a reader that checked a
    # shard just before opened a missing name, and TensorFlow's reader retried it forever.
    new_info, new = staged_rebuild(tmp_path)
    reused = "train-00001-of-00002.tfrecord"
    (tmp_path / reused).write_text("old")
    real_rename = FileSystems.rename
    seen = []

    def rename(sources, destinations):
        if "/.staged/" in sources[0]:
            seen.append(sorted(p.name for p in tmp_path.glob("*")))
        return real_rename(sources, destinations)

    monkeypatch.setattr(FileSystems, "rename", rename)
    listed = commit.check_shard_files(str(tmp_path), new_info, staged=True)
    commit.commit(str(tmp_path), new_info, listed, staged=True)
    # The old build's markers and its shard of another name are gone, its reused name is not.
    assert seen == [[".staged", ".tmp", reused]]
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.tfrecord")} == new


def test_a_staged_commit_that_stopped_while_moving_is_finished_by_a_retry(tmp_path, monkeypatch):
    # Dataflow retries a failed step, Dask reruns a lost worker's task: the retry found the
    # shards already moved missing from .staged/, and failed with the old build deleted.
    new_info, new = staged_rebuild(tmp_path)
    real_rename = FileSystems.rename

    def moves_one_then_fails(sources, destinations):
        if "/.staged/" not in sources[0]:  # a file written through .tmp/
            return real_rename(sources, destinations)
        real_rename(sources[:1], destinations[:1])
        raise OSError("injected: the worker was lost")

    with monkeypatch.context() as patch:
        patch.setattr(FileSystems, "rename", moves_one_then_fails)
        listed = commit.check_shard_files(str(tmp_path), new_info, staged=True)
        with pytest.raises(OSError, match="injected"):
            commit.commit(str(tmp_path), new_info, listed, staged=True)
    assert not (tmp_path / "build_info.json").exists()
    assert (tmp_path / "train-00000-of-00002.tfrecord").read_bytes() == b"12345"
    assert not commit.committed_already(str(tmp_path), new_info)
    # The retry: the moved shard counts as in place, and the old build is not retired again.
    listed = commit.check_shard_files(str(tmp_path), new_info, staged=True)
    commit.commit(str(tmp_path), new_info, listed, staged=True)
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.tfrecord")} == new
    assert (tmp_path / "rejected.jsonl").read_text() == "new"
    assert not (tmp_path / ".staged").exists() and not (tmp_path / ".tmp").exists()
    # A retry after the commit finished has nothing to do; a rebuild staged anew has.
    assert commit.committed_already(str(tmp_path), new_info)
    (tmp_path / ".staged").mkdir()
    (tmp_path / ".staged" / "train-00001-of-00002.tfrecord").write_bytes(b"123")
    assert not commit.committed_already(str(tmp_path), new_info)


def test_resume_moves_the_shards_a_rebuild_staged_before_its_commit_stopped(tmp_path):
    # The old build retired, the commit stopped: --resume rewrote every shard still staged.
    _, new = staged_rebuild(tmp_path)
    (tmp_path / "build_info.json").unlink()
    (tmp_path / ".imagenet-tfrecords").write_text("mark")
    assert directory.prepare_output(str(tmp_path), overwrite=False, resume=True) is False
    lock.unlock_output(str(tmp_path))
    assert {p.name: p.read_bytes() for p in tmp_path.glob("*.tfrecord")} == {
        "train-00000-of-00001.tfrecord": b"old",  # not the new plan's: gone at the commit
        **new,
    }
    assert not (tmp_path / ".staged").exists()


def test_resume_alone_beside_a_stopped_rebuild_names_overwrite_resume(tmp_path):
    new_info, _ = staged_rebuild(tmp_path)
    (tmp_path / "build_info.json").write_text(new_info.to_json())
    with pytest.raises(directory.OutputExistsError) as refused:
        directory.prepare_output(str(tmp_path), overwrite=False, resume=True)
    assert str(refused.value) == (
        f"{tmp_path} already holds a complete build; pass --overwrite to replace it "
        "(--overwrite --resume, with the flags of the rebuild that stopped, keeps the 2 shards it "
        "staged in .staged/)"
    )
