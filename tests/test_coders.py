import pytest
from apache_beam import coders

import beam_pipeline.coders  # noqa: F401 - registers the coders under test
from beam_pipeline.annotations import AnnotatedObject, Annotation, Box
from beam_pipeline.entries import FileRef, IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.rejections import Rejection

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
    assert type(coder).__module__ == "beam_pipeline.coders" and coder.is_deterministic()
    encoded = coder.encode(element)
    assert coder.decode(encoded) == element
    assert coder.encode(coder.decode(encoded)) == encoded
    assert len(encoded) < 200  # compact: no class paths or field names
