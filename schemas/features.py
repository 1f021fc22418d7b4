"""Feature keys, dtypes and shapes of one `tf.train.Example`: the record contract.

The builder writes exactly these keys and the loader parses exactly these keys; neither spells
a key anywhere else. Keys follow the TF Object Detection API / inception conventions so that
records are readable by tools that never heard of this project.

This module imports no TensorFlow at import time, so Beam workers and tests can use the plain
description; `tf_feature_spec` builds the `tf.io.parse_example` spec on demand.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from schemas.classes import one_hot_length

# 1.1: splits record their label sources and whether they are labelled; label -1 = unlabelled.
# 1.2: splits record objects per image and the stored image widths and heights; records carry
#      image/key/sha256 (the OD API's key); builds write label_map.pbtxt.
# 2.0: the build's metadata moves from dataset_info.json to build_info.json, and builds write
#      TFDS's metadata (dataset_info.json, features.json, *.labels.txt) beside the shards.
#      Records are unchanged; 1.x builds are still read (schemas.metadata.read_build_info).
# 2.1: records carry image/object/view, each object's VOC <pose> as written (the OD API's key;
#      empty for an object without one). Readers of 2.0 read 2.1 builds (they skip the key).
SCHEMA_VERSION = "2.1.0"

ENCODED = "image/encoded"
FORMAT = "image/format"
HEIGHT = "image/height"
WIDTH = "image/width"
CHANNELS = "image/channels"
FILENAME = "image/filename"
SOURCE_ID = "image/source_id"
KEY_SHA256 = "image/key/sha256"
LABEL = "image/class/label"
LABEL_TEXT = "image/class/text"
ONE_HOT = "image/class/one_hot"
BBOX_XMIN = "image/object/bbox/xmin"
BBOX_YMIN = "image/object/bbox/ymin"
BBOX_XMAX = "image/object/bbox/xmax"
BBOX_YMAX = "image/object/bbox/ymax"
# A box's keys in the order tf.image and DALI take a box: (ymin, xmin, ymax, xmax).
BOX_KEYS_YX = (BBOX_YMIN, BBOX_XMIN, BBOX_YMAX, BBOX_XMAX)
OBJECT_LABEL = "image/object/class/label"
OBJECT_TEXT = "image/object/class/text"
OBJECT_DIFFICULT = "image/object/difficult"
OBJECT_TRUNCATED = "image/object/truncated"
# The object's VOC <pose> (Frontal, Left, Rear, Right, Unspecified), as the OD API names it.
OBJECT_VIEW = "image/object/view"

IMAGE_FORMAT = "jpeg"
IMAGE_CHANNELS = 3

# float32's smallest normal number: TensorFlow's CPU kernels flush smaller ones to zero.
_FLOAT32_TINY = 1.1754943508222875e-38


def box_has_area(xmin: float, ymin: float, xmax: float, ymax: float) -> bool:
    """Whether a stored box (relative, float32) has an area as the loader reads it: each side
    longer than zero once values below float32's smallest normal are zero, as TensorFlow's
    kernels make them (a box 0 to 1e-45 high was dropped by the loader as one of no area). The
    build refuses boxes without (`annotation_degenerate_box`), `verify` names them."""

    def read(value: float) -> float:
        return value if abs(value) >= _FLOAT32_TINY else 0.0

    return read(xmax) > read(xmin) and read(ymax) > read(ymin)


@dataclasses.dataclass(frozen=True)
class Feature:
    """One feature of the record.

    Attributes:
      key: the feature key in the Example.
      dtype: "bytes", "int64" or "float" (the three `tf.train.Feature` kinds).
      length: fixed number of values; -1 for the number of classes + 1; None for a
        variable-length list (one value per object).
      since: the schema version that added the key (older builds' records lack it).
    """

    key: str
    dtype: str
    length: int | None
    since: str = "1.0.0"

    def in_schema(self, version: str) -> bool:
        """Whether records of a build of schema `version` carry this key."""
        return version_key(self.since) <= version_key(version)

    @property
    def proto_kind(self) -> str:
        """The `tf.train.Feature` field that holds the values: `bytes_list`, `int64_list`, ..."""
        return PROTO_KINDS[self.dtype]

    def num_values(self, num_classes: int) -> int | None:
        """The fixed number of values in a build of `num_classes` classes; None if variable."""
        return one_hot_length(num_classes) if self.length == ONE_HOT_LENGTH else self.length


ONE_HOT_LENGTH = -1
PROTO_KINDS = {"bytes": "bytes_list", "int64": "int64_list", "float": "float_list"}

FEATURES: tuple[Feature, ...] = (
    Feature(ENCODED, "bytes", 1),
    Feature(FORMAT, "bytes", 1),
    Feature(HEIGHT, "int64", 1),
    Feature(WIDTH, "int64", 1),
    Feature(CHANNELS, "int64", 1),
    Feature(FILENAME, "bytes", 1),
    Feature(SOURCE_ID, "bytes", 1),
    Feature(KEY_SHA256, "bytes", 1, since="1.2.0"),
    Feature(LABEL, "int64", 1),
    Feature(LABEL_TEXT, "bytes", 1),
    Feature(ONE_HOT, "int64", ONE_HOT_LENGTH),
    Feature(BBOX_XMIN, "float", None),
    Feature(BBOX_YMIN, "float", None),
    Feature(BBOX_XMAX, "float", None),
    Feature(BBOX_YMAX, "float", None),
    Feature(OBJECT_LABEL, "int64", None),
    Feature(OBJECT_TEXT, "bytes", None),
    Feature(OBJECT_DIFFICULT, "int64", None),
    Feature(OBJECT_TRUNCATED, "int64", None),
    Feature(OBJECT_VIEW, "bytes", None, since="2.1.0"),
)

FEATURES_BY_KEY = {feature.key: feature for feature in FEATURES}


def version_key(text: str) -> tuple[int, ...]:
    """A schema version as numbers to compare: (2, 1, 0) for "2.1.0"."""
    return tuple(int(part) for part in text.split("."))


def is_later_minor(version: str) -> bool:
    """Whether `version` is a later minor version of this code's major one (2.9.0 to 2.1.0):
    its builds read as this code reads them, without what it added (records' keys a reader
    does not parse, metadata fields it does not read). False for text that is no version."""
    ours = version_key(SCHEMA_VERSION)[:2]
    try:
        major_minor = version_key(version)[:2]
    except ValueError:
        return False
    return major_minor[0] == ours[0] and major_minor > ours


def records_schema(keys: Iterable[str]) -> str:
    """The schema of a record that carries `keys`: the latest that added one of them (keys
    this code does not know left out)."""
    known = (FEATURES_BY_KEY[key].since for key in keys if key in FEATURES_BY_KEY)
    return max(known, key=version_key, default="1.0.0")


def tf_feature_spec(num_classes: int, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Returns the `tf.io.parse_example` spec for the given keys (all keys by default).

    Args:
      num_classes: number of real classes (the one-hot label also has the background class).
      keys: the subset of keys to parse.
    """
    import tensorflow as tf

    dtypes = {"bytes": tf.string, "int64": tf.int64, "float": tf.float32}
    spec = {}
    for key in keys or tuple(FEATURES_BY_KEY):
        feature = FEATURES_BY_KEY[key]
        dtype = dtypes[feature.dtype]
        length = feature.num_values(num_classes)
        if length is None:
            spec[key] = tf.io.VarLenFeature(dtype)
        else:
            spec[key] = tf.io.FixedLenFeature([] if length == 1 else [length], dtype)
    return spec
