"""`ReadConfig.cache`: a split kept in memory from its first epoch (records when training,
decoded images for evaluation), on by default for small splits, never a replay of augmentation."""

import collections
import shutil
import warnings

import numpy as np
import pytest
from helpers import build_sample

tf = pytest.importorskip("tensorflow")

from loaders import ReadConfig, load_dataset  # noqa: E402
from loaders import spec as spec_module  # noqa: E402

SIZE = (32, 32)


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_sample(tmp_path_factory, 30, 10, seed=5, num_shards="train=3,val=2")


@pytest.fixture
def copy(built, tmp_path):
    """A copy of the build that a test may take the shards of."""
    return shutil.copytree(built, tmp_path / "out")


def epoch(dataset):
    """(images, labels, filenames) of one whole pass, in order."""
    images, labels, names = [], [], []
    for x, y, name in dataset:
        images.append(x.numpy())
        labels += np.argmax(y.numpy(), 1).tolist()
        names += name.numpy().tolist()
    return np.concatenate(images), labels, names


def remove_shards(out):
    for shard in out.glob("*.tfrecord"):
        shard.unlink()


@pytest.mark.parametrize("dtype", ["uint8", "float32"])
def test_evaluation_keeps_its_decoded_images_and_gives_the_same_values(copy, dtype):
    def load(cache):
        return load_dataset(
            str(copy), "validation", batch_size=4, image_size=SIZE, dtype=dtype,
            with_filenames=True, config=ReadConfig(cache=cache),
        )  # fmt: skip

    uncached, cached = load(False), load(None)  # None: small enough, cached
    first = epoch(uncached)
    assert len(first[1]) == 10
    assert epoch(cached)[1:] == first[1:]
    remove_shards(copy)
    again = epoch(cached)  # from memory: the shards are gone
    assert np.array_equal(again[0], first[0]) and again[1:] == first[1:]
    with pytest.raises(
        tf.errors.InvalidArgumentError, match=r"validation-00000-of-00002\.tfrecord is missing"
    ):
        epoch(uncached)


def test_training_keeps_the_records_and_draws_new_crops_each_epoch(copy):
    dataset = load_dataset(
        str(copy), "train", batch_size=5, image_size=SIZE, training=True, seed=3,
        with_filenames=True, config=ReadConfig(cache=True),
    )  # fmt: skip
    first = epoch(dataset)
    remove_shards(copy)
    second, third = epoch(dataset), epoch(dataset)
    for _, labels, names in (first, second, third):  # each record once an epoch
        assert len(names) == len(set(names)) == 30
        assert collections.Counter(zip(names, labels, strict=True)) == collections.Counter(
            zip(first[2], first[1], strict=True)
        )
    assert second[2] != first[2] and third[2] != second[2]  # reshuffled every epoch
    by_name = [dict(zip(names, images, strict=True)) for images, _, names in (first, second)]
    changed = sum(not np.array_equal(by_name[0][n], by_name[1][n]) for n in first[2])
    assert changed >= 25  # crops and flips drawn anew, not the first epoch's replayed


def test_a_split_past_the_automatic_bound_is_read_each_epoch(copy, monkeypatch):
    monkeypatch.setattr(spec_module, "AUTO_CACHE_BYTES", 10 * 32 * 32 * 3 - 1)  # one byte short
    dataset = load_dataset(
        str(copy), "validation", batch_size=4, image_size=SIZE, dtype="uint8",
        with_filenames=True,
    )  # fmt: skip
    assert len(epoch(dataset)[1]) == 10
    remove_shards(copy)
    with pytest.raises(tf.errors.InvalidArgumentError, match="is missing"):
        epoch(dataset)


def test_cache_refusals_name_the_fix(built, monkeypatch):
    with pytest.raises(
        TypeError, match=r"ReadConfig\.cache must be None, True or False, not 'yes'"
    ):
        ReadConfig(cache="yes")
    with pytest.raises(ValueError, match=r"with service the tf\.data service's workers"):
        load_dataset(
            str(built), "validation", batch_size=4, service="grpc://localhost:1",
            config=ReadConfig(cache=True),
        )  # fmt: skip
    monkeypatch.setattr(
        spec_module, "physical_memory", lambda: 4 << 20
    )  # a batch fits, not the cache
    with pytest.raises(ValueError) as refused:
        load_dataset(str(built), "validation", batch_size=4, config=ReadConfig(cache=True))
    assert str(refused.value) == (
        "ReadConfig(cache=True): the 10 decoded images take 0.0056 GiB, more than this "
        "machine's 0.0039 GiB of memory: cache=None (or False) reads them each epoch; "
        'dtype="uint8" takes a quarter'
    )


def test_a_cache_of_the_training_dataset_warns_that_it_replays_the_augmentation(built):
    training = load_dataset(str(built), "train", batch_size=5, training=True, seed=0)
    with pytest.warns(UserWarning, match="replays the first epoch's random crops and flips"):
        training.cache()
    # The warning holds no reference to its dataset: a dropped dataset (and its cache) goes
    # at once, not at the next cyclic collection (a trial's 73 MiB stayed until gc.collect()).
    import gc
    import weakref

    dropped = load_dataset(str(built), "train", batch_size=5, training=True, seed=0)
    held = weakref.ref(dropped)
    gc.disable()
    try:
        del dropped
        assert held() is None
    finally:
        gc.enable()
    evaluation = load_dataset(str(built), "validation", batch_size=5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        evaluation.cache()  # deterministic: a cache of it is right
