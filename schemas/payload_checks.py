"""The fields of a build's parsed metadata (`build_info.json`), checked before it is read.

JSON that parses may still hold a count written as a string, a class list that is a string, a
histogram with a key that is no number or counts that disagree with the classes: read as they
are, they end commands in tracebacks far from the file. `check_payload` names the first field
that is wrong (`splits.train.num_examples is the str '1000', not a count`); `schemas.metadata`
says the file is damaged with it. Fields the schema may lack (older builds recorded fewer) are
checked where present; fields it does not know are left alone.
"""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Callable
from typing import Any

from schemas.classes import ClassList, is_labelled

_HISTOGRAMS = ("objects_per_image", "image_widths", "image_heights")
_SPLIT_COUNTS = ("num_examples", "num_discovered", "num_rejected")
_SHARD_FIELDS = ("file", "num_examples", "num_bytes", "sha256")
_DECIMAL = re.compile(r"0|[1-9][0-9]*")  # as the builder writes a histogram's keys
_SHA256 = re.compile(r"[0-9a-f]{64}")


class PayloadError(ValueError):
    """A field of the metadata missing, of the wrong kind, or disagreeing with another; the
    message names the field (`splits.train.class_counts`)."""


def check_payload(payload: dict[str, Any]) -> None:
    """Raises PayloadError, naming the field, for the first field of `payload` (a build's
    parsed metadata, of a schema version this code reads) that the reader cannot take."""
    _typed(payload["schema_version"], str, "schema_version", "a version string")
    classes = _typed(_field(payload, "classes", "it"), list, "classes", "a list")
    for index, name in enumerate(classes):
        _typed(name, str, f"classes[{index}]", "a class name")
    if len(set(classes)) != len(classes):
        twice = next(name for name in classes if classes.count(name) > 1)
        raise PayloadError(f"classes names {twice!r} twice")
    class_list = ClassList(tuple(classes))
    _mapping(payload.get("display_names", {}), "display_names", _string)
    for key, computed, said in (
        ("num_classes", class_list.num_classes, "names {} classes"),
        ("background_index", class_list.background_index, "puts background at {}"),
    ):
        if key in payload and _count(payload[key], key) != computed:
            raise PayloadError(f"{key} is {payload[key]}, but classes {said.format(computed)}")
    splits = _mapping(_field(payload, "splits", "it"), "splits")
    if not splits:
        raise PayloadError("splits names no split")
    for name, split in splits.items():
        _check_split(split, f"splits.{name}", class_list.one_hot_length)
    _mapping(_field(payload, "failures", "it"), "failures", _count)
    for key in ("options", "source", "versions"):
        _mapping(_field(payload, key, "it"), key)
    _check_options(payload["options"])
    for key in _SOURCE_TEXTS:  # (readers use them as paths and names: `show` raised on a bool)
        if key in payload["source"]:
            _string(payload["source"][key], f"source.{key}")
    _check_copies(payload.get("duplicates", {}))
    _mapping(payload.get("odd_images", {}), "odd_images", _count)


# The fields of `source` that readers take as text: the tree's path, its layout.
_SOURCE_TEXTS = ("input_dir", "layout")
# The counts of `duplicates` (where a build looked for copies), and its images per split.
_COPY_COUNTS = ("exact_groups", "near_pairs", "images", "clashes", "dropped_clashes")
_COPY_SPLITS = ("leaked", "dropped")
# The --duplicates policies a build records in `options.duplicates` ("off" it leaves out);
# `core.quality.duplicates` takes their names from here.
DUPLICATES_POLICIES = ("report", "drop_leaks", "fail")


def _check_options(options: dict[str, Any]) -> None:
    """The options whose values mean something to a reader, where present, each as every
    build writes it: the shard size (`--target_shard_mb` in bytes), the shards asked for
    (`--num_shards`: a count, one per split, or null; the summary holds the shards made to
    it), the error budget (`--max_bad_fraction`, a fraction in [0, 1]) and the --duplicates
    policy (verify's fixes name it). Options only recorded (the seed, the paths) are not."""
    if "target_shard_bytes" in options:
        _positive(options["target_shard_bytes"], "options.target_shard_bytes", "bytes")
    shards = options.get("num_shards")
    if isinstance(shards, dict):
        _mapping(
            shards, "options.num_shards", lambda count, field: _positive(count, field, "shards")
        )
    elif shards is not None:
        _positive(shards, "options.num_shards", "shards, a count per split, or null")
    if "max_bad_fraction" in options:
        fraction = options["max_bad_fraction"]
        if type(fraction) not in (int, float) or not 0 <= fraction <= 1:  # (NaN is not)
            raise PayloadError(_not("options.max_bad_fraction", fraction, "a fraction in [0, 1]"))
    if "duplicates" in options and options["duplicates"] not in DUPLICATES_POLICIES:
        policies = ", ".join(DUPLICATES_POLICIES)
        raise PayloadError(_not("options.duplicates", options["duplicates"], f"one of {policies}"))


def _check_copies(found: Any) -> None:
    """`duplicates`: its counts, and its images per split (`core.quality.duplicates.counts`)."""
    _mapping(found, "duplicates")
    for key in _COPY_COUNTS:
        if key in found:
            _count(found[key], f"duplicates.{key}")
    for key in _COPY_SPLITS:
        if key in found:
            _mapping(found[key], f"duplicates.{key}", _count)


def _check_split(split: Any, field: str, one_hot_length: int) -> None:
    """A split's counts, class counts, label sources, histograms and shards."""
    _mapping(split, field)
    counts = {key: _count(_field(split, key, field), f"{field}.{key}") for key in _SPLIT_COUNTS}
    if "folder_disagreements" in split:
        _count(split["folder_disagreements"], f"{field}.folder_disagreements")
    class_counts = _typed(
        _field(split, "class_counts", field), list, f"{field}.class_counts", "a list"
    )
    for index, count in enumerate(class_counts):
        _count(count, f"{field}.class_counts[{index}]")
    if len(class_counts) != one_hot_length:
        raise PayloadError(
            f"{field}.class_counts is of length {len(class_counts)}, not {one_hot_length}: one "
            "count per class, then background"
        )
    sources = _mapping(split.get("label_sources", {}), f"{field}.label_sources", _count)
    if "labelled" in split:
        labelled = _typed(split["labelled"], bool, f"{field}.labelled", "true or false")
        if labelled != is_labelled(counts["num_examples"], sources):
            raise PayloadError(
                f"{field}.labelled is {json.dumps(labelled)}, but its num_examples and "
                f"label_sources make it {json.dumps(not labelled)}"
            )
    for key in _HISTOGRAMS:
        histogram = _mapping(split.get(key, {}), f"{field}.{key}", _count)
        if wrong := next((value for value in histogram if not _DECIMAL.fullmatch(value)), None):
            raise PayloadError(f"{field}.{key} has the key {wrong!r}, not a count")
    shards = _typed(_field(split, "shards", field), list, f"{field}.shards", "a list")
    for index, shard in enumerate(shards):
        _check_shard(shard, f"{field}.shards[{index}]")
    if "num_shards" in split and _count(split["num_shards"], f"{field}.num_shards") != len(shards):
        raise PayloadError(
            f"{field}.num_shards is {split['num_shards']}, but shards lists {len(shards)}"
        )


def _check_shard(shard: Any, field: str) -> None:
    _mapping(shard, field)
    for key in _SHARD_FIELDS:
        _field(shard, key, field)
    if unknown := sorted(set(shard) - set(_SHARD_FIELDS)):
        raise PayloadError(f"{field} has the unknown field {unknown[0]!r}")
    _typed(shard["file"], str, f"{field}.file", "a file name")
    _count(shard["num_examples"], f"{field}.num_examples")
    _count(shard["num_bytes"], f"{field}.num_bytes")
    if not isinstance(shard["sha256"], str) or not _SHA256.fullmatch(shard["sha256"]):
        raise PayloadError(_not(f"{field}.sha256", shard["sha256"], "64 lower-case hex digits"))


def _field(mapping: dict[str, Any], key: str, field: str) -> Any:
    """`mapping[key]`; PayloadError saying that `field` has no `key` when it is missing."""
    if key not in mapping:
        raise PayloadError(f"{field} has no {key}")
    return mapping[key]


def _mapping(
    value: Any, field: str, check_value: Callable[[Any, str], Any] | None = None
) -> dict[str, Any]:
    """`value`, a JSON object, each of its values passed to `check_value(value, field.key)`."""
    _typed(value, dict, field, "a mapping")
    for key, item in value.items():
        if check_value is not None:
            check_value(item, f"{field}.{key}")
    return value


def _count(value: Any, field: str) -> int:
    """`value`, a non-negative int (not a bool)."""
    if type(value) is not int or not 0 <= value < 2**63:  # (TensorFlow's counts are int64)
        raise PayloadError(_not(field, value, "a count"))
    return value


def _positive(value: Any, field: str, of: str) -> int:
    """`value`, a positive int (not a bool, nor a float: NaN, Infinity and 1e9 are no build's),
    said to be a positive count `of` what it counts."""
    if type(value) is not int or value < 1:
        raise PayloadError(_not(field, value, f"a positive count of {of}"))
    return value


def _string(value: Any, field: str) -> str:
    return _typed(value, str, field, "a string")


def _typed(value: Any, kind: type, field: str, noun: str) -> Any:
    """`value`, of `kind`."""
    if not isinstance(value, kind):
        raise PayloadError(_not(field, value, noun))
    return value


def _not(field: str, value: Any, noun: str) -> str:
    """`splits.train.num_examples is the str '1000', not a count`."""
    said = "null" if value is None else f"the {type(value).__name__} {reprlib.repr(value)}"
    return f"{field} is {said}, not {noun}"
