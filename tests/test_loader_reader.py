"""The loader's two steps on their own: `loaders.reader.read_records` and `batch_examples`."""

import collections
import shutil

import pytest
from helpers import build_sample

tf = pytest.importorskip("tensorflow")

from loaders import dataset_info, load_dataset  # noqa: E402
from loaders.dataset import batch_examples  # noqa: E402
from loaders.reader import checked_record, read_records, read_shard, record_source  # noqa: E402
from loaders.spec import LoadSpec  # noqa: E402
from schemas import tfrecord  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return str(build_sample(tmp_path_factory, 30, 10, seed=2, num_shards="train=3,val=2"))


def raw_records(info, split):
    return [r.numpy() for r in tf.data.TFRecordDataset(info.shard_paths(split))]


@pytest.mark.parametrize(
    "split, pipelines", [("train", 1), ("train", 2), ("train", 3), ("validation", 3)]
)
def test_each_pipeline_reads_its_count_and_together_every_record_once(built, split, pipelines):
    # train: 3 files (sharded by file); validation: 2 files over 3 pipelines (by record).
    info = dataset_info(built)
    seen = []
    for index in range(pipelines):
        context = tf.distribute.InputContext(pipelines, index, 1)
        part = read_records(info, split, input_context=context)
        records = [r.numpy() for r, _ in part.records]
        assert len(records) == part.num_examples
        seen += records
    assert collections.Counter(seen) == collections.Counter(raw_records(info, split))


def test_training_shuffles_files_every_epoch_and_a_seed_repeats_the_order(built):
    info = dataset_info(built)

    def epochs(seed):
        records = read_records(info, "train", training=True, seed=seed).records
        return [[r.numpy() for r, _ in records] for _ in range(4)]

    first = epochs(5)
    assert first == epochs(5)
    assert any(epoch != first[0] for epoch in first[1:])
    assert all(sorted(epoch) == sorted(raw_records(info, "train")) for epoch in first)


def test_a_short_shard_is_padded_with_stand_ins_that_checked_record_refuses(built):
    info = dataset_info(built)
    path = info.shard_paths("validation")[0]
    stored = info.split("validation").shards[0].num_examples
    records = list(read_shard(tf.constant(path), tf.constant(stored + 2, tf.int64)))
    assert len(records) == stored + 2
    for record, note in records[:stored]:
        assert checked_record(record, note).numpy() == record.numpy()
    expected = f"Fewer than the {stored + 2} records that build_info.json counts"
    with pytest.raises(tf.errors.InvalidArgumentError, match=expected):
        checked_record(*records[stored])
    # A record written over, its checksums recomputed: the parse's error held its bytes, and
    # the loader raised UnicodeDecodeError (a damaged-output trial).
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        checked_record(tf.constant(b"\xf5\xff not an Example"), records[0][1])
    said = str(error.value)  # (eager: the Assert's data one to a line, unbracketed)
    assert f"b'shard {path}'" in said and "holds a record that is not a tf.train.Example" in said
    # The shard's name, which the parser's errors give for a record whose content it refuses.
    assert record_source(records[0][1]).numpy().tolist() == [f"shard {path}".encode()]


NOT_AN_EXAMPLE = (
    "[shard {}] [holds a record that is not a tf.train.Example, its checksums intact (written "
    "over after the build?): python -m beam_pipeline verify on its build names the record]"
)


def test_a_record_written_over_is_refused_naming_its_shard(built, tmp_path):
    # Valid framing and checksums, other bytes: the loader's error said "a record of the
    # build", not which of its shards (verify names both).
    out = tmp_path / "out"
    shutil.copytree(built, out)
    info = dataset_info(out)
    path = info.shard_paths("validation")[1]
    with open(path, "rb") as stream:
        records = list(tfrecord.read_records(stream))
    records[1] = b"\xff" * len(records[1])  # (the same size: the shard's size still checks)
    with open(path, "wb") as stream:
        stream.write(b"".join(map(tfrecord.encode_record, records)))
    for training in (False, True):
        batches = load_dataset(
            str(out), "validation", batch_size=2, image_size=64, training=training, seed=0
        )
        with pytest.raises(tf.errors.InvalidArgumentError) as error:
            list(batches)
        assert NOT_AN_EXAMPLE.format(path) in str(error.value)


def test_a_shard_deleted_after_its_dataset_was_made_fails_when_opened(built, tmp_path):
    # The check that the shard is there ran when its dataset was made (the interleave makes
    # them ahead of opening them): a shard deleted in between (a rebuild's commit, an rm) left
    # the reader retrying the open forever at full CPU, no error. It runs as the shard opens.
    import shutil
    import threading

    info = dataset_info(built)
    path = str(tmp_path / "shard.tfrecord")
    shutil.copy(info.shard_paths("validation")[0], path)
    records = read_shard(tf.constant(path), tf.constant(1, tf.int64))
    (tmp_path / "shard.tfrecord").unlink()
    failures: list[BaseException] = []

    def read():
        try:
            list(records)
        except tf.errors.InvalidArgumentError as error:
            failures.append(error)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    assert not reader.is_alive(), "the reader still runs: it retries the deleted shard"
    assert len(failures) == 1 and f"shard {path} is missing" in str(failures[0])


def test_batch_examples_counts_batches_from_the_reader(built):
    info = dataset_info(built)
    records = read_records(info, "validation")
    spec = LoadSpec(batch_size=4, image_size=(16, 16))
    batches = batch_examples(records, info.num_classes, spec, num_labels=5)
    assert batches.cardinality().numpy() == 3  # 10 → 4 + 4 + 2
    assert [x.shape[0] for x, _ in batches] == [4, 4, 2]
    assert batches.element_spec[1] == tf.TensorSpec((None, 5), tf.float32)  # num_labels wide
    # The step's arguments come checked, as one spec: a bad one is refused when it is made.
    with pytest.raises(ValueError, match="label_mode"):
        LoadSpec.checked(batch_size=4, label_mode="sparse")
    with pytest.raises(ValueError, match="batch_size"):
        LoadSpec.checked(batch_size=0)
