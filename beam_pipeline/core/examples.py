"""LabelledEntry + NormalisedImage → serialised `tf.train.Example` bytes.

Boxes are normalised by the decoded image size (never by the XML's `<size>`, which is only
checked against it) and clamped to [0, 1]. Serialisation is deterministic (map keys sorted),
so the same input always gives the same bytes.
"""

from __future__ import annotations

import array
import dataclasses

from beam_pipeline.core.entries import LabelledEntry
from beam_pipeline.core.images import NormalisedImage
from beam_pipeline.core.labels import Vocabulary, main_object_index
from beam_pipeline.core.rejections import InputError
from schemas import features as F
from schemas.example_proto import Example


def _clamp(value: float) -> float:
    return min(max(value, 0.0), 1.0)


def normalised_boxes(
    labelled: LabelledEntry, width: int, height: int
) -> list[tuple[float, float, float, float]]:
    """(xmin, ymin, xmax, ymax) of every object, normalised to the decoded image and clamped.

    Raises:
      InputError: `size_mismatch` when the XML's `<size>` disagrees with the decoded image;
        `annotation_box_outside_image` when a box has no area inside the image;
        `annotation_degenerate_box` when it has none once stored as float32.
    """
    annotation = labelled.annotation
    if annotation is None:
        return []
    if annotation.width is not None and (annotation.width, annotation.height) != (width, height):
        turned = (annotation.width, annotation.height) == (height, width)
        raise InputError(
            "size_mismatch",
            f"XML <size> is {annotation.width}x{annotation.height}, the image decodes to "
            f"{width}x{height}"
            + (
                " (turned: a photo whose EXIF orientation a labelling tool applied, which the "
                "build does not; turn its pixels to match, e.g. exiftran -ai, or fix the XML)"
                if turned
                else ""
            ),
        )
    boxes = []
    for obj in annotation.objects:
        box = (
            _clamp(obj.box.xmin / width),
            _clamp(obj.box.ymin / height),
            _clamp(obj.box.xmax / width),
            _clamp(obj.box.ymax / height),
        )
        if box[2] <= box[0] or box[3] <= box[1]:
            raise InputError(
                "annotation_box_outside_image",
                f"{obj.name} box {obj.box} lies outside the {width}x{height} image",
            )
        stored = array.array("f", box)  # as the record holds them
        if not F.box_has_area(*stored):  # (5 to 5.0000001 px: no width once float32)
            raise InputError(
                "annotation_degenerate_box",
                f"{obj.name} box {obj.box} has no width or height once stored (float32) for "
                f"the {width}x{height} image",
            )
        boxes.append(box)
    return boxes


def check_main_object(labelled: LabelledEntry, width: int, height: int) -> None:
    """Raises InputError(`size_unknown`) when the label would change with the decoded size.

    The labelling step clamps boxes to the XML's `<size>` or, without one, to the size in the
    image's header; only when it could not read that header did it compare unclamped areas.
    """
    annotation = labelled.annotation
    if annotation is None or annotation.width is not None or len(annotation.objects) < 2:
        return
    main = main_object_index(dataclasses.replace(annotation, width=width, height=height))
    assert main is not None  # two objects or more
    if labelled.object_labels[main] != labelled.label:
        raise InputError(
            "size_unknown",
            f"the XML has no <size> and the image's header was unreadable when it was labelled; "
            f"clamped to the {width}x{height} image its largest box is object #{main} "
            f"({annotation.objects[main].name}), not the one its label came from; rebuild",
        )


def build_example(labelled: LabelledEntry, image: NormalisedImage, vocabulary: Vocabulary) -> bytes:
    """Serialises one example; raises InputError for geometry that does not fit the image."""
    boxes = normalised_boxes(labelled, image.source_width, image.source_height)
    check_main_object(labelled, image.source_width, image.source_height)
    objects = labelled.annotation.objects if labelled.annotation is not None else ()
    entry = labelled.entry
    values = {
        F.ENCODED: [image.data],
        F.FORMAT: [F.IMAGE_FORMAT.encode()],
        F.HEIGHT: [image.height],
        F.WIDTH: [image.width],
        F.CHANNELS: [F.IMAGE_CHANNELS],
        F.FILENAME: [entry.filename.encode("utf-8")],
        F.SOURCE_ID: [entry.key.encode("utf-8")],
        F.KEY_SHA256: [image.sha256.encode("ascii")],
        F.LABEL: [labelled.label],
        F.LABEL_TEXT: [vocabulary.name(labelled.label).encode("utf-8")],
        F.ONE_HOT: vocabulary.one_hot(labelled.label),
        F.BBOX_XMIN: [box[0] for box in boxes],
        F.BBOX_YMIN: [box[1] for box in boxes],
        F.BBOX_XMAX: [box[2] for box in boxes],
        F.BBOX_YMAX: [box[3] for box in boxes],
        F.OBJECT_LABEL: list(labelled.object_labels),
        F.OBJECT_TEXT: [obj.name.encode("utf-8") for obj in objects],
        F.OBJECT_DIFFICULT: [int(obj.difficult) for obj in objects],
        F.OBJECT_TRUNCATED: [int(obj.truncated) for obj in objects],
        F.OBJECT_VIEW: [obj.pose.encode("utf-8") for obj in objects],
    }
    example = Example()
    feature_map = example.features.feature
    for feature in F.FEATURES:
        getattr(feature_map[feature.key], feature.proto_kind).value.extend(values[feature.key])
    return example.SerializeToString(deterministic=True)
