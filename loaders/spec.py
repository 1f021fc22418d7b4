"""`LoadSpec`: what a loader is asked for, checked once, as one frozen object.

`load_dataset` and `load_dali_dataset` build a `LoadSpec` from their keyword arguments before
anything else, and hand it whole to every step after (the parser and the batching of
`loaders.dataset`, DALI's pipeline in `loaders.dali_graph`): the arguments they share are
spelled, checked and documented here alone.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

from loaders.config import AUTO_CACHE_BYTES, ReadConfig
from loaders.info import BuildInfo
from loaders.preprocessing import checked_image_size, is_int, output_dtype

# Keras's names ("categorical" is one-hot, None yields images only) and the loader's own.
LABEL_MODES = ("one_hot", "categorical", "int", "binary", "detection", None)
# The modes of one label an image (a class index, one-hot or not).
CLASS_LABELS = ("one_hot", "int", "binary")
# KerasHub's names of the corner formats; "rel_" ones are fractions of the output image.
BOX_FORMATS = ("rel_yxyx", "yxyx", "rel_xyxy", "xyxy")
# Detection's objects flagged `<difficult>` in their XML: kept as any other, left out (the OD
# API's `ignore_difficult_instances`), or kept with the flag as a target of its own.
DIFFICULT_MODES = ("keep", "drop", "flag")


# Seeds TensorFlow tells apart: it takes them modulo 2**31 - 1.
SEEDS = 2**31 - 1


@dataclasses.dataclass(frozen=True)
class LoadSpec:
    """The batches asked for. `LoadSpec.checked(**arguments)` builds one from the loader's
    keyword arguments, checked (TypeError or ValueError naming the argument, before TensorFlow
    or DALI builds anything) and normalised; integer arguments may be Python or NumPy integers
    (not bools). The plain constructor checks nothing: it takes values already normalised.

    Attributes:
      batch_size: per input pipeline (per replica when `input_context` is given, use
        `input_context.get_per_replica_batch_size(global_batch_size)`).
      image_size: (height, width) of the output images (`checked` also takes one int, for
        square ones).
      training: shuffle files and records, random crop and flip, drop the last partial batch.
      seed: makes shuffling and augmentation deterministic (with TensorFlow's global seed,
        which tf.data draws from too: the same pair gives the same epochs); in [0, `SEEDS`).
      label_mode: "one_hot" (or Keras's name, "categorical": kept as "one_hot"): float32
        vectors of one entry per name of `label_names` (the classes, and the background class
        last when `background` gives it a column); "int": int32 class indices; "binary" (a
        build of two label names, Keras's): float32 [1] labels, 0.0 or 1.0; "detection":
        `(images, {"boxes": float32 [B, N, 4], "classes": int32 [B, N]})`, every object of
        each image, padded with -1 to the batch's largest object count (or to `max_boxes`),
        the boxes following the training crop (clipped; those that fall out are dropped) and
        flip; or None: images alone (the one mode for an unlabelled split such as `test`).
      background: whether one-hot labels have the background class's column (label
        `num_classes`, images without objects): None (auto) when any split of the build has
        an image labelled background (`BuildInfo.has_background`), so a build of class
        folders has `num_classes` columns, as Keras's `image_dataset_from_directory`; True
        always (`num_classes + 1` columns, for a model with an output for background); False
        never, refused for a split that has background images (`label_names`). "int" labels
        keep their values (background is `num_classes`); detection and None ignore it.
      bounding_box_format: detection's boxes, in KerasHub's names: "rel_yxyx" (fractions of
        the output image, [ymin, xmin, ymax, xmax]), "yxyx" (its pixels), "rel_xyxy", "xyxy".
      max_boxes: detection pads (and cuts: the first `max_boxes` objects in annotation order
        are kept) every image's objects to this fixed count; None pads to the batch's largest.
      difficult: detection's objects whose XML flags them `<difficult>1</difficult>` (Pascal
        VOC's, left out of its evaluation): "keep" them as any other; "drop" them (as the OD
        API's `ignore_difficult_instances`: the training crop then ignores them too); or
        "flag" them: the targets gain "difficult", int32 [B, N], 1 or 0 (-1 in padding).
      dtype: "float32" (images in `config.value_range`) or "uint8" (pixels: a quarter of the
        bytes to the accelerator and no float conversion on the host; put
        `loaders.normalization_layer(config)` first in the model); a TensorFlow dtype is kept
        as its name.
      with_filenames: each element also carries the images' file names in the source tree
        (`tf.string [B]`, last): `(images, labels, filenames)`, or `(images, filenames)` with
        `label_mode=None`; detection puts them in its dict as "filename". For evaluation and
        error analysis: `fit` would read a third element as sample weights.
      config: the loader's knobs (`loaders.ReadConfig`).
    """

    batch_size: int
    image_size: tuple[int, int] = (224, 224)
    training: bool = False
    seed: int | None = None
    label_mode: str | None = "one_hot"
    background: bool | None = None
    bounding_box_format: str = "rel_yxyx"
    max_boxes: int | None = None
    difficult: str = "keep"
    dtype: str = "float32"
    with_filenames: bool = False
    config: ReadConfig = ReadConfig()

    @classmethod
    def checked(cls, **arguments: Any) -> LoadSpec:
        """The spec of these arguments (named as the fields; one left out takes the field's
        default), checked in a fixed order: `training`, `with_filenames`, `seed`, `config`,
        `background`, `batch_size`, `image_size`, `label_mode`, `bounding_box_format`,
        `max_boxes`, `difficult`, `dtype`.
        """
        given = cls(**arguments)
        given._check_types()
        given._check_values()
        return dataclasses.replace(
            given,
            batch_size=int(given.batch_size),
            image_size=checked_image_size(given.image_size),
            label_mode="one_hot" if given.label_mode == "categorical" else given.label_mode,
            dtype=output_dtype(given.dtype),
        )

    def _check_types(self) -> None:
        for name in ("training", "with_filenames"):
            if not isinstance(getattr(self, name), bool):
                raise TypeError(f"{name} must be True or False, not {getattr(self, name)!r}")
        if self.seed is not None and not is_int(self.seed):
            raise TypeError(f"seed must be an int or None, not {self.seed!r}")
        if self.seed is not None and not 0 <= self.seed < SEEDS:
            raise ValueError(
                f"seed must be in [0, 2**31 - 1) or None, not {self.seed}: TensorFlow takes a "
                "seed modulo 2**31 - 1 (1 and 2**31 drew alike, as did -1 and 2**31 - 2)"
            )
        if not isinstance(self.config, ReadConfig):
            raise TypeError(
                "config must be a loaders.ReadConfig (ReadConfig(shuffle_buffer=...)), "
                f"not {self.config!r}"
            )
        if self.background is not None and not isinstance(self.background, bool):
            raise TypeError(f"background must be None, True or False, not {self.background!r}")
        if self.batch_size is None:
            raise TypeError(
                "batch_size must be an int, not None: the loader yields batches (for single "
                "images, Keras's and TFDS's batch_size=None, call .unbatch() on the dataset)"
            )
        if not is_int(self.batch_size):
            raise TypeError(f"batch_size must be an int, not {self.batch_size!r}")

    def _check_values(self) -> None:
        if self.batch_size == -1:  # TFDS's whole split as one batch
            raise ValueError(
                "batch_size must be at least 1, not -1 (TFDS's whole split in one batch): pass "
                "the split's size, dataset_info(data_dir).num_examples(split)"
            )
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, not {self.batch_size}")
        checked_image_size(self.image_size)
        if self.label_mode not in LABEL_MODES:
            raise ValueError(f"label_mode must be one of {LABEL_MODES}, not {self.label_mode!r}")
        box_format, max_boxes = self.bounding_box_format, self.max_boxes
        if box_format not in BOX_FORMATS:
            raise ValueError(
                f"bounding_box_format must be one of {BOX_FORMATS}, not {box_format!r}"
            )
        if max_boxes is not None and not is_int(max_boxes):
            raise TypeError(f"max_boxes must be an int or None, not {max_boxes!r}")
        if max_boxes is not None and max_boxes < 1:
            raise ValueError(f"max_boxes must be at least 1, not {max_boxes}")
        if self.label_mode != "detection" and (box_format != "rel_yxyx" or max_boxes is not None):
            raise ValueError(
                "bounding_box_format and max_boxes shape detection's boxes: they need "
                f'label_mode="detection", not {self.label_mode!r}'
            )
        if self.difficult not in DIFFICULT_MODES:
            raise ValueError(f"difficult must be one of {DIFFICULT_MODES}, not {self.difficult!r}")
        if self.label_mode != "detection" and self.difficult != "keep":
            raise ValueError(
                f"difficult={self.difficult!r} picks detection's objects: it needs "
                f'label_mode="detection", not {self.label_mode!r} (a classification label is '
                "the largest object's, difficult or not)"
            )

        self._refuse_batches_past_memory()

    def _refuse_batches_past_memory(self) -> None:
        """ValueError for a batch larger than this machine's memory (image_size=100000 ran the
        process out of memory, killed with no word of why)."""
        height, width = checked_image_size(self.image_size)
        dtype = output_dtype(self.dtype)
        needed = self.batch_size * height * width * 3 * (4 if dtype == "float32" else 1)
        memory = physical_memory()
        if memory and needed > memory:
            needs, has = _gibs(needed, memory)
            raise ValueError(
                f"a batch of {self.batch_size} images of {height}x{width} {dtype} needs "
                f"{needs}, more than this machine's {has} of memory: lower image_size or "
                "batch_size"
            )

    def refuse_unlabelled(self, info: BuildInfo, split: str) -> None:
        """ValueError when a labelled `label_mode` asks for an unlabelled split (label -1)."""
        if self.label_mode is not None and not info.split(split).labelled:
            raise ValueError(
                f"split {split!r} of {info.data_dir} is unlabelled (its tree has no annotations "
                f"and no class folders; every record has label -1): label_mode={self.label_mode!r} "
                "needs labels; label_mode=None loads its images"
            )

    def label_names(self, info: BuildInfo, split: str) -> list[str]:
        """The names of the labels loaded from `split` of `info`, one per one-hot column
        (`BuildInfo.label_names(background)`), as the dataset's `class_names`.

        Raises:
          ValueError: `background=False` with one-hot or int labels, on a split that has
            images labelled background: they have no column (tf.one_hot would make them
            all-zero rows, silently; an int label `num_classes` is past a model's outputs).
        """
        count, index = info.background_count(split), info.background_index
        if self.background is False and self.label_mode in CLASS_LABELS and count:
            lost = (
                "their one-hot labels would be all zeros"
                if self.label_mode == "one_hot"
                else f"their label {index} would be past the last of {info.num_classes} classes"
            )
            raise ValueError(
                f"background=False, but split {split!r} of {info.data_dir} has {count} images "
                f"labelled background (label {index}, images without objects): {lost}. Load it "
                f"with background=None (the default) or True: {info.num_classes + 1} columns, the "
                'last "background", for a model with an output for it'
            )
        names = info.label_names(self.background)
        if self.label_mode == "binary" and len(names) != 2:
            raise ValueError(
                f'label_mode="binary" takes a build of two labels (0.0 and 1.0, as Keras\'s), '
                f"and {info.data_dir} has {len(names)} ({', '.join(names[:4])}"
                f'{", ..." if len(names) > 4 else ""}): load it with label_mode="int" or '
                '"one_hot"'
            )
        return names

    def refuse_unseeded_workers(self, loader: str) -> None:
        """ValueError for training without a seed on one of several workers (TF_CONFIG) and
        no input_context: tf.distribute shards such a dataset by data (`dataset._counted`),
        each worker keeping every n-th batch of its own order, and workers that shuffle each
        their own way read overlapping images and miss others (2 workers, 21 images: 7 read
        twice, 8 never)."""
        try:
            cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster") or {}
            workers = len(cluster.get("chief") or ()) + len(cluster.get("worker") or ())
        except (ValueError, AttributeError, TypeError):
            return  # tf.distribute's own error names a malformed TF_CONFIG
        if self.training and self.seed is None and workers > 1:
            raise ValueError(
                f"{loader}(training=True) without a seed on one of {workers} workers "
                "(TF_CONFIG) and no input_context: tf.distribute shards the dataset by data, "
                f"each worker keeping one batch in {workers} of its own shuffle, so the workers "
                "would read overlapping images and miss others. Pass the same seed on every "
                "worker (seed=0, and the same tf.random.set_seed or none), or build it in "
                "distribute_datasets_from_function with its input_context (each worker then "
                "reads shards of its own)"
            )

    def caches(self, num_examples: int, num_bytes: int, service: str | None) -> bool:
        """Whether the examples step keeps an epoch of `num_examples` records (`num_bytes` on
        disk) in memory (`ReadConfig.cache`): training the records, evaluation the decoded
        images. ValueError for cache=True past this machine's memory or with a tf.data
        service (its workers decode, anew each epoch)."""
        choice = self.config.cache
        if choice is False or (choice is None and service is not None):
            return False
        if service is not None:
            raise ValueError(
                "ReadConfig(cache=True) keeps decoded images in this process, but with service "
                "the tf.data service's workers read and decode: leave cache at None (or False)"
            )
        needed, pixel = num_bytes, 1
        if not self.training:
            height, width = checked_image_size(self.image_size)
            pixel = 4 if output_dtype(self.dtype) == "float32" else 1
            needed = num_examples * height * width * 3 * pixel
        if choice is None:
            return needed <= AUTO_CACHE_BYTES
        memory = physical_memory()
        if memory and needed > memory:
            kept = "records" if self.training else f"{num_examples} decoded images"
            needs, has = _gibs(needed, memory)
            raise ValueError(
                f"ReadConfig(cache=True): the {kept} take {needs}, more than this "
                f"machine's {has} of memory: cache=None (or False) reads them each "
                "epoch" + ("" if self.training or pixel == 1 else '; dtype="uint8" takes a quarter')
            )
        return True

    def refuse_empty_epoch(self, split: str, num_examples: int) -> None:
        """ValueError when training would have no batch: fewer examples than one batch."""
        if self.training and num_examples < self.batch_size:
            raise ValueError(
                f"batch_size={self.batch_size} is larger than split {split!r} "
                f"({num_examples} examples per input pipeline): training drops the last "
                "partial batch, so an epoch would have no batch at all; lower batch_size"
            )


# A container's memory limit: cgroup v2's ("max": none), then v1's (a huge number: none).
CGROUP_MEMORY_LIMITS = ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes")


def physical_memory() -> int | None:
    """The memory this process may use, in bytes: the machine's, or a container's (cgroup)
    limit where lower; None where the system does not say."""
    try:
        page, pages = os.sysconf("SC_PAGE_SIZE"), os.sysconf("SC_PHYS_PAGES")
        found = [page * pages] if page > 0 and pages > 0 else []  # (-1: not known)
    except (AttributeError, OSError, ValueError):
        found = []
    for limit in CGROUP_MEMORY_LIMITS:
        try:
            with open(limit) as text:
                found.append(int(text.read().strip()))  # ("max": no limit, a ValueError)
        except (OSError, ValueError):
            pass
    found = [value for value in found if value > 0]
    return min(found) if found else None


def _gib(size: int) -> str:
    return f"{size / 2**30:,.0f} GiB" if size >= 10 * 2**30 else f"{size / 2**30:.2g} GiB"


def _gibs(needed: int, memory: int) -> tuple[str, str]:
    """`needed` and `memory` as `_gib`s, with decimals until they differ (a batch just past
    the memory read "needs 16 GiB, more than this machine's 16 GiB"); else in bytes."""
    texts = _gib(needed), _gib(memory)
    for digits in range(1, 4):
        if texts[0] != texts[1]:
            return texts
        texts = f"{needed / 2**30:,.{digits}f} GiB", f"{memory / 2**30:,.{digits}f} GiB"
    return texts if texts[0] != texts[1] else (f"{needed:,} bytes", f"{memory:,} bytes")
