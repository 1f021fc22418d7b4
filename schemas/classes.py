"""The class rule shared by the builder, the metadata and the loader.

A build's classes are an ordered list of names; label `i` is class `i`. One more class follows
them: the background class (images without objects), whose index is the number of classes and
whose name is `BACKGROUND`. A record's one-hot label therefore has `num_classes + 1` entries (the
loader leaves the last column out where no image of a build is background). An image of
a split that has no annotations at all is unlabelled: label `UNLABELLED` (-1, as TFDS writes for
ImageNet's test split) and an all-zero one-hot. This is the only place these rules are spelled.

Every example also records where its label came from (`LABEL_SOURCES`); `build_info.json`
counts them per split.
"""

from __future__ import annotations

import dataclasses

BACKGROUND = "background"
UNLABELLED = -1

# Where an image's label came from: its XML's largest object, its class folder, the background
# class (an XML without objects, or an image without XML in an annotated split), or nowhere.
FROM_XML = "xml"
FROM_FOLDER = "folder"
FROM_BACKGROUND = "background"
FROM_NOTHING = "unlabelled"
LABEL_SOURCES = (FROM_XML, FROM_FOLDER, FROM_BACKGROUND, FROM_NOTHING)


def is_labelled(num_examples: int, label_sources: dict[str, int]) -> bool:
    """Whether a split of `num_examples` whose labels came from `label_sources` is labelled:
    False only when it has examples and every one of them is unlabelled."""
    return not (num_examples and label_sources.get(FROM_NOTHING) == num_examples)


def one_hot_length(num_classes: int) -> int:
    """Entries of a one-hot label: every class, then the background class."""
    return num_classes + 1


@dataclasses.dataclass(frozen=True)
class ClassList:
    """The ordered class names of a build, with the background class after them.

    Attributes:
      classes: the real classes' names; class `i` has label `i`.
    """

    classes: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "classes", tuple(self.classes))
        if len(set(self.classes)) != len(self.classes):
            raise ValueError("the class list has duplicate names")

    @property
    def num_classes(self) -> int:
        """Number of real classes, background excluded."""
        return len(self.classes)

    @property
    def background_index(self) -> int:
        """Label of the background class: the last one."""
        return len(self.classes)

    @property
    def one_hot_length(self) -> int:
        return one_hot_length(self.num_classes)

    @property
    def names(self) -> tuple[str, ...]:
        """Every label's name in label order, background last."""
        return (*self.classes, BACKGROUND)

    def name(self, label: int) -> str:
        """The name of one label: `BACKGROUND` for the background class, "" when unlabelled."""
        if label == UNLABELLED:
            return ""
        if not 0 <= label <= self.background_index:
            raise IndexError(f"label {label} outside [0, {self.background_index}]")
        return BACKGROUND if label == self.background_index else self.classes[label]

    def one_hot(self, label: int) -> list[int]:
        """The one-hot vector of a label; all zeros when unlabelled."""
        vector = [0] * self.one_hot_length
        if label != UNLABELLED:
            vector[label] = 1
        return vector
