"""The one contract between the builder (`beam_pipeline`) and the reader (`loaders`)."""

from schemas.classes import (
    BACKGROUND,
    LABEL_SOURCES,
    UNLABELLED,
    ClassList,
    one_hot_length,
)
from schemas.features import FEATURES, SCHEMA_VERSION, Feature, tf_feature_spec
from schemas.metadata import (
    DATASET_INFO_FILE,
    DEAD_LETTER_FILE,
    LABELS_FILE,
    SHARD_SUFFIX,
    DatasetInfo,
    ShardInfo,
    SplitInfo,
    is_shard_filename,
    shard_filename,
)

__all__ = [
    "BACKGROUND",
    "DATASET_INFO_FILE",
    "DEAD_LETTER_FILE",
    "FEATURES",
    "LABELS_FILE",
    "LABEL_SOURCES",
    "SCHEMA_VERSION",
    "SHARD_SUFFIX",
    "UNLABELLED",
    "ClassList",
    "DatasetInfo",
    "Feature",
    "ShardInfo",
    "SplitInfo",
    "is_shard_filename",
    "one_hot_length",
    "shard_filename",
    "tf_feature_spec",
]
