"""The labelling stage, from index entries to labelled entries: parse XML, build the vocabulary
(unless a labels file gives it), label each image by the rule in `labels.py`.

Element types (none holds pixels):
  IndexEntry → ParsedEntry → LabelledEntry, with the Vocabulary as a side input
Each step sends its rejections to a `rejected` output.
"""

from __future__ import annotations

import apache_beam as beam

import beam_pipeline.coders  # noqa: F401 - registers the compact element coders
from beam_pipeline.annotations import parse_annotation
from beam_pipeline.entries import IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.fileio import read_file
from beam_pipeline.labels import Vocabulary, image_label
from beam_pipeline.rejections import (
    ANNOTATION,
    LABEL,
    REJECTED,
    InputError,
    Rejection,
    count_rejection,
)
from schemas.paths import join


class _ParseAnnotationFn(beam.DoFn):
    def __init__(self, root: str):
        self._root = root

    def process(self, entry: IndexEntry):
        if entry.annotation_filename is None:
            yield ParsedEntry(entry, None)
            return
        path = join(self._root, entry.annotation_filename)
        try:
            annotation = parse_annotation(read_file(path))
        except InputError as error:
            rejection = Rejection.from_error(error, split=entry.split, path=path, stage=ANNOTATION)
            yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(rejection))
            return
        yield ParsedEntry(entry, annotation)


class ParseAnnotations(beam.PTransform):
    """IndexEntry → ParsedEntry (annotation parsed); output (parsed, rejected)."""

    def __init__(self, root: str):
        super().__init__()
        self._root = root

    def expand(self, entries):
        result = entries | "Parse" >> beam.ParDo(_ParseAnnotationFn(self._root)).with_output_types(
            ParsedEntry
        ).with_outputs(REJECTED, main="parsed")
        return result.parsed, result[REJECTED]


def _class_names(parsed: ParsedEntry):
    if parsed.annotation is not None:
        yield from (obj.name for obj in parsed.annotation.objects)
    if parsed.entry.folder_class is not None:
        yield parsed.entry.folder_class


def _vocabulary_from_names(names) -> Vocabulary:
    if not names:
        raise ValueError(
            "the train split names no class (no <object> and no synset folder); pass --labels_file"
        )
    return Vocabulary.from_names(names)


class BuildVocabulary(beam.PTransform):
    """ParsedEntry of the train split → a single Vocabulary (sorted distinct class names)."""

    def __init__(self, train_split: str):
        super().__init__()
        self._train_split = train_split

    def expand(self, parsed):
        split = self._train_split
        return (
            parsed
            | "TrainOnly" >> beam.Filter(lambda p: p.entry.split == split)
            | "ClassNames" >> beam.FlatMap(_class_names)
            | "Distinct" >> beam.Distinct()
            | "Collect" >> beam.combiners.ToList()
            | "ToVocabulary" >> beam.Map(_vocabulary_from_names)
        )


class _LabelFn(beam.DoFn):
    def __init__(self, root: str):
        self._root = root

    def process(self, parsed: ParsedEntry, vocabulary: Vocabulary):
        entry = parsed.entry
        try:
            label, object_labels = image_label(parsed.annotation, entry.folder_class, vocabulary)
        except InputError as error:
            path = join(self._root, entry.annotation_filename or entry.filename)
            rejection = Rejection.from_error(error, split=entry.split, path=path, stage=LABEL)
            yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(rejection))
            return
        yield LabelledEntry(entry, parsed.annotation, label, object_labels)


class LabelImages(beam.PTransform):
    """ParsedEntry → LabelledEntry (vocabulary as side input); output (labelled, rejected)."""

    def __init__(self, vocabulary, root: str):
        super().__init__()
        self._vocabulary = vocabulary
        self._root = root

    def expand(self, parsed):
        result = parsed | "Label" >> beam.ParDo(
            _LabelFn(self._root), vocabulary=beam.pvalue.AsSingleton(self._vocabulary)
        ).with_output_types(LabelledEntry).with_outputs(REJECTED, main="labelled")
        return result.labelled, result[REJECTED]
