"""Compact, deterministic Beam coders for the index element types.

Without them Beam pickles each dataclass (its class path and field names in every element), and
a runner that buffers PCollections in memory, like DirectRunner, grows with the tree. Each
element is turned into a tuple of primitives and encoded with Beam's FastPrimitivesCoder, which
spells no names; transforms declare their output types so Beam picks these.
"""

from __future__ import annotations

import dataclasses
import operator

from apache_beam import coders

from beam_pipeline.annotations import AnnotatedObject, Annotation, Box
from beam_pipeline.entries import FileRef, IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.rejections import Rejection


def _annotation_to(annotation: Annotation | None):
    if annotation is None:
        return None
    objects = tuple(
        (o.name, o.box.xmin, o.box.ymin, o.box.xmax, o.box.ymax, o.difficult, o.truncated)
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
        tuple(AnnotatedObject(o[0], Box(*o[1:5]), o[5], o[6]) for o in objects),
    )


def _fields_of(element_type) -> operator.attrgetter:
    """The fields of a dataclass of primitives, as a tuple (no deep copy: `astuple` would copy
    every value of every element at every stage)."""
    return operator.attrgetter(*(field.name for field in dataclasses.fields(element_type)))


_index_entry_fields = _fields_of(IndexEntry)
_CONVERTERS = {
    FileRef: (_fields_of(FileRef), lambda t: FileRef(*t)),
    IndexEntry: (_index_entry_fields, lambda t: IndexEntry(*t)),
    Rejection: (_fields_of(Rejection), lambda t: Rejection(*t)),
    ParsedEntry: (
        lambda p: (_index_entry_fields(p.entry), _annotation_to(p.annotation)),
        lambda t: ParsedEntry(IndexEntry(*t[0]), _annotation_from(t[1])),
    ),
    LabelledEntry: (
        lambda e: (
            _index_entry_fields(e.entry),
            _annotation_to(e.annotation),
            e.label,
            e.object_labels,
            e.source,
            e.folder_disagrees,
        ),
        lambda t: LabelledEntry(
            IndexEntry(*t[0]), _annotation_from(t[1]), t[2], tuple(t[3]), t[4], t[5]
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
