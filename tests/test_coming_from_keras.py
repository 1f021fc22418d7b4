"""The "Coming from Keras or TFDS" page: its build command and its three programs (Keras's
`image_dataset_from_directory`, TFDS's `tfds.load`, the loader) run on one folder of class
folders, and give the same classes and the same split sizes."""

from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys

import numpy as np
import pytest
from helpers import jpeg_bytes, write
from test_docs import fenced_blocks

PAGE = "docs/coming-from-keras-and-tfds.md"
REPO = pathlib.Path(__file__).resolve().parent.parent
COLOURS = {"cat": (200, 30, 30), "dog": (30, 30, 200)}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """photos/cat, photos/dog (10 each), built as the page's command says."""
    cwd = tmp_path_factory.mktemp("keras")
    for name, colour in COLOURS.items():
        for number in range(10):
            write(cwd / "photos" / name / f"{number}.jpg", jpeg_bytes(64, 64, colour=colour))
    ((language, command),) = fenced_blocks(PAGE, "# Coming from Keras or TFDS")[:1]
    assert language == "bash" and command.startswith("./run_local.sh ")
    # The script itself, from the user's directory: it ran the build from the checkout's,
    # so `photos` was looked for there (and a relative --output_dir written there).
    argv = shlex.split(command)[1:]
    done = subprocess.run(
        [str(REPO / "run_local.sh"), *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "VENV_PYTHON": sys.executable},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return cwd


def run_block(index: int) -> dict:
    """The names the page's `index`-th program defines, run in the current directory."""
    blocks = fenced_blocks(PAGE, "## The same program three ways")
    assert [language for language, _ in blocks] == ["python"] * 3
    scope: dict = {}
    exec(compile(blocks[index][1], PAGE, "exec"), scope)
    return scope


def test_keras_and_the_loader_give_the_same_classes_and_split_sizes(folder, monkeypatch):
    monkeypatch.chdir(folder)
    keras_train = run_block(0)["train"]
    ours = run_block(2)["train"]
    assert keras_train.class_names == ours.class_names == ["cat", "dog"]
    keras_images = sum(int(images.shape[0]) for images, _ in keras_train)
    our_batches = list(ours)
    assert keras_images == sum(int(images.shape[0]) for images, _ in our_batches) == 16
    images, labels = our_batches[0]
    assert images.shape[1:] == (64, 64, 3) and labels.shape[1:] == (2,)  # no background column
    # Each label is its image's colour: cats red (200 in the first channel), dogs 30.
    red = images.numpy()[..., 0].mean(axis=(1, 2)) > 0.45  # values in [0, 1]
    assert np.array_equal(labels.numpy().argmax(axis=1), np.where(red, 0, 1))
    assert 0 < red.sum() < len(red)


def test_tfds_load_reads_the_build(folder, monkeypatch):
    pytest.importorskip("tensorflow_datasets")
    monkeypatch.chdir(folder)
    train = run_block(1)["train"]
    pairs = [(image.shape, int(label)) for image, label in train]
    assert len(pairs) == 16 and {shape for shape, _ in pairs} == {(64, 64, 3)}
    assert sorted(label for _, label in pairs) == [0] * 8 + [1] * 8
