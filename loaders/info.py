"""`dataset_info(data_dir)`: what a build holds, read from its committed metadata; what the
loaders answer to Keras's and TFDS's arguments and split names (`keras_habits`)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import warnings
from collections.abc import Iterator, Mapping
from typing import Any

import tensorflow as tf

from schemas import (
    BUILD_INFO_FILE,
    LEGACY_INFO_FILE,
    SCHEMA_VERSION,
    ClassList,
    DatasetInfo,
    NoBuildError,
    SplitInfo,
    read_build_info,
)
from schemas.features import FEATURES, is_later_minor, tf_feature_spec
from schemas.metadata import metadata_text, unreadable_metadata
from schemas.paths import first_few, is_local, join, not_a_directory
from schemas.trees import tree_instead_of_build


class IncompleteDatasetError(NoBuildError):
    """The directory holds no committed build (no build_info.json)."""


class CorruptDatasetError(ValueError):
    """A committed build whose shards no longer match its build_info.json."""


class UnknownSplitError(KeyError):
    """A split the build does not have (a KeyError, as TFDS's; its text printed as written,
    not as KeyError's quoted repr)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclasses.dataclass(frozen=True)
class BuildInfo:
    """A committed build: its metadata plus the directory it lives in.

    Not a `tf.data.Dataset`: `load_dataset` turns a split of it into one.
    """

    data_dir: str
    info: DatasetInfo
    # The metadata file as read (its name in data_dir, and its text): the reader checks before
    # and after each shard that it is unchanged, so a dataset made before a rebuild stops
    # instead of reading the new shards.
    metadata_file: str = dataclasses.field(default="", compare=False)
    metadata_text: str = dataclasses.field(default="", compare=False, repr=False)

    @property
    def classes(self) -> tuple[str, ...]:
        return self.info.classes

    @property
    def class_list(self) -> ClassList:
        """The label rule: every label's name and the one-hot length."""
        return self.info.class_list

    @property
    def class_names(self) -> list[str]:
        """The names of `load_dataset`'s one-hot columns by default, as Keras's `class_names`:
        label `i` is `class_names[i]`. The classes, then the background class ("background",
        label `num_classes`) only when `has_background`: for a build of class folders (no image
        without a class) it is Keras's `image_dataset_from_directory(folder).class_names`.
        `class_list.names` names every label, background included."""
        return self.label_names()

    @property
    def has_background(self) -> bool:
        """Whether any split holds an image labelled background (an image without objects:
        the last entry of its `class_counts`). The loader's labels have a background column
        by default only then."""
        return self.info.has_background

    def background_count(self, split: str) -> int:
        """Images of `split` labelled background (KeyError naming the splits there are)."""
        return sum(self.split(split).class_counts[self.background_index :])

    def label_names(self, background: bool | None = None) -> list[str]:
        """The names of the one-hot columns of a load with `background`, in label order: the
        classes, then "background" when `background` is True, or None (the default) and the
        build `has_background`; False: the classes alone."""
        with_background = self.has_background if background is None else background
        return list(self.class_list.names if with_background else self.classes)

    @property
    def num_classes(self) -> int:
        """Number of real classes; one-hot labels have `len(class_names)` entries: these, and
        the background class when the build has background images (`label_names`)."""
        return self.class_list.num_classes

    @property
    def background_index(self) -> int:
        return self.class_list.background_index

    @property
    def splits(self) -> Splits:
        """The splits by name, sorted, as TFDS's `info.splits`: `splits["train"].num_examples`;
        iterating gives the names."""
        return Splits(self)

    def __repr__(self) -> str:
        background = " + background" if self.has_background else ""
        sizes = ", ".join(f"{name} {self.num_examples(name):,}" for name in self.splits)
        return (
            f"BuildInfo({self.data_dir!r}: {self.num_classes} classes{background}; {sizes} "
            f"images; schema {self.info.schema_version})"
        )

    @property
    def features(self) -> dict[str, Any]:
        """The records' parse spec, every key a record of this build carries (its schema's):
        `tf.io.parse_single_example(record, info.features)`. TFDS's `info.features` is a
        FeaturesDict; the class names are `class_names` here."""
        version = self.info.schema_version
        keys = tuple(f.key for f in FEATURES if f.in_schema(version))
        return tf_feature_spec(self.num_classes, keys)

    def split(self, name: str) -> SplitInfo:
        names = tuple(sorted(self.info.splits))  # (for the errors)
        if not isinstance(name, str):
            raise TypeError(f"split must be a split's name, one of {names}, not {name!r}")
        try:
            return self.info.splits[name]
        except KeyError:
            hint = ""
            if name.lower() in ("val", "valid") and "validation" in self.info.splits:
                hint = f"; {name} is written as validation"
            elif name.lower() == "training" and "train" in self.info.splits:
                hint = '; the training split is "train" (Keras\'s subset="training")'
            elif "+" in name:  # TFDS's union: "train+validation"
                hint = (
                    "; the loader reads one whole split (TFDS's unions such as "
                    "train+validation are tfds.load's: the build is a TFDS dataset; or build "
                    "without --validation_split to train on every image)"
                )
            elif name.lower() == "both" and "train" in self.info.splits:
                hint = '; load "train" and "validation" one at a time (Keras\'s subset="both")'
            elif name == "test":
                hint = "; hold one out at build time with --test_split 0.1"
            elif any(mark in name for mark in "[%"):  # TFDS's slicing: "train[:10%]"
                hint = (
                    "; the loader reads whole splits (TFDS's slices such as train[:10%], the "
                    "same images every epoch, are tfds.load's: the build is a TFDS dataset); "
                    "dataset.take(n) takes n batches, other images each epoch with "
                    "training=True"
                )
            raise UnknownSplitError(
                f"{self.data_dir} has no split {name!r}; it has {names}{hint}"
            ) from None

    def num_examples(self, split: str) -> int:
        return self.split(split).num_examples

    def class_counts(self, split: str, background: bool | None = None) -> dict[str, int]:
        """Examples per one-hot column of a load with `background` (`label_names`) in a split:
        the classes, then "background" only where the build `has_background` (by default)."""
        names = self.label_names(background)
        return dict(zip(names, self.split(split).class_counts[: len(names)], strict=True))

    def shard_paths(self, split: str) -> list[str]:
        return [join(self.data_dir, shard.file) for shard in self.split(split).shards]

    def class_weight(
        self, split: str = "train", background: bool | None = None
    ) -> dict[int, float]:
        """Keras `class_weight`: weight n / (k * count_i) for each of the k classes present.

        Balances data where a few labels (often images without objects) dominate; classes
        absent from the split get weight 1.0. One key per one-hot column of a load with the
        same `background` (`label_names(background)`): the background class's key only when
        the labels have its column.

        Raises:
          KeyError: no such split (naming the splits there are).
          ValueError: the split is unlabelled, so it has no class counts to balance.
        """
        if split not in self.info.splits:
            raise UnknownSplitError(
                f"class_weight(split={split!r}): {self.data_dir} has no split {split!r}; it has "
                f"{tuple(sorted(self.info.splits))}: pass the split to balance"
            )
        if not self.split(split).labelled:
            raise ValueError(
                f"class_weight: split {split!r} of {self.data_dir} is unlabelled (label -1 on "
                "every record), so it has no class counts; pass a labelled split"
            )
        counts = self.split(split).class_counts[: len(self.label_names(background))]
        present = [c for c in counts if c > 0]
        total = sum(present)
        return {
            i: (total / (len(present) * count) if count > 0 else 1.0)
            for i, count in enumerate(counts)
        }


class Splits(Mapping[str, SplitInfo]):
    """A build's splits by name (sorted), read-only, as TFDS's `info.splits`: a missing name
    raises `BuildInfo.split`'s KeyError, which names the splits there are."""

    def __init__(self, build: BuildInfo):
        self._build = build
        self._names = tuple(sorted(build.info.splits))

    def __getitem__(self, name: str) -> SplitInfo:
        return self._build.split(name)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        sizes = ", ".join(f"{name!r}: {self[name].num_examples:,} images" for name in self)
        return "{" + sizes + "}"


def data_path(data_dir: str | os.PathLike) -> str:
    """`data_dir` as a string, a leading `~` read as the home directory (as a shell would,
    and as the builder reads `--output_dir`). TypeError, naming it, for anything else."""
    if not isinstance(data_dir, (str, os.PathLike)):
        raise TypeError(f"data_dir must be a build's directory, a str or a path, not {data_dir!r}")
    path = os.fspath(data_dir)
    if not isinstance(path, str):
        raise TypeError(f"data_dir must be a str or a path of one, not {data_dir!r}")
    return os.path.expanduser(path) if path.startswith("~") else path


# Keyword arguments of Keras's `image_dataset_from_directory` and TFDS's `tfds.load` that the
# loaders do not take, and what does their work here (docs/coming-from-keras-and-tfds.md).
HABITS = {
    "shuffle": "training=True shuffles the shards and records (and augments)",
    "shuffle_files": "training=True shuffles the shards and records (and augments)",
    "validation_split": "hold a split out at build time (--validation_split 0.2), then load "
    'split="validation"',
    "subset": 'load split="train" or split="validation" (--validation_split at build time)',
    "labels": "the build's classes are the labels (labels=None: label_mode=None here)",
    "class_names": "the build's classes are the labels: dataset_info(data_dir).class_names; "
    "--labels_file at build time chooses them and their order",
    "read_config": "config=ReadConfig(...) holds the reading options",
    "decoders": "images are decoded as RGB JPEGs; config=ReadConfig(...) holds the options",
    "color_mode": "images are RGB, 3 channels",
    "crop_to_aspect_ratio": "config=ReadConfig(eval_central_crop=0.875) crops the centre",
    "interpolation": "images are resized bilinearly",
    "as_supervised": "(images, labels) is the default",
    "with_info": "dataset_info(data_dir) gives the build's metadata",
    "directory": "the first argument, data_dir, is the build's directory",
    "follow_links": "the build follows a class folder's links (the tree is read at build time)",
    "pad_to_aspect_ratio": "evaluation resizes the whole image (no padding); "
    "config=ReadConfig(eval_central_crop=0.875) crops the centre",
    "verbose": "the build reports what it found (its summary and rejected.jsonl)",
    "download": "a build is read where it is (a local directory or gs://): nothing is downloaded",
}


def keras_habits(function):
    """`function` (a loader) refusing a keyword argument of Keras's or TFDS's (`HABITS`) that it
    does not take with what does its work here; Python's TypeError for any other."""
    signature = inspect.signature(function)

    @functools.wraps(function)
    def checked(*args, **kwargs):
        if args and "data_dir" in kwargs:  # tfds.load(name, split=..., data_dir=...)
            raise TypeError(
                f"{function.__name__}() got {args[0]!r} and data_dir={kwargs['data_dir']!r}: "
                "its first argument is the build's directory, the folder of build_info.json "
                f"(TFDS's data_dir holds datasets by name): {function.__name__}(data_dir"
                f"{', split, ...' if 'split' in signature.parameters else ''}) "
                "(docs/coming-from-keras-and-tfds.md)"
            )
        habit = next((k for k in kwargs if k in HABITS and k not in signature.parameters), None)
        if habit is not None:
            raise TypeError(
                f"{function.__name__}() got an unexpected keyword argument {habit!r} (Keras's "
                f"or TFDS's): {HABITS[habit]} (docs/coming-from-keras-and-tfds.md)"
            )
        return function(*args, **kwargs)  # (any other mistake: Python's own TypeError)

    return checked


@keras_habits
def dataset_info(data_dir: str | os.PathLike) -> BuildInfo:
    """Reads `data_dir/build_info.json` (local or gs://), or a schema 1.x build's metadata.

    Raises:
      IncompleteDatasetError: the directory has no committed build (still running, crashed,
        failed its error budget, or never built).
      DamagedBuildError: its metadata is there but damaged (the message names the file and
        the field).
    """

    directory = data_path(data_dir)
    read: dict[str, str] = {}

    def read_text(name: str) -> str | None:
        path = join(directory, name)
        if not tf.io.gfile.exists(path):
            return None
        try:
            with tf.io.gfile.GFile(path, "rb") as f:
                data = f.read()
        except tf.errors.NotFoundError:
            raise
        except tf.errors.OpError as error:  # a directory of its name, say: the build is damaged
            raise unreadable_metadata(path, error.message.removeprefix(f"{path}; ")) from None
        read[name] = metadata_text(data, path)
        return read[name]

    if what := not_a_directory(directory):
        raise IncompleteDatasetError(
            f"{directory} {what}: data_dir is the --output_dir of a build, a directory"
        )
    try:
        info = read_build_info(read_text, directory)
        name = next((name for name in (BUILD_INFO_FILE, LEGACY_INFO_FILE) if name in read), "")
        _note_later_schema(join(directory, name), info.schema_version)
        return BuildInfo(directory.rstrip("/"), info, name, read.get(name, ""))
    except NoBuildError as error:
        listing = os.listdir if is_local(directory) else None
        tree = tree_instead_of_build(directory, tf.io.gfile.isdir, listing)
        raise IncompleteDatasetError(str(tree or _builds_below(directory) or error)) from None


# (metadata path, schema version) of the builds of a later minor schema already warned of.
_NOTED: set[tuple[str, str]] = set()


def _note_later_schema(path: str, version: str) -> None:
    """Warns, once per build and version in a process, that a build of a later minor schema
    than this code's is read as this code reads it: what that schema added is ignored (a
    later major one is refused, `schemas.metadata.readable_version`)."""
    if not is_later_minor(version) or (path, version) in _NOTED:
        return
    _NOTED.add((path, version))
    warnings.warn(
        f"{path}: the build is of schema {version}, newer than this reader's {SCHEMA_VERSION}; "
        f"it is read as {SCHEMA_VERSION} reads it, the record keys and metadata fields added "
        "since ignored: pip install -U imagenet-tfrecords to use them",
        UserWarning,
        stacklevel=3,
    )


def _builds_below(data_dir: str) -> str | None:
    """The message for a local directory without a build whose subdirectories, or theirs,
    hold builds (the folder the builds were written into, or TFDS's `data_dir` above
    `NAME/VERSION`, not one of them); None otherwise."""
    if not is_local(data_dir):
        return None

    def folders_in(directories: list[str]) -> list[str]:
        found = []
        for directory in directories[:1000]:
            with contextlib.suppress(OSError), os.scandir(directory) as entries:
                found += sorted(entry.path for entry in entries if entry.is_dir())
        return found

    def is_build(folder: str) -> bool:
        return any(
            os.path.isfile(join(folder, name)) for name in (BUILD_INFO_FILE, LEGACY_INFO_FILE)
        )

    children = folders_in([data_dir])
    builds = [folder for folder in children[:1000] if is_build(folder)]
    if not builds:
        builds = [folder for folder in folders_in(children)[:1000] if is_build(folder)]
    if not builds:
        return None
    shown = first_few(builds, 5)
    return (
        f"{data_dir} holds no build itself, but the directories below it do ({shown}): pass "
        f"one as data_dir, e.g. {builds[0]}"
    )


def renamed(module: str, name: str) -> type[BuildInfo]:
    """A module's PEP 562 `__getattr__`: `Dataset` still works for one release, with a warning."""
    if name == "Dataset":
        warnings.warn(
            f"{module}.Dataset is renamed {module}.BuildInfo; the old name will be removed",
            DeprecationWarning,
            stacklevel=3,
        )
        return BuildInfo
    raise AttributeError(f"module {module!r} has no attribute {name!r}")


def __getattr__(name: str) -> type[BuildInfo]:
    return renamed(__name__, name)
