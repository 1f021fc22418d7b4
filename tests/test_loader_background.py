"""The background column: present where the build has background images, as asked otherwise.

Records store the background class as label `num_classes` and the build's metadata counts it per
split; the loader decides the one-hot width (`background=None|True|False`): a build of class
folders (CLS-LOC style, no image without a class) loads with `num_classes` columns and Keras's
`class_names`, a DET build with negatives keeps its background column.
"""

import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from helpers import build, ilsvrc_image, jpeg_bytes

tf = pytest.importorskip("tensorflow")

from beam_pipeline.core.annotations import voc_xml  # noqa: E402
from loaders import dataset_info, load_dataset  # noqa: E402
from loaders.train_example import train  # noqa: E402
from schemas import BACKGROUND  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SIZE = (16, 16)
SYNSETS = ("n01440764", "n01443537", "n01484850", "n01491361")
COLOURS = ((220, 20, 20), (20, 200, 20), (20, 20, 220), (200, 200, 20))


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A CLS-LOC-style build: every image of train and val in its class's synset folder, no
    XML: no image is background. Returns (tree, output directory)."""
    tree = tmp_path_factory.mktemp("cls_tree")
    for split, per_class in (("train", 3), ("val", 2)):
        for synset, colour in zip(SYNSETS, COLOURS, strict=True):
            for index in range(per_class):
                stem = f"{synset}/{synset}_{split}_{index}"
                ilsvrc_image(tree, split, stem, jpeg_bytes(40, 30, colour), task="CLS-LOC")
    out = tmp_path_factory.mktemp("cls_out")
    build(tree, out)
    return tree, str(out)


@pytest.fixture(scope="module")
def negatives(tmp_path_factory):
    """A DET build whose train images all hold an object and whose val has 2 negatives (XML
    without objects): the build has background images, train has none."""
    tree = tmp_path_factory.mktemp("det_tree")
    classes = ("cat", "dog")
    for index in range(4):
        name = classes[index % 2]
        xml = voc_xml([(name, 2, 2, 30, 20)], size=(40, 30))
        ilsvrc_image(tree, "train", f"t{index}", jpeg_bytes(40, 30, COLOURS[index % 2]), xml)
    for index in range(3):
        objects = [(classes[index], 2, 2, 30, 20)] if index < 2 else []
        ilsvrc_image(tree, "val", f"v{index}", jpeg_bytes(40, 30), voc_xml(objects, (40, 30)))
    ilsvrc_image(tree, "val", "v3", jpeg_bytes(40, 30))  # no XML in an annotated split
    out = tmp_path_factory.mktemp("det_out")
    build(tree, out)
    return str(out)


def labels(data_dir, split, **kwargs):
    """Every label of one evaluation pass (stored order), and the dataset."""
    dataset = load_dataset(data_dir, split, batch_size=5, image_size=SIZE, **kwargs)
    return np.concatenate([y.numpy() for _, y in dataset]), dataset


def test_a_build_of_class_folders_loads_one_column_per_class(folders):
    _, out = folders
    info = dataset_info(out)
    assert (info.num_classes, info.has_background) == (4, False)
    assert info.class_names == list(SYNSETS)
    assert info.class_list.names == (*SYNSETS, BACKGROUND)  # every label's name, still
    ints, _ = labels(out, "validation", label_mode="int")
    assert sorted(ints.tolist()) == [0, 0, 1, 1, 2, 2, 3, 3]
    one_hot, dataset = labels(out, "validation")
    assert dataset.element_spec[1] == tf.TensorSpec((None, 4), tf.float32)
    np.testing.assert_array_equal(one_hot, np.eye(4, dtype=np.float32)[ints])
    assert dataset.class_names == list(SYNSETS)
    training = load_dataset(out, "train", batch_size=4, image_size=SIZE, training=True, seed=0)
    assert training.element_spec[1] == tf.TensorSpec((4, 4), tf.float32)
    assert training.class_names == list(SYNSETS)
    # class_weight has a key per column: 3 train images of each class.
    assert info.class_weight() == {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0}


def test_class_names_are_kerass_for_the_same_folder(folders):
    import keras

    tree, out = folders
    keras_train = keras.utils.image_dataset_from_directory(
        str(tree / "Data" / "CLS-LOC" / "train"), image_size=SIZE, batch_size=4, verbose=False
    )
    assert dataset_info(out).class_names == keras_train.class_names == list(SYNSETS)
    ours = load_dataset(out, "train", batch_size=4, image_size=SIZE, label_mode="int")
    assert ours.class_names == keras_train.class_names


def test_background_true_gives_the_old_width_with_an_empty_last_column(folders):
    _, out = folders
    ints, _ = labels(out, "validation", label_mode="int")
    one_hot, dataset = labels(out, "validation", background=True)
    assert dataset.element_spec[1] == tf.TensorSpec((None, 5), tf.float32)
    np.testing.assert_array_equal(one_hot, np.eye(5, dtype=np.float32)[ints])
    assert not one_hot[:, 4].any()
    assert dataset.class_names == [*SYNSETS, BACKGROUND]
    assert dataset_info(out).label_names(True) == [*SYNSETS, BACKGROUND]
    weights = dataset_info(out).class_weight(background=True)
    assert weights == {0: 1.0, 1: 1.0, 2: 1.0, 3: 1.0, 4: 1.0}
    # background=False is the default's width here: no image needs the column.
    same, dataset = labels(out, "validation", background=False)
    np.testing.assert_array_equal(same, np.eye(4, dtype=np.float32)[ints])
    assert dataset.class_names == list(SYNSETS)


def test_int_labels_keep_their_values_whatever_the_width(negatives):
    ints, dataset = labels(negatives, "validation", label_mode="int")
    assert sorted(ints.tolist()) == [0, 1, 2, 2]  # cat, dog, two negatives: background = 2
    assert dataset.class_names == ["cat", "dog", BACKGROUND]
    # train has no background image: background=False loads it, int values as stored.
    train_ints, dataset = labels(negatives, "train", label_mode="int", background=False)
    assert sorted(train_ints.tolist()) == [0, 0, 1, 1] and dataset.class_names == ["cat", "dog"]


def test_a_build_with_negatives_keeps_the_background_column_in_every_split(negatives):
    info = dataset_info(negatives)
    assert info.has_background and info.background_count("validation") == 2
    assert info.background_count("train") == 0
    assert info.class_names == ["cat", "dog", BACKGROUND]
    for split in ("train", "validation"):
        ints, _ = labels(negatives, split, label_mode="int")
        one_hot, dataset = labels(negatives, split)
        assert dataset.element_spec[1] == tf.TensorSpec((None, 3), tf.float32)
        np.testing.assert_array_equal(one_hot, np.eye(3, dtype=np.float32)[ints])
        assert dataset.class_names == ["cat", "dog", BACKGROUND]
    # train alone, without the column: every row still has its one.
    ints, _ = labels(negatives, "train", label_mode="int")
    one_hot, _ = labels(negatives, "train", background=False)
    np.testing.assert_array_equal(one_hot, np.eye(2, dtype=np.float32)[ints])
    # class_weight: 2 cats and 2 dogs, no background in train: weight 1.0 for each key.
    assert info.class_weight() == {0: 1.0, 1: 1.0, 2: 1.0}
    assert info.class_weight(background=False) == {0: 1.0, 1: 1.0}
    # detection ignores the column: object classes index class_names as they are.
    dataset = load_dataset(negatives, "validation", batch_size=4, label_mode="detection")
    classes = next(iter(dataset))[1]["classes"].numpy()
    assert sorted(classes[classes >= 0].tolist()) == [0, 1]


@pytest.mark.parametrize(
    "label_mode, lost",
    [
        ("one_hot", "their one-hot labels would be all zeros"),
        ("categorical", "their one-hot labels would be all zeros"),
        ("int", "their label 2 would be past the last of 2 classes"),
    ],
)
def test_background_false_is_refused_on_a_split_with_background_images(negatives, label_mode, lost):
    with pytest.raises(ValueError) as refused:
        load_dataset(negatives, "validation", batch_size=4, label_mode=label_mode, background=False)
    assert str(refused.value) == (
        f"background=False, but split 'validation' of {negatives} has 2 images labelled "
        f"background (label 2, images without objects): {lost}. Load it with "
        'background=None (the default) or True: 3 columns, the last "background", for a '
        "model with an output for it"
    )
    # Images alone carry no label to lose.
    images = load_dataset(negatives, "validation", batch_size=4, label_mode=None, background=False)
    assert images.class_names == ["cat", "dog"]


@pytest.mark.parametrize("value", [1, 0, "auto", np.bool_(True)])
def test_background_takes_none_true_or_false(folders, value):
    with pytest.raises(TypeError) as refused:
        load_dataset(folders[1], "train", batch_size=4, background=value)
    assert str(refused.value) == f"background must be None, True or False, not {value!r}"


def test_train_example_builds_its_model_with_the_loaders_width(folders):
    # A CLS-LOC build: 4 columns; a model of num_classes + 1 outputs would fail in fit with
    # "target.shape=(4, 4), output.shape=(4, 5)".
    history = train(folders[1], epochs=1, batch_size=4, image_size=SIZE, verbose=0)
    assert len(history["loss"]) == 1 and np.isfinite(history["loss"]).all()


def run_local_filter(stdin: str) -> subprocess.CompletedProcess:
    """`run_local.sh`'s `quiet_tensorflow`, as the script defines it, on `stdin`."""
    script = "source <(sed -n '/^quiet_tensorflow() {/,/^}/p' run_local.sh); quiet_tensorflow"
    return subprocess.run(
        ["bash", "-c", script], cwd=ROOT, input=stdin, capture_output=True, text=True, timeout=60
    )


def test_run_locals_training_step_hides_tensorflows_start_up_lines_alone():
    # TensorFlow's own start-up on this machine, with the step's TF_CPP_MIN_LOG_LEVEL=1.
    start = subprocess.run(
        [sys.executable, "-c", "import tensorflow as tf; tf.constant(1.0) + 1"],
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert start.returncode == 0, start.stderr
    real = [
        "E0000 00:00:1795791908.214082   11089 some_op.cc:12] a real error",
        "W0000 00:00:1795791908.214082   11089 some_op.cc:12] a warning",
        "Traceback (most recent call last):",
        "error: validation accuracy 0.660 is below 0.9",
    ]
    done = run_local_filter(start.stderr + "\n".join(real) + "\n")
    assert (done.returncode, done.stdout, done.stderr) == (0, "\n".join(real) + "\n", "")
    noise = [
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR",
        "I0000 00:00:1795791905.805676   11089 port.cc:153] oneDNN custom operations are on. "
        "You may see slightly different numerical results",
        "I0000 00:00:1795791905.806026   11089 cudart_stub.cc:31] Could not find cuda drivers on "
        "your machine, GPU will not be used.",
    ]
    cuinit = (
        "E0000 00:00:1795791908.214082   11089 cuda_platform.cc:52] failed call to cuInit: "
        "INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
    )
    done = run_local_filter("\n".join([*noise, cuinit]) + "\n")
    # cuInit's failure is noise where no NVIDIA driver is loaded, news where one is.
    kept = "" if not os.path.exists("/proc/driver/nvidia/version") else cuinit + "\n"
    assert (done.returncode, done.stdout) == (0, kept)


def test_binary_labels_are_kerass_for_a_build_of_two_classes(tmp_path, folders):
    # Keras's label_mode="binary" ([B, 1] float32, 0 or 1) was refused, listing the others.
    import keras

    tree = tmp_path / "tree"
    for synset, colour in zip(SYNSETS[:2], COLOURS, strict=False):
        for index in range(3):
            ilsvrc_image(
                tree,
                "train",
                f"{synset}/{synset}_{index}",
                jpeg_bytes(40, 30, colour),
                task="CLS-LOC",
            )
    build(tree, tmp_path / "out", "--splits", "train")
    binary, dataset = labels(tmp_path / "out", "train", label_mode="binary")
    assert dataset.element_spec[1] == tf.TensorSpec((None, 1), tf.float32)
    ints, _ = labels(tmp_path / "out", "train", label_mode="int")
    np.testing.assert_array_equal(binary, ints.astype(np.float32)[:, None])
    keras_train = keras.utils.image_dataset_from_directory(
        str(tree / "Data" / "CLS-LOC" / "train"),
        label_mode="binary",
        image_size=SIZE,
        verbose=False,
    )
    theirs = np.concatenate([y.numpy() for _, y in keras_train])
    assert theirs.dtype == binary.dtype and sorted(theirs.ravel()) == sorted(binary.ravel())
    with pytest.raises(ValueError) as error:  # four classes are no binary task
        load_dataset(folders[1], "train", batch_size=2, label_mode="binary")
    assert str(error.value) == (
        f'label_mode="binary" takes a build of two labels (0.0 and 1.0, as Keras\'s), and '
        f'{folders[1]} has 4 ({", ".join(SYNSETS)}): load it with label_mode="int" or '
        '"one_hot"'
    )
