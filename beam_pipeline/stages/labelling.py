"""The labelling stage, from index entries to labelled entries: parse XML, build the vocabulary
(unless a labels file gives it), decide how each split is labelled, label each image by the rule
in `labels.py`.

Element types (none holds pixels):
  IndexEntry → ParsedEntry → (packed, `packing`) → LabelledEntry, with the Vocabulary and
  (split, kind) side inputs
Each step sends its rejections to a `rejected` output.
"""

from __future__ import annotations

import dataclasses
import posixpath
from collections.abc import Mapping

import apache_beam as beam
from apache_beam.typehints import Tuple

from beam_pipeline.console import watch
from beam_pipeline.core.annotations import Annotation, parse_annotation
from beam_pipeline.core.entries import IndexEntry, LabelledEntry, ParsedEntry
from beam_pipeline.core.holdout import HoldOut
from beam_pipeline.core.labels import (
    Vocabulary,
    clamped_area,
    image_label,
    main_object_index,
    name_key,
    split_kind,
)
from beam_pipeline.core.rejections import ANNOTATION, LABEL, REJECTED, InputError, Rejection
from beam_pipeline.failures import BuildFailed
from beam_pipeline.stages import packing
from beam_pipeline.stages.coders import ParsedEntryCoder
from beam_pipeline.stages.metrics import count_rejection
from beam_pipeline.stages.misplaced import misplaced_claim, one_claim
from beam_pipeline.tree.fileio import header_size, read_file
from schemas.paths import join


class _ParseAnnotationFn(beam.DoFn):
    def __init__(self, root: str, output_dir: str | None):
        self._root = root
        self._output_dir = output_dir

    def setup(self):
        self._indexed = None
        if self._output_dir is not None:
            self._indexed = watch.Tally(self._output_dir, watch.INDEXED)

    def finish_bundle(self):
        if self._indexed is not None:
            self._indexed.flush()

    def process(self, entry: IndexEntry):
        if self._indexed is not None:
            self._indexed.add()
        parsed = parse_entry(self._root, entry)
        if isinstance(parsed, Rejection):
            yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(parsed))
        else:
            yield parsed


def parse_entry(root: str, entry: IndexEntry) -> ParsedEntry | Rejection:
    """The entry with its annotation parsed (None when it has none), or the XML's Rejection.

    An XML without `<size>` that has several objects gets the image file's size from its
    header: the main object is the largest box clamped to the image, and a box reaching past
    the image's edge would otherwise be compared by its unclamped area.
    """
    if entry.annotation_filename is None:
        return ParsedEntry(entry, None)
    path = join(root, entry.annotation_filename)
    try:
        annotation = parse_annotation(read_file(path, regular=True))
        _check_boxes_inside(annotation)
    except InputError as error:
        image = join(root, entry.filename)
        return Rejection.from_error(
            error, split=entry.split, path=path, stage=ANNOTATION, image=image
        )
    if annotation.width is None and len(annotation.objects) > 1:
        size = header_size(join(root, entry.filename))
        if size is not None:
            annotation = dataclasses.replace(annotation, width=size[0], height=size[1])
    return ParsedEntry(entry, annotation)


def _check_boxes_inside(annotation: Annotation) -> None:
    """Raises InputError(`annotation_box_outside_image`) for a box with no area inside the
    XML's `<size>`: the image is rejected either way once decoded (for that, or for a size
    that disagrees with the XML's), and known now, it counts in the index's error budget and
    `plan` names it."""
    if annotation.width is None:
        return
    for obj in annotation.objects:
        if clamped_area(obj.box, annotation.width, annotation.height) == 0:
            raise InputError(
                "annotation_box_outside_image",
                f"{obj.name} box {obj.box} lies outside the "
                f"{annotation.width}x{annotation.height} image its <size> gives",
            )


class ParseAnnotations(beam.PTransform):
    """IndexEntry → ParsedEntry (annotation parsed); output (parsed, rejected).

    With `output_dir`, the count of images indexed is reported live (`watch`).
    """

    def __init__(self, root: str, output_dir: str | None = None):
        super().__init__()
        self._root = root
        self._output_dir = output_dir

    def expand(self, entries):
        result = entries | "Parse" >> beam.ParDo(
            _ParseAnnotationFn(self._root, self._output_dir)
        ).with_output_types(ParsedEntry).with_outputs(REJECTED, main="parsed")
        return result.parsed, result[REJECTED]


def stratum(root: str, entry: IndexEntry) -> str:
    """The class an entry is held out by (`HoldOut`): its XML's main object's, else its
    folder's; "" for an image of no class (a negative) or whose XML does not parse (rejected
    when the build parses it)."""
    parsed = parse_entry(root, entry)
    if isinstance(parsed, ParsedEntry) and parsed.annotation is not None:
        main = main_object_index(parsed.annotation)
        if main is not None:
            return parsed.annotation.objects[main].name
    return entry.folder_class or ""


class HoldOutSplits(beam.PTransform):
    """IndexEntry → IndexEntry: those of `spec.source` divided per class into the held-out
    splits (`core.holdout`), grouped by class on the runner; the others as they are."""

    def __init__(self, root: str, spec: HoldOut):
        super().__init__()
        self._root = root
        self._spec = spec

    def expand(self, entries):
        root, spec = self._root, self._spec
        source, others = entries | "FromSource" >> beam.Partition(
            lambda entry, _: 0 if entry.split == spec.source else 1, 2
        )
        divided = (
            source
            | "Stratum" >> beam.Map(lambda entry: (stratum(root, entry), entry))
            | "GroupByClass" >> beam.GroupByKey()
            | "Divide"
            >> beam.FlatMapTuple(lambda _, group: spec.assign(group)).with_output_types(IndexEntry)
        )
        return (divided, others) | "WithHeldOut" >> beam.Flatten()


def class_names(parsed: ParsedEntry):
    if parsed.annotation is not None:
        yield from (obj.name for obj in parsed.annotation.objects)
    if parsed.entry.folder_class is not None:
        yield parsed.entry.folder_class


def vocabulary_from_names(names, split: str | None = "train") -> Vocabulary:
    if not names:
        raise BuildFailed(
            f"the {split} split names no class (no <object> and no synset folder): restore its "
            "annotations (or its synset folders), or pass --labels_file with the classes"
        )
    _refuse_names_alike(names, split)
    try:
        return Vocabulary.from_names(names)
    except ValueError as error:
        raise BuildFailed(
            f"the {split} split's annotations or folders: {error}; or pass --labels_file with the "
            "classes to keep"
        ) from None


def _refuse_names_alike(names, split: str | None) -> None:
    """Refuses class names of one split that differ only in case, spaces, invisible characters
    or Unicode form ('Dog' and 'dog' from two labelling sessions, 'café' typed on two systems,
    folders 'cat' and 'cat ', 'dog' and 'dog' with a zero-width space pasted in): each would be
    a class of its own, the same objects under two labels."""
    groups: dict[str, list[str]] = {}
    for name in sorted(set(names)):
        groups.setdefault(name_key(name), []).append(name)
    alike = [group for group in groups.values() if len(group) > 1]
    if not alike:
        return
    shown = "; ".join(" and ".join(ascii(name) for name in group) for group in alike[:5])
    more = f" (and {len(alike) - 5} more)" if len(alike) > 5 else ""
    raise BuildFailed(
        f"the {split} split names classes that differ only in case, spaces, invisible characters "
        f"or Unicode form: "
        f"{shown}{more}; a build would make each a class of its own. Use one spelling in the XML "
        "<name>s or class folders, or pass --labels_file listing each to keep them apart"
    )


class BuildVocabulary(beam.PTransform):
    """ParsedEntry of the train split (or the one named), and of the splits held out of it
    (`held_out`: its images, whose classes are train's), → a single Vocabulary (sorted distinct
    class names)."""

    def __init__(self, train_split: str | None, held_out: tuple[str, ...] = ()):
        super().__init__()
        self._train_split = train_split
        self._held_out = held_out

    def expand(self, parsed):
        split, sources = self._train_split, (self._train_split, *self._held_out)
        return (
            parsed
            | "TrainOnly" >> beam.Filter(lambda p: p.entry.split in sources)
            | "ClassNames" >> beam.FlatMap(class_names)
            | "Distinct" >> beam.Distinct()
            | "Collect" >> beam.combiners.ToList()
            | "ToVocabulary" >> beam.Map(vocabulary_from_names, split)
        )


def split_marks(entry: IndexEntry, held_out=None):
    """(the tree's split the entry's image is of: a held-out one's source (`HoldOut`), whether
    it has XML, whether it lies in a class folder)."""
    split = held_out.source if held_out and entry.split in held_out.splits else entry.split
    return split, (entry.annotation_filename is not None, entry.folder_class is not None)


def any_marks(marks):
    has_annotations = has_class_folders = False
    for annotated, in_folder in marks:
        has_annotations |= annotated
        has_class_folders |= in_folder
    return has_annotations, has_class_folders


def kinds_of(split: str, marks, negatives: bool = True, held_out=None):
    """(split, kind) of a tree's split from its images' `any_marks`, and of the splits held out
    of it (`HoldOut`): theirs are its (a validation split of only negatives is background, as
    those images are in train, not unlabelled)."""
    has_annotations, has_class_folders = marks
    kind = split_kind(has_annotations, has_class_folders, negatives)
    held = held_out.splits if held_out and split == held_out.source else ()
    return [(name, kind) for name in (split, *held)]


class ClassifySplits(beam.PTransform):
    """IndexEntry → (split, kind): how each split is labelled (`labels.split_kind`; `negatives`:
    whether the layout has images of no class). `held_out`: the held-out splits and the split
    they are taken from (`HoldOut`), whose kind they have."""

    def __init__(self, negatives: bool = True, held_out=None):
        super().__init__()
        self._negatives = negatives
        self._held_out = held_out

    def expand(self, entries):
        return (
            entries
            | "SplitMarks"
            >> beam.Map(split_marks, self._held_out).with_output_types(
                Tuple[str, Tuple[bool, bool]]
            )
            | "AnyPerSplit" >> beam.CombinePerKey(any_marks)
            | "SplitKind" >> beam.FlatMapTuple(kinds_of, self._negatives, self._held_out)
        )


_PARSED = ParsedEntryCoder()


class _LabelFn(beam.DoFn):
    """A packed batch of ParsedEntry → LabelledEntry each, or its rejection."""

    def __init__(self, root: str):
        self._root = root

    def process(self, packed: bytes, vocabulary: Vocabulary, kinds, misplaced):
        for parsed in packing.unpack_elements(packed, _PARSED):
            labelled = label_entry(self._root, parsed, vocabulary, kinds, misplaced)
            if isinstance(labelled, Rejection):
                yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(labelled))
                continue
            yield labelled
            if labelled.folder_disagrees:
                report = disagreement(self._root, labelled, vocabulary)
                yield beam.pvalue.TaggedOutput(REJECTED, count_rejection(report))


def disagreement(root: str, labelled: LabelledEntry, vocabulary: Vocabulary) -> Rejection:
    """The line of `rejected.jsonl` that names an image whose XML and class folder disagree:
    reported, not rejected (the image is written with the XML's class)."""
    entry = labelled.entry
    name = vocabulary.name(labelled.label)
    return Rejection(
        entry.split,
        join(root, entry.filename),
        LABEL,
        "folder_disagreement",
        f"the XML's main object is {name!r}, the class folder is {entry.folder_class!r}; "
        f"labelled {name!r} (the XML wins)",
        is_image=False,
    )


def label_entry(
    root: str,
    parsed: ParsedEntry,
    vocabulary: Vocabulary,
    kinds: Mapping[str, str],
    misplaced: Mapping[str, tuple[str, str]] | None = None,
) -> LabelledEntry | Rejection:
    """The label rule applied to one parsed entry (`kinds`: split → `split_kind`).

    An image without XML is rejected (`annotation_misplaced`) when `misplaced` (image key →
    (XML path below its folder, XML path): `misplaced.misplaced_index`, or `LabelImages`)
    names an XML of its split folder (train's for an image held out of it) that paired with no
    image and that it alone could be the image of: one that lies where its XML would with
    folders added or left out (`val/val/X.xml` for `val/X.JPEG`, or `n01/X.xml` for a flat
    `X.JPEG`), or is named otherwise (`img1.xml` or `Img1.JPEG.xml` for `Img1.JPEG`).
    (`cat/1.xml` is not `dog/1.JPEG`'s.)"""
    entry = parsed.entry
    if misplaced and entry.annotation_filename is None and entry.key in misplaced:
        below = entry.key.split("/", 1)[-1]
        xml_below, xml = misplaced[entry.key]
        extension = posixpath.splitext(xml)[1]
        place = xml[: len(xml) - len(xml_below + extension)] + below + extension
        return Rejection(
            entry.split,
            join(root, entry.filename),
            LABEL,
            "annotation_misplaced",
            f"no XML at {place}, where its XML belongs, while {xml}, that path with "
            "folders added or left out or written otherwise (case, Unicode form, spaces, "
            f"the image's extension), pairs with no image: move that XML to {place}; "
            "built, the image would lack its objects",
        )
    try:
        found = image_label(parsed.annotation, entry.folder_class, vocabulary, kinds[entry.split])
    except InputError as error:
        image = join(root, entry.filename)
        if entry.annotation_filename is None:
            return Rejection.from_error(error, split=entry.split, path=image, stage=LABEL)
        path = join(root, entry.annotation_filename)
        return Rejection.from_error(error, split=entry.split, path=path, stage=LABEL, image=image)
    return LabelledEntry(
        entry,
        parsed.annotation,
        found.label,
        found.object_labels,
        found.source,
        found.folder_disagrees,
    )


class LabelImages(beam.PTransform):
    """ParsedEntry → LabelledEntry; output (labelled, rejected).

    Side inputs: the Vocabulary, and (split, kind) pairs from ClassifySplits. The parsed
    entries wait for them packed (`packing`).
    """

    def __init__(self, vocabulary, split_kinds, root: str, misplaced=None):
        super().__init__()
        self._vocabulary = vocabulary
        self._split_kinds = split_kinds
        self._root = root
        self._misplaced = misplaced

    def expand(self, parsed):
        packed = parsed | "Pack" >> packing.Pack(_PARSED)
        misplaced = self._misplaced
        if misplaced is None:
            misplaced = parsed.pipeline | "NoMisplaced" >> beam.Create([])
        lists = (  # few (XML without an image), in a dict of lists: AsDict on every runner
            misplaced
            | "GroupMisplaced" >> beam.GroupByKey()
            | "MisplacedLists" >> beam.MapTuple(lambda key, found: (key, sorted(found)))
        )
        misplaced = (  # image key → its XML, where one image alone claims it
            parsed
            | "ClaimMisplaced" >> beam.FlatMap(misplaced_claim, beam.pvalue.AsDict(lists))
            | "GroupClaims" >> beam.GroupByKey()
            | "OneClaim" >> beam.FlatMapTuple(one_claim)
        )
        result = packed | "Label" >> beam.ParDo(
            _LabelFn(self._root),
            vocabulary=beam.pvalue.AsSingleton(self._vocabulary),
            kinds=beam.pvalue.AsDict(self._split_kinds),
            misplaced=beam.pvalue.AsDict(misplaced),
        ).with_output_types(LabelledEntry).with_outputs(REJECTED, main="labelled")
        return result.labelled, result[REJECTED]
