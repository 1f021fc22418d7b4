"""TensorFlow Datasets' metadata for a build, so `tfds.builder_from_directory(OUT)` reads it.

TFDS reads a directory of TFRecord shards when three kinds of file lie beside them, in the JSON
forms of TFDS's own protos (`dataset_info.proto`, `feature.proto`):

    dataset_info.json             name, version, file format, splits with their shard lengths
    features.json                 how to decode each record key (Image, ClassLabel, Tensor, ...)
    <key with dots>.labels.txt    the names of each ClassLabel, one per line

The features are the record contract (`schemas.features.FEATURES`) one to one and under the
same keys, so TFDS decodes `image/encoded` into uint8 pixels, `image/class/label` into a
`ClassLabel` that knows the class names (the background class last), and the per-object lists
into 1-D tensors; the shards are not touched. The shard names already follow TFDS's template
`{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}`. `as_supervised=True` yields (decoded image, label).

Pure Python: the builder writes these files without TFDS installed; the tests read them with
the real `tensorflow-datasets` package.
"""

from __future__ import annotations

import json
import re
from typing import Any

from schemas import features as F
from schemas.metadata import DatasetInfo

TFDS_INFO_FILE = "dataset_info.json"
TFDS_FEATURES_FILE = "features.json"
FILE_TEMPLATE = "{SPLIT}-{SHARD_X_OF_Y}.{FILEFORMAT}"
DEFAULT_NAME = "imagenet_tfrecords"

_CLASS = "tensorflow_datasets.core.features."
_DTYPES = {"int64": "int64", "float": "float32"}
# Keys whose int64 values are class indices, decoded by TFDS as ClassLabel (with names).
_CLASS_LABEL_KEYS = (F.LABEL, F.OBJECT_LABEL)


def labels_filename(key: str) -> str:
    """The file TFDS reads a ClassLabel's names from: `image.class.label.labels.txt`."""
    return key.replace("/", ".") + ".labels.txt"


TFDS_FILES = (
    TFDS_INFO_FILE,
    TFDS_FEATURES_FILE,
    *(labels_filename(key) for key in _CLASS_LABEL_KEYS),
)


def tfds_name(info: DatasetInfo) -> str:
    """The dataset's TFDS name: its tree's layout (`ilsvrc_det`, `ilsvrc_cls_loc`, `voc`).

    Not the output directory's name, so that a build's files do not depend on where it was
    written (and `tfds.load(NAME, data_dir=...)` finds a build by its directory, whatever this).
    """
    name = re.sub(r"[^a-z0-9]+", "_", str(info.source.get("layout", "")).lower()).strip("_")
    return name if name[:1].isalpha() else DEFAULT_NAME


def tfds_files(info: DatasetInfo) -> dict[str, str]:
    """{file name: text} of the TFDS metadata of the build `info` describes.

    Only the record keys of the build's schema version are described (builds before 1.2 have
    no `image/key/sha256`).
    """
    names = "".join(name + "\n" for name in info.class_list.names)
    files = {
        TFDS_INFO_FILE: _json(_dataset_info(info)),
        TFDS_FEATURES_FILE: _json(_features(info)),
    }
    for key in _CLASS_LABEL_KEYS:
        files[labels_filename(key)] = names
    return files


def _dataset_info(info: DatasetInfo) -> dict[str, Any]:
    source = info.source.get("input_dir", "an image tree")
    return {
        "name": tfds_name(info),
        "description": (
            f"Built by imagenet-tfrecords from {source} (layout "
            f"{info.source.get('layout', 'unknown')}); the build's own metadata (rejections, "
            "class counts, options) is in build_info.json."
        ),
        "version": info.schema_version,
        "fileFormat": "tfrecord",
        "splits": [
            {
                "name": split_name,
                "filepathTemplate": FILE_TEMPLATE,
                "numBytes": str(sum(shard.num_bytes for shard in split.shards)),
                "shardLengths": [str(shard.num_examples) for shard in split.shards],
            }
            for split_name, split in sorted(info.splits.items())
        ],
        "supervisedKeys": {
            "tuple": {"items": [{"featureKey": F.ENCODED}, {"featureKey": F.LABEL}]}
        },
    }


def _features(info: DatasetInfo) -> dict[str, Any]:
    num_labels = info.class_list.one_hot_length
    features = {
        feature.key: _feature(feature, num_labels)
        for feature in F.FEATURES
        if feature.in_schema(info.schema_version)
    }
    return _feature_json("features_dict.FeaturesDict", "featuresDict", {"features": features})


def _feature(feature: F.Feature, num_labels: int) -> dict[str, Any]:
    """One record key as a TFDS feature."""
    if feature.key == F.ENCODED:
        return _feature_json(
            "image_feature.Image",
            "image",
            {
                "shape": _shape([-1, -1, F.IMAGE_CHANNELS]),
                "dtype": "uint8",
                "encodingFormat": F.IMAGE_FORMAT,
            },
        )
    if feature.key in _CLASS_LABEL_KEYS:
        label = _feature_json(
            "class_label_feature.ClassLabel", "classLabel", {"numClasses": str(num_labels)}
        )
        return label if feature.length == 1 else _sequence(label)
    if feature.dtype == "bytes":
        text = _feature_json("text_feature.Text", "text", {})
        return text if feature.length == 1 else _sequence(text)
    tensor = {"dtype": _DTYPES[feature.dtype], "encoding": "none"}
    if feature.length == 1:
        return _feature_json("scalar.Scalar", "tensor", {"shape": {}, **tensor})
    length = feature.num_values(num_labels - 1)
    shape = _shape([-1 if length is None else length])
    return _feature_json("tensor_feature.Tensor", "tensor", {"shape": shape, **tensor})


def _feature_json(python_class: str, field: str, value: dict[str, Any]) -> dict[str, Any]:
    return {"pythonClassName": _CLASS + python_class, field: value}


def _sequence(feature: dict[str, Any]) -> dict[str, Any]:
    return _feature_json(
        "sequence_feature.Sequence", "sequence", {"feature": feature, "length": "-1"}
    )


def _shape(dimensions: list[int]) -> dict[str, Any]:
    return {"dimensions": [str(d) for d in dimensions]}


def _json(payload: dict[str, Any]) -> str:
    return json.dumps(payload, indent=2, sort_keys=True) + "\n"
