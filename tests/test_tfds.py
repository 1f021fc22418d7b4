"""A build directory is a TFDS dataset, read by the real `tensorflow-datasets` package; builds of
schema 1.x (whose metadata had TFDS's file name) are still read, and `upgrade` makes them TFDS
datasets without touching a shard."""

import dataclasses
import hashlib
import io
import json
import shutil

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_datasets as tfds
from google.protobuf import json_format
from helpers import build, ilsvrc_image, jpeg_bytes, read_split

from beam_pipeline.core.annotations import voc_xml
from beam_pipeline.output import commit, directory
from beam_pipeline.tools import commands, upgrade, verify
from loaders import IncompleteDatasetError, dataset_info, load_dataset
from schemas import (
    BUILD_INFO_FILE,
    FEATURES,
    LEGACY_INFO_FILE,
    SCHEMA_VERSION,
    DamagedBuildError,
    DatasetInfo,
)
from schemas import features as F
from schemas.example_proto import Example
from schemas.label_map import LABEL_MAP_CSV_FILE
from schemas.tfds_metadata import TFDS_FILES, TFDS_INFO_FILE, tfds_files, tfds_name
from schemas.tfrecord import encode_record, read_records

CLASSES = ["n01440764", "n01443537", "n01484850"]


def det_tree(root):
    """Objects of every class (two in some images, flagged difficult/truncated), background
    images, and an unlabelled test split."""
    for n in range(9):
        objects = [(CLASSES[n % 3], 2 + n, 3, 30 + n, 28, n % 2, 1 - n % 2)]
        if n < 3:
            objects.append((CLASSES[(n + 1) % 3], 33, 20, 60, 44))
        colour = (20 * n, 100, 200 - 10 * n)
        ilsvrc_image(root, "train", f"t{n}", jpeg_bytes(colour=colour), voc_xml(objects, (64, 48)))
        if n < 4:
            ilsvrc_image(
                root, "val", f"v{n}", jpeg_bytes(colour=colour), voc_xml(objects, (64, 48))
            )
    ilsvrc_image(root, "train", "empty", jpeg_bytes(colour=(1, 2, 3)), voc_xml([], (64, 48)))
    for n in range(3):
        ilsvrc_image(root, "test", f"x{n}", jpeg_bytes(colour=(5, 50 * n, 9)))
    return root


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    return det_tree(tmp_path_factory.mktemp("det"))


@pytest.fixture(scope="module")
def built(tree, tmp_path_factory):
    out = tmp_path_factory.mktemp("tfds") / "my_det" / SCHEMA_VERSION
    build(tree, out, "--splits", "train,val,test", "--num_shards", "train=2,val=1,test=1")
    return out


def as_numpy(value):
    return value.decode() if isinstance(value, bytes) else value


def test_tfds_reads_every_record_of_every_split_as_written(built):
    builder = tfds.builder_from_directory(str(built))
    info = DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text())
    assert builder.info.name == "ilsvrc_det" and str(builder.info.version) == SCHEMA_VERSION
    assert set(builder.info.features.keys()) == {f.key for f in FEATURES}
    label = builder.info.features[F.LABEL]
    assert label.names == [*CLASSES, "background"]
    assert builder.info.features[F.OBJECT_LABEL].feature.names == label.names
    for split, split_info in info.splits.items():
        tfds_split = builder.info.splits[split]
        assert tfds_split.shard_lengths == [s.num_examples for s in split_info.shards]
        records = read_split(built, split)
        examples = list(tfds.as_numpy(builder.as_dataset(split=split)))
        assert len(examples) == len(records) == split_info.num_examples
        for record, example in zip(records, examples, strict=True):
            pixels = tf.io.decode_jpeg(record[F.ENCODED][0], channels=3).numpy()
            np.testing.assert_array_equal(example[F.ENCODED], pixels)
            for feature in FEATURES:
                if feature.key == F.ENCODED:
                    continue
                values = np.atleast_1d(example[feature.key]).tolist()
                assert [as_numpy(v) for v in values] == [as_numpy(v) for v in record[feature.key]]
    test = [ex[F.LABEL] for ex in tfds.as_numpy(builder.as_dataset(split="test"))]
    assert test == [-1, -1, -1]  # the unlabelled split, as TFDS's own ImageNet test split


def test_ilsvrc_xml_without_poses_gives_an_empty_view_per_object(built):
    # ILSVRC DET's XML (as voc_xml writes it here) has no <pose>: as a VOC object without one.
    builder = tfds.builder_from_directory(str(built))
    for split in ("train", "validation", "test"):
        records = read_split(built, split)
        assert all(r[F.OBJECT_VIEW] == [b""] * len(r[F.OBJECT_TEXT]) for r in records)
        examples = tfds.as_numpy(builder.as_dataset(split=split))
        assert [e[F.OBJECT_VIEW].tolist() for e in examples] == [r[F.OBJECT_VIEW] for r in records]
    assert sum(len(r[F.OBJECT_VIEW]) for r in read_split(built, "train")) == 12


def test_as_supervised_and_split_slicing_work_as_with_tfds_load(built):
    builder = tfds.builder_from_directory(str(built))
    records = read_split(built, "train")
    pairs = list(tfds.as_numpy(builder.as_dataset(split="train[:50%]", as_supervised=True)))
    assert len(pairs) == 5
    for (image, label), record in zip(pairs, records, strict=False):
        assert image.shape == (48, 64, 3) and image.dtype == np.uint8
        assert label == record[F.LABEL][0]
    names = [builder.info.features[F.LABEL].int2str(int(label)) for _, label in pairs]
    assert names == [r[F.LABEL_TEXT][0].decode() for r in records[:5]]


def test_tfds_load_finds_a_build_made_in_its_data_dir_layout(built):
    data_dir = built.parent.parent  # .../my_det/<SCHEMA_VERSION>
    dataset, info = tfds.load(
        "my_det", data_dir=str(data_dir), split="validation", with_info=True, as_supervised=True
    )
    labels = [int(label) for _, label in tfds.as_numpy(dataset)]
    assert labels == [r[F.LABEL][0] for r in read_split(built, "validation")]
    assert info.splits["train"].num_examples == 10


def test_features_json_is_what_tfds_itself_writes_for_those_features(built):
    written = json.loads((built / "features.json").read_text())
    features = tfds.features.FeatureConnector.from_json(written)
    assert json_format.MessageToDict(features.to_proto()) == written  # as TFDS's save_config
    for name in TFDS_FILES:
        assert (built / name).exists()


def test_tfds_metadata_describes_only_the_keys_of_the_build_schema():
    info = DatasetInfo("1.1.0", ("cat",), {}, {}, {}, {"layout": "ilsvrc_cls_loc"}, {})
    features = json.loads(tfds_files(info)["features.json"])["featuresDict"]["features"]
    assert F.KEY_SHA256 not in features and F.ENCODED in features
    assert F.OBJECT_VIEW not in features
    # 2.0 builds have no views; from 2.1 TFDS reads them as text, one per object.
    v2_0 = json.loads(
        tfds_files(dataclasses.replace(info, schema_version="2.0.0"))["features.json"]
    )["featuresDict"]["features"]
    assert F.KEY_SHA256 in v2_0 and F.OBJECT_VIEW not in v2_0
    v2_1 = json.loads(
        tfds_files(dataclasses.replace(info, schema_version="2.1.0"))["features.json"]
    )["featuresDict"]["features"]
    assert set(v2_1) == {f.key for f in FEATURES} == {*v2_0, F.OBJECT_VIEW}
    assert (
        v2_1[F.OBJECT_VIEW]
        == v2_1[F.OBJECT_TEXT]
        == {
            "pythonClassName": "tensorflow_datasets.core.features.sequence_feature.Sequence",
            "sequence": {
                "feature": {
                    "pythonClassName": "tensorflow_datasets.core.features.text_feature.Text",
                    "text": {},
                },
                "length": "-1",
            },
        }
    )
    view = tfds.features.FeatureConnector.from_json(v2_1[F.OBJECT_VIEW])
    assert isinstance(view, tfds.features.Sequence) and view.dtype == tf.string
    assert tfds_name(info) == "ilsvrc_cls_loc"
    assert tfds_name(dataclasses.replace(info, source={})) == "imagenet_tfrecords"


def make_legacy(build_dir, into):
    """A copy of a build as schema 1.2 wrote it: the metadata in dataset_info.json, no TFDS, no
    label_map.csv, records without schema 2.1's image/object/view."""
    shutil.copytree(build_dir, into)
    payload = json.loads((into / BUILD_INFO_FILE).read_text())
    payload["schema_version"] = "1.2.0"
    for split in payload["splits"].values():
        for shard in split["shards"]:
            path = into / shard["file"]
            records = []
            for record in read_records(io.BytesIO(path.read_bytes())):
                example = Example.FromString(record)
                del example.features.feature[F.OBJECT_VIEW]
                records.append(encode_record(example.SerializeToString(deterministic=True)))
            path.write_bytes(b"".join(records))
            shard["num_bytes"] = path.stat().st_size
            shard["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    for name in (*TFDS_FILES, LABEL_MAP_CSV_FILE):  # (the CSV came with 2.1: verify failed it)
        (into / name).unlink()
    (into / BUILD_INFO_FILE).unlink()
    (into / LEGACY_INFO_FILE).write_text(json.dumps(payload, indent=2) + "\n")
    return into


def shard_digests(directory):
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(directory.glob("*.tfrecord"))
    }


def test_a_schema_1_build_is_read_verified_and_refused_as_before(built, tree, tmp_path, capsys):
    legacy = make_legacy(built, tmp_path / "legacy")
    assert dataset_info(str(legacy)).info.schema_version == "1.2.0"
    dataset = load_dataset(str(legacy), "train", batch_size=4, label_mode="int")
    labels = np.concatenate([y for _, y in dataset])
    assert sorted(labels.tolist()) == sorted(r[F.LABEL][0] for r in read_split(built, "train"))
    assert verify.main([str(legacy), "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines() == [
        "OK: 4 shards verified",
        f"note: a build of schema 1.x, whose metadata TFDS cannot read; python -m beam_pipeline "
        f"upgrade {legacy} adds TFDS's files and the label maps of later builds (shards "
        "untouched)",
    ]
    with pytest.raises(directory.OutputExistsError, match="already holds a complete build"):
        build(tree, legacy, "--splits", "train,val,test")
    with pytest.raises(Exception, match='no field named "schema_version"'):  # as in issue 18
        tfds.builder_from_directory(str(legacy))


def test_upgrade_makes_a_schema_1_build_a_tfds_dataset_without_touching_a_shard(
    built, tmp_path, capsys
):
    legacy = make_legacy(built, tmp_path / "legacy")
    before = shard_digests(legacy)
    assert upgrade.main([str(legacy)]) == 0
    assert capsys.readouterr().out == (
        f"{legacy}: wrote label_map.csv, features.json, image.class.label.labels.txt, "
        "image.object.class.label.labels.txt, build_info.json, dataset_info.json (records of "
        f"schema 1.2.0, unchanged); tfds.builder_from_directory('{legacy}') reads it\n"
    )
    assert shard_digests(legacy) == before
    assert not (legacy / ".tmp").exists()  # (its writes' temp folder, left empty, is gone)
    info = DatasetInfo.from_json((legacy / BUILD_INFO_FILE).read_text())
    assert info.schema_version == "1.2.0"
    assert json.loads((legacy / TFDS_INFO_FILE).read_text())["version"] == "1.2.0"
    builder = tfds.builder_from_directory(str(legacy))
    labels = [int(ex[F.LABEL]) for ex in tfds.as_numpy(builder.as_dataset(split="validation"))]
    assert labels == [r[F.LABEL][0] for r in read_split(built, "validation")]
    assert verify.verify(str(legacy)) == (4, [])
    assert upgrade.main([str(tmp_path / "nothing")]) == 2
    assert f"{tmp_path / 'nothing'} does not exist; name the output directory of a build" in (
        capsys.readouterr().err
    )
    (tmp_path / "empty").mkdir()
    assert upgrade.main([str(tmp_path / "empty")]) == 2
    assert "holds no committed build (build_info.json is missing)" in capsys.readouterr().err


def test_verify_names_tfds_metadata_that_is_missing_or_wrong_and_upgrade_mends_it(built, tmp_path):
    copy = shutil.copytree(built, tmp_path / "copy")
    (copy / "features.json").unlink()
    tfds_info = json.loads((copy / TFDS_INFO_FILE).read_text())
    tfds_info["splits"][0]["shardLengths"][0] = "1"
    (copy / TFDS_INFO_FILE).write_text(json.dumps(tfds_info))
    (copy / "image.class.label.labels.txt").write_text("a\nb\n")
    _, problems = verify.verify(str(copy))
    fix = f"python -m beam_pipeline upgrade {copy} rewrites it"
    assert [str(p) for p in problems] == [
        f"dataset_info.json: disagrees with build_info.json; {fix}",
        f"features.json: missing, so TFDS cannot read the build; {fix}",
        f"image.class.label.labels.txt: disagrees with build_info.json; {fix}",
    ]
    before = shard_digests(copy)
    upgrade.upgrade(str(copy))
    assert verify.verify(str(copy)) == (4, []) and shard_digests(copy) == before


def test_upgrade_and_verify_refuse_a_build_of_a_later_schema(built, tmp_path, capsys):
    # Its TFDS files, rewritten by this code, would name only the keys this schema knows.
    copy = shutil.copytree(built, tmp_path / "copy")
    info = json.loads((copy / BUILD_INFO_FILE).read_text())
    info["schema_version"] = "2.9.0"
    (copy / BUILD_INFO_FILE).write_text(json.dumps(info))
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()}
    assert commands.main(["upgrade", str(copy)]) == 2
    assert capsys.readouterr().err == (
        f"error: {copy / BUILD_INFO_FILE}: the build is of schema 2.9.0, newer than this code's "
        f"{SCHEMA_VERSION}: run upgrade with the version that wrote it (pip install -U "
        "imagenet-tfrecords)\n"
    )
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.is_file()} == before
    assert commands.main(["verify", str(copy)]) == 2  # (it judged the records by this schema)
    assert "run verify with the version that wrote it" in capsys.readouterr().err


def test_tfds_metadata_without_build_info_is_not_a_build(built, tmp_path, tree):
    """What a build killed between TFDS's files and its commit marker leaves."""
    copy = shutil.copytree(built, tmp_path / "copy")
    (copy / BUILD_INFO_FILE).unlink()
    with pytest.raises(IncompleteDatasetError, match=r"dataset_info\.json is TFDS's metadata"):
        dataset_info(str(copy))
    # A rebuild needs no --overwrite and leaves no stale TFDS file behind before it commits.
    build(tree, copy, "--splits", "train,val,test", "--num_shards", "train=2,val=1,test=1")
    assert shard_digests(copy) == shard_digests(built)
    assert verify.verify(str(copy)) == (4, [])


def test_a_commit_cut_short_leaves_nothing_tfds_reads_as_complete(built, tmp_path, monkeypatch):
    # TFDS's own marker, dataset_info.json, is written after build_info.json: a build killed
    # before its commit marker had left every TFDS file, and TFDS read the directory.
    info = DatasetInfo.from_json((built / BUILD_INFO_FILE).read_text())
    copy = shutil.copytree(built, tmp_path / "copy")
    for name in (BUILD_INFO_FILE, TFDS_INFO_FILE):
        (copy / name).unlink()
    real = directory.write_atomic

    def dies_at_the_marker(output_dir, name, data):
        if name == BUILD_INFO_FILE:
            raise SystemExit("killed")
        real(output_dir, name, data)

    monkeypatch.setattr(commit, "write_atomic", dies_at_the_marker)
    with pytest.raises(SystemExit):
        commit.commit(str(copy), info)
    assert not (copy / BUILD_INFO_FILE).exists() and not (copy / TFDS_INFO_FILE).exists()
    with pytest.raises(Exception, match=r"dataset_info\.json"):
        tfds.builder_from_directory(str(copy))
    with pytest.raises(IncompleteDatasetError):
        dataset_info(str(copy))
    monkeypatch.setattr(commit, "write_atomic", real)
    commit.commit(str(copy), info)
    assert tfds.builder_from_directory(str(copy)).info.splits["train"].num_examples == 9 + 1


def test_a_build_killed_between_its_two_markers_is_named_and_upgrade_finishes_it(
    built, tree, tmp_path, capsys
):
    # build_info.json written, dataset_info.json not, work folders left: a rerun said only
    # "pass --overwrite", and upgrade left .progress/ and .tmp/ behind (a crash trial).
    copy = shutil.copytree(built, tmp_path / "copy")
    (copy / TFDS_INFO_FILE).unlink()
    for work in (".progress", ".tmp"):
        (copy / work).mkdir()
        (copy / work / "left").write_bytes(b"x")
    argv = ["--input_dir", str(tree), "--output_dir", str(copy), "--resume"]
    assert commands.main(argv) == 2
    said = capsys.readouterr().err.strip()
    assert said.endswith(
        "already holds a complete build; pass --overwrite to replace it; its dataset_info.json "
        "is missing (the build stopped as it committed): python -m beam_pipeline upgrade "
        f"{copy} writes it"
    )
    upgrade.upgrade(str(copy))
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in built.iterdir())
    assert verify.verify(str(copy)) == (4, [])


def test_a_damaged_build_without_tfds_file_is_not_sent_to_upgrade(built, tree, tmp_path, capsys):
    # The refusal said "upgrade writes it" of dataset_info.json, and upgrade then refused the
    # damaged build_info.json ("rebuild it").
    copy = shutil.copytree(built, tmp_path / "copy")
    (copy / TFDS_INFO_FILE).unlink()
    (copy / BUILD_INFO_FILE).write_text((copy / BUILD_INFO_FILE).read_text()[:2000])
    assert commands.main(["--input_dir", str(tree), "--output_dir", str(copy)]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            f"{copy} already holds a build whose build_info.json is damaged; pass --overwrite to "
            "replace it"
        )
    )


def test_a_schema_1_build_with_a_field_missing_is_named_damaged(built, tmp_path, capsys):
    # Its `dataset_info.json` was parsed without the checks build_info.json gets: `stats` and
    # `verify` ended in a KeyError traceback, and the loader raised a bare KeyError.
    legacy = make_legacy(built, tmp_path / "legacy")
    payload = json.loads((legacy / LEGACY_INFO_FILE).read_text())
    del payload["splits"]["train"]["num_discovered"]
    (legacy / LEGACY_INFO_FILE).write_text(json.dumps(payload))
    damaged = (
        f"{legacy}/{LEGACY_INFO_FILE} is damaged and the build cannot be read (splits.train "
        "has no num_discovered); rebuild it (--overwrite replaces it)"
    )
    with pytest.raises(DamagedBuildError) as raised:
        dataset_info(str(legacy))
    assert str(raised.value) == damaged
    assert verify.main([str(legacy)]) == 1
    assert capsys.readouterr().out == f"FAIL {damaged}\n"
