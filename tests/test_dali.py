"""`loaders.dali.load_dali_dataset`: the shards decoded by NVIDIA DALI, here on its CPU backend.

The same pipeline decodes with nvJPEG on a GPU ("mixed"); no GPU is lent to these tests, so
they check what does not depend on the device: records, labels, epochs, crops, dtypes, the
index files and the hand-off to Keras (DLPack into JAX, tf.data for TensorFlow).
"""

import collections
import dataclasses
import hashlib
import inspect
import io
import json
import os
import pathlib
import random
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest
from helpers import build, build_sample, ilsvrc_image, jpeg_bytes, read_split, write
from PIL import Image, ImageDraw

tf = pytest.importorskip("tensorflow")
pytest.importorskip("nvidia.dali")

from beam_pipeline.core.annotations import voc_xml  # noqa: E402
from beam_pipeline.tools import sample_tree  # noqa: E402
from loaders import ReadConfig, load_dataset, normalization_layer  # noqa: E402
from loaders.crops import crop_windows, main_boxes  # noqa: E402
from loaders.dali import load_dali_dataset  # noqa: E402
from loaders.dali_graph import (  # noqa: E402
    DaliSettings,
    dali_pipeline,
    decoder_arguments,
    prefetch_depth,
)
from loaders.dali_index import shard_indexes, write_index  # noqa: E402
from loaders.info import CorruptDatasetError, dataset_info  # noqa: E402
from loaders.preprocessing import (  # noqa: E402
    labelled_boxes,
    main_object_box,
    preprocess_for_eval,
)
from loaders.spec import LoadSpec  # noqa: E402
from schemas import features as F  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIZE = (40, 32)
# DALI decodes every JPEG at full size (nvJPEG has no DCT scaling): its pixels are compared with
# load_dataset's full-size decode.
FULL_SIZE = ReadConfig(dct_scaling=False)
STILL = ReadConfig(random_crop=False, random_flip=False)  # every record's pixels fixed


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return str(build_sample(tmp_path_factory, 90, 25, seed=4, num_shards="train=4,val=2"))


@pytest.fixture(autouse=True)
def _index_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def image_digests(dataset) -> list[str]:
    """The digest of every image of one pass of an images-only dataset, in order."""
    return [
        hashlib.sha1(image.tobytes()).hexdigest()
        for images in dataset
        for image in np.asarray(images)
    ]


def digests(dataset) -> list[tuple[str, int]]:
    """(digest of the image, label) of every image of one pass, in order."""
    found = []
    for images, labels in dataset:
        for image, label in zip(np.asarray(images), np.asarray(labels), strict=True):
            found.append((hashlib.sha1(image.tobytes()).hexdigest(), int(label)))
    return found


def training_crops(data_dir, batch_size: int, seed: int, config: ReadConfig):
    """A built DALI training pipeline (CPU, uint8, int labels) of the build's train split that
    also returns each crop's window: (images, labels, anchors, shapes, source shapes, boxes)."""
    info = dataset_info(data_dir)
    spec = LoadSpec(
        batch_size=batch_size,
        image_size=SIZE,
        training=True,
        seed=seed,
        label_mode="int",
        dtype="uint8",
        config=config,
    )
    pipe = dali_pipeline(
        spec,
        DaliSettings(device_id=None, num_threads=2),
        info.shard_paths("train"),
        shard_indexes(info, "train"),
        len(info.class_names),
        with_windows=True,
    )
    pipe.build()
    return pipe


def test_importing_loaders_does_not_import_dali():
    code = (
        "import sys, loaders\n"
        "assert not [m for m in sys.modules if m.startswith('nvidia.dali')], 'imported DALI'\n"
        "assert callable(loaders.load_dali_dataset)\n"
        "assert 'nvidia.dali' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=120)


def test_evaluation_is_every_record_once_with_the_loaders_labels_and_pixels(built):
    dataset = load_dali_dataset(built, "validation", batch_size=10, image_size=SIZE, dtype="uint8")
    assert isinstance(dataset, tf.data.Dataset)  # the TensorFlow backend gets tf.data
    assert dataset.cardinality().numpy() == 3  # 25 → 10 + 10 + 5
    examples = read_split(built, "validation")  # shard order: DALI's without shuffling
    num_classes = dataset_info(built).num_classes
    for _ in range(2):
        batches = list(dataset)
        assert [len(images) for images, _ in batches] == [10, 10, 5]
        images = np.concatenate([images for images, _ in batches])
        labels = np.concatenate([labels for _, labels in batches])
        assert images.dtype == np.uint8 and images.shape == (25, *SIZE, 3)
        expected = np.eye(num_classes + 1)[[e[F.LABEL][0] for e in examples]]
        np.testing.assert_array_equal(labels, expected)
        for image, example in zip(images, examples, strict=True):
            encoded = example[F.ENCODED][0]
            ours = preprocess_for_eval(encoded, SIZE, FULL_SIZE, dtype="uint8").numpy()
            # Two JPEG decoders' rounding (TensorFlow's INTEGER_FAST IDCT, DALI's libjpeg-turbo
            # default): within two levels on average; a wrong channel order, crop or flip
            # would be tens of levels off.
            assert np.abs(image.astype(int) - ours.astype(int)).mean() < 2.0


def test_one_hot_labels_have_load_datasets_columns_and_class_names(built, tmp_path):
    # A build of class folders (CLS-LOC style: no image is background): one column per class.
    tree, out = tmp_path / "tree", tmp_path / "out"
    synsets = ["n01440764", "n01443537", "n01484850"]
    for split in ("train", "val"):
        for index, synset in enumerate(synsets):
            stem = f"{synset}/{synset}_{split}"
            ilsvrc_image(
                tree, split, stem, jpeg_bytes(40, 30, (80 * index, 90, 20)), task="CLS-LOC"
            )
    build(tree, out)
    stored = [example[F.LABEL][0] for example in read_split(out, "validation")]
    assert sorted(stored) == [0, 1, 2]
    for background, width, names in [(None, 3, synsets), (True, 4, [*synsets, "background"])]:
        dataset = load_dali_dataset(
            str(out), "validation", batch_size=2, image_size=SIZE, background=background
        )
        assert dataset.element_spec[1] == tf.TensorSpec((None, width), tf.float32)
        labels = np.concatenate([labels for _, labels in dataset])
        np.testing.assert_array_equal(labels, np.eye(width, dtype=np.float32)[stored])
        assert dataset.class_names == names == dataset_info(str(out)).label_names(background)
    # The sample has negatives: background=False is refused on a split that holds them.
    count = dataset_info(built).background_count("validation")
    assert count > 0
    with pytest.raises(ValueError) as refused:
        load_dali_dataset(built, "validation", batch_size=5, background=False)
    assert str(refused.value).startswith(
        f"background=False, but split 'validation' of {built} has {count} images labelled "
        "background (label 4, images without objects): their one-hot labels would be all zeros."
    )


@pytest.mark.parametrize("fraction", [0.875, 0.6])
def test_evaluation_central_crops_cut_load_datasets_window(built, fraction):
    # DALI cut a fractional window (0.875 * H) where load_dataset cuts whole pixels (and a
    # float32 0.6 moved others by one): images up to 5 levels off on average.
    config = ReadConfig(eval_central_crop=fraction)
    kw = {"batch_size": 25, "image_size": SIZE, "dtype": "uint8", "config": config}
    (images,) = [np.asarray(x) for x, _ in load_dali_dataset(built, "validation", **kw)]
    for image, example in zip(images, read_split(built, "validation"), strict=True):
        encoded = example[F.ENCODED][0]
        full_size = dataclasses.replace(config, dct_scaling=False)
        ours = preprocess_for_eval(encoded, SIZE, config=full_size, dtype="uint8").numpy()
        assert np.abs(image.astype(int) - ours.astype(int)).mean() < 2.0


def test_exif_orientation_is_not_applied_as_load_dataset_does_not(tmp_path):
    # The build keeps a JPEG's bytes and its boxes describe the stored pixels; DALI's decoders
    # turned an image by its EXIF orientation, away from its boxes and load_dataset's pixels.
    turned = (ROOT / "tests/data/corpus/images/pillow/hopper_orientation_6.jpg").read_bytes()
    for n in range(3):
        xml = voc_xml([("cat", 16, 32, 64, 96)], size=(128, 128))
        ilsvrc_image(tmp_path / "tree", "train", f"t{n}", turned, xml)
        ilsvrc_image(tmp_path / "tree", "val", f"v{n}", turned, xml)
    build(tmp_path / "tree", tmp_path / "out")
    kw = {"batch_size": 3, "image_size": SIZE, "dtype": "uint8"}
    (images,) = [np.asarray(x) for x, _ in load_dali_dataset(tmp_path / "out", "validation", **kw)]
    ours = preprocess_for_eval(turned, SIZE, FULL_SIZE, dtype="uint8").numpy()
    for image in images:
        assert np.abs(image.astype(int) - ours.astype(int)).mean() < 2.0
    pipe = training_crops(tmp_path / "out", 3, seed=3, config=ReadConfig(random_flip=False))
    stored = tf.io.decode_jpeg(turned).numpy()  # as stored: EXIF not applied
    crops, _, anchors, shapes, _, _ = pipe.run()
    for i in range(3):  # each training crop is the stored image's window, resized
        (top, left), (h, w) = (
            np.array(anchors.at(i)).astype(int),
            np.array(shapes.at(i)).astype(int),
        )
        ours = tf.image.resize(stored[top : top + h, left : left + w], SIZE).numpy()
        assert np.abs(np.array(crops.at(i)).astype(float) - ours).mean() < 3.0


def test_training_epochs_hold_every_record_once_and_drop_only_the_remainder(built):
    every = collections.Counter(
        digests(load_dali_dataset(built, "train", batch_size=30, image_size=SIZE, **INT))
    )
    assert sum(every.values()) == len(every) == 90  # each image's pixels are its own
    train = load_dali_dataset(
        built, "train", batch_size=16, image_size=SIZE, training=True, seed=1, config=STILL, **INT
    )
    assert train.cardinality().numpy() == 5  # 90 → 5 x 16, the last 10 dropped
    epochs = [digests(train) for _ in range(3)]
    for epoch in epochs:
        assert len(epoch) == len(set(epoch)) == 80
        assert set(epoch) <= set(every)
    assert epochs[0] != epochs[1] != epochs[2]  # reshuffled every epoch
    assert len({frozenset(set(every) - set(epoch)) for epoch in epochs}) > 1
    list(train.take(2))  # an epoch left early: the next one still holds each record once
    for _ in range(2):
        epoch = digests(train)
        assert len(epoch) == len(set(epoch)) == 80 and set(epoch) <= set(every)


INT = {"label_mode": "int", "dtype": "uint8"}


def test_training_order_is_reshuffled_every_epoch_and_follows_the_seed(built):
    # Each image's pixels are its own: its digest names the record. DALI's reader once
    # shuffled the file order alone, with one fixed seed: every seed gave the same epochs, and
    # with the sample's files the second and fourth epochs were the stored order.
    images = {"image_size": SIZE, "label_mode": None, "dtype": "uint8"}
    stored = image_digests(load_dali_dataset(built, "train", batch_size=30, **images))
    position = {digest: i for i, digest in enumerate(stored)}
    assert len(position) == 90

    def epochs(seed):
        train = load_dali_dataset(
            built, "train", batch_size=10, training=True, seed=seed, config=STILL, **images
        )
        # 90 = 9 x 10: every record in every epoch
        return [tuple(position[d] for d in image_digests(train)) for _ in range(4)]

    first = epochs(0)
    for epoch in first:
        assert sorted(epoch) == list(range(90))  # a permutation of the split
        assert epoch != tuple(range(90))  # not the stored order
    assert len(set(first)) == 4  # each epoch its own order
    assert epochs(0) == first  # the same seed: the same epochs, in a new loader
    assert not set(epochs(1)) & set(first)
    unseeded = epochs(None), epochs(None)
    assert not set(unseeded[0]) & set(unseeded[1]) and not set(unseeded[0]) & set(first)


def test_float32_is_the_normalization_layer_of_uint8(built):
    config = ReadConfig(value_range=(-1.0, 1.0))
    for training in (False, True):
        kwargs = {"batch_size": 25, "image_size": SIZE, "label_mode": None, "config": config}
        kwargs.update(training=training, seed=5)
        pixels = next(iter(load_dali_dataset(built, "validation", dtype="uint8", **kwargs)))
        values = next(iter(load_dali_dataset(built, "validation", **kwargs)))
        assert values.dtype == tf.float32
        scaled = normalization_layer(config)(tf.cast(pixels, tf.float32)).numpy()
        np.testing.assert_allclose(values.numpy(), scaled, atol=0.5 / 255 * 2 + 1e-6)


def test_float32_stays_within_the_value_range(tmp_path):
    # White images resized to 224x224: the float resize's rounding gave 1.0000001-1.0000002
    # for (0, 1), past the range the model was promised.
    tree = tmp_path / "tree"
    for i, (width, height) in enumerate([(700, 200), (200, 900), (500, 333)]):
        image = Image.new("RGB", (width, height), (255, 255, 255))
        draw = ImageDraw.Draw(image)
        draw.rectangle([width // 4, height // 4, width // 2, height // 2], outline=(255, 0, 0))
        draw.line([0, 0, width, height], fill=(0, 0, 0), width=3)
        data = io.BytesIO()
        image.save(data, "JPEG", quality=95)
        xml = voc_xml([("n00000001", 1, 1, 30, 30)], size=(width, height))
        ilsvrc_image(tree, "train", f"n00000001_{i}", data.getvalue(), xml)
    build(tree, tmp_path / "out", "--splits", "train", "--num_shards", "1")
    for low, high in ((0.0, 1.0), (-1.0, 1.0)):
        config = ReadConfig(value_range=(low, high))
        (images,) = load_dali_dataset(
            str(tmp_path / "out"), "train", batch_size=3, label_mode=None, config=config
        )
        assert images.numpy().max() == high and images.numpy().min() == low


def test_training_crops_keep_the_main_object_within_the_crop_limits(built):
    config = ReadConfig(min_object_covered=0.5, crop_area_range=(0.2, 0.9))
    pipe = training_crops(built, 30, seed=7, config=config)
    expected = set()
    for example in read_split(built, "train"):
        boxes = (
            np.stack(
                [
                    example[key]
                    for key in ("image/object/bbox/" + s for s in ["ymin", "xmin", "ymax", "xmax"])
                ],
                1,
            )
            if example.get(F.BBOX_YMIN)
            else np.zeros((0, 4), np.float32)
        )
        expected.add(
            tuple(np.float32(main_object_box(tf.constant(boxes, tf.float32)).numpy().ravel()))
        )
    checked = whole = 0
    for _ in range(9):  # three epochs
        _, _, anchors, shapes, sources, boxes = pipe.run()
        for i in range(30):
            (top, left), (h, w) = np.array(anchors.at(i)), np.array(shapes.at(i))
            height, width = np.array(sources.at(i))[:2]
            box = np.array(boxes.at(i))[0]
            assert tuple(np.float32(box)) in expected
            assert top >= 0 and left >= 0 and top + h <= height and left + w <= width
            assert (top, left, h, w) == (int(top), int(left), int(h), int(w))  # whole pixels
            checked += 1
            if (h, w) == (height, width):
                whole += 1  # no attempt fitted: the whole image, as tf.image's
                continue
            assert 0.2 * height * width <= w * h <= 0.9 * height * width
            assert 3 / 4 - 0.5 / h <= w / h <= 4 / 3 + 0.5 / h  # the width is rounded
            # the kernel's box: whole pixels, truncated
            ymin, xmin, ymax, xmax = (
                int(box[0] * height), int(box[1] * width), int(box[2] * height), int(box[3] * width)
            )  # fmt: skip
            covered = max(0, min(top + h, ymax) - max(top, ymin)) * max(
                0, min(left + w, xmax) - max(left, xmin)
            )
            assert covered >= 0.5 * (ymax - ymin) * (xmax - xmin)
    assert checked == 270 and whole < 27


def _tf_crops(height, width, box, config, count):
    """`count` windows (top, left, height, width) of load_dataset's tf.image sampler."""
    windows = []
    for seed in range(count):
        begin, size, _ = tf.image.stateless_sample_distorted_bounding_box(
            [height, width, 3],
            bounding_boxes=tf.constant([[box]], tf.float32),
            seed=[seed, 1],
            min_object_covered=config.min_object_covered,
            aspect_ratio_range=config.crop_aspect_ratio_range,
            area_range=config.crop_area_range,
            max_attempts=10,
            use_image_if_no_bounding_boxes=True,
        )
        windows.append((*begin.numpy()[:2], *size.numpy()[:2]))
    return np.array(windows, np.float64)


@pytest.mark.parametrize(
    "height, width, box",
    [
        (200, 1000, (0.2, 0.4, 0.9, 0.45)),  # wide, a narrow object: DALI's own sampler: 100% whole
        (900, 200, (0.1, 0.1, 0.3, 0.9)),  # tall: 95% whole
        (252, 500, (0.282, 0.006, 0.845, 0.038)),  # a narrow box at the edge: missed it
        (375, 500, (0.0, 0.0, 1.0, 1.0)),  # no object: the whole image is the box
        # a box one pixel wide once truncated in float32, as the kernel does (in float64,
        # 0.45 * 20 is 8.9999998: no pixel, and every crop the whole image)
        (40, 20, (0.2, 0.4, 0.9, 0.45)),
    ],
)
def test_crops_are_drawn_as_load_datasets_tf_image_draws_them(height, width, box):
    # The same distribution as load_dataset's: how often the whole image, the mean area and
    # aspect ratio of the others, the mean centre; over 600 draws each.
    config = ReadConfig()
    rng = random.Random(0)
    sides = [[np.float32([value])] * 10 for value in box]  # ymins, xmins, ymaxs, xmaxs
    ours = []
    for _ in range(60):  # batches of 10
        anchors, sizes, _ = crop_windows([(height, width, 3)] * 10, *sides, rng=rng, config=config)
        ours += [(*anchor, *size) for anchor, size in zip(anchors, sizes, strict=True)]
    ours = np.array(ours, np.float64)
    theirs = _tf_crops(height, width, box, config, 600)
    for windows in (ours, theirs):
        assert windows.shape == (600, 4)

    def summary(windows):
        whole = (windows[:, 2] == height) & (windows[:, 3] == width)
        crops = windows[~whole]
        return (
            whole.mean(),
            (crops[:, 2] * crops[:, 3]).mean() / (height * width),
            (crops[:, 3] / crops[:, 2]).mean(),
            (crops[:, 0] + crops[:, 2] / 2).mean() / height,
            (crops[:, 1] + crops[:, 3] / 2).mean() / width,
        )

    np.testing.assert_allclose(summary(ours), summary(theirs), atol=0.06)
    # every window keeps enough of the box, or is the whole image
    for top, left, h, w in ours:
        if (h, w) == (height, width):
            continue
        ymin, xmin = int(box[0] * height), int(box[1] * width)
        ymax, xmax = int(box[2] * height), int(box[3] * width)
        covered = max(0, min(top + h, ymax) - max(top, ymin)) * max(
            0, min(left + w, xmax) - max(left, xmin)
        )
        assert covered >= config.min_object_covered * (ymax - ymin) * (xmax - xmin)


class _LargestDraws(random.Random):
    """Draws at the top of every range: the tallest crop, at the largest offsets."""

    def random(self):
        return 0.0

    def randrange(self, n):
        return n - 1


def test_a_crop_rounded_past_the_largest_area_is_one_pixel_shorter_as_tensorflows():
    # 100x100, areas 8-50%, aspect 1: the tallest draw is 71 pixels, 71x71 = 5,041 > 5,000;
    # TensorFlow's kernel then tries 70x70 (the sampler gave up the attempt).
    config = ReadConfig(crop_area_range=(0.08, 0.5), crop_aspect_ratio_range=(1.0, 1.0))
    sides = [[np.float32([value])] for value in (0.0, 0.0, 1.0, 1.0)]
    (anchor,), (size,), _ = crop_windows(
        [(100, 100, 3)], *sides, rng=_LargestDraws(), config=config
    )
    assert (anchor.tolist(), size.tolist()) == ([29, 29], [70, 70])


def test_the_same_seed_draws_the_same_crops_another_seed_others(built):
    def windows(seed):
        pipe = training_crops(built, 30, seed=seed, config=ReadConfig())
        _, _, anchors, shapes, _, _ = pipe.run()
        return [(*np.array(anchors.at(i)), *np.array(shapes.at(i))) for i in range(30)]

    assert windows(3) == windows(3) != windows(4)


def test_main_boxes_pick_the_loaders_main_object():
    cases = [
        np.zeros((0, 4), np.float32),
        np.array([[0.1, 0.2, 0.5, 0.6]], np.float32),
        np.array([[0, 0, 0.2, 0.2], [0.1, 0.1, 0.9, 0.5], [0.3, 0.3, 0.4, 0.4]], np.float32),
        np.array([[0, 0, 0.5, 0.5], [0.5, 0.5, 1, 1]], np.float32),  # a tie: the first
    ]
    picked = main_boxes(*zip(*[tuple(case.T) for case in cases], strict=True))
    for case, box in zip(cases, picked, strict=True):
        np.testing.assert_array_equal(box, main_object_box(tf.constant(case)).numpy()[0])
    # Of a labelled image, the label's boxes: of two of one pixel area (40 x 72 and 72 x 40
    # of 200 x 160) the build's label is the first's, and float32 ranks the second first.
    tie = np.array([[0, 0, 72 / 160, 40 / 200], [120 / 160, 128 / 200, 1, 1]], np.float32)
    for classes, label in (([0, 1], 0), ([0, 1], 1), ([1, 1], 0), ([0, 0], 0)):
        (box,) = main_boxes(*([side] for side in tie.T), [np.array(classes)], [np.array([label])])
        tied = labelled_boxes(tf.constant(tie), tf.constant(classes), label)
        np.testing.assert_array_equal(box, main_object_box(tied).numpy()[0])
    assert main_boxes(*([side] for side in tie.T), [np.array([0, 1])], [np.array([0])])[0][
        0, 0
    ] == np.float32(0)


def test_the_index_folder_expands_home_and_ignores_a_relative_cache_home(
    built, tmp_path, monkeypatch
):
    # index_dir="~/idx" made a folder named "~" in the working directory, and so did a
    # relative $XDG_CACHE_HOME (the XDG spec says to ignore one).
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    info = dataset_info(built)
    indexes = shard_indexes(info, "validation", "~/idx")
    assert all(index.startswith(str(tmp_path / "home/idx") + "/") for index in indexes)
    monkeypatch.setenv("XDG_CACHE_HOME", "~/cache")
    cache = str(tmp_path / "home/.cache/imagenet-tfrecords/dali-index") + "/"
    assert all(index.startswith(cache) for index in shard_indexes(info, "validation"))
    assert not (tmp_path / "~").exists()


def test_the_index_files_are_dalis_and_are_reused_until_a_shard_changes(built, tmp_path):
    info = dataset_info(built)
    indexes = shard_indexes(info, "train", str(tmp_path / "idx"))
    shard = info.shard_paths("train")[0]
    theirs = tmp_path / "theirs.idx"
    tool = pathlib.Path(sys.executable).with_name("tfrecord2idx")
    subprocess.run([sys.executable, str(tool), shard, str(theirs)], check=True, timeout=120)
    assert pathlib.Path(indexes[0]).read_text() == theirs.read_text()
    lines = [len(pathlib.Path(index).read_text().splitlines()) for index in indexes]
    assert lines == [shard.num_examples for shard in info.split("train").shards]
    stamps = [os.stat(index).st_mtime_ns for index in indexes]
    pathlib.Path(indexes[1]).write_text("0 10\n")  # stale: rewritten; the others kept
    assert shard_indexes(info, "train", str(tmp_path / "idx")) == indexes
    assert [os.stat(index).st_mtime_ns for index in indexes][::2] == stamps[::2]
    assert pathlib.Path(indexes[1]).read_text().count("\n") == lines[1]
    with pytest.raises(CorruptDatasetError, match=f"shard {shard}: {lines[0]} whole records"):
        write_index(shard, str(tmp_path / "x.idx"), lines[0] + 1)


def _record_offsets(shard: pathlib.Path) -> list[int]:
    data, offsets, offset = shard.read_bytes(), [], 0
    while offset < len(data):
        offsets.append(offset)
        offset += 16 + int.from_bytes(data[offset : offset + 8], "little")
    return offsets


def test_a_record_whose_checksum_is_wrong_is_refused_naming_it(built, tmp_path):
    # One byte of a record's label changed, the file's size kept: DALI's reader does not check
    # CRCs, so the index writer does; without it the record came out with the wrong label.
    damaged = tmp_path / "damaged"
    shutil.copytree(built, damaged)
    info = dataset_info(damaged)
    shard = pathlib.Path(info.shard_paths("validation")[1])
    offsets = _record_offsets(shard)
    assert len(offsets) == info.split("validation").shards[1].num_examples > 3
    data = bytearray(shard.read_bytes())
    key = F.LABEL.encode() + b"\x12\x05\x1a\x03\n\x01"  # int64_list {value: [label]}
    at = data.index(key, offsets[3]) + len(key)
    assert at < offsets[4]
    data[at] ^= 0x03
    shard.write_bytes(bytes(data))
    expected = f"shard {shard}: record 3 at byte {offsets[3]}: data checksum mismatch"
    with pytest.raises(CorruptDatasetError, match=re.escape(expected)):
        load_dali_dataset(str(damaged), "validation", batch_size=5, **INT)
    data[at] ^= 0x03
    data[offsets[2] + 1] ^= 0x01  # record 2's length (same size: the length's CRC fails)
    shard.write_bytes(bytes(data))
    expected = f"shard {shard}: record 2 at byte {offsets[2]}: length checksum mismatch"
    with pytest.raises(CorruptDatasetError, match=re.escape(expected)):
        load_dali_dataset(str(damaged), "validation", batch_size=5, **INT)
    data[offsets[2] + 1] ^= 0x01
    shard.write_bytes(bytes(data))
    labels = [
        y for _, y in digests(load_dali_dataset(str(damaged), "validation", batch_size=5, **INT))
    ]
    assert labels == [e[F.LABEL][0] for e in read_split(damaged, "validation")]


def test_a_shard_changed_in_place_after_its_index_is_checked_again(built, tmp_path):
    # The index cache outlives a load: a shard damaged in place later (same size, a bad copy
    # over it) kept its cached index, and DALI decoded the changed record, label and all.
    damaged = tmp_path / "damaged"
    shutil.copytree(built, damaged)
    info = dataset_info(damaged)
    dataset = load_dali_dataset(str(damaged), "validation", batch_size=5, **INT)
    good = digests(dataset)
    shard = pathlib.Path(info.shard_paths("validation")[1])
    offsets = _record_offsets(shard)
    data = bytearray(shard.read_bytes())
    key = F.LABEL.encode() + b"\x12\x05\x1a\x03\n\x01"  # int64_list {value: [label]}
    at = data.index(key, offsets[3]) + len(key)
    data[at] ^= 0x03
    before = os.stat(shard).st_mtime_ns
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(before + 10**9, before + 10**9))  # a later write, whatever the clock
    with pytest.raises(Exception, match=re.escape(f"shard {shard} changed")):
        list(dataset)  # its next epoch (tf.data wraps the error)
    expected = f"shard {shard}: record 3 at byte {offsets[3]}: data checksum mismatch"
    with pytest.raises(CorruptDatasetError, match=re.escape(expected)):
        load_dali_dataset(str(damaged), "validation", batch_size=5, **INT)
    data[at] ^= 0x03
    shard.write_bytes(bytes(data))  # mended
    assert digests(load_dali_dataset(str(damaged), "validation", batch_size=5, **INT)) == good


@pytest.mark.slow
def test_an_index_is_rewritten_for_a_rebuilt_shard_of_the_same_size(tmp_path):
    # Reseeded, a one-shard build holds the same records in another order: the same count and
    # bytes, other offsets. The shared index directory must not serve the first build's index.
    tree = tmp_path / "tree"
    sample_tree.write_tree(str(tree), num_train=12, num_val=4, seed=1)
    outs = [tmp_path / "out0", tmp_path / "out1"]
    for seed, out in enumerate(outs):
        build(tree, out, "--num_shards", "1", "--seed", str(seed))
    first, second = (dataset_info(out).split("train").shards[0] for out in outs)
    assert (first.file, first.num_bytes) == (second.file, second.num_bytes)
    assert first.sha256 != second.sha256
    index_dir = str(tmp_path / "idx")
    for out in outs:
        (index,) = shard_indexes(dataset_info(out), "train", index_dir)
        theirs = tmp_path / "theirs.idx"
        tool = pathlib.Path(sys.executable).with_name("tfrecord2idx")
        shard = str(out / first.file)
        subprocess.run([sys.executable, str(tool), shard, str(theirs)], check=True, timeout=120)
        assert pathlib.Path(index).read_text() == theirs.read_text()
    labels = sorted(
        int(y)
        for _, y in digests(
            load_dali_dataset(
                str(outs[1]),
                "train",
                batch_size=4,
                image_size=SIZE,
                label_mode="int",
                index_dir=index_dir,
            )
        )
    )
    assert labels == sorted(e[F.LABEL][0] for e in read_split(outs[1], "train"))


def test_a_dataset_made_before_a_rebuild_refuses_its_next_epoch(tmp_path):
    # A rebuild writes shards of the same names, which DALI read through the old indexes.
    tree, larger, out = tmp_path / "tree", tmp_path / "larger", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=20, num_val=10, seed=2)
    sample_tree.write_tree(str(larger), num_train=20, num_val=16, seed=3)
    build(tree, out, "--num_shards", "1")
    dataset = load_dali_dataset(str(out), "validation", batch_size=5, image_size=SIZE)
    assert sum(len(images) for images, _ in dataset) == 10
    build(larger, out, "--num_shards", "1", "--overwrite")
    with pytest.raises(Exception, match=r"build_info\.json changed since load_dali_dataset read"):
        list(dataset)


@pytest.mark.parametrize("rebuild", ["another seed", "classes reordered"])
def test_a_rebuild_that_commits_in_the_middle_of_an_epoch_stops_it_by_name(tmp_path, rebuild):
    # DALI opens each shard when it reaches it: after the commit it read a new shard through
    # its old index. Another seed moves the records: DALI's own "Critical error in pipeline".
    # Classes in another order keep every offset: the epoch went on with the new build's
    # records, no error.
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=20, num_val=60, seed=1)
    order = ["circle", "cross", "square", "triangle"]
    labels = write(tmp_path / "labels.txt", "".join(f"{name}\n" for name in order))
    build(tree, out, "--num_shards", "4", "--labels_file", labels)
    dataset = load_dali_dataset(
        str(out), "validation", batch_size=4, image_size=16, prefetch_batches=1, **INT
    )
    batches = iter(dataset)
    next(batches)
    if rebuild == "another seed":
        build(tree, out, "--num_shards", "4", "--labels_file", labels, "--overwrite", "--seed", "7")
    else:
        labels.write_text("".join(f"{name}\n" for name in reversed(order)))
        build(tree, out, "--num_shards", "4", "--labels_file", labels, "--overwrite")
    with pytest.raises(Exception, match=r"build_info\.json changed since load_dali_dataset read"):
        list(batches)


def test_a_dataset_made_after_a_rebuild_in_the_same_process_reads_the_new_shards(tmp_path):
    # DALI kept each shard's memory map by path: after a rebuild with the classes in another
    # order (shards of the same names and sizes), a new dataset read the old bytes through the
    # new indexes and gave other records' labels, with no error.
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=20, num_val=12, seed=5)
    orders = (["circle", "cross", "square", "triangle"], ["triangle", "square", "cross", "circle"])
    for i, order in enumerate(orders):
        labels = write(tmp_path / f"labels{i}.txt", "".join(f"{name}\n" for name in order))
        build(tree, out, "--num_shards", "1", "--labels_file", labels, *(["--overwrite"] * i))
        dataset = load_dali_dataset(str(out), "validation", batch_size=4, image_size=SIZE, **INT)
        stored = [example[F.LABEL][0] for example in read_split(out, "validation")]
        assert [label for _, label in digests(dataset)] == stored  # evaluation: stored order


def test_load_dali_datasets_shared_defaults_are_the_specs():
    parameters = inspect.signature(load_dali_dataset).parameters
    shared = [field for field in dataclasses.fields(LoadSpec) if field.name in parameters]
    names = {"batch_size", "image_size", "training", "seed", "label_mode", "background"}
    names |= {"dtype", "config"}
    assert {field.name for field in shared} == names
    for field in shared:
        if field.default is not dataclasses.MISSING:
            assert parameters[field.name].default == field.default, field.name


def test_bad_arguments_are_refused_by_name(built):
    cases = [
        ({"device": "gpu"}, 'device="gpu", but DALI sees no CUDA device'),
        ({"device": "tpu"}, "device must be one of"),
        ({"label_mode": "detection"}, "detection targets come from load_dataset"),
        ({"dtype": "float16"}, "dtype must be one of"),
        ({"num_threads": 0}, "num_threads must be at least 1 (or None: the cores this process"),
        ({"config": ReadConfig(cache=True)}, "ReadConfig(cache=True) is load_dataset's"),
        (
            {"config": ReadConfig(dct_scaling=True)},
            "ReadConfig(dct_scaling=True) is load_dataset's: DALI decodes every JPEG whole",
        ),
    ]
    for kwargs, message in cases:
        with pytest.raises(ValueError, match=re.escape(message)):
            load_dali_dataset(built, "train", batch_size=8, **kwargs)
    with pytest.raises(ValueError, match=re.escape("prefetch_batches must be at least 1 (or ")):
        load_dali_dataset(built, "train", batch_size=8, prefetch_batches=0)
    # DALI aborted the process (num_threads=10**6) or spun for minutes (prefetch_batches=10**6)
    with pytest.raises(ValueError, match=r"^num_threads must be at most \d+ \(max\(64, 4 x the"):
        load_dali_dataset(built, "train", batch_size=8, num_threads=10**6)
    with pytest.raises(ValueError) as error:
        load_dali_dataset(built, "train", batch_size=8, prefetch_batches=65)
    assert str(error.value) == (
        "prefetch_batches must be at most 64 (each batch ahead holds its decoded images), not 65"
    )
    for kwargs, message in [
        ({"prefetch_batches": 2.0}, "prefetch_batches must be an int or None, not 2.0"),
        ({"num_threads": "2"}, "num_threads must be an int or None, not '2'"),
        ({"num_threads": 2.0}, "num_threads must be an int or None, not 2.0"),
        ({"training": 1}, "training must be True or False, not 1"),
    ]:
        with pytest.raises(TypeError, match=re.escape(message)):
            load_dali_dataset(built, "train", batch_size=8, **kwargs)
    with pytest.raises(ValueError, match="reads local files only"):
        load_dali_dataset("gs://bucket/out", "train", batch_size=8)
    with pytest.raises(ValueError, match="batch_size=128 is larger than split 'train'"):
        load_dali_dataset(built, "train", batch_size=128, training=True)
    blocked = pathlib.Path(built) / "build_info.json" / "idx"  # below a file: never a folder
    with pytest.raises(OSError) as error:
        load_dali_dataset(built, "train", batch_size=8, index_dir=str(blocked))
    assert str(error.value) == (
        f"[Errno 20] index_dir {blocked}: Not a directory; DALI's reader needs an index file "
        "per shard there: pass an index_dir= this process can write"
    )


def test_decoder_options_reach_dalis_decoder(built):
    # hw_decoder_load is the share for an A100/H100's hardware decoder: on the CPU backend it
    # changes nothing, but DALI takes it; a name DALI does not know is DALI's KeyError.
    def pixels(**kwargs):
        dataset = load_dali_dataset(built, "validation", batch_size=10, dtype="uint8", **kwargs)
        return image_digests(dataset.map(lambda images, labels: images))

    assert pixels(decoder_options={"hw_decoder_load": 1.0}) == pixels()
    # DALI's own refusals named neither the argument nor decoder_options (a KeyError, or a
    # conversion error from deep inside DALI).
    for options, dalis in (
        ({"no_such_option": 1}, '"no_such_option" is not defined for operator'),
        ({"hw_decoder_load": "high"}, "could not convert string to float"),
    ):
        with pytest.raises(ValueError) as error:
            pixels(decoder_options=options)
        assert str(error.value).startswith(
            f"decoder_options {options!r}: DALI's JPEG decoder refused them: "
        )
        assert dalis in str(error.value)
    with pytest.raises(ValueError) as error:
        pixels(decoder_options={"device": "cpu", "output_type": 0})
    assert str(error.value) == (
        "decoder_options may not set device, output_type: the loader sets device, output_type, "
        "adjust_orientation, axis_names, normalized_anchor, normalized_shape, dtype (device= "
        "chooses the GPU or the CPU, dtype= the output's type)"
    )
    with pytest.raises(ValueError, match="decoder_options may not set axis_names, dtype: "):
        pixels(decoder_options={"axis_names": "HW", "dtype": 1})
    with pytest.raises(TypeError, match=r"decoder_options must be a dict of DALI decoder "):
        pixels(decoder_options=["hw_decoder_load"])


def test_on_the_gpu_the_decoder_gets_no_hardware_share_and_16_batches_are_prepared_ahead():
    # Measured on an H200 (benchmarks/RESULTS.md, "GPU: does ResNet-50 wait on input",
    # `4f74434`): DALI's defaults (2 ahead, 65% of
    # the images to the hardware decoder) left ResNet-50 waiting. Without a GPU here, the
    # arguments the pipeline is made with are what can be checked.
    gpu, cpu = decoder_arguments(0, None), decoder_arguments(None, None)
    assert gpu["device"] == "mixed" and gpu["hw_decoder_load"] == 0.0
    assert cpu["device"] == "cpu" and "hw_decoder_load" not in cpu
    assert decoder_arguments(0, {"hw_decoder_load": 0.65})["hw_decoder_load"] == 0.65
    for arguments in (gpu, cpu):
        assert arguments["adjust_orientation"] is False  # the pixels as stored
    assert (prefetch_depth(0, None), prefetch_depth(None, None)) == (16, 2)
    assert (prefetch_depth(0, 3), prefetch_depth(None, 5)) == (3, 5)


def test_numpy_integers_are_integer_arguments(built):
    val = load_dali_dataset(
        built,
        "validation",
        batch_size=np.int64(10),
        image_size=np.int64(16),
        num_threads=np.int64(2),
        **INT,
    )
    assert [(x.shape, y.shape) for x, y in val] == [
        ((10, 16, 16, 3), (10,)),
        ((10, 16, 16, 3), (10,)),
        ((5, 16, 16, 3), (5,)),
    ]


@pytest.mark.slow
def test_keras_trains_on_it_with_the_jax_backend(built):
    code = f"""
import keras, numpy as np
from loaders import load_dali_dataset, normalization_layer
train = load_dali_dataset({built!r}, "train", batch_size=16, image_size=32, training=True,
                          seed=0, dtype="uint8")
images, labels = train[0]
# DALI's CPU backend hands NumPy arrays, which Keras moves to its device: JAX arrays committed
# to the CPU were refused by a model on a GPU ("incompatible devices for jitted computation").
assert type(images) is np.ndarray and type(labels) is np.ndarray, type(images)
assert images.dtype == np.uint8 and images.shape == (16, 32, 32, 3) and labels.shape == (16, 5)
assert train.class_names == ["circle", "cross", "square", "triangle", "background"]
model = keras.Sequential([keras.Input((32, 32, 3), dtype="uint8"), normalization_layer(),
    keras.layers.Conv2D(4, 3, activation="relu"), keras.layers.GlobalAveragePooling2D(),
    keras.layers.Dense(5, activation="softmax")])
model.compile("adam", "categorical_crossentropy")
history = model.fit(train, epochs=2, verbose=0)
assert len(history.history["loss"]) == 2 and len(train) == 5
# DALI's CPU backend: 2 batches ahead unless asked (16 on a GPU)
assert train._pipeline.prefetch_queue_depth == 2
ahead = load_dali_dataset({built!r}, "validation", batch_size=10, image_size=32,
                          prefetch_batches=5, dtype="uint8")
assert ahead._pipeline.prefetch_queue_depth == 5
# Images alone (an unlabelled split's mode): Keras's PyDataset took no bare array.
images_only = load_dali_dataset({built!r}, "validation", batch_size=10, image_size=32,
                                label_mode=None, dtype="uint8")
assert images_only[0][0].shape == (10, 32, 32, 3)
assert model.predict(images_only, verbose=0).shape == (25, 5)
print("backend", keras.backend.backend())
"""
    env = {**os.environ, "KERAS_BACKEND": "jax", "JAX_PLATFORMS": "cpu"}
    run = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "backend jax" in run.stdout


def test_a_schema_1_build_is_read(built, tmp_path):
    # A build as schema 1.2 wrote it (dataset_info.json, no build_info.json): load_dataset
    # reads it; load_dali_dataset failed opening build_info.json for its index cache's key.
    from schemas import BUILD_INFO_FILE, LEGACY_INFO_FILE
    from schemas.tfds_metadata import TFDS_FILES

    legacy = tmp_path / "legacy"
    shutil.copytree(built, legacy)
    payload = json.loads((legacy / BUILD_INFO_FILE).read_text())
    payload["schema_version"] = "1.2.0"
    for name in (*TFDS_FILES, BUILD_INFO_FILE):
        (legacy / name).unlink()
    (legacy / LEGACY_INFO_FILE).write_text(json.dumps(payload))
    assert digests(load_dali_dataset(str(legacy), "validation", batch_size=5, **INT)) == digests(
        load_dali_dataset(built, "validation", batch_size=5, **INT)
    )


@pytest.mark.parametrize("device", ["cpu", "mixed"])
def test_what_a_build_stores_of_the_fuzzers_cases_decodes_in_dalis_decoder(device):
    # The invariant the fuzzers check with Pillow, TensorFlow and libjpeg-turbo, for DALI's
    # decoders too (libjpeg-turbo on the CPU; nvJPEG, "mixed", on a GPU host): every image a
    # build stores of the damaged inputs found so far, and of the seeds, under every policy.
    from nvidia.dali import backend, fn, pipeline_def, types

    gpu = device == "mixed"
    if gpu and backend.GetCUDADeviceCount() == 0:
        pytest.skip("nvJPEG needs a CUDA device (run on the GPU host)")

    from beam_pipeline.core.images import normalise_image
    from beam_pipeline.core.rejections import InputError
    from benchmarks.fuzz_targets import FOUND, POLICIES, SEEDS

    stored = []
    for data in [*(p.read_bytes() for p in sorted(FOUND.glob("*.jpg"))), *SEEDS.values()]:
        for policy in POLICIES:
            try:
                stored.append(normalise_image(data, policy))
            except InputError:
                continue
    assert len(stored) >= 4 * len(SEEDS)

    @pipeline_def(batch_size=len(stored), num_threads=1, device_id=0 if gpu else None)
    def decode():
        return fn.decoders.image(
            fn.external_source(name="jpegs"), device=device, output_type=types.RGB
        )

    pipe = decode()
    pipe.build()
    pipe.feed_input("jpegs", [np.frombuffer(image.data, np.uint8) for image in stored])
    (decoded,) = pipe.run()
    if gpu:
        decoded = decoded.as_cpu()
    for index, image in enumerate(stored):
        assert np.array(decoded[index]).shape == (image.height, image.width, 3)


def test_binary_labels_are_load_datasets(tmp_path):
    # label_mode="binary" (Keras's): [B, 1] float32, 0.0 or 1.0, as load_dataset gives them.
    for index in range(4):
        xml = voc_xml([(("cat", "dog")[index % 2], 2, 2, 30, 20)], size=(40, 30))
        ilsvrc_image(tmp_path / "tree", "train", f"t{index}", jpeg_bytes(40, 30), xml)
    build(tmp_path / "tree", tmp_path / "out", "--splits", "train")
    kw = {"batch_size": 4, "image_size": SIZE, "label_mode": "binary"}
    (theirs,) = [np.asarray(y) for _, y in load_dataset(tmp_path / "out", "train", **kw)]
    (ours,) = [np.asarray(y) for _, y in load_dali_dataset(tmp_path / "out", "train", **kw)]
    assert ours.dtype == np.float32 and ours.shape == (4, 1)
    np.testing.assert_array_equal(ours, theirs)


def test_a_label_past_the_builds_is_refused_not_wrapped(built, tmp_path):
    # DALI's one_hot made a label of 2**32 + 2 the one-hot of 2, its cast clipped it to
    # 2**31 - 1, no error (load_dataset refuses it: tests/test_fuzz_records.py).
    from schemas import BUILD_INFO_FILE
    from schemas.example_proto import Example
    from schemas.tfrecord import encode_record, read_records

    copy = shutil.copytree(built, tmp_path / "out")
    payload = json.loads((copy / BUILD_INFO_FILE).read_text())
    entry = payload["splits"]["validation"]["shards"][0]
    with open(copy / entry["file"], "rb") as stream:
        records = list(read_records(stream))
    example = Example.FromString(records[0])
    example.features.feature[F.LABEL].int64_list.value[0] = 2**32 + 2
    blob = b"".join(encode_record(r) for r in [example.SerializeToString(), *records[1:]])
    (copy / entry["file"]).write_bytes(blob)
    entry.update(num_bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    (copy / BUILD_INFO_FILE).write_text(json.dumps(payload))
    for mode in ("one_hot", "int"):
        dataset = load_dali_dataset(
            str(copy), "validation", batch_size=25, image_size=SIZE, label_mode=mode
        )
        # (tf.data's generator carries the error across as its own, with the message)
        raised = (CorruptDatasetError, tf.errors.InvalidArgumentError)
        with pytest.raises(raised, match="label 4294967298 is not one of the 5 labels loaded"):
            for _ in dataset:
                pass
