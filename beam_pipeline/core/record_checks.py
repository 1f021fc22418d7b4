"""What `verify` checks in each record of a shard (`check_example`).

The record is an Example with every schema key of the build's schema version, of the right kind
and length, and no other key; its names and class texts UTF-8; its label agrees with its
one-hot (label -1 and no one-hot in an unlabelled split), its class text with the build's
metadata; its object lists (boxes, classes, flags and, from schema 2.1, views) are as long as
each other, their boxes inside [0, 1], their labels in the vocabulary, their texts those of
their labels; its image is a 3-channel JPEG that decodes as RGB at the recorded size, in Pillow
and in libjpeg-turbo strictly, whose SHA-256 is the record's key. `Tally` counts what the
metadata counts of a split (labels, objects per image, sizes, file names), for `check_tallies`
to hold the metadata's figures against, and for `stored_names` to look up the images that
`duplicates.jsonl` names.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import hashlib
import io
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
from PIL import Image

from beam_pipeline.core.formats import sniff_format
from beam_pipeline.core.jpegdata import check_jpeg_data
from beam_pipeline.core.rejections import InputError
from schemas import FEATURES, SCHEMA_VERSION, UNLABELLED, DatasetInfo
from schemas import features as F
from schemas.classes import BACKGROUND, FROM_BACKGROUND, FROM_NOTHING
from schemas.example_proto import Example
from schemas.features import records_schema, version_key

_OBJECT_KEYS = [f.key for f in FEATURES if f.length is None]


def check_example(
    record: bytes,
    num_classes: int,
    decode: bool = True,
    labelled: bool = True,
    schema_version: str = SCHEMA_VERSION,
    classes: Sequence[str] = (),
    tally: Tally | None = None,
) -> str | None:
    """What is wrong with one serialised Example (of a labelled split or not), or None; the
    record counted in `tally` when its features are the schema's.

    Keys newer than the build's `schema_version` are not required. A record that carries a key
    of a later schema is checked as that schema's record, and counted as one in `tally`
    (`check_schema` holds the metadata's version to them). With the build's `classes`, the
    label's class text must be the class the metadata names (`background` for the background
    index, empty when unlabelled).
    """
    try:
        example = Example.FromString(record)
    except Exception as error:  # noqa: BLE001 - protobuf raises its own DecodeError
        return f"not a tf.train.Example ({type(error).__name__})"
    written = records_schema(example.features.feature)
    if tally is not None:
        tally.schemas[written] += 1
    schema_version = max(schema_version, written, key=version_key)
    values, problem = _feature_values(example, num_classes, schema_version)
    if tally is not None and problem is None:
        tally.add(values)
    return (
        problem
        or _check_text(values)
        or _check_label(values, num_classes, labelled)
        or _check_objects(values, num_classes)
        or _check_class_text(values, num_classes, classes)
        or _check_image_features(values, decode)
    )


@functools.cache
def _schema_keys(schema_version: str) -> frozenset[str]:
    """The feature keys of a schema version (once per version, not per record)."""
    return frozenset(spec.key for spec in FEATURES if spec.in_schema(schema_version))


def _feature_values(
    example: Example, num_classes: int, schema_version: str
) -> tuple[dict[str, list[Any]], str | None]:
    """(the values of the schema's features by key, None), or what is wrong with the first
    feature that is missing, of another kind or of another length, or the first key that is
    not the schema's (a key of a later schema: the build's metadata claims an earlier one)."""
    features = example.features.feature
    values: dict[str, list[Any]] = {}
    if foreign := sorted(set(features) - _schema_keys(schema_version)):
        return values, f"feature {foreign[0]} is not in schema {schema_version}"
    for spec in FEATURES:
        if not spec.in_schema(schema_version):
            continue
        if spec.key not in features:
            return values, f"missing feature {spec.key}"
        kind = features[spec.key].WhichOneof("kind")
        if kind != spec.proto_kind:
            return values, f"{spec.key} is {kind}, expected {spec.proto_kind}"
        values[spec.key] = list(getattr(features[spec.key], kind).value)
        length = spec.num_values(num_classes)
        if length is not None and len(values[spec.key]) != length:
            return values, f"{spec.key} has {len(values[spec.key])} values, expected {length}"
    return values, None


# The text a build writes (its paths are UTF-8, `undecodable_path` refuses others; XML is text),
# which readers decode: a name that is not UTF-8 is a record someone else wrote or damaged.
_TEXT_KEYS = (F.FILENAME, F.SOURCE_ID, F.LABEL_TEXT, F.OBJECT_TEXT, F.OBJECT_VIEW)


def _check_text(values: dict[str, list[Any]]) -> str | None:
    for key in _TEXT_KEYS:
        for value in values.get(key, ()):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError:
                return f"{key} {value[:40]!r} is not UTF-8 text"
    return None


def _check_label(values: dict[str, list[Any]], num_classes: int, labelled: bool) -> str | None:
    label = values[F.LABEL][0]
    one_hot = values[F.ONE_HOT]
    if not labelled:
        if label != UNLABELLED or any(one_hot):
            return f"label {label} in an unlabelled split (expected {UNLABELLED}, one-hot all 0)"
    elif not 0 <= label <= num_classes:
        return f"label {label} outside [0, {num_classes}]"
    elif sum(one_hot) != 1 or one_hot[label] != 1:
        return f"one-hot does not encode label {label}"
    return None


def _check_objects(values: dict[str, list[Any]], num_classes: int) -> str | None:
    # Only the lists of the build's schema (a 2.0 record has no image/object/view).
    lengths = {len(values[key]) for key in _OBJECT_KEYS if key in values}
    if len(lengths) != 1:
        return "per-object lists have different lengths"
    boxes = zip(
        *(values[k] for k in (F.BBOX_XMIN, F.BBOX_YMIN, F.BBOX_XMAX, F.BBOX_YMAX)), strict=True
    )
    for i, (xmin, ymin, xmax, ymax) in enumerate(boxes):
        if not (0.0 <= xmin <= xmax <= 1.0 and 0.0 <= ymin <= ymax <= 1.0):
            return f"object {i} box {(xmin, ymin, xmax, ymax)} is not inside [0, 1]"
        if not F.box_has_area(xmin, ymin, xmax, ymax):  # never built: the loader drops it
            return f"object {i} box {(xmin, ymin, xmax, ymax)} has no area"
    if any(not 0 <= c < num_classes for c in values[F.OBJECT_LABEL]):
        return "an object label is outside the vocabulary"
    return None


def _check_class_text(
    values: dict[str, list[Any]], num_classes: int, classes: Sequence[str]
) -> str | None:
    if not classes:
        return None
    label = values[F.LABEL][0]
    name = "" if label == UNLABELLED else (classes[label] if label < num_classes else BACKGROUND)
    expected = name.encode("utf-8")
    if values[F.LABEL_TEXT] != [expected]:
        return (
            f"{F.LABEL_TEXT} is {values[F.LABEL_TEXT][0]!r}, but label {label} is "
            f"{expected!r} in the build's metadata"
        )
    # (the OD API finds an object's class by its text: a text of another class trains it so)
    objects = zip(values[F.OBJECT_LABEL], values[F.OBJECT_TEXT], strict=True)  # (lengths checked)
    for i, (number, text) in enumerate(objects):
        if text != (name := classes[number].encode("utf-8")):
            return (
                f"object {i}'s {F.OBJECT_TEXT} is {text!r}, but its label {number} is {name!r} "
                "in the build's metadata"
            )
    return None


def _check_image_features(values: dict[str, list[Any]], decode: bool) -> str | None:
    if values[F.FORMAT] != [F.IMAGE_FORMAT.encode()] or values[F.CHANNELS] != [F.IMAGE_CHANNELS]:
        return f"format {values[F.FORMAT]} / channels {values[F.CHANNELS]} is not 3-channel JPEG"
    if decode:
        problem = _check_image(values[F.ENCODED][0], values[F.WIDTH][0], values[F.HEIGHT][0])
        if problem:
            return problem
    if F.KEY_SHA256 in values:
        digest = hashlib.sha256(values[F.ENCODED][0]).hexdigest().encode("ascii")
        if values[F.KEY_SHA256] != [digest]:
            return f"{F.KEY_SHA256} is not the SHA-256 of the image bytes"
    return None


def _check_image(data: bytes, width: int, height: int) -> str | None:
    if (found := sniff_format(data)) != "JPEG":  # ("UnidentifiedImageError: ... BytesIO")
        return f"image is {f'a {found}' if found else 'no image format known'}, not a JPEG"
    try:
        with Image.open(io.BytesIO(data), formats=["JPEG"]) as image:
            image.load()
            size, mode = image.size, image.mode
    except Exception as error:  # noqa: BLE001 - any decoder failure means the image is bad
        return f"image does not decode ({type(error).__name__}: {error})"
    if mode != "RGB":
        return f"image is {mode}, not RGB"
    if size != (width, height):
        return f"image is {size[0]}x{size[1]}, the record says {width}x{height}"
    try:
        check_jpeg_data(data, mode, size)  # strictly: TensorFlow fails on much of what it refuses
    except InputError as error:
        return f"image data is damaged ({error.detail}); rebuild, or drop the record"
    return None


@dataclasses.dataclass
class Tally:
    """What a split's records count that its metadata counts too: examples per label (-1:
    unlabelled), per number of objects, per stored width and height; and 8 bytes of the
    SHA-256 of each file name (a record stored twice, another lost, keep every sum). And
    every Example per the schema its keys are of (`features.records_schema`), bad or not."""

    labels: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    objects: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    widths: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    heights: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    names: bytearray = dataclasses.field(default_factory=bytearray)
    schemas: collections.Counter = dataclasses.field(default_factory=collections.Counter)

    def add(self, values: dict[str, list[Any]]) -> None:
        self.labels[values[F.LABEL][0]] += 1
        self.objects[len(values[F.OBJECT_LABEL])] += 1
        self.widths[values[F.WIDTH][0]] += 1
        self.heights[values[F.HEIGHT][0]] += 1
        self.names += name_digest(values[F.FILENAME][0])

    def digests(self) -> list[bytes]:
        """The `name_digest` of each record's file name, in record order."""
        return [bytes(self.names[i : i + 8]) for i in range(0, len(self.names), 8)]

    def merge(self, other: Tally) -> None:
        for mine, theirs in zip(self._counters(), other._counters(), strict=True):
            mine.update(theirs)
        self.names += other.names

    def _counters(self) -> tuple[collections.Counter, ...]:
        return self.labels, self.objects, self.widths, self.heights, self.schemas


def name_digest(name: bytes) -> bytes:
    """What a `Tally` keeps of a record's file name: 8 bytes of its SHA-256."""
    return hashlib.sha256(name).digest()[:8]


def stored_names(tallies: Mapping[str, Tally], splits: Iterable[str]) -> Callable[[str, str], bool]:
    """Whether a split's records hold an image's file name, as `(split, name) -> bool`, from
    the `tallies` of the splits whose records were all read: True for a split of `splits`
    without one (a bad record: its names are not all known), False for another split. Each
    split's digests are sorted once, as it is first asked of (ImageNet's train: 10 MB)."""
    unknown = set(splits) - set(tallies)
    held: dict[str, np.ndarray] = {}

    def stored(split: str, name: str) -> bool:
        if split in unknown:
            return True
        if split not in held:
            names = tallies[split].names if split in tallies else b""
            held[split] = np.sort(np.frombuffer(bytes(names), dtype=np.uint64))
        digest = np.frombuffer(name_digest(name.encode("utf-8", errors="replace")), np.uint64)
        at = int(np.searchsorted(held[split], digest[0]))
        return bool(at < len(held[split]) and held[split][at] == digest[0])

    return stored


def check_schema(info: DatasetInfo, schemas: collections.Counter) -> str | None:
    """What the metadata's `schema_version` says that the records (`schemas`: how many are of
    each schema, `Tally.schemas`) do not: records of a later schema (the version edited, or
    another build's metadata), said once for the metadata, not for each record."""
    claimed, total = info.schema_version, sum(schemas.values())
    later = {v: n for v, n in schemas.items() if version_key(v) > version_key(claimed)}
    if not later:
        return None
    latest = max(later, key=version_key)
    keys = [f.key for f in FEATURES if f.in_schema(latest) and not f.in_schema(claimed)]
    disagree = (
        f"schema_version is {claimed}, but {{}} of schema {latest} (they carry "
        f"{' and '.join(keys)}, which schema {claimed} has not): the metadata and the records "
        "disagree; "
    )
    if later[latest] == total:
        return disagree.format(f"all {total} records are") + (
            f'set its schema_version back to "{latest}" (or rebuild)'
        )
    return disagree.format(f"{sum(later.values())} of its {total} records are") + (
        "records of two schemas in one build: rebuild it"
    )


def check_tallies(info: DatasetInfo, split_name: str, tally: Tally) -> Iterable[str]:
    """What the metadata of split `split_name` says that its records (`tally`: of records
    whose features are the schema's) do not: its class counts, its background and
    unlabelled label sources, its histograms (recorded from schema 1.2), a file name in two
    records. Each as a line for `build_info.json`."""
    split = info.splits[split_name]
    counted = tuple(tally.labels.get(i, 0) for i in range(info.num_classes + 1))
    if split.class_counts and tuple(split.class_counts) != counted:
        recorded = tuple(split.class_counts)
        size = max(len(recorded), len(counted))
        wrong = [i for i in range(size) if recorded[i : i + 1] != counted[i : i + 1]]
        names = [*info.classes, BACKGROUND]

        def said(counts: tuple[int, ...], i: int) -> str:
            return str(counts[i]) if i < len(counts) else "none"

        shown = ", ".join(
            f"{names[i] if i < len(names) else i} {said(recorded, i)} (records: {said(counted, i)})"
            for i in wrong[:3]
        )
        yield f"class_counts do not count its records: {shown}{' ...' if len(wrong) > 3 else ''}"
    sources = split.label_sources
    for source, label in ((FROM_BACKGROUND, info.background_index), (FROM_NOTHING, UNLABELLED)):
        if sources and sources.get(source, 0) != tally.labels.get(label, 0):
            yield (
                f"label_sources count {sources.get(source, 0)} {source}, its records hold "
                f"{tally.labels.get(label, 0)}"
            )
    if tuple(map(int, info.schema_version.split(".")[:2])) >= (1, 2):
        for field, found in (
            ("objects_per_image", tally.objects),
            ("image_widths", tally.widths),
            ("image_heights", tally.heights),
        ):
            if dict(getattr(split, field)) != dict(found):
                yield f"{field} do not count its records"
    digests = tally.digests()
    twice = sum(count - 1 for count in collections.Counter(digests).values() if count > 1)
    if twice:
        yield (
            f"{twice} of its records repeat another's image/filename (a record stored twice: "
            "rebuild it)"
        )
