"""`label_mode="detection"`: every object's box and class, following the crop and the flip.

The tree's objects are solid rectangles of one colour per class on a grey ground, and each XML
box is exactly its rectangle. So the boxes the loader yields can be checked against the source
XML (evaluation, no augmentation) and against the pixels of the augmented image it yields with
them (training: where each class's colour lies must be where its box says).
"""

import io

import numpy as np
import pytest
import tensorflow as tf
from helpers import build, ilsvrc_image
from PIL import Image, ImageDraw

from beam_pipeline.core.annotations import voc_xml
from loaders import ReadConfig, dataset_info, load_dataset
from loaders.preprocessing import labelled_boxes, main_object_box

WIDTH, HEIGHT = 160, 120
GREY = (128, 128, 128)
COLOURS = {
    "n00000001": (235, 20, 20),
    "n00000002": (20, 215, 20),
    "n00000003": (20, 20, 235),
}


def scene(rng, names):
    """(JPEG bytes, [(name, xmin, ymin, xmax, ymax)]): one rectangle per name, apart."""
    image = Image.new("RGB", (WIDTH, HEIGHT), GREY)
    draw = ImageDraw.Draw(image)
    objects = []
    columns = np.linspace(0, WIDTH, len(names) + 1).astype(int) if names else []
    for index, name in enumerate(names):  # each object in its own vertical band
        left, right = columns[index] + 2, columns[index + 1] - 2
        width = int(rng.integers(12, right - left))
        height = int(rng.integers(12, HEIGHT - 4))
        xmin = int(rng.integers(left, right - width + 1))
        ymin = int(rng.integers(2, HEIGHT - height - 1))
        draw.rectangle((xmin, ymin, xmin + width - 1, ymin + height - 1), fill=COLOURS[name])
        objects.append((name, xmin, ymin, xmin + width, ymin + height))
    out = io.BytesIO()
    image.save(out, format="JPEG", quality=100, subsampling=0)
    return out.getvalue(), objects


def is_difficult(index: int, position: int) -> int:
    """Whether the XML flags object `position` of image `index` `<difficult>` (a third)."""
    return int((index + position) % 3 == 0)


@pytest.fixture(scope="module")
def detection_build(tmp_path_factory):
    """A DET tree of 24 train and 4 val images with 0-3 objects each, a third of them flagged
    difficult (`is_difficult`); (output, {file: objects})."""
    rng = np.random.default_rng(5)
    root = tmp_path_factory.mktemp("det")
    truth = {}
    for split, count in (("train", 24), ("val", 4)):
        for index in range(count):
            names = [n for n in COLOURS if rng.random() < 0.6] if index else []
            data, objects = scene(rng, names)
            stem = f"{split}_{index:03d}"
            flagged = [(*o, is_difficult(index, i), 0) for i, o in enumerate(objects)]
            xml = voc_xml(flagged, size=(WIDTH, HEIGHT))
            ilsvrc_image(root, split, stem, data, xml)
            truth[f"Data/DET/{split}/{stem}.JPEG"] = objects
    out = tmp_path_factory.mktemp("out")
    build(root, out, "--num_shards", 2)
    return str(out), truth


def targets(dataset):
    """Every example of a detection dataset as (image, boxes, classes, filename), unpadded."""
    for images, target in dataset:
        for i in range(images.shape[0]):
            classes = target["classes"][i].numpy()
            boxes = target["boxes"][i].numpy()
            real = classes >= 0
            assert np.all(boxes[~real] == -1) and np.all(classes[~real] == -1)
            yield images[i].numpy(), boxes[real], classes[real], target["filename"][i].numpy()


def in_pixels(out, **kwargs):
    """The build's train split in batches of 5 at the source size, boxes in pixels (xyxy),
    with file names."""
    return load_dataset(
        out,
        "train",
        batch_size=5,
        image_size=(HEIGHT, WIDTH),
        label_mode="detection",
        bounding_box_format="xyxy",
        with_filenames=True,
        **kwargs,
    )


def test_evaluation_boxes_and_classes_are_the_xml_ones(detection_build):
    out, truth = detection_build
    names = dataset_info(out).class_names
    pixels = in_pixels(out)
    assert pixels.element_spec[1]["boxes"] == tf.TensorSpec((None, None, 4), tf.float32)
    assert pixels.element_spec[1]["classes"] == tf.TensorSpec((None, None), tf.int32)
    relative = load_dataset(
        out, "train", batch_size=5, image_size=32, label_mode="detection", with_filenames=True
    )
    seen = 0
    for (_, boxes, classes, filename), (_, rel, rel_classes, rel_name) in zip(
        targets(pixels), targets(relative), strict=True
    ):
        objects = truth[filename.decode()]
        assert [names[c] for c in classes] == [o[0] for o in objects]
        np.testing.assert_allclose(boxes, np.reshape([o[1:] for o in objects], (-1, 4)), atol=1e-3)
        # rel_yxyx: [ymin, xmin, ymax, xmax] as fractions, whatever the output size.
        assert rel_name == filename and np.array_equal(rel_classes, classes)
        expected = [
            (y0 / HEIGHT, x0 / WIDTH, y1 / HEIGHT, x1 / WIDTH) for _, x0, y0, x1, y1 in objects
        ]
        np.testing.assert_allclose(rel.reshape(-1, 4), np.reshape(expected, (-1, 4)), atol=1e-6)
        seen += 1
    assert seen == 24
    assert any(len(o) == 0 for o in truth.values()) and any(len(o) == 3 for o in truth.values())


def test_batches_pad_with_minus_one_to_their_largest_count_or_to_max_boxes(detection_build):
    out, truth = detection_build
    counts = []
    for _, target in load_dataset(
        out, "train", batch_size=6, image_size=32, label_mode="detection", with_filenames=True
    ):
        objects = [len(truth[name.decode()]) for name in target["filename"].numpy()]
        assert target["boxes"].shape[1] == target["classes"].shape[1] == max(objects)
        assert list(np.sum(target["classes"].numpy() >= 0, axis=1)) == objects
        counts += objects
    assert len(counts) == 24
    fixed = load_dataset(
        out, "train", batch_size=6, image_size=32, label_mode="detection", max_boxes=2
    )
    assert fixed.element_spec[1]["boxes"] == tf.TensorSpec((None, 2, 4), tf.float32)
    kept = [int(n) for _, t in fixed for n in np.sum(t["classes"].numpy() >= 0, axis=1)]
    assert kept == [min(n, 2) for n in counts]


def colour_box(image, colour):
    """[xmin, ymin, xmax, ymax] in pixels of where `colour` lies in `image`, or None."""
    distance = np.abs(image.astype(np.float32) - np.float32(colour)).max(axis=2)
    rows, columns = np.nonzero(distance < 60)
    if rows.size == 0:
        return None
    return np.array([columns.min(), rows.min(), columns.max() + 1, rows.max() + 1], np.float32)


@pytest.mark.parametrize("size", [(72, 96), (64, 64), (24, 32)])  # (24, 32): at 1/2, 1/4 too
def test_training_boxes_follow_the_random_crop_and_flip(detection_build, size):
    out, truth = detection_build
    names = dataset_info(out).class_names
    height, width = size
    checked = dropped = 0
    for epoch_seed in range(4):
        dataset = load_dataset(
            out,
            "train",
            batch_size=4,
            image_size=size,
            training=True,
            seed=epoch_seed,
            label_mode="detection",
            bounding_box_format="xyxy",
            dtype="uint8",
            with_filenames=True,
        )
        for image, boxes, classes, filename in targets(dataset):
            present = {names[c]: box for c, box in zip(classes, boxes, strict=True)}
            assert len(present) == len(classes)  # one object per class in these scenes
            for name, _, _, _, _ in truth[filename.decode()]:
                found = colour_box(image, COLOURS[name])
                if name not in present:  # fell out of the crop: at most an edge's blur is left
                    assert found is None or min(found[2:] - found[:2]) <= 2, (filename, name)
                    dropped += 1
                    continue
                box = present[name]
                assert 0 <= box[0] < box[2] <= width and 0 <= box[1] < box[3] <= height
                if min(box[2:] - box[:2]) < 3:  # a sliver: too thin to see reliably
                    continue
                assert found is not None, (filename, name, box)
                np.testing.assert_allclose(found, box, atol=2.0, err_msg=str((filename, name)))
                checked += 1
    assert checked > 100 and dropped > 5


def test_boxes_follow_a_central_crop_and_every_format_agrees(detection_build):
    out, _ = detection_build
    config = ReadConfig(eval_central_crop=0.5)
    formats = {
        fmt: list(
            targets(
                load_dataset(
                    out,
                    "train",
                    batch_size=8,
                    image_size=(60, 80),
                    label_mode="detection",
                    bounding_box_format=fmt,
                    with_filenames=True,
                    dtype="uint8",
                    config=config,
                )
            )
        )
        for fmt in ("rel_yxyx", "yxyx", "rel_xyxy", "xyxy")
    }
    names = dataset_info(out).class_names
    for index, (image, boxes, classes, filename) in enumerate(formats["xyxy"]):
        rel = formats["rel_yxyx"][index][1]
        scale = np.array([80, 60, 80, 60], np.float32)
        np.testing.assert_allclose(rel[:, [1, 0, 3, 2]] * scale, boxes, atol=1e-4)
        np.testing.assert_allclose(formats["yxyx"][index][1], boxes[:, [1, 0, 3, 2]], atol=1e-4)
        np.testing.assert_allclose(formats["rel_xyxy"][index][1] * scale, boxes, atol=1e-4)
        for name, box in zip((names[c] for c in classes), boxes, strict=True):
            if min(box[2:] - box[:2]) >= 3:
                found = colour_box(image, COLOURS[name])
                np.testing.assert_allclose(found, box, atol=2.0, err_msg=str(filename))


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"bounding_box_format": "xywh"}, ValueError, "bounding_box_format must be one of"),
        ({"max_boxes": 0}, ValueError, "max_boxes must be at least 1, not 0"),
        ({"max_boxes": 2.0}, TypeError, "max_boxes must be an int or None, not 2.0"),
        (
            {"label_mode": "int", "max_boxes": 4},
            ValueError,
            "bounding_box_format and max_boxes shape detection's boxes: they need "
            "label_mode=\"detection\", not 'int'",
        ),
    ],
)
def test_bad_detection_arguments_are_named(detection_build, kwargs, error, message):
    out, _ = detection_build
    arguments = {"label_mode": "detection", "batch_size": 4, **kwargs}
    with pytest.raises(error) as raised:
        load_dataset(out, "train", **arguments)
    assert str(raised.value) == message or str(raised.value).startswith(message)


def difficult_flags(truth, filename):
    """The difficult flags the fixture wrote for the file's objects, in annotation order."""
    index = int(filename.rsplit("_", 1)[1].split(".")[0])
    return [is_difficult(index, i) for i in range(len(truth[filename]))]


def test_difficult_objects_are_kept_flagged_or_dropped(detection_build):
    out, truth = detection_build
    names = dataset_info(out).class_names

    def load(difficult, **kwargs):
        return in_pixels(out, difficult=difficult, **kwargs)

    flagged = load("flag")
    assert flagged.element_spec[1]["difficult"] == tf.TensorSpec((None, None), tf.int32)
    assert "difficult" not in load("keep").element_spec[1]
    seen_flags, dropped = [], 0
    for (_, target), (_, easy) in zip(flagged, load("drop"), strict=True):
        for i, name in enumerate(target["filename"].numpy()):
            name = name.decode()
            flags = difficult_flags(truth, name)
            real = target["classes"][i].numpy() >= 0
            assert list(target["difficult"][i].numpy()[real]) == flags
            assert np.all(target["difficult"][i].numpy()[~real] == -1)
            kept = easy["classes"][i].numpy()
            kept = kept[kept >= 0]
            expected = [o for o, flag in zip(truth[name], flags, strict=True) if not flag]
            assert [names[c] for c in kept] == [o[0] for o in expected]
            np.testing.assert_allclose(
                easy["boxes"][i].numpy()[: len(kept)],
                np.reshape([o[1:] for o in expected], (-1, 4)),
                atol=1e-3,
            )
            seen_flags += flags
            dropped += sum(flags)
    assert len(seen_flags) > 20 and 5 < dropped < len(seen_flags)
    # Through the training crop (which drops objects) and max_boxes' cut and padding, each
    # flag stays with its object (one per class in these scenes); "drop" yields none flagged.
    for difficult in ("flag", "drop"):
        for _, target in load(difficult, max_boxes=2, training=True, seed=1):
            for i, name in enumerate(target["filename"].numpy()):
                name = name.decode()
                flag_of = dict(
                    zip((o[0] for o in truth[name]), difficult_flags(truth, name), strict=True)
                )
                classes = target["classes"][i].numpy()
                yielded = [names[c] for c in classes[classes >= 0]]
                if difficult == "drop":
                    assert not any(flag_of[n] for n in yielded)
                    continue
                flags = target["difficult"][i].numpy()
                assert list(flags[classes >= 0]) == [flag_of[n] for n in yielded]
                assert np.all(flags[classes < 0] == -1)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"difficult": "ignore"},
            "difficult must be one of ('keep', 'drop', 'flag'), not 'ignore'",
        ),
        (
            {"label_mode": "int", "difficult": "drop"},
            "difficult='drop' picks detection's objects: it needs label_mode=\"detection\", "
            "not 'int'",
        ),
    ],
)
def test_bad_difficult_arguments_are_named(detection_build, kwargs, message):
    arguments = {"label_mode": "detection", "batch_size": 4, **kwargs}
    with pytest.raises(ValueError) as raised:
        load_dataset(detection_build[0], "train", **arguments)
    assert str(raised.value).startswith(message)


def test_a_detection_model_fits_on_the_padded_batches(detection_build):
    """Keras takes the dict targets: a tiny model regresses the first box of each image."""
    import keras

    out, _ = detection_build
    train = load_dataset(
        out,
        "train",
        batch_size=4,
        image_size=32,
        training=True,
        seed=0,
        label_mode="detection",
        max_boxes=3,
    ).map(lambda images, target: (images, target["boxes"][:, 0]))
    model = keras.Sequential(
        [keras.Input((32, 32, 3)), keras.layers.GlobalAveragePooling2D(), keras.layers.Dense(4)]
    )
    model.compile(optimizer="adam", loss="mse")
    history = model.fit(train, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()


def test_a_training_crop_keeps_the_labelled_object_where_another_is_as_large(tmp_path):
    # Two objects of one pixel area: the build labels the image by the first in the XML (red).
    # Ranked by their stored float32 fractions the second (blue) came first, and the crop
    # kept it: half of the crops showed no red at all, labelled red.
    width, height = 200, 160
    image = Image.new("RGB", (width, height), GREY)
    draw = ImageDraw.Draw(image)
    draw.rectangle((0, 0, 39, 71), fill=COLOURS["n00000001"])  # 40 x 72
    draw.rectangle((128, 120, 199, 159), fill=COLOURS["n00000003"])  # 72 x 40
    stream = io.BytesIO()
    image.save(stream, format="JPEG", quality=100, subsampling=0)
    objects = [("n00000001", 0, 0, 40, 72, 0, 0), ("n00000003", 128, 120, 200, 160, 0, 0)]
    for index in range(8):
        ilsvrc_image(
            tmp_path / "tree", "train", f"t{index}", stream.getvalue(), voc_xml(objects, (200, 160))
        )
    build(tmp_path / "tree", tmp_path / "out", "--splits", "train")
    boxes = tf.constant([[0, 0, 72 / 160, 40 / 200], [120 / 160, 128 / 200, 1, 1]], tf.float32)
    assert main_object_box(boxes).numpy().ravel()[0] == np.float32(0.75)  # blue, by float32
    assert main_object_box(labelled_boxes(boxes, tf.constant([0, 1]), 0)).numpy().ravel()[0] == 0
    seen = 0
    for seed in range(6):
        dataset = load_dataset(
            tmp_path / "out",
            "train",
            batch_size=8,
            image_size=32,
            training=True,
            seed=seed,
            label_mode="int",
            dtype="uint8",
            config=ReadConfig(random_flip=False),
        )
        for images, labels in dataset:
            assert labels.numpy().tolist() == [0] * 8
            pixels = images.numpy().astype(int)
            red = (pixels[..., 0] > 150) & (pixels[..., 1] < 100) & (pixels[..., 2] < 100)
            assert red.any(axis=(1, 2)).all()
            seen += 8
    assert seen == 48
