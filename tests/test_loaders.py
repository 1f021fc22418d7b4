import collections
import dataclasses
import fractions
import hashlib
import inspect
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import warnings

import numpy as np
import pytest
from helpers import build, build_sample, read_split, write
from PIL import Image, PngImagePlugin

tf = pytest.importorskip("tensorflow")

from beam_pipeline.tools import sample_tree  # noqa: E402
from loaders import (  # noqa: E402
    BuildInfo,
    CorruptDatasetError,
    IncompleteDatasetError,
    ReadConfig,
    dataset_info,
    load_dataset,
    normalization_layer,
    preprocess_for_eval,
    preprocess_for_train,
    spec,
)
from loaders.reader import read_records  # noqa: E402
from loaders.spec import LoadSpec  # noqa: E402
from schemas import BACKGROUND, BUILD_INFO_FILE, SCHEMA_VERSION  # noqa: E402
from schemas import features as F  # noqa: E402

SIZE = (32, 32)
ROOT = pathlib.Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return str(build_sample(tmp_path_factory, 90, 25, seed=1, num_shards="train=4,val=2"))


def digest(image) -> str:
    return hashlib.sha1(np.asarray(image).tobytes()).hexdigest()


def test_shapes_dtypes_and_cardinality(built):
    train = load_dataset(built, "train", batch_size=16, image_size=SIZE, training=True, seed=0)
    assert train.element_spec == (
        tf.TensorSpec((16, 32, 32, 3), tf.float32),
        tf.TensorSpec((16, 5), tf.float32),
    )
    assert train.cardinality().numpy() == 90 // 16
    assert sum(1 for _ in train) == 5
    val = load_dataset(built, "validation", batch_size=16, image_size=SIZE)
    assert val.cardinality().numpy() == 2  # 25 → 16 + 9, the remainder is kept
    batches = list(val)
    assert [b[0].shape[0] for b in batches] == [16, 9]
    images = np.concatenate([b[0].numpy() for b in batches])
    assert images.min() >= 0.0 and images.max() <= 1.0


def test_keras_and_tfds_arguments_name_what_does_their_work():
    # shuffle=True: a bare "unexpected keyword argument 'shuffle'".
    with pytest.raises(TypeError) as error:
        load_dataset("unused", "train", batch_size=4, shuffle=True)
    assert str(error.value) == (
        "load_dataset() got an unexpected keyword argument 'shuffle' (Keras's or TFDS's): "
        "training=True shuffles the shards and records (and augments) "
        "(docs/coming-from-keras-and-tfds.md)"
    )
    with pytest.raises(TypeError, match=r"^load_dataset\(\) got an unexpected keyword argument "):
        load_dataset("unused", "train", batch_size=4, bogus=1)
    for habit in ("follow_links", "pad_to_aspect_ratio", "verbose"):  # (a new-user trial's)
        with pytest.raises(TypeError, match=f"argument '{habit}' \\(Keras's or TFDS's\\): "):
            load_dataset("unused", "train", batch_size=4, **{habit: True})
    with pytest.raises(TypeError, match=r"takes 2 positional arguments but 3 were given"):
        load_dataset("unused", "train", 4)  # (Python's own, not the hints')
    assert "batch_size" in inspect.signature(load_dataset).parameters


def test_keras_names_categorical_int_image_size_and_class_names(built):
    info = dataset_info(built)
    # The sample has negatives: the labels have the background column (tests/test_loader_
    # background.py has a build without any, whose labels have none).
    assert info.has_background and info.class_names == [*info.classes, BACKGROUND]
    assert len(info.class_names) == info.class_list.one_hot_length == info.num_classes + 1

    def batches(**kwargs):
        dataset = load_dataset(built, "validation", batch_size=8, **kwargs)
        return [(x.numpy(), y.numpy()) for x, y in dataset]

    one_hot = batches(image_size=SIZE)
    categorical = batches(image_size=32, label_mode="categorical")
    for (x1, y1), (x2, y2) in zip(one_hot, categorical, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    assert one_hot[0][0].shape == (8, 32, 32, 3)


@pytest.mark.parametrize(
    "kwargs, error, message",
    [
        ({"batch_size": 0}, ValueError, "batch_size must be at least 1, not 0"),
        ({"batch_size": "8"}, TypeError, "batch_size must be an int, not '8'"),
        ({"batch_size": True}, TypeError, "batch_size must be an int, not True"),
        ({"image_size": (32,)}, TypeError, "image_size must be an int or (height, width)"),
        ({"image_size": "224"}, TypeError, "image_size must be an int or (height, width)"),
        ({"image_size": (32, 32.0)}, TypeError, "image_size must be an int or (height, width)"),
        ({"image_size": 0}, ValueError, "image_size must be positive, not 0"),
        (
            {"image_size": 100000},  # ran the process out of memory
            ValueError,
            "a batch of 8 images of 100000x100000 float32 needs 894 GiB, more than this "
            "machine's 16 GiB of memory: lower image_size or batch_size",
        ),
        (
            {"batch_size": 8, "image_size": (12_000, 15_000)},  # just past: 16.1 GiB
            ValueError,
            "a batch of 8 images of 12000x15000 float32 needs 16.1 GiB, more than this machine's "
            "16.0 GiB of memory",
        ),
        (
            {"batch_size": 28_533},  # 192 KiB past 16 GiB
            ValueError,
            "a batch of 28533 images of 224x224 float32 needs 17,180,061,696 bytes, more than "
            "this machine's 17,179,869,184 bytes of memory: lower image_size or batch_size",
        ),
        (
            {"batch_size": 10**9, "dtype": "uint8"},
            ValueError,
            "a batch of 1000000000 images of 224x224 uint8 needs 140,190 GiB, more than",
        ),
        ({"label_mode": "sparse"}, ValueError, "label_mode must be one of"),
        ({"dtype": "int8"}, ValueError, "dtype must be one of"),
        ({"training": "yes"}, TypeError, "training must be True or False, not 'yes'"),
        ({"training": 1}, TypeError, "training must be True or False, not 1"),
        ({"with_filenames": "yes"}, TypeError, "with_filenames must be True or False, not 'yes'"),
        ({"with_filenames": 1}, TypeError, "with_filenames must be True or False, not 1"),
        ({"batch_size": np.float64(8)}, TypeError, "batch_size must be an int, not"),
        ({"batch_size": np.bool_(True)}, TypeError, "batch_size must be an int, not"),
        ({"seed": "a"}, TypeError, "seed must be an int or None, not 'a'"),
        ({"seed": 1.5}, TypeError, "seed must be an int or None, not 1.5"),
        ({"seed": 2**31}, ValueError, "seed must be in [0, 2**31 - 1) or None, not 2147483648"),
        ({"seed": -1}, ValueError, "seed must be in [0, 2**31 - 1) or None, not -1: TensorFlow"),
        ({"config": {"shuffle_buffer": 8}}, TypeError, "config must be a loaders.ReadConfig"),
        ({"input_context": "x"}, TypeError, "input_context must be a tf.distribute.InputContext"),
    ],
)
def test_a_bad_argument_is_named_before_any_graph_is_built(
    built, kwargs, error, message, monkeypatch
):
    monkeypatch.setattr(spec, "physical_memory", lambda: 16 * 2**30)  # any machine's figures
    arguments = {"batch_size": 8, **kwargs}
    with pytest.raises(error) as raised:
        load_dataset(built, "validation", **arguments)
    assert str(raised.value).startswith(message)


def test_the_memory_a_batch_may_use_is_a_containers_limit_where_lower(tmp_path, monkeypatch):
    machine = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    monkeypatch.setattr(spec, "CGROUP_MEMORY_LIMITS", (str(v2), str(v1)))
    assert spec.physical_memory() == machine  # no cgroup files
    v2.write_text("max\n")
    v1.write_text("9223372036854771712\n")  # v1's "no limit"
    assert spec.physical_memory() == machine
    v2.write_text(f"{2**30}\n")
    assert spec.physical_memory() == 2**30
    v2.write_text("max\n")
    v1.write_text(f"{3 * 2**30}\n")
    assert spec.physical_memory() == min(machine, 3 * 2**30)


def test_load_datasets_defaults_are_the_specs_and_it_builds_one_checked_spec():
    # The arguments `load_dataset` passes on are one `LoadSpec`: same names, same defaults.
    parameters = inspect.signature(load_dataset).parameters
    for field in dataclasses.fields(LoadSpec):
        assert field.name in parameters
        if field.default is not dataclasses.MISSING:
            assert parameters[field.name].default == field.default, field.name
    arguments = {"image_size": 16, "label_mode": "categorical", "dtype": tf.uint8}
    spec = LoadSpec.checked(batch_size=np.int64(8), **arguments)
    assert spec == LoadSpec(batch_size=8, image_size=(16, 16), label_mode="one_hot", dtype="uint8")
    assert type(spec.batch_size) is int
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.batch_size = 4


def test_a_training_split_smaller_than_a_batch_is_refused(built):
    with pytest.raises(ValueError) as raised:
        load_dataset(built, "train", batch_size=128, image_size=SIZE, training=True)
    assert str(raised.value) == (
        "batch_size=128 is larger than split 'train' (90 examples per input pipeline): training "
        "drops the last partial batch, so an epoch would have no batch at all; lower batch_size"
    )
    # Evaluation keeps the partial batch: one batch of all 90.
    evaluation = load_dataset(built, "train", batch_size=128, image_size=SIZE)
    assert [x.shape[0] for x, _ in evaluation] == [90]


def test_an_unlabelled_split_loads_its_images_alone(tmp_path):
    tree = tmp_path / "tree"
    sample_tree.write_tree(str(tree), num_train=20, num_val=4, seed=2)
    for index in range(5):  # a test split as ILSVRC ships it: images, no annotations
        image = Image.new("RGB", (40, 30), (10 * index, 80, 160))
        path = tree / "Data" / "DET" / "test" / f"t{index}.JPEG"
        path.parent.mkdir(parents=True, exist_ok=True)
        image.save(path, format="JPEG")
    out = tmp_path / "out"
    build(tree, out, "--splits", "train,val,test")
    images = load_dataset(str(out), "test", batch_size=2, image_size=SIZE, label_mode=None)
    assert images.element_spec == tf.TensorSpec((None, 32, 32, 3), tf.float32)
    assert [batch.shape[0] for batch in images] == [2, 2, 1]
    with pytest.raises(ValueError, match=r"label -1\): label_mode='int' needs labels; "):
        load_dataset(str(out), "test", batch_size=2, label_mode="int")
    with pytest.raises(ValueError, match=r"class_weight: split 'test' of .* is unlabelled"):
        dataset_info(str(out)).class_weight("test")
    # A labelled split loads images alone too.
    train = load_dataset(str(out), "train", batch_size=4, image_size=SIZE, label_mode=None)
    assert train.element_spec == tf.TensorSpec((None, 32, 32, 3), tf.float32)


@pytest.mark.parametrize("label_mode", ["int", None])
def test_filenames_on_request_name_each_image_with_its_label(built, label_mode):
    records = {e[F.FILENAME][0].decode(): e[F.LABEL][0] for e in read_split(built, "validation")}
    dataset = load_dataset(
        built,
        "validation",
        batch_size=8,
        image_size=SIZE,
        label_mode=label_mode,
        with_filenames=True,
    )
    names, labels = [], []
    for element in dataset:
        assert len(element) == (3 if label_mode else 2)
        names += [name.decode() for name in element[-1].numpy()]
        if label_mode:
            labels += list(element[1].numpy())
    assert sorted(names) == sorted(records) and len(names) == 25
    if label_mode:
        assert dict(zip(names, labels, strict=True)) == records


def test_int_labels_and_one_hot_match_the_records(built):
    expected = collections.Counter(e[F.LABEL][0] for e in read_split(built, "validation"))
    one_hot = load_dataset(built, "validation", batch_size=8, image_size=SIZE)
    ints = load_dataset(built, "validation", batch_size=8, image_size=SIZE, label_mode="int")
    got_one_hot = np.concatenate([y.numpy() for _, y in one_hot])
    got_int = np.concatenate([y.numpy() for _, y in ints])
    assert got_int.dtype == np.int32
    assert set(np.unique(got_one_hot)) == {0.0, 1.0} and (got_one_hot.sum(axis=1) == 1).all()
    assert (got_one_hot.argmax(axis=1) == got_int).all()
    assert collections.Counter(got_int.tolist()) == expected


def test_eval_images_equal_preprocess_for_eval_of_the_stored_jpeg(built):
    records = read_split(built, "validation")
    stored = {digest(preprocess_for_eval(tf.constant(e[F.ENCODED][0]), SIZE)) for e in records}
    loaded = {
        digest(x)
        for batch, _ in load_dataset(built, "validation", batch_size=5, image_size=SIZE)
        for x in batch
    }
    assert loaded == stored


def test_preprocess_for_eval_refuses_a_path_or_a_batch_by_name(built, tmp_path):
    # A path (keras.utils.load_img's habit) was decoded as image bytes: "Unknown image file
    # format"; a batch of files raised NumPy's "truth value of an array ... is ambiguous".
    raw = read_split(built, "validation")[0][F.ENCODED][0]
    path = write(tmp_path / "x.jpg", raw)
    for given in (str(path), path, str(path).encode()):
        with pytest.raises(TypeError) as error:
            preprocess_for_eval(given, 16)
        assert str(error.value) == (
            f"preprocess_for_eval takes an image file's bytes, not its path {given!r}: pass "
            "tf.io.read_file(path)"
        )
    with pytest.raises(TypeError, match="not its path b'/"):  # an eager tensor of the path
        preprocess_for_eval(tf.constant(str(path)), 16)
    for batch in (tf.constant([raw, raw]), [raw, raw], np.array([raw, raw], dtype=object)):
        with pytest.raises(ValueError) as error:
            preprocess_for_eval(batch, 16)
        assert str(error.value) == (
            "preprocess_for_eval takes one image file's bytes (a scalar string), not a batch of "
            "shape (2,): map it over the files (dataset.map) before batching"
        )
    files = tf.data.Dataset.from_tensor_slices([raw, raw]).map(lambda x: preprocess_for_eval(x, 8))
    assert [image.shape for image in files] == [(8, 8, 3), (8, 8, 3)]  # a graph's tensors
    assert preprocess_for_eval(tf.io.read_file(str(path)), 16).shape == (16, 16, 3)


def test_preprocess_for_eval_on_a_raw_jpeg_file(built):
    (record,) = read_split(built, "validation")[:1]
    raw = record[F.ENCODED][0]
    image = preprocess_for_eval(tf.constant(raw), (20, 30))
    assert image.shape == (20, 30, 3) and image.dtype == tf.float32
    decoded = np.asarray(Image.open(io.BytesIO(raw)).convert("RGB").resize((30, 20)))
    assert np.abs(image.numpy() * 255 - decoded).mean() < 12


def palette(mode: str, fmt: str, bits: int | None = None, **options) -> bytes:
    """Random colours as a `mode` ("P" of 2**bits colours, "1") PNG or BMP."""
    pixels = np.random.default_rng(1).integers(0, 256, (20, 30, 3), dtype=np.uint8)
    image = Image.fromarray(pixels)
    image = image.quantize(2**bits) if mode == "P" else image.convert(mode)
    if options.get("transparency") == "first":  # a colour key the image holds
        options["transparency"] = image.getpixel((0, 0))
    if "comment" in options:  # a text chunk, which Pillow writes before the tRNS chunk
        text = PngImagePlugin.PngInfo()
        text.add_text("Comment", options.pop("comment"))
        options["pnginfo"] = text
    stream = io.BytesIO()
    image.save(stream, fmt, **({"bits": bits} if fmt == "PNG" and bits else {}), **options)
    return stream.getvalue()


# (Palettes of under 8 bits and 1-bit grey came out blended towards white: TensorFlow, asked
# for 4 channels, fills their alpha with the bit depth's largest value; an 8-bit BMP's
# palette indices were read as grey. Found by a loader review.)
PALETTES = {
    "P4.png": ("P", "PNG", 4),
    "P2.png": ("P", "PNG", 2),
    "P1.png": ("P", "PNG", 1),
    "1.png": ("1", "PNG", None),
    "1_key.png": ("1", "PNG", None, {"transparency": 0}),
    "P4_trns.png": ("P", "PNG", 4, {"transparency": 3}),
    # "tRNS" or "IDAT" in a text chunk: a search of the bytes took them for chunks.
    "1_comment.png": ("1", "PNG", None, {"comment": "no tRNS here"}),
    "L_key_comment.png": ("L", "PNG", None, {"comment": "IDAT", "transparency": "first"}),
    "P8.bmp": ("P", "BMP", 8),
    "P4.bmp": ("P", "BMP", 4),  # (Pillow writes 16 colours in 8 bits a pixel)
}


@pytest.mark.parametrize(
    "name",
    [
        "1_trns.png",
        "200x32_la.png",
        "i_trns.png",
        "l_trns.png",
        "hopper.gif",
        "WEBP",
        "BMP",
        *PALETTES,
    ],
)
def test_preprocess_for_eval_of_other_formats_sees_what_the_build_stores(name):
    # Serving on a WebP gave a [1, H, W, 3] animation, and a transparent PNG its colours
    # under the alpha, not the white the build composites them onto.
    from helpers import CORPUS

    from beam_pipeline.core.images import to_rgb
    from loaders.preprocessing import decode_as_stored

    if name in PALETTES:
        mode, fmt, bits, *options = PALETTES[name]
        data = palette(mode, fmt, bits, **(options[0] if options else {}))
    elif name.isupper():
        pixels = np.random.default_rng(0).integers(0, 256, (20, 30, 4), dtype=np.uint8)
        pixels[:, :, 3] = 0 if name == "BMP" else pixels[:, :, 3]  # (a 32-bit BMP's 4th byte)
        stream = io.BytesIO()
        Image.fromarray(pixels).save(stream, name, lossless=True)
        data = stream.getvalue()
    else:
        data = (CORPUS / "images" / "pillow" / name).read_bytes()
    stored = np.asarray(to_rgb(Image.open(io.BytesIO(data))))
    if name == "WEBP" and tuple(map(int, tf.__version__.split(".")[:2])) < (2, 17):
        # (TensorFlow 2.16, setup.py's low end, has no WebP decoder: said, not guessed at)
        with pytest.raises(tf.errors.InvalidArgumentError, match="a WebP image, which Tens"):
            decode_as_stored(tf.constant(data))
        return
    assert np.array_equal(decode_as_stored(tf.constant(data)).numpy(), stored)
    assert preprocess_for_eval(tf.constant(data), 16).shape == (16, 16, 3)
    # In a tf.data map (a graph): the channels stay known, as Keras's Conv2D needs them.
    mapped = tf.data.Dataset.from_tensors(data).map(lambda b: preprocess_for_eval(b, 16))
    assert mapped.element_spec.shape == (16, 16, 3)


def test_a_sixteen_bit_rgb_colour_key_is_not_applied_as_the_build_does_not():
    # libpng applied it, the build (which reads 8 bits of each) keeps the colours: a keyed
    # pixel served white was stored dark (found by a fuzzer).
    import struct

    from helpers import png_file

    from loaders.preprocessing import decode_as_stored

    raw = b"\x00" + struct.pack(">6H", 0x1020, 0x3040, 0x5060, 0x8000, 0x8000, 0x8000)
    png = png_file(2, 1, 16, 2, raw, struct.pack(">3H", 0x8000, 0x8000, 0x8000))
    assert decode_as_stored(tf.constant(png)).numpy().tolist() == [[[16, 48, 80], [128, 128, 128]]]


def test_a_bmp_tensorflow_cannot_read_is_refused_by_what_it_is():
    # A 1-bit BMP: "Number of channels inherent in the image must be 1, 3 or 4, was 0".
    data = palette("1", "BMP")
    with pytest.raises(tf.errors.InvalidArgumentError, match="a BMP of 1, 2 or 4 bits a pixel"):
        preprocess_for_eval(tf.constant(data), 16)


def test_numpy_integers_are_integer_arguments(built):
    # batch_size=np.int64(8) and image_size=np.int64(64) were refused ("must be an int").
    val = load_dataset(built, "validation", batch_size=np.int64(8), image_size=np.int64(16))
    assert [x.shape for x, _ in val] == [(8, 16, 16, 3)] * 3 + [(1, 16, 16, 3)]  # 25 examples
    train = load_dataset(
        built,
        "train",
        batch_size=np.int32(16),
        image_size=(np.int64(12), 20),
        training=True,
        seed=np.int64(3),
        label_mode="detection",
        max_boxes=np.int64(2),
    )
    assert train.cardinality().numpy() == 90 // 16
    images, target = next(iter(train))
    assert images.shape == (16, 12, 20, 3) and target["boxes"].shape == (16, 2, 4)


def test_the_preprocessing_functions_take_load_datasets_image_sizes(built):
    # preprocess_for_eval(jpeg, 64) once failed inside TensorFlow ("'size' must be a 1-D Tensor
    # of 2 elements"), and (-1, 48) with a raw InvalidArgumentError.
    raw = tf.constant(read_split(built, "validation")[0][F.ENCODED][0])
    no_boxes, seed = tf.zeros([0, 4]), tf.constant([1, 2])
    for size, shape in [(64, (64, 64)), ((20, 30), (20, 30)), ([20, 30], (20, 30))]:
        assert preprocess_for_eval(raw, size).shape == (*shape, 3)
        assert preprocess_for_eval(raw, image_size=size, dtype="uint8").shape == (*shape, 3)
        assert preprocess_for_train(raw, no_boxes, size, seed).shape == (*shape, 3)
    np.testing.assert_array_equal(preprocess_for_eval(raw, 24), preprocess_for_eval(raw, (24, 24)))
    # An int seed (a raw InvalidArgumentError) and boxes=None (a TypeError) are what they say.
    np.testing.assert_array_equal(
        preprocess_for_train(raw, None, 24, 5),
        preprocess_for_train(raw, no_boxes, 24, tf.constant([5, 0], tf.int64)),
    )
    for bad, error in [
        ((-1, 48), ValueError),
        (0, ValueError),
        ((32,), TypeError),
        ("224", TypeError),
        ((32, 32.0), TypeError),
        (True, TypeError),
    ]:
        with pytest.raises(error) as theirs:
            load_dataset(built, "validation", batch_size=8, image_size=bad)
        with pytest.raises(error) as raised:
            preprocess_for_eval(raw, bad)
        assert str(raised.value) == str(theirs.value)
        assert str(raised.value).startswith("image_size must be ")
        with pytest.raises(error, match=re.escape(str(theirs.value))):
            preprocess_for_train(raw, no_boxes, bad, seed)


def test_seed_makes_training_order_and_augmentation_deterministic(built):
    def first_batches(seed):
        ds = load_dataset(built, "train", batch_size=8, image_size=SIZE, training=True, seed=seed)
        return [(x.numpy(), y.numpy()) for x, y in ds.take(3)]

    a, b, c = first_batches(7), first_batches(7), first_batches(8)
    for (xa, ya), (xb, yb) in zip(a, b, strict=True):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)
    assert any(not np.array_equal(xa, xc) for (xa, _), (xc, _) in zip(a, c, strict=True))


def test_epochs_reshuffle(built):
    ds = load_dataset(built, "train", batch_size=90 // 2, image_size=SIZE, training=True, seed=3)
    epoch1 = [y.numpy().argmax(1).tolist() for _, y in ds]
    epoch2 = [y.numpy().argmax(1).tolist() for _, y in ds]
    assert epoch1 != epoch2


def test_input_pipelines_draw_augmentations_of_their_own(built):
    # One seed for all: the j-th image of every pipeline's batches was flipped alike (480 of
    # 480 positions over two pipelines).
    flips = []
    for index in range(2):
        context = tf.distribute.InputContext(2, index, 2)
        common = {"batch_size": 5, "image_size": SIZE, "with_filenames": True}
        config = ReadConfig(random_crop=False)
        plain = load_dataset(built, "train", input_context=context, config=config, **common)
        seen = {
            n: x for b, _, names in plain for x, n in zip(b.numpy(), names.numpy(), strict=True)
        }
        trained = load_dataset(
            built, "train", training=True, seed=0, input_context=context, config=config, **common
        )
        flipped = []
        for _ in range(3):
            for images, _, names in trained:
                for image, name in zip(images.numpy(), names.numpy(), strict=True):
                    mirrored = np.array_equal(image, seen[name][:, ::-1])
                    assert mirrored or np.array_equal(image, seen[name]), name
                    flipped.append(mirrored)
        flips.append(flipped)
    assert len(flips[0]) == len(flips[1]) > 100
    assert 0.3 < np.mean(flips[0]) < 0.7 and flips[0] != flips[1]


@pytest.mark.parametrize("pipelines, split", [(2, "train"), (3, "validation"), (3, "train")])
def test_input_pipelines_cover_every_example_exactly_once(built, pipelines, split):
    # train: 4 files over 2 pipelines (file sharding), over 3 (a file each, and every third
    # record of the fourth); validation: 2 files over 3 (elements).
    everything = [
        digest(x) for b, _ in load_dataset(built, split, batch_size=4, image_size=SIZE) for x in b
    ]
    seen = []
    for index in range(pipelines):
        context = tf.distribute.InputContext(pipelines, index, 1)
        ds = load_dataset(built, split, batch_size=4, image_size=SIZE, input_context=context)
        part = [digest(x) for b, _ in ds for x in b]
        assert ds.cardinality().numpy() == -(-len(part) // 4)
        seen += part
    assert collections.Counter(seen) == collections.Counter(everything)


MIRRORED = """
import json, sys, warnings
import tensorflow as tf
replicas = int(sys.argv[4])
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
import keras
from loaders import load_dataset
strategy = tf.distribute.MirroredStrategy([f"/cpu:{i}" for i in range(replicas)])
data_dir, global_batch, training = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "train"
split = sys.argv[5]

def dataset_fn(context, **extra):  # the README's recipe
    return load_dataset(
        data_dir, split, batch_size=context.get_per_replica_batch_size(global_batch),
        image_size=16, training=training, seed=0, label_mode="int", input_context=context,
        **extra,
    )

with warnings.catch_warnings(record=True) as warned:  # one pipeline for both replicas
    warnings.simplefilter("always")
    strategy.distribute_datasets_from_function(dataset_fn)
print(json.dumps({"warned": [str(w.message) for w in warned if "input_context" in str(w.message)]}))
options = tf.distribute.InputOptions(
    experimental_replication_mode=tf.distribute.InputReplicationMode.PER_REPLICA
)
train = strategy.distribute_datasets_from_function(dataset_fn, options)
with strategy.scope():
    model = keras.Sequential([keras.Input((16, 16, 3)), keras.layers.GlobalAveragePooling2D(),
                              keras.layers.Dense(5)])
    model.compile("sgd", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
steps = []
count = keras.callbacks.LambdaCallback(
    on_epoch_begin=lambda epoch, logs: steps.append(0),
    on_train_batch_end=lambda batch, logs: steps.__setitem__(-1, steps[-1] + 1),
)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model.fit(train, epochs=2, verbose=0, callbacks=[count])
named = strategy.distribute_datasets_from_function(
    lambda context: dataset_fn(context, with_filenames=True), options
)
epochs = []
for _ in range(2):
    names = []
    for _, _, files in named:
        for part in strategy.experimental_local_results(files):
            names += [name.decode() for name in part.numpy()]
    epochs.append(names)
print(json.dumps({
    "cardinality": int(train.cardinality), "steps": steps, "epochs": epochs,
    "warnings": [str(w.message) for w in caught if "ran out of data" in str(w.message)],
}))
"""


@pytest.mark.parametrize(
    "replicas, training, global_batch, split",
    [
        (2, True, 16, "train"),
        pytest.param(2, False, 46, "train", marks=pytest.mark.slow),
        pytest.param(3, True, 24, "train", marks=pytest.mark.slow),
        pytest.param(3, False, 24, "train", marks=pytest.mark.slow),
        pytest.param(3, False, 12, "validation", marks=pytest.mark.slow),
    ],
)
def test_the_readmes_mirrored_strategy_recipe_runs_the_steps_it_reports(
    built, replicas, training, global_batch, split
):
    # Two logical CPU devices: TensorFlow once called the dataset function with one input
    # pipeline for both replicas; len() counted per-replica batches, each step took two, and
    # Keras showed twice the steps it ran, warning that the input ran out of data. Three: the
    # four shards went 2, 1 and 1 to the pipelines, the steps were the first's count, and a
    # third of each epoch went unread (Keras warned that the input ran out of data).
    argv = [built, str(global_batch), "train" if training else "x", str(replicas), split]
    run = subprocess.run(
        [sys.executable, "-c", MIRRORED, *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    warned, result = (json.loads(line) for line in run.stdout.splitlines()[-2:])
    assert warned["warned"][0].startswith(
        f"input_context has 1 input pipeline(s) for {replicas} replicas: each step takes "
        f"{replicas} of this dataset's batches"
    )
    # Train (22, 23, 22 and 23 records): two pipelines read two shards each, three one each
    # and a part of the fourth; validation (2 shards), three pipelines a part of each.
    info = dataset_info(built)
    totals = [
        read_records(info, split, input_context=tf.distribute.InputContext(replicas, i, 1))
        for i in range(replicas)
    ]
    totals = [records.num_examples for records in totals]
    assert sum(totals) == info.split(split).num_examples and max(totals) - min(totals) <= 1
    assert totals[0] == max(totals)  # the first pipeline's count is the steps: none unread
    per_replica = global_batch // replicas
    steps = min(totals) // per_replica if training else -(-totals[0] // per_replica)
    if split == "validation":
        assert -(-min(totals) // per_replica) < steps  # a pipeline runs out a step early
    assert result["cardinality"] == steps
    assert result["steps"] == [steps] * 2 and result["warnings"] == []
    files = [example[F.FILENAME][0].decode() for example in read_split(built, split)]
    for names in result["epochs"]:
        assert len(names) == len(set(names))  # no example twice
        assert set(names) <= set(files)
        assert len(names) == (replicas * steps * per_replica if training else len(files))


SCOPED = """
import json, sys
import tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import keras
from loaders import load_dataset
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
val = load_dataset(sys.argv[1], "validation", batch_size=10, image_size=16)  # 25: 10, 10, 5
train = load_dataset(sys.argv[1], "train", batch_size=8, image_size=16, training=True, seed=0)
with strategy.scope():
    model = keras.Sequential([
        keras.Input((16, 16, 3)), keras.layers.Conv2D(4, 3), keras.layers.GlobalAveragePooling2D(),
        keras.layers.Dense(val.element_spec[1].shape[-1]),
    ])
    model.compile("sgd", keras.losses.CategoricalCrossentropy(from_logits=True))
history = model.fit(train, validation_data=val, epochs=1, verbose=0)
print(json.dumps({"val_loss": len(history.history["val_loss"]), "evaluated": model.evaluate(val)}))
"""


def test_fit_under_a_strategy_scope_validates_on_a_partial_last_batch(built):
    # The docs' one-host form (fit under strategy.scope(), no input_context): tf.distribute
    # split the evaluation's last batch of 5 between two replicas as 5 and 0 (sharding by
    # files), and Keras failed on the empty one ("Matrix size-incompatible: In[0]: [0,3]").
    # Sharded by data, 3 and 2. (A last batch of 1 still leaves a replica none: Keras fails
    # on it with any dataset.)
    run = subprocess.run(
        [sys.executable, "-c", SCOPED, built],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert result["val_loss"] == 1 and result["evaluated"] > 0


@pytest.mark.parametrize("pipelines", [3, 5])
def test_pipelines_with_global_seeds_of_their_own_read_each_record_once(built, pipelines):
    # The shards left over were read by every pipeline in one shuffled order, each keeping
    # every n-th record: the order came from the seed and TensorFlow's global seed, so
    # workers seeded apart (tf.random.set_seed(worker)) read records twice and missed others.
    info = dataset_info(built)
    spec = {F.FILENAME: tf.io.FixedLenFeature([], tf.string)}
    epochs = [collections.Counter(), collections.Counter()]
    try:
        for index in range(pipelines):
            tf.random.set_seed(100 + index)
            context = tf.distribute.InputContext(pipelines, index, 1)
            split = read_records(info, "train", training=True, input_context=context)
            names = split.records.repeat(2).map(lambda r, _: tf.io.parse_single_example(r, spec))
            names = [example[F.FILENAME].decode() for example in names.as_numpy_iterator()]
            assert len(names) == 2 * split.num_examples
            epochs[0].update(names[: split.num_examples])
            epochs[1].update(names[split.num_examples :])
    finally:
        tf.random.set_seed(None)
    for seen in epochs:
        assert sum(seen.values()) == info.split("train").num_examples
        assert set(seen.values()) == {1}


def test_training_without_a_seed_on_several_workers_is_refused(built, monkeypatch):
    # fit across hosts without an input_context: tf.distribute shards by data, each worker
    # keeping every n-th batch of its own shuffle; unseeded, 2 workers read 7 of 21 images
    # twice and 8 never (a loader trial). The same seed everywhere, or an input_context, is
    # right; so is evaluation (no shuffle) and one worker.
    cluster = {"chief": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "chief"}}))
    with pytest.raises(ValueError) as refused:
        load_dataset(built, "train", batch_size=4, training=True)
    assert str(refused.value).startswith(
        "load_dataset(training=True) without a seed on one of 3 workers (TF_CONFIG) and no "
        "input_context: tf.distribute shards the dataset by data, each worker keeping one "
        "batch in 3 of its own shuffle, so the workers would read overlapping images and miss "
        "others. Pass the same seed on every worker (seed=0"
    )
    assert len(load_dataset(built, "train", batch_size=4, training=True, seed=0)) > 0
    assert len(load_dataset(built, "train", batch_size=4)) > 0
    context = tf.distribute.InputContext(3, 0, 3)
    assert len(load_dataset(built, "train", batch_size=4, training=True, input_context=context))
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:2"]}}))
    assert len(load_dataset(built, "train", batch_size=4, training=True)) > 0
    monkeypatch.setenv("TF_CONFIG", "not json")  # (tf.distribute names it)
    assert len(load_dataset(built, "train", batch_size=4, training=True)) > 0


def test_an_input_context_with_more_replicas_than_pipelines_says_the_steps_to_use(built):
    # Not refused: a custom training loop, TPUStrategy or several GPUs per host across hosts
    # use this form rightly; only Keras's count of steps per epoch is off.
    context = tf.distribute.InputContext(2, 0, 8)  # two hosts of four replicas
    with pytest.warns(UserWarning, match=r"^input_context has 2 input pipeline\(s\) for 8 ") as w:
        dataset = load_dataset(built, "train", batch_size=8, input_context=context)
    assert "steps_per_epoch=len(dataset) // 4" in str(w[0].message)
    mine = sum(s.num_examples for s in dataset_info(built).split("train").shards[0::2])
    assert len(dataset) == -(-mine // 8)  # this pipeline's batches, its shards 0 and 2


def test_a_build_of_a_later_minor_schema_is_read_with_one_warning(built, tmp_path):
    # Schema 2.9.0 (a later minor version: what it added, this code does not know) was read
    # without a word, its new keys and fields left out silently.
    out = shutil.copytree(built, tmp_path / "newer")
    path = out / BUILD_INFO_FILE
    payload = json.loads(path.read_text())
    for version, said in (("2.9.0", 1), ("2.1.7", 0)):
        path.write_text(json.dumps({**payload, "schema_version": version, "added_in_2_9": 1}))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert dataset_info(out).info.schema_version == version
            dataset_info(str(out))
            batches = load_dataset(out, "validation", batch_size=8, image_size=(128, 128))
        assert sum(len(images) for images, _ in batches) == 25
        assert [str(w.message) for w in caught if "schema" in str(w.message)] == said * [
            f"{path}: the build is of schema 2.9.0, newer than this reader's "
            f"{SCHEMA_VERSION}; it is read as {SCHEMA_VERSION} reads it, the record keys and "
            "metadata fields added since ignored: pip install -U imagenet-tfrecords to use them"
        ]


def test_incomplete_directory_is_refused(built, tmp_path):
    (tmp_path / "train-00000-of-00001.tfrecord").write_bytes(b"")
    with pytest.raises(IncompleteDatasetError, match=r"build_info\.json is missing"):
        load_dataset(str(tmp_path), "train", batch_size=4)
    with pytest.raises(KeyError, match="no split 'test'"):
        load_dataset(built, "test", batch_size=4)
    with pytest.raises(IncompleteDatasetError, match=r"/nowhere does not exist: data_dir is the"):
        load_dataset(str(tmp_path / "nowhere"), "train", batch_size=4)
    shard = str(tmp_path / "train-00000-of-00001.tfrecord")
    with pytest.raises(IncompleteDatasetError, match=r"tfrecord is a file: data_dir is the"):
        dataset_info(shard)


def test_data_dir_may_be_a_path(built):
    batches = load_dataset(pathlib.Path(built), "validation", batch_size=25, image_size=SIZE)
    assert [x.shape[0] for x, _ in batches] == [25]
    assert dataset_info(pathlib.Path(built)).data_dir == str(built)


def test_a_leading_tilde_is_the_home_directory_and_val_is_named_validation(built, monkeypatch):
    # The builder read ~ in --output_dir, the loader did not ("/cwd/~/out does not exist").
    home = pathlib.Path(built).parent
    monkeypatch.setenv("HOME", str(home))
    path = f"~/{pathlib.Path(built).name}"
    batches = load_dataset(path, "validation", batch_size=25, image_size=SIZE)
    assert [x.shape[0] for x, _ in batches] == [25]
    with pytest.raises(KeyError) as error:
        load_dataset(path, "val", batch_size=5)
    assert error.value.args[0] == (
        f"{built} has no split 'val'; it has ('train', 'validation'); val is written as validation"
    )
    with pytest.raises(KeyError, match=r"'valid'; .*; valid is written as validation"):
        load_dataset(path, "valid", batch_size=5)  # Roboflow's folder name
    with pytest.raises(KeyError) as error:
        load_dataset(path, "training", batch_size=5)
    assert error.value.args[0].endswith(
        '; the training split is "train" (Keras\'s subset="training")'
    )
    with pytest.raises(KeyError) as error:  # TFDS's habit
        load_dataset(path, "train[:10%]", batch_size=5)
    # (take(n) was offered as a slice: with training=True its batches differ every epoch)
    assert str(error.value) == (
        f"{built} has no split 'train[:10%]'; it has ('train', 'validation'); the loader reads "
        "whole splits (TFDS's slices such as train[:10%], the same images every epoch, are "
        "tfds.load's: the build is a TFDS dataset); dataset.take(n) takes n batches, other "
        "images each epoch with training=True"
    )  # (str(), not KeyError's repr: its quotes came out as \')
    with pytest.raises(KeyError, match=r"one at a time \(Keras's subset=\"both\"\)$"):
        load_dataset(path, "both", batch_size=5)
    with pytest.raises(KeyError, match=r"'test'; .*; hold one out at build time with --test_"):
        load_dataset(path, "test", batch_size=5)
    with pytest.raises(TypeError) as error:  # (was AttributeError: no attribute 'lower')
        load_dataset(path, None, batch_size=5)
    assert str(error.value) == (
        "split must be a split's name, one of ('train', 'validation'), not None"
    )


@pytest.mark.parametrize(
    "field, value, error, message",
    [
        ("cycle_length", 0, ValueError, "ReadConfig.cycle_length must be at least 1 or AUTOTUNE"),
        ("num_parallel_calls", 0, ValueError, "ReadConfig.num_parallel_calls must be at least 1"),
        ("prefetch", -5, ValueError, "ReadConfig.prefetch must be at least 0 or AUTOTUNE"),
        ("shuffle_buffer", 2.5, TypeError, "ReadConfig.shuffle_buffer must be an int"),
        ("random_flip", "no", TypeError, "ReadConfig.random_flip must be True or False"),
        ("min_object_covered", 2.0, ValueError, "ReadConfig.min_object_covered must be in [0, 1]"),
        ("crop_aspect_ratio_range", (2, 1), ValueError, "ReadConfig.crop_aspect_ratio_range"),
        ("crop_area_range", (0.5,), TypeError, "ReadConfig.crop_area_range must be a pair"),
        ("value_range", (1.0, 1.0), ValueError, "ReadConfig.value_range must be (low, high)"),
        # (were accepted: every pixel inf or NaN; TensorFlow's "out-of-range integer")
        ("value_range", (0, float("inf")), TypeError, "ReadConfig.value_range must be a pair of"),
        ("min_object_covered", float("nan"), ValueError, "ReadConfig.min_object_covered must"),
        ("shuffle_buffer", 2**63, ValueError, "ReadConfig.shuffle_buffer must be at least 1 and"),
        ("value_range", (0, 10**400), TypeError, "ReadConfig.value_range must be a pair of"),
        ("value_range", (0, 1e39), TypeError, "ReadConfig.value_range must be a pair of"),
    ],
)
def test_a_bad_read_config_is_named_when_made(field, value, error, message):
    with pytest.raises(error) as raised:
        ReadConfig(**{field: value})
    assert str(raised.value).startswith(message)


@pytest.mark.parametrize("data_dir", [5, None, b"/tmp/out"])
def test_a_data_dir_that_is_no_path_is_named(data_dir):
    # "expected str, bytes or os.PathLike object, not int", naming no argument.
    with pytest.raises(TypeError, match=r"^data_dir must be a "):
        load_dataset(data_dir, "train", batch_size=4)
    with pytest.raises(TypeError, match=r"^data_dir must be a "):
        dataset_info(data_dir)


def test_a_read_config_takes_numpy_numbers_as_load_dataset_does():
    # They were refused ("must be a pair of numbers") where load_dataset takes them.
    config = ReadConfig(shuffle_buffer=np.int64(10), value_range=(np.float32(-1), np.int8(1)))
    assert config == ReadConfig(shuffle_buffer=10, value_range=(-1.0, 1.0))
    assert type(config.shuffle_buffer) is int and type(config.value_range[0]) is float
    config = ReadConfig(
        min_object_covered=np.float16(0.5), eval_central_crop=fractions.Fraction(7, 8)
    )
    assert (config.min_object_covered, config.eval_central_crop) == (0.5, 0.875)
    assert type(config.eval_central_crop) is float


def test_class_weight_of_a_split_the_build_lacks_names_the_splits(built):
    with pytest.raises(KeyError, match=r"class_weight\(split='test'\): .* pass the split"):
        dataset_info(built).class_weight("test")


def test_dataset_info_counts_and_class_weight(built):
    info = dataset_info(built)
    assert info.classes == sample_tree.CLASSES and info.background_index == 4
    assert info.num_examples("train") == 90
    counts = info.class_counts("train")
    assert sum(counts.values()) == 90 and set(counts) == {*sample_tree.CLASSES, BACKGROUND}
    assert tuple(info.class_counts("train", background=False)) == tuple(sample_tree.CLASSES)
    weights = info.class_weight()
    present = [c for c in info.split("train").class_counts if c]
    for index, count in enumerate(info.split("train").class_counts):
        if count:
            assert weights[index] == pytest.approx(90 / (len(present) * count))
    assert sum(weights[i] * c for i, c in enumerate(info.split("train").class_counts)) == (
        pytest.approx(90)
    )


def test_dataset_info_reads_as_tfds_info_does(built):
    """A new user's trial from TFDS: `info.splits["train"]` was a TypeError (a tuple of names),
    `info.features` an AttributeError, and `print(info)` 10,700 characters."""
    info = dataset_info(built)
    assert list(info.splits) == ["train", "validation"] and len(info.splits) == 2
    assert "train" in info.splits and "val" not in info.splits
    assert info.splits["train"].num_examples == 90 and info.splits["validation"].num_examples == 25
    assert {name: split.num_shards for name, split in info.splits.items()} == {
        "train": 4,
        "validation": 2,
    }
    with pytest.raises(KeyError, match="'val'; it has \\('train', 'validation'\\); val is written"):
        info.splits["val"]
    assert repr(info.splits) == "{'train': 90 images, 'validation': 25 images}"
    assert repr(info) == (
        f"BuildInfo({built!r}: 4 classes + background; train 90, validation 25 images; "
        f"schema {info.info.schema_version})"
    )
    # The parse spec of the records: every key a record carries, the one-hot 4 + 1 long.
    record = next(iter(tf.data.TFRecordDataset(info.shard_paths("train")[0])))
    parsed = tf.io.parse_single_example(record, info.features)
    assert parsed["image/class/one_hot"].shape == (5,)
    assert int(tf.argmax(parsed["image/class/one_hot"])) == int(parsed["image/class/label"])
    assert tf.io.decode_jpeg(parsed["image/encoded"]).shape[-1] == 3


def test_tfds_and_keras_calls_are_told_what_does_their_work_here(built):
    """More of the trial's habits: each refused with the call that works."""
    with pytest.raises(TypeError) as error:
        load_dataset(built, "train", batch_size=None)
    assert str(error.value) == (
        "batch_size must be an int, not None: the loader yields batches (for single images, "
        "Keras's and TFDS's batch_size=None, call .unbatch() on the dataset)"
    )
    with pytest.raises(ValueError, match=r"not -1 \(TFDS's whole split in one batch\): pass"):
        load_dataset(built, "train", batch_size=-1)
    with pytest.raises(TypeError) as error:  # tfds.load(name, split=..., data_dir=...)
        load_dataset("class_folders", split="train", data_dir=built, batch_size=8)
    assert str(error.value) == (
        f"load_dataset() got 'class_folders' and data_dir={built!r}: its first argument is the "
        "build's directory, the folder of build_info.json (TFDS's data_dir holds datasets by "
        "name): load_dataset(data_dir, split, ...) (docs/coming-from-keras-and-tfds.md)"
    )
    with pytest.raises(TypeError, match="'download' \\(Keras's or TFDS's\\): a build is read"):
        load_dataset(built, "train", batch_size=8, download=False)
    with pytest.raises(TypeError, match=r"'read_config' .*: config=ReadConfig"):
        load_dataset(built, "train", batch_size=8, read_config=None)
    with pytest.raises(TypeError) as error:  # (was Python's "got multiple values")
        dataset_info("class_folders", data_dir=built)
    assert str(error.value).endswith(
        ": dataset_info(data_dir) (docs/coming-from-keras-and-tfds.md)"
    )
    with pytest.raises(TypeError, match=r"'class_names' .*--labels_file at build time"):
        load_dataset(built, "train", batch_size=8, class_names=["a"])
    with pytest.raises(KeyError) as error:
        load_dataset(built, "train+validation", batch_size=8)
    assert error.value.args[0].endswith(
        "it has ('train', 'validation'); the loader reads one whole split (TFDS's unions such "
        "as train+validation are tfds.load's: the build is a TFDS dataset; or build without "
        "--validation_split to train on every image)"
    )


def test_dataset_info_returns_build_info_and_the_old_name_still_works(built):
    import loaders.info

    assert isinstance(dataset_info(built), BuildInfo)
    with pytest.warns(DeprecationWarning, match=r"loaders\.Dataset is renamed loaders\.BuildInfo"):
        from loaders import Dataset
    assert Dataset is BuildInfo
    with pytest.warns(DeprecationWarning, match=r"loaders\.info\.BuildInfo"):
        assert loaders.info.Dataset is BuildInfo
    with pytest.raises(AttributeError, match="Nothing"):
        loaders.info.Nothing  # noqa: B018


def test_normalization_layer_takes_a_read_config_only():
    # A dict or a dtype string failed with "AttributeError: ... has no attribute 'value_range'".
    for wrong in ({"value_range": (0, 1)}, "float32"):
        with pytest.raises(TypeError) as error:
            normalization_layer(wrong)
        assert str(error.value) == (
            f"normalization_layer takes the loader's ReadConfig (its value_range), not "
            f"{wrong!r}: normalization_layer(ReadConfig(value_range=(-1, 1))), say"
        )


@pytest.mark.parametrize("training", [False, True], ids=["evaluation", "training"])
@pytest.mark.parametrize("value_range", [(0.0, 1.0), (-1.0, 1.0)])
def test_uint8_batches_through_the_normalization_layer_equal_the_float32_path(
    built, training, value_range
):
    config = ReadConfig(value_range=value_range)

    def images(dtype):
        dataset = load_dataset(
            built,
            "train",
            batch_size=16,
            image_size=SIZE,
            training=training,
            seed=3,
            dtype=dtype,
            config=config,
        )
        return [(x.numpy(), y.numpy()) for x, y in dataset]

    pixels, floats = images("uint8"), images("float32")
    assert len(pixels) == len(floats) == (5 if training else 6)
    layer = normalization_layer(config)
    low, high = value_range
    level = (high - low) / 255
    for (x8, y8), (x32, y32) in zip(pixels, floats, strict=True):
        assert x8.dtype == np.uint8 and x32.dtype == np.float32
        np.testing.assert_array_equal(y8, y32)  # same records in the same order
        scaled = np.asarray(layer(x8))
        assert scaled.dtype == np.float32
        # The uint8 path rounds the resized values: at most half a level apart.
        assert np.abs(scaled - x32).max() <= level / 2 + 1e-5
        assert scaled.min() >= low and scaled.max() <= high
    assert np.abs(np.asarray(layer(pixels[0][0])) - floats[0][0]).max() > 0  # rounding is real


def test_uint8_element_spec_and_bad_dtypes(built):
    val = load_dataset(built, "validation", batch_size=8, image_size=SIZE, dtype=tf.uint8)
    assert val.element_spec[0] == tf.TensorSpec((None, 32, 32, 3), tf.uint8)
    for bad in ("float16", "int8", "uint9"):
        with pytest.raises(ValueError, match=r"dtype must be one of \('float32', 'uint8'\)"):
            load_dataset(built, "validation", batch_size=8, dtype=bad)


@pytest.mark.parametrize("dtype", ["float32", "uint8"])
def test_model_fit_on_a_tiny_model(built, dtype):
    import keras

    info = dataset_info(built)
    train = load_dataset(
        built,
        "train",
        batch_size=16,
        image_size=SIZE,
        training=True,
        seed=0,
        dtype=dtype,
        config=ReadConfig(random_crop=False),
    )
    first = [normalization_layer()] if dtype == "uint8" else []
    model = keras.Sequential(
        [
            keras.Input((*SIZE, 3), dtype=dtype),
            *first,
            keras.layers.Conv2D(4, 3, activation="relu"),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(len(train.class_names), activation="softmax"),
        ]
    )
    model.compile("adam", "categorical_crossentropy", metrics=["accuracy"])
    history = model.fit(train, epochs=2, verbose=0, shuffle=False, class_weight=info.class_weight())
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def copy_with_damaged_shard(built, tmp_path, damage):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(built, copy)
    shard = copy / dataset_info(str(copy)).split("validation").shards[1].file
    damaged = damage(shard.read_bytes())
    if damaged is None:
        shard.unlink()
    else:
        shard.write_bytes(damaged)
    assert (copy / BUILD_INFO_FILE).exists()
    return copy, shard


@pytest.mark.parametrize("where", ["first", "last"])
def test_flipped_byte_fails_loudly_naming_the_shard(built, tmp_path, where):
    offset = 100 if where == "first" else -10  # inside the first / the last record's data
    flip = lambda data: data[:offset] + bytes([data[offset] ^ 0xFF]) + data[offset:][1:]  # noqa: E731
    copy, shard = copy_with_damaged_shard(built, tmp_path, flip)
    expected = dataset_info(str(copy)).split("validation").shards[1].num_examples
    dataset = load_dataset(str(copy), "validation", batch_size=4, image_size=SIZE)
    with pytest.raises(
        tf.errors.InvalidArgumentError,
        match=f"assertion failed: \\[Fewer than the {expected} records that build_info.json "
        f"counts are readable in shard .*{shard.name}: it is corrupt or truncated",
    ):
        for _ in dataset:
            pass


def test_a_label_past_the_loaded_columns_stops_the_epoch(built, tmp_path):
    # The class list cut in build_info.json, its sums kept: one-hot rows of all zeros, int
    # labels past the model's outputs, silently (a damaged-output trial).
    copy = shutil.copytree(built, tmp_path / "out")
    payload = json.loads((copy / BUILD_INFO_FILE).read_text())
    payload["classes"] = payload["classes"][:2]
    payload.update(num_classes=2, background_index=2)
    for split in payload["splits"].values():
        split["class_counts"] = [split["num_examples"], 0, 0]
    (copy / BUILD_INFO_FILE).write_text(json.dumps(payload))
    for mode in ("one_hot", "int"):
        dataset = load_dataset(str(copy), "validation", batch_size=8, label_mode=mode)
        with pytest.raises(tf.errors.InvalidArgumentError, match="is not one of the 2 labels"):
            for _ in dataset:
                pass
    # Detection's object classes too (a reader trial: a crafted record's class 9 in a build
    # of 4 came out as it was).
    dataset = load_dataset(str(copy), "validation", batch_size=8, label_mode="detection")
    with pytest.raises(
        tf.errors.InvalidArgumentError, match="are not one class a box, each one of the build"
    ):
        for _ in dataset:
            pass


def test_a_dataset_made_before_a_rebuild_refuses_the_new_shards(tmp_path):
    # A rebuild (--overwrite) writes shards of the same names: the dataset read them in its
    # next epoch, cut to the old counts (a third of a larger build dropped), without a word.
    tree = tmp_path / "tree"
    sample_tree.write_tree(str(tree), num_train=40, num_val=10, seed=2)
    out = tmp_path / "out"
    build(tree, out, "--num_shards", "2")
    uncached = ReadConfig(cache=False)
    dataset = load_dataset(
        str(out), "train", batch_size=8, image_size=SIZE, training=True, config=uncached
    )
    cached = load_dataset(str(out), "train", batch_size=8, image_size=SIZE, training=True)
    for loaded in (dataset, cached):
        assert sum(int(images.shape[0]) for images, _ in loaded) == 40
    old_labels = sorted(x for _, labels in cached for x in np.argmax(labels, 1).tolist())
    larger = tmp_path / "larger"
    sample_tree.write_tree(str(larger), num_train=60, num_val=10, seed=3)
    build(larger, out, "--num_shards", "2", "--overwrite")
    # (A split cached in its first epoch, ReadConfig.cache, goes on with that build whole.)
    assert sorted(x for _, labels in cached for x in np.argmax(labels, 1).tolist()) == old_labels
    expected = f"{out}/build_info.json changed since load_dataset read it (rebuilt, or upgraded)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(expected)):
        for _ in dataset:
            pass
    (out / BUILD_INFO_FILE).unlink()  # as a rebuild does first
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"build_info\.json is gone since"):
        for _ in dataset:
            pass


def test_a_rebuild_that_commits_in_the_middle_of_an_epoch_stops_it_by_name(tmp_path):
    # The metadata was checked as each epoch began: shards opened after a mid-epoch rebuild
    # (one at a time here) were the new build's, and the epoch went on with records of both
    # builds (41 of 200 twice, 44 never, in a new-user trial), no error; and the check read
    # the metadata once per iterator (TensorFlow folded the read of a constant path).
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=200, num_val=10, seed=2)
    build(tree, out, "--num_shards", "train=4,validation=1")
    # (50 records a shard, more than tf.data reads ahead of one batch)
    config = ReadConfig(
        cycle_length=1, prefetch=0, shuffle_buffer=1, num_parallel_calls=1, cache=False
    )
    dataset = load_dataset(
        str(out), "train", batch_size=5, image_size=SIZE, training=True, seed=0, config=config
    )
    batches = iter(dataset)
    next(batches)
    build(tree, out, "--num_shards", "train=4,validation=1", "--overwrite", "--seed", "7")
    expected = f"{out}/build_info.json changed since load_dataset read it (rebuilt, or upgraded)"
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(expected)):
        for _ in batches:
            pass


@pytest.mark.parametrize(
    "damage, message",
    [(lambda data: data[: len(data) // 2], "has .* bytes"), (lambda data: None, "is missing")],
    ids=["truncated", "deleted"],
)
def test_truncated_or_deleted_shard_is_refused_by_name(built, tmp_path, damage, message):
    copy, shard = copy_with_damaged_shard(built, tmp_path, damage)
    with pytest.raises(CorruptDatasetError, match=f"{shard.name} {message}"):
        load_dataset(str(copy), "validation", batch_size=4, image_size=SIZE)


def test_shard_deleted_after_loading_starts_fails_instead_of_hanging(built, tmp_path):
    copy, shard = copy_with_damaged_shard(built, tmp_path, lambda data: data)
    dataset = load_dataset(
        str(copy), "validation", batch_size=1, image_size=SIZE, config=ReadConfig(cycle_length=1)
    )
    shard.unlink()
    with pytest.raises(tf.errors.InvalidArgumentError, match=f"{shard.name} is missing"):
        for _ in dataset:
            pass


def test_a_tfds_style_data_dir_names_the_build_two_levels_below(built, tmp_path):
    # data/class_folders/2.1.0 (TFDS's data_dir/NAME/VERSION): load_dataset("data") said
    # "build it first", as if there were none.
    data = tmp_path / "data"
    (data / "class_folders").mkdir(parents=True)
    (data / "class_folders" / "2.1.0").symlink_to(built)
    with pytest.raises(IncompleteDatasetError) as error:
        dataset_info(str(data))
    assert str(error.value) == (
        f"{data} holds no build itself, but the directories below it do "
        f"({data}/class_folders/2.1.0): pass one as data_dir, e.g. {data}/class_folders/2.1.0"
    )


def test_the_folder_holding_builds_names_them_and_train_example_says_so_in_a_line(built, tmp_path):
    # load_dataset(PARENT) told to build into PARENT; train_example ended in a traceback.
    parent = tmp_path / "builds"
    (parent / "notes").mkdir(parents=True)
    (parent / "run1").symlink_to(built)
    expected = (
        f"{parent} holds no build itself, but the directories below it do ({parent}/run1): "
        f"pass one as data_dir, e.g. {parent}/run1"
    )
    with pytest.raises(IncompleteDatasetError) as error:
        load_dataset(str(parent), "train", batch_size=4)
    assert str(error.value) == expected
    done = subprocess.run(
        [sys.executable, "-m", "loaders.train_example", str(parent)],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (done.returncode, done.stderr.splitlines()[-1]) == (2, f"error: {expected}")
    assert "Traceback" not in done.stderr


@pytest.mark.slow
def test_learnable_sample_reaches_90_percent(tmp_path):
    """The proof that images and labels stay aligned from tree to model.fit."""
    from loaders.train_example import train

    sample_tree.write_tree(str(tmp_path / "tree"))
    build(tmp_path / "tree", tmp_path / "out", "--num_shards", "train=4,val=2")
    history = train(str(tmp_path / "out"), verbose=0)
    assert history["val_accuracy"][-1] >= 0.9


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["jax", "torch"])
def test_other_keras_backends_train_on_the_loader_to_the_same_bar(tmp_path, backend):
    """Keras 3 on JAX or PyTorch (CPU) fed by the tf.data loader: the sample reaches 90% as on
    TensorFlow (the backend's framework and TensorFlow in one process)."""
    sample_tree.write_tree(str(tmp_path / "tree"))
    build(tmp_path / "tree", tmp_path / "out", "--num_shards", "train=4,val=2")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "loaders.train_example",
            str(tmp_path / "out"),
            "--min_accuracy",
            "0.9",
        ],
        env={**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    line = rf"^validation accuracy: [\d.]+ \(Keras {backend} backend\)$"
    assert re.search(line, done.stdout, re.M)


def test_reads_through_tf_gfile_not_local_paths(built):
    """TF's in-memory `ram://` file system stands in for gs://: no os.path anywhere."""
    remote = "ram://builds/sample"
    for name in tf.io.gfile.listdir(built):
        if not tf.io.gfile.isdir(f"{built}/{name}"):
            tf.io.gfile.copy(f"{built}/{name}", f"{remote}/{name}", overwrite=True)
    info = dataset_info(remote)
    assert info.shard_paths("validation")[0].startswith("ram://builds/sample/validation-")
    local = load_dataset(built, "validation", batch_size=25, image_size=SIZE, label_mode="int")
    ram = load_dataset(remote, "validation", batch_size=25, image_size=SIZE, label_mode="int")
    (x_local, y_local), (x_ram, y_ram) = next(iter(local)), next(iter(ram))
    np.testing.assert_array_equal(x_local.numpy(), x_ram.numpy())
    np.testing.assert_array_equal(y_local.numpy(), y_ram.numpy())
