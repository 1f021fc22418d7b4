"""VOC's `<pose>` kept as the OD API's `image/object/view` (schema 2.1), and a VOC tree's boxes
and poses compared with what TensorFlow Datasets' own `voc` builder reads from the same XML.

The tree is every VOC XML of the bundled corpus that has a `<size>` (with a generated image of
that size), plus one box that reaches past its image: the one box TFDS and this project differ
on (TFDS divides it as it is, past 1; the build clamps it to the image).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil

import numpy as np
import pytest
from helpers import CORPUS, build, jpeg_bytes, read_split, write

from beam_pipeline.core.annotations import (
    AnnotatedObject,
    Annotation,
    Box,
    parse_annotation,
    voc_xml,
)
from beam_pipeline.core.entries import IndexEntry, ParsedEntry
from beam_pipeline.stages.coders import ParsedEntryCoder
from beam_pipeline.tools import upgrade, verify
from loaders import dataset_info, load_dataset
from schemas import BUILD_INFO_FILE, DatasetInfo, ShardInfo
from schemas import features as F
from schemas.example_proto import Example
from schemas.tfds_metadata import TFDS_FEATURES_FILE, tfds_files
from schemas.tfrecord import encode_record, read_records

# Every VOC XML of the corpus with a <size>: TFDS's parser needs one, and the image's is made
# from it. datumaro's voc_dataset1 has an object without <pose> (TFDS's parser stops on it).
CORPUS_XML = {
    path.relative_to(CORPUS).with_suffix("").as_posix().replace("/", "_"): path
    for path in [
        *sorted((CORPUS / "voc_xml").rglob("*.xml")),
        CORPUS / "datumaro/voc_dataset/voc_dataset1/Annotations/2007_000001.xml",
        CORPUS / "datumaro/voc_dataset/voc_dataset3/Annotations/2007_000001.xml",
    ]
}
NO_POSE = "datumaro_voc_dataset_voc_dataset1_Annotations_2007_000001"
# A box 5 px past the right edge of its 20x10 image (annotation tools do write these).
PAST_THE_EDGE = voc_xml([("dog", 4, 2, 25, 8, 0, 1, "Left")], size=(20, 10))


def voc_tree(root):
    """VOCdevkit/VOC2007 with the corpus XML, an image of each XML's size, and a train list."""
    year = root / "VOCdevkit" / "VOC2007"
    ids = []
    for stem, path in CORPUS_XML.items():
        xml = path.read_bytes()
        annotation = parse_annotation(xml)
        write(year / "Annotations" / f"{stem}.xml", xml)
        write(year / "JPEGImages" / f"{stem}.jpg", jpeg_bytes(annotation.width, annotation.height))
        ids.append(stem)
    write(year / "Annotations" / "past_the_edge.xml", PAST_THE_EDGE)
    write(year / "JPEGImages" / "past_the_edge.jpg", jpeg_bytes(20, 10))
    ids.append("past_the_edge")
    write(year / "ImageSets" / "Main" / "train.txt", "".join(f"{i}\n" for i in ids))
    return root / "VOCdevkit"


@pytest.fixture(scope="module")
def devkit(tmp_path_factory):
    return voc_tree(tmp_path_factory.mktemp("voc"))


@pytest.fixture(scope="module")
def built(devkit, tmp_path_factory):
    out = tmp_path_factory.mktemp("out")
    build(devkit, out, "--splits", "train", "--num_shards", "train=2")
    return out


@pytest.fixture(scope="module")
def records(built):
    return {r[F.SOURCE_ID][0].decode().split("/")[-1]: r for r in read_split(built, "train")}


def test_a_voc_build_keeps_every_pose_as_written_in_object_order(records):
    assert len(records) == len(CORPUS_XML) + 1
    for record in records.values():
        assert len(record[F.OBJECT_VIEW]) == len(record[F.OBJECT_TEXT]) == len(record[F.BBOX_XMIN])
    horse_and_person = records["voc_xml_tzutalin_ImageNet_Utils_2008_004649"]
    assert horse_and_person[F.OBJECT_TEXT] == [b"horse", b"person"]
    assert horse_and_person[F.OBJECT_VIEW] == [b"Frontal", b"Frontal"]
    tv_and_train = records["voc_xml_tfds_fake_voc_VOC2007_000005"]
    assert tv_and_train[F.OBJECT_TEXT] == [b"tvmonitor", b"train"]
    assert tv_and_train[F.OBJECT_VIEW] == [b"right", b"unspecified"]  # TFDS's fakes: lower case
    # The cat says Unspecified; the person has no <pose>: empty, not made up.
    assert records[NO_POSE][F.OBJECT_TEXT] == [b"cat", b"person"]
    assert records[NO_POSE][F.OBJECT_VIEW] == [b"Unspecified", b""]
    # As written: VOC's capitalised, TFDS's fakes in lower case, and "" for no <pose>.
    views = {v.decode() for r in records.values() for v in r[F.OBJECT_VIEW]}
    capitalised = {"Frontal", "Left", "Unspecified"}
    assert views == {"", *capitalised, "frontal", "left", "rear", "right", "unspecified"}


def test_tfds_voc_parser_reads_the_same_boxes_and_poses_but_one_box(devkit, records):
    """TFDS's `voc` (tensorflow_datasets/object_detection/voc.py, `_get_example_objects`) fed
    the tree's XML: it divides VOC's coordinates by <size> as they are (no 1 subtracted), as
    the build does, so every box is the same float32; it lower-cases the pose (a ClassLabel
    of frontal, rear, left, right, unspecified) where the record keeps it as written. The one
    box that differs reaches past its image: TFDS divides it to 1.25, the build clamps to 1."""
    voc = pytest.importorskip("tensorflow_datasets.object_detection.voc")
    annotations = devkit / "VOC2007" / "Annotations"
    compared = 0
    for stem, record in records.items():
        if stem == NO_POSE:
            with pytest.raises(AttributeError):  # TFDS needs a <pose> in every object
                list(voc._get_example_objects(str(annotations / f"{stem}.xml")))
            continue
        objects = list(voc._get_example_objects(str(annotations / f"{stem}.xml")))
        theirs = np.float32([list(o["bbox"]) for o in objects])  # BBox(ymin, xmin, ymax, xmax)
        ours = np.float32([record[key] for key in F.BOX_KEYS_YX]).T
        if stem == "past_the_edge":
            np.testing.assert_array_equal(theirs, np.float32([[0.2, 0.2, 0.8, 1.25]]))
            np.testing.assert_array_equal(ours, np.float32([[0.2, 0.2, 0.8, 1.0]]))
        else:
            np.testing.assert_array_equal(ours, theirs)  # bit for bit
            compared += len(objects)
        assert [o["pose"] for o in objects] == [v.decode().lower() for v in record[F.OBJECT_VIEW]]
        assert [o["label"] for o in objects] == [t.decode() for t in record[F.OBJECT_TEXT]]
        assert {o["pose"] for o in objects} <= set(voc._VOC_POSES)
    assert compared == 15  # every box of the corpus's VOC XML that TFDS's parser reads


def test_tfds_voc_builder_takes_every_image_but_the_two_it_refuses(devkit, tmp_path):
    """TFDS's `Voc` builder itself (its `_generate_example` and features, without a download)
    on the same tree: it stops on the object without a <pose> and refuses the box past the
    edge, which the build keeps (empty view; box clamped)."""
    voc = pytest.importorskip("tensorflow_datasets.object_detection.voc")
    builder = voc.Voc(config="2007", data_dir=str(tmp_path))
    refused = {}
    for image_id in (devkit / "VOC2007/ImageSets/Main/train.txt").read_text().split():
        try:
            example = builder._generate_example(str(devkit.parent), image_id, True)
            builder.info.features.encode_example(example)
        except (AttributeError, ValueError) as error:
            refused[image_id] = type(error).__name__
    assert refused == {NO_POSE: "AttributeError", "past_the_edge": "ValueError"}


def test_verify_passes_and_tfds_reads_the_views(built, records):
    assert verify.verify(str(built)) == (2, [])
    features = json.loads((built / TFDS_FEATURES_FILE).read_text())["featuresDict"]["features"]
    assert features[F.OBJECT_VIEW] == features[F.OBJECT_TEXT]  # a sequence of text
    tfds = pytest.importorskip("tensorflow_datasets")
    builder = tfds.builder_from_directory(str(built))
    assert F.OBJECT_VIEW in builder.info.features
    read = {
        example[F.SOURCE_ID].decode().split("/")[-1]: example[F.OBJECT_VIEW].tolist()
        for example in tfds.as_numpy(builder.as_dataset(split="train"))
    }
    assert read == {stem: record[F.OBJECT_VIEW] for stem, record in records.items()}


def test_the_index_carries_the_pose_and_stays_as_small_without_one():
    entry = IndexEntry("train", "VOC2007/a", "VOC2007/JPEGImages/a.jpg", None, None, 9)
    box = Box(1.0, 2.0, 3.0, 4.0)
    posed = ParsedEntry(
        entry, Annotation(5, 5, (AnnotatedObject("dog", box, True, False, "Left"),))
    )
    plain = ParsedEntry(entry, Annotation(5, 5, (AnnotatedObject("dog", box, True, False),)))
    coder = ParsedEntryCoder()
    assert coder.decode(coder.encode(posed)) == posed
    assert coder.decode(coder.encode(plain)) == plain
    # A pose costs its text and a little more; no pose costs nothing (ILSVRC DET's index).
    assert len(coder.encode(posed)) - len(coder.encode(plain)) == len("Left") + 2


def as_schema_2_0(build_dir, into):
    """A copy of a build as schema 2.0 wrote it: records without image/object/view (the same
    bytes 2.0 wrote: Examples serialise their keys sorted), metadata and TFDS's files of 2.0."""
    shutil.copytree(build_dir, into)
    info = DatasetInfo.from_json((into / BUILD_INFO_FILE).read_text())
    splits = {}
    for name, split in info.splits.items():
        shards = []
        for shard in split.shards:
            with open(into / shard.file, "rb") as stream:
                old = [_without_view(record) for record in read_records(stream)]
            data = b"".join(encode_record(record) for record in old)
            (into / shard.file).write_bytes(data)
            digest = hashlib.sha256(data).hexdigest()
            shards.append(ShardInfo(shard.file, shard.num_examples, len(data), digest))
        splits[name] = dataclasses.replace(split, shards=tuple(shards))
    info = dataclasses.replace(info, schema_version="2.0.0", splits=splits)
    (into / BUILD_INFO_FILE).write_text(info.to_json())
    for file_name, text in tfds_files(info).items():
        (into / file_name).write_text(text)
    return into


def _without_view(record: bytes) -> bytes:
    example = Example.FromString(record)
    assert F.OBJECT_VIEW in example.features.feature
    del example.features.feature[F.OBJECT_VIEW]
    return example.SerializeToString(deterministic=True)


@pytest.fixture(scope="module")
def built_2_0(built, tmp_path_factory):
    return as_schema_2_0(built, tmp_path_factory.mktemp("v2_0") / "out")


def test_a_schema_2_0_build_still_reads_and_verifies(built, built_2_0):
    info = dataset_info(str(built_2_0)).info
    assert info.schema_version == "2.0.0"
    assert F.OBJECT_VIEW not in read_split(built_2_0, "train")[0]
    assert verify.verify(str(built_2_0)) == (2, [])
    for label_mode in ("int", "detection"):  # the same batches as the 2.1 build's
        old = load_dataset(str(built_2_0), "train", batch_size=4, label_mode=label_mode)
        new = load_dataset(str(built), "train", batch_size=4, label_mode=label_mode)
        for (_, old_labels), (_, new_labels) in zip(old, new, strict=True):
            np.testing.assert_equal(_numpy(old_labels), _numpy(new_labels))
    features = json.loads((built_2_0 / TFDS_FEATURES_FILE).read_text())["featuresDict"]
    assert F.OBJECT_VIEW not in features["features"]


def _numpy(labels):
    """A batch's labels (a tensor, or detection's dict of tensors) as NumPy."""
    if isinstance(labels, dict):
        return {key: value.numpy() for key, value in labels.items()}
    return labels.numpy()


def test_a_schema_2_0_build_is_a_tfds_dataset_without_views_and_upgrade_keeps_it(
    built_2_0, tmp_path
):
    tfds = pytest.importorskip("tensorflow_datasets")
    copy = shutil.copytree(built_2_0, tmp_path / "copy")
    shards = {p.name: p.read_bytes() for p in copy.glob("*.tfrecord")}
    upgrade.upgrade(str(copy))
    assert {p.name: p.read_bytes() for p in copy.glob("*.tfrecord")} == shards
    assert (copy / TFDS_FEATURES_FILE).read_bytes() == (built_2_0 / TFDS_FEATURES_FILE).read_bytes()
    assert DatasetInfo.from_json((copy / BUILD_INFO_FILE).read_text()).schema_version == "2.0.0"
    builder = tfds.builder_from_directory(str(copy))
    assert F.OBJECT_VIEW not in builder.info.features
    examples = list(tfds.as_numpy(builder.as_dataset(split="train")))
    assert len(examples) == len(CORPUS_XML) + 1
    assert verify.verify(str(copy)) == (2, [])


def test_a_schema_2_1_record_without_views_fails_verify(built_2_0):
    info = DatasetInfo.from_json((built_2_0 / BUILD_INFO_FILE).read_text())
    shard = info.splits["train"].shards[0]
    with open(built_2_0 / shard.file, "rb") as stream:
        record = next(iter(read_records(stream)))
    assert verify.check_example(record, info.num_classes, schema_version="2.0.0") is None
    assert verify.check_example(record, info.num_classes) == f"missing feature {F.OBJECT_VIEW}"
