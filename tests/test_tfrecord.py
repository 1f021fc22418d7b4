import io

import pytest
from helpers import CORPUS

from schemas.tfrecord import CorruptRecordError, encode_record, read_records


def test_reads_a_third_party_tfrecord_file():
    data = (CORPUS / "tfrecord/morris_sequence_first_5.tfrecord").read_bytes()
    assert list(read_records(io.BytesIO(data))) == [
        b"1",
        b"1 1",
        b"2 1",
        b"1 2 1 1",
        b"1 1 1 2 2 1",
    ]


def test_round_trip_is_byte_identical_to_the_reference_file():
    data = (CORPUS / "tfrecord/morris_sequence_first_5.tfrecord").read_bytes()
    records = list(read_records(io.BytesIO(data)))
    assert b"".join(encode_record(r) for r in records) == data


def test_tensorflow_reads_our_records(tmp_path):
    tf = pytest.importorskip("tensorflow")
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(encode_record(bytes([i]) * i) for i in range(50)))
    read = [r.numpy() for r in tf.data.TFRecordDataset(str(path))]
    assert read == [bytes([i]) * i for i in range(50)]


@pytest.mark.parametrize(
    "damage, problem",
    [
        (lambda d: d[:-3], "truncated record data"),
        (lambda d: d[:5], "truncated length header"),
        (lambda d: d[:20] + bytes([d[20] ^ 1]) + d[21:], "data checksum mismatch"),
        (
            lambda d: bytes([d[0] ^ 1]) + d[1:],
            "length checksum mismatch at the file's start (is it a TFRecord file?)",
        ),
        (lambda d: d[:28] + bytes([d[28] ^ 1]) + d[29:], "length checksum mismatch"),
    ],
)
def test_damage_is_reported_with_record_index(damage, problem):
    data = encode_record(b"first record") + encode_record(b"second")
    with pytest.raises(CorruptRecordError) as error:
        list(read_records(io.BytesIO(damage(data))))
    assert error.value.problem == problem
