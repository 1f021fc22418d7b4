"""Class vocabulary and the image-label rule.

The rule: the image's label is the class of its main object, the object whose bounding box has
the largest area (clamped to the image: its XML's `<size>`, or the size in the image file's
header when the XML has none); ties go to the object that comes first
in the XML. An image with no objects takes the class of its synset folder when the layout has
one (ILSVRC CLS-LOC train), otherwise the background class, which is the last index; an image
without XML is background only in a layout with negatives (DET, VOC), and rejected in CLS-LOC.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import unicodedata
from collections.abc import Callable, Collection, Iterable, Sequence
from fractions import Fraction
from typing import Any

from beam_pipeline.core.annotations import Annotation, Box
from beam_pipeline.core.rejections import InputError
from schemas.classes import (
    BACKGROUND,
    FROM_BACKGROUND,
    FROM_FOLDER,
    FROM_NOTHING,
    FROM_XML,
    UNLABELLED,
    ClassList,
)

# How a split is labelled.
ANNOTATED = "annotated"  # by XML; an image without one is background (DET negatives)
OBJECTS = "objects"  # by XML, in a layout without negatives (CLS-LOC val kept flat)
CLASS_FOLDERS = "class_folders"  # its images sit in class folders (CLS-LOC train, often val)
UNLABELLED_SPLIT = "unlabelled"  # no XML and no class folder anywhere in it (a test split)


def _refuse_unwritable_name(name: str) -> None:
    """ValueError for a class name the build's label files cannot hold as it is: one with a
    line break or another control character, or with a space at an end (labels.txt and TFDS's
    `*.labels.txt` are a name a line, and TFDS strips each: a folder 'dog\nx' made two lines,
    TFDS named a folder ' cat' 'cat', with exit 0 and `verify` OK); a lone surrogate, which
    no UTF-8 file holds, counts as one."""
    controls = [c for c in name if unicodedata.category(c) in ("Cc", "Cs")]
    if not name or name != name.strip() or controls:
        why = (
            "is empty"
            if not name
            else f"holds the control character {controls[0]!r}"
            if controls
            else "begins or ends with a space"
        )
        raise ValueError(
            f"the class name {name!r} {why}: the build's label files (labels.txt, TFDS's) hold "
            "a name a line and TFDS reads each without its end spaces, so it would not read "
            "back as written; rename its class folder (or its XML <name>)"
        )


@dataclasses.dataclass(frozen=True)
class Vocabulary(ClassList):
    """The build's class list (background after the classes) with a name → label lookup."""

    def __post_init__(self):
        super().__post_init__()
        if BACKGROUND in self.classes:
            raise ValueError(
                f"a class is named {BACKGROUND!r}, the name of the background class "
                f"(label {len(self.classes)}, images without objects); rename or drop it"
            )
        for name in self.classes:
            _refuse_unwritable_name(name)

    @classmethod
    def from_names(cls, names: Iterable[str]) -> Vocabulary:
        """The sorted set of names (the default when no labels file is given)."""
        return cls(tuple(sorted(set(names))))

    @functools.cached_property
    def _index(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.classes)}

    @functools.cached_property
    def _keys(self) -> dict[str, str]:
        return {name_key(name): name for name in self.classes}

    def index(self, name: str) -> int:
        """The label of a class name; raises InputError(unknown_class) outside the vocabulary,
        naming the class of the vocabulary it differs from only in spelling (`name_key`)."""
        try:
            return self._index[name]
        except KeyError:
            detail = f"class {name!r} is not in the vocabulary of {len(self.classes)}"
            if (alike := self._keys.get(name_key(name))) is not None:
                detail += f"{ALIKE}{alike!r}"
            raise InputError("unknown_class", detail) from None


# How an `unknown_class` rejection names the vocabulary's class of another spelling.
ALIKE = ", spelt as the vocabulary's "


def name_key(name: str) -> str:
    """A class name without what tells two spellings of one class apart: case, spaces and
    their number, invisible (format) characters, Unicode form ('Dog' and 'dog ', 'café' typed
    on two systems)."""
    shown = "".join(c for c in name if unicodedata.category(c) != "Cf")
    return " ".join(unicodedata.normalize("NFC", shown).split()).casefold()


def unknown_class_hints(
    details: Sequence[str], labels_file: bool, class_folders: bool = False
) -> str:
    """Why the classes of `unknown_class` rejections (their `details`) fell outside the
    vocabulary, where it can be told: a class a labels file cannot list (a space in it, or for
    a class folder's name, `class_folders`, one at either end; a leading #:
    `parse_labels_file`), or another spelling of one of the vocabulary's; ""."""
    names = sorted({name for name in map(unknown_class_name, details) if name is not None})
    spaced = [name for name in names if name.split() != [name]]  # ("cat " reads back "cat")
    edged = [name for name in names if name.strip() != name]  # (a line is read stripped)
    hashed = [name for name in names if name.startswith("#")]
    hints = ""
    if labels_file and edged and class_folders:
        hints += (
            f" ({edged[0]!r} begins or ends with a space, which a labels file's line does not "
            "keep: such a class cannot be listed there; rename it)"
        )
    elif labels_file and spaced and not class_folders:
        hints += (
            f" ({spaced[0]!r} holds a space, and a labels file's class is a line's first "
            "word: such a class cannot be listed there; rename it)"
        )
    elif labels_file and hashed:
        hints += (
            f" ({hashed[0]!r} begins with #, and a labels file's line that does is a "
            "comment: such a class cannot be listed there; rename it)"
        )
    alike = sorted((unknown_class_name(d), alike_class(d)) for d in details if alike_class(d))
    if alike:
        name, known = alike[0]
        hints += (
            f" ({name!r} is another spelling of the vocabulary's {known!r}, in case, spaces "
            "or Unicode form: use one spelling in the XML <name>s or class folders)"
        )
    return hints


def alike_class(detail: str) -> str | None:
    """The vocabulary's class an `unknown_class` rejection says its class is a spelling of."""
    _, found, rest = detail.partition(ALIKE)
    try:
        name = ast.literal_eval(rest) if found else None
    except (ValueError, SyntaxError):
        return None
    return name if isinstance(name, str) else None


def unknown_class_name(detail: str) -> str | None:
    """The class an `unknown_class` rejection's detail names (as `Vocabulary.index` writes it)."""
    head, found, _ = detail.partition(" is not in the vocabulary")  # (then `ALIKE`, maybe)
    if not found or not head.startswith("class "):
        return None
    try:
        name = ast.literal_eval(head[len("class ") :])
    except (ValueError, SyntaxError):
        return None
    return name if isinstance(name, str) else None


def parse_labels_file(text: str, whole: Collection[str] = ()) -> tuple[str, ...]:
    """Reads a synset/label list: one class per line, the first token is the class name.

    Accepts plain lists (`n01440764`) and the LOC_synset_mapping format
    (`n01440764 tench, Tinca tinca`). Blank lines and `#` comments are skipped. A line that
    is one of `whole` (a class folder's name: `sea lion`) is that class, spaces and all.
    """
    names: list[str] = []
    lines: dict[str, list[str]] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith("#"):
            name = line if line in whole else line.split()[0]
            if "," in name:
                raise ValueError(
                    f"line {number} ({line[:60]!r}) is not a class: a class is a line's first "
                    "word, up to a space (a CSV file, with a header or commas, is not read; "
                    "LOC_synset_mapping.txt, a list of synsets, or a build's labels.txt is)"
                )
            names.append(name)
            lines.setdefault(name, []).append(line)
    if not names:
        raise ValueError("the labels file lists no classes")
    duplicates = sorted(name for name, found in lines.items() if len(found) > 1)
    if duplicates:
        cut = [lines[n][1] for n in duplicates if len(set(lines[n])) > 1]
        hint = (
            f" (a class is a line's first word, so {cut[0]!r} names {cut[0].split()[0]!r}: "
            "a class whose name holds a space cannot be listed; rename it)"
            if cut
            else ""
        )
        raise ValueError(f"the labels file lists these classes twice: {duplicates[:10]}{hint}")
    return tuple(names)


def parse_display_names(text: str, whole: Collection[str] = ()) -> dict[str, str]:
    """{class: the rest of its line} of a labels file whose lines name a class after its id
    (LOC_synset_mapping's `n01440764 tench, Tinca tinca`); classes alone on their line (or
    the line one of `whole`, as `parse_labels_file` reads it) have none.
    """
    names = {}
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#") and line not in whole:
            name, *rest = line.split(None, 1)  # as parse_labels_file: a tab separates too
            if rest:
                names[name] = rest[0].strip()
    return names


def clamped_area(box: Box, width: int | None, height: int | None) -> float:
    """Area of `box`, clamped to the image when its size is known."""
    return _clamped_area(box, width, height)


def _clamped_area(
    box: Box, width: int | None, height: int | None, number: Callable | None = None
) -> Any:
    """`clamped_area` in the coordinates' floats, or in the numbers `number` makes of them
    (`_decimal`'s: exact)."""
    coordinates = (box.xmin, box.ymin, box.xmax, box.ymax)
    xmin, ymin, xmax, ymax = map(number, coordinates) if number else coordinates
    if width is not None and height is not None:
        xmin, xmax = min(max(xmin, 0), width), min(max(xmax, 0), width)
        ymin, ymax = min(max(ymin, 0), height), min(max(ymax, 0), height)
    return max(xmax - xmin, 0) * max(ymax - ymin, 0)


# Areas this close (relative to the largest) are compared again in the XML's own decimals:
# float arithmetic ranks 2 x 10 boxes (0.1, 0.3) and (0, 0.2) apart (0.3 - 0.1 < 0.2), and a
# tie goes to the first box. A side's relative rounding is ~1e-16 x (coordinate / side):
# 1e-7 for a side of a thousandth of a pixel at a coordinate of 1,000,000.
_NEAR_TIE = 1e-6


def main_object_index(annotation: Annotation) -> int | None:
    """Index of the object with the largest box; the first one wins a tie. None if no objects.
    The areas are the XML's decimal numbers' (`_exact_area` where floats nearly tie)."""
    width, height = annotation.width, annotation.height
    areas = [clamped_area(obj.box, width, height) for obj in annotation.objects]
    if not areas:
        return None
    top = max(areas)
    near = [i for i, area in enumerate(areas) if area >= top * (1 - _NEAR_TIE)]
    if len(near) == 1:
        return near[0]
    if all(_whole(annotation.objects[i].box) for i in near):  # (VOC's, ILSVRC's: exact floats)
        return areas.index(top)
    exact = [_exact_area(annotation.objects[i].box, width, height) for i in near]
    return near[exact.index(max(exact))]  # (index: the first of equal ones)


def _whole(box: Box) -> bool:
    """Whether a box's coordinates are whole numbers a float holds exactly, as its area."""
    coordinates = (box.xmin, box.ymin, box.xmax, box.ymax)
    return all(float(v).is_integer() and abs(v) < 2**26 for v in coordinates)


def _exact_area(box: Box, width: int | None, height: int | None) -> Fraction:
    """`clamped_area` in exact arithmetic on the decimals the XML wrote."""
    return _clamped_area(box, width, height, _decimal)


def _decimal(value: float) -> Fraction:
    """A coordinate as the XML wrote it: one parsed from up to 15 significant digits is its
    float's shortest repr."""
    return Fraction(repr(value))


def split_kind(has_annotations: bool, has_class_folders: bool, negatives: bool = True) -> str:
    """How a split is labelled, from whether any of its images has an XML or a class folder,
    and whether the layout has negatives (images of no class: ILSVRC DET and VOC do, CLS-LOC
    does not)."""
    if has_class_folders:
        return CLASS_FOLDERS
    if has_annotations:
        return ANNOTATED if negatives else OBJECTS
    return UNLABELLED_SPLIT


@dataclasses.dataclass(frozen=True)
class ImageLabel:
    """An image's label, the label of each of its objects, and where the label came from."""

    label: int
    object_labels: tuple[int, ...]
    source: str
    folder_disagrees: bool = False


def image_label(
    annotation: Annotation | None,
    folder_class: str | None,
    vocabulary: Vocabulary,
    kind: str = ANNOTATED,
) -> ImageLabel:
    """Applies the label rule (see the module docstring) to one image of a split of `kind`.

    Raises:
      InputError: `unknown_class` when an object or the folder names a class outside the
        vocabulary; `no_class` for an image without XML or a class folder in a split without
        negatives (CLASS_FOLDERS, OBJECTS).
    """
    objects = annotation.objects if annotation is not None else ()
    object_labels = tuple(vocabulary.index(obj.name) for obj in objects)
    if object_labels:
        assert annotation is not None  # objects come from it
        main = main_object_index(annotation)
        assert main is not None  # it has objects
        disagrees = folder_class is not None and folder_class != objects[main].name
        return ImageLabel(object_labels[main], object_labels, FROM_XML, disagrees)
    if folder_class is not None:
        return ImageLabel(vocabulary.index(folder_class), (), FROM_FOLDER)
    # An XML without objects is an explicit negative, wherever it lies; a missing XML is one
    # only where the layout has negatives (DET's images without XML).
    if annotation is not None or kind == ANNOTATED:
        return ImageLabel(vocabulary.background_index, (), FROM_BACKGROUND)
    if kind == UNLABELLED_SPLIT:
        return ImageLabel(UNLABELLED, (), FROM_NOTHING)
    if kind == CLASS_FOLDERS:
        raise InputError(
            "no_class",
            "the image lies outside any class folder in a split whose images sit in class "
            "folders, and has no XML; move it into its class's folder or remove it",
        )
    raise InputError(
        "no_class",
        "the image has no XML and no class folder, in a split whose other images have XML and "
        "whose layout has no background images without one (an export of VOC XML gives an "
        "image of no object an XML without <object>; ILSVRC CLS-LOC has none); restore its XML "
        "(from the export, or the devkit), move it into its class's folder, or remove it",
    )
