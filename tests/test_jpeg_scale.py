"""`ReadConfig.dct_scaling`: a JPEG decoded at 1/2, 1/4 or 1/8 of its size where what the output
shows still has the output's pixels at that scale; the same view, boxes and pixels as a decode at
that scale composed by hand."""

import io
import pathlib
import warnings

import numpy as np
import pytest
import tensorflow as tf
from helpers import build
from PIL import Image

from loaders import ReadConfig, dataset_info, load_dataset
from loaders.jpeg_scale import RATIOS, may_scale, scaled_shape, scaling_hint
from loaders.preprocessing import eval_view, preprocess_for_eval, preprocess_for_train, train_view
from schemas.metadata import SplitInfo

CAT = pathlib.Path(__file__).parent / "data/corpus/images/tfrecorder/TRAIN/cat/cat-640x853-1.jpg"
FULL_SIZE = ReadConfig()  # the default: whole decodes
SCALED = ReadConfig(dct_scaling=True)


def decoded(encoded, ratio, window=None):
    """The JPEG at 1/`ratio`, or its `window` at that scale as libjpeg crops it (its right and
    bottom edges' chroma upsampled as the image's are: a few levels off a slice there)."""
    if window is None:
        return tf.io.decode_jpeg(encoded, channels=3, ratio=ratio, dct_method="INTEGER_FAST")
    window = tf.constant(window, tf.int32)
    return tf.io.decode_and_crop_jpeg(
        encoded, window, channels=3, ratio=ratio, dct_method="INTEGER_FAST"
    )


def resized(image, size):
    pixels = tf.image.resize(image, size, method="bilinear", antialias=False)
    return tf.cast(tf.clip_by_value(tf.round(pixels), 0, 255), tf.uint8).numpy()


@pytest.mark.parametrize("progressive", [False, True])
@pytest.mark.parametrize("size", [(1, 1), (7, 9), (17, 33), (599, 801), (1000, 8)])
def test_the_scaled_shape_is_libjpegs(size, progressive):
    height, width = size
    pixels = np.random.default_rng(height).integers(0, 256, (height, width, 3), np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", progressive=progressive)
    for ratio in RATIOS:
        image = decoded(tf.constant(out.getvalue()), ratio)
        assert tuple(image.shape[:2]) == tuple(scaled_shape(np.array(size), ratio))


@pytest.mark.parametrize(
    ("size", "crop", "ratio"),
    [
        ((64, 64), 1.0, 8),  # 853 x 640 / 8 = 107 x 80
        ((80, 80), 1.0, 8),
        ((64, 81), 1.0, 4),  # 80 wide at 1/8: one short
        ((100, 100), 1.0, 4),
        ((200, 300), 1.0, 2),
        ((400, 400), 1.0, 1),
        ((70, 70), 0.875, 8),  # the central crop of 80: 70
        ((71, 71), 0.875, 4),
        ((280, 100), 0.875, 2),
    ],
)
def test_evaluation_decodes_at_the_smallest_scale_that_fills_the_output(size, crop, ratio):
    encoded = tf.constant(CAT.read_bytes())
    config = ReadConfig(eval_central_crop=crop, dct_scaling=True)
    image, view = eval_view(encoded, size, config, "uint8")
    source = decoded(encoded, ratio)
    expected = tf.image.central_crop(source, crop) if crop < 1 else source
    assert tuple(view.source_shape.numpy()) == tuple(source.shape[:2])
    assert tuple(view.window.numpy()[2:]) == tuple(expected.shape[:2])
    np.testing.assert_array_equal(image.numpy(), resized(expected, size))
    np.testing.assert_array_equal(  # preprocess_for_eval, for any file: the same
        preprocess_for_eval(encoded, size, config, "uint8").numpy(), image.numpy()
    )
    whole = tf.image.central_crop(decoded(encoded, 1), crop) if crop < 1 else decoded(encoded, 1)
    np.testing.assert_array_equal(  # without scaling: the full-size decode
        preprocess_for_eval(
            encoded, size, ReadConfig(eval_central_crop=crop, dct_scaling=False), "uint8"
        ).numpy(),
        resized(whole, size),
    )


@pytest.mark.parametrize("size", [(32, 32), (56, 40), (160, 120)])
def test_a_training_crop_is_its_window_at_the_smallest_scale_that_fills_the_output(size):
    encoded = tf.constant(CAT.read_bytes())
    shape = np.array([853, 640])
    boxes = tf.constant([[0.1, 0.2, 0.9, 0.7]])
    config = ReadConfig(random_flip=False, dct_scaling=True)
    used = set()
    for seed in range(40):
        seed = tf.constant([seed, 7], tf.int64)
        image, view = train_view(encoded, boxes, size, seed, config, "uint8")
        _, full = train_view(encoded, boxes, size, seed, ReadConfig(random_flip=False), "uint8")
        window = full.window.numpy()  # the same draw, in source pixels
        ratio = max(r for r in RATIOS if np.all(window[2:] // r >= size))
        start = window[:2] // ratio
        end = np.minimum(-(-(window[:2] + window[2:]) // ratio), scaled_shape(shape, ratio))
        assert tuple(view.source_shape.numpy()) == tuple(scaled_shape(shape, ratio))
        assert tuple(view.window.numpy()) == (*start, *(end - start))
        expected = decoded(encoded, ratio, view.window.numpy())
        np.testing.assert_array_equal(image.numpy(), resized(expected, size))
        y, x, h, w = view.window.numpy()  # the window is in the scaled image's pixels
        cut = decoded(encoded, ratio).numpy()[y : y + h, x : x + w].astype(int)
        off = np.abs(expected.numpy().astype(int) - cut)
        assert off[:-1, :-1].max() == 0 and off.mean() < 0.1  # (but the right and bottom edge)
        used.add(ratio)
    assert len(used) >= 2  # the crops' sizes vary: more than one scale was taken


def test_the_loader_scales_a_builds_large_images_as_preprocess_for_eval_does(tmp_path):
    photos = CAT.parent.parent.parent  # TRAIN/, VALIDATION/, TEST/ of class folders, 320-853 px
    build(photos, tmp_path / "out")
    info = dataset_info(str(tmp_path / "out"))
    assert may_scale(info.split("train"), (64, 64))  # 853 x 640: at 1/8
    assert not may_scale(info.split("train"), (427, 320))  # none is twice that

    def loaded(size, config):
        images = {}
        for split in info.splits:
            batches = load_dataset(
                str(tmp_path / "out"),
                split,
                batch_size=2,
                image_size=size,
                label_mode=None,
                dtype="uint8",
                with_filenames=True,
                config=config,
            )
            for pixels, names in batches:
                images.update(zip((n.decode() for n in names.numpy()), pixels.numpy(), strict=True))
        return images

    out = str(tmp_path / "out")
    said = r"split 'train' of .*: its images' median width and height are 640 and 706.5 px"
    with pytest.warns(UserWarning, match=said):  # whole decodes of images 8x the output
        load_dataset(out, "train", batch_size=2, image_size=64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_dataset(out, "train", batch_size=2, image_size=64, config=SCALED)
        # Said once a process (a notebook's every load said it again, a new user's trial).
        load_dataset(out, "train", batch_size=4, image_size=64)
    with pytest.warns(UserWarning, match="for a 32x32 output"):
        load_dataset(out, "train", batch_size=2, image_size=32)
    stored = {str(p.relative_to(photos)): p.read_bytes() for p in photos.glob("*/*/*.jpg")}

    for size in [(64, 64), (150, 120)]:
        scaled, whole = loaded(size, SCALED), loaded(size, FULL_SIZE)
        assert sorted(scaled) == sorted(whole) == sorted(stored)
        for name, encoded in stored.items():
            np.testing.assert_array_equal(
                scaled[name], preprocess_for_eval(encoded, size, SCALED, "uint8").numpy()
            )
            np.testing.assert_array_equal(
                whole[name], preprocess_for_eval(encoded, size, FULL_SIZE, "uint8").numpy()
            )
        assert sum(not np.array_equal(scaled[n], whole[n]) for n in stored) >= 4


def test_the_choice_is_left_out_where_no_image_is_twice_the_output_and_large_ones_are_hinted():
    def split(heights, widths):
        return SplitInfo(1, 1, 0, (1,), (), image_heights=heights, image_widths=widths)

    assert may_scale(split({100: 1, 448: 2}, {300: 1, 448: 1}), (224, 224))
    assert not may_scale(split({100: 1, 447: 2}, {300: 1, 900: 1}), (224, 224))
    assert not may_scale(split({900: 1}, {447: 1}), (224, 224))
    assert may_scale(split({}, {}), (224, 224))  # a build before schema 1.2: unknown
    assert scaling_hint(split({3000: 2, 100: 1}, {4000: 3}), (224, 224)) == (
        "its images' median width and height are 4000 and 3000 px (`stats`) for a 224x224 "
        "output: config=ReadConfig(dct_scaling=True) decodes such images at 1/8 of their size "
        "(3000-4000 px photos at 224x224: 1.15-1.31x less CPU an image; small images gain "
        "little), or rebuild with --image_policy shorter_side --image_size 448"
    )
    assert "at 1/4 of their size" in scaling_hint(split({900: 1}, {1000: 1}), (224, 224))
    assert scaling_hint(split({895: 1}, {4000: 1}), (224, 224)) is None  # 3.99 times
    assert scaling_hint(split({}, {}), (224, 224)) is None


@pytest.mark.parametrize("value", ["yes", 1, 0.0, None])
def test_dct_scaling_is_true_or_false(value):
    with pytest.raises(TypeError) as refused:
        ReadConfig(dct_scaling=value)
    assert str(refused.value) == f"ReadConfig.dct_scaling must be True or False, not {value!r}"


@pytest.mark.parametrize(("side", "scaled"), [(447, False), (448, True)])
def test_evaluation_scales_from_twice_the_output_as_the_loaders_choice_does(side, scaled):
    # 447 is 224 at 1/2 rounded up: it was scaled image by image where the loader's choice
    # for the split (its largest image at least twice the output) was not to scale: serving
    # and evaluation differed.
    pixels = np.random.default_rng(side).integers(0, 256, (side, side, 3), np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).resize((side // 8, side // 8)).resize((side, side)).save(out, "JPEG")
    encoded = tf.constant(out.getvalue())
    ours = preprocess_for_eval(encoded, 224, SCALED, "uint8").numpy()
    whole = preprocess_for_eval(encoded, 224, dtype="uint8").numpy()
    assert np.array_equal(ours, whole) != scaled
    np.testing.assert_array_equal(ours, resized(decoded(encoded, 2 if scaled else 1), (224, 224)))
    split = SplitInfo(1, 1, 0, (1,), (), image_heights={side: 1}, image_widths={side: 1})
    assert may_scale(split, (224, 224)) == scaled


def test_preprocess_for_train_takes_boxes_as_lists_and_arrays_and_any_file_uncropped():
    encoded = tf.constant(CAT.read_bytes())
    box = [[0.1, 0.2, 0.9, 0.7]]
    ours = preprocess_for_train(encoded, tf.constant(box), 64, seed=3, dtype="uint8").numpy()
    for given in (box, np.array(box), np.array(box, np.float64), tf.constant(box, tf.float64)):
        again = preprocess_for_train(encoded, given, 64, seed=3, dtype="uint8").numpy()
        np.testing.assert_array_equal(again, ours)
    for bad, error, said in [
        ([0.1, 0.2, 0.9, 0.7], ValueError, "boxes must be [N, 4]: relative (ymin, xmin"),
        ([["a", "b", "c", "d"]], TypeError, "boxes must be numbers, [N, 4], not"),
    ]:
        with pytest.raises(error) as refused:
            preprocess_for_train(encoded, bad, 64, seed=3)
        assert str(refused.value).startswith(said)
    png = io.BytesIO()
    Image.open(CAT).save(png, "PNG")
    whole = ReadConfig(random_crop=False, random_flip=False)
    np.testing.assert_array_equal(
        preprocess_for_train(png.getvalue(), None, 64, seed=3, config=whole, dtype="uint8"),
        preprocess_for_eval(png.getvalue(), 64, dtype="uint8"),
    )
