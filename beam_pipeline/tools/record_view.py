"""A record as plain data, for `inspect` and `show`: its features (bytes as text, the image
summarised, floats as the float32 they are), its label and objects named by the build's
classes, and what `verify` finds wrong in it; JSON of it that any parser reads.

A damaged record (written over after the build) is described as far as it can be: labels,
sizes and boxes are read only from values of the schema's kind (`readback.typed_values`), a
NaN or infinity is shown as it is, and `problem` says what `verify` would.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import math
import struct
from collections.abc import Sequence
from typing import Any

from PIL import Image

from beam_pipeline.core.formats import sniff_format
from beam_pipeline.core.record_checks import check_example
from beam_pipeline.output.readback import UNLABELLED_NAME, feature_values, first_value, typed_values
from schemas import FEATURES, UNLABELLED, DatasetInfo
from schemas import features as F
from schemas.example_proto import Example


@dataclasses.dataclass(frozen=True)
class Record:
    """One example read from a shard, as plain Python values by feature key (`show`'s tiles)."""

    index: int
    shard: str
    values: dict[str, list[Any]]


_BOX_KEYS = (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)
_FLOAT32_MAX = struct.unpack("<f", b"\xff\xff\x7f\x7f")[0]


def record_features(record: bytes, shard: str = "", index: int = 0) -> dict[str, list[Any]]:
    """The record's features by key; ValueError naming record `index` of `shard` for bytes
    that are no Example."""
    try:
        example = Example.FromString(record)  # parsed here, so a bad record gets its own error
    except Exception as error:  # noqa: BLE001 - protobuf raises its own DecodeError
        raise ValueError(
            f"{shard} record {index} is not a tf.train.Example ({type(error).__name__})"
        ) from None
    return feature_values(example)


def float32(value: float) -> float:
    """The shortest decimal that reads back as the same float32 (0.3, not 0.30000001192...)."""
    packed = struct.pack("<f", value)
    for digits in range(1, 10):
        candidate = float(f"{value:.{digits}g}")
        # (A decimal of float32's largest, rounded up, is past it: "float too large to pack".)
        if abs(candidate) <= _FLOAT32_MAX and struct.pack("<f", candidate) == packed:
            return candidate
    return value


def _pixels(value: float) -> float | int:
    if not math.isfinite(value):  # a damaged record's NaN or infinity, shown as it is
        return value
    rounded = round(value, 2)
    return int(rounded) if rounded == int(rounded) else rounded


def image_summary(data: bytes) -> dict[str, Any]:
    """Format (sniffed), byte length, decoded size and mode, SHA-256 of image bytes."""
    summary: dict[str, Any] = {
        "format": sniff_format(data) or "unknown",
        "num_bytes": len(data),
        "width": None,
        "height": None,
        "mode": None,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            summary.update(width=image.width, height=image.height, mode=image.mode)
    except Exception as error:  # noqa: BLE001 - any decoder failure is reported, not raised
        summary["error"] = f"{type(error).__name__}: {error}"
    return summary


def describe_record(record: bytes, info: DatasetInfo | None, shard: str = "", index: int = 0):
    """The record as plain data: features (bytes as text, the image summarised), label, objects.

    Class names come from `info` when given, else from the record's own text features.
    """
    values = record_features(record, shard, index)
    features: dict[str, Any] = {}
    typed, _ = typed_values(values)  # label, size and boxes from values of the schema's kind
    for key in [f.key for f in FEATURES] + sorted(set(values) - {f.key for f in FEATURES}):
        if key not in values:
            continue
        if key == F.ENCODED and key in typed:
            features[key] = [image_summary(data) for data in values[key]]
        elif values[key] and isinstance(values[key][0], bytes):
            features[key] = [_text(v) for v in values[key]]
        elif values[key] and isinstance(values[key][0], float):
            features[key] = [float32(v) for v in values[key]]
        else:
            features[key] = values[key]
    names = info.class_list.names if info else None
    label = first_value(typed, F.LABEL, UNLABELLED)
    label_name = _name(names, label, _text(first_value(typed, F.LABEL_TEXT, b"")))
    width = first_value(typed, F.WIDTH, 0)
    height = first_value(typed, F.HEIGHT, 0)
    objects = []
    columns = [[float32(v) for v in typed.get(key, [])] for key in _BOX_KEYS]
    for i, box in enumerate(zip(*columns, strict=False)):
        object_label = _at(typed, F.OBJECT_LABEL, i, UNLABELLED)
        text = _text(_at(typed, F.OBJECT_TEXT, i, b""))
        objects.append(
            {
                "label": object_label,
                "name": _name(names, object_label, text),
                "text": text,
                "box": list(box),
                "box_pixels": [
                    _pixels(box[0] * width),
                    _pixels(box[1] * height),
                    _pixels(box[2] * width),
                    _pixels(box[3] * height),
                ],
                "difficult": _at(typed, F.OBJECT_DIFFICULT, i, None),
                "truncated": _at(typed, F.OBJECT_TRUNCATED, i, None),
            }
        )
    missing = [f.key for f in FEATURES if f.key not in values]
    return {
        "features": features,
        "missing": missing,
        "problem": _problem(record, info, shard),
        "label": {"id": label, "name": label_name},
        "size": [width, height],
        "objects": objects,
    }


def _problem(record: bytes, info: DatasetInfo | None, shard: str) -> str | None:
    """What `verify` finds wrong in the record's features (its image not decoded) by the
    build's metadata; None when it finds nothing or there is no metadata to hold it to."""
    if info is None:
        return None
    split, _ = split_of_shard(shard, info)
    labelled = info.splits[split].labelled if split else True
    return check_example(
        record, info.num_classes, False, labelled, info.schema_version, info.classes
    )


def _text(value: bytes) -> str:
    return value.decode("utf-8", "backslashreplace")


def _at(features: dict[str, list[Any]], key: str, i: int, default: Any) -> Any:
    column = features.get(key, [])
    return column[i] if i < len(column) else default


def _name(names: Sequence[str] | None, label: int, text: str) -> str:
    """The class of `label` by the build's `names` (with background); the record's own text
    without them; a label outside them said so (was named by the record's text)."""
    if label == UNLABELLED:
        return UNLABELLED_NAME
    if names is not None and 0 <= label < len(names):
        return names[label]
    if names is not None:
        return f"outside the build's {len(names)} labels: run verify"
    return text or "?"


def split_of_shard(shard: str, info: DatasetInfo | None) -> tuple[str | None, int | None]:
    """(split, record count) of a shard according to the build's metadata."""
    base = shard.rstrip("/").rsplit("/", 1)[-1]
    for name, split in info.splits.items() if info else ():
        for entry in split.shards:
            if entry.file == base:
                return name, entry.num_examples
    return None, None


def to_json(value: Any, indent: str = "") -> str:
    """JSON with one line per object key and lists of plain values kept on one line."""
    if isinstance(value, dict) and value:
        inner = indent + "  "
        items = [f"{inner}{json.dumps(k)}: {to_json(v, inner)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    if isinstance(value, list) and any(isinstance(v, (dict, list)) for v in value):
        inner = indent + "  "
        return "[\n" + ",\n".join(inner + to_json(v, inner) for v in value) + "\n" + indent + "]"
    return json.dumps(_json_number(value), ensure_ascii=False, allow_nan=False)


def _json_number(value: Any) -> Any:
    """`value` with each NaN or infinity (a damaged record's) as the string "nan", "inf" or
    "-inf": JSON has no such numbers, and `json.dumps` would write ones no parser reads."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, list):
        return [_json_number(v) for v in value]
    return value


def damage_of(values: dict[str, list[Any]], wrong: list[str]) -> str:
    """What `show`'s tile says of a damaged record ("" of a sound one; verify names all): its first
    feature of another kind than the schema's, its boxes that are not numbers."""
    corners = zip(*(values.get(key, []) for key in _BOX_KEYS), strict=False)
    boxes = [str(i) for i, box in enumerate(corners) if not all(map(math.isfinite, box))]
    said = [f"{key} of another type" for key in wrong[:1]]
    said += [f"box {', '.join(boxes)} not a number"] if boxes else []
    return f"damaged: {'; '.join(said)}: run verify" if said else ""
