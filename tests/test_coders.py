import math

import pytest
from apache_beam import coders

import beam_pipeline.stages.coders  # noqa: F401 - registers the coders under test
from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box
from beam_pipeline.core.entries import FileRef, IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.core.rejections import Rejection

ENTRY = IndexEntry("train", "2013/n01/n01_1", "Data/n01/n01_1.JPEG", "Ann/n01_1.xml", None, 12345)
ANNOTATION = Annotation(
    500,
    375,
    (
        AnnotatedObject("n01", Box(1.0, 2.5, 300.0, 200.0), False, True),
        AnnotatedObject("n02", Box(0.0, 0.0, 10.0, 10.0), True, False),
    ),
)
ELEMENTS = [
    FileRef("Data/DET/train/a/b.JPEG", "train/a/b", "train", 98765, "n01"),
    FileRef("Annotations/x.xml", "val/x", "", 10),
    ENTRY,
    IndexEntry("val", "k", "f.jpg", None, "n03", 1),
    Rejection("train", "Data/bad.JPEG", "image", "truncated_image", "cut at 10 bytes"),
    Rejection("", "stray.txt", "discover", "not_an_image_file", "", is_image=False),
    ParsedEntry(ENTRY, ANNOTATION),
    ParsedEntry(ENTRY, None),
    LabelledEntry(ENTRY, ANNOTATION, 7, (7, 3), "xml", True),
    LabelledEntry(ENTRY, None, 200, (), "folder"),
    LabelledEntry(ENTRY, None, -1, (), "unlabelled"),
]


@pytest.mark.parametrize("element", ELEMENTS, ids=lambda e: type(e).__name__)
def test_index_elements_round_trip_through_their_registered_coder(element):
    coder = coders.registry.get_coder(type(element))
    assert type(coder).__module__ == "beam_pipeline.stages.coders" and coder.is_deterministic()
    encoded = coder.encode(element)
    assert coder.decode(encoded) == element
    assert coder.encode(coder.decode(encoded)) == encoded
    assert len(encoded) < 200  # compact: no class paths or field names


def _same(a, b):
    """Equal, and every float spelled the same (== holds for -0.0 and 0.0, repr does not)."""
    return a == b and repr(a) == repr(b)


@pytest.mark.parametrize(
    "filename, annotation_filename, key",
    [
        ("Data/DET/train/a/n01_1.JPEG", "Annotations/DET/train/a/n01_1.xml", "train/a/n01_1"),
        ("VOC2007/JPEGImages/000001.jpg", "VOC2007/Annotations/000001.xml", "2007/000001"),
        ("elsewhere/other.jpg", None, "train/k"),  # the key is not in the path: kept whole
        ("train/k.tar/k", None, "train/k"),  # the key is followed by a `/`: kept whole
        ("train/kk.jpg", "train/k.xml", "train/k"),  # the last match is the key's place
        ("", None, ""),
    ],
)
def test_paths_are_stored_around_the_key_and_decode_to_themselves(
    filename, annotation_filename, key
):
    entry = IndexEntry("train", key, filename, annotation_filename, None, 1)
    coder = coders.registry.get_coder(IndexEntry)
    assert _same(coder.decode(coder.encode(entry)), entry)
    ref = FileRef(filename, key, "train", 1)
    assert _same(
        coders.registry.get_coder(FileRef).decode(coders.registry.get_coder(FileRef).encode(ref)),
        ref,
    )


def test_a_path_around_its_key_costs_the_head_and_tail_only():
    coder = coders.registry.get_coder(IndexEntry)
    key = "train/ILSVRC2013_train/n01440764/n01440764_10026"
    paired = IndexEntry("train", key, f"Data/DET/{key}.JPEG", f"Annotations/DET/{key}.xml", None, 1)
    alone = IndexEntry("train", key, "", None, None, 1)
    assert (
        len(coder.encode(paired)) - len(coder.encode(alone)) < 34 + 16
    )  # the heads and tails, not 2 x 49 more


@pytest.mark.parametrize(
    "value",
    [0.0, -0.0, 1.0, -3.0, 2.5, 1e-300, 2.0**53, -(2.0**53), 2.0**60, 1e300, float("inf"), -7.0],
)
def test_box_corners_decode_to_the_same_float(value):
    annotation = Annotation(
        10, 10, (AnnotatedObject("n01", Box(value, 0.0, value, 1.0), False, False),)
    )
    coder = coders.registry.get_coder(ParsedEntry)
    decoded = coder.decode(coder.encode(ParsedEntry(ENTRY, annotation))).annotation
    box = decoded.objects[0].box
    assert type(box.xmin) is float and repr(box.xmin) == repr(value) == repr(box.xmax)


def test_a_nan_corner_stays_nan():
    annotation = Annotation(
        None, None, (AnnotatedObject("n", Box(float("nan"), 0.0, 1.0, 1.0), False, False),)
    )
    coder = coders.registry.get_coder(ParsedEntry)
    assert math.isnan(
        coder.decode(coder.encode(ParsedEntry(ENTRY, annotation))).annotation.objects[0].box.xmin
    )


def test_whole_box_corners_cost_less_than_fractions():
    coder = coders.registry.get_coder(ParsedEntry)

    def size(corner):
        box = Box(corner, corner, corner + 100, corner + 100)
        return len(
            coder.encode(
                ParsedEntry(ENTRY, Annotation(500, 375, (AnnotatedObject("n", box, False, False),)))
            )
        )

    assert size(10.5) - size(10.0) >= 4 * 6  # 9 bytes a float, at most 3 for these integers
