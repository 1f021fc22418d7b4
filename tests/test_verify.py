import io
import shutil
import struct

import pytest
from helpers import build, build_sample, jpeg_bytes

from beam_pipeline import sample_tree, verify
from beam_pipeline.tfrecord import encode_record, read_records
from schemas import BUILD_INFO_FILE, DatasetInfo
from schemas import features as F
from schemas.example_proto import Example


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    return build_sample(tmp_path_factory, 24, 8, seed=2, num_shards="train=3,val=1")


@pytest.fixture
def copy(built, tmp_path):
    target = tmp_path / "copy"
    shutil.copytree(built, target)
    return target


def shard_of(out, index=1):
    info = DatasetInfo.from_json((out / BUILD_INFO_FILE).read_text())
    return out / info.splits["train"].shards[index].file


def record_offsets(data: bytes) -> list[int]:
    offsets, offset = [], 0
    while offset < len(data):
        offsets.append(offset)
        (length,) = struct.unpack("<Q", data[offset : offset + 8])
        offset += 12 + length + 4
    return offsets


def run(out, capsys, *flags):
    code = verify.main([str(out), "--workers", "1", *flags])
    return code, capsys.readouterr().out


def test_a_clean_build_verifies(built, capsys):
    code, output = run(built, capsys)
    assert code == 0 and output.strip() == "OK: 4 shards verified"
    assert verify.main([str(built), "--workers", "2"]) == 0


def test_flipped_byte_is_located(copy, capsys):
    shard = shard_of(copy)
    data = bytearray(shard.read_bytes())
    start = record_offsets(bytes(data))[3]
    data[start + 12 + 50] ^= 0x01  # inside record 3's data
    shard.write_bytes(bytes(data))
    code, output = run(copy, capsys)
    assert code == 1
    assert f"FAIL {shard.name} record 3: data checksum mismatch (byte {start})" in output
    assert "1 of 4 shards have problems" in output


def test_flipped_length_is_located(copy, capsys):
    shard = shard_of(copy)
    data = bytearray(shard.read_bytes())
    start = record_offsets(bytes(data))[2]
    data[start + 1] ^= 0x40
    shard.write_bytes(bytes(data))
    assert f"{shard.name} record 2: length checksum mismatch" in run(copy, capsys)[1]


def test_truncated_shard_is_located(copy, capsys):
    shard = shard_of(copy)
    data = shard.read_bytes()
    start = record_offsets(data)[5]
    shard.write_bytes(data[: start + 40])
    code, output = run(copy, capsys)
    assert code == 1 and f"{shard.name} record 5: truncated record data" in output


def test_deleted_shard_is_reported(copy, capsys):
    shard = shard_of(copy, 0)
    shard.unlink()
    assert f"FAIL {shard.name}: missing" in run(copy, capsys)[1]


def test_valid_frame_with_a_broken_image_is_located(copy, capsys):
    shard = shard_of(copy)
    records = list(read_records(io.BytesIO(shard.read_bytes())))
    example = Example.FromString(records[4])
    encoded = example.features.feature[F.ENCODED].bytes_list
    encoded.value[0] = encoded.value[0][: len(encoded.value[0]) // 3]
    records[4] = example.SerializeToString(deterministic=True)
    shard.write_bytes(b"".join(encode_record(r) for r in records))
    code, output = run(copy, capsys)
    assert code == 1
    assert f"{shard.name} record 4: image does not decode" in output
    assert run(copy, capsys, "--no_decode")[1].strip().endswith("1 of 4 shards have problems")


def test_wrong_label_and_missing_record_are_reported(copy, capsys):
    shard = shard_of(copy)
    records = list(read_records(io.BytesIO(shard.read_bytes())))
    example = Example.FromString(records[0])
    label = example.features.feature[F.LABEL].int64_list.value
    label[0] = (label[0] + 1) % 5
    records[0] = example.SerializeToString(deterministic=True)
    shard.write_bytes(b"".join(encode_record(r) for r in records))
    assert f"{shard.name} record 0: one-hot does not encode label" in run(copy, capsys)[1]
    original = list(read_records(io.BytesIO(shard_of(copy, 0).read_bytes())))
    shard_of(copy, 0).write_bytes(b"".join(encode_record(r) for r in original[:-1]))
    output = run(copy, capsys)[1]
    assert (
        f"{shard_of(copy, 0).name}: {len(original) - 1} records, the build's metadata says"
        in output
    )


def test_checks_record_contents(capsys):
    from beam_pipeline.annotations import AnnotatedObject, Annotation, Box
    from beam_pipeline.entries import IndexEntry, LabelledEntry
    from beam_pipeline.examples import build_example
    from beam_pipeline.images import ImagePolicy, normalise_image
    from beam_pipeline.labels import Vocabulary

    vocabulary = Vocabulary(("cat",))
    image = normalise_image(jpeg_bytes(40, 20), ImagePolicy())
    entry = IndexEntry("train", "k", "k.JPEG", None, None, 1)
    cat = AnnotatedObject("cat", Box(0, 0, 10, 10), False, False)
    good = build_example(
        LabelledEntry(entry, Annotation(40, 20, (cat,)), 0, (0,), "xml"), image, vocabulary
    )
    assert verify.check_example(good, 1) is None
    assert verify.check_example(good, 2) == "image/class/one_hot has 2 values, expected 3"
    assert verify.check_example(b"\xff\xff", 1).startswith("not a tf.train.Example")
    example = Example.FromString(good)
    del example.features.feature[F.OBJECT_TEXT]
    assert (
        verify.check_example(example.SerializeToString(), 1) == f"missing feature {F.OBJECT_TEXT}"
    )


def test_directory_without_a_build(tmp_path, capsys):
    assert verify.main([str(tmp_path)]) == 2


def test_a_one_shard_build_says_one_shard(tmp_path, capsys):
    tree, out = tmp_path / "tree", tmp_path / "out"
    sample_tree.write_tree(str(tree), num_train=6, num_val=2, seed=3)
    build(tree, out, "--splits", "train", "--num_shards", "1")
    code, output = run(out, capsys)
    assert code == 0 and output.strip() == "OK: 1 shard verified"
