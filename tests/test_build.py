"""End-to-end DirectRunner builds, re-read record by record."""

import hashlib
import itertools
import json
import pathlib
import re
import shutil

import numpy as np
import pytest
from apache_beam.io.filesystems import FileSystems
from helpers import (
    CORPUS,
    build,
    dead_letters,
    decode,
    failure_line,
    ilsvrc_image,
    jpeg_bytes,
    read_split,
    write,
)
from PIL import Image

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.failures import BuildFailed
from beam_pipeline.output import commit, directory
from beam_pipeline.output.directory import OutputExistsError
from beam_pipeline.stages import finalize
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import commands, sample_tree, verify
from beam_pipeline.tree.layouts import LayoutError
from beam_pipeline.tree.refusals import unannotated_det_folders
from schemas import BUILD_INFO_FILE, LABELS_FILE
from schemas import features as F

PILLOW = CORPUS / "images" / "pillow"
CLASSES = list(sample_tree.CLASSES)
DIRTY_ARGS = ("--num_shards", "train=4,val=3", "--max_bad_fraction", "0.2")


@pytest.fixture(scope="module")
def dirty_tree(tmp_path_factory):
    """The learnable sample (60 train, 20 val) plus real-world dirty files."""
    root = tmp_path_factory.mktemp("tree")
    images = sample_tree.write_tree(str(root), num_train=60, num_val=20, seed=3)
    named = CORPUS / "ilsvrc_named_copies/Data/CLS-LOC/train"
    extras = {
        "dirty/cmyk": (
            (named / "n01739381/n01739381_1309.JPEG").read_bytes(),
            [("circle", 10, 10, 60, 60)],
        ),
        "dirty/png_named_jpeg": ((named / "n02105855/n02105855_2933.JPEG").read_bytes(), None),
        "dirty/gray": ((PILLOW / "hopper_gray.jpg").read_bytes(), [("square", 0, 0, 128, 128)]),
        "dirty/truncated": (
            (PILLOW / "truncated_jpeg.jpg").read_bytes(),
            [("cross", 1, 1, 50, 50)],
        ),
        "dirty/empty": (b"", None),
        "dirty/text": (b"not an image", None),
    }
    for stem, (data, objects) in extras.items():
        xml = (
            voc_xml(objects, size=(100, 100) if stem == "dirty/cmyk" else None) if objects else None
        )
        ilsvrc_image(root, "train", stem, data, xml)
    ilsvrc_image(root, "train", "dirty/malformed_xml", jpeg_bytes(), "<annotation><object>")
    ilsvrc_image(root, "val", "unknown_class", jpeg_bytes(), voc_xml([("unicorn", 1, 1, 9, 9)]))
    return root, images


@pytest.fixture(scope="module")
def dirty_build(dirty_tree, tmp_path_factory):
    root, _ = dirty_tree
    out = tmp_path_factory.mktemp("out")
    info = build(root, out, *DIRTY_ARGS, "--seed", "5")
    return out, info


TAKES = "--train takes 1 to 1,000,000 images and --val 0 to 1,000,000"


def test_counts_and_accounting(dirty_build):
    out, info = dirty_build
    train, val = info.splits["train"], info.splits["validation"]
    assert (train.num_discovered, train.num_examples, train.num_rejected) == (67, 63, 4)
    assert (val.num_discovered, val.num_examples, val.num_rejected) == (21, 20, 1)
    assert info.classes == tuple(CLASSES) and info.background_index == 4
    assert info.failures == {
        "empty_file": 1,
        "not_an_image": 1,
        "truncated_image": 1,
        "annotation_malformed": 1,
        "unknown_class": 1,
    }
    assert (out / LABELS_FILE).read_text().splitlines() == CLASSES
    assert not (out / ".tmp").exists()


def test_dead_letters_name_path_stage_and_reason(dirty_build, dirty_tree):
    out, _ = dirty_build
    root = str(dirty_tree[0])
    got = [
        (d["split"], d["path"].replace(root, ""), d["stage"], d["reason"])
        for d in dead_letters(out)
    ]
    assert sorted(got) == [
        (
            "train",
            "/Annotations/DET/train/dirty/malformed_xml.xml",
            "annotation",
            "annotation_malformed",
        ),
        ("train", "/Data/DET/train/dirty/empty.JPEG", "image", "empty_file"),
        ("train", "/Data/DET/train/dirty/text.JPEG", "image", "not_an_image"),
        ("train", "/Data/DET/train/dirty/truncated.JPEG", "image", "truncated_image"),
        ("validation", "/Annotations/DET/val/unknown_class.xml", "label", "unknown_class"),
    ]
    assert all(d["detail"] for d in dead_letters(out))


def test_every_record_matches_what_was_drawn(dirty_build, dirty_tree):
    out, _ = dirty_build
    _, images = dirty_tree
    expected = {
        ("train" if i.split == "train" else "validation", i.relative_stem): i for i in images
    }
    seen = 0
    for split in ("train", "validation"):
        for example in read_split(out, split):
            key = example[F.SOURCE_ID][0].decode()
            split_dir, stem = key.split("/", 1)
            if stem.startswith("dirty/"):
                continue
            image = expected[(split, stem)]
            label = CLASSES.index(image.label) if image.label else 4
            assert example[F.LABEL] == [label]
            assert example[F.LABEL_TEXT] == [(image.label or "background").encode()]
            assert example[F.ONE_HOT] == [int(i == label) for i in range(5)]
            assert example[F.FILENAME] == [f"Data/DET/{split_dir}/{stem}.JPEG".encode()]
            assert example[F.OBJECT_TEXT] == [o.name.encode() for o in image.objects]
            assert example[F.BBOX_XMIN] == pytest.approx(
                [o.box[0] / image.width for o in image.objects]
            )
            assert example[F.BBOX_YMAX] == pytest.approx(
                [o.box[3] / image.height for o in image.objects]
            )
            pixels = decode(example)
            assert pixels.shape == (image.height, image.width, 3)
            assert (example[F.HEIGHT], example[F.WIDTH]) == ([image.height], [image.width])
            if image.objects:  # the main object's colour is at its centre
                main = max(
                    image.objects, key=lambda o: (o.box[2] - o.box[0]) * (o.box[3] - o.box[1])
                )
                cx, cy = (main.box[0] + main.box[2]) // 2, (main.box[1] + main.box[3]) // 2
                colour = np.array(sample_tree._COLOURS[main.name])
                assert np.abs(pixels[cy, cx].astype(int) - colour).max() < 40
            seen += 1
    assert seen == 80


def test_dirty_files_are_converted(dirty_build):
    out, _ = dirty_build
    by_key = {e[F.SOURCE_ID][0].decode(): e for e in read_split(out, "train")}
    cmyk = by_key["train/dirty/cmyk"]
    twin = np.asarray(Image.open(PILLOW / "pil_sample_rgb.jpg")).astype(int)
    assert np.abs(decode(cmyk).astype(int) - twin).mean() < 8
    assert cmyk[F.LABEL] == [0]
    assert decode(by_key["train/dirty/png_named_jpeg"]).shape == (128, 128, 3)
    assert by_key["train/dirty/png_named_jpeg"][F.LABEL] == [4]
    gray = decode(by_key["train/dirty/gray"])
    assert gray.shape == (128, 128, 3) and by_key["train/dirty/gray"][F.LABEL] == [2]


def test_shards_are_balanced_and_checksummed(dirty_build):
    out, info = dirty_build
    for split, n in (("train", 4), ("validation", 3)):
        shards = info.splits[split].shards
        assert [s.file for s in shards] == [
            f"{split}-{i:05d}-of-{n:05d}.tfrecord" for i in range(n)
        ]
        for shard in shards:
            data = (out / shard.file).read_bytes()
            assert len(data) == shard.num_bytes
            assert hashlib.sha256(data).hexdigest() == shard.sha256
    # 67 discovered train images → 17,17,17,16 before rejections; 4 were rejected afterwards.
    train_sizes = [s.num_examples for s in info.splits["train"].shards]
    assert sum(train_sizes) == 63 and max(train_sizes) - min(train_sizes) <= 4
    counts = info.splits["train"].class_counts
    labels = [e[F.LABEL][0] for e in read_split(out, "train")]
    assert list(counts) == [labels.count(i) for i in range(5)]


def test_tree_sorted_by_class_comes_out_mixed(tmp_path):
    colours = [(200, 30, 30), (30, 200, 30), (30, 30, 200)]
    for c, name in enumerate(["a", "b", "c"]):
        for i in range(40):
            ilsvrc_image(
                tmp_path / "in",
                "train",
                f"{name}/{name}_{i:03d}",
                jpeg_bytes(16, 16, colours[c]),
                voc_xml([(name, 1, 1, 10, 10)]),
            )
    build(tmp_path / "in", tmp_path / "out", "--splits", "train", "--num_shards", "2")
    labels = [e[F.LABEL][0] for e in read_split(tmp_path / "out", "train")]
    assert sorted(labels) == [0] * 40 + [1] * 40 + [2] * 40
    longest_run = max(len(list(group)) for _, group in itertools.groupby(labels))
    assert longest_run <= 8
    # Each shard holds every class.
    examples = read_split(tmp_path / "out", "train")
    for shard in {e["_shard"] for e in examples}:
        assert {e[F.LABEL][0] for e in examples if e["_shard"] == shard} == {0, 1, 2}


def shard_bytes(out: pathlib.Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.tfrecord"))}


@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [
        ["--direct_running_mode", "multi_threading", "--direct_num_workers", "3"],
        ["--direct_running_mode", "multi_processing", "--direct_num_workers", "2"],
    ],
)
def test_byte_identical_across_runner_modes(dirty_tree, dirty_build, tmp_path, mode):
    root, _ = dirty_tree
    reference, info = dirty_build
    other = build(
        root,
        tmp_path / "out",
        *DIRTY_ARGS,
        "--seed",
        "5",
        *mode,
    )
    assert shard_bytes(tmp_path / "out") == shard_bytes(reference)
    assert (tmp_path / "out" / BUILD_INFO_FILE).read_text() == (
        reference / BUILD_INFO_FILE
    ).read_text()
    assert other == info


def test_seed_changes_order_not_content(dirty_tree, dirty_build, tmp_path):
    root, _ = dirty_tree
    reference, _ = dirty_build
    build(
        root,
        tmp_path / "out",
        *DIRTY_ARGS,
        "--seed",
        "6",
    )
    assert shard_bytes(tmp_path / "out") != shard_bytes(reference)
    ids = lambda out: sorted(e[F.SOURCE_ID][0] for e in read_split(out, "train"))  # noqa: E731
    assert ids(tmp_path / "out") == ids(reference)


def test_existing_build_is_not_overwritten_without_flag(dirty_tree, tmp_path):
    root, _ = dirty_tree
    (tmp_path / "labels.txt").write_text("\n".join(CLASSES) + "\n")
    args = (
        "--splits",
        "val",
        "--labels_file",
        tmp_path / "labels.txt",
        "--max_bad_fraction",
        "0.1",
    )
    build(root, tmp_path / "out", *args)
    first = shard_bytes(tmp_path / "out")
    with pytest.raises(OutputExistsError, match="--overwrite"):
        build(root, tmp_path / "out", *args)
    assert (
        build_tool.main(
            ["--input_dir", str(root), "--output_dir", str(tmp_path / "out"), *map(str, args)]
        )
        == 2
    )
    build(root, tmp_path / "out", *args, "--overwrite", "--num_shards", "1")
    # The size-based default was one shard too: the rebuild gives the same bytes.
    assert list(first) == ["validation-00000-of-00001.tfrecord"]
    assert shard_bytes(tmp_path / "out") == first


@pytest.mark.parametrize("refused_by", ["index", "images"])
def test_a_failed_rebuild_keeps_the_build_it_was_to_replace(tmp_path, capsys, refused_by):
    # --overwrite deleted the old build as the new one started: one refused for classes
    # outside --labels_file, before writing a shard, left none; later, once its index had
    # passed, so did one that failed on images found damaged while writing.
    tree = tmp_path / "in"
    for stem, name in (("a", "cat"), ("b", "dog"), ("c", "dog")):
        ilsvrc_image(tree, "train", stem, jpeg_bytes(), voc_xml([(name, 1, 1, 30, 30)]))
    out = tmp_path / "out"
    build(tree, out, "--splits", "train")
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--splits", "train"]
    if refused_by == "index":
        labels = write(tmp_path / "labels.txt", "cat\n")
        flags, reasons = ["--labels_file", str(labels)], ["unknown_class"] * 2
        failure = "most frequent first: {'dog': 2}"
    else:
        ilsvrc_image(tree, "train", "d", jpeg_bytes()[:200], voc_xml([("cat", 1, 1, 30, 30)]))
        flags, reasons = ["--num_shards", "2"], ["truncated_image"]
        failure = "reasons {'truncated_image': 1}"
    assert build_tool.main([*argv, "--overwrite", *flags]) == 1
    err = capsys.readouterr().err
    see = f"{failure}; see {out}/.tmp/rejected.jsonl"
    if refused_by == "images":  # 1 of 4: the next command is named
        see += (
            "; to commit the build without them, rerun with --max_bad_fraction 0.25 --overwrite "
            "--resume (it keeps the shards written)"
        )
    assert failure_line(err).endswith(see)
    assert err.splitlines()[-2] == f"the complete build in {out} is kept as it was"
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before
    assert verify.verify(str(out)) == (1, [])
    assert [line["reason"] for line in dead_letters(out / ".tmp")] == reasons
    # A rebuild that passes replaces it, leaving none of its files.
    assert (
        build_tool.main([*argv, "--overwrite", "--num_shards", "2", "--max_bad_fraction", "0.5"])
        == 0
    )
    assert sorted(p.name for p in out.glob("*.tfrecord")) == [
        "train-00000-of-00002.tfrecord",
        "train-00001-of-00002.tfrecord",
    ]
    assert not (out / ".tmp").exists() and not (out / ".staged").exists()
    assert verify.verify(str(out)) == (2, [])


COMMIT_BEGUN = (
    "the commit had begun: the build it replaces was deleted, and the new one is not in place; "
    "rerun with --resume to finish it (it keeps every shard already written)"
)


@pytest.mark.parametrize(
    "stop", ["deleting_old_markers", "moving_shards", "writing_tfds_marker", "retried"]
)
def test_a_rebuild_stopped_in_its_commit_says_what_is_left(tmp_path, capsys, monkeypatch, stop):
    # A failure in the commit said "the complete build is kept as it was" when the commit
    # had already deleted it, or written the new build_info.json (the same bytes as the old
    # one's, in a rebuild with the same flags, the usual repair of a damaged shard). A retried
    # commit that had stopped before TFDS's dataset_info.json did not write it, exit 0.
    tree = tmp_path / "in"
    for stem, name in (("a", "cat"), ("b", "dog"), ("c", "dog")):
        ilsvrc_image(tree, "train", stem, jpeg_bytes(), voc_xml([(name, 1, 1, 30, 30)]))
    out, reference = tmp_path / "out", tmp_path / "reference"
    flags = ["--input_dir", str(tree), "--splits", "train", "--num_shards", "2"]
    argv = [*flags, "--output_dir", str(out), "--direct_running_mode", "in_memory"]
    assert build_tool.main([*flags, "--output_dir", str(reference)]) == 0
    shutil.copytree(reference, out)
    real_rename, real_delete, real_write = (
        FileSystems.rename,
        FileSystems.delete,
        directory.write_atomic,
    )
    failed = []

    def rename(sources, destinations):
        if "/.staged/" in sources[0]:
            raise OSError("injected: the disk went away")
        return real_rename(sources, destinations)

    def delete(paths):
        if paths and paths[0].endswith("/build_info.json"):
            real_delete(paths[:1])  # the old build's marker, then not TFDS's
            raise OSError("injected: the disk went away")
        return real_delete(paths)

    def write_atomic(output_dir, name, data):
        if name == "dataset_info.json" and not failed:
            failed.append(name)
            raise OSError("injected: the disk went away")
        return real_write(output_dir, name, data)

    real_process = finalize._FinalizeFn.process

    def retried(self, *args, **kwargs):
        try:
            return list(real_process(self, *args, **kwargs))
        except OSError:
            return list(real_process(self, *args, **kwargs))  # as Dataflow retries a step

    with monkeypatch.context() as patch:
        if stop == "deleting_old_markers":
            patch.setattr(FileSystems, "delete", delete)
        elif stop == "moving_shards":
            patch.setattr(FileSystems, "rename", rename)
        else:
            patch.setattr(commit, "write_atomic", write_atomic)
        if stop == "retried":
            patch.setattr(finalize._FinalizeFn, "process", retried)
            assert build_tool.main([*argv, "--overwrite"]) == 0
        else:
            assert build_tool.main([*argv, "--overwrite"]) == 1
    err = capsys.readouterr().err
    if stop != "retried":
        assert failure_line(err).startswith("BUILD FAILED: OSError: injected: the disk went away")
    if stop in ("deleting_old_markers", "moving_shards"):
        assert err.splitlines()[-2] == COMMIT_BEGUN
        staged = {p.name: p.stat().st_ino for p in (out / ".staged").glob("*.tfrecord")}
        assert len(staged) == 2 and not (out / "build_info.json").exists()
        assert build_tool.main([*argv, "--resume"]) == 0
        assert {p.name: p.stat().st_ino for p in out.glob("*.tfrecord")} == staged  # moved
    elif stop == "writing_tfds_marker":
        assert err.splitlines()[-2] == (
            "the new build was committed (build_info.json is in place), but not all of its "
            f"commit: python -m beam_pipeline upgrade {out} writes what is missing"
        )
        assert commands.main(["upgrade", str(out)]) == 0
    assert verify.verify(str(out)) == (2, [])
    assert {p.relative_to(out) for p in out.rglob("*")} == {
        p.relative_to(reference) for p in reference.rglob("*")
    }
    for name in (*shard_bytes(reference), "build_info.json", "dataset_info.json"):
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name


def test_a_stop_after_the_commit_finished_says_the_build_is_complete(tmp_path):
    # A Ctrl-C during the runner's shutdown, after the commit: "the new build was committed
    # ..., but not all of its commit: ... upgrade writes what is missing", for a whole build.
    tree, out = tmp_path / "in", tmp_path / "out"
    for stem, name in (("a", "cat"), ("b", "dog")):
        ilsvrc_image(tree, "train", stem, jpeg_bytes(), voc_xml([(name, 1, 1, 30, 30)]))
    assert (
        build_tool.main(["--input_dir", str(tree), "--splits", "train", "--output_dir", str(out)])
        == 0
    )
    assert build_tool._what_is_left(str(out), None, interrupted=True) == (
        f"the stop came after the commit: the build in {out} is complete (python -m "
        f"beam_pipeline verify {out} checks every record)"
    )
    (out / "dataset_info.json").unlink()  # (the commit's last file)
    assert build_tool._what_is_left(str(out), None, interrupted=True).startswith(
        "the new build was committed (build_info.json is in place), but not all of its commit"
    )


def test_a_worker_lost_after_the_commit_finished_keeps_the_build_with_exit_0(
    tmp_path, monkeypatch, capsys
):
    # A local worker killed during the runner's shutdown after the commit, or while it wrote
    # what follows build_info.json: exit 1 and "BUILD FAILED" for a whole build (the chaos
    # test's random kills), while one lost before the commit must fail.
    from beam_pipeline import pipeline

    tree, out = tmp_path / "in", tmp_path / "out"
    for stem, name in (("a", "cat"), ("b", "dog")):
        ilsvrc_image(tree, "train", stem, jpeg_bytes(), voc_xml([(name, 1, 1, 30, 30)]))
    argv = ["--input_dir", str(tree), "--splits", "train", "--output_dir", str(out)]
    real_execute = pipeline.execute
    lost = "a worker process of the build ended before the build did (exit code -9, SIGKILL)"

    def execute_then_lose(*args, commit=True):
        if commit:
            real_execute(*args)
        raise RuntimeError("the runner's channel closed")

    monkeypatch.setattr(build_tool, "worker_lost", lambda wait=0.0: lost)
    monkeypatch.setattr(pipeline, "execute", execute_then_lose)
    assert build_tool.main(argv) == 0
    assert "2 examples" in capsys.readouterr().out
    assert verify.verify(str(out)) == (1, [])
    first = (out / BUILD_INFO_FILE).read_bytes()

    # Lost in the middle of what the commit writes after its marker (the chaos test's kill):
    # "BUILD FAILED ... upgrade writes what is missing", exit 1, for a whole build.
    def lost_in_the_commit(*args):
        real_execute(*args)
        (out / "dataset_info.json").unlink()
        (out / ".tmp").mkdir()
        raise RuntimeError("the runner's channel closed")

    monkeypatch.setattr(pipeline, "execute", lost_in_the_commit)
    assert build_tool.main([*argv, "--overwrite", "--seed", "5"]) == 0
    assert "2 examples" in capsys.readouterr().out
    assert (out / "dataset_info.json").exists() and not (out / ".tmp").exists()
    assert verify.verify(str(out)) == (1, [])
    kept = (out / BUILD_INFO_FILE).read_bytes()
    assert kept != first
    monkeypatch.setattr(pipeline, "execute", lambda *args: execute_then_lose(*args, commit=False))
    assert build_tool.main([*argv, "--overwrite"]) == 1  # the marker is the one it replaces
    err = capsys.readouterr().err
    assert failure_line(err) == f"BUILD FAILED: {lost}"
    assert (out / BUILD_INFO_FILE).read_bytes() == kept


@pytest.mark.parametrize(
    "budget, failure, rejected",
    [
        # Two rejections are known from the index alone (bad XML, a class outside the
        # vocabulary): over 1%, the build stops before reading any image.
        (
            "0.01",
            "BUILD FAILED: 2 of 88 images rejected before any image was read (2.27%), more than "
            "--max_bad_fraction=0.01; reasons {'annotation_malformed': 1, 'unknown_class': 1}; "
            "classes outside the vocabulary (the classes seen in the train split; --labels_file "
            "names them), most frequent first: {'unicorn': 1}; see ",
            2,
        ),
        # Within 3% for the index; the damaged images found while writing break it.
        ("0.03", "BUILD FAILED: 5 of 88 images rejected (5.68%), more than", 5),
    ],
)
def test_error_budget_fails_loudly_and_commits_nothing(
    dirty_tree, tmp_path, capsys, budget, failure, rejected
):
    root, _ = dirty_tree
    out = tmp_path / "out"
    argv = ["--input_dir", str(root), "--output_dir", str(out), "--max_bad_fraction", budget]
    assert build_tool.main(argv) == 1
    message = failure_line(capsys.readouterr().err)
    assert message.startswith(failure)
    assert "while running" not in message and "rejected.jsonl" in message
    assert not (out / BUILD_INFO_FILE).exists()
    assert len(dead_letters(out)) == rejected
    if rejected == 2:
        assert not list(out.rglob("*.tfrecord*"))


def test_a_build_over_its_budget_names_the_command_that_builds_it(dirty_tree, tmp_path, capsys):
    # Over the budget, the failure ends with the command to run next; following it commits
    # the build, keeping the shards the failed attempt wrote.
    root, _ = dirty_tree
    out = tmp_path / "out"
    argv = ["--input_dir", str(root), "--output_dir", str(out)]
    assert build_tool.main(argv) == 1
    message = failure_line(capsys.readouterr().err)  # an unknown class: that is what to fix
    assert "{'unicorn': 1}" in message and "rerun with" not in message
    assert build_tool.main([*argv, "--max_bad_fraction", "0.03"]) == 1
    message = failure_line(capsys.readouterr().err)
    assert message.startswith("BUILD FAILED: 5 of 88 images rejected (5.68%), more than")
    assert message.endswith(
        "; to commit the build without them, rerun with --max_bad_fraction 0.06 --resume (it "
        "keeps the shards written)"
    )
    written = sorted(path.name for path in out.glob("*.tfrecord"))
    assert written and not (out / BUILD_INFO_FILE).exists()
    before = {name: (out / name).stat().st_mtime_ns for name in written}
    assert build_tool.main([*argv, "--max_bad_fraction", "0.06", "--resume"]) == 0
    assert {name: (out / name).stat().st_mtime_ns for name in written} == before  # kept
    assert (out / BUILD_INFO_FILE).exists() and len(dead_letters(out)) == 5


def test_missing_split_and_empty_tree_fail_before_writing(tmp_path):
    ilsvrc_image(tmp_path / "in", "train", "a", jpeg_bytes())
    ilsvrc_image(tmp_path / "in", "test", "t", jpeg_bytes())
    with pytest.raises(LayoutError) as error:
        build(tmp_path / "in", tmp_path / "out")
    assert str(error.value) == (
        f"split 'val' has no images: {tmp_path}/in/Data/DET/val is empty or missing; the "
        "splits there are ['test', 'train']: choose with --splits test,train"
    )
    (tmp_path / "empty").mkdir()
    for missing in ("empty", "nowhere"):
        with pytest.raises(ValueError) as error:
            build(tmp_path / missing, tmp_path / "out2")
        assert str(error.value) == (
            f"--input_dir {tmp_path / missing} does not exist or holds no files"
        )
    with pytest.raises(ValueError) as error:
        build(tmp_path / "in", tmp_path / "out3", "--labels_file", tmp_path / "nope.txt")
    assert str(error.value) == f"--labels_file {tmp_path / 'nope.txt'} does not exist"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("out")]


def test_a_split_folder_of_archives_is_refused_before_writing(tmp_path, capsys):
    # ImageNet's train extracted once: 1,000 class archives, no image. The build wrote the
    # val shards, then failed (exit 1) with no word of the archives.
    root = tmp_path / "in"
    cls = "Data/CLS-LOC"
    write(root / cls / "train/n01440764.tar", b"an archive")
    write(root / cls / "train/n01443537.tar", b"an archive")
    write(root / cls / "train/readme.txt", "notes")
    write(root / cls / "val/n01440764/ILSVRC2012_val_00000001.JPEG", jpeg_bytes())
    argv = ["--input_dir", str(root), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main(argv) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"error: split 'train' has no images: {root / cls}/train holds 3 files, no image: "
        "n01440764.tar, n01443537.tar, readme.txt; extract the archives first (ImageNet's "
        "train comes as one .tar per class: in that folder, for f in *.tar; do mkdir "
        '"${f%.tar}" && tar -xf "$f" -C "${f%.tar}"; done, then move the archives out)'
    )
    assert not (tmp_path / "out").exists()


def test_cls_loc_takes_classes_from_synset_folders(tmp_path):
    root = tmp_path / "ILSVRC"
    named = CORPUS / "ilsvrc_named_copies"
    shutil.copytree(named / "Data", root / "Data")
    ilsvrc_image(root, "train", "n01440764/n01440764_1", jpeg_bytes(), task="CLS-LOC")
    ilsvrc_image(
        root,
        "train",
        "n01440764/n01440764_2",
        jpeg_bytes(50, 40),
        voc_xml([("n01440764", 5, 5, 30, 30)], size=(50, 40)),
        task="CLS-LOC",
    )
    ilsvrc_image(
        root,
        "val",
        "ILSVRC2012_val_00000001",
        jpeg_bytes(),
        voc_xml([("n02105855", 1, 1, 20, 20)]),
        task="CLS-LOC",
    )
    info = build(root, tmp_path / "out")
    assert info.classes == ("n01440764", "n01739381", "n02105855")
    labels = {
        e[F.SOURCE_ID][0].decode(): e[F.LABEL][0] for e in read_split(tmp_path / "out", "train")
    }
    assert labels == {
        "train/n01440764/n01440764_1": 0,
        "train/n01440764/n01440764_2": 0,
        "train/n01739381/n01739381_1309": 1,  # CMYK, converted
        "train/n02105855/n02105855_2933": 2,  # PNG named .JPEG, converted
    }
    (val,) = read_split(tmp_path / "out", "validation")
    assert val[F.LABEL] == [2]


NOT_A_TREE = (
    "{} is not an ILSVRC (Data/DET, Data/CLS-LOC) or Pascal VOC (JPEGImages, Annotations, "
    "ImageSets/Main) tree, nor holds one in a subdirectory; "
)


def test_an_image_folder_whose_annotation_folder_is_gone_is_refused(tmp_path):
    # A copy of DET that lost one folder of XML labelled all its images background, exit 0.
    tree = tmp_path / "in"
    dog = voc_xml([("dog", 1, 1, 30, 30)])
    ilsvrc_image(tree, "train", "ILSVRC2013_train/n02084071/a", jpeg_bytes(), dog)
    ilsvrc_image(tree, "train", "ILSVRC2013_train/n02121808/b", jpeg_bytes())
    ilsvrc_image(tree, "train", "ILSVRC2014_train_0000/c", jpeg_bytes())
    ilsvrc_image(tree, "train", "ILSVRC2014_train_0000/d", jpeg_bytes())
    # ImageNet's own negatives come without an annotation folder: never refused.
    ilsvrc_image(tree, "train", "ILSVRC2013_train_extra0/e", jpeg_bytes())
    annotations = tree / "Annotations/DET/train"
    with pytest.raises(LayoutError) as refused:
        build(tree, tmp_path / "out", "--splits", "train")
    data = tree / "Data/DET/train"
    assert str(refused.value) == (
        "image folders of an annotated split have no annotation folder: "
        f"{data}/ILSVRC2013_train/n02121808 has no {annotations}/ILSVRC2013_train/n02121808; "
        f"{data}/ILSVRC2014_train_0000 has no {annotations}/ILSVRC2014_train_0000; a build "
        "would label all their images background (no objects). Restore their XML (from the "
        "devkit or the download they came in); if their images really hold no objects, create "
        f"the empty folder to say so, e.g. mkdir -p {annotations}/ILSVRC2013_train/n02121808"
    )
    assert not (tmp_path / "out").exists()
    # The empty folders say the images are negatives.
    (annotations / "ILSVRC2013_train/n02121808").mkdir()
    (annotations / "ILSVRC2014_train_0000").mkdir()
    info = build(tree, tmp_path / "out", "--splits", "train")
    assert info.splits["train"].class_counts == (1, 4)


def test_a_voc_year_whose_images_of_a_split_have_no_xml_beside_an_annotated_year_is_refused(
    tmp_path,
):
    # VOC2012's test download (no annotations published) unpacked into a VOCdevkit beside
    # VOC2007's annotated test: `--splits test` labelled all of VOC2012's test background.
    devkit = tmp_path / "VOCdevkit"
    for year, stem in (("VOC2007", "000001"), ("VOC2012", "2012_000001")):
        write(devkit / year / "ImageSets/Main/test.txt", f"{stem}\n")
        write(devkit / year / "JPEGImages" / f"{stem}.jpg", jpeg_bytes())
        write(devkit / year / "ImageSets/Main/train.txt", f"{year}_t\n")
        write(devkit / year / "JPEGImages" / f"{year}_t.jpg", jpeg_bytes())
        write(devkit / year / "Annotations" / f"{year}_t.xml", voc_xml([("dog", 1, 1, 30, 30)]))
    write(devkit / "VOC2007/Annotations/000001.xml", voc_xml([("dog", 1, 1, 30, 30)]))
    # Its download holds XML for its Action images alone (here 1 of 11).
    write(devkit / "VOC2012/Annotations/2012_000001.xml", voc_xml([("person", 1, 1, 30, 30)]))
    ids = "".join(f"2012_0000{i:02d}\n" for i in range(1, 12))
    write(devkit / "VOC2012/ImageSets/Main/test.txt", ids)
    for i in range(2, 12):
        write(devkit / "VOC2012/JPEGImages" / f"2012_0000{i:02d}.jpg", jpeg_bytes())
    with pytest.raises(LayoutError) as refused:
        build(devkit, tmp_path / "out", "--splits", "train,test")
    assert str(refused.value) == (
        f"split 'test': 1 of VOC2012's 11 images have their XML in {devkit}/VOC2012/Annotations, "
        "while every one of VOC2007's has: a build would label the other 10 background "
        "(2012_000002, 2012_000003, 2012_000004, ...; VOC's images all hold objects). Build the "
        f"years apart (--input_dir {devkit}/VOC2007 for VOC2007's), or restore VOC2012's "
        "annotations"
    )
    (devkit / "VOC2012/Annotations/2012_000001.xml").unlink()
    info = build(devkit / "VOC2012", tmp_path / "out", "--splits", "train,test")
    assert not info.splits["test"].labelled  # one year alone: unlabelled, as it should be


def test_an_xml_that_cannot_be_read_fails_the_build_by_name(tmp_path, capsys):
    # Its image had no XML, so it was written as background, exit 0.
    tree = tmp_path / "in"
    ilsvrc_image(tree, "train", "a", jpeg_bytes(), voc_xml([("dog", 1, 1, 30, 30)]))
    ilsvrc_image(tree, "train", "b", jpeg_bytes())
    xml = tree / "Annotations/DET/train/b.xml"
    xml.symlink_to(tmp_path / "elsewhere/b.xml")  # a link into a copy that is gone
    out = tmp_path / "out"
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--splits", "train"]
    argv += ["--max_bad_fraction", "1"]
    assert build_tool.main(argv) == 1
    assert failure_line(capsys.readouterr().err) == (
        f"BUILD FAILED: the tree holds what the build cannot read: {xml} (broken_symlink: links "
        f"to '{tmp_path}/elsewhere/b.xml', which does not exist); the images inside, or those "
        "whose XML it is, would be missing or labelled background. Make them readable (e.g. "
        f"chmod -R a+rX {xml}) or move them out of the tree"
    )
    assert not (out / BUILD_INFO_FILE).exists() and not list(out.glob("*.tfrecord"))
    assert [line["reason"] for line in dead_letters(out)] == ["broken_symlink"]


def _voc_year(year_dir, lists: dict, annotated) -> None:
    """A VOC year of `lists` (name -> ids), with an XML for each id in `annotated`."""
    for name, ids in lists.items():
        write(year_dir / "ImageSets/Main" / f"{name}.txt", "".join(f"{i}\n" for i in ids))
        for i in ids:
            write(year_dir / "JPEGImages" / f"{i}.jpg", jpeg_bytes())
            if i in annotated:
                write(year_dir / "Annotations" / f"{i}.xml", voc_xml([("dog", 1, 1, 30, 30)]))


def test_a_voc_year_without_lists_or_with_an_empty_one_is_refused_not_left_out(tmp_path):
    # A builder trial: VOC2012 without ImageSets/Main beside VOC2007 was never looked at (40
    # of 80 images built, no word); a 0-byte VOC2012 train.txt likewise.
    devkit = tmp_path / "VOCdevkit"
    ids = {"train": ["a", "b"], "val": ["c"]}
    _voc_year(devkit / "VOC2007", ids, {"a", "b", "c"})
    _voc_year(devkit / "VOC2012", ids, {"a", "b", "c"})
    shutil.rmtree(devkit / "VOC2012/ImageSets")
    with pytest.raises(LayoutError) as refused:
        build(tmp_path, tmp_path / "out")
    assert str(refused.value) == (
        f"{devkit}/VOC2012 holds JPEGImages but no ImageSets/Main/*.txt split lists: a build "
        f"of {devkit} would leave its images out. Restore its lists, or build the years that "
        f"have theirs alone (--input_dir {devkit}/VOC2007)"
    )
    _voc_year(devkit / "VOC2012", ids, {"a", "b", "c"})
    write(devkit / "VOC2012/ImageSets/Main/train.txt", "")
    with pytest.raises(LayoutError) as refused:
        build(tmp_path, tmp_path / "out")
    assert str(refused.value) == (
        f"{devkit}/VOC2012/ImageSets/Main/train.txt lists no image: VOC2012's train images "
        "would be left out. Restore the list, or delete it to build train from the other years"
    )
    (devkit / "VOC2012/ImageSets/Main/train.txt").unlink()
    info = build(tmp_path, tmp_path / "out")
    assert (info.splits["train"].num_examples, info.splits["validation"].num_examples) == (2, 2)


def test_voc_xml_on_a_devkit_of_several_years_names_the_years(tmp_path):
    # A builder trial: it said "the train split names no class (no <object> ...): restore its
    # annotations", the XML all there (voc_xml pairs no year's JPEGImages with Annotations).
    devkit = tmp_path / "VOCdevkit"
    for year in ("VOC2007", "VOC2012"):
        _voc_year(devkit / year, {"train": ["a", "b"], "val": ["c"]}, {"a", "b", "c"})
    for root in (tmp_path, devkit):
        with pytest.raises(LayoutError) as refused:
            build(root, tmp_path / "out", "--layout", "voc_xml")
        assert str(refused.value) == (
            f"{root} holds 2 VOC years ({devkit}/VOC2007, {devkit}/VOC2012): --layout voc_xml "
            "reads one folder's images beside their XML; pass --layout voc (or leave --layout "
            "out), or one year as --input_dir"
        )
    info = build(devkit / "VOC2007", tmp_path / "out", "--layout", "voc_xml")
    assert sum(split.num_examples for split in info.splits.values()) == 3


def test_det_folders_that_lost_their_xml_are_refused_not_built_as_background():
    # An adversarial trial: two thirds of three synset folders' XML deleted, their images came
    # out background (516, not 211), exit 0, no warning. The rule alone, on counts:
    def counts(folders):  # {folder: (images, without XML)}
        found = {}
        for folder, (images, without) in folders.items():
            found["train", folder, True] = without
            found["train", folder, False] = images - without
        return found

    whole = {f"n{i:02d}": (30, 1) for i in range(10)}
    assert unannotated_det_folders(counts(whole)) is None
    cut = {**whole, "n00": (30, 20), "n01": (40, 10)}
    assert unannotated_det_folders(counts(cut)) == (
        "split 'train': 2 image folders hold many images without XML (n00: 20 of 30 without "
        "XML; n01: 10 of 40 without XML), where only 8 of the split's other 240 images lack "
        "theirs: a build would label them background. Restore their XML (a copy cut short?); "
        "if those images really hold no object, give each an XML without <object>"
    )
    negatives = {**whole, "extra": (30, 30)}  # a folder with no XML: negatives, as DET's
    small = {**whole, "n00": (19, 19 - 1)}  # too few to tell
    usual = {f"n{i:02d}": (30, 4) for i in range(10)} | {"n00": (30, 10)}  # 13% lack it
    for fine in (negatives, small, usual):
        assert unannotated_det_folders(counts(fine)) is None


def test_a_det_build_with_folders_that_lost_their_xml_stops_before_a_shard(tmp_path):
    data, xml = jpeg_bytes(), voc_xml([("n01", 1, 1, 5, 5)], size=(8, 8))
    for folder in ("n01", "n02", "n03"):
        for i in range(20):
            lost = folder == "n03" and i % 3
            stem = f"ILSVRC2013_train/{folder}/{folder}_{i}"
            ilsvrc_image(tmp_path / "tree", "train", stem, data, None if lost else xml)
    with pytest.raises(BuildFailed) as failed:
        build(tmp_path / "tree", tmp_path / "out", "--splits", "train")
    assert (
        "split 'train': 1 image folder holds many images without XML (Data/DET/train/"
        "ILSVRC2013_train/n03: 13 of 20 without XML), where only 0 of the split's other 40 "
        "images lack theirs"
    ) in str(failed.value)
    assert not list((tmp_path / "out").glob("*.tfrecord*"))


def test_one_voc_year_whose_split_mostly_lacks_xml_beside_an_annotated_split_is_refused(
    tmp_path,
):
    # VOC2012's test download unpacked into its trainval (both unpack to VOCdevkit/VOC2012):
    # its test images without XML came out background, exit 0; and so did a copy cut short.
    year = tmp_path / "VOCdevkit/VOC2012"
    lists = {"train": ["t1", "t2"], "val": ["v1"], "test": [f"x{i}" for i in range(10)]}
    _voc_year(year, lists, {"t1", "t2", "v1", "x0"})  # x0: an Action image's XML
    with pytest.raises(LayoutError) as refused:
        build(tmp_path, tmp_path / "out", "--splits", "train,val,test")
    assert str(refused.value) == (
        f"split 'test': 1 of VOC2012's 10 images have their XML in {year}/Annotations, while "
        "every image of its train and validation splits has: a build would label the other 9 "
        "background (x1, x2, x3, ...; VOC's images all hold objects). Leave test out of "
        "--splits (VOC2012's "
        "test annotations were published for its Action and Layout images only), or restore "
        "VOC2012's annotations; if those images really hold no object, give each an XML "
        "without <object>"
    )
    assert not (tmp_path / "out").exists()
    labels = write(tmp_path / "labels.txt", "dog\n")
    with pytest.raises(LayoutError, match=re.escape("while every image of its train and ")):
        build(tmp_path, tmp_path / "out", "--splits", "test", "--labels_file", labels)
    assert build(tmp_path, tmp_path / "out", "--splits", "train,val").splits.keys() == {
        "train",
        "validation",
    }
    cut = tmp_path / "cut/VOC2012"
    _voc_year(cut, {"train": ["t1", "t2", "t3"], "val": ["v1"]}, {"t1", "v1"})
    with pytest.raises(LayoutError) as refused:
        build(cut, tmp_path / "out2")
    assert str(refused.value).startswith(
        f"split 'train': 1 of VOC2012's 3 images have their XML in {cut}/Annotations, while "
        "every image of its validation split has: a build would label the other 2 background "
        "(t2, t3; VOC's images all hold objects). Restore VOC2012's annotations (a copy cut "
        "short?); "
    )
    for i in ("t2", "t3"):  # negatives on purpose: an XML without <object> says so
        write(cut / "Annotations" / f"{i}.xml", voc_xml([]))
    info = build(cut, tmp_path / "out2")
    assert info.splits["train"].label_sources == {"xml": 1, "background": 2}
    # An id listed with neither image nor XML is an image_missing rejection, not an image
    # without XML (it was refused as "would label the other 1 background (ghost)").
    listed = cut / "ImageSets/Main/train.txt"
    listed.write_text(listed.read_text() + "ghost\n")
    info = build(cut, tmp_path / "out3", "--max_bad_fraction", "0.5")
    assert info.failures == {"image_missing": 1}


def test_voc_xml_in_a_folder_below_annotations_is_refused(tmp_path, capsys):
    # Annotations/sub/X.xml: VOC pairs Annotations/X.xml only; those images came out
    # background (and a split with none at the top, unlabelled), exit 0.
    year = tmp_path / "VOCdevkit/VOC2012"
    _voc_year(year, {"train": ["t1", "t2"], "val": ["v1"]}, {"t1"})
    for i in ("t2", "v1"):
        write(year / "Annotations/sub" / f"{i}.xml", voc_xml([("dog", 1, 1, 30, 30)]))
    write(year / "Annotations/.ipynb_checkpoints/t1.xml", voc_xml([("dog", 1, 1, 30, 30)]))
    # a copy of an XML that is in place too takes nothing away (a backup folder)
    write(year / "Annotations/backup/t1.xml", voc_xml([("dog", 1, 1, 30, 30)]))
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: 2 XML files lie in folders below {year}/Annotations (sub/t2.xml, sub/v1.xml), "
        f"where VOC reads {year}/Annotations/<image id>.xml only: built, their images would "
        f"come out without their objects (background). Move them into {year}/Annotations "
        "itself, or out of the tree\n"
    )
    assert not (tmp_path / "out").exists()
    for i in ("t2", "v1"):
        (year / "Annotations/sub" / f"{i}.xml").rename(year / "Annotations" / f"{i}.xml")
    info = build(tmp_path, tmp_path / "out")  # the hidden folder's copy is not one of them
    assert info.splits["train"].label_sources == {"xml": 2}
    assert info.splits["validation"].label_sources == {"xml": 1}


def test_a_voc_tree_without_any_xml_is_announced_unlabelled(tmp_path, capsys):
    year = tmp_path / "VOCdevkit/VOC2012"
    _voc_year(year, {"train": ["t1", "t2"], "val": ["v1"]}, set())
    labels = write(tmp_path / "labels.txt", "cat\ndog\n")
    argv = ["--input_dir", str(tmp_path), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main([*argv, "--labels_file", str(labels)]) == 0
    printed = capsys.readouterr()
    notes = [line for line in (printed.out + printed.err).splitlines() if "Unlabelled" in line]
    assert notes == [
        f"Unlabelled: the {split} split has no annotations ({year}/Annotations is empty or "
        "missing): its examples get label -1; put its XML there to label it"
        for split in ("train", "validation")
    ]


def test_voc_trainval_gives_the_classes_when_train_is_not_built(tmp_path, capsys):
    # VOC2007's protocol, --splits trainval,test, was refused: "without the train split the
    # vocabulary is unknown: pass --labels_file".
    year = tmp_path / "VOC2007"
    _voc_year(year, {"trainval": ["a", "b"], "test": ["c"]}, {"a", "b", "c"})
    write(year / "Annotations/b.xml", voc_xml([("cat", 1, 1, 30, 30), ("dog", 1, 1, 9, 9)]))
    argv = ["--input_dir", str(year), "--output_dir", str(tmp_path / "out")]
    assert build_tool.main([*argv, "--splits", "trainval,test"]) == 0
    assert f"ds = load_dataset('{tmp_path / 'out'}', 'trainval', batch_size=2, training=True)" in (
        capsys.readouterr().out
    )
    assert json.loads((tmp_path / "out" / BUILD_INFO_FILE).read_text())["classes"] == [
        "cat",
        "dog",
    ]
    labels = {
        e[F.FILENAME][0].decode(): e[F.LABEL_TEXT][0].decode()
        for e in read_split(tmp_path / "out", "trainval")
    }
    assert labels == {"JPEGImages/a.jpg": "dog", "JPEGImages/b.jpg": "cat"}
    assert [e[F.LABEL_TEXT][0].decode() for e in read_split(tmp_path / "out", "test")] == ["dog"]
    (year / "Annotations/a.xml").write_text(voc_xml([("background", 1, 1, 30, 30)]))
    with pytest.raises(Exception, match="the trainval split's annotations or folders: "):
        build(year, tmp_path / "out2", "--splits", "trainval,test")


def test_a_voc_tree_without_its_images_is_refused_as_such(tmp_path):
    # An annotations-only download (lists and XML, no JPEGImages): the build failed saying the
    # trainval split "names no class", which sent the user after the XML that were there.
    year = tmp_path / "VOC2012"
    _voc_year(year, {"trainval": ["a", "b"]}, {"a", "b"})
    shutil.rmtree(year / "JPEGImages")
    with pytest.raises(LayoutError) as refused:
        build(year, tmp_path / "out", "--splits", "trainval")
    assert str(refused.value) == (
        f"the split lists name 2 images, but {year}/JPEGImages is empty or missing: put each "
        "year's images in its JPEGImages folder (an annotations-only download has none)"
    )
    assert not (tmp_path / "out").exists()


def test_a_voc_year_without_annotations_beside_an_annotated_one_is_refused(tmp_path):
    devkit = tmp_path / "VOCdevkit"
    for year in ("VOC2007", "VOC2012"):
        write(devkit / year / "ImageSets/Main/train.txt", "000001\n")
        write(devkit / year / "JPEGImages/000001.jpg", jpeg_bytes())
    write(devkit / "VOC2007/Annotations/000001.xml", voc_xml([("dog", 1, 1, 30, 30)]))
    with pytest.raises(
        LayoutError,
        match=(
            f"^image folders of an annotated split have no annotation folder: "
            f"{devkit}/VOC2012/JPEGImages has no {devkit}/VOC2012/Annotations; "
        ),
    ):
        build(devkit, tmp_path / "out", "--splits", "train")
    (devkit / "VOC2012/Annotations").mkdir()
    info = build(devkit, tmp_path / "out", "--splits", "train")
    assert info.classes == ("dog",) and info.splits["train"].class_counts == (1, 1)


def test_yolo_labels_are_not_offered_as_class_folders(tmp_path):
    # Taken as class folders, `images/` and `labels/` would have become two classes.
    root = tmp_path / "download"
    write(root / "set1" / "images" / "a.jpg", jpeg_bytes())
    write(root / "set1" / "labels" / "a.txt", "0 0.5 0.5 0.2 0.2\n")
    with pytest.raises(LayoutError) as error:
        build(root, tmp_path / "out")
    assert str(error.value) == NOT_A_TREE.format(root) + (
        "it holds annotations in a layout this tool does not read (YOLO's labels/, masks/): "
        "export them as Pascal VOC XML, beside each image or in an annotations/ folder beside "
        "images/"
    )


def test_voc_tree_from_the_corpus(tmp_path):
    root = CORPUS / "datumaro/voc_dataset/voc_dataset1"
    info = build(root, tmp_path / "out", "--splits", "train,test")
    assert info.classes == ("cat", "person")
    (train,) = read_split(tmp_path / "out", "train")
    # cat 2x2 box vs person 2x2 box: a tie, the first object (cat) wins.
    assert train[F.LABEL] == [0] and train[F.OBJECT_TEXT] == [b"cat", b"person"]
    assert train[F.BBOX_XMIN] == pytest.approx([1 / 20, 4 / 20])
    assert decode(train).shape == (10, 20, 3)
    # The test split has no annotation at all: unlabelled (-1), not a background negative.
    (test,) = read_split(tmp_path / "out", "test")
    assert test[F.LABEL] == [-1] and test[F.SOURCE_ID] == [b"voc_dataset1/2007_000002"]
    assert test[F.ONE_HOT] == [0, 0, 0]
    assert not info.splits["test"].labelled and info.splits["train"].labelled


def test_voc_inside_a_download_folder_builds_as_its_devkit(tmp_path):
    devkit = tmp_path / "VOCtrainval_06-Nov-2007" / "VOCdevkit"
    shutil.copytree(CORPUS / "datumaro/voc_dataset/voc_dataset1", devkit / "VOC2007")
    (devkit.parent / "notes.txt").write_text("the download's own files")
    direct = build(devkit, tmp_path / "direct", "--splits", "train,test")
    found = build(devkit.parent, tmp_path / "found", "--splits", "train,test")
    assert found.source == direct.source == {"input_dir": str(devkit), "layout": "voc"}
    assert shard_bytes(tmp_path / "found") == shard_bytes(tmp_path / "direct")
    assert read_split(tmp_path / "found", "train")[0][F.SOURCE_ID] == [b"VOC2007/2007_000001"]


def test_resize_policy_and_labels_file(tmp_path):
    ilsvrc_image(
        tmp_path / "in", "train", "a", jpeg_bytes(80, 40), voc_xml([("dog", 8, 4, 40, 20)])
    )
    ilsvrc_image(tmp_path / "in", "train", "b", jpeg_bytes(30, 60))
    labels = tmp_path / "synsets.txt"
    labels.write_text("cat kitty\ndog doggo\n")
    info = build(
        tmp_path / "in",
        tmp_path / "out",
        "--splits",
        "train",
        "--labels_file",
        labels,
        "--image_policy",
        "shorter_side",
        "--image_size",
        "20",
    )
    assert info.classes == ("cat", "dog") and info.options["image_policy"]["size"] == [20]
    by_key = {e[F.SOURCE_ID][0].decode(): e for e in read_split(tmp_path / "out", "train")}
    assert decode(by_key["train/a"]).shape == (20, 40, 3)
    assert decode(by_key["train/b"]).shape == (40, 20, 3)
    assert by_key["train/a"][F.LABEL] == [1] and by_key["train/b"][F.LABEL] == [2]
    assert by_key["train/a"][F.BBOX_XMIN] == pytest.approx([0.1])


def test_the_sample_command_writes_the_bundled_tree(tmp_path, capsys):
    # `python -m beam_pipeline sample DIR` (what ./run_local.sh runs): the same tree as
    # `sample_tree.write_tree`, byte for byte.
    assert commands.main(["sample", str(tmp_path / "cmd"), "--train", "6", "--val", "3"]) == 0
    assert capsys.readouterr().out == f"wrote 9 images to {tmp_path / 'cmd'}\n"
    sample_tree.write_tree(str(tmp_path / "api"), 6, 3)
    written = {
        name: sorted(p.relative_to(tmp_path / name) for p in (tmp_path / name).rglob("*"))
        for name in ("cmd", "api")
    }
    assert written["cmd"] == written["api"]
    assert len([p for p in written["cmd"] if p.suffix == ".JPEG"]) == 9
    for path in written["cmd"]:
        if (tmp_path / "cmd" / path).is_file():
            assert (tmp_path / "cmd" / path).read_bytes() == (tmp_path / "api" / path).read_bytes()
    # Drawn over a tree (its XML kept beside new images), into a file, or of no image: refused.
    (tmp_path / "file").write_text("x")
    for argv, said in [
        (["cmd"], f"{tmp_path / 'cmd'} is not empty: name a new folder"),
        (["file"], f"{tmp_path / 'file'} is a file: name a new folder"),
        (["new", "--train", "0"], f"{TAKES}, not 0, 250"),
        (["new", "--val", "-5"], f"{TAKES}, not 1000, -5"),
        (["new", "--train", "99999999999"], f"{TAKES}, not 99999999999, 250"),  # (it drew on)
        (["new", "--seed", "-1"], "--seed takes 0 or more, not -1"),  # (NumPy's traceback)
    ]:
        assert commands.main(["sample", str(tmp_path / argv[0]), *argv[1:]]) == 2
        assert capsys.readouterr().err.startswith(f"error: {said}")
    assert commands.main(["sample", " "]) == 2  # (a folder named ' ' was written)
    assert capsys.readouterr().err == "error: name the folder to write the tree to\n"
    assert not (tmp_path / "new").exists()
    assert written["cmd"] == sorted(
        p.relative_to(tmp_path / "cmd") for p in (tmp_path / "cmd").rglob("*")
    )
