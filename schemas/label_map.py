"""`label_map.pbtxt`: the TF Object Detection API's class list, written beside the shards;
and `label_map.csv`, the same ids as TensorFlow Model Garden's `TfExampleDecoderLabelMap`
reads them (`id,name` rows), for its detectors, which also take class 0 for background.

The OD API reserves id 0 for the background and looks classes up by name
(`image/object/class/text`), so the map gives class `i` of the build the id `i + 1`. The message
classes are built with protobuf's descriptor API from the same definitions as the OD API's
`protos/string_int_label_map.proto` (proto2, same field numbers), so `text_format` writes and
reads the file as the OD API's `label_map_util` does, without the OD API installed.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Mapping, Sequence

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format

LABEL_MAP_FILE = "label_map.pbtxt"
LABEL_MAP_CSV_FILE = "label_map.csv"
_PACKAGE = "imagenet_tfrecords.object_detection"
_F = descriptor_pb2.FieldDescriptorProto


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="imagenet_tfrecords/string_int_label_map.proto", package=_PACKAGE, syntax="proto2"
    )
    item = proto.message_type.add(name="StringIntLabelMapItem")
    item.field.add(name="name", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    item.field.add(name="id", number=2, type=_F.TYPE_INT32, label=_F.LABEL_OPTIONAL)
    item.field.add(name="display_name", number=3, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    label_map = proto.message_type.add(name="StringIntLabelMap")
    label_map.field.add(
        name="item",
        number=1,
        type=_F.TYPE_MESSAGE,
        label=_F.LABEL_REPEATED,
        type_name=f".{_PACKAGE}.StringIntLabelMapItem",
    )
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())
StringIntLabelMap = message_factory.GetMessageClass(
    _POOL.FindMessageTypeByName(f"{_PACKAGE}.StringIntLabelMap")
)


def label_map_text(classes: Sequence[str], display_names: Mapping[str, str] | None = None) -> str:
    """The label map of a build's classes: ids 1..N in class order (the background has none)."""
    label_map = StringIntLabelMap()
    for index, name in enumerate(classes):
        item = label_map.item.add(name=name, id=index + 1)
        if display_names and display_names.get(name):
            item.display_name = display_names[name]
    return text_format.MessageToString(label_map)


def read_label_map(text: str) -> dict[str, int]:
    """{name: id} of a label map's text, as the OD API's `get_label_map_dict` gives it."""
    label_map = text_format.Parse(text, StringIntLabelMap())
    return {item.name: item.id for item in label_map.item}


def label_map_classes(text: str) -> tuple[tuple[str, ...], dict[str, str]]:
    """(classes in id order, {class: display name}) of an OD API label map (a `--labels_file`
    such as `pascal_label_map.pbtxt`, or a build's own). ValueError, saying why, for text that
    does not parse, an item without a name or an id of 1 or more, or a name or id twice."""
    try:
        items = text_format.Parse(text, StringIntLabelMap()).item
    except text_format.ParseError as error:
        raise ValueError(
            f"a label map (item {{ name: ... id: ... }}) that does not parse: {error}"
        ) from None
    if not items:
        raise ValueError("the label map has no item")
    for item in items:
        if not item.name or not item.HasField("id") or item.id < 1:
            raise ValueError(
                f"label map item {text_format.MessageToString(item, as_one_line=True)!r} needs a "
                "name and an id of 1 or more (the OD API's 0 is the background, which the build "
                "adds itself)"
            )
    for field in ("name", "id"):
        values = [getattr(item, field) for item in items]
        twice = sorted({value for value in values if values.count(value) > 1})
        if twice:
            raise ValueError(f"the label map gives these {field}s to several items: {twice[:10]}")
    ordered = sorted(items, key=lambda item: item.id)
    shown = {item.name: item.display_name for item in ordered if item.display_name}
    return tuple(item.name for item in ordered), shown


def renumbered_note(text: str) -> str | None:
    """What a build says of a label map (a `--labels_file`, parsed by `label_map_classes`)
    whose ids are not 1..N: the build numbers its classes in id order, and writes 1..N into
    its own label map (a COCO-style map with gaps was renumbered without a word); None for
    one whose ids are 1..N."""
    ids = sorted(item.id for item in text_format.Parse(text, StringIntLabelMap()).item)
    if ids == list(range(1, len(ids) + 1)):
        return None
    shown = ", ".join(map(str, ids[:6])) + (", ..." if len(ids) > 6 else "")
    return (
        f"Note: --labels_file's ids ({shown}) are not kept: the build numbers its {len(ids)} "
        f"classes 0 to {len(ids) - 1} in id order (its label_map.pbtxt and label_map.csv: 1 "
        f"to {len(ids)}); a reader of the OD API's finds objects by their class text"
    )


def label_map_csv(classes: Sequence[str]) -> str:
    """The label map as Model Garden's CSV: an `id,name` row per class, ids 1..N in class order
    (a name with a comma or a quote quoted, as its `csv.reader` reads it)."""
    text = io.StringIO()
    writer = csv.writer(text, lineterminator="\n")
    for index, name in enumerate(classes):
        writer.writerow([index + 1, name])
    return text.getvalue()
