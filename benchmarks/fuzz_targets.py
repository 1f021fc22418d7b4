"""What every input must satisfy, for the fuzzers of the parsers of untrusted bytes: the
property tests (tests/test_fuzz.py, Hypothesis) and the coverage-guided campaign
(`benchmarks.fuzz_campaign`, Atheris) check the same invariants on the same seeds.

- images: `normalise_image` returns or raises `InputError` with a known reason, nothing else;
  what it returns decodes in full in every reader (Pillow, `tf.io.decode_jpeg`, libjpeg-turbo
  strictly) at the size it declares; a kept JPEG shows exactly what Pillow shows of the input
  (nothing was guessed or lost), a converted one (original size) is exactly the JPEG of the
  input's RGB conversion;
- XML: `parse_annotation` returns or raises `InputError(annotation_*)`; a document lxml cannot
  parse never yields an annotation; boxes are finite with min < max; the label is the largest
  clamped box's class (or background without objects); stored boxes lie in [0, 1], min < max.
"""

from __future__ import annotations

import io
import math
import pathlib

import numpy as np
import simplejpeg
from lxml import etree
from PIL import Image, JpegImagePlugin

from beam_pipeline.core import annotations, labels
from beam_pipeline.core.entries import IndexEntry, LabelledEntry
from beam_pipeline.core.examples import normalised_boxes
from beam_pipeline.core.images import ORIGINAL, ImagePolicy, normalise_image, to_rgb
from beam_pipeline.core.rejections import InputError

PILLOW = pathlib.Path(__file__).resolve().parent.parent / "tests/data/corpus/images/pillow"
FOUND = pathlib.Path(__file__).resolve().parent.parent / "tests/data/fuzz_cases"
SEED_FILES = pathlib.Path(__file__).resolve().parent.parent / "tests/data/fuzz_seeds"
IMAGE_REASONS = {
    "empty_file",
    "not_an_image",
    "decompression_bomb",
    "truncated_image",
    "corrupt_image",
    "stray_jpeg_bytes",
    "image_too_large",
    "unsupported_image",
}
POLICIES = [
    ImagePolicy(),
    ImagePolicy(keep_stray_jpeg_bytes=True),
    ImagePolicy("shorter_side", (24,)),
    ImagePolicy("exact", (16, 20)),
]


def _encode(image: Image.Image, fmt: str, **settings) -> bytes:
    out = io.BytesIO()
    image.save(out, fmt, **settings)
    return out.getvalue()


def image_seeds() -> dict[str, bytes]:
    """Small real images in the encodings trees hold (a photo crop, so decoding is cheap)."""
    photo = Image.open(PILLOW / "hopper.jpg").convert("RGB").resize((48, 40))
    return {
        "baseline_420": _encode(photo, "JPEG", quality=85, subsampling=2),
        "baseline_444": _encode(photo, "JPEG", quality=85, subsampling=0),
        "progressive": _encode(photo, "JPEG", quality=85, progressive=True),
        "restart": _encode(photo, "JPEG", quality=85, restart_marker_blocks=2),
        "grey": _encode(photo.convert("L"), "JPEG", quality=85),
        "cmyk": _encode(photo.convert("CMYK"), "JPEG", quality=85),
        "exif_rotated": (PILLOW / "hopper_orientation_6.jpg").read_bytes(),
        "png": _encode(photo, "PNG"),
        "gif": _encode(photo.convert("P"), "GIF"),
        "webp": _encode(photo, "WEBP", quality=80),
        "tiff": _encode(photo, "TIFF"),
        # Arithmetic-coded JPEGs (sequential and progressive), which Pillow cannot write:
        # `jpegtran -arithmetic` of the 4:2:0 seed (tests/data/fuzz_seeds/README.md).
        **{path.stem: path.read_bytes() for path in sorted(SEED_FILES.glob("*.jpg"))},
    }


SEEDS = image_seeds()


def check_image_invariants(data: bytes, policy: ImagePolicy) -> None:
    try:
        stored = normalise_image(data, policy)
    except InputError as error:
        assert error.reason in IMAGE_REASONS and error.detail
        return
    with Image.open(io.BytesIO(stored.data)) as image:
        assert image.format == "JPEG" and image.mode == "RGB"
        pillow = np.asarray(image)
    assert pillow.shape == (stored.height, stored.width, 3)
    import tensorflow as tf

    assert tuple(tf.io.decode_jpeg(stored.data, channels=3).shape) == pillow.shape
    from loaders.jpeg_scale import RATIOS, decode_jpeg, scaled_shape

    # The loader's DCT-scaled decodes (loaders.jpeg_scale): libjpeg's size, and the same
    # picture: a scaled pixel is its block's average, so the means agree, but where the full
    # decode clipped (0 or 255: an average of clipped values is not the clipped average).
    unclipped = pillow.min() > 0 and pillow.max() < 255
    for ratio in RATIOS[1:]:
        scaled = decode_jpeg(tf.constant(stored.data), ratio).numpy()
        assert scaled.shape == (*scaled_shape(np.array(pillow.shape[:2]), ratio), 3)
        assert not unclipped or abs(float(scaled.mean()) - float(pillow.mean())) < 8, ratio
    strict = simplejpeg.decode_jpeg(stored.data, strict=True)
    assert np.array_equal(strict, pillow)
    if not stored.reencoded:  # kept: what a reader shows of the input, nothing lost
        with Image.open(io.BytesIO(data)) as source:
            assert np.array_equal(np.asarray(source.convert("RGB")), pillow)
    elif policy.mode == ORIGINAL:  # converted: exactly the JPEG of the source's RGB, at the
        # source's chroma resolution (a colour JPEG's own; grey 4:2:0; every other 4:4:4)
        with Image.open(io.BytesIO(data)) as source:
            converted = io.BytesIO()
            if source.format in ("JPEG", "MPO") and source.mode == "RGB":
                sampling = JpegImagePlugin.get_sampling(source)
            else:
                sampling = 2 if source.mode in ("1", "L", "LA", "I", "I;16", "F") else 0
            to_rgb(source).save(
                converted, "JPEG", quality=policy.jpeg_quality, subsampling=sampling
            )
        with Image.open(converted) as expected:
            assert np.array_equal(np.asarray(expected), pillow)


SAFE_PARSER = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False)


def check_xml_invariants(data: bytes, width: int, height: int) -> None:
    try:
        parsed = annotations.parse_annotation(data)
    except InputError as error:
        assert error.reason.startswith("annotation_") and error.detail
        return
    etree.fromstring(data, SAFE_PARSER)  # it parsed: so does lxml, on its own
    for obj in parsed.objects:
        box = obj.box
        assert all(math.isfinite(v) for v in (box.xmin, box.ymin, box.xmax, box.ymax))
        assert box.xmin < box.xmax and box.ymin < box.ymax
    classes = sorted({obj.name for obj in parsed.objects} | {"zebra"})
    if labels.BACKGROUND in classes:  # the build refuses such a vocabulary, naming it
        return
    vocabulary = labels.Vocabulary(tuple(classes))
    found = labels.image_label(parsed, None, vocabulary)
    if not parsed.objects:
        assert found.label == vocabulary.background_index
        return
    areas = [labels.clamped_area(o.box, parsed.width, parsed.height) for o in parsed.objects]
    main = areas.index(max(areas))
    assert found.label == vocabulary.index(parsed.objects[main].name)
    entry = IndexEntry("train", "k", "k.jpg", "k.xml", None, 1)
    labelled = LabelledEntry(entry, parsed, found.label, found.object_labels, found.source)
    try:
        boxes = normalised_boxes(labelled, width, height)
    except InputError as error:
        assert error.reason in (
            "size_mismatch",
            "annotation_box_outside_image",
            "annotation_degenerate_box",
        )
        return
    for xmin, ymin, xmax, ymax in boxes:
        assert 0 <= xmin < xmax <= 1 and 0 <= ymin < ymax <= 1


def check_found_case(path: pathlib.Path) -> None:
    """A kept case (tests/data/fuzz_cases): an `.xml` file, or image bytes under every policy."""
    data = path.read_bytes()
    if path.suffix == ".xml":
        check_xml_invariants(data, 640, 480)
    else:
        for policy in POLICIES:
            check_image_invariants(data, policy)
