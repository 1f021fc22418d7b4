"""The loader training code imports: a committed build as a fast `tf.data` input pipeline.

from loaders import load_dataset, dataset_info
info = dataset_info("out/")
train = load_dataset("out/", "train", batch_size=64, training=True, seed=0)
val = load_dataset("out/", "validation", batch_size=64)
model.fit(train, validation_data=val, epochs=10, class_weight=info.class_weight())
"""

try:
    import tensorflow  # noqa: F401 - every loader needs it; not a dependency of the builder
except ModuleNotFoundError as error:
    if error.name != "tensorflow":
        raise
    raise ModuleNotFoundError(
        "the loader needs TensorFlow, which the builder does not install: "
        "pip install 'imagenet-tfrecords[loader]'",
        name="tensorflow",
    ) from None

from loaders.config import ReadConfig
from loaders.dataset import load_dataset
from loaders.info import (
    BuildInfo,
    CorruptDatasetError,
    IncompleteDatasetError,
    UnknownSplitError,
    dataset_info,
    renamed,
)
from loaders.preprocessing import normalization_layer, preprocess_for_eval, preprocess_for_train

__all__ = [
    "BuildInfo",
    "CorruptDatasetError",
    "IncompleteDatasetError",
    "ReadConfig",
    "UnknownSplitError",
    "dataset_info",
    "load_dataset",
    "normalization_layer",
    "preprocess_for_eval",
    "preprocess_for_train",
]


def __getattr__(name: str):
    """PEP 562: `load_dali_dataset` imports NVIDIA DALI only when asked for (`pip install
    ".[gpu]"`); the old name `Dataset` still works for one release, with a warning."""
    if name == "load_dali_dataset":
        from loaders.dali import load_dali_dataset

        return load_dali_dataset
    return renamed(__name__, name)
