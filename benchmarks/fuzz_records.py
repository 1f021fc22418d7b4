"""The reading side's fuzz target: one record of a committed build, crafted, read by everything
that reads records (`verify`'s check, `inspect`, `show`'s contact sheet, the loader's parser).

A crafted record keeps its shard's checksums and the build's byte counts whole, as a hand edit
or another tool's writer leaves them: the readers' own framing checks pass and each reader
meets the bytes. Invariants (`check_record_invariants`):

- `verify` (`check_example`) says what is wrong or None, and never raises;
- `inspect` describes any record protobuf parses (a `ValueError` naming the record for one it
  cannot), its JSON is strict JSON, and it says "damaged" exactly where `verify` (without
  decoding the image) finds a problem;
- the contact sheet draws any record protobuf parses, and its tile says "damaged" where a
  feature is of another kind than the schema's or a box is not a number;
- a record `verify` accepts whole (image decoded) is read by the loader, evaluation and
  training, with its label, its object classes and an image of the asked size.

The seed build (`seed_build`) is `tests/data/corpus/images/pillow/hopper.jpg` (MIT-CMU,
`corpus/LICENSES/`) at three sizes, with and without objects. Hypothesis drives it in
`tests/test_fuzz_records.py`; `python -m benchmarks.fuzz_campaign records` under Atheris.
"""

from __future__ import annotations

import json
import pathlib

from PIL import Image

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.core.record_checks import check_example
from beam_pipeline.output.readback import read_build_info, typed_values
from beam_pipeline.tools import inspect_record, record_view, sheet
from beam_pipeline.tools.build_records import NotAnExampleError, record_values
from schemas import UNLABELLED, DatasetInfo
from schemas import features as F
from schemas.example_proto import Example
from schemas.tfrecord import read_records

HOPPER = (
    pathlib.Path(__file__).resolve().parent.parent / "tests/data/corpus/images/pillow/hopper.jpg"
)
FOUND_RECORDS = pathlib.Path(__file__).resolve().parent.parent / "tests/data/fuzz_cases/records"
# (split, stem, size, objects: (class, xmin, ymin, xmax, ymax, difficult, truncated))
SEED_IMAGES = [
    ("train", "n01/a", (48, 40), [("n01", 4, 3, 40, 36, 0, 0), ("n02", 10, 10, 20, 30, 1, 0)]),
    ("train", "n02/b", (64, 64), [("n02", 0, 0, 63, 63, 0, 1)]),
    ("train", "neg", (40, 48), []),
    ("val", "v1", (56, 48), [("n01", 8, 8, 50, 40, 0, 0)]),
    ("val", "v2", (48, 56), [("n02", 1, 2, 30, 40, 0, 0), ("n01", 5, 5, 45, 50, 0, 0)]),
]


def seed_build(root: pathlib.Path) -> pathlib.Path:
    """Writes the seed tree (an ILSVRC DET layout) under `root` and builds it, one shard a
    split; returns the build's directory."""
    from beam_pipeline import pipeline

    tree, out = root / "tree", root / "build"
    for split, stem, size, objects in SEED_IMAGES:
        image = root / "tree" / "Data" / "DET" / split / f"{stem}.JPEG"
        image.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(HOPPER) as hopper:
            hopper.convert("RGB").resize(size).save(image, "JPEG", quality=90)
        xml = root / "tree" / "Annotations" / "DET" / split / f"{stem}.xml"
        xml.parent.mkdir(parents=True, exist_ok=True)
        xml.write_text(voc_xml(objects, size))
    pipeline.run(["--input_dir", str(tree), "--output_dir", str(out), "--num_shards", "1"])
    return out


def seed_records(out: pathlib.Path) -> dict[str, list[bytes]]:
    """The seed build's records by split, in shard order."""
    info = read_build_info(str(out))
    records = {}
    for name, split in info.splits.items():
        with open(out / split.shards[0].file, "rb") as stream:
            records[name] = list(read_records(stream))
    return records


def check_record_invariants(record: bytes, out: pathlib.Path, split: str) -> str:
    """Holds every reader of records to the invariants above, for `record` in `split`'s first
    shard of the build in `out` (its metadata read; the shard itself is not rewritten); what
    became of it ("not an Example", "refused", "read by the loader")."""
    info = read_build_info(str(out))
    labelled = info.splits[split].labelled
    args = (info.num_classes, True, labelled, info.schema_version, info.classes)
    whole = check_example(record, *args)
    assert whole is None or (isinstance(whole, str) and whole)
    features_only = check_example(record, info.num_classes, False, *args[2:])
    shard = str(out / info.splits[split].shards[0].file)
    try:
        Example.FromString(record)
    except Exception:  # noqa: BLE001 - protobuf's DecodeError: every reader must say so
        assert whole is not None and whole.startswith("not a tf.train.Example")
        _check_refused_everywhere(record, info, shard)
        return "not an Example"
    _check_inspect(record, info, shard, features_only)
    _check_sheet(record, info, shard)
    if whole is not None:
        return "refused: " + ("image" if features_only is None else "features")
    _check_loader(record, out, info, split)
    return "read by the loader"


def _check_refused_everywhere(record: bytes, info: DatasetInfo, shard: str) -> None:
    try:
        record_view.describe_record(record, info, shard, 0)
    except ValueError as error:
        assert f"{shard} record 0 is not a tf.train.Example" in str(error)
    else:
        raise AssertionError("inspect described what protobuf cannot parse")
    try:
        record_values(record, shard, 0)
    except NotAnExampleError as error:
        assert f"{shard} record 0 is not a tf.train.Example" in str(error)
    else:
        raise AssertionError("show read what protobuf cannot parse")


def _check_inspect(record: bytes, info: DatasetInfo, shard: str, problem: str | None) -> None:
    described = record_view.describe_record(record, info, shard, 0)
    assert described["problem"] == problem
    lines = inspect_record.format_text(shard, 0, info, described)
    assert any(line.startswith("damaged: ") for line in lines) == (problem is not None)
    payload = inspect_record.record_payload(shard, 0, info, described)

    def refuse(constant: str) -> None:
        raise AssertionError(f"inspect --json wrote {constant}, which is not JSON")

    json.loads(record_view.to_json(payload), parse_constant=refuse)


def _check_sheet(record: bytes, info: DatasetInfo, shard: str) -> None:
    values = record_values(record, shard, 0)
    image, (tile,) = sheet.render_sheet([record_view.Record(0, shard, values)], info)
    assert image.size[0] > 0
    _, wrong = typed_values(values)
    keys = (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)
    boxes = zip(*(values.get(key, []) for key in keys), strict=False)
    not_numbers = any(
        not all(isinstance(v, float) and v == v and abs(v) != float("inf") for v in box)
        for box in boxes
    )
    assert bool(tile.damage) == bool(wrong or not_numbers), (tile.damage, wrong)


def _check_loader(record: bytes, out: pathlib.Path, info: DatasetInfo, split: str) -> None:
    """A record `verify` accepts, read by the loader's own parser: its label, its object
    classes, an image of the asked size."""
    import numpy as np
    import tensorflow as tf

    from loaders.info import dataset_info
    from loaders.parser import RecordParser
    from loaders.spec import LoadSpec

    build = dataset_info(str(out))
    example = Example.FromString(record)
    label = example.features.feature[F.LABEL].int64_list.value[0]
    classes = list(example.features.feature[F.OBJECT_LABEL].int64_list.value)
    note = tf.constant("a crafted record")
    for training in (False, True):
        seed = tf.constant([3, 4], tf.int64) if training else None
        for mode in ("int", "detection"):
            if mode == "int" and label == UNLABELLED:
                continue
            spec = LoadSpec.checked(
                batch_size=1, image_size=16, training=training, seed=0, label_mode=mode
            )
            parser = RecordParser(info.num_classes, len(spec.label_names(build, split)), spec)
            image, target = parser(tf.constant(record), note, seed)
            assert tuple(image.shape) == (16, 16, 3) and np.isfinite(image.numpy()).all()
            if mode == "int":
                assert int(target) == label
            elif not training:  # (a training crop may leave objects out)
                assert target["classes"].numpy().tolist() == classes
