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
    BUILD_INFO_FILE,
    DEAD_LETTER_FILE,
    DUPLICATES_FILE,
    LABELS_FILE,
    LEGACY_INFO_FILE,
    ODD_IMAGES_FILE,
    SHARD_SUFFIX,
    DamagedBuildError,
    DatasetInfo,
    NoBuildError,
    ShardInfo,
    SplitInfo,
    is_shard_filename,
    read_build_info,
    shard_filename,
)

__all__ = [
    "BACKGROUND",
    "BUILD_INFO_FILE",
    "DEAD_LETTER_FILE",
    "DUPLICATES_FILE",
    "FEATURES",
    "LABELS_FILE",
    "LABEL_SOURCES",
    "LEGACY_INFO_FILE",
    "ODD_IMAGES_FILE",
    "SCHEMA_VERSION",
    "SHARD_SUFFIX",
    "UNLABELLED",
    "ClassList",
    "DamagedBuildError",
    "DatasetInfo",
    "Feature",
    "NoBuildError",
    "ShardInfo",
    "SplitInfo",
    "is_shard_filename",
    "one_hot_length",
    "read_build_info",
    "shard_filename",
    "tf_feature_spec",
]
