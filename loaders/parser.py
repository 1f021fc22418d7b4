"""The parse step of `load_dataset`: one serialized record (and its reader's note) to one
dataset element, as the load's `LoadSpec` asks: the image cropped or resized, the label checked
against the build's classes, a detection target in the chosen box format.

A record whose content is refused (a feature missing or of another type, a label or object class
outside the build's, box coordinates and object classes of different counts, an image that is not
a JPEG, a training crop's box outside [0, 1]) fails the epoch with an error that names its shard
(`record_source`): each check is an op whose message is formatted only where it fails, nothing
is built per record."""

from __future__ import annotations

import functools

import tensorflow as tf

from loaders.preprocessing import eval_view, labelled_boxes, train_view, view_boxes
from loaders.reader import checked_record, record_source
from loaders.spec import CLASS_LABELS, LoadSpec
from schemas import features as F
from schemas import tf_feature_spec


class RecordParser:
    """One serialized record and its note (`read_shard`'s; with a seed when training) → one
    dataset element."""

    def __init__(self, num_classes: int, num_labels: int, spec: LoadSpec):
        self.num_labels = num_labels  # the one-hot width: with the background column or not
        self.num_classes = num_classes
        self.spec = spec
        detection = spec.label_mode == "detection"
        crops = spec.training and spec.config.random_crop
        # The crop keeps the labelled object: the label's boxes (`labelled_boxes`).
        self.labelled_crop = crops and spec.label_mode in CLASS_LABELS
        # The DCT scale of an evaluation's decode, from the record's size, not the JPEG's header.
        self.stored_shape = not spec.training and spec.config.dct_scaling
        keys = (
            F.ENCODED,
            *((F.LABEL,) if spec.label_mode in CLASS_LABELS else ()),
            *(F.BOX_KEYS_YX if detection or crops else ()),
            *((F.OBJECT_LABEL,) if detection or self.labelled_crop else ()),
            *((F.OBJECT_DIFFICULT,) if detection and spec.difficult != "keep" else ()),
            *((F.FILENAME,) if spec.with_filenames else ()),
            *((F.HEIGHT, F.WIDTH) if self.stored_shape else ()),
        )
        self.features = tf_feature_spec(num_classes, keys)

    def __call__(self, record, note, seed=None):
        spec = self.spec
        source = record_source(note)
        parsed = self._parsed(checked_record(record, note), source)
        boxes = _stacked_boxes(parsed, source) if F.BBOX_YMIN in parsed else None
        if spec.label_mode == "detection":
            boxes, objects = self._detected(parsed, boxes, source)
        elif self.labelled_crop:
            boxes = labelled_boxes(boxes, parsed[F.OBJECT_LABEL], parsed[F.LABEL])
        encoded = _checked_jpeg(parsed[F.ENCODED], source)
        if spec.training:
            box_check = functools.partial(_checked_box, source=source)
            image, view = train_view(
                encoded, boxes, spec.image_size, seed, spec.config, spec.dtype, box_check=box_check
            )
        else:
            shape = None
            if self.stored_shape:
                shape = tf.cast(tf.stack([parsed[F.HEIGHT], parsed[F.WIDTH]]), tf.int32)
            image, view = eval_view(
                encoded, spec.image_size, spec.config, spec.dtype, stored_shape=shape
            )
        filenames = (parsed[F.FILENAME],) if spec.with_filenames else ()
        if spec.label_mode is None:
            return (image, *filenames) if filenames else image
        if spec.label_mode == "detection":
            target = self._objects(*view_boxes(boxes, objects, view))
            if filenames:
                target["filename"] = filenames[0]
            return image, target
        label = self._checked_label(parsed[F.LABEL], source)
        if spec.label_mode == "one_hot":
            label = tf.one_hot(label, self.num_labels, dtype=tf.float32)
        elif spec.label_mode == "binary":
            label = tf.reshape(tf.cast(label, tf.float32), [1])
        return (image, label, *filenames)

    def seeded(self, pair, seed):
        """The element of a training record: `((record, note), seed)`."""
        return self(*pair, seed)

    def _parsed(self, record, source):
        """The record's features, the variable-length ones as their values (dense). Parsed as
        a batch of one: TensorFlow's error for a feature missing or of another type then names
        `source` ("Name: shard PATH, Key: ..."); `parse_single_example`'s named no record."""
        parsed = tf.io.parse_example(record[None], self.features, example_names=source)
        return {
            key: value.values if isinstance(value, tf.SparseTensor) else value[0]
            for key, value in parsed.items()
        }

    def _checked_label(self, label, source):
        """The record's int64 label as int32, or an error while iterating, naming its shard
        (`source`), for one past the loaded columns (a class list cut in build_info.json made
        tf.one_hot an all-zero row, silently). Checked before the cast: cast first, 2**32 + 2
        came out as 2."""
        within = tf.logical_and(label >= 0, label < self.num_labels)
        check = tf.debugging.Assert(
            within,
            [
                source,
                "holds a record whose label",
                label,
                f"is not one of the {self.num_labels} labels loaded: the build's metadata and "
                "records disagree (python -m beam_pipeline verify names what)",
            ],
        )
        with tf.control_dependencies([check]):
            return tf.cast(label, tf.int32)

    def _checked_objects(self, classes, boxes, source):
        """The record's object classes as [N, 1], or an error while iterating, naming its
        shard (`source`), for a class past the build's or a count other than the boxes' (a
        crafted record's [9] in a build of 4 classes came out as it was). Checked as int64,
        then cast (2**32 + 3 came out as 3)."""
        within = tf.reduce_all(tf.logical_and(classes >= 0, classes < self.num_classes))
        check = tf.debugging.Assert(
            tf.logical_and(within, tf.size(classes) == tf.shape(boxes)[0]),
            [
                source,
                "holds a record whose object classes",
                classes,
                f"are not one class a box, each one of the build's {self.num_classes}: its "
                "metadata and records disagree (python -m beam_pipeline verify names what)",
            ],
        )
        with tf.control_dependencies([check]):
            return tf.cast(classes, tf.int32)[:, None]

    def _detected(self, parsed, boxes, source):
        """(boxes, objects) of the record: `objects` [N, 1] classes, or [N, 2] classes and
        difficult flags; with `difficult="drop"`, the difficult ones are left out here, before
        the training crop, which then ignores them too."""
        objects = self._checked_objects(parsed[F.OBJECT_LABEL], boxes, source)
        if self.spec.difficult == "keep":
            return boxes, objects
        flags = tf.cast(parsed[F.OBJECT_DIFFICULT], tf.int32)
        objects = tf.concat([objects, flags[:, None]], axis=1)
        if self.spec.difficult == "drop":
            easy = flags == 0
            return tf.boolean_mask(boxes, easy), tf.boolean_mask(objects, easy)
        return boxes, objects

    def _objects(self, boxes, objects):
        """{"boxes", "classes"[, "difficult"]} of one image in the chosen format, cut/padded to
        `max_boxes`; `objects`: [N, 1] classes, or [N, 2] classes and difficult flags."""
        box_format, max_boxes = self.spec.bounding_box_format, self.spec.max_boxes
        if box_format in ("yxyx", "xyxy"):
            height, width = self.spec.image_size
            boxes = boxes * tf.constant([height, width, height, width], tf.float32)
        if box_format in ("rel_xyxy", "xyxy"):
            boxes = tf.gather(boxes, [1, 0, 3, 2], axis=1)
        if max_boxes is not None:
            pad = tf.maximum(max_boxes - tf.shape(objects)[0], 0)
            boxes = tf.pad(boxes[:max_boxes], [[0, pad], [0, 0]], constant_values=-1.0)
            objects = tf.pad(objects[:max_boxes], [[0, pad], [0, 0]], constant_values=-1)
            boxes = tf.ensure_shape(boxes, [max_boxes, 4])
            objects = tf.ensure_shape(objects, [max_boxes, None])
        target = {"boxes": boxes, "classes": objects[:, 0]}
        if self.spec.difficult == "flag":
            target["difficult"] = objects[:, 1]
        return target

    @staticmethod
    def padding_values(element_spec):
        """`padded_batch`'s padding: -1 for boxes, classes and flags, 0 / "" for the rest."""
        image_spec, target_spec = element_spec
        pads = {
            key: tf.constant(-1, spec.dtype)
            if key in ("boxes", "classes", "difficult")
            else tf.constant("")
            for key, spec in target_spec.items()
        }
        return tf.constant(0, image_spec.dtype), pads


_VERIFY = "(written over after the build?): python -m beam_pipeline verify on its build names it"


def _stacked_boxes(parsed, source):
    """The record's boxes, [N, 4] (ymin, xmin, ymax, xmax), or an error naming its shard
    (`source`) where its box coordinates (and object classes and flags, where parsed) are
    lists of different lengths (`tf.stack`, `tf.boolean_mask` said "Shapes ... must match",
    of no record)."""
    keys = [key for key in (*F.BOX_KEYS_YX, F.OBJECT_LABEL, F.OBJECT_DIFFICULT) if key in parsed]
    counts = tf.stack([tf.size(parsed[key]) for key in keys])
    check = tf.debugging.Assert(
        tf.reduce_all(counts == counts[0]),
        [
            source,
            f"holds a record whose {', '.join(keys)} hold",
            counts,
            "values, not one an object each " + _VERIFY,
        ],
        summarize=len(keys),
    )
    with tf.control_dependencies([check]):
        return tf.stack([parsed[key] for key in F.BOX_KEYS_YX], axis=1)


def _checked_jpeg(encoded, source):
    """The record's image bytes, or an error naming its shard (`source`) where they do not
    start as a JPEG's (the build stores only JPEGs, and `verify` refuses any other): the
    decoders' own errors ("Unknown image file format") named no record."""
    jpeg = tf.strings.substr(encoded, 0, 3) == b"\xff\xd8\xff"
    check = tf.debugging.Assert(
        jpeg, [source, "holds a record whose image/encoded is not a JPEG " + _VERIFY]
    )
    with tf.control_dependencies([check]):
        return tf.identity(encoded)


def _checked_box(box, source):
    """The training crop's box ([1, 1, 4]), or an error naming the record's shard (`source`)
    where it is not inside [0, 1] (NaN neither), as the crop's kernel requires: its own error
    ("All bounding box coordinates must be in [0.0, 1.0]") named no record."""
    inside = tf.reduce_all(tf.logical_and(box >= 0.0, box <= 1.0))
    check = tf.raw_ops.Assert(  # (tf.debugging.Assert puts a float's check in a tf.cond)
        condition=inside,
        data=[
            source,
            "holds a record whose main object has the box (ymin, xmin, ymax, xmax)",
            box,
            "is not inside [0, 1], which the training crop needs " + _VERIFY,
        ],
        summarize=4,
    )
    with tf.control_dependencies([check]):
        return tf.identity(box)
