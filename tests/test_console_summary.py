"""The summary a finished build prints: every line within 80 columns, and what `--resume` kept."""

import dataclasses
import io
import os
import pathlib
import shutil
import tempfile

import pytest
from helpers import interrupted_build, summary_rows

from beam_pipeline import pipeline
from beam_pipeline.console import summary
from beam_pipeline.stages import resume, writing
from beam_pipeline.tools import build as build_tool
from beam_pipeline.tools import sample_tree
from schemas import DatasetInfo, ShardInfo, SplitInfo
from schemas.metadata import shard_filename

LOG = "/tmp/imagenet-tfrecords/build-20261127-150348-90004.log"
DASK = "on the Dask cluster at tcp://10.128.0.12:8786 (16 workers, 16 threads)"


def widths(text: str) -> list[int]:
    return [len(line) for line in text.splitlines()]


def sentence(text: str) -> str:
    """The summary's first sentence, its folded lines joined again."""
    lines = text.split("\n\n", 1)[0].splitlines()
    return " ".join(line.strip() for line in lines)


def split_info(examples, shards, rejected, sources, disagreements=0, num_bytes=150_000):
    per_shard = [examples // shards + (i < examples % shards) for i in range(shards)]
    files = tuple(ShardInfo(f"s-{i}", n, n * num_bytes, "0" * 64) for i, n in enumerate(per_shard))
    return SplitInfo(examples, examples + rejected, rejected, (), files, sources, disagreements)


IMAGENET = DatasetInfo(
    schema_version="1.2",
    classes=tuple(f"n{i:08d}" for i in range(1000)),
    splits={
        # CLS-LOC: a class folder for every training image, XML for some, one XML disagreeing.
        "train": split_info(
            1_281_167, 1024, 1_234, {"xml": 544_546, "folder": 736_621}, disagreements=1_234
        ),
        "validation": split_info(50_000, 128, 0, {"xml": 50_000}),
        "test": split_info(100_000, 256, 0, {"unlabelled": 100_000}),
    },
    failures={"truncated_image": 1_000, "decompression_bomb": 200, "not_an_image": 34},
    options={"num_shards": {"train": 2048, "validation": 128, "test": 256}},
    source={"layout": "ilsvrc_cls_loc"},
    versions={},
)


@pytest.fixture
def home(monkeypatch):
    """A folder whose path is as short as a person's home folder's (`/home/someone`; a test's
    own is three times longer), the temp directory for the test; removed after it."""
    path = tempfile.mkdtemp(prefix="u-", dir="/tmp")
    monkeypatch.setattr(tempfile, "tempdir", path)
    yield pathlib.Path(path)
    shutil.rmtree(path)


def printed(info, monkeypatch, home, **kwargs) -> str:
    """The summary of `info`, built from a clone in `home`, in which the command runs."""
    clone = home / "imagenet-tfrecords"
    clone.mkdir(exist_ok=True)
    monkeypatch.chdir(clone)
    stream = io.StringIO()
    kwargs = {
        "input_dir": "/home/someone/data/ILSVRC2017/ILSVRC",
        "output_dir": str(clone / "sample_data" / "out"),
        "seconds": 12_345.6,
        "workers": DASK,
        "log_path": LOG,
        **kwargs,
    }
    summary.print_summary(stream, info, **kwargs)
    return stream.getvalue()


@pytest.mark.parametrize("kept", [None, (1_000, 1_234_567), (0, 0)])
def test_every_summary_line_of_an_imagenet_build_fits_80_columns(monkeypatch, home, kept):
    rejected = {
        "train": {"truncated_image": 1_000, "decompression_bomb": 200, "not_an_image": 34},
        "": {"unreadable_file": 12},
    }
    text = printed(IMAGENET, monkeypatch, home, rejected=rejected, kept=kept)
    assert max(widths(text)) <= 80, text
    out = home / "imagenet-tfrecords" / "sample_data" / "out"
    # The folded lines say what one line did (a line breaks only between words).
    done = {
        None: "in 12,345.6 s, 116 images/s,",
        # --resume into a new folder said "kept 0 shards (0 images) from the run that stopped".
        (0, 0): "in 12,345.6 s (--resume found no shard to keep), 116 images/s,",
    }.get(
        kept,
        "in 12,345.6 s; kept 1,000 shards (1,234,567 images) from the run that stopped; "
        "wrote 408 shards (196,600 images), 16 images/s,",
    )
    assert sentence(text) == (
        f"Built {out} from /home/someone/data/ILSVRC2017/ILSVRC (ilsvrc_cls_loc): "
        f"1,431,167 examples {done} {DASK}"
    )
    rows = summary_rows(text)
    assert rows[0].split()[:6] == ["test", "100,000", "256", "14.0", "GiB", "0"]
    # The labels fold within their column, not across the table.
    assert " ".join(" ".join(rows).split()) == (
        "test 100,000 256 14.0 GiB 0 100,000 unlabelled (label -1) "
        "train 1,281,167 1,024 179.0 GiB 1,234 544,546 from XML (1,234 in a folder of another "
        "class), 736,621 from the class folder validation 50,000 128 7.0 GiB 0 50,000 from XML"
    )
    # The output named from the clone, where the command ran.
    assert text.split("\n\n")[2].splitlines() == [
        "1,000 classes (no image is background)",  # CLS-LOC: none
        "train: 1,024 shards, not the 2,048 asked for: a shard holds at least one example",
        "files rejected or reported outside any split: unreadable_file 12",
        "files rejected or reported in train: decompression_bomb 200, not_an_image 34,",
        "  truncated_image 1,000",
        "every rejected file, with its reason:",
        f"  {out}/rejected.jsonl",
        "load it:",
        "  from loaders import load_dataset",
        "  ds = load_dataset('sample_data/out', 'train', batch_size=32, training=True)",
        f"full log: {LOG}",
    ]


def test_a_path_wider_than_a_line_has_a_line_of_its_own(monkeypatch, home):
    deep = "/mnt/" + "/".join(["a-very-long-folder-name"] * 4)
    text = printed(IMAGENET, monkeypatch, home, input_dir=deep, seconds=0)
    line = f"  from {deep} (ilsvrc_cls_loc):"
    assert f"\n{line}\n" in text
    assert [width for width in widths(text) if width > 80] == [len(line)]
    assert "images/s" not in text  # no rate for a build timed at 0 s


def test_the_bundled_sample_build_fits_80_columns(home, monkeypatch, capsys):
    # What ./run_local.sh builds, from the clone's root, as it does (its log in `home`).
    clone = home / "imagenet-tfrecords"
    clone.mkdir()
    monkeypatch.chdir(clone)
    sample_tree.write_tree("sample_data/tree")
    argv = ["--input_dir", "sample_data/tree", "--output_dir", "sample_data/out"]
    assert build_tool.main([*argv, "--num_shards", "train=4,val=2"]) == 0
    text = capsys.readouterr().out
    assert max(widths(text)) <= 80, text
    assert "  ds = load_dataset('sample_data/out', 'train', batch_size=32, training=True)\n" in text
    assert sentence(text).startswith(
        f"Built {clone}/sample_data/out from {clone}/sample_data/tree (ilsvrc_det): "
        "1,250 examples in "
    )
    assert [row.split()[:3] for row in summary_rows(text)] == [
        ["train", "1,000", "4"],
        ["validation", "250", "2"],
    ]


def interrupt_after(monkeypatch, shards: int) -> list[str]:
    """Has the build stop as a Ctrl-C stops it once `shards` shards are written; returns
    the names of those written."""
    written: list[str] = []
    write = writing._WriteShardFn._write

    def _write(self, split, index, num_shards, name, *args):
        if len(written) == shards:
            raise KeyboardInterrupt
        result = write(self, split, index, num_shards, name, *args)
        written.append(name)
        return result

    monkeypatch.setattr(writing._WriteShardFn, "_write", _write)
    return written


def resumed_build(argv) -> tuple[DatasetInfo, resume.Kept | None]:
    """A `--resume` build as the command runs it, with what it kept."""
    options, prepared = pipeline.prepare_build([*argv, "--resume"])
    before = resume.shards_in_place(prepared.config.output_dir)
    info = pipeline.execute(options, prepared)
    return info, resume.kept_shards(prepared.config.output_dir, info, before)


@pytest.mark.parametrize("rebuild", [False, True])
def test_a_resumed_build_says_what_it_kept_and_times_what_it_wrote(tmp_path, monkeypatch, rebuild):
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=40, num_val=20, seed=3)
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--num_shards", "train=4,val=2"]
    argv += ["--direct_running_mode", "in_memory", "--quiet"]  # the patched writer runs here
    if rebuild:  # over a complete build: the rebuild stages its shards, moved in at its commit
        assert build_tool.main(argv) == 0
        argv += ["--overwrite", "--seed", "7"]
    with monkeypatch.context() as patch:
        kept = interrupt_after(patch, 3)
        assert build_tool.main(argv) == 130  # BUILD INTERRUPTED
    staged = out / ".staged" if rebuild else out
    assert sorted(p.name for p in staged.glob("*.tfrecord")) == sorted(kept)
    inodes = {name: (staged / name).stat().st_ino for name in kept}

    info, kept_now = resumed_build(argv)

    sizes = {s.file: s.num_examples for split in info.splits.values() for s in split.shards}
    assert kept_now == (3, sum(sizes[name] for name in kept))
    assert {name: (out / name).stat().st_ino for name in kept} == inodes  # the very files
    stream = io.StringIO()
    summary.print_summary(
        stream,
        info,
        input_dir=str(tree),
        output_dir=str(out),
        seconds=2.0,
        workers="in this process (in_memory)",
        log_path=LOG,
        kept=kept_now,
    )
    images = sum(sizes.values()) - kept_now.images
    assert sentence(stream.getvalue()) == (
        f"Built {out} from {tree} (ilsvrc_det): 60 examples in 2.0 s; kept 3 shards "
        f"({kept_now.images} images) from the run that stopped; wrote 3 shards ({images} "
        f"images), {images / 2:,.0f} images/s, in this process (in_memory)"
    )


def test_a_resumed_build_with_nothing_left_to_write_has_no_rate(tmp_path, monkeypatch, home):
    # Stopped once every shard was written (here: over the error budget, at its commit).
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=12, num_val=4, seed=3)
    (tree / "Data" / "DET" / "train" / "broken.JPEG").write_bytes(b"not an image")
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--quiet"]
    assert build_tool.main([*argv, "--max_bad_fraction", "0"]) == 1
    argv += ["--max_bad_fraction", "0.1"]
    info, kept = resumed_build(argv)
    assert kept == (2, 16)
    text = printed(info, monkeypatch, home, kept=kept, workers="in this process (in_memory)")
    assert "16 examples in 12,345.6 s; kept 2 shards (16 images) from the run that stopped; " in (
        sentence(text)
    )
    assert sentence(text).endswith("wrote 0 shards (0 images), in this process (in_memory)")


def test_only_a_resumed_build_over_a_local_output_tells_what_it_kept(tmp_path):
    assert resume.shards_in_place("gs://bucket/out") is None
    assert resume.kept_shards(str(tmp_path), IMAGENET, None) is None
    assert resume.shards_in_place(str(tmp_path / "none")) == {}
    (tmp_path / shard_filename("train", 0, 1)).write_bytes(b"kept")
    before = resume.shards_in_place(str(tmp_path))
    assert before is not None and list(before) == ["train-00000-of-00001.tfrecord"]
    info = DatasetInfo(
        "1.2",
        ("a",),
        {
            "train": SplitInfo(
                1, 1, 0, (1, 0), (ShardInfo(shard_filename("train", 0, 1), 1, 4, ""),)
            )
        },
        {},
        {},
        {},
        {},
    )
    assert resume.kept_shards(str(tmp_path), info, before) == (1, 1)
    os.replace(tmp_path / "train-00000-of-00001.tfrecord", tmp_path / "old")
    (tmp_path / "train-00000-of-00001.tfrecord").write_bytes(b"kept")  # written again
    assert resume.kept_shards(str(tmp_path), info, before) == (0, 0)


def test_the_command_says_what_resume_kept(tmp_path, monkeypatch, capsys):
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=40, num_val=20, seed=3)
    argv = ["--input_dir", str(tree), "--output_dir", str(out), "--num_shards", "train=4,val=2",
            "--direct_running_mode", "in_memory", "--quiet"]  # fmt: skip
    written = interrupted_build(monkeypatch, 3, argv)
    capsys.readouterr()
    assert build_tool.main([*argv, "--resume"]) == 0
    text = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
    kept = sum(result.shard.num_examples for result, *_ in written)
    assert (
        f"; kept 3 shards ({kept} images) from the run that stopped; wrote 3 shards "
        f"({60 - kept} images), "
    ) in text


def test_a_class_that_labels_no_image_is_named_with_the_label_rule():
    # A detection tree's class seen only as a smaller object: no image is labelled with it,
    # and nothing was rejected (the first wording sent the user to an empty rejected.jsonl).
    train = dataclasses.replace(split_info(3, 1, 0, {"xml": 3}), class_counts=(3, 0, 0))
    val = dataclasses.replace(split_info(2, 1, 0, {"xml": 2}), class_counts=(1, 0, 1))
    info = DatasetInfo("1.2", ("car", "dog"), {"train": train, "validation": val}, {}, {}, {}, {})
    assert summary.empty_class_notes(info) == [
        "Warning: no training image is labelled dog (an image's label is its largest object's "
        "class): a classifier trained on this build never learns it (its boxes beside larger "
        "objects, if any, are still a detector's)",
        "Note: no validation image is labelled dog (by its largest object): not measured there",
    ]
    # VOC trains on trainval: a class it lacks is the training warning, test's the note.
    voc = dataclasses.replace(info, splits={"test": val, "trainval": train})
    assert [note.split(" (")[0] for note in summary.empty_class_notes(voc)] == [
        "Warning: no training image is labelled dog",
        "Note: no test image is labelled dog",
    ]
