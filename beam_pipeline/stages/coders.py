"""Compact, deterministic Beam coders for the index element types.

Without them Beam pickles each dataclass (its class path and field names in every element), and
a runner that buffers PCollections in memory, like DirectRunner, grows with the tree. Each
element is turned into a tuple of primitives and encoded with Beam's FastPrimitivesCoder, which
spells no names; transforms declare their output types so Beam picks these.

A local build's coordinator (FnApiRunner) relays every byte of the index between stages, at
~10 ns a byte, so the tuples spell nothing twice: a file's path is stored as what surrounds
its pairing key in it (`Data/DET/` and `.JPEG` around `train/n01/n01_1`), a box corner
that is a whole number as an integer (1-3 bytes instead of 9), and an object's pose only when
it has one. All are exact: decoding gives back the same strings and floats.
"""

from __future__ import annotations

import dataclasses
import math
import operator

from apache_beam import coders

from beam_pipeline.core.annotations import AnnotatedObject, Annotation, Box
from beam_pipeline.core.entries import FileRef, IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.core.rejections import Rejection


def _path_to(path: str | None, key: str):
    """`path` as (head, level, tail) when it is head + the key (level 0) or the key without its
    first component (level 1, a VOC year's `2007/000001` in `VOC2007/JPEGImages/000001.jpg`)
    + a tail without a `/`; otherwise the path itself."""
    if path is None:
        return None
    part = key
    for level in (0, 1):
        if part:
            start = path.rfind(part)
            if start >= 0 and "/" not in path[start + len(part) :]:
                return path[:start], level, path[start + len(part) :]
        part = key.partition("/")[2]
    return path


def _required_path_from(value, key: str) -> str:
    path = _path_from(value, key)
    if path is None:
        raise ValueError(f"an index record of {key!r} lacks its path")
    return path


def _path_from(value, key: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    head, level, tail = value
    return head + (key if level == 0 else key.partition("/")[2]) + tail


_INT_EXACT = 2**53


def _number_to(value: float):
    """A whole float as an int (varint-coded); -0.0, fractions, huge and non-finite floats stay
    floats, so `_number_from` gives back the same float."""
    if (
        isinstance(value, float)
        and value.is_integer()
        and abs(value) < _INT_EXACT
        and math.copysign(1.0, value) > 0
    ):
        return int(value)
    return value


def _annotation_to(annotation: Annotation | None):
    if annotation is None:
        return None
    objects = tuple(
        (
            o.name,
            _number_to(o.box.xmin),
            _number_to(o.box.ymin),
            _number_to(o.box.xmax),
            _number_to(o.box.ymax),
            o.difficult,
            o.truncated,
            *((o.pose,) if o.pose else ()),  # only when there is one: ILSVRC DET has none
        )
        for o in annotation.objects
    )
    return annotation.width, annotation.height, objects


def _annotation_from(value) -> Annotation | None:
    if value is None:
        return None
    width, height, objects = value
    return Annotation(
        width,
        height,
        tuple(
            AnnotatedObject(o[0], Box(float(o[1]), float(o[2]), float(o[3]), float(o[4])), *o[5:])
            for o in objects
        ),
    )


def _fields_of(element_type) -> operator.attrgetter:
    """The fields of a dataclass of primitives, as a tuple (no deep copy: `astuple` would copy
    every value of every element at every stage)."""
    return operator.attrgetter(*(field.name for field in dataclasses.fields(element_type)))


def _file_ref_to(ref: FileRef):
    path = _path_to(ref.relative_path, ref.key)
    return path, ref.key, ref.split, ref.num_bytes, ref.folder_class, ref.file_version


def _file_ref_from(value) -> FileRef:
    path, key, split, num_bytes, folder_class, file_version = value
    return FileRef(
        _required_path_from(path, key), key, split, num_bytes, folder_class, file_version
    )


def _entry_to(entry: IndexEntry):
    key = entry.key
    return (
        entry.split,
        key,
        _path_to(entry.filename, key),
        _path_to(entry.annotation_filename, key),
        entry.folder_class,
        entry.num_bytes,
        entry.file_version,
    )


def _entry_from(value) -> IndexEntry:
    split, key, filename, annotation_filename, folder_class, num_bytes, file_version = value
    return IndexEntry(
        split,
        key,
        _required_path_from(filename, key),
        _path_from(annotation_filename, key),
        folder_class,
        num_bytes,
        file_version,
    )


_CONVERTERS = {
    FileRef: (_file_ref_to, _file_ref_from),
    IndexEntry: (_entry_to, _entry_from),
    Rejection: (_fields_of(Rejection), lambda t: Rejection(*t)),
    ParsedEntry: (
        lambda p: (_entry_to(p.entry), _annotation_to(p.annotation)),
        lambda t: ParsedEntry(_entry_from(t[0]), _annotation_from(t[1])),
    ),
    LabelledEntry: (
        lambda e: (
            _entry_to(e.entry),
            _annotation_to(e.annotation),
            e.label,
            e.object_labels,
            e.source,
            e.folder_disagrees,
        ),
        lambda t: LabelledEntry(
            _entry_from(t[0]), _annotation_from(t[1]), t[2], tuple(t[3]), t[4], t[5]
        ),
    ),
}


class _TupleCoder(coders.Coder):
    """Encodes one element type as a tuple of primitives."""

    def __init__(self, element_type):
        self._type = element_type
        self._inner = coders.FastPrimitivesCoder()

    def encode(self, value):
        return self._inner.encode(_CONVERTERS[self._type][0](value))

    def decode(self, encoded):
        return _CONVERTERS[self._type][1](self._inner.decode(encoded))

    def is_deterministic(self):
        return True

    def to_type_hint(self):
        return self._type

    def __eq__(self, other):
        return type(self) is type(other) and self._type is other._type

    def __hash__(self):
        return hash((type(self), self._type))


class FileRefCoder(_TupleCoder):
    def __init__(self):
        super().__init__(FileRef)


class IndexEntryCoder(_TupleCoder):
    def __init__(self):
        super().__init__(IndexEntry)


class RejectionCoder(_TupleCoder):
    def __init__(self):
        super().__init__(Rejection)


class ParsedEntryCoder(_TupleCoder):
    def __init__(self):
        super().__init__(ParsedEntry)


class LabelledEntryCoder(_TupleCoder):
    def __init__(self):
        super().__init__(LabelledEntry)


for _coder in (FileRefCoder, IndexEntryCoder, RejectionCoder, ParsedEntryCoder, LabelledEntryCoder):
    coders.registry.register_coder(_coder().to_type_hint(), _coder)
