"""`tf.train.Example` message classes without importing TensorFlow.

The builder's workers only need to serialise Examples; importing TensorFlow for that costs
seconds and hundreds of MB per worker process (and a large install on every Dataflow worker).
These classes are built with protobuf's descriptor API from the same definitions as
tensorflow/core/example/{example,feature}.proto (same field numbers, proto3, packed scalars),
so they produce the same bytes; a test pins that against `tf.train.Example`. They live in their
own descriptor pool and package, so they never clash with TensorFlow's registration.
"""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_PACKAGE = "imagenet_tfrecords.example"
_F = descriptor_pb2.FieldDescriptorProto


def _field(
    message, name, number, field_type, *, label=_F.LABEL_OPTIONAL, type_name=None, oneof=None
):
    field = message.field.add(name=name, number=number, type=field_type, label=label)
    if type_name:
        field.type_name = f".{_PACKAGE}.{type_name}"
    if oneof is not None:
        field.oneof_index = oneof
    return field


def _file_descriptor() -> descriptor_pb2.FileDescriptorProto:
    proto = descriptor_pb2.FileDescriptorProto(
        name="imagenet_tfrecords/example.proto", package=_PACKAGE, syntax="proto3"
    )
    for name, field_type in (
        ("BytesList", _F.TYPE_BYTES),
        ("FloatList", _F.TYPE_FLOAT),
        ("Int64List", _F.TYPE_INT64),
    ):
        _field(proto.message_type.add(name=name), "value", 1, field_type, label=_F.LABEL_REPEATED)
    feature = proto.message_type.add(name="Feature")
    feature.oneof_decl.add(name="kind")
    _field(feature, "bytes_list", 1, _F.TYPE_MESSAGE, type_name="BytesList", oneof=0)
    _field(feature, "float_list", 2, _F.TYPE_MESSAGE, type_name="FloatList", oneof=0)
    _field(feature, "int64_list", 3, _F.TYPE_MESSAGE, type_name="Int64List", oneof=0)
    features = proto.message_type.add(name="Features")
    entry = features.nested_type.add(name="FeatureEntry")
    entry.options.map_entry = True
    _field(entry, "key", 1, _F.TYPE_STRING)
    _field(entry, "value", 2, _F.TYPE_MESSAGE, type_name="Feature")
    _field(
        features,
        "feature",
        1,
        _F.TYPE_MESSAGE,
        label=_F.LABEL_REPEATED,
        type_name="Features.FeatureEntry",
    )
    example = proto.message_type.add(name="Example")
    _field(example, "features", 1, _F.TYPE_MESSAGE, type_name="Features")
    return proto


_POOL = descriptor_pool.DescriptorPool()
_POOL.Add(_file_descriptor())

Example = message_factory.GetMessageClass(_POOL.FindMessageTypeByName(f"{_PACKAGE}.Example"))
