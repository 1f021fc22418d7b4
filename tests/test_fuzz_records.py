"""Property tests (Hypothesis) over the readers of records: a record of a committed build,
crafted (features deleted, of another kind, other values, another image, bytes flipped or cut),
read by `verify`, `inspect`, `show` and the loader, with the invariants of
`benchmarks.fuzz_records`. Every input a campaign found is kept in
tests/data/fuzz_cases/records/ and replayed here, through the commands themselves too.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil

import pytest
from helpers import Seed
from hypothesis import event, given
from hypothesis import strategies as st
from PIL import Image

from beam_pipeline.tools import inspect_record, show, verify
from benchmarks.fuzz_records import (
    FOUND_RECORDS,
    check_record_invariants,
    seed_build,
    seed_records,
)
from benchmarks.fuzz_targets import SEEDS
from schemas import BUILD_INFO_FILE
from schemas import features as F
from schemas.example_proto import Example
from schemas.tfrecord import encode_record, read_records

KINDS = ("bytes_list", "float_list", "int64_list")
VALUES = {
    "bytes_list": st.binary(max_size=12) | st.sampled_from([b"n01", b"background", b"\xff\xfe"]),
    "float_list": st.floats(width=32) | st.sampled_from([0.0, 1.0, -0.5, 1.5]),
    "int64_list": st.integers(-(2**63), 2**63 - 1) | st.integers(-2, 4),
}


@pytest.fixture(scope="module")
def seed(tmp_path_factory):
    out = seed_build(tmp_path_factory.mktemp("seed"))
    return Seed((out, seed_records(out)))


@st.composite
def crafted(draw, records: dict[str, list[bytes]]) -> tuple[str, bytes]:
    """(split, a record of it changed one to three times, then perhaps its bytes too).

    A change is blind (a feature deleted, of another kind, other values, another image) or
    keeps the record whole where it can (another image with its size and SHA-256, a box moved
    within the image, another class with its one-hot and text), so that the loader meets
    records `verify` accepts as well as ones it refuses.
    """
    split = draw(st.sampled_from(sorted(records)))
    example = Example.FromString(draw(st.sampled_from(records[split])))
    features = example.features.feature
    whole = draw(st.booleans())
    for _ in range(draw(st.integers(1, 3))):
        if whole:
            draw(st.sampled_from([_new_image, _moved_box, _relabelled]))(draw, features)
            continue
        key = draw(st.sampled_from([*sorted(features), "extra/key"]))
        change = draw(st.sampled_from(["delete", "kind", "values", "image"]))
        if change == "delete" and key in features:
            del features[key]
        elif change in ("kind", "values"):
            kind = features[key].WhichOneof("kind") if key in features else None
            if change == "kind" or kind is None:
                kind = draw(st.sampled_from(KINDS))
            features[key].Clear()
            getattr(features[key], kind).value.extend(draw(st.lists(VALUES[kind], max_size=3)))
        elif change == "image":
            _set(features, F.ENCODED, "bytes_list", [_seed_image(draw)])
    data = bytearray(example.SerializeToString())
    damage = draw(st.sampled_from(["none"] * 6 + ["flip", "cut"]))
    if damage == "flip" and data:
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    elif damage == "cut":
        del data[draw(st.integers(0, len(data))) :]
    return split, bytes(data)


def _set(features, key: str, kind: str, values: list) -> None:
    features[key].Clear()
    getattr(features[key], kind).value.extend(values)


def _seed_image(draw) -> bytes:
    """An image of `fuzz_targets.SEEDS` (JPEGs, and PNG, GIF, ...), perhaps a bit flipped."""
    data = bytearray(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    if draw(st.booleans()):
        data[draw(st.integers(0, len(data) - 1))] ^= 1 << draw(st.integers(0, 7))
    return bytes(data)


def _new_image(draw, features) -> None:
    """Another image, with its size (where Pillow reads one) and its SHA-256."""
    data = _seed_image(draw)
    _set(features, F.ENCODED, "bytes_list", [data])
    _set(features, F.KEY_SHA256, "bytes_list", [hashlib.sha256(data).hexdigest().encode()])
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
    except Exception:  # noqa: BLE001 - no size to give it: the old one stays
        return
    _set(features, F.WIDTH, "int64_list", [width])
    _set(features, F.HEIGHT, "int64_list", [height])


def _moved_box(draw, features) -> None:
    """An object's box put elsewhere inside the image (or its edges crossed)."""
    count = len(features[F.BBOX_XMIN].float_list.value) if F.BBOX_XMIN in features else 0
    if count == 0:
        return
    i = draw(st.integers(0, count - 1))
    corner = st.floats(0, 1, width=32)
    for low, high in ((F.BBOX_XMIN, F.BBOX_XMAX), (F.BBOX_YMIN, F.BBOX_YMAX)):
        a, b = sorted((draw(corner), draw(corner)))
        if draw(st.integers(0, 5)) == 0:
            a, b = b, a
        if len(features[low].float_list.value) > i and len(features[high].float_list.value) > i:
            features[low].float_list.value[i] = a
            features[high].float_list.value[i] = b


def _relabelled(draw, features) -> None:
    """Another class of the seed build's two (n01, n02; 2: background) with its one-hot and
    text, or an object's class changed likewise."""
    label = draw(st.integers(0, 2))
    if draw(st.booleans()):
        _set(features, F.LABEL, "int64_list", [label])
        _set(features, F.ONE_HOT, "int64_list", [int(label == i) for i in range(3)])
        _set(features, F.LABEL_TEXT, "bytes_list", [(b"n01", b"n02", b"background")[label]])
    elif F.OBJECT_LABEL in features and features[F.OBJECT_LABEL].int64_list.value:
        objects = features[F.OBJECT_LABEL].int64_list.value
        i = draw(st.integers(0, len(objects) - 1))
        objects[i] = min(label, 1)
        if len(features[F.OBJECT_TEXT].bytes_list.value) > i:
            features[F.OBJECT_TEXT].bytes_list.value[i] = (b"n01", b"n02")[min(label, 1)]


@given(data=st.data())
def test_every_reader_reads_a_crafted_record_or_says_what_is_wrong(seed, data):
    out, records = seed
    split, record = data.draw(crafted(records))
    event(check_record_invariants(record, out, split))


def test_every_seed_record_is_sound(seed):
    out, records = seed
    assert sorted((split, len(rs)) for split, rs in records.items()) == [
        ("train", 3),
        ("validation", 2),
    ]
    for split, rs in records.items():
        for record in rs:
            check_record_invariants(record, out, split)


def found_cases():
    return sorted(FOUND_RECORDS.glob("*.pb"))


def test_found_cases_are_kept_with_their_story():
    readme = (FOUND_RECORDS / "README.md").read_text()
    assert found_cases() and all(f"`{path.name}`" in readme for path in found_cases())


@pytest.mark.parametrize("path", found_cases(), ids=lambda path: path.stem)
def test_found_cases_hold_the_invariants_and_the_commands_name_them(seed, path, tmp_path, capsys):
    out, _ = seed
    split = path.name.split("--")[0]
    record = path.read_bytes()
    check_record_invariants(record, out, split)
    crafted_build = _with_record(out, tmp_path / "build", split, record)
    shard = crafted_build / f"{split}-00000-of-00001.tfrecord"
    assert verify.main([str(crafted_build)]) == 1
    said = capsys.readouterr()
    assert f"FAIL {shard.name} record 0: " in said.out
    assert inspect_record.main([str(shard), "--json"]) == 0
    described = json.loads(capsys.readouterr().out)
    assert described["problem"]
    assert (
        show.main([str(crafted_build), "--split", split, "--output", str(tmp_path / "s.png")]) == 0
    )
    assert "wrote" in capsys.readouterr().out


def _with_record(out, copy, split: str, record: bytes):
    """A copy of the build whose `split` has `record` first, its shard's size and SHA-256 in
    build_info.json made to match (as a hand edit would)."""
    shutil.copytree(out, copy)
    info = json.loads((copy / BUILD_INFO_FILE).read_text())
    entry = info["splits"][split]["shards"][0]
    with open(copy / entry["file"], "rb") as stream:
        records = list(read_records(stream))
    blob = b"".join(encode_record(r) for r in [record, *records[1:]])
    (copy / entry["file"]).write_bytes(blob)
    entry.update(num_bytes=len(blob), sha256=hashlib.sha256(blob).hexdigest())
    (copy / BUILD_INFO_FILE).write_text(json.dumps(info, indent=2))
    return copy


def test_the_loader_refuses_labels_past_int32_that_a_cast_would_wrap(seed):
    # A trial's: a label of 2**32 + 2 came out as 2, an object class of 2**32 + 3 as 3, while
    # verify named them (the parser cast to int32 before its range check).
    import tensorflow as tf

    from loaders.info import dataset_info
    from loaders.parser import RecordParser
    from loaders.spec import LoadSpec

    out, records = seed
    example = Example.FromString(records["train"][0])  # one object: class 1
    example.features.feature[F.LABEL].int64_list.value[0] = 2**32 + 1
    example.features.feature[F.OBJECT_LABEL].int64_list.value[0] = 2**32 + 1
    record = tf.constant(example.SerializeToString())
    info = dataset_info(str(out))
    for mode, said in (
        ("int", "is not one of the 3 labels loaded"),
        ("one_hot", "is not one of the 3 labels loaded"),
        ("detection", "are not one class a box, each one of the build's 2"),
    ):
        spec = LoadSpec.checked(batch_size=1, image_size=16, label_mode=mode)
        parser = RecordParser(info.num_classes, len(spec.label_names(info, "train")), spec)
        with pytest.raises(tf.errors.InvalidArgumentError, match=said):
            parser(record, tf.constant("a crafted record"))


def _cut_label(features) -> None:
    del features[F.LABEL]


def _label(value):
    return lambda features: _set(features, F.LABEL, "int64_list", [value])


NAMED_REFUSALS = {
    # (how the record is crafted, label_mode, training): what the error says after the shard.
    # Before, TensorFlow's own errors ("Unknown image file format", "Feature: ... is required
    # but could not be found", "All bounding box coordinates must be in [0.0, 1.0]") and the
    # label checks named no shard; `verify` had to be run to find the record.
    "not_a_jpeg": (
        lambda features: _set(features, F.ENCODED, "bytes_list", [b"GIF89a, not a JPEG"]),
        "int",
        False,
        "[{}] [holds a record whose image/encoded is not a JPEG (written over after the build?): "
        "python -m beam_pipeline verify on its build names it]",
    ),
    "label_past_the_columns": (
        _label(7),
        "one_hot",
        True,
        "[{}] [holds a record whose label] [7] [is not one of the 3 labels loaded: ",
    ),
    "label_missing": (
        _cut_label,
        "int",
        True,
        "Name: {}, Feature: image/class/label (data type: int64) is required but could not be "
        "found.",
    ),
    "label_of_bytes": (
        lambda features: _set(features, F.LABEL, "bytes_list", [b"n01"]),
        "int",
        False,
        "Name: {}, Key: image/class/label, Index: 0.  Data types don't match.",
    ),
    "object_class_past_the_build": (
        lambda features: _set(features, F.OBJECT_LABEL, "int64_list", [9, 1]),
        "detection",
        False,
        "[{}] [holds a record whose object classes] [9 1] [are not one class a box, ",
    ),
    "box_outside": (
        lambda features: _set(features, F.BBOX_XMAX, "float_list", [1.5, 0.5]),
        "int",
        True,
        "[{}] [holds a record whose main object has the box (ymin, xmin, ymax, xmax)] "
        "[[[0.075 0.0833333358 0.9 1.5]]] [is not inside [0, 1], which the training crop needs",
    ),
    "box_coordinates_of_unequal_counts": (
        lambda features: _set(features, F.BBOX_XMAX, "float_list", [0.9]),
        "detection",
        False,
        "[{}] [holds a record whose image/object/bbox/ymin, image/object/bbox/xmin, "
        "image/object/bbox/ymax, image/object/bbox/xmax, image/object/class/label hold] "
        "[2 2 2 1 2] [values, not one an object each",
    ),
    "object_classes_fewer_than_boxes": (  # (was read, no error: the crop masked the boxes with it)
        lambda features: _set(features, F.OBJECT_LABEL, "int64_list", [0]),
        "int",
        True,
        "[{}] [holds a record whose image/object/bbox/ymin, image/object/bbox/xmin, "
        "image/object/bbox/ymax, image/object/bbox/xmax, image/object/class/label hold] "
        "[2 2 2 2 1] [values, not one an object each",
    ),
}


@pytest.mark.parametrize("case", sorted(NAMED_REFUSALS))
def test_the_loader_names_the_shard_of_a_record_whose_content_it_refuses(seed, case, tmp_path):
    import tensorflow as tf

    from loaders import load_dataset

    out, records = seed
    craft, mode, training, said = NAMED_REFUSALS[case]
    example = Example.FromString(records["train"][1])  # n01/a: 2 objects, the first its label's
    craft(example.features.feature)
    crafted_build = _with_record(out, tmp_path / "build", "train", example.SerializeToString())
    shard = crafted_build / "train-00000-of-00001.tfrecord"
    batches = load_dataset(
        str(crafted_build),
        "train",
        batch_size=1,
        image_size=16,
        label_mode=mode,
        training=training,
        seed=0,
    )
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        list(batches)
    assert said.format(f"shard {shard}") in str(error.value)
