import pytest

from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box
from beam_pipeline.core.entries import IndexEntry, LabelledEntry
from beam_pipeline.core.examples import build_example
from beam_pipeline.core.images import NormalisedImage
from beam_pipeline.core.labels import Vocabulary
from schemas import SCHEMA_VERSION, DatasetInfo, ShardInfo, SplitInfo, shard_filename
from schemas import features as F
from schemas.example_proto import Example

VOCAB = Vocabulary(("cat", "dog"))


def labelled(objects=(), label=2, size=(40, 20)):
    entry = IndexEntry("train", "train/a/x", "Data/DET/train/a/x.JPEG", None, None, 9)
    annotation = Annotation(size[0], size[1], tuple(objects)) if objects else None
    object_labels = tuple(VOCAB.index(o.name) for o in objects)
    return LabelledEntry(entry, annotation, label, object_labels, "xml")


IMAGE = NormalisedImage(b"\xff\xd8jpeg", 40, 20, "JPEG", 40, 20, reencoded=False)


def test_our_example_bytes_equal_tensorflow_examples():
    tf = pytest.importorskip("tensorflow")
    ours = Example()
    theirs = tf.train.Example()
    for message in (ours, theirs):
        features = message.features.feature
        features["b"].bytes_list.value.extend([b"xy", b""])
        features["i"].int64_list.value.extend([1, -5, 2**40])
        features["f"].float_list.value.extend([0.5, 1e-3])
        features["empty"].float_list.value.extend([])
    assert ours.SerializeToString(deterministic=True) == theirs.SerializeToString(
        deterministic=True
    )


def test_build_example_round_trips_through_tf_parse_with_the_schema_spec():
    tf = pytest.importorskip("tensorflow")
    from schemas import tf_feature_spec

    cat = AnnotatedObject("cat", Box(4, 2, 20, 10), difficult=True, truncated=False, pose="Left")
    dog = AnnotatedObject("dog", Box(-5, 0, 50, 30), difficult=False, truncated=True)
    record = build_example(labelled((cat, dog), label=1), IMAGE, VOCAB)
    parsed = tf.io.parse_single_example(record, tf_feature_spec(VOCAB.num_classes))
    dense = {
        k: tf.sparse.to_dense(v) if isinstance(v, tf.SparseTensor) else v for k, v in parsed.items()
    }
    assert dense[F.ENCODED].numpy() == IMAGE.data
    assert dense[F.LABEL].numpy() == 1
    assert dense[F.LABEL_TEXT].numpy() == b"dog"
    assert dense[F.ONE_HOT].numpy().tolist() == [0, 1, 0]
    assert (dense[F.HEIGHT].numpy(), dense[F.WIDTH].numpy(), dense[F.CHANNELS].numpy()) == (
        20,
        40,
        3,
    )
    assert dense[F.FILENAME].numpy() == b"Data/DET/train/a/x.JPEG"
    assert dense[F.SOURCE_ID].numpy() == b"train/a/x"
    # Boxes normalised by the decoded size and clamped to [0, 1].
    assert dense[F.BBOX_XMIN].numpy().tolist() == pytest.approx([0.1, 0.0])
    assert dense[F.BBOX_YMIN].numpy().tolist() == pytest.approx([0.1, 0.0])
    assert dense[F.BBOX_XMAX].numpy().tolist() == pytest.approx([0.5, 1.0])
    assert dense[F.BBOX_YMAX].numpy().tolist() == pytest.approx([0.5, 1.0])
    assert dense[F.OBJECT_LABEL].numpy().tolist() == [0, 1]
    assert dense[F.OBJECT_TEXT].numpy().tolist() == [b"cat", b"dog"]
    assert dense[F.OBJECT_DIFFICULT].numpy().tolist() == [1, 0]
    assert dense[F.OBJECT_TRUNCATED].numpy().tolist() == [0, 1]
    # One view per object, in object order: the pose as written, empty without one.
    assert dense[F.OBJECT_VIEW].numpy().tolist() == [b"Left", b""]


def test_every_schema_key_is_written_even_for_a_negative():
    record = build_example(labelled(), IMAGE, VOCAB)
    example = Example.FromString(record)
    assert set(example.features.feature) == {f.key for f in F.FEATURES}
    assert list(example.features.feature[F.ONE_HOT].int64_list.value) == [0, 0, 1]
    assert list(example.features.feature[F.BBOX_XMIN].float_list.value) == []


def test_the_view_is_a_per_object_text_key_of_schema_2_1():
    view = F.FEATURES_BY_KEY["image/object/view"]  # the OD API's key, spelled as it spells it
    assert view.key == F.OBJECT_VIEW and view.proto_kind == "bytes_list"
    assert view.length is None and view.since == "2.1.0"  # one per object, since 2.1
    assert view.in_schema(SCHEMA_VERSION) and SCHEMA_VERSION == "2.1.0"
    assert not view.in_schema("2.0.0") and not view.in_schema("1.2.0")
    # Every key of 2.0 is still there, unchanged: a 2.1 record is a 2.0 record and one key.
    keys_2_0 = [f.key for f in F.FEATURES if f.in_schema("2.0.0")]
    assert [f.key for f in F.FEATURES] == [*keys_2_0, F.OBJECT_VIEW]


def test_a_record_reads_with_the_spec_of_any_key_it_lacks():
    """The loader's spec reads a record written before image/object/view existed (2.0)."""
    tf = pytest.importorskip("tensorflow")
    from schemas import tf_feature_spec

    cat = AnnotatedObject("cat", Box(4, 2, 20, 10), difficult=False, truncated=False)
    example = Example.FromString(build_example(labelled((cat,), label=0), IMAGE, VOCAB))
    del example.features.feature[F.OBJECT_VIEW]
    spec = tf_feature_spec(VOCAB.num_classes)
    parsed = tf.io.parse_single_example(example.SerializeToString(deterministic=True), spec)
    assert tf.sparse.to_dense(parsed[F.OBJECT_VIEW]).numpy().tolist() == []
    assert tf.sparse.to_dense(parsed[F.OBJECT_TEXT]).numpy().tolist() == [b"cat"]


def test_serialisation_is_deterministic():
    cat = AnnotatedObject("cat", Box(4, 2, 20, 10), difficult=False, truncated=False)
    records = {build_example(labelled((cat,), label=0), IMAGE, VOCAB) for _ in range(5)}
    assert len(records) == 1


def test_size_mismatch_and_box_outside_image_are_input_errors():
    from beam_pipeline.core.rejections import InputError

    cat = AnnotatedObject("cat", Box(4, 2, 20, 10), difficult=False, truncated=False)
    with pytest.raises(InputError, match="size_mismatch") as error:
        build_example(labelled((cat,), label=0, size=(41, 20)), IMAGE, VOCAB)
    assert error.value.detail == "XML <size> is 41x20, the image decodes to 40x20"
    with pytest.raises(InputError) as error:  # turned by EXIF in a labelling tool: said so
        build_example(labelled((cat,), label=0, size=(20, 40)), IMAGE, VOCAB)
    assert error.value.detail == (
        "XML <size> is 20x40, the image decodes to 40x20 (turned: a photo whose EXIF "
        "orientation a labelling tool applied, which the build does not; turn its pixels to "
        "match, e.g. exiftran -ai, or fix the XML)"
    )
    outside = AnnotatedObject("cat", Box(50, 2, 60, 10), difficult=False, truncated=False)
    with pytest.raises(InputError, match="annotation_box_outside_image"):
        build_example(labelled((outside,), label=0), IMAGE, VOCAB)
    # 5 to 5.0000001 px: a width in float64, none in the record's float32 (stored, exit 0).
    thin = AnnotatedObject("cat", Box(5, 2, 5.0000001, 10), difficult=False, truncated=False)
    with pytest.raises(InputError) as error:
        build_example(labelled((thin,), label=0), IMAGE, VOCAB)
    assert error.value.reason == "annotation_degenerate_box"
    assert error.value.detail.startswith("cat box Box(xmin=5, ymin=2, xmax=5.0000001, ymax=10) has")
    # 0 to 1e-40 px: a float32 height below its smallest normal, which TensorFlow reads as 0
    # (the loader dropped the object as one without area).
    flat = AnnotatedObject("cat", Box(4, 0, 20, 1e-40), difficult=False, truncated=False)
    with pytest.raises(InputError) as error:
        build_example(labelled((flat,), label=0), IMAGE, VOCAB)
    assert error.value.reason == "annotation_degenerate_box"


def test_a_box_has_area_as_the_loader_reads_it():
    assert F.box_has_area(0.0, 0.0, 1.0, 1.0)
    assert F.box_has_area(0.5, 0.5, 0.50000006, 0.5000001)  # a float32 step wide
    assert not F.box_has_area(0.5, 0.0, 0.5, 1.0)
    assert not F.box_has_area(0.0, 0.0, 1.0, 1.401298464324817e-45)  # subnormal: zero to TF
    assert F.box_has_area(0.0, 0.0, 1.0, 1.1754943508222875e-38)  # the smallest normal


def test_dataset_info_json_round_trip():
    info = DatasetInfo(
        schema_version=SCHEMA_VERSION,
        classes=("cat", "dog"),
        splits={
            "train": SplitInfo(
                3, 4, 1, (1, 1, 1), (ShardInfo("train-00000-of-00001.tfrecord", 3, 99, "ab"),)
            )
        },
        failures={"truncated_image": 1},
        options={"seed": 0},
        source={"input_dir": "/x"},
        versions={"python": "3"},
    )
    again = DatasetInfo.from_json(info.to_json())
    assert again == info
    assert again.background_index == 2 and again.splits["train"].num_shards == 1


def test_other_major_schema_version_is_refused():
    text = DatasetInfo(SCHEMA_VERSION, (), {}, {}, {}, {}, {}).to_json()
    with pytest.raises(ValueError, match="schema version"):
        DatasetInfo.from_json(text.replace(f'"{SCHEMA_VERSION}"', '"3.0.0"'))


def test_shard_file_names():
    assert shard_filename("train", 3, 16) == "train-00003-of-00016.tfrecord"


def test_a_later_minor_version_is_told_from_the_others():
    # What the loader warns of: a version of this major, later by its minor number.
    major, minor = F.SCHEMA_VERSION.split(".")[:2]
    later = f"{major}.{int(minor) + 1}"
    assert [F.is_later_minor(v) for v in (later, f"{later}.0", f"{major}.9.3")] == [True] * 3
    same = (F.SCHEMA_VERSION, f"{major}.{minor}.9", f"{major}.0.0", "1.9.0", "3.0.0", "2.x", "")
    assert [F.is_later_minor(v) for v in same] == [False] * len(same)
